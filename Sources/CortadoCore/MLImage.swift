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

/// What to do when an image's size is not one the model takes (Vision's
/// `VNImageCropAndScaleOption`). Every mode samples bilinearly (see `MLImage.resized`).
public enum MLImageCropAndScale: String, Sendable, CaseIterable {
    /// Scale so the shorter side fits, then keep the centre (the longer side is cropped).
    case centerCrop
    /// Scale so the whole image fits inside, centred; the uncovered border is zero.
    case scaleFit
    /// Stretch to the size; the aspect ratio is not kept.
    case scaleFill
}

/// Decoded pixels of one image, row-major, rows packed without padding.
///
/// Build one from raw pixels, or decode a PNG or JPEG with `init(encoded:)` or
/// `init(contentsOf:)` (MLImage+Codec.swift). `cropAndScale` travels with the value and says
/// how a model resizes it when its size is not one the model takes.
public struct MLImage: Sendable, Equatable {
    public var width: Int
    public var height: Int
    public var pixelFormat: MLImagePixelFormat
    /// `width * height * pixelFormat.bytesPerPixel` bytes (GRAY16F: little-endian halves).
    public var data: [UInt8]
    /// How to fit the image to a model input of another size.
    public var cropAndScale: MLImageCropAndScale

    public init(width: Int, height: Int, pixelFormat: MLImagePixelFormat, data: [UInt8], cropAndScale: MLImageCropAndScale = .centerCrop) throws {
        let expected = width * height * pixelFormat.bytesPerPixel
        guard width > 0, height > 0, data.count == expected else {
            throw MLModelError(.featureType, "image of \(width)×\(height) \(pixelFormat.rawValue) needs \(expected) bytes, got \(data.count)")
        }
        self.width = width
        self.height = height
        self.pixelFormat = pixelFormat
        self.data = data
        self.cropAndScale = cropAndScale
    }

    /// The `i`-th little-endian half float of `raw` (a GRAY16F pixel, or half-float weights).
    @inline(__always) public static func half(_ raw: UnsafeRawPointer, _ i: Int) -> Float {
        Float(Float16(bitPattern: UInt16(littleEndian: raw.loadUnaligned(fromByteOffset: 2 * i, as: UInt16.self))))
    }

    /// Whether the size is one `constraint` allows as it is (no resizing).
    public func fits(_ constraint: MLImageConstraint) -> Bool {
        if !constraint.enumeratedSizes.isEmpty {
            return constraint.enumeratedSizes.contains { $0.width == width && $0.height == height }
        }
        if let w = constraint.widthRange, let h = constraint.heightRange {
            return w.contains(width) && h.contains(height)
        }
        return width == constraint.pixelsWide && height == constraint.pixelsHigh
    }
}
