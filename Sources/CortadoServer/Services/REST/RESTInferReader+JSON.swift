import CortadoCore
import Foundation

/// The JSON grammar (RFC 8259) the reader steps through: punctuation, skipped values,
/// strings and numbers.
extension RESTInferReader {
    /// The keys the request's objects have; anything else is `.other`.
    enum Key { case id, name, datatype, shape, parameters, data, inputs, outputs, other }

    /// Reads `"key":` (the value follows, whitespace skipped).
    mutating func key() throws -> Key {
        skipSpace()
        guard at < p.count, p[at] == UInt8(ascii: "\"") else { throw syntax("expected a string key") }
        var key = Key.other
        let start = at + 1
        var end = start
        while end < p.count, p[end] != UInt8(ascii: "\""), p[end] != UInt8(ascii: "\\"), p[end] >= 0x20 { end += 1 }
        if end < p.count, p[end] == UInt8(ascii: "\"") {
            key = Self.key(UnsafeBufferPointer(rebasing: p[start..<end]))
            // Known keys are ASCII; anything else still has to be valid UTF-8.
            if key == .other { _ = try string() } else { at = end + 1 }
        } else {
            let s = try string()
            key = Array(s.utf8).withUnsafeBufferPointer { Self.key($0) }
        }
        try colon()
        return key
    }

    static func key(_ b: UnsafeBufferPointer<UInt8>) -> Key {
        func equals(_ s: StaticString) -> Bool {
            s.utf8CodeUnitCount == b.count && memcmp(s.utf8Start, b.baseAddress!, b.count) == 0
        }
        switch b.count {
        case 2: return equals("id") ? .id : .other
        case 4: return equals("name") ? .name : equals("data") ? .data : .other
        case 5: return equals("shape") ? .shape : .other
        case 6: return equals("inputs") ? .inputs : .other
        case 7: return equals("outputs") ? .outputs : .other
        case 8: return equals("datatype") ? .datatype : .other
        case 10: return equals("parameters") ? .parameters : .other
        default: return .other
        }
    }

    mutating func colon() throws {
        skipSpace()
        guard at < p.count, p[at] == UInt8(ascii: ":") else { throw syntax("expected ':' after a key") }
        at += 1
        skipSpace()
    }

    /// Steps into an object or array at `at`; false when it is empty (and already closed).
    mutating func open(_ bracket: UInt8) throws -> Bool {
        at += 1
        skipSpace()
        let close = bracket == UInt8(ascii: "{") ? UInt8(ascii: "}") : UInt8(ascii: "]")
        if at < p.count, p[at] == close {
            at += 1
            return false
        }
        return true
    }

    /// After a member: true at a comma (another member follows), false at the closing bracket.
    @inline(__always)
    mutating func next(_ close: UInt8) throws -> Bool {
        skipSpace()
        guard at < p.count else { throw syntax(close == UInt8(ascii: "}") ? "unterminated object" : "unterminated array") }
        if p[at] == UInt8(ascii: ",") {
            at += 1
            return true
        }
        if p[at] == close {
            at += 1
            return false
        }
        throw syntax(close == UInt8(ascii: "}") ? "expected ',' or '}' in an object" : "expected ',' or ']' in an array")
    }

    @inline(__always)
    mutating func skipSpace() {
        while at < p.count {
            switch p[at] {
            case 0x20, 0x09, 0x0a, 0x0d: at += 1
            default: return
            }
        }
    }

    /// Steps over one JSON value, checking it as the grammar says.
    mutating func skipValue(depth: Int) throws {
        guard depth < Self.maxDepth else { throw syntax("nesting is too deep") }
        skipSpace()
        guard at < p.count else { throw syntax("unexpected end of input") }
        switch p[at] {
        case UInt8(ascii: "{"):
            guard try open(UInt8(ascii: "{")) else { return }
            repeat {
                skipSpace()
                guard at < p.count, p[at] == UInt8(ascii: "\"") else { throw syntax("expected a string key") }
                _ = try string()
                try colon()
                try skipValue(depth: depth + 1)
            } while try next(UInt8(ascii: "}"))
        case UInt8(ascii: "["):
            guard try open(UInt8(ascii: "[")) else { return }
            repeat { try skipValue(depth: depth + 1) } while try next(UInt8(ascii: "]"))
        case UInt8(ascii: "\""): _ = try string()
        case UInt8(ascii: "t"): try literal("true")
        case UInt8(ascii: "f"): try literal("false")
        case UInt8(ascii: "n"): try literal("null")
        default:
            let (range, integral) = try scanNumber()
            if !integral || range.count > 18 { _ = try double(range) }  // refuses what overflows a Double
        }
    }

    mutating func literal(_ word: StaticString) throws {
        let n = word.utf8CodeUnitCount
        guard p.count - at >= n, memcmp(word.utf8Start, p.baseAddress! + at, n) == 0 else { throw syntax("unknown literal") }
        at += n
    }

    mutating func boolean() throws -> Bool {
        if p[at] == UInt8(ascii: "t") {
            try literal("true")
            return true
        }
        try literal("false")
        return false
    }

    func syntax(_ message: String) -> ServeStatus {
        ServeStatus(.invalidArgument, "\(Self.syntaxPrefix)malformed JSON at byte \(at + 1): \(message)")
    }

    static let syntaxPrefix = "the request body is not valid JSON: "

    func text(_ range: Range<Int>) -> String {
        let r = range.clamped(to: 0..<p.count)
        let shown = r.count > 40 ? r.lowerBound..<r.lowerBound + 40 : r
        return String(decoding: UnsafeBufferPointer(rebasing: p[shown]), as: UTF8.self) + (shown.count < r.count ? "…" : "")
    }

    // MARK: strings

    /// A string at `at` (its opening quote): escapes decoded, UTF-8 checked.
    mutating func string() throws -> String {
        at += 1
        do {
            return try MLJSONString.read(p, at: &at)
        } catch {
            throw syntax(error.message)
        }
    }

    // MARK: numbers

    @inline(__always)
    func isNumberStart(_ c: UInt8) -> Bool { c == UInt8(ascii: "-") || (c >= 0x30 && c <= 0x39) }

    /// A number as RFC 8259 §6 writes it: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`;
    /// its text, and whether it is written as an integer (no fraction, no exponent).
    mutating func scanNumber() throws -> (Range<Int>, Bool) {
        let start = at
        @inline(__always) func digits() -> Int {
            let from = at
            while at < p.count, p[at] >= 0x30, p[at] <= 0x39 { at += 1 }
            return at - from
        }
        if at < p.count, p[at] == UInt8(ascii: "-") { at += 1 }
        let leadingZero = at < p.count && p[at] == UInt8(ascii: "0")
        let intDigits = digits()
        guard intDigits > 0 else { throw syntax("unexpected character") }
        guard !leadingZero || intDigits == 1 else { throw syntax("a number with a leading zero") }
        var integral = true
        if at < p.count, p[at] == UInt8(ascii: ".") {
            at += 1
            integral = false
            guard digits() > 0 else { throw syntax("no digits after the decimal point") }
        }
        if at < p.count, p[at] == UInt8(ascii: "e") || p[at] == UInt8(ascii: "E") {
            at += 1
            integral = false
            if at < p.count, p[at] == UInt8(ascii: "+") || p[at] == UInt8(ascii: "-") { at += 1 }
            guard digits() > 0 else { throw syntax("no digits in the exponent") }
        }
        return (start..<at, integral)
    }

    /// The magnitude of an integer written without sign, fraction or exponent, when it fits 64 bits.
    func unsignedMagnitude(_ range: Range<Int>) -> UInt64? {
        var v: UInt64 = 0
        var i = range.lowerBound
        if p[i] == UInt8(ascii: "-") { i += 1 }
        while i < range.upperBound {
            let (m, o1) = v.multipliedReportingOverflow(by: 10)
            let (s, o2) = m.addingReportingOverflow(UInt64(p[i] &- 0x30))
            if o1 || o2 { return nil }
            v = s
            i += 1
        }
        return v
    }

    /// The number as an Int64 when it is one exactly: written as an integer in range, or
    /// as a fraction or exponent whose value is a whole number in range (`1.0`, `2e3`).
    func integer(_ range: Range<Int>, integral: Bool) throws -> Int64? {
        if integral {
            guard let m = unsignedMagnitude(range) else { return nil }
            if p[range.lowerBound] == UInt8(ascii: "-") {
                return m <= UInt64(Int64.max) + 1 ? Int64(bitPattern: 0 &- m) : nil
            }
            return m <= UInt64(Int64.max) ? Int64(m) : nil
        }
        return Int64(exactly: try double(range))
    }

    static let powersOf10: [Double] = (0...22).map { k in (0..<k).reduce(1.0) { acc, _ in acc * 10 } }

    /// The number's value correctly rounded to a Double; a number past Double's range is
    /// refused. Most numbers take the exact fast path (at most 19 significant digits that
    /// fit 53 bits, times a power of ten that is itself exact); the rest go to strtod.
    func double(_ range: Range<Int>) throws -> Double {
        var i = range.lowerBound
        let negative = p[i] == UInt8(ascii: "-")
        if negative { i += 1 }
        var mantissa: UInt64 = 0
        var significant = 0
        var exponent = 0
        var exact = true
        while i < range.upperBound, p[i] >= 0x30, p[i] <= 0x39 {
            let d = UInt64(p[i] &- 0x30)
            if mantissa != 0 || d != 0 {
                if significant < 19 { mantissa = mantissa * 10 + d; significant += 1 } else { exact = false }
            }
            if !exact { exponent += 1 }
            i += 1
        }
        if i < range.upperBound, p[i] == UInt8(ascii: ".") {
            i += 1
            while i < range.upperBound, p[i] >= 0x30, p[i] <= 0x39 {
                let d = UInt64(p[i] &- 0x30)
                if mantissa != 0 || d != 0 {
                    if significant < 19 { mantissa = mantissa * 10 + d; significant += 1; exponent -= 1 } else { exact = false }
                } else {
                    exponent -= 1
                }
                i += 1
            }
        }
        if i < range.upperBound {  // e or E
            i += 1
            var expNegative = false
            if p[i] == UInt8(ascii: "+") || p[i] == UInt8(ascii: "-") {
                expNegative = p[i] == UInt8(ascii: "-")
                i += 1
            }
            var e = 0
            while i < range.upperBound {
                if e < 100_000 { e = e * 10 + Int(p[i] &- 0x30) }
                i += 1
            }
            exponent += expNegative ? -e : e
        }
        if exact {
            if mantissa == 0 { return negative ? -0.0 : 0.0 }
            if mantissa <= 1 << 53, exponent >= -22, exponent <= 22 {
                let m = Double(mantissa)
                let v = exponent >= 0 ? m * Self.powersOf10[exponent] : m / Self.powersOf10[-exponent]
                return negative ? -v : v
            }
        }
        let v = withUnsafeTemporaryAllocation(of: CChar.self, capacity: range.count + 1) { buffer -> Double in
            for k in 0..<range.count { buffer[k] = CChar(bitPattern: p[range.lowerBound + k]) }
            buffer[range.count] = 0
            return strtod(buffer.baseAddress!, nil)
        }
        guard v.isFinite else { throw syntax("invalid number \(text(range))") }
        return v
    }
}
