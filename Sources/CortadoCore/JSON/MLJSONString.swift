/// A JSON string's text (RFC 8259 §7): read from the byte after its opening quote to past its
/// closing quote, escapes decoded, the UTF-8 checked (bad bytes are an error, not U+FFFD, §8.1).
/// Shared by `MLJSONParser` and the server's typed reader of REST infer requests; each turns a
/// `Problem` into its own error, naming the byte `at` stopped on.
public enum MLJSONString {
    public struct Problem: Error {
        public let message: String
    }

    public static func read(_ p: UnsafeBufferPointer<UInt8>, at: inout Int) throws(Problem) -> String {
        // Most strings (names, datatypes) hold no escape: their bytes are the string's UTF-8,
        // checked where they lie.
        let start = at
        while at < p.count {
            let c = p[at]
            if c == UInt8(ascii: "\"") {
                let s = String(validating: UnsafeBufferPointer(rebasing: p[start..<at]), as: UTF8.self)
                at += 1
                guard let s else { throw Problem(message: "a string that is not valid UTF-8") }
                return s
            }
            if c == UInt8(ascii: "\\") || c < 0x20 { break }
            at += 1
        }
        var out = [UInt8](UnsafeBufferPointer(rebasing: p[start..<at]))
        while at < p.count {
            let c = p[at]
            at += 1
            if c == UInt8(ascii: "\"") {
                guard let s = String(validating: out, as: UTF8.self) else { throw Problem(message: "a string that is not valid UTF-8") }
                return s
            }
            if c < 0x20 { throw Problem(message: "control character in a string") }
            guard c == UInt8(ascii: "\\") else {
                out.append(c)
                continue
            }
            guard at < p.count else { break }
            let e = p[at]
            at += 1
            switch e {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): out.append(e)
            case UInt8(ascii: "b"): out.append(0x08)
            case UInt8(ascii: "f"): out.append(0x0c)
            case UInt8(ascii: "n"): out.append(0x0a)
            case UInt8(ascii: "r"): out.append(0x0d)
            case UInt8(ascii: "t"): out.append(0x09)
            case UInt8(ascii: "u"):
                var scalar = try hex4(p, at: &at)
                if (0xD800..<0xDC00).contains(scalar) {
                    guard p.count - at >= 6, p[at] == UInt8(ascii: "\\"), p[at + 1] == UInt8(ascii: "u") else {
                        throw Problem(message: "lone surrogate")
                    }
                    at += 2
                    let low = try hex4(p, at: &at)
                    guard (0xDC00..<0xE000).contains(low) else { throw Problem(message: "bad surrogate pair") }
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                }
                guard let u = Unicode.Scalar(scalar) else { throw Problem(message: "invalid \\u escape") }
                out.append(contentsOf: String(Character(u)).utf8)
            default: throw Problem(message: "invalid escape")
            }
        }
        throw Problem(message: "unterminated string")
    }

    /// Four hex digits exactly (no sign, as `UInt32(_:radix:)` would take).
    static func hex4(_ p: UnsafeBufferPointer<UInt8>, at: inout Int) throws(Problem) -> UInt32 {
        guard p.count - at >= 4 else { throw Problem(message: "invalid \\u escape") }
        var v: UInt32 = 0
        for k in 0..<4 {
            let c = p[at + k]
            let d: UInt8
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): d = c - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): d = c - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): d = c - UInt8(ascii: "A") + 10
            default: throw Problem(message: "invalid \\u escape")
            }
            v = v << 4 | UInt32(d)
        }
        at += 4
        return v
    }
}
