import Foundation

/// Reductions over axes (`reduction.py`): sums, means, norms, extremes, arg-extremes.
enum MILReductionOps {
    nonisolated(unsafe) static let kernels: [String: MILKernel] = {
        var k: [String: MILKernel] = [:]
        // (initial, combine, finish(acc, count))
        let reducers: [String: (Float, (Float, Float) -> Float, (Float, Int) -> Float)] = [
            "reduce_sum": (0, { $0 + $1 }, { a, _ in a }),
            "reduce_mean": (0, { $0 + $1 }, { a, n in a / Float(n) }),
            "reduce_prod": (1, { $0 * $1 }, { a, _ in a }),
            "reduce_max": (-.infinity, { Swift.max($0, $1) }, { a, _ in a }),
            "reduce_min": (.infinity, { Swift.min($0, $1) }, { a, _ in a }),
            "reduce_l1_norm": (0, { $0 + abs($1) }, { a, _ in a }),
            "reduce_l2_norm": (0, { $0 + $1 * $1 }, { a, _ in sqrtf(a) }),
            "reduce_sum_square": (0, { $0 + $1 * $1 }, { a, _ in a }),
            "reduce_log_sum": (0, { $0 + $1 }, { a, _ in logf(a) }),
        ]
        for (name, r) in reducers {
            k[name] = { call in
                let x = try call.tensor("x")
                let (axes, keep) = try axesAndKeep(call, rank: x.rank)
                if case .int(let v) = x.storage, ["reduce_sum", "reduce_prod", "reduce_max", "reduce_min"].contains(name) {
                    let f = MILTensor(floats: v.map { Float($0) }, shape: x.shape)
                    let out = reduce(f, axes: axes, keep: keep, initial: r.0, combine: r.1, finish: r.2)
                    return [.tensor(MILTensor(ints: out.floats.map { Int($0) }, shape: out.shape, dataType: x.dataType))]
                }
                var out = reduce(x, axes: axes, keep: keep, initial: r.0, combine: r.1, finish: r.2,
                                 summing: name == "reduce_sum" || name == "reduce_mean")
                out.dataType = x.dataType.isFloat ? x.dataType : .fp32
                return [.tensor(out)]
            }
        }
        k["reduce_log_sum_exp"] = { call in
            let x = try call.tensor("x")
            let (axes, keep) = try axesAndKeep(call, rank: x.rank)
            let m = reduce(x, axes: axes, keep: true, initial: -.infinity, combine: { Swift.max($0, $1) }, finish: { a, _ in a })
            let idx = MILShape.broadcastIndices(from: m.shape, to: x.shape)
            let mv = m.floats, xv = x.floats
            let shifted = MILTensor(floats: (0..<xv.count).map { expf(xv[$0] - mv[idx[$0]]) }, shape: x.shape)
            let s = reduce(shifted, axes: axes, keep: true, initial: 0, combine: { $0 + $1 }, finish: { a, _ in a })
            let sv = s.floats
            let outShape = keep ? s.shape : s.shape.enumerated().filter { !axes.contains($0.offset) }.map(\.element)
            return [.tensor(MILTensor(floats: (0..<sv.count).map { logf(sv[$0]) + mv[$0] }, shape: outShape, dataType: x.dataType))]
        }
        for (name, greater) in [("reduce_argmax", true), ("reduce_argmin", false)] {
            k[name] = { call in
                let x = try call.tensor("x")
                let axis = try MILShape.axis(try call.int("axis", default: -1), rank: x.rank, op: call.name)
                let keep = try call.bool("keep_dims", default: false)
                let n = x.shape[axis], inner = x.shape[(axis + 1)...].reduce(1, *)
                let outer = x.count / max(n * inner, 1)
                let v = x.floats
                var out = [Int](repeating: 0, count: outer * inner)
                for o in 0..<outer {
                    for i in 0..<inner {
                        var best = 0, bv = v[o * n * inner + i]
                        for j in 1..<max(n, 1) {
                            let c = v[o * n * inner + j * inner + i]
                            if greater ? c > bv : c < bv { bv = c; best = j }
                        }
                        out[o * inner + i] = best
                    }
                }
                var shape = x.shape
                if keep { shape[axis] = 1 } else { shape.remove(at: axis) }
                return [.tensor(MILTensor(ints: out, shape: shape, dataType: .int32))]
            }
        }
        return k
    }()

    static func axesAndKeep(_ call: MILOpCall, rank: Int) throws -> ([Int], Bool) {
        let keep = try call.bool("keep_dims", default: false)
        guard let given = try call.optionalTensor("axes") else { return (Array(0..<rank), keep) }
        let axes = try given.ints.map { try MILShape.axis($0, rank: rank, op: call.name) }
        return (Array(Set(axes)).sorted(), keep)
    }

    /// Reduces `x` over `axes`. `summing`: `combine` is the sum (`reduce_sum`, `reduce_mean`),
    /// which the fast path below adds in vector lanes.
    static func reduce(_ x: MILTensor, axes: [Int], keep: Bool, initial: Float, combine: (Float, Float) -> Float,
                       finish: (Float, Int) -> Float, summing: Bool = false) -> MILTensor {
        let reduced = Set(axes)
        var outShapeKeep = x.shape
        for a in reduced { outShapeKeep[a] = 1 }
        let outCount = outShapeKeep.reduce(1, *)
        let shape = keep ? outShapeKeep : x.shape.enumerated().filter { !reduced.contains($0.offset) }.map(\.element)
        // The trailing axes (a global pool's H and W, a row's last axis): each output reads one
        // contiguous run, without the index walk below (an op of its own on the interpreter,
        // such as the mean before a classifier, spent most of its time in that walk).
        if !reduced.isEmpty, reduced == Set((x.rank - reduced.count)..<x.rank), outCount > 0 {
            let inner = x.count / outCount
            let acc = x.floats.withUnsafeBufferPointer { v in
                (0..<outCount).map { o in
                    finish(Self.combined(v.baseAddress! + o * inner, count: inner, initial: initial, combine: combine, summing: summing), inner)
                }
            }
            return MILTensor(floats: acc, shape: shape, dataType: x.dataType)
        }
        var acc = [Float](repeating: initial, count: outCount)
        let outStrides = MILShape.strides(outShapeKeep)
        var eff = [Int](repeating: 0, count: x.rank)
        for d in 0..<x.rank where !reduced.contains(d) { eff[d] = outStrides[d] }
        let v = x.floats
        var coord = [Int](repeating: 0, count: x.rank)
        var o = 0
        for i in 0..<v.count {
            acc[o] = combine(acc[o], v[i])
            var d = x.rank - 1
            while d >= 0 {
                coord[d] += 1; o += eff[d]
                if coord[d] < x.shape[d] { break }
                o -= eff[d] * coord[d]; coord[d] = 0
                d -= 1
            }
        }
        let n = reduced.reduce(1) { $0 * x.shape[$1] }
        for i in acc.indices { acc[i] = finish(acc[i], n) }
        return MILTensor(floats: acc, shape: shape, dataType: x.dataType)
    }

    /// `count` values from `p` combined onto `initial`: a sum in 16 lanes (then across them),
    /// anything else in order.
    private static func combined(_ p: UnsafePointer<Float>, count: Int, initial: Float, combine: (Float, Float) -> Float,
                                 summing: Bool) -> Float {
        var a = initial
        var j = 0
        if summing {
            var lanes = SIMD16<Float>()
            let raw = UnsafeRawPointer(p)
            while j + 16 <= count {
                lanes += raw.loadUnaligned(fromByteOffset: j * 4, as: SIMD16<Float>.self)
                j += 16
            }
            a += lanes.sum()
            while j < count { a += p[j]; j += 1 }
            return a
        }
        while j < count { a = combine(a, p[j]); j += 1 }
        return a
    }
}
