import CortadoModels
import Foundation

/// Writes the typed Swift wrapper of a model (`cortado generate --swift`), shaped like the
/// classes Xcode generates for a Core ML model: `<Name>Input` (an `MLFeatureProvider` with a
/// stored property per input), `<Name>Output` (typed read-only properties over the model's
/// output provider) and `<Name>` (loading, `prediction(input:)`, a prediction per input list,
/// batches). Feature descriptions become doc comments. Images are Cortado's `MLImage`, as
/// Linux has no `CVPixelBuffer`; dictionaries are `[String: Double]` or `[Int64: Double]`;
/// sequences `[Int64]` or `[String]`.
struct SwiftWrapperWriter {
    let name: String
    let description: MLModelDescription
    /// The model file's name, for the header comment.
    let source: String

    /// Swift's keywords, which a feature name may spell; such names are written in backticks.
    private static let keywords: Set<String> = [
        "associatedtype", "class", "deinit", "enum", "extension", "fileprivate", "func", "import", "init", "inout", "internal",
        "let", "open", "operator", "private", "protocol", "public", "rethrows", "static", "struct", "subscript", "typealias",
        "var", "break", "case", "continue", "default", "defer", "do", "else", "fallthrough", "for", "guard", "if", "in", "repeat",
        "return", "switch", "where", "while", "as", "Any", "catch", "false", "is", "nil", "super", "self", "Self", "throw",
        "throws", "true", "try", "await", "async", "consume", "copy", "discard", "each", "borrowing", "consuming",
    ]
    /// Members the generated types already have: a feature with one of these names gets a `_` suffix.
    private static let taken: Set<String> = ["featureNames", "featureValue", "provider", "model", "prediction", "predictions", "load", "init"]

    /// A valid Swift type name from a file name ("iris-classifier" → "Iris_classifier").
    static func typeName(_ raw: String) -> String {
        var s = identifier(raw)
        if let first = s.first, first.isLowercase { s = first.uppercased() + s.dropFirst() }
        return s
    }

    /// A valid identifier: letters, digits and `_`, not starting with a digit.
    static func identifier(_ raw: String) -> String {
        var s = String(raw.unicodeScalars.map { CharacterSet.alphanumerics.contains($0) && $0.isASCII ? Character($0) : "_" })
        if s.isEmpty { s = "_" }
        if s.first!.isNumber { s = "_" + s }
        return s
    }

    /// Property names for features, unique and never one of the generated members.
    private static func propertyNames(_ features: [MLFeatureDescription]) -> [String] {
        var used = Set<String>()
        return features.map { feature in
            var base = identifier(feature.name)
            if taken.contains(base) { base += "_" }
            var candidate = base, n = 2
            while used.contains(candidate) { candidate = "\(base)_\(n)"; n += 1 }
            used.insert(candidate)
            return candidate
        }
    }

    private static func escaped(_ name: String) -> String { keywords.contains(name) ? "`\(name)`" : name }

    /// A Swift string literal.
    private static func literal(_ s: String) -> String {
        var out = "\""
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20: out += "\\u{\(String(scalar.value, radix: 16))}"
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }

    /// Doc comment lines (`/// ...`) for free text, indented.
    private static func doc(_ text: String, indent: String) -> String {
        text.split(separator: "\n", omittingEmptySubsequences: false).map { "\(indent)/// \($0)".trimmingTrailingSpaces() }.joined(separator: "\n") + "\n"
    }

    /// The Swift type of a feature's value.
    static func swiftType(_ f: MLFeatureDescription) throws -> String {
        switch f.type {
        case .int64: return "Int64"
        case .double: return "Double"
        case .string: return "String"
        case .multiArray: return "MLMultiArray"
        case .image: return "MLImage"
        case .dictionary: return f.dictionaryConstraint?.keyType == .int64 ? "[Int64: Double]" : "[String: Double]"
        case .sequence: return f.sequenceConstraint?.valueType == .int64 ? "[Int64]" : "[String]"
        case .invalid: throw MLModelError(.unsupported, "feature \(f.name) has no type")
        }
    }

    /// What the feature is, in words ("1 × 3 array of FLOAT32", "RGB image, 224 × 224").
    static func summary(_ f: MLFeatureDescription) -> String {
        switch f.type {
        case .multiArray:
            let c = f.multiArrayConstraint
            let shape = (c?.shape ?? []).isEmpty ? "array" : (c!.shape.map(String.init).joined(separator: " × ") + " array")
            return "\(shape) of \(c?.dataType.map { "\($0)" } ?? "numbers")"
        case .image:
            guard let c = f.imageConstraint else { return "image" }
            return "\(c.colorSpace.rawValue) image, \(c.pixelsWide) × \(c.pixelsHigh)"
        case .dictionary:
            return "dictionary of \(f.dictionaryConstraint?.keyType == .int64 ? "int64" : "string") keys to doubles"
        case .sequence:
            return "sequence of \(f.sequenceConstraint?.valueType == .int64 ? "int64" : "string") values"
        default:
            return "\(f.type)"
        }
    }

    /// The expression making an `MLFeatureValue` from a property holding a non-optional value.
    private static func featureValue(_ f: MLFeatureDescription, _ v: String) -> String {
        switch f.type {
        case .int64: return "MLFeatureValue(int64: \(v))"
        case .double: return "MLFeatureValue(double: \(v))"
        case .string: return "MLFeatureValue(string: \(v))"
        case .multiArray: return "MLFeatureValue(multiArray: \(v))"
        case .image: return "MLFeatureValue(image: \(v))"
        case .dictionary:
            return f.dictionaryConstraint?.keyType == .int64 ? "MLFeatureValue(dictionary: .int64Keyed(\(v)))" : "MLFeatureValue(dictionary: .stringKeyed(\(v)))"
        case .sequence:
            return f.sequenceConstraint?.valueType == .int64 ? "MLFeatureValue(sequence: MLSequence(int64s: \(v)))" : "MLFeatureValue(sequence: MLSequence(strings: \(v)))"
        case .invalid: return "MLFeatureValue(undefined: .invalid)"
        }
    }

    /// The expression reading a typed value out of an `MLFeatureValue` named `v`.
    private static func typedValue(_ f: MLFeatureDescription, _ v: String) -> String {
        switch f.type {
        case .int64: return "\(v).int64Value"
        case .double: return "\(v).doubleValue"
        case .string: return "\(v).stringValue"
        case .multiArray: return "\(v).multiArrayValue!"
        case .image: return "\(v).imageValue!"
        case .dictionary:
            if f.dictionaryConstraint?.keyType == .int64 {
                return "{ if case .int64Keyed(let d)? = \(v).dictionary { return d }; return [:] }()"
            }
            return "{ if case .stringKeyed(let d)? = \(v).dictionary { return d }; return [:] }()"
        case .sequence:
            return f.sequenceConstraint?.valueType == .int64 ? "\(v).sequenceValue!.int64Values" : "\(v).sequenceValue!.stringValues"
        case .invalid: return "\(v)"
        }
    }

    private static func featureDoc(_ f: MLFeatureDescription, indent: String) -> String {
        let what = f.shortDescription.isEmpty ? "" : f.shortDescription + "\n"
        return doc("\(what)`\(f.name)`: \(summary(f))\(f.isOptional ? " (optional)" : "")", indent: indent)
    }

    func swiftSource() throws -> String {
        let d = description
        let inputs = d.inputs, outputs = d.outputs
        let inNames = Self.propertyNames(inputs), outNames = Self.propertyNames(outputs)
        let inTypes = try inputs.map(Self.swiftType), outTypes = try outputs.map(Self.swiftType)
        var s = """
        // \(name).swift: the typed interface of \(source), written by `cortado generate --swift`.
        // Regenerate it rather than edit it. Build it against the `Cortado` library product.

        import Cortado
        import Foundation


        """
        // Input.
        s += "/// The input of \(name).\n"
        s += "final class \(name)Input: MLFeatureProvider {\n"
        for (i, f) in inputs.enumerated() {
            s += Self.featureDoc(f, indent: "    ")
            s += "    var \(Self.escaped(inNames[i])): \(inTypes[i])\(f.isOptional ? "?" : "")\n\n"
        }
        s += "    var featureNames: Set<String> { [\(inputs.map { Self.literal($0.name) }.joined(separator: ", "))] }\n\n"
        s += "    func featureValue(for featureName: String) -> MLFeatureValue? {\n"
        s += "        switch featureName {\n"
        for (i, f) in inputs.enumerated() {
            let p = "self." + Self.escaped(inNames[i])
            if f.isOptional {
                s += "        case \(Self.literal(f.name)): return \(p).map { \(Self.featureValue(f, "$0")) } ?? MLFeatureValue(undefined: .\(f.type))\n"
            } else {
                s += "        case \(Self.literal(f.name)): return \(Self.featureValue(f, p))\n"
            }
        }
        s += "        default: return nil\n        }\n    }\n\n"
        let params = inputs.indices.map { "\(Self.escaped(inNames[$0])): \(inTypes[$0])\(inputs[$0].isOptional ? "? = nil" : "")" }.joined(separator: ", ")
        s += "    init(\(params)) {\n"
        for n in inNames { s += "        self.\(Self.escaped(n)) = \(Self.escaped(n))\n" }
        s += "    }\n}\n\n"

        // Output.
        s += "/// The output of \(name).\n"
        s += "final class \(name)Output: MLFeatureProvider {\n"
        s += "    /// The model's outputs, as the model returned them.\n    let provider: MLFeatureProvider\n\n"
        for (i, f) in outputs.enumerated() {
            s += Self.featureDoc(f, indent: "    ")
            s += "    var \(Self.escaped(outNames[i])): \(outTypes[i]) {\n"
            s += "        let value = provider.featureValue(for: \(Self.literal(f.name)))!\n"
            s += "        return \(Self.typedValue(f, "value"))\n    }\n\n"
        }
        s += "    var featureNames: Set<String> { provider.featureNames }\n\n"
        s += "    func featureValue(for featureName: String) -> MLFeatureValue? { provider.featureValue(for: featureName) }\n\n"
        s += "    init(features: MLFeatureProvider) {\n        self.provider = features\n    }\n}\n\n"

        // Model.
        var about: [String] = []
        if !d.shortDescription.isEmpty { about.append(d.shortDescription) }
        for (label, value) in [("Author", d.author), ("License", d.license), ("Version", d.versionString)] where !value.isEmpty {
            about.append("\(label): \(value)")
        }
        about.append("Loads and predicts with \(source).")
        s += Self.doc(about.joined(separator: "\n"), indent: "")
        s += "final class \(name) {\n"
        s += "    /// The loaded model.\n    let model: MLModel\n\n"
        s += "    init(model: MLModel) {\n        self.model = model\n    }\n\n"
        s += "    /// Loads the model from a file (`.mlmodel`, an `.mlpackage` folder, or a compiled or encrypted form).\n"
        s += "    convenience init(contentsOf modelURL: URL, configuration: MLModelConfiguration = MLModelConfiguration()) throws {\n"
        s += "        self.init(model: try MLModel(contentsOf: modelURL, configuration: configuration))\n    }\n\n"
        s += "    /// Loads the model without blocking the caller's task.\n"
        s += "    static func load(contentsOf modelURL: URL, configuration: MLModelConfiguration = MLModelConfiguration()) async throws -> \(name) {\n"
        s += "        \(name)(model: try await MLModel.load(contentsOf: modelURL, configuration: configuration))\n    }\n\n"
        s += "    func prediction(input: \(name)Input, options: MLPredictionOptions = MLPredictionOptions()) throws -> \(name)Output {\n"
        s += "        \(name)Output(features: try model.prediction(from: input, options: options))\n    }\n\n"
        if !inputs.isEmpty {
            let args = inputs.indices.map { "\(Self.escaped(inNames[$0])): \(inTypes[$0])\(inputs[$0].isOptional ? "? = nil" : "")" }.joined(separator: ", ")
            let pass = inNames.map { "\(Self.escaped($0)): \(Self.escaped($0))" }.joined(separator: ", ")
            s += "    func prediction(\(args)) throws -> \(name)Output {\n"
            s += "        try prediction(input: \(name)Input(\(pass)))\n    }\n\n"
        }
        s += "    func predictions(inputs: [\(name)Input], options: MLPredictionOptions = MLPredictionOptions()) throws -> [\(name)Output] {\n"
        s += "        let batch = try model.predictions(fromBatch: MLArrayBatchProvider(array: inputs), options: options)\n"
        s += "        return (0..<batch.count).map { \(name)Output(features: batch.features(at: $0)) }\n    }\n}\n"
        return s
    }
}

extension String {
    fileprivate func trimmingTrailingSpaces() -> String {
        var s = self
        while s.last == " " { s.removeLast() }
        return s
    }
}
