import CortadoSpec
import Foundation

/// Sampling positions along one axis: `point(i) = min(hi, max(lo, start + i * step))`. Every
/// grid of the upsample, resize-bilinear and crop-resize layers has this form.
struct NNAxisGrid {
    var start: Float
    var step: Float
    var lo: Float
    var hi: Float

    @inline(__always) func point(_ i: Int) -> Float { min(hi, max(lo, start + Float(i) * step)) }

    /// A `SamplingMode` grid of `n` points over the interval `[a, b]` (the whole axis is
    /// `[0, X-1]`), kept inside `[0, limit]`. The spec writes each mode with numpy's linspace:
    /// STRICT_ALIGN_ENDPOINTS `linspace(0, X-1)`; ALIGN_ENDPOINTS the same but `(X-1)/2` when
    /// N = 1; UPSAMPLE `min(X-1, linspace(0, X - X/N))`; ROI_ALIGN with
    /// `spacing = max(1, X-1)/N`, `min(X-1, linspace(spacing/2, spacing/2 + (N-1) spacing))`.
    static func sampling(_ method: CoreML_Specification_SamplingMode.Method, from a: Float, to b: Float, count n: Int, limit: Float) -> NNAxisGrid {
        let span = b - a // "X - 1"
        var g = NNAxisGrid(start: a, step: 0, lo: 0, hi: limit)
        switch method {
        case .alignEndpointsMode:
            if n == 1 { g.start = a + span / 2 } else { g.step = span / Float(n - 1) }
        case .upsampleMode:
            if n > 1 { g.step = (span + 1) / Float(n) }
            g.hi = max(0, min(limit, b))
        case .roiAlignMode:
            let spacing = max(1, span) / Float(n)
            g.start = a + spacing / 2
            g.step = spacing
            g.hi = max(0, min(limit, b))
        default: // strict align endpoints
            if n > 1 { g.step = span / Float(n - 1) }
        }
        return g
    }

    /// Writes the lower index (as a float) and the weight of the upper neighbour of each of the
    /// `n` points into `index[0..<n]` and `weight[0..<n]`.
    @inline(__always)
    func table(_ n: Int, index: UnsafeMutablePointer<Float>, weight: UnsafeMutablePointer<Float>) {
        for i in 0..<n {
            let p = point(i)
            let f = p.rounded(.down)
            index[i] = f
            weight[i] = p - f
        }
    }
}

/// Bilinear sampling of one `[H, W]` plane at precomputed row and column positions.
enum NNBilinear {
    /// `rowIndex/rowWeight` (`oh` each) and `colIndex/colWeight` (`ow` each) come from
    /// `NNAxisGrid.table`; positions lie in `[0, H-1] × [0, W-1]`.
    @inline(__always)
    static func plane(_ src: UnsafePointer<Float>, h: Int, w: Int, to dst: UnsafeMutablePointer<Float>, oh: Int, ow: Int,
                      rowIndex: UnsafePointer<Float>, rowWeight: UnsafePointer<Float>,
                      colIndex: UnsafePointer<Float>, colWeight: UnsafePointer<Float>) {
        for r in 0..<oh {
            let y0 = Int(rowIndex[r]), y1 = min(y0 + 1, h - 1), fy = rowWeight[r]
            let top = src + y0 * w, bottom = src + y1 * w
            let out = dst + r * ow
            for c in 0..<ow {
                let x0 = Int(colIndex[c]), x1 = min(x0 + 1, w - 1), fx = colWeight[c]
                let t = top[x0] + fx * (top[x1] - top[x0])
                let b = bottom[x0] + fx * (bottom[x1] - bottom[x0])
                out[c] = t + fy * (b - t)
            }
        }
    }
}

/// `UpsampleLayerParams`: scales every `[H, W]` plane up by integer (`scalingFactor`) or
/// fractional (`fractionalScalingFactor`, bilinear with ALIGN_CORNERS_TRUE/FALSE only) factors,
/// by nearest neighbour or bilinear interpolation on the `linearUpsampleMode` grid.
/// `[S, B, C, H, W]` → `[S, B, C, ⌊H·fh⌋, ⌊W·fw⌋]`.
final class UpsampleLayer: NNLayer, @unchecked Sendable {
    let factorH: Float, factorW: Float
    /// Integer factors (nearest neighbour and integer bilinear).
    let intH: Int, intW: Int
    let bilinear: Bool
    let linearMode: CoreML_Specification_UpsampleLayerParams.LinearUpsampleMode

    init(_ p: CoreML_Specification_UpsampleLayerParams) throws {
        switch p.mode {
        case .nn: bilinear = false
        case .bilinear: bilinear = true
        default: throw NNLayerError("unknown interpolation mode \(p.mode.rawValue)")
        }
        switch p.linearUpsampleMode {
        case .default, .alignCornersTrue, .alignCornersFalse: linearMode = p.linearUpsampleMode
        default: throw NNLayerError("unknown linear upsample mode \(p.linearUpsampleMode.rawValue)")
        }
        guard p.scalingFactor.isEmpty || p.fractionalScalingFactor.isEmpty else {
            throw NNLayerError("scalingFactor and fractionalScalingFactor are mutually exclusive")
        }
        if !p.fractionalScalingFactor.isEmpty {
            guard p.fractionalScalingFactor.count == 2 else {
                throw NNLayerError("fractionalScalingFactor must have 2 values [h, w], not \(p.fractionalScalingFactor.count)")
            }
            guard bilinear, linearMode != .default else {
                throw NNLayerError("fractional scaling factors need BILINEAR mode with ALIGN_CORNERS_TRUE or ALIGN_CORNERS_FALSE")
            }
            factorH = p.fractionalScalingFactor[0]; factorW = p.fractionalScalingFactor[1]
            guard factorH.isFinite, factorW.isFinite, factorH > 0, factorW > 0 else {
                throw NNLayerError("fractional scaling factors \(p.fractionalScalingFactor) must be positive")
            }
            intH = 0; intW = 0
        } else {
            guard p.scalingFactor.isEmpty || p.scalingFactor.count == 2 else {
                throw NNLayerError("scalingFactor must have 2 values [h, w], not \(p.scalingFactor.count)")
            }
            let f = p.scalingFactor.isEmpty ? [1, 1] : p.scalingFactor
            guard f.allSatisfy({ $0 >= 1 && $0 < 1 << 16 }) else {
                throw NNLayerError("scaling factors \(f) must be between 1 and 65535")
            }
            intH = Int(f[0]); intW = Int(f[1])
            factorH = Float(intH); factorW = Float(intW)
        }
    }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        guard inputs.count == 1 else { throw NNLayerError("takes one input, got \(inputs.count)") }
        var s = inputs[0]
        if intH > 0 {
            s.h *= intH; s.w *= intW
        } else {
            s.h = Int((Float(s.h) * factorH).rounded(.down))
            s.w = Int((Float(s.w) * factorW).rounded(.down))
        }
        guard s.h >= 1, s.w >= 1 else { throw NNLayerError("scaling \(inputs[0].h)×\(inputs[0].w) by \(factorH)×\(factorW) leaves no pixels") }
        return [s]
    }

    func scratchCount(_ inputs: [NNShape]) -> Int {
        guard bilinear, let s = try? outputShapes(inputs)[0] else { return 0 }
        return 2 * (s.h + s.w)
    }

    var detail: String {
        bilinear ? "bilinear ×\(factorH)×\(factorW) \(linearMode)" : "nearest ×\(intH)×\(intW)"
    }

    /// The spec's grid: DEFAULT `spacing = (Xin - Xin/Xout)/(Xout-1)`, `i·spacing`;
    /// ALIGN_CORNERS_TRUE `spacing = (Xin-1)/(Xout-1)`, `i·spacing`; ALIGN_CORNERS_FALSE
    /// `spacing = Xin/Xout`, `i·spacing + spacing/2 - 1/2`; all kept in `[0, Xin-1]`.
    private func grid(_ xin: Int, _ xout: Int) -> NNAxisGrid {
        let fin = Float(xin), fout = Float(xout)
        var g = NNAxisGrid(start: 0, step: 0, lo: 0, hi: fin - 1)
        switch linearMode {
        case .alignCornersTrue:
            if xout > 1 { g.step = (fin - 1) / (fout - 1) }
        case .alignCornersFalse:
            g.step = fin / fout
            g.start = 0.5 * g.step - 0.5
        default:
            if xout > 1 { g.step = (fin - fin / fout) / (fout - 1) }
        }
        return g
    }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let x = context.pointer(inputs[0]), y = context.pointer(outputs[0])
        let inShape = inputs[0].shape, outShape = outputs[0].shape
        let h = inShape.h, w = inShape.w, oh = outShape.h, ow = outShape.w
        let planes = inShape.images * inShape.c
        if !bilinear {
            let fh = intH, fw = intW
            context.parallelFor(planes, costPerItem: oh * ow) { range in
                for plane in range {
                    let src = x + plane * h * w, dst = y + plane * oh * ow
                    for r in 0..<h {
                        let s = src + r * w, row = dst + r * fh * ow
                        if fw == 1 {
                            row.update(from: s, count: w)
                        } else {
                            for c in 0..<w {
                                let v = s[c], d = row + c * fw
                                for k in 0..<fw { d[k] = v }
                            }
                        }
                        for k in 1..<max(fh, 1) { (row + k * ow).update(from: row, count: ow) }
                    }
                }
            }
            return
        }
        let rowIndex = context.scratch, rowWeight = rowIndex + oh
        let colIndex = rowWeight + oh, colWeight = colIndex + ow
        grid(h, oh).table(oh, index: rowIndex, weight: rowWeight)
        grid(w, ow).table(ow, index: colIndex, weight: colWeight)
        context.parallelFor(planes, costPerItem: oh * ow * 8) { range in
            for plane in range {
                NNBilinear.plane(x + plane * h * w, h: h, w: w, to: y + plane * oh * ow, oh: oh, ow: ow,
                                 rowIndex: rowIndex, rowWeight: rowWeight, colIndex: colIndex, colWeight: colWeight)
            }
        }
    }
}

/// Reads a `SamplingMode`, rejecting values the spec does not define.
private func nnSamplingMethod(_ m: CoreML_Specification_SamplingMode) throws -> CoreML_Specification_SamplingMode.Method {
    switch m.samplingMethod {
    case .strictAlignEndpointsMode, .alignEndpointsMode, .upsampleMode, .roiAlignMode: return m.samplingMethod
    default: throw NNLayerError("unknown sampling mode \(m.samplingMethod.rawValue)")
    }
}

/// Reads a `targetSize` (`[H, W]`, default `[1, 1]`).
private func nnTargetSize(_ t: [UInt64]) throws -> (Int, Int) {
    if t.isEmpty { return (1, 1) }
    guard t.count == 2 else { throw NNLayerError("targetSize must have 2 values [h, w], not \(t.count)") }
    guard t.allSatisfy({ $0 >= 1 && $0 < 1 << 24 }) else { throw NNLayerError("targetSize \(t) must be positive") }
    return (Int(t[0]), Int(t[1]))
}

/// `ResizeBilinearLayerParams`: resizes every `[H, W]` plane to `targetSize` by bilinear
/// interpolation on the `SamplingMode` grid. `[S, B, C, H, W]` → `[S, B, C, H_out, W_out]`.
final class ResizeBilinearLayer: NNLayer, @unchecked Sendable {
    let outH: Int, outW: Int
    let method: CoreML_Specification_SamplingMode.Method

    init(_ p: CoreML_Specification_ResizeBilinearLayerParams) throws {
        (outH, outW) = try nnTargetSize(p.targetSize)
        method = try nnSamplingMethod(p.mode)
    }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        guard inputs.count == 1 else { throw NNLayerError("takes one input, got \(inputs.count)") }
        var s = inputs[0]
        s.h = outH; s.w = outW
        return [s]
    }

    func scratchCount(_ inputs: [NNShape]) -> Int { 2 * (outH + outW) }
    var detail: String { "\(outH)×\(outW) \(method)" }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let x = context.pointer(inputs[0]), y = context.pointer(outputs[0])
        let s = inputs[0].shape
        let h = s.h, w = s.w, oh = outH, ow = outW
        let rowIndex = context.scratch, rowWeight = rowIndex + oh
        let colIndex = rowWeight + oh, colWeight = colIndex + ow
        NNAxisGrid.sampling(method, from: 0, to: Float(h - 1), count: oh, limit: Float(h - 1)).table(oh, index: rowIndex, weight: rowWeight)
        NNAxisGrid.sampling(method, from: 0, to: Float(w - 1), count: ow, limit: Float(w - 1)).table(ow, index: colIndex, weight: colWeight)
        context.parallelFor(s.images * s.c, costPerItem: oh * ow * 8) { range in
            for plane in range {
                NNBilinear.plane(x + plane * h * w, h: h, w: w, to: y + plane * oh * ow, oh: oh, ow: ow,
                                 rowIndex: rowIndex, rowWeight: rowWeight, colIndex: colIndex, colWeight: colWeight)
            }
        }
    }
}

/// `CropResizeLayerParams`: cuts N boxes (regions of interest) out of the images and resizes each
/// to `targetSize` by bilinear interpolation.
///
/// Input 0 is the images `[1, B, C, H, W]`; input 1 the boxes `[N, G, 4 or 5, 1, 1]` (4
/// coordinates in `boxIndicesMode`, optionally after an image index). With 4 coordinates the
/// output is `[N, B, C, h, w]` (every box from every image); with 5 it is `[N, G, C, h, w]` (box n
/// from the image it names). G is 1 in the spec; when rows are batched along B, G = rows and
/// each row's boxes apply to that row's images. Box coordinates are scaled by `(H-1, W-1)` when
/// normalized and by `spatialScale`; the sampling grid is the `SamplingMode` grid with the box
/// edges in place of `[0, X-1]`, kept inside the image.
final class CropResizeLayer: NNLayer, @unchecked Sendable {
    let outH: Int, outW: Int
    let method: CoreML_Specification_SamplingMode.Method
    let boxMode: CoreML_Specification_BoxCoordinatesMode.Coordinates
    let normalized: Bool
    let spatialScale: Float

    init(_ p: CoreML_Specification_CropResizeLayerParams) throws {
        (outH, outW) = try nnTargetSize(p.targetSize)
        method = try nnSamplingMethod(p.mode)
        switch p.boxIndicesMode.boxMode {
        case .cornersHeightFirst, .cornersWidthFirst, .centerSizeHeightFirst, .centerSizeWidthFirst: boxMode = p.boxIndicesMode.boxMode
        default: throw NNLayerError("unknown box coordinates mode \(p.boxIndicesMode.boxMode.rawValue)")
        }
        normalized = p.normalizedCoordinates
        guard p.spatialScale.isFinite, p.spatialScale >= 0 else { throw NNLayerError("spatialScale \(p.spatialScale) must be positive") }
        spatialScale = p.spatialScale == 0 ? 1 : p.spatialScale
    }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        guard inputs.count == 2 else { throw NNLayerError("takes 2 inputs (images, boxes), got \(inputs.count)") }
        let image = inputs[0], boxes = inputs[1]
        guard image.s == 1 else { throw NNLayerError("the image input must have sequence length 1, not \(image.s)") }
        guard boxes.c == 4 || boxes.c == 5, boxes.h == 1, boxes.w == 1 else {
            throw NNLayerError("the box input must have shape [N, 1, 4 or 5, 1, 1], not \(boxes)")
        }
        guard image.b % boxes.b == 0 else {
            throw NNLayerError("the box input's batch \(boxes.b) must be 1 or divide the image batch \(image.b)")
        }
        return [NNShape(s: boxes.s, b: boxes.c == 4 ? image.b : boxes.b, c: image.c, h: outH, w: outW)]
    }

    func scratchCount(_ inputs: [NNShape]) -> Int {
        guard inputs.count == 2 else { return 0 }
        return inputs[1].s * inputs[1].b * 2 * (outH + outW)
    }

    var detail: String { "\(outH)×\(outW) \(method) \(boxMode)\(normalized ? " normalized" : "")" }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let x = context.pointer(inputs[0]), boxes = context.pointer(inputs[1]), y = context.pointer(outputs[0])
        let image = inputs[0].shape, boxShape = inputs[1].shape
        let h = image.h, w = image.w, c = image.c, oh = outH, ow = outW
        let coords = boxShape.c, groups = boxShape.b, perGroup = image.b / groups
        let nBoxes = boxShape.s * groups
        let tableSize = 2 * (oh + ow)
        let scaleH = (normalized ? Float(h - 1) : 1) * spatialScale
        let scaleW = (normalized ? Float(w - 1) : 1) * spatialScale
        // Box k = (n, g) sits at boxes + k * coords; its grids go to scratch + k * tableSize.
        for k in 0..<nBoxes {
            let v = boxes + k * coords + (coords == 5 ? 1 : 0)
            var h0: Float, w0: Float, h1: Float, w1: Float
            switch boxMode {
            case .cornersWidthFirst: (w0, h0, w1, h1) = (v[0], v[1], v[2], v[3])
            case .centerSizeHeightFirst: (h0, w0, h1, w1) = (v[0] - v[2] / 2, v[1] - v[3] / 2, v[0] + v[2] / 2, v[1] + v[3] / 2)
            case .centerSizeWidthFirst: (w0, h0, w1, h1) = (v[0] - v[2] / 2, v[1] - v[3] / 2, v[0] + v[2] / 2, v[1] + v[3] / 2)
            default: (h0, w0, h1, w1) = (v[0], v[1], v[2], v[3])
            }
            let t = context.scratch + k * tableSize
            NNAxisGrid.sampling(method, from: h0 * scaleH, to: h1 * scaleH, count: oh, limit: Float(h - 1)).table(oh, index: t, weight: t + oh)
            NNAxisGrid.sampling(method, from: w0 * scaleW, to: w1 * scaleW, count: ow, limit: Float(w - 1)).table(ow, index: t + 2 * oh, weight: t + 2 * oh + ow)
        }
        // Output images: [N, outB] with outB = B (4 coordinates) or G (5 coordinates).
        let outB = outputs[0].shape.b
        let tables = context.scratch
        context.parallelFor(boxShape.s * outB * c, costPerItem: oh * ow * 8) { range in
            for item in range {
                let channel = item % c, ob = (item / c) % outB, n = item / (c * outB)
                let box: Int, imageIndex: Int
                if coords == 4 {
                    box = n * groups + ob / perGroup
                    imageIndex = ob
                } else {
                    box = n * groups + ob
                    let raw = boxes[box * coords] // the image index, clamped into the group
                    let id = raw.isFinite ? Int(min(max(raw, 0), Float(perGroup - 1)).rounded()) : 0
                    imageIndex = ob * perGroup + id
                }
                let t = tables + box * tableSize
                NNBilinear.plane(x + (imageIndex * c + channel) * h * w, h: h, w: w, to: y + item * oh * ow, oh: oh, ow: ow,
                                 rowIndex: t, rowWeight: t + oh, colIndex: t + 2 * oh, colWeight: t + 2 * oh + ow)
            }
        }
    }
}
