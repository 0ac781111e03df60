import CCortadoGemm
import COpenBLAS
import CortadoSpec
import Foundation

/// `ConvolutionLayerParams`: 2-D convolution and deconvolution (transposed convolution) over
/// each `[C, H, W]` image, with groups (depthwise included), stride, dilation, valid padding
/// (explicit border amounts) and same padding (both asymmetry modes).
///
/// Weights stay in the spec's layout, which is already the GEMM's: convolution
/// `[Cout, Cin/groups, kH, kW]`, i.e. one row of `Cin/groups·kH·kW` per output channel;
/// deconvolution `[Cin, Cout/groups, kH, kW]`, i.e. one row of `Cout/groups·kH·kW` per input
/// channel.
/// - Convolution: per image and group `Y[Cout/g, Hout·Wout] = W[Cout/g, K] · col[K, Hout·Wout]`,
///   `col` being the im2col matrix (`K = Cin/g·kH·kW`) built in scratch; a 1×1, stride-1,
///   unpadded convolution multiplies the input directly. Large images are cut into bands of
///   output rows (one band's `col` fits in cache), bands spread over the workers; small images
///   split the output channels over the workers instead.
/// - Deconvolution: `col[Cout/g·kH·kW, Hin·Win] = Wᵀ · X`, then scattered (col2im) into the
///   output, cropped by the padding.
/// Bias and folded steps (batch norm, scale, activation) run per output channel after the GEMM.
///
/// On the vector kernel paths (`NNPackedGemm`) an ungrouped convolution packs its weights once, at load, as
/// the GEMM's left operand and packs the im2col matrix straight from the input image into the
/// right operand's panels (no im2col buffer). Large images go in bands of output columns per
/// worker (each band packed, multiplied and finished while in cache); small ones pack the whole
/// matrix once, the workers sharing the packing, then split the output channels. Folded steps
/// of the forms the GEMM applies (bias or batch norm, then ReLU or leaky ReLU) run on each
/// tile of the output as it is finished. Large images with few output channels read the
/// input in place instead (`Convolution+InPlace.swift`). A 2×2 stride-2 max pooling that reads only this
/// layer's output can be folded in too (`Convolution+Pool.swift`). Most layers (horizontal
/// stride 1 or 2, output channels filling blocks of 16) run a direct convolution with the
/// output channels along the lanes instead (`Convolution+Direct.swift`); there a residual add
/// that reads this layer's output (and the ReLU after it) can be folded in too (`acceptResidual`).
final class ConvolutionLayer: NNLayer, NNEpilogueAccepting, NNPoolAccepting, NNResidualAccepting, NNRowReading, @unchecked Sendable {
    enum Padding {
        case valid(top: Int, bottom: Int, left: Int, right: Int)
        case same(topLeftHeavy: Bool)
    }

    let outputChannels: Int
    /// Convolution: input channels per group; deconvolution: all input channels.
    let kernelChannels: Int
    let groups: Int
    let kh: Int, kw: Int, sh: Int, sw: Int, dh: Int, dw: Int
    let padding: Padding
    let deconvolution: Bool
    let outputSize: (h: Int, w: Int)?
    /// The weights as the spec lays them out (empty when only `packed` is kept).
    let weights: NNFloats
    /// The weights packed for `NNPackedGemm` (ungrouped convolutions, when it is enabled), for
    /// the direct kernel (`Convolution+Direct.swift`) or for Winograd (`Convolution+Winograd.swift`):
    /// nil until the algorithm is chosen (`Convolution+Algorithm.swift`), then set once, before
    /// any run.
    var packed: NNPackedWeights?
    /// The spec's weights, kept only until the algorithm is chosen.
    var unchosenWeights: NNFloats?
    /// The algorithm the fixed rule picks (nil off the packed paths), and the one chosen.
    let ruleAlgorithm: ConvolutionAlgorithm?
    var chosenAlgorithm: ConvolutionAlgorithm?
    /// How the algorithm was chosen, for `detail`.
    var choiceNote = ""
    let choiceLock = NSLock()
    /// Whether the depthwise 3×3 kernel runs it (`Convolution+Depthwise.swift`).
    let depthwise: Bool
    /// Its weights for the blocked layout's kernel (`Convolution+Blocked.swift`), once a plan runs it so.
    var blockedDepthwiseWeights: [Float]?
    /// Whether a plan runs it on the blocked layout's stem kernel (`Convolution+Blocked.swift`), for `timingNote`.
    var blockedStem = false
    let weightForm: String
    private(set) var post: NNChannelEpilogue
    /// A 2×2 stride-2 max pooling (no padding) folded in: the output is the pooled image.
    private(set) var pooled = false
    /// A residual add folded in (`acceptResidual`): input 1 is added to the output.
    private(set) var residual = false

    /// Floats of `col` per band in the banded path (about 256 KB).
    static let bandFloats = 64 * 1024

    init(_ p: CoreML_Specification_ConvolutionLayerParams, inputCount: Int) throws {
        guard inputCount == 1 else { throw NNLayerError("takes one input (weights from a second input are not supported), got \(inputCount)") }
        outputChannels = Int(p.outputChannels)
        kernelChannels = Int(p.kernelChannels)
        groups = p.nGroups == 0 ? 1 : Int(p.nGroups)
        guard outputChannels > 0, kernelChannels > 0 else {
            throw NNLayerError("outputChannels (\(p.outputChannels)) and kernelChannels (\(p.kernelChannels)) must be positive")
        }
        (kh, kw) = try NNWindow.pair(p.kernelSize, 3, "kernelSize")
        (sh, sw) = try NNWindow.pair(p.stride, 1, "stride")
        (dh, dw) = try NNWindow.pair(p.dilationFactor, 1, "dilationFactor")
        deconvolution = p.isDeconvolution
        guard outputChannels % groups == 0 else { throw NNLayerError("outputChannels \(outputChannels) is not a multiple of nGroups \(groups)") }
        if deconvolution, kernelChannels % groups != 0 {
            throw NNLayerError("kernelChannels \(kernelChannels) is not a multiple of nGroups \(groups)")
        }
        switch p.convolutionPaddingType {
        case .same(let s)?:
            padding = .same(topLeftHeavy: s.asymmetryMode == .topLeftHeavy)
        case .valid(let v)?:
            let b = try NNWindow.borders(v.paddingAmounts, what: "valid padding")
            padding = .valid(top: b.top, bottom: b.bottom, left: b.left, right: b.right)
        case nil:
            padding = .valid(top: 0, bottom: 0, left: 0, right: 0)
        }
        if !p.outputShape.isEmpty && deconvolution {
            guard p.outputShape.count == 2, p.outputShape.allSatisfy({ $0 > 0 }) else {
                throw NNLayerError("outputShape must hold two positive values (height, width), got \(p.outputShape)")
            }
            outputSize = (Int(p.outputShape[0]), Int(p.outputShape[1]))
        } else {
            outputSize = nil
        }
        var packNow: ConvolutionAlgorithm? = nil
        let count = deconvolution ? kernelChannels * (outputChannels / groups) * kh * kw : outputChannels * kernelChannels * kh * kw
        let decoded = try NNWeights.values(p.weights, count: count, channels: deconvolution ? kernelChannels : outputChannels, name: "weights")
        weightForm = NNWeights.form(p.weights)
        depthwise = Self.takesDepthwise(groups: groups, kernelChannels: kernelChannels, outputChannels: outputChannels, kh: kh, kw: kw,
                                        sh: sh, sw: sw, dh: dh, dw: dw, deconvolution: deconvolution)
        if NNPackedGemm.enabled && !deconvolution && groups == 1 {
            // Only a packed copy is kept: the rule's, or the one chosen when the first plan is
            // made (`chooseAlgorithm`).
            let rule: ConvolutionAlgorithm = Self.takesDirect(outputChannels: outputChannels, sw: sw, kh: kh, kw: kw) ? .direct : .gemm
            let window = (kh: kh, kw: kw, sh: sh, sw: sw, dh: dh, dw: dw)
            let applicable = ConvolutionAlgorithm.allCases.filter {
                Self.applies($0, kh: window.kh, kw: window.kw, sh: window.sh, sw: window.sw, dh: window.dh, dw: window.dw, residual: false)
            }
            weights = NNFloats([])
            if let forced = ConvolutionAlgorithm.forced, applicable.contains(forced) {
                ruleAlgorithm = forced
            } else {
                ruleAlgorithm = rule
            }
            unchosenWeights = decoded
            // Nothing to measure: packed at the end of init.
            packNow = applicable.count > 1 && ConvolutionAlgorithm.forced == nil ? nil : ruleAlgorithm
        } else {
            ruleAlgorithm = nil
            weights = decoded
        }
        var bias: [Float]?
        if p.hasBias {
            bias = try NNWeights.floats(p.bias, count: outputChannels, name: "bias")
        }
        post = NNChannelEpilogue(channels: outputChannels, bias: bias)
        if let packNow, let raw = unchosenWeights {
            packed = raw.withUnsafeBufferPointer { packWeights($0.baseAddress!, for: packNow) }
            chosenAlgorithm = packNow
            choiceNote = packNow == ConvolutionAlgorithm.forced ? "forced" : "rule"
            unchosenWeights = nil
        }
    }

    func accept(_ op: NNEpilogueOp) -> Bool { !pooled && post.accept(op) }

    /// On the direct kernel's path only (decided at load, from the layer alone), whose blocks
    /// add the residual while they are in cache.
    func acceptResidual() -> Bool {
        guard !residual, !pooled, !deconvolution, ruleAlgorithm == .direct || ruleAlgorithm == .winograd || ruleAlgorithm == .winograd2, post.acceptResidual() else { return false }
        residual = true
        return true
    }

    func acceptPool(_ layer: any NNLayer) -> Bool {
        guard !pooled, !residual, ruleAlgorithm != nil, let pool = layer as? PoolingLayer, pool.isPlainMax2x2 else { return false }
        pooled = true
        return true
    }

    var detail: String {
        var s = "\(deconvolution ? "deconvolution" : "convolution") \(kh)×\(kw) stride \(sh)×\(sw)"
        if dh != 1 || dw != 1 { s += " dilation \(dh)×\(dw)" }
        if groups != 1 { s += " groups \(groups)" }
        if depthwise { s += " (depthwise kernel)" }
        s += ", \(outputChannels) filters, \(weightForm) weights"
        if !post.names.isEmpty { s += ", then " + post.names.joined(separator: ", ") }
        if pooled { s += ", then max pool 2×2 stride 2" }
        if let chosenAlgorithm { s += ", algorithm \(chosenAlgorithm.rawValue) (\(choiceNote))" }
        if blockedStem { s += ", on the stem kernel" }
        return s
    }

    var timingNote: String { blockedStem ? "stem kernel" : chosenAlgorithm?.rawValue ?? "" }

    /// Spatial geometry for one input size: output size and where the kernel window starts
    /// (convolution: padding before the input; deconvolution: rows/columns cropped from the
    /// start of the full transposed output).
    struct Geometry {
        let outH: Int, outW: Int
        let offH: Int, offW: Int
    }

    func geometry(h: Int, w: Int) throws -> Geometry {
        let kdh = (kh - 1) * dh + 1, kdw = (kw - 1) * dw + 1
        if deconvolution {
            let fullH = (h - 1) * sh + kdh, fullW = (w - 1) * sw + kdw
            switch padding {
            case .valid(let top, let bottom, let left, let right):
                let outH = outputSize?.h ?? fullH - top - bottom, outW = outputSize?.w ?? fullW - left - right
                guard outH > 0, outW > 0 else {
                    throw NNLayerError("padding \(top)+\(bottom)×\(left)+\(right) crops the whole \(fullH)×\(fullW) deconvolution output")
                }
                return Geometry(outH: outH, outW: outW, offH: top, offW: left)
            case .same(let topLeftHeavy):
                let outH = outputSize?.h ?? h * sh, outW = outputSize?.w ?? w * sw
                let th = Swift.max(0, fullH - outH), tw = Swift.max(0, fullW - outW)
                return Geometry(outH: outH, outW: outW,
                                offH: NNWindow.before(total: th, topLeftHeavy: topLeftHeavy), offW: NNWindow.before(total: tw, topLeftHeavy: topLeftHeavy))
            }
        }
        switch padding {
        case .valid(let top, let bottom, let left, let right):
            guard h + top + bottom >= kdh, w + left + right >= kdw else {
                throw NNLayerError("the \(kdh)×\(kdw) kernel (dilated) is larger than the padded \(h + top + bottom)×\(w + left + right) input")
            }
            return Geometry(outH: (h + top + bottom - kdh) / sh + 1, outW: (w + left + right - kdw) / sw + 1, offH: top, offW: left)
        case .same(let topLeftHeavy):
            let outH = (h + sh - 1) / sh, outW = (w + sw - 1) / sw
            let th = Swift.max(0, (outH - 1) * sh + kdh - h), tw = Swift.max(0, (outW - 1) * sw + kdw - w)
            return Geometry(outH: outH, outW: outW,
                            offH: NNWindow.before(total: th, topLeftHeavy: topLeftHeavy), offW: NNWindow.before(total: tw, topLeftHeavy: topLeftHeavy))
        }
    }

    /// The indices `o` in `0..<count` with `o * stride + offset` inside `[0, limit)`, as `lo..<hi`.
    @inline(__always) static func inside(count: Int, stride: Int, offset: Int, limit: Int) -> (Int, Int) {
        let lo = Swift.min(count, Swift.max(0, (-offset + stride - 1) / stride))
        let hi = Swift.max(lo, Swift.min(count, (limit - 1 - offset) >= 0 ? (limit - 1 - offset) / stride + 1 : 0))
        return (lo, hi)
    }

    var inputChannels: Int { deconvolution ? kernelChannels : kernelChannels * groups }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        guard inputs.count == (residual ? 2 : 1) else {
            throw NNLayerError(residual ? "takes its input and the residual, got \(inputs.count) inputs" : "takes one input, got \(inputs.count)")
        }
        let out = try convolutionShape(inputs[0])
        guard residual else { return [out] }
        // The add folded in broadcasts as the add layer does.
        return try CombineLayer(.add, inputCount: 2).outputShapes([out, inputs[1]])
    }

    /// The convolution's own output shape (before a folded residual add).
    private func convolutionShape(_ x: NNShape) throws -> NNShape {
        guard x.c == inputChannels else {
            throw NNLayerError("the input has \(x.c) channels; the weights need \(inputChannels) (kernelChannels \(kernelChannels)\(deconvolution ? "" : " × nGroups \(groups)"))")
        }
        let g = try geometry(h: x.h, w: x.w)
        if pooled {
            guard g.outH >= 2, g.outW >= 2 else {
                throw NNLayerError("the folded 2×2 max pooling window is larger than the \(g.outH)×\(g.outW) convolution output")
            }
            return NNShape(s: x.s, b: x.b, c: outputChannels, h: g.outH / 2, w: g.outW / 2)
        }
        return NNShape(s: x.s, b: x.b, c: outputChannels, h: g.outH, w: g.outW)
    }

    /// Whether the input itself is the `col` matrix (1×1, stride 1, no padding).
    private var pointwise: Bool {
        guard !deconvolution, kh == 1, kw == 1, sh == 1, sw == 1 else { return false }
        if case .valid(0, 0, 0, 0) = padding { return true }
        if case .same = padding { return true }
        return false
    }

    /// Rows of the output image per band, or nil to split output channels instead.
    private func bandRows(outH: Int, outW: Int, k: Int) -> Int? {
        guard groups == 1, outH * outW >= 4096 else { return nil }
        return Swift.max(1, Swift.min(outH, Self.bandFloats / Swift.max(1, k) / outW))
    }

    func scratchCount(_ inputs: [NNShape]) -> Int {
        let own = Swift.max(ownScratchCount(inputs), blockedScratch(inputs))
        // A residual that broadcasts: the convolution goes to scratch, then the add.
        guard residual, let convOut = try? convolutionShape(inputs[0]), let outs = try? outputShapes(inputs),
              convOut != outs[0] || inputs[1] != outs[0] else { return own }
        return own + convOut.count + 32
    }

    private func ownScratchCount(_ inputs: [NNShape]) -> Int {
        let x = inputs[0]
        guard let g = try? geometry(h: x.h, w: x.w) else { return 0 }
        if deconvolution {
            return NNGemm.slots * (outputChannels / groups) * kh * kw * x.hw
        }
        let k = kernelChannels * kh * kw, n = g.outH * g.outW
        if depthwise { return depthwiseScratch(g: g, xs: x) }
        if ruleAlgorithm != nil { chooseAlgorithm(inputs) }
        if let packed, packed.role == .direct { return directScratch(g: g, xs: x) }
        if let packed, packed.role == .winograd { return winogradScratch(g: g, xs: x) }
        if pooled { return pooledScratch(k: k, g: g, xs: x) }
        if packed != nil { return inPlace(k: k, g: g) ? inPlaceScratch(k: k, g: g, xs: x) : packedScratch(k: k, n: n) }
        if pointwise && groups == 1 { return 0 }
        if let rows = bandRows(outH: g.outH, outW: g.outW, k: k) { return NNGemm.slots * k * rows * g.outW }
        return (groups == 1 ? 1 : NNGemm.slots) * k * n
    }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let xs = inputs[0].shape, ys = outputs[0].shape
        let g = try! geometry(h: xs.h, w: xs.w)
        if packed == nil && ruleAlgorithm != nil { chooseAlgorithm(inputs.map(\.shape)) } // (plans choose first)
        if inputs.contains(where: \.blocked) || outputs[0].blocked {
            runBlocked(inputs: inputs, output: outputs[0], g: g, context: context)
        } else if deconvolution {
            runDeconvolution(x: context.pointer(inputs[0]), xs: xs, y: context.pointer(outputs[0]), ys: ys, g: g, context: context)
        } else if depthwise {
            runDepthwise(x: context.pointer(inputs[0]), xs: xs, y: context.pointer(outputs[0]), g: g, context: context)
        } else if let packed {
            run(with: packed, inputs: inputs, output: outputs[0], g: g, context: context)
        } else {
            runConvolution(x: context.pointer(inputs[0]), xs: xs, y: context.pointer(outputs[0]), ys: ys, g: g, context: context)
        }
    }

    // MARK: Convolution

    private func runConvolution(x: UnsafeMutablePointer<Float>, xs: NNShape, y: UnsafeMutablePointer<Float>, ys: NNShape,
                                g: Geometry, context: NNRunContext) {
        let k = kernelChannels * kh * kw, n = g.outH * g.outW
        let mg = outputChannels / groups
        weights.withUnsafeBufferPointer { wbuf in
            let w = wbuf.baseAddress!
            if groups == 1, let rows = bandRows(outH: g.outH, outW: g.outW, k: k) {
                // Bands of output rows: each worker builds its band's col in its slot.
                let bands = (g.outH + rows - 1) / rows
                let items = xs.images * bands
                let workers = NNGemm.workers(context, items: items)
                let slot = k * rows * g.outW
                NNGemm.run(workers: workers) { worker in
                    let col = context.scratch + worker * slot
                    var item = worker
                    while item < items {
                        let image = item / bands, band = item % bands
                        let r0 = band * rows, r1 = Swift.min(g.outH, r0 + rows)
                        let cols = (r1 - r0) * g.outW
                        let xi = x + image * xs.chw, yi = y + image * ys.chw + r0 * g.outW
                        if pointwise {
                            NNGemm.gemm(m: outputChannels, n: cols, k: k, a: w, lda: k, b: xi + r0 * g.outW, ldb: n, c: yi, ldc: n)
                        } else {
                            im2col(xi, xs: xs, channels: 0..<kernelChannels, g: g, rows: r0..<r1, into: col)
                            NNGemm.gemm(m: outputChannels, n: cols, k: k, a: w, lda: k, b: col, ldb: cols, c: yi, ldc: n)
                        }
                        if !post.isEmpty {
                            for c in 0..<outputChannels { post.apply(yi + c * n, count: cols, channel: c) }
                        }
                        item += workers
                    }
                }
            } else if groups == 1 {
                // Small images: one col per image, output channels split over the workers.
                let workers = NNGemm.workers(context, items: (outputChannels + 15) / 16)
                let per = (outputChannels + workers - 1) / workers
                for image in 0..<xs.images {
                    let xi = x + image * xs.chw, yi = y + image * ys.chw
                    let col: UnsafeMutablePointer<Float>
                    if pointwise {
                        col = xi
                    } else {
                        col = context.scratch
                        im2col(xi, xs: xs, channels: 0..<kernelChannels, g: g, rows: 0..<g.outH, into: col)
                    }
                    NNGemm.run(workers: workers) { worker in
                        let m0 = worker * per, m1 = Swift.min(outputChannels, m0 + per)
                        guard m0 < m1 else { return }
                        NNGemm.gemm(m: m1 - m0, n: n, k: k, a: w + m0 * k, lda: k, b: col, ldb: n, c: yi + m0 * n, ldc: n)
                        if !post.isEmpty {
                            for c in m0..<m1 { post.apply(yi + c * n, count: n, channel: c) }
                        }
                    }
                }
            } else {
                // Groups: one (image, group) pair per item.
                let items = xs.images * groups
                let workers = NNGemm.workers(context, items: items)
                let slot = k * n
                NNGemm.run(workers: workers) { worker in
                    let col = context.scratch + worker * slot
                    var item = worker
                    while item < items {
                        let image = item / groups, group = item % groups
                        let xi = x + image * xs.chw, yi = y + image * ys.chw + group * mg * n
                        let c0 = group * kernelChannels
                        im2col(xi, xs: xs, channels: c0..<(c0 + kernelChannels), g: g, rows: 0..<g.outH, into: col)
                        NNGemm.gemm(m: mg, n: n, k: k, a: w + group * mg * k, lda: k, b: col, ldb: n, c: yi, ldc: n)
                        if !post.isEmpty {
                            for c in 0..<mg { post.apply(yi + c * n, count: n, channel: group * mg + c) }
                        }
                        item += workers
                    }
                }
            }
        }
    }

    // MARK: Convolution on the packed GEMM

    /// Output columns per band when an image is cut into bands (a multiple of the panel
    /// width, about 256 KB of packed input per band, at least 256 columns), or nil when the
    /// image is small enough to pack whole (fewer than 4 bands' worth of columns).
    func packedBand(k: Int, n: Int) -> Int? {
        let nr = NNPackedGemm.nr
        let band = Swift.max(256, Self.bandFloats / Swift.max(1, k) / nr * nr)
        return n >= 4 * band ? band : nil
    }

    /// One packed input per worker (bands) or one for all; both operands are packed, so the
    /// GEMM needs no workspace of its own.
    func packedScratch(k: Int, n: Int) -> Int {
        let slack = 16
        if let band = packedBand(k: k, n: n) {
            return NNThreads.cores * (k * band + slack)
        }
        return k * NNPackedGemm.roundUp(n, NNPackedGemm.nr) + slack
    }

    func runPacked(_ packed: NNPackedWeights, x: UnsafeMutablePointer<Float>, xs: NNShape, y: UnsafeMutablePointer<Float>,
                           ys: NNShape, g: Geometry, context: NNRunContext) {
        let k = kernelChannels * kh * kw, n = g.outH * g.outW, m = outputChannels
        let nr = NNPackedGemm.nr, mr = NNPackedGemm.mr
        if inPlace(k: k, g: g) {
            runInPlace(packed, x: x, xs: xs, y: y, g: g, context: context)
            return
        }
        var conv = convGeometry(g, xs: xs)
        if let band = packedBand(k: k, n: n) {
            // Each worker takes a contiguous share of every image's columns, band by band.
            let workers = NNPackedGemm.workers(context, items: n / band)
            let share = NNPackedGemm.roundUp((n + workers - 1) / workers, nr)
            let slot = k * band + 16
            NNGemm.run(workers: workers) { worker in
                let buffer = NNPackedGemm.aligned(context.scratch + worker * slot)
                let start = Swift.min(n, worker * share), end = Swift.min(n, start + share)
                for image in 0..<xs.images {
                    let xi = x + image * xs.chw, yi = y + image * ys.chw
                    var n0 = start
                    while n0 < end {
                        let cols = Swift.min(band, end - n0)
                        cg_pack_conv(&conv, xi, n0, cols, buffer, NNPackedGemm.roundUp(cols, nr), 0)
                        post.withGemmEpilogue(perColumn: false, offset: 0) { epilogue in
                            cg_gemm(m, cols, k, packed.operand(), NNPackedGemm.packed(buffer, width: NNPackedGemm.roundUp(cols, nr), panel: 0),
                                    yi + n0, n, 0, nil, epilogue)
                        }
                        if post.needsPass {
                            for c in 0..<m { post.apply(yi + c * n + n0, count: cols, channel: c) }
                        }
                        n0 += cols
                    }
                }
            }
            return
        }
        // Small images: the whole packed input once (workers share the panels), then the
        // output channels split over the workers.
        let width = NNPackedGemm.roundUp(n, nr), panels = width / nr
        let buffer = NNPackedGemm.aligned(context.scratch)
        let mPanels = packed.width / mr
        let workers = n * m * k >= 1 << 20 ? NNPackedGemm.workers(context, items: mPanels) : 1
        for image in 0..<xs.images {
            let xi = x + image * xs.chw, yi = y + image * ys.chw
            let packers = Swift.min(workers, panels)
            let perPanels = (panels + packers - 1) / packers
            NNGemm.run(workers: packers) { worker in
                let p0 = worker * perPanels, p1 = Swift.min(panels, p0 + perPanels)
                guard p0 < p1 else { return }
                cg_pack_conv(&conv, xi, p0 * nr, Swift.min(n, p1 * nr) - p0 * nr, buffer, width, p0)
            }
            let perRows = (mPanels + workers - 1) / workers
            NNGemm.run(workers: workers) { worker in
                let q0 = worker * perRows, q1 = Swift.min(mPanels, q0 + perRows)
                let m0 = q0 * mr, m1 = Swift.min(m, q1 * mr)
                guard m0 < m1 else { return }
                post.withGemmEpilogue(perColumn: false, offset: m0) { epilogue in
                    cg_gemm(m1 - m0, n, k, packed.operand(panel: q0), NNPackedGemm.packed(buffer, width: width, panel: 0),
                            yi + m0 * n, n, 0, nil, epilogue)
                }
                if post.needsPass {
                    for c in m0..<m1 { post.apply(yi + c * n, count: n, channel: c) }
                }
            }
        }
    }

    /// Writes the im2col rows for input channels `channels` and output rows `rows`:
    /// row `(c·kH + i)·kW + j`, column `(oh - rows.lowerBound)·Wout + ow` holds
    /// `x[c, oh·sh - offH + i·dh, ow·sw - offW + j·dw]` (0 outside the input).
    private func im2col(_ x: UnsafeMutablePointer<Float>, xs: NNShape, channels: Range<Int>, g: Geometry,
                        rows: Range<Int>, into col: UnsafeMutablePointer<Float>) {
        let h = xs.h, w = xs.w, outW = g.outW
        let cols = rows.count * outW
        var dst = col
        for c in channels {
            let plane = x + c * h * w
            for i in 0..<kh {
                for j in 0..<kw {
                    let dx = j * dw - g.offW
                    // Output columns whose input column lies inside [0, w).
                    let (lo, hi) = Self.inside(count: outW, stride: sw, offset: dx, limit: w)
                    for oh in rows {
                        let row = dst + (oh - rows.lowerBound) * outW
                        let ih = oh * sh - g.offH + i * dh
                        if ih < 0 || ih >= h {
                            row.update(repeating: 0, count: outW)
                            continue
                        }
                        if lo > 0 { row.update(repeating: 0, count: lo) }
                        let src = plane + ih * w + dx
                        if sw == 1 {
                            (row + lo).update(from: src + lo, count: hi - lo)
                        } else {
                            for ow in lo..<hi { row[ow] = src[ow * sw] }
                        }
                        if hi < outW { (row + hi).update(repeating: 0, count: outW - hi) }
                    }
                    dst += cols
                }
            }
        }
    }

    // MARK: Deconvolution

    private func runDeconvolution(x: UnsafeMutablePointer<Float>, xs: NNShape, y: UnsafeMutablePointer<Float>, ys: NNShape,
                                  g: Geometry, context: NNRunContext) {
        let cinG = kernelChannels / groups, coutG = outputChannels / groups
        let kc = coutG * kh * kw, nIn = xs.hw, nOut = g.outH * g.outW
        let items = xs.images * groups
        let workers = NNGemm.workers(context, items: items)
        let slot = kc * nIn
        weights.withUnsafeBufferPointer { wbuf in
            let w = wbuf.baseAddress!
            NNGemm.run(workers: workers) { worker in
                let col = context.scratch + worker * slot
                var item = worker
                while item < items {
                    let image = item / groups, group = item % groups
                    let xi = x + image * xs.chw + group * cinG * nIn
                    let yi = y + image * ys.chw + group * coutG * nOut
                    // col[kc, nIn] = W_gᵀ[kc, cinG] · X_g[cinG, nIn]
                    NNGemm.gemm(m: kc, n: nIn, k: cinG, a: w + group * cinG * kc, lda: kc, transA: true,
                                b: xi, ldb: nIn, c: col, ldc: nIn)
                    col2im(col, xs: xs, g: g, coutG: coutG, into: yi)
                    if !post.isEmpty {
                        for c in 0..<coutG { post.apply(yi + c * nOut, count: nOut, channel: group * coutG + c) }
                    }
                    item += workers
                }
            }
        }
    }

    /// Scatter-adds `col` (row `(c·kH + i)·kW + j`, column `ih·Win + iw`) into the output at
    /// `(ih·sh + i·dh - offH, iw·sw + j·dw - offW)`, dropping what falls outside.
    private func col2im(_ col: UnsafeMutablePointer<Float>, xs: NNShape, g: Geometry, coutG: Int, into y: UnsafeMutablePointer<Float>) {
        let h = xs.h, w = xs.w, outH = g.outH, outW = g.outW
        y.update(repeating: 0, count: coutG * outH * outW)
        var src = UnsafePointer(col)
        for c in 0..<coutG {
            let plane = y + c * outH * outW
            for i in 0..<kh {
                for j in 0..<kw {
                    let dx = j * dw - g.offW
                    // Input columns whose output column lies inside [0, outW).
                    let (lo, hi) = Self.inside(count: w, stride: sw, offset: dx, limit: outW)
                    for ih in 0..<h {
                        let oh = ih * sh + i * dh - g.offH
                        guard oh >= 0, oh < outH else { continue }
                        let row = src + ih * w
                        let out = plane + oh * outW + dx
                        for iw in lo..<hi { out[iw * sw] += row[iw] }
                    }
                    src += h * w
                }
            }
        }
    }
}
