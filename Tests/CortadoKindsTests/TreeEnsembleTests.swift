import CortadoModels
import Foundation
import XCTest

/// treeEnsembleRegressor / treeEnsembleClassifier on hand-built trees. Expected values are
/// worked out by hand from the node semantics (tolerance 1e-12 unless stated), and a
/// randomized check compares every compiled form against a direct reading of the spec.
final class TreeEnsembleTests: XCTestCase {
    typealias Node = CoreML_Specification_TreeEnsembleParameters.TreeNode
    typealias Behavior = Node.TreeNodeBehavior

    override func setUp() {
        CortadoModels.registerBuiltinKinds()
    }

    // MARK: Spec builders

    func branch(_ tree: UInt64, _ id: UInt64, _ behavior: Behavior, feature: UInt64, _ value: Double,
                t: UInt64, f: UInt64, missingTrue: Bool = false) -> Node {
        var n = Node()
        n.treeID = tree
        n.nodeID = id
        n.nodeBehavior = behavior
        n.branchFeatureIndex = feature
        n.branchFeatureValue = value
        n.trueChildNodeID = t
        n.falseChildNodeID = f
        n.missingValueTracksTrueChild = missingTrue
        n.relativeHitRate = 1
        return n
    }

    func leaf(_ tree: UInt64, _ id: UInt64, _ values: [(UInt64, Double)]) -> Node {
        var n = Node()
        n.treeID = tree
        n.nodeID = id
        n.nodeBehavior = .leafNode
        n.evaluationInfo = values.map { index, value in
            var e = Node.EvaluationInfo()
            e.evaluationIndex = index
            e.evaluationValue = value
            return e
        }
        return n
    }

    func leaf(_ tree: UInt64, _ id: UInt64, _ value: Double) -> Node { leaf(tree, id, [(0, value)]) }

    func feature(_ name: String, _ build: (inout CoreML_Specification_FeatureType) -> Void) -> CoreML_Specification_FeatureDescription {
        var f = CoreML_Specification_FeatureDescription()
        f.name = name
        build(&f.type)
        return f
    }

    func doubleInputs(_ n: Int) -> [CoreML_Specification_FeatureDescription] {
        (0..<n).map { i in feature("x\(i)") { $0.doubleType = .init() } }
    }

    func parameters(_ nodes: [Node], dims: Int, base: [Double]) -> CoreML_Specification_TreeEnsembleParameters {
        var p = CoreML_Specification_TreeEnsembleParameters()
        p.nodes = nodes
        p.numPredictionDimensions = UInt64(dims)
        p.basePredictionValue = base
        return p
    }

    func regressor(_ nodes: [Node], dims: Int = 1, base: [Double] = [], inputs: Int = 2,
                   transform: CoreML_Specification_TreeEnsemblePostEvaluationTransform = .noTransform) throws -> MLModel {
        var s = CoreML_Specification_Model()
        s.specificationVersion = 1
        s.description_p.input = doubleInputs(inputs)
        s.description_p.output = [feature("y") {
            if dims == 1 { $0.doubleType = .init() } else {
                $0.multiArrayType.shape = [Int64(dims)]
                $0.multiArrayType.dataType = .double
            }
        }]
        s.description_p.predictedFeatureName = "y"
        var r = CoreML_Specification_TreeEnsembleRegressor()
        r.treeEnsemble = parameters(nodes, dims: dims, base: base)
        r.postEvaluationTransform = transform
        s.treeEnsembleRegressor = r
        return try MLModel(specification: s, name: "trees")
    }

    enum Labels { case ints([Int64]), strings([String]) }

    func classifier(_ nodes: [Node], dims: Int, base: [Double] = [], labels: Labels, inputs: Int = 2,
                    transform: CoreML_Specification_TreeEnsemblePostEvaluationTransform = .noTransform) throws -> MLModel {
        var s = CoreML_Specification_Model()
        s.specificationVersion = 1
        s.description_p.input = doubleInputs(inputs)
        var c = CoreML_Specification_TreeEnsembleClassifier()
        c.treeEnsemble = parameters(nodes, dims: dims, base: base)
        c.postEvaluationTransform = transform
        switch labels {
        case .ints(let l):
            c.int64ClassLabels.vector = l
            s.description_p.output = [feature("label") { $0.int64Type = .init() },
                                      feature("probs") { $0.dictionaryType.int64KeyType = .init() }]
        case .strings(let l):
            c.stringClassLabels.vector = l
            s.description_p.output = [feature("label") { $0.stringType = .init() },
                                      feature("probs") { $0.dictionaryType.stringKeyType = .init() }]
        }
        s.description_p.predictedFeatureName = "label"
        s.description_p.predictedProbabilitiesName = "probs"
        s.treeEnsembleClassifier = c
        return try MLModel(specification: s, name: "trees")
    }

    func inputs(_ values: [Double]) -> MLFeatureProvider {
        var d: [String: MLFeatureValue] = [:]
        for (i, v) in values.enumerated() { d["x\(i)"] = MLFeatureValue(double: v) }
        return MLDictionaryFeatureProvider(dictionary: d)
    }

    func y(_ model: MLModel, _ x: [Double], file: StaticString = #filePath, line: UInt = #line) throws -> Double {
        let out = try model.prediction(from: inputs(x))
        return try XCTUnwrap(out.featureValue(for: "y"), file: file, line: line).doubleValue
    }

    func yArray(_ model: MLModel, _ x: [Double]) throws -> [Double] {
        try XCTUnwrap(model.prediction(from: inputs(x)).featureValue(for: "y")?.multiArrayValue).doubleValues()
    }

    func assertLoadFails(_ build: @autoclosure () throws -> MLModel, mentions words: [String],
                         file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertThrowsError(try build(), file: file, line: line) { error in
            guard let e = error as? MLModelError else { return XCTFail("not an MLModelError: \(error)", file: file, line: line) }
            XCTAssertEqual(e.code, .invalidModel, "\(e)", file: file, line: line)
            for w in words { XCTAssertTrue(e.description.contains(w), "'\(w)' not in: \(e)", file: file, line: line) }
        }
    }

    // MARK: Branch modes

    /// One split on x0 against 1.0 for each behavior; true leaf 10, false leaf 20. The root
    /// is node 5 (not 0) and leaf ids are out of order, so the root must be found.
    func testEveryBranchModeAtAndAroundTheThreshold() throws {
        let cases: [(Behavior, [Double])] = [
            // expected for x0 = 0.5, 1.0, 1.5, -inf, +inf
            (.branchOnValueLessThanEqual, [10, 10, 20, 10, 20]),
            (.branchOnValueLessThan, [10, 20, 20, 10, 20]),
            (.branchOnValueGreaterThanEqual, [20, 10, 10, 20, 10]),
            (.branchOnValueGreaterThan, [20, 20, 10, 20, 10]),
            (.branchOnValueEqual, [20, 10, 20, 20, 20]),
            (.branchOnValueNotEqual, [10, 20, 10, 10, 10]),
        ]
        let xs = [0.5, 1.0, 1.5, -Double.infinity, Double.infinity]
        for (behavior, expected) in cases {
            let model = try regressor([leaf(0, 3, 20), branch(0, 5, behavior, feature: 0, 1.0, t: 9, f: 3), leaf(0, 9, 10)])
            for (x, want) in zip(xs, expected) {
                XCTAssertEqual(try y(model, [x, 0]), want, "\(behavior) at x0 = \(x)")
            }
            // The dense batch path agrees with single predictions.
            let dense = try XCTUnwrap(model.compiled as? MLDenseBatchPredicting)
            var out = [Double](repeating: -1, count: xs.count)
            let matrix: [Double] = xs.flatMap { x -> [Double] in [x, 0] }
            matrix.withUnsafeBufferPointer { m in out.withUnsafeMutableBufferPointer { dense.predict(rows: m.baseAddress!, count: xs.count, into: $0.baseAddress!) } }
            XCTAssertEqual(out, expected, "\(behavior) batch")
        }
    }

    /// Thresholds at the edges of the double range normalize correctly.
    func testThresholdsAtInfinityAndTinySteps() throws {
        let tiny = Double.leastNonzeroMagnitude
        let cases: [(Behavior, Double, Double, Double)] = [
            // behavior, threshold, x, expected (10 true, 20 false)
            (.branchOnValueLessThan, -.infinity, -.infinity, 20),
            (.branchOnValueGreaterThanEqual, -.infinity, -.infinity, 10),
            (.branchOnValueLessThan, .infinity, .greatestFiniteMagnitude, 10),
            (.branchOnValueLessThan, .infinity, .infinity, 20),
            (.branchOnValueGreaterThanEqual, .infinity, .infinity, 10),
            (.branchOnValueGreaterThan, .infinity, .infinity, 20),
            (.branchOnValueLessThan, 0, -tiny, 10),
            (.branchOnValueLessThan, 0, -0.0, 20),
            (.branchOnValueGreaterThanEqual, 0, -0.0, 10),
            (.branchOnValueGreaterThanEqual, 0, -tiny, 20),
            (.branchOnValueLessThanEqual, .nan, 1, 20),
            (.branchOnValueGreaterThan, .nan, 1, 20),
            (.branchOnValueGreaterThanEqual, .nan, 1, 20),
            (.branchOnValueLessThan, .nan, 1, 20),
            (.branchOnValueLessThan, 1.0, 1.0.nextDown, 10),
            (.branchOnValueGreaterThan, 1.0, 1.0.nextUp, 10),
        ]
        for (behavior, t, x, want) in cases {
            let model = try regressor([branch(0, 0, behavior, feature: 1, t, t: 1, f: 2), leaf(0, 1, 10), leaf(0, 2, 20)])
            XCTAssertEqual(try y(model, [0, x]), want, "\(behavior) threshold \(t) at \(x)")
        }
    }

    // MARK: Missing values

    /// NaN goes to the true child when missingValueTracksTrueChild is set, else the false
    /// child, whatever the comparison; rows with and without NaN share a batch.
    func testMissingValuesTrackEitherChild() throws {
        for behavior in [Behavior.branchOnValueLessThan, .branchOnValueGreaterThanEqual, .branchOnValueEqual, .branchOnValueNotEqual] {
            for missingTrue in [true, false] {
                let model = try regressor([branch(0, 0, behavior, feature: 0, 1.0, t: 1, f: 2, missingTrue: missingTrue),
                                           leaf(0, 1, 10), leaf(0, 2, 20)])
                XCTAssertEqual(try y(model, [.nan, 0]), missingTrue ? 10 : 20, "\(behavior) missingTrue=\(missingTrue)")
            }
        }
        // Two trees: NaN in x0 routed by tree 0; tree 1 splits on x1 (x1 <= 0 → +1, else +2).
        let model = try regressor([
            branch(0, 0, .branchOnValueLessThan, feature: 0, 1.0, t: 1, f: 2, missingTrue: true),
            leaf(0, 1, 10), leaf(0, 2, 20),
            branch(1, 0, .branchOnValueLessThanEqual, feature: 1, 0, t: 1, f: 2, missingTrue: false),
            leaf(1, 1, 1), leaf(1, 2, 2),
        ])
        var rows: [[Double]] = []
        var expected: [Double] = []
        for i in 0..<37 {
            let x0: Double = i % 3 == 0 ? .nan : (i % 3 == 1 ? 0.5 : 1.5)
            let x1: Double = i % 5 == 0 ? .nan : (i % 2 == 0 ? -1 : 1)
            rows.append([x0, x1])
            let t0: Double = x0.isNaN ? 10 : (x0 < 1 ? 10 : 20)
            let t1: Double = x1.isNaN ? 2 : (x1 <= 0 ? 1 : 2)
            expected.append(t0 + t1)
        }
        let batch = try model.predictions(fromBatch: MLArrayBatchProvider(array: rows.map(inputs)))
        for i in 0..<rows.count {
            XCTAssertEqual(batch.features(at: i).featureValue(for: "y")?.doubleValue, expected[i], "row \(i) \(rows[i])")
            XCTAssertEqual(try y(model, rows[i]), expected[i], "single row \(i)")
        }
    }

    // MARK: Dimensions, base values, depth

    /// Three dimensions with base values; tree 0 writes dimensions 0 and 2 from each leaf,
    /// tree 1 writes dimension 1; a leaf without evaluationInfo adds nothing.
    func testSeveralDimensionsAndBaseValues() throws {
        let model = try regressor([
            branch(0, 0, .branchOnValueLessThanEqual, feature: 0, 0, t: 1, f: 2),
            leaf(0, 1, [(0, 1), (2, 100)]), leaf(0, 2, [(0, 2), (2, 200), (2, 5)]),
            branch(7, 0, .branchOnValueGreaterThan, feature: 1, 0, t: 1, f: 2),
            leaf(7, 1, [(1, 10)]), leaf(7, 2, []),
        ], dims: 3, base: [0.5, -1, 1000])
        XCTAssertEqual(try yArray(model, [-1, 1]), [1.5, 9, 1100])
        XCTAssertEqual(try yArray(model, [1, -1]), [2.5, -1, 1205])
        XCTAssertEqual(model.compiled.summary.joined(separator: "\n").contains("2 trees"), true, model.compiled.summary.joined())
    }

    /// A chain 14 deep (compact form: too deep for the perfect form) and a lopsided
    /// 6-deep chain (perfect form, padded), summed.
    func testDeepAndLopsidedTrees() throws {
        var nodes: [Node] = []
        // Tree 0: node i tests x0 <= i; true → leaf 100+i (value i), false → node i+1.
        for i in 0..<14 {
            let next: UInt64 = i == 13 ? 999 : UInt64(i + 1)
            nodes.append(branch(0, UInt64(i), .branchOnValueLessThanEqual, feature: 0, Double(i), t: UInt64(100 + i), f: next))
            nodes.append(leaf(0, UInt64(100 + i), Double(i)))
        }
        nodes.append(leaf(0, 999, 1000))
        // Tree 1: chain of 6 on x1: node i: x1 >= 6-i → leaf value 10*(6-i), else the next node.
        for i in 0..<6 {
            let next: UInt64 = i == 5 ? 50 : UInt64(i + 1)
            nodes.append(branch(1, UInt64(i), .branchOnValueGreaterThanEqual, feature: 1, Double(6 - i), t: UInt64(20 + i), f: next))
            nodes.append(leaf(1, UInt64(20 + i), Double(10 * (6 - i))))
        }
        nodes.append(leaf(1, 50, -1))
        let model = try regressor(nodes)
        let summary = model.compiled.summary.joined(separator: " ")
        XCTAssertTrue(summary.contains("1 perfect, 1 compact"), summary)
        for x0 in [-3.0, 0, 0.5, 6.2, 13, 13.5, 40] {
            for x1 in [-2.0, 0.9, 1, 4.5, 6, 9] {
                let t0 = x0 <= 13 ? max(0, x0.rounded(.up)) : 1000
                let t1 = x1 >= 1 ? 10 * min(6, x1.rounded(.down)) : -1
                XCTAssertEqual(try y(model, [x0, x1]), t0 + t1, "x = (\(x0), \(x1))")
            }
        }
    }

    func testEmptyEnsembleGivesTheBaseValue() throws {
        let model = try regressor([], base: [4.25])
        XCTAssertEqual(try y(model, [1, 2]), 4.25)
    }

    // MARK: Transforms

    func testRegressorTransforms() throws {
        // One tree adding (1, -2) to two dimensions with base (0.5, 0.5): sums (1.5, -1.5).
        let nodes = [leaf(0, 0, [(0, 1), (1, -2)])]
        let s = [1.5, -1.5]
        let logistic = try yArray(regressor(nodes, dims: 2, base: [0.5, 0.5], transform: .regressionLogistic), [0, 0])
        XCTAssertEqual(logistic[0], 1 / (1 + exp(-s[0])), accuracy: 1e-12)
        XCTAssertEqual(logistic[1], 1 / (1 + exp(-s[1])), accuracy: 1e-12)
        let softmax = try yArray(regressor(nodes, dims: 2, base: [0.5, 0.5], transform: .classificationSoftMax), [0, 0])
        let z = exp(s[0]) + exp(s[1])
        XCTAssertEqual(softmax[0], exp(s[0]) / z, accuracy: 1e-12)
        XCTAssertEqual(softmax[1], exp(s[1]) / z, accuracy: 1e-12)
        // Zero reference: softmax over (0, 1.5, -1.5); the reference is dropped.
        let zero = try yArray(regressor(nodes, dims: 2, base: [0.5, 0.5], transform: .classificationSoftMaxWithZeroClassReference), [0, 0])
        let z0 = 1 + exp(s[0]) + exp(s[1])
        XCTAssertEqual(zero[0], exp(s[0]) / z0, accuracy: 1e-12)
        XCTAssertEqual(zero[1], exp(s[1]) / z0, accuracy: 1e-12)
        // A single logistic regression value: 1/(1+e^-(0.5+2)) for x0 <= 0.
        let one = try regressor([branch(0, 0, .branchOnValueLessThanEqual, feature: 0, 0, t: 1, f: 2), leaf(0, 1, 2), leaf(0, 2, -2)],
                                base: [0.5], transform: .regressionLogistic)
        XCTAssertEqual(try y(one, [-1, 0]), 1 / (1 + exp(-2.5)), accuracy: 1e-12)
        XCTAssertEqual(try y(one, [1, 0]), 1 / (1 + exp(1.5)), accuracy: 1e-12)
    }

    // MARK: Classifiers

    func probabilities(_ out: MLFeatureProvider) -> [AnyHashable: Double] {
        (out.featureValue(for: "probs")?.dictionaryValue ?? [:]).mapValues(\.doubleValue)
    }

    /// Binary, one dimension, NoTransform: the sum is p(class 1), as sklearn trees store it.
    func testBinaryClassifierRawProbability() throws {
        let model = try classifier([branch(0, 0, .branchOnValueLessThanEqual, feature: 0, 0, t: 1, f: 2), leaf(0, 1, 0.3), leaf(0, 2, 0.8)],
                                   dims: 1, labels: .ints([7, 9]))
        var out = try model.prediction(from: inputs([-1, 0]))
        XCTAssertEqual(out.featureValue(for: "label")?.int64Value, 7)
        XCTAssertEqual(probabilities(out)[Int64(7)]!, 0.7, accuracy: 1e-12)
        XCTAssertEqual(probabilities(out)[Int64(9)]!, 0.3, accuracy: 1e-12)
        out = try model.prediction(from: inputs([1, 0]))
        XCTAssertEqual(out.featureValue(for: "label")?.int64Value, 9)
        XCTAssertEqual(probabilities(out)[Int64(9)]!, 0.8, accuracy: 1e-12)
        XCTAssertEqual(model.modelDescription.classLabels, .int64s([7, 9]))
    }

    /// Binary with Regression_Logistic (XGBoost, GradientBoosting): p1 = σ(base + leaves);
    /// a 0.5 tie goes to the first class.
    func testBinaryClassifierLogisticAndTie() throws {
        let model = try classifier([
            branch(0, 0, .branchOnValueLessThan, feature: 1, 2, t: 1, f: 2), leaf(0, 1, -0.75), leaf(0, 2, 1.25),
            leaf(1, 0, 0.25),
        ], dims: 1, base: [0.5], labels: .strings(["no", "yes"]), transform: .regressionLogistic)
        let out = try model.prediction(from: inputs([0, 3]))
        let p1 = 1 / (1 + exp(-(0.5 + 1.25 + 0.25)))
        XCTAssertEqual(out.featureValue(for: "label")?.stringValue, "yes")
        XCTAssertEqual(probabilities(out)["yes"]!, p1, accuracy: 1e-12)
        XCTAssertEqual(probabilities(out)["no"]!, 1 - p1, accuracy: 1e-12)
        // 0.5 - 0.75 + 0.25 = 0: p = (0.5, 0.5), the first label wins.
        let tie = try model.prediction(from: inputs([0, 1]))
        XCTAssertEqual(probabilities(tie)["yes"]!, 0.5, accuracy: 1e-15)
        XCTAssertEqual(tie.featureValue(for: "label")?.stringValue, "no")
    }

    /// Three classes, one dimension each: NoTransform gives the raw sums (a forest's class
    /// fractions), Classification_SoftMax normalizes them.
    func testMulticlassClassifierRawAndSoftmax() throws {
        let nodes = [
            branch(0, 0, .branchOnValueLessThanEqual, feature: 0, 0, t: 1, f: 2),
            leaf(0, 1, [(0, 0.5), (1, 0.25), (2, 0.25)]), leaf(0, 2, [(0, 0.1), (1, 0.2), (2, 0.7)]),
            branch(1, 0, .branchOnValueLessThanEqual, feature: 1, 0, t: 1, f: 2),
            leaf(1, 1, [(1, 1)]), leaf(1, 2, [(2, 0.5)]),
        ]
        let raw = try classifier(nodes, dims: 3, labels: .strings(["a", "b", "c"]))
        var out = try raw.prediction(from: inputs([-1, -1]))
        XCTAssertEqual(out.featureValue(for: "label")?.stringValue, "b")
        let p = probabilities(out)
        XCTAssertEqual(p["a"]!, 0.5, accuracy: 1e-12)
        XCTAssertEqual(p["b"]!, 1.25, accuracy: 1e-12)
        XCTAssertEqual(p["c"]!, 0.25, accuracy: 1e-12)
        out = try raw.prediction(from: inputs([1, 1]))
        XCTAssertEqual(out.featureValue(for: "label")?.stringValue, "c")
        XCTAssertEqual(probabilities(out)["c"]!, 1.2, accuracy: 1e-12)

        let soft = try classifier(nodes, dims: 3, base: [1, 0, 0], labels: .ints([0, 1, 2]), transform: .classificationSoftMax)
        out = try soft.prediction(from: inputs([-1, 1]))
        let s = [1.5, 0.25, 0.75]
        let z = s.map(exp).reduce(0, +)
        XCTAssertEqual(out.featureValue(for: "label")?.int64Value, 0)
        for k in 0..<3 { XCTAssertEqual(probabilities(out)[Int64(k)]!, exp(s[k]) / z, accuracy: 1e-12) }
    }

    /// Zero class reference: two dimensions score classes 1 and 2; class 0 scores 0.
    func testZeroClassReferenceClassifier() throws {
        let nodes = [branch(0, 0, .branchOnValueLessThanEqual, feature: 0, 0, t: 1, f: 2),
                     leaf(0, 1, [(0, -1), (1, -2)]), leaf(0, 2, [(0, 2), (1, 0.5)])]
        let model = try classifier(nodes, dims: 2, labels: .ints([10, 20, 30]), transform: .classificationSoftMaxWithZeroClassReference)
        for (x, s) in [(-1.0, [0, -1, -2.0]), (1.0, [0, 2, 0.5])] {
            let out = try model.prediction(from: inputs([x, 0]))
            let z = s.map(exp).reduce(0, +)
            let p = probabilities(out)
            for (k, label) in [Int64(10), 20, 30].enumerated() { XCTAssertEqual(p[label]!, exp(s[k]) / z, accuracy: 1e-12) }
            XCTAssertEqual(out.featureValue(for: "label")?.int64Value, x < 0 ? 10 : 20)
        }
        // Batch path and the dense path give the same probabilities.
        let dense = try XCTUnwrap(model.compiled as? MLDenseBatchPredicting)
        XCTAssertEqual(dense.outputWidth, 3)
        var out = [Double](repeating: 0, count: 6)
        [-1.0, 0, 1, 0].withUnsafeBufferPointer { m in out.withUnsafeMutableBufferPointer { dense.predict(rows: m.baseAddress!, count: 2, into: $0.baseAddress!) } }
        XCTAssertEqual(out[0] + out[1] + out[2], 1, accuracy: 1e-12)
        XCTAssertEqual(out[4], exp(2) / (1 + exp(2) + exp(0.5)), accuracy: 1e-12)
    }

    // MARK: Malformed ensembles

    func testMalformedEnsemblesFailAtLoad() {
        assertLoadFails(try regressor([branch(0, 0, .branchOnValueLessThanEqual, feature: 0, 0, t: 1, f: 8), leaf(0, 1, 1)]),
                        mentions: ["tree 0", "node 0", "falseChildNodeId 8"])
        // 0 → 1 → 0: every node has a parent.
        assertLoadFails(try regressor([branch(0, 0, .branchOnValueLessThanEqual, feature: 0, 0, t: 1, f: 2),
                                       branch(0, 1, .branchOnValueLessThanEqual, feature: 0, 0, t: 0, f: 3),
                                       leaf(0, 2, 1), leaf(0, 3, 1)]),
                        mentions: ["tree 0", "cycle"])
        // A root plus a separate 3 → 4 → 3 loop.
        assertLoadFails(try regressor([branch(5, 0, .branchOnValueLessThanEqual, feature: 0, 0, t: 1, f: 2), leaf(5, 1, 1), leaf(5, 2, 1),
                                       branch(5, 3, .branchOnValueLessThanEqual, feature: 0, 0, t: 4, f: 1),
                                       branch(5, 4, .branchOnValueLessThanEqual, feature: 0, 0, t: 3, f: 2)]),
                        mentions: ["tree 5", "two parents"])
        assertLoadFails(try regressor([branch(5, 0, .branchOnValueLessThanEqual, feature: 0, 0, t: 1, f: 2), leaf(5, 1, 1), leaf(5, 2, 1),
                                       branch(5, 3, .branchOnValueLessThanEqual, feature: 0, 0, t: 4, f: 4),
                                       branch(5, 4, .branchOnValueLessThanEqual, feature: 0, 0, t: 3, f: 3)]),
                        mentions: ["tree 5", "does not reach", "cycle"])
        assertLoadFails(try regressor([leaf(0, 0, [(0, 1), (3, 2)])], dims: 2, base: [0, 0]),
                        mentions: ["tree 0", "node 0", "evaluationIndex 3", "numPredictionDimensions is 2"])
        assertLoadFails(try regressor([leaf(0, 0, 1), leaf(0, 1, 2)]), mentions: ["tree 0", "2 roots"])
        assertLoadFails(try regressor([leaf(0, 0, 1), leaf(0, 0, 2)]), mentions: ["tree 0", "two nodes with nodeId 0"])
        assertLoadFails(try regressor([branch(0, 0, .branchOnValueLessThanEqual, feature: 4, 0, t: 1, f: 2), leaf(0, 1, 1), leaf(0, 2, 1)]),
                        mentions: ["feature index 4", "only 2 values"])
        assertLoadFails(try regressor([leaf(0, 0, 1)], base: [1, 2]), mentions: ["basePredictionValue has 2 values"])
        assertLoadFails(try regressor([leaf(0, 0, 1)], dims: 0), mentions: ["numPredictionDimensions is 0"])
        assertLoadFails(try classifier([leaf(0, 0, 1)], dims: 2, labels: .ints([0, 1, 2])), mentions: ["2 prediction dimensions for 3 classes"])
        assertLoadFails(try classifier([leaf(0, 0, 1)], dims: 3, labels: .ints([0, 1, 2]), transform: .classificationSoftMaxWithZeroClassReference),
                        mentions: ["expected 2"])
        assertLoadFails(try classifier([leaf(0, 0, 1)], dims: 1, labels: .ints([4])), mentions: ["1 class label"])
        var bad = branch(0, 0, .branchOnValueLessThanEqual, feature: 0, 0, t: 1, f: 2)
        bad.nodeBehavior = .UNRECOGNIZED(42)
        assertLoadFails(try regressor([bad, leaf(0, 1, 1), leaf(0, 2, 1)]), mentions: ["unknown node behavior 42"])
    }

    func testRegressorOutputMustHoldTheDimensions() throws {
        var s = CoreML_Specification_Model()
        s.specificationVersion = 1
        s.description_p.input = doubleInputs(1)
        s.description_p.output = [feature("y") { $0.doubleType = .init() }]
        s.treeEnsembleRegressor.treeEnsemble = parameters([leaf(0, 0, [(0, 1), (1, 2)])], dims: 2, base: [])
        assertLoadFails(try MLModel(specification: s), mentions: ["2 prediction dimensions", "single double"])
    }

    // MARK: Randomized agreement with the spec's semantics

    /// Random ensembles (every behavior, random depths up to 13, NaN inputs) through the
    /// dense batch path must equal a direct walk of the spec's nodes, bit for bit.
    func testRandomEnsemblesMatchADirectReading() throws {
        var rng = SplitMix(seed: 12345)
        let behaviors: [Behavior] = [.branchOnValueLessThanEqual, .branchOnValueLessThan, .branchOnValueGreaterThanEqual,
                                     .branchOnValueGreaterThan, .branchOnValueEqual, .branchOnValueNotEqual]
        let grid = [-1.0, -0.5, 0, 0.25, 0.5, 1, 1.5]
        for round in 0..<12 {
            let features = 4
            let dims = round % 3 + 1
            let allowEquality = round % 2 == 0
            var nodes: [Node] = []
            for tree in 0..<(3 + round) {
                var nextID: UInt64 = 0
                let maxDepth = [2, 4, 6, 9, 13][round % 5]
                func grow(_ depth: Int) -> UInt64 {
                    let id = nextID * 3 + 7  // ids are neither dense nor ordered by depth
                    nextID += 1
                    if depth >= maxDepth || (depth > 0 && rng.unit() < 0.25) {
                        let infos: [(UInt64, Double)] = (0..<dims).compactMap { d in
                            rng.unit() < 0.7 ? (UInt64(d), (rng.unit() * 8).rounded() / 4 - 1) : nil
                        }
                        nodes.append(leaf(UInt64(tree), id, infos))
                        return id
                    }
                    let pool = allowEquality ? behaviors : Array(behaviors.prefix(4))
                    let behavior = pool[Int(rng.next() % UInt64(pool.count))]
                    let t = grow(depth + 1)
                    let f = grow(depth + 1)
                    nodes.append(branch(UInt64(tree), id, behavior, feature: rng.next() % UInt64(features),
                                        grid[Int(rng.next() % UInt64(grid.count))], t: t, f: f, missingTrue: rng.unit() < 0.5))
                    return id
                }
                _ = grow(0)
            }
            nodes.shuffle(using: &rng)
            let base = (0..<dims).map { Double($0) * 0.5 }
            let model = try regressor(nodes, dims: dims, base: base, inputs: features)
            let dense = try XCTUnwrap(model.compiled as? MLDenseBatchPredicting)
            let rows = 150  // more than two blocks
            var x = [Double](repeating: 0, count: rows * features)
            for i in x.indices {
                let u = rng.unit()
                x[i] = u < 0.1 ? .nan : grid[Int(rng.next() % UInt64(grid.count))] + (u < 0.5 ? 0 : 0.125)
            }
            var out = [Double](repeating: .nan, count: rows * dims)
            x.withUnsafeBufferPointer { m in out.withUnsafeMutableBufferPointer { dense.predict(rows: m.baseAddress!, count: rows, into: $0.baseAddress!) } }
            let reference = Reference(nodes, dims: dims, base: base)
            for r in 0..<rows {
                let want = reference.predict(Array(x[(r * features)..<((r + 1) * features)]))
                XCTAssertEqual(Array(out[(r * dims)..<((r + 1) * dims)]), want, "round \(round) row \(r)")
            }
        }
    }

    /// The spec read directly: trees in ascending treeId order, nodes looked up by id.
    struct Reference {
        let trees: [(byID: [UInt64: Node], root: Node)]
        let dims: Int
        let base: [Double]

        init(_ nodes: [Node], dims: Int, base: [Double]) {
            let grouped = Dictionary(grouping: nodes, by: \.treeID)
            trees = grouped.keys.sorted().map { id in
                let members = grouped[id]!
                let children = Set(members.filter { $0.nodeBehavior != .leafNode }.flatMap { [$0.trueChildNodeID, $0.falseChildNodeID] })
                return (Dictionary(uniqueKeysWithValues: members.map { ($0.nodeID, $0) }), members.first { !children.contains($0.nodeID) }!)
            }
            self.dims = dims
            self.base = base
        }

        func predict(_ row: [Double]) -> [Double] {
            var out = base
            for (byID, root) in trees {
                var n = root
                while n.nodeBehavior != .leafNode {
                    let v = row[Int(n.branchFeatureIndex)]
                    let t = n.branchFeatureValue
                    let goTrue: Bool
                    if v.isNaN {
                        goTrue = n.missingValueTracksTrueChild
                    } else {
                        switch n.nodeBehavior {
                        case .branchOnValueLessThanEqual: goTrue = v <= t
                        case .branchOnValueLessThan: goTrue = v < t
                        case .branchOnValueGreaterThanEqual: goTrue = v >= t
                        case .branchOnValueGreaterThan: goTrue = v > t
                        case .branchOnValueEqual: goTrue = v == t
                        default: goTrue = v != t
                        }
                    }
                    n = byID[goTrue ? n.trueChildNodeID : n.falseChildNodeID]!
                }
                var add = [Double](repeating: 0, count: dims)
                for e in n.evaluationInfo { add[Int(e.evaluationIndex)] += e.evaluationValue }
                for d in 0..<dims { out[d] += add[d] }
            }
            return out
        }
    }
}

/// A small deterministic generator for the randomized test.
private struct SplitMix: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func unit() -> Double { Double(next() >> 11) / Double(1 << 53) }
}
