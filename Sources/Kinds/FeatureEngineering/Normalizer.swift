import CortadoCore
import CortadoSpec
import Foundation

/// `normalizer` (Normalizer.proto): divides a multi-array by one of its norms.
///
/// - `L1`: Σ|x_i|. `L2`: √(Σx_i²). `LMax`: max |x_i|. The format writes LMax as
///   "max(x_i)"; scikit-learn's `Normalizer(norm='max')`, which converts to LMax, divides
///   by the largest absolute value, and so does Cortado (the two differ only for arrays
///   whose largest magnitude is negative).
/// - A zero vector has norm 0 and is left as it is (all zeros), as scikit-learn does.
/// - Input and output are multi-arrays (Core ML's rule); the output has the input's length.
public enum MLNormalizerKind: MLModelKind {
    public static let specTypes = ["normalizer"]

    public static func compile(_ spec: CoreML_Specification_Model, context: MLCompileContext) throws -> any MLCompiledModel {
        try MLCompiledNormalizer(spec.normalizer, description: context.description)
    }
}

final class MLCompiledNormalizer: MLCompiledModel {
    enum Norm: String, Sendable {
        case lMax = "LMax"
        case l1 = "L1"
        case l2 = "L2"
    }

    static let kind = "normalizer"

    let norm: Norm
    let inputName: String
    let output: FeatureEngineeringArrayOutput

    init(_ spec: CoreML_Specification_Normalizer, description: MLModelDescription) throws {
        let kind = Self.kind
        switch spec.normType {
        case .lmax: norm = .lMax
        case .l1: norm = .l1
        case .l2: norm = .l2
        case .UNRECOGNIZED(let raw):
            throw MLModelError(.invalidModel, "\(kind) normType \(raw) is unknown (expected LMax, L1 or L2)")
        }
        let input = try FeatureEngineeringInterface.singleInput(description, kind: kind, allowed: [.multiArray])
        let out = try FeatureEngineeringInterface.singleOutput(description, kind: kind, allowed: [.multiArray])
        inputName = input.name
        output = FeatureEngineeringArrayOutput(out)
        if let n = FeatureEngineeringInterface.fixedCount(input) {
            try output.check(count: n, kind: kind, what: "one per input element")
        }
    }

    var summary: [String] { ["Normalizer: \(norm.rawValue) norm"] }

    @inline(__always)
    func normalize(_ x: UnsafeMutablePointer<Double>, count: Int) {
        var n = 0.0
        switch norm {
        case .lMax: for i in 0..<count { n = max(n, abs(x[i])) }
        case .l1: for i in 0..<count { n += abs(x[i]) }
        case .l2:
            for i in 0..<count { n += x[i] * x[i] }
            n = n.squareRoot()
        }
        // max() drops NaN; keep NaN inputs visible in the result.
        if norm == .lMax, (0..<count).contains(where: { x[$0].isNaN }) { n = .nan }
        guard n != 0 else { return }
        // Divide (not multiply by 1/n), as scikit-learn does, to match it to the last bit.
        for i in 0..<count { x[i] /= n }
    }

    func prediction(from input: MLFeatureProvider, options: MLPredictionOptions) throws -> MLFeatureProvider {
        let value = try FeatureEngineeringInterface.value(input, inputName)
        let array = try FeatureEngineeringArrayInput.array(value, feature: inputName)
        let result = try FeatureEngineeringArrayInput.withDoubles(array) { x, n in
            normalize(x, count: n)
            return try output.value(UnsafeBufferPointer(start: x, count: n), like: array.shape, options: options)
        }
        return MLDictionaryFeatureProvider(dictionary: [output.name: result])
    }
}
