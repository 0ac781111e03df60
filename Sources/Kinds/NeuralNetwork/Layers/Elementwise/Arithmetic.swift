import CortadoSpec

/// `AddLayerParams`, `MultiplyLayerParams`, `AverageLayerParams`, `MaxLayerParams`,
/// `MinLayerParams`: one element-wise reduction over several rank-5 inputs.
///
/// Inputs broadcast: each of S, B, C, H, W is either 1 or the output's size, so `[1]`, `[C]`,
/// `[1, H, W]` and `[C, H, W]` inputs mix (and a batched input meets a `loadConstant` output of
/// batch 1). The output takes the largest size along each axis. With a single input, `add` is
/// `x + alpha` and `multiply` is `alpha * x` (both fold into a preceding layer as an affine step);
/// `average`, `max` and `min` of one input copy it. Runs in place on input 0 when that input
/// already has the output's shape.
final class CombineLayer: NNLayer, NNResidualAdd, @unchecked Sendable {
    enum Op: Sendable { case add, multiply, average, max, min }

    let op: Op
    let alpha: Float
    let inputCount: Int

    init(_ op: Op, alpha: Float = 0, inputCount: Int) {
        self.op = op
        self.alpha = alpha
        self.inputCount = inputCount
    }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        guard !inputs.isEmpty else { throw NNLayerError("takes at least one input") }
        var out = inputs[0]
        for s in inputs.dropFirst() {
            out.s = Swift.max(out.s, s.s); out.b = Swift.max(out.b, s.b); out.c = Swift.max(out.c, s.c)
            out.h = Swift.max(out.h, s.h); out.w = Swift.max(out.w, s.w)
        }
        for (k, s) in inputs.enumerated() {
            let fits = zip(s.dims, out.dims).allSatisfy { $0 == 1 || $0 == $1 }
            guard fits else {
                let all = inputs.map(\.description).joined(separator: ", ")
                throw NNLayerError("input \(k) has shape \(s), which does not broadcast to \(out) (inputs \(all); each of S, B, C, H, W must be 1 or the largest size)")
            }
        }
        return [out]
    }

    var runsInPlace: Bool { true }

    var addsTwoTensors: Bool { op == .add && inputCount == 2 }

    var epilogue: NNEpilogueOp? {
        guard inputCount == 1 else { return nil }
        switch op {
        case .add: return .affine(scale: nil, shift: [alpha])
        case .multiply: return .affine(scale: [alpha], shift: nil)
        case .average, .max, .min: return .affine(scale: nil, shift: nil)
        }
    }

    var detail: String {
        guard inputCount == 1 else { return "\(inputCount) inputs" }
        switch op {
        case .add: return "x + \(alpha)"
        case .multiply: return "\(alpha) * x"
        default: return "one input"
        }
    }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let y = context.pointer(outputs[0]), out = outputs[0].shape
        if inputs.count == 1 {
            let x = context.pointer(inputs[0])
            switch op {
            case .add: Self.combine(.add, y, out, scalar: alpha, x, context)
            case .multiply: Self.combine(.multiply, y, out, scalar: alpha, x, context)
            case .average, .max, .min: if x != y { y.update(from: x, count: out.count) }
            }
            return
        }
        let kernel: Kernel
        switch op {
        case .add, .average: kernel = .add
        case .multiply: kernel = .multiply
        case .max: kernel = .max
        case .min: kernel = .min
        }
        Self.combine(.copy, y, out, context.pointer(inputs[0]), inputs[0].shape, context)
        for t in inputs.dropFirst() {
            Self.combine(kernel, y, out, context.pointer(t), t.shape, context)
        }
        if op == .average {
            Self.combine(.multiply, y, out, scalar: 1 / Float(inputs.count), y, context)
        }
    }

    /// `y[i] = f(y[i], x[i])` with `.copy` meaning `y[i] = x[i]`.
    enum Kernel { case copy, add, multiply, max, min }

    @inline(__always)
    static func apply(_ k: Kernel, _ y: UnsafeMutablePointer<Float>, _ x: UnsafePointer<Float>, _ n: Int) {
        switch k {
        case .copy: if UnsafePointer(y) != x { y.update(from: x, count: n) }
        case .add: for i in 0..<n { y[i] += x[i] }
        case .multiply: for i in 0..<n { y[i] *= x[i] }
        case .max: for i in 0..<n { y[i] = Swift.max(y[i], x[i]) }
        case .min: for i in 0..<n { y[i] = Swift.min(y[i], x[i]) }
        }
    }

    @inline(__always)
    static func apply(_ k: Kernel, _ y: UnsafeMutablePointer<Float>, scalar v: Float, _ n: Int) {
        switch k {
        case .copy: for i in 0..<n { y[i] = v }
        case .add: for i in 0..<n { y[i] += v }
        case .multiply: for i in 0..<n { y[i] *= v }
        case .max: for i in 0..<n { y[i] = Swift.max(y[i], v) }
        case .min: for i in 0..<n { y[i] = Swift.min(y[i], v) }
        }
    }

    /// `y = f(x, v)` for a scalar `v` over `shape.count` values (`x` may be `y`).
    static func combine(_ k: Kernel, _ y: UnsafeMutablePointer<Float>, _ shape: NNShape, scalar v: Float,
                        _ x: UnsafeMutablePointer<Float>, _ context: NNRunContext) {
        context.parallelFor(shape.count) { r in
            let xp = x + r.lowerBound, yp = y + r.lowerBound
            switch k {
            case .copy: for i in 0..<r.count { yp[i] = v }
            case .add: for i in 0..<r.count { yp[i] = xp[i] + v }
            case .multiply: for i in 0..<r.count { yp[i] = xp[i] * v }
            case .max: for i in 0..<r.count { yp[i] = Swift.max(xp[i], v) }
            case .min: for i in 0..<r.count { yp[i] = Swift.min(xp[i], v) }
            }
        }
    }

    /// `y = f(y, x)` with `x` of shape `xs` broadcast onto `y`'s shape `ys`.
    static func combine(_ k: Kernel, _ y: UnsafeMutablePointer<Float>, _ ys: NNShape,
                        _ x: UnsafeMutablePointer<Float>, _ xs: NNShape, _ context: NNRunContext) {
        if xs == ys {
            context.parallelFor(ys.count) { r in apply(k, y + r.lowerBound, x + r.lowerBound, r.count) }
            return
        }
        let hw = ys.hw
        context.parallelFor(ys.s * ys.b * ys.c, costPerItem: hw) { range in
            for q in range {
                let c = q % ys.c, sb = q / ys.c, b = sb % ys.b, s = sb / ys.b
                let plane = ((xs.s == 1 ? 0 : s) * xs.b + (xs.b == 1 ? 0 : b)) * xs.c + (xs.c == 1 ? 0 : c)
                let xp = x + plane * xs.hw, yp = y + q * hw
                if xs.h == ys.h && xs.w == ys.w {
                    apply(k, yp, xp, hw)
                } else if xs.hw == 1 {
                    apply(k, yp, scalar: xp[0], hw)
                } else {
                    for h in 0..<ys.h {
                        let xr = xp + (xs.h == 1 ? 0 : h) * xs.w, yr = yp + h * ys.w
                        if xs.w == ys.w { apply(k, yr, xr, ys.w) } else { apply(k, yr, scalar: xr[0], ys.w) }
                    }
                }
            }
        }
    }
}
