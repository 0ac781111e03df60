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

    /// Multiplications per output of a 3×3 layer (per input channel), which breaks a tie in
    /// the measurement.
    var multiplicationsPerOutput: Double {
        switch self {
        case .winograd: return 36.0 / 16
        case .winograd2: return 16.0 / 4
        case .gemm, .direct: return 9
        }
    }

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

    /// Timed rounds of the measurement: at least `least` (unless `measuringBudget` runs out
    /// first), more while the two fastest are within `clearMargin` of each other, up to `most`
    /// or until `closeCallBudget` is spent.
    static let measuredRounds = (least: 3, most: 15)
    /// The runner-up's median per-round ratio to the leader above which the call is clear.
    static let clearMargin = 1.08
    /// Nanoseconds a layer's measurement may take (warm-up included) for a close call, and
    /// for any layer, however few rounds that leaves.
    static let closeCallBudget: UInt64 = 150_000_000
    static let measuringBudget: UInt64 = 600_000_000

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
        let candidates = ConvolutionAlgorithm.allCases.filter { applies($0) }
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

    /// Times each form on one image of shape `x` (one thread, random data): a warm-up run of
    /// each, then rounds in which each form still in runs once (`ConvolutionTiming` compares
    /// them; `measuredRounds` and the budgets say how many). Winograd is dropped when it strays
    /// from the direct result.
    private func measure(forms: [NNPackedWeights], x xs: NNShape, g: Geometry) -> (best: ConvolutionAlgorithm, note: String) {
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
        var clock = ConvolutionTiming(count: usable.count)
        let started = DispatchTime.now().uptimeNanoseconds
        for i in usable.indices { clock.noteWarmUp(i, clock.time { run(with: usable[i], inputs: inputs, output: output, g: g, context: context) }) }
        var rounds = 0
        var dropped = ""
        while true {
            rounds += 1
            clock.beginRound()
            // Each round in a rotated order, so that no form always runs first after another.
            let alive = clock.alive
            for j in alive.indices {
                let i = alive[(j + rounds) % alive.count]
                clock.record(i, clock.time { run(with: usable[i], inputs: inputs, output: output, g: g, context: context) })
            }
            if rounds == 1 { dropped = clock.dropSlow(names: usable.map { algorithmOf($0).rawValue }) }
            let spent = DispatchTime.now().uptimeNanoseconds - started
            if clock.alive.count == 1 || rounds >= Self.measuredRounds.most { break }
            if rounds >= Self.measuredRounds.least && (clock.margin >= Self.clearMargin || spent >= Self.closeCallBudget) { break }
            if spent >= Self.measuringBudget { break }
        }
        let names = usable.map { algorithmOf($0) }
        let ranked = clock.ranked
        // A close call goes to the fewest multiplications. Such a tie comes from a moment when
        // memory was contended (other processes, other guests), which slows Winograd's larger
        // weights most; the fewer multiplications win once it passes.
        let (best, tie) = clock.choice(within: Self.clearMargin) { names[$0].multiplicationsPerOutput }
        if tie { note += "a tie taken by the fewer multiplications, " }
        note += "\(rounds) round\(rounds == 1 ? "" : "s"), "
            + ranked.filter { clock.alive.contains($0) }
                .map { "\(names[$0].rawValue) " + String(format: "%.2f ms", Double(clock.median($0)) / 1e6) }.joined(separator: ", ")
            + dropped
        return (names[best], note)
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

/// The timings of one layer's measurement: every form's time in each round it ran. Forms are
/// compared by the median over rounds of their time divided by the round's fastest, so that a
/// phase of the machine (this host's speed changes for seconds at a time) slows a whole round
/// rather than deciding it; forms more than `dropRatio` slower than the fastest after the first
/// round sit out the later ones.
struct ConvolutionTiming {
    static let dropRatio = 1.4
    private let count: Int
    private var warmUp: [UInt64]
    /// Each round's times, by form.
    private var rounds: [[Int: UInt64]] = []
    private(set) var alive: [Int]

    init(count: Int) {
        self.count = count
        warmUp = Array(repeating: .max, count: count)
        alive = Array(0..<count)
    }

    /// Nanoseconds `body` takes.
    func time(_ body: () -> Void) -> UInt64 {
        let start = DispatchTime.now().uptimeNanoseconds
        body()
        return DispatchTime.now().uptimeNanoseconds - start
    }

    mutating func noteWarmUp(_ i: Int, _ nanos: UInt64) { warmUp[i] = nanos }
    mutating func beginRound() { rounds.append([:]) }
    mutating func record(_ i: Int, _ nanos: UInt64) { rounds[rounds.count - 1][i] = nanos }

    /// After the first round: drops the forms far slower than the fastest (each by the better
    /// of its warm-up and its round), and lists them for the note.
    mutating func dropSlow(names: [String]) -> String {
        let best = alive.map { i in (i, Swift.min(warmUp[i], rounds.first?[i] ?? .max)) }
        let fastest = best.map(\.1).min() ?? 0
        let slow = best.filter { Double($0.1) > Self.dropRatio * Double(fastest) }.map(\.0)
        guard !slow.isEmpty, slow.count < alive.count else { return "" }
        alive.removeAll { slow.contains($0) }
        let list = best.filter { slow.contains($0.0) }.sorted { $0.1 < $1.1 }
            .map { "\(names[$0.0]) " + String(format: "%.2f ms", Double($0.1) / 1e6) }
        return "; " + list.joined(separator: ", ") + " in the first round only"
    }

    /// The median of form i's timed rounds.
    func median(_ i: Int) -> UInt64 {
        let sorted = rounds.compactMap { $0[i] }.sorted()
        return sorted.isEmpty ? .max : sorted[sorted.count / 2]
    }

    /// Form i's score: the median over the rounds it ran of its time ÷ that round's fastest.
    func score(_ i: Int) -> Double {
        let ratios = rounds.compactMap { round in round[i].map { Double($0) / Double(Swift.max(round.values.min()!, 1)) } }.sorted()
        let n = ratios.count
        guard n > 0 else { return .infinity }
        return n % 2 == 1 ? ratios[n / 2] : (ratios[n / 2 - 1] + ratios[n / 2]) / 2
    }

    /// The forms still in, best first, then the dropped ones by their time.
    var ranked: [Int] {
        alive.sorted { score($0) < score($1) } + (0..<count).filter { !alive.contains($0) }.sorted { median($0) < median($1) }
    }

    /// The form to keep: the best ranked, or, when forms still in are within `margin` of its
    /// score, the one of them of the lowest `cost` (then `tie` is true).
    func choice(within margin: Double, cost: (Int) -> Double) -> (form: Int, tie: Bool) {
        let leader = ranked[0]
        let tied = alive.filter { score($0) < score(leader) * margin }
        guard let cheapest = tied.min(by: { cost($0) < cost($1) }), cost(cheapest) < cost(leader) else { return (leader, false) }
        return (cheapest, true)
    }

    /// The runner-up's score ÷ the leader's (infinity with one form left).
    var margin: Double {
        let scores = alive.map(score).sorted()
        return scores.count < 2 ? .infinity : scores[1] / scores[0]
    }
}
