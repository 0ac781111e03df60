import CLibJPEG
import CLibPNG
import Foundation

/// PNG and JPEG for image features: decoding (libpng, libjpeg-turbo) into RGB8 or GRAY8
/// pixels, and PNG encoding for image outputs.
///
/// Decoding keeps the file's samples as they are (no gamma or colour-profile conversion,
/// EXIF orientation ignored), as Pillow does:
/// - PNG: every colour type and depth. Palette and 1/2/4-bit gray expand to 8 bits; 16-bit
///   samples become `round(v * 255 / 65535)`; alpha and tRNS are dropped. Gray (and gray +
///   alpha) gives GRAY8, everything else RGB8.
/// - JPEG: grayscale gives GRAY8, YCbCr gives RGB8 (libjpeg's default islow DCT and fancy
///   upsampling). CMYK is refused. A file that ends early is an error, not a gray-padded image.
///
/// Encoding writes 8-bit PNGs: RGB8 as RGB, GRAY8 as gray, BGRA8 as RGBA (alpha kept).
/// GRAY16F has no PNG form (PNG holds no floats); such images stay in the raw form.
extension MLImage {
    /// Decodes PNG or JPEG bytes (the format is told by the first bytes).
    public init(encoded data: Data, cropAndScale: MLImageCropAndScale = .centerCrop) throws {
        let decoded = try data.withUnsafeBytes { (raw: UnsafeRawBufferPointer) throws -> MLImage in
            let bytes = raw.bindMemory(to: UInt8.self)
            guard let base = bytes.baseAddress, bytes.count > 0 else {
                throw MLModelError(.featureType, "the image data is empty")
            }
            if bytes.count >= 8, bytes[0] == 0x89, bytes[1] == 0x50, bytes[2] == 0x4E, bytes[3] == 0x47 {
                return try Self.decodePNG(base, count: bytes.count)
            }
            if bytes.count >= 3, bytes[0] == 0xFF, bytes[1] == 0xD8, bytes[2] == 0xFF {
                return try Self.decodeJPEG(base, count: bytes.count)
            }
            let head = bytes.prefix(4).map { String(format: "%02x", $0) }.joined(separator: " ")
            throw MLModelError(.featureType, "the data is neither a PNG nor a JPEG image (it starts with \(head))")
        }
        self = decoded
        self.cropAndScale = cropAndScale
    }

    /// Reads and decodes a PNG or JPEG file.
    public init(contentsOf url: URL, cropAndScale: MLImageCropAndScale = .centerCrop) throws {
        let path = url.path
        var isFolder: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isFolder) else {
            throw MLModelError(.io, "image file '\(path)' does not exist")
        }
        guard !isFolder.boolValue else { throw MLModelError(.io, "image path '\(path)' is a folder, not a file") }
        let data: Data
        do {
            data = try Data(contentsOf: url)
        } catch {
            throw MLModelError(.io, "cannot read image file '\(path)': \(error.localizedDescription)")
        }
        do {
            try self.init(encoded: data, cropAndScale: cropAndScale)
        } catch let e as MLModelError {
            throw MLModelError(e.code, "image file '\(path)': \(e.message)")
        }
    }

    /// The image as a PNG file (8 bits per sample, zlib level `compressionLevel`, 0…9).
    /// Throws for GRAY16F, which has no PNG form.
    public func pngData(compressionLevel: Int = 1) throws -> Data {
        let channels: Int32
        var bgr: Int32 = 0
        switch pixelFormat {
        case .rgb8: channels = 3
        case .gray8: channels = 1
        case .bgra8: channels = 4; bgr = 1
        case .gray16f: throw MLModelError(.featureType, "GRAY16F images have no PNG form (PNG holds no half floats); use the raw form")
        }
        var out = cortado_png_buffer()
        var message = [CChar](repeating: 0, count: 256)
        let level = Int32(Swift.max(0, Swift.min(9, compressionLevel)))
        let ok = data.withUnsafeBufferPointer { px in
            message.withUnsafeMutableBufferPointer { m in
                cortado_png_encode(px.baseAddress, Int32(width), Int32(height), channels, bgr, level, &out, m.baseAddress)
            }
        }
        guard ok != 0, let bytes = out.bytes else {
            throw MLModelError(.generic, "PNG encoding failed: \(String(decoding: message.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))")
        }
        defer { free(bytes) }
        return Data(bytes: bytes, count: out.count)
    }

    // MARK: Decoders

    private static func decodePNG(_ bytes: UnsafePointer<UInt8>, count: Int) throws -> MLImage {
        let reader = UnsafeMutablePointer<cortado_png_reader>.allocate(capacity: 1)
        defer { reader.deallocate() }
        let began = cortado_png_begin(reader, bytes, count) != 0
        defer { cortado_png_end(reader) }
        guard began else { throw failure("PNG", &reader.pointee.message) }
        let (w, h, channels) = (Int(reader.pointee.width), Int(reader.pointee.height), Int(reader.pointee.channels))
        var ok = false
        let pixels = [UInt8](unsafeUninitializedCapacity: w * h * channels) { buffer, initialized in
            ok = cortado_png_finish(reader, buffer.baseAddress) != 0
            initialized = ok ? w * h * channels : 0
        }
        guard ok else { throw failure("PNG", &reader.pointee.message) }
        return try MLImage(width: w, height: h, pixelFormat: channels == 1 ? .gray8 : .rgb8, data: pixels)
    }

    private static func decodeJPEG(_ bytes: UnsafePointer<UInt8>, count: Int) throws -> MLImage {
        let reader = UnsafeMutablePointer<cortado_jpeg_reader>.allocate(capacity: 1)
        defer { reader.deallocate() }
        let began = cortado_jpeg_begin(reader, bytes, count) != 0
        defer { cortado_jpeg_end(reader) }
        guard began else { throw failure("JPEG", &reader.pointee.error.message) }
        let (w, h, channels) = (Int(reader.pointee.width), Int(reader.pointee.height), Int(reader.pointee.channels))
        var ok = false
        let pixels = [UInt8](unsafeUninitializedCapacity: w * h * channels) { buffer, initialized in
            ok = cortado_jpeg_finish(reader, buffer.baseAddress) != 0
            initialized = ok ? w * h * channels : 0
        }
        guard ok else { throw failure("JPEG", &reader.pointee.error.message) }
        return try MLImage(width: w, height: h, pixelFormat: channels == 1 ? .gray8 : .rgb8, data: pixels)
    }

    /// An error carrying the C library's message (a fixed-size char array in the reader).
    private static func failure<T>(_ format: String, _ message: inout T) -> MLModelError {
        let text = withUnsafeBytes(of: &message) { raw -> String in
            let chars = raw.bindMemory(to: CChar.self)
            let end = chars.firstIndex(of: 0) ?? chars.count
            return String(decoding: raw.prefix(end), as: UTF8.self)
        }
        return MLModelError(.featureType, "invalid \(format) data: \(text.isEmpty ? "decoding failed" : text)")
    }
}
