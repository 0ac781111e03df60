import Foundation

/// Activation functions (MIL `activation.py`): element-wise, some with per-channel
/// parameters on axis 1, and softmax along an axis.
enum MILActivationOps {
    nonisolated(unsafe) static let kernels: [String: MILKernel] = [
        "relu": { call in [.tensor(try MILElementwiseOps.map(try call.tensor("x")) { Swift.max($0, 0) })] },
        "relu6": { call in [.tensor(try MILElementwiseOps.map(try call.tensor("x")) { Swift.min(Swift.max($0, 0), 6) })] },
        "sigmoid": { call in [.tensor(try MILElementwiseOps.map(try call.tensor("x")) { 1 / (1 + expf(-$0)) })] },
        "silu": { call in [.tensor(try MILElementwiseOps.map(try call.tensor("x")) { $0 / (1 + expf(-$0)) })] },
        "softsign": { call in [.tensor(try MILElementwiseOps.map(try call.tensor("x")) { $0 / (1 + abs($0)) })] },
        "softplus": { call in [.tensor(try MILElementwiseOps.map(try call.tensor("x")) { softplus($0) })] },
        "elu": { call in
            let a = try call.float("alpha", default: 1)
            return [.tensor(try MILElementwiseOps.map(try call.tensor("x")) { $0 > 0 ? $0 : a * (expf($0) - 1) })]
        },
        "leaky_relu": { call in
            let a = try call.float("alpha", default: 0.01)
            return [.tensor(try MILElementwiseOps.map(try call.tensor("x")) { $0 >= 0 ? $0 : a * $0 })]
        },
        "clamped_relu": { call in
            let a = try call.float("alpha", default: 0), b = try call.float("beta", default: 6)
            return [.tensor(try MILElementwiseOps.map(try call.tensor("x")) { Swift.min(b, $0 >= 0 ? $0 : a * $0) })]
        },
        "linear_activation": { call in
            let a = try call.float("alpha"), b = try call.float("beta", default: 0)
            return [.tensor(try MILElementwiseOps.map(try call.tensor("x")) { a * $0 + b })]
        },
        "scaled_tanh": { call in
            let a = try call.float("alpha", default: 1), b = try call.float("beta", default: 1)
            return [.tensor(try MILElementwiseOps.map(try call.tensor("x")) { a * tanhf(b * $0) })]
        },
        "sigmoid_hard": { call in
            let a = try call.float("alpha", default: 0.2), b = try call.float("beta", default: 0.5)
            return [.tensor(try MILElementwiseOps.map(try call.tensor("x")) { Swift.min(Swift.max(a * $0 + b, 0), 1) })]
        },
        "thresholded_relu": { call in
            let a = try call.float("alpha", default: 1)
            return [.tensor(try MILElementwiseOps.map(try call.tensor("x")) { $0 > a ? $0 : 0 })]
        },
        "gelu": { call in
            let mode = try call.string("mode", default: "EXACT")
            let f: (Float) -> Float
            switch mode {
            case "EXACT": f = { 0.5 * $0 * (1 + erff($0 / 2.0.squareRoot().float)) }
            case "TANH_APPROXIMATION":
                // 0.5·x·(1 + tanh(z)) is x·sigmoid(2z): one exp instead of libm's slower tanh.
                let c2 = 2 * (2 / Float.pi).squareRoot()
                f = { $0 / (1 + expf(-c2 * ($0 + 0.044715 * $0 * $0 * $0))) }
            case "SIGMOID_APPROXIMATION": f = { $0 / (1 + expf(-1.702 * $0)) }
            default: throw call.error("unknown gelu mode \(mode)")
            }
            return [.tensor(try MILElementwiseOps.map(try call.tensor("x"), f))]
        },
        "prelu": { call in
            let x = try call.tensor("x"), alpha = try call.floats("alpha")
            return [.tensor(try perChannel(call, x, [alpha]) { v, p in v >= 0 ? v : p[0] * v })]
        },
        "softplus_parametric": { call in
            let x = try call.tensor("x"), alpha = try call.floats("alpha"), beta = try call.floats("beta")
            return [.tensor(try perChannel(call, x, [alpha, beta]) { v, p in p[0] * softplus(p[1] * v) })]
        },
        "softmax": { call in
            let x = try call.tensor("x")
            let axis = try MILShape.axis(try call.int("axis", default: -1), rank: x.rank, op: call.name)
            return [.tensor(softmax(x, axis: axis))]
        },
    ]

    @inline(__always) static func softplus(_ x: Float) -> Float {
        x > 20 ? x : log1pf(expf(x))
    }

    /// f(x, parameters of x's channel), channels on axis 1 (rank 3 or more).
    static func perChannel(_ call: MILOpCall, _ x: MILTensor, _ params: [[Float]], _ f: (Float, [Float]) -> Float) throws -> MILTensor {
        guard x.rank >= 3 else { throw call.error("x must have rank 3 or more, has shape \(x.shape)") }
        let c = x.shape[1]
        for p in params where p.count != c && p.count != 1 {
            throw call.error("a per-channel parameter has \(p.count) values for \(c) channels")
        }
        let inner = x.shape[2...].reduce(1, *)
        var v = x.floats
        var local = [Float](repeating: 0, count: params.count)
        for i in v.indices {
            let ch = (i / inner) % c
            for j in params.indices { local[j] = params[j].count == 1 ? params[j][0] : params[j][ch] }
            v[i] = f(v[i], local)
        }
        return MILTensor(floats: v, shape: x.shape, dataType: x.dataType)
    }

    static func softmax(_ x: MILTensor, axis: Int) -> MILTensor {
        var v = x.floats
        let n = x.shape[axis]
        let inner = x.shape[(axis + 1)...].reduce(1, *)
        let outer = x.count / max(n * inner, 1)
        for o in 0..<outer {
            for i in 0..<inner {
                let base = o * n * inner + i
                var m = -Float.infinity
                for j in 0..<n { m = max(m, v[base + j * inner]) }
                var s: Float = 0
                for j in 0..<n { let e = expf(v[base + j * inner] - m); v[base + j * inner] = e; s += e }
                for j in 0..<n { v[base + j * inner] /= s }
            }
        }
        return MILTensor(floats: v, shape: x.shape, dataType: x.dataType)
    }
}

extension Double {
    var float: Float { Float(self) }
}
