import CortadoCore
import Foundation

/// How one Core ML feature looks as an Open Inference Protocol tensor. Every model is
/// served with a leading batch dimension (`max_batch_size` > 0); `dims` excludes it.
///
/// | Core ML feature | tensor |
/// |---|---|
/// | int64 | INT64 [1] |
/// | double | FP64 [1] |
/// | string | BYTES [1] |
/// | multiArray | its own type (FP32, FP64, INT32, FP16), its shape (-1 for flexible dims) |
/// | dictionary output of a classifier's probabilities | FP64 [classes], in class-label order; or the classification extension |
/// | other dictionaries, sequences | BYTES [1] holding the feature's JSON encoding (inputs and outputs); int64 sequences as INT64 [-1] |
/// | image | UINT8 [H, W, C] pixels (C = 3 RGB, 1 gray; inputs also 4 BGRA), FP16 [H, W, 1] for half-float gray; inputs also BYTES [1] holding PNG or JPEG |
///
/// A class (immutable), not a struct: requests copy mappings into their own lists, and a
/// reference costs one retain where the struct's fields cost one each.
final class TensorMapping: @unchecked Sendable {
    enum Kind {
        case int64
        case double
        case string
        case multiArray(MLMultiArrayDataType?)
        case probabilities(MLClassLabels)
        case json
        case int64Sequence
        case image
    }

    let feature: MLFeatureDescription
    let kind: Kind
    let datatype: String
    let dims: [Int64]
    /// An output description's name and datatype fields (1 and 2 of InferOutputTensor) as
    /// protobuf bytes, for the response writer.
    private(set) var descriptionFields: [UInt8] = []
    /// `dims` as one row's shape (empty when a dimension is flexible), and the shape of a
    /// one-row tensor ([1] + dims): made once, shared by every request that has them.
    private(set) var fixedRowShape: [Int] = []
    private var oneRowShape: [Int64] = []
    /// A one-row array's shape ([1] + `fixedRowShape`) and row-major strides, made once (empty
    /// when a dimension is flexible): most requests are one row.
    private(set) var oneRowArrayShape: [Int] = []
    private(set) var oneRowArrayStrides: [Int] = []

    var name: String { feature.name }
    /// The name's UTF-8 bytes, for the request decoder to match a tensor's name on the wire
    /// without making a String of it; and whether they are all ASCII (then byte equality is
    /// String equality: no canonically equivalent spelling differs in its bytes).
    let nameUTF8: [UInt8]
    let nameIsASCII: Bool

    var isImage: Bool {
        if case .image = kind { return true }
        return false
    }

    init(_ feature: MLFeatureDescription, classLabels: MLClassLabels?, isProbabilities: Bool) {
        self.feature = feature
        nameUTF8 = Array(feature.name.utf8)
        nameIsASCII = nameUTF8.allSatisfy { $0 < 0x80 }
        switch feature.type {
        case .int64: kind = .int64; datatype = "INT64"; dims = [1]
        case .double: kind = .double; datatype = "FP64"; dims = [1]
        case .string: kind = .string; datatype = "BYTES"; dims = [1]
        case .multiArray:
            let c = feature.multiArrayConstraint
            kind = .multiArray(c?.dataType)
            datatype = TensorMapping.datatype(c?.dataType ?? .double)
            var shape = (c?.shape ?? []).map { Int64($0) }
            if let sc = c?.shapeConstraint {
                if sc.type == .range {
                    shape = sc.sizeRangeForDimension.map { $0.lowerBound == $0.upperBound ? Int64($0.lowerBound) : -1 }
                } else if sc.type == .enumerated, let first = sc.enumeratedShapes.first {
                    shape = first.enumerated().map { i, d in sc.enumeratedShapes.allSatisfy({ $0.count > i && $0[i] == d }) ? Int64(d) : -1 }
                }
            }
            dims = shape.isEmpty ? [-1] : shape
        case .dictionary:
            if isProbabilities, let labels = classLabels {
                kind = .probabilities(labels); datatype = "FP64"; dims = [Int64(labels.count)]
            } else {
                kind = .json; datatype = "BYTES"; dims = [1]
            }
        case .sequence:
            if feature.sequenceConstraint?.valueType == .int64 {
                kind = .int64Sequence; datatype = "INT64"; dims = [-1]
            } else {
                kind = .json; datatype = "BYTES"; dims = [1]
            }
        case .image:
            kind = .image
            datatype = feature.imageConstraint?.colorSpace == .grayscaleFloat16 ? "FP16" : "UINT8"
            let c = feature.imageConstraint
            let channels = Int64(c?.colorSpace.channels ?? 3)
            dims = [Int64(c?.pixelsHigh ?? -1), Int64(c?.pixelsWide ?? -1), channels]
        case .invalid:
            kind = .json; datatype = "BYTES"; dims = [1]
        }
        var w = ProtobufWriter(capacity: 32)
        w.string(1, feature.name)
        w.string(2, datatype)
        descriptionFields = w.bytes
        if dims.allSatisfy({ $0 >= 0 }) {
            fixedRowShape = dims.map { Int($0) }
            oneRowArrayShape = [1] + fixedRowShape
            oneRowArrayStrides = MLMultiArray.rowMajorStrides(oneRowArrayShape)
        }
        oneRowShape = [1] + dims
    }

    /// The shape and strides of an input array of `rows` rows of `rowShape` (the one-row ones
    /// made at load when they fit).
    func arrayLayout(rows: Int, rowShape: [Int]) -> (shape: [Int], strides: [Int]) {
        if rows == 1 && !oneRowArrayShape.isEmpty && rowShape.elementsEqual(fixedRowShape) {
            return (oneRowArrayShape, oneRowArrayStrides)
        }
        let shape = [rows] + rowShape
        return (shape, MLMultiArray.rowMajorStrides(shape))
    }

    /// An output's tensor shape for `rows` rows: [rows] + dims (scalars, strings, JSON and
    /// class probabilities; multi-arrays, sequences and images report what they hold).
    func batchShape(_ rows: Int) -> [Int64] {
        rows == 1 ? oneRowShape : [Int64(rows)] + dims
    }

    static func datatype(_ t: MLMultiArrayDataType) -> String {
        switch t {
        case .float32: return "FP32"
        case .double: return "FP64"
        case .int32: return "INT32"
        case .float16: return "FP16"
        }
    }

    static func arrayType(_ datatype: String) -> MLMultiArrayDataType? {
        switch datatype {
        case "FP32": return .float32
        case "FP64": return .double
        case "INT32": return .int32
        case "FP16": return .float16
        default: return nil
        }
    }


    /// Bytes per element of a fixed-size datatype; nil for BYTES or unknown.
    static func elementSize(_ datatype: String) -> Int? {
        // The common datatypes first: a string switch compares the cases in order.
        switch datatype {
        case "FP32", "FP64": return datatype == "FP32" ? 4 : 8
        case "INT64", "INT32": return datatype == "INT64" ? 8 : 4
        case "FP16", "UINT16", "INT16", "BF16": return 2
        case "UINT32": return 4
        case "UINT64": return 8
        case "BOOL", "UINT8", "INT8": return 1
        default: return nil
        }
    }

    /// The mappings of a model's inputs and outputs.
    static func inputs(of model: MLModel) -> [TensorMapping] {
        model.modelDescription.inputs.map { TensorMapping($0, classLabels: nil, isProbabilities: false) }
    }

    static func outputs(of model: MLModel) -> [TensorMapping] {
        let d = model.modelDescription
        return d.outputs.map { TensorMapping($0, classLabels: d.classLabels, isProbabilities: $0.name == d.predictedProbabilitiesName) }
    }
}

/// An input tensor's elements as little-endian bytes in its wire datatype, or as a list of
/// byte strings for BYTES.
struct TensorElements {
    let datatype: String
    let shape: [Int]
    let raw: UnsafeRawBufferPointer
    let strings: [Data]
    /// Keeps the storage `raw` points into alive.
    let owner: AnyObject?

    var count: Int { shape.reduce(1, *) }

    func double(at i: Int) -> Double {
        let p = raw.baseAddress!
        switch datatype {
        case "FP64": return p.loadUnaligned(fromByteOffset: i * 8, as: Double.self)
        case "FP32": return Double(p.loadUnaligned(fromByteOffset: i * 4, as: Float.self))
        case "FP16": return Double(p.loadUnaligned(fromByteOffset: i * 2, as: Float16.self))
        case "INT64": return Double(p.loadUnaligned(fromByteOffset: i * 8, as: Int64.self))
        case "INT32": return Double(p.loadUnaligned(fromByteOffset: i * 4, as: Int32.self))
        case "INT16": return Double(p.loadUnaligned(fromByteOffset: i * 2, as: Int16.self))
        case "INT8": return Double(p.loadUnaligned(fromByteOffset: i, as: Int8.self))
        case "UINT64": return Double(p.loadUnaligned(fromByteOffset: i * 8, as: UInt64.self))
        case "UINT32": return Double(p.loadUnaligned(fromByteOffset: i * 4, as: UInt32.self))
        case "UINT16": return Double(p.loadUnaligned(fromByteOffset: i * 2, as: UInt16.self))
        case "UINT8", "BOOL": return Double(p.load(fromByteOffset: i, as: UInt8.self))
        default: return 0
        }
    }

    func int64(at i: Int) -> Int64 {
        let p = raw.baseAddress!
        switch datatype {
        case "INT64": return p.loadUnaligned(fromByteOffset: i * 8, as: Int64.self)
        case "INT32": return Int64(p.loadUnaligned(fromByteOffset: i * 4, as: Int32.self))
        case "UINT64": return Int64(truncatingIfNeeded: p.loadUnaligned(fromByteOffset: i * 8, as: UInt64.self))
        default:
            // Clamped like `MLFeatureValue.int64Value`: a float past Int64's range must not trap.
            let d = double(at: i)
            return d.isFinite ? Int64(exactly: d.rounded(.towardZero)) ?? (d < 0 ? .min : .max) : 0
        }
    }
}

/// BYTES tensors on the wire: each element is a 4-byte little-endian length, then the bytes.
enum TensorBytes {
    static func split(_ data: UnsafeRawBufferPointer, name: String) throws(ServeStatus) -> [Data] {
        var out: [Data] = []
        var i = 0
        while i < data.count {
            guard i + 4 <= data.count else { throw ServeStatus(.invalidArgument, "input '\(name)': BYTES data ends inside an element's length prefix") }
            let n = Int(data.loadUnaligned(fromByteOffset: i, as: UInt32.self).littleEndian)
            i += 4
            guard i + n <= data.count else { throw ServeStatus(.invalidArgument, "input '\(name)': a BYTES element of \(n) bytes runs past the end of the data") }
            out.append(Data(data[i..<(i + n)]))
            i += n
        }
        return out
    }

    static func append(_ element: some Collection<UInt8>, to out: inout [UInt8]) {
        var n = UInt32(element.count).littleEndian
        withUnsafeBytes(of: &n) { out.append(contentsOf: $0) }
        out.append(contentsOf: element)
    }
}
