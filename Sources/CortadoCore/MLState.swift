import Foundation

/// The state a stateful model keeps between predictions (CoreML.framework's `MLState`):
/// made by `MLModel.makeState()`, passed to each prediction of one session. Not thread-safe:
/// one session's predictions run one at a time.
public final class MLState: @unchecked Sendable {
    /// The kind's own storage of the state tensors.
    public let storage: AnyObject
    /// The model that made it; a state feeds only that model.
    let owner: ObjectIdentifier
    let lock = NSLock()

    init(storage: AnyObject, owner: ObjectIdentifier) {
        self.storage = storage; self.owner = owner
    }
}

/// A compiled model that keeps state between predictions (iOS18 ML Programs with state ops).
public protocol MLStatefulCompiledModel: MLCompiledModel {
    /// True when this model has states (a kind may adopt the protocol for all its models).
    var keepsState: Bool { get }
    /// Fresh state storage (every state tensor zero).
    func makeStateStorage() throws -> AnyObject
    /// One prediction that reads and updates `state`.
    func prediction(from input: MLFeatureProvider, state: AnyObject, options: MLPredictionOptions) throws -> MLFeatureProvider
}

extension MLModel {
    /// True when the model keeps state between predictions.
    public var isStateful: Bool { (compiled as? any MLStatefulCompiledModel)?.keepsState ?? false }

    /// A new state for a session of predictions (every state tensor zero).
    public func makeState() throws -> MLState {
        guard let stateful = compiled as? any MLStatefulCompiledModel, stateful.keepsState else {
            throw MLModelError(.generic, model: name, "the model keeps no state")
        }
        return MLState(storage: try stateful.makeStateStorage(), owner: ObjectIdentifier(self))
    }

    /// Predicts with a state, which the prediction reads and updates.
    public func prediction(from input: MLFeatureProvider, using state: MLState, options: MLPredictionOptions = MLPredictionOptions()) throws -> MLFeatureProvider {
        guard let stateful = compiled as? any MLStatefulCompiledModel else {
            throw MLModelError(.generic, model: name, "the model keeps no state")
        }
        guard state.owner == ObjectIdentifier(self) else {
            throw MLModelError(.generic, model: name, "the state was made by another model")
        }
        do {
            try modelDescription.validateInputs(input)
            state.lock.lock(); defer { state.lock.unlock() }
            return try stateful.prediction(from: input, state: state.storage, options: options)
        } catch let error as MLModelError {
            throw error.inModel(name)
        }
    }
}
