import CortadoSpec

/// A value type as a program declares it (`MILSpec.ValueType`).
public indirect enum MILType: Sendable, CustomStringConvertible {
    /// A tensor: element type and dimensions (nil: unknown, e.g. a range or enumerated
    /// flexible dimension); `rank` nil when even the rank is unknown.
    case tensor(MILDataType, [Int?]?)
    case list(MILType, length: Int?)
    case tuple([MILType])
    case dictionary(key: MILType, value: MILType)
    case state(MILType)

    init(_ proto: CoreML_Specification_MILSpec_ValueType, op: String) throws {
        switch proto.type {
        case .tensorType(let t):
            guard let dt = MILDataType(t.dataType) else {
                throw MILError.invalid(op, "unknown data type \(t.dataType)")
            }
            if t.rank < 0 || (t.rank > 0 && t.dimensions.isEmpty) {
                self = .tensor(dt, nil)
            } else {
                self = .tensor(dt, t.dimensions.map { d -> Int? in
                    if case .constant(let c) = d.dimension { return Int(c.size) }
                    return nil
                })
            }
        case .listType(let l):
            var length: Int?
            if case .constant(let c) = l.length.dimension { length = Int(c.size) }
            self = .list(try MILType(l.type, op: op), length: length)
        case .tupleType(let t):
            self = .tuple(try t.types.map { try MILType($0, op: op) })
        case .dictionaryType(let d):
            self = .dictionary(key: try MILType(d.keyType, op: op), value: try MILType(d.valueType, op: op))
        case .stateType(let s):
            self = .state(try MILType(s.wrappedType, op: op))
        case nil:
            throw MILError.invalid(op, "a value type is empty")
        }
    }

    public var dataType: MILDataType? {
        switch self {
        case .tensor(let t, _): return t
        case .state(let inner): return inner.dataType
        default: return nil
        }
    }

    public var dimensions: [Int?]? {
        switch self {
        case .tensor(_, let d): return d
        case .state(let inner): return inner.dimensions
        default: return nil
        }
    }

    public var description: String {
        switch self {
        case .tensor(let t, let dims):
            guard let dims else { return "\(t.rawValue)[*]" }
            return "\(t.rawValue)[\(dims.map { $0.map(String.init) ?? "?" }.joined(separator: ","))]"
        case .list(let t, let n): return "list<\(t), \(n.map(String.init) ?? "?")>"
        case .tuple(let ts): return "(\(ts.map(\.description).joined(separator: ", ")))"
        case .dictionary(let k, let v): return "dict<\(k), \(v)>"
        case .state(let t): return "state<\(t)>"
        }
    }
}
