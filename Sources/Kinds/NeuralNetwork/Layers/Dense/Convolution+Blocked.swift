import CCortadoGemm

/// Convolutions in the channel-blocked layout (`cortado_blocked.h`, `NNBlockedLayout`): a
/// layer on the direct kernel reads a blocked input (when it needs no padded copy: a 1×1
/// convolution, say) and writes a blocked output (its folded residual read in either layout), and
/// a depthwise 3×3 runs from blocked to blocked, vectorised across 16 channels instead of
/// along a row. Neither transposes its output back to planar; the plan reorders a blob to
/// planar only where a layer that does not take it reads it. Layers whose folded steps need a
/// pass of their own, pooled layers and layers on the GEMM or Winograd keep the planar layout.
extension ConvolutionLayer: NNBlockedLayoutLayer {
    /// Whether a kernel of the blocked layout runs this layer for these inputs at all.
    private func takesBlocked(_ inputs: [NNShape]) -> Bool {
        guard NNPackedGemm.enabled, cg_blocked_available() != 0, !deconvolution, !pooled, !post.needsPass,
              let x = inputs.first, let g = try? geometry(h: x.h, w: x.w) else { return false }
        if depthwise { return !residual }
        if ruleAlgorithm != nil { chooseAlgorithm(inputs) }
        guard packed?.role == .direct else { return false }
        // A residual of the output's own shape only (one that broadcasts takes another path),
        // of any rank (a rank-4 tensor's view is the same).
        return !residual || (inputs.count == 2 && inputs[1].dims == NNShape(s: x.s, b: x.b, c: outputChannels, h: g.outH, w: g.outW).dims)
    }

    private func readsBlockedInput(_ x: NNShape) -> Bool {
        guard let g = try? geometry(h: x.h, w: x.w) else { return false }
        var conv = convGeometry(g, xs: x)
        return cg_blocked_direct_reads(&conv) != 0
    }

    func mayReadBlocked(_ index: Int, _ inputs: [NNShape]) -> Bool {
        guard takesBlocked(inputs) else { return false }
        if depthwise { return index == 0 }
        return index == 0 ? readsBlockedInput(inputs[0]) : index == 1
    }

    func blockedLayout(_ inputs: [NNShape], blocked: [Bool], outputWanted: Bool) -> (inputs: [Bool], output: Bool) {
        let none = (inputs: inputs.map { _ in false }, output: false)
        guard takesBlocked(inputs) else { return none }
        if depthwise {
            guard blocked[0] && outputWanted else { return none }
            packBlockedDepthwise()
            return ([true], true)
        }
        // (The residual is read in its own layout, whatever the output's.)
        var reads = [blocked[0] && readsBlockedInput(inputs[0])]
        if residual { reads.append(blocked[1]) }
        if !reads[0] && outputWanted && runsStem(inputs[0]) { blockedStem = true }
        return (reads, outputWanted)
    }

    /// Whether the stem kernel (`cg_blocked_stem`: few input channels, 3×3 stride 2) runs this
    /// layer from a planar input into a blocked output.
    private func runsStem(_ x: NNShape) -> Bool {
        guard !residual, let g = try? geometry(h: x.h, w: x.w) else { return false }
        var conv = convGeometry(g, xs: x)
        return cg_blocked_stem_takes(&conv) != 0
    }

    /// A network input read only by a stem written blocked stays where the request holds it:
    /// the stem kernel reads its planar input in place, with no padded copy. (Every other
    /// kernel here reads the blob.)
    func readsRows(_ input: NNShape) -> Bool { false }
    func readsRows(_ input: NNShape, outputs: [NNTensor]) -> Bool {
        !depthwise && outputs.first?.blocked == true && runsStem(input)
    }

    /// The depthwise weights as the blocked kernel reads them (`cg_blocked_depthwise_pack`),
    /// made once, when a plan first runs this layer blocked.
    private func packBlockedDepthwise() {
        choiceLock.lock()
        defer { choiceLock.unlock() }
        guard blockedDepthwiseWeights == nil else { return }
        var packed = [Float](repeating: 0, count: Int(cg_blocked_depthwise_weights_count(outputChannels)))
        weights.withUnsafeBufferPointer { w in
            packed.withUnsafeMutableBufferPointer { cg_blocked_depthwise_pack(w.baseAddress!, outputChannels, $0.baseAddress!) }
        }
        blockedDepthwiseWeights = packed
    }

    /// Scratch of a blocked run: the padded planar input (when it needs one) and one sums
    /// buffer per worker.
    func blockedScratch(_ inputs: [NNShape]) -> Int {
        guard !depthwise, let x = inputs.first, takesBlocked(inputs), let g = try? geometry(h: x.h, w: x.w) else { return 0 }
        var conv = convGeometry(g, xs: x)
        return Int(cg_conv_padded_count(&conv)) + 16 + NNThreads.cores * (Int(cg_blocked_direct_workspace_count(&conv)) + 16)
    }

    /// Units [0, units) of each image shared out among the workers: `body(image, u0, u1,
    /// epilogue)` with the layer's epilogue (no residual).
    private func eachShare(_ units: Int, images: Int, context: NNRunContext,
                           _ body: (Int, Int, Int, UnsafePointer<cg_epilogue>?) -> Void) {
        let workers = NNPackedGemm.workers(context, items: units)
        for image in 0..<images {
            NNThreads.claim(units: units, slots: workers) { u0, u1, _ in
                post.withGemmEpilogue(perColumn: true, offset: 0) { body(image, u0, u1, $0) }
            }
        }
    }

    func runBlocked(inputs: [NNTensor], output: NNTensor, g: Geometry, context: NNRunContext) {
        let xs = inputs[0].shape, images = Swift.max(1, xs.images)
        let x = context.pointer(inputs[0]), y = context.pointer(output)
        let xStride = inputs[0].floats / images, yStride = output.floats / images
        let xBlocked: Int32 = inputs[0].blocked ? 1 : 0, yBlocked: Int32 = output.blocked ? 1 : 0
        if depthwise {
            var conv = cg_conv(channels: outputChannels, h: xs.h, w: xs.w, kh: kh, kw: kw, sh: sh, sw: sw, dh: dh, dw: dw,
                               pad_h: g.offH, pad_w: g.offW, out_h: g.outH, out_w: g.outW)
            let units = cg_blocked_depthwise_units(&conv)
            blockedDepthwiseWeights!.withUnsafeBufferPointer { wbuf in
                let w = wbuf.baseAddress!
                eachShare(units, images: xs.images, context: context) { image, u0, u1, epilogue in
                    cg_blocked_depthwise3x3(&conv, x + image * xStride, w, u0, u1, y + image * yStride, epilogue)
                }
            }
            return
        }
        let packed = self.packed!, m = outputChannels
        var conv = convGeometry(g, xs: xs)
        if xBlocked == 0 && yBlocked == 1 && runsStem(xs) {
            // Images in the requests' rows (`readsRows`), a row holding one or more of them.
            let given = context.inputRows
            let perRow = given.map { Swift.max(1, $0.floats / xStride) } ?? 1
            eachShare(cg_blocked_stem_units(&conv), images: xs.images, context: context) { image, u0, u1, epilogue in
                let xi = given.map { $0.pointers[image / perRow] + (image % perRow) * xStride } ?? UnsafePointer(x + image * xStride)
                cg_blocked_stem(&conv, xi, packed.data, m, u0, u1, y + image * yStride, epilogue)
            }
            return
        }
        let units = cg_blocked_direct_units(&conv, m)
        let workers = NNPackedGemm.workers(context, items: units)
        let padded = NNPackedGemm.aligned(context.scratch)
        let work = NNPackedGemm.aligned(padded + Int(cg_conv_padded_count(&conv)) + 16)
        let perWorker = Int(cg_blocked_direct_workspace_count(&conv)) + 16
        // (A planar input that needs no border is read as it is.)
        let asItIs = xBlocked == 1 || cg_blocked_direct_reads(&conv) != 0
        let residual: NNTensor? = self.residual ? inputs[1] : nil
        let rBlocked: Int32 = residual?.blocked == true ? 1 : 0
        for image in 0..<xs.images {
            let xi = x + image * xStride, yi = y + image * yStride
            let input: UnsafePointer<Float>
            if asItIs {
                input = UnsafePointer(xi)
            } else {
                padInput(&conv, xi, into: padded, workers: workers)
                input = UnsafePointer(padded)
            }
            let r = residual.map { UnsafePointer(context.pointer($0) + image * ($0.floats / images)) }
            NNThreads.claim(units: units, slots: workers) { u0, u1, slot in
                post.withGemmEpilogue(perColumn: true, offset: 0, residual: r) { epilogue in
                    cg_blocked_direct_conv(&conv, input, xBlocked, packed.data, m, u0, u1, yi, yBlocked, epilogue, rBlocked,
                                           NNPackedGemm.aligned(work + slot * perWorker))
                }
            }
        }
    }
}

extension ConvolutionLayer: NNBlockedFusing {
    /// A blocked depthwise 3×3 and a 1×1 stride-1 unpadded convolution on the direct kernel
    /// reading its output (`NNBlockedSeparable`).
    func fusedBlocked(with reader: any NNLayer, _ inputs: [NNShape], _ readerInputs: [NNShape]) -> (any NNLayer)? {
        guard depthwise, !residual, blockedDepthwiseWeights != nil, let pointwise = reader as? ConvolutionLayer, pointwise !== self,
              pointwise.kh == 1, pointwise.kw == 1, pointwise.sh == 1, pointwise.sw == 1, !pointwise.depthwise,
              let mid = readerInputs.first, pointwise.mayReadBlocked(0, readerInputs), pointwise.packed?.role == .direct,
              let g = try? pointwise.geometry(h: mid.h, w: mid.w), g.outH == mid.h, g.outW == mid.w, g.offH == 0, g.offW == 0
        else { return nil }
        return NNBlockedSeparable(depthwise: self, pointwise: pointwise)
    }
}

/// A depthwise 3×3 and the 1×1 convolution after it as one step (`cg_blocked_separable`): each
/// band of rows of the depthwise output is made in the workspace and multiplied while it is in
/// cache, so the blob between them (as large as the block's input) is never written or read
/// back. Both layers' folded steps apply, and the 1×1 layer's residual add.
final class NNBlockedSeparable: NNLayer, @unchecked Sendable {
    let first: ConvolutionLayer, second: ConvolutionLayer

    init(depthwise: ConvolutionLayer, pointwise: ConvolutionLayer) {
        first = depthwise
        second = pointwise
    }

    private func middle(_ x: NNShape) throws -> NNShape { try first.outputShapes([x])[0] }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        try second.outputShapes([try middle(inputs[0])] + inputs.dropFirst())
    }

    private func geometries(_ x: NNShape) -> (cg_conv, cg_conv) {
        let g = try! first.geometry(h: x.h, w: x.w)
        let d = cg_conv(channels: first.outputChannels, h: x.h, w: x.w, kh: first.kh, kw: first.kw, sh: first.sh, sw: first.sw,
                        dh: first.dh, dw: first.dw, pad_h: g.offH, pad_w: g.offW, out_h: g.outH, out_w: g.outW)
        let mid = NNShape(s: x.s, b: x.b, c: first.outputChannels, h: g.outH, w: g.outW)
        return (d, second.convGeometry(try! second.geometry(h: g.outH, w: g.outW), xs: mid))
    }

    func scratchCount(_ inputs: [NNShape]) -> Int {
        var (d, _) = geometries(inputs[0])
        return NNThreads.cores * (Int(cg_blocked_separable_workspace_count(&d)) + 32)
    }

    var timingNote: String { "depthwise + 1×1" }
    var detail: String { "\(first.detail); then \(second.detail)" }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let xs = inputs[0].shape, images = Swift.max(1, xs.images), output = outputs[0]
        var (d, p) = geometries(xs)
        let x = context.pointer(inputs[0]), y = context.pointer(output)
        let xStride = inputs[0].floats / images, yStride = output.floats / images
        let units = cg_blocked_separable_units(&d)
        let workers = NNPackedGemm.workers(context, items: units)
        let perWorker = Int(cg_blocked_separable_workspace_count(&d)) + 32
        let m = second.outputChannels, weights = second.packed!.data, yBlocked: Int32 = output.blocked ? 1 : 0
        let residual: NNTensor? = second.residual ? inputs[1] : nil
        let rBlocked: Int32 = residual?.blocked == true ? 1 : 0
        first.blockedDepthwiseWeights!.withUnsafeBufferPointer { wbuf in
            let wd = wbuf.baseAddress!
            for image in 0..<xs.images {
                let xi = x + image * xStride, yi = y + image * yStride
                let r = residual.map { UnsafePointer(context.pointer($0) + image * ($0.floats / images)) }
                NNThreads.claim(units: units, slots: workers) { u0, u1, slot in
                    first.post.withGemmEpilogue(perColumn: true, offset: 0) { ed in
                        second.post.withGemmEpilogue(perColumn: true, offset: 0, residual: r) { ep in
                            cg_blocked_separable(&d, xi, wd, ed, &p, weights, m, u0, u1, yi, yBlocked, ep, rBlocked,
                                                 NNPackedGemm.aligned(context.scratch + slot * perWorker))
                        }
                    }
                }
            }
        }
    }
}
