import CortadoSpec
import Foundation
import SwiftProtobuf

/// Writes Cortado's compiled form of a model (`cortado compile`): the spec plus, when the
/// model's kind adopts `MLPrecompilingModelKind`, that kind's precompiled sections. Kinds that do
/// not adopt it are stored as their spec and compiled from it at load.
public enum MLModelCompiler {
    /// The compiled container for an opened model (a specification, possibly decrypted).
    public static func compiledContainer(_ file: MLModelFile, configuration: MLModelConfiguration = MLModelConfiguration()) throws -> Data {
        let name = file.name
        guard file.payload == nil else {
            throw MLModelError(.invalidModel, model: name, "the model is already compiled; compile its .mlmodel instead")
        }
        do {
            let (specType, kind, context) = try MLModel.resolveKind(file.specification, configuration: configuration, name: name, depth: 0,
                                                                    resources: file.resources)
            var precompiled = MLPrecompiledModel(specification: file.specification, sections: [])
            if let precompiling = kind as? any MLPrecompilingModelKind.Type {
                precompiled = try precompiling.precompile(file.specification, context: context)
            } else {
                _ = try kind.compile(file.specification, context: context) // a model that does not load is not written
            }
            let spec: Data
            do { spec = try precompiled.specification.serializedBytes() } catch {
                throw MLModelError(.invalidModel, "cannot serialize the specification: \(error)")
            }
            return try MLCompiledContainer.write([
                MLCompiledSection(name: MLCompiledContainer.kindSection, data: Data(specType.utf8)),
                MLCompiledSection(name: MLCompiledContainer.specSection, data: spec),
            ] + precompiled.sections + resourceSections(file, precompiled: precompiled))
        } catch let error as MLModelError {
            throw error.inModel(name)
        }
    }

    /// The model's files besides the spec (a package's weights), as sections, unless the
    /// kind's precompiled sections already replace them.
    static func resourceSections(_ file: MLModelFile, precompiled: MLPrecompiledModel) throws -> [MLCompiledSection] {
        guard let resources = file.resources else { return [] }
        let written = Set(precompiled.sections.map(\.name))
        return try resources.allFiles(model: file.name).compactMap { item in
            let name = MLModelResources.sectionPrefix + item.path
            return written.contains(name) ? nil : MLCompiledSection(name: name, data: item.data)
        }
    }
}
