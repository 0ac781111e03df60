import CortadoCore

/// Registers the GLM model kinds.
public enum GLMKinds {
    public static let all: [any MLModelKind.Type] = [GLMRegressorKind.self, GLMClassifierKind.self]

    public static func register(in registry: MLModelKindRegistry = .shared) {
        for kind in all { registry.register(kind) }
    }
}
