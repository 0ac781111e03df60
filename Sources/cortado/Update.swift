import ArgumentParser
import CortadoModels
import Foundation

struct Update: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Train an updatable model on JSON lines of examples (Core ML's MLUpdateTask).",
        discussion: """
        Each line of --training is one JSON object holding the model's training inputs (the \
        features and the target, encoded as `cortado predict` reads inputs; `cortado inspect` \
        lists them). Training runs as the model declares it (loss, optimizer, epochs, shuffle); \
        the options override its hyperparameters within the values it allows. A line per epoch \
        with the loss goes to stderr. The trained model, still updatable, is written to \
        --output only when training succeeds: bad rows, a model that is not updatable, \
        hyperparameters out of range, or a loss that diverges exit with status 1 and write nothing.
        """
    )

    @Argument(help: "The updatable model (.mlmodel).")
    var model: String

    @OptionGroup var keyOptions: ModelKeyOptions

    @Option(help: "JSON-lines file of training examples; '-' reads stdin.")
    var training: String

    @Option(name: .shortAndLong, help: "Where to write the trained model (.mlmodel).")
    var output: String

    @Option(help: "Epochs (MLParameterKey.epochs).")
    var epochs: Int?

    @Option(help: "Learning rate (MLParameterKey.learningRate).")
    var learningRate: Double?

    @Option(help: "Examples per mini-batch (MLParameterKey.miniBatchSize).")
    var batchSize: Int?

    @Option(help: "SGD momentum (MLParameterKey.momentum).")
    var momentum: Double?

    @Option(help: "Adam's beta1 (MLParameterKey.beta1).")
    var beta1: Double?

    @Option(help: "Adam's beta2 (MLParameterKey.beta2).")
    var beta2: Double?

    @Option(help: "Adam's epsilon (MLParameterKey.eps).")
    var eps: Double?

    @Flag(inversion: .prefixedNo, help: "Visit the examples in a new random order each epoch (default: as the model says).")
    var shuffle: Bool?

    @Option(help: "Seed of the shuffle (MLParameterKey.seed).")
    var seed: Int64?

    @OptionGroup var plugins: PluginOptions

    func run() throws {
        plugins.load()
        var configuration = keyOptions.configuration()
        var overrides: [MLParameterKey: MLParameterValue] = [:]
        if let epochs { overrides[.epochs] = .int(Int64(epochs)) }
        if let learningRate { overrides[.learningRate] = .double(learningRate) }
        if let batchSize { overrides[.miniBatchSize] = .int(Int64(batchSize)) }
        if let momentum { overrides[.momentum] = .double(momentum) }
        if let beta1 { overrides[.beta1] = .double(beta1) }
        if let beta2 { overrides[.beta2] = .double(beta2) }
        if let eps { overrides[.eps] = .double(eps) }
        if let shuffle { overrides[.shuffle] = .bool(shuffle) }
        if let seed { overrides[.seed] = .int(seed) }
        configuration.updateParameters = overrides

        let loaded: MLModel
        do { loaded = try loadModel(model, configuration: configuration) } catch { fail("\(error)") }
        guard loaded.modelDescription.isUpdatable else {
            fail("model '\(loaded.name)': the model is not updatable (its spec does not set isUpdatable); nothing was written")
        }

        // Rows are read against the training inputs, so a missing target or a wrong type or
        // shape names its line and feature.
        var trainingDescription = loaded.modelDescription
        trainingDescription.inputs = loaded.modelDescription.trainingInputs
        let rows = JSONRowsInput(path: training)
        var examples: [MLFeatureProvider] = []
        rows.forEachRow(trainingDescription) { line, row in
            do {
                let features = try row.get()
                try trainingDescription.validateInputs(features)
                examples.append(features)
            } catch {
                fail("\(rows.name) line \(line): \(error); nothing was written")
            }
        }

        let stderr = FileHandle.standardError
        var epochCount = 1
        var result: MLUpdateContext?
        let handlers = MLUpdateProgressHandlers(forEvents: [.trainingBegin, .epochEnd], progressHandler: { context in
            if context.event == .trainingBegin {
                epochCount = Int(context.parameters[.epochs]?.intValue ?? 1)
                let settings = context.parameters.sorted { $0.key.rawValue < $1.key.rawValue }.map { "\($0.key)=\($0.value)" }
                stderr.write(Data("cortado: training on \(examples.count) examples (\(settings.joined(separator: ", ")))\n".utf8))
                return
            }
            let epoch = Int(context.metrics[.epochIndex]?.intValue ?? 0) + 1
            let loss = context.metrics[.lossValue].map { "loss \($0.doubleValue)" } ?? "\(examples.count) examples appended"
            stderr.write(Data("cortado: epoch \(epoch)/\(epochCount): \(loss)\n".utf8))
        }, completionHandler: { result = $0 })

        let task: MLUpdateTask
        do {
            task = try MLUpdateTask(model: loaded, trainingData: MLArrayBatchProvider(array: examples),
                                    configuration: configuration, progressHandlers: handlers)
        } catch { fail("\(error); nothing was written") }
        task.resume()
        task.waitUntilCompleted()
        guard task.state != .failed, let result else {
            fail("\(task.error.map { "\($0)" } ?? "training failed"); nothing was written")
        }
        // The trained model must load before it is written.
        do {
            _ = try result.model
            try result.write(to: URL(fileURLWithPath: output))
        } catch { fail("\(error); nothing was written") }
        stderr.write(Data("cortado: wrote \(output)\n".utf8))
    }
}
