import CortadoCore

/// What the feature-engineering kinds share: finding the one input and output a
/// transformer declares, reading scalars whatever numeric storage they arrive in, and
/// writing multi-array outputs of the declared shape and element type.
///
/// Inputs reach a kind already checked against the model description, but Core ML lets
/// an int64 value feed a double input and the reverse, so every scalar read accepts both.
enum FeatureEngineeringInterface {
    /// The model's only input; `allowed` lists the types the kind reads.
    static func singleInput(_ d: MLModelDescription, kind: String, allowed: [MLFeatureType]) throws -> MLFeatureDescription {
        guard d.inputs.count == 1, let input = d.inputs.first else {
            throw MLModelError(.invalidModel, "\(kind) takes exactly one input, the model declares \(d.inputs.count)" +
                (d.inputs.isEmpty ? "" : " (\(d.inputs.map(\.name).joined(separator: ", ")))"))
        }
        guard allowed.contains(input.type) else {
            throw MLModelError(.invalidModel, feature: input.name,
                               "\(kind) input is \(input.typeSummary) (expected \(list(allowed)))")
        }
        return input
    }

    /// The model's only output; `allowed` lists the types the kind writes.
    static func singleOutput(_ d: MLModelDescription, kind: String, allowed: [MLFeatureType]) throws -> MLFeatureDescription {
        guard d.outputs.count == 1, let output = d.outputs.first else {
            throw MLModelError(.invalidModel, "\(kind) has exactly one output, the model declares \(d.outputs.count)" +
                (d.outputs.isEmpty ? "" : " (\(d.outputs.map(\.name).joined(separator: ", ")))"))
        }
        guard allowed.contains(output.type) else {
            throw MLModelError(.invalidModel, feature: output.name,
                               "\(kind) output is \(output.typeSummary) (expected \(list(allowed)))")
        }
        return output
    }

    static func list(_ types: [MLFeatureType]) -> String {
        let names = types.map(\.description)
        guard names.count > 1 else { return names.first ?? "nothing" }
        return names.dropLast().joined(separator: ", ") + " or " + names.last!
    }

    /// The fixed element count of a multi-array feature, when its description fixes one.
    static func fixedCount(_ f: MLFeatureDescription) -> Int? {
        guard let c = f.multiArrayConstraint, c.shapeConstraint.type == .unspecified, !c.shape.isEmpty else { return nil }
        return c.shape.reduce(1, *)
    }

    /// The value of a required input, or an error naming it.
    static func value(_ input: MLFeatureProvider, _ name: String) throws -> MLFeatureValue {
        guard let v = input.featureValue(for: name), !v.isUndefined else {
            throw MLModelError.featureType(name, "required input is missing")
        }
        return v
    }

    /// An int64 from int64 storage or a double holding an integer; nil otherwise.
    @inline(__always)
    static func int64(_ v: MLFeatureValue) -> Int64? {
        switch v.storage {
        case .int64(let i): return i
        case .double(let d): return Int64(exactly: d)
        default: return nil
        }
    }

    /// A double from double or int64 storage; nil otherwise.
    @inline(__always)
    static func double(_ v: MLFeatureValue) -> Double? {
        switch v.storage {
        case .double(let d): return d
        case .int64(let i): return Double(i)
        default: return nil
        }
    }

    /// A computed double written to an int64 output: it must be an integer in range.
    static func exactInt64(_ x: Double, feature: String, kind: String) throws -> Int64 {
        guard let i = Int64(exactly: x) else {
            throw MLModelError.featureType(feature, "\(kind) computed \(x), which is not an int64 value; the output is declared int64")
        }
        return i
    }

    /// A value shown in a message: strings quoted.
    static func show(_ v: MLFeatureValue) -> String {
        switch v.storage {
        case .string(let s): return "'\(s)'"
        case .int64(let i): return String(i)
        case .double(let d): return String(d)
        default: return v.description
        }
    }

    /// Up to `limit` items for a message.
    static func preview<T>(_ items: [T], limit: Int = 8, _ show: (T) -> String) -> String {
        let head = items.prefix(limit).map(show).joined(separator: ", ")
        return items.count > limit ? head + ", … (\(items.count) in all)" : head
    }
}

/// A multi-array output: its name, element type and declared shape. The kind decides the
/// element count; the declared shape is used when it holds exactly that many elements,
/// otherwise the input's shape (for element-wise kinds), otherwise a vector.
struct FeatureEngineeringArrayOutput: Sendable {
    let name: String
    let dataType: MLMultiArrayDataType
    /// The declared shape when the description fixes one (no flexibility, not empty).
    let fixedShape: [Int]?

    init(_ f: MLFeatureDescription) {
        name = f.name
        dataType = f.multiArrayConstraint?.dataType ?? .double
        if let c = f.multiArrayConstraint, c.shapeConstraint.type == .unspecified, !c.shape.isEmpty {
            fixedShape = c.shape
        } else {
            fixedShape = nil
        }
    }

    /// Load-time check for kinds whose output length the spec fixes.
    func check(count: Int, kind: String, what: String) throws {
        guard let shape = fixedShape else { return }
        let declared = shape.reduce(1, *)
        guard declared == count else {
            throw MLModelError(.invalidModel, feature: name,
                               "\(kind) writes \(count) values (\(what)) but the output is declared with shape \(shape) (\(declared) elements)")
        }
    }

    /// True when `x` truncated toward zero is an Int32 (NaN, infinities and larger
    /// magnitudes are not; the multi-array store would trap on some of them).
    @inline(__always)
    static func fitsInt32(_ x: Double) -> Bool {
        x.isFinite && x.rounded(.towardZero) >= Double(Int32.min) && x.rounded(.towardZero) <= Double(Int32.max)
    }

    func shape(count: Int, like inputShape: [Int]?) -> [Int] {
        if let s = fixedShape, s.reduce(1, *) == count { return s }
        if let s = inputShape, !s.isEmpty, s.reduce(1, *) == count { return s }
        return [count]
    }

    /// The output array (the caller's backing when one was given), filled with `values`.
    func value(_ values: UnsafeBufferPointer<Double>, like inputShape: [Int]? = nil,
               options: MLPredictionOptions) throws -> MLFeatureValue {
        if dataType == .int32, let i = values.firstIndex(where: { !Self.fitsInt32($0) }) {
            throw MLModelError.featureType(name, "element \(i) is \(values[i]), which an INT32 output cannot hold")
        }
        let array = try options.outputArray(named: name, shape: shape(count: values.count, like: inputShape), dataType: dataType)
        if values.count > 0 { array.write(contiguous: values) }
        return MLFeatureValue(multiArray: array)
    }

    /// Runs `body` over a scratch buffer of `count` Doubles, then writes it to the output.
    func withValues(count: Int, like inputShape: [Int]? = nil, options: MLPredictionOptions,
                    _ body: (UnsafeMutablePointer<Double>) throws -> Void) throws -> MLFeatureValue {
        try withUnsafeTemporaryAllocation(of: Double.self, capacity: max(count, 1)) { buffer in
            let p = buffer.baseAddress!
            try body(p)
            return try value(UnsafeBufferPointer(start: p, count: count), like: inputShape, options: options)
        }
    }
}

/// A multi-array input read as Doubles into a scratch buffer.
enum FeatureEngineeringArrayInput {
    /// Runs `body` with the array's elements (row-major) as Doubles.
    static func withDoubles<R>(_ array: MLMultiArray, _ body: (UnsafeMutablePointer<Double>, Int) throws -> R) throws -> R {
        try withUnsafeTemporaryAllocation(of: Double.self, capacity: max(array.count, 1)) { buffer in
            let p = buffer.baseAddress!
            if array.count > 0 { array.copyDoubles(into: p) }
            return try body(p, array.count)
        }
    }

    /// The multi-array value of an input, or an error naming it.
    static func array(_ value: MLFeatureValue, feature: String) throws -> MLMultiArray {
        guard let a = value.multiArrayValue else {
            throw MLModelError.featureType(feature, "expected a multiArray, got \(value.type)")
        }
        return a
    }
}
