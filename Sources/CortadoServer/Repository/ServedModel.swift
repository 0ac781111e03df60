import CortadoCore
import Foundation

/// One loaded version of a model in the repository, with its scheduler and statistics.
/// Requests hold a reference while they run, so replacing or unloading a model lets the
/// calls already admitted finish on the version they started with.
public final class ServedModel: @unchecked Sendable {
    public let name: String
    public let version: String
    public let model: MLModel
    public let scheduler: ModelScheduler
    public let statistics = ServedModelStatistics()
    public let source: URL?
    public let loadedAt = Date()
    /// Seconds the load took (parse and compile).
    public let loadSeconds: Double
    /// The model's features as Open Inference Protocol tensors, worked out once.
    let tensorInputs: [TensorMapping]
    let tensorOutputs: [TensorMapping]

    public init(name: String, version: String, model: MLModel, scheduler: ModelScheduler, source: URL?, loadSeconds: Double) {
        self.name = name
        self.version = version
        self.model = model
        self.scheduler = scheduler
        self.source = source
        self.loadSeconds = loadSeconds
        tensorInputs = TensorMapping.inputs(of: model)
        tensorOutputs = TensorMapping.outputs(of: model)
    }
}
