import CortadoSpec
import Foundation

/// Trains an updatable model on examples (CoreML.framework's `MLUpdateTask`).
///
/// Creating a task loads the model, checks that it is updatable and that its kind can
/// train it, resolves the hyperparameters (the spec's defaults, overridden by
/// `MLModelConfiguration.updateParameters`, each within the values the spec allows) and
/// checks every example against the model's training inputs: all of these throw at once,
/// before any training. `resume()` then trains on a background thread, calling the progress
/// handlers, and the completion handler once at the end. The original file is never
/// touched; `MLUpdateContext.write(to:)` writes the trained model where asked.
///
/// Training that diverges (a loss or weight that is not finite) stops the task: it fails
/// with an error naming the epoch and mini-batch, and its context refuses to write.
public final class MLUpdateTask: @unchecked Sendable {
    /// The model as loaded, before any training.
    public let model: MLModel
    private let trainer: any MLModelTrainer
    private let handlers: MLUpdateProgressHandlers
    private let configuration: MLModelConfiguration
    private let lock = NSLock()
    private var currentState = MLTaskState.suspended
    private var failure: Error?
    private var cancelled = false
    private let done = DispatchSemaphore(value: 0)

    /// Where the task stands.
    public var state: MLTaskState { lock.lock(); defer { lock.unlock() }; return currentState }
    /// Why the task failed, once it has.
    public var error: Error? { lock.lock(); defer { lock.unlock() }; return failure }

    public convenience init(forModelAt url: URL, trainingData: MLBatchProvider, configuration: MLModelConfiguration? = nil,
                            progressHandlers: MLUpdateProgressHandlers) throws {
        let configuration = configuration ?? MLModelConfiguration()
        try self.init(model: MLModel(contentsOf: url, configuration: configuration), trainingData: trainingData,
                      configuration: configuration, progressHandlers: progressHandlers)
    }

    public convenience init(forModelAt url: URL, trainingData: MLBatchProvider, configuration: MLModelConfiguration? = nil,
                            completionHandler: @escaping (MLUpdateContext) -> Void) throws {
        try self.init(forModelAt: url, trainingData: trainingData, configuration: configuration,
                      progressHandlers: MLUpdateProgressHandlers(forEvents: [], progressHandler: nil, completionHandler: completionHandler))
    }

    /// A task for a model already loaded (Cortado's addition: a server trains what it holds).
    /// The hyperparameter overrides come from `configuration.updateParameters`.
    public init(model: MLModel, trainingData: MLBatchProvider, configuration: MLModelConfiguration? = nil,
                progressHandlers: MLUpdateProgressHandlers) throws {
        let configuration = configuration ?? model.configuration
        self.model = model
        self.handlers = progressHandlers
        self.configuration = configuration
        do {
            guard model.specification.isUpdatable else {
                throw MLModelError(.unsupported, "the model is not updatable (its spec does not set isUpdatable)")
            }
            guard let updatable = model.compiled as? any MLUpdatableCompiledModel else {
                throw MLModelError(.unsupported, "\(model.specType) models cannot be updated by Cortado")
            }
            let description = model.modelDescription
            guard !description.trainingInputs.isEmpty else {
                throw MLModelError(.invalidModel, "the model is marked updatable but declares no training inputs")
            }
            trainer = try updatable.makeTrainer(specification: model.specification, description: description,
                                                overrides: configuration.updateParameters)
            guard trainingData.count > 0 else {
                throw MLModelError(.featureType, "the training data holds no examples")
            }
            try Self.validate(trainingData, against: description.trainingInputs)
            try trainer.prepare(trainingData)
        } catch let error as MLModelError {
            throw error.inModel(model.name)
        }
    }

    /// Checks each example against the training inputs; errors name the example (0-based).
    static func validate(_ data: MLBatchProvider, against inputs: [MLFeatureDescription]) throws {
        for i in 0..<data.count {
            let row = data.features(at: i)
            for input in inputs {
                guard let value = row.featureValue(for: input.name), !value.isUndefined else {
                    if input.isOptional { continue }
                    throw MLModelError.featureType(input.name, "training example \(i): required training input is missing (expected \(input.typeSummary))")
                }
                do { try input.validate(value) } catch var error as MLModelError {
                    error.message = "training example \(i): " + error.message
                    throw error
                }
            }
        }
    }

    /// Starts training on a background thread (Core ML's `resume()`); a second call does nothing.
    public func resume() {
        lock.lock()
        guard currentState == .suspended else { lock.unlock(); return }
        currentState = .running
        lock.unlock()
        let thread = Thread { [self] in
            run()
            done.signal()
        }
        thread.name = "cortado.update"
        thread.start()
    }

    /// Asks training to stop after the current mini-batch. The task reads `cancelling` until
    /// it stops; the completion handler still runs, with the model as trained until then.
    public func cancel() {
        lock.lock(); defer { lock.unlock() }
        cancelled = true
        if currentState == .running { currentState = .cancelling }
    }

    /// Blocks until the completion handler has returned (Cortado's addition, for callers that
    /// are not event-driven: the CLI, tests, a server worker). Returns at once if the task was
    /// never resumed.
    public func waitUntilCompleted() {
        lock.lock()
        let started = currentState != .suspended
        lock.unlock()
        guard started else { return }
        done.wait()
        done.signal()  // later waiters return too
    }

    private var isCancelled: Bool { lock.lock(); defer { lock.unlock() }; return cancelled }

    private func context(_ event: MLUpdateProgressEvent, _ metrics: [MLMetricKey: MLParameterValue], spec: CoreML_Specification_Model?) -> MLUpdateContext {
        MLUpdateContext(task: self, event: event, metrics: metrics, parameters: trainer.parameters, specification: spec,
                        configuration: configuration, name: model.name)
    }

    private func notify(_ event: MLUpdateProgressEvent, _ metrics: @autoclosure () -> [MLMetricKey: MLParameterValue]) throws {
        guard handlers.interestedEvents.contains(event), let progress = handlers.progressHandler else { return }
        progress(context(event, metrics(), spec: try trainer.currentSpecification()))
    }

    private func run() {
        var metrics: [MLMetricKey: MLParameterValue] = [:]
        var finalSpec: CoreML_Specification_Model?
        do {
            try notify(.trainingBegin, [:])
            epochs: for epoch in 0..<trainer.epochCount {
                if isCancelled { break }
                var stopped = false
                var handlerError: Error?
                let loss = try trainer.runEpoch(epoch) { batch, loss in
                    var m: [MLMetricKey: MLParameterValue] = [.epochIndex: .int(Int64(epoch)), .miniBatchIndex: .int(Int64(batch))]
                    if let loss { m[.lossValue] = .double(loss) }
                    do { try notify(.miniBatchEnd, m) } catch { handlerError = error }
                    stopped = isCancelled || handlerError != nil
                    return !stopped
                }
                if let handlerError { throw handlerError }
                metrics = [.epochIndex: .int(Int64(epoch))]
                if let loss { metrics[.lossValue] = .double(loss) }
                if stopped { break epochs }
                try notify(.epochEnd, metrics)
            }
            finalSpec = try trainer.currentSpecification()
            lock.lock(); currentState = .completed; lock.unlock()
        } catch {
            lock.lock()
            currentState = .failed
            failure = (error as? MLModelError)?.inModel(model.name) ?? error
            lock.unlock()
        }
        handlers.completionHandler(context([], metrics, spec: finalSpec))
    }
}
