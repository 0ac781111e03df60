import CortadoGRPC
import XCTest

/// The length-prefixed message reader: chunks of any size, several messages per chunk, the
/// size limit, the compressed flag and partial messages.
final class GRPCMessageReaderTests: XCTestCase {
    /// A prefix by hand (flag, big-endian length) so the reader is not checked against the writer alone.
    private func prefixed(_ body: [UInt8], flag: UInt8 = 0) -> [UInt8] {
        let n = body.count
        return [flag, UInt8(n >> 24 & 0xFF), UInt8(n >> 16 & 0xFF), UInt8(n >> 8 & 0xFF), UInt8(n & 0xFF)] + body
    }

    private let messages: [[UInt8]] = [
        Array("hello".utf8),
        [],
        (0..<300).map { UInt8(truncatingIfNeeded: $0 &* 7) },
        [0x00],
    ]

    func testOneMessageInOneChunk() throws {
        var reader = GRPCMessageReader(maxMessageSize: 1024)
        try reader.append(prefixed(Array("hello".utf8)))
        XCTAssertEqual(reader.messages, [Array("hello".utf8)])
        XCTAssertFalse(reader.hasPartialMessage)
    }

    func testSeveralMessagesInOneChunk() throws {
        var reader = GRPCMessageReader(maxMessageSize: 1024)
        try reader.append(messages.flatMap { prefixed($0) })
        XCTAssertEqual(reader.messages, messages)
        XCTAssertFalse(reader.hasPartialMessage)
    }

    /// Two chunks, split at every byte boundary of a stream of four messages (one empty).
    func testSplitAtEveryByteBoundary() throws {
        let stream = messages.flatMap { prefixed($0) }
        for split in 0...stream.count {
            var reader = GRPCMessageReader(maxMessageSize: 1024)
            try reader.append(Array(stream[..<split]))
            try reader.append(Array(stream[split...]))
            XCTAssertEqual(reader.messages, messages, "split at \(split)")
            XCTAssertFalse(reader.hasPartialMessage, "split at \(split)")
        }
    }

    /// Three chunks, both cuts at every pair of boundaries of a short stream.
    func testSplitAtEveryPairOfBoundaries() throws {
        let short: [[UInt8]] = [Array("ab".utf8), [], Array("xyz".utf8)]
        let stream = short.flatMap { prefixed($0) }
        for first in 0...stream.count {
            for second in first...stream.count {
                var reader = GRPCMessageReader(maxMessageSize: 16)
                try reader.append(Array(stream[..<first]))
                try reader.append(Array(stream[first..<second]))
                try reader.append(Array(stream[second...]))
                XCTAssertEqual(reader.messages, short, "cuts at \(first), \(second)")
            }
        }
    }

    func testByteByByte() throws {
        let stream = messages.flatMap { prefixed($0) }
        var reader = GRPCMessageReader(maxMessageSize: 1024)
        var completed = 0
        for (i, byte) in stream.enumerated() {
            try reader.append([byte])
            // A message is complete exactly when its last byte (or, for an empty one, its
            // prefix) has arrived.
            if reader.messages.count > completed {
                completed = reader.messages.count
                XCTAssertFalse(reader.hasPartialMessage, "after byte \(i)")
            } else {
                XCTAssertTrue(reader.hasPartialMessage, "after byte \(i)")
            }
        }
        XCTAssertEqual(reader.messages, messages)
    }

    func testRawBufferAppend() throws {
        var reader = GRPCMessageReader(maxMessageSize: 1024)
        let stream = prefixed([1, 2, 3])
        try stream.withUnsafeBytes { try reader.append($0) }
        XCTAssertEqual(reader.messages, [[1, 2, 3]])
    }

    func testEmptyChunkChangesNothing() throws {
        var reader = GRPCMessageReader(maxMessageSize: 1024)
        try reader.append([])
        XCTAssertTrue(reader.messages.isEmpty)
        XCTAssertFalse(reader.hasPartialMessage)
        try reader.append([0, 0])
        try reader.append([])
        XCTAssertTrue(reader.hasPartialMessage)
    }

    // MARK: size limit

    func testMessageAtTheLimitIsAccepted() throws {
        var reader = GRPCMessageReader(maxMessageSize: 8)
        try reader.append(prefixed([UInt8](repeating: 9, count: 8)))
        XCTAssertEqual(reader.messages.first?.count, 8)
    }

    func testMessageOverTheLimitThrowsWithSizes() {
        var reader = GRPCMessageReader(maxMessageSize: 8)
        XCTAssertThrowsError(try reader.append(prefixed([UInt8](repeating: 9, count: 9)))) { error in
            XCTAssertEqual(error as? GRPCMessageReader.ReadError, .tooLarge(declared: 9, limit: 8))
        }
    }

    /// The declared length is checked as soon as the prefix is complete, before any body arrives.
    func testLimitIsCheckedOnThePrefixAlone() throws {
        var reader = GRPCMessageReader(maxMessageSize: 1 << 20)
        try reader.append([0, 0x7F])
        XCTAssertThrowsError(try reader.append([0xFF, 0xFF, 0xFF])) { error in
            XCTAssertEqual(error as? GRPCMessageReader.ReadError, .tooLarge(declared: 0x7FFF_FFFF, limit: 1 << 20))
        }
    }

    /// The largest length the prefix can declare (2^32 - 1) is reported as it is, not wrapped.
    func testLargestDeclaredLength() {
        var reader = GRPCMessageReader(maxMessageSize: 0)
        XCTAssertThrowsError(try reader.append([0, 0xFF, 0xFF, 0xFF, 0xFF])) { error in
            XCTAssertEqual(error as? GRPCMessageReader.ReadError, .tooLarge(declared: 0xFFFF_FFFF, limit: 0))
        }
    }

    func testZeroLimitStillTakesEmptyMessages() throws {
        var reader = GRPCMessageReader(maxMessageSize: 0)
        try reader.append(prefixed([]) + prefixed([]))
        XCTAssertEqual(reader.messages, [[], []])
    }

    // MARK: compressed flag

    func testCompressedFlagIsRejected() {
        for flag: UInt8 in [1, 2, 0x80, 0xFF] {
            var reader = GRPCMessageReader(maxMessageSize: 1024)
            XCTAssertThrowsError(try reader.append(prefixed([1, 2, 3], flag: flag)), "flag \(flag)") { error in
                XCTAssertEqual(error as? GRPCMessageReader.ReadError, .compressed)
            }
        }
    }

    /// A compressed second message fails even when the first was fine; the first is kept.
    func testCompressedAfterAGoodMessage() {
        var reader = GRPCMessageReader(maxMessageSize: 1024)
        XCTAssertThrowsError(try reader.append(prefixed([1]) + prefixed([2], flag: 1)))
        XCTAssertEqual(reader.messages, [[1]])
    }

    // MARK: partial messages

    func testPartialPrefix() throws {
        var reader = GRPCMessageReader(maxMessageSize: 1024)
        XCTAssertFalse(reader.hasPartialMessage)
        try reader.append([0, 0, 0])
        XCTAssertTrue(reader.hasPartialMessage)
        XCTAssertTrue(reader.messages.isEmpty)
    }

    func testPartialBody() throws {
        var reader = GRPCMessageReader(maxMessageSize: 1024)
        try reader.append(Array(prefixed([1, 2, 3, 4]).dropLast()))
        XCTAssertTrue(reader.hasPartialMessage)
        XCTAssertTrue(reader.messages.isEmpty)
        try reader.append([4])
        XCTAssertFalse(reader.hasPartialMessage)
        XCTAssertEqual(reader.messages, [[1, 2, 3, 4]])
    }

    /// A complete message followed by the start of another: one message and a partial one.
    func testCompleteThenPartial() throws {
        var reader = GRPCMessageReader(maxMessageSize: 1024)
        try reader.append(prefixed([7]) + [0])
        XCTAssertEqual(reader.messages, [[7]])
        XCTAssertTrue(reader.hasPartialMessage)
    }

    func testEmptyMessageIsCompleteAfterItsPrefix() throws {
        var reader = GRPCMessageReader(maxMessageSize: 1024)
        try reader.append([0, 0, 0, 0])
        XCTAssertTrue(reader.hasPartialMessage)
        try reader.append([0])
        XCTAssertFalse(reader.hasPartialMessage)
        XCTAssertEqual(reader.messages, [[]])
    }
}
