import CCortadoGemm
import XCTest

/// The depthwise 3×3 kernel (`Sources/CGemm/cortado_depthwise.c`) on each kernel path against
/// a naive depthwise convolution in Double: strides 1 and 2 each way, padding on all sides or
/// none (the input read in place), widths around the vector lengths, channels split over two
/// calls, and the epilogue (scale, shift, ReLU or leaky ReLU).
///
/// Tolerance: 9 products per output, so 4·10·u·Σ|products| (u = 2⁻²⁴), times |scale|, plus 4u
/// of the result for the epilogue's rounding.
final class CortadoDepthwiseTests: XCTestCase {
    private let u = Double(Float.ulpOfOne) / 2

    private func run(channels: Int, h: Int, w: Int, sh: Int, sw: Int, pad: Int, activation: cg_activation?, seed: UInt64,
                     file: StaticString = #filePath, line: UInt = #line) {
        let outH = (h + 2 * pad - 3) / sh + 1, outW = (w + 2 * pad - 3) / sw + 1
        var g = cg_conv(channels: channels, h: h, w: w, kh: 3, kw: 3, sh: sh, sw: sw, dh: 1, dw: 1, pad_h: pad, pad_w: pad,
                        out_h: outH, out_w: outW)
        let what = "\(channels)×\(h)×\(w) stride \(sh)×\(sw) pad \(pad) \(String(describing: activation))"
        XCTAssertEqual(cg_depthwise_supported(&g), 1, what, file: file, line: line)
        var values = SeededFloats(state: seed)
        let x = values.array(channels * h * w), weights = values.array(channels * 9)
        let scale = values.array(channels), shift = values.array(channels)
        let alpha: Float = 0.1
        var y = [Float](repeating: 42, count: channels * outH * outW + 16)
        var work = [Float](repeating: .nan, count: Int(cg_depthwise_workspace_count(&g)))
        var e = cg_epilogue(scale: nil, shift: nil, per_column: 0, activation: activation ?? CG_ACT_NONE, alpha: alpha, residual: nil)
        scale.withUnsafeBufferPointer { sp in
            shift.withUnsafeBufferPointer { tp in
                e.scale = sp.baseAddress
                e.shift = tp.baseAddress
                withUnsafePointer(to: &e) { ep in
                    let half = channels / 2
                    for (c0, c1) in [(0, half), (half, channels)] where c0 < c1 {
                        cg_depthwise3x3(&g, x, weights, c0, c1, &y, activation == nil ? nil : ep, &work)
                    }
                }
            }
        }
        XCTAssertTrue(y[(channels * outH * outW)...].allSatisfy { $0 == 42 }, "\(what): wrote past the output", file: file, line: line)
        for c in 0..<channels {
            for oh in 0..<outH {
                for ow in 0..<outW {
                    var exact = 0.0, magnitude = 0.0
                    for i in 0..<3 {
                        let ih = oh * sh - pad + i
                        guard ih >= 0, ih < h else { continue }
                        for j in 0..<3 {
                            let iw = ow * sw - pad + j
                            guard iw >= 0, iw < w else { continue }
                            let p = Double(weights[c * 9 + i * 3 + j]) * Double(x[(c * h + ih) * w + iw])
                            exact += p
                            magnitude += abs(p)
                        }
                    }
                    var bound = 40 * u * magnitude
                    if let activation {
                        let s = Double(scale[c]), v = exact * s + Double(shift[c])
                        if activation == CG_ACT_RELU {
                            exact = v < 0 ? 0 : v
                        } else if activation == CG_ACT_LEAKY_RELU {
                            exact = v < 0 ? v * Double(alpha) : v
                        } else {
                            exact = v
                        }
                        bound = bound * abs(s) + 4 * u * (abs(v) + abs(Double(shift[c])))
                    }
                    let got = Double(y[(c * outH + oh) * outW + ow])
                    if !(abs(got - exact) <= bound + 1e-30) {
                        XCTFail("\(what): y[\(c), \(oh), \(ow)] = \(got), expected \(exact) (bound \(bound))", file: file, line: line)
                        return
                    }
                }
            }
        }
    }

    func testStridesPaddingAndEpilogue() {
        onEachKernelPath {
            var seed: UInt64 = 1
            for (sh, sw) in [(1, 1), (2, 2), (2, 1), (1, 2)] {
                for pad in [0, 1] {
                    for w in [3, 8, 17, 33] {
                        for activation: cg_activation? in [nil, CG_ACT_NONE, CG_ACT_RELU, CG_ACT_LEAKY_RELU] {
                            run(channels: 5, h: 7, w: w, sh: sh, sw: sw, pad: pad, activation: activation, seed: seed)
                            seed += 1
                        }
                    }
                }
            }
            run(channels: 24, h: 64, w: 64, sh: 1, sw: 1, pad: 1, activation: CG_ACT_RELU, seed: 99)
        }
    }
}
