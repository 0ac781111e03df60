import CortadoCore
import Foundation

/// One prediction call as a task of the serving core: a deadline and a cancellation (its
/// `call`), and the steps a batch runs separately: decode the request into a columnar batch
/// (and check it, on a worker), and encode the answer from the batch's output columns; its
/// completion is `deliver` or `fail`. The dynamic batcher runs the columns of several jobs as
/// one model execution and hands each job its rows of the output columns. A codec subclasses
/// it (one object per call, holding what `decode` read for `encode`: the steps run in order,
/// one thread at a time) or hands closures to `ClosureJob`.
class PredictionJob: @unchecked Sendable {
    let call: any PredictionCall
    /// Where `observe` counts the call (nil: not counted, as in tests).
    private let metrics: (model: ServedModel, service: String, registry: ServerMetrics)?

    init(call: any PredictionCall, metrics: (model: ServedModel, service: String, registry: ServerMetrics)?) {
        self.call = call
        self.metrics = metrics
    }

    /// Decodes and checks the request: one column per input, rows along the first axis. Each
    /// kind of job overrides it.
    func decode() throws -> MLFeatureColumns { preconditionFailure("\(type(of: self)) must override decode()") }

    /// Encodes the response from this job's output columns (its rows of the execution's).
    /// Each kind of job overrides it.
    func encode(_ outputs: MLFeatureColumns) throws -> [UInt8] { preconditionFailure("\(type(of: self)) must override encode(_:)") }

    /// Sends what `encode` made (on the worker, after the model's slot was given back). A job
    /// whose answer needs more than the message (HTTP headers, a frame prefix written in
    /// place) overrides it.
    func deliver(_ message: [UInt8]) { call.respond(message) }

    /// Told once how the call ended and how long it took (metrics, and the call log when
    /// on). Looked up here, on the worker, not on the loop thread that builds the job.
    func observe(_ code: ServeStatus.Code, _ nanoseconds: UInt64, error: String = "") {
        guard let metrics else { return }
        metrics.model.metricsSeries(metrics.service, in: metrics.registry).observe(code: code, seconds: Double(nanoseconds) / 1e9)
        metrics.registry.callLog?.record(requestID: call.requestID, model: metrics.model.name, version: metrics.model.version,
                                         service: metrics.service, status: code, error: error, nanoseconds: nanoseconds)
    }

    /// The call's trace context when tracing is on and it is sampled (decided once).
    private var traceContext: CallTracer.Context?
    private var traceDecided = false

    private func sampledTrace() -> (CallTracer, CallTracer.Context)? {
        guard let tracer = metrics?.registry.tracer else { return nil }
        if !traceDecided {
            traceDecided = true
            traceContext = tracer.sample(call)
        }
        return traceContext.map { (tracer, $0) }
    }

    /// Where the model records its parts for this call's trace; nil when it is not traced.
    func computeSpans() -> MLComputeSpans? {
        sampledTrace().map { MLComputeSpans(layers: $0.0.layers) }
    }

    /// Records the call's steps in the trace, when tracing is on (see `CallTracer.record`).
    func trace(_ code: ServeStatus.Code, queued: UInt64 = 0, input: UInt64 = 0, infer: UInt64 = 0, encodeBegan: UInt64 = 0,
               done: UInt64, compute: [MLComputeSpans.Span] = []) {
        guard let metrics, let (tracer, context) = sampledTrace() else { return }
        tracer.record(context, call: call, model: metrics.model.name, version: metrics.model.version, service: metrics.service,
                      status: code, queued: queued, input: input, infer: infer, encodeBegan: encodeBegan, done: done, compute: compute)
    }

    /// Answers the call with an error, counted for the model.
    func fail(_ status: ServeStatus, statistics: ServedModelStatistics) {
        call.fail(status)
        let now = DispatchTime.now().uptimeNanoseconds
        let total = now - call.receivedAt
        statistics.recordFailure(total: total)
        observe(status.code, total, error: status.message)
        trace(status.code, done: now)
    }

    /// The status a job gets without running: the client left, or the deadline passed while it
    /// waited; nil when it should run.
    func skipReason(queued: UInt64, now: UInt64 = DispatchTime.now().uptimeNanoseconds) -> ServeStatus? {
        if call.isCancelled { return ServeStatus(.cancelled, "the client cancelled the call") }
        if let deadline = call.deadline, now >= deadline {
            return ServeStatus(.deadlineExceeded, "the deadline passed while the request waited \(queued / 1000) µs in the queue")
        }
        return nil
    }
}

/// A job whose steps are closures (services off the hot path, tests).
final class ClosureJob: PredictionJob, @unchecked Sendable {
    private let decodeColumns: () throws -> MLFeatureColumns
    private let encodeOutputs: (MLFeatureColumns) throws -> [UInt8]

    init(call: any PredictionCall, metrics: (model: ServedModel, service: String, registry: ServerMetrics)?,
         decode: @escaping () throws -> MLFeatureColumns, encode: @escaping (MLFeatureColumns) throws -> [UInt8]) {
        decodeColumns = decode
        encodeOutputs = encode
        super.init(call: call, metrics: metrics)
    }

    override func decode() throws -> MLFeatureColumns { try decodeColumns() }
    override func encode(_ outputs: MLFeatureColumns) throws -> [UInt8] { try encodeOutputs(outputs) }
}

/// What a job's `decode` step read, kept for its `encode` step (same call, one thread at a
/// time: the steps run in order on workers).
final class JobState<T>: @unchecked Sendable {
    var value: T?
    init() {}
}
