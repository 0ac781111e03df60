/// The kinds of value a Core ML feature can hold (CoreML.framework's `MLFeatureType`).
public enum MLFeatureType: Int, Sendable, CustomStringConvertible {
    case invalid = 0
    case int64 = 1
    case double = 2
    case string = 3
    case image = 4
    case multiArray = 5
    case dictionary = 6
    case sequence = 7

    public var description: String {
        switch self {
        case .invalid: return "invalid"
        case .int64: return "int64"
        case .double: return "double"
        case .string: return "string"
        case .image: return "image"
        case .multiArray: return "multiArray"
        case .dictionary: return "dictionary"
        case .sequence: return "sequence"
        }
    }
}
