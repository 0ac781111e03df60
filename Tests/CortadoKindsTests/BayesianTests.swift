import CortadoModels
import Foundation
import XCTest

private typealias BPR = CoreML_Specification_BayesianProbitRegressor

private func gaussian(_ mean: Double, _ precision: Double) -> BPR.Gaussian {
    var g = BPR.Gaussian(); g.mean = mean; g.precision = precision; return g
}

private func feature(_ id: UInt32, _ weights: [(UInt32, Double, Double)]) -> BPR.FeatureWeight {
    var f = BPR.FeatureWeight()
    f.featureID = id
    f.weights = weights.map { v, mean, precision in
        var w = BPR.FeatureValueWeight(); w.featureValue = v; w.featureWeight = gaussian(mean, precision); return w
    }
    return f
}

private func doubleFeature(_ name: String, optional: Bool = false) -> CoreML_Specification_FeatureDescription {
    var f = CoreML_Specification_FeatureDescription()
    f.name = name
    f.type.doubleType = .init()
    f.type.isOptional = optional
    return f
}

/// Three features; bias N(-0.25, 1/4); weights (value, mean, precision):
///   feature 0: (0, 0.5, 2) (1, -1, 1) (2, 0.3, 10)
///   feature 1: (0, 0.2, 5) (3, 1.5, 4)
///   feature 2: (1, -0.4, 8)
/// Inputs: "features" (INT32 array of 3), optional doubles "optimism", "scale", "truncation".
/// Outputs: "probability" (the predicted feature), "mean", "variance", "pessimistic", "sampled".
private func probitSpec() -> CoreML_Specification_Model {
    var m = CoreML_Specification_Model()
    m.specificationVersion = 3
    var x = CoreML_Specification_FeatureDescription()
    x.name = "features"
    x.type.multiArrayType.shape = [3]
    x.type.multiArrayType.dataType = .int32
    m.description_p.input = [x, doubleFeature("optimism", optional: true), doubleFeature("scale", optional: true),
                             doubleFeature("truncation", optional: true)]
    m.description_p.output = ["probability", "mean", "variance", "pessimistic", "sampled"].map { doubleFeature($0) }
    m.description_p.predictedFeatureName = "probability"
    var bp = BPR()
    bp.numberOfFeatures = 3
    bp.bias = gaussian(-0.25, 4)
    bp.features = [feature(0, [(0, 0.5, 2), (1, -1, 1), (2, 0.3, 10)]), feature(1, [(0, 0.2, 5), (3, 1.5, 4)]),
                   feature(2, [(1, -0.4, 8)])]
    bp.regressionInputFeatureName = "features"
    bp.optimismInputFeatureName = "optimism"
    bp.samplingScaleInputFeatureName = "scale"
    bp.samplingTruncationInputFeatureName = "truncation"
    bp.meanOutputFeatureName = "mean"
    bp.varianceOutputFeatureName = "variance"
    bp.pessimisticProbabilityOutputFeatureName = "pessimistic"
    bp.sampledProbabilityOutputFeatureName = "sampled"
    m.bayesianProbitRegressor = bp
    return m
}

private func row(_ values: [Double], shape: [Int]? = nil, extra: [String: Double] = [:]) -> MLDictionaryFeatureProvider {
    var d: [String: MLFeatureValue] = ["features": MLFeatureValue(multiArray: try! MLMultiArray(values, shape: shape, dataType: .int32))]
    for (k, v) in extra { d[k] = MLFeatureValue(double: v) }
    return MLDictionaryFeatureProvider(dictionary: d)
}

/// Φ, for expectations computed in the test.
private func phi(_ x: Double) -> Double { 0.5 * erfc(-x / 2.0.squareRoot()) }

final class BayesianTests: XCTestCase {
    override func setUp() {
        super.setUp()
        CortadoModels.registerBuiltinKinds()
    }

    // Tolerances: mean and variance are sums of a few doubles (1e-12); probabilities are
    // compared with values from scipy.stats.norm.cdf (1e-12; erfc differs in the last bits).

    func testMeanVarianceAndProbability() throws {
        let model = try MLModel(specification: probitSpec(), name: "probit")
        // x = (0, 3, 1): μ = -0.25 + 0.5 + 1.5 - 0.4 = 1.35; v = 1/4 + 1/2 + 1/4 + 1/8 = 1.125;
        // σ² = β² + v with β² = 3 features; p = Φ(1.35 / √4.125) (scipy: 0.7468769002856332).
        let a = try model.prediction(from: row([0, 3, 1]))
        XCTAssertEqual(a.featureValue(for: "mean")!.doubleValue, 1.35, accuracy: 1e-12)
        XCTAssertEqual(a.featureValue(for: "variance")!.doubleValue, 1.125, accuracy: 1e-12)
        XCTAssertEqual(a.featureValue(for: "probability")!.doubleValue, 0.7468769002856332, accuracy: 1e-12)
        // Without optimism the pessimistic probability is the probability; without sampling
        // inputs the sampled one is 0.5 (as Core ML).
        XCTAssertEqual(a.featureValue(for: "pessimistic")!.doubleValue, 0.7468769002856332, accuracy: 1e-12)
        XCTAssertEqual(a.featureValue(for: "sampled")!.doubleValue, 0.5)

        // x = (1, 0, 1): μ = -0.25 - 1 + 0.2 - 0.4 = -1.45; v = 0.25 + 1 + 0.2 + 0.125 = 1.575.
        let b = try model.prediction(from: row([1, 0, 1]))
        XCTAssertEqual(b.featureValue(for: "mean")!.doubleValue, -1.45, accuracy: 1e-12)
        XCTAssertEqual(b.featureValue(for: "variance")!.doubleValue, 1.575, accuracy: 1e-12)
        XCTAssertEqual(b.featureValue(for: "probability")!.doubleValue, 0.24891417531935617, accuracy: 1e-12)
    }

    func testMissingWeightContributesThePrior() throws {
        let model = try MLModel(specification: probitSpec(), name: "probit")
        // Feature 2 has no weight for value 0: it contributes N(0, 1).
        // μ = -0.25 + 0.3 + 1.5 + 0 = 1.55; v = 0.25 + 0.1 + 0.25 + 1 = 1.6.
        let out = try model.prediction(from: row([2, 3, 0]))
        XCTAssertEqual(out.featureValue(for: "mean")!.doubleValue, 1.55, accuracy: 1e-12)
        XCTAssertEqual(out.featureValue(for: "variance")!.doubleValue, 1.6, accuracy: 1e-12)
        XCTAssertEqual(out.featureValue(for: "probability")!.doubleValue, 0.7650651964928239, accuracy: 1e-12)
    }

    func testPessimisticProbabilityShiftsTheMeanByOptimismStandardDeviations() throws {
        let model = try MLModel(specification: probitSpec(), name: "probit")
        // Φ((μ + o·√v) / σ) with μ = 1.35, v = 1.125, σ² = 4.125.
        let pessimistic = try model.prediction(from: row([0, 3, 1], extra: ["optimism": -1]))
        XCTAssertEqual(pessimistic.featureValue(for: "pessimistic")!.doubleValue, 0.5566420916377445, accuracy: 1e-12)
        let optimistic = try model.prediction(from: row([0, 3, 1], extra: ["optimism": 0.5]))
        XCTAssertEqual(optimistic.featureValue(for: "pessimistic")!.doubleValue, 0.822727774403867, accuracy: 1e-12)
        XCTAssertEqual(optimistic.featureValue(for: "probability")!.doubleValue, 0.7468769002856332, accuracy: 1e-12)
    }

    func testSampledProbabilityStaysWithinTheTruncation() throws {
        let model = try MLModel(specification: probitSpec(), name: "probit")
        // z ~ N(μ, (s·√v)²) truncated to μ ± t·s·√v; sampled = Φ(z / σ).
        let mu = 1.35, v = 1.125, sigma = (3 + v).squareRoot(), s = 2.0, t = 0.5
        let lo = phi((mu - t * s * v.squareRoot()) / sigma), hi = phi((mu + t * s * v.squareRoot()) / sigma)
        var seen = Set<Double>()
        for _ in 0..<300 {
            let p = try model.prediction(from: row([0, 3, 1], extra: ["scale": s, "truncation": t])).featureValue(for: "sampled")!.doubleValue
            XCTAssertGreaterThanOrEqual(p, lo - 1e-12)
            XCTAssertLessThanOrEqual(p, hi + 1e-12)
            seen.insert(p)
        }
        XCTAssertGreaterThan(seen.count, 250, "the sampled probability is random")
        // Untruncated with scale 1: the mean of Φ(z/σ) is Φ(μ / √(σ² + v)) (a Gaussian identity);
        // 4000 draws of a value in (0, 1) with sd < 0.3: the mean is within ±0.02 w.h.p.
        var sum = 0.0
        for _ in 0..<4000 {
            sum += try model.prediction(from: row([0, 3, 1], extra: ["scale": 1])).featureValue(for: "sampled")!.doubleValue
        }
        XCTAssertEqual(sum / 4000, phi(mu / (sigma * sigma + v).squareRoot()), accuracy: 0.02)
    }

    func testPairsInputAndArrayOutputs() throws {
        var spec = probitSpec()
        // Accept an n×2 (feature id, value) matrix: ranges n in 1…10, 2 columns.
        var ranges = CoreML_Specification_ArrayFeatureType.ShapeRange()
        var n = CoreML_Specification_SizeRange(); n.lowerBound = 1; n.upperBound = 10
        var two = CoreML_Specification_SizeRange(); two.lowerBound = 2; two.upperBound = 2
        ranges.sizeRanges = [n, two]
        spec.description_p.input[0].type.multiArrayType.shape = [2, 2]
        spec.description_p.input[0].type.multiArrayType.shapeRange = ranges
        spec.description_p.output[0].type.multiArrayType.shape = [1]
        spec.description_p.output[0].type.multiArrayType.dataType = .float32
        let model = try MLModel(specification: spec, name: "probit")
        // Active pairs (0, 0), (1, 3): μ = -0.25 + 0.5 + 1.5 = 1.75; v = 0.25 + 0.5 + 0.25 = 1; σ² = 3 + 1.
        let out = try model.prediction(from: row([0, 0, 1, 3], shape: [2, 2]))
        XCTAssertEqual(out.featureValue(for: "mean")!.doubleValue, 1.75, accuracy: 1e-12)
        XCTAssertEqual(out.featureValue(for: "variance")!.doubleValue, 1.0, accuracy: 1e-12)
        let p = try XCTUnwrap(out.featureValue(for: "probability")?.multiArrayValue)
        XCTAssertEqual(p.shape, [1])
        XCTAssertEqual(p.dataType, .float32)
        XCTAssertEqual(p.double(at: 0), 0.8092130471474893, accuracy: 1e-7)  // float32
        XCTAssertThrowsError(try model.prediction(from: row([0, 0, 5, 3], shape: [2, 2]))) { error in
            let e = error as! MLModelError
            XCTAssertEqual(e.feature, "features")
            XCTAssertTrue(e.message.contains("feature id 5"), e.description)
        }
    }

    func testTheProbabilityGoesToTheFirstUnclaimedOutput() throws {
        // As the conformance case: the predicted feature is the mean output itself.
        var spec = probitSpec()
        spec.description_p.predictedFeatureName = "mean"
        spec.description_p.output.removeFirst()
        spec.description_p.output.append(doubleFeature("p"))
        let out = try MLModel(specification: spec, name: "probit").prediction(from: row([0, 3, 1]))
        XCTAssertEqual(out.featureValue(for: "mean")!.doubleValue, 1.35, accuracy: 1e-12)
        XCTAssertEqual(out.featureValue(for: "p")!.doubleValue, 0.7468769002856332, accuracy: 1e-12)
    }

    func testBadInputsFailAtPredict() throws {
        let model = try MLModel(specification: probitSpec(), name: "probit")
        var doubles = probitSpec()
        doubles.description_p.input[0].type.multiArrayType.dataType = .double
        let dmodel = try MLModel(specification: doubles, name: "probit")
        let half = MLDictionaryFeatureProvider(dictionary: ["features": MLFeatureValue(multiArray: try MLMultiArray([0, 1.5, 1]))])
        XCTAssertThrowsError(try dmodel.prediction(from: half)) { error in
            let e = error as! MLModelError
            XCTAssertEqual(e.feature, "features")
            XCTAssertTrue(e.message.contains("feature 1"), e.description)
        }
        XCTAssertThrowsError(try model.prediction(from: row([0, -1, 1]))) { XCTAssertEqual(($0 as! MLModelError).feature, "features") }
        XCTAssertThrowsError(try model.prediction(from: row([0, 1]))) { XCTAssertEqual(($0 as! MLModelError).feature, "features") }
    }

    func testMalformedModelsFailAtLoad() {
        func expect(_ edit: (inout CoreML_Specification_Model) -> Void, _ fragment: String, feature: String? = nil, line: UInt = #line) {
            var spec = probitSpec()
            edit(&spec)
            XCTAssertThrowsError(try MLModel(specification: spec, name: "probit"), line: line) { error in
                let e = error as! MLModelError
                XCTAssertEqual(e.code, .invalidModel, line: line)
                XCTAssertEqual(e.model, "probit", line: line)
                if let feature { XCTAssertEqual(e.feature, feature, line: line) }
                XCTAssertTrue(e.message.contains(fragment), "\(e.description) lacks '\(fragment)'", line: line)
            }
        }
        expect({ $0.bayesianProbitRegressor.bias.precision = 0 }, "the bias has precision 0")
        expect({ $0.bayesianProbitRegressor.clearBias() }, "has no bias")
        expect({ $0.bayesianProbitRegressor.features[1].weights[1].featureWeight.precision = -2 }, "feature 1 value 3 has precision -2")
        expect({ $0.bayesianProbitRegressor.features[0].weights[0].featureWeight.mean = .infinity }, "feature 0 value 0 has a non-finite mean")
        expect({ $0.bayesianProbitRegressor.features.append(feature(3, [(0, 1, 1)])) }, "feature id 3")
        expect({ $0.bayesianProbitRegressor.features.append(feature(0, [(1, 1, 1)])) }, "feature 0 value 1 has more than one weight")
        expect({ $0.bayesianProbitRegressor.numberOfFeatures = 0 }, "numberOfFeatures is 0")
        expect({ $0.bayesianProbitRegressor.numberOfFeatures = 4 }, "shape [3]", feature: "features")
        expect({ $0.bayesianProbitRegressor.meanOutputFeatureName = "mu" }, "meanOutputFeatureName", feature: "mu")
        expect({ $0.bayesianProbitRegressor.optimismInputFeatureName = "o" }, "optimismInputFeatureName", feature: "o")
        expect({ $0.bayesianProbitRegressor.regressionInputFeatureName = "optimism" }, "must be a multiArray", feature: "optimism")
        expect({ $0.description_p.output[2].type.stringType = .init() }, "declared String", feature: "variance")
    }
}
