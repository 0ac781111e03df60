import CortadoCore
import CortadoSpec

/// `dictVectorizer` (DictVectorizer.proto): a dictionary becomes a vector laid out by the
/// model's key list (`stringToIndex` or `int64ToIndex`): the value of the key at position
/// i goes to element i; keys the dictionary lacks give 0.
///
/// - The output is a multi-array of one element per key (dense), or an int64-keyed
///   dictionary `{position: value}` holding the present keys (sparse). Core ML's
///   validator asks for the dictionary form, which scikit-learn's converter writes and
///   follows with a `featureVectorizer`; the dense form is accepted too.
/// - Keys not in the list are ignored, as scikit-learn's `DictVectorizer.transform`
///   ignores them. (The format's comment says every key must be in the list; dropping
///   the others gives the same answer for every input that obeys it.)
/// - A dictionary whose keys are of the other type is a prediction error.
/// - Should a key be listed twice, its first position is used.
public enum MLDictVectorizerKind: MLModelKind {
    public static let specTypes = ["dictVectorizer"]

    public static func compile(_ spec: CoreML_Specification_Model, context: MLCompileContext) throws -> any MLCompiledModel {
        try MLCompiledDictVectorizer(spec.dictVectorizer, description: context.description)
    }
}

final class MLCompiledDictVectorizer: MLCompiledModel {
    enum Keys: Sendable {
        case strings([String: Int])
        case int64s([Int64: Int])
    }

    enum Output: Sendable {
        case dense(FeatureEngineeringArrayOutput)
        case sparse
    }

    static let kind = "dictVectorizer"

    let keys: Keys
    let count: Int
    let inputName: String
    let outputName: String
    let output: Output

    init(_ spec: CoreML_Specification_DictVectorizer, description: MLModelDescription) throws {
        let kind = Self.kind
        let keyType: MLFeatureType
        switch spec.map {
        case .stringToIndex(let v)?:
            var table = [String: Int](minimumCapacity: v.vector.count)
            for (i, k) in v.vector.enumerated() where table[k] == nil { table[k] = i }
            keys = .strings(table)
            count = v.vector.count
            keyType = .string
        case .int64ToIndex(let v)?:
            var table = [Int64: Int](minimumCapacity: v.vector.count)
            for (i, k) in v.vector.enumerated() where table[k] == nil { table[k] = i }
            keys = .int64s(table)
            count = v.vector.count
            keyType = .int64
        case nil:
            throw MLModelError(.invalidModel, "\(kind) has no key list (set stringToIndex or int64ToIndex)")
        }
        guard count > 0 else { throw MLModelError(.invalidModel, "\(kind) has an empty key list") }

        let input = try FeatureEngineeringInterface.singleInput(description, kind: kind, allowed: [.dictionary])
        if let k = input.dictionaryConstraint?.keyType, k != keyType {
            throw MLModelError(.invalidModel, feature: input.name,
                               "\(kind) input is a dictionary with \(k) keys but the key list holds \(keyType == .string ? "strings" : "int64s")")
        }
        inputName = input.name

        let out = try FeatureEngineeringInterface.singleOutput(description, kind: kind, allowed: [.multiArray, .dictionary])
        outputName = out.name
        if out.type == .dictionary {
            guard out.dictionaryConstraint?.keyType != .string else {
                throw MLModelError(.invalidModel, feature: out.name, "\(kind) dictionary output must have int64 keys (positions), not string keys")
            }
            output = .sparse
        } else {
            let array = FeatureEngineeringArrayOutput(out)
            try array.check(count: count, kind: kind, what: "one per key")
            output = .dense(array)
        }
    }

    var summary: [String] {
        let what: String
        switch keys {
        case .strings: what = "string"
        case .int64s: what = "int64"
        }
        let form: String
        switch output {
        case .dense: form = "dense array"
        case .sparse: form = "sparse dictionary"
        }
        return ["Dict vectorizer: \(count) \(what) keys, \(form) output"]
    }

    /// Calls `place(position, value)` for every known key of the dictionary.
    @inline(__always)
    func forEachKnown(_ d: MLFeatureDictionary, _ place: (Int, Double) -> Void) throws {
        switch (keys, d) {
        case (.strings(let table), .stringKeyed(let d)):
            for (k, v) in d { if let i = table[k] { place(i, v) } }
        case (.int64s(let table), .int64Keyed(let d)):
            for (k, v) in d { if let i = table[k] { place(i, v) } }
        case (_, _) where d.count == 0:
            break
        case (.strings, .int64Keyed):
            throw MLModelError.featureType(inputName, "dictionary keys are int64, expected string")
        case (.int64s, .stringKeyed):
            throw MLModelError.featureType(inputName, "dictionary keys are string, expected int64")
        }
    }

    func prediction(from input: MLFeatureProvider, options: MLPredictionOptions) throws -> MLFeatureProvider {
        let value = try FeatureEngineeringInterface.value(input, inputName)
        guard let d = value.dictionary else {
            throw MLModelError.featureType(inputName, "expected a dictionary, got \(value.type)")
        }
        let result: MLFeatureValue
        switch output {
        case .sparse:
            var sparse = [Int64: Double](minimumCapacity: d.count)
            try forEachKnown(d) { sparse[Int64($0)] = $1 }
            result = MLFeatureValue(dictionary: .int64Keyed(sparse))
        case .dense(let array):
            result = try array.withValues(count: count, options: options) { y in
                y.initialize(repeating: 0, count: count)
                try forEachKnown(d) { y[$0] = $1 }
            }
        }
        return MLDictionaryFeatureProvider(dictionary: [outputName: result])
    }
}
