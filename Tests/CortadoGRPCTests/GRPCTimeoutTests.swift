import CortadoGRPC
import XCTest

/// `grpc-timeout`: 1 to 8 ASCII digits and one unit letter; nanoseconds out, saturating.
final class GRPCTimeoutTests: XCTestCase {
    func testEveryUnit() {
        XCTAssertEqual(GRPCTimeout.parse("2H"), 2 * 3_600_000_000_000)
        XCTAssertEqual(GRPCTimeout.parse("3M"), 3 * 60_000_000_000)
        XCTAssertEqual(GRPCTimeout.parse("4S"), 4 * 1_000_000_000)
        XCTAssertEqual(GRPCTimeout.parse("5m"), 5 * 1_000_000)
        XCTAssertEqual(GRPCTimeout.parse("6u"), 6 * 1_000)
        XCTAssertEqual(GRPCTimeout.parse("7n"), 7)
    }

    func testZeroAndLeadingZeros() {
        XCTAssertEqual(GRPCTimeout.parse("0S"), 0)
        XCTAssertEqual(GRPCTimeout.parse("00000010m"), 10_000_000)
    }

    func testEightDigitsIsTheLimit() {
        XCTAssertEqual(GRPCTimeout.parse("99999999n"), 99_999_999)
        XCTAssertEqual(GRPCTimeout.parse("12345678u"), 12_345_678_000)
        XCTAssertNil(GRPCTimeout.parse("100000000n"), "9 digits")
        XCTAssertNil(GRPCTimeout.parse("000000001n"), "9 digits, even with leading zeros")
    }

    func testMalformed() {
        for value in ["", "S", "1", "12", "1s", "1h", "1x", "-1S", "+1S", " 1S", "1S ", "1 S", "1.5S", "1SS", "S1",
                      "1e3S", "0x10S", "١S", "1\u{0}S", "１S"] {
            XCTAssertNil(GRPCTimeout.parse(value), "'\(value)'")
        }
    }

    /// Hours can overflow UInt64 nanoseconds within 8 digits: the result saturates rather
    /// than wrapping to a short deadline.
    func testOverflowSaturates() {
        // UInt64.max ns is 5124095.57… hours.
        XCTAssertEqual(GRPCTimeout.parse("5124095H"), 5_124_095 * 3_600_000_000_000)
        XCTAssertEqual(GRPCTimeout.parse("5124096H"), UInt64.max)
        XCTAssertEqual(GRPCTimeout.parse("99999999H"), UInt64.max)
        XCTAssertEqual(GRPCTimeout.parse("99999999M"), 99_999_999 * 60_000_000_000, "fits: about 6e18")
    }
}
