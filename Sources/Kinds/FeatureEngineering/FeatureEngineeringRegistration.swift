import CortadoCore

/// Registers the FeatureEngineering model kinds: the transformers scikit-learn pipelines
/// convert to, and the small glue models pipelines are built from.
public enum FeatureEngineeringKinds {
    public static let all: [any MLModelKind.Type] = [
        MLOneHotEncoderKind.self,
        MLImputerKind.self,
        MLScalerKind.self,
        MLNormalizerKind.self,
        MLDictVectorizerKind.self,
        MLFeatureVectorizerKind.self,
        MLCategoricalMappingKind.self,
        MLArrayFeatureExtractorKind.self,
        MLIdentityKind.self,
    ]

    public static func register(in registry: MLModelKindRegistry = .shared) {
        for kind in all { registry.register(kind) }
    }
}
