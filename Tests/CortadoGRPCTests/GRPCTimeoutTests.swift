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

    /// What a client sends reads back as at least the time it waits, and at most one unit
    /// more (the finest unit whose amount fits in 8 digits).
    func testEncodeRoundTripsWithinOneUnit() {
        let cases: [UInt64] = [0, 1, 999, 99_999_999, 100_000_000, 1_234_567_891, 5_000_000_000, 99_999_999_000_000,
                               100_000_000_000_000, UInt64.max / 2, UInt64.max]
        for nanos in cases {
            let header = GRPCTimeout.encode(nanoseconds: nanos)
            XCTAssertLessThanOrEqual(header.utf8.count, 9, header)
            guard let back = GRPCTimeout.parse(header) else { return XCTFail("\(nanos) -> '\(header)' does not parse") }
            XCTAssertGreaterThanOrEqual(back, nanos, header)
            let unit: UInt64
            switch header.last! {
            case "n": unit = 1
            case "u": unit = 1_000
            case "m": unit = 1_000_000
            case "S": unit = 1_000_000_000
            case "M": unit = 60_000_000_000
            default: unit = 3_600_000_000_000
            }
            XCTAssertLessThanOrEqual(back - nanos, max(unit, 1), header)
        }
        XCTAssertEqual(GRPCTimeout.encode(nanoseconds: 1_500_000), "1500000n")
        XCTAssertEqual(GRPCTimeout.encode(nanoseconds: 250_000_000), "250000u")
    }

    func testMethodPaths() {
        let path = GRPCMethodPath("/inference.GRPCInferenceService/ModelInfer")
        XCTAssertEqual(path?.service, "inference.GRPCInferenceService")
        XCTAssertEqual(path?.method, "ModelInfer")
        XCTAssertEqual(path?.path, "/inference.GRPCInferenceService/ModelInfer")
        for bad in ["", "/", "//", "/a/", "//b", "a/b", "/a/b/c", "/a"] {
            XCTAssertNil(GRPCMethodPath(bad), bad)
        }
    }

    func testCustomMetadataNames() {
        XCTAssertTrue(GRPCMetadata.isValidCustomName("authorization"))
        XCTAssertTrue(GRPCMetadata.isValidCustomName("x-trace_id.v2"))
        for bad in ["", ":path", "Authorization", "grpc-timeout", "content-type", "te", "a b", "é"] {
            XCTAssertFalse(GRPCMetadata.isValidCustomName(bad), bad)
        }
        XCTAssertEqual(GRPCMetadata.value("b", in: [("a", "1"), ("b", "2"), ("b", "3")]), "2")
    }
}
