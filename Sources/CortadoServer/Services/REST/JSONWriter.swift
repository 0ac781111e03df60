import Foundation

/// Writes JSON text as UTF-8 bytes, for the REST answers: tensors of thousands of numbers
/// are written straight into one array, not built as `[String: Any]` and serialized.
/// The caller writes the punctuation between members (`comma()`), the writer the values.
struct JSONWriter {
    var bytes: [UInt8] = []

    init(capacity: Int = 256) { bytes.reserveCapacity(capacity) }

    mutating func raw(_ text: StaticString) {
        text.withUTF8Buffer { bytes.append(contentsOf: $0) }
    }

    mutating func byte(_ b: UInt8) { bytes.append(b) }

    /// `"key":`
    mutating func key(_ name: String) {
        string(name)
        bytes.append(UInt8(ascii: ":"))
    }

    mutating func string(_ s: some StringProtocol) {
        bytes.append(UInt8(ascii: "\""))
        for b in s.utf8 {
            switch b {
            case UInt8(ascii: "\""): raw("\\\"")
            case UInt8(ascii: "\\"): raw("\\\\")
            case 0x0a: raw("\\n")
            case 0x0d: raw("\\r")
            case 0x09: raw("\\t")
            case 0..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"), hex[Int(b >> 4)], hex[Int(b & 15)]])
            default: bytes.append(b)
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }

    mutating func int(_ v: some BinaryInteger) { bytes.append(contentsOf: String(v).utf8) }

    /// The shortest text that reads back as the same value (Swift's description); JSON has
    /// no NaN or infinities, so those are written as the tokens Python's and most JSON
    /// readers accept (`NaN`, `Infinity`, `-Infinity`).
    mutating func double(_ v: Double) {
        if v.isNaN { raw("NaN") } else if v.isInfinite { v < 0 ? raw("-Infinity") : raw("Infinity") } else { bytes.append(contentsOf: v.description.utf8) }
    }

    /// A Float written with its own shortest text, so that a reader converting it back to
    /// float32 gets the same bits.
    mutating func float(_ v: Float) {
        if v.isNaN { raw("NaN") } else if v.isInfinite { v < 0 ? raw("-Infinity") : raw("Infinity") } else { bytes.append(contentsOf: v.description.utf8) }
    }

    mutating func bool(_ v: Bool) { v ? raw("true") : raw("false") }

    mutating func comma() { bytes.append(UInt8(ascii: ",")) }
}
