import CortadoModels
import Foundation
import XCTest

// Test-only stage kinds, so these tests do not depend on other kinds' progress. They
// register under Model.Type cases no Cortado kind implements (itemSimilarityRecommender,
// soundAnalysisPreprocessing) and read their parameters from the stage's metadata.

/// Every output y (multiArray) = a · (sum of all multiArray inputs) + b, elementwise.
/// Metadata: "a", "b" (numbers), "ignoreBackings" ("1": never write into a backing).
/// Fails if given an output backing for a feature it does not output (so tests can check
/// that a pipeline passes a stage only its own backings), and records the backings it saw.
private enum PipeTestAffineKind: MLModelKind {
    static let specTypes = ["itemSimilarityRecommender"]

    static func compile(_ spec: CoreML_Specification_Model, context: MLCompileContext) throws -> any MLCompiledModel {
        let meta = context.description.userDefined
        guard let a = Double(meta["a"] ?? "1"), let b = Double(meta["b"] ?? "0") else {
            throw MLModelError(.invalidModel, "test affine stage: bad parameter a or b")
        }
        return Affine(a: a, b: b, inputs: context.description.inputs.map(\.name),
                      outputs: context.description.outputs.map { ($0.name, $0.multiArrayConstraint?.shape ?? []) },
                      ignoreBackings: meta["ignoreBackings"] == "1")
    }

    final class Affine: MLCompiledModel, @unchecked Sendable {
        let a: Double, b: Double
        let inputs: [String]
        let outputs: [(String, [Int])]
        let ignoreBackings: Bool
        init(a: Double, b: Double, inputs: [String], outputs: [(String, [Int])], ignoreBackings: Bool) {
            self.a = a; self.b = b; self.inputs = inputs; self.outputs = outputs; self.ignoreBackings = ignoreBackings
        }
        var summary: [String] { ["affine a=\(a) b=\(b)"] }

        func prediction(from input: MLFeatureProvider, options: MLPredictionOptions) throws -> MLFeatureProvider {
            for name in options.outputBackings.keys where !outputs.contains(where: { $0.0 == name }) {
                throw MLModelError(.generic, feature: name, "test stage was given a backing for an output it does not produce")
            }
            var sum: [Double] = []
            for name in inputs {
                guard let v = input.featureValue(for: name)?.multiArrayValue?.doubleValues() else {
                    throw MLModelError.featureType(name, "test stage: missing input")
                }
                if sum.isEmpty { sum = v } else { for i in sum.indices { sum[i] += v[i] } }
            }
            var out: [String: MLFeatureValue] = [:]
            for (name, shape) in outputs {
                let values = sum.map { a * $0 + b }
                let array: MLMultiArray
                if ignoreBackings {
                    array = try MLMultiArray(values, shape: shape.isEmpty ? [values.count] : shape)
                } else {
                    array = try options.outputArray(named: name, shape: shape.isEmpty ? [values.count] : shape, dataType: .double)
                    values.withUnsafeBufferPointer { array.write(contiguous: $0) }
                }
                out[name] = MLFeatureValue(multiArray: array)
            }
            return MLDictionaryFeatureProvider(dictionary: out)
        }
    }
}

/// A classifier over one multiArray input: label "pos" if the sum of the input is
/// positive, else "neg"; probabilities {neg, pos} = {0, 1} or {1, 0}.
private enum PipeTestSignKind: MLModelKind {
    static let specTypes = ["soundAnalysisPreprocessing"]

    static func compile(_ spec: CoreML_Specification_Model, context: MLCompileContext) throws -> any MLCompiledModel {
        let labels = MLClassLabels.strings(["neg", "pos"])
        return Sign(input: context.description.inputs[0].name, names: try MLClassifierOutputNames(context.description, labels: labels), labels: labels)
    }

    final class Sign: MLCompiledModel, @unchecked Sendable {
        let input: String
        let names: MLClassifierOutputNames
        let labels: MLClassLabels
        init(input: String, names: MLClassifierOutputNames, labels: MLClassLabels) {
            self.input = input; self.names = names; self.labels = labels
        }
        var classLabels: MLClassLabels? { labels }
        func prediction(from input: MLFeatureProvider, options: MLPredictionOptions) throws -> MLFeatureProvider {
            let s = input.featureValue(for: self.input)!.multiArrayValue!.doubleValues().reduce(0, +)
            let winner = s > 0 ? 1 : 0
            let scores: [Double] = winner == 1 ? [0, 1] : [1, 0]
            return MLDictionaryFeatureProvider(dictionary: scores.withUnsafeBufferPointer {
                names.outputs(labels: labels, winner: winner, scores: $0)
            })
        }
    }
}

// MARK: Spec builders

private func arrayFeature(_ name: String, _ shape: [Int64], _ type: CoreML_Specification_ArrayFeatureType.ArrayDataType = .double) -> CoreML_Specification_FeatureDescription {
    var f = CoreML_Specification_FeatureDescription()
    f.name = name
    f.type.multiArrayType.shape = shape
    f.type.multiArrayType.dataType = type
    return f
}

private func scalarFeature(_ name: String, double: Bool = true) -> CoreML_Specification_FeatureDescription {
    var f = CoreML_Specification_FeatureDescription()
    f.name = name
    if double { f.type.doubleType = .init() } else { f.type.int64Type = .init() }
    return f
}

private func stringFeature(_ name: String) -> CoreML_Specification_FeatureDescription {
    var f = CoreML_Specification_FeatureDescription()
    f.name = name
    f.type.stringType = .init()
    return f
}

private func dictFeature(_ name: String) -> CoreML_Specification_FeatureDescription {
    var f = CoreML_Specification_FeatureDescription()
    f.name = name
    f.type.dictionaryType.stringKeyType = .init()
    return f
}

/// A test affine stage reading `inputs` and writing `outputs` (all DOUBLE arrays of `n`).
private func affineStage(_ inputs: [String], _ outputs: [String], a: Double, b: Double, n: Int64 = 3,
                         extra: [String: String] = [:]) -> CoreML_Specification_Model {
    var m = CoreML_Specification_Model()
    m.specificationVersion = 4
    m.description_p.input = inputs.map { arrayFeature($0, [n]) }
    m.description_p.output = outputs.map { arrayFeature($0, [n]) }
    m.description_p.metadata.userDefined = ["a": String(a), "b": String(b)].merging(extra) { $1 }
    m.itemSimilarityRecommender = .init()
    return m
}

private func pipelineSpec(inputs: [CoreML_Specification_FeatureDescription], outputs: [CoreML_Specification_FeatureDescription],
                          stages: [CoreML_Specification_Model], names: [String] = [],
                          kind: String = "pipeline") -> CoreML_Specification_Model {
    var p = CoreML_Specification_Pipeline()
    p.models = stages
    p.names = names
    var m = CoreML_Specification_Model()
    m.specificationVersion = 4
    m.description_p.input = inputs
    m.description_p.output = outputs
    switch kind {
    case "pipelineClassifier":
        var c = CoreML_Specification_PipelineClassifier(); c.pipeline = p; m.pipelineClassifier = c
    case "pipelineRegressor":
        var r = CoreML_Specification_PipelineRegressor(); r.pipeline = p; m.pipelineRegressor = r
    default:
        m.pipeline = p
    }
    return m
}

private func array(_ v: [Double]) -> MLFeatureValue { MLFeatureValue(multiArray: try! MLMultiArray(v)) }

private func values(_ out: MLFeatureProvider, _ name: String) -> [Double] {
    out.featureValue(for: name)?.multiArrayValue?.doubleValues() ?? []
}

// MARK: Tests

final class PipelineTests: XCTestCase {
    override func setUp() {
        super.setUp()
        CortadoModels.registerBuiltinKinds()
        for kind in [PipeTestAffineKind.self, PipeTestSignKind.self] as [any MLModelKind.Type] {
            // Never replace a real kind: only claim cases nothing else registered.
            let existing = MLModelKindRegistry.shared.kind(for: kind.specTypes[0])
            if existing.map({ ObjectIdentifier($0) == ObjectIdentifier(kind) }) ?? true { MLModelKindRegistry.shared.register(kind) }
        }
    }

    /// x → [h = 2x + 1] → [y = -h + 0.5]
    func twoStage() -> CoreML_Specification_Model {
        pipelineSpec(inputs: [arrayFeature("x", [3])], outputs: [arrayFeature("y", [3])],
                     stages: [affineStage(["x"], ["h"], a: 2, b: 1), affineStage(["h"], ["y"], a: -1, b: 0.5)],
                     names: ["scale", "shift"])
    }

    func testTwoStagesRunInOrder() throws {
        let model = try MLModel(specification: twoStage(), name: "pipe")
        let out = try model.prediction(from: MLDictionaryFeatureProvider(dictionary: ["x": array([1, -2, 0.25])]))
        // y = -(2x + 1) + 0.5 = -2x - 0.5
        XCTAssertEqual(values(out, "y"), [-2.5, 3.5, -1.0])
        XCTAssertNil(out.featureValue(for: "h"), "only the pipeline's declared outputs are returned")
        XCTAssertEqual(model.compiled.summary.first, "2 stages")
        XCTAssertTrue(model.compiled.summary.contains("stage 1 'shift' (itemSimilarityRecommender)"), "\(model.compiled.summary)")
    }

    func testStageReadsPipelineInputAndEarlierOutputsAndOverwrites() throws {
        // h = 2x + 1; h = 3h (stage 1 overwrites h); y = 1·(x + h) + 0 reads x and the latest h.
        let spec = pipelineSpec(
            inputs: [arrayFeature("x", [3])], outputs: [arrayFeature("y", [3]), arrayFeature("x", [3])],
            stages: [affineStage(["x"], ["h"], a: 2, b: 1), affineStage(["h"], ["h"], a: 3, b: 0),
                     affineStage(["x", "h"], ["y"], a: 1, b: 0)])
        let model = try MLModel(specification: spec, name: "pipe")
        let out = try model.prediction(from: MLDictionaryFeatureProvider(dictionary: ["x": array([1, 2, 3])]))
        // x + 3(2x + 1) = 7x + 3
        XCTAssertEqual(values(out, "y"), [10, 17, 24])
        XCTAssertEqual(values(out, "x"), [1, 2, 3], "a pipeline input can be passed through as an output")
    }

    func testStageInputThatNothingProvidesFailsAtLoad() {
        let spec = pipelineSpec(inputs: [arrayFeature("x", [3])], outputs: [arrayFeature("y", [3])],
                                stages: [affineStage(["x"], ["h"], a: 2, b: 1), affineStage(["z"], ["y"], a: 1, b: 0)],
                                names: ["scale", "shift"])
        XCTAssertThrowsError(try MLModel(specification: spec, name: "pipe")) { error in
            let e = error as! MLModelError
            XCTAssertEqual(e.code, .invalidModel)
            XCTAssertEqual(e.feature, "z")
            XCTAssertEqual(e.model, "pipe")
            XCTAssertTrue(e.message.contains("stage 1 'shift'"), e.description)
            XCTAssertTrue(e.message.contains("available: h, x"), e.description)
        }
    }

    func testStageInputOfWrongTypeFailsAtLoad() {
        // Stage 1 expects h as 4 values, stage 0 produces 3.
        var second = affineStage(["h"], ["y"], a: 1, b: 0, n: 4)
        second.description_p.output = [arrayFeature("y", [3])]
        let spec = pipelineSpec(inputs: [arrayFeature("x", [3])], outputs: [arrayFeature("y", [3])],
                                stages: [affineStage(["x"], ["h"], a: 2, b: 1), second])
        XCTAssertThrowsError(try MLModel(specification: spec, name: "pipe")) { error in
            let e = error as! MLModelError
            XCTAssertEqual(e.feature, "h")
            XCTAssertTrue(e.message.contains("stage 1 (itemSimilarityRecommender)"), e.description)
            XCTAssertTrue(e.message.contains("stage 0"), "names the producer: \(e.description)")
            XCTAssertTrue(e.message.contains("expected MultiArray (DOUBLE 4)"), e.description)
        }
        // A string where an array is expected.
        var third = affineStage(["s"], ["y"], a: 1, b: 0)
        third.description_p.output = [arrayFeature("y", [3])]
        let spec2 = pipelineSpec(inputs: [stringFeature("s")], outputs: [arrayFeature("y", [3])], stages: [third])
        XCTAssertThrowsError(try MLModel(specification: spec2, name: "pipe")) { error in
            let e = error as! MLModelError
            XCTAssertEqual(e.feature, "s")
            XCTAssertTrue(e.message.contains("pipeline input") && e.message.contains("got String"), e.description)
        }
    }

    func testPipelineOutputThatNothingProducesFailsAtLoad() {
        let spec = pipelineSpec(inputs: [arrayFeature("x", [3])], outputs: [arrayFeature("y", [3]), arrayFeature("w", [3])],
                                stages: [affineStage(["x"], ["y"], a: 2, b: 1)])
        XCTAssertThrowsError(try MLModel(specification: spec, name: "pipe")) { error in
            let e = error as! MLModelError
            XCTAssertEqual(e.feature, "w")
            XCTAssertTrue(e.message.contains("pipeline output 'w'"), e.description)
        }
        // An output of the wrong type.
        let spec2 = pipelineSpec(inputs: [arrayFeature("x", [3])], outputs: [dictFeature("y")],
                                 stages: [affineStage(["x"], ["y"], a: 2, b: 1)])
        XCTAssertThrowsError(try MLModel(specification: spec2, name: "pipe")) { error in
            XCTAssertEqual((error as! MLModelError).feature, "y")
        }
    }

    func testMalformedPipelinesFailAtLoad() {
        let empty = pipelineSpec(inputs: [arrayFeature("x", [3])], outputs: [arrayFeature("x", [3])], stages: [])
        XCTAssertThrowsError(try MLModel(specification: empty)) { XCTAssertTrue("\($0)".contains("no stages"), "\($0)") }

        var names = twoStage()
        names.pipeline.names = ["only one"]
        XCTAssertThrowsError(try MLModel(specification: names)) { XCTAssertTrue("\($0)".contains("names 1 stages but has 2"), "\($0)") }
        names.pipeline.names = ["same", "same"]
        XCTAssertThrowsError(try MLModel(specification: names)) { XCTAssertTrue("\($0)".contains("'same'"), "\($0)") }

        // A stage that fails to compile: the error names the stage's model path.
        var bad = twoStage()
        bad.pipeline.models[1].description_p.metadata.userDefined["a"] = "not a number"
        XCTAssertThrowsError(try MLModel(specification: bad, name: "pipe")) { error in
            XCTAssertEqual((error as! MLModelError).model, "pipe/shift", "\(error)")
        }
        // A stage of a kind nobody registered.
        var unknown = twoStage()
        unknown.pipeline.models[1].wordTagger = .init()
        XCTAssertThrowsError(try MLModel(specification: unknown, name: "pipe")) { error in
            let e = error as! MLModelError
            XCTAssertEqual(e.model, "pipe/shift")
            XCTAssertTrue(e.message.contains("wordTagger"), e.description)
        }
    }

    func testFlexibleInputIsCheckedByTheStageAtPredictTime() throws {
        var x = arrayFeature("x", [3])
        var range = CoreML_Specification_ArrayFeatureType.ShapeRange()
        var r = CoreML_Specification_SizeRange(); r.lowerBound = 1; r.upperBound = 5
        range.sizeRanges = [r]
        x.type.multiArrayType.shapeRange = range
        let spec = pipelineSpec(inputs: [x], outputs: [arrayFeature("y", [3])], stages: [affineStage(["x"], ["y"], a: 1, b: 0)])
        let model = try MLModel(specification: spec, name: "pipe")
        XCTAssertEqual(values(try model.prediction(from: MLDictionaryFeatureProvider(dictionary: ["x": array([1, 2, 3])])), "y"), [1, 2, 3])
        XCTAssertThrowsError(try model.prediction(from: MLDictionaryFeatureProvider(dictionary: ["x": array([1, 2, 3, 4])]))) { error in
            let e = error as! MLModelError
            XCTAssertEqual(e.feature, "x")
            XCTAssertEqual(e.model, "pipe/stage 0 (itemSimilarityRecommender)")
        }
    }

    func testOutputBackingGoesOnlyToTheProducingStage() throws {
        let model = try MLModel(specification: twoStage(), name: "pipe")
        let backing = try MLMultiArray(shape: [3], dataType: .float32)
        var options = MLPredictionOptions()
        options.outputBackings = ["y": backing]
        // The test stage throws if handed a backing for an output it does not produce,
        // so this also checks that stage 0 did not get the backing for y.
        let out = try model.prediction(from: MLDictionaryFeatureProvider(dictionary: ["x": array([1, 2, 3])]), options: options)
        XCTAssertTrue(out.featureValue(for: "y")?.multiArrayValue === backing)
        XCTAssertEqual(backing.doubleValues(), [-2.5, -4.5, -6.5])
    }

    func testOutputBackingIsFilledEvenIfTheStageIgnoresIt() throws {
        let spec = pipelineSpec(inputs: [arrayFeature("x", [3])], outputs: [arrayFeature("y", [3])],
                                stages: [affineStage(["x"], ["y"], a: 1, b: 1, extra: ["ignoreBackings": "1"])])
        let model = try MLModel(specification: spec, name: "pipe")
        let backing = try MLMultiArray(shape: [3], dataType: .double)
        var options = MLPredictionOptions()
        options.outputBackings = ["y": backing]
        let out = try model.prediction(from: MLDictionaryFeatureProvider(dictionary: ["x": array([1, 2, 3])]), options: options)
        XCTAssertTrue(out.featureValue(for: "y")?.multiArrayValue === backing)
        XCTAssertEqual(backing.doubleValues(), [2, 3, 4])
        // A backing of the wrong size is an error naming the output.
        options.outputBackings = ["y": try MLMultiArray(shape: [4], dataType: .double)]
        XCTAssertThrowsError(try model.prediction(from: MLDictionaryFeatureProvider(dictionary: ["x": array([1, 2, 3])]), options: options)) {
            XCTAssertEqual(($0 as! MLModelError).feature, "y")
        }
    }

    func testPipelineClassifierTakesTheLastStagesLabels() throws {
        var sign = CoreML_Specification_Model()
        sign.description_p.input = [arrayFeature("h", [3])]
        sign.description_p.output = [stringFeature("label"), dictFeature("probs")]
        sign.description_p.predictedFeatureName = "label"
        sign.description_p.predictedProbabilitiesName = "probs"
        sign.soundAnalysisPreprocessing = .init()
        var spec = pipelineSpec(inputs: [arrayFeature("x", [3])], outputs: [stringFeature("label"), dictFeature("probs")],
                                stages: [affineStage(["x"], ["h"], a: 1, b: -1), sign], kind: "pipelineClassifier")
        spec.description_p.predictedFeatureName = "label"
        spec.description_p.predictedProbabilitiesName = "probs"
        let model = try MLModel(specification: spec, name: "pipe")
        XCTAssertEqual(model.compiled.classLabels, .strings(["neg", "pos"]))
        XCTAssertEqual(model.modelDescription.classLabels, .strings(["neg", "pos"]))
        let pos = try model.prediction(from: MLDictionaryFeatureProvider(dictionary: ["x": array([1, 2, 3])]))
        XCTAssertEqual(pos.featureValue(for: "label")?.stringValue, "pos")
        XCTAssertEqual(pos.featureValue(for: "probs")?.dictionary, .stringKeyed(["neg": 0, "pos": 1]))
        let neg = try model.prediction(from: MLDictionaryFeatureProvider(dictionary: ["x": array([1, 0, 0])]))
        XCTAssertEqual(neg.featureValue(for: "label")?.stringValue, "neg")

        // A plain pipeline (and a regressor) reports no class labels.
        spec.pipeline = spec.pipelineClassifier.pipeline
        XCTAssertNil(try MLModel(specification: spec).compiled.classLabels)
        // Nested: a pipelineClassifier whose last stage is a plain pipeline ending in the classifier.
        let inner = pipelineSpec(inputs: [arrayFeature("x", [3])], outputs: [stringFeature("label"), dictFeature("probs")],
                                 stages: spec.pipeline.models)
        var outer = pipelineSpec(inputs: [arrayFeature("x", [3])], outputs: [stringFeature("label")], stages: [inner], kind: "pipelineClassifier")
        outer.description_p.predictedFeatureName = "label"
        let nested = try MLModel(specification: outer, name: "outer")
        XCTAssertEqual(nested.compiled.classLabels, .strings(["neg", "pos"]))
        XCTAssertEqual(try nested.prediction(from: MLDictionaryFeatureProvider(dictionary: ["x": array([5, 0, 0])])).featureValue(for: "label")?.stringValue, "pos")
    }

    func testBatchEqualsOneByOne() throws {
        let model = try MLModel(specification: twoStage(), name: "pipe")
        let rows: [MLFeatureProvider] = (0..<5).map { i in
            MLDictionaryFeatureProvider(dictionary: ["x": array([Double(i), -Double(i), 0.5 * Double(i)])])
        }
        let batch = try model.predictions(fromBatch: MLArrayBatchProvider(array: rows))
        XCTAssertEqual(batch.count, 5)
        for (i, row) in rows.enumerated() {
            XCTAssertEqual(values(batch.features(at: i), "y"), values(try model.prediction(from: row), "y"))
        }
    }

    /// The real kinds once their engineers land them: a scaler then a GLM regressor,
    /// as scikit-learn's Pipeline(StandardScaler, LinearRegression) converts.
    func testScalerThenGLMRegressor() throws {
        for kind in ["scaler", "glmRegressor"] where MLModelKindRegistry.shared.kind(for: kind) == nil {
            throw XCTSkip("the \(kind) kind is not registered yet")
        }
        var scaler = CoreML_Specification_Model()
        scaler.description_p.input = [arrayFeature("x", [2])]
        scaler.description_p.output = [arrayFeature("scaled", [2])]
        scaler.scaler.shiftValue = [-1, -2]
        scaler.scaler.scaleValue = [0.5, 4]
        var glm = CoreML_Specification_Model()
        glm.description_p.input = [arrayFeature("scaled", [2])]
        glm.description_p.output = [scalarFeature("y")]
        glm.description_p.predictedFeatureName = "y"
        var w = CoreML_Specification_GLMRegressor.DoubleArray()
        w.value = [3, -1]
        glm.glmRegressor.weights = [w]
        glm.glmRegressor.offset = [0.25]
        var spec = pipelineSpec(inputs: [arrayFeature("x", [2])], outputs: [scalarFeature("y")], stages: [scaler, glm], kind: "pipelineRegressor")
        spec.description_p.predictedFeatureName = "y"
        let model = try MLModel(specification: spec, name: "pipe")
        let out = try model.prediction(from: MLDictionaryFeatureProvider(dictionary: ["x": array([3, 1])]))
        // scaled = ((3-1)·0.5, (1-2)·4) = (1, -4); y = 3·1 - 1·(-4) + 0.25 = 7.25
        XCTAssertEqual(out.featureValue(for: "y")?.doubleValue ?? .nan, 7.25, accuracy: 1e-12)
    }
}
