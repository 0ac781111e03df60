import Foundation

/// `batch_norm`, `instance_norm`, `layer_norm`, `l2_norm` and `local_response_norm`
/// (`normalization.py`). Means and variances accumulate in Double so long rows keep fp32
/// accuracy; variances are the biased (population) ones the definitions write.
enum MILNormalizationOps {
    nonisolated(unsafe) static let kernels: [String: MILKernel] = [
        "batch_norm": { call in
            let x = try call.tensor("x")
            guard x.rank >= 2 else { throw call.error("x \(x.shape) must be [N, C, *spatial]") }
            let c = x.shape[1]
            let mean = try channelVector(call, "mean", c, default: nil)
            let variance = try channelVector(call, "variance", c, default: nil)
            let gamma = try channelVector(call, "gamma", c, default: 1), beta = try channelVector(call, "beta", c, default: 0)
            let eps = try call.float("epsilon", default: 1e-5)
            let scale = (0..<c).map { gamma[$0] / (variance[$0] + eps).squareRoot() }
            let shift = (0..<c).map { beta[$0] - mean[$0] * scale[$0] }
            let plane = x.shape[2...].reduce(1, *)
            var v = x.floats
            for i in v.indices {
                let ch = (i / plane) % c
                v[i] = v[i] * scale[ch] + shift[ch]
            }
            return [.tensor(MILTensor(floats: v, shape: x.shape, dataType: x.dataType))]
        },
        "instance_norm": { call in
            let x = try call.tensor("x")
            guard x.rank >= 3 else { throw call.error("x \(x.shape) must be [N, C, *spatial]") }
            let c = x.shape[1]
            let gamma = try channelVector(call, "gamma", c, default: 1), beta = try channelVector(call, "beta", c, default: 0)
            let eps = try call.float("epsilon", default: 1e-5)
            let plane = x.shape[2...].reduce(1, *)
            var v = x.floats
            for p in 0..<(v.count / Swift.max(plane, 1)) {
                let ch = p % c
                normalize(&v, offsets: Array((p * plane)..<((p + 1) * plane)), eps: eps) { _ in (gamma[ch], beta[ch]) }
            }
            return [.tensor(MILTensor(floats: v, shape: x.shape, dataType: x.dataType))]
        },
        "layer_norm": { call in
            let x = try call.tensor("x")
            let axes = try call.ints("axes", default: Array(0..<x.rank)).map { try MILShape.axis($0, rank: x.rank, op: call.name) }
            let normalized = Array(Set(axes)).sorted()
            let normalizedShape = normalized.map { x.shape[$0] }
            let inner = normalizedShape.reduce(1, *)
            let gamma = try call.optionalTensor("gamma"), beta = try call.optionalTensor("beta")
            for (name, t) in [("gamma", gamma), ("beta", beta)] {
                if let t, t.count != inner { throw call.error("\(name) has shape \(t.shape), expected \(normalizedShape)") }
            }
            let gv = gamma?.floats, bv = beta?.floats
            // Bring the normalized axes last; each group of `inner` elements normalizes together.
            let kept = (0..<x.rank).filter { !normalized.contains($0) }
            let perm = kept + normalized
            let moved = MILShapeOps.transpose(MILTensor(ints: Array(0..<x.count), shape: x.shape), perm).ints
            let eps = try call.float("epsilon", default: 1e-5)
            var v = x.floats
            for group in 0..<(x.count / Swift.max(inner, 1)) {
                normalize(&v, offsets: Array(moved[(group * inner)..<((group + 1) * inner)]), eps: eps) { j in
                    (gv?[j] ?? 1, bv?[j] ?? 0)
                }
            }
            return [.tensor(MILTensor(floats: v, shape: x.shape, dataType: x.dataType))]
        },
        "l2_norm": { call in
            let x = try call.tensor("x")
            guard x.rank >= 3 else { throw call.error("x \(x.shape) must have rank 3 or more") }
            let eps = try call.float("epsilon", default: 1e-6)
            let inner = x.shape.suffix(3).reduce(1, *)
            var v = x.floats
            for b in 0..<(v.count / Swift.max(inner, 1)) {
                var sum = 0.0
                for i in (b * inner)..<((b + 1) * inner) { sum += Double(v[i]) * Double(v[i]) }
                let scale = Float(1 / (sum + Double(eps)).squareRoot())
                for i in (b * inner)..<((b + 1) * inner) { v[i] *= scale }
            }
            return [.tensor(MILTensor(floats: v, shape: x.shape, dataType: x.dataType))]
        },
        "local_response_norm": { call in
            // The window of channel c runs over c − ⌊(size−1)/2⌋ … c + ⌊size/2⌋, clipped to the
            // channels, as the neural-network LRN layer defines it.
            let x = try call.tensor("x")
            guard x.rank >= 3 else { throw call.error("x \(x.shape) must be [N, C, *spatial]") }
            let size = try call.int("size")
            guard size > 0 else { throw call.error("size must be positive") }
            let alpha = try call.float("alpha", default: 1e-4), beta = try call.float("beta", default: 0.75), k = try call.float("k", default: 1)
            let c = x.shape[1], plane = x.shape[2...].reduce(1, *)
            let before = (size - 1) / 2, after = size / 2
            let v = x.floats
            var out = v
            for image in 0..<x.shape[0] {
                for ch in 0..<c {
                    for i in 0..<plane {
                        var sum: Float = 0
                        for j in Swift.max(0, ch - before)...Swift.min(c - 1, ch + after) {
                            let e = v[(image * c + j) * plane + i]
                            sum += e * e
                        }
                        let at = (image * c + ch) * plane + i
                        out[at] = v[at] / Foundation.pow(k + alpha / Float(size) * sum, beta)
                    }
                }
            }
            return [.tensor(MILTensor(floats: out, shape: x.shape, dataType: x.dataType))]
        },
    ]

    /// A per-channel input of `count` values, or `default` repeated when absent.
    static func channelVector(_ call: MILOpCall, _ name: String, _ count: Int, default d: Float?) throws -> [Float] {
        guard let t = try call.optionalTensor(name) else {
            guard let d else { throw call.error("the input '\(name)' is missing") }
            return [Float](repeating: d, count: count)
        }
        guard t.count == count else { throw call.error("\(name) has \(t.count) values for \(count) channels") }
        return t.floats
    }

    /// Normalizes the elements at `offsets` to zero mean and unit variance, then applies the
    /// scale and offset `affine(j)` gives for the j-th of them.
    static func normalize(_ v: inout [Float], offsets: [Int], eps: Float, affine: (Int) -> (Float, Float)) {
        guard !offsets.isEmpty else { return }
        var sum = 0.0
        for o in offsets { sum += Double(v[o]) }
        let mean = sum / Double(offsets.count)
        var squares = 0.0
        for o in offsets { let d = Double(v[o]) - mean; squares += d * d }
        let inv = 1 / (squares / Double(offsets.count) + Double(eps)).squareRoot()
        for (j, o) in offsets.enumerated() {
            let (scale, shift) = affine(j)
            v[o] = Float((Double(v[o]) - mean) * inv) * scale + shift
        }
    }
}
