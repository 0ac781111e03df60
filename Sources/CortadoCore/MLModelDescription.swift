import CortadoSpec

/// Metadata keys, as in CoreML.framework's `MLModelMetadataKey`.
public enum MLModelMetadataKey: String, Sendable {
    case description = "MLModelDescriptionKey"
    case versionString = "MLModelVersionStringKey"
    case author = "MLModelAuthorKey"
    case license = "MLModelLicenseKey"
    case creatorDefined = "MLModelCreatorDefinedKey"
}

/// Inputs, outputs and metadata of a model (CoreML.framework's `MLModelDescription`).
public struct MLModelDescription: Sendable {
    /// Inputs in the order the model declares them.
    public var inputs: [MLFeatureDescription]
    /// Outputs in the order the model declares them.
    public var outputs: [MLFeatureDescription]
    public var predictedFeatureName: String?
    public var predictedProbabilitiesName: String?
    public var shortDescription: String
    public var versionString: String
    public var author: String
    public var license: String
    public var userDefined: [String: String]
    /// Class labels of a classifier, filled in by the model kind.
    public var classLabels: MLClassLabels?

    public init(_ spec: CoreML_Specification_ModelDescription) throws {
        inputs = try spec.input.map(MLFeatureDescription.init)
        outputs = try spec.output.map(MLFeatureDescription.init)
        predictedFeatureName = spec.predictedFeatureName.isEmpty ? nil : spec.predictedFeatureName
        predictedProbabilitiesName = spec.predictedProbabilitiesName.isEmpty ? nil : spec.predictedProbabilitiesName
        shortDescription = spec.metadata.shortDescription
        versionString = spec.metadata.versionString
        author = spec.metadata.author
        license = spec.metadata.license
        userDefined = spec.metadata.userDefined
        for (i, f) in inputs.enumerated() where inputs[..<i].contains(where: { $0.name == f.name }) {
            throw MLModelError(.invalidModel, feature: f.name, "input is declared twice")
        }
        for (i, f) in outputs.enumerated() where outputs[..<i].contains(where: { $0.name == f.name }) {
            throw MLModelError(.invalidModel, feature: f.name, "output is declared twice")
        }
    }

    public var inputDescriptionsByName: [String: MLFeatureDescription] {
        Dictionary(inputs.map { ($0.name, $0) }, uniquingKeysWith: { a, _ in a })
    }

    public var outputDescriptionsByName: [String: MLFeatureDescription] {
        Dictionary(outputs.map { ($0.name, $0) }, uniquingKeysWith: { a, _ in a })
    }

    public func input(named name: String) -> MLFeatureDescription? { inputs.first { $0.name == name } }
    public func output(named name: String) -> MLFeatureDescription? { outputs.first { $0.name == name } }

    /// CoreML.framework-style metadata dictionary.
    public var metadata: [MLModelMetadataKey: Any] {
        [.description: shortDescription, .versionString: versionString, .author: author,
         .license: license, .creatorDefined: userDefined]
    }
}
