import CortadoCore

/// Registers the KNN model kinds.
public enum KNNKinds {
    public static let all: [any MLModelKind.Type] = [MLKNearestNeighborsKind.self]

    public static func register(in registry: MLModelKindRegistry = .shared) {
        for kind in all { registry.register(kind) }
    }
}
