import CCortadoGemm
import XCTest

/// The direct convolution (`Sources/CGemm/cortado_direct.c`) against a naive convolution in
/// Double that the test owns: output channels that are not a multiple of 16 (one block, a
/// block and one channel, an odd number of blocks), output widths 1 to 20 (every tile width,
/// rows cut into two tiles), strides 1 and 2, dilation, same and valid padding, 3×3 and 1×1
/// kernels, input channels over several chunks, images cut into several bands, units run in
/// two calls, the epilogue (scale, shift, leaky ReLU), a residual added before the activation
/// (a folded residual add) and the folded 2×2 max pooling.
///
/// Tolerance: a float32 sum of K products is within K·u·Σ|products| of the exact one
/// (u = 2⁻²⁴) in any order; the test allows 4·(K + 1)·u·Σ|products|, times |scale|, plus
/// 4u of the result for the epilogue's rounding. The pooled output is the maximum of four such
/// values, so it gets the largest of their four bounds.
final class CortadoDirectConvTests: XCTestCase {
    private struct Case {
        var cin: Int, h: Int, w: Int, m: Int
        var k = 3, sh = 1, sw = 1, d = 1
        var same = true
        var pool = false
        var epilogue = false
        /// A residual tensor added after scale and shift (with `epilogue`, without `pool`).
        var residual = false
    }

    private let u = Double(Float.ulpOfOne) / 2

    /// The references of `run`, by call: each kernel path runs the same cases on the same
    /// (seeded) values, so each reference is summed once, not once per path.
    private var references: [[(want: Double, bound: Double)]] = []
    private var runCalls = 0

    /// Runs `body` on each kernel path (`onEachKernelPath`), replaying the references.
    private func onEachPath(_ body: () -> Void) {
        onEachKernelPath {
            runCalls = 0
            body()
        }
    }

    private func run(_ t: Case, seed: UInt64, file: StaticString = #filePath, line: UInt = #line) {
        let kd = (t.k - 1) * t.d + 1
        let (padT, padL, outH, outW): (Int, Int, Int, Int)
        if t.same {
            let oh = (t.h + t.sh - 1) / t.sh, ow = (t.w + t.sw - 1) / t.sw
            let th = Swift.max(0, (oh - 1) * t.sh + kd - t.h), tw = Swift.max(0, (ow - 1) * t.sw + kd - t.w)
            (padT, padL, outH, outW) = (th / 2, tw / 2, oh, ow)
        } else {
            (padT, padL, outH, outW) = (0, 0, (t.h - kd) / t.sh + 1, (t.w - kd) / t.sw + 1)
        }
        let what = "\(t) → \(t.m)×\(outH)×\(outW)"
        var g = cg_conv(channels: t.cin, h: t.h, w: t.w, kh: t.k, kw: t.k, sh: t.sh, sw: t.sw, dh: t.d, dw: t.d,
                        pad_h: padT, pad_w: padL, out_h: outH, out_w: outW)
        XCTAssertEqual(cg_direct_supported(&g), 1, what, file: file, line: line)
        var values = SeededFloats(state: seed)
        let kk = t.cin * t.k * t.k
        let x = values.array(t.cin * t.h * t.w), w = values.array(t.m * kk)
        let scale = values.array(t.m), shift = values.array(t.m)
        let alpha: Float = 0.1

        var packed = [Float](repeating: .nan, count: Int(cg_direct_weights_count(t.m, kk)))
        cg_direct_pack(w, t.m, kk, &packed)
        var padded = [Float](repeating: .nan, count: Int(cg_conv_padded_count(&g)))
        cg_conv_pad(&g, x, 0, t.cin, &padded)
        let pool: Int32 = t.pool ? 1 : 0
        let (ph, pw) = (outH / 2, outW / 2)
        let outCount = t.pool ? t.m * ph * pw : t.m * outH * outW
        // Drawn after the other values, so that the cases without one keep theirs.
        let residual = t.residual ? values.array(outCount) : []
        var y = [Float](repeating: 42, count: outCount + 16)
        var work = [Float](repeating: .nan, count: Int(cg_direct_workspace_count(&g, pool)))
        let units = cg_direct_units(&g, t.m, pool)
        let half = units / 2
        residual.withUnsafeBufferPointer { r in
            scale.withUnsafeBufferPointer { s in
                shift.withUnsafeBufferPointer { b in
                    var e = cg_epilogue(scale: s.baseAddress, shift: b.baseAddress, per_column: 0, activation: CG_ACT_LEAKY_RELU, alpha: alpha,
                                        residual: t.residual ? r.baseAddress : nil)
                    withUnsafePointer(to: &e) { ep in
                        // Two calls (as two workers would split the units).
                        for (u0, u1) in [(0, half), (half, units)] where u0 < u1 {
                            cg_direct_conv(&g, padded, packed, t.m, u0, u1, &y, t.epilogue ? ep : nil, pool, &work)
                        }
                    }
                }
            }
        }
        XCTAssertTrue(y[outCount...].allSatisfy { $0 == 42 }, "\(what): wrote past the output", file: file, line: line)

        // The reference: each output value with its error bound.
        func reference(_ o: Int, _ oh: Int, _ ow: Int) -> (Double, Double) {
            var exact = 0.0, magnitude = 0.0
            for c in 0..<t.cin {
                for i in 0..<t.k {
                    let ih = oh * t.sh - padT + i * t.d
                    guard ih >= 0, ih < t.h else { continue }
                    for j in 0..<t.k {
                        let iw = ow * t.sw - padL + j * t.d
                        guard iw >= 0, iw < t.w else { continue }
                        let p = Double(w[((o * t.cin + c) * t.k + i) * t.k + j]) * Double(x[(c * t.h + ih) * t.w + iw])
                        exact += p
                        magnitude += abs(p)
                    }
                }
            }
            var bound = 4 * Double(kk + 1) * u * magnitude
            if t.epilogue {
                let s = Double(scale[o]), r = t.residual ? Double(residual[(o * outH + oh) * outW + ow]) : 0
                let v = exact * s + Double(shift[o]) + r
                exact = v < 0 ? v * Double(alpha) : v
                bound = bound * abs(s) + 4 * u * (abs(exact) + abs(Double(shift[o])) + abs(r))
            }
            return (exact, bound + 1e-30)
        }
        let (rows, cols) = t.pool ? (ph, pw) : (outH, outW)
        let call = runCalls
        runCalls += 1
        if call == references.count {
            var sums: [(want: Double, bound: Double)] = []
            for o in 0..<t.m {
                for oh in 0..<rows {
                    for ow in 0..<cols {
                        if t.pool {
                            let window = [(0, 0), (0, 1), (1, 0), (1, 1)].map { reference(o, 2 * oh + $0.0, 2 * ow + $0.1) }
                            sums.append((window.map(\.0).max()!, window.map(\.1).max()!))
                        } else {
                            sums.append(reference(o, oh, ow))
                        }
                    }
                }
            }
            references.append(sums)
        }
        let expected = references[call]
        precondition(expected.count == t.m * rows * cols, "\(what): the cases differ between kernel paths")
        for o in 0..<t.m {
            for oh in 0..<rows {
                for ow in 0..<cols {
                    let index: Int = (o * rows + oh) * cols + ow
                    let (want, bound) = expected[index]
                    let got: Float = y[index]
                    if !(abs(Double(got) - want) <= bound) {
                        XCTFail("\(what): y[\(o), \(oh), \(ow)] = \(got), expected \(want) (bound \(bound))", file: file, line: line)
                        return
                    }
                }
            }
        }
    }

    func testEveryTileWidthAndChannelCount() { onEachPath(runEveryTileWidthAndChannelCount) }
    private func runEveryTileWidthAndChannelCount() {
        var seed: UInt64 = 1
        for width in 1...20 {
            for m in [1, 16, 17, 40] {
                seed += 1
                // Output rows `width` wide: same padding, or valid padding of a 2 wider input.
                let same = width % 2 == 0
                run(Case(cin: 5, h: 3, w: same ? width : width + 2, m: m, same: same), seed: seed)
            }
        }
    }

    func testStridesDilationAndPointwise() { onEachPath(runStridesDilationAndPointwise) }
    private func runStridesDilationAndPointwise() {
        run(Case(cin: 7, h: 11, w: 19, m: 33, sh: 2, sw: 2), seed: 101)
        run(Case(cin: 7, h: 12, w: 20, m: 20, sh: 2, sw: 2, same: false), seed: 102)
        run(Case(cin: 6, h: 9, w: 17, m: 18, sh: 1, sw: 2, d: 2), seed: 103)
        run(Case(cin: 6, h: 13, w: 13, m: 48, sh: 2, sw: 1, d: 2, same: false), seed: 104)
        run(Case(cin: 37, h: 13, w: 13, m: 125, k: 1, same: false, epilogue: true), seed: 105)
        run(Case(cin: 20, h: 5, w: 9, m: 31, k: 1, sh: 2, sw: 2), seed: 106)
    }

    func testChunksBandsEpilogueAndPooling() { onEachPath(runChunksBandsEpilogueAndPooling) }
    private func runChunksBandsEpilogueAndPooling() {
        // 300 input channels: three chunks of a 3×3 kernel; 50 rows of 20: three bands.
        run(Case(cin: 300, h: 6, w: 13, m: 35, epilogue: true), seed: 201)
        run(Case(cin: 9, h: 50, w: 20, m: 40, epilogue: true), seed: 202)
        run(Case(cin: 9, h: 50, w: 20, m: 17, pool: true, epilogue: true), seed: 203)
        run(Case(cin: 140, h: 13, w: 13, m: 50, pool: true), seed: 204)
        run(Case(cin: 4, h: 27, w: 31, m: 16, same: false, pool: true, epilogue: true), seed: 205)
        run(Case(cin: 3, h: 3, w: 2, m: 5, pool: true, epilogue: true), seed: 206)
    }

    func testResidualAddedBeforeTheActivation() { onEachPath(runResidualAddedBeforeTheActivation) }
    private func runResidualAddedBeforeTheActivation() {
        // One block and a part, several bands, a 1×1 and a 3×3 kernel, stride 2.
        run(Case(cin: 24, h: 40, w: 33, m: 24, k: 1, same: false, epilogue: true, residual: true), seed: 301)
        run(Case(cin: 9, h: 50, w: 20, m: 40, epilogue: true, residual: true), seed: 302)
        run(Case(cin: 7, h: 11, w: 19, m: 33, sh: 2, sw: 2, epilogue: true, residual: true), seed: 303)
    }
}
