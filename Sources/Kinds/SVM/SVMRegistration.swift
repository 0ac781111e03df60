import CortadoCore

/// Registers the SVM model kinds.
public enum SVMKinds {
    public static let all: [any MLModelKind.Type] = [SVMRegressorKind.self, SVMClassifierKind.self]

    public static func register(in registry: MLModelKindRegistry = .shared) {
        for kind in all { registry.register(kind) }
    }
}
