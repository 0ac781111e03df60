import CCortadoGemm
import Foundation

/// A direct convolution with the output channels along the vector lanes (`cortado_direct.h`).
///
/// The packed GEMM puts output pixels along the lanes: a 13×13 output's 169 pixels fill 176
/// lanes, and every call packs the im2col matrix (6.5 MB for a 1024-channel 3×3 layer). Here
/// the weights are packed at load in blocks of 16 output channels, the input is copied once
/// with its zero border (`cg_conv_pad`; read as it is when there is no border), and a register
/// tile of 2 blocks × up to 14 pixels of one output row broadcasts input values straight from
/// that copy. Each unit of work (a pair
/// of channel blocks × a band of output rows) finishes its own output: the epilogue per lane
/// (bias, batch norm, ReLU or leaky ReLU), a transpose to the planar layout in registers, and
/// the folded 2×2 max pooling. Workers split the units (the channel pairs of a small image).
///
/// Which layers take it is decided at load, from the layer alone (the image size is not known
/// then); `CORTADO_CONV=gemm` or `direct` overrides the rule (to compare the two).
extension ConvolutionLayer {
    /// `CORTADO_CONV`: nil (the rule), or forced to the direct kernel (true) or the GEMM (false).
    static let forcedDirect: Bool? = {
        switch ProcessInfo.processInfo.environment["CORTADO_CONV"]?.lowercased() {
        case "direct"?: return true
        case "gemm"?: return false
        default: return nil
        }
    }()

    /// Whether an ungrouped convolution on the packed GEMM's CPUs takes the direct kernel:
    /// horizontal stride 1 or 2, and more than one block of output channels that fill at least
    /// 3/4 of their lanes (24, 32, 40, 125, … but not 16 or 20). Measured on this machine
    /// (bench/README.md, Tiny YOLO layer by layer): from 16→32 channels at 208×208 to
    /// 1024→1024 at 13×13 the direct kernel is as fast or 10–14 % faster; with one block (3→16
    /// at 416×416) it loads a weight vector per 14 FMAs or fewer and was 10 % slower on two
    /// threads than the GEMM reading its input in place. A 1×1 stride-1 layer of one block (16
    /// or fewer filters) takes it too: it reads a planar input in place as the GEMM does, and a
    /// blocked one on the pointwise tiles. Measured (`cortado report`, one thread, AVX-512):
    /// 96→16 at 32×32 level with the GEMM from a planar input and 2× faster from the detector's
    /// blocked one; 64→8 at 64×64 1.25× and 256→16 at 13×13 2× faster from planar inputs.
    static func takesDirect(outputChannels: Int, sw: Int, kh: Int, kw: Int) -> Bool {
        guard sw == 1 || sw == 2 else { return false }
        let pointwise = kh == 1 && kw == 1 && sw == 1 && outputChannels <= 16
        return forcedDirect ?? (pointwise || outputChannels > 16 && outputChannels * 4 >= NNPackedGemm.roundUp(outputChannels, 16) * 3)
    }

    /// Whether the input can be read as it is: the padded copy would be the same array (no
    /// padding, and no row or column past the input is read).
    private func readsInputInPlace(_ conv: inout cg_conv) -> Bool {
        var hp = 0, wp = 0
        cg_conv_padded_size(&conv, &hp, &wp)
        return conv.pad_h == 0 && conv.pad_w == 0 && hp == conv.h && wp == conv.w
    }

    /// Whether the folded pooling runs inside the kernel (not when steps remain for a pass of
    /// their own after it).
    private var poolsInKernel: Bool { pooled && !post.needsPass }

    /// The padded input, one workspace per worker, and (pooling after a pass) the whole
    /// convolution output.
    func directScratch(g: Geometry, xs: NNShape) -> Int {
        var conv = convGeometry(g, xs: xs)
        var count = Int(cg_conv_padded_count(&conv)) + 16
        count += NNThreads.cores * Int(cg_direct_workspace_count(&conv, poolsInKernel ? 1 : 0))
        if pooled && !poolsInKernel { count += outputChannels * g.outH * g.outW + 16 }
        return count
    }

    /// The convolution with a residual add (input 1) folded in: in the kernel when the
    /// residual and the output have the convolution's shape; else (the add broadcasts) the
    /// convolution to scratch with the steps before the add, then the add and the activation.
    func runResidual(_ packed: NNPackedWeights, inputs: [NNTensor], output: NNTensor, g: Geometry, context: NNRunContext) {
        let xs = inputs[0].shape, rs = inputs[1].shape, out = output.shape
        let convOut = NNShape(s: xs.s, b: xs.b, c: outputChannels, h: g.outH, w: g.outW)
        let x = context.pointer(inputs[0]), r = context.pointer(inputs[1]), y = context.pointer(output)
        // (Compared as [S, B, C, H, W]: in a network of rank-4 tensors the plan gives the output
        // and the residual rank 4, `convOut` is rank 5; the layout is the same.)
        if convOut.dims == out.dims && rs.dims == out.dims {
            if packed.role == .winograd {
                runWinograd(packed, x: x, xs: xs, y: y, g: g, context: context, residual: UnsafePointer(r))
            } else {
                runDirect(packed, x: x, xs: xs, y: y, g: g, context: context, residual: UnsafePointer(r))
            }
            return
        }
        let (head, activation) = post.residualSplit
        if packed.role == .winograd {
            let temp = NNPackedGemm.aligned(context.scratch + winogradScratch(g: g, xs: xs))
            runWinograd(packed, x: x, xs: xs, y: temp, g: g, context: context, epilogue: head)
            CombineLayer.combine(.copy, y, out, temp, convOut, context)
        } else {
            let temp = NNPackedGemm.aligned(context.scratch + directScratch(g: g, xs: xs))
            runDirect(packed, x: x, xs: xs, y: temp, g: g, context: context, epilogue: head)
            CombineLayer.combine(.copy, y, out, temp, convOut, context)
        }
        CombineLayer.combine(.add, y, out, r, rs, context)
        activation?.apply(y, count: out.count, channel: 0)
    }

    func runDirect(_ packed: NNPackedWeights, x: UnsafeMutablePointer<Float>, xs: NNShape, y: UnsafeMutablePointer<Float>,
                   g: Geometry, context: NNRunContext, epilogue: NNChannelEpilogue? = nil, residual: UnsafePointer<Float>? = nil) {
        let post = epilogue ?? self.post
        let m = outputChannels, n = g.outH * g.outW
        var conv = convGeometry(g, xs: xs)
        let pool: Int32 = poolsInKernel ? 1 : 0
        let padded = NNPackedGemm.aligned(context.scratch)
        let work = padded + Int(cg_conv_padded_count(&conv))
        let perWorker = Int(cg_direct_workspace_count(&conv, pool))
        let units = cg_direct_units(&conv, m, pool)
        let workers = NNPackedGemm.workers(context, items: units)
        let share = (units + workers - 1) / workers
        // Pooling after a pass of the remaining steps: the convolution goes to scratch first.
        let convOut: UnsafeMutablePointer<Float>? = pooled && pool == 0 ? NNPackedGemm.aligned(work + NNThreads.cores * perWorker) : nil
        let pw = g.outW / 2, pooledPlane = (g.outH / 2) * pw
        // (The kernel reads no lane past a row's last pixel, so an unpadded input needs no copy.)
        let inPlace = readsInputInPlace(&conv)
        for image in 0..<xs.images {
            let xi = x + image * xs.chw
            let yi = y + image * m * (pooled ? pooledPlane : n)
            let target = convOut ?? yi
            let input: UnsafePointer<Float>
            if inPlace {
                input = UnsafePointer(xi)
            } else {
                padInput(&conv, xi, into: padded, workers: workers)
                input = UnsafePointer(padded)
            }
            NNGemm.run(workers: workers) { worker in
                let u0 = Swift.min(units, worker * share), u1 = Swift.min(units, u0 + share)
                guard u0 < u1 else { return }
                post.withGemmEpilogue(perColumn: true, offset: 0, residual: residual.map { $0 + image * m * n }) { epilogue in
                    cg_direct_conv(&conv, input, packed.data, m, u0, u1, target, epilogue, pool, work + worker * perWorker)
                }
            }
            if post.needsPass {
                for c in 0..<m { post.apply(target + c * n, count: n, channel: c) }
            }
            if let convOut {
                Self.pool(convOut, channels: m, rows: g.outH / 2, convW: g.outW, planeStride: n, into: yi, pooledW: pw, pooledPlane: pooledPlane)
            }
        }
    }
}
