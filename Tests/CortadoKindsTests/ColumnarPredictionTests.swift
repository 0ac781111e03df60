@testable import CortadoCore
import CortadoModels
@testable import CortadoNeuralNetwork
import Foundation
import XCTest

/// `MLModel.predictions(fromColumns:)` against `prediction(from:)` on each row, for the kinds
/// that run columns natively (networks, tree ensembles, GLMs) and for kinds left on the row
/// path (a pipeline, an SVM): 1, 3 and 300 rows, with and without output backings, row views
/// and concatenated batches, and bad columns failing as their rows do.
///
/// Tolerances: trees, GLMs, the SVM and the pipeline compute each row the same way in a batch
/// as alone, so they must agree exactly. A network's batch runs its GEMMs over more rows than
/// one, whose kernels may block the sums differently: within 1e-5 × max(1, |value|).
final class ColumnarPredictionTests: XCTestCase {
    override func setUp() {
        CortadoModels.registerBuiltinKinds()
    }

    // MARK: Checking

    /// Compares two feature values within `tolerance` (relative to magnitudes above 1).
    func assertClose(_ a: MLFeatureValue?, _ b: MLFeatureValue?, tolerance: Double, _ context: String,
                     file: StaticString = #filePath, line: UInt = #line) {
        guard let a, let b else { return XCTFail("\(context): a value is missing (\(String(describing: a)), \(String(describing: b)))", file: file, line: line) }
        func close(_ x: Double, _ y: Double) -> Bool {
            x == y || abs(x - y) <= tolerance * max(1, abs(y))
        }
        XCTAssertEqual(a.type, b.type, context, file: file, line: line)
        switch (a.storage, b.storage) {
        case (.multiArray(let x), .multiArray(let y)):
            XCTAssertEqual(x.shape, y.shape, context, file: file, line: line)
            let xs = x.doubleValues(), ys = y.doubleValues()
            XCTAssertEqual(xs.count, ys.count, context, file: file, line: line)
            if let i = zip(xs, ys).enumerated().first(where: { !close($0.element.0, $0.element.1) })?.offset {
                XCTFail("\(context): element \(i) is \(xs[i]), the row gives \(ys[i])", file: file, line: line)
            }
        case (.double(let x), .double(let y)):
            XCTAssertTrue(close(x, y), "\(context): \(x) vs \(y)", file: file, line: line)
        case (.int64(let x), .int64(let y)): XCTAssertEqual(x, y, context, file: file, line: line)
        case (.string(let x), .string(let y)): XCTAssertEqual(x, y, context, file: file, line: line)
        case (.dictionary(let x), .dictionary(let y)):
            switch (x, y) {
            case (.int64Keyed(let p), .int64Keyed(let q)):
                XCTAssertEqual(Set(p.keys), Set(q.keys), context, file: file, line: line)
                for (k, v) in q { XCTAssertTrue(close(p[k] ?? .nan, v), "\(context): class \(k)", file: file, line: line) }
            case (.stringKeyed(let p), .stringKeyed(let q)):
                XCTAssertEqual(Set(p.keys), Set(q.keys), context, file: file, line: line)
                for (k, v) in q { XCTAssertTrue(close(p[k] ?? .nan, v), "\(context): class \(k)", file: file, line: line) }
            default: XCTFail("\(context): dictionaries of different key types", file: file, line: line)
            }
        default:
            XCTFail("\(context): \(a) vs \(b)", file: file, line: line)
        }
    }

    /// Every row of `predictions(fromColumns:)` against `prediction(from:)` on that row, without
    /// and with backings (made by `backings` for a number of rows; empty: none). Returns the
    /// columns predicted without backings.
    @discardableResult
    func checkRows(_ model: MLModel, _ columns: MLFeatureColumns, tolerance: Double = 0,
                   backings: (Int) throws -> [String: MLMultiArray] = { _ in [:] },
                   file: StaticString = #filePath, line: UInt = #line) throws -> MLFeatureColumns {
        let rows = try (0..<columns.count).map { try model.prediction(from: columns.features(at: $0)) }
        let names = model.modelDescription.outputs.map(\.name)
        var plain: MLFeatureColumns?
        for backed in [false, true] {
            var options = MLPredictionOptions()
            if backed {
                options.outputBackings = try backings(columns.count)
                if options.outputBackings.isEmpty { continue }
            }
            let out = try model.predictions(fromColumns: columns, options: options)
            XCTAssertEqual(out.count, columns.count, file: file, line: line)
            XCTAssertEqual(out.names, names, "outputs in the description's order", file: file, line: line)
            for (name, backing) in options.outputBackings {
                guard case .arrays(let array)? = out.column(name) else {
                    XCTFail("\(name): not an arrays column", file: file, line: line)
                    continue
                }
                XCTAssertEqual(array.dataPointer, backing.dataPointer, "\(name) is written into its backing", file: file, line: line)
                XCTAssertEqual(array.shape.first, columns.count, file: file, line: line)
            }
            for r in 0..<columns.count {
                for name in names {
                    var expected = rows[r].featureValue(for: name)
                    // A backing of another element type holds the values in its type.
                    if let backing = options.outputBackings[name], let e = expected?.multiArrayValue, backing.dataType != e.dataType {
                        let converted = try MLMultiArray(shape: e.shape, dataType: backing.dataType)
                        for i in 0..<e.count { converted.setDouble(e.double(at: i), at: i) }
                        expected = MLFeatureValue(multiArray: converted)
                    }
                    assertClose(out.value(name, row: r), expected, tolerance: tolerance,
                                "\(model.name), \(columns.count) rows, backed \(backed), \(name) row \(r)", file: file, line: line)
                }
            }
            if !backed { plain = out }
        }
        return plain!
    }

    /// Row views and a batch put back together predict as the whole does.
    func checkViews(_ model: MLModel, _ columns: MLFeatureColumns, tolerance: Double = 0, file: StaticString = #filePath, line: UInt = #line) throws {
        let whole = try model.predictions(fromColumns: columns)
        let n = columns.count
        let cut = [0, n / 3, n - n / 4, n]
        let parts = (0..<3).map { columns.rows(cut[$0]..<cut[$0 + 1]) }
        let joined = try model.predictions(fromColumns: try MLFeatureColumns.concatenating(parts))
        for (p, part) in parts.enumerated() {
            let out = try model.predictions(fromColumns: part)
            for r in 0..<part.count {
                for name in whole.names {
                    assertClose(out.value(name, row: r), whole.value(name, row: cut[p] + r), tolerance: tolerance,
                                "\(model.name) view \(p) \(name) row \(r)", file: file, line: line)
                }
            }
        }
        for r in 0..<n {
            for name in whole.names {
                assertClose(joined.value(name, row: r), whole.value(name, row: r), tolerance: tolerance,
                            "\(model.name) concatenated \(name) row \(r)", file: file, line: line)
            }
        }
    }

    /// Each bad batch fails with the error its first row gives.
    func checkErrors(_ model: MLModel, _ bad: [(String, MLFeatureColumns)], file: StaticString = #filePath, line: UInt = #line) {
        for (what, columns) in bad {
            var row: MLModelError?, batch: MLModelError?
            XCTAssertThrowsError(try model.prediction(from: columns.features(at: 0)), what, file: file, line: line) { row = $0 as? MLModelError }
            XCTAssertThrowsError(try model.predictions(fromColumns: columns), what, file: file, line: line) { batch = $0 as? MLModelError }
            XCTAssertNotNil(row, what, file: file, line: line)
            XCTAssertEqual(batch, row, what, file: file, line: line)
        }
    }

    /// A copy of `columns` with `name` replaced (or removed, for nil).
    func replacing(_ columns: MLFeatureColumns, _ name: String, _ column: MLFeatureColumn?) -> MLFeatureColumns {
        let out = MLFeatureColumns(count: columns.count)
        for n in columns.names where n != name { out.set(n, columns.column(n)!) }
        if let column { out.set(name, column) }
        return out
    }

    static let rowCounts = [1, 3, 300]

    // MARK: Inputs

    func floats(_ shape: [Int], dataType: MLMultiArrayDataType = .float32, seed: UInt64) throws -> MLMultiArray {
        var numbers = SeededFloats(state: seed)
        let a = try MLMultiArray(shape: shape, dataType: dataType)
        for i in 0..<a.count { a.setDouble(Double(numbers.next()), at: i) }
        return a
    }

    func doubles(_ n: Int, seed: UInt64, scale: Float = 2) -> [Double] {
        var numbers = SeededFloats(state: seed)
        return (0..<n).map { _ in Double(numbers.next() * scale) }
    }

    // MARK: Specs

    func feature(_ name: String, _ build: (inout CoreML_Specification_FeatureType) -> Void) -> CoreML_Specification_FeatureDescription {
        var f = CoreML_Specification_FeatureDescription()
        f.name = name
        build(&f.type)
        return f
    }

    func innerProduct(_ name: String, _ input: String, _ output: String, cin: Int, cout: Int, seed: UInt64) -> CoreML_Specification_NeuralNetworkLayer {
        var numbers = SeededFloats(state: seed)
        var layer = CoreML_Specification_NeuralNetworkLayer()
        layer.name = name; layer.input = [input]; layer.output = [output]
        var ip = CoreML_Specification_InnerProductLayerParams()
        ip.inputChannels = UInt64(cin); ip.outputChannels = UInt64(cout); ip.hasBias_p = true
        ip.weights.floatValue = numbers.array(cin * cout).map { $0 * 0.5 }
        ip.bias.floatValue = numbers.array(cout).map { $0 * 0.1 }
        layer.innerProduct = ip
        return layer
    }

    func relu(_ name: String, _ input: String, _ output: String) -> CoreML_Specification_NeuralNetworkLayer {
        var layer = CoreML_Specification_NeuralNetworkLayer()
        layer.name = name; layer.input = [input]; layer.output = [output]; layer.activation.reLu = .init()
        return layer
    }

    /// An MLP x[16] → 32 → ReLU → y[4].
    func mlp() throws -> MLModel {
        var spec = CoreML_Specification_Model()
        spec.specificationVersion = 4
        spec.description_p.input = [arrayDescription("x", [16], .float32)]
        spec.description_p.output = [arrayDescription("y", [4], .float32)]
        spec.neuralNetwork.layers = [innerProduct("fc1", "x", "h", cin: 16, cout: 32, seed: 3), relu("relu", "h", "hr"),
                                     innerProduct("fc2", "hr", "y", cin: 32, cout: 4, seed: 4)]
        return try MLModel(specification: spec, name: "mlp")
    }

    /// A network classifier x[8] → 3 → softmax "probs", string labels, and a second output
    /// "logits" (the scores before the softmax).
    func networkClassifier() throws -> MLModel {
        var spec = CoreML_Specification_Model()
        spec.specificationVersion = 4
        spec.description_p.input = [arrayDescription("x", [8], .float32)]
        spec.description_p.output = [feature("label") { $0.stringType = .init() }, feature("probs") { $0.dictionaryType.stringKeyType = .init() },
                                     arrayDescription("logits", [3], .float32)]
        spec.description_p.predictedFeatureName = "label"
        spec.description_p.predictedProbabilitiesName = "probs"
        var softmax = CoreML_Specification_NeuralNetworkLayer()
        softmax.name = "sm"; softmax.input = ["logits"]; softmax.output = ["probs"]; softmax.softmax = .init()
        var nn = CoreML_Specification_NeuralNetworkClassifier()
        nn.layers = [innerProduct("fc", "x", "logits", cin: 8, cout: 3, seed: 5), softmax]
        nn.stringClassLabels.vector = ["cat", "dog", "eel"]
        nn.labelProbabilityLayerName = "probs"
        spec.neuralNetworkClassifier = nn
        return try MLModel(specification: spec, name: "netclass")
    }

    /// A small CNN x[3, 8, 8] → 3×3 convolution to 4 channels (same padding) → ReLU → y[4, 8, 8].
    func cnn() throws -> MLModel {
        var numbers = SeededFloats(state: 6)
        var spec = CoreML_Specification_Model()
        spec.specificationVersion = 4
        spec.description_p.input = [arrayDescription("x", [3, 8, 8], .float32)]
        spec.description_p.output = [arrayDescription("y", [4, 8, 8], .float32)]
        var conv = CoreML_Specification_ConvolutionLayerParams()
        conv.outputChannels = 4; conv.kernelChannels = 3; conv.nGroups = 1
        conv.kernelSize = [3, 3]; conv.stride = [1, 1]; conv.dilationFactor = [1, 1]
        conv.same = CoreML_Specification_SamePadding()
        conv.hasBias_p = true
        conv.weights.floatValue = numbers.array(4 * 3 * 3 * 3).map { $0 * 0.3 }
        conv.bias.floatValue = numbers.array(4).map { $0 * 0.1 }
        var layer = CoreML_Specification_NeuralNetworkLayer()
        layer.name = "conv"; layer.input = ["x"]; layer.output = ["c"]; layer.convolution = conv
        spec.neuralNetwork.layers = [layer, relu("relu", "c", "y")]
        return try MLModel(specification: spec, name: "cnn")
    }

    typealias Node = CoreML_Specification_TreeEnsembleParameters.TreeNode

    /// Two trees over x0, x1 (doubles) and n (an int64), `dims` dimensions a leaf.
    func trees(dims: Int) -> CoreML_Specification_TreeEnsembleParameters {
        func branch(_ tree: UInt64, _ id: UInt64, feature: UInt64, _ value: Double, _ t: UInt64, _ f: UInt64) -> Node {
            var n = Node()
            n.treeID = tree; n.nodeID = id; n.nodeBehavior = .branchOnValueLessThanEqual
            n.branchFeatureIndex = feature; n.branchFeatureValue = value; n.trueChildNodeID = t; n.falseChildNodeID = f
            return n
        }
        func leaf(_ tree: UInt64, _ id: UInt64, _ base: Double) -> Node {
            var n = Node()
            n.treeID = tree; n.nodeID = id; n.nodeBehavior = .leafNode
            n.evaluationInfo = (0..<dims).map { d in
                var e = Node.EvaluationInfo()
                e.evaluationIndex = UInt64(d); e.evaluationValue = base + 0.25 * Double(d)
                return e
            }
            return n
        }
        var p = CoreML_Specification_TreeEnsembleParameters()
        p.nodes = [branch(0, 0, feature: 0, 0.1, 1, 2), branch(0, 1, feature: 2, 3, 3, 4), leaf(0, 2, 1.5), leaf(0, 3, -0.5), leaf(0, 4, 0.75),
                   branch(1, 0, feature: 1, -0.2, 1, 2), leaf(1, 1, 0.3), leaf(1, 2, -1.1)]
        p.numPredictionDimensions = UInt64(dims)
        p.basePredictionValue = Array(repeating: 0.05, count: dims)
        return p
    }

    func treeInputs() -> [CoreML_Specification_FeatureDescription] {
        [feature("x0") { $0.doubleType = .init() }, feature("x1") { $0.doubleType = .init() }, feature("n") { $0.int64Type = .init() }]
    }

    func treeRegressor() throws -> MLModel {
        var spec = CoreML_Specification_Model()
        spec.specificationVersion = 1
        spec.description_p.input = treeInputs()
        spec.description_p.output = [feature("y") { $0.multiArrayType.shape = [2]; $0.multiArrayType.dataType = .double }]
        spec.description_p.predictedFeatureName = "y"
        spec.treeEnsembleRegressor.treeEnsemble = trees(dims: 2)
        return try MLModel(specification: spec, name: "treereg")
    }

    func treeClassifier() throws -> MLModel {
        var spec = CoreML_Specification_Model()
        spec.specificationVersion = 1
        spec.description_p.input = treeInputs()
        spec.description_p.output = [feature("label") { $0.int64Type = .init() }, feature("probs") { $0.dictionaryType.int64KeyType = .init() }]
        spec.description_p.predictedFeatureName = "label"
        spec.description_p.predictedProbabilitiesName = "probs"
        spec.treeEnsembleClassifier.treeEnsemble = trees(dims: 3)
        spec.treeEnsembleClassifier.postEvaluationTransform = .classificationSoftMax
        spec.treeEnsembleClassifier.int64ClassLabels.vector = [10, 20, 30]
        return try MLModel(specification: spec, name: "treeclass")
    }

    func treeColumns(_ n: Int, seed: UInt64) -> MLFeatureColumns {
        let columns = MLFeatureColumns(count: n)
        columns.set("x0", .doubles(doubles(n, seed: seed)))
        columns.set("x1", .doubles(doubles(n, seed: seed + 1)))
        columns.set("n", .int64s(doubles(n, seed: seed + 2, scale: 6).map { Int64($0) }))
        return columns
    }

    /// A GLM regressor x[3] (double) → y[2] (float32), logit.
    func glmRegressor() throws -> MLModel {
        var glm = CoreML_Specification_GLMRegressor()
        glm.weights = [[0.5, -1.25, 2], [1, 0.25, -0.75]].map { var r = CoreML_Specification_GLMRegressor.DoubleArray(); r.value = $0; return r }
        glm.offset = [0.1, -0.2]
        glm.postEvaluationTransform = .logit
        var spec = CoreML_Specification_Model()
        spec.specificationVersion = 1
        spec.description_p.input = [arrayDescription("x", [3], .double)]
        spec.description_p.output = [arrayDescription("y", [2], .float32)]
        spec.description_p.predictedFeatureName = "y"
        spec.glmRegressor = glm
        return try MLModel(specification: spec, name: "glmreg")
    }

    /// A three-class GLM classifier (string labels, OneVsRest) over x[3] (double).
    func glmClassifier() throws -> MLModel {
        var glm = CoreML_Specification_GLMClassifier()
        glm.weights = [[0.5, -1.25, 2], [1, 0.25, -0.75], [-0.3, 0.8, 0.1]].map {
            var r = CoreML_Specification_GLMClassifier.DoubleArray(); r.value = $0; return r
        }
        glm.offset = [0.1, -0.2, 0]
        glm.postEvaluationTransform = .logit
        glm.classEncoding = .oneVsRest
        glm.stringClassLabels.vector = ["a", "b", "c"]
        var spec = CoreML_Specification_Model()
        spec.specificationVersion = 1
        spec.description_p.input = [arrayDescription("x", [3], .double)]
        spec.description_p.output = [feature("label") { $0.stringType = .init() }, feature("probs") { $0.dictionaryType.stringKeyType = .init() }]
        spec.description_p.predictedFeatureName = "label"
        spec.description_p.predictedProbabilitiesName = "probs"
        spec.glmClassifier = glm
        return try MLModel(specification: spec, name: "glmclass")
    }

    /// A pipeline: the GLM regressor's y[2] feeds a second GLM regressor to a double "z".
    func pipeline() throws -> MLModel {
        var first = try glmRegressor().specification
        first.description_p.output = [arrayDescription("y", [2], .double)]
        var glm = CoreML_Specification_GLMRegressor()
        glm.weights = [{ var r = CoreML_Specification_GLMRegressor.DoubleArray(); r.value = [2, -3]; return r }()]
        glm.offset = [0.5]
        var second = CoreML_Specification_Model()
        second.specificationVersion = 1
        second.description_p.input = [arrayDescription("y", [2], .double)]
        second.description_p.output = [feature("z") { $0.doubleType = .init() }]
        second.description_p.predictedFeatureName = "z"
        second.glmRegressor = glm
        var spec = CoreML_Specification_Model()
        spec.specificationVersion = 4
        spec.description_p.input = [arrayDescription("x", [3], .double)]
        spec.description_p.output = [feature("z") { $0.doubleType = .init() }, arrayDescription("y", [2], .double)]
        spec.pipeline.models = [first, second]
        return try MLModel(specification: spec, name: "pipe")
    }

    /// An RBF SVM regressor over x[3] (on the row path).
    func svm() throws -> MLModel {
        var svm = CoreML_Specification_SupportVectorRegressor()
        svm.kernel.rbfKernel.gamma = 0.5
        svm.denseSupportVectors.vectors = [[1, 0, 0.5], [0.5, 1, -1], [-1, 0.5, 0]].map { var v = CoreML_Specification_DenseVector(); v.values = $0; return v }
        svm.coefficients.alpha = [0.8, -0.4, 0.3]
        svm.rho = 0.1
        var spec = CoreML_Specification_Model()
        spec.specificationVersion = 1
        spec.description_p.input = [arrayDescription("x", [3], .double)]
        spec.description_p.output = [feature("y") { $0.doubleType = .init() }]
        spec.description_p.predictedFeatureName = "y"
        spec.supportVectorRegressor = svm
        return try MLModel(specification: spec, name: "svm")
    }

    func arrayColumns(_ name: String, _ n: Int, _ rowShape: [Int], dataType: MLMultiArrayDataType = .float32, seed: UInt64) throws -> MLFeatureColumns {
        let columns = MLFeatureColumns(count: n)
        columns.set(name, .arrays(try floats([n] + rowShape, dataType: dataType, seed: seed)))
        return columns
    }

    // MARK: Networks

    func testMLPColumnsMatchRows() throws {
        let model = try mlp()
        XCTAssertTrue(model.compiled is any MLColumnarPredicting)
        for n in Self.rowCounts {
            // 300 float32 rows of 16 are read in place; 1 and 3 are copied; doubles and float16s are converted.
            try checkRows(model, try arrayColumns("x", n, [16], seed: UInt64(n)), tolerance: 1e-5) {
                ["y": try MLMultiArray(shape: [$0, 4], dataType: .float32)]
            }
            try checkRows(model, try arrayColumns("x", n, [16], dataType: .double, seed: UInt64(n) + 7), tolerance: 1e-5) {
                ["y": try MLMultiArray(shape: [$0 * 4], dataType: .double)]
            }
            try checkRows(model, try arrayColumns("x", n, [16], dataType: .float16, seed: UInt64(n) + 8), tolerance: 1e-5)
        }
        try checkViews(model, try arrayColumns("x", 300, [16], seed: 11), tolerance: 1e-5)
    }

    func testMLPColumnsRunAsOneBatch() throws {
        // Rows as values (the row path) and as one array give the same answers; the array's
        // output is one [rows, 4] array, not one per row.
        let model = try mlp()
        let columns = try arrayColumns("x", 5, [16], seed: 2)
        let out = try model.predictions(fromColumns: columns)
        guard case .arrays(let y)? = out.column("y") else { return XCTFail("y is not an arrays column") }
        XCTAssertEqual(y.shape, [5, 4])
        XCTAssertTrue(y.isContiguous)
        let values = replacing(columns, "x", .values((0..<5).map { columns.value("x", row: $0)! }))
        let viaRows = try model.predictions(fromColumns: values)
        for r in 0..<5 { assertClose(out.value("y", row: r), viaRows.value("y", row: r), tolerance: 1e-5, "row \(r)") }
    }

    func testNetworksTakeArrayColumnsAsTheyLie() throws {
        let mlp = try XCTUnwrap(try mlp().compiled as? NNCompiledNetwork)
        // The MLP's first layer reads rows in place: 300 float32 rows of 16 are not copied.
        XCTAssertEqual(mlp.defaultPlan?.rowInputs, ["x"])
        let columns = try arrayColumns("x", 300, [16], seed: 1)
        XCTAssertNotNil(try mlp.stackedInputs(columns), "an arrays column is the batched input")
        let values = replacing(columns, "x", .values((0..<300).map { columns.value("x", row: $0)! }))
        XCTAssertNil(try mlp.stackedInputs(values), "values go row by row")
        let cnn = try XCTUnwrap(try cnn().compiled as? NNCompiledNetwork)
        XCTAssertNotNil(try cnn.stackedInputs(try arrayColumns("x", 3, [3, 8, 8], dataType: .float16, seed: 1)))
    }

    func testNetworkClassifierColumnsMatchRows() throws {
        let model = try networkClassifier()
        for n in Self.rowCounts {
            let out = try checkRows(model, try arrayColumns("x", n, [8], seed: UInt64(n) + 20), tolerance: 1e-5) {
                ["logits": try MLMultiArray(shape: [$0, 3], dataType: .float32)]
            }
            guard case .values = out.column("label"), case .values = out.column("probs"), case .arrays = out.column("logits") else {
                return XCTFail("string labels and probabilities are values, logits an array")
            }
        }
    }

    func testCNNColumnsMatchRows() throws {
        let model = try cnn()
        for n in Self.rowCounts {
            try checkRows(model, try arrayColumns("x", n, [3, 8, 8], seed: UInt64(n) + 30), tolerance: 1e-5) {
                ["y": try MLMultiArray(shape: [$0, 4, 8, 8], dataType: .float32)]
            }
        }
        try checkViews(model, try arrayColumns("x", 7, [3, 8, 8], seed: 31), tolerance: 1e-5)
    }

    func testBadNetworkColumnsFailAsTheirRowsDo() throws {
        let model = try mlp()
        let good = try arrayColumns("x", 3, [16], seed: 1)
        checkErrors(model, [
            ("wrong shape", try arrayColumns("x", 3, [15], seed: 1)),
            ("wrong type", replacing(good, "x", .doubles([1, 2, 3]))),
            ("missing", replacing(good, "x", nil)),
        ])
    }

    // MARK: Trees and GLMs

    func testTreeEnsembleColumnsMatchRows() throws {
        let regressor = try treeRegressor(), classifier = try treeClassifier()
        XCTAssertTrue(regressor.compiled is any MLColumnarPredicting)
        for n in Self.rowCounts {
            try checkRows(regressor, treeColumns(n, seed: UInt64(n))) { ["y": try MLMultiArray(shape: [$0, 2], dataType: .float32)] }
            let out = try checkRows(classifier, treeColumns(n, seed: UInt64(n) + 50))
            guard case .int64s = out.column("label"), case .values = out.column("probs") else { return XCTFail("int64 labels are int64s") }
        }
        try checkViews(regressor, treeColumns(300, seed: 9))
        try checkViews(classifier, treeColumns(300, seed: 10))
        // Scalars held as values, and an int64 feature given as doubles, as their rows read them.
        let mixed = treeColumns(3, seed: 4)
        mixed.set("x0", .values([MLFeatureValue(double: 0.05), MLFeatureValue(int64: 1), MLFeatureValue(double: -2)]))
        mixed.set("n", .doubles([2.5, 3, 3.5]))
        try checkRows(regressor, mixed)
    }

    func testBadTreeColumnsFailAsTheirRowsDo() throws {
        let model = try treeClassifier()
        let good = treeColumns(3, seed: 1)
        checkErrors(model, [
            ("wrong type", replacing(good, "x1", .values((0..<3).map { MLFeatureValue(string: "\($0)") }))),
            ("array for a double", replacing(good, "x1", .arrays(try floats([3, 1], seed: 1)))),
            ("missing", replacing(good, "n", nil)),
            ("undefined", replacing(good, "n", .values(Array(repeating: MLFeatureValue(undefined: .int64), count: 3)))),
        ])
    }

    func testGLMColumnsMatchRows() throws {
        let regressor = try glmRegressor(), classifier = try glmClassifier()
        for n in Self.rowCounts {
            for type in [MLMultiArrayDataType.double, .float32] {
                try checkRows(regressor, try arrayColumns("x", n, [3], dataType: type, seed: UInt64(n) + 60)) {
                    ["y": try MLMultiArray(shape: [$0, 2], dataType: .float32)]
                }
                try checkRows(classifier, try arrayColumns("x", n, [3], dataType: type, seed: UInt64(n) + 70))
            }
        }
        try checkViews(classifier, try arrayColumns("x", 300, [3], dataType: .double, seed: 12))
        // A backing of the wrong size is refused, naming the output.
        var options = MLPredictionOptions()
        options.outputBackings = ["y": try MLMultiArray(shape: [5], dataType: .float32)]
        XCTAssertThrowsError(try regressor.predictions(fromColumns: try arrayColumns("x", 3, [3], seed: 1), options: options)) {
            XCTAssertEqual(($0 as? MLModelError)?.feature, "y")
        }
        let bad = try arrayColumns("x", 3, [4], dataType: .double, seed: 1)
        checkErrors(classifier, [("wrong shape", bad), ("missing", replacing(bad, "x", nil))])
    }

    // MARK: Feature vectorizer (a converted scikit-learn model's first stage)

    /// A featureVectorizer of f0 (double), n (int64), a (double array [2]) and s (an int64-keyed
    /// dictionary over 3 slots) to v[7]; with `classifier`, a pipeline of it and a GLM classifier.
    func vectorizer(classifier: Bool) throws -> MLModel {
        var fv = CoreML_Specification_Model()
        fv.specificationVersion = 1
        fv.description_p.input = [feature("f0") { $0.doubleType = .init() }, feature("n") { $0.int64Type = .init() },
                                  arrayDescription("a", [2], .double), feature("s") { $0.dictionaryType.int64KeyType = .init() }]
        fv.description_p.output = [arrayDescription("v", [7], .double)]
        fv.featureVectorizer.inputList = [("f0", 1), ("n", 1), ("a", 2), ("s", 3)].map {
            var c = CoreML_Specification_FeatureVectorizer.InputColumn(); c.inputColumn = $0.0; c.inputDimensions = UInt64($0.1); return c
        }
        guard classifier else { return try MLModel(specification: fv, name: "vectorizer") }
        var glm = CoreML_Specification_GLMClassifier()
        glm.weights = [[0.5, -0.25, 1, 0.75, -1, 0.5, 0.1], [-0.3, 0.2, 0.4, -0.6, 0.9, -0.2, 0.3]].map {
            var r = CoreML_Specification_GLMClassifier.DoubleArray(); r.value = $0; return r
        }
        glm.offset = [0.1, -0.1]
        glm.postEvaluationTransform = .logit
        glm.classEncoding = .referenceClass
        glm.int64ClassLabels.vector = [0, 1, 2]
        var second = CoreML_Specification_Model()
        second.specificationVersion = 1
        second.description_p.input = [arrayDescription("v", [7], .double)]
        second.description_p.output = [feature("label") { $0.int64Type = .init() }, feature("probs") { $0.dictionaryType.int64KeyType = .init() }]
        second.description_p.predictedFeatureName = "label"
        second.description_p.predictedProbabilitiesName = "probs"
        second.glmClassifier = glm
        var spec = CoreML_Specification_Model()
        spec.specificationVersion = 4
        spec.description_p.input = fv.description_p.input
        spec.description_p.output = second.description_p.output
        spec.description_p.predictedFeatureName = "label"
        spec.description_p.predictedProbabilitiesName = "probs"
        spec.pipelineClassifier.pipeline.models = [fv, second]
        return try MLModel(specification: spec, name: "vectorized")
    }

    func vectorizerColumns(_ n: Int, seed: UInt64, arrays: MLMultiArrayDataType = .double) throws -> MLFeatureColumns {
        let columns = MLFeatureColumns(count: n)
        columns.set("f0", .doubles(doubles(n, seed: seed)))
        columns.set("n", .int64s(doubles(n, seed: seed + 1, scale: 9).map { Int64($0) }))
        columns.set("a", .arrays(try floats([n, 2], dataType: arrays, seed: seed + 2)))
        columns.set("s", .values((0..<n).map { r in MLFeatureValue(dictionary: .int64Keyed([Int64(r % 2): Double(r) / 7, 2: 0.5])) }))
        return columns
    }

    func testFeatureVectorizerColumnsMatchRows() throws {
        let vectorizer = try self.vectorizer(classifier: false), pipeline = try self.vectorizer(classifier: true)
        XCTAssertTrue(vectorizer.compiled is any MLColumnarPredicting)
        for n in Self.rowCounts {
            try checkRows(vectorizer, try vectorizerColumns(n, seed: UInt64(n) + 100)) { ["v": try MLMultiArray(shape: [$0, 7], dataType: .float32)] }
            try checkRows(vectorizer, try vectorizerColumns(n, seed: UInt64(n) + 110, arrays: .float32))
            try checkRows(pipeline, try vectorizerColumns(n, seed: UInt64(n) + 120))
        }
        try checkViews(pipeline, try vectorizerColumns(30, seed: 130))
        // A dictionary key outside the slots fails as its row does.
        let bad = try vectorizerColumns(3, seed: 1)
        bad.set("s", .values(Array(repeating: MLFeatureValue(dictionary: .int64Keyed([5: 1])), count: 3)))
        checkErrors(vectorizer, [("key outside the slots", bad), ("missing", replacing(bad, "a", nil))])
    }

    // MARK: Kinds on the row path

    func testPipelineAndSVMColumnsMatchRows() throws {
        let pipe = try pipeline(), svm = try svm()
        XCTAssertFalse(svm.compiled is any MLColumnarPredicting, "the SVM is the row path's test")
        for n in Self.rowCounts {
            try checkRows(pipe, try arrayColumns("x", n, [3], dataType: .double, seed: UInt64(n) + 80)) {
                ["y": try MLMultiArray(shape: [$0, 2], dataType: .double)]
            }
            try checkRows(svm, try arrayColumns("x", n, [3], dataType: .double, seed: UInt64(n) + 90))
        }
        try checkViews(pipe, try arrayColumns("x", 30, [3], dataType: .double, seed: 13))
        try checkViews(svm, try arrayColumns("x", 30, [3], dataType: .float32, seed: 14))
        let bad = try arrayColumns("x", 3, [2], dataType: .double, seed: 1)
        checkErrors(pipe, [("wrong shape", bad), ("missing", replacing(bad, "x", nil))])
        checkErrors(svm, [("wrong shape", bad), ("wrong type", replacing(bad, "x", .doubles([1, 2, 3])))])
    }
}
