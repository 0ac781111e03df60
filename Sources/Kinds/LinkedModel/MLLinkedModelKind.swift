import CortadoCore
import CortadoSpec
import Foundation

/// Linked models (`linkedModel`): a model that is another model file, found by name on a
/// search path (see `MLLinkedModelFile`) and loaded through `MLModelCache.shared`, so every
/// model that links the same file shares one compiled copy of it.
///
/// Loading checks the linked file's interface against the linking model's description:
/// every input the file requires must be declared, with a type that fits; every declared
/// output must be one the file produces, with a type that fits; a declared input the file
/// does not read is a mistake too. A missing file, a file that does not load and an
/// interface that does not match are load errors naming the linking model and the file.
public enum MLLinkedModelKind: MLModelKind {
    public static let specTypes = ["linkedModel"]

    public static func compile(_ spec: CoreML_Specification_Model, context: MLCompileContext) throws -> any MLCompiledModel {
        guard case .linkedModel(let link)? = spec.type else {
            throw MLModelError(.invalidModel, "not a linked model (\(MLModelSpec.typeName(spec) ?? "no type"))")
        }
        let file = try MLLinkedModelFile(link)
        let url = try file.resolve(configuration: context.configuration)
        let linked: MLModel
        do {
            linked = try MLModelCache.shared.model(contentsOf: url, configuration: context.configuration)
        } catch let error as MLModelError {
            throw MLModelError(error.code, model: context.modelName, feature: error.feature,
                               "linked model file \(url.path) failed to load: \(error.description)")
        }
        try checkInterface(of: linked, at: url, against: context.description)
        return MLCompiledLinkedModel(linked: linked, url: url, declaredOutputs: context.description.outputs.map(\.name))
    }

    /// Throws an error naming the file and the first feature that does not match.
    static func checkInterface(of linked: MLModel, at url: URL, against declared: MLModelDescription) throws {
        func mismatch(_ feature: String, _ what: String) -> MLModelError {
            MLModelError(.invalidModel, feature: feature, "the linked model file \(url.path) does not match this model's description: \(what)")
        }
        let file = linked.modelDescription
        let declaredInputs = declared.inputDescriptionsByName
        let fileInputs = file.inputDescriptionsByName
        for input in file.inputs {
            guard let given = declaredInputs[input.name] else {
                if input.isOptional { continue }
                throw mismatch(input.name, "the file reads input '\(input.name)' (\(input.typeSummary)), which this model does not declare")
            }
            if let why = MLFeatureTypeCheck.mismatch(produced: given, expected: input) {
                throw mismatch(input.name, "input '\(input.name)': \(why)")
            }
        }
        for input in declared.inputs where fileInputs[input.name] == nil {
            throw mismatch(input.name, "this model declares input '\(input.name)', which the file does not read (it reads \(file.inputs.map(\.name).joined(separator: ", ")))")
        }
        let fileOutputs = file.outputDescriptionsByName
        for output in declared.outputs {
            guard let produced = fileOutputs[output.name] else {
                throw mismatch(output.name, "this model declares output '\(output.name)', which the file does not produce (it produces \(file.outputs.map(\.name).joined(separator: ", ")))")
            }
            if let why = MLFeatureTypeCheck.mismatch(produced: produced, expected: output) {
                throw mismatch(output.name, "output '\(output.name)': \(why)")
            }
        }
    }
}

/// A linked model, ready to run: the shared model it forwards to.
final class MLCompiledLinkedModel: MLCompiledModel, @unchecked Sendable {
    /// The shared model (one per file and configuration, see `MLModelCache`).
    let linked: MLModel
    let url: URL
    /// The declared outputs, when the file produces more than those (else nil: no filtering).
    let keptOutputs: Set<String>?

    init(linked: MLModel, url: URL, declaredOutputs: [String]) {
        self.linked = linked
        self.url = url
        let produced = Set(linked.modelDescription.outputs.map(\.name))
        let declared = Set(declaredOutputs)
        keptOutputs = produced == declared ? nil : declared
    }

    var classLabels: MLClassLabels? { linked.compiled.classLabels }
    var runsBatchesAsOne: Bool { linked.compiled.runsBatchesAsOne }

    var summary: [String] {
        ["links \(url.path) (\(linked.specType), shared)"] + linked.compiled.summary.map { "  " + $0 }
    }

    func prediction(from input: MLFeatureProvider, options: MLPredictionOptions) throws -> MLFeatureProvider {
        keep(try linked.prediction(from: input, options: options))
    }

    func predictions(from batch: MLBatchProvider, options: MLPredictionOptions) throws -> [MLFeatureProvider] {
        let out = try linked.predictions(fromBatch: batch, options: options)
        return (0..<out.count).map { keep(out.features(at: $0)) }
    }

    private func keep(_ out: MLFeatureProvider) -> MLFeatureProvider {
        guard let keptOutputs else { return out }
        var values: [String: MLFeatureValue] = [:]
        for name in keptOutputs { if let v = out.featureValue(for: name) { values[name] = v } }
        return MLDictionaryFeatureProvider(dictionary: values)
    }
}

/// A columnar batch goes to the shared model whole, so a linked network or tree ensemble runs
/// it as one (the shared model's own columnar path, or its rows).
extension MLCompiledLinkedModel: MLColumnarPredicting {
    func predictions(columns: MLFeatureColumns, options: MLPredictionOptions) throws -> MLFeatureColumns {
        let out = try linked.predictions(fromColumns: columns, options: options)
        guard let keptOutputs else { return out }
        let kept = MLFeatureColumns(count: out.count, owner: out)
        for name in out.names where keptOutputs.contains(name) { kept.set(name, out.column(name)!) }
        return kept
    }
}
