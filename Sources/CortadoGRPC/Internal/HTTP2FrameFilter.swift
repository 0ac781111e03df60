/// Walks the client's HTTP/2 frames before nghttp2 sees them and drops one kind: RST_STREAM
/// for a stream the client never opened. gRPC clients (grpcio's core among them) send that when
/// a call is cancelled or times out before its HEADERS left; HTTP/2 calls it a connection
/// error, and nghttp2 would answer GOAWAY(PROTOCOL_ERROR), failing every other call on the
/// connection. gRPC's own servers ignore such frames; so does this one.
struct HTTP2FrameFilter {
    private var prefaceLeft = 24  // "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    private var header: [UInt8] = []
    private var payloadLeft = 0
    private var dropping = false
    /// The highest stream id the client opened with HEADERS.
    private var highestOpened: UInt32 = 0
    /// Frames dropped so far (for tests and logs).
    private(set) var dropped = 0

    /// Appends to `out` the bytes of `input` that nghttp2 should see.
    mutating func filter(_ input: UnsafeRawBufferPointer, into out: inout [UInt8]) {
        filter(input) { span in out.append(contentsOf: span); return true }
    }

    /// Hands `emit` the bytes of `input` that nghttp2 should see, in order, as spans of
    /// `input` itself (no copy; usually one span, the whole read) — except a frame header
    /// split across reads, which is held back and emitted from its own buffer once complete.
    /// Stops early, returning false, when `emit` returns false.
    @discardableResult
    mutating func filter(_ input: UnsafeRawBufferPointer, emit: (UnsafeRawBufferPointer) -> Bool) -> Bool {
        var i = 0
        let count = input.count
        var spanStart = 0
        // Emits the kept bytes from spanStart up to `end`.
        func flush(_ end: Int) -> Bool {
            defer { spanStart = end }
            return end <= spanStart || emit(UnsafeRawBufferPointer(rebasing: input[spanStart..<end]))
        }
        if prefaceLeft > 0 {
            let n = min(prefaceLeft, count)
            prefaceLeft -= n
            i = n
        }
        while i < count {
            if payloadLeft > 0 {
                let n = min(payloadLeft, count - i)
                if dropping {
                    guard flush(i) else { return false }
                    spanStart = i + n
                }
                payloadLeft -= n
                i += n
                continue
            }
            let headerStart = i
            var held = false
            if header.isEmpty && count - i >= 9 {
                i += 9
            } else {
                // A header split across reads: hold its bytes back until it is complete.
                guard flush(i) else { return false }
                let n = min(9 - header.count, count - i)
                header.append(contentsOf: input[i..<(i + n)])
                i += n
                spanStart = i
                guard header.count == 9 else { break }
                held = true
            }
            let (length, type, stream) = held
                ? header.withUnsafeBytes { Self.parse(UnsafeRawBufferPointer(rebasing: $0[0..<9])) }
                : Self.parse(UnsafeRawBufferPointer(rebasing: input[headerStart..<(headerStart + 9)]))
            if type == 0x1 && stream > highestOpened { highestOpened = stream }
            dropping = type == 0x3 && stream != 0 && stream % 2 == 1 && stream > highestOpened
            if dropping {
                dropped += 1
                if !held { guard flush(headerStart) else { return false } }
                spanStart = i
            } else if held {
                guard header.withUnsafeBytes({ emit($0) }) else { return false }
            }
            if held { header.removeAll(keepingCapacity: true) }
            payloadLeft = length
        }
        return flush(count)
    }

    /// A frame header's length, type and stream id.
    private static func parse(_ h: UnsafeRawBufferPointer) -> (Int, UInt8, UInt32) {
        let length = Int(h[0]) << 16 | Int(h[1]) << 8 | Int(h[2])
        let stream = (UInt32(h[5]) << 24 | UInt32(h[6]) << 16 | UInt32(h[7]) << 8 | UInt32(h[8])) & 0x7FFF_FFFF
        return (length, h[3], stream)
    }
}
