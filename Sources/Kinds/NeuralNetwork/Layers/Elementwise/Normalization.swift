import CortadoSpec
import Foundation

/// Runs `body(image, first, count, position)` over `images × hw` positions split into ranges for
/// the worker threads: each call covers `count` consecutive positions `first..<first+count` of
/// one image's `H × W` plane; `position` is the global index `image * hw + first` (for per-position
/// scratch space).
@inline(__always)
private func forEachPositionRun(_ shape: NNShape, cost: Int, _ context: NNRunContext,
                                _ body: (_ image: Int, _ first: Int, _ count: Int, _ position: Int) -> Void) {
    let hw = shape.hw
    context.parallelFor(shape.images * hw, costPerItem: cost) { range in
        var p = range.lowerBound
        while p < range.upperBound {
            let image = p / hw, first = p % hw
            let n = Swift.min(hw - first, range.upperBound - p)
            body(image, first, n, p)
            p += n
        }
    }
}

/// `SoftmaxLayerParams`: softmax over C, separately at every (S, B, H, W) position. Runs in
/// place; needs 2 floats of scratch per position (running maximum and sum).
final class SoftmaxLayer: NNLayer, @unchecked Sendable {
    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        guard inputs.count == 1 else { throw NNLayerError("takes one input, got \(inputs.count)") }
        return inputs
    }

    var runsInPlace: Bool { true }
    func scratchCount(_ inputs: [NNShape]) -> Int { inputs[0].hw == 1 ? 0 : 2 * inputs[0].images * inputs[0].hw }
    var detail: String { "over C" }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let x = context.pointer(inputs[0]), y = context.pointer(outputs[0])
        let shape = inputs[0].shape, channels = shape.c, hw = shape.hw
        if hw == 1 {
            // One contiguous vector of C per image.
            context.parallelFor(shape.images, costPerItem: channels * 8) { range in
                for image in range {
                    let xp = x + image * channels, yp = y + image * channels
                    var m = xp[0]
                    for c in 1..<channels { m = Swift.max(m, xp[c]) }
                    var sum: Float = 0
                    for c in 0..<channels { let e = Foundation.exp(xp[c] - m); yp[c] = e; sum += e }
                    let inv = 1 / sum
                    for c in 0..<channels { yp[c] *= inv }
                }
            }
            return
        }
        let positions = shape.images * hw
        let maxima = context.scratch, sums = context.scratch + positions
        forEachPositionRun(shape, cost: channels * 8, context) { image, first, n, p in
            let xb = x + image * channels * hw + first, yb = y + image * channels * hw + first
            let m = maxima + p, s = sums + p
            m.update(from: xb, count: n)
            for c in 1..<channels {
                let xc = xb + c * hw
                for i in 0..<n { m[i] = Swift.max(m[i], xc[i]) }
            }
            for i in 0..<n { s[i] = 0 }
            for c in 0..<channels {
                let xc = xb + c * hw, yc = yb + c * hw
                for i in 0..<n { let e = Foundation.exp(xc[i] - m[i]); yc[i] = e; s[i] += e }
            }
            for i in 0..<n { s[i] = 1 / s[i] }
            for c in 0..<channels {
                let yc = yb + c * hw
                for i in 0..<n { yc[i] *= s[i] }
            }
        }
    }
}

/// `LRNLayerParams`: local response normalization across channels,
/// `y = x / (k + α/n · Σ x_j²)^β` where the sum runs over the `n = localSize` channels
/// `c − ⌊(n−1)/2⌋ … c + ⌊n/2⌋` (clipped to the image) at the same position. Not in place.
final class LRNLayer: NNLayer, @unchecked Sendable {
    let alpha: Float
    let beta: Float
    let k: Float
    let size: Int

    init(_ p: CoreML_Specification_LRNLayerParams) throws {
        guard p.localSize > 0, p.localSize < 1 << 20 else { throw NNLayerError("localSize must be positive, got \(p.localSize)") }
        alpha = p.alpha; beta = p.beta; k = p.k; size = Int(p.localSize)
    }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        guard inputs.count == 1 else { throw NNLayerError("takes one input, got \(inputs.count)") }
        return inputs
    }

    var detail: String { "size \(size), α=\(alpha), β=\(beta), k=\(k)" }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let x = context.pointer(inputs[0]), y = context.pointer(outputs[0])
        let shape = inputs[0].shape, channels = shape.c, hw = shape.hw
        let before = (size - 1) / 2, after = size / 2
        let a = alpha / Float(size), b = beta, k = self.k
        forEachPositionRun(shape, cost: channels * (size + 16), context) { image, first, n, _ in
            let xb = x + image * channels * hw + first, yb = y + image * channels * hw + first
            for c in 0..<channels {
                let yc = yb + c * hw
                for i in 0..<n { yc[i] = 0 }
                for j in Swift.max(0, c - before)...Swift.min(channels - 1, c + after) {
                    let xj = xb + j * hw
                    for i in 0..<n { yc[i] += xj[i] * xj[i] }
                }
                let xc = xb + c * hw
                if b == 0.75 {
                    for i in 0..<n { let d = k + a * yc[i]; yc[i] = xc[i] / (d * d.squareRoot()).squareRoot() }
                } else {
                    for i in 0..<n { yc[i] = xc[i] / Foundation.pow(k + a * yc[i], b) }
                }
            }
        }
    }
}

/// `MeanVarianceNormalizeLayerParams`: subtracts the mean and, with `normalizeVariance`, divides
/// by `√(variance + ε)` (population variance; a zero ε means 1e-6). The statistics are taken
/// over each image's C × H × W with `acrossChannels`, else over each channel's H × W. In place.
final class MVNLayer: NNLayer, @unchecked Sendable {
    let acrossChannels: Bool
    let normalizeVariance: Bool
    let epsilon: Float

    init(_ p: CoreML_Specification_MeanVarianceNormalizeLayerParams) {
        acrossChannels = p.acrossChannels
        normalizeVariance = p.normalizeVariance
        epsilon = p.epsilon == 0 ? 1e-6 : p.epsilon
    }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        guard inputs.count == 1 else { throw NNLayerError("takes one input, got \(inputs.count)") }
        return inputs
    }

    var runsInPlace: Bool { true }
    var detail: String { (acrossChannels ? "over C×H×W" : "over H×W") + (normalizeVariance ? ", mean and variance" : ", mean only") }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let x = context.pointer(inputs[0]), y = context.pointer(outputs[0])
        let shape = inputs[0].shape
        let group = acrossChannels ? shape.chw : shape.hw
        let groups = shape.count / group
        let normalize = normalizeVariance, eps = epsilon
        context.parallelFor(groups, costPerItem: group * 4) { range in
            for g in range {
                let xp = x + g * group, yp = y + g * group
                var sum: Float = 0
                for i in 0..<group { sum += xp[i] }
                let mean = sum / Float(group)
                if normalize {
                    var squares: Float = 0
                    for i in 0..<group { let d = xp[i] - mean; squares += d * d }
                    let inv = 1 / (squares / Float(group) + eps).squareRoot()
                    for i in 0..<group { yp[i] = (xp[i] - mean) * inv }
                } else {
                    for i in 0..<group { yp[i] = xp[i] - mean }
                }
            }
        }
    }
}

/// `L2NormalizeLayerParams`: `y = x / √(Σ x² + ε)` with the sum over each image's C × H × W
/// (a zero ε means 1e-6). In place.
final class L2NormalizeLayer: NNLayer, @unchecked Sendable {
    let epsilon: Float

    init(_ p: CoreML_Specification_L2NormalizeLayerParams) {
        epsilon = p.epsilon == 0 ? 1e-6 : p.epsilon
    }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        guard inputs.count == 1 else { throw NNLayerError("takes one input, got \(inputs.count)") }
        return inputs
    }

    var runsInPlace: Bool { true }
    var detail: String { "over C×H×W, ε=\(epsilon)" }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let x = context.pointer(inputs[0]), y = context.pointer(outputs[0])
        let shape = inputs[0].shape, n = shape.chw, eps = epsilon
        context.parallelFor(shape.images, costPerItem: n * 3) { range in
            for image in range {
                let xp = x + image * n, yp = y + image * n
                var squares: Float = 0
                for i in 0..<n { squares += xp[i] * xp[i] }
                let inv = 1 / (squares + eps).squareRoot()
                for i in 0..<n { yp[i] = xp[i] * inv }
            }
        }
    }
}
