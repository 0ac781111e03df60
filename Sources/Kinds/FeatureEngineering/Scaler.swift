import CortadoCore
import CortadoSpec

/// `scaler` (Scaler.proto): `y = (x + shiftValue) * scaleValue`, element-wise.
///
/// - `shiftValue` and `scaleValue` each hold no value (shift 0, scale 1), one value for
///   every element, or one value per element of an array input (Core ML's rules; checked
///   at load time when the input's length is fixed, else per prediction).
/// - The input is int64, double or a multiArray; the output has the input's type, or is
///   double for an int64 input. An int64 output must come out an integer: a lossy result
///   is a prediction error, as the format says.
/// - scikit-learn's `StandardScaler` converts to shift = -mean_, scale = 1/scale_.
///   `MinMaxScaler` has no converter; as a scaler it is shift = min_/scale_, scale = scale_.
public enum MLScalerKind: MLModelKind {
    public static let specTypes = ["scaler"]

    public static func compile(_ spec: CoreML_Specification_Model, context: MLCompileContext) throws -> any MLCompiledModel {
        try MLCompiledScaler(spec.scaler, description: context.description)
    }
}

final class MLCompiledScaler: MLCompiledModel {
    enum Output: Sendable {
        case double
        case int64
        case array(FeatureEngineeringArrayOutput)
    }

    static let kind = "scaler"

    let shift: [Double]
    let scale: [Double]
    /// The per-element length the coefficients imply (nil: any length).
    let width: Int?
    let inputName: String
    let inputIsArray: Bool
    let outputName: String
    let output: Output

    init(_ spec: CoreML_Specification_Scaler, description: MLModelDescription) throws {
        let kind = Self.kind
        let types: [MLFeatureType] = [.int64, .double, .multiArray]
        let input = try FeatureEngineeringInterface.singleInput(description, kind: kind, allowed: types)
        let out = try FeatureEngineeringInterface.singleOutput(description, kind: kind, allowed: types)
        inputName = input.name
        outputName = out.name
        inputIsArray = input.type == .multiArray
        shift = spec.shiftValue
        scale = spec.scaleValue

        if input.type == .int64 {
            guard out.type == .int64 || out.type == .double else {
                throw MLModelError(.invalidModel, feature: out.name, "\(kind) input is int64, so its output must be int64 or double, not \(out.typeSummary)")
            }
        } else if out.type != input.type {
            throw MLModelError(.invalidModel, feature: out.name,
                               "\(kind) output is \(out.typeSummary) but its input '\(input.name)' is \(input.typeSummary); they must have the same type")
        }

        let perElement = [shift.count, scale.count].filter { $0 > 1 }
        if perElement.count == 2 && shift.count != scale.count {
            throw MLModelError(.invalidModel, "\(kind) has \(shift.count) shift values but \(scale.count) scale values")
        }
        width = perElement.first
        if let w = width {
            guard inputIsArray else {
                throw MLModelError(.invalidModel, feature: input.name,
                                   "\(kind) has \(w) per-element coefficients but its input is a single \(input.type) (expected at most one shift and one scale value)")
            }
            if let n = FeatureEngineeringInterface.fixedCount(input), n != w {
                throw MLModelError(.invalidModel, feature: input.name,
                                   "\(kind) has \(w) per-element coefficients but the input array has \(n) elements")
            }
        }
        for (name, values) in [("shiftValue", shift), ("scaleValue", scale)] {
            if let i = values.firstIndex(where: { !$0.isFinite }) {
                throw MLModelError(.invalidModel, "\(kind) \(name)[\(i)] is \(values[i]); coefficients must be finite")
            }
        }

        switch out.type {
        case .double: output = .double
        case .int64: output = .int64
        default:
            let array = FeatureEngineeringArrayOutput(out)
            if let n = width ?? FeatureEngineeringInterface.fixedCount(input) {
                try array.check(count: n, kind: kind, what: "one per input element")
            }
            output = .array(array)
        }
    }

    var summary: [String] {
        func show(_ v: [Double], _ none: String) -> String { v.isEmpty ? none : v.count == 1 ? String(v[0]) : "\(v.count) values" }
        return ["Scaler: (x + shift) * scale, shift \(show(shift, "0")), scale \(show(scale, "1"))"]
    }

    @inline(__always)
    func apply(_ x: UnsafeMutablePointer<Double>, count: Int) {
        let s0 = shift.first ?? 0
        let k0 = scale.first ?? 1
        switch (shift.count > 1, scale.count > 1) {
        case (false, false):
            for i in 0..<count { x[i] = (x[i] + s0) * k0 }
        case (true, true):
            shift.withUnsafeBufferPointer { s in
                scale.withUnsafeBufferPointer { k in
                    for i in 0..<count { x[i] = (x[i] + s[i]) * k[i] }
                }
            }
        case (true, false):
            shift.withUnsafeBufferPointer { s in for i in 0..<count { x[i] = (x[i] + s[i]) * k0 } }
        case (false, true):
            scale.withUnsafeBufferPointer { k in for i in 0..<count { x[i] = (x[i] + s0) * k[i] } }
        }
    }

    func prediction(from input: MLFeatureProvider, options: MLPredictionOptions) throws -> MLFeatureProvider {
        let value = try FeatureEngineeringInterface.value(input, inputName)
        let result: MLFeatureValue
        switch output {
        case .array(let out):
            let array = try FeatureEngineeringArrayInput.array(value, feature: inputName)
            if let w = width, array.count != w {
                throw MLModelError.featureType(inputName, "expected \(w) elements (one per scaler coefficient), got \(array.count) (shape \(array.shape))")
            }
            result = try FeatureEngineeringArrayInput.withDoubles(array) { x, n in
                apply(x, count: n)
                return try out.value(UnsafeBufferPointer(start: x, count: n), like: array.shape, options: options)
            }
        case .double, .int64:
            guard var x = FeatureEngineeringInterface.double(value) else {
                throw MLModelError.featureType(inputName, "expected a number, got \(value.type)")
            }
            apply(&x, count: 1)
            if case .int64 = output {
                result = MLFeatureValue(int64: try FeatureEngineeringInterface.exactInt64(x, feature: outputName, kind: Self.kind))
            } else {
                result = MLFeatureValue(double: x)
            }
        }
        return MLDictionaryFeatureProvider(dictionary: [outputName: result])
    }
}
