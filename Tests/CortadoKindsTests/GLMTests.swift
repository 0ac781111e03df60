import CortadoModels
import XCTest

/// GLM regressor and classifier on small specs built here.
///
/// Expected values: the linear scores are worked by hand in the comments; the transformed
/// values were computed once with scipy (`expit`, `norm.cdf`, `softmax`) by a short script
/// (`glm_reference.py`, numpy 2.3 / scipy in the project venv) and pasted. Tolerance 1e-12
/// absolute: double arithmetic with libm's exp/erfc, which agree with scipy to a few ulps.
final class GLMTests: XCTestCase {
    override func setUp() {
        CortadoModels.registerBuiltinKinds()
    }

    private let tolerance = 1e-12

    // MARK: Spec builders

    private func feature(_ name: String, _ type: MLFeatureType, shape: [Int64] = [], keys: MLFeatureType = .int64) -> CoreML_Specification_FeatureDescription {
        var f = CoreML_Specification_FeatureDescription()
        f.name = name
        switch type {
        case .int64: f.type.int64Type = .init()
        case .double: f.type.doubleType = .init()
        case .string: f.type.stringType = .init()
        case .multiArray:
            f.type.multiArrayType.shape = shape
            f.type.multiArrayType.dataType = .double
        case .dictionary:
            if keys == .int64 { f.type.dictionaryType.int64KeyType = .init() } else { f.type.dictionaryType.stringKeyType = .init() }
        default: XCTFail("unsupported test feature type \(type)")
        }
        return f
    }

    private func regressor(weights: [[Double]], offsets: [Double], transform: CoreML_Specification_GLMRegressor.PostEvaluationTransform = .noTransform,
                           inputs: [CoreML_Specification_FeatureDescription], output: CoreML_Specification_FeatureDescription) -> CoreML_Specification_Model {
        var glm = CoreML_Specification_GLMRegressor()
        glm.weights = weights.map { var r = CoreML_Specification_GLMRegressor.DoubleArray(); r.value = $0; return r }
        glm.offset = offsets
        glm.postEvaluationTransform = transform
        var spec = CoreML_Specification_Model()
        spec.specificationVersion = 1
        spec.description_p.input = inputs
        spec.description_p.output = [output]
        spec.description_p.predictedFeatureName = output.name
        spec.glmRegressor = glm
        return spec
    }

    private enum Labels { case ints([Int64]), strings([String]) }

    private func classifier(weights: [[Double]], offsets: [Double], labels: Labels,
                            encoding: CoreML_Specification_GLMClassifier.ClassEncoding,
                            transform: CoreML_Specification_GLMClassifier.PostEvaluationTransform = .logit,
                            inputs: [CoreML_Specification_FeatureDescription]? = nil) -> CoreML_Specification_Model {
        var glm = CoreML_Specification_GLMClassifier()
        glm.weights = weights.map { var r = CoreML_Specification_GLMClassifier.DoubleArray(); r.value = $0; return r }
        glm.offset = offsets
        glm.postEvaluationTransform = transform
        glm.classEncoding = encoding
        let labelType: MLFeatureType
        switch labels {
        case .ints(let l):
            var v = CoreML_Specification_Int64Vector(); v.vector = l
            glm.int64ClassLabels = v
            labelType = .int64
        case .strings(let l):
            var v = CoreML_Specification_StringVector(); v.vector = l
            glm.stringClassLabels = v
            labelType = .string
        }
        var spec = CoreML_Specification_Model()
        spec.specificationVersion = 1
        spec.description_p.input = inputs ?? [feature("x", .multiArray, shape: [2])]
        spec.description_p.output = [feature("label", labelType), feature("probs", .dictionary, keys: labelType)]
        spec.description_p.predictedFeatureName = "label"
        spec.description_p.predictedProbabilitiesName = "probs"
        spec.glmClassifier = glm
        return spec
    }

    private func array(_ values: [Double]) throws -> MLFeatureValue {
        MLFeatureValue(multiArray: try MLMultiArray(values))
    }

    private func predict(_ spec: CoreML_Specification_Model, _ inputs: [String: MLFeatureValue], options: MLPredictionOptions = MLPredictionOptions()) throws -> MLFeatureProvider {
        try MLModel(specification: spec, name: "glm").prediction(from: MLDictionaryFeatureProvider(dictionary: inputs), options: options)
    }

    private func assertLoadFails(_ spec: CoreML_Specification_Model, mentioning words: [String], file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertThrowsError(try MLModel(specification: spec, name: "bad"), file: file, line: line) { error in
            guard let e = error as? MLModelError else { return XCTFail("not an MLModelError: \(error)", file: file, line: line) }
            XCTAssertEqual(e.code, .invalidModel, "\(e)", file: file, line: line)
            for w in words { XCTAssertTrue(e.description.contains(w), "'\(w)' not in: \(e)", file: file, line: line) }
        }
    }

    // MARK: Regressor

    func testRegressorNamedInputsNoTransform() throws {
        // y = 0.5 + 1·a - 2·b + 0.25·c; a=2, b=3 (int64), c=-4: 0.5 + 2 - 6 - 1 = -4.5.
        let spec = regressor(weights: [[1, -2, 0.25]], offsets: [0.5],
                             inputs: [feature("a", .double), feature("b", .int64), feature("c", .double)], output: feature("y", .double))
        let out = try predict(spec, ["a": MLFeatureValue(double: 2), "b": MLFeatureValue(int64: 3), "c": MLFeatureValue(double: -4)])
        XCTAssertEqual(out.featureValue(for: "y")?.type, .double)
        XCTAssertEqual(out.featureValue(for: "y")!.doubleValue, -4.5, accuracy: tolerance)
    }

    func testRegressorLogitAndProbitTwoTargetsIntoMultiArray() throws {
        // s0 = 0.1 + 0.5·1 - 1·2 + 2·0.5 = -0.4; s1 = -0.2 + 1.5·1 + 0.25·2 - 0.75·0.5 = 1.425.
        let weights: [[Double]] = [[0.5, -1, 2], [1.5, 0.25, -0.75]]
        let cases: [(CoreML_Specification_GLMRegressor.PostEvaluationTransform, [Double])] = [
            (.noTransform, [-0.4, 1.425]),
            (.logit, [0.401312339887548, 0.8061210621761402]),      // scipy expit
            (.probit, [0.3445782583896758, 0.9229213994479282]),    // scipy norm.cdf
        ]
        for (transform, expected) in cases {
            let spec = regressor(weights: weights, offsets: [0.1, -0.2], transform: transform,
                                 inputs: [feature("x", .multiArray, shape: [3])], output: feature("y", .multiArray, shape: [2]))
            let y = try XCTUnwrap(predict(spec, ["x": array([1, 2, 0.5])]).featureValue(for: "y")?.multiArrayValue)
            XCTAssertEqual(y.shape, [2])
            XCTAssertEqual(y.double(at: 0), expected[0], accuracy: tolerance, "\(transform)")
            XCTAssertEqual(y.double(at: 1), expected[1], accuracy: tolerance, "\(transform)")
        }
    }

    func testRegressorWritesIntoOutputBacking() throws {
        let spec = regressor(weights: [[0.5, -1, 2], [1.5, 0.25, -0.75]], offsets: [0.1, -0.2],
                             inputs: [feature("x", .multiArray, shape: [3])], output: feature("y", .multiArray, shape: [2]))
        let backing = try MLMultiArray(shape: [2], dataType: .float32)
        var options = MLPredictionOptions()
        options.outputBackings = ["y": backing]
        let y = try XCTUnwrap(predict(spec, ["x": array([1, 2, 0.5])], options: options).featureValue(for: "y")?.multiArrayValue)
        XCTAssertTrue(y === backing)
        XCTAssertEqual(backing.double(at: 0), Double(Float(-0.4)))
        XCTAssertEqual(backing.double(at: 1), Double(Float(1.425)))
    }

    func testRegressorDenseBatchMatchesRows() throws {
        let spec = regressor(weights: [[0.5, -1, 2], [1.5, 0.25, -0.75]], offsets: [0.1, -0.2], transform: .logit,
                             inputs: [feature("x", .multiArray, shape: [3])], output: feature("y", .multiArray, shape: [2]))
        let model = try MLModel(specification: spec)
        let dense = try XCTUnwrap(model.compiled as? MLDenseBatchPredicting)
        XCTAssertEqual(dense.inputWidth, 3)
        XCTAssertEqual(dense.outputWidth, 2)
        let rows: [Double] = [1, 2, 0.5, 0, 0, 0]
        var out = [Double](repeating: .nan, count: 4)
        dense.predict(rows: rows, count: 2, into: &out)
        XCTAssertEqual(out[0], 0.401312339887548, accuracy: tolerance)
        XCTAssertEqual(out[1], 0.8061210621761402, accuracy: tolerance)
        XCTAssertEqual(out[2], 1 / (1 + exp(-0.1)), accuracy: tolerance)   // x = 0: sigmoid(offset)
        XCTAssertEqual(out[3], 1 / (1 + exp(0.2)), accuracy: tolerance)
    }

    // MARK: Classifier

    func testBinaryOneVsRestLogitIntLabels() throws {
        // One row scores the second class (8): s = 0.5 + 2·0.25 - 1·1.5 = -0.5,
        // P(8) = sigmoid(-0.5) = 0.3775406687981454, P(3) = 1 - P(8); label 3.
        let spec = classifier(weights: [[2, -1]], offsets: [0.5], labels: .ints([3, 8]), encoding: .oneVsRest)
        let out = try predict(spec, ["x": array([0.25, 1.5])])
        XCTAssertEqual(out.featureValue(for: "label")?.int64Value, 3)
        guard case .int64Keyed(let p)? = out.featureValue(for: "probs")?.dictionary else { return XCTFail("no int64-keyed probabilities") }
        XCTAssertEqual(p[8]!, 0.3775406687981454, accuracy: tolerance)
        XCTAssertEqual(p[3]!, 0.6224593312018546, accuracy: tolerance)
    }

    func testBinaryReferenceClassProbitStringLabels() throws {
        // Same score -0.5; P(yes) = Φ(-0.5) = 0.3085375387259869 (scipy norm.cdf).
        let spec = classifier(weights: [[2, -1]], offsets: [0.5], labels: .strings(["no", "yes"]), encoding: .referenceClass, transform: .probit)
        let out = try predict(spec, ["x": array([0.25, 1.5])])
        XCTAssertEqual(out.featureValue(for: "label")?.stringValue, "no")
        guard case .stringKeyed(let p)? = out.featureValue(for: "probs")?.dictionary else { return XCTFail("no string-keyed probabilities") }
        XCTAssertEqual(p["yes"]!, 0.3085375387259869, accuracy: tolerance)
        XCTAssertEqual(p["no"]!, 0.6914624612740131, accuracy: tolerance)
        // A large positive score flips the label.
        let flipped = try predict(spec, ["x": array([3, 0])])
        XCTAssertEqual(flipped.featureValue(for: "label")?.stringValue, "yes")
    }

    func testOneVsRestThreeClassesNormalizesSigmoids() throws {
        // s = [0.25, 2.0, -2.0]; sigmoid(s) / Σ sigmoid(s) (scipy).
        let spec = classifier(weights: [[1, 0], [0, 1], [-1, -1]], offsets: [0, 0.5, -0.25], labels: .strings(["cat", "dog", "fish"]), encoding: .oneVsRest)
        let out = try predict(spec, ["x": array([0.25, 1.5])])
        XCTAssertEqual(out.featureValue(for: "label")?.stringValue, "dog")
        guard case .stringKeyed(let p)? = out.featureValue(for: "probs")?.dictionary else { return XCTFail("no probabilities") }
        XCTAssertEqual(p["cat"]!, 0.3598674673233327, accuracy: tolerance)
        XCTAssertEqual(p["dog"]!, 0.5638268643001899, accuracy: tolerance)
        XCTAssertEqual(p["fish"]!, 0.0763056683764774, accuracy: tolerance)
    }

    func testReferenceClassThreeClassesIsMultinomialLogit() throws {
        // Rows score classes 20 and 30 against reference 10: s = [0.25, 2.0];
        // P = softmax(0, 0.25, 2.0) (scipy).
        let spec = classifier(weights: [[1, 0], [0, 1]], offsets: [0, 0.5], labels: .ints([10, 20, 30]), encoding: .referenceClass)
        let out = try predict(spec, ["x": array([0.25, 1.5])])
        XCTAssertEqual(out.featureValue(for: "label")?.int64Value, 30)
        guard case .int64Keyed(let p)? = out.featureValue(for: "probs")?.dictionary else { return XCTFail("no probabilities") }
        XCTAssertEqual(p[10]!, 0.10337967258782796, accuracy: tolerance)
        XCTAssertEqual(p[20]!, 0.1327421271716281, accuracy: tolerance)
        XCTAssertEqual(p[30]!, 0.7638782002405439, accuracy: tolerance)
    }

    func testTiesGoToTheFirstClass() throws {
        // Score exactly 0: P = 0.5 / 0.5, and the first label wins (as sklearn's predict: class 1 only if > 0).
        let spec = classifier(weights: [[1, 1]], offsets: [0], labels: .ints([4, 9]), encoding: .oneVsRest)
        let out = try predict(spec, ["x": array([0.5, -0.5])])
        XCTAssertEqual(out.featureValue(for: "label")?.int64Value, 4)
    }

    func testClassifierWithScalarInputsAndNoProbabilityOutput() throws {
        var spec = classifier(weights: [[2, -1]], offsets: [0.5], labels: .ints([3, 8]), encoding: .oneVsRest,
                              inputs: [feature("u", .double), feature("v", .int64)])
        spec.description_p.output = [feature("label", .int64)]
        spec.description_p.predictedProbabilitiesName = ""
        // s = 0.5 + 2·1 - 1·1 = 1.5 > 0: label 8.
        let out = try predict(spec, ["u": MLFeatureValue(double: 1), "v": MLFeatureValue(int64: 1)])
        XCTAssertEqual(out.featureValue(for: "label")?.int64Value, 8)
        XCTAssertEqual(out.featureNames, ["label"])
    }

    func testClassifierDenseBatchGivesProbabilities() throws {
        let spec = classifier(weights: [[1, 0], [0, 1], [-1, -1]], offsets: [0, 0.5, -0.25], labels: .strings(["cat", "dog", "fish"]), encoding: .oneVsRest)
        let dense = try XCTUnwrap(try MLModel(specification: spec).compiled as? MLDenseBatchPredicting)
        XCTAssertEqual(dense.outputWidth, 3)
        var out = [Double](repeating: .nan, count: 3)
        dense.predict(rows: [0.25, 1.5], count: 1, into: &out)
        XCTAssertEqual(out[1], 0.5638268643001899, accuracy: tolerance)
        XCTAssertEqual(out.reduce(0, +), 1, accuracy: tolerance)
    }

    // MARK: Malformed specs fail at load

    func testWeightsNotMatchingInputsFailAtLoad() {
        // Three weights per row, two input values.
        let spec = regressor(weights: [[1, 2, 3]], offsets: [0], inputs: [feature("a", .double), feature("b", .double)], output: feature("y", .double))
        assertLoadFails(spec, mentioning: ["weight rows have 3 values", "inputs give 2 values"])
        let cls = classifier(weights: [[1, 2, 3]], offsets: [0], labels: .ints([0, 1]), encoding: .oneVsRest)
        assertLoadFails(cls, mentioning: ["glmClassifier", "3 values"])
    }

    func testMalformedRegressorsFailAtLoad() {
        let x = [feature("x", .multiArray, shape: [2])]
        assertLoadFails(regressor(weights: [[1, 2], [3, 4]], offsets: [0], inputs: x, output: feature("y", .multiArray, shape: [2])),
                        mentioning: ["2 weight rows but 1 offsets"])
        assertLoadFails(regressor(weights: [[1, 2], [3]], offsets: [0, 0], inputs: x, output: feature("y", .multiArray, shape: [2])),
                        mentioning: ["weight row 1 has 1 values but row 0 has 2"])
        assertLoadFails(regressor(weights: [], offsets: [], inputs: x, output: feature("y", .double)), mentioning: ["no weights"])
        assertLoadFails(regressor(weights: [[1, 2], [3, 4]], offsets: [0, 0], inputs: x, output: feature("y", .double)),
                        mentioning: ["2 targets", "single double"])
        assertLoadFails(regressor(weights: [[1, .nan]], offsets: [0], inputs: x, output: feature("y", .double)), mentioning: ["finite"])
        assertLoadFails(regressor(weights: [[1, 2]], offsets: [0], inputs: x, output: feature("y", .string)), mentioning: ["output is string"])
    }

    func testMalformedClassifiersFailAtLoad() {
        // ReferenceClass needs K-1 rows; OneVsRest K rows (one for two classes).
        assertLoadFails(classifier(weights: [[1, 0], [0, 1], [1, 1]], offsets: [0, 0, 0], labels: .ints([1, 2, 3]), encoding: .referenceClass),
                        mentioning: ["ReferenceClass", "3 weight rows for 3 classes", "expected 2"])
        assertLoadFails(classifier(weights: [[1, 0], [0, 1]], offsets: [0, 0], labels: .ints([1, 2, 3]), encoding: .oneVsRest),
                        mentioning: ["OneVsRest", "2 weight rows for 3 classes", "expected 3"])
        assertLoadFails(classifier(weights: [[1, 0], [0, 1]], offsets: [0, 0], labels: .ints([1, 2]), encoding: .oneVsRest),
                        mentioning: ["2 weight rows for 2 classes", "expected 1"])
        assertLoadFails(classifier(weights: [[1, 0], [0, 1], [1, 1]], offsets: [0, 0, 0], labels: .ints([1, 2, 3]), encoding: .oneVsRest, transform: .probit),
                        mentioning: ["Probit", "3 classes"])
        assertLoadFails(classifier(weights: [[1, 0]], offsets: [0, 1], labels: .ints([1, 2]), encoding: .oneVsRest),
                        mentioning: ["1 weight rows but 2 offsets"])
        var unlabeled = classifier(weights: [[1, 0]], offsets: [0], labels: .ints([1, 2]), encoding: .oneVsRest)
        unlabeled.glmClassifier.classLabels = nil
        assertLoadFails(unlabeled, mentioning: ["no class labels"])
        assertLoadFails(classifier(weights: [[1, 0]], offsets: [0], labels: .ints([1]), encoding: .oneVsRest), mentioning: ["1 class label"])
        // The predicted label output must have the labels' type.
        var mistyped = classifier(weights: [[1, 0]], offsets: [0], labels: .strings(["a", "b"]), encoding: .oneVsRest)
        mistyped.description_p.output[0] = feature("label", .int64)
        assertLoadFails(mistyped, mentioning: ["label", "string"])
    }

    func testWrongInputAtPredictNamesTheFeature() throws {
        let spec = classifier(weights: [[2, -1]], offsets: [0.5], labels: .ints([3, 8]), encoding: .oneVsRest)
        let model = try MLModel(specification: spec)
        XCTAssertThrowsError(try model.prediction(from: MLDictionaryFeatureProvider(dictionary: ["x": try array([1, 2, 3])]))) { error in
            XCTAssertEqual((error as? MLModelError)?.feature, "x", "\(error)")
        }
    }
}
