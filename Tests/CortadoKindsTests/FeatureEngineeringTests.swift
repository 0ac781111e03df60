import CortadoFeatureEngineering
import CortadoModels
import Foundation
import XCTest

// Feature-engineering kinds: specs built here with the generated types, expected values
// computed by hand (stated next to each case). Tolerance for computed doubles: 1e-12
// absolute unless stated; copies and one-hot values are compared exactly.

private typealias FD = CoreML_Specification_FeatureDescription

/// Feature descriptions for specs.
private enum F {
    static func make(_ name: String, optional: Bool = false, _ set: (inout CoreML_Specification_FeatureType) -> Void) -> FD {
        var f = FD()
        f.name = name
        f.type.isOptional = optional
        set(&f.type)
        return f
    }
    static func double(_ n: String, optional: Bool = false) -> FD { make(n, optional: optional) { $0.doubleType = .init() } }
    static func int64(_ n: String, optional: Bool = false) -> FD { make(n, optional: optional) { $0.int64Type = .init() } }
    static func string(_ n: String, optional: Bool = false) -> FD { make(n, optional: optional) { $0.stringType = .init() } }
    static func array(_ n: String, _ shape: [Int64], _ dt: CoreML_Specification_ArrayFeatureType.ArrayDataType = .double,
                      optional: Bool = false) -> FD {
        make(n, optional: optional) { var a = CoreML_Specification_ArrayFeatureType(); a.shape = shape; a.dataType = dt; $0.multiArrayType = a }
    }
    static func dict(_ n: String, int64Keys: Bool, optional: Bool = false) -> FD {
        make(n, optional: optional) {
            var d = CoreML_Specification_DictionaryFeatureType()
            if int64Keys { d.int64KeyType = .init() } else { d.stringKeyType = .init() }
            $0.dictionaryType = d
        }
    }
    static func sequence(_ n: String, int64: Bool) -> FD {
        make(n) {
            var s = CoreML_Specification_SequenceFeatureType()
            if int64 { s.int64Type = .init() } else { s.stringType = .init() }
            $0.sequenceType = s
        }
    }
}

private func spec(_ type: CoreML_Specification_Model.OneOf_Type, _ inputs: [FD], _ outputs: [FD]) -> CoreML_Specification_Model {
    var s = CoreML_Specification_Model()
    s.specificationVersion = 1
    s.description_p.input = inputs
    s.description_p.output = outputs
    s.type = type
    return s
}

/// Loads through the serialized bytes, as a file would be.
private func load(_ s: CoreML_Specification_Model) throws -> MLModel {
    try MLModel(data: try s.serializedData(), name: "fe")
}

private func predict(_ m: MLModel, _ inputs: [String: MLFeatureValue], options: MLPredictionOptions = MLPredictionOptions()) throws -> MLFeatureProvider {
    try m.prediction(from: MLDictionaryFeatureProvider(dictionary: inputs), options: options)
}

private func arr(_ v: [Double], _ dt: MLMultiArrayDataType = .double) -> MLFeatureValue {
    MLFeatureValue(multiArray: try! MLMultiArray(v, dataType: dt))
}

private func values(_ out: MLFeatureProvider, _ name: String, file: StaticString = #filePath, line: UInt = #line) -> [Double] {
    guard let a = out.featureValue(for: name)?.multiArrayValue else {
        XCTFail("output \(name) is not a multiArray: \(String(describing: out.featureValue(for: name)))", file: file, line: line)
        return []
    }
    return a.doubleValues()
}

private func assertClose(_ got: [Double], _ want: [Double], accuracy: Double = 1e-12, file: StaticString = #filePath, line: UInt = #line) {
    XCTAssertEqual(got.count, want.count, "lengths differ: \(got) vs \(want)", file: file, line: line)
    for (i, (g, w)) in zip(got, want).enumerated() {
        if w.isNaN { XCTAssertTrue(g.isNaN, "element \(i): \(g), expected NaN", file: file, line: line); continue }
        XCTAssertEqual(g, w, accuracy: accuracy, "element \(i) of \(got) vs \(want)", file: file, line: line)
    }
}

/// Asserts a load error whose message contains every fragment.
private func assertLoadFails(_ s: CoreML_Specification_Model, _ fragments: String..., file: StaticString = #filePath, line: UInt = #line) {
    XCTAssertThrowsError(try load(s), file: file, line: line) { error in
        guard let e = error as? MLModelError else { return XCTFail("not an MLModelError: \(error)", file: file, line: line) }
        XCTAssertEqual(e.code, .invalidModel, e.description, file: file, line: line)
        for f in fragments { XCTAssertTrue(e.description.contains(f), "'\(e.description)' lacks '\(f)'", file: file, line: line) }
    }
}

/// Asserts a prediction error naming `feature` whose message contains every fragment.
private func assertPredictFails(_ body: @autoclosure () throws -> MLFeatureProvider, feature: String, _ fragments: String...,
                                file: StaticString = #filePath, line: UInt = #line) {
    XCTAssertThrowsError(try body(), file: file, line: line) { error in
        guard let e = error as? MLModelError else { return XCTFail("not an MLModelError: \(error)", file: file, line: line) }
        XCTAssertEqual(e.feature, feature, e.description, file: file, line: line)
        for f in fragments { XCTAssertTrue(e.description.contains(f), "'\(e.description)' lacks '\(f)'", file: file, line: line) }
    }
}

final class FeatureEngineeringTests: XCTestCase {
    override func setUp() {
        CortadoModels.registerBuiltinKinds()
        // Other test targets may register test kinds under these cases; take them back.
        FeatureEngineeringKinds.register()
    }

    // MARK: oneHotEncoder

    func ohe(ints: [Int64]? = nil, strings: [String]? = nil, sparse: Bool = false, ignore: Bool = false) -> CoreML_Specification_OneHotEncoder {
        var o = CoreML_Specification_OneHotEncoder()
        if let ints { var v = CoreML_Specification_Int64Vector(); v.vector = ints; o.int64Categories = v }
        if let strings { var v = CoreML_Specification_StringVector(); v.vector = strings; o.stringCategories = v }
        o.outputSparse = sparse
        o.handleUnknown = ignore ? .ignoreUnknown : .errorOnUnknown
        return o
    }

    func testOneHotInt64Dense() throws {
        let m = try load(spec(.oneHotEncoder(ohe(ints: [2, 5, 7, 11])), [F.int64("c")], [F.array("y", [4])]))
        XCTAssertEqual(values(try predict(m, ["c": MLFeatureValue(int64: 7)]), "y"), [0, 0, 1, 0])
        XCTAssertEqual(values(try predict(m, ["c": MLFeatureValue(int64: 2)]), "y"), [1, 0, 0, 0])
        // A double holding an integer is that int64 (Core ML converts scalars).
        XCTAssertEqual(values(try predict(m, ["c": MLFeatureValue(double: 11)]), "y"), [0, 0, 0, 1])
        assertPredictFails(try predict(m, ["c": MLFeatureValue(int64: 3)]), feature: "c", "unknown category 3", "ErrorOnUnknown", "2, 5, 7, 11")
        assertPredictFails(try predict(m, ["c": MLFeatureValue(double: 5.5)]), feature: "c", "unknown category 5.5")
    }

    func testOneHotStringSparseAndIgnoreUnknown() throws {
        let m = try load(spec(.oneHotEncoder(ohe(strings: ["red", "green", "blue"], sparse: true, ignore: true)),
                              [F.string("color")], [F.dict("hot", int64Keys: true)]))
        XCTAssertEqual(try predict(m, ["color": MLFeatureValue(string: "blue")]).featureValue(for: "hot")?.dictionary, .int64Keyed([2: 1.0]))
        XCTAssertEqual(try predict(m, ["color": MLFeatureValue(string: "red")]).featureValue(for: "hot")?.dictionary, .int64Keyed([0: 1.0]))
        // Unknown (matching is case-sensitive) → empty dictionary.
        XCTAssertEqual(try predict(m, ["color": MLFeatureValue(string: "Red")]).featureValue(for: "hot")?.dictionary, .int64Keyed([:]))

        let dense = try load(spec(.oneHotEncoder(ohe(strings: ["red", "green", "blue"], ignore: true)),
                                  [F.string("color")], [F.array("hot", [3], .float32)]))
        let out = try predict(dense, ["color": MLFeatureValue(string: "pink")])
        XCTAssertEqual(values(out, "hot"), [0, 0, 0])
        XCTAssertEqual(out.featureValue(for: "hot")?.multiArrayValue?.dataType, .float32, "declared FLOAT32 output")
    }

    func testOneHotErrorNamesStringValue() throws {
        let m = try load(spec(.oneHotEncoder(ohe(strings: ["a", "b"], sparse: true)), [F.string("s")], [F.dict("y", int64Keys: true)]))
        assertPredictFails(try predict(m, ["s": MLFeatureValue(string: "pink")]), feature: "s", "unknown category 'pink'", "'a', 'b'")
    }

    func testOneHotOverwritesOutputBacking() throws {
        let m = try load(spec(.oneHotEncoder(ohe(ints: [0, 1, 2])), [F.int64("c")], [F.array("y", [3])]))
        let backing = try MLMultiArray([9, 9, 9])
        var options = MLPredictionOptions()
        options.outputBackings["y"] = backing
        let out = try predict(m, ["c": MLFeatureValue(int64: 1)], options: options)
        XCTAssertTrue(out.featureValue(for: "y")?.multiArrayValue === backing)
        XCTAssertEqual(backing.doubleValues(), [0, 1, 0])
    }

    func testOneHotMalformedSpecs() {
        assertLoadFails(spec(.oneHotEncoder(ohe()), [F.int64("c")], [F.array("y", [3])]), "no categories")
        assertLoadFails(spec(.oneHotEncoder(ohe(ints: [])), [F.int64("c")], [F.array("y", [3])]), "empty category list")
        assertLoadFails(spec(.oneHotEncoder(ohe(ints: [1, 2], sparse: true)), [F.int64("c")], [F.array("y", [2])]),
                        "'y'", "outputSparse", "dictionary")
        assertLoadFails(spec(.oneHotEncoder(ohe(ints: [1, 2])), [F.int64("c")], [F.dict("y", int64Keys: true)]), "'y'", "multiArray of 2")
        assertLoadFails(spec(.oneHotEncoder(ohe(ints: [1, 2, 3, 4])), [F.int64("c")], [F.array("y", [5])]), "'y'", "writes 4 values", "[5]")
        assertLoadFails(spec(.oneHotEncoder(ohe(ints: [1, 2])), [F.string("c")], [F.array("y", [2])]), "'c'", "categories are int64")
        assertLoadFails(spec(.oneHotEncoder(ohe(strings: ["x"])), [F.int64("c")], [F.array("y", [1])]), "'c'", "categories are strings")
        assertLoadFails(spec(.oneHotEncoder(ohe(ints: [1])), [F.int64("a"), F.int64("b")], [F.array("y", [1])]), "exactly one input", "a, b")
        var bad = ohe(ints: [1])
        bad.handleUnknown = .UNRECOGNIZED(5)
        assertLoadFails(spec(.oneHotEncoder(bad), [F.int64("c")], [F.array("y", [1])]), "handleUnknown 5")
    }

    // MARK: imputer

    func imputer(_ imputed: CoreML_Specification_Imputer.OneOf_ImputedValue, _ replace: CoreML_Specification_Imputer.OneOf_ReplaceValue? = nil) -> CoreML_Specification_Imputer {
        var i = CoreML_Specification_Imputer()
        i.imputedValue = imputed
        i.replaceValue = replace
        return i
    }

    func doubles(_ v: [Double]) -> CoreML_Specification_DoubleVector { var d = CoreML_Specification_DoubleVector(); d.vector = v; return d }

    func testImputerArrayNaNByDefault() throws {
        let m = try load(spec(.imputer(imputer(.imputedDoubleArray(doubles([10, 20, 30])))), [F.array("x", [3])], [F.array("y", [3])]))
        // NaN elements take the imputed element at the same position.
        assertClose(values(try predict(m, ["x": arr([1, .nan, 3])]), "y"), [1, 20, 3])
        assertClose(values(try predict(m, ["x": arr([.nan, .nan, .nan])]), "y"), [10, 20, 30])
        // FLOAT32 input is read element by element.
        assertClose(values(try predict(m, ["x": arr([.nan, 2.5, 4], .float32)]), "y"), [10, 2.5, 4])
        assertPredictFails(try predict(m, ["x": arr([1, 2])]), feature: "x", "shape [2]")
    }

    func testImputerArrayReplaceValue() throws {
        let m = try load(spec(.imputer(imputer(.imputedDoubleArray(doubles([10, 20, 30])), .replaceDoubleValue(-1))),
                              [F.array("x", [3])], [F.array("y", [3])]))
        // -1 is missing; NaN now is not.
        assertClose(values(try predict(m, ["x": arr([-1, 2, -1])]), "y"), [10, 2, 30])
        assertClose(values(try predict(m, ["x": arr([.nan, -1, 0])]), "y"), [.nan, 20, 0])

        var ints = CoreML_Specification_Int64Vector(); ints.vector = [7, 8]
        let mi = try load(spec(.imputer(imputer(.imputedInt64Array(ints), .replaceInt64Value(0))), [F.array("x", [2], .int32)], [F.array("y", [2], .int32)]))
        let out = try predict(mi, ["x": arr([0, 5], .int32)])
        XCTAssertEqual(values(out, "y"), [7, 5])
        XCTAssertEqual(out.featureValue(for: "y")?.multiArrayValue?.dataType, .int32)
    }

    func testImputerScalarOnArrayAndDouble() throws {
        let ma = try load(spec(.imputer(imputer(.imputedDoubleValue(0.5))), [F.array("x", [3])], [F.array("y", [3])]))
        assertClose(values(try predict(ma, ["x": arr([.nan, 1, .nan])]), "y"), [0.5, 1, 0.5])

        let md = try load(spec(.imputer(imputer(.imputedDoubleValue(7.5))), [F.double("x", optional: true)], [F.double("y")]))
        XCTAssertEqual(try predict(md, ["x": MLFeatureValue(double: .nan)]).featureValue(for: "y")?.doubleValue, 7.5)
        XCTAssertEqual(try predict(md, ["x": MLFeatureValue(double: 3)]).featureValue(for: "y")?.doubleValue, 3)
        XCTAssertEqual(try predict(md, ["x": MLFeatureValue(int64: 4)]).featureValue(for: "y")?.doubleValue, 4)
        // An absent optional input is missing too.
        XCTAssertEqual(try predict(md, [:]).featureValue(for: "y")?.doubleValue, 7.5)
    }

    func testImputerInt64StringAndDictionary() throws {
        let mi = try load(spec(.imputer(imputer(.imputedInt64Value(42), .replaceInt64Value(-1))), [F.int64("n", optional: true)], [F.int64("m")]))
        XCTAssertEqual(try predict(mi, ["n": MLFeatureValue(int64: -1)]).featureValue(for: "m")?.int64Value, 42)
        XCTAssertEqual(try predict(mi, ["n": MLFeatureValue(int64: 5)]).featureValue(for: "m")?.int64Value, 5)
        XCTAssertEqual(try predict(mi, [:]).featureValue(for: "m")?.int64Value, 42)

        let ms = try load(spec(.imputer(imputer(.imputedStringValue("unknown"), .replaceStringValue(""))), [F.string("s", optional: true)], [F.string("t")]))
        XCTAssertEqual(try predict(ms, ["s": MLFeatureValue(string: "")]).featureValue(for: "t")?.stringValue, "unknown")
        XCTAssertEqual(try predict(ms, ["s": MLFeatureValue(string: "x")]).featureValue(for: "t")?.stringValue, "x")
        XCTAssertEqual(try predict(ms, [:]).featureValue(for: "t")?.stringValue, "unknown")

        var map = CoreML_Specification_StringToDoubleMap(); map.map = ["a": 1, "b": 2]
        let md = try load(spec(.imputer(imputer(.imputedStringDictionary(map))), [F.dict("d", int64Keys: false, optional: true)], [F.dict("e", int64Keys: false)]))
        XCTAssertEqual(try predict(md, [:]).featureValue(for: "e")?.dictionary, .stringKeyed(["a": 1, "b": 2]))
        XCTAssertEqual(try predict(md, ["d": MLFeatureValue(dictionary: .stringKeyed(["z": 9]))]).featureValue(for: "e")?.dictionary, .stringKeyed(["z": 9]))
    }

    func testImputerMalformedSpecs() {
        var none = CoreML_Specification_Imputer(); none.replaceValue = nil
        assertLoadFails(spec(.imputer(none), [F.double("x")], [F.double("y")]), "no imputed value")
        assertLoadFails(spec(.imputer(imputer(.imputedDoubleArray(doubles([1, 2])))), [F.array("x", [3])], [F.array("y", [3])]),
                        "'x'", "2 values", "3 elements")
        assertLoadFails(spec(.imputer(imputer(.imputedDoubleValue(1), .replaceStringValue("?"))), [F.double("x")], [F.double("y")]),
                        "replaceStringValue")
        assertLoadFails(spec(.imputer(imputer(.imputedDoubleValue(1))), [F.double("x")], [F.array("y", [1])]), "'y'", "same type")
        assertLoadFails(spec(.imputer(imputer(.imputedInt64Value(1))), [F.double("x")], [F.double("y")]), "'x'", "imputedInt64Value")
        var map = CoreML_Specification_Int64ToDoubleMap(); map.map = [1: 1]
        assertLoadFails(spec(.imputer(imputer(.imputedInt64Dictionary(map), .replaceInt64Value(0))),
                             [F.dict("d", int64Keys: true)], [F.dict("e", int64Keys: true)]), "no replace value")
        assertLoadFails(spec(.imputer(imputer(.imputedInt64Dictionary(map))), [F.dict("d", int64Keys: false)], [F.dict("e", int64Keys: false)]),
                        "'d'", "int64 keys")
    }

    // MARK: scaler

    func scaler(_ shift: [Double], _ scale: [Double]) -> CoreML_Specification_Scaler {
        var s = CoreML_Specification_Scaler(); s.shiftValue = shift; s.scaleValue = scale; return s
    }

    func testScalerPerElement() throws {
        let m = try load(spec(.scaler(scaler([-1, -2, -3], [2, 0.5, 10])), [F.array("x", [3])], [F.array("y", [3])]))
        // (3-1)*2 = 4, (4-2)*0.5 = 1, (5-3)*10 = 20.
        assertClose(values(try predict(m, ["x": arr([3, 4, 5])]), "y"), [4, 1, 20])
        // A FLOAT32 declared output is written as FLOAT32.
        let m32 = try load(spec(.scaler(scaler([-1, -2, -3], [2, 0.5, 10])), [F.array("x", [3], .float32)], [F.array("y", [3], .float32)]))
        let out = try predict(m32, ["x": arr([3, 4, 5], .float32)])
        XCTAssertEqual(out.featureValue(for: "y")?.multiArrayValue?.dataType, .float32)
        assertClose(values(out, "y"), [4, 1, 20])
    }

    func testScalerBroadcastAndDefaults() throws {
        let m = try load(spec(.scaler(scaler([1], [])), [F.array("x", [2])], [F.array("y", [2])]))
        assertClose(values(try predict(m, ["x": arr([1, -1])]), "y"), [2, 0], accuracy: 0)
        let k = try load(spec(.scaler(scaler([], [0.25])), [F.array("x", [2])], [F.array("y", [2])]))
        assertClose(values(try predict(k, ["x": arr([4, -8])]), "y"), [1, -2], accuracy: 0)
    }

    func testScalerScalars() throws {
        let md = try load(spec(.scaler(scaler([0.5], [4])), [F.double("x")], [F.double("y")]))
        XCTAssertEqual(try predict(md, ["x": MLFeatureValue(double: 1)]).featureValue(for: "y")?.doubleValue ?? 0, 6, accuracy: 1e-12)
        // int64 in, int64 out: (3 + 1) * 2 = 8 exactly; (3 + 1) * 0.3 is not an integer.
        let mi = try load(spec(.scaler(scaler([1], [2])), [F.int64("n")], [F.int64("m")]))
        XCTAssertEqual(try predict(mi, ["n": MLFeatureValue(int64: 3)]).featureValue(for: "m")?.int64Value, 8)
        let lossy = try load(spec(.scaler(scaler([1], [0.3])), [F.int64("n")], [F.int64("m")]))
        assertPredictFails(try predict(lossy, ["n": MLFeatureValue(int64: 3)]), feature: "m", "not an int64")
        // int64 in, double out.
        let mid = try load(spec(.scaler(scaler([1], [0.3])), [F.int64("n")], [F.double("m")]))
        XCTAssertEqual(try predict(mid, ["n": MLFeatureValue(int64: 3)]).featureValue(for: "m")?.doubleValue ?? 0, 1.2, accuracy: 1e-12)
    }

    func testScalerFlexibleInputCountIsChecked() throws {
        let m = try load(spec(.scaler(scaler([0, 0, 0], [1, 2, 3])), [F.array("x", [])], [F.array("y", [])]))
        assertClose(values(try predict(m, ["x": arr([1, 1, 1])]), "y"), [1, 2, 3])
        assertPredictFails(try predict(m, ["x": arr([1, 1])]), feature: "x", "expected 3 elements", "got 2")
    }

    func testScalerInt32OutputOutOfRangeIsAnErrorNotACrash() throws {
        let m = try load(spec(.scaler(scaler([], [1e20])), [F.array("x", [2], .int32)], [F.array("y", [2], .int32)]))
        XCTAssertEqual(values(try predict(m, ["x": arr([0, 0], .int32)]), "y"), [0, 0])
        assertPredictFails(try predict(m, ["x": arr([0, 1], .int32)]), feature: "y", "element 1", "INT32")
    }

    func testScalerMalformedSpecs() {
        assertLoadFails(spec(.scaler(scaler([1, 2], [])), [F.array("x", [3])], [F.array("y", [3])]), "'x'", "2 per-element", "3 elements")
        assertLoadFails(spec(.scaler(scaler([1, 2, 3], [1, 2])), [F.array("x", [])], [F.array("y", [])]), "3 shift values but 2 scale values")
        assertLoadFails(spec(.scaler(scaler([1, 2], [])), [F.double("x")], [F.double("y")]), "'x'", "single double")
        assertLoadFails(spec(.scaler(scaler([], [])), [F.double("x")], [F.array("y", [1])]), "'y'", "same type")
        assertLoadFails(spec(.scaler(scaler([], [])), [F.int64("x")], [F.string("y")]), "'y'")
        assertLoadFails(spec(.scaler(scaler([.nan], [])), [F.double("x")], [F.double("y")]), "shiftValue[0] is nan")
        assertLoadFails(spec(.scaler(scaler([1, 2, 3], [])), [F.array("x", [3])], [F.array("y", [4])]), "'y'", "writes 3 values")
    }

    // MARK: normalizer

    func normalizer(_ t: CoreML_Specification_Normalizer.NormType) -> CoreML_Specification_Model.OneOf_Type {
        var n = CoreML_Specification_Normalizer(); n.normType = t; return .normalizer(n)
    }

    func testNormalizerNorms() throws {
        let l1 = try load(spec(normalizer(.l1), [F.array("x", [4])], [F.array("y", [4])]))
        assertClose(values(try predict(l1, ["x": arr([1, -2, 3, -4])]), "y"), [0.1, -0.2, 0.3, -0.4])     // Σ|x| = 10
        let l2 = try load(spec(normalizer(.l2), [F.array("x", [2])], [F.array("y", [2])]))
        assertClose(values(try predict(l2, ["x": arr([3, -4])]), "y"), [0.6, -0.8])                       // √25 = 5
        let lmax = try load(spec(normalizer(.lmax), [F.array("x", [3])], [F.array("y", [3])]))
        assertClose(values(try predict(lmax, ["x": arr([1, -4, 2])]), "y"), [0.25, -1, 0.5])              // max|x| = 4
        // Largest magnitude negative: divides by |x|, as scikit-learn, not by max(x) = -1.
        assertClose(values(try predict(lmax, ["x": arr([-2, -1, -0.5])]), "y"), [-1, -0.5, -0.25])
        for m in [l1, l2] {
            XCTAssertEqual(values(try predict(m, ["x": arr(Array(repeating: 0, count: m === l1 ? 4 : 2))]), "y"),
                           Array(repeating: 0, count: m === l1 ? 4 : 2), "zero vector stays zero")
        }
        XCTAssertEqual(values(try predict(lmax, ["x": arr([0, 0, 0])]), "y"), [0, 0, 0])
    }

    func testNormalizerMalformedSpecs() {
        assertLoadFails(spec(normalizer(.UNRECOGNIZED(7)), [F.array("x", [2])], [F.array("y", [2])]), "normType 7")
        assertLoadFails(spec(normalizer(.l2), [F.double("x")], [F.array("y", [1])]), "'x'", "expected multiArray")
        assertLoadFails(spec(normalizer(.l2), [F.array("x", [2])], [F.array("y", [3])]), "'y'", "writes 2 values")
    }

    // MARK: dictVectorizer

    func dictVectorizer(strings: [String]? = nil, ints: [Int64]? = nil) -> CoreML_Specification_Model.OneOf_Type {
        var d = CoreML_Specification_DictVectorizer()
        if let strings { var v = CoreML_Specification_StringVector(); v.vector = strings; d.stringToIndex = v }
        if let ints { var v = CoreML_Specification_Int64Vector(); v.vector = ints; d.int64ToIndex = v }
        return .dictVectorizer(d)
    }

    func testDictVectorizerDense() throws {
        // The format's own example: ["a","c","b","z"] and {"a": 4, "c": 8} → [4, 8, 0, 0].
        let m = try load(spec(dictVectorizer(strings: ["a", "c", "b", "z"]), [F.dict("d", int64Keys: false)], [F.array("y", [4])]))
        XCTAssertEqual(values(try predict(m, ["d": MLFeatureValue(dictionary: .stringKeyed(["a": 4, "c": 8]))]), "y"), [4, 8, 0, 0])
        // Unknown keys are ignored (as scikit-learn's transform does).
        XCTAssertEqual(values(try predict(m, ["d": MLFeatureValue(dictionary: .stringKeyed(["z": -1.5, "q": 3]))]), "y"), [0, 0, 0, -1.5])
        XCTAssertEqual(values(try predict(m, ["d": MLFeatureValue(dictionary: .stringKeyed([:]))]), "y"), [0, 0, 0, 0])
    }

    func testDictVectorizerInt64SparseOutput() throws {
        let m = try load(spec(dictVectorizer(ints: [10, 20, 30]), [F.dict("d", int64Keys: true)], [F.dict("y", int64Keys: true)]))
        XCTAssertEqual(try predict(m, ["d": MLFeatureValue(dictionary: .int64Keyed([20: 1.5, 99: 3, 10: -2]))]).featureValue(for: "y")?.dictionary,
                       .int64Keyed([1: 1.5, 0: -2]))
    }

    func testDictVectorizerWrongKeyType() throws {
        let m = try load(spec(dictVectorizer(strings: ["a", "b"]), [F.dict("d", int64Keys: false)], [F.array("y", [2])]))
        // The description check names the feature...
        assertPredictFails(try predict(m, ["d": MLFeatureValue(dictionary: .int64Keyed([1: 1]))]), feature: "d", "int64", "string")
        // ...and so does the kind when called directly (as a pipeline may).
        XCTAssertThrowsError(try m.compiled.prediction(from: MLDictionaryFeatureProvider(dictionary: ["d": MLFeatureValue(dictionary: .int64Keyed([1: 1]))]),
                                                        options: MLPredictionOptions())) { error in
            XCTAssertEqual((error as? MLModelError)?.feature, "d")
            XCTAssertTrue("\(error)".contains("keys are int64, expected string"), "\(error)")
        }
    }

    func testDictVectorizerMalformedSpecs() {
        assertLoadFails(spec(.dictVectorizer(.init()), [F.dict("d", int64Keys: false)], [F.array("y", [2])]), "no key list")
        assertLoadFails(spec(dictVectorizer(ints: [1, 2]), [F.dict("d", int64Keys: false)], [F.array("y", [2])]), "'d'", "string keys")
        assertLoadFails(spec(dictVectorizer(strings: ["a", "b"]), [F.dict("d", int64Keys: false)], [F.array("y", [3])]), "'y'", "writes 2 values")
        assertLoadFails(spec(dictVectorizer(strings: ["a"]), [F.dict("d", int64Keys: false)], [F.dict("y", int64Keys: false)]), "'y'", "int64 keys")
        assertLoadFails(spec(dictVectorizer(strings: ["a"]), [F.string("d")], [F.array("y", [1])]), "'d'", "expected dictionary")
    }

    // MARK: featureVectorizer

    func featureVectorizer(_ columns: [(String, UInt64)]) -> CoreML_Specification_Model.OneOf_Type {
        var f = CoreML_Specification_FeatureVectorizer()
        f.inputList = columns.map { var c = CoreML_Specification_FeatureVectorizer.InputColumn(); c.inputColumn = $0.0; c.inputDimensions = $0.1; return c }
        return .featureVectorizer(f)
    }

    func testFeatureVectorizerConcatenates() throws {
        // Listed in an order other than the description's: d, a, c, b.
        let m = try load(spec(featureVectorizer([("d", 4), ("a", 1), ("c", 3), ("b", 1)]),
                              [F.double("a"), F.int64("b"), F.array("c", [3], .float32), F.dict("d", int64Keys: true)],
                              [F.array("features", [9])]))
        let out = try predict(m, ["a": MLFeatureValue(double: 0.5), "b": MLFeatureValue(int64: -3),
                                  "c": arr([1, 2, 3], .float32), "d": MLFeatureValue(dictionary: .int64Keyed([3: 7, 0: -1]))])
        XCTAssertEqual(values(out, "features"), [-1, 0, 0, 7, 0.5, 1, 2, 3, -3])
        // A dictionary key outside the column's slots is an error naming the column.
        assertPredictFails(try predict(m, ["a": MLFeatureValue(double: 0), "b": MLFeatureValue(int64: 0), "c": arr([0, 0, 0], .float32),
                                           "d": MLFeatureValue(dictionary: .int64Keyed([4: 1]))]), feature: "d", "key 4", "0..<4")
    }

    func testFeatureVectorizerFlexibleArrayIsChecked() throws {
        let m = try load(spec(featureVectorizer([("x", 2), ("y", 1)]), [F.array("x", []), F.double("y")], [F.array("v", [3])]))
        XCTAssertEqual(values(try predict(m, ["x": arr([4, 5]), "y": MLFeatureValue(double: 6)]), "v"), [4, 5, 6])
        assertPredictFails(try predict(m, ["x": arr([4, 5, 6]), "y": MLFeatureValue(double: 6)]), feature: "x", "expected 2 elements")
    }

    func testFeatureVectorizerMalformedSpecs() {
        assertLoadFails(spec(featureVectorizer([]), [F.double("a")], [F.array("v", [1])]), "empty inputList")
        assertLoadFails(spec(featureVectorizer([("z", 1)]), [F.double("a")], [F.array("v", [1])]), "'z'", "not an input")
        assertLoadFails(spec(featureVectorizer([("a", 0)]), [F.double("a")], [F.array("v", [1])]), "'a'", "inputDimensions 0")
        assertLoadFails(spec(featureVectorizer([("a", 2)]), [F.double("a")], [F.array("v", [2])]), "'a'", "2 dimensions")
        assertLoadFails(spec(featureVectorizer([("a", 4)]), [F.array("a", [3])], [F.array("v", [4])]), "'a'", "declared with 3 elements")
        assertLoadFails(spec(featureVectorizer([("a", 3)]), [F.array("a", [3])], [F.array("v", [5])]), "'v'", "writes 3 values")
        assertLoadFails(spec(featureVectorizer([("a", 3)]), [F.dict("a", int64Keys: false)], [F.array("v", [3])]), "'a'", "string keys")
        assertLoadFails(spec(featureVectorizer([("a", 1)]), [F.string("a")], [F.array("v", [1])]), "'a'")
    }

    // MARK: categoricalMapping

    func mapping(_ s2i: [String: Int64]? = nil, _ i2s: [Int64: String]? = nil,
                 unknown: CoreML_Specification_CategoricalMapping.OneOf_ValueOnUnknown? = nil) -> CoreML_Specification_Model.OneOf_Type {
        var c = CoreML_Specification_CategoricalMapping()
        if let s2i { var m = CoreML_Specification_StringToInt64Map(); m.map = s2i; c.stringToInt64Map = m }
        if let i2s { var m = CoreML_Specification_Int64ToStringMap(); m.map = i2s; c.int64ToStringMap = m }
        c.valueOnUnknown = unknown
        return .categoricalMapping(c)
    }

    func testCategoricalMappingStringToInt64() throws {
        let table: [String: Int64] = ["red": 0, "green": 1, "blue": 2, "black": -3]
        let m = try load(spec(mapping(table, unknown: .int64Value(-1)), [F.string("color")], [F.int64("code")]))
        XCTAssertEqual(try predict(m, ["color": MLFeatureValue(string: "blue")]).featureValue(for: "code")?.int64Value, 2)
        XCTAssertEqual(try predict(m, ["color": MLFeatureValue(string: "black")]).featureValue(for: "code")?.int64Value, -3)
        XCTAssertEqual(try predict(m, ["color": MLFeatureValue(string: "Red")]).featureValue(for: "code")?.int64Value, -1)

        let strict = try load(spec(mapping(table), [F.string("color")], [F.int64("code")]))
        assertPredictFails(try predict(strict, ["color": MLFeatureValue(string: "purple")]), feature: "color", "'purple'", "not in the categorical mapping")
    }

    func testCategoricalMappingInt64ToString() throws {
        let m = try load(spec(mapping(nil, [0: "zero", 2: "two", -5: "minus five"], unknown: .strValue("unknown")), [F.int64("n")], [F.string("word")]))
        XCTAssertEqual(try predict(m, ["n": MLFeatureValue(int64: -5)]).featureValue(for: "word")?.stringValue, "minus five")
        XCTAssertEqual(try predict(m, ["n": MLFeatureValue(double: 2)]).featureValue(for: "word")?.stringValue, "two")
        XCTAssertEqual(try predict(m, ["n": MLFeatureValue(int64: 1)]).featureValue(for: "word")?.stringValue, "unknown")
        let strict = try load(spec(mapping(nil, [0: "zero"]), [F.int64("n")], [F.string("word")]))
        assertPredictFails(try predict(strict, ["n": MLFeatureValue(int64: 7)]), feature: "n", "value 7")
    }

    func testCategoricalMappingSequences() throws {
        let m = try load(spec(mapping(["a": 1, "b": 2], unknown: .int64Value(0)), [F.sequence("s", int64: false)], [F.sequence("t", int64: true)]))
        let out = try predict(m, ["s": MLFeatureValue(sequence: MLSequence(strings: ["b", "a", "q"]))])
        XCTAssertEqual(out.featureValue(for: "t")?.sequenceValue?.int64Values, [2, 1, 0])
    }

    func testCategoricalMappingMalformedSpecs() {
        assertLoadFails(spec(mapping(), [F.string("s")], [F.int64("t")]), "no mapping")
        assertLoadFails(spec(mapping(["a": 1], unknown: .strValue("x")), [F.string("s")], [F.int64("t")]), "strValue")
        assertLoadFails(spec(mapping(nil, [1: "a"], unknown: .int64Value(0)), [F.int64("s")], [F.string("t")]), "int64Value")
        assertLoadFails(spec(mapping(["a": 1]), [F.string("s")], [F.string("t")]), "'t'", "produces int64")
        assertLoadFails(spec(mapping(["a": 1]), [F.int64("s")], [F.int64("t")]), "'s'")
        assertLoadFails(spec(mapping(["a": 1]), [F.sequence("s", int64: false)], [F.int64("t")]), "'t'", "sequence of int64")
    }

    // MARK: arrayFeatureExtractor

    func extractor(_ indices: [UInt64]) -> CoreML_Specification_Model.OneOf_Type {
        var e = CoreML_Specification_ArrayFeatureExtractor(); e.extractIndex = indices; return .arrayFeatureExtractor(e)
    }

    func testArrayFeatureExtractorOutputs() throws {
        let x = arr([0.5, -2.7, 3, 4.25, 9, -1])
        let one = try load(spec(extractor([3]), [F.array("x", [6])], [F.double("v")]))
        XCTAssertEqual(try predict(one, ["x": x]).featureValue(for: "v")?.doubleValue, 4.25)
        // int64 output: truncated toward zero.
        let i64 = try load(spec(extractor([1]), [F.array("x", [6])], [F.int64("v")]))
        XCTAssertEqual(try predict(i64, ["x": x]).featureValue(for: "v")?.int64Value, -2)
        let many = try load(spec(extractor([5, 0, 2, 2]), [F.array("x", [6])], [F.array("v", [4])]))
        XCTAssertEqual(values(try predict(many, ["x": x]), "v"), [-1, 0.5, 3, 3])
        // One index into an array output gives an array of one.
        let single = try load(spec(extractor([4]), [F.array("x", [6])], [F.array("v", [1])]))
        XCTAssertEqual(values(try predict(single, ["x": x]), "v"), [9])
        assertPredictFails(try predict(i64, ["x": arr([0, .nan, 0, 0, 0, 0])]), feature: "x", "nan", "int64 output")
    }

    func testArrayFeatureExtractorFlexibleInputIndexIsChecked() throws {
        let m = try load(spec(extractor([0, 4]), [F.array("x", [])], [F.array("v", [2])]))
        XCTAssertEqual(values(try predict(m, ["x": arr([1, 2, 3, 4, 5])]), "v"), [1, 5])
        assertPredictFails(try predict(m, ["x": arr([1, 2, 3])]), feature: "x", "3 elements", "index 4")
    }

    func testArrayFeatureExtractorMalformedSpecs() {
        assertLoadFails(spec(extractor([]), [F.array("x", [3])], [F.double("v")]), "no extractIndex")
        assertLoadFails(spec(extractor([3]), [F.array("x", [3])], [F.double("v")]), "'x'", "extractIndex[0] = 3", "3 elements")
        assertLoadFails(spec(extractor([0, 1]), [F.array("x", [3])], [F.double("v")]), "'v'", "2 indices")
        assertLoadFails(spec(extractor([0, 1]), [F.array("x", [3])], [F.array("v", [3])]), "'v'", "writes 2 values")
        assertLoadFails(spec(extractor([0]), [F.double("x")], [F.double("v")]), "'x'")
    }

    // MARK: identity

    func testIdentityPassesInputsThrough() throws {
        let m = try load(spec(.identity(.init()), [F.array("x", [3]), F.string("s"), F.int64("n")], [F.array("x", [3]), F.string("s"), F.int64("n")]))
        let x = arr([1.5, -2, 3])
        let out = try predict(m, ["x": x, "s": MLFeatureValue(string: "row1"), "n": MLFeatureValue(int64: -30)])
        XCTAssertEqual(values(out, "x"), [1.5, -2, 3])
        XCTAssertEqual(out.featureValue(for: "s")?.stringValue, "row1")
        XCTAssertEqual(out.featureValue(for: "n")?.int64Value, -30)
        // With a backing, the elements are copied into it.
        let backing = try MLMultiArray(shape: [3], dataType: .float32)
        var options = MLPredictionOptions()
        options.outputBackings["x"] = backing
        let backed = try predict(m, ["x": x, "s": MLFeatureValue(string: ""), "n": MLFeatureValue(int64: 0)], options: options)
        XCTAssertTrue(backed.featureValue(for: "x")?.multiArrayValue === backing)
        XCTAssertEqual(backing.doubleValues(), [1.5, -2, 3])
    }

    func testIdentityRenamesByPosition() throws {
        let m = try load(spec(.identity(.init()), [F.int64("a"), F.string("b")], [F.double("x"), F.string("y")]))
        let out = try predict(m, ["a": MLFeatureValue(int64: 4), "b": MLFeatureValue(string: "q")])
        guard case .double(let d)? = out.featureValue(for: "x")?.storage else { return XCTFail("x is not a double") }
        XCTAssertEqual(d, 4)
        XCTAssertEqual(out.featureValue(for: "y")?.stringValue, "q")
    }

    func testIdentityMalformedSpecs() {
        assertLoadFails(spec(.identity(.init()), [F.string("a")], [F.double("a")]), "'a'", "passes on the input 'a'")
        assertLoadFails(spec(.identity(.init()), [F.string("a")], [F.string("a"), F.string("b")]), "'b'", "only 1 input")
    }

    // MARK: scikit-learn's one-hot chain

    /// What coremltools writes for `OneHotEncoder` on 2 integer columns (categories 0..2 and
    /// 0..1, handle_unknown='ignore'): a pipeline of, per column, an arrayFeatureExtractor
    /// (Int64 out) and a sparse oneHotEncoder, then a featureVectorizer of the dictionaries.
    func testScikitLearnOneHotPipeline() throws {
        var stages: [CoreML_Specification_Model] = []
        var columns: [(String, UInt64)] = []
        for (column, n) in [(0, 3), (1, 2)] {
            let name = "__OHE_\(column)__"
            stages.append(spec(extractor([UInt64(column)]), [F.array("input", [2])], [F.int64(name)]))
            stages.append(spec(.oneHotEncoder(ohe(ints: (0..<Int64(n)).map { $0 }, sparse: true, ignore: true)),
                               [F.int64(name)], [F.dict(name, int64Keys: true)]))
            columns.append((name, UInt64(n)))
        }
        stages.append(spec(featureVectorizer(columns), columns.map { F.dict($0.0, int64Keys: true) }, [F.array("output", [5])]))
        var pipeline = CoreML_Specification_Pipeline()
        pipeline.models = stages
        let m = try load(spec(.pipeline(pipeline), [F.array("input", [2])], [F.array("output", [5])]))
        // [2, 0] → column 0 hot at 2, column 1 hot at 0: [0, 0, 1, 1, 0].
        XCTAssertEqual(values(try predict(m, ["input": arr([2, 0])]), "output"), [0, 0, 1, 1, 0])
        XCTAssertEqual(values(try predict(m, ["input": arr([0, 1])]), "output"), [1, 0, 0, 0, 1])
        // Unknown 7 in column 0 → its slots all zero.
        XCTAssertEqual(values(try predict(m, ["input": arr([7, 1])]), "output"), [0, 0, 0, 0, 1])
    }

    func testSummariesDescribeTheCompiledForm() throws {
        let m = try load(spec(.oneHotEncoder(ohe(strings: ["a", "b"], sparse: true)), [F.string("s")], [F.dict("y", int64Keys: true)]))
        XCTAssertEqual(m.compiled.summary, ["One-hot encoder: 2 string categories, sparse dictionary output, unknown categories are errors"])
        let s = try load(spec(.scaler(scaler([1, 2], [3, 4])), [F.array("x", [2])], [F.array("y", [2])]))
        XCTAssertEqual(s.compiled.summary, ["Scaler: (x + shift) * scale, shift 2 values, scale 2 values"])
    }
}
