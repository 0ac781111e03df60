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

    /// The states a stateful model keeps between predictions (Core ML 8's `MLState`).
    public var states: [MLFeatureDescription] = []
    /// The functions of a multi-function model, and the one this description describes.
    public var functionNames: [String] = []
    public var functionName: String?
    /// The features an update reads (`trainingInput`): usually the inputs plus the loss's
    /// target. Empty for a model that is not updatable.
    public var trainingInputs: [MLFeatureDescription] = []
    /// The model may be trained (`Model.isUpdatable`), by `MLUpdateTask`.
    public var isUpdatable = false

    public var trainingInputDescriptionsByName: [String: MLFeatureDescription] {
        Dictionary(trainingInputs.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
    }

    /// Reads a description. For a multi-function model (specification 9), the inputs,
    /// outputs and states are those of `function` (nil: the model's default function).
    public init(_ spec: CoreML_Specification_ModelDescription, function: String? = nil) throws {
        var spec = spec
        if !spec.functions.isEmpty {
            let name = function ?? (spec.defaultFunctionName.isEmpty ? spec.functions[0].name : spec.defaultFunctionName)
            guard let chosen = spec.functions.first(where: { $0.name == name }) else {
                throw MLModelError(.invalidModel, "the model has no function named '\(name)' (it has: \(spec.functions.map(\.name).joined(separator: ", ")))")
            }
            spec.input = chosen.input
            spec.output = chosen.output
            spec.state = chosen.state
            spec.predictedFeatureName = chosen.predictedFeatureName
            spec.predictedProbabilitiesName = chosen.predictedProbabilitiesName
            functionNames = spec.functions.map(\.name)
            functionName = name
        } else if let function, function != "main" {
            throw MLModelError(.invalidModel, "the model has one function; '\(function)' names none")
        }
        states = try spec.state.map(MLFeatureDescription.init)
        inputs = try spec.input.map(MLFeatureDescription.init)
        outputs = try spec.output.map(MLFeatureDescription.init)
        trainingInputs = try spec.trainingInput.map(MLFeatureDescription.init)
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
