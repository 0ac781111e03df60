import CortadoCore

/// Registers the TreeEnsemble model kinds.
public enum TreeEnsembleKinds {
    public static let all: [any MLModelKind.Type] = [TreeEnsembleRegressorKind.self, TreeEnsembleClassifierKind.self]

    public static func register(in registry: MLModelKindRegistry = .shared) {
        for kind in all { registry.register(kind) }
    }
}
