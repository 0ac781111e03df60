import CortadoSpec
import Foundation
import XCTest
@testable import CortadoCore

/// PNG/JPEG codec round trips and error paths, resizing, and the image JSON forms.
final class ImageTests: XCTestCase {
    /// A 16 × 8 RGB JPEG (Pillow, quality 95): red = 16x, green = 32y, blue = 128.
    static let jpegBase64 = "/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAAIBAQEBAQIBAQECAgICAgQDAgICAgUEBAMEBgUGBgYFBgYGBwkIBgcJBwYGCAsICQoKCgoKBggLDAsKDAkKCgr/2wBDAQICAgICAgUDAwUKBwYHCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgr/wAARCAAIABADASIAAhEBAxEB/8QAHwAAAQUBAQEBAQEAAAAAAAAAAAECAwQFBgcICQoL/8QAtRAAAgEDAwIEAwUFBAQAAAF9AQIDAAQRBRIhMUEGE1FhByJxFDKBkaEII0KxwRVS0fAkM2JyggkKFhcYGRolJicoKSo0NTY3ODk6Q0RFRkdISUpTVFVWV1hZWmNkZWZnaGlqc3R1dnd4eXqDhIWGh4iJipKTlJWWl5iZmqKjpKWmp6ipqrKztLW2t7i5usLDxMXGx8jJytLT1NXW19jZ2uHi4+Tl5ufo6erx8vP09fb3+Pn6/8QAHwEAAwEBAQEBAQEBAQAAAAAAAAECAwQFBgcICQoL/8QAtREAAgECBAQDBAcFBAQAAQJ3AAECAxEEBSExBhJBUQdhcRMiMoEIFEKRobHBCSMzUvAVYnLRChYkNOEl8RcYGRomJygpKjU2Nzg5OkNERUZHSElKU1RVVldYWVpjZGVmZ2hpanN0dXZ3eHl6goOEhYaHiImKkpOUlZaXmJmaoqOkpaanqKmqsrO0tba3uLm6wsPExcbHyMnK0tPU1dbX2Nna4uPk5ebn6Onq8vP09fb3+Pn6/9oADAMBAAIRAxEAPwDwP4Uf8Eqf9UB4b9P+WVfTPwo/4JU/6r/im/T/AJZUUV81xj4m8X+9+/8Az/zPzn6NvjFx5+5/2nt38vM//9k="

    func pattern(_ w: Int, _ h: Int, _ channels: Int) -> [UInt8] {
        (0..<(w * h * channels)).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ $0 / 7) }
    }

    func assertFails(_ body: () throws -> Void, containing text: String, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertThrowsError(try body(), file: file, line: line) { error in
            XCTAssertTrue("\(error)".contains(text), "\(error) does not mention \(text)", file: file, line: line)
        }
    }

    // MARK: Codec

    func testPNGRoundTripRGBAndGray() throws {
        for (format, channels) in [(MLImagePixelFormat.rgb8, 3), (.gray8, 1)] {
            let image = try MLImage(width: 13, height: 7, pixelFormat: format, data: pattern(13, 7, channels))
            for level in [0, 1, 9] {
                let png = try image.pngData(compressionLevel: level)
                XCTAssertEqual(Array(png.prefix(4)), [0x89, 0x50, 0x4E, 0x47])
                XCTAssertEqual(try MLImage(encoded: png), image, "\(format) level \(level)")
            }
        }
    }

    func testBGRAEncodesAsRGBAAndDecodesToRGB() throws {
        let bgra = pattern(5, 4, 4)
        let image = try MLImage(width: 5, height: 4, pixelFormat: .bgra8, data: bgra)
        let back = try MLImage(encoded: image.pngData())
        XCTAssertEqual(back.pixelFormat, .rgb8)
        var rgb: [UInt8] = []
        for i in 0..<20 { rgb += [bgra[4 * i + 2], bgra[4 * i + 1], bgra[4 * i]] }
        XCTAssertEqual(back.data, rgb)
    }

    func testGray16FHasNoPNGForm() throws {
        let image = try MLImage(width: 2, height: 1, pixelFormat: .gray16f, data: [0, 0x3c, 0, 0x40])
        assertFails({ _ = try image.pngData() }, containing: "GRAY16F")
    }

    func testJPEGDecodes() throws {
        let image = try MLImage(encoded: Data(base64Encoded: Self.jpegBase64)!)
        XCTAssertEqual(image.width, 16)
        XCTAssertEqual(image.height, 8)
        XCTAssertEqual(image.pixelFormat, .rgb8)
        for (x, y) in [(5, 3), (12, 6), (1, 1)] {
            let p = 3 * (y * 16 + x)
            XCTAssertEqual(Double(image.data[p]), Double(16 * x), accuracy: 8)
            XCTAssertEqual(Double(image.data[p + 1]), Double(32 * y), accuracy: 8)
            XCTAssertEqual(Double(image.data[p + 2]), 128, accuracy: 8)
        }
    }

    func testCorruptAndTruncatedData() throws {
        let png = try MLImage(width: 9, height: 9, pixelFormat: .rgb8, data: pattern(9, 9, 3)).pngData()
        assertFails({ _ = try MLImage(encoded: png.prefix(png.count / 2)) }, containing: "invalid PNG data")
        assertFails({ _ = try MLImage(encoded: png.prefix(20)) }, containing: "truncated PNG")
        var corrupt = png
        corrupt[45] ^= 0xff
        assertFails({ _ = try MLImage(encoded: corrupt) }, containing: "invalid PNG data")
        let jpeg = Data(base64Encoded: Self.jpegBase64)!
        assertFails({ _ = try MLImage(encoded: jpeg.prefix(jpeg.count - 40)) }, containing: "Premature end of JPEG file")
        assertFails({ _ = try MLImage(encoded: jpeg.prefix(10)) }, containing: "invalid JPEG data")
        assertFails({ _ = try MLImage(encoded: Data()) }, containing: "empty")
        assertFails({ _ = try MLImage(encoded: Data("GIF89a".utf8)) }, containing: "neither a PNG nor a JPEG")
    }

    func testFiles() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("cortado-image-\(UUID())")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let image = try MLImage(width: 3, height: 2, pixelFormat: .gray8, data: [1, 2, 3, 4, 5, 6])
        let file = folder.appendingPathComponent("a.png")
        try image.pngData().write(to: file)
        XCTAssertEqual(try MLImage(contentsOf: file, cropAndScale: .scaleFit).cropAndScale, .scaleFit)
        XCTAssertEqual(try MLImage(contentsOf: file).data, image.data)
        assertFails({ _ = try MLImage(contentsOf: folder.appendingPathComponent("missing.png")) }, containing: "does not exist")
        assertFails({ _ = try MLImage(contentsOf: folder) }, containing: "is a folder")
        try Data("not an image".utf8).write(to: folder.appendingPathComponent("b.png"))
        assertFails({ _ = try MLImage(contentsOf: folder.appendingPathComponent("b.png")) }, containing: "b.png")
    }

    // MARK: Resize

    func testResizeModes() throws {
        // A uniform 10 × 4 image stays uniform in every mode; scaleFit leaves a zero border.
        let image = try MLImage(width: 10, height: 4, pixelFormat: .rgb8, data: [UInt8](repeating: 200, count: 120))
        XCTAssertEqual(image.resized(width: 10, height: 4), image)
        XCTAssertEqual(image.resized(width: 5, height: 5, mode: .centerCrop).data, [UInt8](repeating: 200, count: 75))
        XCTAssertEqual(image.resized(width: 5, height: 5, mode: .scaleFill).data, [UInt8](repeating: 200, count: 75))
        let fit = image.resized(width: 5, height: 5, mode: .scaleFit)  // a 5 × 2 picture in rows 1…2
        for y in 0..<5 {
            let row = Array(fit.data[(15 * y)..<(15 * y + 15)])
            XCTAssertEqual(row, [UInt8](repeating: (1...2).contains(y) ? 200 : 0, count: 15), "row \(y)")
        }
        // Half-pixel centres: doubling a 2-pixel ramp gives 0, 64, 191, 255 (quarter steps).
        let ramp = try MLImage(width: 2, height: 1, pixelFormat: .gray8, data: [0, 255])
        XCTAssertEqual(ramp.resized(width: 4, height: 1, mode: .scaleFill).data, [0, 64, 191, 255])
        // The mode travels with the value.
        var tagged = ramp
        tagged.cropAndScale = .scaleFit
        // 2 × 1 → 4 × 4 fits as a 4 × 2 picture in rows 1…2.
        XCTAssertEqual(tagged.resized(width: 4, height: 4).data, [0, 0, 0, 0] + [0, 64, 191, 255] + [0, 64, 191, 255] + [0, 0, 0, 0])
    }

    func testFitsConstraint() throws {
        var c = MLImageConstraint(pixelsWide: 8, pixelsHigh: 6, colorSpace: .rgb, enumeratedSizes: [], widthRange: nil, heightRange: nil)
        let image = try MLImage(width: 4, height: 3, pixelFormat: .gray8, data: [UInt8](repeating: 0, count: 12))
        XCTAssertFalse(image.fits(c))
        c.enumeratedSizes = [(width: 4, height: 3)]
        XCTAssertTrue(image.fits(c))
        c.enumeratedSizes = []
        c.widthRange = 1...4
        c.heightRange = 3...9
        XCTAssertTrue(image.fits(c))
    }

    // MARK: JSON

    func imageFeature() throws -> MLFeatureDescription {
        var f = CoreML_Specification_FeatureDescription()
        f.name = "img"
        var t = CoreML_Specification_ImageFeatureType()
        t.width = 4
        t.height = 4
        t.colorSpace = .rgb
        f.type.imageType = t
        return try MLFeatureDescription(f)
    }

    func testJSONForms() throws {
        let feature = try imageFeature()
        let image = try MLImage(width: 3, height: 2, pixelFormat: .rgb8, data: pattern(3, 2, 3))
        let png = try image.pngData()
        let object: [String: Any] = ["base64": png.base64EncodedString(), "cropAndScale": "scaleFill"]
        let decoded = try MLFeatureJSON.decode(object, as: feature).imageValue!
        XCTAssertEqual(decoded.data, image.data)
        XCTAssertEqual(decoded.cropAndScale, .scaleFill)
        XCTAssertNoThrow(try feature.validate(MLFeatureValue(image: decoded)), "other sizes are resized, not rejected")

        var text = ""
        MLFeatureJSON.encode(MLFeatureValue(image: image), into: &text)
        let written = try JSONSerialization.jsonObject(with: Data(text.utf8)) as! [String: Any]
        XCTAssertEqual(written["pixelFormat"] as? String, "RGB8")
        XCTAssertNil(written["data"])
        XCTAssertEqual(try MLFeatureJSON.decode(written, as: feature).imageValue!.data, image.data, "a PNG output reads back")

        text = ""
        MLFeatureJSON.encode(MLFeatureValue(image: image), into: &text, images: .raw)
        let rawForm = try JSONSerialization.jsonObject(with: Data(text.utf8)) as! [String: Any]
        XCTAssertEqual(try MLFeatureJSON.decode(rawForm, as: feature).imageValue, image)

        let half = try MLImage(width: 2, height: 1, pixelFormat: .gray16f, data: [0x00, 0x3c, 0x00, 0xc1])  // 1, -2.5
        text = ""
        MLFeatureJSON.encode(MLFeatureValue(image: half), into: &text)
        XCTAssertEqual(text, #"{"width":2,"height":1,"pixelFormat":"GRAY16F","data":[1.0,-2.5]}"#)
        XCTAssertEqual(try MLFeatureJSON.decode(JSONSerialization.jsonObject(with: Data(text.utf8)), as: feature).imageValue, half)
    }

    func testJSONErrorsNameTheFeature() throws {
        let feature = try imageFeature()
        for (object, text) in [
            (["path": "/nonexistent/x.png"], "does not exist"),
            (["base64": "@@@"], "base64"),
            (["base64": Data("nope".utf8).base64EncodedString()], "neither a PNG nor a JPEG"),
            (["width": 1, "height": 1, "pixelFormat": "RGB8", "data": [1, 2, 3], "cropAndScale": "crop"], "cropAndScale"),
        ] as [([String: Any], String)] {
            XCTAssertThrowsError(try MLFeatureJSON.decode(object, as: feature)) { error in
                let e = error as! MLModelError
                XCTAssertEqual(e.feature, "img")
                XCTAssertTrue(e.message.contains(text), e.message)
            }
        }
    }
}
