import Foundation

/// A multi-dimensional array of numbers, as in CoreML.framework.
///
/// Storage is one contiguous or strided block of Float16, Float32, Double or Int32
/// values. An array either owns its memory or wraps caller memory without a copy
/// (`init(dataPointer:shape:dataType:strides:deallocator:)`), which is how output
/// backings and shared-memory tensors reach the kernels.
public final class MLMultiArray: @unchecked Sendable, CustomStringConvertible {
    public let shape: [Int]
    /// Element strides, in elements (not bytes).
    public let strides: [Int]
    public let dataType: MLMultiArrayDataType
    /// Number of elements (product of `shape`).
    public let count: Int
    public let dataPointer: UnsafeMutableRawPointer
    private let deallocator: ((UnsafeMutableRawPointer) -> Void)?
    /// The object whose memory this array views, held while the array lives (nil: none).
    private let owner: AnyObject?

    /// Strides of every rank-1 array, shared (no allocation per array).
    private static let unitStrides = [1]

    /// Row-major (C order) strides for a shape.
    public static func rowMajorStrides(_ shape: [Int]) -> [Int] {
        switch shape.count {
        case 1: return unitStrides
        case 2: return [max(shape[1], 1), 1]
        default:
            // Appended from the last axis, then turned round: `Array(repeating:count:)` goes
            // through the standard library's unspecialized allocation, several times the cost.
            var strides: [Int] = []
            strides.reserveCapacity(shape.count)
            var step = 1
            for axis in stride(from: shape.count - 1, through: 0, by: -1) {
                strides.append(step)
                step *= max(shape[axis], 1)
            }
            strides.reverse()
            return strides
        }
    }

    /// Bytes of an array of `shape` with elements of `elementSize` bytes (elements when it is
    /// 1); nil when the product overflows, so a shape a client sends cannot trap the server.
    public static func byteCount(_ shape: [Int], elementSize: Int) -> Int? {
        var n = elementSize
        for d in shape {
            let (p, overflow) = n.multipliedReportingOverflow(by: d)
            if overflow { return nil }
            n = p
        }
        return n
    }

    /// A new, zero-filled array that owns its memory.
    public convenience init(shape: [Int], dataType: MLMultiArrayDataType) throws {
        try self.init(owning: shape, dataType: dataType, from: nil)
    }

    /// A new array that owns its memory, holding a copy of the `count × dataType.size` bytes at
    /// `source` (row-major): no zero fill first.
    public convenience init(copying source: UnsafeRawPointer, shape: [Int], dataType: MLMultiArrayDataType) throws {
        try self.init(owning: shape, dataType: dataType, from: source)
    }

    private init(owning shape: [Int], dataType: MLMultiArrayDataType, from source: UnsafeRawPointer?) throws {
        guard shape.allSatisfy({ $0 >= 0 }) else {
            throw MLModelError(.generic, "multi-array shape \(shape) has a negative dimension")
        }
        self.shape = shape
        self.strides = Self.rowMajorStrides(shape)
        self.dataType = dataType
        self.count = shape.reduce(1, *)
        let bytes = max(count * dataType.size, 1)
        self.dataPointer = UnsafeMutableRawPointer.allocate(byteCount: bytes, alignment: 64)
        if let source, count > 0 {
            self.dataPointer.copyMemory(from: source, byteCount: count * dataType.size)
        } else {
            self.dataPointer.initializeMemory(as: UInt8.self, repeating: 0, count: bytes)
        }
        self.deallocator = { $0.deallocate() }
        self.owner = nil
    }

    /// Wraps memory the caller owns, without copying. `strides` default to row-major;
    /// `deallocator` runs when the array is released (nil: the caller keeps ownership).
    public convenience init(dataPointer: UnsafeMutableRawPointer, shape: [Int], dataType: MLMultiArrayDataType,
                            strides: [Int]? = nil, deallocator: ((UnsafeMutableRawPointer) -> Void)? = nil) throws {
        try self.init(wrapping: dataPointer, shape: shape, dataType: dataType, strides: strides ?? Self.rowMajorStrides(shape),
                      deallocator: deallocator, owner: nil)
    }

    /// Wraps part of memory that `owner` keeps alive (a view into a block many arrays share),
    /// without copying; the array holds `owner` until it is released. (The same as a
    /// deallocator that captures `owner`, without allocating the closure's context.)
    public convenience init(dataPointer: UnsafeMutableRawPointer, shape: [Int], dataType: MLMultiArrayDataType, strides: [Int],
                            owner: AnyObject) throws {
        try self.init(wrapping: dataPointer, shape: shape, dataType: dataType, strides: strides, deallocator: nil, owner: owner)
    }

    private init(wrapping dataPointer: UnsafeMutableRawPointer, shape: [Int], dataType: MLMultiArrayDataType, strides: [Int],
                 deallocator: ((UnsafeMutableRawPointer) -> Void)?, owner: AnyObject?) throws {
        guard strides.count == shape.count else {
            throw MLModelError(.generic, "multi-array strides \(strides) do not match shape \(shape)")
        }
        self.shape = shape
        self.strides = strides
        self.dataType = dataType
        self.count = shape.reduce(1, *)
        self.dataPointer = dataPointer
        self.deallocator = deallocator
        self.owner = owner
    }

    /// A new array holding `values` (row-major), converted to `dataType`.
    public convenience init(_ values: [Double], shape: [Int]? = nil, dataType: MLMultiArrayDataType = .double) throws {
        let shape = shape ?? [values.count]
        try self.init(shape: shape, dataType: dataType)
        guard count == values.count else {
            throw MLModelError(.generic, "\(values.count) values do not fill shape \(shape) (\(count) elements)")
        }
        values.withUnsafeBufferPointer { write(contiguous: $0) }
    }

    deinit { deallocator?(dataPointer) }

    /// True when elements are laid out row-major without gaps.
    public var isContiguous: Bool {
        // The row-major strides, compared as they are worked out (no array allocated).
        var step = 1
        for axis in stride(from: shape.count - 1, through: 0, by: -1) {
            if strides[axis] != step { return false }
            step *= max(shape[axis], 1)
        }
        return true
    }

    // MARK: Element access

    /// Storage offset (in elements) of a logical row-major index.
    @inlinable func offset(ofLinear index: Int) -> Int {
        if strides.count <= 1 { return index * (strides.first ?? 1) }
        var rest = index
        var offset = 0
        for axis in stride(from: shape.count - 1, through: 0, by: -1) {
            let dim = shape[axis]
            offset += (rest % dim) * strides[axis]
            rest /= dim
        }
        return offset
    }

    @inlinable func load(at offset: Int) -> Double {
        switch dataType {
        case .double: return dataPointer.assumingMemoryBound(to: Double.self)[offset]
        case .float32: return Double(dataPointer.assumingMemoryBound(to: Float.self)[offset])
        case .float16: return Double(dataPointer.assumingMemoryBound(to: Float16.self)[offset])
        case .int32: return Double(dataPointer.assumingMemoryBound(to: Int32.self)[offset])
        }
    }

    @inlinable func store(_ value: Double, at offset: Int) {
        switch dataType {
        case .double: dataPointer.assumingMemoryBound(to: Double.self)[offset] = value
        case .float32: dataPointer.assumingMemoryBound(to: Float.self)[offset] = Float(value)
        case .float16: dataPointer.assumingMemoryBound(to: Float16.self)[offset] = Float16(value)
        case .int32: dataPointer.assumingMemoryBound(to: Int32.self)[offset] = value.isNaN ? 0 : Int32(max(min(value.rounded(.towardZero), Double(Int32.max)), Double(Int32.min)))
        }
    }

    /// Element at a logical row-major index, as Double.
    public func double(at index: Int) -> Double { load(at: offset(ofLinear: index)) }

    /// Sets the element at a logical row-major index.
    public func setDouble(_ value: Double, at index: Int) { store(value, at: offset(ofLinear: index)) }

    /// CoreML.framework-style linear subscript.
    public subscript(index: Int) -> NSNumber {
        get { NSNumber(value: double(at: index)) }
        set { setDouble(newValue.doubleValue, at: index) }
    }

    /// CoreML.framework-style multi-index subscript.
    public subscript(key: [NSNumber]) -> NSNumber {
        get { NSNumber(value: load(at: offset(of: key.map(\.intValue)))) }
        set { store(newValue.doubleValue, at: offset(of: key.map(\.intValue))) }
    }

    func offset(of index: [Int]) -> Int {
        precondition(index.count == shape.count, "index \(index) has the wrong rank for shape \(shape)")
        var offset = 0
        for (axis, i) in index.enumerated() { offset += i * strides[axis] }
        return offset
    }

    // MARK: Bulk conversion

    /// Copies every element, in row-major order, into `out` as Double.
    public func copyDoubles(into out: UnsafeMutablePointer<Double>) {
        if isContiguous {
            switch dataType {
            case .double: out.update(from: dataPointer.assumingMemoryBound(to: Double.self), count: count)
            case .float32:
                let src = dataPointer.assumingMemoryBound(to: Float.self)
                for i in 0..<count { out[i] = Double(src[i]) }
            case .float16:
                let src = dataPointer.assumingMemoryBound(to: Float16.self)
                for i in 0..<count { out[i] = Double(Float(src[i])) }
            case .int32:
                let src = dataPointer.assumingMemoryBound(to: Int32.self)
                for i in 0..<count { out[i] = Double(src[i]) }
            }
        } else {
            for i in 0..<count { out[i] = double(at: i) }
        }
    }

    /// Copies every element, in row-major order, into `out` as Float.
    public func copyFloats(into out: UnsafeMutablePointer<Float>) {
        if isContiguous {
            switch dataType {
            case .float32: out.update(from: dataPointer.assumingMemoryBound(to: Float.self), count: count)
            case .double:
                let src = dataPointer.assumingMemoryBound(to: Double.self)
                for i in 0..<count { out[i] = Float(src[i]) }
            case .float16:
                let src = dataPointer.assumingMemoryBound(to: Float16.self)
                for i in 0..<count { out[i] = Float(src[i]) }
            case .int32:
                let src = dataPointer.assumingMemoryBound(to: Int32.self)
                for i in 0..<count { out[i] = Float(src[i]) }
            }
        } else {
            for i in 0..<count { out[i] = Float(double(at: i)) }
        }
    }

    /// All elements in row-major order, as Double.
    public func doubleValues() -> [Double] {
        [Double](unsafeUninitializedCapacity: count) { buf, n in
            if count > 0 { copyDoubles(into: buf.baseAddress!) }
            n = count
        }
    }

    /// All elements in row-major order, as Float.
    public func floatValues() -> [Float] {
        [Float](unsafeUninitializedCapacity: count) { buf, n in
            if count > 0 { copyFloats(into: buf.baseAddress!) }
            n = count
        }
    }

    /// Writes `values` (row-major, `count` of them) converted to this array's type.
    public func write(contiguous values: UnsafeBufferPointer<Double>) {
        precondition(values.count == count)
        if isContiguous && dataType == .double {
            dataPointer.assumingMemoryBound(to: Double.self).update(from: values.baseAddress!, count: count)
        } else {
            for i in 0..<count { setDouble(values[i], at: i) }
        }
    }

    /// Writes `values` (row-major, `count` of them) converted to this array's type.
    public func write(contiguous values: UnsafeBufferPointer<Float>) {
        precondition(values.count == count)
        if isContiguous {
            switch dataType {
            case .float32: dataPointer.assumingMemoryBound(to: Float.self).update(from: values.baseAddress!, count: count)
            case .float16:
                let dst = dataPointer.assumingMemoryBound(to: Float16.self)
                for i in 0..<count { dst[i] = Float16(values[i]) }
            default:
                for i in 0..<count { store(Double(values[i]), at: i) }
            }
        } else {
            for i in 0..<count { setDouble(Double(values[i]), at: i) }
        }
    }

    public var description: String {
        let preview = (0..<min(count, 8)).map { String(double(at: $0)) }.joined(separator: ", ")
        return "MLMultiArray(\(dataType), shape: \(shape), [\(preview)\(count > 8 ? ", …" : "")])"
    }
}
