import CortadoSpec

/// A compiled model whose kind can train it: what `MLUpdateTask` asks of a kind, so that the
/// core and the CLI never name one. The kind reads how to train from the spec (loss, optimizer,
/// hyperparameters, which weights are updatable) and refuses, with a message naming the part,
/// what it cannot train.
public protocol MLUpdatableCompiledModel: MLCompiledModel {
    /// A trainer starting from `specification`'s parameters. `overrides` replace the spec's
    /// default hyperparameters and must lie within the values the spec allows.
    func makeTrainer(specification: CoreML_Specification_Model, description: MLModelDescription,
                     overrides: [MLParameterKey: MLParameterValue]) throws -> any MLModelTrainer
}

/// One training run of one model, driven by `MLUpdateTask`: the examples are handed over
/// once, then epochs run one at a time.
public protocol MLModelTrainer: AnyObject {
    /// The hyperparameters in force (the spec's defaults with the overrides applied), as
    /// `MLUpdateContext.parameters` reports them.
    var parameters: [MLParameterKey: MLParameterValue] { get }
    /// Epochs to run.
    var epochCount: Int { get }
    /// Reads the training examples (already checked against the training inputs'
    /// descriptions). Throws for an example the model cannot learn from, naming it.
    func prepare(_ examples: MLBatchProvider) throws
    /// Runs one epoch. `miniBatchEnd(index, loss)` follows each mini-batch and returns false
    /// to stop. Returns the epoch's mean loss, or nil for models trained without a loss.
    /// Throws when training diverges (a loss or parameter that is not finite).
    func runEpoch(_ index: Int, miniBatchEnd: (_ batch: Int, _ loss: Double?) -> Bool) throws -> Double?
    /// The model with the parameters learned so far: a spec that is still updatable.
    func currentSpecification() throws -> CoreML_Specification_Model
}
