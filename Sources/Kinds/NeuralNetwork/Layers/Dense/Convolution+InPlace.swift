import CCortadoGemm

/// Large images with few output channels, at horizontal stride 1: the input is read in place
/// (`cg_conv_rows`) instead of packed into im2col panels.
///
/// Packing writes the 9× larger im2col matrix of a 3×3 convolution, and only the rows of the
/// weights use each packed value: with 16 or 32 output channels (Tiny YOLO's first layers) the
/// packing cost as much as the products. Here the image is copied once, zero-padded, and each
/// panel of 32 output pixels of one output row reads its k-th row straight from that copy.
/// Rows are cut into panels of 32 (the last one 16 or 32 wide), so the path is taken only when
/// that spends at most 8 % more lanes than the row has pixels. The sums are the packed path's,
/// in the same order (bit for bit); workers split the output rows (or the pooled rows, when a
/// 2×2 max pooling is folded in).
extension ConvolutionLayer {
    /// Whether this output takes the in-place path.
    func inPlace(k: Int, g: Geometry) -> Bool {
        guard !deconvolution, groups == 1, sw == 1, packedBand(k: k, n: g.outH * g.outW) != nil else { return false }
        let full = g.outW / 32 * 32, tail = g.outW - full
        let lanes = full + (tail == 0 ? 0 : tail <= 16 ? 16 : 32)
        return lanes * 100 <= g.outW * 108
    }

    /// The padded copy, the offsets (Int, two floats each), then per worker a band of the
    /// convolution's output to pool (with a folded pooling).
    func inPlaceScratch(k: Int, g: Geometry, xs: NNShape) -> Int {
        var conv = convGeometry(g, xs: xs)
        var count = Int(cg_conv_padded_count(&conv)) + 16 + 2 * k + 16
        if pooled, let rows = pooledBandRows(k: k, g: g) {
            count += NNThreads.cores * (outputChannels * rows * g.outW + 16)
        }
        return count
    }

    func convGeometry(_ g: Geometry, xs: NNShape) -> cg_conv {
        cg_conv(channels: kernelChannels, h: xs.h, w: xs.w, kh: kh, kw: kw, sh: sh, sw: sw, dh: dh, dw: dw,
                pad_h: g.offH, pad_w: g.offW, out_h: g.outH, out_w: g.outW)
    }

    /// Writes the zero-padded copy of one image's input (`cg_conv_pad`), its channels split
    /// over `workers`.
    func padInput(_ conv: inout cg_conv, _ x: UnsafeMutablePointer<Float>, into padded: UnsafeMutablePointer<Float>, workers: Int) {
        let padders = Swift.min(workers, kernelChannels), perChannels = (kernelChannels + padders - 1) / padders
        var geometry = conv
        NNGemm.run(workers: padders) { worker in
            let c0 = worker * perChannels, c1 = Swift.min(kernelChannels, c0 + perChannels)
            guard c0 < c1 else { return }
            cg_conv_pad(&geometry, x, c0, c1, padded)
        }
    }

    func runInPlace(_ packed: NNPackedWeights, x: UnsafeMutablePointer<Float>, xs: NNShape, y: UnsafeMutablePointer<Float>,
                    g: Geometry, context: NNRunContext) {
        let k = kernelChannels * kh * kw, n = g.outH * g.outW, m = outputChannels
        var conv = convGeometry(g, xs: xs)
        let padded = NNPackedGemm.aligned(context.scratch)
        let afterPadded = NNPackedGemm.aligned(padded + Int(cg_conv_padded_count(&conv)))
        let offsets = UnsafeMutableRawPointer(afterPadded).bindMemory(to: Int.self, capacity: k)
        let bands = NNPackedGemm.aligned(afterPadded + 2 * k)
        cg_conv_offsets(&conv, offsets)
        // Units of work: output rows, or pooled rows (two output rows each).
        let bandRows = pooled ? pooledBandRows(k: k, g: g) ?? 2 : 0
        let units = pooled ? g.outH / 2 : g.outH
        let pw = g.outW / 2, pooledPlane = (g.outH / 2) * pw
        let workers = NNPackedGemm.workers(context, items: units)
        let share = (units + workers - 1) / workers
        let outImage = pooled ? m * pooledPlane : m * n
        for image in 0..<xs.images {
            let xi = x + image * xs.chw, yi = y + image * outImage
            padInput(&conv, xi, into: padded, workers: workers)
            NNGemm.run(workers: workers) { worker in
                let u0 = Swift.min(units, worker * share), u1 = Swift.min(units, u0 + share)
                guard u0 < u1 else { return }
                if !pooled {
                    post.withGemmEpilogue(perColumn: false, offset: 0) { epilogue in
                        cg_conv_rows(&conv, padded, offsets, packed.operand(), m, u0, u1, yi + u0 * g.outW, n, epilogue)
                    }
                    if post.needsPass {
                        for c in 0..<m { post.apply(yi + c * n + u0 * g.outW, count: (u1 - u0) * g.outW, channel: c) }
                    }
                    return
                }
                // Pooled rows [r0, r1) at a time from output rows [2·r0, 2·r1), through this
                // worker's band buffer.
                let band = NNPackedGemm.aligned(bands + worker * (m * bandRows * g.outW + 16))
                var r0 = u0
                while r0 < u1 {
                    let r1 = Swift.min(u1, r0 + bandRows / 2), count = 2 * (r1 - r0) * g.outW
                    post.withGemmEpilogue(perColumn: false, offset: 0) { epilogue in
                        cg_conv_rows(&conv, padded, offsets, packed.operand(), m, 2 * r0, 2 * r1, band, count, epilogue)
                    }
                    if post.needsPass {
                        for c in 0..<m { post.apply(band + c * count, count: count, channel: c) }
                    }
                    Self.pool(band, channels: m, rows: r1 - r0, convW: g.outW, planeStride: count, into: yi + r0 * pw, pooledW: pw,
                              pooledPlane: pooledPlane)
                    r0 = r1
                }
            }
        }
    }
}
