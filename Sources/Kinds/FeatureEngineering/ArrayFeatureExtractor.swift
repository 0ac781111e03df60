import CortadoCore
import CortadoSpec

/// `arrayFeatureExtractor` (ArrayFeatureExtractor.proto): picks elements of a multi-array
/// by their zero-based indices in `extractIndex` (repeats allowed).
///
/// - Indices count the input's elements in row-major order (inputs are vectors in
///   practice; a `[1, n]` array is the same vector).
/// - The declared output type decides the result: a double (exactly one index), an int64
///   (exactly one index; the element truncated toward zero, as Core ML casts, so it must
///   be finite and in range), or a multi-array of the picked elements in index order.
///   scikit-learn's one-hot conversion uses the int64 form to feed a `oneHotEncoder`.
/// - An index past the end is a load error when the input's shape is fixed, else a
///   prediction error naming the input.
public enum MLArrayFeatureExtractorKind: MLModelKind {
    public static let specTypes = ["arrayFeatureExtractor"]

    public static func compile(_ spec: CoreML_Specification_Model, context: MLCompileContext) throws -> any MLCompiledModel {
        try MLCompiledArrayFeatureExtractor(spec.arrayFeatureExtractor, description: context.description)
    }
}

final class MLCompiledArrayFeatureExtractor: MLCompiledModel {
    enum Output: Sendable {
        case double
        case int64
        case array(FeatureEngineeringArrayOutput)
    }

    static let kind = "arrayFeatureExtractor"

    let indices: [Int]
    /// One past the largest index: the fewest elements an input must have.
    let needed: Int
    let inputName: String
    let outputName: String
    let output: Output

    init(_ spec: CoreML_Specification_ArrayFeatureExtractor, description: MLModelDescription) throws {
        let kind = Self.kind
        guard !spec.extractIndex.isEmpty else {
            throw MLModelError(.invalidModel, "\(kind) has no extractIndex")
        }
        let input = try FeatureEngineeringInterface.singleInput(description, kind: kind, allowed: [.multiArray])
        inputName = input.name
        let limit = FeatureEngineeringInterface.fixedCount(input)
        var indices: [Int] = []
        for (i, index) in spec.extractIndex.enumerated() {
            guard index < UInt64(Int32.max) else {
                throw MLModelError(.invalidModel, "\(kind) extractIndex[\(i)] = \(index) is out of range")
            }
            if let n = limit, Int(index) >= n {
                throw MLModelError(.invalidModel, feature: input.name,
                                   "\(kind) extractIndex[\(i)] = \(index) is past the end of the input, which has \(n) elements")
            }
            indices.append(Int(index))
        }
        self.indices = indices
        needed = indices.max()! + 1

        let out = try FeatureEngineeringInterface.singleOutput(description, kind: kind, allowed: [.double, .int64, .multiArray])
        outputName = out.name
        switch out.type {
        case .double, .int64:
            guard indices.count == 1 else {
                throw MLModelError(.invalidModel, feature: out.name,
                                   "\(kind) output is a single \(out.type) but extractIndex lists \(indices.count) indices (declare the output a multiArray of \(indices.count))")
            }
            output = out.type == .double ? .double : .int64
        default:
            let array = FeatureEngineeringArrayOutput(out)
            try array.check(count: indices.count, kind: kind, what: "one per extractIndex")
            output = .array(array)
        }
    }

    var summary: [String] {
        ["Array feature extractor: indices \(FeatureEngineeringInterface.preview(indices) { String($0) })"]
    }

    func prediction(from input: MLFeatureProvider, options: MLPredictionOptions) throws -> MLFeatureProvider {
        let value = try FeatureEngineeringInterface.value(input, inputName)
        let array = try FeatureEngineeringArrayInput.array(value, feature: inputName)
        guard array.count >= needed else {
            throw MLModelError.featureType(inputName, "has \(array.count) elements but the extractor reads index \(needed - 1)")
        }
        let result: MLFeatureValue
        switch output {
        case .double:
            result = MLFeatureValue(double: array.double(at: indices[0]))
        case .int64:
            let x = array.double(at: indices[0])
            guard let i = Int64(exactly: x.rounded(.towardZero)) else {
                throw MLModelError.featureType(inputName, "element \(indices[0]) is \(x), which the int64 output '\(outputName)' cannot hold")
            }
            result = MLFeatureValue(int64: i)
        case .array(let out):
            result = try out.withValues(count: indices.count, options: options) { y in
                for (j, i) in indices.enumerated() { y[j] = array.double(at: i) }
            }
        }
        return MLDictionaryFeatureProvider(dictionary: [outputName: result])
    }
}
