import CortadoCore

/// Registers the Pipeline model kinds.
public enum PipelineKinds {
    public static let all: [any MLModelKind.Type] = [MLPipelineKind.self]

    public static func register(in registry: MLModelKindRegistry = .shared) {
        for kind in all { registry.register(kind) }
    }
}
