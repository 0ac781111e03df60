import CortadoSpec
import Foundation

/// `UnaryFunctionLayerParams`: `y = f(scale * x + shift)` element by element, with
/// SQRT `√x`, RSQRT `1/√(x + ε)`, INVERSE `1/(x + ε)`, POWER `x^α`, EXP `eˣ`, LOG `ln(x + ε)`,
/// ABS `|x|`, THRESHOLD `max(x, α)`. As the specification says, a zero `scale` means 1 and a zero
/// `epsilon` means 1e-6. Runs in place on any shape.
final class UnaryLayer: NNLayer, @unchecked Sendable {
    enum Function: String, Sendable { case sqrt, rsqrt, inverse, power, exp, log, abs, threshold }

    let function: Function
    let alpha: Float
    let epsilon: Float
    let scale: Float
    let shift: Float

    init(_ p: CoreML_Specification_UnaryFunctionLayerParams) throws {
        switch p.type {
        case .sqrt: function = .sqrt
        case .rsqrt: function = .rsqrt
        case .inverse: function = .inverse
        case .power: function = .power
        case .exp: function = .exp
        case .log: function = .log
        case .abs: function = .abs
        case .threshold: function = .threshold
        case .UNRECOGNIZED(let v): throw NNLayerError("unknown unary function \(v)")
        }
        alpha = p.alpha
        epsilon = p.epsilon == 0 ? 1e-6 : p.epsilon
        scale = p.scale == 0 ? 1 : p.scale
        shift = p.shift
    }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        guard inputs.count == 1 else { throw NNLayerError("takes one input, got \(inputs.count)") }
        return inputs
    }

    var runsInPlace: Bool { true }
    var detail: String {
        var d = function.rawValue
        if function == .power || function == .threshold { d += " α=\(alpha)" }
        if scale != 1 || shift != 0 { d += " of \(scale)·x + \(shift)" }
        return d
    }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let x = context.pointer(inputs[0]), y = context.pointer(outputs[0])
        let (a, e, s, t) = (alpha, epsilon, scale, shift)
        let f = function
        context.parallelFor(inputs[0].count, costPerItem: 8) { r in
            let xp = x + r.lowerBound, yp = y + r.lowerBound, n = r.count
            switch f {
            case .sqrt: for i in 0..<n { yp[i] = (s * xp[i] + t).squareRoot() }
            case .rsqrt: for i in 0..<n { yp[i] = 1 / (s * xp[i] + t + e).squareRoot() }
            case .inverse: for i in 0..<n { yp[i] = 1 / (s * xp[i] + t + e) }
            case .power:
                if a == 2 { for i in 0..<n { let v = s * xp[i] + t; yp[i] = v * v } }
                else { for i in 0..<n { yp[i] = Foundation.pow(s * xp[i] + t, a) } }
            case .exp: for i in 0..<n { yp[i] = Foundation.exp(s * xp[i] + t) }
            case .log: for i in 0..<n { yp[i] = Foundation.log(s * xp[i] + t + e) }
            case .abs: for i in 0..<n { yp[i] = Swift.abs(s * xp[i] + t) }
            case .threshold: for i in 0..<n { yp[i] = Swift.max(s * xp[i] + t, a) }
            }
        }
    }
}
