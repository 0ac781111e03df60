import CortadoCore
import CortadoSpec
import Foundation

/// Every `ActivationParams` kind, with its parameters decoded (per-channel ones as arrays of
/// length 1 or C).
public enum NNActivation: Sendable, CustomStringConvertible {
    case linear(alpha: Float, beta: Float)
    case relu
    case leakyRelu(alpha: Float)
    case thresholdedRelu(alpha: Float)
    case prelu(alpha: [Float])
    case tanh
    case scaledTanh(alpha: Float, beta: Float)
    case sigmoid
    case sigmoidHard(alpha: Float, beta: Float)
    case elu(alpha: Float)
    case softsign
    case softplus
    case parametricSoftplus(alpha: [Float], beta: [Float])

    public init(_ p: CoreML_Specification_ActivationParams) throws {
        switch p.nonlinearityType {
        case .linear(let a)?: self = .linear(alpha: a.alpha, beta: a.beta)
        case .reLu?: self = .relu
        case .leakyReLu(let a)?: self = .leakyRelu(alpha: a.alpha)
        case .thresholdedReLu(let a)?: self = .thresholdedRelu(alpha: a.alpha)
        case .preLu(let a)?:
            self = .prelu(alpha: try NNWeights.floats(a.alpha, name: "PReLU alpha"))
        case .tanh?: self = .tanh
        case .scaledTanh(let a)?: self = .scaledTanh(alpha: a.alpha, beta: a.beta)
        case .sigmoid?: self = .sigmoid
        case .sigmoidHard(let a)?: self = .sigmoidHard(alpha: a.alpha, beta: a.beta)
        case .elu(let a)?: self = .elu(alpha: a.alpha)
        case .softsign?: self = .softsign
        case .softplus?: self = .softplus
        case .parametricSoftplus(let a)?:
            let alpha = try NNWeights.floats(a.alpha, name: "parametric softplus alpha")
            let beta = try NNWeights.floats(a.beta, name: "parametric softplus beta")
            self = .parametricSoftplus(alpha: alpha, beta: beta)
        case nil: throw NNLayerError("activation has no nonlinearity type")
        }
    }

    public var description: String {
        switch self {
        case .linear: return "linear"
        case .relu: return "ReLU"
        case .leakyRelu: return "leaky ReLU"
        case .thresholdedRelu: return "thresholded ReLU"
        case .prelu: return "PReLU"
        case .tanh: return "tanh"
        case .scaledTanh: return "scaled tanh"
        case .sigmoid: return "sigmoid"
        case .sigmoidHard: return "hard sigmoid"
        case .elu: return "ELU"
        case .softsign: return "softsign"
        case .softplus: return "softplus"
        case .parametricSoftplus: return "parametric softplus"
        }
    }

    /// Checks per-channel parameter lengths against the channel count.
    public func check(channels: Int) throws {
        func ok(_ a: [Float], _ what: String) throws {
            guard a.count == 1 || a.count == channels else {
                throw NNLayerError("\(what) has \(a.count) values; the input has \(channels) channels (give 1 or \(channels))")
            }
        }
        switch self {
        case .prelu(let a): try ok(a, "PReLU alpha")
        case .parametricSoftplus(let a, let b): try ok(a, "parametric softplus alpha"); try ok(b, "parametric softplus beta")
        default: break
        }
    }

    /// Applies the activation in place to `count` values of channel `channel`.
    public func apply(_ p: UnsafeMutablePointer<Float>, count: Int, channel: Int) {
        switch self {
        case .linear(let a, let b): for i in 0..<count { p[i] = a * p[i] + b }
        case .relu: for i in 0..<count { p[i] = Swift.max(p[i], 0) }
        case .leakyRelu(let a): for i in 0..<count { let x = p[i]; p[i] = x >= 0 ? x : a * x }
        case .thresholdedRelu(let a): for i in 0..<count { let x = p[i]; p[i] = x > a ? x : 0 }
        case .prelu(let alpha):
            let a = alpha.count == 1 ? alpha[0] : alpha[channel]
            for i in 0..<count { let x = p[i]; p[i] = x >= 0 ? x : a * x }
        case .tanh: for i in 0..<count { p[i] = Foundation.tanh(p[i]) }
        case .scaledTanh(let a, let b): for i in 0..<count { p[i] = a * Foundation.tanh(b * p[i]) }
        case .sigmoid: for i in 0..<count { p[i] = 1 / (1 + Foundation.exp(-p[i])) }
        case .sigmoidHard(let a, let b): for i in 0..<count { p[i] = Swift.min(Swift.max(a * p[i] + b, 0), 1) }
        case .elu(let a): for i in 0..<count { let x = p[i]; p[i] = x >= 0 ? x : a * (Foundation.exp(x) - 1) }
        case .softsign: for i in 0..<count { let x = p[i]; p[i] = x / (1 + Swift.abs(x)) }
        case .softplus: for i in 0..<count { p[i] = Self.softplus(p[i]) }
        case .parametricSoftplus(let alpha, let beta):
            let a = alpha.count == 1 ? alpha[0] : alpha[channel]
            let b = beta.count == 1 ? beta[0] : beta[channel]
            for i in 0..<count { p[i] = a * Self.softplus(b * p[i]) }
        }
    }

    /// log(1 + e^x) without overflow.
    @inline(__always) static func softplus(_ x: Float) -> Float {
        x > 0 ? x + Foundation.log1p(Foundation.exp(-x)) : Foundation.log1p(Foundation.exp(x))
    }
}

/// An element-wise step folded into the layer before it (see `NNEpilogueAccepting`; the GEMM
/// layers compose and apply them in `NNChannelEpilogue`).
public enum NNEpilogueOp: Sendable {
    /// `x * scale[c] + shift[c]`; each array has length 1 or C, nil means 1 / 0.
    case affine(scale: [Float]?, shift: [Float]?)
    case activation(NNActivation)

    /// Whether the step works on `channels` channels.
    public func fits(channels: Int) -> Bool {
        switch self {
        case .affine(let scale, let shift):
            return [scale, shift].allSatisfy { $0 == nil || $0!.count == 1 || $0!.count == channels }
        case .activation(let a):
            return (try? a.check(channels: channels)) != nil
        }
    }
}
