/// The field checks RFC 9113 §8.2 asks of an HTTP/2 request's headers, done by the server's
/// header callback (nghttp2's own HTTP messaging pass is off: it scanned every header a
/// second time).
enum HTTP2FieldCheck {
    /// Bytes allowed in a field name: RFC 9110 token characters, lower case only.
    private static let nameByte: [Bool] = (0..<256).map { b in
        switch UInt8(b) {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"): return true
        case UInt8(ascii: "!"), UInt8(ascii: "#"), UInt8(ascii: "$"), UInt8(ascii: "%"), UInt8(ascii: "&"), UInt8(ascii: "'"),
             UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "^"), UInt8(ascii: "_"),
             UInt8(ascii: "`"), UInt8(ascii: "|"), UInt8(ascii: "~"): return true
        default: return false
        }
    }

    /// A regular field name: a non-empty lower-case token.
    static func isValidName(_ name: UnsafeBufferPointer<UInt8>) -> Bool {
        !name.isEmpty && name.allSatisfy { nameByte[Int($0)] }
    }

    /// A field value: no NUL, CR or LF anywhere, no space or tab at either end.
    static func isValidValue(_ value: UnsafeBufferPointer<UInt8>) -> Bool {
        guard let first = value.first, let last = value.last else { return true }
        if first == 0x20 || first == 0x09 || last == 0x20 || last == 0x09 { return false }
        // Eight bytes at a time, whether any is below 0x0e (the three are): only then is each
        // byte looked at. (x - 0x0e…0e) & ~x & 0x80…80 is non-zero exactly when some byte of
        // x is below 0x0e.
        let base = UnsafeRawPointer(value.baseAddress!)
        let ones: UInt64 = 0x0101_0101_0101_0101
        var low: UInt64 = 0
        var i = 0
        while i + 8 <= value.count {
            let x = base.loadUnaligned(fromByteOffset: i, as: UInt64.self)
            low |= (x &- ones &* 0x0e) & ~x & (ones &* 0x80)
            i += 8
        }
        if i < value.count && value.count >= 8 {
            // The last eight bytes, overlapping ones already seen.
            let x = base.loadUnaligned(fromByteOffset: value.count - 8, as: UInt64.self)
            low |= (x &- ones &* 0x0e) & ~x & (ones &* 0x80)
        } else {
            while i < value.count {
                if value[i] < 0x0e { low = 1 }
                i += 1
            }
        }
        return low == 0 || !value.contains { $0 == 0 || $0 == 0x0a || $0 == 0x0d }
    }

    /// Headers that belong to one HTTP/1.1 hop and have no place in HTTP/2 (§8.2.2).
    static func isConnectionSpecific(_ name: UnsafeBufferPointer<UInt8>) -> Bool {
        HTTP2Stream.matches(name, "connection") || HTTP2Stream.matches(name, "keep-alive") || HTTP2Stream.matches(name, "proxy-connection")
            || HTTP2Stream.matches(name, "transfer-encoding") || HTTP2Stream.matches(name, "upgrade")
    }

    /// A non-negative decimal number of at most 18 digits (content-length).
    static func decimal(_ value: UnsafeBufferPointer<UInt8>) -> Int? {
        guard !value.isEmpty, value.count <= 18 else { return nil }
        var n = 0
        for b in value {
            guard b >= UInt8(ascii: "0"), b <= UInt8(ascii: "9") else { return nil }
            n = n * 10 + Int(b - UInt8(ascii: "0"))
        }
        return n
    }

    /// Bytes for a log line (invalid UTF-8 repaired).
    static func text(_ bytes: UnsafeBufferPointer<UInt8>) -> String { String(decoding: bytes, as: UTF8.self) }
}
