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
        var position = at
        do {
            let s = try bytes.withUnsafeBufferPointer { p throws(MLJSONString.Problem) in try MLJSONString.read(p, at: &position) }
            at = position
            return s
        } catch {
            at = position
            throw self.error(error.message)
        }
    }
}
