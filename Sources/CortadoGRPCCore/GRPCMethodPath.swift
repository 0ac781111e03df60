/// A gRPC method's path, `/package.Service/Method`: what a client puts in `:path` and what
/// a router looks handlers up by.
public struct GRPCMethodPath: Hashable, Sendable, CustomStringConvertible {
    /// `package.Service`.
    public var service: String
    /// The method's name within the service.
    public var method: String

    public init(service: String, method: String) {
        self.service = service
        self.method = method
    }

    /// Parses `/package.Service/Method`; nil when either part is missing or there are more.
    public init?(_ path: String) {
        let parts = path.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0].isEmpty, !parts[1].isEmpty, !parts[2].isEmpty else { return nil }
        service = String(parts[1])
        method = String(parts[2])
    }

    /// The path as it travels in `:path`.
    public var path: String { "/\(service)/\(method)" }

    public var description: String { path }
}
