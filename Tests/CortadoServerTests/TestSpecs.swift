import CortadoModels
import CortadoServerProtos
import Foundation
import XCTest

/// Feature descriptions and tiny model specs for the server tests, built with the generated
/// Core ML types (as in CortadoKindsTests).
enum TestSpecs {
    typealias FD = CoreML_Specification_FeatureDescription

    static func feature(_ name: String, optional: Bool = false, _ set: (inout CoreML_Specification_FeatureType) -> Void) -> FD {
        var f = FD()
        f.name = name
        f.type.isOptional = optional
        set(&f.type)
        return f
    }
    static func int64(_ n: String, optional: Bool = false) -> FD { feature(n, optional: optional) { $0.int64Type = .init() } }
    static func double(_ n: String) -> FD { feature(n) { $0.doubleType = .init() } }
    static func string(_ n: String) -> FD { feature(n) { $0.stringType = .init() } }
    static func array(_ n: String, _ shape: [Int64], _ dt: CoreML_Specification_ArrayFeatureType.ArrayDataType = .double,
                      _ flexibility: ((inout CoreML_Specification_ArrayFeatureType) -> Void)? = nil) -> FD {
        feature(n) {
            var a = CoreML_Specification_ArrayFeatureType()
            a.shape = shape
            a.dataType = dt
            flexibility?(&a)
            $0.multiArrayType = a
        }
    }
    static func dictionary(_ n: String, int64Keys: Bool) -> FD {
        feature(n) {
            var d = CoreML_Specification_DictionaryFeatureType()
            if int64Keys { d.int64KeyType = .init() } else { d.stringKeyType = .init() }
            $0.dictionaryType = d
        }
    }
    static func sequence(_ n: String, int64: Bool) -> FD {
        feature(n) {
            var s = CoreML_Specification_SequenceFeatureType()
            if int64 { s.int64Type = .init() } else { s.stringType = .init() }
            $0.sequenceType = s
        }
    }
    static func image(_ n: String, width: Int64, height: Int64, _ space: CoreML_Specification_ImageFeatureType.ColorSpace) -> FD {
        feature(n) {
            var i = CoreML_Specification_ImageFeatureType()
            i.width = width
            i.height = height
            i.colorSpace = space
            $0.imageType = i
        }
    }

    /// y = w·x + b on a 2-element double array `x`.
    static func regressor(weights: [Double] = [1, 2], offset: Double = 0) -> CoreML_Specification_Model {
        var glm = CoreML_Specification_GLMRegressor()
        var row = CoreML_Specification_GLMRegressor.DoubleArray()
        row.value = weights
        glm.weights = [row]
        glm.offset = [offset]
        var spec = CoreML_Specification_Model()
        spec.specificationVersion = 1
        spec.description_p.input = [array("x", [2])]
        spec.description_p.output = [double("y")]
        spec.description_p.predictedFeatureName = "y"
        spec.glmRegressor = glm
        return spec
    }

    /// A logistic classifier on `x` (2 doubles) with string labels, `label` and `probs` outputs.
    static func classifier(labels: [String] = ["cat", "dog"]) -> CoreML_Specification_Model {
        var glm = CoreML_Specification_GLMClassifier()
        var row = CoreML_Specification_GLMClassifier.DoubleArray()
        row.value = [1, -1]
        glm.weights = [row]
        glm.offset = [0]
        glm.postEvaluationTransform = .logit
        glm.classEncoding = .referenceClass
        var l = CoreML_Specification_StringVector()
        l.vector = labels
        glm.stringClassLabels = l
        var spec = CoreML_Specification_Model()
        spec.specificationVersion = 1
        spec.description_p.input = [array("x", [2])]
        spec.description_p.output = [string("label"), dictionary("probs", int64Keys: false)]
        spec.description_p.predictedFeatureName = "label"
        spec.description_p.predictedProbabilitiesName = "probs"
        spec.glmClassifier = glm
        return spec
    }

    /// Passes its inputs through (`identity`): a model with any feature types.
    static func identity(_ features: [FD]) -> CoreML_Specification_Model {
        var spec = CoreML_Specification_Model()
        spec.specificationVersion = 1
        spec.description_p.input = features
        spec.description_p.output = features
        spec.identity = .init()
        return spec
    }

    static func model(_ spec: CoreML_Specification_Model, name: String = "model") throws -> MLModel {
        CortadoModels.registerBuiltinKinds()
        return try MLModel(specification: spec, name: name)
    }

    /// The regressor's prediction for x = [1, 1].
    static func predictOnes(_ model: MLModel) throws -> Double? {
        let x = try MLMultiArray([1, 1])
        return try model.prediction(from: MLDictionaryFeatureProvider(dictionary: ["x": MLFeatureValue(multiArray: x)])).featureValue(for: "y")?.doubleValue
    }
}

/// Waits for a semaphore with a bound; fails the test on timeout.
func waitOrFail(_ semaphore: DispatchSemaphore, count: Int = 1, timeout: Double = 5, _ what: String, file: StaticString = #filePath, line: UInt = #line) {
    let deadline = DispatchTime.now() + timeout
    for i in 0..<count where semaphore.wait(timeout: deadline) == .timedOut {
        XCTFail("timed out waiting for \(what) (\(i) of \(count))", file: file, line: line)
        return
    }
}

/// A counter shared with jobs on other threads.
final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var value = 0
    private var peak = 0
    private var log: [Int] = []
    func enter() { lock.withLock { value += 1; peak = max(peak, value) } }
    func leave() { lock.withLock { value -= 1 } }
    func record(_ i: Int) { lock.withLock { log.append(i) } }
    var current: Int { lock.withLock { value } }
    var maximum: Int { lock.withLock { peak } }
    var order: [Int] { lock.withLock { log } }
}

/// An input tensor description for requests built in tests.
func tensor(_ name: String, _ datatype: String, _ shape: [Int64]) -> Inference_ModelInferRequest.InferInputTensor {
    var t = Inference_ModelInferRequest.InferInputTensor()
    t.name = name
    t.datatype = datatype
    t.shape = shape
    return t
}
