import CortadoCore
import Foundation

/// A compiled Bayesian probit regressor (AdPredictor-style; see `MLBayesianProbitKind`).
///
/// For the active (feature, value) pairs of one input:
///
///     μ  = bias.mean + Σ w.mean                 (the "mean" output)
///     v  = 1/bias.precision + Σ 1/w.precision   (the "variance" output)
///     σ² = β² + v,  with β² = numberOfFeatures
///     p  = Φ(μ / σ)                             (the regression output: P(y = +1 | x))
///     pessimistic = Φ((μ + o·√v) / σ)           (o = the optimism input, default 0)
///     sampled     = Φ(z / σ), z ~ N(μ, (s·√v)²) truncated to μ ± t·s·√v
///                   (s = samplingScale if > 0, else 1; t = samplingTruncation if > 0,
///                   else no truncation); 0.5 when neither input is positive.
final class MLCompiledBayesianProbit: MLCompiledModel, @unchecked Sendable {
    /// Where the regression output goes, and as what.
    struct Output: Sendable {
        let name: String
        let asArray: MLMultiArrayDataType?
    }

    let weights: MLBayesianProbitWeights
    let numberOfFeatures: Int
    let regressionInput: String
    let optimismInput: String?
    let samplingScaleInput: String?
    let samplingTruncationInput: String?
    let probabilityOutput: Output?
    let meanOutput: Output?
    let varianceOutput: Output?
    let pessimisticOutput: Output?
    let sampledOutput: Output?

    init(weights: MLBayesianProbitWeights, numberOfFeatures: Int, regressionInput: String,
         optimismInput: String?, samplingScaleInput: String?, samplingTruncationInput: String?,
         probabilityOutput: Output?, meanOutput: Output?, varianceOutput: Output?,
         pessimisticOutput: Output?, sampledOutput: Output?) {
        self.weights = weights
        self.numberOfFeatures = numberOfFeatures
        self.regressionInput = regressionInput
        self.optimismInput = optimismInput
        self.samplingScaleInput = samplingScaleInput
        self.samplingTruncationInput = samplingTruncationInput
        self.probabilityOutput = probabilityOutput
        self.meanOutput = meanOutput
        self.varianceOutput = varianceOutput
        self.pessimisticOutput = pessimisticOutput
        self.sampledOutput = sampledOutput
    }

    var summary: [String] {
        ["\(numberOfFeatures) features, \(weights.weightCount) weights, β² = \(numberOfFeatures)"]
    }

    /// The standard normal CDF.
    @inline(__always)
    static func phi(_ x: Double) -> Double { 0.5 * erfc(-x / 2.0.squareRoot()) }

    /// Sums the weights selected by the regression input: a vector of one value per
    /// feature (element i is feature i's value), or an n×2 matrix of (feature id, value)
    /// rows for the active features only.
    func accumulate(_ array: MLMultiArray) throws -> (mean: Double, variance: Double) {
        var mean = weights.biasMean
        var variance = weights.biasVariance
        func integer(_ v: Double, _ what: String) throws -> UInt32 {
            guard v >= 0, v <= Double(UInt32.max), v == v.rounded() else {
                throw MLModelError.featureType(regressionInput, "\(what) is \(v); feature ids and values are integers 0…\(UInt32.max)")
            }
            return UInt32(v)
        }
        if array.shape.count == 2 && array.shape[1] == 2 {
            for row in 0..<array.shape[0] {
                let id = try integer(array.double(at: 2 * row), "feature id in row \(row)")
                guard Int(id) < numberOfFeatures else {
                    throw MLModelError.featureType(regressionInput, "feature id \(id) in row \(row) is out of range (the model has \(numberOfFeatures) features)")
                }
                let value = try integer(array.double(at: 2 * row + 1), "the value in row \(row)")
                weights.accumulate(feature: Int(id), value: value, mean: &mean, variance: &variance)
            }
        } else {
            guard array.count == numberOfFeatures, array.shape.filter({ $0 != 1 }).count <= 1 else {
                throw MLModelError.featureType(regressionInput, "expected one value per feature (\(numberOfFeatures) values) or an n×2 matrix of (feature id, value) rows, got shape \(array.shape)")
            }
            for i in 0..<numberOfFeatures {
                let value = try integer(array.double(at: i), "the value of feature \(i)")
                weights.accumulate(feature: i, value: value, mean: &mean, variance: &variance)
            }
        }
        return (mean, variance)
    }

    /// A named scalar input, or 0 when absent (Core ML reads it only when it is a number).
    func scalar(_ name: String?, _ input: MLFeatureProvider) -> Double {
        guard let name, let v = input.featureValue(for: name) else { return 0 }
        switch v.storage {
        case .double(let d): return d
        case .int64(let i): return Double(i)
        default: return 0
        }
    }

    func prediction(from input: MLFeatureProvider, options: MLPredictionOptions) throws -> MLFeatureProvider {
        guard let array = input.featureValue(for: regressionInput)?.multiArrayValue else {
            throw MLModelError.featureType(regressionInput, "expected a multiArray of feature values")
        }
        let (mean, variance) = try accumulate(array)
        let sigma = (Double(numberOfFeatures) + variance).squareRoot()
        let sd = variance.squareRoot()
        var out: [String: MLFeatureValue] = [:]
        if let o = probabilityOutput { out[o.name] = try value(Self.phi(mean / sigma), o, options) }
        if let o = meanOutput { out[o.name] = try value(mean, o, options) }
        if let o = varianceOutput { out[o.name] = try value(variance, o, options) }
        if let o = pessimisticOutput {
            let optimism = scalar(optimismInput, input)
            out[o.name] = try value(Self.phi((mean + optimism * sd) / sigma), o, options)
        }
        if let o = sampledOutput {
            let scale = scalar(samplingScaleInput, input)
            let truncation = scalar(samplingTruncationInput, input)
            var p = 0.5
            if scale > 0 || truncation > 0 {
                var rng = SystemRandomNumberGenerator()
                let z = Self.sample(mean: mean, sd: (scale > 0 ? scale : 1) * sd, truncation: truncation, using: &rng)
                p = Self.phi(z / sigma)
            }
            out[o.name] = try value(p, o, options)
        }
        return MLDictionaryFeatureProvider(dictionary: out)
    }

    /// A draw from N(mean, sd²), truncated to mean ± truncation·sd when truncation > 0:
    /// rejection sampling for up to 20 tries, then uniform within the bounds (as Core ML).
    static func sample<R: RandomNumberGenerator>(mean: Double, sd: Double, truncation: Double, using rng: inout R) -> Double {
        let lo = truncation > 0 ? mean - sd * truncation : -Double.greatestFiniteMagnitude
        let hi = truncation > 0 ? mean + sd * truncation : Double.greatestFiniteMagnitude
        for _ in 0..<20 {
            // Box–Muller.
            let u1 = Double.random(in: Double.ulpOfOne..<1, using: &rng)
            let u2 = Double.random(in: 0..<1, using: &rng)
            let z = mean + sd * (-2 * log(u1)).squareRoot() * cos(2 * Double.pi * u2)
            if z >= lo && z <= hi { return z }
        }
        return lo + Double.random(in: 0...1, using: &rng) * (hi - lo)
    }

    func value(_ v: Double, _ o: Output, _ options: MLPredictionOptions) throws -> MLFeatureValue {
        guard let type = o.asArray else { return MLFeatureValue(double: v) }
        let a = try options.outputArray(named: o.name, shape: [1], dataType: type)
        a.setDouble(v, at: 0)
        return MLFeatureValue(multiArray: a)
    }
}
