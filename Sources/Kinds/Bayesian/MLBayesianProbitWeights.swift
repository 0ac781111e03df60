import CortadoCore
import CortadoSpec

/// The Gaussian weights of a Bayesian probit regressor, laid out for lookup by
/// (feature id, feature value): per feature, the values it has weights for, sorted, with
/// each weight's mean and variance (1 / precision). Features whose values are compact
/// also get a dense value → weight table, so the common lookup is one array read.
struct MLBayesianProbitWeights: Sendable {
    struct Feature: Sendable {
        var values: [UInt32] = []
        var means: [Double] = []
        var variances: [Double] = []
        /// value → position in `values`, or -1; empty when the values are too sparse.
        var dense: [Int32] = []

        /// Position of `value`'s weight, or nil when the model has none.
        @inline(__always)
        func position(of value: UInt32) -> Int? {
            if !dense.isEmpty {
                guard Int(value) < dense.count else { return nil }
                let p = dense[Int(value)]
                return p < 0 ? nil : Int(p)
            }
            var lo = 0, hi = values.count
            while lo < hi {
                let mid = (lo + hi) / 2
                if values[mid] < value { lo = mid + 1 } else { hi = mid }
            }
            return lo < values.count && values[lo] == value ? lo : nil
        }
    }

    /// The weight a (feature, value) pair without one in the model contributes.
    ///
    /// ASSUMPTION: the format does not say. Cortado uses the standard AdPredictor prior
    /// for a weight never trained, N(0, 1): mean 0, variance 1.
    static let priorMean = 0.0
    static let priorVariance = 1.0

    let features: [Feature]
    let biasMean: Double
    let biasVariance: Double
    let weightCount: Int

    /// Reads and checks the weights: feature ids below `numberOfFeatures`, each
    /// (feature, value) pair given once, means finite, precisions positive and finite.
    init(_ spec: CoreML_Specification_BayesianProbitRegressor) throws {
        let n = Int(spec.numberOfFeatures)
        guard spec.hasBias else {
            throw MLModelError(.invalidModel, "bayesianProbitRegressor has no bias (a Gaussian with a positive precision is required)")
        }
        try Self.check(spec.bias, what: "the bias")
        biasMean = spec.bias.mean
        biasVariance = 1 / spec.bias.precision

        var pairs: [[(value: UInt32, mean: Double, variance: Double)]] = Array(repeating: [], count: n)
        var count = 0
        for fw in spec.features {
            let id = Int(fw.featureID)
            guard id < n else {
                throw MLModelError(.invalidModel, "feature id \(fw.featureID) has weights, but numberOfFeatures is \(n) (ids are 0…\(n - 1))")
            }
            for w in fw.weights {
                let what = "the weight of feature \(id) value \(w.featureValue)"
                guard w.hasFeatureWeight else {
                    throw MLModelError(.invalidModel, "\(what) has no Gaussian (mean and precision)")
                }
                try Self.check(w.featureWeight, what: what)
                pairs[id].append((w.featureValue, w.featureWeight.mean, 1 / w.featureWeight.precision))
                count += 1
            }
        }
        var features: [Feature] = []
        features.reserveCapacity(n)
        for (id, list) in pairs.enumerated() {
            let sorted = list.sorted { $0.value < $1.value }
            var f = Feature()
            for (i, p) in sorted.enumerated() {
                if i > 0 && sorted[i - 1].value == p.value {
                    throw MLModelError(.invalidModel, "feature \(id) value \(p.value) has more than one weight")
                }
                f.values.append(p.value)
                f.means.append(p.mean)
                f.variances.append(p.variance)
            }
            if let maxValue = f.values.last, Int(maxValue) < 4 * f.values.count + 64 {
                f.dense = Array(repeating: -1, count: Int(maxValue) + 1)
                for (i, v) in f.values.enumerated() { f.dense[Int(v)] = Int32(i) }
            }
            features.append(f)
        }
        self.features = features
        self.weightCount = count
    }

    private static func check(_ g: CoreML_Specification_BayesianProbitRegressor.Gaussian, what: String) throws {
        guard g.mean.isFinite else {
            throw MLModelError(.invalidModel, "\(what) has a non-finite mean \(g.mean)")
        }
        guard g.precision > 0, g.precision.isFinite else {
            throw MLModelError(.invalidModel, "\(what) has precision \(g.precision); a precision (1 / variance) must be positive and finite")
        }
    }

    /// Adds the weight of `feature` taking `value` to the running mean and variance.
    @inline(__always)
    func accumulate(feature: Int, value: UInt32, mean: inout Double, variance: inout Double) {
        let f = features[feature]
        if let p = f.position(of: value) {
            mean += f.means[p]
            variance += f.variances[p]
        } else {
            mean += Self.priorMean
            variance += Self.priorVariance
        }
    }
}
