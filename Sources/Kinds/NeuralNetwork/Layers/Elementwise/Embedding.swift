import CortadoSpec

/// `EmbeddingLayerParams`: looks up one row per index. The input holds indices as floats,
/// `[S, B, 1, 1, 1]`; the output is `[S, B, outputChannels, 1, 1]` with
/// `y[o] = W[o, index] (+ bias[o])`, `W` stored `[outputChannels, inputDim]`. The table is kept
/// transposed (`[inputDim, outputChannels]`, bias added) so a lookup is one contiguous copy.
/// An index outside `0..<inputDim` (or not a number) gives the bias alone (zeros without one):
/// a kernel cannot fail at run time.
final class EmbeddingLayer: NNLayer, @unchecked Sendable {
    let inputDim: Int
    let outputChannels: Int
    /// `[inputDim + 1, outputChannels]`: a row per index, bias included, then the bias row.
    let table: [Float]

    init(_ p: CoreML_Specification_EmbeddingLayerParams) throws {
        guard p.inputDim > 0, p.outputChannels > 0, p.inputDim < 1 << 31, p.outputChannels < 1 << 31 else {
            throw NNLayerError("inputDim (\(p.inputDim)) and outputChannels (\(p.outputChannels)) must be positive")
        }
        inputDim = Int(p.inputDim)
        outputChannels = Int(p.outputChannels)
        let (count, overflow) = inputDim.multipliedReportingOverflow(by: outputChannels)
        guard !overflow else { throw NNLayerError("inputDim × outputChannels overflows") }
        let w = try NNWeights.floats(p.weights, count: count, channels: outputChannels, name: "embedding weights")
        let bias = p.hasBias_p ? try NNWeights.floats(p.bias, count: outputChannels, name: "embedding bias")
                               : [Float](repeating: 0, count: outputChannels)
        var table = [Float](repeating: 0, count: (inputDim + 1) * outputChannels)
        for o in 0..<outputChannels {
            for i in 0..<inputDim { table[i * outputChannels + o] = w[o * inputDim + i] + bias[o] }
            table[inputDim * outputChannels + o] = bias[o]
        }
        self.table = table
    }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        guard inputs.count == 1 else { throw NNLayerError("takes one input, got \(inputs.count)") }
        let s = inputs[0]
        guard s.chw == 1 else { throw NNLayerError("input has shape \(s); it must hold one index per sequence step and batch item ([S, B, 1, 1, 1])") }
        return [NNShape(s: s.s, b: s.b, c: outputChannels)]
    }

    var detail: String { "\(inputDim) → \(outputChannels)" }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let x = context.pointer(inputs[0]), y = context.pointer(outputs[0])
        let count = inputs[0].count, width = outputChannels, limit = Float(inputDim)
        let missing = inputDim
        table.withUnsafeBufferPointer { t in
            let base = t.baseAddress!
            context.parallelFor(count, costPerItem: width) { range in
                for k in range {
                    let v = x[k]
                    let row = v >= 0 && v < limit ? Int(v) : missing
                    (y + k * width).update(from: base + row * width, count: width)
                }
            }
        }
    }
}

/// `LoadConstantLayerParams`: no input; writes `data` (shape `[C, H, W]`) as a `[1, 1, C, H, W]`
/// blob on every run (layers downstream broadcast it over the batch).
final class LoadConstantLayer: NNLayer, @unchecked Sendable {
    let shape: NNShape
    let data: [Float]

    init(_ p: CoreML_Specification_LoadConstantLayerParams) throws {
        guard p.shape.count == 3, p.shape.allSatisfy({ $0 > 0 && $0 < 1 << 31 }) else {
            throw NNLayerError("shape \(p.shape) must be [C, H, W] with positive sizes")
        }
        shape = NNShape(c: Int(p.shape[0]), h: Int(p.shape[1]), w: Int(p.shape[2]))
        data = try NNWeights.floats(p.data, count: shape.count, channels: shape.c, name: "constant data")
    }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        guard inputs.isEmpty else { throw NNLayerError("takes no input, got \(inputs.count)") }
        return [shape]
    }

    var detail: String { "[\(shape.c), \(shape.h), \(shape.w)]" }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let y = context.pointer(outputs[0])
        data.withUnsafeBufferPointer { y.update(from: $0.baseAddress!, count: $0.count) }
    }
}
