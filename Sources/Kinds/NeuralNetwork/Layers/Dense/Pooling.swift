import CCortadoGemm
import CortadoSpec

/// `PoolingLayerParams`: max, average or L2 (`sqrt(Σx²)`) pooling over windows of each
/// `[H, W]` plane, or over the whole plane (`globalPooling`, output 1×1).
///
/// Padding: valid (explicit border amounts), same (both asymmetry modes, as convolution) or
/// `includeLastPixel` (Caffe's ceil mode: symmetric amounts, `Hout = ceil((H + 2p - k) / s) + 1`,
/// less one when the last window would start past `H + p`). Padded positions never win a max
/// and add nothing to a sum; an average divides by the window's positions inside the input
/// (`avgPoolExcludePadding`) or inside the padded input (windows that run past the padded
/// input, which only `includeLastPixel` allows, are clipped).
final class PoolingLayer: NNLayer, @unchecked Sendable {
    enum Kind { case max, average, l2 }
    enum Padding {
        case valid(top: Int, bottom: Int, left: Int, right: Int)
        case same(topLeftHeavy: Bool)
        case includeLastPixel(h: Int, w: Int)
    }

    let kind: Kind
    let kh: Int, kw: Int, sh: Int, sw: Int
    let padding: Padding
    let global: Bool
    let excludePadding: Bool

    /// Whether `cg_max_pool_2x2_row` runs here (a vector kernel path: AVX-512 vectorised, AVX2
    /// a plain loop with the same results).
    static let vectorMax = cg_available() != 0

    init(_ p: CoreML_Specification_PoolingLayerParams) throws {
        switch p.type {
        case .max: kind = .max
        case .average: kind = .average
        case .l2: kind = .l2
        case .UNRECOGNIZED(let v): throw NNLayerError("unknown pooling type \(v)")
        }
        global = p.globalPooling
        (kh, kw) = try NNWindow.pair(p.kernelSize, 3, "kernelSize")
        (sh, sw) = try NNWindow.pair(p.stride, 1, "stride")
        excludePadding = p.avgPoolExcludePadding
        switch p.poolingPaddingType {
        case .same(let s)?:
            padding = .same(topLeftHeavy: s.asymmetryMode == .topLeftHeavy)
        case .valid(let v)?:
            let b = try NNWindow.borders(v.paddingAmounts, what: "valid padding")
            padding = .valid(top: b.top, bottom: b.bottom, left: b.left, right: b.right)
        case .includeLastPixel(let v)?:
            let a = v.paddingAmounts
            guard a.isEmpty || a.count == 2 else { throw NNLayerError("includeLastPixel padding needs 2 amounts (height, width), got \(a.count)") }
            padding = .includeLastPixel(h: a.isEmpty ? 0 : Int(a[0]), w: a.isEmpty ? 0 : Int(a[1]))
        case nil:
            padding = .valid(top: 0, bottom: 0, left: 0, right: 0)
        }
    }

    /// Max pooling over 2×2 windows at stride 2 with no padding: what a convolution can fold
    /// into its bands (`NNPoolAccepting`).
    var isPlainMax2x2: Bool {
        guard kind == .max, !global, kh == 2, kw == 2, sh == 2, sw == 2, case .valid(0, 0, 0, 0) = padding else { return false }
        return true
    }

    var detail: String {
        let name = kind == .max ? "max" : kind == .average ? (excludePadding ? "average (padding excluded)" : "average") : "L2"
        return global ? "global \(name)" : "\(name) \(kh)×\(kw) stride \(sh)×\(sw)"
    }

    /// Output size and padding for one input size. `padEnd` bounds the padded input.
    struct Geometry { let outH: Int, outW: Int, top: Int, left: Int, bottom: Int, right: Int }

    func geometry(h: Int, w: Int) throws -> Geometry {
        if global { return Geometry(outH: 1, outW: 1, top: 0, left: 0, bottom: 0, right: 0) }
        switch padding {
        case .valid(let top, let bottom, let left, let right):
            guard h + top + bottom >= kh, w + left + right >= kw else {
                throw NNLayerError("the \(kh)×\(kw) window is larger than the padded \(h + top + bottom)×\(w + left + right) input")
            }
            return Geometry(outH: (h + top + bottom - kh) / sh + 1, outW: (w + left + right - kw) / sw + 1,
                            top: top, left: left, bottom: bottom, right: right)
        case .same(let topLeftHeavy):
            let outH = (h + sh - 1) / sh, outW = (w + sw - 1) / sw
            let th = Swift.max(0, (outH - 1) * sh + kh - h), tw = Swift.max(0, (outW - 1) * sw + kw - w)
            let top = NNWindow.before(total: th, topLeftHeavy: topLeftHeavy), left = NNWindow.before(total: tw, topLeftHeavy: topLeftHeavy)
            return Geometry(outH: outH, outW: outW, top: top, left: left, bottom: th - top, right: tw - left)
        case .includeLastPixel(let ph, let pw):
            guard h + 2 * ph >= kh, w + 2 * pw >= kw else {
                throw NNLayerError("the \(kh)×\(kw) window is larger than the padded \(h + 2 * ph)×\(w + 2 * pw) input")
            }
            var outH = (h + 2 * ph - kh + sh - 1) / sh + 1, outW = (w + 2 * pw - kw + sw - 1) / sw + 1
            if (outH - 1) * sh >= h + ph { outH -= 1 }
            if (outW - 1) * sw >= w + pw { outW -= 1 }
            return Geometry(outH: outH, outW: outW, top: ph, left: pw, bottom: ph, right: pw)
        }
    }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        guard inputs.count == 1 else { throw NNLayerError("takes one input, got \(inputs.count)") }
        let x = inputs[0]
        let g = try geometry(h: x.h, w: x.w)
        return [NNShape(s: x.s, b: x.b, c: x.c, h: g.outH, w: g.outW)]
    }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let x = context.pointer(inputs[0]), y = context.pointer(outputs[0])
        let xs = inputs[0].shape
        let h = xs.h, w = xs.w
        let g = try! geometry(h: h, w: w)
        let kh = global ? h : self.kh, kw = global ? w : self.kw
        let sh = global ? 1 : self.sh, sw = global ? 1 : self.sw
        let outPlane = g.outH * g.outW
        let kind = kind, excludePadding = excludePadding
        // Max pooling: outputs whose window lies inside the input (most of them) take a loop
        // without clamping; the border ones take the general path below.
        let fastMax = kind == .max && !global
        // 2×2 windows at stride 1 or 2 (Tiny YOLO's): a vectorised row kernel, same results.
        let vector2x2 = fastMax && Self.vectorMax && kh == 2 && kw == 2 && (sw == 1 || sw == 2)
        // (Integer division truncates toward zero: a window taller or wider than the input
        // leaves no inside outputs.)
        let rowLo = (g.top + sh - 1) / sh, rowHi = fastMax && h + g.top >= kh ? (h + g.top - kh) / sh : -1
        let colLo = (g.left + sw - 1) / sw, colHi = fastMax && w + g.left >= kw ? Swift.min((w + g.left - kw) / sw, g.outW - 1) : -1
        context.parallelFor(xs.images * xs.c, costPerItem: outPlane * kh * kw) { range in
            for plane in range {
                let src = x + plane * h * w, dst = y + plane * outPlane
                for oh in 0..<g.outH {
                    let hs = oh * sh - g.top
                    let h0 = Swift.max(hs, 0), h1 = Swift.min(hs + kh, h)
                    let padH = Swift.min(hs + kh, h + g.bottom) - hs
                    let inside = oh >= rowLo && oh <= rowHi && colLo <= colHi
                    if inside {
                        let row = dst + oh * g.outW
                        if kh == 2 && kw == 2 {
                            let r0 = src + hs * w - g.left, r1 = r0 + w
                            if vector2x2 {
                                cg_max_pool_2x2_row(r0 + colLo * sw, r1 + colLo * sw, row + colLo, colHi - colLo + 1, sw)
                            } else {
                                for ow in colLo...colHi {
                                    let j = ow * sw
                                    row[ow] = Swift.max(Swift.max(r0[j], r0[j + 1]), Swift.max(r1[j], r1[j + 1]))
                                }
                            }
                        } else {
                            for ow in colLo...colHi {
                                let ws = ow * sw - g.left
                                var m = -Float.infinity
                                for i in hs..<(hs + kh) { let r = src + i * w + ws; for j in 0..<kw { m = Swift.max(m, r[j]) } }
                                row[ow] = m
                            }
                        }
                    }
                    for ow in 0..<g.outW where !(inside && ow >= colLo && ow <= colHi) {
                        let ws = ow * sw - g.left
                        let w0 = Swift.max(ws, 0), w1 = Swift.min(ws + kw, w)
                        var out: Float = 0
                        if h0 < h1 && w0 < w1 {
                            switch kind {
                            case .max:
                                var m = -Float.infinity
                                for i in h0..<h1 { let r = src + i * w; for j in w0..<w1 { m = Swift.max(m, r[j]) } }
                                out = m
                            case .average:
                                var s: Float = 0
                                for i in h0..<h1 { let r = src + i * w; for j in w0..<w1 { s += r[j] } }
                                let n = excludePadding ? (h1 - h0) * (w1 - w0) : padH * (Swift.min(ws + kw, w + g.right) - ws)
                                out = s / Float(n)
                            case .l2:
                                var s: Float = 0
                                for i in h0..<h1 { let r = src + i * w; for j in w0..<w1 { s += r[j] * r[j] } }
                                out = s.squareRoot()
                            }
                        }
                        dst[oh * g.outW + ow] = out
                    }
                }
            }
        }
    }
}
