import CCortadoGemm
import COpenBLAS
import CortadoSpec

/// `InnerProductLayerParams`: a fully connected layer, `y[Cout] = W[Cout, Cin] · x[Cin] + b`,
/// for every `[C, H, W]` image (`C·H·W` must equal `inputChannels`; the output is
/// `[Cout, 1, 1]`). All `S·B` rows run as one GEMM, `Y[rows, Cout] = X[rows, Cin] · Wᵀ`
/// (split into one block of rows per worker when several threads are allowed); a single row
/// is an sgemv, split over the output channels when the matrix is large (4M+ weights). Weights keep the spec's `[Cout, Cin]` layout.
///
/// On the vector kernel paths (`NNPackedGemm`) the weights are instead packed once, at load, as the GEMM's
/// right operand `Wᵀ`, and both the batch GEMM (rows split over the workers) and the
/// one-row GEMV (column panels split over the workers) run on Cortado's own kernels.
///
/// On rank-N tensors (Core ML 3) the rank is kept: ranks 1–3 multiply along the last axis
/// (`[…, Cin]` → `[…, Cout]`), rank 4 `[B, C, H, W]` gives `[B, Cout, 1, 1]` and rank 5 is the
/// classic layout.
final class InnerProductLayer: NNTensorLayer, NNEpilogueAccepting, NNRowReading, @unchecked Sendable {
    let inputChannels: Int
    let outputChannels: Int
    /// The weights as the spec lays them out (empty when only `packed` is kept).
    let weights: NNFloats
    /// `Wᵀ` packed for `NNPackedGemm`, when it is enabled.
    let packed: NNPackedWeights?
    let weightForm: String
    private(set) var post: NNChannelEpilogue

    init(_ p: CoreML_Specification_InnerProductLayerParams) throws {
        guard !p.int8DynamicQuantize else {
            throw NNLayerError("int8DynamicQuantize is not supported yet (store the weights as float, float16 or quantized rawValue instead)")
        }
        inputChannels = Int(p.inputChannels)
        outputChannels = Int(p.outputChannels)
        guard inputChannels > 0, outputChannels > 0 else {
            throw NNLayerError("inputChannels (\(p.inputChannels)) and outputChannels (\(p.outputChannels)) must be positive")
        }
        let decoded = try NNWeights.values(p.weights, count: inputChannels * outputChannels, channels: outputChannels, name: "weights")
        weightForm = NNWeights.form(p.weights)
        let (n, k) = (outputChannels, inputChannels)
        // With the packed copy, the spec's layout is kept only for a narrow layer's one-row
        // product (OpenBLAS's sgemv).
        packed = NNPackedGemm.enabled ? decoded.withUnsafeBufferPointer { NNPackedWeights(bTransposed: $0.baseAddress!, n: n, k: k, ld: k) } : nil
        weights = packed == nil || n < Self.packedChannels ? decoded : NNFloats([])
        let bias = p.hasBias ? try NNWeights.floats(p.bias, count: outputChannels, name: "bias") : nil
        post = NNChannelEpilogue(channels: outputChannels, bias: bias)
    }

    func accept(_ op: NNEpilogueOp) -> Bool { post.accept(op) }

    var detail: String {
        var s = "\(inputChannels) → \(outputChannels), \(weightForm) weights"
        if !post.names.isEmpty { s += ", then " + post.names.joined(separator: ", ") }
        return s
    }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        guard inputs.count == 1 else { throw NNLayerError("takes one input, got \(inputs.count)") }
        let x = inputs[0]
        if x.rank <= 3 {
            guard x.rank >= 1, x.extents.last == inputChannels else {
                throw NNLayerError("the input's last axis has \(x.extents.last.map(String.init) ?? "no") values; inputChannels is \(inputChannels)")
            }
            return [NNShape(tensor: x.extents.dropLast() + [outputChannels])]
        }
        guard x.chw == inputChannels else {
            throw NNLayerError("the input has C·H·W = \(x.chw) values per image; inputChannels is \(inputChannels)")
        }
        if x.rank == 4 { return [NNShape(tensor: [x.b, outputChannels, 1, 1])] }
        return [NNShape(s: x.s, b: x.b, c: outputChannels)]
    }

    func scratchCount(_ inputs: [NNShape]) -> Int {
        packed == nil ? 0 : NNThreads.cores * NNPackedGemm.workspace
    }

    /// A network input of whole images (the classic layout) is read from the requests' rows,
    /// on the packed kernels.
    func readsRows(_ input: NNShape) -> Bool { packed != nil && input.rank >= 4 }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        var x = UnsafePointer(context.pointer(inputs[0]))
        let y = context.pointer(outputs[0])
        let rows = inputs[0].count / inputChannels
        let k = inputChannels, n = outputChannels
        if let given = context.inputRows, let packed {
            if rows == 1 {
                x = given.pointers[0]
            } else {
                // A request row of several images is several rows of the product.
                let per = given.floats / k
                if per == 1 { runPacked(packed, x: nil, rowPointers: given.pointers, y: y, rows: rows, context: context); return }
                withUnsafeTemporaryAllocation(of: UnsafePointer<Float>.self, capacity: rows) { split in
                    for r in 0..<rows { split[r] = given.pointers[r / per] + (r % per) * k }
                    runPacked(packed, x: nil, rowPointers: UnsafePointer(split.baseAddress!), y: y, rows: rows, context: context)
                }
                return
            }
        }
        if let packed, rows > 1 || weights.count == 0 {
            runPacked(packed, x: x, rowPointers: nil, y: y, rows: rows, context: context)
            return
        }
        weights.withUnsafeBufferPointer { wbuf in
            let w = wbuf.baseAddress!
            if rows == 1 {
                // GEMV, output channels split over the workers when the matrix is large.
                let workers = k * n >= 1 << 20 ? NNGemm.workers(context, items: (n + 63) / 64) : 1
                let per = (n + workers - 1) / workers
                NNGemm.run(workers: workers) { worker in
                    let m0 = worker * per, m1 = Swift.min(n, m0 + per)
                    guard m0 < m1 else { return }
                    cblas_sgemv(CblasRowMajor, CblasNoTrans, blasint(m1 - m0), blasint(k), 1, w + m0 * k, blasint(k), x, 1, 0, y + m0, 1)
                }
                post.applyRows(y, rows: 1)
                return
            }
            let workers = rows * n * k >= 1 << 20 ? NNGemm.workers(context, items: (rows + 7) / 8) : 1
            let per = (rows + workers - 1) / workers
            NNGemm.run(workers: workers) { worker in
                let r0 = worker * per, r1 = Swift.min(rows, r0 + per)
                guard r0 < r1 else { return }
                NNGemm.gemm(m: r1 - r0, n: n, k: k, a: x + r0 * k, lda: k, b: w, ldb: k, transB: true, c: y + r0 * n, ldc: n)
                post.applyRows(y + r0 * n, rows: r1 - r0)
            }
        }
    }

    /// Products with the packed weights: one row is a GEMV over column panels (split over the
    /// workers when the matrix is large), more rows a GEMM split by rows. The rows are at `x`,
    /// or (`rowPointers`, more than one row) one pointer each.
    private func runPacked(_ packed: NNPackedWeights, x: UnsafePointer<Float>?, rowPointers: UnsafePointer<UnsafePointer<Float>>?,
                           y: UnsafeMutablePointer<Float>, rows: Int, context: NNRunContext) {
        let k = inputChannels, n = outputChannels, nr = NNPackedGemm.nr
        if rows == 1 {
            let panels = packed.width / nr
            let workers = k * n >= Self.parallelGemv ? NNPackedGemm.workers(context, items: panels / 2) : 1
            let per = (panels + workers - 1) / workers
            NNGemm.run(workers: workers) { worker in
                let p0 = worker * per, p1 = Swift.min(panels, p0 + per)
                guard p0 < p1 else { return }
                let j0 = p0 * nr, j1 = Swift.min(n, p1 * nr)
                cg_gemv(j1 - j0, k, x!, packed.operand(panel: p0), y + j0)
                post.applyRows(y + j0, rows: 1, columns: j0..<j1)
            }
            return
        }
        let workers = rows * n * k >= 1 << 18 ? NNPackedGemm.workers(context, items: (rows + 3) / 4) : 1
        // Shares in multiples of 4 rows (the kernels take 12, 8 or 4): 256 rows on two workers
        // are 128 each (ten 12-row tiles and an 8-row one), not 132 and 124.
        let per = NNPackedGemm.roundUp((rows + workers - 1) / workers, 4)
        NNGemm.run(workers: workers) { worker in
            let r0 = Swift.min(rows, worker * per), r1 = Swift.min(rows, r0 + per)
            guard r0 < r1 else { return }
            post.withGemmEpilogue(perColumn: true, offset: 0) { epilogue in
                let workspace = context.scratch + worker * NNPackedGemm.workspace
                if let rowPointers {
                    // (The C prototype takes `const float *const *`, imported as optional pointers.)
                    rowPointers.withMemoryRebound(to: UnsafePointer<Float>?.self, capacity: rows) { p in
                        cg_gemm_rows(r1 - r0, n, k, p + r0, packed.operand(), y + r0 * n, n, 0, workspace, epilogue)
                    }
                } else {
                    cg_gemm(r1 - r0, n, k, NNPackedGemm.plain(x! + r0 * k, ld: k), packed.operand(), y + r0 * n, n, 0, workspace, epilogue)
                }
            }
            if post.needsPass { post.applyRows(y + r0 * n, rows: r1 - r0) }
        }
    }

    /// Weights (k·n) from which a one-row product is split over the workers.
    /// (With `NNSpinTeam`'s polling helpers a 784×512 GEMV on two threads takes ~60 % of its
    /// one-thread time; through a Dispatch wake-up it took longer than on one.)
    static let parallelGemv = 1 << 17

    /// Output channels from which one row's product runs on the packed kernels: a narrower
    /// layer's (a classifier's last one) stays on OpenBLAS's sgemv. Batches run on the packed
    /// GEMM at any width (256 rows × 512 → 10: 41 µs, against 50–56 µs with A packed and 61–66 µs
    /// in OpenBLAS's sgemm).
    static let packedChannels = 16
}
