import CortadoCore

/// Registers the FeatureEngineering model kinds.
public enum FeatureEngineeringKinds {
    public static let all: [any MLModelKind.Type] = []

    public static func register(in registry: MLModelKindRegistry = .shared) {
        for kind in all { registry.register(kind) }
    }
}
