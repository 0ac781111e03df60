import CortadoModels
import XCTest

/// SVM regressor and classifier on small specs built here.
///
/// Expected values come from LIBSVM itself: the same models were written as LIBSVM model
/// files by a short script (`svm_reference.py`: libsvm-official 3.37 in the project venv,
/// `svm_load_model` + `svm_predict`, with `-b 1` for probabilities) and the printed numbers
/// pasted here. The hand-checkable ones are worked in comments. Tolerance 1e-9 absolute: the
/// arithmetic is the same as LIBSVM's, except that the RBF kernel uses precomputed squared
/// norms (‖x‖² + ‖s‖² - 2x·s) where LIBSVM sums squared differences (~1e-16 apart).
final class SVMTests: XCTestCase {
    override func setUp() {
        CortadoModels.registerBuiltinKinds()
    }

    private let tolerance = 1e-9

    // MARK: Spec builders

    private enum Kernel {
        case linear, rbf(Double), poly(gamma: Double, c: Double, degree: Int32), sigmoid(gamma: Double, c: Double)

        var spec: CoreML_Specification_Kernel {
            var k = CoreML_Specification_Kernel()
            switch self {
            case .linear: k.linearKernel = .init()
            case .rbf(let g): k.rbfKernel.gamma = g
            case .poly(let g, let c, let d): k.polyKernel.gamma = g; k.polyKernel.c = c; k.polyKernel.degree = d
            case .sigmoid(let g, let c): k.sigmoidKernel.gamma = g; k.sigmoidKernel.c = c
            }
            return k
        }
    }

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

    private func dense(_ vectors: [[Double]]) -> CoreML_Specification_DenseSupportVectors {
        var d = CoreML_Specification_DenseSupportVectors()
        d.vectors = vectors.map { var v = CoreML_Specification_DenseVector(); v.values = $0; return v }
        return d
    }

    /// LIBSVM-style sparse vectors: (1-based index, value) nodes, zeros left out.
    private func sparse(_ vectors: [[(Int32, Double)]]) -> CoreML_Specification_SparseSupportVectors {
        var s = CoreML_Specification_SparseSupportVectors()
        s.vectors = vectors.map { nodes in
            var v = CoreML_Specification_SparseVector()
            v.nodes = nodes.map { var n = CoreML_Specification_SparseNode(); n.index = $0.0; n.value = $0.1; return n }
            return v
        }
        return s
    }

    private func sparse(fromDense vectors: [[Double]]) -> CoreML_Specification_SparseSupportVectors {
        sparse(vectors.map { v in v.enumerated().filter { $0.element != 0 }.map { (Int32($0.offset + 1), $0.element) } })
    }

    private func arrayInput(_ n: Int64) -> [CoreML_Specification_FeatureDescription] { [feature("x", .multiArray, shape: [n])] }

    private func array(_ values: [Double]) throws -> MLFeatureValue { MLFeatureValue(multiArray: try MLMultiArray(values)) }

    // The regressor of svm_reference.py: 3 support vectors in 3 dimensions.
    private let regressorVectors: [[Double]] = [[1.0, 0.5, -1.0], [0.0, 2.0, 1.0], [-1.5, 0.25, 0.5]]
    private let regressorAlpha: [Double] = [0.5, -1.25, 2.0]
    private let regressorQueries: [[Double]] = [[0.3, -0.7, 1.1], [2.0, 1.0, -0.5]]

    private func regressor(_ kernel: Kernel, sparse isSparse: Bool = false, inputs: [CoreML_Specification_FeatureDescription]? = nil) -> CoreML_Specification_Model {
        var svm = CoreML_Specification_SupportVectorRegressor()
        svm.kernel = kernel.spec
        if isSparse { svm.sparseSupportVectors = sparse(fromDense: regressorVectors) } else { svm.denseSupportVectors = dense(regressorVectors) }
        svm.coefficients.alpha = regressorAlpha
        svm.rho = 0.3
        var spec = CoreML_Specification_Model()
        spec.specificationVersion = 1
        spec.description_p.input = inputs ?? arrayInput(3)
        spec.description_p.output = [feature("y", .double)]
        spec.description_p.predictedFeatureName = "y"
        spec.supportVectorRegressor = svm
        return spec
    }

    // The classifier of svm_reference.py: 3 classes (LIBSVM label order 7, 3, 5), 2 support
    // vectors each, RBF gamma 0.5.
    private let classifierVectors: [[Double]] = [[1.0, 0.0], [0.5, 1.0], [-1.0, 0.5], [-0.5, -1.0], [0.0, 1.5], [1.5, -0.5]]
    private let classifierCoefficients: [[Double]] = [[0.8, 0.4, -0.6, -0.3, 0.5, -0.2], [0.7, -0.1, 0.9, -0.4, -0.35, -0.75]]
    private let classifierQueries: [[Double]] = [[0.2, 0.3], [-1.0, 0.8], [1.2, -0.7], [0.0, -0.2]]

    private enum Labels { case ints([Int64]), strings([String]) }

    private func classifier(labels: Labels = .ints([7, 3, 5]), kernel: Kernel = .rbf(0.5), vectors: [[Double]]? = nil, perClass: [Int32] = [2, 2, 2],
                            coefficients: [[Double]]? = nil, rho: [Double] = [0.1, -0.2, 0.15],
                            probA: [Double] = [], probB: [Double] = [], probabilityOutput: Bool = true) -> CoreML_Specification_Model {
        var svm = CoreML_Specification_SupportVectorClassifier()
        svm.kernel = kernel.spec
        svm.denseSupportVectors = dense(vectors ?? classifierVectors)
        svm.numberOfSupportVectorsPerClass = perClass
        svm.coefficients = (coefficients ?? classifierCoefficients).map { var c = CoreML_Specification_Coefficients(); c.alpha = $0; return c }
        svm.rho = rho
        svm.probA = probA
        svm.probB = probB
        let labelType: MLFeatureType
        switch labels {
        case .ints(let l): var v = CoreML_Specification_Int64Vector(); v.vector = l; svm.int64ClassLabels = v; labelType = .int64
        case .strings(let l): var v = CoreML_Specification_StringVector(); v.vector = l; svm.stringClassLabels = v; labelType = .string
        }
        var spec = CoreML_Specification_Model()
        spec.specificationVersion = 1
        spec.description_p.input = arrayInput(Int64((vectors ?? classifierVectors).first?.count ?? 2))
        spec.description_p.output = [feature("label", labelType)] + (probabilityOutput ? [feature("probs", .dictionary, keys: labelType)] : [])
        spec.description_p.predictedFeatureName = "label"
        if probabilityOutput { spec.description_p.predictedProbabilitiesName = "probs" }
        spec.supportVectorClassifier = svm
        return spec
    }

    private func predict(_ model: MLModel, _ inputs: [String: MLFeatureValue]) throws -> MLFeatureProvider {
        try model.prediction(from: MLDictionaryFeatureProvider(dictionary: inputs))
    }

    private func intProbabilities(_ out: MLFeatureProvider, file: StaticString = #filePath, line: UInt = #line) -> [Int64: Double] {
        guard case .int64Keyed(let p)? = out.featureValue(for: "probs")?.dictionary else {
            XCTFail("no int64-keyed probabilities", file: file, line: line)
            return [:]
        }
        return p
    }

    private func assertLoadFails(_ spec: CoreML_Specification_Model, mentioning words: [String], file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertThrowsError(try MLModel(specification: spec, name: "bad"), file: file, line: line) { error in
            guard let e = error as? MLModelError else { return XCTFail("not an MLModelError: \(error)", file: file, line: line) }
            XCTAssertEqual(e.code, .invalidModel, "\(e)", file: file, line: line)
            for w in words { XCTAssertTrue(e.description.contains(w), "'\(w)' not in: \(e)", file: file, line: line) }
        }
    }

    // MARK: Regressor

    func testRegressorEveryKernelDenseAndSparse() throws {
        // LIBSVM epsilon_svr predictions for the two queries. Linear, worked by hand for query 0:
        // s·q = -1.15, -0.3, -0.075; 0.5·(-1.15) - 1.25·(-0.3) + 2·(-0.075) - 0.3 = -0.65.
        let expected: [(Kernel, [Double])] = [
            (.linear, [-0.6500000000000001, -6.675]),
            (.rbf(0.4), [0.004825332559538931, -0.08640146963923923]),
            (.poly(gamma: 0.5, c: 1.5, degree: 3), [3.2765585937499986, -1.03828125]),
            (.sigmoid(gamma: 0.3, c: -0.2), [-0.6335123402833223, -1.9049624829673137]),
        ]
        for (kernel, values) in expected {
            for isSparse in [false, true] {
                let model = try MLModel(specification: regressor(kernel, sparse: isSparse))
                for (q, want) in zip(regressorQueries, values) {
                    let y = try predict(model, ["x": array(q)]).featureValue(for: "y")
                    XCTAssertEqual(y?.type, .double)
                    XCTAssertEqual(y!.doubleValue, want, accuracy: tolerance, "\(kernel) sparse: \(isSparse) query \(q)")
                }
            }
        }
    }

    func testRegressorNamedScalarInputs() throws {
        let spec = regressor(.poly(gamma: 0.5, c: 1.5, degree: 3), inputs: [feature("a", .double), feature("b", .double), feature("c", .int64)])
        let out = try predict(try MLModel(specification: spec), ["a": MLFeatureValue(double: 2), "b": MLFeatureValue(double: 1), "c": MLFeatureValue(int64: 0)])
        // Query [2, 1, 0] differs from query 1 ([2, 1, -0.5]) — hand-evaluate: s·q = 2.5, 2, -2.75;
        // K = (0.5·s·q + 1.5)^3 = 2.75^3, 2.5^3, 0.125^3; f = 0.5·20.796875 - 1.25·15.625 + 2·0.001953125 - 0.3.
        let want = 0.5 * 20.796875 - 1.25 * 15.625 + 2 * 0.001953125 - 0.3
        XCTAssertEqual(out.featureValue(for: "y")!.doubleValue, want, accuracy: tolerance)
    }

    func testSparseRegressorTakesDictionaryInputWithLIBSVMIndices() throws {
        let model = try MLModel(specification: regressor(.rbf(0.4), sparse: true, inputs: [feature("x", .dictionary)]))
        // Keys are LIBSVM's 1-based indices: {1: 0.3, 2: -0.7, 3: 1.1} is query 0.
        let out = try predict(model, ["x": MLFeatureValue(dictionary: .int64Keyed([1: 0.3, 2: -0.7, 3: 1.1]))])
        XCTAssertEqual(out.featureValue(for: "y")!.doubleValue, 0.004825332559538931, accuracy: tolerance)
        // A feature no support vector has still counts in the RBF distance, as in LIBSVM:
        // key 7 = 0.5 adds 0.25 to every ‖x - s‖², scaling each kernel value by exp(-0.4·0.25).
        let extra = try predict(model, ["x": MLFeatureValue(dictionary: .int64Keyed([1: 0.3, 2: -0.7, 3: 1.1, 7: 0.5]))])
        XCTAssertEqual(extra.featureValue(for: "y")!.doubleValue, (0.004825332559538931 + 0.3) * exp(-0.1) - 0.3, accuracy: tolerance)
        // Missing keys are zeros.
        let sparseQuery = try predict(model, ["x": MLFeatureValue(dictionary: .int64Keyed([2: 1.0]))])
        let dense = try predict(try MLModel(specification: regressor(.rbf(0.4))), ["x": array([0, 1, 0])])
        XCTAssertEqual(sparseQuery.featureValue(for: "y")!.doubleValue, dense.featureValue(for: "y")!.doubleValue, accuracy: 1e-14)
        // Key 0 is not a LIBSVM index.
        XCTAssertThrowsError(try predict(model, ["x": MLFeatureValue(dictionary: .int64Keyed([0: 1.0]))])) { error in
            XCTAssertEqual((error as? MLModelError)?.feature, "x", "\(error)")
            XCTAssertTrue("\(error)".contains("key 0"), "\(error)")
        }
    }

    func testSparseVectorsWithUnshapedArrayAcceptAnyLength() throws {
        var spec = regressor(.rbf(0.4), sparse: true)
        spec.description_p.input[0].type.multiArrayType.shape = []
        let model = try MLModel(specification: spec)
        let three = try predict(model, ["x": array([0.3, -0.7, 1.1])])
        XCTAssertEqual(three.featureValue(for: "y")!.doubleValue, 0.004825332559538931, accuracy: tolerance)
        let five = try predict(model, ["x": array([0.3, -0.7, 1.1, 0, 0.5])])
        XCTAssertEqual(five.featureValue(for: "y")!.doubleValue, (0.004825332559538931 + 0.3) * exp(-0.1) - 0.3, accuracy: tolerance)
    }

    func testRegressorDenseBatch() throws {
        let dense = try XCTUnwrap(try MLModel(specification: regressor(.sigmoid(gamma: 0.3, c: -0.2))).compiled as? MLDenseBatchPredicting)
        XCTAssertEqual(dense.inputWidth, 3)
        XCTAssertEqual(dense.outputWidth, 1)
        var out = [Double](repeating: .nan, count: 2)
        dense.predict(rows: regressorQueries.flatMap { $0 }, count: 2, into: &out)
        XCTAssertEqual(out[0], -0.6335123402833223, accuracy: tolerance)
        XCTAssertEqual(out[1], -1.9049624829673137, accuracy: tolerance)
    }

    // MARK: Classifier

    func testThreeClassProbabilitiesMatchLIBSVMCoupling() throws {
        // svm_predict -b 1: pairwise sigmoids then multiclass_probability.
        let expected: [[Double]] = [
            [0.47471032800770563, 0.2428919199717906, 0.28239775202050366],
            [0.26913215230237364, 0.495830016095928, 0.23503783160169833],
            [0.49033036034379857, 0.15912091287381225, 0.35054872678238935],
            [0.410684451482637, 0.27401754470044304, 0.3152980038169199],
        ]
        let labels: [Int64] = [7, 3, 7, 7]
        let model = try MLModel(specification: classifier(probA: [-1.3, -0.9, -1.6], probB: [0.1, -0.05, 0.2]))
        XCTAssertEqual(model.modelDescription.classLabels, .int64s([7, 3, 5]))
        for (i, q) in classifierQueries.enumerated() {
            let out = try predict(model, ["x": array(q)])
            XCTAssertEqual(out.featureValue(for: "label")?.int64Value, labels[i], "query \(i)")
            let p = intProbabilities(out)
            for (c, label) in [Int64(7), 3, 5].enumerated() {
                XCTAssertEqual(p[label]!, expected[i][c], accuracy: tolerance, "query \(i) class \(label)")
            }
        }
        // String labels: the same numbers under the same class order.
        let named = try MLModel(specification: classifier(labels: .strings(["seven", "three", "five"]), probA: [-1.3, -0.9, -1.6], probB: [0.1, -0.05, 0.2]))
        let out = try predict(named, ["x": array(classifierQueries[1])])
        XCTAssertEqual(out.featureValue(for: "label")?.stringValue, "three")
        guard case .stringKeyed(let p)? = out.featureValue(for: "probs")?.dictionary else { return XCTFail("no string-keyed probabilities") }
        XCTAssertEqual(p["three"]!, 0.495830016095928, accuracy: tolerance)
    }

    func testThreeClassVotesWithoutProbabilityModel() throws {
        // LIBSVM decision values (pairs 7-3, 7-5, 3-5) for query 0: 0.3675, 0.7873, -0.2560 →
        // 7, 7, 5: votes 2, 0, 1. Query 1: -0.5201, 0.4706, 0.4602 → 3, 7, 3: votes 1, 2, 0.
        let model = try MLModel(specification: classifier())
        let labels: [Int64] = [7, 3, 7, 7]   // svm_predict
        let votes: [[Double]] = [[2, 0, 1], [1, 2, 0], [2, 0, 1], [2, 0, 1]]
        for (i, q) in classifierQueries.enumerated() {
            let out = try predict(model, ["x": array(q)])
            XCTAssertEqual(out.featureValue(for: "label")?.int64Value, labels[i], "query \(i)")
            // Without probA/probB the declared probability output holds the vote counts.
            XCTAssertEqual(intProbabilities(out), [7: votes[i][0], 3: votes[i][1], 5: votes[i][2]], "query \(i)")
        }
    }

    func testBinaryProbabilityIsThePairwiseSigmoidAndDecidesTheLabel() throws {
        // Classes 7 and 3 only (first four support vectors, coefficient row 0, rho 0.1).
        // Query 3 has decision value +0.0704 (a vote for 7) but P(7) = 0.4979: LIBSVM's
        // svm_predict_probability, and so Cortado, answers 3.
        let spec = classifier(labels: .ints([7, 3]), vectors: Array(classifierVectors.prefix(4)), perClass: [2, 2],
                              coefficients: [Array(classifierCoefficients[0].prefix(4))], rho: [0.1], probA: [-1.3], probB: [0.1])
        let model = try MLModel(specification: spec)
        let expected: [[Double]] = [
            [0.5933395537080611, 0.40666044629193887],
            [0.31515917394099763, 0.6848408260590024],
            [0.6323213535566142, 0.36767864644338577],
            [0.4978642566276606, 0.5021357433723395],
        ]
        let labels: [Int64] = [7, 3, 7, 3]
        for (i, q) in classifierQueries.enumerated() {
            let out = try predict(model, ["x": array(q)])
            XCTAssertEqual(out.featureValue(for: "label")?.int64Value, labels[i], "query \(i)")
            let p = intProbabilities(out)
            XCTAssertEqual(p[7]!, expected[i][0], accuracy: tolerance)
            XCTAssertEqual(p[3]!, expected[i][1], accuracy: tolerance)
        }
        // Without the probability model the same query is decided by the vote: 7.
        let voting = try MLModel(specification: classifier(labels: .ints([7, 3]), vectors: Array(classifierVectors.prefix(4)), perClass: [2, 2],
                                                           coefficients: [Array(classifierCoefficients[0].prefix(4))], rho: [0.1], probabilityOutput: false))
        XCTAssertEqual(try predict(voting, ["x": array(classifierQueries[3])]).featureValue(for: "label")?.int64Value, 7)
    }

    func testVoteTiesGoToTheLowestClassIndex() throws {
        // Zero coefficients: every decision value is -rho. rho = [-1, 1, -1]: pair (0,1) → 0,
        // (0,2) → 2, (1,2) → 1: one vote each, class index 0 wins.
        let zeros: [[Double]] = [[0, 0, 0], [0, 0, 0]]
        let v3: [[Double]] = [[1, 0], [0, 1], [1, 1]]
        let tie = try MLModel(specification: classifier(labels: .ints([30, 10, 20]), kernel: .linear, vectors: v3, perClass: [1, 1, 1],
                                                        coefficients: zeros, rho: [-1, 1, -1]))
        XCTAssertEqual(try predict(tie, ["x": array([0.5, 0.5])]).featureValue(for: "label")?.int64Value, 30)
        // A decision value of exactly 0 votes for the second class of the pair (LIBSVM: `> 0` for the first):
        // (0,1) → 1, (0,2) → 2, (1,2) → 2: class index 2 wins.
        let zero = try MLModel(specification: classifier(labels: .ints([30, 10, 20]), kernel: .linear, vectors: v3, perClass: [1, 1, 1],
                                                         coefficients: zeros, rho: [0, 0, 0]))
        XCTAssertEqual(try predict(zero, ["x": array([0.5, 0.5])]).featureValue(for: "label")?.int64Value, 20)
    }

    func testLinearKernelFoldedAndUnfoldedAgree() throws {
        // Pair decisions by hand, x = [1, 2], linear kernel, s0 = [1, 0] (class a), s1 = [0, 1] (class b),
        // s2 = [1, 1] (class c): K = 1, 2, 3.
        // (a,b): coef[0][0]·1 + coef[0][1]·2 - rho0 = 0.5 - 2 - 0.25 = -1.75 → b
        // (a,c): coef[1][0]·1 + coef[0][2]·3 - rho1 = 1 + 1.5 - 0 = 2.5 → a
        // (b,c): coef[1][1]·2 + coef[1][2]·3 - rho2 = -1 - 3 + 0.5 = -3.5 → c; one vote each → a.
        let coefficients: [[Double]] = [[0.5, -1, 0.5], [1, -0.5, -1]]
        let rho: [Double] = [0.25, 0, -0.5]
        // 3 support vectors × 2 values = 6 stored values ≥ 3 pairs × 2: folded into pair weights.
        let folded = try MLModel(specification: classifier(labels: .strings(["a", "b", "c"]), kernel: .linear, vectors: [[1, 0], [0, 1], [1, 1]],
                                                           perClass: [1, 1, 1], coefficients: coefficients, rho: rho))
        XCTAssertTrue(folded.compiled.summary.joined().contains("folded"), folded.compiled.summary.joined())
        XCTAssertEqual(try predict(folded, ["x": array([1, 2])]).featureValue(for: "label")?.stringValue, "a")
        // With class c's vector dropped, 2 stored values < 3 pairs × 2: kernel values per vector.
        // (a,b) = -1.75 → b; (a,c) = 1 - 0 → a; (b,c) = -1 + 0.5 = -0.5 → c; tie → a again; change
        // rho1 to 2 so (a,c) = -1 → c, and c wins with 2 votes.
        let unfolded = try MLModel(specification: classifier(labels: .strings(["a", "b", "c"]), kernel: .linear, vectors: [[1, 0], [0, 1]],
                                                             perClass: [1, 1, 0], coefficients: [[0.5, -1], [1, -0.5]], rho: [0.25, 2, -0.5]))
        XCTAssertFalse(unfolded.compiled.summary.joined().contains("folded"))
        let out = try predict(unfolded, ["x": array([1, 2])])
        XCTAssertEqual(out.featureValue(for: "label")?.stringValue, "c")
        guard case .stringKeyed(let votes)? = out.featureValue(for: "probs")?.dictionary else { return XCTFail("no votes") }
        XCTAssertEqual(votes, ["a": 0, "b": 1, "c": 2])
    }

    func testClassifierDenseBatchGivesProbabilities() throws {
        let model = try MLModel(specification: classifier(probA: [-1.3, -0.9, -1.6], probB: [0.1, -0.05, 0.2]))
        let dense = try XCTUnwrap(model.compiled as? MLDenseBatchPredicting)
        XCTAssertEqual(dense.inputWidth, 2)
        XCTAssertEqual(dense.outputWidth, 3)
        var out = [Double](repeating: .nan, count: 6)
        dense.predict(rows: classifierQueries[2] + classifierQueries[3], count: 2, into: &out)
        XCTAssertEqual(out[0], 0.49033036034379857, accuracy: tolerance)
        XCTAssertEqual(out[5], 0.3152980038169199, accuracy: tolerance)
    }

    func testModelsWithoutSupportVectorsPredictMinusRho() throws {
        // Degenerate but well formed: with no support vectors every decision value is -rho.
        for kernel in [Kernel.linear, .rbf(0.5)] {
            var reg = regressor(kernel)
            reg.supportVectorRegressor.denseSupportVectors = dense([])
            reg.supportVectorRegressor.coefficients.alpha = []
            XCTAssertEqual(try predict(try MLModel(specification: reg), ["x": array([1, 2, 3])]).featureValue(for: "y")?.doubleValue, -0.3)
            for (rho, label) in [(-1.0, Int64(1)), (1.0, 2)] {
                let cls = classifier(labels: .ints([1, 2]), kernel: kernel, vectors: [], perClass: [0, 0], coefficients: [[]], rho: [rho])
                XCTAssertEqual(try predict(try MLModel(specification: cls), ["x": array([1, 2])]).featureValue(for: "label")?.int64Value, label)
            }
        }
    }

    // MARK: Malformed specs fail at load

    func testMalformedClassifiersFailAtLoad() {
        assertLoadFails(classifier(coefficients: classifierCoefficients + [classifierCoefficients[0]]),
                        mentioning: ["3 coefficient rows for 3 classes", "expected 2"])
        assertLoadFails(classifier(coefficients: [classifierCoefficients[0], Array(classifierCoefficients[1].prefix(5))]),
                        mentioning: ["coefficient row 1 has 5 values", "6 support vectors"])
        assertLoadFails(classifier(perClass: [2, 2, 1]), mentioning: ["numberOfSupportVectorsPerClass sums to 5", "6 support vectors"])
        assertLoadFails(classifier(perClass: [3, 3]), mentioning: ["numberOfSupportVectorsPerClass has 2 entries for 3 classes"])
        assertLoadFails(classifier(rho: [0.1, 0.2]), mentioning: ["2 rho values for 3 classes", "expected 3"])
        assertLoadFails(classifier(probA: [1, 2, 3], probB: [1, 2]), mentioning: ["probA", "probB", "same size"])
        assertLoadFails(classifier(probA: [1], probB: [1]), mentioning: ["1 probA/probB values for 3 classes", "expected 3"])
        assertLoadFails(classifier(kernel: .rbf(-1)), mentioning: ["gamma", "greater than or equal to zero"])
        assertLoadFails(classifier(kernel: .poly(gamma: 1, c: 0, degree: -2)), mentioning: ["degree"])
        var ragged = classifier()
        ragged.supportVectorClassifier.denseSupportVectors.vectors[2].values = [1, 2, 3]
        assertLoadFails(ragged, mentioning: ["dense support vector 2 has 3 values but vector 0 has 2"])
        var noKernel = classifier()
        noKernel.supportVectorClassifier.clearKernel()
        assertLoadFails(noKernel, mentioning: ["no kernel"])
        var noVectors = classifier()
        noVectors.supportVectorClassifier.supportVectors = nil
        assertLoadFails(noVectors, mentioning: ["no support vectors"])
        var noLabels = classifier()
        noLabels.supportVectorClassifier.classLabels = nil
        assertLoadFails(noLabels, mentioning: ["no class labels"])
        // Support vectors of 2 values, inputs of 3.
        var wide = classifier()
        wide.description_p.input = arrayInput(3)
        assertLoadFails(wide, mentioning: ["inputs do not fit its support vectors", "inputs give 3 values but the model expects 2"])
    }

    func testMalformedRegressorsFailAtLoad() {
        var short = regressor(.linear)
        short.supportVectorRegressor.coefficients.alpha = [1, 2]
        assertLoadFails(short, mentioning: ["2 coefficients but 3 support vectors"])
        var zeroIndex = regressor(.rbf(1), sparse: true)
        zeroIndex.supportVectorRegressor.sparseSupportVectors = sparse([[(0, 1.0)], [(1, 1.0)], [(2, 1.0)]])
        assertLoadFails(zeroIndex, mentioning: ["feature index 0", "start at 1"])
        var repeated = regressor(.rbf(1), sparse: true)
        repeated.supportVectorRegressor.sparseSupportVectors = sparse([[(2, 1.0), (2, 3.0)], [(1, 1.0)], [(3, 1.0)]])
        assertLoadFails(repeated, mentioning: ["feature index 2 twice"])
        var beyond = regressor(.rbf(1), sparse: true)
        beyond.supportVectorRegressor.sparseSupportVectors = sparse([[(5, 1.0)], [(1, 1.0)], [(2, 1.0)]])
        assertLoadFails(beyond, mentioning: ["feature index 5", "only 3 values"])
        assertLoadFails(regressor(.linear, sparse: true, inputs: [feature("x", .dictionary, keys: .string)]), mentioning: ["string keys", "int64"])
        assertLoadFails(regressor(.linear, inputs: [feature("x", .string)]), mentioning: ["string"])
        var nan = regressor(.linear)
        nan.supportVectorRegressor.rho = .infinity
        assertLoadFails(nan, mentioning: ["rho"])
    }
}
