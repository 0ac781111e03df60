import CCortadoGemm
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
            let bias = try call.optionalTensor("bias")?.floats ?? []
            guard bias.isEmpty || bias.count == dout else { throw call.error("bias has \(bias.count) values for \(dout) outputs") }
            // The bias and a fused ReLU (`MILFusion`) are the GEMM's epilogue, applied to each
            // tile while it is in cache.
            let relu = try call.string(MILFusion.activationInput, default: "") == "relu"
            let xv = x.floats, wv = w.floats
            xv.withUnsafeBufferPointer { xp in
                wv.withUnsafeBufferPointer { wp in
                    bias.withUnsafeBufferPointer { bp in
                        out.withUnsafeMutableBufferPointer { op in
                            gemmPointers(rows, dout, din, xp.baseAddress!, transA: false, wp.baseAddress!, transB: true, op.baseAddress!,
                                         beta: 0, threads: call.threads, bias: bias.isEmpty ? nil : bp.baseAddress, relu: relu)
                        }
                    }
                }
            }
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

    /// `bias` (n values, one per column) is added and `relu` applied after the product.
    static func gemmPointers(_ m: Int, _ n: Int, _ k: Int, _ a: UnsafePointer<Float>, transA: Bool, _ b: UnsafePointer<Float>,
                             transB: Bool, _ c: UnsafeMutablePointer<Float>, beta: Float, threads: Int = 1,
                             bias: UnsafePointer<Float>? = nil, relu: Bool = false) {
        guard m > 0, n > 0 else { return }
        guard k > 0 else {
            if beta == 0 { c.update(repeating: 0, count: m * n) }
            finish(c, m: m, n: n, ldc: n, bias: bias, relu: relu)
            return
        }
        _ = singleThreadedBLAS
        let lda = Int32(transA ? m : k), ldb = Int32(transB ? k : n)
        let workers = Swift.min(threads, m * n * k / splitWork, Swift.max(m, n))
        if workers <= 1 {
            product(m, n, k, a, transA: transA, b, transB: transB, c, ldc: n, beta: beta, bias: bias, relu: relu)
            return
        }
        let pointers = GemmPointers(a: a, b: b, c: c, bias: bias)
        if m >= n || m >= workers * 8 {
            // Rows of C (and of A) per worker.
            let per = (m + workers - 1) / workers
            DispatchQueue.concurrentPerform(iterations: workers) { w in
                let m0 = w * per, rows = Swift.min(per, m - m0)
                guard rows > 0 else { return }
                let aPart = transA ? pointers.a + m0 : pointers.a + m0 * k
                product(rows, n, k, aPart, transA: transA, pointers.b, transB: transB, pointers.c + m0 * n, ldc: n, beta: beta,
                        lda: Int(lda), bias: pointers.bias, relu: relu)
            }
        } else {
            // Columns of C (and of B) per worker.
            let per = (n + workers - 1) / workers
            DispatchQueue.concurrentPerform(iterations: workers) { w in
                let n0 = w * per, cols = Swift.min(per, n - n0)
                guard cols > 0 else { return }
                let bPart = transB ? pointers.b + n0 * k : pointers.b + n0
                product(m, cols, k, pointers.a, transA: transA, bPart, transB: transB, pointers.c + n0, ldc: n, beta: beta,
                        ldb: Int(ldb), bias: pointers.bias.map { $0 + n0 }, relu: relu)
            }
        }
    }
}

extension MILLinearAlgebraOps {
    /// Cortado's own GEMM (the neural-network kind's) on the AVX-512 and AVX2 kernel paths:
    /// Debian's OpenBLAS falls back to its generic SSE3 kernel on CPUs it does not recognise,
    /// which some AVX-512 hosts are; OpenBLAS on the portable path.
    static let ownGEMM = cg_available() != 0
    static let workspaceFloats = cg_workspace_count()

    /// C[m×n] (row stride ldc) = A·B + beta·C on the calling thread. `lda`/`ldb` default to
    /// the packed row-major strides of A (m×k, or k×m when transposed) and B.
    /// `bias` (n values) and `relu` as in `gemmPointers`: on Cortado's GEMM, its epilogue.
    static func product(_ m: Int, _ n: Int, _ k: Int, _ a: UnsafePointer<Float>, transA: Bool, _ b: UnsafePointer<Float>, transB: Bool,
                        _ c: UnsafeMutablePointer<Float>, ldc: Int, beta: Float, lda: Int? = nil, ldb: Int? = nil,
                        bias: UnsafePointer<Float>? = nil, relu: Bool = false) {
        let lda = lda ?? (transA ? m : k), ldb = ldb ?? (transB ? k : n)
        guard ownGEMM else {
            cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
                        Int32(m), Int32(n), Int32(k), 1, a, Int32(lda), b, Int32(ldb), beta, c, Int32(ldc))
            finish(c, m: m, n: n, ldc: ldc, bias: bias, relu: relu)
            return
        }
        if beta != 0 && beta != 1 {
            for r in 0..<m { for j in 0..<n { c[r * ldc + j] *= beta } }
        }
        let workspace = UnsafeMutablePointer<Float>.allocate(capacity: workspaceFloats)
        defer { workspace.deallocate() }
        let aOp = cg_operand(data: a, ld: lda, form: transA ? CG_TRANSPOSED : CG_ROW_MAJOR, width: 0, panel: 0)
        let bOp = cg_operand(data: b, ld: ldb, form: transB ? CG_TRANSPOSED : CG_ROW_MAJOR, width: 0, panel: 0)
        guard bias != nil || relu else {
            cg_gemm(m, n, k, aOp, bOp, c, ldc, beta == 0 ? 0 : 1, workspace, nil)
            return
        }
        var e = cg_epilogue(scale: nil, shift: bias, per_column: 1, activation: relu ? CG_ACT_RELU : CG_ACT_NONE, alpha: 0, residual: nil)
        cg_gemm(m, n, k, aOp, bOp, c, ldc, beta == 0 ? 0 : 1, workspace, &e)
    }

    /// `bias` added to each row of C and `relu` applied, as a pass of its own (OpenBLAS's path).
    static func finish(_ c: UnsafeMutablePointer<Float>, m: Int, n: Int, ldc: Int, bias: UnsafePointer<Float>?, relu: Bool) {
        guard bias != nil || relu else { return }
        for r in 0..<m {
            let row = c + r * ldc
            if let bias { for j in 0..<n { row[j] += bias[j] } }
            if relu { for j in 0..<n { row[j] = Swift.max(row[j], 0) } }
        }
    }
}

/// Operand pointers handed to worker threads (each writes its own part of C).
private struct GemmPointers: @unchecked Sendable {
    let a: UnsafePointer<Float>
    let b: UnsafePointer<Float>
    let c: UnsafeMutablePointer<Float>
    let bias: UnsafePointer<Float>?
}
