import CortadoCore
import CortadoSpec
import Foundation

/// How an image input becomes a `[1, 1, C, H, W]` blob: pixels in the model's colour order
/// (RGB, BGR or gray), then the network's preprocessing, `channelScale * x + bias[c]` or
/// `x - meanImage[c, h, w]`.
struct NNImageInput {
    let colorSpace: MLImageColorSpace
    let constraint: MLImageConstraint
    let channelScale: Float
    /// Per model channel (R, G, B for RGB; B, G, R for BGR; gray).
    let bias: [Float]
    let meanImage: [Float]?

    init(feature: MLFeatureDescription, preprocessing: CoreML_Specification_NeuralNetworkPreprocessing?) throws {
        let c = feature.imageConstraint!
        constraint = c
        colorSpace = c.colorSpace
        var scale: Float = 1
        var bias = [Float](repeating: 0, count: Self.channels(c.colorSpace))
        var mean: [Float]?
        switch preprocessing?.preprocessor {
        case .scaler(let s)?:
            scale = s.channelScale
            switch c.colorSpace {
            case .rgb: bias = [s.redBias, s.greenBias, s.blueBias]
            case .bgr: bias = [s.blueBias, s.greenBias, s.redBias]
            case .grayscale, .grayscaleFloat16: bias = [s.grayBias]
            }
        case .meanImage(let m)?:
            let want = Self.channels(c.colorSpace) * c.pixelsHigh * c.pixelsWide
            guard m.meanImage.count == want else {
                throw MLModelError(.invalidModel, feature: feature.name, "mean image has \(m.meanImage.count) values, the \(c.pixelsWide)×\(c.pixelsHigh) \(c.colorSpace.rawValue) input needs \(want)")
            }
            mean = m.meanImage
        case nil:
            break
        }
        channelScale = scale
        self.bias = bias
        meanImage = mean
    }

    static func channels(_ space: MLImageColorSpace) -> Int {
        switch space {
        case .rgb, .bgr: return 3
        case .grayscale, .grayscaleFloat16: return 1
        }
    }

    var defaultShape: NNShape {
        NNShape(c: Self.channels(colorSpace), h: constraint.pixelsHigh, w: constraint.pixelsWide)
    }

    /// The blob shape an image fills: its own size when the model allows it (flexible sizes),
    /// else the model's default size.
    func shape(for image: MLImage) -> NNShape {
        let allowed: Bool
        if !constraint.enumeratedSizes.isEmpty {
            allowed = constraint.enumeratedSizes.contains { $0.width == image.width && $0.height == image.height }
        } else if let w = constraint.widthRange, let h = constraint.heightRange {
            allowed = w.contains(image.width) && h.contains(image.height)
        } else {
            allowed = false
        }
        return allowed ? NNShape(c: Self.channels(colorSpace), h: image.height, w: image.width) : defaultShape
    }

    /// Writes the image's pixels, preprocessed, as C planes of H × W floats.
    func write(_ image: MLImage, feature: String, shape: NNShape, into out: UnsafeMutablePointer<Float>) throws {
        guard image.width == shape.w, image.height == shape.h else {
            throw MLModelError.featureType(feature, "image is \(image.width)×\(image.height), the model takes \(shape.w)×\(shape.h)")
        }
        let plane = shape.hw
        let channels = shape.c
        image.data.withUnsafeBufferPointer { px in
            for i in 0..<plane {
                // Red, green, blue (or gray) of pixel i, as 0…255 (GRAY16F: its float value).
                var r: Float = 0, g: Float = 0, b: Float = 0
                switch image.pixelFormat {
                case .rgb8: r = Float(px[3 * i]); g = Float(px[3 * i + 1]); b = Float(px[3 * i + 2])
                case .bgra8: b = Float(px[4 * i]); g = Float(px[4 * i + 1]); r = Float(px[4 * i + 2])
                case .gray8: r = Float(px[i]); g = r; b = r
                case .gray16f:
                    r = Float(Float16(bitPattern: UInt16(px[2 * i]) | UInt16(px[2 * i + 1]) << 8)); g = r; b = r
                }
                if channels == 1 {
                    let isGray = image.pixelFormat == .gray8 || image.pixelFormat == .gray16f
                    out[i] = isGray ? r : 0.299 * r + 0.587 * g + 0.114 * b
                } else if colorSpace == .bgr {
                    out[i] = b; out[plane + i] = g; out[2 * plane + i] = r
                } else {
                    out[i] = r; out[plane + i] = g; out[2 * plane + i] = b
                }
            }
        }
        if let mean = meanImage, mean.count == channels * plane {
            for i in 0..<channels * plane { out[i] -= mean[i] }
        } else {
            for ch in 0..<channels {
                let p = out + ch * plane
                let s = channelScale, t = bias[ch]
                for i in 0..<plane { p[i] = s * p[i] + t }
            }
        }
    }
}

/// Turns a `[C, H, W]` blob into an image output: values rounded and clamped to 0…255
/// (GRAYSCALE_FLOAT16: kept as half floats).
enum NNImageOutput {
    static func image(_ p: UnsafeMutablePointer<Float>, shape: NNShape, colorSpace: MLImageColorSpace, feature: String) throws -> MLImage {
        let want = NNImageInput.channels(colorSpace)
        guard shape.c == want, shape.images == 1 else {
            throw MLModelError(.invalidModel, feature: feature, "image output needs \(want) channel(s) of one image, the blob is \(shape)")
        }
        let plane = shape.hw
        func byte(_ v: Float) -> UInt8 { UInt8(Swift.max(0, Swift.min(255, v.rounded()))) }
        var data: [UInt8]
        let format: MLImagePixelFormat
        switch colorSpace {
        case .rgb, .bgr:
            format = .rgb8
            data = [UInt8](repeating: 0, count: 3 * plane)
            let (r, b) = colorSpace == .rgb ? (0, 2) : (2, 0)
            for i in 0..<plane {
                data[3 * i] = byte(p[r * plane + i]); data[3 * i + 1] = byte(p[plane + i]); data[3 * i + 2] = byte(p[b * plane + i])
            }
        case .grayscale:
            format = .gray8
            data = (0..<plane).map { byte(p[$0]) }
        case .grayscaleFloat16:
            format = .gray16f
            data = [UInt8](repeating: 0, count: 2 * plane)
            for i in 0..<plane {
                let bits = Float16(p[i]).bitPattern
                data[2 * i] = UInt8(bits & 0xff); data[2 * i + 1] = UInt8(bits >> 8)
            }
        }
        return try MLImage(width: shape.w, height: shape.h, pixelFormat: format, data: data)
    }
}
