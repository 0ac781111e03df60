import CortadoCore
import CortadoSpec

/// The hyperparameters of one update: `NetworkUpdateParameters`' defaults, with the task's
/// overrides applied. Each override must be a key the network's optimizer takes and lie within
/// the values the spec allows (a `range` or `set`); every value must also make sense on its
/// own (a positive learning rate, at least one epoch, momentum and betas in [0, 1)), whoever
/// chose it.
struct NNUpdateParameters {
    enum Optimizer {
        case sgd(momentum: Double)
        case adam(beta1: Double, beta2: Double, eps: Double)
    }

    var optimizer: Optimizer
    var learningRate: Double
    var miniBatchSize: Int
    var epochs: Int
    var shuffle: Bool
    var seed: UInt64

    /// What `MLUpdateContext.parameters` reports.
    var reported: [MLParameterKey: MLParameterValue] {
        var p: [MLParameterKey: MLParameterValue] = [
            .learningRate: .double(learningRate), .miniBatchSize: .int(Int64(miniBatchSize)),
            .epochs: .int(Int64(epochs)), .shuffle: .bool(shuffle), .seed: .int(Int64(bitPattern: seed)),
        ]
        switch optimizer {
        case .sgd(let momentum):
            p[.momentum] = .double(momentum)
        case .adam(let beta1, let beta2, let eps):
            p[.beta1] = .double(beta1); p[.beta2] = .double(beta2); p[.eps] = .double(eps)
        }
        return p
    }

    init(_ update: CoreML_Specification_NetworkUpdateParameters, overrides: [MLParameterKey: MLParameterValue]) throws {
        var resolver = Resolver(overrides: overrides)
        switch update.optimizer.optimizerType {
        case .sgdOptimizer(let sgd)?:
            guard sgd.hasLearningRate, sgd.hasMiniBatchSize else {
                throw MLModelError(.invalidModel, "the SGD optimizer must give learningRate and miniBatchSize")
            }
            learningRate = try resolver.double(.learningRate, sgd.learningRate)
            miniBatchSize = try resolver.int(.miniBatchSize, sgd.miniBatchSize)
            optimizer = .sgd(momentum: try resolver.double(.momentum, sgd.hasMomentum ? sgd.momentum : nil))
        case .adamOptimizer(let adam)?:
            guard adam.hasLearningRate, adam.hasMiniBatchSize else {
                throw MLModelError(.invalidModel, "the Adam optimizer must give learningRate and miniBatchSize")
            }
            learningRate = try resolver.double(.learningRate, adam.learningRate)
            miniBatchSize = try resolver.int(.miniBatchSize, adam.miniBatchSize)
            // Adam's usual constants when the spec leaves one out.
            optimizer = .adam(beta1: try resolver.double(.beta1, adam.hasBeta1 ? adam.beta1 : nil, fallback: 0.9),
                              beta2: try resolver.double(.beta2, adam.hasBeta2 ? adam.beta2 : nil, fallback: 0.999),
                              eps: try resolver.double(.eps, adam.hasEps ? adam.eps : nil, fallback: 1e-8))
        case nil:
            throw MLModelError(.invalidModel, "the network's updateParams give no optimizer (expected sgdOptimizer or adamOptimizer)")
        }
        epochs = try resolver.int(.epochs, update.hasEpochs ? update.epochs : nil, fallback: 1)
        shuffle = try resolver.bool(.shuffle, update.hasShuffle ? update.shuffle.defaultValue : true)
        seed = UInt64(bitPattern: try resolver.int64(.seed, update.hasSeed ? update.seed.defaultValue : 0))
        if let unused = resolver.unused.sorted(by: { $0.rawValue < $1.rawValue }).first {
            let takes = reported.keys.map(\.rawValue).sorted().joined(separator: ", ")
            throw MLModelError(.featureType, "update parameter '\(unused)' does not apply to this network (it takes: \(takes))")
        }
        try Self.check(learningRate > 0 && learningRate.isFinite, .learningRate, learningRate, "a positive number")
        try Self.check(miniBatchSize >= 1, .miniBatchSize, Double(miniBatchSize), "at least 1")
        try Self.check(epochs >= 1, .epochs, Double(epochs), "at least 1")
        switch optimizer {
        case .sgd(let momentum):
            try Self.check(momentum >= 0 && momentum < 1, .momentum, momentum, "in [0, 1)")
        case .adam(let beta1, let beta2, let eps):
            try Self.check(beta1 >= 0 && beta1 < 1, .beta1, beta1, "in [0, 1)")
            try Self.check(beta2 >= 0 && beta2 < 1, .beta2, beta2, "in [0, 1)")
            try Self.check(eps > 0 && eps.isFinite, .eps, eps, "a positive number")
        }
    }

    private static func check(_ ok: Bool, _ key: MLParameterKey, _ value: Double, _ expected: String) throws {
        guard ok else { throw MLModelError(.featureType, "update parameter '\(key)' is \(value); it must be \(expected)") }
    }

    /// Reads defaults and overrides, and remembers which overrides were used.
    private struct Resolver {
        let overrides: [MLParameterKey: MLParameterValue]
        var unused: Set<MLParameterKey>

        init(overrides: [MLParameterKey: MLParameterValue]) {
            self.overrides = overrides
            unused = Set(overrides.keys)
        }

        mutating func double(_ key: MLParameterKey, _ p: CoreML_Specification_DoubleParameter?, fallback: Double = 0) throws -> Double {
            guard let v = take(key) else { return p?.defaultValue ?? fallback }
            let x = v.doubleValue
            if case .range(let r)? = p?.allowedValues, !(x >= r.minValue && x <= r.maxValue) {
                throw MLModelError(.featureType, "update parameter '\(key)' = \(x) is outside the model's allowed range \(r.minValue)…\(r.maxValue)")
            }
            return x
        }

        mutating func int(_ key: MLParameterKey, _ p: CoreML_Specification_Int64Parameter?, fallback: Int64 = 0) throws -> Int {
            let value = try int64(key, p?.defaultValue ?? fallback, allowed: p?.allowedValues)
            guard value >= Int64(Int32.min), value <= Int64(Int32.max) else {
                throw MLModelError(.featureType, "update parameter '\(key)' = \(value) is out of range")
            }
            return Int(value)
        }

        mutating func int64(_ key: MLParameterKey, _ defaultValue: Int64,
                            allowed: CoreML_Specification_Int64Parameter.OneOf_AllowedValues? = nil) throws -> Int64 {
            guard let v = take(key) else { return defaultValue }
            guard let x = v.intValue else {
                throw MLModelError(.featureType, "update parameter '\(key)' must be an integer, not \(v)")
            }
            switch allowed {
            case .range(let r)? where !(x >= r.minValue && x <= r.maxValue):
                throw MLModelError(.featureType, "update parameter '\(key)' = \(x) is outside the model's allowed range \(r.minValue)…\(r.maxValue)")
            case .set(let s)? where !s.values.isEmpty && !s.values.contains(x):
                throw MLModelError(.featureType, "update parameter '\(key)' = \(x) is not one the model allows (\(s.values.map(String.init).joined(separator: ", ")))")
            default:
                return x
            }
        }

        mutating func bool(_ key: MLParameterKey, _ defaultValue: Bool) throws -> Bool {
            guard let v = take(key) else { return defaultValue }
            guard let b = v.boolValue else { throw MLModelError(.featureType, "update parameter '\(key)' must be true or false, not \(v)") }
            return b
        }

        private mutating func take(_ key: MLParameterKey) -> MLParameterValue? {
            unused.remove(key)
            return overrides[key]
        }
    }
}
