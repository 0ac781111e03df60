import Foundation

/// `scaled_dot_product_attention` (iOS18 `transformers.py`) and `einsum` (iOS15 `linear.py`).
enum MILAttentionOps {
    nonisolated(unsafe) static let kernels: [String: MILKernel] = [
        "scaled_dot_product_attention": { call in
            let q = try call.tensor("query"), k = try call.tensor("key"), v = try call.tensor("value")
            guard q.rank >= 3, k.rank == q.rank, v.rank == q.rank else {
                throw call.error("query \(q.shape), key \(k.shape) and value \(v.shape) must share a rank of at least 3")
            }
            let batch = Array(q.shape.dropLast(2))
            let L = q.shape[q.rank - 2], E = q.shape[q.rank - 1]
            let S = k.shape[k.rank - 2], EV = v.shape[v.rank - 1]
            guard Array(k.shape.dropLast(2)) == batch, Array(v.shape.dropLast(2)) == batch, k.shape.last == E, v.shape[v.rank - 2] == S else {
                throw call.error("query \(q.shape), key \(k.shape) and value \(v.shape) do not fit [B…, L, E], [B…, S, E], [B…, S, EV]")
            }
            let scoresShape = batch + [L, S]
            var bias: [Float]?
            if let mask = try call.optionalTensor("attn_mask") {
                guard MILShape.broadcast(mask.shape, scoresShape) == scoresShape else {
                    throw call.error("attn_mask \(mask.shape) does not broadcast to the scores' shape \(scoresShape)")
                }
                let idx = MILShape.broadcastIndices(from: mask.shape, to: scoresShape)
                if case .bool(let keep) = mask.storage {
                    bias = idx.map { keep[$0] ? 0 : -.infinity }
                } else {
                    let m = mask.floats
                    bias = idx.map { m[$0] }
                }
            }
            let n = MILShape.count(batch)
            let qv = q.floats, kv = k.floats, vv = v.floats
            var scores = [Float](repeating: 0, count: n * L * S)
            var out = [Float](repeating: 0, count: n * L * EV)
            let scale = 1 / Float(E).squareRoot()
            qv.withUnsafeBufferPointer { qp in
                kv.withUnsafeBufferPointer { kp in
                    scores.withUnsafeMutableBufferPointer { sp in
                        for b in 0..<n {
                            MILLinearAlgebraOps.gemmPointers(L, S, E, qp.baseAddress! + b * L * E, transA: false, kp.baseAddress! + b * S * E,
                                                             transB: true, sp.baseAddress! + b * L * S, beta: 0)
                        }
                    }
                }
            }
            for i in scores.indices { scores[i] = scores[i] * scale + (bias?[i] ?? 0) }
            let weights = MILActivationOps.softmax(MILTensor(floats: scores, shape: scoresShape), axis: scoresShape.count - 1).floats
            weights.withUnsafeBufferPointer { wp in
                vv.withUnsafeBufferPointer { vp in
                    out.withUnsafeMutableBufferPointer { op in
                        for b in 0..<n {
                            MILLinearAlgebraOps.gemmPointers(L, EV, S, wp.baseAddress! + b * L * S, transA: false, vp.baseAddress! + b * S * EV,
                                                             transB: false, op.baseAddress! + b * L * EV, beta: 0)
                        }
                    }
                }
            }
            return [.tensor(MILTensor(floats: out, shape: batch + [L, EV], dataType: q.dataType))]
        },
        "einsum": { call in
            let values = try call.tensors("values")
            guard values.count == 2 else { throw call.error("einsum takes two values, has \(values.count)") }
            return [.tensor(try einsum(try call.string("equation"), values[0], values[1], call: call))]
        },
    ]

    /// A two-operand einsum as one batched matrix product: letters in both operands and the
    /// output are batch axes (a size of 1 broadcasts), letters in both operands only are summed,
    /// the rest are the rows of the first operand and the columns of the second.
    static func einsum(_ equation: String, _ x: MILTensor, _ y: MILTensor, call: MILOpCall) throws -> MILTensor {
        let spec = equation.filter { !$0.isWhitespace }
        let sides = spec.components(separatedBy: "->")
        let operands = sides[0].split(separator: ",", omittingEmptySubsequences: false).map(Array.init)
        guard operands.count == 2, sides.count <= 2 else { throw call.error("cannot read the equation '\(equation)' for two operands") }
        let a = operands[0], b = operands[1]
        let output: [Character] = sides.count == 2 ? Array(sides[1])
            : Set(a + b).filter { c in (a + b).filter { $0 == c }.count == 1 }.sorted()
        guard a.count == x.rank, b.count == y.rank, Set(a).count == a.count, Set(b).count == b.count, Set(output).count == output.count,
              output.allSatisfy({ a.contains($0) || b.contains($0) }),
              (a + b).allSatisfy({ c in output.contains(c) || (a.contains(c) && b.contains(c)) }) else {
            throw call.error("the equation '\(equation)' is not a product of operands of shapes \(x.shape) and \(y.shape) this kernel reads")
        }
        var size: [Character: Int] = [:]
        for (letters, shape) in [(a, x.shape), (b, y.shape)] {
            for (c, n) in zip(letters, shape) {
                if let known = size[c], known != n, known != 1, n != 1 {
                    throw call.error("'\(c)' is \(known) in one operand and \(n) in the other")
                }
                size[c] = max(size[c] ?? n, n)
            }
        }
        let batch = output.filter { a.contains($0) && b.contains($0) }
        let rows = output.filter { a.contains($0) && !b.contains($0) }
        let cols = output.filter { b.contains($0) && !a.contains($0) }
        let sum = a.filter { b.contains($0) && !output.contains($0) }
        func arranged(_ t: MILTensor, _ letters: [Character], _ order: [Character]) -> MILTensor {
            MILShapeOps.transpose(t, order.map { letters.firstIndex(of: $0)! })
        }
        let xt = arranged(x, a, batch + rows + sum), yt = arranged(y, b, batch + sum + cols)
        let batchShape = batch.map { size[$0]! }
        let m = rows.reduce(1) { $0 * size[$1]! }, n = cols.reduce(1) { $0 * size[$1]! }, k = sum.reduce(1) { $0 * size[$1]! }
        for c in sum where x.shape[a.firstIndex(of: c)!] != y.shape[b.firstIndex(of: c)!] {
            throw call.error("the summed letter '\(c)' has different sizes in the two operands")
        }
        let ix = MILShape.broadcastIndices(from: Array(xt.shape.prefix(batch.count)), to: batchShape)
        let iy = MILShape.broadcastIndices(from: Array(yt.shape.prefix(batch.count)), to: batchShape)
        let xv = xt.floats, yv = yt.floats
        var out = [Float](repeating: 0, count: ix.count * m * n)
        xv.withUnsafeBufferPointer { xp in
            yv.withUnsafeBufferPointer { yp in
                out.withUnsafeMutableBufferPointer { op in
                    for i in ix.indices {
                        MILLinearAlgebraOps.gemmPointers(m, n, k, xp.baseAddress! + ix[i] * m * k, transA: false, yp.baseAddress! + iy[i] * k * n,
                                                         transB: false, op.baseAddress! + i * m * n, beta: 0)
                    }
                }
            }
        }
        let produced = batch + rows + cols
        let result = MILTensor(floats: out, shape: produced.map { size[$0]! }, dataType: x.dataType.isFloat ? x.dataType : .fp32)
        return MILShapeOps.transpose(result, output.map { produced.firstIndex(of: $0)! })
    }
}
