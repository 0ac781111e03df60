import CCortadoGemm
import Dispatch

/// 2-D convolutions on the neural-network kind's direct kernel (`cg_direct_conv`, AVX-512 or AVX2):
/// output channels along the vector lanes, the input read from a zero-padded copy, no im2col
/// written; the bias and a following ReLU folded into the kernel's epilogue. Taken for one
/// group at horizontal stride 1 or 2 on the vector kernel paths (not `portable`); depthwise 3×3
/// ones (`runDepthwise`) on the depthwise kernel; other convolutions run as
/// im2col + GEMM (`MILConvolutionOps`). A residual the planner folded in (`MILFusion`) is added
/// in the direct kernel's epilogue, before the ReLU; the depthwise and GEMM paths add it after
/// (`finish`).
enum MILDirectConvolution {
    /// Weights packed as the kernel reads them, 64-byte aligned.
    final class PackedWeights: @unchecked Sendable {
        let data: UnsafeMutablePointer<Float>
        init(_ w: [Float], m: Int, k: Int) {
            let count = Int(cg_direct_weights_count(m, k))
            data = UnsafeMutablePointer<Float>.allocate(capacity: count + 16)
            data.initialize(repeating: 0, count: count + 16)
            w.withUnsafeBufferPointer { cg_direct_pack($0.baseAddress!, m, k, Self.aligned(data)) }
        }
        var aligned: UnsafeMutablePointer<Float> { Self.aligned(data) }
        static func aligned(_ p: UnsafeMutablePointer<Float>) -> UnsafeMutablePointer<Float> {
            UnsafeMutablePointer(bitPattern: (Int(bitPattern: p) + 63) & ~63)!
        }
        deinit { data.deallocate() }
    }

    static let available = cg_available() != 0

    /// The output, or nil when this convolution is not one the kernel takes.
    /// `residual` (laid out as the output) is added before the ReLU.
    static func run(_ call: MILOpCall, x: MILTensor, w: MILTensor, g: MILWindowGeometry, groups: Int, relu: Bool,
                    residual: [Float]? = nil) throws -> [Float]? {
        guard available, g.rank == 2, x.rank == 4 else { return nil }
        if groups != 1 {
            guard var out = try runDepthwise(call, x: x, w: w, g: g, groups: groups, relu: relu && residual == nil) else { return nil }
            finish(&out, residual: residual, relu: relu)
            return out
        }
        let n = x.shape[0], cin = x.shape[1], m = w.shape[0]
        var conv = cg_conv(channels: cin, h: g.input[1], w: g.input[2], kh: g.kernel[1], kw: g.kernel[2], sh: g.strides[1], sw: g.strides[2],
                           dh: g.dilations[1], dw: g.dilations[2], pad_h: g.padBefore[1], pad_w: g.padBefore[2],
                           out_h: g.output[1], out_w: g.output[2])
        guard cg_direct_supported(&conv) != 0, g.output[1] > 0, g.output[2] > 0 else { return nil }
        let k = cin * g.kernel[1] * g.kernel[2]
        let packed = call.isConstant("weight") ? call.step.cache.value { PackedWeights(w.floats, m: m, k: k) } : PackedWeights(w.floats, m: m, k: k)
        var bias: [Float]?
        if let b = try call.optionalTensor("bias") {
            bias = b.floats
            guard bias!.count == m else { throw call.error("bias has \(bias!.count) values for \(m) output channels") }
        }
        let plane = g.output[1] * g.output[2]
        var out = [Float](repeating: 0, count: n * m * plane)
        let paddedCount = Int(cg_conv_padded_count(&conv))
        let perWorker = Int(cg_direct_workspace_count(&conv, 0))
        let units = cg_direct_units(&conv, m, 0)
        let workers = Swift.max(1, Swift.min(call.threads, units))
        let share = (units + workers - 1) / workers
        let scratch = UnsafeMutablePointer<Float>.allocate(capacity: paddedCount + 16 + workers * (perWorker + 16))
        defer { scratch.deallocate() }
        let padded = PackedWeights.aligned(scratch)
        let work = PackedWeights.aligned(padded + paddedCount)
        let xv = x.floats, skip = residual ?? []
        xv.withUnsafeBufferPointer { xp in
            out.withUnsafeMutableBufferPointer { op in
                skip.withUnsafeBufferPointer { rp in
                    for image in 0..<n {
                        let imageResidual = residual == nil ? nil : rp.baseAddress! + image * m * plane
                        withEpilogue(bias, relu: relu, residual: imageResidual) { epilogue in
                            cg_conv_pad(&conv, xp.baseAddress! + image * cin * g.input[1] * g.input[2], 0, cin, padded)
                            let shared = Shared(conv: conv, padded: padded, weights: packed.aligned, y: op.baseAddress! + image * m * plane,
                                                work: work, epilogue: epilogue)
                            let body: @Sendable (Int) -> Void = { worker in
                                let u0 = Swift.min(units, worker * share), u1 = Swift.min(units, u0 + share)
                                guard u0 < u1 else { return }
                                var c = shared.conv
                                cg_direct_conv(&c, shared.padded, shared.weights, m, u0, u1, shared.y, shared.epilogue, 0,
                                               PackedWeights.aligned(shared.work + worker * (perWorker + 16)))
                            }
                            if workers == 1 { body(0) } else { DispatchQueue.concurrentPerform(iterations: workers, execute: body) }
                        }
                    }
                }
            }
        }
        return out
    }

    /// Adds a folded residual and applies a folded ReLU on paths whose kernel did neither.
    static func finish(_ out: inout [Float], residual: [Float]?, relu: Bool) {
        if let residual {
            out.withUnsafeMutableBufferPointer { op in
                residual.withUnsafeBufferPointer { rp in
                    if relu {
                        for i in 0..<op.count { op[i] = Swift.max(op[i] + rp[i], 0) }
                    } else {
                        for i in 0..<op.count { op[i] += rp[i] }
                    }
                }
            }
        } else if relu {
            for i in out.indices { out[i] = Swift.max(out[i], 0) }
        }
    }

    /// A depthwise 3×3 convolution (groups = input = output channels, dilation 1, strides 1 or
    /// 2) on `cg_depthwise3x3`, the bias and ReLU in its epilogue; nil for other grouped ones.
    static func runDepthwise(_ call: MILOpCall, x: MILTensor, w: MILTensor, g: MILWindowGeometry, groups: Int, relu: Bool) throws -> [Float]? {
        let n = x.shape[0], channels = x.shape[1]
        guard groups == channels, w.rank == 4, w.shape[0] == channels, w.shape[1] == 1 else { return nil }
        var conv = cg_conv(channels: channels, h: g.input[1], w: g.input[2], kh: g.kernel[1], kw: g.kernel[2], sh: g.strides[1],
                           sw: g.strides[2], dh: g.dilations[1], dw: g.dilations[2], pad_h: g.padBefore[1], pad_w: g.padBefore[2],
                           out_h: g.output[1], out_w: g.output[2])
        guard cg_depthwise_supported(&conv) != 0, g.output[1] > 0, g.output[2] > 0 else { return nil }
        var bias: [Float]?
        if let b = try call.optionalTensor("bias") {
            bias = b.floats
            guard bias!.count == channels else { throw call.error("bias has \(bias!.count) values for \(channels) output channels") }
        }
        let plane = g.output[1] * g.output[2], inPlane = g.input[1] * g.input[2]
        var out = [Float](repeating: 0, count: n * channels * plane)
        let perWorker = Int(cg_depthwise_workspace_count(&conv))
        let workers = Swift.max(1, Swift.min(call.threads, channels))
        let share = (channels + workers - 1) / workers
        let scratch = UnsafeMutablePointer<Float>.allocate(capacity: workers * perWorker)
        defer { scratch.deallocate() }
        let xv = x.floats, wv = w.floats
        xv.withUnsafeBufferPointer { xp in
            wv.withUnsafeBufferPointer { wp in
                out.withUnsafeMutableBufferPointer { op in
                    withEpilogue(bias, relu: relu) { epilogue in
                        for image in 0..<n {
                            let shared = DepthwiseShared(conv: conv, x: xp.baseAddress! + image * channels * inPlane, w: wp.baseAddress!,
                                                         y: op.baseAddress! + image * channels * plane, work: scratch, epilogue: epilogue)
                            let body: @Sendable (Int) -> Void = { worker in
                                let c0 = Swift.min(channels, worker * share), c1 = Swift.min(channels, c0 + share)
                                guard c0 < c1 else { return }
                                var c = shared.conv
                                cg_depthwise3x3(&c, shared.x, shared.w, c0, c1, shared.y, shared.epilogue, shared.work + worker * perWorker)
                            }
                            if workers == 1 { body(0) } else { DispatchQueue.concurrentPerform(iterations: workers, execute: body) }
                        }
                    }
                }
            }
        }
        return out
    }

    /// What the workers of one image share in a depthwise convolution (each writes its channels).
    private struct DepthwiseShared: @unchecked Sendable {
        let conv: cg_conv
        let x: UnsafePointer<Float>
        let w: UnsafePointer<Float>
        let y: UnsafeMutablePointer<Float>
        let work: UnsafeMutablePointer<Float>
        let epilogue: UnsafePointer<cg_epilogue>?
    }

    /// The epilogue (bias as the per-channel shift, then the residual, then ReLU), or nil when
    /// there is nothing to do. Only `cg_direct_conv` reads a residual.
    static func withEpilogue<R>(_ bias: [Float]?, relu: Bool, residual: UnsafePointer<Float>? = nil,
                                _ body: (UnsafePointer<cg_epilogue>?) throws -> R) rethrows -> R {
        guard bias != nil || relu || residual != nil else { return try body(nil) }
        let activation = relu ? CG_ACT_RELU : CG_ACT_NONE
        if let bias {
            return try bias.withUnsafeBufferPointer { bp in
                var e = cg_epilogue(scale: nil, shift: bp.baseAddress, per_column: 0, activation: activation, alpha: 0, residual: residual)
                return try withUnsafePointer(to: &e) { try body($0) }
            }
        }
        var e = cg_epilogue(scale: nil, shift: nil, per_column: 0, activation: activation, alpha: 0, residual: residual)
        return try withUnsafePointer(to: &e) { try body($0) }
    }

    /// What the workers of one image share (each writes its own units of the output).
    private struct Shared: @unchecked Sendable {
        let conv: cg_conv
        let padded: UnsafeMutablePointer<Float>
        let weights: UnsafeMutablePointer<Float>
        let y: UnsafeMutablePointer<Float>
        let work: UnsafeMutablePointer<Float>
        let epilogue: UnsafePointer<cg_epilogue>?
    }
}
