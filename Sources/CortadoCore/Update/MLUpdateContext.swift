import CortadoSpec
import Foundation

/// What a progress or completion handler sees (CoreML.framework's `MLUpdateContext`): the
/// task, the event, the metrics so far and the model as trained so far.
public final class MLUpdateContext: @unchecked Sendable {
    public let task: MLUpdateTask
    /// The event this context reports; empty for the completion handler.
    public let event: MLUpdateProgressEvent
    /// `lossValue` (when the model has a loss), `epochIndex`, `miniBatchIndex`.
    public let metrics: [MLMetricKey: MLParameterValue]
    /// The hyperparameters the update runs with.
    public let parameters: [MLParameterKey: MLParameterValue]
    /// The model's spec with the parameters learned so far (still updatable); nil when the
    /// update failed before training began.
    public let specification: CoreML_Specification_Model?
    private let configuration: MLModelConfiguration
    private let name: String
    private let lock = NSLock()
    private var loaded: MLModel?

    init(task: MLUpdateTask, event: MLUpdateProgressEvent, metrics: [MLMetricKey: MLParameterValue],
         parameters: [MLParameterKey: MLParameterValue], specification: CoreML_Specification_Model?,
         configuration: MLModelConfiguration, name: String) {
        self.task = task
        self.event = event
        self.metrics = metrics
        self.parameters = parameters
        self.specification = specification
        self.configuration = configuration
        self.name = name
    }

    /// The model as trained so far, loaded (compiled) on first use; the task's original model
    /// when training never began.
    public var model: MLModel {
        get throws {
            lock.lock(); defer { lock.unlock() }
            if let loaded { return loaded }
            guard let specification else { return task.model }
            let model = try MLModel(specification: specification, configuration: configuration, name: name)
            loaded = model
            return model
        }
    }

    /// Writes the model as trained so far to `url` as an `.mlmodel` (a spec that is still
    /// updatable). Refuses after a failed update: the old model must stay as it was.
    public func write(to url: URL) throws {
        if task.state == .failed {
            throw MLModelError(.generic, model: name, "the update failed (\(task.error.map { "\($0)" } ?? "unknown error")); nothing was written")
        }
        try MLModel.write(specification ?? task.model.specification, to: url, name: name)
    }
}

extension MLModel {
    /// Writes the model's spec to `url` as an `.mlmodel` file (CoreML.framework's
    /// `MLWritable.write(to:)`).
    public func write(to url: URL) throws {
        try Self.write(specification, to: url, name: name)
    }

    /// Writes a spec to `url`, through a temporary file beside it, so that a failure never
    /// leaves a half-written model where a good one was.
    static func write(_ spec: CoreML_Specification_Model, to url: URL, name: String) throws {
        let bytes: Data
        do { bytes = try spec.serializedBytes() } catch {
            throw MLModelError(.io, model: name, "cannot serialize the model: \(error)")
        }
        do { try bytes.write(to: url, options: .atomic) } catch {
            throw MLModelError(.io, model: name, "cannot write \(url.path): \(error.localizedDescription)")
        }
    }
}
