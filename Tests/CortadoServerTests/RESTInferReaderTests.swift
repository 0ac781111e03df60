@testable import CortadoServer
import CortadoServerProtos
import Foundation
import XCTest

/// The REST infer request reader (`RESTInferCodec.decode` → `RESTInferReader`) on the edges
/// of JSON (RFC 8259) and of the protocol's tensors. Expected values come from elsewhere:
/// numbers from the standard library's correctly rounded `Double(String)`, strings from
/// their UTF-8, integers from their datatype's range; every refusal is INVALID_ARGUMENT
/// (HTTP 400).
final class RESTInferReaderTests: XCTestCase {
    private func decode(_ json: String, header: Int? = nil, binary: [UInt8] = []) throws -> RESTInferCodec.Request {
        try RESTInferCodec.decode(Array(json.utf8) + binary, headerLength: header, model: "m", version: "")
    }

    /// One input's JSON with `data` as given, and its bytes as read.
    private func bytes(_ datatype: String, _ shape: [Int], _ data: String) throws -> [UInt8] {
        let r = try decode(#"{"inputs":[{"name":"x","shape":\#(shape),"datatype":"\#(datatype)","data":\#(data)}]}"#)
        XCTAssertEqual(r.view.inputs.map(\.name), ["x"])
        return Array(r.view.storage[r.view.raw[0]])
    }

    /// The call fails with INVALID_ARGUMENT whose message holds every word.
    private func refuses(_ json: String, _ words: String..., header: Int? = nil, binary: [UInt8] = [], line: UInt = #line) {
        XCTAssertThrowsError(try decode(json, header: header, binary: binary), line: line) { error in
            guard let status = error as? ServeStatus else { return XCTFail("\(error)", line: line) }
            XCTAssertEqual(status.code, .invalidArgument, line: line)
            XCTAssertEqual(RESTService.httpStatus(status.code), 400, line: line)
            for w in words { XCTAssertTrue(status.message.contains(w), "\(status.message) lacks \(w)", line: line) }
        }
    }

    private func refusesData(_ datatype: String, _ shape: [Int], _ data: String, _ words: String..., line: UInt = #line) {
        XCTAssertThrowsError(try bytes(datatype, shape, data), line: line) { error in
            guard let status = error as? ServeStatus else { return XCTFail("\(error)", line: line) }
            XCTAssertEqual(status.code, .invalidArgument, line: line)
            for w in words { XCTAssertTrue(status.message.contains(w), "\(status.message) lacks \(w)", line: line) }
        }
    }

    private func le<T: FixedWidthInteger>(_ values: [T]) -> [UInt8] {
        values.flatMap { v in withUnsafeBytes(of: v.littleEndian) { Array($0) } }
    }

    func testTheRequestsParts() throws {
        let r = try decode(#"""
            {"id":"req-1","parameters":{"binary_data_output":true,"other":[1,{"x":null}]},
             "inputs":[{"name":"a","shape":[1,2],"datatype":"FP64","parameters":{"priority":3,"tag":"t","flag":false,"w":0.5},"data":[1,2]}],
             "outputs":[{"name":"y","parameters":{"binary_data":false,"classification":2}},{"name":"z"}]}
            """#)
        XCTAssertEqual(r.view.id, "req-1")
        XCTAssertEqual(r.view.modelName, "m")
        XCTAssertTrue(r.binaryOutput)
        let input = r.view.inputs[0]
        XCTAssertEqual(input.datatype, "FP64")
        XCTAssertEqual(input.shape, [1, 2])
        XCTAssertEqual(input.parameters["priority"]?.int64Param, 3)
        XCTAssertEqual(input.parameters["tag"]?.stringParam, "t")
        XCTAssertEqual(input.parameters["flag"]?.boolParam, false)
        XCTAssertEqual(input.parameters["w"]?.doubleParam, 0.5)
        XCTAssertEqual(r.view.outputs.map(\.name), ["y", "z"])
        XCTAssertEqual(r.view.outputs[0].parameters["binary_data"]?.boolParam, false)
        XCTAssertEqual(r.view.outputs[0].parameters["classification"]?.int64Param, 2)
        XCTAssertEqual(Array(r.view.storage[r.view.raw[0]]), le([1.0, 2.0].map(\.bitPattern)))
    }

    func testNumbersAreCorrectlyRoundedDoubles() throws {
        let texts = ["0", "0.1", "1e-3", "1E+2", "2.5E-3", "123.456e7", "0.30000000000000004", "9007199254740993", "1e22", "1e23",
                     "2.2250738585072014e-308", "4.9e-324", "1e-400", "1.7976931348623157e308", "123456789012345678901234567890",
                     "0.000000000000000000000000000001", "3.141592653589793238462643383279", "-52.81717522634557", "7e-10", "1"]
        let got = try bytes("FP64", [texts.count], "[\(texts.joined(separator: ","))]")
        XCTAssertEqual(got, le(texts.map { Double($0)!.bitPattern }))
        let f32 = try bytes("FP32", [texts.count], "[\(texts.joined(separator: ","))]")
        XCTAssertEqual(f32, le(texts.map { Float(Double($0)!).bitPattern }))
        let f16 = try bytes("FP16", [3], "[1.5, -2e-3, 65504]")
        XCTAssertEqual(f16, le([Float16(1.5), Float16(Float(-2e-3)), Float16(65504)].map(\.bitPattern)))
    }

    func testNegativeZeroKeepsItsSign() throws {
        let got = try bytes("FP64", [3], "[-0, -0.0, -0e5]")
        XCTAssertEqual(got, le([UInt64](repeating: (-0.0 as Double).bitPattern, count: 3)))
        XCTAssertEqual(try bytes("FP32", [1], "[-0]"), le([(-0.0 as Float).bitPattern]))
        XCTAssertEqual(try bytes("INT64", [1], "[-0]"), le([Int64(0)]))
    }

    func testIntegersAtTheirLimits() throws {
        XCTAssertEqual(try bytes("INT64", [4], "[-9223372036854775808, 9223372036854775807, 2e3, 1.0]"),
                       le([Int64.min, Int64.max, 2000, 1]))
        XCTAssertEqual(try bytes("UINT64", [2], "[18446744073709551615, 0]"), le([UInt64.max, 0]))
        XCTAssertEqual(try bytes("INT32", [2], "[-2147483648, 2147483647]"), le([Int32.min, Int32.max]))
        XCTAssertEqual(try bytes("UINT32", [1], "[4294967295]"), le([UInt32.max]))
        XCTAssertEqual(try bytes("INT16", [2], "[-32768, 32767]"), le([Int16.min, Int16.max]))
        XCTAssertEqual(try bytes("UINT16", [1], "[65535]"), le([UInt16.max]))
        XCTAssertEqual(try bytes("INT8", [2], "[-128, 127]"), le([Int8.min, Int8.max]))
        XCTAssertEqual(try bytes("UINT8", [2], "[0, 255]"), [0, 255])
        refusesData("INT64", [1], "[9223372036854775808]", "out of range", "INT64")
        refusesData("INT64", [1], "[-9223372036854775809]", "out of range")
        refusesData("UINT64", [1], "[18446744073709551616]", "out of range", "UINT64")
        refusesData("UINT64", [1], "[-1]", "out of range")
        refusesData("UINT8", [1], "[256]", "out of range", "UINT8")
        refusesData("INT8", [1], "[-129]", "out of range")
        refusesData("INT32", [1], "[2147483648]", "out of range")
        refusesData("INT32", [1], "[1.5]", "must be integers")
        refusesData("INT64", [1], "[\"1\"]", "must be numbers")
        refusesData("INT64", [1], "[null]", "must be numbers")
    }

    func testBooleans() throws {
        XCTAssertEqual(try bytes("BOOL", [5], "[true, false, 1, 0, 2]"), [1, 0, 1, 0, 1])
        // In a numeric tensor, true and false are 1 and 0 (as NumPy reads them).
        XCTAssertEqual(try bytes("FP64", [2], "[true, false]"), le([(1.0 as Double).bitPattern, (0.0 as Double).bitPattern]))
        XCTAssertEqual(try bytes("INT32", [2], "[true, false]"), le([Int32(1), 0]))
        refusesData("BOOL", [1], "[\"true\"]", "BOOL", "must be numbers")
    }

    func testStringsWithEscapesForBytes() throws {
        let got = try bytes("BYTES", [3], #"["a\"b\\c\/\b\f\n\r\t", "\u00e9\u4e2d\ud83d\ude00", ""]"#)
        var want: [UInt8] = []
        for s in ["a\"b\\c/\u{8}\u{c}\n\r\t", "é中😀", ""] { TensorBytes.append(Array(s.utf8), to: &want) }
        XCTAssertEqual(got, want)
        XCTAssertEqual(try bytes("BYTES", [1], #"["\u0000"]"#), [1, 0, 0, 0, 0])
        refusesData("BYTES", [1], #"["\ud83d"]"#, "not valid JSON", "surrogate")
        refusesData("BYTES", [1], #"["\ude00"]"#, "not valid JSON")
        refusesData("BYTES", [1], #"["\ud83d\u0041"]"#, "not valid JSON", "surrogate")
        refusesData("BYTES", [1], #"["\x"]"#, "not valid JSON", "escape")
        refusesData("BYTES", [1], #"["\u12G4"]"#, "not valid JSON")
        refusesData("BYTES", [1], "[\"a\u{1}\"]", "not valid JSON", "control character")
        refusesData("BYTES", [1], "[1]", "BYTES data must be strings")
        // Bytes that are not UTF-8 inside a string.
        XCTAssertThrowsError(try RESTInferCodec.decode(Array(#"{"inputs":[{"name":"x","shape":[1],"datatype":"BYTES","data":[""#.utf8) + [0xff, 0xfe]
            + Array(#""]}]}"#.utf8), headerLength: nil, model: "m", version: ""))
    }

    func testNestedDataReadsFlatInOrder() throws {
        let flat = try bytes("FP32", [2, 3], "[1,2,3,4,5,6]")
        XCTAssertEqual(try bytes("FP32", [2, 3], "[[1,2,3],[4,5,6]]"), flat)
        XCTAssertEqual(try bytes("FP32", [2, 3], "[[[1],[2],[3]],[[4],[5],[6]]]"), flat)
        XCTAssertEqual(try bytes("FP32", [0, 3], "[]"), [])
        XCTAssertEqual(try bytes("FP32", [1], "5"), le([Float(5).bitPattern]))
    }

    func testWhitespaceEverywhere() throws {
        let ws = " \t\r\n"
        let json = ws + #"{"# + ws + #""inputs""# + ws + ":" + ws + "[" + ws + "{" + ws + #""name""# + ws + ":" + ws + #""x""# + ws + "," + ws
            + #""shape""# + ws + ":" + ws + "[" + ws + "2" + ws + "]" + ws + "," + ws + #""datatype""# + ws + ":" + ws + #""INT32""# + ws + ","
            + ws + #""data""# + ws + ":" + ws + "[" + ws + "7" + ws + "," + ws + "-8" + ws + "]" + ws + "}" + ws + "]" + ws + "}" + ws
        let r = try decode(json)
        XCTAssertEqual(Array(r.view.storage[r.view.raw[0]]), le([Int32(7), -8]))
        // Other whitespace (form feed, no-break space) is not JSON's.
        refuses("\u{c}" + #"{"inputs":[]}"#, "not valid JSON")
        refuses(#"{"inputs":[]}"# + "\u{a0}", "not valid JSON")
    }

    func testKeysInAnyOrderAndTheLastOfADuplicateCounts() throws {
        let r = try decode(#"{"inputs":5,"inputs":[{"data":[1,2],"shape":[2],"datatype":"FP32","name":"x","datatype":"INT64"}],"id":3,"id":"b"}"#)
        XCTAssertEqual(r.view.id, "b")
        XCTAssertEqual(r.view.inputs[0].datatype, "INT64")
        XCTAssertEqual(Array(r.view.storage[r.view.raw[0]]), le([Int64(1), 2]))
        let twice = try decode(#"{"inputs":[{"name":"x","shape":[1],"datatype":"FP64","data":[1],"data":[2]}]}"#)
        XCTAssertEqual(Array(twice.view.storage[twice.view.raw[0]]), le([(2.0 as Double).bitPattern]))
        XCTAssertEqual(Array(twice.view.storage), le([(2.0 as Double).bitPattern]))
        // Keys with escapes are the same keys.
        let escaped = try decode(#"{"\u0069nputs":[{"n\u0061me":"x","shape":[1],"datatype":"FP64","data":[3]}]}"#)
        XCTAssertEqual(escaped.view.inputs.map(\.name), ["x"])
        // A bad value replaced by a good one is no error; a good one replaced by a bad one is.
        XCTAssertNoThrow(try decode(#"{"id":1,"id":"a","inputs":[]}"#))
        refuses(#"{"id":"a","id":1,"inputs":[]}"#, "\"id\" must be a string")
    }

    func testWrongElementCounts() {
        refusesData("FP32", [2, 2], "[1,2,3]", "shape [2, 2] needs 4 values", "holds 3")
        refusesData("FP32", [2, 2], "[[1,2],[3,4],[5,6]]", "needs 4 values", "holds 6")
        refusesData("FP32", [1], "[" + Array(repeating: "1", count: 100_000).joined(separator: ",") + "]", "needs 1 values", "holds 100000")
        refusesData("FP32", [2], "[]", "needs 2 values", "holds 0")
    }

    func testTruncatedBodiesAreRefused() {
        let json = #"{"id":"a\u00e9","inputs":[{"name":"x","shape":[2],"datatype":"FP64","data":[1.5e3,-2]}],"outputs":[{"name":"y"}]}"#
        XCTAssertNoThrow(try decode(json))
        let utf8 = Array(json.utf8)
        for n in 0..<utf8.count {
            XCTAssertThrowsError(try RESTInferCodec.decode(Array(utf8[0..<n]), headerLength: nil, model: "m", version: ""), "prefix of \(n) bytes") { error in
                XCTAssertEqual((error as? ServeStatus)?.code, .invalidArgument)
            }
        }
    }

    func testNestingIsBounded() throws {
        // 511 levels under the top object's member are JSON the reader keeps reading; 512 are not.
        XCTAssertNoThrow(try decode(#"{"inputs":[],"x":"# + String(repeating: "[", count: 511) + String(repeating: "]", count: 511) + "}"))
        refuses(#"{"inputs":[],"x":"# + String(repeating: "[", count: 512) + String(repeating: "]", count: 512) + "}", "nesting is too deep")
        // Bombs: deep arrays in data, in an unknown key, in parameters; none may exhaust the stack.
        let bomb = String(repeating: "[", count: 200_000)
        refuses(#"{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":"# + bomb + "}]}", "not valid JSON")
        refuses(#"{"inputs":[{"name":"x","data":"# + bomb + "}]}", "not valid JSON")
        refuses(#"{"other":"# + String(repeating: #"{"a":"#, count: 100_000) + "}", "not valid JSON")
        refuses(#"{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","parameters":{"p":"# + bomb + "}}]}", "not valid JSON")
    }

    func testNumbersOutsideJSONAreRefused() {
        for token in ["NaN", "nan", "Infinity", "-Infinity", "inf", "+1", ".5", "1.", "01", "-", "1e", "1e+", "0x10", "1_000", "--1", "1.5.2"] {
            refusesData("FP64", [1], "[\(token)]", "not valid JSON")
            refuses(#"{"inputs":[],"x":\#(token)}"#, "not valid JSON")
        }
        // Past Double's range: refused rather than taken as infinity.
        refusesData("FP64", [1], "[1e400]", "not valid JSON")
        refusesData("FP32", [1], "[-1" + String(repeating: "0", count: 400) + "]", "not valid JSON")
        refuses(#"{"inputs":[],"x":1e99999999999}"#, "not valid JSON")
    }

    func testTheRequestsShapeAndTypes() {
        refuses("[1,2]", "JSON object with \"inputs\"")
        refuses("3", "JSON object")
        refuses("", "not valid JSON")
        refuses("{}", "needs \"inputs\"")
        refuses(#"{"inputs":3}"#, "needs \"inputs\"")
        refuses(#"{"inputs":[3]}"#, "inputs[0] must be a JSON object")
        refuses(#"{"inputs":[{"shape":[1]}]}"#, "inputs[0] needs a \"name\"")
        refuses(#"{"inputs":[{"name":"x","shape":[1]}]}"#, "input 'x' needs a \"datatype\"")
        refuses(#"{"inputs":[{"name":"x","datatype":"FP32"}]}"#, "input 'x' needs a \"shape\"")
        refuses(#"{"inputs":[{"name":"x","datatype":"FP32","shape":[1.5]}]}"#, "input 'x': the shape holds 1.5")
        refuses(#"{"inputs":[{"name":"x","datatype":"FP32","shape":[1]}]}"#, "input 'x' has neither \"data\" nor binary_data_size")
        refuses(#"{"inputs":[{"data":[1],"parameters":{"p":[1]},"name":"x","datatype":"FP32","shape":[1]}]}"#,
                "input 'x': parameter 'p' must be a string, a number or a boolean")
        refuses(#"{"inputs":[{"name":"x","datatype":"BF17","shape":[1],"data":[1]}]}"#, "unknown datatype 'BF17'")
        refuses(#"{"inputs":[],"outputs":{}}"#, "\"outputs\" must be a list")
        refuses(#"{"inputs":[],"outputs":[{"parameters":{}}]}"#, "outputs[0] needs a \"name\"")
        refuses(#"{"inputs":[],"outputs":[{"parameters":3,"name":"y"}]}"#, "output 'y' parameters must be a JSON object")
        refuses(#"{"inputs":[],"parameters":{"binary_data_output":"yes"}}"#, "binary_data_output must be true or false")
        refuses(#"{"inputs":[],"parameters":[]}"#, "parameters must be a JSON object")
        refuses(#"{"inputs":[]} {}"#, "not valid JSON")
        // Syntax errors win over what the values mean.
        refuses(#"{"inputs":3,"#, "not valid JSON")
    }

    func testBinaryData() throws {
        let header = #"{"inputs":[{"name":"a","shape":[2],"datatype":"FP32","parameters":{"binary_data_size":8}},{"name":"b","shape":[1],"datatype":"INT64","data":[5]},{"name":"c","shape":[1],"datatype":"UINT8","parameters":{"binary_data_size":1}}]}"#
        let a = le([Float(1.5).bitPattern, Float(-2).bitPattern])
        let r = try decode(header, header: header.utf8.count, binary: a + [9])
        XCTAssertEqual(r.view.inputs.map(\.name), ["a", "b", "c"])
        XCTAssertEqual(Array(r.view.storage[r.view.raw[0]]), a)
        XCTAssertEqual(Array(r.view.storage[r.view.raw[1]]), le([Int64(5)]))
        XCTAssertEqual(Array(r.view.storage[r.view.raw[2]]), [9])
        refuses(header, "binary_data_size 1 runs past the end", header: header.utf8.count, binary: a)
        refuses(header, "3 bytes of binary data", header: header.utf8.count, binary: a + [9, 1, 2, 3])
        refuses(header, "no Inference-Header-Content-Length header")
        refuses(header, "larger than the body", header: header.utf8.count + 100, binary: [])
        let negative = #"{"inputs":[{"name":"a","shape":[1],"datatype":"FP32","parameters":{"binary_data_size":-1}}]}"#
        refuses(negative, "input 'a': binary_data_size must be a non-negative integer", header: negative.utf8.count)
    }
}
