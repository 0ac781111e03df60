import CortadoSpec

/// An element type of the MIL type system (`MILSpec.DataType`), as the program declares it.
public enum MILDataType: String, Sendable, CaseIterable {
    case bool, string
    case fp16, fp32, fp64, bf16
    case int4, int8, int16, int32, int64
    case uint1, uint2, uint3, uint4, uint6, uint8, uint16, uint32, uint64
    case fp8e4m3, fp8e5m2

    init?(_ proto: CoreML_Specification_MILSpec_DataType) {
        switch proto {
        case .bool: self = .bool
        case .string: self = .string
        case .float16: self = .fp16
        case .float32: self = .fp32
        case .float64: self = .fp64
        case .bfloat16: self = .bf16
        case .int4: self = .int4
        case .int8: self = .int8
        case .int16: self = .int16
        case .int32: self = .int32
        case .int64: self = .int64
        case .uint1: self = .uint1
        case .uint2: self = .uint2
        case .uint3: self = .uint3
        case .uint4: self = .uint4
        case .uint6: self = .uint6
        case .uint8: self = .uint8
        case .uint16: self = .uint16
        case .uint32: self = .uint32
        case .uint64: self = .uint64
        case .float8E4M3Fn: self = .fp8e4m3
        case .float8E5M2: self = .fp8e5m2
        default: return nil
        }
    }

    /// The names the `cast` op and `dtype` arguments use ("fp16", "int32", …).
    init?(castName: String) {
        switch castName {
        case "fp16": self = .fp16
        case "fp32": self = .fp32
        case "fp64": self = .fp64
        case "bool": self = .bool
        case "int8": self = .int8
        case "uint8": self = .uint8
        case "int16": self = .int16
        case "uint16": self = .uint16
        case "int32": self = .int32
        case "int64": self = .int64
        case "uint32": self = .uint32
        case "string": self = .string
        default: return nil
        }
    }

    public var isFloat: Bool { [.fp16, .fp32, .fp64, .bf16, .fp8e4m3, .fp8e5m2].contains(self) }
    public var isInteger: Bool { !isFloat && self != .bool && self != .string }

    /// Rounds a value computed in Float to what this type stores.
    @inline(__always) func round(_ x: Float) -> Float {
        switch self {
        case .fp16: return Float(Float16(x))
        case .bf16: return Float(bitPattern: (x.bitPattern &+ 0x7FFF &+ ((x.bitPattern >> 16) & 1)) & 0xFFFF_0000)
        default: return x
        }
    }

    /// Wraps an integer into this type's range, as a C cast would.
    @inline(__always) func wrap(_ v: Int) -> Int {
        switch self {
        case .int8: return Int(Int8(truncatingIfNeeded: v))
        case .uint8: return Int(UInt8(truncatingIfNeeded: v))
        case .int16: return Int(Int16(truncatingIfNeeded: v))
        case .uint16: return Int(UInt16(truncatingIfNeeded: v))
        case .int32: return Int(Int32(truncatingIfNeeded: v))
        case .uint32: return Int(UInt32(truncatingIfNeeded: v))
        default: return v
        }
    }
}

/// A tensor's elements. Floating types compute in Float (fp16 programs store fp16-rounded
/// values: "fp32 compute, fp16 storage"), integer types in Int, plus bools and strings.
public enum MILStorage: Sendable {
    case float([Float])
    case int([Int])
    case bool([Bool])
    case string([String])

    public var count: Int {
        switch self {
        case .float(let a): return a.count
        case .int(let a): return a.count
        case .bool(let a): return a.count
        case .string(let a): return a.count
        }
    }
}

/// A tensor value at run time (a scalar is a tensor of rank 0).
public struct MILTensor: Sendable {
    public var dataType: MILDataType
    public var shape: [Int]
    public var storage: MILStorage

    public init(_ dataType: MILDataType, shape: [Int], storage: MILStorage) {
        self.dataType = dataType; self.shape = shape; self.storage = storage
    }
    public init(floats: [Float], shape: [Int], dataType: MILDataType = .fp32) {
        self.init(dataType, shape: shape, storage: .float(floats))
    }
    public init(ints: [Int], shape: [Int], dataType: MILDataType = .int32) {
        self.init(dataType, shape: shape, storage: .int(ints))
    }
    public init(bools: [Bool], shape: [Int]) {
        self.init(.bool, shape: shape, storage: .bool(bools))
    }
    public static func scalar(_ v: Float, _ t: MILDataType = .fp32) -> MILTensor { MILTensor(floats: [v], shape: [], dataType: t) }
    public static func scalar(_ v: Int, _ t: MILDataType = .int32) -> MILTensor { MILTensor(ints: [v], shape: [], dataType: t) }

    public var rank: Int { shape.count }
    public var count: Int { storage.count }

    /// Elements as Float (integers and bools converted).
    public var floats: [Float] {
        switch storage {
        case .float(let a): return a
        case .int(let a): return a.map { Float($0) }
        case .bool(let a): return a.map { $0 ? 1 : 0 }
        case .string: return []
        }
    }
    /// Elements as Int (floats truncated toward zero).
    public var ints: [Int] {
        switch storage {
        case .int(let a): return a
        case .float(let a): return a.map { $0.isFinite ? Int($0) : 0 }
        case .bool(let a): return a.map { $0 ? 1 : 0 }
        case .string: return []
        }
    }
    public var bools: [Bool] {
        switch storage {
        case .bool(let a): return a
        case .int(let a): return a.map { $0 != 0 }
        case .float(let a): return a.map { $0 != 0 }
        case .string: return []
        }
    }
    public var strings: [String] {
        if case .string(let a) = storage { return a }
        return []
    }

    /// Float elements rounded to what this tensor's (fp16 or bf16) type stores, in place.
    public mutating func roundToStoredPrecision() {
        guard case .float(var f) = storage, dataType == .fp16 || dataType == .bf16 else { return }
        storage = .float([])  // f is now the only reference: rounded without a copy
        for i in f.indices { f[i] = dataType.round(f[i]) }
        storage = .float(f)
    }

    /// The same elements held as `type` (a C-style conversion: floats truncate toward zero
    /// into integers; fp16 rounds).
    public func converted(to type: MILDataType) -> MILTensor {
        if type == dataType { return self }
        switch type {
        case .bool: return MILTensor(.bool, shape: shape, storage: .bool(bools))
        case .string: return MILTensor(.string, shape: shape, storage: .string(strings))
        case _ where type.isFloat:
            var f = floats
            if type != .fp32 && type != .fp64 { for i in f.indices { f[i] = type.round(f[i]) } }
            return MILTensor(type, shape: shape, storage: .float(f))
        default:
            return MILTensor(type, shape: shape, storage: .int(ints.map { type.wrap($0) }))
        }
    }
}

/// A value a program passes between operations.
public indirect enum MILValue: Sendable {
    case tensor(MILTensor)
    case list([MILValue])
    case tuple([MILValue])
    case dictionary([(key: MILValue, value: MILValue)])
    case state(MILStateCell)

    public var tensor: MILTensor? {
        if case .tensor(let t) = self { return t }
        return nil
    }
}

/// A state's storage (iOS18 `read_state` / `coreml_update_state`): shared by the ops of one
/// prediction session and kept between its predictions.
public final class MILStateCell: @unchecked Sendable {
    public var value: MILTensor
    public init(_ value: MILTensor) { self.value = value }
}

/// Index arithmetic for row-major tensors.
enum MILShape {
    static func strides(_ shape: [Int]) -> [Int] {
        var s = [Int](repeating: 1, count: shape.count)
        var step = 1
        for i in stride(from: shape.count - 1, through: 0, by: -1) { s[i] = step; step *= shape[i] }
        return s
    }
    static func count(_ shape: [Int]) -> Int { shape.reduce(1, *) }

    /// NumPy broadcasting of two shapes, or nil when they do not broadcast.
    static func broadcast(_ a: [Int], _ b: [Int]) -> [Int]? {
        let n = max(a.count, b.count)
        var out = [Int](repeating: 1, count: n)
        for i in 0..<n {
            let x = i < n - a.count ? 1 : a[i - (n - a.count)]
            let y = i < n - b.count ? 1 : b[i - (n - b.count)]
            if x == y || y == 1 { out[i] = x } else if x == 1 { out[i] = y } else { return nil }
        }
        return out
    }

    /// For each element of `out`, the flat index of the element of `shape` it broadcasts from.
    static func broadcastIndices(from shape: [Int], to out: [Int]) -> [Int] {
        let total = count(out)
        if shape == out { return Array(0..<total) }
        let pad = out.count - shape.count
        let inStrides = strides(shape)
        var eff = [Int](repeating: 0, count: out.count)
        for i in 0..<shape.count where shape[i] != 1 { eff[i + pad] = inStrides[i] }
        var idx = [Int](repeating: 0, count: total)
        var coord = [Int](repeating: 0, count: out.count)
        var flat = 0
        for k in 0..<total {
            idx[k] = flat
            var d = out.count - 1
            while d >= 0 {
                coord[d] += 1; flat += eff[d]
                if coord[d] < out[d] { break }
                flat -= eff[d] * coord[d]; coord[d] = 0
                d -= 1
            }
        }
        return idx
    }

    /// A possibly negative axis made positive, checked against the rank.
    static func axis(_ a: Int, rank: Int, op: String) throws -> Int {
        let r = a < 0 ? a + rank : a
        guard r >= 0 && r < max(rank, 1) else {
            throw MILError.invalid(op, "axis \(a) is out of range for rank \(rank)")
        }
        return r
    }
}

/// Errors while compiling or running a program; the message names the op.
public enum MILError: Error, CustomStringConvertible {
    case invalid(String, String)
    case unsupported(String, String)

    public var description: String {
        switch self {
        case .invalid(let op, let why): return "op \(op): \(why)"
        case .unsupported(let op, let why): return "op \(op): \(why)"
        }
    }
}
