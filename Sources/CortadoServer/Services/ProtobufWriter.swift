/// Appends protobuf wire-format fields to a byte array, for the one response that is built on
/// every prediction call (ModelInferResponse): writing the few fields it has straight into
/// bytes costs a fraction of building the generated message and serializing it (no
/// per-field allocations, no size-visitor pass). Everything else goes through SwiftProtobuf.
///
/// Fields are written in the order the caller chooses; protobuf readers accept any order and
/// keep repeated fields in the order they appear.
struct ProtobufWriter {
    var bytes: [UInt8] = []

    init(capacity: Int = 256) { bytes.reserveCapacity(capacity) }

    @inline(__always) mutating func varint(_ value: UInt64) {
        var n = value
        while n >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: n) | 0x80)
            n >>= 7
        }
        bytes.append(UInt8(n))
    }

    /// Bytes `value` takes as a varint.
    @inline(__always) static func varintSize(_ value: UInt64) -> Int {
        var n = value, size = 1
        while n >= 0x80 { n >>= 7; size += 1 }
        return size
    }

    /// The key of a length-delimited field (wire type 2) and the length.
    @inline(__always) mutating func lengthDelimited(_ field: Int, length: Int) {
        varint(UInt64(field << 3 | 2))
        varint(UInt64(length))
    }

    /// A string field; proto3 leaves empty strings out.
    mutating func string(_ field: Int, _ value: String) {
        guard !value.isEmpty else { return }
        var value = value
        value.withUTF8 { utf8 in
            lengthDelimited(field, length: utf8.count)
            bytes.append(contentsOf: utf8)
        }
    }

    /// A bytes field, written even when empty (for repeated fields, where an entry counts).
    mutating func bytesField(_ field: Int, _ value: UnsafeRawBufferPointer) {
        lengthDelimited(field, length: value.count)
        if value.count > 0 { bytes.append(contentsOf: value.bindMemory(to: UInt8.self)) }
    }

    /// A packed repeated int64 field; left out when empty.
    mutating func packedInt64(_ field: Int, _ values: [Int64]) {
        guard !values.isEmpty else { return }
        lengthDelimited(field, length: values.reduce(0) { $0 + Self.varintSize(UInt64(bitPattern: $1)) })
        for v in values { varint(UInt64(bitPattern: v)) }
    }

    /// Bytes a string field takes (0 when empty: left out).
    static func stringFieldSize(_ field: Int, _ value: String) -> Int {
        let n = value.utf8.count
        return n == 0 ? 0 : varintSize(UInt64(field << 3 | 2)) + varintSize(UInt64(n)) + n
    }

    /// Bytes a packed int64 field takes (0 when empty: left out).
    static func packedInt64FieldSize(_ field: Int, _ values: [Int64]) -> Int {
        guard !values.isEmpty else { return 0 }
        let n = values.reduce(0) { $0 + varintSize(UInt64(bitPattern: $1)) }
        return varintSize(UInt64(field << 3 | 2)) + varintSize(UInt64(n)) + n
    }
}
