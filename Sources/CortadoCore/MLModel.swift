import CortadoSpec
import Foundation

/// A loaded model, ready to predict (CoreML.framework's `MLModel`).
///
/// Loading parses the spec, checks its version, reads its description and hands it to the
/// registered kind, which compiles it once; predictions validate their inputs against the
/// description and run the compiled form.
public final class MLModel: @unchecked Sendable {
    public let modelDescription: MLModelDescription
    public let configuration: MLModelConfiguration
    public let specification: CoreML_Specification_Model
    /// The model's name (file base name), used in messages.
    public let name: String
    /// The `Model.Type` case this model is (e.g. "treeEnsembleClassifier").
    public let specType: String
    public let compiled: any MLCompiledModel
    /// True for a variant compiled over another model's compiled parts (`variant(specification:)`).
    public let sharesBase: Bool
    /// `compiled` when it runs columns natively (looked up once, not per batch).
    let columnar: (any MLColumnarPredicting)?
    /// The outputs' names, in declared order (the order of predicted columns).
    let outputNames: [String]

    /// Loads a `.mlmodel` file (or an `.mlpackage` folder).
    public convenience init(contentsOf url: URL, configuration: MLModelConfiguration = MLModelConfiguration()) throws {
        var configuration = configuration
        if configuration.modelDirectory == nil { configuration.modelDirectory = url.deletingLastPathComponent() }
        try self.init(file: MLModelFile.open(contentsOf: url, key: configuration.modelKey), configuration: configuration)
    }

    /// Loads a model from bytes in memory, with no file: a serialized spec, a compiled model
    /// or an encrypted one (recognised by their first bytes).
    public convenience init(data: Data, name: String = "model", configuration: MLModelConfiguration = MLModelConfiguration()) throws {
        try self.init(file: MLModelFile.open(data: data, name: name, key: configuration.modelKey), configuration: configuration)
    }

    /// Loads an opened model file (any form); `name` overrides the file's name in messages.
    public convenience init(file: MLModelFile, configuration: MLModelConfiguration = MLModelConfiguration(), name: String? = nil) throws {
        try self.init(specification: file.specification, configuration: configuration, name: name ?? file.name, depth: 0, payload: file.payload,
                      resources: file.resources)
    }

    public convenience init(specification: CoreML_Specification_Model, configuration: MLModelConfiguration = MLModelConfiguration(), name: String = "model") throws {
        try self.init(specification: specification, configuration: configuration, name: name, depth: 0)
    }

    /// `payload`: a compiled container's sections, for a kind that precompiles.
    init(specification spec: CoreML_Specification_Model, configuration: MLModelConfiguration, name: String, depth: Int,
         payload: MLCompiledPayload? = nil, resources: MLModelResources? = nil) throws {
        do {
            let (specType, kind, context) = try Self.resolveKind(spec, configuration: configuration, name: name, depth: depth, resources: resources)
            var description = context.description
            let compiled: any MLCompiledModel
            if let payload, let precompiling = kind as? any MLPrecompilingModelKind.Type {
                compiled = try precompiling.compile(spec, payload: payload, context: context)
            } else {
                compiled = try kind.compile(spec, context: context)
            }
            description.classLabels = compiled.classLabels
            description.isUpdatable = spec.isUpdatable
            self.modelDescription = description
            self.configuration = configuration
            self.specification = spec
            self.name = name
            self.specType = specType
            self.compiled = compiled
            self.sharesBase = false
            self.columnar = compiled as? any MLColumnarPredicting
            self.outputNames = description.outputs.map(\.name)
        } catch let error as MLModelError {
            throw error.inModel(name)
        }
    }

    init(description: MLModelDescription, configuration: MLModelConfiguration, specification: CoreML_Specification_Model,
         name: String, specType: String, compiled: any MLCompiledModel, sharesBase: Bool) {
        self.modelDescription = description
        self.configuration = configuration
        self.specification = specification
        self.name = name
        self.specType = specType
        self.compiled = compiled
        self.sharesBase = sharesBase
        self.columnar = compiled as? any MLColumnarPredicting
        self.outputNames = description.outputs.map(\.name)
    }

    /// The registered kind for a spec, and the context it compiles in.
    static func resolveKind(_ spec: CoreML_Specification_Model, configuration: MLModelConfiguration, name: String, depth: Int,
                            resources: MLModelResources? = nil) throws
        -> (specType: String, kind: any MLModelKind.Type, context: MLCompileContext) {
        try MLModelSpec.checkVersion(spec, name: name)
        guard let specType = MLModelSpec.typeName(spec) else {
            throw MLModelError(.invalidModel, "the model has no type")
        }
        let description = try MLModelDescription(spec.description_p, function: configuration.functionName)
        guard let kind = MLModelKindRegistry.shared.kind(for: specType) else {
            let known = MLModelKindRegistry.shared.supportedSpecTypes
            throw MLModelError(.unsupported, "\(specType) models are not supported by Cortado" +
                (known.isEmpty ? " (no model kinds are registered: import Cortado, or call CortadoModels.registerBuiltinKinds())" : "; supported: \(known.joined(separator: ", "))"))
        }
        return (specType, kind, MLCompileContext(modelName: name, description: description, configuration: configuration, depth: depth,
                                                 resources: resources))
    }

    /// Predicts outputs for one input.
    public func prediction(from input: MLFeatureProvider, options: MLPredictionOptions = MLPredictionOptions()) throws -> MLFeatureProvider {
        do {
            try modelDescription.validateInputs(input)
            return try compiled.prediction(from: input, options: options)
        } catch let error as MLModelError {
            throw error.inModel(name)
        }
    }

    /// Predicts outputs for a batch of inputs.
    public func predictions(fromBatch batch: MLBatchProvider, options: MLPredictionOptions = MLPredictionOptions()) throws -> MLBatchProvider {
        do {
            try modelDescription.validateInputs(batch)
            return MLArrayBatchProvider(array: try compiled.predictions(from: batch, options: options))
        } catch let error as MLModelError {
            throw error.inModel(name)
        }
    }
}
