import CortadoCore

/// Registers the Bayesian model kinds.
public enum BayesianKinds {
    public static let all: [any MLModelKind.Type] = [MLBayesianProbitKind.self]

    public static func register(in registry: MLModelKindRegistry = .shared) {
        for kind in all { registry.register(kind) }
    }
}
