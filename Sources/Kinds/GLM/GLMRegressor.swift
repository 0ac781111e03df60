import CortadoCore
import CortadoSpec

/// `glmRegressor`: `y_j = f(offset_j + Σ_i w_ji x_i)` with `f` the identity, the logistic
/// sigmoid (Logit) or the normal CDF (Probit).
///
/// The output is a double when the model has one target and declares a double output, or a
/// multi-array of the targets when the output is declared a multi-array (always so for
/// several targets).
public enum GLMRegressorKind: MLModelKind {
    public static let specTypes = ["glmRegressor"]

    public static func compile(_ spec: CoreML_Specification_Model, context: MLCompileContext) throws -> any MLCompiledModel {
        try GLMRegressorModel(spec.glmRegressor, description: context.description)
    }
}

final class GLMRegressorModel: MLCompiledModel, MLDenseFeaturePredicting, MLColumnarPredicting {
    enum Output: Sendable {
        case double
        case array(shape: [Int], dataType: MLMultiArrayDataType)
    }

    let map: GLMLinearMap
    let link: GLMLink
    let vectorizer: MLInputVectorizer
    let outputName: String
    let output: Output

    init(_ glm: CoreML_Specification_GLMRegressor, description: MLModelDescription) throws {
        map = try GLMLinearMap(weights: glm.weights.map(\.value), offsets: glm.offset, kind: "glmRegressor")
        switch glm.postEvaluationTransform {
        case .noTransform: link = .identity
        case .logit: link = .logit
        case .probit: link = .probit
        case .UNRECOGNIZED(let raw):
            throw MLModelError(.invalidModel, "glmRegressor postEvaluationTransform \(raw) is unknown (expected NoTransform, Logit or Probit)")
        }
        vectorizer = try map.vectorizer(for: description.inputs, kind: "glmRegressor")

        guard let name = description.predictedFeatureName ?? description.outputs.first?.name,
              let out = description.output(named: name) else {
            throw MLModelError(.invalidModel, "glmRegressor declares no output" +
                (description.predictedFeatureName.map { " named '\($0)' (its predictedFeatureName)" } ?? ""))
        }
        outputName = name
        switch out.type {
        case .double:
            guard map.rows == 1 else {
                throw MLModelError(.invalidModel, feature: name,
                                   "glmRegressor has \(map.rows) targets (weight rows) but its output is a single double; declare the output a multiArray of \(map.rows)")
            }
            output = .double
        case .multiArray:
            let declared = out.multiArrayConstraint?.shape ?? []
            let shape = !declared.isEmpty && declared.reduce(1, *) == map.rows ? declared : [map.rows]
            output = .array(shape: shape, dataType: out.multiArrayConstraint?.dataType ?? .double)
        default:
            throw MLModelError(.invalidModel, feature: name, "glmRegressor output is \(out.type) (expected double or multiArray)")
        }
    }

    var inputWidth: Int { map.width }
    var outputWidth: Int { map.rows }

    var summary: [String] {
        ["GLM regressor: \(map.rows) target\(map.rows == 1 ? "" : "s"), \(map.width) input values, transform \(link.rawValue)"]
    }

    /// Scores and transform for one row.
    @inline(__always)
    func predict(_ x: UnsafePointer<Double>, into out: UnsafeMutablePointer<Double>) {
        map.evaluate(x, into: out)
        if link != .identity {
            for r in 0..<map.rows { out[r] = link.apply(out[r]) }
        }
    }

    func prediction(from input: MLFeatureProvider, options: MLPredictionOptions) throws -> MLFeatureProvider {
        try withUnsafeTemporaryAllocation(of: Double.self, capacity: map.width + map.rows) { buffer in
            let x = buffer.baseAddress!
            let y = x + map.width
            try vectorizer.gather(input, into: x)
            predict(x, into: y)
            return try features(y, options: options, fresh: false)
        }
    }

    private func features(_ y: UnsafePointer<Double>, options: MLPredictionOptions, fresh: Bool) throws -> MLFeatureProvider {
        switch output {
        case .double:
            return MLDictionaryFeatureProvider(dictionary: [outputName: MLFeatureValue(double: y[0])])
        case .array(let shape, let dataType):
            let array = fresh ? try MLMultiArray(shape: shape, dataType: dataType)
                : try options.outputArray(named: outputName, shape: shape, dataType: dataType)
            array.write(contiguous: UnsafeBufferPointer(start: y, count: map.rows))
            return MLDictionaryFeatureProvider(dictionary: [outputName: MLFeatureValue(multiArray: array)])
        }
    }

    var denseInput: MLInputVectorizer? { vectorizer }

    func outputFeatures(dense row: UnsafePointer<Double>) throws -> MLFeatureProvider {
        try features(row, options: MLPredictionOptions(), fresh: true)
    }

    func outputColumns(dense rows: UnsafePointer<Double>, count: Int, options: MLPredictionOptions) throws -> MLFeatureColumns {
        var array: (shape: [Int], dataType: MLMultiArrayDataType)?
        if case .array(let shape, let dataType) = output { array = (shape, dataType) }
        return try .regression(rows, count: count, width: outputWidth, name: outputName, array: array, options: options)
    }

    func predict(rows: UnsafePointer<Double>, count: Int, into output: UnsafeMutablePointer<Double>) {
        for i in 0..<count {
            predict(rows + i * map.width, into: output + i * map.rows)
        }
    }
}
