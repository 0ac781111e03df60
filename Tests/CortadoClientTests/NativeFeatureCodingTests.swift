import CortadoGRPC
import CortadoModels
import CortadoNativeCoding
import CortadoServerProtos
import Foundation
import XCTest

/// `cortado.v1` feature values ↔ Core ML values: every type round-trips through the wire
/// bytes; multi-arrays keep their element type and their exact bytes.
final class NativeFeatureCodingTests: XCTestCase {
    /// encode → serialize → parse → decode.
    private func roundTrip(_ value: MLFeatureValue, expected: MLFeatureDescription? = nil) throws -> MLFeatureValue {
        let wire = try NativeFeatureCoding.encode(value).serializedData()
        return try NativeFeatureCoding.decode(try Cortado_V1_FeatureValue(serializedBytes: wire), name: "f", expected: expected)
    }

    private func bytes(_ a: MLMultiArray) -> [UInt8] {
        Array(UnsafeRawBufferPointer(start: a.dataPointer, count: a.count * a.dataType.size))
    }

    func testScalars() throws {
        XCTAssertEqual(try roundTrip(MLFeatureValue(int64: .min)).int64Value, .min)
        XCTAssertEqual(try roundTrip(MLFeatureValue(int64: 1 << 62 + 1)).int64Value, 1 << 62 + 1)
        XCTAssertEqual(try roundTrip(MLFeatureValue(double: -0.1)).doubleValue, -0.1)
        XCTAssertEqual(try roundTrip(MLFeatureValue(double: .greatestFiniteMagnitude)).doubleValue, .greatestFiniteMagnitude)
        XCTAssertEqual(try roundTrip(MLFeatureValue(double: -0.0)).doubleValue.sign, .minus)
        XCTAssertTrue(try roundTrip(MLFeatureValue(double: .nan)).doubleValue.isNaN)
        XCTAssertEqual(try roundTrip(MLFeatureValue(string: "naïve 模型 🙂")).stringValue, "naïve 模型 🙂")
        XCTAssertEqual(try roundTrip(MLFeatureValue(string: "")).stringValue, "")
    }

    /// Each element type keeps its type, shape and bytes.
    func testMultiArrayOfEveryType() throws {
        for type in MLMultiArrayDataType.allCases {
            let a = try MLMultiArray([1.5, -2, 0, 3.25, 1e4, -7], shape: [2, 3], dataType: type)
            let wire = NativeFeatureCoding.encode(MLFeatureValue(multiArray: a))
            XCTAssertEqual(wire.multiArray.dataType, NativeFeatureCoding.wireType(type))
            XCTAssertEqual(wire.multiArray.shape, [2, 3])
            XCTAssertEqual(wire.multiArray.data.count, 6 * type.size)
            let back = try XCTUnwrap(try roundTrip(MLFeatureValue(multiArray: a)).multiArrayValue)
            XCTAssertEqual(back.dataType, type)
            XCTAssertEqual(back.shape, [2, 3])
            XCTAssertEqual(bytes(back), bytes(a), "\(type)")
        }
    }

    /// Float16 travels as its 2-byte values: NaN payloads, subnormals, -0 and infinities untouched.
    func testFloat16BytesAreUntouched() throws {
        let bits: [UInt16] = [0x7E01, 0x7C01, 0xFE55, 0x0001, 0x8001, 0x8000, 0x7C00, 0xFC00, 0x3C00, 0x7BFF]
        let a = try MLMultiArray(shape: [bits.count], dataType: .float16)
        bits.withUnsafeBytes { a.dataPointer.copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
        let wire = NativeFeatureCoding.encode(MLFeatureValue(multiArray: a))
        XCTAssertEqual(wire.multiArray.dataType, .float16)
        XCTAssertEqual([UInt8](wire.multiArray.data), bits.withUnsafeBytes { Array($0) })
        let back = try XCTUnwrap(try roundTrip(MLFeatureValue(multiArray: a)).multiArrayValue)
        XCTAssertEqual(back.dataType, .float16)
        XCTAssertEqual(bytes(back), bytes(a))
    }

    func testEmptyAndScalarShapedArrays() throws {
        let empty = try MLMultiArray(shape: [0, 3], dataType: .float32)
        let back = try XCTUnwrap(try roundTrip(MLFeatureValue(multiArray: empty)).multiArrayValue)
        XCTAssertEqual(back.shape, [0, 3])
        XCTAssertEqual(back.count, 0)
    }

    /// A non-contiguous array is sent in row-major order.
    func testStridedArrayIsSentRowMajor() throws {
        var storage: [Double] = [1, 4, 2, 5, 3, 6]  // column-major 2×3
        let wire = try storage.withUnsafeMutableBytes { raw -> Cortado_V1_FeatureValue in
            let a = try MLMultiArray(dataPointer: raw.baseAddress!, shape: [2, 3], dataType: .double, strides: [1, 2])
            return NativeFeatureCoding.encode(MLFeatureValue(multiArray: a))
        }
        let values = wire.multiArray.data.withUnsafeBytes { Array($0.bindMemory(to: Double.self)) }
        XCTAssertEqual(values, [1, 2, 3, 4, 5, 6])
    }

    func testDictionaries() throws {
        let strings = MLFeatureDictionary.stringKeyed(["b": 0.25, "a": 0.75, "ü": -1])
        XCTAssertEqual(try roundTrip(MLFeatureValue(dictionary: strings)).dictionary, strings)
        let ints = MLFeatureDictionary.int64Keyed([3: 0.5, -1: 0.5, .max: 1])
        XCTAssertEqual(try roundTrip(MLFeatureValue(dictionary: ints)).dictionary, ints)
        // Keys are sent sorted, so the bytes are deterministic.
        XCTAssertEqual(NativeFeatureCoding.encode(MLFeatureValue(dictionary: strings)).dictionary.stringKeys, ["a", "b", "ü"])
        XCTAssertEqual(NativeFeatureCoding.encode(MLFeatureValue(dictionary: ints)).dictionary.int64Keys, [-1, 3, .max])
    }

    func testSequences() throws {
        XCTAssertEqual(try roundTrip(MLFeatureValue(sequence: MLSequence(int64s: [3, -1, .max]))).sequenceValue, MLSequence(int64s: [3, -1, .max]))
        XCTAssertEqual(try roundTrip(MLFeatureValue(sequence: MLSequence(strings: ["x", "", "y"]))).sequenceValue, MLSequence(strings: ["x", "", "y"]))
        // An empty sequence has no element type on the wire: the description decides.
        let strings = try MLFeatureDescription(CodingSpecs.sequence("f", int64: false))
        XCTAssertEqual(try roundTrip(MLFeatureValue(sequence: MLSequence(strings: [])), expected: strings).sequenceValue, MLSequence(strings: []))
        XCTAssertEqual(try roundTrip(MLFeatureValue(sequence: MLSequence(strings: []))).sequenceValue, MLSequence(int64s: []))
    }

    func testImagesOfEveryPixelFormat() throws {
        for format in MLImagePixelFormat.allCases {
            let data = (0..<(3 * 2 * format.bytesPerPixel)).map { UInt8(truncatingIfNeeded: $0 * 37) }
            let image = try MLImage(width: 3, height: 2, pixelFormat: format, data: data)
            XCTAssertEqual(try roundTrip(MLFeatureValue(image: image)).imageValue, image, format.rawValue)
        }
    }

    func testUndefinedValue() throws {
        XCTAssertNil(NativeFeatureCoding.encode(MLFeatureValue(undefined: .double)).kind)
        let expected = MLFeatureDescription(name: "f", type: .double, isOptional: true)
        XCTAssertTrue(try roundTrip(MLFeatureValue(undefined: .double), expected: expected).isUndefined)
        XCTAssertThrowsError(try roundTrip(MLFeatureValue(undefined: .double))) { error in
            XCTAssertEqual(error as? GRPCStatus, GRPCStatus(.invalidArgument, "input 'f': no value"))
        }
    }

    // MARK: decoding errors and defaults

    private func decode(_ build: (inout Cortado_V1_FeatureValue) -> Void, expected: MLFeatureDescription? = nil) throws -> MLFeatureValue {
        var v = Cortado_V1_FeatureValue()
        build(&v)
        return try NativeFeatureCoding.decode(v, name: "f", expected: expected)
    }

    func testArrayTypeFallsBackToTheDescriptionThenDouble() throws {
        let described = try MLFeatureDescription(CodingSpecs.array("f", [2], .int32))
        let eight = Data(count: 8)
        XCTAssertEqual(try decode({ $0.multiArray.shape = [2]; $0.multiArray.data = eight }, expected: described).multiArrayValue?.dataType, .int32)
        XCTAssertEqual(try decode({ $0.multiArray.shape = [1]; $0.multiArray.data = eight }).multiArrayValue?.dataType, .double)
    }

    func testArrayDataSizeMismatch() {
        XCTAssertThrowsError(try decode { $0.multiArray.dataType = .float32; $0.multiArray.shape = [3]; $0.multiArray.data = Data(count: 8) }) { error in
            XCTAssertEqual(error as? GRPCStatus, GRPCStatus(.invalidArgument, "input 'f': shape [3] of FLOAT32 needs 12 bytes of data, got 8"))
        }
        XCTAssertThrowsError(try decode { $0.multiArray.shape = [-1]; $0.multiArray.data = Data() }) { error in
            XCTAssertEqual((error as? GRPCStatus)?.code, .invalidArgument)
        }
    }

    /// A shape whose element count overflows is a bad request, not a crash.
    func testHugeShapeIsInvalidArgument() {
        XCTAssertThrowsError(try decode { $0.multiArray.dataType = .float32; $0.multiArray.shape = [1 << 40, 1 << 40]; $0.multiArray.data = Data(count: 4) }) { error in
            XCTAssertEqual((error as? GRPCStatus)?.code, .invalidArgument)
        }
        XCTAssertThrowsError(try decode { $0.multiArray.dataType = .double; $0.multiArray.shape = [1 << 61]; $0.multiArray.data = Data(count: 8) }) { error in
            XCTAssertEqual((error as? GRPCStatus)?.code, .invalidArgument)
        }
    }

    func testDictionaryKeyValueMismatch() {
        XCTAssertThrowsError(try decode { $0.dictionary.stringKeys = ["a", "b"]; $0.dictionary.values = [1] }) { error in
            XCTAssertEqual(error as? GRPCStatus, GRPCStatus(.invalidArgument, "input 'f': dictionary has 2 keys and 1 values"))
        }
        XCTAssertThrowsError(try decode { $0.dictionary.int64Keys = [1]; $0.dictionary.values = [1, 2] })
    }

    /// PNG bytes in `Image.encoded` decode to the pixels they were written from.
    func testEncodedImageDecodes() throws {
        let pixels: [UInt8] = (0..<(3 * 2 * 3)).map { UInt8($0 * 13 % 256) }
        let image = try MLImage(width: 3, height: 2, pixelFormat: .rgb8, data: pixels)
        let png = try image.pngData()
        let decoded = try decode { $0.image.encoded = png }.imageValue
        XCTAssertEqual(decoded?.pixelFormat, .rgb8)
        XCTAssertEqual(decoded?.width, 3)
        XCTAssertEqual(decoded?.height, 2)
        XCTAssertEqual(decoded?.data, pixels)
    }

    func testImageErrors() {
        XCTAssertThrowsError(try decode { $0.image.width = 1; $0.image.height = 1; $0.image.data = Data([1]) }) { error in
            XCTAssertEqual(error as? GRPCStatus, GRPCStatus(.invalidArgument, "input 'f': image has no pixel format"))
        }
        // Encoded images are decoded now: a truncated PNG signature is neither PNG nor JPEG.
        XCTAssertThrowsError(try decode { $0.image.encoded = Data([0x89, 0x50]) }) { error in
            XCTAssertEqual((error as? GRPCStatus)?.code, .invalidArgument)
            XCTAssertTrue("\(error)".contains("input 'f'") && "\(error)".contains("neither a PNG nor a JPEG"), "\(error)")
        }
        XCTAssertThrowsError(try decode { $0.image.width = 2; $0.image.height = 2; $0.image.pixelFormat = .rgb8; $0.image.data = Data(count: 3) }) { error in
            XCTAssertEqual((error as? GRPCStatus)?.code, .invalidArgument)
        }
    }
}

/// The feature descriptions these tests need, built with the generated Core ML types.
private enum CodingSpecs {
    static func sequence(_ name: String, int64: Bool) -> CoreML_Specification_FeatureDescription {
        var feature = CoreML_Specification_FeatureDescription()
        feature.name = name
        var sequence = CoreML_Specification_SequenceFeatureType()
        if int64 { sequence.int64Type = .init() } else { sequence.stringType = .init() }
        feature.type.sequenceType = sequence
        return feature
    }

    static func array(_ name: String, _ shape: [Int64], _ type: CoreML_Specification_ArrayFeatureType.ArrayDataType)
        -> CoreML_Specification_FeatureDescription {
        var feature = CoreML_Specification_FeatureDescription()
        feature.name = name
        var array = CoreML_Specification_ArrayFeatureType()
        array.shape = shape
        array.dataType = type
        feature.type.multiArrayType = array
        return feature
    }
}
