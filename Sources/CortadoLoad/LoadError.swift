/// Why a run cannot start or go on, for the user.
public struct LoadError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
