import CortadoCore
import CortadoSpec

/// `oneHotEncoder` (OneHotEncoder.proto): one category, int64 or string, becomes a
/// one-hot vector over the model's category list.
///
/// - The input is int64 (with `int64Categories`) or string (with `stringCategories`),
///   as Core ML's validator requires; an input declared double is accepted with
///   `int64Categories`. A double holding an integer is read as that int64 (Core ML
///   converts between the scalar types); any other double matches no category.
/// - `outputSparse` false: the output is a multi-array of one element per category, 1 at
///   the category's position and 0 elsewhere. `outputSparse` true: the output is an
///   int64-keyed dictionary `{position: 1.0}`. The declared output type must agree with
///   the flag, as Core ML's validator requires.
/// - An unknown category is a prediction error naming the input and the value
///   (`ErrorOnUnknown`), or gives all zeros / an empty dictionary (`IgnoreUnknown`).
/// - Should a category be listed twice, its first position is the hot one.
///
/// scikit-learn's converter emits this inside a pipeline, once per column: an
/// `arrayFeatureExtractor` picks the column as int64, this encoder writes a sparse
/// dictionary, and a `featureVectorizer` expands the dictionaries into one array. That
/// converter writes the positions 0..n-1 as `int64Categories`, not the fitted categories.
public enum MLOneHotEncoderKind: MLModelKind {
    public static let specTypes = ["oneHotEncoder"]

    public static func compile(_ spec: CoreML_Specification_Model, context: MLCompileContext) throws -> any MLCompiledModel {
        try MLCompiledOneHotEncoder(spec.oneHotEncoder, description: context.description)
    }
}

final class MLCompiledOneHotEncoder: MLCompiledModel {
    enum Categories: Sendable {
        case int64s([Int64: Int], list: [Int64])
        case strings([String: Int], list: [String])
    }

    enum Output: Sendable {
        case dense(FeatureEngineeringArrayOutput)
        case sparse
    }

    static let kind = "oneHotEncoder"

    let categories: Categories
    let count: Int
    let ignoresUnknown: Bool
    let inputName: String
    let outputName: String
    let output: Output

    init(_ spec: CoreML_Specification_OneHotEncoder, description: MLModelDescription) throws {
        let kind = Self.kind
        let expectedInput: MLFeatureType
        switch spec.categoryType {
        case .int64Categories(let v)?:
            var table = [Int64: Int](minimumCapacity: v.vector.count)
            for (i, c) in v.vector.enumerated() where table[c] == nil { table[c] = i }
            categories = .int64s(table, list: v.vector)
            count = v.vector.count
            expectedInput = .int64
        case .stringCategories(let v)?:
            var table = [String: Int](minimumCapacity: v.vector.count)
            for (i, c) in v.vector.enumerated() where table[c] == nil { table[c] = i }
            categories = .strings(table, list: v.vector)
            count = v.vector.count
            expectedInput = .string
        case nil:
            throw MLModelError(.invalidModel, "\(kind) has no categories (set stringCategories or int64Categories)")
        }
        guard count > 0 else {
            throw MLModelError(.invalidModel, "\(kind) has an empty category list")
        }
        switch spec.handleUnknown {
        case .errorOnUnknown: ignoresUnknown = false
        case .ignoreUnknown: ignoresUnknown = true
        case .UNRECOGNIZED(let raw):
            throw MLModelError(.invalidModel, "\(kind) handleUnknown \(raw) is unknown (expected ErrorOnUnknown or IgnoreUnknown)")
        }

        let input = try FeatureEngineeringInterface.singleInput(description, kind: kind, allowed: [.int64, .double, .string])
        let inputOK = expectedInput == .string ? input.type == .string : input.type != .string
        guard inputOK else {
            throw MLModelError(.invalidModel, feature: input.name,
                               "\(kind) input is \(input.typeSummary) but its categories are \(expectedInput == .string ? "strings" : "int64")")
        }
        inputName = input.name

        let out = try FeatureEngineeringInterface.singleOutput(description, kind: kind, allowed: [.multiArray, .dictionary])
        outputName = out.name
        if spec.outputSparse {
            guard out.type == .dictionary else {
                throw MLModelError(.invalidModel, feature: out.name,
                                   "\(kind) has outputSparse set, so its output must be a dictionary with int64 keys, not \(out.typeSummary)")
            }
            guard out.dictionaryConstraint?.keyType != .string else {
                throw MLModelError(.invalidModel, feature: out.name,
                                   "\(kind) sparse output must have int64 keys (category positions), not string keys")
            }
            output = .sparse
        } else {
            guard out.type == .multiArray else {
                throw MLModelError(.invalidModel, feature: out.name,
                                   "\(kind) has outputSparse unset, so its output must be a multiArray of \(count), not \(out.typeSummary)")
            }
            let array = FeatureEngineeringArrayOutput(out)
            try array.check(count: count, kind: kind, what: "one per category")
            output = .dense(array)
        }
    }

    var summary: [String] {
        let what: String
        switch categories {
        case .int64s: what = "int64"
        case .strings: what = "string"
        }
        let form: String
        switch output {
        case .dense: form = "dense array"
        case .sparse: form = "sparse dictionary"
        }
        return ["One-hot encoder: \(count) \(what) categories, \(form) output, unknown categories \(ignoresUnknown ? "ignored" : "are errors")"]
    }

    /// The category's position, nil when unknown.
    @inline(__always)
    func position(of value: MLFeatureValue) throws -> Int? {
        switch categories {
        case .int64s(let table, _):
            switch value.storage {
            case .int64(let i): return table[i]
            case .double(let d): return Int64(exactly: d).flatMap { table[$0] }
            default: throw MLModelError.featureType(inputName, "expected an int64 category, got \(value.type)")
            }
        case .strings(let table, _):
            guard case .string(let s) = value.storage else {
                throw MLModelError.featureType(inputName, "expected a string category, got \(value.type)")
            }
            return table[s]
        }
    }

    func prediction(from input: MLFeatureProvider, options: MLPredictionOptions) throws -> MLFeatureProvider {
        let value = try FeatureEngineeringInterface.value(input, inputName)
        let hot = try position(of: value)
        if hot == nil && !ignoresUnknown {
            let known: String
            switch categories {
            case .int64s(_, let list): known = FeatureEngineeringInterface.preview(list) { String($0) }
            case .strings(_, let list): known = FeatureEngineeringInterface.preview(list) { "'\($0)'" }
            }
            throw MLModelError.featureType(inputName,
                "unknown category \(FeatureEngineeringInterface.show(value)) (the one-hot encoder knows \(known); handleUnknown is ErrorOnUnknown)")
        }
        let result: MLFeatureValue
        switch output {
        case .sparse:
            result = MLFeatureValue(dictionary: .int64Keyed(hot.map { [Int64($0): 1.0] } ?? [:]))
        case .dense(let array):
            result = try array.withValues(count: count, options: options) { out in
                out.initialize(repeating: 0, count: count)
                if let hot { out[hot] = 1 }
            }
        }
        return MLDictionaryFeatureProvider(dictionary: [outputName: result])
    }
}
