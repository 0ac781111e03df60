import CortadoModels
import Foundation
import XCTest

// MARK: Spec builders

private struct KNNOptions {
    var k: Int64 = 3
    var range: ClosedRange<Int64>? = 1...1000
    var set: [Int64]? = nil
    var leafSize: Int32? = nil          // nil: linear index
    var inverse = false
    var probabilities = true
    var kInput = false
    var defaultInt: Int64? = nil
    var defaultString: String? = nil
}

private func knnSpec(_ samples: [[Float]], ints: [Int64]? = nil, strings: [String]? = nil, dims: Int32? = nil,
                     _ o: KNNOptions = KNNOptions()) -> CoreML_Specification_Model {
    var m = CoreML_Specification_Model()
    m.specificationVersion = 4
    let d = dims ?? Int32(samples.first?.count ?? 2)
    var input = CoreML_Specification_FeatureDescription()
    input.name = "input"
    input.type.multiArrayType.shape = [Int64(d)]
    input.type.multiArrayType.dataType = .float32
    m.description_p.input = [input]
    if o.kInput {
        var k = CoreML_Specification_FeatureDescription()
        k.name = "numberOfNeighbors"
        k.type.int64Type = .init()
        k.type.isOptional = true
        m.description_p.input.append(k)
    }
    let isString = strings != nil || o.defaultString != nil
    var label = CoreML_Specification_FeatureDescription()
    label.name = "label"
    if isString { label.type.stringType = .init() } else { label.type.int64Type = .init() }
    m.description_p.output = [label]
    m.description_p.predictedFeatureName = "label"
    if o.probabilities {
        var p = CoreML_Specification_FeatureDescription()
        p.name = "labelProbs"
        if isString { p.type.dictionaryType.stringKeyType = .init() } else { p.type.dictionaryType.int64KeyType = .init() }
        m.description_p.output.append(p)
        m.description_p.predictedProbabilitiesName = "labelProbs"
    }
    var knn = CoreML_Specification_KNearestNeighborsClassifier()
    knn.nearestNeighborsIndex.numberOfDimensions = d
    knn.nearestNeighborsIndex.floatSamples = samples.map { var v = CoreML_Specification_FloatVector(); v.vector = $0; return v }
    if let leaf = o.leafSize { knn.nearestNeighborsIndex.singleKdTreeIndex.leafSize = leaf } else { knn.nearestNeighborsIndex.linearIndex = .init() }
    knn.nearestNeighborsIndex.squaredEuclideanDistance = .init()
    knn.numberOfNeighbors.defaultValue = o.k
    if let s = o.set { knn.numberOfNeighbors.set.values = s } else if let r = o.range {
        knn.numberOfNeighbors.range.minValue = r.lowerBound
        knn.numberOfNeighbors.range.maxValue = r.upperBound
    }
    if let ints { knn.int64ClassLabels.vector = ints }
    if let strings { knn.stringClassLabels.vector = strings }
    if let d = o.defaultInt { knn.defaultInt64Label = d }
    if let d = o.defaultString { knn.defaultStringLabel = d }
    if o.inverse { knn.inverseDistanceWeighting = .init() } else { knn.uniformWeighting = .init() }
    m.kNearestNeighborsClassifier = knn
    return m
}

private func query(_ x: [Double], k: Int64? = nil) -> MLDictionaryFeatureProvider {
    var d: [String: MLFeatureValue] = ["input": MLFeatureValue(multiArray: try! MLMultiArray(x, dataType: .float32))]
    if let k { d["numberOfNeighbors"] = MLFeatureValue(int64: k) }
    return MLDictionaryFeatureProvider(dictionary: d)
}

private func intProbs(_ out: MLFeatureProvider) -> [Int64: Double] {
    if case .int64Keyed(let d)? = out.featureValue(for: "labelProbs")?.dictionary { return d }
    return [:]
}

private func assertProbs(_ got: [Int64: Double], _ want: [Int64: Double], accuracy: Double = 1e-12,
                         file: StaticString = #filePath, line: UInt = #line) {
    XCTAssertEqual(Set(got.keys), Set(want.keys), file: file, line: line)
    for (k, v) in want { XCTAssertEqual(got[k] ?? .nan, v, accuracy: accuracy, "label \(k)", file: file, line: line) }
}

/// A deterministic generator for the random-data tests (64-bit LCG).
private struct LCG {
    var state: UInt64
    mutating func next() -> UInt64 { state = state &* 6364136223846793005 &+ 1442695040888963407; return state >> 11 }
    mutating func int(_ n: Int) -> Int { Int(next() % UInt64(n)) }
}

/// The five points of the hand-computed examples, labels 1, 1, 2, 2, 3.
private let handSamples: [[Float]] = [[0, 0], [1, 0], [0, 2], [3, 3], [-1, -1]]
private let handLabels: [Int64] = [1, 1, 2, 2, 3]

final class KNNTests: XCTestCase {
    override func setUp() {
        super.setUp()
        CortadoModels.registerBuiltinKinds()
    }

    func model(_ spec: CoreML_Specification_Model, configuration: MLModelConfiguration = MLModelConfiguration()) throws -> MLModel {
        try MLModel(specification: spec, configuration: configuration, name: "knn")
    }

    // Tolerance: votes are sums of at most k terms 1 or 1/d; 1e-12 relative to 1.

    func testUniformVotesWithBothIndexes() throws {
        for leaf: Int32? in [nil, 1, 2] {
            let m = try model(knnSpec(handSamples, ints: handLabels, KNNOptions(k: 3, leafSize: leaf)))
            // q = (0.5, 0.5): squared distances 0.5, 0.5, 2.5, 12.5, 4.5 → samples 0, 1, 2 → votes 1, 1, 2.
            let a = try m.prediction(from: query([0.5, 0.5]))
            XCTAssertEqual(a.featureValue(for: "label")?.int64Value, 1)
            assertProbs(intProbs(a), [1: 2.0 / 3, 2: 1.0 / 3, 3: 0])
            // q = (0, 1.6): 2.56, 3.56, 0.16, 10.96, 7.76 → samples 2, 0, 1 → 1 wins 2 to 1.
            let b = try m.prediction(from: query([0, 1.6]))
            XCTAssertEqual(b.featureValue(for: "label")?.int64Value, 1)
            XCTAssertEqual(m.compiled.classLabels, .int64s([1, 2, 3]))
        }
    }

    func testInverseDistanceWeighting() throws {
        for leaf: Int32? in [nil, 1] {
            let m = try model(knnSpec(handSamples, ints: handLabels, KNNOptions(k: 3, leafSize: leaf, inverse: true)))
            // q = (0, 1.6) (float32): the nearer class-2 sample outweighs two class-1 samples.
            // Votes are 1 / squared distance: 2 → 1/0.16, 1 → 1/2.56 + 1/3.56.
            let q = Double(Float(1.6))
            let w2 = 1 / (q - 2) / (q - 2), w1 = 1 / (q * q) + 1 / (1 + q * q)
            let out = try m.prediction(from: query([0, 1.6]))
            XCTAssertEqual(out.featureValue(for: "label")?.int64Value, 2)
            assertProbs(intProbs(out), [1: w1 / (w1 + w2), 2: w2 / (w1 + w2), 3: 0], accuracy: 1e-9)
            // An exact match wins outright (scikit-learn's rule): q = sample 4 (label 3), whose
            // other neighbours are two class-1 samples that would win a uniform vote.
            let exact = try m.prediction(from: query([-1, -1]))
            XCTAssertEqual(exact.featureValue(for: "label")?.int64Value, 3)
            assertProbs(intProbs(exact), [1: 0, 2: 0, 3: 1])
        }
        let uniform = try model(knnSpec(handSamples, ints: handLabels, KNNOptions(k: 3)))
        XCTAssertEqual(try uniform.prediction(from: query([-1, -1])).featureValue(for: "label")?.int64Value, 1)
    }

    func testTiesGoToTheFirstSortedLabelAndTheEarlierSample() throws {
        // Sample 0 (label "b") at (0, 0), sample 1 (label "a") at (2, 0).
        let samples: [[Float]] = [[0, 0], [2, 0]]
        let m2 = try model(knnSpec(samples, strings: ["b", "a"], KNNOptions(k: 2)))
        // One vote each: the tie goes to "a", first in sorted order, although "b" is nearer
        // (scikit-learn: argmax / weighted mode return the smallest class index).
        let out = try m2.prediction(from: query([0.9, 0]))
        XCTAssertEqual(out.featureValue(for: "label")?.stringValue, "a")
        XCTAssertEqual(out.featureValue(for: "labelProbs")?.dictionary, .stringKeyed(["a": 0.5, "b": 0.5]))
        XCTAssertEqual(m2.compiled.classLabels, .strings(["a", "b"]))
        // k = 1 with both samples at distance 1: the earlier sample wins the place.
        for leaf: Int32? in [nil, 1] {
            let m1 = try model(knnSpec(samples, strings: ["b", "a"], KNNOptions(k: 1, leafSize: leaf)))
            XCTAssertEqual(try m1.prediction(from: query([1, 0])).featureValue(for: "label")?.stringValue, "b")
        }
    }

    func testKdTreeEqualsLinearScanOnRandomData() throws {
        var rng = LCG(state: 42)
        // Points on a coarse grid, so many distances tie exactly and queries hit samples.
        let n = 700, dims = 3
        let samples: [[Float]] = (0..<n).map { _ in (0..<dims).map { _ in Float(rng.int(17)) * 0.25 - 2 } }
        let labels: [Int64] = (0..<n).map { _ in Int64(rng.int(5)) * 10 }
        let queries: [[Double]] = (0..<60).map { i in
            i % 5 == 0 ? samples[rng.int(n)].map(Double.init) : (0..<dims).map { _ in Double(rng.int(21)) * 0.25 - 2.5 }
        }
        for inverse in [false, true] {
            let linear = try model(knnSpec(samples, ints: labels, KNNOptions(k: 5, inverse: inverse, kInput: true)))
            for leaf: Int32 in [1, 3, 30] {
                let tree = try model(knnSpec(samples, ints: labels, KNNOptions(k: 5, leafSize: leaf, inverse: inverse, kInput: true)))
                for k: Int64 in [1, 2, 5, 16, 699, 900] {
                    for q in queries {
                        let a = try linear.prediction(from: query(q, k: k)), b = try tree.prediction(from: query(q, k: k))
                        XCTAssertEqual(a.featureValue(for: "label")?.int64Value, b.featureValue(for: "label")?.int64Value, "k \(k) leaf \(leaf) q \(q)")
                        XCTAssertEqual(intProbs(a), intProbs(b), "k \(k) leaf \(leaf) q \(q)")
                        if !inverse && leaf == 1 {
                            XCTAssertEqual(a.featureValue(for: "label")?.int64Value, reference(samples, labels, q, Int(k)), "k \(k) q \(q)")
                        }
                    }
                }
            }
        }
    }

    /// Brute force, written independently: sort by (distance, index), count votes, smallest label on ties.
    func reference(_ samples: [[Float]], _ labels: [Int64], _ q: [Double], _ k: Int) -> Int64 {
        var d: [(distance: Double, index: Int)] = []
        for (i, s) in samples.enumerated() {
            var sum = 0.0
            for j in 0..<s.count {
                let t = q[j] - Double(s[j])
                sum += t * t
            }
            d.append((sum, i))
        }
        d.sort { a, b in a.distance < b.distance || (a.distance == b.distance && a.index < b.index) }
        let nearest = d.prefix(k)
        var votes: [Int64: Int] = [:]
        for n in nearest { votes[labels[n.index], default: 0] += 1 }
        let best = votes.values.max()!
        return votes.filter { $0.value == best }.keys.min()!
    }

    func testNumberOfNeighborsOverrides() throws {
        let spec = knnSpec(handSamples, ints: handLabels, KNNOptions(k: 3, range: 1...4, kInput: true))
        let m = try model(spec)
        // q = (0, 1.6): k = 1 → sample 2 (label 2); default k = 3 → label 1.
        XCTAssertEqual(try m.prediction(from: query([0, 1.6])).featureValue(for: "label")?.int64Value, 1)
        XCTAssertEqual(try m.prediction(from: query([0, 1.6], k: 1)).featureValue(for: "label")?.int64Value, 2)
        XCTAssertThrowsError(try m.prediction(from: query([0, 1.6], k: 5))) { error in
            let e = error as! MLModelError
            XCTAssertEqual(e.feature, "numberOfNeighbors")
            XCTAssertTrue(e.message.contains("1…4"), e.description)
        }
        // The configuration parameter changes the default, within the allowed values.
        var config = MLModelConfiguration()
        config.parameters["numberOfNeighbors"] = "1"
        XCTAssertEqual(try model(spec, configuration: config).prediction(from: query([0, 1.6])).featureValue(for: "label")?.int64Value, 2)
        config.parameters["numberOfNeighbors"] = "7"
        XCTAssertThrowsError(try model(spec, configuration: config)) { XCTAssertTrue("\($0)".contains("numberOfNeighbors"), "\($0)") }
        // An allowed set.
        let setModel = try model(knnSpec(handSamples, ints: handLabels, KNNOptions(k: 3, set: [1, 3], kInput: true)))
        XCTAssertNoThrow(try setModel.prediction(from: query([0, 0], k: 1)))
        XCTAssertThrowsError(try setModel.prediction(from: query([0, 0], k: 2))) { XCTAssertTrue("\($0)".contains("one of 1, 3"), "\($0)") }
        // More neighbours than samples: all samples vote.
        let all = try m.prediction(from: query([0, 0], k: 4))
        assertProbs(intProbs(all), [1: 0.5, 2: 0.25, 3: 0.25])
    }

    func testEmptyModelPredictsTheDefaultLabel() throws {
        let m = try model(knnSpec([], strings: [], dims: 2, KNNOptions(defaultString: "unknown")))
        let out = try m.prediction(from: query([1, 2]))
        XCTAssertEqual(out.featureValue(for: "label")?.stringValue, "unknown")
        XCTAssertEqual(out.featureValue(for: "labelProbs")?.dictionary, .stringKeyed(["unknown": 1]))
        // Without a probabilities output only the label is returned.
        let bare = try model(knnSpec(handSamples, ints: handLabels, KNNOptions(probabilities: false)))
        let o = try bare.prediction(from: query([0, 0]))
        XCTAssertEqual(o.featureNames, ["label"])
    }

    func testMalformedModelsFailAtLoad() {
        func expect(_ spec: CoreML_Specification_Model, _ fragment: String, line: UInt = #line) {
            XCTAssertThrowsError(try model(spec), line: line) { error in
                let e = error as! MLModelError
                XCTAssertEqual(e.model, "knn", line: line)
                XCTAssertTrue(e.message.contains(fragment), "\(e.description) lacks '\(fragment)'", line: line)
            }
        }
        expect(knnSpec(handSamples, ints: [1, 1, 2, 2]), "4 class labels for 5 samples")
        expect(knnSpec(handSamples, strings: ["a", "b", "c", "d", "e", "f"]), "6 class labels for 5 samples")
        var wrongDims = handSamples
        wrongDims[2] = [0, 2, 5]
        expect(knnSpec(wrongDims, ints: handLabels, dims: 2), "sample 2 has 3 values")
        var noIndex = knnSpec(handSamples, ints: handLabels)
        noIndex.kNearestNeighborsClassifier.nearestNeighborsIndex.indexType = nil
        expect(noIndex, "no index type")
        expect(knnSpec(handSamples, ints: handLabels, KNNOptions(leafSize: 0)), "leafSize is 0")
        var noDistance = knnSpec(handSamples, ints: handLabels)
        noDistance.kNearestNeighborsClassifier.nearestNeighborsIndex.distanceFunction = nil
        expect(noDistance, "distance function")
        var noWeighting = knnSpec(handSamples, ints: handLabels)
        noWeighting.kNearestNeighborsClassifier.weightingScheme = nil
        expect(noWeighting, "weighting scheme")
        expect(knnSpec(handSamples, ints: handLabels, KNNOptions(k: 0)), "default 0 is not allowed")
        expect(knnSpec(handSamples, ints: handLabels, KNNOptions(k: 5, range: 1...4)), "default 5 is not allowed")
        expect(knnSpec(handSamples, ints: handLabels, KNNOptions(k: 2, set: [1, 3])), "default 2 is not allowed")
        var noK = knnSpec(handSamples, ints: handLabels)
        noK.kNearestNeighborsClassifier.clearNumberOfNeighbors()
        expect(noK, "no numberOfNeighbors")
        expect(knnSpec(handSamples, ints: handLabels, KNNOptions(defaultString: "x")), "different types")
        expect(knnSpec([], dims: 2), "neither class labels nor a default")
        var nan = handSamples
        nan[1][0] = .nan
        expect(knnSpec(nan, ints: handLabels), "sample 1 has a non-finite value")
        // The description's input must give numberOfDimensions values.
        expect(knnSpec(handSamples, ints: handLabels, dims: 3), "sample 0 has 2 values")
        var wrongInput = knnSpec(handSamples, ints: handLabels)
        wrongInput.description_p.input[0].type.multiArrayType.shape = [3]
        expect(wrongInput, "inputs give 3 values but the model expects 2")
        // A string label output for int64 labels.
        var wrongOutput = knnSpec(handSamples, ints: handLabels)
        wrongOutput.description_p.output[0].type.stringType = .init()
        expect(wrongOutput, "class labels are int64")
    }

    func testBadInputsFailAtPredict() throws {
        let m = try model(knnSpec(handSamples, ints: handLabels))
        XCTAssertThrowsError(try m.prediction(from: query([.nan, 0]))) { error in
            XCTAssertEqual((error as! MLModelError).feature, "input")
        }
        XCTAssertThrowsError(try m.prediction(from: query([0, 0, 0]))) { error in
            XCTAssertEqual((error as! MLModelError).feature, "input")
        }
    }
}
