import CortadoCore
import CortadoSpec

/// `treeEnsembleRegressor`: per prediction dimension, the base value plus the value of the
/// leaf each tree sends the row to, then the post-evaluation transform.
///
/// The output is a double when the model has one dimension and declares a double output,
/// or a multi-array of the dimensions when the output is a multi-array. With
/// Classification_SoftMaxWithZeroClassReference the dimensions are the probabilities of the
/// classes after the implicit reference class (softmax over `(0, v…)`, the reference dropped).
public enum TreeEnsembleRegressorKind: MLModelKind {
    public static let specTypes = ["treeEnsembleRegressor"]

    public static func compile(_ spec: CoreML_Specification_Model, context: MLCompileContext) throws -> any MLCompiledModel {
        try TreeEnsembleRegressorModel(spec.treeEnsembleRegressor, description: context.description)
    }
}

final class TreeEnsembleRegressorModel: MLCompiledModel, MLDenseFeaturePredicting, MLColumnarPredicting {
    enum Output: Sendable {
        case double
        case array(shape: [Int], dataType: MLMultiArrayDataType)
    }

    let engine: TreeEnsembleEngine
    let outputName: String
    let output: Output

    init(_ spec: CoreML_Specification_TreeEnsembleRegressor, description: MLModelDescription) throws {
        let kind = "treeEnsembleRegressor"
        engine = try TreeEnsembleEngine(spec.treeEnsemble, hasParameters: spec.hasTreeEnsemble,
                                        transform: spec.postEvaluationTransform, description: description, kind: kind)
        let dims = engine.dimensions
        guard let name = description.predictedFeatureName ?? description.outputs.first?.name,
              let out = description.output(named: name) else {
            throw MLModelError(.invalidModel, "\(kind) declares no output" +
                (description.predictedFeatureName.map { " named '\($0)' (its predictedFeatureName)" } ?? ""))
        }
        outputName = name
        switch out.type {
        case .double:
            guard dims == 1 else {
                throw MLModelError(.invalidModel, feature: name, "\(kind) has \(dims) prediction dimensions but its output is a single double; declare the output a multiArray of \(dims)")
            }
            output = .double
        case .multiArray:
            let declared = out.multiArrayConstraint?.shape ?? []
            if !declared.isEmpty && declared.reduce(1, *) != dims {
                throw MLModelError(.invalidModel, feature: name, "\(kind) output has shape \(declared) but the ensemble has \(dims) prediction dimension\(dims == 1 ? "" : "s")")
            }
            output = .array(shape: declared.isEmpty ? [dims] : declared, dataType: out.multiArrayConstraint?.dataType ?? .double)
        default:
            throw MLModelError(.invalidModel, feature: name, "\(kind) output is \(out.type) (expected double or multiArray)")
        }
    }

    var inputWidth: Int { engine.inputWidth }
    var outputWidth: Int { engine.dimensions }

    var summary: [String] { ["Tree ensemble regressor"] + engine.summary }

    func predict(rows: UnsafePointer<Double>, count: Int, into out: UnsafeMutablePointer<Double>) {
        let d = engine.dimensions
        engine.evaluate(rows: rows, count: count, into: out, outStride: d)
        let transform = engine.transform
        if transform != .none {
            for i in 0..<count { transform.apply(out + i * d, count: d) }
        }
    }

    private func features(_ y: UnsafePointer<Double>, options: MLPredictionOptions, fresh: Bool) throws -> MLFeatureProvider {
        switch output {
        case .double:
            return MLDictionaryFeatureProvider(dictionary: [outputName: MLFeatureValue(double: y[0])])
        case .array(let shape, let dataType):
            let array = fresh ? try MLMultiArray(shape: shape, dataType: dataType)
                : try options.outputArray(named: outputName, shape: shape, dataType: dataType)
            array.write(contiguous: UnsafeBufferPointer(start: y, count: engine.dimensions))
            return MLDictionaryFeatureProvider(dictionary: [outputName: MLFeatureValue(multiArray: array)])
        }
    }

    var denseInput: MLInputVectorizer? { engine.vectorizer }

    func outputFeatures(dense row: UnsafePointer<Double>) throws -> MLFeatureProvider {
        try features(row, options: MLPredictionOptions(), fresh: true)
    }

    func outputColumns(dense rows: UnsafePointer<Double>, count: Int, options: MLPredictionOptions) throws -> MLFeatureColumns {
        var array: (shape: [Int], dataType: MLMultiArrayDataType)?
        if case .array(let shape, let dataType) = output { array = (shape, dataType) }
        return try .regression(rows, count: count, width: outputWidth, name: outputName, array: array, options: options)
    }

    func prediction(from input: MLFeatureProvider, options: MLPredictionOptions) throws -> MLFeatureProvider {
        try withUnsafeTemporaryAllocation(of: Double.self, capacity: inputWidth + outputWidth) { buffer in
            let x = buffer.baseAddress!
            let y = x + inputWidth
            try engine.vectorizer.gather(input, into: x)
            predict(rows: x, count: 1, into: y)
            return try features(y, options: options, fresh: false)
        }
    }

    var runsBatchesAsOne: Bool { true }

    /// The batch runs as one matrix through the blocked evaluator. Output backings are not
    /// used here: one backing cannot hold every row.
    func predictions(from batch: MLBatchProvider, options: MLPredictionOptions) throws -> [MLFeatureProvider] {
        let n = batch.count
        let d = outputWidth
        return try engine.withMatrix(of: batch) { x in
            try withUnsafeTemporaryAllocation(of: Double.self, capacity: max(n * d, 1)) { buffer in
                let y = buffer.baseAddress!
                predict(rows: x, count: n, into: y)
                return try (0..<n).map { try features(y + $0 * d, options: options, fresh: true) }
            }
        }
    }
}
