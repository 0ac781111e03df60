import CortadoGRPC
import CortadoModels
@testable import CortadoServer
import CortadoServerProtos
import Foundation
import SwiftProtobuf
import XCTest

/// The loop thread's look at a request: model name and version from fields 1 and 2, every
/// other field skipped by its wire type, malformed bytes refused.
final class ProtobufPeekTests: XCTestCase {
    func testReadsNameAndVersionPastOtherFields() throws {
        var request = Inference_ModelInferRequest()
        request.id = "call-7"
        var t = Inference_ModelInferRequest.InferInputTensor()
        t.name = "x"
        t.datatype = "FP64"
        t.shape = [1, 3]
        request.inputs = [t]
        request.rawInputContents = [Data(repeating: 0xff, count: 300)]
        var p = Inference_InferParameter()
        p.int64Param = -5
        request.parameters["priority"] = p
        request.modelName = "iris"
        request.modelVersion = "3"
        let ref = try ProtobufPeek.modelRef(try request.serializedBytes(), message: "ModelInferRequest")
        XCTAssertEqual(ref, .init(name: "iris", version: "3"))

        var predict = Cortado_V1_PredictRequest()
        predict.model = "mlp"
        XCTAssertEqual(try ProtobufPeek.modelRef(try predict.serializedBytes(), message: "PredictRequest"), .init(name: "mlp", version: ""))
        XCTAssertEqual(try ProtobufPeek.modelRef([], message: "PredictRequest"), .init())
    }

    func testFixedWidthFieldsAndRepeatsAreHandled() throws {
        // Field 9 fixed64, field 10 fixed32, field 11 varint, then field 1 twice (the last wins).
        let bytes: [UInt8] = [0x49] + [UInt8](repeating: 1, count: 8) + [0x55, 1, 2, 3, 4, 0x58, 0x96, 0x01,
                              0x0a, 0x01, 0x61, 0x0a, 0x02, 0x62, 0x63]
        XCTAssertEqual(try ProtobufPeek.modelRef(bytes, message: "M"), .init(name: "bc", version: ""))
    }

    func testMalformedBytesAreInvalidArgument() {
        for bytes: [UInt8] in [[0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x01], [0x0a, 0x05, 0x61], [0x49, 1, 2], [0x0b], [0x00, 0x01], [0x80]] {
            XCTAssertThrowsError(try ProtobufPeek.modelRef(bytes, message: "ModelInferRequest"), "\(bytes)") { error in
                XCTAssertEqual((error as? GRPCStatus)?.code, .invalidArgument)
                XCTAssertTrue("\(error)".contains("ModelInferRequest"), "\(error)")
            }
        }
    }
}

/// The hand-written ModelInferRequest decoder: what it takes must equal SwiftProtobuf's
/// decode of the same bytes; what it does not take (parameters, typed contents, unknown
/// fields, bad bytes) it hands back as nil, for SwiftProtobuf.
final class ModelInferRequestDecoderTests: XCTestCase {
    private func assertSameAsSwiftProtobuf(_ bytes: [UInt8], file: StaticString = #filePath, line: UInt = #line) throws {
        let reference = try Inference_ModelInferRequest(serializedBytes: bytes)
        let fast = try XCTUnwrap(ModelInferRequestDecoder.decode(bytes), "the fast decoder refused \(bytes.prefix(32))", file: file, line: line)
        XCTAssertEqual(fast, InferRequestView(reference), file: file, line: line)
    }

    func testCommonRequestsDecodeAsSwiftProtobufDoes() throws {
        var request = Inference_ModelInferRequest()
        try assertSameAsSwiftProtobuf(try request.serializedBytes())  // empty
        request.modelName = "iris"
        request.modelVersion = "12"
        request.id = "naïve-call-∑"
        request.inputs = [tensor("x", "FP64", [1, 20]), tensor("words", "BYTES", [-1, 3]), tensor("big", "INT64", [Int64.max, 0, 1 << 40])]
        request.rawInputContents = [Data(repeating: 0xab, count: 160), Data(), Data((0..<300).map { UInt8($0 & 0xff) })]
        var out = Inference_ModelInferRequest.InferRequestedOutputTensor()
        out.name = "probabilities"
        request.outputs = [out, Inference_ModelInferRequest.InferRequestedOutputTensor()]
        try assertSameAsSwiftProtobuf(try request.serializedBytes())
    }

    /// Many inputs whose shapes repeat, change and repeat again (the decoder shares one array
    /// between consecutive equal shapes): each input keeps its own.
    func testRepeatedShapesStayEachInputsOwn() throws {
        var request = Inference_ModelInferRequest()
        let shapes: [[Int64]] = [[1, 1], [1, 1], [1, 1], [2, 1], [2, 1], [1, 1], [], [], [1], [1, 1, 1], [1, 1], [7, 3], [7, 3]]
        request.inputs = shapes.enumerated().map { i, s in tensor("f\(i)", "FP64", s) }
        request.rawInputContents = shapes.map { Data(repeating: 1, count: 8 * max(1, Int($0.reduce(1, *)))) }
        let bytes: [UInt8] = try request.serializedBytes()
        try assertSameAsSwiftProtobuf(bytes)
        let view = try XCTUnwrap(ModelInferRequestDecoder.decode(bytes))
        XCTAssertEqual(view.inputs.map(\.shape), shapes.map { $0.map(Int.init) })
        // A prefix of the previous shape, and a longer one, are not taken for it.
        request.inputs = [tensor("a", "FP64", [4, 5, 6]), tensor("b", "FP64", [4, 5]), tensor("c", "FP64", [4, 5, 6, 7])]
        request.rawInputContents = []
        try assertSameAsSwiftProtobuf(try request.serializedBytes())
    }

    func testUnpackedShapesAndRepeatedScalarsMerge() throws {
        // Input tensor: name "x", shape as unpacked varints 2, 3 then a packed [4]; the
        // request's model name given twice (the last wins).
        let input: [UInt8] = [0x0a, 0x01, 0x78, 0x18, 0x02, 0x18, 0x03, 0x1a, 0x01, 0x04]
        let bytes: [UInt8] = [0x0a, 0x01, 0x61, 0x2a, UInt8(input.count)] + input + [0x0a, 0x01, 0x62]
        try assertSameAsSwiftProtobuf(bytes)
        XCTAssertEqual(ModelInferRequestDecoder.decode(bytes)?.inputs.first?.shape, [2, 3, 4])
        XCTAssertEqual(ModelInferRequestDecoder.decode(bytes)?.modelName, "b")
    }

    func testEverythingElseFallsBack() throws {
        var p = Inference_InferParameter()
        p.stringParam = "region"
        var withParameters = Inference_ModelInferRequest()
        withParameters.parameters["priority"] = p
        var t = tensor("x", "FP32", [1])
        t.parameters["shared_memory_region"] = p
        var withTensorParameters = Inference_ModelInferRequest()
        withTensorParameters.inputs = [t]
        var typed = tensor("x", "FP32", [2])
        typed.contents.fp32Contents = [1, 2]
        var withContents = Inference_ModelInferRequest()
        withContents.inputs = [typed]
        var out = Inference_ModelInferRequest.InferRequestedOutputTensor()
        out.name = "y"
        out.parameters["classification"] = p
        var withOutputParameters = Inference_ModelInferRequest()
        withOutputParameters.outputs = [out]
        for message in [withParameters, withTensorParameters, withContents, withOutputParameters] {
            let bytes: [UInt8] = try message.serializedBytes()
            XCTAssertNil(ModelInferRequestDecoder.decode(bytes), "\(message)")
            XCTAssertNotNil(try? Inference_ModelInferRequest(serializedBytes: bytes))
        }
        // An unknown field (99, varint), a name that is not UTF-8, truncated and malformed bytes.
        for bytes: [UInt8] in [[0x98, 0x06, 0x01], [0x0a, 0x02, 0xc3, 0x28], [0x0a, 0x05, 0x61], [0x3a], [0x08, 0x01], [0x80]] {
            XCTAssertNil(ModelInferRequestDecoder.decode(bytes), "\(bytes)")
        }
    }

    /// Given the model's inputs, the decoder matches each tensor's name as it reads it (bytes
    /// at the tensor's own position first). Whatever order, spelling or mistake the client
    /// sends, the view must equal SwiftProtobuf's, and each input's `declared` position must
    /// be the one a lookup by String would give: its own position when the names are equal,
    /// else the first equal one, else -1.
    func testNamesAreMatchedAgainstTheModelAsStringsWouldBe() throws {
        // Prefixes of one another, an empty-looking neighbour, non-ASCII (é precomposed).
        let declared = ["f1", "f10", "f", "\u{e9}t\u{e9}", "\u{65e5}\u{672c}", "x"]
        let model = declared.map { TensorMapping(MLFeatureDescription(name: $0, type: .double), classLabels: nil, isProbabilities: false) }
        let orders: [[String]] = [
            declared,                                           // declared order
            declared.reversed(),                                // every name away from its position
            ["f10", "f1", "x", "f", "\u{65e5}\u{672c}", "\u{e9}t\u{e9}"],  // swapped prefixes
            ["f1", "f1", "f", "f", "zz", "x"],                  // duplicates, an unknown name
            ["f", "f1", "f10", "F1", "f1 ", ""],                // near misses
            ["f1", "f10", "f", "e\u{301}te\u{301}", "\u{65e5}\u{672c}", "x"],  // é decomposed: equal as Strings
            ["f1", "f10", "f", "\u{e9}t\u{e9}", "\u{65e5}", "x", "f1", "f10"],  // more tensors than inputs
        ]
        for sent in orders {
            var request = Inference_ModelInferRequest()
            request.inputs = sent.map { tensor($0, "FP64", [1, 1]) }
            request.rawInputContents = sent.map { _ in Data(repeating: 0, count: 8) }
            let bytes: [UInt8] = try request.serializedBytes()
            let view = try XCTUnwrap(ModelInferRequestDecoder.decode(bytes, inputs: model), "\(sent)")
            XCTAssertEqual(view, InferRequestView(try Inference_ModelInferRequest(serializedBytes: bytes)), "\(sent)")
            for (i, input) in view.inputs.enumerated() {
                let expected = i < declared.count && declared[i] == sent[i] ? i : declared.firstIndex(of: sent[i]) ?? -1
                XCTAssertEqual(input.declared, expected, "\(sent): tensor \(i) '\(sent[i])'")
                XCTAssertTrue(input.name == sent[i], "\(sent): tensor \(i) is named '\(input.name)'")
            }
        }
        // Without the model's inputs nothing is matched.
        var request = Inference_ModelInferRequest()
        request.inputs = declared.map { tensor($0, "FP64", [1, 1]) }
        XCTAssertEqual(try XCTUnwrap(ModelInferRequestDecoder.decode(try request.serializedBytes())).inputs.map(\.declared), declared.map { _ in -1 })
        // A name that is not UTF-8 still falls back (SwiftProtobuf words the error).
        let bad: [UInt8] = [0x2a, 0x04, 0x0a, 0x02, 0xc3, 0x28]
        XCTAssertNil(ModelInferRequestDecoder.decode(bad, inputs: model))
    }

    /// Every datatype name of the protocol decodes to itself (read from a table, not made
    /// from the bytes), and unknown ones keep their text.
    func testDatatypesKeepTheirText() throws {
        for datatype in ["FP64", "FP32", "INT64", "INT32", "BYTES", "FP16", "BOOL", "UINT8", "INT8", "INT16", "UINT16", "UINT32", "UINT64",
                         "BF16", "FP6", "FP644", "fp64", "", "FP64\u{0}", "COMPLEX128", "\u{e9}"] {
            var request = Inference_ModelInferRequest()
            request.inputs = [tensor("x", datatype, [1])]
            let bytes: [UInt8] = try request.serializedBytes()
            try assertSameAsSwiftProtobuf(bytes)
            XCTAssertEqual(ModelInferRequestDecoder.decode(bytes)?.inputs.first?.datatype, datatype)
        }
    }
}
