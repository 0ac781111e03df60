@testable import CortadoLoad
import XCTest

final class LatencyHistogramTests: XCTestCase {
    /// Percentiles agree with the exact ones (nearest rank on the sorted values) to within the
    /// histogram's precision: 3 significant digits, i.e. a relative error below 1/1024.
    func testPercentilesMatchSortedValuesToThreeDigits() {
        var rng = SystemRandomNumberGenerator()
        var values: [UInt64] = []
        var h = LatencyHistogram(highestTrackableValue: 3_600_000_000_000, digits: .three)
        for _ in 0..<50_000 {
            // Log-uniform from 1 µs to 10 s, in nanoseconds.
            let v = UInt64(exp(Double.random(in: log(1_000.0)...log(1e10), using: &rng)))
            values.append(v)
            h.record(v)
        }
        values.sort()
        for p in [0.0, 1, 50, 90, 99, 99.9, 100] {
            let rank = max(1, Int((p / 100 * Double(values.count)).rounded(.up)))
            let exact = Double(values[rank - 1])
            let got = Double(h.valueAtPercentile(p))
            XCTAssertLessThanOrEqual(abs(got - exact) / exact, 1.0 / 1024, "p\(p): \(got) vs \(exact)")
            XCTAssertGreaterThanOrEqual(got, exact, "HDR reports the top of the slot")
        }
        XCTAssertEqual(h.totalCount, 50_000)
        XCTAssertEqual(h.min, values.first)
        XCTAssertEqual(h.max, values.last)
        XCTAssertEqual(h.mean, Double(values.reduce(0, +)) / 50_000, accuracy: 1e-6 * h.mean)
    }

    func testSmallValuesAreExactAndEmptyIsZero() {
        var h = LatencyHistogram(highestTrackableValue: 1_000_000, digits: .two)
        XCTAssertEqual(h.valueAtPercentile(50), 0)
        for v: UInt64 in [3, 1, 2, 200, 255] { h.record(v) }
        XCTAssertEqual(h.valueAtPercentile(20), 1)
        XCTAssertEqual(h.valueAtPercentile(60), 3)
        XCTAssertEqual(h.valueAtPercentile(100), 255)
        h.record(5_000_000)  // above the highest trackable value: clamped, still counted
        XCTAssertEqual(h.totalCount, 6)
        XCTAssertEqual(h.max, 1_000_000)
    }
}
