import CortadoCore
import CortadoSpec
import Foundation

/// How an image input becomes a `[1, 1, C, H, W]` blob: pixels in the model's colour order
/// (RGB, BGR or gray), then the network's preprocessing, `channelScale * x + bias[c]` or
/// `x - meanImage[c, h, w]` (NeuralNetworkPreprocessing; channels in the model's order).
///
/// Pixels are 0…255 (GRAY16F: their half-float value). A colour image feeding a gray input is
/// converted with Pillow's integer luma `(19595 R + 38470 G + 7471 B + 32768) >> 16`; a gray
/// image feeding a colour input repeats its one channel; BGRA8's alpha is ignored. An image
/// of a size the model does not take is first resized by its `cropAndScale`.
struct NNImageInput {
    let colorSpace: MLImageColorSpace
    let constraint: MLImageConstraint
    /// Per model channel (R, G, B for RGB; B, G, R for BGR; gray): `x * scale[c] + bias[c]`.
    let scale: [Float]
    let bias: [Float]
    /// `[C, H, W]` at the model's default size, in the model's channel order.
    let meanImage: [Float]?

    init(feature: MLFeatureDescription, preprocessing: CoreML_Specification_NeuralNetworkPreprocessing?) throws {
        let c = feature.imageConstraint!
        constraint = c
        colorSpace = c.colorSpace
        let channels = c.colorSpace.channels
        var scale = [Float](repeating: 1, count: channels)
        var bias = [Float](repeating: 0, count: channels)
        var mean: [Float]?
        switch preprocessing?.preprocessor {
        case .scaler(let s)?:
            scale = [Float](repeating: s.channelScale, count: channels)
            switch c.colorSpace {
            case .rgb: bias = [s.redBias, s.greenBias, s.blueBias]
            case .bgr: bias = [s.blueBias, s.greenBias, s.redBias]
            case .grayscale, .grayscaleFloat16: bias = [s.grayBias]
            }
        case .meanImage(let m)?:
            let want = channels * c.pixelsHigh * c.pixelsWide
            guard m.meanImage.count == want else {
                throw MLModelError(.invalidModel, feature: feature.name, "mean image has \(m.meanImage.count) values, the \(c.pixelsWide)×\(c.pixelsHigh) \(c.colorSpace.rawValue) input needs \(want)")
            }
            mean = m.meanImage
        case nil:
            break
        }
        self.scale = scale
        self.bias = bias
        meanImage = mean
    }

    var defaultShape: NNShape {
        NNShape(c: colorSpace.channels, h: constraint.pixelsHigh, w: constraint.pixelsWide)
    }

    /// The blob shape an image fills: its own size when the model allows it (flexible sizes),
    /// else the model's default size (the image is resized to it). A mean image fixes the size.
    func shape(for image: MLImage) -> NNShape {
        guard meanImage == nil, image.fits(constraint) else { return defaultShape }
        return NNShape(c: colorSpace.channels, h: image.height, w: image.width)
    }

    /// Writes the image's pixels, preprocessed, as C planes of H × W floats; resizes first
    /// when the image's size is not `shape`'s (only then is memory allocated).
    func write(_ image: MLImage, feature: String, shape: NNShape, into out: UnsafeMutablePointer<Float>) throws {
        guard shape.c == bias.count else {
            throw MLModelError.featureType(feature, "image input needs \(bias.count) channel(s), the blob has \(shape.c)")
        }
        if image.width != shape.w || image.height != shape.h {
            let resized = image.resized(width: shape.w, height: shape.h)
            writePixels(resized, shape: shape, into: out)
        } else {
            writePixels(image, shape: shape, into: out)
        }
    }

    private func writePixels(_ image: MLImage, shape: NNShape, into out: UnsafeMutablePointer<Float>) {
        let plane = shape.hw
        image.data.withUnsafeBufferPointer { buffer in
            let px = buffer.baseAddress!
            switch (image.pixelFormat, shape.c) {
            case (.rgb8, 3), (.bgra8, 3):
                // Source byte offsets of the model's channels 0, 1, 2.
                let stride = image.pixelFormat.bytesPerPixel
                let (red, blue) = image.pixelFormat == .rgb8 ? (0, 2) : (2, 0)
                let (o0, o2) = colorSpace == .bgr ? (blue, red) : (red, blue)
                let (d0, d1, d2) = (out, out + plane, out + 2 * plane)
                let (s0, s1, s2) = (scale[0], scale[1], scale[2])
                let (b0, b1, b2) = (bias[0], bias[1], bias[2])
                for i in 0..<plane {
                    let p = px + i * stride
                    d0[i] = Float(p[o0]) * s0 + b0
                    d1[i] = Float(p[1]) * s1 + b1
                    d2[i] = Float(p[o2]) * s2 + b2
                }
            case (.rgb8, _), (.bgra8, _):
                let stride = image.pixelFormat.bytesPerPixel
                let (red, blue) = image.pixelFormat == .rgb8 ? (0, 2) : (2, 0)
                let (s, b) = (scale[0], bias[0])
                for i in 0..<plane {
                    let p = px + i * stride
                    let luma = (19595 * UInt32(p[red]) + 38470 * UInt32(p[1]) + 7471 * UInt32(p[blue]) + 32768) >> 16
                    out[i] = Float(luma) * s + b
                }
            case (.gray8, _):
                for c in 0..<shape.c {
                    let d = out + c * plane
                    let (s, b) = (scale[c], bias[c])
                    for i in 0..<plane { d[i] = Float(px[i]) * s + b }
                }
            case (.gray16f, _):
                let raw = UnsafeRawPointer(px)
                for c in 0..<shape.c {
                    let d = out + c * plane
                    let (s, b) = (scale[c], bias[c])
                    for i in 0..<plane { d[i] = MLImage.half(raw, i) * s + b }
                }
            }
        }
        if let mean = meanImage, mean.count == shape.c * plane {
            mean.withUnsafeBufferPointer { m in
                let m = m.baseAddress!
                for i in 0..<shape.c * plane { out[i] -= m[i] }
            }
        }
    }
}

/// Turns a `[C, H, W]` blob into an image output: values rounded and clamped to 0…255
/// (GRAYSCALE_FLOAT16: kept as half floats).
enum NNImageOutput {
    static func image(_ p: UnsafeMutablePointer<Float>, shape: NNShape, colorSpace: MLImageColorSpace, feature: String) throws -> MLImage {
        let want = colorSpace.channels
        guard shape.c == want, shape.images == 1 else {
            throw MLModelError(.invalidModel, feature: feature, "image output needs \(want) channel(s) of one image, the blob is \(shape)")
        }
        let plane = shape.hw
        // Clamped to 0…255 and rounded; NaN becomes 0.
        func byte(_ v: Float) -> UInt8 { v > 0 ? (v < 255 ? UInt8(v + 0.5) : 255) : 0 }
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
            data = [UInt8](unsafeUninitializedCapacity: plane) { buffer, count in
                for i in 0..<plane { buffer[i] = byte(p[i]) }
                count = plane
            }
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
