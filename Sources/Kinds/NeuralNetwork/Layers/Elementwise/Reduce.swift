import CortadoSpec
import Foundation

/// `ReduceLayerParams`: reduces each image along C × H × W, H × W, C, H or W, keeping the reduced
/// axes as size 1 (`[S, B, C, H, W]` → e.g. `[S, B, 1, H, W]` for C). Modes: SUM, AVG, PROD,
/// LOGSUM `Σ ln(x + ε)` (a zero ε means 1e-6), SUMSQUARE, L1 `Σ|x|`, L2 `√Σx²`, MAX, MIN and
/// ARGMAX (the first index of the maximum, as a float; C, H or W only).
///
/// Each image is read as `[outer, n, inner]` with the reduction over `n`: contiguous runs when
/// `inner` is 1 (W, H × W, C × H × W), rows of `inner` accumulated otherwise (C, H).
final class ReduceLayer: NNLayer, @unchecked Sendable {
    enum Mode: String, Sendable { case sum, avg, prod, logsum, sumsquare, l1, l2, max, min, argmax }
    enum Axis: String, Sendable { case chw = "CHW", hw = "HW", c = "C", h = "H", w = "W" }

    let mode: Mode
    let axis: Axis
    let epsilon: Float

    init(_ p: CoreML_Specification_ReduceLayerParams) throws {
        switch p.mode {
        case .sum: mode = .sum
        case .avg: mode = .avg
        case .prod: mode = .prod
        case .logsum: mode = .logsum
        case .sumsquare: mode = .sumsquare
        case .l1: mode = .l1
        case .l2: mode = .l2
        case .max: mode = .max
        case .min: mode = .min
        case .argmax: mode = .argmax
        case .UNRECOGNIZED(let v): throw NNLayerError("unknown reduce mode \(v)")
        }
        switch p.axis {
        case .chw: axis = .chw
        case .hw: axis = .hw
        case .c: axis = .c
        case .h: axis = .h
        case .w: axis = .w
        case .UNRECOGNIZED(let v): throw NNLayerError("unknown reduce axis \(v)")
        }
        if mode == .argmax && (axis == .chw || axis == .hw) {
            throw NNLayerError("ARGMAX reduces one axis (C, H or W), not \(axis.rawValue)")
        }
        epsilon = p.epsilon == 0 ? 1e-6 : p.epsilon
    }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        guard inputs.count == 1 else { throw NNLayerError("takes one input, got \(inputs.count)") }
        var out = inputs[0]
        switch axis {
        case .chw: out.c = 1; out.h = 1; out.w = 1
        case .hw: out.h = 1; out.w = 1
        case .c: out.c = 1
        case .h: out.h = 1
        case .w: out.w = 1
        }
        return [out]
    }

    var detail: String { "\(mode.rawValue) over \(axis.rawValue)" }

    /// `(outer, n, inner)` of one image for this axis.
    private func split(_ s: NNShape) -> (Int, Int, Int) {
        switch axis {
        case .chw: return (1, s.chw, 1)
        case .hw: return (s.c, s.hw, 1)
        case .c: return (1, s.c, s.hw)
        case .h: return (s.c, s.h, s.w)
        case .w: return (s.c * s.h, s.w, 1)
        }
    }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let x = context.pointer(inputs[0]), y = context.pointer(outputs[0])
        let shape = inputs[0].shape
        let (outer, n, inner) = split(shape)
        let mode = self.mode, eps = epsilon
        context.parallelFor(shape.images * outer, costPerItem: n * inner * 2) { range in
            for o in range {
                let xp = x + o * n * inner, yp = y + o * inner
                if inner == 1 {
                    yp[0] = Self.reduce(mode, xp, n, eps)
                } else {
                    Self.reduceRows(mode, xp, n, inner, yp, eps)
                }
            }
        }
    }

    /// One contiguous run of `n` values.
    @inline(__always)
    private static func reduce(_ mode: Mode, _ x: UnsafeMutablePointer<Float>, _ n: Int, _ eps: Float) -> Float {
        var r: Float
        switch mode {
        case .sum, .avg:
            r = 0; for i in 0..<n { r += x[i] }
            if mode == .avg { r /= Float(n) }
        case .prod: r = 1; for i in 0..<n { r *= x[i] }
        case .logsum: r = 0; for i in 0..<n { r += Foundation.log(x[i] + eps) }
        case .sumsquare, .l2:
            r = 0; for i in 0..<n { r += x[i] * x[i] }
            if mode == .l2 { r = r.squareRoot() }
        case .l1: r = 0; for i in 0..<n { r += Swift.abs(x[i]) }
        case .max: r = x[0]; for i in 1..<n { r = Swift.max(r, x[i]) }
        case .min: r = x[0]; for i in 1..<n { r = Swift.min(r, x[i]) }
        case .argmax:
            var best = x[0], at = 0
            for i in 1..<n where x[i] > best { best = x[i]; at = i }
            r = Float(at)
        }
        return r
    }

    /// `n` rows of `inner` values reduced row-wise into `y` (`inner` values).
    @inline(__always)
    private static func reduceRows(_ mode: Mode, _ x: UnsafeMutablePointer<Float>, _ n: Int, _ inner: Int,
                                   _ y: UnsafeMutablePointer<Float>, _ eps: Float) {
        switch mode {
        case .sum, .avg:
            y.update(from: x, count: inner)
            for j in 1..<n { let r = x + j * inner; for i in 0..<inner { y[i] += r[i] } }
            if mode == .avg { let inv = 1 / Float(n); for i in 0..<inner { y[i] *= inv } }
        case .prod:
            y.update(from: x, count: inner)
            for j in 1..<n { let r = x + j * inner; for i in 0..<inner { y[i] *= r[i] } }
        case .logsum:
            for i in 0..<inner { y[i] = 0 }
            for j in 0..<n { let r = x + j * inner; for i in 0..<inner { y[i] += Foundation.log(r[i] + eps) } }
        case .sumsquare, .l2:
            for i in 0..<inner { y[i] = 0 }
            for j in 0..<n { let r = x + j * inner; for i in 0..<inner { y[i] += r[i] * r[i] } }
            if mode == .l2 { for i in 0..<inner { y[i] = y[i].squareRoot() } }
        case .l1:
            for i in 0..<inner { y[i] = 0 }
            for j in 0..<n { let r = x + j * inner; for i in 0..<inner { y[i] += Swift.abs(r[i]) } }
        case .max:
            y.update(from: x, count: inner)
            for j in 1..<n { let r = x + j * inner; for i in 0..<inner { y[i] = Swift.max(y[i], r[i]) } }
        case .min:
            y.update(from: x, count: inner)
            for j in 1..<n { let r = x + j * inner; for i in 0..<inner { y[i] = Swift.min(y[i], r[i]) } }
        case .argmax:
            // Index j of the running maximum: compare against the input row that holds it.
            for i in 0..<inner { y[i] = 0 }
            for j in 1..<n {
                let r = x + j * inner
                for i in 0..<inner where r[i] > x[Int(y[i]) * inner + i] { y[i] = Float(j) }
            }
        }
    }
}

/// `DotProductLayerParams`: the dot product of two inputs of equal shape over each image's
/// C × H × W, or with `cosineSimilarity` that product divided by both L2 norms (0 when a norm is
/// 0). Output `[S, B, 1, 1, 1]`.
final class DotLayer: NNLayer, @unchecked Sendable {
    let cosine: Bool

    init(_ p: CoreML_Specification_DotProductLayerParams) {
        cosine = p.cosineSimilarity
    }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        guard inputs.count == 2 else { throw NNLayerError("takes two inputs, got \(inputs.count)") }
        guard inputs[0] == inputs[1] else { throw NNLayerError("inputs have shapes \(inputs[0]) and \(inputs[1]); they must be equal") }
        return [NNShape(s: inputs[0].s, b: inputs[0].b, c: 1)]
    }

    var detail: String { cosine ? "cosine similarity" : "dot product" }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let a = context.pointer(inputs[0]), b = context.pointer(inputs[1]), y = context.pointer(outputs[0])
        let n = inputs[0].shape.chw, cosine = self.cosine
        context.parallelFor(inputs[0].shape.images, costPerItem: n * 4) { range in
            for image in range {
                let ap = a + image * n, bp = b + image * n
                var dot: Float = 0
                for i in 0..<n { dot += ap[i] * bp[i] }
                if cosine {
                    var aa: Float = 0, bb: Float = 0
                    for i in 0..<n { aa += ap[i] * ap[i]; bb += bp[i] * bp[i] }
                    let norms = aa.squareRoot() * bb.squareRoot()
                    dot = norms > 0 ? dot / norms : 0
                }
                y[image] = dot
            }
        }
    }
}
