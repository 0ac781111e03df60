import CortadoCore
import CortadoSpec

/// `supportVectorRegressor`: LIBSVM's ε-SVR / ν-SVR prediction, `f(x) = Σ_s α_s K(s, x) - rho`
/// (the spec stores LIBSVM's `sv_coef` and `rho`; coremltools writes scikit-learn's
/// `-intercept_` as rho). The output is a double, or a one-element multi-array if declared so.
public enum SVMRegressorKind: MLModelKind {
    public static let specTypes = ["supportVectorRegressor"]

    public static func compile(_ spec: CoreML_Specification_Model, context: MLCompileContext) throws -> any MLCompiledModel {
        try SVMRegressorModel(spec.supportVectorRegressor, description: context.description)
    }
}

final class SVMRegressorModel: MLCompiledModel, MLDenseBatchPredicting {
    static let kind = "supportVectorRegressor"

    enum Output: Sendable {
        case double
        case array(shape: [Int], dataType: MLMultiArrayDataType)
    }

    let kernel: SVMKernel
    let vectors: SVMSupportVectors
    let input: SVMInput
    let alpha: [Double]
    let rho: Double
    /// Linear kernel: `Σ α_s s` folded at compile (`foldWidth` values).
    let linearWeights: [Double]?
    let foldWidth: Int
    let outputName: String
    let output: Output

    init(_ svm: CoreML_Specification_SupportVectorRegressor, description: MLModelDescription) throws {
        let kind = Self.kind
        kernel = try SVMKernel(svm.kernel, kind: kind)
        switch svm.supportVectors {
        case .denseSupportVectors(let d)?: vectors = try SVMSupportVectors(dense: d, kind: kind)
        case .sparseSupportVectors(let s)?: vectors = try SVMSupportVectors(sparse: s, kind: kind)
        case nil: vectors = try SVMSupportVectors(dense: nil, sparse: nil, kind: kind)
        }
        let alpha = svm.coefficients.alpha
        guard alpha.count == vectors.count else {
            throw MLModelError(.invalidModel, "\(kind) has \(alpha.count) coefficients but \(vectors.count) support vectors (expected one coefficient per support vector)")
        }
        if let i = alpha.firstIndex(where: { !$0.isFinite }) {
            throw MLModelError(.invalidModel, "\(kind) coefficient \(i) is \(alpha[i]) (coefficients must be finite)")
        }
        guard svm.rho.isFinite else {
            throw MLModelError(.invalidModel, "\(kind) rho is \(svm.rho) (expected a finite number)")
        }
        self.alpha = alpha
        rho = svm.rho
        input = try SVMInput(inputs: description.inputs, vectors: vectors, kind: kind)

        guard let name = description.predictedFeatureName ?? description.outputs.first?.name,
              let out = description.output(named: name) else {
            throw MLModelError(.invalidModel, "\(kind) declares no output" +
                (description.predictedFeatureName.map { " named '\($0)' (its predictedFeatureName)" } ?? ""))
        }
        outputName = name
        switch out.type {
        case .double:
            output = .double
        case .multiArray:
            let declared = out.multiArrayConstraint?.shape ?? []
            output = .array(shape: declared.reduce(1, *) == 1 && !declared.isEmpty ? declared : [1],
                            dataType: out.multiArrayConstraint?.dataType ?? .double)
        default:
            throw MLModelError(.invalidModel, feature: name, "\(kind) output is \(out.type) (expected double)")
        }

        let width = vectors.dimension ?? 0
        foldWidth = width
        if kernel.isLinear && width > 0 && width <= vectors.storedValues {
            linearWeights = vectors.fold(dimension: width) { alpha[$0] }
        } else {
            linearWeights = nil
        }
    }

    var inputWidth: Int { input.width }
    var outputWidth: Int { 1 }

    var summary: [String] {
        [
            "SVM regressor: \(vectors.count) support vectors (\(vectors.isSparse ? "sparse" : "dense"), \(vectors.dimension ?? 0) features), kernel \(kernel)\(linearWeights != nil ? " folded into one weight vector" : "")",
            "input: \(input.summary)",
        ]
    }

    /// `Σ α K(s, x) - rho`. `kvalue` holds `vectors.count` doubles.
    @inline(__always)
    func value(_ x: UnsafePointer<Double>, xNorm: Double, kvalue: UnsafeMutablePointer<Double>) -> Double {
        var sum = 0.0
        if let linearWeights {
            linearWeights.withUnsafeBufferPointer { w in
                sum = SVMSupportVectors.dot(w.baseAddress!, x, foldWidth)
            }
        } else {
            kernel.evaluate(vectors, x: x, xNorm: xNorm, into: kvalue)
            alpha.withUnsafeBufferPointer { a in
                for s in 0..<vectors.count { sum += a[s] * kvalue[s] }
            }
        }
        return sum - rho
    }

    func prediction(from provider: MLFeatureProvider, options: MLPredictionOptions) throws -> MLFeatureProvider {
        let y = try input.withVector(provider) { x, xNorm in
            withUnsafeTemporaryAllocation(of: Double.self, capacity: max(vectors.count, 1)) { kvalue in
                value(x, xNorm: xNorm, kvalue: kvalue.baseAddress!)
            }
        }
        switch output {
        case .double:
            return MLDictionaryFeatureProvider(dictionary: [outputName: MLFeatureValue(double: y)])
        case .array(let shape, let dataType):
            let array = try options.outputArray(named: outputName, shape: shape, dataType: dataType)
            array.setDouble(y, at: 0)
            return MLDictionaryFeatureProvider(dictionary: [outputName: MLFeatureValue(multiArray: array)])
        }
    }

    func predict(rows: UnsafePointer<Double>, count: Int, into output: UnsafeMutablePointer<Double>) {
        let width = input.width
        withUnsafeTemporaryAllocation(of: Double.self, capacity: max(vectors.count, 1)) { kvalue in
            for r in 0..<count {
                let x = rows + r * width
                output[r] = value(x, xNorm: SVMInput.squaredNorm(x, count: width), kvalue: kvalue.baseAddress!)
            }
        }
    }
}
