/// Element types of a multi-array. Raw values follow CoreML.framework (and the
/// Core ML format's `ArrayFeatureType.ArrayDataType`): 0x10000 | bits for floats,
/// 0x20000 | bits for integers.
public enum MLMultiArrayDataType: Int, Sendable, CaseIterable, CustomStringConvertible {
    case float16 = 65552
    case float32 = 65568
    case double = 65600
    case int32 = 131104

    /// Bytes per element.
    @inlinable public var size: Int {
        switch self {
        case .float16: return 2
        case .float32, .int32: return 4
        case .double: return 8
        }
    }

    /// Names used in Cortado's JSON encoding and in messages.
    public var description: String {
        switch self {
        case .float16: return "FLOAT16"
        case .float32: return "FLOAT32"
        case .double: return "DOUBLE"
        case .int32: return "INT32"
        }
    }

    public init?(name: String) {
        switch name.uppercased() {
        case "FLOAT16": self = .float16
        case "FLOAT32", "FLOAT": self = .float32
        case "DOUBLE", "FLOAT64": self = .double
        case "INT32": self = .int32
        default: return nil
        }
    }
}
