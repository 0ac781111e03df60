import CortadoSpec
import Foundation
import XCTest
@testable import CortadoCore

final class MLFeatureJSONTests: XCTestCase {
    func feature(_ name: String, _ set: (inout CoreML_Specification_FeatureType) -> Void) throws -> MLFeatureDescription {
        var f = CoreML_Specification_FeatureDescription()
        f.name = name
        set(&f.type)
        return try MLFeatureDescription(f)
    }

    func parse(_ text: String) throws -> Any {
        try JSONSerialization.jsonObject(with: Data(text.utf8), options: [.fragmentsAllowed])
    }

    func testScalarsStringsAndNaN() throws {
        let d = try feature("d") { $0.doubleType = .init() }
        XCTAssertEqual(try MLFeatureJSON.decode(parse("2"), as: d).doubleValue, 2)
        XCTAssertTrue(try MLFeatureJSON.decode(parse("\"NaN\""), as: d).doubleValue.isNaN)
        XCTAssertTrue(try MLFeatureJSON.decode(parse("null"), as: d).doubleValue.isNaN)
        let i = try feature("i") { $0.int64Type = .init() }
        XCTAssertEqual(try MLFeatureJSON.decode(parse("7"), as: i).int64Value, 7)
        XCTAssertThrowsError(try MLFeatureJSON.decode(parse("7.5"), as: i)) { XCTAssertEqual(($0 as! MLModelError).feature, "i") }
        let s = try feature("s") { $0.stringType = .init() }
        XCTAssertThrowsError(try MLFeatureJSON.decode(parse("1"), as: s))
    }

    func testMultiArrayObjectAndNestedArrays() throws {
        let f = try feature("m") { var a = CoreML_Specification_ArrayFeatureType(); a.shape = [2, 2]; a.dataType = .float32; $0.multiArrayType = a }
        let obj = try MLFeatureJSON.decode(parse(#"{"shape":[2,2],"dataType":"FLOAT16","data":[1,2,3,4]}"#), as: f).multiArrayValue!
        XCTAssertEqual(obj.dataType, .float16)
        XCTAssertEqual(obj.doubleValues(), [1, 2, 3, 4])
        let nested = try MLFeatureJSON.decode(parse("[[1,2],[3,4]]"), as: f).multiArrayValue!
        XCTAssertEqual(nested.shape, [2, 2])
        XCTAssertEqual(nested.dataType, .float32, "nested arrays take the declared type")
        XCTAssertThrowsError(try MLFeatureJSON.decode(parse("[[1,2],[3]]"), as: f))
        XCTAssertThrowsError(try MLFeatureJSON.decode(parse(#"{"shape":[3],"data":[1,2]}"#), as: f))
    }

    func testDictionariesAndSequences() throws {
        let f = try feature("d") { var d = CoreML_Specification_DictionaryFeatureType(); d.int64KeyType = .init(); $0.dictionaryType = d }
        let v = try MLFeatureJSON.decode(parse(#"{"3": 0.5, "10": 1}"#), as: f)
        XCTAssertEqual(v.dictionary, .int64Keyed([3: 0.5, 10: 1]))
        XCTAssertThrowsError(try MLFeatureJSON.decode(parse(#"{"x": 1}"#), as: f))
        var out = ""
        MLFeatureJSON.encode(v, into: &out)
        XCTAssertEqual(out, #"{"3":0.5,"10":1.0}"#)
        let s = try feature("s") { var q = CoreML_Specification_SequenceFeatureType(); q.stringType = .init(); $0.sequenceType = q }
        XCTAssertEqual(try MLFeatureJSON.decode(parse(#"["a","b"]"#), as: s).sequenceValue?.stringValues, ["a", "b"])
    }

    func testEncodingRoundTripsDoublesExactly() throws {
        let x = 0.1 + 0.2
        var out = ""
        MLFeatureJSON.encode(MLFeatureValue(double: x), into: &out)
        XCTAssertEqual(Double(out), x)
        out = ""
        MLFeatureJSON.encode(MLFeatureValue(string: "a\"b\n"), into: &out)
        XCTAssertEqual(try parse(out) as? String, "a\"b\n")
    }

    func testUnknownInputNamesAreRejected() throws {
        var spec = CoreML_Specification_ModelDescription()
        var f = CoreML_Specification_FeatureDescription(); f.name = "a"; f.type.doubleType = .init()
        spec.input = [f]
        let description = try MLModelDescription(spec)
        XCTAssertThrowsError(try MLFeatureJSON.decodeInputs(["a": 1, "b": 2], description: description)) {
            XCTAssertEqual(($0 as! MLModelError).feature, "b")
        }
    }

    func testParserReadsDoublesExactlyAndRejectsBadText() throws {
        let row = try MLJSONParser.parse(Array(#"{"x": -52.81717522634557, "n": 9007199254740993, "s": "a\u00e9\ud83d\ude00", "a": [1e-3, true, null]}"#.utf8)) as! [String: Any]
        XCTAssertEqual((row["x"] as! NSNumber).doubleValue, -52.81717522634557)
        XCTAssertEqual((row["n"] as! NSNumber).int64Value, 9007199254740993, "integers stay exact beyond 2^53")
        XCTAssertEqual(row["s"] as? String, "a\u{e9}\u{1F600}")
        XCTAssertEqual(((row["a"] as! [Any])[0] as! NSNumber).doubleValue, 0.001)
        XCTAssertTrue((row["a"] as! [Any])[2] is NSNull)
        for bad in ["{not json", "{\"a\":1,}", "[1 2]", "\"open", "{\"a\":01x}", "{} x", ""] {
            XCTAssertThrowsError(try MLJSONParser.parse(Array(bad.utf8)), bad)
        }
    }

    /// Numbers and escapes as RFC 8259 writes them, no looser (the feature-json fuzz target
    /// found `.5` taken: fuzz/regressions/feature-json/number-with-leading-dot).
    func testParserTakesOnlyJSONNumbersAndEscapes() throws {
        for bad in [".5", "{\"d\":.5}", "-.5", "1.", "01", "-01", "+1", "1e", "1e+", "1.e3", "--1", "1-2", "0x10", #""\u+041""#, #""\u-041""#] {
            XCTAssertThrowsError(try MLJSONParser.parse(Array(bad.utf8)), bad)
            XCTAssertThrowsError(try JSONSerialization.jsonObject(with: Data(bad.utf8), options: [.fragmentsAllowed]), "JSONSerialization: \(bad)")
        }
        for (good, value) in [("0", 0.0), ("-0", 0.0), ("0.5", 0.5), ("-0.5e+3", -500.0), ("10E-1", 1.0), ("1e5", 100000.0)] {
            XCTAssertEqual((try MLJSONParser.parse(Array(good.utf8)) as? NSNumber)?.doubleValue, value, good)
        }
        XCTAssertEqual(try MLJSONParser.parse(Array(#""\u0041\u00e9""#.utf8)) as? String, "A\u{e9}")
        // Bytes that are not UTF-8 inside a string (fuzz/regressions/feature-json/string-not-utf8).
        for bad: [UInt8] in [[0x22, 0x87, 0x22], [0x22, 0x61, 0xc3, 0x22], [0x22, 0xed, 0xa0, 0x80, 0x22]] {
            XCTAssertThrowsError(try MLJSONParser.parse(bad), "\(bad)")
        }
        XCTAssertEqual(try MLJSONParser.parse([0x22, 0xc3, 0xa9, 0x22]) as? String, "\u{e9}")
    }
}
