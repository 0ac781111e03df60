import Dispatch
import Foundation

/// Attention as the planner fuses it (`MILFusion.fuseAttention`): `matmul(Q, Kᵀ)`, a scale,
/// `softmax` over the last axis and `matmul(·, V)` computed as softmax(Q·Kᵀ·s)·V one block of
/// query rows at a time: each block's scores (rows × S) are multiplied, scaled, normalised
/// and multiplied by V while they are in cache, so the whole [B…, L, S] score tensor is never
/// written (nor read back by the softmax and the second product). Blocks of every batch entry
/// and head are split over the threads.
enum MILFusedAttention {
    /// The scale s applied to the scores (a constant).
    static let scaleInput = "__attention_scale"
    /// True when `key` is given as [B…, E, S] (the first matmul did not transpose it).
    static let keyTransposedInput = "__attention_key_transposed"
    /// Query rows per block: small enough that the block's scores stay in L1/L2 for long keys.
    static let rowBlock = 32

    static func kernel(_ call: MILOpCall) throws -> [MILValue] { [.tensor(try run(call))] }

    static func run(_ call: MILOpCall) throws -> MILTensor {
        let q = try call.tensor("query"), k = try call.tensor("key"), v = try call.tensor("value")
        let scale = try call.float(scaleInput)
        let kt = try call.bool(keyTransposedInput, default: false)
        guard q.rank >= 2, k.rank == q.rank, v.rank == q.rank else {
            throw call.error("query \(q.shape), key \(k.shape) and value \(v.shape) must share a rank of at least 2")
        }
        let batch = Array(q.shape.dropLast(2))
        let L = q.shape[q.rank - 2], E = q.shape[q.rank - 1]
        let S = kt ? k.shape[k.rank - 1] : k.shape[k.rank - 2], EK = kt ? k.shape[k.rank - 2] : k.shape[k.rank - 1]
        let EV = v.shape[v.rank - 1]
        guard Array(k.shape.dropLast(2)) == batch, Array(v.shape.dropLast(2)) == batch, EK == E, v.shape[v.rank - 2] == S else {
            throw call.error("query \(q.shape), key \(k.shape) and value \(v.shape) do not fit [B…, L, E], [B…, S, E], [B…, S, EV]")
        }
        let n = batch.reduce(1, *)
        var out = [Float](repeating: 0, count: n * L * EV)
        guard n > 0, L > 0, EV > 0 else { return MILTensor(floats: out, shape: batch + [L, EV], dataType: q.dataType) }
        let blocks = (L + rowBlock - 1) / rowBlock
        let units = n * blocks
        let workers = Swift.max(1, Swift.min(call.threads, units))
        let scratch = UnsafeMutablePointer<Float>.allocate(capacity: workers * rowBlock * Swift.max(S, 1))
        defer { scratch.deallocate() }
        let qv = q.floats, kv = k.floats, vv = v.floats
        qv.withUnsafeBufferPointer { qp in
            kv.withUnsafeBufferPointer { kp in
                vv.withUnsafeBufferPointer { vp in
                    out.withUnsafeMutableBufferPointer { op in
                        let shared = Shared(q: qp.baseAddress!, k: kp.baseAddress!, v: vp.baseAddress!, out: op.baseAddress!, scores: scratch)
                        let body: @Sendable (Int) -> Void = { worker in
                            let scores = shared.scores + worker * rowBlock * Swift.max(S, 1)
                            var unit = worker
                            while unit < units {
                                let b = unit / blocks, r0 = (unit % blocks) * rowBlock, rows = Swift.min(rowBlock, L - r0)
                                // scores[rows × S] = Q[r0..<r0+rows] · Kᵀ (K stored [S, E], or [E, S] when kt).
                                MILLinearAlgebraOps.product(rows, S, E, shared.q + (b * L + r0) * E, transA: false, shared.k + b * S * E,
                                                            transB: !kt, scores, ldc: S, beta: 0)
                                softmaxRows(scores, rows: rows, width: S, scale: scale)
                                MILLinearAlgebraOps.product(rows, EV, S, scores, transA: false, shared.v + b * S * EV, transB: false,
                                                            shared.out + (b * L + r0) * EV, ldc: EV, beta: 0)
                                unit += workers
                            }
                        }
                        if workers == 1 { body(0) } else { DispatchQueue.concurrentPerform(iterations: workers, execute: body) }
                    }
                }
            }
        }
        return MILTensor(floats: out, shape: batch + [L, EV], dataType: q.dataType)
    }

    /// Each row r of p[rows × width] ← softmax(r · scale), the row's maximum subtracted first.
    static func softmaxRows(_ p: UnsafeMutablePointer<Float>, rows: Int, width: Int, scale: Float) {
        for r in 0..<rows {
            let row = p + r * width
            var m = -Float.infinity
            for j in 0..<width { row[j] *= scale; m = Swift.max(m, row[j]) }
            var sum: Float = 0
            for j in 0..<width { let e = expf(row[j] - m); row[j] = e; sum += e }
            let inv = 1 / sum
            for j in 0..<width { row[j] *= inv }
        }
    }

    /// What the workers share (each writes its own blocks of rows of `out`, and its own scores).
    private struct Shared: @unchecked Sendable {
        let q: UnsafePointer<Float>
        let k: UnsafePointer<Float>
        let v: UnsafePointer<Float>
        let out: UnsafeMutablePointer<Float>
        let scores: UnsafeMutablePointer<Float>
    }
}
