@_exported import CortadoCore
@_exported import CortadoSpec
import CortadoBayesian
import CortadoCustomModel
import CortadoFeatureEngineering
import CortadoGLM
import CortadoKNN
import CortadoLinkedModel
import CortadoMLProgram
import CortadoNeuralNetwork
import CortadoNonMaximumSuppression
import CortadoPipeline
import CortadoSVM
import CortadoTreeEnsemble

/// The built-in model kinds. This is the one place that lists them; everything else
/// (server, CLI, pipelines) finds a kind through `MLModelKindRegistry`.
public enum CortadoModels {
    private static let once: Void = {
        GLMKinds.register()
        SVMKinds.register()
        TreeEnsembleKinds.register()
        FeatureEngineeringKinds.register()
        KNNKinds.register()
        PipelineKinds.register()
        BayesianKinds.register()
        NeuralNetworkKinds.register()
        MLProgramKinds.register()
        LinkedModelKinds.register()
        NonMaximumSuppressionKinds.register()
        CustomModelKinds.register()
    }()

    /// Registers every built-in kind with `MLModelKindRegistry.shared`. Safe to call often.
    public static func registerBuiltinKinds() { _ = once }
}
