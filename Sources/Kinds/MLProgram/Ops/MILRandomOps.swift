import Foundation

/// Random tensors (`random.py`): random_bernoulli, random_categorical, random_normal,
/// random_uniform. The planner never computes them at load, so every prediction draws anew.
///
/// A non-negative `seed` makes an op draw the same values at every prediction ("a
/// reproducible sequence across invocations"); the values are Cortado's own (xoshiro256**),
/// not the ones Core ML draws for that seed. Without a seed (-1) each prediction is seeded
/// from the system generator.
enum MILRandomOps {
    nonisolated(unsafe) static let kernels: [String: MILKernel] = [
        "random_uniform": { call in
            var g = try source(call)
            let low = try call.float("low", default: 0), high = try call.float("high", default: 1)
            let shape = try outputShape(call)
            let v = (0..<MILShape.count(shape)).map { _ in low + (high - low) * g.unit() }
            return [.tensor(MILTensor(floats: v, shape: shape, dataType: call.outputDataType() ?? .fp32))]
        },
        "random_normal": { call in
            var g = try source(call)
            let mean = try call.float("mean", default: 0), stddev = try call.float("stddev", default: 1)
            let shape = try outputShape(call)
            let v = (0..<MILShape.count(shape)).map { _ in mean + stddev * g.normal() }
            return [.tensor(MILTensor(floats: v, shape: shape, dataType: call.outputDataType() ?? .fp32))]
        },
        "random_bernoulli": { call in
            var g = try source(call)
            let p = try call.float("prob", default: 0.5)
            let shape = try outputShape(call)
            let v = (0..<MILShape.count(shape)).map { _ -> Float in g.unit() < p ? 1 : 0 }
            return [.tensor(MILTensor(floats: v, shape: shape, dataType: call.outputDataType() ?? .fp32))]
        },
        "random_categorical": { call in
            var g = try source(call)
            let x = try call.tensor("x")
            guard x.rank >= 1, let classes = x.shape.last, classes > 0 else { throw call.error("x \(x.shape) has no classes on its last axis") }
            let mode = try call.string("mode", default: "logits")
            guard mode == "logits" || mode == "probs" else { throw call.error("unknown mode '\(mode)' (logits, probs)") }
            let size = try call.int("size", default: 1)
            guard size >= 0 else { throw call.error("size \(size) is negative") }
            let v = x.floats, rows = x.count / classes
            var out: [Float] = []
            out.reserveCapacity(rows * size)
            var weights = [Double](repeating: 0, count: classes)
            for r in 0..<rows {
                let row = v[(r * classes)..<((r + 1) * classes)]
                if mode == "logits" {
                    let top = Double(row.max() ?? 0)
                    for (j, z) in row.enumerated() { weights[j] = exp(Double(z) - top) }
                } else {
                    for (j, p) in row.enumerated() { weights[j] = Swift.max(Double(p), 0) }
                }
                let total = weights.reduce(0, +)
                guard total > 0, total.isFinite else { throw call.error("row \(r) of x has no positive finite probability") }
                for _ in 0..<size {
                    var u = Double(g.unit()) * total, pick = classes - 1
                    for j in 0..<classes {
                        u -= weights[j]
                        if u < 0 { pick = j; break }
                    }
                    out.append(Float(pick))
                }
            }
            var shape = x.shape
            shape[shape.count - 1] = size
            return [.tensor(MILTensor(floats: out, shape: shape, dataType: x.dataType.isFloat ? x.dataType : .fp32))]
        },
    ]

    static func outputShape(_ call: MILOpCall) throws -> [Int] {
        let shape = try call.ints("shape")
        guard shape.allSatisfy({ $0 >= 0 }) else { throw call.error("shape \(shape) has a negative dimension") }
        return shape
    }

    static func source(_ call: MILOpCall) throws -> MILRandomSource {
        let seed = try call.int("seed", default: -1)
        return MILRandomSource(seed: seed >= 0 ? UInt64(seed) : UInt64.random(in: .min ... .max))
    }
}

/// xoshiro256** seeded through splitmix64: a small generator whose sequence depends only on
/// the seed, so seeded ops repeat across predictions and platforms.
struct MILRandomSource: RandomNumberGenerator {
    private var s: (UInt64, UInt64, UInt64, UInt64)

    init(seed: UInt64) {
        var z = seed
        func splitmix() -> UInt64 {
            z &+= 0x9E37_79B9_7F4A_7C15
            var r = z
            r = (r ^ (r >> 30)) &* 0xBF58_476D_1CE4_E5B9
            r = (r ^ (r >> 27)) &* 0x94D0_49BB_1331_11EB
            return r ^ (r >> 31)
        }
        s = (splitmix(), splitmix(), splitmix(), splitmix())
    }

    mutating func next() -> UInt64 {
        let result = ((s.1 &* 5) << 7 | (s.1 &* 5) >> 57) &* 9
        let t = s.1 << 17
        s.2 ^= s.0; s.3 ^= s.1; s.1 ^= s.2; s.0 ^= s.3
        s.2 ^= t
        s.3 = s.3 << 45 | s.3 >> 19
        return result
    }

    /// Uniform in [0, 1).
    mutating func unit() -> Float { Float(next() >> 40) * 0x1p-24 }

    /// Standard normal (Box–Muller).
    mutating func normal() -> Float {
        let u1 = 1 - Double(next() >> 11) * 0x1p-53, u2 = Double(next() >> 11) * 0x1p-53
        return Float((-2 * log(u1)).squareRoot() * cos(2 * Double.pi * u2))
    }
}
