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

    /// Appends to `out` the bytes of `input` that nghttp2 should see. An incomplete frame
    /// header is held back until its last byte arrives.
    mutating func filter(_ input: UnsafeRawBufferPointer, into out: inout [UInt8]) {
        var i = 0
        let count = input.count
        if prefaceLeft > 0 {
            let n = min(prefaceLeft, count)
            out.append(contentsOf: input[0..<n])
            prefaceLeft -= n
            i = n
        }
        while i < count {
            if payloadLeft > 0 {
                let n = min(payloadLeft, count - i)
                if !dropping { out.append(contentsOf: input[i..<(i + n)]) }
                payloadLeft -= n
                i += n
                continue
            }
            let n = min(9 - header.count, count - i)
            header.append(contentsOf: input[i..<(i + n)])
            i += n
            guard header.count == 9 else { break }
            let length = Int(header[0]) << 16 | Int(header[1]) << 8 | Int(header[2])
            let type = header[3]
            let stream = (UInt32(header[5]) << 24 | UInt32(header[6]) << 16 | UInt32(header[7]) << 8 | UInt32(header[8])) & 0x7FFF_FFFF
            if type == 0x1 && stream > highestOpened { highestOpened = stream }
            dropping = type == 0x3 && stream != 0 && stream % 2 == 1 && stream > highestOpened
            if dropping { dropped += 1 } else { out.append(contentsOf: header) }
            header.removeAll(keepingCapacity: true)
            payloadLeft = length
        }
    }
}
