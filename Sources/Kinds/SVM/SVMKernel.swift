import CortadoCore
import CortadoSpec
import Foundation

/// The kernels of the format's SVMs, with LIBSVM's definitions:
/// linear `x·y`, RBF `exp(-γ‖x-y‖²)`, polynomial `(γ x·y + c)^degree`, sigmoid `tanh(γ x·y + c)`.
enum SVMKernel: Sendable, CustomStringConvertible {
    case linear
    case rbf(gamma: Double)
    case polynomial(gamma: Double, c: Double, degree: Int)
    case sigmoid(gamma: Double, c: Double)

    /// Reads and checks the format's kernel. `kind` names the model type in messages.
    init(_ spec: CoreML_Specification_Kernel, kind: String) throws {
        func check(_ name: String, _ value: Double, nonNegative: Bool) throws {
            guard value.isFinite else {
                throw MLModelError(.invalidModel, "\(kind) kernel \(name) is \(value) (expected a finite number)")
            }
            if nonNegative && value < 0 {
                throw MLModelError(.invalidModel, "\(kind) kernel gamma is \(value) (gamma must be greater than or equal to zero)")
            }
        }
        switch spec.kernel {
        case .linearKernel?:
            self = .linear
        case .rbfKernel(let k)?:
            try check("gamma", k.gamma, nonNegative: true)
            self = .rbf(gamma: k.gamma)
        case .polyKernel(let k)?:
            try check("gamma", k.gamma, nonNegative: true)
            try check("c", k.c, nonNegative: false)
            guard k.degree >= 0 else {
                throw MLModelError(.invalidModel, "\(kind) polynomial kernel degree is \(k.degree) (degree must be greater than or equal to zero)")
            }
            self = .polynomial(gamma: k.gamma, c: k.c, degree: Int(k.degree))
        case .sigmoidKernel(let k)?:
            try check("gamma", k.gamma, nonNegative: true)
            try check("c", k.c, nonNegative: false)
            self = .sigmoid(gamma: k.gamma, c: k.c)
        case nil:
            throw MLModelError(.invalidModel, "\(kind) has no kernel (expected linearKernel, rbfKernel, polyKernel or sigmoidKernel)")
        }
    }

    var isLinear: Bool {
        if case .linear = self { return true }
        return false
    }

    var description: String {
        switch self {
        case .linear: return "linear"
        case .rbf(let g): return "rbf (gamma \(g))"
        case .polynomial(let g, let c, let d): return "polynomial (gamma \(g), c \(c), degree \(d))"
        case .sigmoid(let g, let c): return "sigmoid (gamma \(g), c \(c))"
        }
    }

    /// LIBSVM's `powi`: exponentiation by squaring, so results match it bit for bit.
    @inline(__always)
    static func powi(_ base: Double, _ times: Int) -> Double {
        var tmp = base
        var ret = 1.0
        var t = times
        while t > 0 {
            if t % 2 == 1 { ret *= tmp }
            tmp *= tmp
            t /= 2
        }
        return ret
    }

    /// Kernel values between `x` and every support vector, written into `out` (one per
    /// vector). `xNorm` is `‖x‖²` over the whole input (read by the RBF kernel only).
    @inline(__always)
    func evaluate(_ vectors: SVMSupportVectors, x: UnsafePointer<Double>, xNorm: Double, into out: UnsafeMutablePointer<Double>) {
        vectors.dots(x, into: out)
        let n = vectors.count
        switch self {
        case .linear:
            break
        case .rbf(let gamma):
            vectors.norms.withUnsafeBufferPointer { norms in
                for r in 0..<n {
                    let d = max(norms[r] + xNorm - 2 * out[r], 0)
                    out[r] = exp(-gamma * d)
                }
            }
        case .polynomial(let gamma, let c, let degree):
            for r in 0..<n { out[r] = SVMKernel.powi(gamma * out[r] + c, degree) }
        case .sigmoid(let gamma, let c):
            for r in 0..<n { out[r] = tanh(gamma * out[r] + c) }
        }
    }
}
