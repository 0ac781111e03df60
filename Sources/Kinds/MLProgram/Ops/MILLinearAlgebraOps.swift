import COpenBLAS
import Dispatch
import Foundation

/// `linear` and `matmul` (`linear.py`), on OpenBLAS's SGEMM.
enum MILLinearAlgebraOps {
    nonisolated(unsafe) static let kernels: [String: MILKernel] = [
        "linear": { call in
            let x = try call.tensor("x"), w = try call.tensor("weight")
            guard w.rank == 2, x.rank >= 1, x.shape.last == w.shape[1] else {
                throw call.error("x \(x.shape) and weight \(w.shape) do not fit (weight is [out, in])")
            }
            let dout = w.shape[0], din = w.shape[1]
            let rows = x.count / max(din, 1)
            var out = [Float](repeating: 0, count: rows * dout)
            if let b = try call.optionalTensor("bias") {
                let bv = b.floats
                guard bv.count == dout else { throw call.error("bias has \(bv.count) values for \(dout) outputs") }
                for r in 0..<rows { for j in 0..<dout { out[r * dout + j] = bv[j] } }
            }
            let xv = x.floats, wv = w.floats
            gemm(rows, dout, din, xv, transA: false, wv, transB: true, &out, beta: 1, threads: call.threads)
            return [.tensor(MILTensor(floats: out, shape: Array(x.shape.dropLast()) + [dout], dataType: x.dataType))]
        },
        "matmul": { call in
            var x = try call.tensor("x"), y = try call.tensor("y")
            let tx = try call.bool("transpose_x", default: false), ty = try call.bool("transpose_y", default: false)
            // Rank-1 operands: x as a row, y as a column, the added axis dropped afterwards.
            let xVector = x.rank == 1, yVector = y.rank == 1
            if xVector { x.shape = [1, x.shape[0]] }
            if yVector { y.shape = [y.shape[0], 1] }
            let m = tx ? x.shape[x.rank - 1] : x.shape[x.rank - 2]
            let k = tx ? x.shape[x.rank - 2] : x.shape[x.rank - 1]
            let k2 = ty ? y.shape[y.rank - 1] : y.shape[y.rank - 2]
            let n = ty ? y.shape[y.rank - 2] : y.shape[y.rank - 1]
            guard k == k2 else { throw call.error("x \(x.shape) and y \(y.shape) do not multiply") }
            let bx = Array(x.shape.dropLast(2)), by = Array(y.shape.dropLast(2))
            guard let batch = MILShape.broadcast(bx, by) else { throw call.error("batch shapes \(bx) and \(by) do not broadcast") }
            let ix = MILShape.broadcastIndices(from: bx, to: batch), iy = MILShape.broadcastIndices(from: by, to: batch)
            let xv = x.floats, yv = y.floats
            var out = [Float](repeating: 0, count: batch.reduce(1, *) * m * n)
            xv.withUnsafeBufferPointer { xp in
                yv.withUnsafeBufferPointer { yp in
                    out.withUnsafeMutableBufferPointer { op in
                        for b in 0..<ix.count {
                            gemmPointers(m, n, k, xp.baseAddress! + ix[b] * m * k, transA: tx, yp.baseAddress! + iy[b] * k * n, transB: ty,
                                         op.baseAddress! + b * m * n, beta: 0, threads: call.threads)
                        }
                    }
                }
            }
            var shape = batch + [m, n]
            if xVector { shape.remove(at: shape.count - 2) }
            if yVector { shape.removeLast() }
            let type: MILDataType = x.dataType.isFloat ? x.dataType : .fp32
            if case .int = x.storage, case .int = y.storage {
                return [.tensor(MILTensor(ints: out.map { Int($0.rounded()) }, shape: shape, dataType: x.dataType))]
            }
            return [.tensor(MILTensor(floats: out, shape: shape, dataType: type))]
        },
    ]

    /// C[m×n] = A[m×k] · B[k×n] (+ beta·C), A and B optionally transposed, row-major.
    static func gemm(_ m: Int, _ n: Int, _ k: Int, _ a: [Float], transA: Bool, _ b: [Float], transB: Bool, _ c: inout [Float], beta: Float,
                     threads: Int = 1) {
        a.withUnsafeBufferPointer { ap in
            b.withUnsafeBufferPointer { bp in
                c.withUnsafeMutableBufferPointer { cp in
                    gemmPointers(m, n, k, ap.baseAddress!, transA: transA, bp.baseAddress!, transB: transB, cp.baseAddress!, beta: beta,
                                 threads: threads)
                }
            }
        }
    }

    /// OpenBLAS runs each call on one thread; the kind splits large products over its own
    /// threads (as the neural-network kind does), so concurrent predictions do not
    /// oversubscribe the cores with OpenBLAS's pool.
    static let singleThreadedBLAS: Void = { openblas_set_num_threads(1) }()

    /// Below this many multiply-adds a product runs on the calling thread alone.
    static let splitWork = 1 << 18

    static func gemmPointers(_ m: Int, _ n: Int, _ k: Int, _ a: UnsafePointer<Float>, transA: Bool, _ b: UnsafePointer<Float>,
                             transB: Bool, _ c: UnsafeMutablePointer<Float>, beta: Float, threads: Int = 1) {
        guard m > 0, n > 0 else { return }
        guard k > 0 else {
            if beta == 0 { c.update(repeating: 0, count: m * n) }
            return
        }
        _ = singleThreadedBLAS
        let lda = Int32(transA ? m : k), ldb = Int32(transB ? k : n)
        let workers = Swift.min(threads, m * n * k / splitWork, Swift.max(m, n))
        if workers <= 1 {
            cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
                        Int32(m), Int32(n), Int32(k), 1, a, lda, b, ldb, beta, c, Int32(n))
            return
        }
        let pointers = GemmPointers(a: a, b: b, c: c)
        if m >= n || m >= workers * 8 {
            // Rows of C (and of A) per worker.
            let per = (m + workers - 1) / workers
            DispatchQueue.concurrentPerform(iterations: workers) { w in
                let m0 = w * per, rows = Swift.min(per, m - m0)
                guard rows > 0 else { return }
                let aPart = transA ? pointers.a + m0 : pointers.a + m0 * k
                cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
                            Int32(rows), Int32(n), Int32(k), 1, aPart, lda, pointers.b, ldb, beta, pointers.c + m0 * n, Int32(n))
            }
        } else {
            // Columns of C (and of B) per worker.
            let per = (n + workers - 1) / workers
            DispatchQueue.concurrentPerform(iterations: workers) { w in
                let n0 = w * per, cols = Swift.min(per, n - n0)
                guard cols > 0 else { return }
                let bPart = transB ? pointers.b + n0 * k : pointers.b + n0
                cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
                            Int32(m), Int32(cols), Int32(k), 1, pointers.a, lda, bPart, ldb, beta, pointers.c + n0, Int32(n))
            }
        }
    }
}

/// Operand pointers handed to worker threads (each writes its own part of C).
private struct GemmPointers: @unchecked Sendable {
    let a: UnsafePointer<Float>
    let b: UnsafePointer<Float>
    let c: UnsafeMutablePointer<Float>
}
