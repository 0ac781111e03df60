/// An ordered list of int64 or string values (CoreML.framework's `MLSequence`).
public final class MLSequence: @unchecked Sendable, Equatable {
    public enum Values: Equatable, Sendable {
        case int64s([Int64])
        case strings([String])
    }

    public let values: Values

    public init(int64s: [Int64]) { values = .int64s(int64s) }
    public init(strings: [String]) { values = .strings(strings) }

    /// The element type: `.int64` or `.string`.
    public var type: MLFeatureType {
        switch values {
        case .int64s: return .int64
        case .strings: return .string
        }
    }

    public var int64Values: [Int64] {
        if case .int64s(let v) = values { return v }
        return []
    }

    public var stringValues: [String] {
        if case .strings(let v) = values { return v }
        return []
    }

    public var count: Int {
        switch values {
        case .int64s(let v): return v.count
        case .strings(let v): return v.count
        }
    }

    public static func == (a: MLSequence, b: MLSequence) -> Bool { a.values == b.values }
}
