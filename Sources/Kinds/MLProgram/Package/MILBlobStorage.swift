import CortadoCore
import Foundation

/// Reads tensors out of a MIL weight file (`weights/weight.bin`).
///
/// Layout (little-endian): a 64-byte storage header (`count: u32`, `version: u32` = 2, then
/// reserved words), and for each blob a 64-byte metadata record at the offset a
/// `BlobFileValue` names: `sentinel: u32` = 0xDEADBEEF, `dtype: u32`, `size: u64` (bytes),
/// `offset: u64` (of the data, from the file's start), `padding_size_in_bits: u64` (unused
/// bits of sub-byte types), then reserved words.
struct MILBlobStorage {
    static let sentinel: UInt32 = 0xDEAD_BEEF
    static let headerSize = 64

    /// The blob storage's data type codes.
    static func dataType(code: UInt32) -> MILDataType? {
        switch code {
        case 1: return .fp16
        case 2: return .fp32
        case 3: return .uint8
        case 4: return .int8
        case 5: return .bf16
        case 6: return .int16
        case 7: return .uint16
        case 8: return .int4
        case 9: return .uint1
        case 10: return .uint2
        case 11: return .uint4
        case 12: return .uint3
        case 13: return .uint6
        case 14: return .int32
        case 15: return .uint32
        case 16: return .fp8e4m3
        case 17: return .fp8e5m2
        default: return nil
        }
    }

    /// Bits per element of a type stored in a blob.
    static func bits(_ t: MILDataType) -> Int {
        switch t {
        case .uint1: return 1
        case .uint2: return 2
        case .uint3: return 3
        case .int4, .uint4: return 4
        case .uint6: return 6
        case .int8, .uint8, .fp8e4m3, .fp8e5m2, .bool: return 8
        case .fp16, .bf16, .int16, .uint16: return 16
        case .fp32, .int32, .uint32: return 32
        case .fp64, .int64, .uint64: return 64
        case .string: return 0
        }
    }

    /// The tensor a blob reference stands for, checked against the declared type.
    static func tensor(file: String, offset: UInt64, type: MILType, resources: MLModelResources?, model: String, op: String) throws -> MILTensor {
        func bad(_ why: String) -> MILError { .invalid(op, "weight file \(file), blob at offset \(offset): \(why)") }
        guard let resources else { throw bad("the model has no weight files (load the .mlpackage folder, not its model.mlmodel)") }
        guard case .tensor(let declared, let dims?) = type, dims.allSatisfy({ $0 != nil }) else {
            throw bad("a blob value needs a tensor type with fixed dimensions, not \(type)")
        }
        let shape = dims.map { $0! }
        let bytes: UnsafeRawBufferPointer
        do { bytes = try resources.file(file, model: model).bytes } catch let e as MLModelError {
            throw MILError.invalid(op, e.message)
        }
        guard bytes.count >= headerSize else { throw bad("the file is \(bytes.count) bytes, shorter than its header") }
        let version: UInt32 = load(bytes, 4)
        guard version == 2 else { throw bad("storage version \(version); only version 2 is read") }
        let at = Int(clamping: offset)
        guard at <= bytes.count - 64 else { throw bad("the metadata lies past the end of the \(bytes.count)-byte file") }
        let sentinel: UInt32 = load(bytes, at)
        guard sentinel == Self.sentinel else {
            throw bad(String(format: "wrong sentinel 0x%08X (expected 0xDEADBEEF): the offset does not point at a blob", sentinel))
        }
        let code: UInt32 = load(bytes, at + 4)
        guard let stored = dataType(code: code) else { throw bad("unknown blob data type \(code)") }
        let size = Int(clamping: load(bytes, at + 8) as UInt64)
        let dataOffset = Int(clamping: load(bytes, at + 16) as UInt64)
        guard dataOffset <= bytes.count, size <= bytes.count - dataOffset else {
            throw bad("its \(size) bytes at offset \(dataOffset) run past the end of the \(bytes.count)-byte file")
        }
        guard stored == declared || (bits(stored) == bits(declared) && stored.isInteger == declared.isInteger && stored.isFloat == declared.isFloat) else {
            throw bad("the blob holds \(stored.rawValue), the program declares \(declared.rawValue)")
        }
        let count = shape.reduce(1, *)
        let needed = (count * bits(stored) + 7) / 8
        guard size >= needed else { throw bad("\(size) bytes hold fewer than the \(count) \(stored.rawValue) values of shape \(shape)") }
        let data = UnsafeRawBufferPointer(rebasing: bytes[dataOffset..<(dataOffset + size)])
        return decode(data, type: declared, count: count, shape: shape)
    }

    /// Elements from little-endian bytes (sub-byte types packed from the low bits up).
    static func decode(_ data: UnsafeRawBufferPointer, type: MILDataType, count: Int, shape: [Int]) -> MILTensor {
        switch type {
        case .fp32:
            var out = [Float](repeating: 0, count: count)
            out.withUnsafeMutableBytes { $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: data[0..<(count * 4)])) }
            return MILTensor(floats: out, shape: shape, dataType: .fp32)
        case .fp16:
            var out = [Float](repeating: 0, count: count)
            var half = [Float16](repeating: 0, count: count)
            half.withUnsafeMutableBytes { $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: data[0..<(count * 2)])) }
            for i in 0..<count { out[i] = Float(half[i]) }
            return MILTensor(floats: out, shape: shape, dataType: .fp16)
        case .bf16:
            let out = (0..<count).map { i -> Float in
                Float(bitPattern: UInt32(load(data, 2 * i) as UInt16) << 16)
            }
            return MILTensor(floats: out, shape: shape, dataType: .bf16)
        case .fp8e4m3, .fp8e5m2:
            let out = (0..<count).map { i in fp8(data[i], e4m3: type == .fp8e4m3) }
            return MILTensor(floats: out, shape: shape, dataType: type)
        case .int8: return MILTensor(ints: (0..<count).map { Int(Int8(bitPattern: data[$0])) }, shape: shape, dataType: type)
        case .uint8: return MILTensor(ints: (0..<count).map { Int(data[$0]) }, shape: shape, dataType: type)
        case .int16: return MILTensor(ints: (0..<count).map { Int(load(data, 2 * $0) as Int16) }, shape: shape, dataType: type)
        case .uint16: return MILTensor(ints: (0..<count).map { Int(load(data, 2 * $0) as UInt16) }, shape: shape, dataType: type)
        case .int32: return MILTensor(ints: (0..<count).map { Int(load(data, 4 * $0) as Int32) }, shape: shape, dataType: type)
        case .uint32: return MILTensor(ints: (0..<count).map { Int(load(data, 4 * $0) as UInt32) }, shape: shape, dataType: type)
        default:
            let b = bits(type)
            let mask = (1 << b) - 1
            let out = (0..<count).map { i -> Int in
                let bit = i * b
                var word = Int(data[bit / 8])
                if bit / 8 + 1 < data.count { word |= Int(data[bit / 8 + 1]) << 8 }
                var v = (word >> (bit % 8)) & mask
                if type == .int4 && v >= 8 { v -= 16 }
                return v
            }
            return MILTensor(ints: out, shape: shape, dataType: type)
        }
    }

    static func fp8(_ byte: UInt8, e4m3: Bool) -> Float {
        let sign: Float = byte & 0x80 != 0 ? -1 : 1
        let expBits = e4m3 ? 4 : 5, manBits = e4m3 ? 3 : 2
        let bias = e4m3 ? 7 : 15
        let e = Int(byte >> UInt8(manBits)) & ((1 << expBits) - 1)
        let m = Int(byte) & ((1 << manBits) - 1)
        if e4m3 && e == 15 && m == 7 { return .nan }
        if !e4m3 && e == 31 { return m == 0 ? sign * .infinity : .nan }
        if e == 0 { return sign * Float(m) / Float(1 << manBits) * Float(pow(2.0, Double(1 - bias))) }
        return sign * (1 + Float(m) / Float(1 << manBits)) * Float(pow(2.0, Double(e - bias)))
    }

    @inline(__always) static func load<T: FixedWidthInteger>(_ bytes: UnsafeRawBufferPointer, _ at: Int) -> T {
        T(littleEndian: bytes.loadUnaligned(fromByteOffset: at, as: T.self))
    }
}
