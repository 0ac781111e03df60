import CortadoCore
import Foundation

/// Tensor data: a `data` value written as little-endian bytes of its datatype.
extension RESTInferReader {
    /// Raised inside `data` when an input holds more elements than its shape: the rest is
    /// then only counted, so the error can say how many there were.
    struct Overflow: Error {}

    enum ElementKind: Equatable {
        case fp64, fp32, fp16, bool, bytes
        case int(bits: Int, signed: Bool)

        init?(_ datatype: String) {
            switch datatype {
            case "FP32": self = .fp32
            case "FP64": self = .fp64
            case "INT64": self = .int(bits: 64, signed: true)
            case "INT32": self = .int(bits: 32, signed: true)
            case "FP16": self = .fp16
            case "BOOL": self = .bool
            case "BYTES": self = .bytes
            case "INT16": self = .int(bits: 16, signed: true)
            case "INT8": self = .int(bits: 8, signed: true)
            case "UINT64": self = .int(bits: 64, signed: false)
            case "UINT32": self = .int(bits: 32, signed: false)
            case "UINT16": self = .int(bits: 16, signed: false)
            case "UINT8": self = .int(bits: 8, signed: false)
            default: return nil
            }
        }

        var size: Int {
            switch self {
            case .fp64: return 8
            case .fp32: return 4
            case .fp16: return 2
            case .bool: return 1
            case .bytes: return 8
            case .int(let bits, _): return bits / 8
            }
        }
    }

    /// Writes a `data` value (a number, string or boolean, or arrays of them nested to any
    /// depth, read flat in order) behind the storage; returns how many elements it held.
    mutating func data(_ kind: ElementKind, depth: Int, limit: Int?, name: String) throws -> Int {
        if let limit, limit >= 0 { view.storage.reserveCapacity(view.storage.count + min(limit, p.count) * kind.size) }
        var count = 0
        try elements(kind, depth: depth, limit: limit ?? Int.max, name: name, count: &count)
        return count
    }

    mutating func elements(_ kind: ElementKind, depth: Int, limit: Int, name: String, count: inout Int) throws {
        guard depth < Self.maxDepth else { throw syntax("nesting is too deep") }
        skipSpace()
        guard at < p.count else { throw syntax("unexpected end of input") }
        guard p[at] == UInt8(ascii: "[") else {
            guard count < limit else { throw Overflow() }
            try element(kind, depth: depth, name: name)
            count += 1
            return
        }
        guard try open(UInt8(ascii: "[")) else { return }
        guard depth + 1 < Self.maxDepth else { throw syntax("nesting is too deep") }
        repeat {
            skipSpace()
            if at < p.count, p[at] != UInt8(ascii: "[") {
                // The common case, a number in a flat list, without a nested call.
                guard count < limit else { throw Overflow() }
                try element(kind, depth: depth + 1, name: name)
                count += 1
            } else {
                try elements(kind, depth: depth + 1, limit: limit, name: name, count: &count)
            }
        } while try next(UInt8(ascii: "]"))
    }

    mutating func element(_ kind: ElementKind, depth: Int, name: String) throws {
        guard at < p.count else { throw syntax("unexpected end of input") }
        let c = p[at]
        if kind == .bytes {
            guard c == UInt8(ascii: "\"") else {
                let start = at
                try skipValue(depth: depth)
                throw Self.bad("input '\(name)': BYTES data must be strings, got \(text(start..<at))")
            }
            TensorBytes.append(Array(try string().utf8), to: &view.storage)
            return
        }
        if c == UInt8(ascii: "t") || c == UInt8(ascii: "f") {
            // true and false are 1 and 0 in any numeric tensor (as NumPy and the reading
            // this one replaced take them).
            let one = try boolean()
            switch kind {
            case .fp64: put((one ? 1.0 : 0.0).bitPattern.littleEndian)
            case .fp32: put(Float(one ? 1 : 0).bitPattern.littleEndian)
            case .fp16: put(Float16(one ? 1 : 0).bitPattern.littleEndian)
            case .int(let bits, _): putInteger(one ? 1 : 0, bits: bits)
            case .bool, .bytes: put(UInt8(one ? 1 : 0))
            }
            return
        }
        guard isNumberStart(c) else {
            let start = at
            try skipValue(depth: depth)
            throw Self.bad("input '\(name)': \(datatypeName(kind)) data must be numbers, got \(text(start..<at))")
        }
        let (range, integral) = try scanNumber()
        switch kind {
        case .fp64: put(try double(range).bitPattern.littleEndian)
        case .fp32: put(Float(try double(range)).bitPattern.littleEndian)
        case .fp16: put(Float16(Float(try double(range))).bitPattern.littleEndian)
        case .bool: put(UInt8(try truth(range) ? 1 : 0))
        case .bytes: break
        case .int(let bits, let signed):
            try putInteger(range, integral: integral, bits: bits, signed: signed, name: name)
        }
    }

    mutating func putInteger(_ range: Range<Int>, integral: Bool, bits: Int, signed: Bool, name: String) throws {
        let datatype = datatypeName(.int(bits: bits, signed: signed))
        if !signed, bits == 64, integral, p[range.lowerBound] != UInt8(ascii: "-") {
            // UINT64 reaches past Int64.
            guard let u = unsignedMagnitude(range) else {
                throw Self.bad("input '\(name)': \(text(range)) is out of range for \(datatype)")
            }
            put(u.littleEndian)
            return
        }
        if !signed, bits == 64, !integral, let u = UInt64(exactly: try double(range)) {
            put(u.littleEndian)
            return
        }
        guard let i = try integer(range, integral: integral) else {
            if integral || (try? double(range)).map({ $0 == $0.rounded() }) == true {
                throw Self.bad("input '\(name)': \(text(range)) is out of range for \(datatype)")
            }
            throw Self.bad("input '\(name)': \(datatype) data must be integers, got \(text(range))")
        }
        let fits: Bool
        if signed {
            fits = bits == 64 || (i >= -(Int64(1) << (bits - 1)) && i < Int64(1) << (bits - 1))
        } else {
            fits = i >= 0 && (bits == 64 || i < Int64(1) << bits)
        }
        guard fits else { throw Self.bad("input '\(name)': \(text(range)) is out of range for \(datatype)") }
        putInteger(i, bits: bits)
    }

    mutating func putInteger(_ i: Int64, bits: Int) {
        switch bits {
        case 64: put(i.littleEndian)
        case 32: put(UInt32(truncatingIfNeeded: i).littleEndian)
        case 16: put(UInt16(truncatingIfNeeded: i).littleEndian)
        default: put(UInt8(truncatingIfNeeded: i))
        }
    }

    func datatypeName(_ kind: ElementKind) -> String {
        switch kind {
        case .fp64: return "FP64"
        case .fp32: return "FP32"
        case .fp16: return "FP16"
        case .bool: return "BOOL"
        case .bytes: return "BYTES"
        case .int(let bits, let signed): return "\(signed ? "" : "U")INT\(bits)"
        }
    }

    @inline(__always)
    mutating func put<T: FixedWidthInteger>(_ v: T) {
        withUnsafeBytes(of: v) { view.storage.append(contentsOf: $0) }
    }

    /// Counts a `data` value's elements as `data` would (arrays read flat; any other value is
    /// one element), checking only that it is JSON.
    mutating func count(depth: Int) throws -> Int {
        var n = 0
        try countElements(depth: depth, into: &n)
        return n
    }

    mutating func countElements(depth: Int, into n: inout Int) throws {
        guard depth < Self.maxDepth else { throw syntax("nesting is too deep") }
        skipSpace()
        guard at < p.count else { throw syntax("unexpected end of input") }
        guard p[at] == UInt8(ascii: "[") else {
            try skipValue(depth: depth)
            n += 1
            return
        }
        guard try open(UInt8(ascii: "[")) else { return }
        repeat { try countElements(depth: depth + 1, into: &n) } while try next(UInt8(ascii: "]"))
    }

}
