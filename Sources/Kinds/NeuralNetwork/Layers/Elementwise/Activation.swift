import CortadoSpec

/// `ActivationParams`: one non-linearity applied element by element (per channel for PReLU
/// and parametric softplus). Runs in place and folds into a preceding convolution.
final class ActivationLayer: NNLayer, @unchecked Sendable {
    let activation: NNActivation

    init(_ p: CoreML_Specification_ActivationParams) throws {
        activation = try NNActivation(p)
    }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        guard inputs.count == 1 else { throw NNLayerError("takes one input, got \(inputs.count)") }
        try activation.check(channels: inputs[0].c)
        return inputs
    }

    var runsInPlace: Bool { true }
    var epilogue: NNEpilogueOp? { .activation(activation) }
    var detail: String { activation.description }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let x = context.pointer(inputs[0]), y = context.pointer(outputs[0])
        let shape = inputs[0].shape
        if x != y { y.update(from: x, count: shape.count) }
        let plane = shape.hw
        context.parallelFor(shape.images * shape.c, costPerItem: plane * 8) { range in
            for i in range { activation.apply(y + i * plane, count: plane, channel: i % shape.c) }
        }
    }
}
