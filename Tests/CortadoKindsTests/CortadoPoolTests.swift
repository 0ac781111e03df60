import CCortadoGemm
import XCTest

/// The vectorised 2×2 max-pool row kernel (`Sources/CGemm/cortado_pool.c`) against the scalar
/// loop it replaces, bit for bit: every count from 1 to 70 (whole vectors, masked tails), both
/// strides, NaNs and signed zeros in every position of the window (the scalar `max(x, y)` is
/// `y >= x ? y : x`, so which NaN or zero wins depends on the order).
final class CortadoPoolTests: XCTestCase {
    private func scalar(_ r0: [Float], _ r1: [Float], count: Int, stride: Int) -> [Float] {
        (0..<count).map { i in
            let j = i * stride
            return Swift.max(Swift.max(r0[j], r0[j + 1]), Swift.max(r1[j], r1[j + 1]))
        }
    }

    func testMatchesScalarLoopBitForBit() { onEachKernelPath(runMatchesScalarLoopBitForBit) }
    private func runMatchesScalarLoopBitForBit() {
        var state: UInt64 = 7
        // Mostly ordinary values; some NaNs (two payloads), zeros of both signs and ties.
        func next() -> Float {
            state = state &* 6364136223846793005 &+ 1442695040888963407
            let r = Int(state >> 40) % 20
            switch r {
            case 0: return .nan
            case 1: return Float(bitPattern: 0x7FC0_0123)
            case 2: return 0
            case 3: return -0.0
            case 4: return 1.5
            default: return Float(Int64(state >> 20) % 2000) / 100 - 10
            }
        }
        for stride in [1, 2] {
            for count in 1...70 {
                let len = stride * (count - 1) + 2
                // Guard values past the window's reach and past the output row must stay put.
                let r0 = (0..<len).map { _ in next() }, r1 = (0..<len).map { _ in next() }
                var out = [Float](repeating: 42, count: count + 20)
                r0.withUnsafeBufferPointer { a in
                    r1.withUnsafeBufferPointer { b in
                        out.withUnsafeMutableBufferPointer { o in
                            cg_max_pool_2x2_row(a.baseAddress!, b.baseAddress!, o.baseAddress!, count, stride)
                        }
                    }
                }
                let want = scalar(r0, r1, count: count, stride: stride)
                for i in 0..<count where out[i].bitPattern != want[i].bitPattern {
                    XCTFail("stride \(stride), count \(count), output \(i): \(out[i]) (\(String(out[i].bitPattern, radix: 16))), scalar loop \(want[i]) (\(String(want[i].bitPattern, radix: 16)))")
                    return
                }
                XCTAssertTrue(out[count...].allSatisfy { $0 == 42 }, "stride \(stride), count \(count): wrote past the row")
            }
        }
    }
}
