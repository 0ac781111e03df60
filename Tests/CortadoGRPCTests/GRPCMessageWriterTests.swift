import CortadoGRPC
import XCTest

/// `GRPCMessageWriter.frame`: a 0 flag, a 4-byte big-endian length, the bytes.
final class GRPCMessageWriterTests: XCTestCase {
    func testEmptyMessage() {
        XCTAssertEqual(GRPCMessageWriter.frame([]), [0, 0, 0, 0, 0])
    }

    func testShortMessage() {
        XCTAssertEqual(GRPCMessageWriter.frame([0xAB, 0xCD]), [0, 0, 0, 0, 2, 0xAB, 0xCD])
    }

    func testLengthIsBigEndian() {
        let message = [UInt8](repeating: 1, count: 0x01_02_03)
        let framed = GRPCMessageWriter.frame(message)
        XCTAssertEqual(Array(framed.prefix(5)), [0, 0, 0x01, 0x02, 0x03])
        XCTAssertEqual(framed.count, message.count + 5)
        XCTAssertEqual(Array(framed.dropFirst(5)), message)
    }

    func testLength256() {
        XCTAssertEqual(Array(GRPCMessageWriter.frame([UInt8](repeating: 0, count: 256)).prefix(5)), [0, 0, 0, 1, 0])
    }

    func testRoundTripThroughTheReader() throws {
        let messages: [[UInt8]] = [[], Array("grpc".utf8), [UInt8](repeating: 0xFF, count: 70_000)]
        var reader = GRPCMessageReader(maxMessageSize: 1 << 20)
        for m in messages { try reader.append(GRPCMessageWriter.frame(m)) }
        XCTAssertEqual(reader.messages, messages)
        XCTAssertFalse(reader.hasPartialMessage)
    }
}
