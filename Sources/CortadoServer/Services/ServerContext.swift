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
    /// What clients may change: model control and shared memory.
    public let policy: ServerPolicy
    public var logger: Logger
    /// Load and unload run here: they read files and compile, so never on the loop thread,
    /// and one at a time so two loads of one model cannot race.
    let adminQueue = DispatchQueue(label: "cortado.admin")
    /// Models that must be loaded for the server to be ready (`--require-models`).
    public let requiredModels: [String]
    private let readyLock = NSLock()
    private var draining = false
    private var drainObservers: [@Sendable () -> Void] = []

    /// Sessions of stateful models (their states live here between calls).
    public let sessions: SessionRegistry
    /// Variants made by Update, and where updates run.
    public let variants: VariantRegistry
    public let updates: UpdateRunner

    public init(repository: ModelRepository, metrics: ServerMetrics = ServerMetrics(), policy: ServerPolicy = ServerPolicy(),
                requiredModels: [String] = [], sessions: SessionRegistry.Limits = SessionRegistry.Limits(),
                updates: UpdateRunner.Limits = UpdateRunner.Limits(), maxVariants: Int = 1000, variantStore: VariantStore? = nil,
                logger: Logger = Logger(label: "cortado")) {
        self.repository = repository
        self.sessions = SessionRegistry(limits: sessions)
        self.variants = VariantRegistry(maxLoaded: maxVariants, store: variantStore)
        // A stored variant's base is the version of its model served now.
        variants.baseLookup = { [unowned repository] name throws(ServeStatus) in
            let served = try repository.model(name)
            return (served.model, served.version)
        }
        self.updates = UpdateRunner(limits: updates)
        self.policy = policy
        self.metrics = metrics
        self.requiredModels = requiredModels
        self.logger = logger
    }

    /// Whether the server should get traffic: not draining, and every required model loaded.
    /// `/readyz`, OIP ServerReady and the health service's overall status all read this, so a
    /// load balancer never sends calls that a missing model would fail.
    public var isReady: Bool { readinessProblem == nil }

    /// Why the server is not ready, or nil when it is.
    public var readinessProblem: String? {
        if isDraining { return "draining" }
        guard !requiredModels.isEmpty else { return nil }
        let missing = requiredModels.filter { (try? repository.model($0)) == nil }
        guard !missing.isEmpty else { return nil }
        let reasons = Dictionary(repository.index().map { ($0.name, $0.reason) }, uniquingKeysWith: { a, _ in a })
        return missing.map { name in
            let reason = reasons[name].flatMap { $0.isEmpty ? nil : $0 } ?? (reasons[name] == nil ? "not in the repository" : "not loaded")
            return "required model '\(name)' is not loaded: \(reason)"
        }.joined(separator: "; ")
    }

    /// True once a graceful shutdown began.
    public var isDraining: Bool { readyLock.withLock { draining } }

    /// Starts the drain as far as the services are concerned: readiness turns false and the
    /// drain observers (health watchers) run, once.
    public func beginDrain() {
        let observers = readyLock.withLock { () -> [@Sendable () -> Void] in
            guard !draining else { return [] }
            draining = true
            return drainObservers
        }
        for observe in observers { observe() }
    }

    /// Calls `body` when the drain begins (the health watchers end their watches).
    func observeDrain(_ body: @escaping @Sendable () -> Void) {
        readyLock.withLock { drainObservers.append(body) }
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

    /// Maps any error to the gRPC status a client should see (as `ServeStatus(for:)` does for
    /// the serving core).
    static func status(for error: Error) -> GRPCStatus {
        if let status = error as? GRPCStatus { return status }
        return GRPCStatus(ServeStatus(for: error))
    }

    /// Answers at once on the loop thread: for quick, non-blocking methods only.
    func inline<M: SwiftProtobuf.Message>(_ call: GRPCServerCall, _ body: () throws -> M) {
        do { reply(call, try body()) } catch { call.fail(Self.status(for: error)) }
    }

    /// Answers `call` with `denied` when the policy refuses it, before its request is read;
    /// true when the call may go on.
    func permitted(_ call: GRPCServerCall, _ denied: GRPCStatus?) -> Bool {
        guard let denied else { return true }
        call.fail(denied)
        return false
    }

    /// Runs a slow administrative method (load, unload) off the loop thread.
    func admin<M: SwiftProtobuf.Message>(_ call: GRPCServerCall, _ body: @escaping @Sendable () throws -> M) {
        adminQueue.async { [self] in
            do { reply(call, try body()) } catch { call.fail(Self.status(for: error)) }
        }
    }

    /// Runs a prediction call on a worker: through the model's dynamic batcher when it has
    /// one, else alone on the model's scheduler. `rows` decodes and checks the request there;
    /// `encode` answers from its rows' results. Calls whose client left or whose deadline
    /// passed while queued are not run; every call is timed and counted.
    /// The rows become columns (`MLFeatureColumns(stacking:)`: the model's inputs that any
    /// row holds), and `encode` reads the output columns' rows.
    func infer(_ call: GRPCServerCall, model: ServedModel, service: String,
               rows: @escaping () throws -> [MLFeatureProvider], encode: @escaping ([MLFeatureProvider]) throws -> [UInt8]) {
        let inputs = model.model.modelDescription.inputs.map(\.name)
        submit(ClosureJob(call: call, metrics: (model, service, metrics), decode: {
            let rows = try rows()
            let names = inputs.filter { name in rows.contains { $0.featureValue(for: name) != nil } }
            return try MLFeatureColumns(stacking: rows, names: names)
        }, encode: { outputs in
            try encode((0..<outputs.count).map { outputs.features(at: $0) })
        }), to: model)
    }

    /// Queues a prediction job on its model (its batcher, or its scheduler); a full queue
    /// answers the call at once.
    func submit(_ job: PredictionJob, to model: ServedModel) {
        do {
            if let batcher = model.batcher {
                try batcher.submit(job)
            } else {
                try model.scheduler.enqueue { model.execute(CollectionOfOne(job)) }
            }
        } catch {
            job.fail(error, statistics: model.statistics)
        }
    }

    /// Finds a prediction request's model from the name and version in its first two fields
    /// (`ProtobufPeek`), without decoding it: the decode and the input checks run on the
    /// worker (`decode` inside the job). On failure answers the call (and counts it) and
    /// returns nil.
    func admit<M: SwiftProtobuf.Message>(_ type: M.Type, _ call: GRPCServerCall, service: String) -> ServedModel? {
        do {
            let ref = try ProtobufPeek.modelRef(call.request, message: M.protoMessageName)
            return try repository.model(ref.name, version: ref.version)
        } catch {
            rejected(call, model: "", service: service, Self.status(for: error))
            return nil
        }
    }

    /// Records a call that failed before reaching a model (unknown model, bad request).
    func rejected(_ call: GRPCServerCall, model: String, service: String, _ error: any Error) {
        let status = Self.status(for: error)
        call.fail(status)
        let nanoseconds = DispatchTime.now().uptimeNanoseconds - call.receivedAt
        let code = status.serveStatus.code
        metrics.observe(model: model, service: service, code: code, seconds: Double(nanoseconds) / 1e9)
        metrics.callLog?.record(requestID: call.requestID, model: model, version: "", service: service, status: code, error: status.message,
                                nanoseconds: nanoseconds)
    }
}
