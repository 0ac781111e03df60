import CortadoSpec
import Foundation

/// `BatchnormLayerParams`: per channel `y = gamma · (x - mean) / sqrt(variance + epsilon) + beta`.
///
/// With stored statistics it is the affine `x · scale[c] + shift[c]` (computed once at load),
/// runs in place and folds into a preceding convolution or inner product. With
/// `computeMeanVar` the mean and (biased) variance come from the input: per image and channel
/// over `H×W` with `instanceNormalization`, otherwise per channel over `S×H×W` for each batch
/// element (so rows batched along B stay independent). Those do not fold.
final class BatchnormLayer: NNLayer, @unchecked Sendable {
    let channels: Int
    let computeMeanVar: Bool
    let instanceNormalization: Bool
    let epsilon: Float
    let gamma: [Float], beta: [Float]
    /// Stored statistics folded: `scale = gamma / sqrt(var + eps)`, `shift = beta - mean · scale`.
    let scale: [Float], shift: [Float]

    init(_ p: CoreML_Specification_BatchnormLayerParams) throws {
        channels = Int(p.channels)
        guard channels > 0 else { throw NNLayerError("channels must be positive, got \(p.channels)") }
        computeMeanVar = p.computeMeanVar
        instanceNormalization = p.instanceNormalization
        epsilon = p.epsilon
        let channels = channels
        let gamma = try NNWeights.floats(p.gamma, count: channels, name: "gamma")
        let beta = try NNWeights.floats(p.beta, count: channels, name: "beta")
        self.gamma = gamma
        self.beta = beta
        if computeMeanVar {
            scale = []; shift = []
        } else {
            let mean = try NNWeights.floats(p.mean, count: channels, name: "mean")
            let variance = try NNWeights.floats(p.variance, count: channels, name: "variance")
            guard variance.allSatisfy({ $0 + p.epsilon > 0 }) else {
                throw NNLayerError("variance + epsilon must be positive in every channel")
            }
            let s = (0..<channels).map { gamma[$0] / (variance[$0] + p.epsilon).squareRoot() }
            scale = s
            shift = (0..<channels).map { beta[$0] - mean[$0] * s[$0] }
        }
    }

    var runsInPlace: Bool { true }
    var epilogue: NNEpilogueOp? { computeMeanVar ? nil : .affine(scale: scale, shift: shift) }
    var detail: String {
        computeMeanVar ? (instanceNormalization ? "instance normalization" : "batch statistics") + ", epsilon \(epsilon)" : "epsilon \(epsilon)"
    }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        guard inputs.count == 1 else { throw NNLayerError("takes one input, got \(inputs.count)") }
        guard inputs[0].c == channels else { throw NNLayerError("the input has \(inputs[0].c) channels; the layer has \(channels)") }
        return inputs
    }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let x = context.pointer(inputs[0]), y = context.pointer(outputs[0])
        let shape = inputs[0].shape
        let plane = shape.hw, c = shape.c
        if !computeMeanVar {
            scale.withUnsafeBufferPointer { s in
                shift.withUnsafeBufferPointer { t in
                    context.parallelFor(shape.images * c, costPerItem: plane * 2) { range in
                        for i in range {
                            let ch = i % c, sv = s[ch], tv = t[ch]
                            let src = x + i * plane, dst = y + i * plane
                            for j in 0..<plane { dst[j] = src[j] * sv + tv }
                        }
                    }
                }
            }
            return
        }
        // Groups of planes normalised together: (image, channel) for instance normalization,
        // (batch element, channel) over the sequence otherwise.
        let seq = instanceNormalization ? 1 : shape.s
        let groups = instanceNormalization ? shape.images * c : shape.b * c
        context.parallelFor(groups, costPerItem: plane * seq * 4) { range in
            for gi in range {
                let ch = gi % c
                // Plane p of the group: image index (s, b) = instance ? gi / c : (si, gi / c).
                func base(_ si: Int) -> Int {
                    let image = instanceNormalization ? gi / c : si * shape.b + gi / c
                    return (image * c + ch) * plane
                }
                var sum: Float = 0
                for si in 0..<seq { let p = x + base(si); for j in 0..<plane { sum += p[j] } }
                let count = Float(seq * plane)
                let mean = sum / count
                var sq: Float = 0
                for si in 0..<seq { let p = x + base(si); for j in 0..<plane { let d = p[j] - mean; sq += d * d } }
                let variance = sq / count
                let sv = gamma[ch] / (variance + epsilon).squareRoot(), tv = beta[ch] - mean * sv
                for si in 0..<seq {
                    let src = x + base(si), dst = y + base(si)
                    for j in 0..<plane { dst[j] = src[j] * sv + tv }
                }
            }
        }
    }
}
