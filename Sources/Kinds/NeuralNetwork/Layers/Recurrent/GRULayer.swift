import CortadoSpec

/// `GRULayerParams`, per step (clip to [-50, 50], `f` and `g` the two activations):
///
///     z = f(clip(W_z x + R_z h + b_z))        update gate
///     r = f(clip(W_r x + R_r h + b_r))        reset gate
///     o = g(clip(W_o x + R_o (r ⊙ h) + b_o))  output gate
///     h' = (1 - z) ⊙ o + z ⊙ h
///
/// Inputs `x` `[S, B, I, 1, 1]` and optionally `h0` `[1, B, H, 1, 1]` (zeros when absent);
/// outputs `y` (all steps with `sequenceOutput`, else the last) and optionally the final state.
/// `reverseInput` walks the steps from last to first; the output sequence is in processing
/// order. The input weights are stacked `[z; r; o]` (`[3H, I]`) so one GEMM projects every
/// step; `R_z` and `R_r` are stacked `[2H, H]` for one GEMM per step, and `R_o` follows the
/// reset gate.
final class GRULayer: NNLayer, @unchecked Sendable {
    let inputSize: Int
    let units: Int
    /// `[W_z; W_r; W_o]`, `[3H, I]`.
    let wx: [Float]
    /// `[R_z; R_r]`, `[2H, H]`.
    let rzr: [Float]
    /// `R_o`, `[H, H]`.
    let ro: [Float]
    /// `[b_z; b_r; b_o]`, zeros without biases.
    let bias: [Float]
    let gate: NNActivation
    let output: NNActivation
    let sequenceOutput: Bool
    let reverse: Bool
    let outputCount: Int

    init(_ p: CoreML_Specification_GRULayerParams, inputs: Int, outputs: Int) throws {
        try NNRecurrent.checkCounts(inputs: inputs, maxInputs: 2, outputs: outputs, maxOutputs: 2, names: "x, h0")
        let (I, H) = try NNRecurrent.checkSizes(input: p.inputVectorSize, output: p.outputVectorSize)
        inputSize = I
        units = H
        outputCount = outputs
        wx = try NNRecurrent.matrix(p.updateGateWeightMatrix, rows: H, cols: I, name: "updateGateWeightMatrix")
            + NNRecurrent.matrix(p.resetGateWeightMatrix, rows: H, cols: I, name: "resetGateWeightMatrix")
            + NNRecurrent.matrix(p.outputGateWeightMatrix, rows: H, cols: I, name: "outputGateWeightMatrix")
        rzr = try NNRecurrent.matrix(p.updateGateRecursionMatrix, rows: H, cols: H, name: "updateGateRecursionMatrix")
            + NNRecurrent.matrix(p.resetGateRecursionMatrix, rows: H, cols: H, name: "resetGateRecursionMatrix")
        ro = try NNRecurrent.matrix(p.outputGateRecursionMatrix, rows: H, cols: H, name: "outputGateRecursionMatrix")
        if p.hasBiasVectors_p {
            bias = try NNRecurrent.vector(p.updateGateBiasVector, units: H, name: "updateGateBiasVector")
                + NNRecurrent.vector(p.resetGateBiasVector, units: H, name: "resetGateBiasVector")
                + NNRecurrent.vector(p.outputGateBiasVector, units: H, name: "outputGateBiasVector")
        } else {
            bias = [Float](repeating: 0, count: 3 * H)
        }
        let acts = try NNRecurrent.activations(p.activations, defaults: [.sigmoid, .tanh], units: H)
        (gate, output) = (acts[0], acts[1])
        sequenceOutput = p.sequenceOutput
        reverse = p.reverseInput
    }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        let x = inputs[0]
        try NNRecurrent.checkSequence(x, inputSize: inputSize)
        if inputs.count > 1 { try NNRecurrent.checkState(inputs[1], batch: x.b, units: units, what: "initial state h0") }
        let y = NNShape(s: sequenceOutput ? x.s : 1, b: x.b, c: units)
        return Array([y, NNShape(b: x.b, c: units)].prefix(outputCount))
    }

    /// Gates of every step, the state and `r ⊙ h`.
    func scratchCount(_ inputs: [NNShape]) -> Int {
        let x = inputs[0]
        return x.s * x.b * 3 * units + 2 * x.b * units
    }

    var detail: String {
        "\(inputSize)→\(units), gates \(gate), output \(output)" + (sequenceOutput ? ", sequence output" : "") + (reverse ? ", reversed" : "")
    }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let shape = inputs[0].shape
        let steps = shape.s, batch = shape.b, H = units, G = 3 * units
        let gates = context.scratch
        let h = gates + steps * batch * G
        let rh = h + batch * H
        NNRecurrent.project(context.pointer(inputs[0]), rows: steps * batch, inputSize: inputSize, wx: wx, gates: gates, width: G)
        NNRecurrent.loadState(inputs.count > 1 ? inputs[1] : nil, into: h, batch: batch, units: H, context: context)
        let y = context.pointer(outputs[0])
        rzr.withUnsafeBufferPointer { rzr in
        ro.withUnsafeBufferPointer { ro in
        bias.withUnsafeBufferPointer { bias in
            let bias = bias.baseAddress!
            for k in 0..<steps {
                let t = reverse ? steps - 1 - k : k
                let g = gates + t * batch * G
                // z and r for all rows: [B, 2H] += h · [R_z; R_r]ᵀ
                NNRecurrent.gemmTransposed(m: batch, n: 2 * H, k: H, a: h, lda: H, w: rzr.baseAddress!, c: g, ldc: G, accumulate: true)
                for b in 0..<batch {
                    let row = g + b * G, hb = h + b * H, rb = rh + b * H
                    NNRecurrent.addBiasClip(row, bias, count: 2 * H)
                    gate.applyUnits(row, units: H)
                    gate.applyUnits(row + H, units: H)
                    for j in 0..<H { rb[j] = row[H + j] * hb[j] }
                }
                // o's recurrent term reads r ⊙ h: [B, H] += (r ⊙ h) · R_oᵀ
                NNRecurrent.gemmTransposed(m: batch, n: H, k: H, a: rh, lda: H, w: ro.baseAddress!, c: g + 2 * H, ldc: G, accumulate: true)
                for b in 0..<batch {
                    let row = g + b * G, hb = h + b * H
                    let o = row + 2 * H
                    NNRecurrent.addBiasClip(o, bias + 2 * H, count: H)
                    output.applyUnits(o, units: H)
                    for j in 0..<H {
                        let z = row[j]
                        hb[j] = (1 - z) * o[j] + z * hb[j]
                    }
                }
                if sequenceOutput { (y + k * batch * H).update(from: h, count: batch * H) }
            }
        }
        }
        }
        if !sequenceOutput { y.update(from: h, count: batch * H) }
        if outputs.count > 1 { context.pointer(outputs[1]).update(from: h, count: batch * H) }
    }
}
