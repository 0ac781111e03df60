import CortadoCore
import CortadoSpec

/// `categoricalMapping` (CategoricalMapping.proto): maps a string to an int64
/// (`stringToInt64Map`) or an int64 to a string (`int64ToStringMap`).
///
/// - A value the map lacks gives `ValueOnUnknown` (`int64Value` for string → int64,
///   `strValue` for int64 → string; the other one is a load error, as in Core ML). With
///   no default, it is a prediction error naming the input and the value.
/// - Lookups are exact: strings are case- and whitespace-sensitive.
/// - The input is a scalar (string, or int64; a double holding an integer is read as
///   that int64, any other double is unknown), or a sequence of them, in which case the
///   output is the sequence of mapped values (Core ML's validator allows sequences; the
///   output must then be a sequence of the mapped type). A string → int64 output may be
///   declared double; it then holds the int64 as a double.
public enum MLCategoricalMappingKind: MLModelKind {
    public static let specTypes = ["categoricalMapping"]

    public static func compile(_ spec: CoreML_Specification_Model, context: MLCompileContext) throws -> any MLCompiledModel {
        try MLCompiledCategoricalMapping(spec.categoricalMapping, description: context.description)
    }
}

final class MLCompiledCategoricalMapping: MLCompiledModel {
    enum Table: Sendable {
        case stringToInt64([String: Int64], unknown: Int64?)
        case int64ToString([Int64: String], unknown: String?)
    }

    static let kind = "categoricalMapping"

    let table: Table
    let inputName: String
    let outputName: String
    let isSequence: Bool
    /// For string → int64 scalars: write the int64 as a double.
    let outputIsDouble: Bool

    init(_ spec: CoreML_Specification_CategoricalMapping, description: MLModelDescription) throws {
        let kind = Self.kind
        let from: MLFeatureType
        let to: MLFeatureType
        switch spec.mappingType {
        case .stringToInt64Map(let m)?:
            var unknown: Int64?
            switch spec.valueOnUnknown {
            case .int64Value(let v)?: unknown = v
            case .strValue?:
                throw MLModelError(.invalidModel, "\(kind) maps strings to int64 but its ValueOnUnknown is a string (strValue); expected int64Value")
            case nil: unknown = nil
            }
            table = .stringToInt64(m.map, unknown: unknown)
            (from, to) = (.string, .int64)
        case .int64ToStringMap(let m)?:
            var unknown: String?
            switch spec.valueOnUnknown {
            case .strValue(let v)?: unknown = v
            case .int64Value?:
                throw MLModelError(.invalidModel, "\(kind) maps int64 to strings but its ValueOnUnknown is an int64 (int64Value); expected strValue")
            case nil: unknown = nil
            }
            table = .int64ToString(m.map, unknown: unknown)
            (from, to) = (.int64, .string)
        case nil:
            throw MLModelError(.invalidModel, "\(kind) has no mapping (set stringToInt64Map or int64ToStringMap)")
        }

        let fromInputs: [MLFeatureType] = from == .string ? [.string, .sequence] : [.int64, .double, .sequence]
        let input = try FeatureEngineeringInterface.singleInput(description, kind: kind, allowed: fromInputs)
        let output = try FeatureEngineeringInterface.singleOutput(description, kind: kind, allowed: [.int64, .double, .string, .sequence])
        inputName = input.name
        outputName = output.name
        isSequence = input.type == .sequence
        if isSequence {
            guard input.sequenceConstraint?.valueType == from else {
                throw MLModelError(.invalidModel, feature: input.name, "\(kind) input is \(input.typeSummary) but the mapping reads \(from) values")
            }
            guard output.type == .sequence, output.sequenceConstraint?.valueType == to else {
                throw MLModelError(.invalidModel, feature: output.name,
                                   "\(kind) reads a sequence, so its output must be a sequence of \(to), not \(output.typeSummary)")
            }
            outputIsDouble = false
        } else {
            let allowed: [MLFeatureType] = to == .int64 ? [.int64, .double] : [.string]
            guard allowed.contains(output.type) else {
                throw MLModelError(.invalidModel, feature: output.name,
                                   "\(kind) output is \(output.typeSummary) but the mapping produces \(to) values")
            }
            outputIsDouble = output.type == .double
        }
    }

    var summary: [String] {
        switch table {
        case .stringToInt64(let m, let u):
            return ["Categorical mapping: \(m.count) strings → int64, unknown → \(u.map(String.init) ?? "error")\(isSequence ? ", over sequences" : "")"]
        case .int64ToString(let m, let u):
            return ["Categorical mapping: \(m.count) int64 → strings, unknown → \(u.map { "'\($0)'" } ?? "error")\(isSequence ? ", over sequences" : "")"]
        }
    }

    func unknown(_ shown: String) -> MLModelError {
        MLModelError.featureType(inputName, "value \(shown) is not in the categorical mapping, and the model gives no ValueOnUnknown")
    }

    @inline(__always)
    func map(_ s: String, _ m: [String: Int64], _ u: Int64?) throws -> Int64 {
        guard let v = m[s] ?? u else { throw unknown("'\(s)'") }
        return v
    }

    @inline(__always)
    func map(_ i: Int64?, shown: @autoclosure () -> String, _ m: [Int64: String], _ u: String?) throws -> String {
        guard let v = i.flatMap({ m[$0] }) ?? u else { throw unknown(shown()) }
        return v
    }

    func prediction(from input: MLFeatureProvider, options: MLPredictionOptions) throws -> MLFeatureProvider {
        let value = try FeatureEngineeringInterface.value(input, inputName)
        let result: MLFeatureValue
        switch (table, value.storage) {
        case (.stringToInt64(let m, let u), .string(let s)) where !isSequence:
            let v = try map(s, m, u)
            result = outputIsDouble ? MLFeatureValue(double: Double(v)) : MLFeatureValue(int64: v)
        case (.int64ToString(let m, let u), .int64) where !isSequence, (.int64ToString(let m, let u), .double) where !isSequence:
            result = MLFeatureValue(string: try map(FeatureEngineeringInterface.int64(value), shown: FeatureEngineeringInterface.show(value), m, u))
        case (.stringToInt64(let m, let u), .sequence(let seq)) where isSequence && (seq.type == .string || seq.count == 0):
            result = MLFeatureValue(sequence: MLSequence(int64s: try seq.stringValues.map { try map($0, m, u) }))
        case (.int64ToString(let m, let u), .sequence(let seq)) where isSequence && (seq.type == .int64 || seq.count == 0):
            result = MLFeatureValue(sequence: MLSequence(strings: try seq.int64Values.map { try map($0, shown: String($0), m, u) }))
        case (.stringToInt64, _):
            throw MLModelError.featureType(inputName, "expected a string\(isSequence ? " sequence" : ""), got \(value.description)")
        case (.int64ToString, _):
            throw MLModelError.featureType(inputName, "expected an int64\(isSequence ? " sequence" : ""), got \(value.description)")
        }
        return MLDictionaryFeatureProvider(dictionary: [outputName: result])
    }
}
