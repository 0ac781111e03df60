import CortadoCore
import Foundation

/// Core ML feature values to program tensors and back.
enum MILFeatureIO {
    /// The tensor a feature value stands for, in the element type the program declares.
    static func tensor(from value: MLFeatureValue, feature: MLFeatureDescription, type: MILType) throws -> MILTensor {
        let dt = type.dataType ?? .fp32
        switch value.storage {
        case .multiArray(let array):
            var t: MILTensor
            if dt.isFloat {
                t = MILTensor(floats: array.floatValues(), shape: array.shape, dataType: .fp32)
            } else if dt == .bool {
                t = MILTensor(bools: array.doubleValues().map { $0 != 0 }, shape: array.shape)
            } else {
                t = MILTensor(ints: array.doubleValues().map { Int($0) }, shape: array.shape, dataType: .int32)
            }
            t = t.converted(to: dt)
            if let dims = type.dimensions, dims.count == t.rank + 1, dims.first == 1 {
                // A program input of rank n+1 fed a rank-n array: Core ML's leading batch axis.
                t.shape = [1] + t.shape
            }
            return t
        case .image(let image):
            return try imageTensor(image, feature: feature, type: dt)
        case .double(let d):
            return MILTensor(floats: [Float(d)], shape: [1], dataType: .fp32).converted(to: dt)
        case .int64(let i):
            return MILTensor(ints: [Int(i)], shape: [1], dataType: .int32).converted(to: dt)
        default:
            throw MLModelError.featureType(feature.name, "a \(value.type) value cannot feed an ML Program input")
        }
    }

    /// An image as a [1, C, H, W] tensor of pixel values (0–255), planes in the model's colour
    /// order; the program itself applies any scale and bias.
    static func imageTensor(_ input: MLImage, feature: MLFeatureDescription, type: MILDataType) throws -> MILTensor {
        guard let constraint = feature.imageConstraint else {
            throw MLModelError.featureType(feature.name, "the feature has no image description")
        }
        var image = input
        if !image.fits(constraint) {
            image = image.resized(width: constraint.pixelsWide, height: constraint.pixelsHigh)
        }
        let w = image.width, h = image.height, plane = w * h
        let channels = constraint.colorSpace.channels
        var out = [Float](repeating: 0, count: channels * plane)
        let px = image.data
        let bpp = image.pixelFormat.bytesPerPixel
        for y in 0..<h {
            for x in 0..<w {
                let p = (y * w + x) * bpp
                let i = y * w + x
                var r: Float = 0, g: Float = 0, b: Float = 0
                switch image.pixelFormat {
                case .rgb8: r = Float(px[p]); g = Float(px[p + 1]); b = Float(px[p + 2])
                case .bgra8: b = Float(px[p]); g = Float(px[p + 1]); r = Float(px[p + 2])
                case .gray8: r = Float(px[p]); g = r; b = r
                case .gray16f:
                    r = px.withUnsafeBytes { MLImage.half($0.baseAddress!, p / 2) }
                    g = r; b = r
                }
                switch constraint.colorSpace {
                case .rgb: out[i] = r; out[plane + i] = g; out[2 * plane + i] = b
                case .bgr: out[i] = b; out[plane + i] = g; out[2 * plane + i] = r
                case .grayscale, .grayscaleFloat16:
                    out[i] = image.pixelFormat == .gray8 || image.pixelFormat == .gray16f ? r : (0.299 * r + 0.587 * g + 0.114 * b)
                }
            }
        }
        return MILTensor(floats: out, shape: [1, channels, h, w], dataType: .fp32).converted(to: type)
    }

    /// The feature value a program result stands for, as the model's description declares it.
    static func feature(from value: MILValue, feature: MLFeatureDescription, backing: MLMultiArray?) throws -> MLFeatureValue {
        switch (feature.type, value) {
        case (.multiArray, .tensor(let t)):
            let dataType = feature.multiArrayConstraint?.dataType ?? arrayType(t.dataType)
            let array: MLMultiArray
            if let backing, backing.shape == t.shape, backing.dataType == dataType {
                array = backing
            } else {
                array = try MLMultiArray(shape: t.shape, dataType: dataType)
            }
            write(t, into: array)
            return MLFeatureValue(multiArray: array)
        case (.string, .tensor(let t)):
            guard let s = t.strings.first else { throw MLModelError.featureType(feature.name, "the program returned \(t.dataType.rawValue), not a string") }
            return MLFeatureValue(string: s)
        case (.int64, .tensor(let t)):
            guard let v = t.ints.first else { throw MLModelError.featureType(feature.name, "the program returned no value") }
            return MLFeatureValue(int64: Int64(v))
        case (.double, .tensor(let t)):
            guard let v = t.floats.first else { throw MLModelError.featureType(feature.name, "the program returned no value") }
            return MLFeatureValue(double: Double(v))
        case (.dictionary, .dictionary(let pairs)):
            if pairs.first.flatMap({ $0.key.tensor?.dataType }) == .string {
                var d: [String: Double] = [:]
                for p in pairs { d[p.key.tensor?.strings.first ?? ""] = Double(p.value.tensor?.floats.first ?? 0) }
                return MLFeatureValue(dictionary: .stringKeyed(d))
            }
            var d: [Int64: Double] = [:]
            for p in pairs { d[Int64(p.key.tensor?.ints.first ?? 0)] = Double(p.value.tensor?.floats.first ?? 0) }
            return MLFeatureValue(dictionary: .int64Keyed(d))
        case (.image, .tensor(let t)):
            return MLFeatureValue(image: try image(from: t, feature: feature))
        default:
            throw MLModelError.featureType(feature.name, "the program's result does not match the declared \(feature.type) output")
        }
    }

    static func arrayType(_ t: MILDataType) -> MLMultiArrayDataType {
        switch t {
        case .fp16: return .float16
        case .fp64: return .double
        case _ where t.isFloat: return .float32
        default: return .int32
        }
    }

    static func write(_ t: MILTensor, into array: MLMultiArray) {
        let n = min(array.count, t.count)
        switch array.dataType {
        case .float32:
            let f = t.floats
            let p = array.dataPointer.assumingMemoryBound(to: Float.self)
            for i in 0..<n { p[i] = f[i] }
        case .float16:
            let f = t.floats
            let p = array.dataPointer.assumingMemoryBound(to: Float16.self)
            for i in 0..<n { p[i] = Float16(f[i]) }
        case .double:
            if case .int(let v) = t.storage {
                let p = array.dataPointer.assumingMemoryBound(to: Double.self)
                for i in 0..<n { p[i] = Double(v[i]) }
            } else {
                let f = t.floats
                let p = array.dataPointer.assumingMemoryBound(to: Double.self)
                for i in 0..<n { p[i] = Double(f[i]) }
            }
        case .int32:
            let v = t.ints
            let p = array.dataPointer.assumingMemoryBound(to: Int32.self)
            for i in 0..<n { p[i] = Int32(truncatingIfNeeded: v[i]) }
        }
    }

    /// A [1, C, H, W] or [C, H, W] tensor of pixel values as an image.
    static func image(from t: MILTensor, feature: MLFeatureDescription) throws -> MLImage {
        let dims = Array(t.shape.suffix(3))
        guard dims.count == 3, dims[0] == 1 || dims[0] == 3 else {
            throw MLModelError.featureType(feature.name, "an image output needs shape [1, C, H, W] with C 1 or 3, not \(t.shape)")
        }
        let (c, h, w) = (dims[0], dims[1], dims[2])
        let f = t.floats, plane = h * w
        func byte(_ v: Float) -> UInt8 { v > 0 ? (v < 255 ? UInt8(v + 0.5) : 255) : 0 }
        if c == 1 {
            return try MLImage(width: w, height: h, pixelFormat: .gray8, data: (0..<plane).map { byte(f[$0]) })
        }
        let bgr = feature.imageConstraint?.colorSpace == .bgr
        var data = [UInt8](repeating: 0, count: plane * 3)
        for i in 0..<plane {
            let (r, g, b) = bgr ? (f[2 * plane + i], f[plane + i], f[i]) : (f[i], f[plane + i], f[2 * plane + i])
            data[3 * i] = byte(r); data[3 * i + 1] = byte(g); data[3 * i + 2] = byte(b)
        }
        return try MLImage(width: w, height: h, pixelFormat: .rgb8, data: data)
    }
}
