import CortadoCore
import CortadoGRPCCore
import CortadoServerProtos
import Foundation

/// `cortado.v1` feature values ↔ Core ML feature values. Lossless both ways: multi-arrays
/// travel as raw little-endian elements in their own type (Float16 as 2-byte values).
public enum NativeFeatureCoding {
    public static func dataType(_ t: Cortado_V1_ArrayDataType) -> MLMultiArrayDataType? {
        switch t {
        case .float32: return .float32
        case .double: return .double
        case .int32: return .int32
        case .float16: return .float16
        default: return nil
        }
    }

    public static func wireType(_ t: MLMultiArrayDataType) -> Cortado_V1_ArrayDataType {
        switch t {
        case .float32: return .float32
        case .double: return .double
        case .int32: return .int32
        case .float16: return .float16
        }
    }

    /// Decodes one input; errors are INVALID_ARGUMENT naming the feature.
    public static func decode(_ value: Cortado_V1_FeatureValue, name: String, expected: MLFeatureDescription?) throws(GRPCStatus) -> MLFeatureValue {
        func bad(_ message: String) -> GRPCStatus { GRPCStatus(.invalidArgument, "input '\(name)': \(message)") }
        switch value.kind {
        case .int64Value(let v)?: return MLFeatureValue(int64: v)
        case .doubleValue(let v)?: return MLFeatureValue(double: v)
        case .stringValue(let v)?: return MLFeatureValue(string: v)
        case .multiArray(let a)?:
            let dt = dataType(a.dataType) ?? expected?.multiArrayConstraint?.dataType ?? .double
            let shape = a.shape.map { Int($0) }
            guard shape.allSatisfy({ $0 >= 0 }) else { throw bad("negative dimension in shape \(shape)") }
            guard let bytes = MLMultiArray.byteCount(shape, elementSize: dt.size) else {
                throw bad("shape \(shape) has too many elements")
            }
            guard a.data.count == bytes else {
                throw bad("shape \(shape) of \(dt) needs \(bytes) bytes of data, got \(a.data.count)")
            }
            let array: MLMultiArray
            do { array = try MLMultiArray(shape: shape, dataType: dt) } catch { throw bad("\(error)") }
            a.data.withUnsafeBytes { raw in
                if let base = raw.baseAddress, raw.count > 0 { array.dataPointer.copyMemory(from: base, byteCount: raw.count) }
            }
            return MLFeatureValue(multiArray: array)
        case .dictionary(let d)?:
            if !d.stringKeys.isEmpty {
                guard d.stringKeys.count == d.values.count else { throw bad("dictionary has \(d.stringKeys.count) keys and \(d.values.count) values") }
                return MLFeatureValue(dictionary: .stringKeyed(Dictionary(zip(d.stringKeys, d.values), uniquingKeysWith: { _, b in b })))
            }
            guard d.int64Keys.count == d.values.count else { throw bad("dictionary has \(d.int64Keys.count) keys and \(d.values.count) values") }
            return MLFeatureValue(dictionary: .int64Keyed(Dictionary(zip(d.int64Keys, d.values), uniquingKeysWith: { _, b in b })))
        case .sequence(let s)?:
            if !s.stringValues.isEmpty { return MLFeatureValue(sequence: MLSequence(strings: s.stringValues)) }
            if s.int64Values.isEmpty, expected?.sequenceConstraint?.valueType == .string { return MLFeatureValue(sequence: MLSequence(strings: [])) }
            return MLFeatureValue(sequence: MLSequence(int64s: s.int64Values))
        case .image(let image)?:
            if !image.encoded.isEmpty {
                do { return MLFeatureValue(image: try MLImage(encoded: image.encoded)) } catch { throw bad("\(error)") }
            }
            let format: MLImagePixelFormat
            switch image.pixelFormat {
            case .rgb8: format = .rgb8
            case .bgra8: format = .bgra8
            case .gray8: format = .gray8
            case .gray16F: format = .gray16f
            default: throw bad("image has no pixel format")
            }
            do {
                return MLFeatureValue(image: try MLImage(width: Int(image.width), height: Int(image.height), pixelFormat: format, data: [UInt8](image.data)))
            } catch { throw bad("\(error)") }
        case nil:
            if let expected { return MLFeatureValue(undefined: expected.type) }
            throw bad("no value")
        }
    }


    public static func encode(_ value: MLFeatureValue) -> Cortado_V1_FeatureValue {
        var out = Cortado_V1_FeatureValue()
        switch value.storage {
        case .undefined: break
        case .int64(let v): out.int64Value = v
        case .double(let v): out.doubleValue = v
        case .string(let v): out.stringValue = v
        case .multiArray(let a):
            var m = Cortado_V1_MultiArray()
            m.dataType = wireType(a.dataType)
            m.shape = a.shape.map { Int64($0) }
            m.data = MultiArrayBytes.contiguousData(a)
            out.multiArray = m
        case .dictionary(let d):
            var m = Cortado_V1_Dictionary()
            switch d {
            case .stringKeyed(let entries):
                for (k, v) in entries.sorted(by: { $0.key < $1.key }) { m.stringKeys.append(k); m.values.append(v) }
            case .int64Keyed(let entries):
                for (k, v) in entries.sorted(by: { $0.key < $1.key }) { m.int64Keys.append(k); m.values.append(v) }
            }
            out.dictionary = m
        case .sequence(let s):
            var m = Cortado_V1_Sequence()
            switch s.values {
            case .int64s(let v): m.int64Values = v
            case .strings(let v): m.stringValues = v
            }
            out.sequence = m
        case .image(let image):
            var m = Cortado_V1_Image()
            m.width = Int32(image.width)
            m.height = Int32(image.height)
            switch image.pixelFormat {
            case .rgb8: m.pixelFormat = .rgb8
            case .bgra8: m.pixelFormat = .bgra8
            case .gray8: m.pixelFormat = .gray8
            case .gray16f: m.pixelFormat = .gray16F
            }
            m.data = Data(image.data)
            out.image = m
        }
        return out
    }
}

/// Raw element bytes of a multi-array in row-major order.
public enum MultiArrayBytes {
    public static func contiguousData(_ a: MLMultiArray) -> Data {
        let size = a.dataType.size
        if a.isContiguous {
            return Data(bytes: a.dataPointer, count: a.count * size)
        }
        var data = Data(count: a.count * size)
        data.withUnsafeMutableBytes { out in
            let dst = out.baseAddress!
            // Walk the logical indices and copy element by element through the strides.
            var index = [Int](repeating: 0, count: a.shape.count)
            for linear in 0..<a.count {
                var offset = 0
                for d in 0..<index.count { offset += index[d] * a.strides[d] }
                dst.advanced(by: linear * size).copyMemory(from: a.dataPointer.advanced(by: offset * size), byteCount: size)
                var d = index.count - 1
                while d >= 0 {
                    index[d] += 1
                    if index[d] < a.shape[d] { break }
                    index[d] = 0
                    d -= 1
                }
            }
        }
        return data
    }
}
