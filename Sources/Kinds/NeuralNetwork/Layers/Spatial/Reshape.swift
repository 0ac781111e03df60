import CortadoSpec

/// `ReshapeLayerParams`: reinterprets each batch entry's data with a new shape. A 3-value
/// `targetShape` `[C', H', W']` keeps the sequence length (`C'H'W' = CHW`); a 4-value one
/// `[S', C', H', W']` changes it (`S'C'H'W' = S·CHW`). One value may be -1 (inferred).
/// CHANNEL_FIRST reads and writes in `[C, H, W]` order; CHANNEL_LAST flattens each image in
/// `[H, W, C]` order and lays the result out as `[H', W', C']` before permuting it back.
/// `[S, B, C, H, W]` → `[S or S', B, C', H', W']`.
final class ReshapeLayer: NNLayer, @unchecked Sendable {
    let target: [Int]
    let channelLast: Bool

    init(_ p: CoreML_Specification_ReshapeLayerParams) throws {
        guard p.targetShape.count == 3 || p.targetShape.count == 4 else {
            throw NNLayerError("targetShape must have 3 ([C, H, W]) or 4 ([S, C, H, W]) values, not \(p.targetShape.count)")
        }
        guard p.targetShape.allSatisfy({ $0 == -1 || ($0 >= 1 && $0 < 1 << 31) }),
              p.targetShape.filter({ $0 == -1 }).count <= 1 else {
            throw NNLayerError("targetShape \(p.targetShape) must hold positive sizes and at most one -1")
        }
        target = p.targetShape.map { Int($0) }
        switch p.mode {
        case .channelFirst: channelLast = false
        case .channelLast: channelLast = true
        default: throw NNLayerError("unknown reshape order \(p.mode.rawValue)")
        }
    }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        guard inputs.count == 1 else { throw NNLayerError("takes one input, got \(inputs.count)") }
        let x = inputs[0]
        let available = target.count == 3 ? x.chw : x.s * x.chw
        var dims = target
        let known = dims.filter { $0 != -1 }.reduce(1, *)
        if let i = dims.firstIndex(of: -1) {
            guard available % known == 0 else {
                throw NNLayerError("cannot infer the -1 in targetShape \(target): \(available) values per entry do not divide by \(known)")
            }
            dims[i] = available / known
        }
        guard dims.reduce(1, *) == available else {
            throw NNLayerError("targetShape \(target) holds \(dims.reduce(1, *)) values but the input has \(available) per \(target.count == 3 ? "image" : "batch entry") (shape \(x))")
        }
        if dims.count == 3 { return [NNShape(s: x.s, b: x.b, c: dims[0], h: dims[1], w: dims[2])] }
        return [NNShape(s: dims[0], b: x.b, c: dims[1], h: dims[2], w: dims[3])]
    }

    /// Channel-first with the sequence length kept is the same memory, element for element.
    var runsInPlace: Bool { !channelLast && target.count == 3 }

    func scratchCount(_ inputs: [NNShape]) -> Int { channelLast ? inputs[0].count : 0 }

    var detail: String { "\(target) \(channelLast ? "channel last" : "channel first")" }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let x = context.pointer(inputs[0]), y = context.pointer(outputs[0])
        let inShape = inputs[0].shape, outShape = outputs[0].shape
        let batch = inShape.b, inChw = inShape.chw, outChw = outShape.chw
        if !channelLast {
            if inShape.s == outShape.s || batch == 1 {
                if x != y { y.update(from: x, count: inShape.count) }
                return
            }
            // The sequence length changes: each batch entry's values, read in sequence order,
            // fill that entry's output images in order.
            let total = inShape.s * inChw
            for b in 0..<batch {
                var f = 0
                while f < total {
                    let run = min(inChw - f % inChw, outChw - f % outChw)
                    let src = x + ((f / inChw) * batch + b) * inChw + f % inChw
                    let dst = y + ((f / outChw) * batch + b) * outChw + f % outChw
                    dst.update(from: src, count: run)
                    f += run
                }
            }
            return
        }
        // Channel last: each image to [H·W, C] in scratch, batch entries contiguous…
        let t = context.scratch
        let inS = inShape.s, outS = outShape.s
        context.parallelFor(inS * batch, costPerItem: inChw) { range in
            for image in range {
                let s = image / batch, b = image % batch
                NNCopy.transpose(x + image * inChw, rows: inShape.c, cols: inShape.hw, to: t + (b * inS + s) * inChw)
            }
        }
        // …then each output image from its [H'·W', C'] slice.
        context.parallelFor(outS * batch, costPerItem: outChw) { range in
            for image in range {
                let s = image / batch, b = image % batch
                NNCopy.transpose(t + b * inS * inChw + s * outChw, rows: outShape.hw, cols: outShape.c, to: y + image * outChw)
            }
        }
    }
}

/// `FlattenLayerParams`: each image `[C, H, W]` becomes a vector `[C·H·W, 1, 1]`, read in
/// `[C, H, W]` order (CHANNEL_FIRST) or `[H, W, C]` order (CHANNEL_LAST).
final class FlattenLayer: NNLayer, @unchecked Sendable {
    let channelLast: Bool

    init(_ p: CoreML_Specification_FlattenLayerParams) throws {
        switch p.mode {
        case .channelFirst: channelLast = false
        case .channelLast: channelLast = true
        default: throw NNLayerError("unknown flatten order \(p.mode.rawValue)")
        }
    }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        guard inputs.count == 1 else { throw NNLayerError("takes one input, got \(inputs.count)") }
        let x = inputs[0]
        return [NNShape(s: x.s, b: x.b, c: x.chw)]
    }

    var runsInPlace: Bool { !channelLast }
    var detail: String { channelLast ? "channel last" : "channel first" }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let x = context.pointer(inputs[0]), y = context.pointer(outputs[0])
        let shape = inputs[0].shape
        if !channelLast || shape.hw == 1 || shape.c == 1 {
            if x != y { y.update(from: x, count: shape.count) }
            return
        }
        let chw = shape.chw
        context.parallelFor(shape.images, costPerItem: chw) { range in
            for image in range { NNCopy.transpose(x + image * chw, rows: shape.c, cols: shape.hw, to: y + image * chw) }
        }
    }
}

/// `PermuteLayerParams`: transposes the axes `[S, C, H, W]` (0…3) of each batch entry; output
/// axis k is input axis `axis[k]`, and the batch axis stays in place.
/// `[S, B, C, H, W]` → `[d(axis[0]), B, d(axis[1]), d(axis[2]), d(axis[3])]`.
final class PermuteLayer: NNLayer, @unchecked Sendable {
    let axis: [Int]

    init(_ p: CoreML_Specification_PermuteLayerParams) throws {
        let a = p.axis.isEmpty ? [0, 1, 2, 3] : p.axis.map { Int(clamping: $0) }
        guard a.count == 4, a.sorted() == [0, 1, 2, 3] else {
            throw NNLayerError("axis \(p.axis) must be a permutation of [0, 1, 2, 3] (sequence, channel, height, width)")
        }
        axis = a
    }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        guard inputs.count == 1 else { throw NNLayerError("takes one input, got \(inputs.count)") }
        let x = inputs[0]
        let d = [x.s, x.c, x.h, x.w]
        return [NNShape(s: d[axis[0]], b: x.b, c: d[axis[1]], h: d[axis[2]], w: d[axis[3]])]
    }

    var runsInPlace: Bool { false }
    var detail: String { "\(axis)" }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let x = context.pointer(inputs[0]), y = context.pointer(outputs[0])
        let inShape = inputs[0].shape, out = outputs[0].shape
        if axis == [0, 1, 2, 3] {
            y.update(from: x, count: inShape.count)
            return
        }
        let batch = inShape.b
        let inStride = [batch * inShape.chw, inShape.hw, inShape.w, 1]
        let st0 = inStride[axis[0]], st1 = inStride[axis[1]], st2 = inStride[axis[2]], st3 = inStride[axis[3]]
        let inBatch = inShape.chw
        let o1 = out.c, o2 = out.h, o3 = out.w
        // One item = one output row set [o0, b, o1]: o2 × o3 values.
        context.parallelFor(out.s * batch * o1, costPerItem: o2 * o3) { range in
            for item in range {
                let i1 = item % o1, b = (item / o1) % batch, i0 = item / (o1 * batch)
                let src = x + i0 * st0 + b * inBatch + i1 * st1
                let dst = y + item * o2 * o3
                for i2 in 0..<o2 { NNCopy.strided(src + i2 * st2, stride: st3, to: dst + i2 * o3, count: o3) }
            }
        }
    }
}

/// `ReorganizeDataLayerParams`: moves `blockSize × blockSize` blocks between space and channels
/// in each image. SPACE_TO_DEPTH `[C, H, W]` → `[C·bs², H/bs, W/bs]` with
/// `out[(i·bs + j)·C + c, h, w] = in[c, h·bs + i, w·bs + j]`; DEPTH_TO_SPACE is its inverse;
/// PIXEL_SHUFFLE `[C, H, W]` → `[C/bs², H·bs, W·bs]` with
/// `out[c, h·bs + i, w·bs + j] = in[c·bs² + i·bs + j, h, w]`.
final class ReorganizeDataLayer: NNLayer, @unchecked Sendable {
    let mode: CoreML_Specification_ReorganizeDataLayerParams.ReorganizationType
    let block: Int

    init(_ p: CoreML_Specification_ReorganizeDataLayerParams) throws {
        switch p.mode {
        case .spaceToDepth, .depthToSpace, .pixelShuffle: mode = p.mode
        default: throw NNLayerError("unknown reorganization mode \(p.mode.rawValue)")
        }
        guard p.blockSize >= 1, p.blockSize < 1 << 16 else { throw NNLayerError("blockSize \(p.blockSize) must be at least 1") }
        block = Int(p.blockSize)
    }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        guard inputs.count == 1 else { throw NNLayerError("takes one input, got \(inputs.count)") }
        var s = inputs[0]
        let bs = block
        if mode == .spaceToDepth {
            guard s.h % bs == 0, s.w % bs == 0 else {
                throw NNLayerError("blockSize \(bs) must divide the height \(s.h) and width \(s.w)")
            }
            s.c *= bs * bs; s.h /= bs; s.w /= bs
        } else {
            guard s.c % (bs * bs) == 0 else { throw NNLayerError("blockSize² = \(bs * bs) must divide the \(s.c) channels") }
            s.c /= bs * bs; s.h *= bs; s.w *= bs
        }
        return [s]
    }

    var detail: String { "\(mode) block \(block)" }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let x = context.pointer(inputs[0]), y = context.pointer(outputs[0])
        let inShape = inputs[0].shape, out = outputs[0].shape
        let bs = block, mode = mode
        let chw = inShape.chw
        // One item = one (image, output-or-input channel of the small-spatial side).
        let smallC = mode == .spaceToDepth ? inShape.c : out.c
        context.parallelFor(inShape.images * smallC, costPerItem: bs * bs * (chw / max(smallC, 1))) { range in
            for item in range {
                let image = item / smallC, c = item % smallC
                let xi = x + image * chw, yi = y + image * chw
                for i in 0..<bs {
                    for j in 0..<bs {
                        switch mode {
                        case .spaceToDepth:
                            // Small side is the output: [C·bs², H/bs, W/bs].
                            let oh = out.h, ow = out.w, w = inShape.w
                            let dst = yi + ((i * bs + j) * smallC + c) * oh * ow
                            let src = xi + c * inShape.hw + i * w + j
                            for r in 0..<oh {
                                let s = src + r * bs * w, d = dst + r * ow
                                for q in 0..<ow { d[q] = s[q * bs] }
                            }
                        default:
                            // Small side is the input: [C, H, W] → [C/bs², H·bs, W·bs].
                            let h = inShape.h, w = inShape.w, ow = out.w
                            let sc = mode == .pixelShuffle ? c * bs * bs + i * bs + j : (i * bs + j) * smallC + c
                            let src = xi + sc * h * w
                            let dst = yi + c * out.hw + i * ow + j
                            for r in 0..<h {
                                let s = src + r * w, d = dst + r * bs * ow
                                for q in 0..<w { d[q * bs] = s[q] }
                            }
                        }
                    }
                }
            }
        }
    }
}
