import CortadoGRPC
import XCTest

/// Status codes on the wire and `grpc-message` percent-encoding.
final class GRPCStatusTests: XCTestCase {
    func testCodesMatchTheGRPCNumbers() {
        XCTAssertEqual(GRPCStatus.Code.allCases.map(\.rawValue), Array(0...16))
        XCTAssertEqual(GRPCStatus.Code.unimplemented.rawValue, 12)
        XCTAssertEqual(GRPCStatus.Code.resourceExhausted.description, "RESOURCE_EXHAUSTED")
        XCTAssertEqual(GRPCStatus.Code.internal.description, "INTERNAL")
    }

    func testNumbersFromThePeer() {
        XCTAssertEqual(GRPCStatus.name(ofCode: 14), "UNAVAILABLE")
        XCTAssertEqual(GRPCStatus.name(ofCode: 17), "STATUS_17")
        XCTAssertEqual(GRPCStatus.name(ofCode: -1), "STATUS_-1")
        XCTAssertEqual(GRPCStatus(number: 5, message: "no model"), GRPCStatus(.notFound, "no model"))
        XCTAssertEqual(GRPCStatus(number: 99, message: "odd"), GRPCStatus(.unknown, "grpc-status 99: odd"))
        XCTAssertEqual(GRPCStatus.Code.unauthenticated.number, 16)
    }

    func testDescription() {
        XCTAssertEqual(GRPCStatus.ok.description, "OK")
        XCTAssertEqual(GRPCStatus(.notFound, "no model").description, "NOT_FOUND: no model")
    }

    func testPrintableASCIIIsKept() {
        let printable = String((0x20...0x7E).filter { $0 != 0x25 }.map { Character(Unicode.Scalar(UInt8($0))) })
        XCTAssertEqual(GRPCStatus.percentEncode(printable), printable)
    }

    func testPercentAndControlsAndNonASCII() {
        XCTAssertEqual(GRPCStatus.percentEncode("100%"), "100%25")
        XCTAssertEqual(GRPCStatus.percentEncode("a\nb\tc\r"), "a%0Ab%09c%0D")
        XCTAssertEqual(GRPCStatus.percentEncode("\u{7F}"), "%7F")
        XCTAssertEqual(GRPCStatus.percentEncode("naïve"), "na%C3%AFve")
        XCTAssertEqual(GRPCStatus.percentEncode("€"), "%E2%82%AC")
        XCTAssertEqual(GRPCStatus.percentEncode("🙂"), "%F0%9F%99%82")
        XCTAssertEqual(GRPCStatus.percentEncode(""), "")
    }

    func testEncodedTextIsPrintableASCII() {
        let encoded = GRPCStatus.percentEncode("Größe 100% — 模型 🙂\n\u{0}")
        XCTAssertTrue(encoded.utf8.allSatisfy { $0 >= 0x20 && $0 <= 0x7E }, encoded)
    }

    func testRoundTrip() {
        let samples = ["", "plain", "100% sure", "%25 is a percent", "%", "%%", "%2", "naïve café", "模型 'x' 没有加载",
                       "emoji 🙂👍🏽", "tabs\tand\nnewlines\r\n", "\u{0}\u{1}\u{1F}\u{7F}",
                       String((0..<128).map { Character(Unicode.Scalar(UInt8($0))) })]
        for s in samples {
            XCTAssertEqual(GRPCStatus.percentDecode(GRPCStatus.percentEncode(s)), s, "'\(s)'")
        }
    }

    func testDecodeAcceptsLowerCaseHex() {
        XCTAssertEqual(GRPCStatus.percentDecode("na%c3%afve"), "naïve")
    }

    func testDecodeKeepsMalformedEscapes() {
        XCTAssertEqual(GRPCStatus.percentDecode("100%"), "100%")
        XCTAssertEqual(GRPCStatus.percentDecode("%2"), "%2")
        XCTAssertEqual(GRPCStatus.percentDecode("%G1x"), "%G1x")
        XCTAssertEqual(GRPCStatus.percentDecode("50%%25"), "50%%")
        XCTAssertEqual(GRPCStatus.percentDecode("%41%"), "A%")
    }

    /// An escape at the very end of the text is decoded (the bounds check is not off by one).
    func testDecodeEscapeAtTheEnd() {
        XCTAssertEqual(GRPCStatus.percentDecode("x%41"), "xA")
        XCTAssertEqual(GRPCStatus.percentDecode("%41"), "A")
    }
}
