import CCortadoGemm

/// A 3×3, stride-1 convolution by Winograd's F(4×4, 3×3) (`cortado_winograd.h`): 2.25
/// multiplications per output pixel and channel pair instead of 9, for the price of
/// transforms per channel and weights four times the size; or by F(2×2, 3×3) (algorithm
/// `winograd2`, weights with `winogradTile` 2): 4 multiplications instead of 9, weights 16/9
/// the size, which suits small maps with many channels, where F(4×4)'s weights are streamed
/// from memory for few uses each. Per image the input is
/// transformed once (workers split the channels), then workers split the units (pairs of
/// blocks of 16 output channels × bands of tiles); each unit finishes its own output: the
/// epilogue (bias, batch norm, ReLU or leaky ReLU) and a folded residual add in the same
/// pass, or a folded 2×2 max pooling as its rows are finished (the full-size output is never
/// written); when the layer has a step the kernels cannot fold, the pooling runs on the whole
/// output afterwards.
extension ConvolutionLayer {
    /// The transformed input, one workspace per worker and (with a folded pooling) the whole
    /// convolution output: enough for either tile size.
    func winogradScratch(g: Geometry, xs: NNShape) -> Int {
        var conv = convGeometry(g, xs: xs)
        var count = Int(Swift.max(cg_winograd_input_count(&conv), cg_winograd2_input_count(&conv))) + 16
        count += NNThreads.cores * Int(Swift.max(cg_winograd_workspace_count(&conv), cg_winograd2_workspace_count(&conv)))
        if pooled { count += outputChannels * g.outH * g.outW + 16 }
        return count
    }

    func runWinograd(_ packed: NNPackedWeights, x: UnsafeMutablePointer<Float>, xs: NNShape, y: UnsafeMutablePointer<Float>,
                     g: Geometry, context: NNRunContext, epilogue: NNChannelEpilogue? = nil, residual: UnsafePointer<Float>? = nil) {
        let post = epilogue ?? self.post
        let m = outputChannels, c = kernelChannels, n = g.outH * g.outW
        var conv = convGeometry(g, xs: xs)
        let two = packed.winogradTile == 2
        let v = NNPackedGemm.aligned(context.scratch)
        let work = NNPackedGemm.aligned(v + Int(Swift.max(cg_winograd_input_count(&conv), cg_winograd2_input_count(&conv))))
        let perWorker = Int(Swift.max(cg_winograd_workspace_count(&conv), cg_winograd2_workspace_count(&conv)))
        let units = two ? cg_winograd2_units(&conv, m) : cg_winograd_units(&conv, m)
        let workers = NNPackedGemm.workers(context, items: units)
        let share = (units + workers - 1) / workers
        // The kernels pool as they finish when nothing is left to apply between the epilogue and
        // the pooling (no step of the layer's own after them, no residual, no outside epilogue).
        let pool: Int32 = pooled && !post.needsPass && epilogue == nil && residual == nil ? 1 : 0
        let convOut: UnsafeMutablePointer<Float>? = pooled && pool == 0 ? NNPackedGemm.aligned(work + NNThreads.cores * perWorker) : nil
        let pw = g.outW / 2, pooledPlane = (g.outH / 2) * pw
        for image in 0..<xs.images {
            let xi = x + image * xs.chw
            let yi = y + image * m * (pooled ? pooledPlane : n)
            let target = convOut ?? yi
            let transformers = Swift.min(workers, c), perChannels = (c + transformers - 1) / transformers
            NNGemm.run(workers: transformers) { worker in
                let c0 = worker * perChannels, c1 = Swift.min(c, c0 + perChannels)
                guard c0 < c1 else { return }
                if two {
                    cg_winograd2_input(&conv, xi, c0, c1, v, work + worker * perWorker)
                } else {
                    cg_winograd_input(&conv, xi, c0, c1, v, work + worker * perWorker)
                }
            }
            NNGemm.run(workers: workers) { worker in
                let u0 = Swift.min(units, worker * share), u1 = Swift.min(units, u0 + share)
                guard u0 < u1 else { return }
                post.withGemmEpilogue(perColumn: true, offset: 0, residual: residual.map { $0 + image * m * n }) { epilogue in
                    if two {
                        cg_winograd2_conv(&conv, v, packed.data, m, u0, u1, target, epilogue, pool, work + worker * perWorker)
                    } else {
                        cg_winograd_conv(&conv, v, packed.data, m, u0, u1, target, epilogue, pool, work + worker * perWorker)
                    }
                }
            }
            if post.needsPass {
                for ch in 0..<m { post.apply(target + ch * n, count: n, channel: ch) }
            }
            if let convOut {
                Self.pool(convOut, channels: m, rows: g.outH / 2, convW: g.outW, planeStride: n, into: yi, pooledW: pw, pooledPlane: pooledPlane)
            }
        }
    }
}
