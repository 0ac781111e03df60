import CCortadoGemm

/// Depthwise 3×3 convolutions (one filter per channel: groups = input = output channels) on
/// Cortado's depthwise kernel (`cortado_depthwise.h`): each channel's rows computed along the
/// row on the NCHW layout, the folded bias, batch norm and ReLU / leaky ReLU applied while a row
/// is in cache. The grouped path would run one tiny im2col + GEMM per channel. Workers split
/// the channels.
extension ConvolutionLayer {
    /// Whether a layer takes the depthwise kernel: a vector kernel path, a 3×3 depthwise
    /// convolution (multiplier 1), dilation 1, strides 1 or 2.
    static func takesDepthwise(groups: Int, kernelChannels: Int, outputChannels: Int, kh: Int, kw: Int, sh: Int, sw: Int, dh: Int,
                               dw: Int, deconvolution: Bool) -> Bool {
        NNPackedGemm.enabled && !deconvolution && groups > 1 && kernelChannels == 1 && outputChannels == groups && kh == 3 && kw == 3
            && dh == 1 && dw == 1 && (sh == 1 || sh == 2) && (sw == 1 || sw == 2)
    }

    private func depthwiseGeometry(_ g: Geometry, xs: NNShape) -> cg_conv {
        cg_conv(channels: outputChannels, h: xs.h, w: xs.w, kh: kh, kw: kw, sh: sh, sw: sw, dh: dh, dw: dw,
                pad_h: g.offH, pad_w: g.offW, out_h: g.outH, out_w: g.outW)
    }

    /// One padded plane per worker.
    func depthwiseScratch(g: Geometry, xs: NNShape) -> Int {
        var conv = depthwiseGeometry(g, xs: xs)
        return NNThreads.cores * Int(cg_depthwise_workspace_count(&conv))
    }

    func runDepthwise(x: UnsafeMutablePointer<Float>, xs: NNShape, y: UnsafeMutablePointer<Float>, g: Geometry, context: NNRunContext) {
        var conv = depthwiseGeometry(g, xs: xs)
        let channels = outputChannels, n = g.outH * g.outW
        let perWorker = Int(cg_depthwise_workspace_count(&conv))
        let workers = NNGemm.workers(context, items: channels)
        let share = (channels + workers - 1) / workers
        weights.withUnsafeBufferPointer { wbuf in
            let w = wbuf.baseAddress!
            for image in 0..<xs.images {
                let xi = x + image * xs.chw, yi = y + image * channels * n
                NNGemm.run(workers: workers) { worker in
                    let c0 = Swift.min(channels, worker * share), c1 = Swift.min(channels, c0 + share)
                    guard c0 < c1 else { return }
                    post.withGemmEpilogue(perColumn: true, offset: 0) { epilogue in
                        cg_depthwise3x3(&conv, xi, w, c0, c1, yi, epilogue, context.scratch + worker * perWorker)
                    }
                    if post.needsPass {
                        for c in c0..<c1 { post.apply(yi + c * n, count: n, channel: c) }
                    }
                }
            }
        }
    }
}
