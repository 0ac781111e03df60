import CortadoCore
import CortadoSpec
import Foundation

/// The post-evaluation transform of a tree ensemble, applied to a row's summed dimensions.
enum TreeEnsembleTransform: String, Sendable {
    /// The sums as they are.
    case none = "NoTransform"
    /// `exp(v_k) / Σ_j exp(v_j)` over the dimensions.
    case softmax = "Classification_SoftMax"
    /// `1 / (1 + exp(-v_k))` for each dimension.
    case logistic = "Regression_Logistic"
    /// Softmax over `(0, v_0, …, v_{n-1})`: an implicit score 0 for a reference class that
    /// comes first, then one score per dimension.
    case softmaxZeroReference = "Classification_SoftMaxWithZeroClassReference"

    init(_ spec: CoreML_Specification_TreeEnsemblePostEvaluationTransform, kind: String) throws {
        switch spec {
        case .noTransform: self = .none
        case .classificationSoftMax: self = .softmax
        case .regressionLogistic: self = .logistic
        case .classificationSoftMaxWithZeroClassReference: self = .softmaxZeroReference
        case .UNRECOGNIZED(let raw):
            throw MLModelError(.invalidModel, "\(kind): postEvaluationTransform \(raw) is unknown (expected NoTransform, Classification_SoftMax, Regression_Logistic or Classification_SoftMaxWithZeroClassReference)")
        }
    }

    @inline(__always)
    static func sigmoid(_ v: Double) -> Double { 1 / (1 + exp(-v)) }

    /// Softmax of `v[0..<count]` in place, shifted by the largest value for stability.
    @inline(__always)
    static func softmax(_ v: UnsafeMutablePointer<Double>, count: Int) {
        var top = -Double.infinity
        for k in 0..<count { top = max(top, v[k]) }
        var z = 0.0
        for k in 0..<count {
            v[k] = exp(v[k] - top)
            z += v[k]
        }
        for k in 0..<count { v[k] /= z }
    }

    /// Applies the transform in place to `count` dimensions. Returns the probability of the
    /// implicit reference class for the zero-reference softmax (0 for the others); the
    /// dimensions then hold the probabilities of the classes after it.
    @inline(__always)
    @discardableResult
    func apply(_ v: UnsafeMutablePointer<Double>, count: Int) -> Double {
        switch self {
        case .none:
            return 0
        case .logistic:
            for k in 0..<count { v[k] = Self.sigmoid(v[k]) }
            return 0
        case .softmax:
            Self.softmax(v, count: count)
            return 0
        case .softmaxZeroReference:
            var top = 0.0
            for k in 0..<count { top = max(top, v[k]) }
            let reference = exp(-top)
            var z = reference
            for k in 0..<count {
                v[k] = exp(v[k] - top)
                z += v[k]
            }
            for k in 0..<count { v[k] /= z }
            return reference / z
        }
    }
}
