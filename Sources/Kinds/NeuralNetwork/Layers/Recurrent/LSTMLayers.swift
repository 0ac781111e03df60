import CortadoSpec

/// One LSTM direction (`LSTMParams` + `LSTMWeightParams`), per step (clip to [-50, 50]; `f`,
/// `g`, `h` the three activations; peepholes `p` zero unless `hasPeepholeVectors`):
///
///     i = f(clip(W_i x + R_i y + p_i ⊙ c + b_i))
///     f = f(clip(W_f x + R_f y + p_f ⊙ c + b_f))     (b_f + 1 with forgetBias)
///     z = g(clip(W_z x + R_z y + b_z))
///     c' = clamp(f ⊙ c + i ⊙ z, ±cellClipThreshold)    (f = 1 - i when coupled)
///     o = f(clip(W_o x + R_o y + p_o ⊙ c' + b_o))
///     y' = o ⊙ h(c')
///
/// Weights are stacked gate by gate `[i; f; z; o]`: `wx` `[4H, I]` (one GEMM projects every
/// step), `r` `[4H, H]` (one GEMM per step for all batch rows).
struct NNLSTMDirection: Sendable {
    let inputSize: Int
    let units: Int
    let wx: [Float]
    let r: [Float]
    /// `[b_i; b_f; b_z; b_o]` (zeros without biases; the forget bias added).
    let bias: [Float]
    /// `[p_i; p_f; p_o]`, or nil.
    let peephole: [Float]?
    let f: NNActivation
    let g: NNActivation
    let h: NNActivation
    let coupled: Bool
    let cellClip: Float

    init(_ w: CoreML_Specification_LSTMWeightParams, _ p: CoreML_Specification_LSTMParams,
         activations: [CoreML_Specification_ActivationParams], inputSize I: Int, units H: Int, label: String) throws {
        inputSize = I
        units = H
        coupled = p.coupledInputAndForgetGate
        // The forget gate is unused when coupled: its weights may be left out.
        let needsForget = !coupled
        func m(_ v: CoreML_Specification_WeightParams, _ cols: Int, _ name: String, required: Bool = true) throws -> [Float] {
            try NNRecurrent.matrix(v, rows: H, cols: cols, name: label + name, required: required)
        }
        wx = try m(w.inputGateWeightMatrix, I, "inputGateWeightMatrix")
            + m(w.forgetGateWeightMatrix, I, "forgetGateWeightMatrix", required: needsForget)
            + m(w.blockInputWeightMatrix, I, "blockInputWeightMatrix")
            + m(w.outputGateWeightMatrix, I, "outputGateWeightMatrix")
        r = try m(w.inputGateRecursionMatrix, H, "inputGateRecursionMatrix")
            + m(w.forgetGateRecursionMatrix, H, "forgetGateRecursionMatrix", required: needsForget)
            + m(w.blockInputRecursionMatrix, H, "blockInputRecursionMatrix")
            + m(w.outputGateRecursionMatrix, H, "outputGateRecursionMatrix")
        func v(_ x: CoreML_Specification_WeightParams, _ name: String, required: Bool = true) throws -> [Float] {
            if !required && NNWeights.isEmpty(x) { return [Float](repeating: 0, count: H) }
            return try NNRecurrent.vector(x, units: H, name: label + name)
        }
        var bias = [Float](repeating: 0, count: 4 * H)
        if p.hasBiasVectors_p {
            bias = try v(w.inputGateBiasVector, "inputGateBiasVector")
                + v(w.forgetGateBiasVector, "forgetGateBiasVector", required: needsForget)
                + v(w.blockInputBiasVector, "blockInputBiasVector")
                + v(w.outputGateBiasVector, "outputGateBiasVector")
        }
        if p.forgetBias { for j in H..<2 * H { bias[j] += 1 } }
        self.bias = bias
        peephole = p.hasPeepholeVectors_p
            ? try v(w.inputGatePeepholeVector, "inputGatePeepholeVector")
                + v(w.forgetGatePeepholeVector, "forgetGatePeepholeVector", required: needsForget)
                + v(w.outputGatePeepholeVector, "outputGatePeepholeVector")
            : nil
        let acts = try NNRecurrent.activations(activations, defaults: [.sigmoid, .tanh, .tanh], units: H)
        (f, g, h) = (acts[0], acts[1], acts[2])
        guard p.cellClipThreshold >= 0, p.cellClipThreshold.isFinite else {
            throw NNLayerError("cellClipThreshold is \(p.cellClipThreshold); it must be a positive number (0 means 50)")
        }
        cellClip = p.cellClipThreshold == 0 ? 50 : p.cellClipThreshold
    }

    /// Floats of scratch `run` needs: the gates of every step.
    func gateFloats(steps: Int, batch: Int) -> Int { steps * batch * 4 * units }

    var description: String {
        "gates \(f), cell \(g), output \(h)" + (peephole != nil ? ", peepholes" : "") + (coupled ? ", coupled input/forget" : "")
    }

    /// Runs the whole sequence `x` (`[S, B, I]`). `hs` and `cs` hold the initial state (`B × H`)
    /// and end with the final one; `tmp` is `B × H` floats. Step outputs go to row
    /// `(position · B + b)` of `y`, `yStride` floats apart, where position is the processing
    /// index `k`, or the input index with `alignToInput`; nil `y` writes none.
    func run(x: UnsafePointer<Float>, steps: Int, batch: Int, reverse: Bool, gates: UnsafeMutablePointer<Float>,
             hs: UnsafeMutablePointer<Float>, cs: UnsafeMutablePointer<Float>, tmp: UnsafeMutablePointer<Float>,
             y: UnsafeMutablePointer<Float>?, yStride: Int, alignToInput: Bool) {
        let H = units, G = 4 * units
        NNRecurrent.project(x, rows: steps * batch, inputSize: inputSize, wx: wx, gates: gates, width: G)
        let clip = NNRecurrent.gateClip, cellClip = cellClip
        r.withUnsafeBufferPointer { r in
        bias.withUnsafeBufferPointer { bias in
        (peephole ?? []).withUnsafeBufferPointer { peep in
            let bias = bias.baseAddress!
            let base = peephole == nil ? nil : peep.baseAddress
            let pi = base, pf = base.map { $0 + H }, po = base.map { $0 + 2 * H }
            for k in 0..<steps {
                let t = reverse ? steps - 1 - k : k
                let gt = gates + t * batch * G
                // All gates, all rows: [B, 4H] += y · Rᵀ
                NNRecurrent.gemmTransposed(m: batch, n: G, k: H, a: hs, lda: H, w: r.baseAddress!, c: gt, ldc: G, accumulate: true)
                for b in 0..<batch {
                    let gi = gt + b * G, gf = gi + H, gz = gi + 2 * H, go = gi + 3 * H
                    let c = cs + b * H, hc = tmp + b * H, yb = hs + b * H
                    if let pi, let pf {
                        for j in 0..<H {
                            gi[j] = Swift.min(Swift.max(gi[j] + bias[j] + pi[j] * c[j], -clip), clip)
                            gf[j] = Swift.min(Swift.max(gf[j] + bias[H + j] + pf[j] * c[j], -clip), clip)
                        }
                    } else {
                        NNRecurrent.addBiasClip(gi, bias, count: 2 * H)
                    }
                    NNRecurrent.addBiasClip(gz, bias + 2 * H, count: H)
                    f.applyUnits(gi, units: H)
                    if !coupled { f.applyUnits(gf, units: H) }
                    g.applyUnits(gz, units: H)
                    if coupled {
                        for j in 0..<H { c[j] = Swift.min(Swift.max((1 - gi[j]) * c[j] + gi[j] * gz[j], -cellClip), cellClip) }
                    } else {
                        for j in 0..<H { c[j] = Swift.min(Swift.max(gf[j] * c[j] + gi[j] * gz[j], -cellClip), cellClip) }
                    }
                    if let po {
                        for j in 0..<H { go[j] = Swift.min(Swift.max(go[j] + bias[3 * H + j] + po[j] * c[j], -clip), clip) }
                    } else {
                        NNRecurrent.addBiasClip(go, bias + 3 * H, count: H)
                    }
                    f.applyUnits(go, units: H)
                    hc.update(from: c, count: H)
                    h.applyUnits(hc, units: H)
                    for j in 0..<H { yb[j] = go[j] * hc[j] }
                }
                if let y {
                    let position = alignToInput ? t : k
                    for b in 0..<batch { (y + (position * batch + b) * yStride).update(from: hs + b * H, count: H) }
                }
            }
        }
        }
        }
    }
}

/// `UniDirectionalLSTMLayerParams`: one `NNLSTMDirection` over the sequence.
///
/// Inputs `x` `[S, B, I, 1, 1]`, optionally `h0` and `c0` `[1, B, H, 1, 1]` (zeros when absent);
/// outputs `y` (`[S, B, H, 1, 1]` with `sequenceOutput`, else the last step's `[1, B, H, 1, 1]`)
/// and optionally the final `h` and `c`. `reverseInput` walks the steps from last to first; the
/// output sequence is in processing order.
final class UniDirectionalLSTMLayer: NNLayer, @unchecked Sendable {
    let cell: NNLSTMDirection
    let sequenceOutput: Bool
    let reverse: Bool
    let outputCount: Int

    init(_ p: CoreML_Specification_UniDirectionalLSTMLayerParams, inputs: Int, outputs: Int) throws {
        try NNRecurrent.checkCounts(inputs: inputs, maxInputs: 3, outputs: outputs, maxOutputs: 3, names: "x, h0, c0")
        let (I, H) = try NNRecurrent.checkSizes(input: p.inputVectorSize, output: p.outputVectorSize)
        cell = try NNLSTMDirection(p.weightParams, p.params, activations: p.activations, inputSize: I, units: H, label: "")
        sequenceOutput = p.params.sequenceOutput
        reverse = p.reverseInput
        outputCount = outputs
    }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        let x = inputs[0], H = cell.units
        try NNRecurrent.checkSequence(x, inputSize: cell.inputSize)
        for (k, what) in ["initial state h0", "initial cell state c0"].enumerated() where inputs.count > k + 1 {
            try NNRecurrent.checkState(inputs[k + 1], batch: x.b, units: H, what: what)
        }
        let y = NNShape(s: sequenceOutput ? x.s : 1, b: x.b, c: H)
        let state = NNShape(b: x.b, c: H)
        return Array([y, state, state].prefix(outputCount))
    }

    /// Gates of every step, then h, c and h(c).
    func scratchCount(_ inputs: [NNShape]) -> Int {
        let x = inputs[0]
        return cell.gateFloats(steps: x.s, batch: x.b) + 3 * x.b * cell.units
    }

    var detail: String {
        "\(cell.inputSize)→\(cell.units), \(cell.description)" + (sequenceOutput ? ", sequence output" : "") + (reverse ? ", reversed" : "")
    }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let shape = inputs[0].shape
        let steps = shape.s, batch = shape.b, H = cell.units
        let gates = context.scratch
        let hs = gates + cell.gateFloats(steps: steps, batch: batch)
        let cs = hs + batch * H, tmp = cs + batch * H
        NNRecurrent.loadState(inputs.count > 1 ? inputs[1] : nil, into: hs, batch: batch, units: H, context: context)
        NNRecurrent.loadState(inputs.count > 2 ? inputs[2] : nil, into: cs, batch: batch, units: H, context: context)
        let y = context.pointer(outputs[0])
        cell.run(x: context.pointer(inputs[0]), steps: steps, batch: batch, reverse: reverse, gates: gates,
                 hs: hs, cs: cs, tmp: tmp, y: sequenceOutput ? y : nil, yStride: H, alignToInput: false)
        if !sequenceOutput { y.update(from: hs, count: batch * H) }
        if outputs.count > 1 { context.pointer(outputs[1]).update(from: hs, count: batch * H) }
        if outputs.count > 2 { context.pointer(outputs[2]).update(from: cs, count: batch * H) }
    }
}

/// `BiDirectionalLSTMLayerParams`: a forward and a backward `NNLSTMDirection` (shared
/// `LSTMParams`, own weights and activations) over the same sequence.
///
/// Inputs `x` `[S, B, I, 1, 1]`, then optionally `h0_f`, `c0_f`, `h0_b`, `c0_b` `[1, B, H, 1, 1]`
/// (zeros when absent). Output `y` concatenates the directions along C: `[S, B, 2H, 1, 1]` with
/// `sequenceOutput`, where row `t` holds the forward output after `x_0…x_t` and the backward
/// output after `x_{S-1}…x_t`; else `[1, B, 2H, 1, 1]` with both directions' final outputs. Then
/// optionally `h_f`, `c_f`, `h_b`, `c_b` `[1, B, H, 1, 1]`.
final class BiDirectionalLSTMLayer: NNLayer, @unchecked Sendable {
    let forward: NNLSTMDirection
    let backward: NNLSTMDirection
    let sequenceOutput: Bool
    let outputCount: Int

    init(_ p: CoreML_Specification_BiDirectionalLSTMLayerParams, inputs: Int, outputs: Int) throws {
        try NNRecurrent.checkCounts(inputs: inputs, maxInputs: 5, outputs: outputs, maxOutputs: 5, names: "x, h0_f, c0_f, h0_b, c0_b")
        let (I, H) = try NNRecurrent.checkSizes(input: p.inputVectorSize, output: p.outputVectorSize)
        guard p.weightParams.count == 2 else {
            throw NNLayerError("has \(p.weightParams.count) weightParams; expected 2 (forward, backward)")
        }
        forward = try NNLSTMDirection(p.weightParams[0], p.params, activations: p.activationsForwardLstm, inputSize: I, units: H, label: "forward ")
        backward = try NNLSTMDirection(p.weightParams[1], p.params, activations: p.activationsBackwardLstm.isEmpty ? p.activationsForwardLstm : p.activationsBackwardLstm,
                                       inputSize: I, units: H, label: "backward ")
        sequenceOutput = p.params.sequenceOutput
        outputCount = outputs
    }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        let x = inputs[0], H = forward.units
        try NNRecurrent.checkSequence(x, inputSize: forward.inputSize)
        let names = ["forward initial state h0", "forward initial cell state c0", "backward initial state h0", "backward initial cell state c0"]
        for (k, what) in names.enumerated() where inputs.count > k + 1 {
            try NNRecurrent.checkState(inputs[k + 1], batch: x.b, units: H, what: what)
        }
        let y = NNShape(s: sequenceOutput ? x.s : 1, b: x.b, c: 2 * H)
        let state = NNShape(b: x.b, c: H)
        return Array([y, state, state, state, state].prefix(outputCount))
    }

    /// Gates of every step (the directions run one after the other), then h, c and h(c) of each.
    func scratchCount(_ inputs: [NNShape]) -> Int {
        let x = inputs[0]
        return forward.gateFloats(steps: x.s, batch: x.b) + 6 * x.b * forward.units
    }

    var detail: String {
        "\(forward.inputSize)→2×\(forward.units), \(forward.description)" + (sequenceOutput ? ", sequence output" : "")
    }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let shape = inputs[0].shape
        let steps = shape.s, batch = shape.b, H = forward.units
        let state = batch * H
        let gates = context.scratch
        let hf = gates + forward.gateFloats(steps: steps, batch: batch)
        let cf = hf + state, hb = cf + state, cb = hb + state, tmp = cb + state
        func load(_ k: Int, _ dst: UnsafeMutablePointer<Float>) {
            NNRecurrent.loadState(inputs.count > k ? inputs[k] : nil, into: dst, batch: batch, units: H, context: context)
        }
        load(1, hf); load(2, cf); load(3, hb); load(4, cb)
        let x = context.pointer(inputs[0]), y = context.pointer(outputs[0])
        forward.run(x: x, steps: steps, batch: batch, reverse: false, gates: gates, hs: hf, cs: cf, tmp: tmp,
                    y: sequenceOutput ? y : nil, yStride: 2 * H, alignToInput: true)
        backward.run(x: x, steps: steps, batch: batch, reverse: true, gates: gates, hs: hb, cs: cb, tmp: tmp,
                     y: sequenceOutput ? y + H : nil, yStride: 2 * H, alignToInput: true)
        if !sequenceOutput {
            for b in 0..<batch {
                (y + b * 2 * H).update(from: hf + b * H, count: H)
                (y + b * 2 * H + H).update(from: hb + b * H, count: H)
            }
        }
        func store(_ k: Int, _ src: UnsafeMutablePointer<Float>) {
            if outputs.count > k { context.pointer(outputs[k]).update(from: src, count: state) }
        }
        store(1, hf); store(2, cf); store(3, hb); store(4, cb)
    }
}
