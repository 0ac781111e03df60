import CortadoSpec

/// `SimpleRecurrentLayerParams`: `y_t = f(clip(W x_t + R y_{t-1} + b))`, clip to [-50, 50].
///
/// Inputs `x` `[S, B, I, 1, 1]` and optionally `h0` `[1, B, H, 1, 1]` (zeros when absent);
/// outputs `y` (`[S, B, H, 1, 1]` with `sequenceOutput`, else `[1, B, H, 1, 1]`) and optionally
/// the final state `[1, B, H, 1, 1]`. `reverseInput` walks the steps from last to first; the
/// output sequence is in processing order. `W` is `[H, I]` and `R` `[H, H]`, row-major; the input
/// projections of all steps are one GEMM, then each step adds `R h` for all rows at once.
final class SimpleRecurrentLayer: NNLayer, @unchecked Sendable {
    let inputSize: Int
    let units: Int
    let wx: [Float]
    let r: [Float]
    let bias: [Float]
    let activation: NNActivation
    let sequenceOutput: Bool
    let reverse: Bool
    let inputCount: Int
    let outputCount: Int

    init(_ p: CoreML_Specification_SimpleRecurrentLayerParams, inputs: Int, outputs: Int) throws {
        try NNRecurrent.checkCounts(inputs: inputs, maxInputs: 2, outputs: outputs, maxOutputs: 2, names: "x, h0")
        (inputSize, units) = try NNRecurrent.checkSizes(input: p.inputVectorSize, output: p.outputVectorSize)
        inputCount = inputs
        outputCount = outputs
        wx = try NNRecurrent.matrix(p.weightMatrix, rows: units, cols: inputSize, name: "weightMatrix")
        r = try NNRecurrent.matrix(p.recursionMatrix, rows: units, cols: units, name: "recursionMatrix")
        bias = p.hasBiasVector_p
            ? try NNRecurrent.vector(p.biasVector, units: units, name: "biasVector")
            : [Float](repeating: 0, count: units)
        guard p.hasActivation else { throw NNLayerError("has no activation") }
        activation = try NNRecurrent.activation(p.activation, units: units)
        sequenceOutput = p.sequenceOutput
        reverse = p.reverseInput
    }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        let x = inputs[0]
        try NNRecurrent.checkSequence(x, inputSize: inputSize)
        let batch = x.b
        if inputs.count > 1 { try NNRecurrent.checkState(inputs[1], batch: batch, units: units, what: "initial state h0") }
        let y = NNShape(s: sequenceOutput ? x.s : 1, b: batch, c: units)
        return Array([y, NNShape(b: batch, c: units)].prefix(outputCount))
    }

    func scratchCount(_ inputs: [NNShape]) -> Int {
        let x = inputs[0]
        return x.s * x.b * units + x.b * units
    }

    var detail: String {
        "\(inputSize)→\(units), \(activation)" + (sequenceOutput ? ", sequence output" : "") + (reverse ? ", reversed" : "")
    }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let shape = inputs[0].shape
        let steps = shape.s, batch = shape.b, H = units
        let gates = context.scratch
        let h = gates + steps * batch * H
        NNRecurrent.project(context.pointer(inputs[0]), rows: steps * batch, inputSize: inputSize, wx: wx, gates: gates, width: H)
        NNRecurrent.loadState(inputs.count > 1 ? inputs[1] : nil, into: h, batch: batch, units: H, context: context)
        let y = context.pointer(outputs[0])
        r.withUnsafeBufferPointer { r in
            bias.withUnsafeBufferPointer { bias in
                for k in 0..<steps {
                    let t = reverse ? steps - 1 - k : k
                    let g = gates + t * batch * H
                    NNRecurrent.gemmTransposed(m: batch, n: H, k: H, a: h, lda: H, w: r.baseAddress!, c: g, ldc: H, accumulate: true)
                    for b in 0..<batch {
                        let row = g + b * H
                        NNRecurrent.addBiasClip(row, bias.baseAddress!, count: H)
                        activation.applyUnits(row, units: H)
                    }
                    h.update(from: g, count: batch * H)
                    if sequenceOutput { (y + k * batch * H).update(from: h, count: batch * H) }
                }
            }
        }
        if !sequenceOutput { y.update(from: h, count: batch * H) }
        if outputs.count > 1 { context.pointer(outputs[1]).update(from: h, count: batch * H) }
    }
}
