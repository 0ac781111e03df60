import CCortadoGemm

/// A 2×2 stride-2 max pooling folded into a convolution on the packed GEMM (`pooled`).
///
/// Large images: each worker takes a share of the pooled rows and goes through it in bands of
/// whole row pairs of the convolution's output: the band's input is packed, multiplied and
/// finished (epilogue) into a band buffer that stays in cache, then pooled into the output with
/// `cg_max_pool_2x2_row`. The convolution's full output (11 MB for Tiny YOLO's first layer) is
/// never written out and read back. Small images run the plain packed path into scratch and
/// pool that. Each value is the one the separate layers compute: the same GEMM sums in the same
/// order, then the same maximum (`max(x, y)` as `y >= x ? y : x`).
extension ConvolutionLayer {
    /// Rows of the convolution's output per band (even, at least 2), or nil for the small-image
    /// path.
    func pooledBandRows(k: Int, g: Geometry) -> Int? {
        let n = g.outH * g.outW
        guard let band = packedBand(k: k, n: n) else { return nil }
        return Swift.max(2, Swift.min(g.outH / 2 * 2, band / g.outW / 2 * 2))
    }

    /// Band path: per worker, the packed band and the band's output; small images: the plain
    /// path's scratch and the whole convolution output.
    func pooledScratch(k: Int, g: Geometry, xs: NNShape) -> Int {
        if inPlace(k: k, g: g) { return inPlaceScratch(k: k, g: g, xs: xs) }
        let m = outputChannels, slack = 16
        if let rows = pooledBandRows(k: k, g: g) {
            let cols = NNPackedGemm.roundUp(rows * g.outW, NNPackedGemm.nr)
            return NNThreads.cores * (k * cols + slack + m * cols + slack)
        }
        return packedScratch(k: k, n: g.outH * g.outW) + m * g.outH * g.outW + slack
    }

    func runPooled(_ packed: NNPackedWeights, x: UnsafeMutablePointer<Float>, xs: NNShape, y: UnsafeMutablePointer<Float>,
                   g: Geometry, context: NNRunContext) {
        let k = kernelChannels * kh * kw, n = g.outH * g.outW, m = outputChannels, nr = NNPackedGemm.nr
        let ph = g.outH / 2, pw = g.outW / 2, pooledPlane = ph * pw
        guard let rows = pooledBandRows(k: k, g: g) else {
            // Small images: the whole convolution into scratch, then pooled.
            let convOut = context.scratch + packedScratch(k: k, n: n)
            for image in 0..<xs.images {
                let one = NNShape(c: xs.c, h: xs.h, w: xs.w)
                runPacked(packed, x: x + image * xs.chw, xs: one, y: convOut, ys: NNShape(c: m, h: g.outH, w: g.outW), g: g, context: context)
                Self.pool(convOut, channels: m, rows: ph, convW: g.outW, planeStride: n, into: y + image * m * pooledPlane, pooledW: pw,
                          pooledPlane: pooledPlane)
            }
            return
        }
        if inPlace(k: k, g: g) {
            runInPlace(packed, x: x, xs: xs, y: y, g: g, context: context)
            return
        }
        var conv = convGeometry(g, xs: xs)
        let pairs = rows / 2
        let bands = (ph + pairs - 1) / pairs
        let workers = NNPackedGemm.workers(context, items: bands)
        let share = (ph + workers - 1) / workers
        let cols = NNPackedGemm.roundUp(rows * g.outW, nr)
        let slot = k * cols + 16 + m * cols + 16
        NNGemm.run(workers: workers) { worker in
            let buffer = NNPackedGemm.aligned(context.scratch + worker * slot)
            let band = NNPackedGemm.aligned(buffer + k * cols)
            let start = Swift.min(ph, worker * share), end = Swift.min(ph, start + share)
            for image in 0..<xs.images {
                let xi = x + image * xs.chw, yi = y + image * m * pooledPlane
                var r0 = start
                while r0 < end {
                    // Pooled rows [r0, r1) from convolution rows [2·r0, 2·r1).
                    let r1 = Swift.min(end, r0 + pairs)
                    let n0 = 2 * r0 * g.outW, count = 2 * (r1 - r0) * g.outW
                    let width = NNPackedGemm.roundUp(count, nr)
                    cg_pack_conv(&conv, xi, n0, count, buffer, width, 0)
                    post.withGemmEpilogue(perColumn: false, offset: 0) { epilogue in
                        cg_gemm(m, count, k, packed.operand(), NNPackedGemm.packed(buffer, width: width, panel: 0), band, count, 0, nil, epilogue)
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

    /// Pools `rows` pooled rows of every channel: channel c's convolution rows start at
    /// `src + c·planeStride` (width convW), its pooled rows at `dst + c·pooledPlane`.
    static func pool(_ src: UnsafeMutablePointer<Float>, channels: Int, rows: Int, convW: Int, planeStride: Int,
                             into dst: UnsafeMutablePointer<Float>, pooledW: Int, pooledPlane: Int) {
        for c in 0..<channels {
            let s = src + c * planeStride, d = dst + c * pooledPlane
            for r in 0..<rows {
                let top = s + 2 * r * convW
                cg_max_pool_2x2_row(top, top + convW, d + r * pooledW, pooledW, 2)
            }
        }
    }
}
