import CCortadoGemm
import Foundation

/// Which algorithm an ungrouped convolution on the vector kernel paths runs: the packed GEMM
/// over im2col panels (or the input read in place, `Convolution+InPlace.swift`), the direct
/// kernel (`Convolution+Direct.swift`) or Winograd F(4×4, 3×3) or F(2×2, 3×3)
/// (`Convolution+Winograd.swift`).
///
/// Chosen by measurement, as cuDNN and oneDNN do: when the layer's first plan is made (its input
/// shape is known then; at load for a model with declared shapes), each algorithm that applies
/// runs on the real shape with random data, on one thread, and the fastest is kept; only its
/// weights stay. Winograd is refused when its result differs from the direct one by more than
/// `winogradTolerance` (relative to the largest output). Choices are remembered per shape for
/// the process, so a second model with the same layer skips the timing, and `cortado compile`
/// stores them in the compiled form, whose loads skip it too. Small layers, where
/// timing costs more than it could save, take the fixed rule (`takesDirect`).
///
/// `CORTADO_CONV_ALGO` = `gemm`, `direct`, `winograd`, `winograd2` or `auto` (the default) forces one
/// algorithm where it applies (tests run each this way); the older `CORTADO_CONV` = `gemm` or
/// `direct` is read when it is unset. `cortado inspect` and `report --layers` show the choice.
enum ConvolutionAlgorithm: String, CaseIterable, Sendable {
    case gemm, direct, winograd, winograd2

    /// The algorithm the environment forces, or nil for measurement.
    static let forced: ConvolutionAlgorithm? = {
        let env = ProcessInfo.processInfo.environment
        if let value = env["CORTADO_CONV_ALGO"]?.lowercased(), !value.isEmpty {
            if value == "auto" { return nil }
            if let algorithm = ConvolutionAlgorithm(rawValue: value) { return algorithm }
            FileHandle.standardError.write(Data("cortado: CORTADO_CONV_ALGO=\(value) is not gemm, direct, winograd, winograd2 or auto; using auto\n".utf8))
            return nil
        }
        switch env["CORTADO_CONV"]?.lowercased() {
        case "direct"?: return .direct
        case "gemm"?: return .gemm
        default: return nil
        }
    }()

    var role: NNPackedWeights.Role {
        switch self {
        case .gemm: return .a
        case .direct: return .direct
        case .winograd, .winograd2: return .winograd
        }
    }
}

/// Choices made in this process, by shape (with the kernel path), so that equal layers are
/// timed once.
final class ConvolutionChoices: @unchecked Sendable {
    static let shared = ConvolutionChoices()
    private let lock = NSLock()
    private var chosen: [String: ConvolutionAlgorithm] = [:]

    subscript(key: String) -> ConvolutionAlgorithm? {
        get { lock.lock(); defer { lock.unlock() }; return chosen[key] }
        set { lock.lock(); chosen[key] = newValue; lock.unlock() }
    }
}

extension ConvolutionLayer {
    /// Multiply-adds below which the rule decides without timing (a layer this small runs in
    /// well under a millisecond whichever way).
    static let measuredMultiplyAdds = 1 << 24

    /// Largest difference allowed between Winograd's and the direct result, relative to the
    /// largest direct output: the conformance tests' atol of 1e-4 of the output's scale.
    static let winogradTolerance: Float = 1e-4

    /// Whether an algorithm can run this layer (before the input shape is known).
    func applies(_ algorithm: ConvolutionAlgorithm) -> Bool {
        guard !deconvolution, groups == 1 else { return false }
        return Self.applies(algorithm, kh: kh, kw: kw, sh: sh, sw: sw, dh: dh, dw: dw, residual: residual)
    }

    /// The same for an ungrouped convolution of this window.
    static func applies(_ algorithm: ConvolutionAlgorithm, kh: Int, kw: Int, sh: Int, sw: Int, dh: Int, dw: Int, residual: Bool) -> Bool {
        switch algorithm {
        case .gemm: return !residual
        case .direct: return sw == 1 || sw == 2
        case .winograd, .winograd2: return kh == 3 && kw == 3 && sh == 1 && sw == 1 && dh == 1 && dw == 1
        }
    }

    /// Packs `weights` (the spec's `[m, c, kh, kw]`) for `algorithm`.
    func packWeights(_ w: UnsafePointer<Float>, for algorithm: ConvolutionAlgorithm) -> NNPackedWeights {
        let m = outputChannels, k = kernelChannels * kh * kw
        switch algorithm {
        case .gemm: return NNPackedWeights(a: w, m: m, k: k, ld: k)
        case .direct: return NNPackedWeights(direct: w, m: m, k: k)
        case .winograd: return NNPackedWeights(winograd: w, m: m, c: kernelChannels)
        case .winograd2: return NNPackedWeights(winograd: w, m: m, c: kernelChannels, tile: 2)
        }
    }

    /// Settles the algorithm for the first input shape planned (see the type's comment); later
    /// shapes run the same algorithm. Called while a plan is made, before any run.
    func chooseAlgorithm(_ inputs: [NNShape]) {
        choiceLock.lock()
        defer { choiceLock.unlock() }
        guard let raw = unchosenWeights, let rule = ruleAlgorithm else { return }
        let x = inputs[0]
        guard let g = try? geometry(h: x.h, w: x.w) else { return }
        var candidates = ConvolutionAlgorithm.allCases.filter { applies($0) }
        var how = "rule"
        var timings = ""
        var algorithm = rule
        let multiplyAdds = outputChannels * kernelChannels * kh * kw * g.outH * g.outW
        let key = "\(String(cString: cg_isa_name(cg_isa()))) \(kernelChannels)→\(outputChannels) \(x.h)×\(x.w) \(kh)×\(kw) s\(sh)×\(sw) d\(dh)×\(dw) "
            + "p\(g.offH),\(g.offW) \(pooled ? "pool" : "") \(residual ? "residual" : "")"
        let compiled = NNPrecompiledWeights.current
        if let stored = compiled?.storedAlgorithm(key).flatMap(ConvolutionAlgorithm.init(rawValue:)), candidates.contains(stored) {
            algorithm = stored
            how = "stored by cortado compile"
        } else if let cached = ConvolutionChoices.shared[key], candidates.contains(cached) {
            algorithm = cached
            how = "measured earlier in this process"
        } else if candidates.count > 1 && multiplyAdds >= Self.measuredMultiplyAdds {
            raw.withUnsafeBufferPointer { w in
                let forms = candidates.map { packWeights(w.baseAddress!, for: $0) }
                let measured = measure(forms: forms, x: x, g: g)
                candidates = measured.candidates
                algorithm = measured.best
                timings = measured.note
            }
            how = "measured: " + timings
            ConvolutionChoices.shared[key] = algorithm
        }
        // Compiling: the choice goes into the compiled form (NNPrecompiledWeights.algorithmsSection).
        if how != "rule" { compiled?.noteAlgorithm(key, algorithm.rawValue) }
        packed = raw.withUnsafeBufferPointer { packWeights($0.baseAddress!, for: algorithm) }
        chosenAlgorithm = algorithm
        choiceNote = how
        unchosenWeights = nil
    }

    /// Times each form on one image of shape `x` (one thread, random data): a warm-up run, then
    /// rounds in turn, each form's best kept. Winograd is dropped when it strays from the
    /// direct result.
    private func measure(forms: [NNPackedWeights], x xs: NNShape, g: Geometry) -> (best: ConvolutionAlgorithm, candidates: [ConvolutionAlgorithm], note: String) {
        var note = ""
        let one = NNShape(c: xs.c, h: xs.h, w: xs.w)
        let outCount = outputChannels * g.outH * g.outW
        let residualCount = residual ? outCount : 0
        let scratch = forms.map { scratchCount(for: $0.role, g: g, xs: one) }.max() ?? 0
        let total = one.count + 2 * outCount + residualCount + scratch + 64
        let base = UnsafeMutablePointer<Float>.allocate(capacity: total)
        defer { base.deallocate() }
        base.initialize(repeating: 0, count: total)
        // What the layer writes: the pooled output when a pooling is folded in.
        let written = pooled ? outputChannels * (g.outH / 2) * (g.outW / 2) : outCount
        var seed: UInt64 = 0x9E37_79B9_7F4A_7C15
        for i in 0..<(one.count + residualCount) {
            seed = seed &* 6364136223846793005 &+ 1442695040888963407
            base[i < one.count ? i : one.count + 2 * outCount + (i - one.count)] = Float(Int64(bitPattern: seed >> 11) % 2_000_001) / 1_000_000 - 1
        }
        let input = NNTensor(offset: 0, shape: one)
        let output = NNTensor(offset: one.count, shape: NNShape(c: outputChannels, h: g.outH, w: g.outW))
        let reference = base + one.count + outCount
        let residualTensor = NNTensor(offset: one.count + 2 * outCount, shape: output.shape)
        let context = NNRunContext(base: base, scratch: NNPackedGemm.aligned(base + one.count + 2 * outCount + residualCount), threads: 1)
        let inputs = residual ? [input, residualTensor] : [input]
        var usable = forms
        // Each Winograd form against the direct result.
        let winograds = forms.filter { $0.role == .winograd }
        if !winograds.isEmpty {
            let direct = forms.first { $0.role == .direct }
                ?? unchosenWeights!.withUnsafeBufferPointer { packWeights($0.baseAddress!, for: .direct) }
            run(with: direct, inputs: inputs, output: output, g: g, context: context)
            reference.update(from: base + one.count, count: outCount)
            for wino in winograds {
                run(with: wino, inputs: inputs, output: output, g: g, context: context)
                var largest: Float = 0, worst: Float = 0
                for i in 0..<written {
                    largest = Swift.max(largest, abs(reference[i]))
                    worst = Swift.max(worst, abs(reference[i] - base[one.count + i]))
                }
                if !(worst <= Self.winogradTolerance * Swift.max(largest, .leastNormalMagnitude)) {
                    usable.removeAll { $0 === wino }
                    note += String(format: "\(algorithmOf(wino).rawValue) refused: error %.1e of the output's scale; ",
                                   worst / Swift.max(largest, .leastNormalMagnitude))
                }
            }
        }
        var best = [UInt64](repeating: .max, count: usable.count)
        func time(_ i: Int) -> UInt64 {
            let start = DispatchTime.now().uptimeNanoseconds
            run(with: usable[i], inputs: inputs, output: output, g: g, context: context)
            return DispatchTime.now().uptimeNanoseconds - start
        }
        for i in usable.indices { best[i] = time(i) } // warm-up, and the first estimate
        // More rounds only while they are cheap: the timing of a layer stays within the budget below.
        let round = best.reduce(0, +)
        let rounds = round == 0 ? 3 : Int(Swift.min(3, Swift.max(1, 20_000_000 / round)))
        for _ in 0..<rounds {
            for i in usable.indices { best[i] = Swift.min(best[i], time(i)) }
        }
        let fastest = best.indices.min { best[$0] < best[$1] }!
        let names = usable.map { algorithmOf($0) }
        note += usable.indices.sorted { best[$0] < best[$1] }
            .map { "\(names[$0].rawValue) " + String(format: "%.2f ms", Double(best[$0]) / 1e6) }.joined(separator: ", ")
        return (names[fastest], names, note)
    }

    private func algorithmOf(_ packed: NNPackedWeights) -> ConvolutionAlgorithm {
        switch packed.role {
        case .direct: return .direct
        case .winograd: return packed.winogradTile == 2 ? .winograd2 : .winograd
        default: return .gemm
        }
    }

    /// Scratch floats of one algorithm's run.
    func scratchCount(for role: NNPackedWeights.Role, g: Geometry, xs: NNShape) -> Int {
        let k = kernelChannels * kh * kw, n = g.outH * g.outW
        let own: Int
        switch role {
        case .direct: own = directScratch(g: g, xs: xs)
        case .winograd: own = winogradScratch(g: g, xs: xs)
        default:
            if pooled { own = pooledScratch(k: k, g: g, xs: xs) } else { own = inPlace(k: k, g: g) ? inPlaceScratch(k: k, g: g, xs: xs) : packedScratch(k: k, n: n) }
        }
        // A residual that broadcasts: the convolution goes to a temporary after the own scratch.
        guard residual else { return own }
        return own + outputChannels * n + 32
    }

    /// Runs the layer with the weights `packed` (whichever algorithm they are for).
    func run(with packed: NNPackedWeights, inputs: [NNTensor], output: NNTensor, g: Geometry, context: NNRunContext) {
        let xs = inputs[0].shape
        let x = context.pointer(inputs[0]), y = context.pointer(output)
        switch packed.role {
        case .direct where residual, .winograd where residual:
            runResidual(packed, inputs: inputs, output: output, g: g, context: context)
        case .direct:
            runDirect(packed, x: x, xs: xs, y: y, g: g, context: context)
        case .winograd:
            runWinograd(packed, x: x, xs: xs, y: y, g: g, context: context)
        default:
            if pooled {
                runPooled(packed, x: x, xs: xs, y: y, g: g, context: context)
            } else {
                runPacked(packed, x: x, xs: xs, y: y, ys: output.shape, g: g, context: context)
            }
        }
    }
}
