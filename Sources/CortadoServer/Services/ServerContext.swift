import CortadoCore
import CortadoGRPC
import Foundation
import Logging
import SwiftProtobuf

/// What every service shares: the repository, metrics, logs, shared-memory regions, and the
/// helpers that decode a request, run it in the right place and answer.
public final class ServerContext: @unchecked Sendable {
    public let repository: ModelRepository
    public let metrics: ServerMetrics
    public let sharedMemory = SharedMemoryRegistry()
    public var logger: Logger
    /// Load and unload run here: they read files and compile, so never on the loop thread,
    /// and one at a time so two loads of one model cannot race.
    let adminQueue = DispatchQueue(label: "cortado.admin")
    public let startedAt = Date()
    /// False while draining: readiness probes answer NOT_SERVING.
    private let readyLock = NSLock()
    private var readyFlag = true

    public init(repository: ModelRepository, metrics: ServerMetrics = ServerMetrics(), logger: Logger = Logger(label: "cortado")) {
        self.repository = repository
        self.metrics = metrics
        self.logger = logger
    }

    public var isReady: Bool {
        get { readyLock.withLock { readyFlag } }
        set { readyLock.withLock { readyFlag = newValue } }
    }

    func decode<M: SwiftProtobuf.Message>(_ type: M.Type, _ call: GRPCServerCall) throws(GRPCStatus) -> M {
        do {
            return try M(serializedBytes: call.request)
        } catch {
            throw GRPCStatus(.invalidArgument, "the request is not a valid \(M.protoMessageName) message: \(error)")
        }
    }

    func reply(_ call: GRPCServerCall, _ message: some SwiftProtobuf.Message) {
        do {
            call.respond(try message.serializedBytes())
        } catch {
            call.fail(GRPCStatus(.internal, "could not encode the response: \(error)"))
        }
    }

    /// Maps any error to the status a client should see.
    static func status(for error: Error) -> GRPCStatus {
        if let status = error as? GRPCStatus { return status }
        if let error = error as? MLModelError {
            switch error.code {
            case .featureType, .parse: return GRPCStatus(.invalidArgument, error.description)
            case .unsupported: return GRPCStatus(.unimplemented, error.description)
            default: return GRPCStatus(.internal, error.description)
            }
        }
        return GRPCStatus(.internal, "\(error)")
    }

    /// Answers at once on the loop thread: for quick, non-blocking methods only.
    func inline<M: SwiftProtobuf.Message>(_ call: GRPCServerCall, _ body: () throws -> M) {
        do { reply(call, try body()) } catch { call.fail(Self.status(for: error)) }
    }

    /// Runs a slow administrative method (load, unload) off the loop thread.
    func admin<M: SwiftProtobuf.Message>(_ call: GRPCServerCall, _ body: @escaping @Sendable () throws -> M) {
        adminQueue.async { [self] in
            do { reply(call, try body()) } catch { call.fail(Self.status(for: error)) }
        }
    }

    /// Runs a prediction on the model's scheduler: skipped when the client has gone or the
    /// deadline passed while queued; timed and counted either way.
    func infer(_ call: GRPCServerCall, model: ServedModel, service: String, _ body: @escaping @Sendable () throws -> (rows: Int, bytes: [UInt8])) {
        do {
            try model.scheduler.submit { [self] in
                let started = DispatchTime.now().uptimeNanoseconds
                let queued = started - call.receivedAt
                if call.isCancelled {
                    finish(call, model: model, service: service, GRPCStatus(.cancelled, "the client cancelled the call"), started: started)
                    return
                }
                if call.isPastDeadline {
                    finish(call, model: model, service: service, GRPCStatus(.deadlineExceeded, "the deadline passed while the request waited \(queued / 1000) µs in the queue"), started: started)
                    return
                }
                do {
                    let (rows, bytes) = try body()
                    let done = DispatchTime.now().uptimeNanoseconds
                    call.respond(bytes)
                    model.statistics.recordSuccess(rows: rows, total: done - call.receivedAt, queue: queued, input: 0, infer: done - started, output: 0)
                    metrics.observe(model: model.name, service: service, code: .ok, seconds: Double(done - call.receivedAt) / 1e9)
                } catch {
                    finish(call, model: model, service: service, Self.status(for: error), started: started)
                }
            }
        } catch {
            finish(call, model: model, service: service, error, started: DispatchTime.now().uptimeNanoseconds)
        }
    }

    private func finish(_ call: GRPCServerCall, model: ServedModel, service: String, _ status: GRPCStatus, started: UInt64) {
        call.fail(status)
        let now = DispatchTime.now().uptimeNanoseconds
        model.statistics.recordFailure(total: now - call.receivedAt)
        metrics.observe(model: model.name, service: service, code: status.code, seconds: Double(now - call.receivedAt) / 1e9)
    }

    /// Decodes a prediction request and finds its model; on failure answers the call (and
    /// counts it) and returns nil.
    func admit<M: SwiftProtobuf.Message>(_ type: M.Type, _ call: GRPCServerCall, service: String,
                                         model: (M) -> (name: String, version: String)) -> (M, ServedModel)? {
        do {
            let request = try decode(M.self, call)
            let (name, version) = model(request)
            return (request, try repository.model(name, version: version))
        } catch {
            rejected(call, model: "", service: service, Self.status(for: error))
            return nil
        }
    }

    /// Records a call that failed before reaching a model (unknown model, bad request).
    func rejected(_ call: GRPCServerCall, model: String, service: String, _ status: GRPCStatus) {
        call.fail(status)
        metrics.observe(model: model, service: service, code: status.code, seconds: Double(DispatchTime.now().uptimeNanoseconds - call.receivedAt) / 1e9)
    }
}
