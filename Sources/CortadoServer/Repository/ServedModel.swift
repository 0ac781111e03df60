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
    /// Seconds the load took (parse and compile).
    public let loadSeconds: Double
    /// The model's features as Open Inference Protocol tensors, worked out once.
    let tensorInputs: [TensorMapping]
    let tensorOutputs: [TensorMapping]
    /// Gathers calls into batches, when the limits ask for it and the model runs a batch as
    /// one computation; nil otherwise.
    private(set) var batcher: DynamicBatcher?
    /// Output arrays reused by one-row predictions; nil when the outputs can change shape.
    let outputPool: OutputPool?
    /// A ModelInferResponse's model name and version fields (1 and 2) as protobuf bytes,
    /// written once for every response.
    let responseModelFields: [UInt8]

    public init(name: String, version: String, model: MLModel, scheduler: ModelScheduler, source: URL?, loadSeconds: Double) {
        self.name = name
        self.version = version
        self.model = model
        self.scheduler = scheduler
        self.source = source
        self.loadSeconds = loadSeconds
        tensorInputs = TensorMapping.inputs(of: model)
        tensorOutputs = TensorMapping.outputs(of: model)
        var w = ProtobufWriter(capacity: name.utf8.count + version.utf8.count + 8)
        w.string(1, name)
        w.string(2, version)
        responseModelFields = w.bytes
        let limits = scheduler.limits
        outputPool = OutputPool(model: model, capacity: scheduler.concurrency + 1)
        if limits.maxBatchSize > 1 && model.compiled.runsBatchesAsOne {
            batcher = DynamicBatcher(maxBatchSize: limits.maxBatchSize, maxQueueDelayMicroseconds: limits.maxQueueDelayMicroseconds,
                                     limits: limits, pool: scheduler.pool) { [weak self] jobs in
                guard let self else {
                    for job in jobs { job.call.fail(ServeStatus(.unavailable, "the model was unloaded")) }
                    return PendingAnswers()
                }
                return self.execute(jobs, maxRows: limits.maxBatchSize)
            }
        }
    }

    private let functionsLock = NSLock()
    private var functionModels: [String: MLModel] = [:]

    /// The model for one function of a multi-function ML Program: loaded from the same file on
    /// first use and kept with this version. Empty or the default function: `model`.
    func model(function: String) throws -> MLModel {
        let description = model.modelDescription
        if function.isEmpty || function == (description.functionName ?? "main") { return model }
        // Checked against the description first: a name the model lacks never reaches the
        // file (a client repeating a wrong name costs no parse of the model per call).
        guard description.functionNames.contains(function) else {
            let names = description.functionNames.isEmpty ? "one function" : "functions \(description.functionNames.joined(separator: ", "))"
            throw ServeStatus(.invalidArgument, "model '\(name)' has no function '\(function)' (it has \(names))")
        }
        return try functionsLock.withLock {
            if let loaded = functionModels[function] { return loaded }
            guard let source else {
                throw ServeStatus(.failedPrecondition, "model '\(name)' was loaded from bytes: its functions cannot be opened")
            }
            var configuration = model.configuration
            configuration.functionName = function
            let loaded = try MLModel(file: MLModelFile.open(contentsOf: source, name: name, key: configuration.modelKey),
                                     configuration: configuration, name: name)
            functionModels[function] = loaded
            return loaded
        }
    }

    private let seriesLock = NSLock()
    private var seriesCache: [(metrics: ObjectIdentifier, service: String, series: ServerMetrics.Series)] = []

    /// The metrics series this model's calls through `service` count into, looked up once.
    func metricsSeries(_ service: String, in metrics: ServerMetrics) -> ServerMetrics.Series {
        let id = ObjectIdentifier(metrics)
        return seriesLock.withLock {
            if let hit = seriesCache.first(where: { $0.metrics == id && $0.service == service }) { return hit.series }
            let series = metrics.series(model: name, service: service)
            seriesCache.append((id, service, series))
            return series
        }
    }

    /// Calls running (batches, with the batcher) and waiting.
    public var depth: (running: Int, queued: Int) { batcher?.depth ?? scheduler.depth }
}
