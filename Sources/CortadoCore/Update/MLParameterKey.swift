/// The name of an update hyperparameter (CoreML.framework's `MLParameterKey`): what an update
/// may override, per task, through `MLModelConfiguration.updateParameters`.
public struct MLParameterKey: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let epochs = MLParameterKey(rawValue: "epochs")
    public static let learningRate = MLParameterKey(rawValue: "learningRate")
    public static let miniBatchSize = MLParameterKey(rawValue: "miniBatchSize")
    public static let momentum = MLParameterKey(rawValue: "momentum")
    public static let beta1 = MLParameterKey(rawValue: "beta1")
    public static let beta2 = MLParameterKey(rawValue: "beta2")
    public static let eps = MLParameterKey(rawValue: "eps")
    public static let shuffle = MLParameterKey(rawValue: "shuffle")
    public static let seed = MLParameterKey(rawValue: "seed")

    public var description: String { rawValue }
}

/// A hyperparameter's value. Literals read as Core ML code does:
/// `[.epochs: 5, .learningRate: 0.01, .shuffle: false]`.
public enum MLParameterValue: Sendable, Equatable, CustomStringConvertible,
    ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral, ExpressibleByBooleanLiteral {
    case int(Int64)
    case double(Double)
    case bool(Bool)

    public init(integerLiteral value: Int64) { self = .int(value) }
    public init(floatLiteral value: Double) { self = .double(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }

    /// The value as a number (a Boolean as 0 or 1).
    public var doubleValue: Double {
        switch self {
        case .int(let v): return Double(v)
        case .double(let v): return v
        case .bool(let v): return v ? 1 : 0
        }
    }

    /// The value as an integer, when it is one.
    public var intValue: Int64? {
        switch self {
        case .int(let v): return v
        case .double(let v): return v == v.rounded() && abs(v) < 9e15 ? Int64(v) : nil
        case .bool: return nil
        }
    }

    /// The value as a Boolean, when it is one (or the integer 0 or 1).
    public var boolValue: Bool? {
        switch self {
        case .bool(let v): return v
        case .int(0): return false
        case .int(1): return true
        default: return nil
        }
    }

    public var description: String {
        switch self {
        case .int(let v): return String(v)
        case .double(let v): return String(v)
        case .bool(let v): return String(v)
        }
    }
}

/// A measurement an update reports (CoreML.framework's `MLMetricKey`).
public struct MLMetricKey: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    /// The mean loss: over the mini-batch just run (mini-batch end) or over the epoch's
    /// examples (epoch end, completion). Absent for models without a loss (k-NN).
    public static let lossValue = MLMetricKey(rawValue: "lossValue")
    /// The epoch just finished (0-based).
    public static let epochIndex = MLMetricKey(rawValue: "epochIndex")
    /// The mini-batch just finished within its epoch (0-based).
    public static let miniBatchIndex = MLMetricKey(rawValue: "miniBatchIndex")

    public var description: String { rawValue }
}
