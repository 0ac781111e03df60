import CCortadoGemm
import COpenBLAS
import XCTest

/// Cortado's SGEMM (`Sources/CGemm`) against a naive triple loop in Double and against
/// OpenBLAS, over awkward shapes, leading dimensions wider than the matrices, every operand
/// form (row-major, transposed, packed, packed views from a later panel) and accumulation.
///
/// Tolerance: a float32 dot product of length K is within K·u·Σ|aᵢbᵢ| of the exact one
/// (u = 2⁻²⁴), whatever the summation order; the tests allow 4·(K + 1)·u·(Σ|aᵢbᵢ| + |c₀|),
/// the +1 and c₀ covering accumulation into C.
final class CortadoGemmTests: XCTestCase {
    /// 64-byte aligned storage for packed operands.
    private final class Aligned {
        let p: UnsafeMutablePointer<Float>
        init(_ count: Int) {
            p = UnsafeMutableRawPointer.allocate(byteCount: Swift.max(1, count) * 4, alignment: 64).bindMemory(to: Float.self, capacity: count)
            p.initialize(repeating: .nan, count: count)
        }
        deinit { p.deallocate() }
    }

    private let u = Double(Float.ulpOfOne) / 2

    /// The references `check` computed, by call: each kernel path makes the same calls on the
    /// same (seeded) values, so a reference is summed once, not once per path (the naive sums
    /// of a debug build are most of these tests' time).
    private var references: [[(exact: Double, magnitude: Double)]] = []
    private var checkCalls = 0

    /// Runs `body` on each kernel path (`onEachKernelPath`), replaying the references.
    private func onEachPath(_ body: () -> Void) {
        onEachKernelPath {
            checkCalls = 0
            body()
        }
    }

    /// Checks `got` (m×n with leading dimension ldc) against Σ a(i,p)·b(p,j) (+ c0).
    private func check(_ got: [Float], ldc: Int, m: Int, n: Int, k: Int, a: (Int, Int) -> Float, b: (Int, Int) -> Float,
                       c0: [Float]?, _ what: String, file: StaticString = #filePath, line: UInt = #line) {
        let call = checkCalls
        checkCalls += 1
        if call == references.count {
            var sums: [(exact: Double, magnitude: Double)] = []
            sums.reserveCapacity(m * n)
            for i in 0..<m {
                for j in 0..<n {
                    var exact = 0.0, magnitude = 0.0
                    for p in 0..<k {
                        let t = Double(a(i, p)) * Double(b(p, j))
                        exact += t
                        magnitude += abs(t)
                    }
                    if let c0 { exact += Double(c0[i * ldc + j]); magnitude += abs(Double(c0[i * ldc + j])) }
                    sums.append((exact, magnitude))
                }
            }
            references.append(sums)
        }
        let sums = references[call]
        precondition(sums.count == m * n, "\(what): the calls differ between kernel paths")
        var worst = 0.0
        for i in 0..<m {
            for j in 0..<n {
                let (exact, magnitude) = sums[i * n + j]
                let bound = 4 * Double(k + 1) * u * magnitude + 1e-30
                let err = abs(Double(got[i * ldc + j]) - exact)
                worst = Swift.max(worst, err / bound)
                if !(err <= bound) {
                    XCTFail("\(what): C[\(i),\(j)] = \(got[i * ldc + j]), expected \(exact) (bound \(bound))", file: file, line: line)
                    return
                }
            }
            // Columns past n (up to ldc) are never written.
            for j in n..<ldc where !(got[i * ldc + j].isNaN) {
                XCTFail("\(what): C[\(i),\(j)] past the \(n) columns was written", file: file, line: line)
                return
            }
        }
    }

    private static let shapes: [(m: Int, n: Int, k: Int)] = [
        (1, 1, 1), (2, 2, 2), (13, 31, 33), (31, 33, 13), (33, 13, 31), (12, 32, 256), (1, 169, 1000),
        (169, 1, 1024), (1000, 33, 2), (13, 1031, 31), (25, 70, 513), (169, 169, 300), (2, 1000, 257),
        // lda = k + 3 = 1024: twelve rows in one L1 set, so a row-major A is packed; 512: read in place.
        (25, 40, 1021), (25, 40, 509),
    ]

    func testGemmMatchesNaiveAcrossFormsAndShapes() { onEachPath(runGemmMatchesNaiveAcrossFormsAndShapes) }
    private func runGemmMatchesNaiveAcrossFormsAndShapes() {
        var values = SeededFloats(state: 1)
        for (m, n, k) in Self.shapes {
            let lda = k + 3, ldb = n + 5, ldc = n + 7
            let a = values.array(m * lda), b = values.array(k * ldb)
            let at = values.array(k * (m + 2)), bt = values.array(n * (k + 4))
            let workspace = Aligned(Int(cg_workspace_count()))
            for accumulate in [false, true] {
                for aForm in 0..<3 {
                    for bForm in 0..<3 {
                        // Operand views and the element functions they stand for.
                        var keep: [Aligned] = []
                        let aOperand: cg_operand, aAt: (Int, Int) -> Float
                        switch aForm {
                        case 0:
                            aOperand = a.withUnsafeBufferPointer { cg_operand(data: $0.baseAddress!, ld: lda, form: CG_ROW_MAJOR, width: 0, panel: 0) }
                            aAt = { a[$0 * lda + $1] }
                        case 1:
                            aOperand = at.withUnsafeBufferPointer { cg_operand(data: $0.baseAddress!, ld: m + 2, form: CG_TRANSPOSED, width: 0, panel: 0) }
                            aAt = { at[$1 * (m + 2) + $0] }
                        default:
                            let packed = Aligned(Int(cg_packed_a_count(m, k)))
                            a.withUnsafeBufferPointer { cg_pack_a(cg_operand(data: $0.baseAddress!, ld: lda, form: CG_ROW_MAJOR, width: 0, panel: 0), m, k, packed.p) }
                            keep.append(packed)
                            aOperand = cg_operand(data: packed.p, ld: 0, form: CG_PACKED, width: (m + 11) / 12 * 12, panel: 0)
                            aAt = { a[$0 * lda + $1] }
                        }
                        let bOperand: cg_operand, bAt: (Int, Int) -> Float
                        switch bForm {
                        case 0:
                            bOperand = b.withUnsafeBufferPointer { cg_operand(data: $0.baseAddress!, ld: ldb, form: CG_ROW_MAJOR, width: 0, panel: 0) }
                            bAt = { b[$0 * ldb + $1] }
                        case 1:
                            bOperand = bt.withUnsafeBufferPointer { cg_operand(data: $0.baseAddress!, ld: k + 4, form: CG_TRANSPOSED, width: 0, panel: 0) }
                            bAt = { bt[$1 * (k + 4) + $0] }
                        default:
                            let width = (n + 31) / 32 * 32
                            let packed = Aligned(Int(cg_packed_b_count(k, n)))
                            b.withUnsafeBufferPointer { cg_pack_b(cg_operand(data: $0.baseAddress!, ld: ldb, form: CG_ROW_MAJOR, width: 0, panel: 0), k, 0, n, packed.p, width, 0) }
                            keep.append(packed)
                            bOperand = cg_operand(data: packed.p, ld: 0, form: CG_PACKED, width: width, panel: 0)
                            bAt = { b[$0 * ldb + $1] }
                        }
                        var c0 = values.array(m * ldc)
                        for i in 0..<m { for j in n..<ldc { c0[i * ldc + j] = .nan } }
                        var c = c0
                        c.withUnsafeMutableBufferPointer { cg_gemm(m, n, k, aOperand, bOperand, $0.baseAddress!, ldc, accumulate ? 1 : 0, workspace.p, nil) }
                        check(c, ldc: ldc, m: m, n: n, k: k, a: aAt, b: bAt, c0: accumulate ? c0 : nil,
                              "\(m)×\(n)×\(k) A form \(aForm) B form \(bForm) accumulate \(accumulate)")
                        withExtendedLifetime(keep) {}
                    }
                }
            }
        }
    }

    /// A given as row pointers (`cg_gemm_rows`): every row a separate allocation, the pointers
    /// in no order of address, over the same shapes, every B form, with and without accumulation
    /// and with a per-column epilogue (bias and ReLU, as an inner product fuses them).
    func testGemmOnRowPointersMatchesNaive() { onEachPath(runGemmOnRowPointersMatchesNaive) }
    private func runGemmOnRowPointersMatchesNaive() {
        var values = SeededFloats(state: 7)
        for (m, n, k) in Self.shapes + [(50, 64, 784), (256, 10, 130)] {
            // Rows allocated separately, then taken in a shuffled order (row i of A is rows[order[i]]).
            let rows = (0..<m).map { _ -> UnsafeMutablePointer<Float> in
                let r = UnsafeMutablePointer<Float>.allocate(capacity: k)
                for p in 0..<k { r[p] = values.next() }
                return r
            }
            defer { for r in rows { r.deallocate() } }
            let order = (0..<m).map { $0 % 2 == 0 ? $0 / 2 : m - 1 - $0 / 2 }  // 0, m-1, 1, m-2, ...
            let pointers: [UnsafePointer<Float>?] = order.map { UnsafePointer(rows[$0]) }
            let aAt: (Int, Int) -> Float = { rows[order[$0]][$1] }
            let ldb = n + 5, ldc = n + 3
            let b = values.array(k * ldb)
            let width = (n + 31) / 32 * 32
            let packed = Aligned(Int(cg_packed_b_count(k, n)))
            b.withUnsafeBufferPointer { cg_pack_b(cg_operand(data: $0.baseAddress!, ld: ldb, form: CG_ROW_MAJOR, width: 0, panel: 0), k, 0, n, packed.p, width, 0) }
            let bias = values.array(n)
            let workspace = Aligned(Int(cg_workspace_count()))
            for bForm in [CG_ROW_MAJOR, CG_PACKED] {
                for accumulate in [false, true] {
                    var c0 = values.array(m * ldc)
                    for i in 0..<m { for j in n..<ldc { c0[i * ldc + j] = .nan } }
                    var c = c0
                    b.withUnsafeBufferPointer { bp in
                        let bOperand = bForm == CG_PACKED ? cg_operand(data: packed.p, ld: 0, form: CG_PACKED, width: width, panel: 0)
                                                          : cg_operand(data: bp.baseAddress!, ld: ldb, form: CG_ROW_MAJOR, width: 0, panel: 0)
                        pointers.withUnsafeBufferPointer { ap in
                            c.withUnsafeMutableBufferPointer { cg_gemm_rows(m, n, k, ap.baseAddress!, bOperand, $0.baseAddress!, ldc, accumulate ? 1 : 0, workspace.p, nil) }
                        }
                    }
                    check(c, ldc: ldc, m: m, n: n, k: k, a: aAt, b: { b[$0 * ldb + $1] }, c0: accumulate ? c0 : nil,
                          "rows \(m)×\(n)×\(k) B form \(bForm.rawValue) accumulate \(accumulate)")
                }
            }
            // Bias and ReLU on the finished tiles, B packed.
            var c = [Float](repeating: .nan, count: m * ldc)
            bias.withUnsafeBufferPointer { t in
                var e = cg_epilogue(scale: nil, shift: t.baseAddress!, per_column: 1, activation: CG_ACT_RELU, alpha: 0, residual: nil)
                pointers.withUnsafeBufferPointer { ap in
                    c.withUnsafeMutableBufferPointer {
                        cg_gemm_rows(m, n, k, ap.baseAddress!, cg_operand(data: packed.p, ld: 0, form: CG_PACKED, width: width, panel: 0),
                                     $0.baseAddress!, ldc, 0, workspace.p, &e)
                    }
                }
            }
            for i in 0..<m {
                for j in 0..<n {
                    var exact = Double(bias[j]), magnitude = abs(exact)
                    for p in 0..<k {
                        let t = Double(aAt(i, p)) * Double(b[p * ldb + j])
                        exact += t
                        magnitude += abs(t)
                    }
                    let bound = 4 * Double(k + 1) * u * magnitude + 1e-30
                    if abs(exact) <= bound { continue }
                    XCTAssertLessThanOrEqual(abs(Double(c[i * ldc + j]) - Swift.max(exact, 0)), bound, "rows \(m)×\(n)×\(k) bias+ReLU at \(i),\(j)")
                }
            }
        }
    }

    /// Packed views that start on a later panel compute the matching block of rows or columns.
    func testPackedViewsFromLaterPanels() { onEachPath(runPackedViewsFromLaterPanels) }
    private func runPackedViewsFromLaterPanels() {
        var values = SeededFloats(state: 2)
        let m = 50, n = 100, k = 300
        let a = values.array(m * k), b = values.array(k * n)
        let pa = Aligned(Int(cg_packed_a_count(m, k))), pb = Aligned(Int(cg_packed_b_count(k, n)))
        a.withUnsafeBufferPointer { cg_pack_a(cg_operand(data: $0.baseAddress!, ld: k, form: CG_ROW_MAJOR, width: 0, panel: 0), m, k, pa.p) }
        // B packed in two calls (panels 0–1, then 2–3), as workers share the packing.
        b.withUnsafeBufferPointer {
            let op = cg_operand(data: $0.baseAddress!, ld: n, form: CG_ROW_MAJOR, width: 0, panel: 0)
            cg_pack_b(op, k, 0, 64, pb.p, 128, 0)
            cg_pack_b(op, k, 64, n - 64, pb.p, 128, 2)
        }
        let workspace = Aligned(Int(cg_workspace_count()))
        let (m0, n0) = (24, 32)  // row panel 2, column panel 1
        var c = [Float](repeating: .nan, count: (m - m0) * (n - n0))
        c.withUnsafeMutableBufferPointer {
            cg_gemm(m - m0, n - n0, k, cg_operand(data: pa.p, ld: 0, form: CG_PACKED, width: 60, panel: 2),
                    cg_operand(data: pb.p, ld: 0, form: CG_PACKED, width: 128, panel: 1), $0.baseAddress!, n - n0, 0, workspace.p, nil)
        }
        check(c, ldc: n - n0, m: m - m0, n: n - n0, k: k, a: { a[($0 + m0) * k + $1] }, b: { b[$0 * n + $1 + n0] }, c0: nil, "views")
    }

    /// The same products as OpenBLAS's sgemm, within the same bound.
    func testGemmAgreesWithOpenBLAS() { onEachPath(runGemmAgreesWithOpenBLAS) }
    private func runGemmAgreesWithOpenBLAS() {
        var values = SeededFloats(state: 3)
        for (m, n, k) in [(64, 169, 576), (257, 100, 1025), (7, 1030, 64)] {
            let a = values.array(m * k), b = values.array(k * n)
            var ours = [Float](repeating: 0, count: m * n), blas = ours
            let workspace = Aligned(Int(cg_workspace_count()))
            a.withUnsafeBufferPointer { ap in
                b.withUnsafeBufferPointer { bp in
                    ours.withUnsafeMutableBufferPointer {
                        cg_gemm(m, n, k, cg_operand(data: ap.baseAddress!, ld: k, form: CG_ROW_MAJOR, width: 0, panel: 0),
                                cg_operand(data: bp.baseAddress!, ld: n, form: CG_ROW_MAJOR, width: 0, panel: 0), $0.baseAddress!, n, 0, workspace.p, nil)
                    }
                    blas.withUnsafeMutableBufferPointer {
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, blasint(m), blasint(n), blasint(k), 1,
                                    ap.baseAddress!, blasint(k), bp.baseAddress!, blasint(n), 0, $0.baseAddress!, blasint(n))
                    }
                }
            }
            for i in 0..<m {
                for j in 0..<n {
                    var magnitude = 0.0
                    for p in 0..<k { magnitude += abs(Double(a[i * k + p]) * Double(b[p * n + j])) }
                    let bound = 8 * Double(k) * u * magnitude  // both within 4·K·u of the exact value
                    XCTAssertLessThanOrEqual(abs(Double(ours[i * n + j]) - Double(blas[i * n + j])), bound, "\(m)×\(n)×\(k) at \(i),\(j)")
                }
            }
        }
    }

    /// The epilogue on finished tiles: per-row or per-column scale and shift (either absent),
    /// then none, ReLU or leaky ReLU, over k spanning several blocks (and k = 0), with
    /// accumulation; the same bound on x·scale + shift (the activations are exact).
    func testEpilogueOnFinishedTiles() { onEachPath(runEpilogueOnFinishedTiles) }
    private func runEpilogueOnFinishedTiles() {
        var values = SeededFloats(state: 6)
        let m = 29, n = 45, lda = 600, ldc = n + 3
        let a = values.array(m * lda), b = values.array(lda * n)
        let workspace = Aligned(Int(cg_workspace_count()))
        for k in [lda, 0] {
            for perColumn in [false, true] {
                let channels = perColumn ? n : m
                let scale = values.array(channels + 2), shift = values.array(channels + 2)
                for activation in [CG_ACT_NONE, CG_ACT_RELU, CG_ACT_LEAKY_RELU] {
                    for (useScale, useShift) in [(true, true), (false, true), (true, false)] {
                        for accumulate in [false, true] {
                            let c0 = values.array(m * ldc)
                            var c = c0
                            scale.withUnsafeBufferPointer { s in
                                shift.withUnsafeBufferPointer { t in
                                    // Channels counted from the third value: the caller's offset.
                                    var e = cg_epilogue(scale: useScale ? s.baseAddress! + 2 : nil, shift: useShift ? t.baseAddress! + 2 : nil,
                                                        per_column: perColumn ? 1 : 0, activation: activation, alpha: 0.1, residual: nil)
                                    a.withUnsafeBufferPointer { ap in
                                        b.withUnsafeBufferPointer { bp in
                                            c.withUnsafeMutableBufferPointer {
                                                cg_gemm(m, n, k, cg_operand(data: ap.baseAddress!, ld: lda, form: CG_ROW_MAJOR, width: 0, panel: 0),
                                                        cg_operand(data: bp.baseAddress!, ld: n, form: CG_ROW_MAJOR, width: 0, panel: 0),
                                                        $0.baseAddress!, ldc, accumulate ? 1 : 0, workspace.p, &e)
                                            }
                                        }
                                    }
                                }
                            }
                            let what = "k \(k) per \(perColumn ? "column" : "row") \(activation) scale \(useScale) shift \(useShift) accumulate \(accumulate)"
                            for i in 0..<m {
                                for j in 0..<n {
                                    var exact = accumulate ? Double(c0[i * ldc + j]) : 0
                                    var magnitude = abs(exact)
                                    for p in 0..<k {
                                        let t = Double(a[i * lda + p]) * Double(b[p * n + j])
                                        exact += t
                                        magnitude += abs(t)
                                    }
                                    let ch = (perColumn ? j : i) + 2
                                    let s = useScale ? Double(scale[ch]) : 1, t = useShift ? Double(shift[ch]) : 0
                                    var y = exact * s + t
                                    if activation == CG_ACT_RELU { y = Swift.max(y, 0) }
                                    if activation == CG_ACT_LEAKY_RELU && y < 0 { y *= Double(Float(0.1)) }
                                    let bound = 4 * Double(k + 2) * u * (magnitude * abs(s) + abs(t)) + 1e-30
                                    // Near 0 the sign may differ within the bound; compare before the slope there.
                                    if abs(exact * s + t) <= bound { continue }
                                    XCTAssertLessThanOrEqual(abs(Double(c[i * ldc + j]) - y), bound, "\(what) at \(i),\(j)")
                                }
                                for j in n..<ldc { XCTAssertEqual(c[i * ldc + j], c0[i * ldc + j], "\(what): column \(j) past n written") }
                            }
                        }
                    }
                }
            }
        }
    }

    func testGemvOnPackedColumns() { onEachPath(runGemvOnPackedColumns) }
    private func runGemvOnPackedColumns() {
        var values = SeededFloats(state: 4)
        for (n, k) in [(1, 1), (10, 784), (33, 31), (512, 513), (1000, 2)] {
            let w = values.array(n * k), x = values.array(k)  // w is n×k; B = wᵀ
            let width = (n + 31) / 32 * 32
            let packed = Aligned(Int(cg_packed_b_count(k, n)))
            w.withUnsafeBufferPointer { cg_pack_b(cg_operand(data: $0.baseAddress!, ld: k, form: CG_TRANSPOSED, width: 0, panel: 0), k, 0, n, packed.p, width, 0) }
            // All columns, then the columns from panel 1 on.
            for panel in [0, 1] where panel * 32 < n {
                var y = [Float](repeating: .nan, count: n - panel * 32)
                x.withUnsafeBufferPointer { xp in
                    y.withUnsafeMutableBufferPointer {
                        cg_gemv(n - panel * 32, k, xp.baseAddress!, cg_operand(data: packed.p, ld: 0, form: CG_PACKED, width: width, panel: panel), $0.baseAddress!)
                    }
                }
                check(y, ldc: y.count, m: 1, n: y.count, k: k, a: { x[$1] }, b: { w[($1 + panel * 32) * k + $0] }, c0: nil, "gemv \(n)×\(k) from panel \(panel)")
            }
        }
    }

    /// The im2col matrix packed straight from an image, multiplied by the weights, against a
    /// naive convolution: padding, stride, dilation, 1×1 and widths that cut panels mid-row.
    func testPackedConvolutionMatchesNaiveConvolution() { onEachPath(runPackedConvolutionMatchesNaiveConvolution) }
    private func runPackedConvolutionMatchesNaiveConvolution() {
        var values = SeededFloats(state: 5)
        // channels, h, w, kh, kw, sh, sw, dh, dw, padH, padW, filters
        let cases: [(Int, Int, Int, Int, Int, Int, Int, Int, Int, Int, Int, Int)] = [
            (3, 13, 13, 3, 3, 1, 1, 1, 1, 1, 1, 16), (5, 9, 31, 3, 2, 2, 3, 1, 1, 1, 0, 13), (2, 17, 11, 3, 3, 1, 1, 2, 2, 2, 2, 7),
            (7, 6, 40, 1, 1, 1, 1, 1, 1, 0, 0, 33), (1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1), (4, 20, 20, 5, 5, 1, 2, 1, 1, 3, 1, 12),
        ]
        for (c, h, w, kh, kw, sh, sw, dh, dw, ph, pw, filters) in cases {
            let outH = (h + 2 * ph - ((kh - 1) * dh + 1)) / sh + 1, outW = (w + 2 * pw - ((kw - 1) * dw + 1)) / sw + 1
            let k = c * kh * kw, n = outH * outW, width = (n + 31) / 32 * 32
            let x = values.array(c * h * w), weights = values.array(filters * k)
            var g = cg_conv(channels: c, h: h, w: w, kh: kh, kw: kw, sh: sh, sw: sw, dh: dh, dw: dw, pad_h: ph, pad_w: pw, out_h: outH, out_w: outW)
            let pb = Aligned(Int(cg_packed_b_count(k, n))), pa = Aligned(Int(cg_packed_a_count(filters, k)))
            // Packed in two pieces when there are two panels or more.
            let split = n > 32 ? 32 : n
            x.withUnsafeBufferPointer {
                cg_pack_conv(&g, $0.baseAddress!, 0, split, pb.p, width, 0)
                if split < n { cg_pack_conv(&g, $0.baseAddress!, split, n - split, pb.p, width, 1) }
            }
            weights.withUnsafeBufferPointer { cg_pack_a(cg_operand(data: $0.baseAddress!, ld: k, form: CG_ROW_MAJOR, width: 0, panel: 0), filters, k, pa.p) }
            var y = [Float](repeating: .nan, count: filters * n)
            let workspace = Aligned(Int(cg_workspace_count()))
            y.withUnsafeMutableBufferPointer {
                cg_gemm(filters, n, k, cg_operand(data: pa.p, ld: 0, form: CG_PACKED, width: (filters + 11) / 12 * 12, panel: 0),
                        cg_operand(data: pb.p, ld: 0, form: CG_PACKED, width: width, panel: 0), $0.baseAddress!, n, 0, workspace.p, nil)
            }
            func input(_ p: Int, _ col: Int) -> Float {
                let ch = p / (kh * kw), i = p / kw % kh, j = p % kw
                let ih = col / outW * sh - ph + i * dh, iw = col % outW * sw - pw + j * dw
                return ih >= 0 && ih < h && iw >= 0 && iw < w ? x[(ch * h + ih) * w + iw] : 0
            }
            check(y, ldc: n, m: filters, n: n, k: k, a: { weights[$0 * k + $1] }, b: input, c0: nil,
                  "convolution \(c)×\(h)×\(w) kernel \(kh)×\(kw) stride \(sh)×\(sw) dilation \(dh)×\(dw) padding \(ph)×\(pw)")
        }
    }

    /// The convolution that reads its input in place (`cg_conv_rows` over `cg_conv_pad`'s copy):
    /// rows of output widths that end mid-panel (47, 13) or fill panels (64), vertical strides,
    /// dilation, asymmetric padding, filter counts that end mid-panel, K over several blocks,
    /// and a range of output rows written into a C wider than it (as a band of the output).
    func testInPlaceConvolutionMatchesNaiveConvolution() { onEachPath(runInPlaceConvolutionMatchesNaiveConvolution) }
    private func runInPlaceConvolutionMatchesNaiveConvolution() {
        var values = SeededFloats(state: 13)
        // channels, h, w, kh, kw, sh, dh, dw, padH, padW, filters
        let cases: [(Int, Int, Int, Int, Int, Int, Int, Int, Int, Int, Int)] = [
            (3, 20, 47, 3, 3, 1, 1, 1, 1, 1, 16), (40, 9, 64, 3, 3, 1, 1, 1, 1, 1, 20), (5, 17, 15, 3, 3, 2, 2, 2, 2, 1, 7),
            (2, 6, 13, 1, 1, 1, 1, 1, 0, 0, 33), (4, 12, 30, 5, 3, 3, 1, 1, 0, 2, 12),
        ]
        for (c, h, w, kh, kw, sh, dh, dw, ph, pw, filters) in cases {
            let outH = (h + 2 * ph - ((kh - 1) * dh + 1)) / sh + 1, outW = w + 2 * pw - ((kw - 1) * dw + 1) + 1
            let k = c * kh * kw
            let x = values.array(c * h * w), weights = values.array(filters * k)
            var g = cg_conv(channels: c, h: h, w: w, kh: kh, kw: kw, sh: sh, sw: 1, dh: dh, dw: dw, pad_h: ph, pad_w: pw, out_h: outH, out_w: outW)
            let pa = Aligned(Int(cg_packed_a_count(filters, k))), padded = Aligned(Int(cg_conv_padded_count(&g)))
            weights.withUnsafeBufferPointer { cg_pack_a(cg_operand(data: $0.baseAddress!, ld: k, form: CG_ROW_MAJOR, width: 0, panel: 0), filters, k, pa.p) }
            x.withUnsafeBufferPointer {
                // In two pieces of channels, as two workers write it.
                cg_conv_pad(&g, $0.baseAddress!, 0, c / 2, padded.p)
                cg_conv_pad(&g, $0.baseAddress!, c / 2, c, padded.p)
            }
            var offsets = [Int](repeating: 0, count: k)
            offsets.withUnsafeMutableBufferPointer { cg_conv_offsets(&g, $0.baseAddress!) }
            // Output rows [r0, outH) into a C whose rows are wider (ldc) than the band.
            let r0 = outH / 3, n = (outH - r0) * outW, ldc = n + 5
            var y = [Float](repeating: .nan, count: filters * ldc)
            y.withUnsafeMutableBufferPointer { yb in
                offsets.withUnsafeBufferPointer { ob in
                    cg_conv_rows(&g, padded.p, ob.baseAddress!, cg_operand(data: pa.p, ld: 0, form: CG_PACKED, width: (filters + 11) / 12 * 12, panel: 0),
                                 filters, r0, outH, yb.baseAddress!, ldc, nil)
                }
            }
            func input(_ p: Int, _ col: Int) -> Float {
                let ch = p / (kh * kw), i = p / kw % kh, j = p % kw
                let ih = (r0 + col / outW) * sh - ph + i * dh, iw = col % outW - pw + j * dw
                return ih >= 0 && ih < h && iw >= 0 && iw < w ? x[(ch * h + ih) * w + iw] : 0
            }
            check(y, ldc: ldc, m: filters, n: n, k: k, a: { weights[$0 * k + $1] }, b: input, c0: nil,
                  "in-place convolution \(c)×\(h)×\(w) kernel \(kh)×\(kw) stride \(sh)×1 dilation \(dh)×\(dw) padding \(ph)×\(pw)")
        }
    }
}
