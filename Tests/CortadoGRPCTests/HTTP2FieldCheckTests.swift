@testable import CortadoGRPC
import XCTest

/// The request-header checks the server does itself (nghttp2's HTTP messaging is off): the
/// word-at-a-time value scan must agree with a byte-by-byte reading of RFC 9113 §8.2.1 for
/// every length and every position of a forbidden byte.
final class HTTP2FieldCheckTests: XCTestCase {
    private func reference(_ v: [UInt8]) -> Bool {
        if let f = v.first, f == 0x20 || f == 0x09 { return false }
        if let l = v.last, l == 0x20 || l == 0x09 { return false }
        return !v.contains { $0 == 0 || $0 == 0x0a || $0 == 0x0d }
    }

    private func check(_ v: [UInt8], file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(v.withUnsafeBufferPointer { HTTP2FieldCheck.isValidValue($0) }, reference(v), "\(v)", file: file, line: line)
    }

    func testValueScanAgreesWithByteByByteForEveryLengthAndPosition() {
        // Bytes next to the forbidden ones (0x0b, 0x0c, 0x0e, 0x7f, 0x80, 0xff) must pass.
        for length in 0...40 {
            let plain = (0..<length).map { UInt8(ascii: "a") + UInt8($0 % 26) }
            check(plain)
            for position in 0..<length {
                for byte: UInt8 in [0x00, 0x0a, 0x0d, 0x09, 0x20, 0x0b, 0x0c, 0x0e, 0x7f, 0x80, 0xff, 0x01] {
                    var v = plain
                    v[position] = byte
                    check(v)
                }
            }
        }
    }

    func testNamesAreLowerCaseTokens() {
        for (name, ok) in [("x-trace", true), ("x_b3!id", true), ("X-Trace", false), ("x trace", false), ("", false), ("x:y", false), ("é", false)] {
            XCTAssertEqual(Array(name.utf8).withUnsafeBufferPointer { HTTP2FieldCheck.isValidName($0) }, ok, name)
        }
    }

    func testContentLengthIsOneDecimalNumber() {
        for (text, value) in [("0", 0), ("1234", 1234), ("", nil), ("12a", nil), ("-1", nil), (" 1", nil), ("1234567890123456789", nil)] as [(String, Int?)] {
            XCTAssertEqual(Array(text.utf8).withUnsafeBufferPointer { HTTP2FieldCheck.decimal($0) }, value, text)
        }
    }
}
