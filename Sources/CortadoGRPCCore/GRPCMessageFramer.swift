/// gRPC's length-prefixed messages: a 1-byte compressed flag, a 4-byte big-endian length,
/// then the message. A request body arrives as HTTP/2 DATA chunks of any size; the reader
/// is a small state machine fed chunk by chunk.
public struct GRPCMessageReader: Sendable {
    public enum ReadError: Error, Equatable, Sendable {
        /// The message declares more bytes than the limit allows.
        case tooLarge(declared: Int, limit: Int)
        /// The compressed flag is set (or is not 0/1).
        case compressed
    }

    /// The largest message accepted, in bytes (not counting the 5-byte prefix).
    public let maxMessageSize: Int
    /// The prefix bytes read so far (big-endian, at most 5) and how many.
    private var header: UInt64 = 0
    private var headerCount = 0
    private var expected = -1
    private var body: [UInt8] = []
    /// Complete messages read so far.
    public private(set) var messages: [[UInt8]] = []
    /// Bytes of a message still being read (an incomplete prefix or body).
    public var hasPartialMessage: Bool { headerCount > 0 || expected >= 0 }

    public init(maxMessageSize: Int) {
        self.maxMessageSize = maxMessageSize
    }

    /// Consumes a chunk of the body.
    public mutating func append(_ chunk: UnsafeRawBufferPointer) throws {
        try append(chunk, admit: { _ in })
    }

    /// Consumes a chunk of the body. `admit` sees each message's declared length (within
    /// `maxMessageSize`) before any of its bytes are kept, and refuses it by throwing.
    public mutating func append(_ chunk: UnsafeRawBufferPointer, admit: (Int) throws -> Void) throws {
        var index = 0
        let count = chunk.count
        while index < count {
            if expected < 0 {
                while headerCount < 5 && index < count {
                    header = header << 8 | UInt64(chunk[index])
                    headerCount += 1
                    index += 1
                }
                guard headerCount == 5 else { return }
                guard header >> 32 == 0 else { throw ReadError.compressed }
                let length = Int(header & 0xffff_ffff)
                guard length <= maxMessageSize else { throw ReadError.tooLarge(declared: length, limit: maxMessageSize) }
                try admit(length)
                expected = length
                body = []
                body.reserveCapacity(length)
            }
            let take = min(expected - body.count, count - index)
            if take > 0 {
                body.append(contentsOf: chunk[index..<(index + take)])
                index += take
            }
            if body.count == expected {
                messages.append(body)
                body = []
                header = 0
                headerCount = 0
                expected = -1
            }
        }
    }

    /// The complete messages read so far, handed over (the reader forgets them).
    public mutating func takeMessages() -> [[UInt8]] {
        defer { messages.removeAll() }
        return messages
    }

    public mutating func append(_ bytes: [UInt8]) throws {
        var copy = bytes
        try copy.withUnsafeMutableBytes { raw in try self.append(UnsafeRawBufferPointer(raw)) }
    }
}

public enum GRPCMessageWriter {
    /// Bytes of the prefix a message is framed with.
    public static let prefixLength = 5

    /// Fills in the prefix of `bytes`, whose first `prefixLength` bytes were left for it and
    /// whose rest is the message: framing without copying the message.
    public static func fillPrefix(_ bytes: inout [UInt8]) {
        precondition(bytes.count >= prefixLength)
        let n = UInt32(bytes.count - prefixLength)
        bytes[0] = 0
        bytes[1] = UInt8(truncatingIfNeeded: n >> 24)
        bytes[2] = UInt8(truncatingIfNeeded: n >> 16)
        bytes[3] = UInt8(truncatingIfNeeded: n >> 8)
        bytes[4] = UInt8(truncatingIfNeeded: n)
    }

    /// `message` with its 5-byte uncompressed prefix.
    public static func frame(_ message: [UInt8]) -> [UInt8] {
        var out = [UInt8]()
        out.reserveCapacity(message.count + 5)
        let n = UInt32(message.count)
        out.append(0)
        out.append(UInt8(truncatingIfNeeded: n >> 24))
        out.append(UInt8(truncatingIfNeeded: n >> 16))
        out.append(UInt8(truncatingIfNeeded: n >> 8))
        out.append(UInt8(truncatingIfNeeded: n))
        out.append(contentsOf: message)
        return out
    }
}
