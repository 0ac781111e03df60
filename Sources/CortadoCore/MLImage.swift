/// Pixel layouts an image feature can carry. CoreML.framework uses CVPixelBuffer,
/// which Linux does not have; Cortado carries decoded pixels in this value type.
public enum MLImagePixelFormat: String, Sendable, CaseIterable {
    /// 8-bit red, green, blue, interleaved.
    case rgb8 = "RGB8"
    /// 8-bit blue, green, red, alpha, interleaved (CoreML's kCVPixelFormatType_32BGRA).
    case bgra8 = "BGRA8"
    /// 8-bit grayscale.
    case gray8 = "GRAY8"
    /// 16-bit float grayscale (Core ML's GRAYSCALE_FLOAT16 colour space).
    case gray16f = "GRAY16F"

    public var bytesPerPixel: Int {
        switch self {
        case .rgb8: return 3
        case .bgra8: return 4
        case .gray8: return 1
        case .gray16f: return 2
        }
    }
}

/// Decoded pixels of one image, row-major, rows packed without padding.
public struct MLImage: Sendable, Equatable {
    public var width: Int
    public var height: Int
    public var pixelFormat: MLImagePixelFormat
    /// `width * height * pixelFormat.bytesPerPixel` bytes.
    public var data: [UInt8]

    public init(width: Int, height: Int, pixelFormat: MLImagePixelFormat, data: [UInt8]) throws {
        let expected = width * height * pixelFormat.bytesPerPixel
        guard width > 0, height > 0, data.count == expected else {
            throw MLModelError(.featureType, "image of \(width)×\(height) \(pixelFormat.rawValue) needs \(expected) bytes, got \(data.count)")
        }
        self.width = width
        self.height = height
        self.pixelFormat = pixelFormat
        self.data = data
    }
}
