import CortadoGRPC
import CortadoModels
@testable import CortadoServer
import Foundation
import XCTest

/// How each Core ML feature type appears as an Open Inference Protocol tensor: datatype and
/// dims (without the batch dimension).
final class TensorMappingTests: XCTestCase {
    private func mapping(_ spec: CoreML_Specification_FeatureDescription) throws -> TensorMapping {
        TensorMapping(try MLFeatureDescription(spec), classLabels: nil, isProbabilities: false)
    }

    private func assertMapping(_ spec: CoreML_Specification_FeatureDescription, _ datatype: String, _ dims: [Int64],
                               file: StaticString = #filePath, line: UInt = #line) throws {
        let m = try mapping(spec)
        XCTAssertEqual(m.datatype, datatype, spec.name, file: file, line: line)
        XCTAssertEqual(m.dims, dims, spec.name, file: file, line: line)
    }

    func testScalars() throws {
        try assertMapping(TestSpecs.int64("i"), "INT64", [1])
        try assertMapping(TestSpecs.double("d"), "FP64", [1])
        try assertMapping(TestSpecs.string("s"), "BYTES", [1])
    }

    func testMultiArrayOfEachType() throws {
        try assertMapping(TestSpecs.array("a", [3, 4], .float32), "FP32", [3, 4])
        try assertMapping(TestSpecs.array("a", [5], .double), "FP64", [5])
        try assertMapping(TestSpecs.array("a", [2, 2], .int32), "INT32", [2, 2])
        try assertMapping(TestSpecs.array("a", [8], .float16), "FP16", [8])
        // No declared type: doubles; no declared shape: one flexible dimension.
        try assertMapping(TestSpecs.array("a", [4], .invalidArrayDataType), "FP64", [4])
        if case .multiArray(let declared) = try mapping(TestSpecs.array("a", [4], .invalidArrayDataType)).kind {
            XCTAssertNil(declared)
        } else { XCTFail("kind") }
        try assertMapping(TestSpecs.array("a", [], .float32), "FP32", [-1])
    }

    func testFlexibleShapes() throws {
        // Ranges: a fixed dimension keeps its size, an open one is -1.
        try assertMapping(TestSpecs.array("a", [1, 3], .float32) {
            var r = CoreML_Specification_ArrayFeatureType.ShapeRange()
            r.sizeRanges = [{ var s = CoreML_Specification_SizeRange(); s.lowerBound = 1; s.upperBound = 1; return s }(),
                            { var s = CoreML_Specification_SizeRange(); s.lowerBound = 1; s.upperBound = -1; return s }()]
            $0.shapeRange = r
        }, "FP32", [1, -1])
        // Enumerated: dimensions equal in every shape keep their size.
        try assertMapping(TestSpecs.array("a", [1, 3], .double) {
            var e = CoreML_Specification_ArrayFeatureType.EnumeratedShapes()
            e.shapes = ([[1, 3], [1, 5], [1, 7]] as [[Int64]]).map { var s = CoreML_Specification_ArrayFeatureType.Shape(); s.shape = $0; return s }
            $0.enumeratedShapes = e
        }, "FP64", [1, -1])
    }

    func testDictionaries() throws {
        try assertMapping(TestSpecs.dictionary("d", int64Keys: false), "BYTES", [1])
        let probabilities = TensorMapping(try MLFeatureDescription(TestSpecs.dictionary("p", int64Keys: false)),
                                          classLabels: .strings(["a", "b", "c"]), isProbabilities: true)
        XCTAssertEqual(probabilities.datatype, "FP64")
        XCTAssertEqual(probabilities.dims, [3])
        // Labels alone do not make a dictionary the probabilities.
        let other = TensorMapping(try MLFeatureDescription(TestSpecs.dictionary("p", int64Keys: true)),
                                  classLabels: .int64s([1, 2]), isProbabilities: false)
        XCTAssertEqual(other.datatype, "BYTES")
    }

    func testSequences() throws {
        try assertMapping(TestSpecs.sequence("s", int64: true), "INT64", [-1])
        try assertMapping(TestSpecs.sequence("s", int64: false), "BYTES", [1])
    }

    func testImages() throws {
        try assertMapping(TestSpecs.image("i", width: 32, height: 24, .rgb), "UINT8", [24, 32, 3])
        try assertMapping(TestSpecs.image("i", width: 32, height: 24, .bgr), "UINT8", [24, 32, 3])
        try assertMapping(TestSpecs.image("i", width: 8, height: 4, .grayscale), "UINT8", [4, 8, 1])
        try assertMapping(TestSpecs.image("i", width: 8, height: 4, .grayscaleFloat16), "FP16", [4, 8, 1])
    }

    /// A classifier's outputs: the label as its type, the probabilities as FP64 [classes].
    func testClassifierOutputs() throws {
        let model = try TestSpecs.model(TestSpecs.classifier(labels: ["cat", "dog"]))
        let outputs = TensorMapping.outputs(of: model)
        XCTAssertEqual(outputs.map(\.name), ["label", "probs"])
        XCTAssertEqual(outputs.map(\.datatype), ["BYTES", "FP64"])
        XCTAssertEqual(outputs.map(\.dims), [[1], [2]])
        XCTAssertEqual(TensorMapping.inputs(of: model).map(\.datatype), ["FP64"])
    }

    func testInputsOfAnIdentityModel() throws {
        let model = try TestSpecs.model(TestSpecs.identity([TestSpecs.int64("i"), TestSpecs.string("s"), TestSpecs.array("a", [2, 3], .float32)]))
        XCTAssertEqual(TensorMapping.inputs(of: model).map { "\($0.name) \($0.datatype) \($0.dims)" },
                       ["i INT64 [1]", "s BYTES [1]", "a FP32 [2, 3]"])
    }

    // MARK: datatype tables

    func testDatatypeNames() {
        for type in MLMultiArrayDataType.allCases {
            XCTAssertEqual(TensorMapping.arrayType(TensorMapping.datatype(type)), type)
            XCTAssertEqual(TensorMapping.elementSize(TensorMapping.datatype(type)), type.size)
        }
        XCTAssertNil(TensorMapping.arrayType("INT64"))
        XCTAssertNil(TensorMapping.arrayType("fp32"))
        XCTAssertEqual(["BOOL", "UINT8", "INT8", "UINT16", "INT16", "FP16", "BF16", "UINT32", "INT32", "FP32", "UINT64", "INT64", "FP64"].map { TensorMapping.elementSize($0) },
                       [1, 1, 1, 2, 2, 2, 2, 4, 4, 4, 8, 8, 8])
        XCTAssertNil(TensorMapping.elementSize("BYTES"))
        XCTAssertNil(TensorMapping.elementSize("STRING"))
    }

    func testByteCountReportsOverflow() {
        XCTAssertEqual(MLMultiArray.byteCount([2, 3], elementSize: 4), 24)
        XCTAssertEqual(MLMultiArray.byteCount([], elementSize: 8), 8)
        XCTAssertEqual(MLMultiArray.byteCount([0, 1 << 62], elementSize: 8), 0)
        XCTAssertNil(MLMultiArray.byteCount([1 << 33, 1 << 33], elementSize: 1))
        XCTAssertNil(MLMultiArray.byteCount([1 << 61], elementSize: 8))
    }

    // MARK: tensor elements

    private func elements<T>(_ values: [T], _ datatype: String) -> TensorElements {
        let box = DataBox(values.withUnsafeBytes { Data($0) })
        return TensorElements(datatype: datatype, shape: [values.count], raw: box.buffer, strings: [], owner: box)
    }

    func testElementsReadEveryDatatype() {
        XCTAssertEqual(elements([1.5, -2.5] as [Double], "FP64").double(at: 1), -2.5)
        XCTAssertEqual(elements([1.5, -2.5] as [Float], "FP32").double(at: 1), -2.5)
        XCTAssertEqual(elements([1.5, -2.5] as [Float16], "FP16").double(at: 1), -2.5)
        XCTAssertEqual(elements([Int64.max, -3], "INT64").int64(at: 0), .max)
        XCTAssertEqual(elements([7, -3] as [Int32], "INT32").int64(at: 1), -3)
        XCTAssertEqual(elements([7, -3] as [Int16], "INT16").double(at: 1), -3)
        XCTAssertEqual(elements([7, -3] as [Int8], "INT8").double(at: 1), -3)
        XCTAssertEqual(elements([UInt64.max], "UINT64").double(at: 0), Double(UInt64.max))
        XCTAssertEqual(elements([40_000] as [UInt16], "UINT16").int64(at: 0), 40_000)
        XCTAssertEqual(elements([200] as [UInt8], "UINT8").int64(at: 0), 200)
        XCTAssertEqual(elements([1, 0] as [UInt8], "BOOL").double(at: 0), 1)
        XCTAssertEqual(elements([2.9, -2.9] as [Double], "FP64").int64(at: 1), -2, "toward zero")
    }

    /// Floats far outside Int64 clamp (as `MLFeatureValue.int64Value` does) instead of trapping;
    /// NaN reads as 0.
    func testElementsClampFloatsToInt64() {
        let e = elements([1e30, -1e30, .infinity, .nan, 9.3e18] as [Double], "FP64")
        XCTAssertEqual(e.int64(at: 0), .max)
        XCTAssertEqual(e.int64(at: 1), .min)
        XCTAssertEqual(e.int64(at: 2), 0)
        XCTAssertEqual(e.int64(at: 3), 0)
        XCTAssertEqual(e.int64(at: 4), .max)
    }

    // MARK: BYTES elements

    func testBytesRoundTrip() throws {
        let strings = ["", "a", "naïve", String(repeating: "x", count: 300)]
        var data: [UInt8] = []
        for s in strings { TensorBytes.append(Array(s.utf8), to: &data) }
        XCTAssertEqual(Array(data.prefix(9)), [0, 0, 0, 0, 1, 0, 0, 0, UInt8(ascii: "a")], "little-endian lengths")
        let split = try data.withUnsafeBytes { (raw) throws(ServeStatus) in try TensorBytes.split(raw, name: "s") }
        XCTAssertEqual(split.map { String(decoding: $0, as: UTF8.self) }, strings)
    }

    func testBytesErrors() {
        let cut: [UInt8] = [5, 0, 0, 0, 1, 2]
        XCTAssertThrowsError(try cut.withUnsafeBytes { (raw) throws(ServeStatus) in try TensorBytes.split(raw, name: "s") }) { error in
            XCTAssertEqual(error as? ServeStatus, ServeStatus(.invalidArgument, "input 's': a BYTES element of 5 bytes runs past the end of the data"))
        }
        let short: [UInt8] = [1, 0, 0, 0, 9, 1, 0]
        XCTAssertThrowsError(try short.withUnsafeBytes { (raw) throws(ServeStatus) in try TensorBytes.split(raw, name: "s") }) { error in
            XCTAssertEqual(error as? ServeStatus, ServeStatus(.invalidArgument, "input 's': BYTES data ends inside an element's length prefix"))
        }
    }
}
