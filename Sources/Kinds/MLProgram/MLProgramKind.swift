import CortadoCore
import CortadoSpec
import Foundation

/// ML Programs (`mlProgram`): a MIL program of typed operations, its weights in the blob
/// files of an `.mlpackage`.
enum MLProgramKind: MLModelKind {
    static let specTypes = ["mlProgram"]

    static func compile(_ spec: CoreML_Specification_Model, context: MLCompileContext) throws -> any MLCompiledModel {
        let decoder = MILValueDecoder(resources: context.resources, model: context.modelName)
        let function = context.description.functionName ?? context.configuration.functionName ?? "main"
        do {
            // Convolution runs go to the neural-network kind, compiled in this context (threads included).
            let plan = try MILPlanner.plan(spec.mlProgram, function: function, decoder: decoder, lowering: MILLowering(context: context))
            let cores = Swift.max(1, ProcessInfo.processInfo.activeProcessorCount)
            let threads = context.configuration.threadCount > 0 ? Swift.min(context.configuration.threadCount, cores) : cores
            return try MLCompiledProgram(plan: plan, description: context.description, model: context.modelName, threads: threads)
        } catch let error as MILError {
            throw MLModelError(error.isUnsupported ? .unsupported : .invalidModel, model: context.modelName, error.description)
        }
    }

    static var coverage: MLKindCoverage? {
        MLKindCoverage(title: "ML Program operations (iOS15–iOS18 opsets)", items: MILOpRegistry.coverageItems, partName: "ops")
    }
}

/// Registers the ML Program kind.
public enum MLProgramKinds {
    public static func register(in registry: MLModelKindRegistry = .shared) {
        registry.register(MLProgramKind.self)
    }
}

extension MILError {
    var isUnsupported: Bool {
        if case .unsupported = self { return true }
        return false
    }
}
