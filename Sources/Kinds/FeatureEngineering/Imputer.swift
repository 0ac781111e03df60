import CortadoCore
import CortadoSpec

/// `imputer` (Imputer.proto): replaces missing values with an imputed value.
///
/// A value is missing when an optional input is absent, or when it equals the replace
/// value. Which replace value applies, and what takes its place:
///
/// | imputed value | input / output | replace value (default) |
/// |---|---|---|
/// | `imputedDoubleValue` | double, or multiArray element-wise | `replaceDoubleValue` (NaN) |
/// | `imputedInt64Value` | int64 | `replaceInt64Value` (none: only an absent input) |
/// | `imputedStringValue` | string | `replaceStringValue` (none: only an absent input) |
/// | `imputedDoubleArray` | multiArray, element i from element i | `replaceDoubleValue` (NaN) |
/// | `imputedInt64Array` | multiArray, element i from element i | `replaceInt64Value` (NaN) |
/// | `imputed…Dictionary` | dictionary: the whole dictionary when absent | none allowed |
///
/// A NaN replace value matches NaN elements. Input and output have the same type, and an
/// imputed array has as many elements as the input (Core ML's validator rules); both are
/// checked at load time. scikit-learn's `SimpleImputer` converts to `imputedDoubleArray`
/// (the fitted statistics) with `replaceDoubleValue` = its `missing_values`.
public enum MLImputerKind: MLModelKind {
    public static let specTypes = ["imputer"]

    public static func compile(_ spec: CoreML_Specification_Model, context: MLCompileContext) throws -> any MLCompiledModel {
        try MLCompiledImputer(spec.imputer, description: context.description)
    }
}

final class MLCompiledImputer: MLCompiledModel {
    enum Plan: Sendable {
        case double(imputed: Double, replace: Double)
        case int64(imputed: Int64, replace: Int64?)
        case string(imputed: String, replace: String?)
        /// Element-wise over an array; `imputed` has one value per element, or one for all.
        case array(imputed: [Double], replace: Double)
        case dictionary(MLFeatureDictionary)
    }

    static let kind = "imputer"

    let plan: Plan
    let inputName: String
    let outputName: String
    /// For array plans.
    let arrayOutput: FeatureEngineeringArrayOutput?

    init(_ spec: CoreML_Specification_Imputer, description: MLModelDescription) throws {
        let kind = Self.kind
        let types: [MLFeatureType] = [.int64, .double, .multiArray, .string, .dictionary]
        let input = try FeatureEngineeringInterface.singleInput(description, kind: kind, allowed: types)
        let output = try FeatureEngineeringInterface.singleOutput(description, kind: kind, allowed: types)
        guard input.type == output.type else {
            throw MLModelError(.invalidModel, feature: output.name,
                               "\(kind) output is \(output.typeSummary) but its input '\(input.name)' is \(input.typeSummary); they must have the same type")
        }
        inputName = input.name
        outputName = output.name

        let replace = spec.replaceValue
        func replaceName(_ r: CoreML_Specification_Imputer.OneOf_ReplaceValue) -> String {
            switch r {
            case .replaceDoubleValue: return "replaceDoubleValue"
            case .replaceInt64Value: return "replaceInt64Value"
            case .replaceStringValue: return "replaceStringValue"
            }
        }
        /// The input types and replace value an imputed value allows.
        func require(_ imputed: String, inputs: [MLFeatureType], replaceAllowed: String?) throws {
            guard inputs.contains(input.type) else {
                throw MLModelError(.invalidModel, feature: input.name,
                                   "\(kind) input is \(input.typeSummary), which \(imputed) cannot fill (expected \(FeatureEngineeringInterface.list(inputs)))")
            }
            if let r = replace, replaceName(r) != replaceAllowed {
                throw MLModelError(.invalidModel,
                                   "\(kind) with \(imputed) cannot use \(replaceName(r))" + (replaceAllowed.map { " (expected \($0) or none)" } ?? " (no replace value is allowed)"))
            }
        }
        func arrayCount(_ n: Int, _ imputed: String) throws {
            if let declared = FeatureEngineeringInterface.fixedCount(input), declared != n {
                throw MLModelError(.invalidModel, feature: input.name,
                                   "\(kind) \(imputed) has \(n) values but the input array has \(declared) elements")
            }
        }
        let replaceDouble: Double
        if case .replaceDoubleValue(let d)? = replace { replaceDouble = d } else { replaceDouble = .nan }

        switch spec.imputedValue {
        case .imputedDoubleValue(let v)?:
            try require("imputedDoubleValue", inputs: [.double, .multiArray], replaceAllowed: "replaceDoubleValue")
            plan = input.type == .double ? .double(imputed: v, replace: replaceDouble) : .array(imputed: [v], replace: replaceDouble)
        case .imputedInt64Value(let v)?:
            try require("imputedInt64Value", inputs: [.int64], replaceAllowed: "replaceInt64Value")
            if case .replaceInt64Value(let r)? = replace { plan = .int64(imputed: v, replace: r) } else { plan = .int64(imputed: v, replace: nil) }
        case .imputedStringValue(let v)?:
            try require("imputedStringValue", inputs: [.string], replaceAllowed: "replaceStringValue")
            if case .replaceStringValue(let r)? = replace { plan = .string(imputed: v, replace: r) } else { plan = .string(imputed: v, replace: nil) }
        case .imputedDoubleArray(let v)?:
            try require("imputedDoubleArray", inputs: [.multiArray], replaceAllowed: "replaceDoubleValue")
            guard !v.vector.isEmpty else { throw MLModelError(.invalidModel, "\(kind) imputedDoubleArray is empty") }
            try arrayCount(v.vector.count, "imputedDoubleArray")
            plan = .array(imputed: v.vector, replace: replaceDouble)
        case .imputedInt64Array(let v)?:
            try require("imputedInt64Array", inputs: [.multiArray], replaceAllowed: "replaceInt64Value")
            guard !v.vector.isEmpty else { throw MLModelError(.invalidModel, "\(kind) imputedInt64Array is empty") }
            try arrayCount(v.vector.count, "imputedInt64Array")
            var r = Double.nan
            if case .replaceInt64Value(let i)? = replace { r = Double(i) }
            plan = .array(imputed: v.vector.map { Double($0) }, replace: r)
        case .imputedStringDictionary(let v)?:
            try require("imputedStringDictionary", inputs: [.dictionary], replaceAllowed: nil)
            try Self.checkKeys(input, .string)
            plan = .dictionary(.stringKeyed(v.map))
        case .imputedInt64Dictionary(let v)?:
            try require("imputedInt64Dictionary", inputs: [.dictionary], replaceAllowed: nil)
            try Self.checkKeys(input, .int64)
            plan = .dictionary(.int64Keyed(v.map))
        case nil:
            throw MLModelError(.invalidModel, "\(kind) has no imputed value (set one of the ImputedValue fields)")
        }
        if case .array(let imputed, _) = plan {
            let out = FeatureEngineeringArrayOutput(output)
            if imputed.count > 1 { try out.check(count: imputed.count, kind: kind, what: "one per input element") }
            if let n = FeatureEngineeringInterface.fixedCount(input) { try out.check(count: n, kind: kind, what: "one per input element") }
            arrayOutput = out
        } else {
            arrayOutput = nil
        }
    }

    static func checkKeys(_ input: MLFeatureDescription, _ keys: MLFeatureType) throws {
        if let k = input.dictionaryConstraint?.keyType, k != keys {
            throw MLModelError(.invalidModel, feature: input.name,
                               "\(kind) imputes a dictionary with \(keys) keys but the input has \(k) keys")
        }
    }

    var summary: [String] {
        switch plan {
        case .double(let v, let r): return ["Imputer: double, \(r.isNaN ? "NaN" : String(r)) → \(v)"]
        case .int64(let v, let r): return ["Imputer: int64, \(r.map(String.init) ?? "absent") → \(v)"]
        case .string(let v, let r): return ["Imputer: string, \(r.map { "'\($0)'" } ?? "absent") → '\(v)'"]
        case .array(let v, let r): return ["Imputer: array elements equal to \(r.isNaN ? "NaN" : String(r)) → \(v.count == 1 ? String(v[0]) : "per-element values (\(v.count))")"]
        case .dictionary(let d): return ["Imputer: absent dictionary → \(d.count) entries"]
        }
    }

    @inline(__always)
    static func matches(_ x: Double, _ replace: Double) -> Bool {
        replace.isNaN ? x.isNaN : x == replace
    }

    func prediction(from input: MLFeatureProvider, options: MLPredictionOptions) throws -> MLFeatureProvider {
        var value = input.featureValue(for: inputName)
        if value?.isUndefined == true { value = nil }
        let result: MLFeatureValue
        switch plan {
        case .double(let imputed, let replace):
            if let value {
                guard let x = FeatureEngineeringInterface.double(value) else {
                    throw MLModelError.featureType(inputName, "expected a double, got \(value.type)")
                }
                result = MLFeatureValue(double: Self.matches(x, replace) ? imputed : x)
            } else {
                result = MLFeatureValue(double: imputed)
            }
        case .int64(let imputed, let replace):
            if let value {
                guard let x = FeatureEngineeringInterface.int64(value) else {
                    throw MLModelError.featureType(inputName, "expected an int64, got \(FeatureEngineeringInterface.show(value))")
                }
                result = MLFeatureValue(int64: x == replace ? imputed : x)
            } else {
                result = MLFeatureValue(int64: imputed)
            }
        case .string(let imputed, let replace):
            if let value {
                guard case .string(let s) = value.storage else {
                    throw MLModelError.featureType(inputName, "expected a string, got \(value.type)")
                }
                result = MLFeatureValue(string: s == replace ? imputed : s)
            } else {
                result = MLFeatureValue(string: imputed)
            }
        case .dictionary(let imputed):
            if let value {
                guard let d = value.dictionary else {
                    throw MLModelError.featureType(inputName, "expected a dictionary, got \(value.type)")
                }
                result = MLFeatureValue(dictionary: d)
            } else {
                result = MLFeatureValue(dictionary: imputed)
            }
        case .array(let imputed, let replace):
            result = try imputeArray(value, imputed: imputed, replace: replace, options: options)
        }
        return MLDictionaryFeatureProvider(dictionary: [outputName: result])
    }

    func imputeArray(_ value: MLFeatureValue?, imputed: [Double], replace: Double, options: MLPredictionOptions) throws -> MLFeatureValue {
        let out = arrayOutput!
        guard let value else {
            // An absent array: the whole imputed array, if its length is known.
            let n = imputed.count > 1 ? imputed.count : (out.fixedShape?.reduce(1, *) ?? 0)
            guard n > 0 else {
                throw MLModelError.featureType(inputName, "input is absent and the imputer cannot tell the array's length (its output shape is not fixed)")
            }
            return try out.withValues(count: n, options: options) { y in
                for i in 0..<n { y[i] = imputed.count == 1 ? imputed[0] : imputed[i] }
            }
        }
        let array = try FeatureEngineeringArrayInput.array(value, feature: inputName)
        if imputed.count > 1 && array.count != imputed.count {
            throw MLModelError.featureType(inputName, "expected \(imputed.count) elements (one per imputed value), got \(array.count) (shape \(array.shape))")
        }
        return try FeatureEngineeringArrayInput.withDoubles(array) { x, n in
            if imputed.count == 1 {
                let v = imputed[0]
                for i in 0..<n where Self.matches(x[i], replace) { x[i] = v }
            } else {
                for i in 0..<n where Self.matches(x[i], replace) { x[i] = imputed[i] }
            }
            return try out.value(UnsafeBufferPointer(start: x, count: n), like: array.shape, options: options)
        }
    }
}
