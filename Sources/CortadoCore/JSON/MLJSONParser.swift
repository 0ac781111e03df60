import Foundation

/// A small JSON reader for input rows. Foundation's `JSONSerialization` on Linux can
/// return a neighbouring double (e.g. -52.81717522634557 reads as -52.817175226345555);
/// this parser converts every number with `Double(String)` (correctly rounded) or as an
/// exact Int64, and yields the same value types JSONSerialization does (`[String: Any]`,
/// `[Any]`, `String`, `NSNumber`, `NSNull`), so decoding code is unchanged.
public struct MLJSONParser {
    private let bytes: [UInt8]
    private var at = 0

    public static func parse(_ data: some Collection<UInt8>) throws -> Any {
        var parser = MLJSONParser(bytes: Array(data))
        let value = try parser.value(depth: 0)
        parser.skipSpace()
        guard parser.at == parser.bytes.count else { throw parser.error("unexpected text after the value") }
        return value
    }

    private init(bytes: [UInt8]) { self.bytes = bytes }

    private func error(_ message: String) -> MLModelError {
        MLModelError(.parse, "malformed JSON at byte \(at + 1): \(message)")
    }

    private mutating func skipSpace() {
        while at < bytes.count {
            switch bytes[at] {
            case 0x20, 0x09, 0x0a, 0x0d: at += 1
            default: return
            }
        }
    }

    private mutating func expect(_ literal: String, _ value: Any) throws -> Any {
        let utf8 = Array(literal.utf8)
        guard bytes.count - at >= utf8.count, Array(bytes[at..<at + utf8.count]) == utf8 else { throw error("unknown literal") }
        at += utf8.count
        return value
    }

    private mutating func value(depth: Int) throws -> Any {
        guard depth < 512 else { throw error("nesting is too deep") }
        skipSpace()
        guard at < bytes.count else { throw error("unexpected end of input") }
        switch bytes[at] {
        case UInt8(ascii: "{"):
            at += 1
            var object: [String: Any] = [:]
            skipSpace()
            if at < bytes.count, bytes[at] == UInt8(ascii: "}") { at += 1; return object }
            while true {
                skipSpace()
                guard at < bytes.count, bytes[at] == UInt8(ascii: "\"") else { throw error("expected a string key") }
                let key = try string()
                skipSpace()
                guard at < bytes.count, bytes[at] == UInt8(ascii: ":") else { throw error("expected ':' after a key") }
                at += 1
                object[key] = try value(depth: depth + 1)
                skipSpace()
                guard at < bytes.count else { throw error("unterminated object") }
                if bytes[at] == UInt8(ascii: ",") { at += 1; continue }
                if bytes[at] == UInt8(ascii: "}") { at += 1; return object }
                throw error("expected ',' or '}' in an object")
            }
        case UInt8(ascii: "["):
            at += 1
            var array: [Any] = []
            skipSpace()
            if at < bytes.count, bytes[at] == UInt8(ascii: "]") { at += 1; return array }
            while true {
                array.append(try value(depth: depth + 1))
                skipSpace()
                guard at < bytes.count else { throw error("unterminated array") }
                if bytes[at] == UInt8(ascii: ",") { at += 1; continue }
                if bytes[at] == UInt8(ascii: "]") { at += 1; return array }
                throw error("expected ',' or ']' in an array")
            }
        case UInt8(ascii: "\""): return try string()
        case UInt8(ascii: "t"): return try expect("true", NSNumber(value: true))
        case UInt8(ascii: "f"): return try expect("false", NSNumber(value: false))
        case UInt8(ascii: "n"): return try expect("null", NSNull())
        default: return try number()
        }
    }

    /// A number as RFC 8259 §6 writes it: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`
    /// (no `.5`, `1.`, `01` or `+1`, which `Double(String)` alone would take).
    private mutating func number() throws -> NSNumber {
        let start = at
        func digits() -> Int {
            let from = at
            while at < bytes.count, bytes[at] >= 0x30, bytes[at] <= 0x39 { at += 1 }
            return at - from
        }
        if at < bytes.count, bytes[at] == UInt8(ascii: "-") { at += 1 }
        let leadingZero = at < bytes.count && bytes[at] == UInt8(ascii: "0")
        let intDigits = digits()
        guard intDigits > 0 else { throw error("unexpected character") }
        guard !leadingZero || intDigits == 1 else { throw error("a number with a leading zero") }
        var integral = true
        if at < bytes.count, bytes[at] == UInt8(ascii: ".") {
            at += 1
            integral = false
            guard digits() > 0 else { throw error("no digits after the decimal point") }
        }
        if at < bytes.count, bytes[at] == UInt8(ascii: "e") || bytes[at] == UInt8(ascii: "E") {
            at += 1
            integral = false
            if at < bytes.count, bytes[at] == UInt8(ascii: "+") || bytes[at] == UInt8(ascii: "-") { at += 1 }
            guard digits() > 0 else { throw error("no digits in the exponent") }
        }
        let text = String(decoding: bytes[start..<at], as: UTF8.self)
        if integral, let i = Int64(text) { return NSNumber(value: i) }
        guard let d = Double(text), d.isFinite else { throw error("invalid number \(text)") }
        return NSNumber(value: d)
    }

    private mutating func string() throws -> String {
        at += 1  // opening quote
        // Most strings (names, datatypes) hold no escape: their bytes are the string's UTF-8,
        // validated where they lie. Anything else takes the general path below, from the start.
        let start = at
        while at < bytes.count {
            let c = bytes[at]
            if c == UInt8(ascii: "\"") {
                let s = bytes.withUnsafeBufferPointer { String(validating: UnsafeBufferPointer(rebasing: $0[start..<at]), as: UTF8.self) }
                at += 1
                guard let s else { throw error("a string that is not valid UTF-8") }
                return s
            }
            if c == UInt8(ascii: "\\") || c < 0x20 { break }
            at += 1
        }
        at = start
        var out = [UInt8]()
        while at < bytes.count {
            let c = bytes[at]
            at += 1
            if c == UInt8(ascii: "\"") {
                // JSON text is UTF-8 (RFC 8259 §8.1): bad bytes are an error, not U+FFFD.
                guard let s = String(validating: out, as: UTF8.self) else { throw error("a string that is not valid UTF-8") }
                return s
            }
            if c < 0x20 { throw error("control character in a string") }
            guard c == UInt8(ascii: "\\") else { out.append(c); continue }
            guard at < bytes.count else { break }
            let e = bytes[at]
            at += 1
            switch e {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): out.append(e)
            case UInt8(ascii: "b"): out.append(0x08)
            case UInt8(ascii: "f"): out.append(0x0c)
            case UInt8(ascii: "n"): out.append(0x0a)
            case UInt8(ascii: "r"): out.append(0x0d)
            case UInt8(ascii: "t"): out.append(0x09)
            case UInt8(ascii: "u"):
                var scalar = try hex4()
                if (0xD800..<0xDC00).contains(scalar) {
                    guard bytes.count - at >= 6, bytes[at] == UInt8(ascii: "\\"), bytes[at + 1] == UInt8(ascii: "u") else { throw error("lone surrogate") }
                    at += 2
                    let low = try hex4()
                    guard (0xDC00..<0xE000).contains(low) else { throw error("bad surrogate pair") }
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                }
                guard let u = Unicode.Scalar(scalar) else { throw error("invalid \\u escape") }
                out.append(contentsOf: Array(String(Character(u)).utf8))
            default: throw error("invalid escape")
            }
        }
        throw error("unterminated string")
    }

    private mutating func hex4() throws -> UInt32 {
        // Four hex digits exactly (UInt32(_:radix:) alone would take a sign: "+0041").
        guard bytes.count - at >= 4, bytes[at..<at + 4].allSatisfy({ Character(Unicode.Scalar($0)).isHexDigit }),
              let v = UInt32(String(decoding: bytes[at..<at + 4], as: UTF8.self), radix: 16) else {
            throw error("invalid \\u escape")
        }
        at += 4
        return v
    }
}
