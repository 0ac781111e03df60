import CortadoCore
import CortadoGRPC
import Foundation
import Logging

/// Everything `cortado serve` runs: the repository, the worker pool, the three services on
/// one gRPC port, the Open Inference Protocol's REST form on an HTTP/1.1 port, metrics on
/// another, and the graceful drain. Knows no model kind:
/// kinds are found through `MLModelKindRegistry`, filled by whoever links them.
public final class CortadoServerApp: @unchecked Sendable {
    public struct Options: Sendable {
        public var repository: URL?
        public var transport = GRPCServerConfiguration()
        /// Worker threads for predictions (0: one per core).
        public var workers = 0
        /// Threads one prediction may use inside a model (`MLModelConfiguration.threadCount`; 0: every core).
        public var modelThreads = 0
        public var limits = ModelScheduler.Limits()
        /// Per-model limits from the config file, by model name.
        public var limitsByModel: [String: ModelScheduler.Limits] = [:]
        /// The key for encrypted models (nil: `CORTADO_MODEL_KEY` when set).
        public var modelKey: MLModelKey?
        /// What clients may change (model control, shared memory); everything off by default.
        public var policy = ServerPolicy()
        /// Seconds between looks at the repository folder under `ModelControl.poll`.
        public var pollInterval: Double = 5
        /// Bearer tokens with scopes (`--auth-tokens`); nil: calls need no token.
        public var authorizer: CallAuthorizer?
        /// Models that must be loaded for the server to be ready (`--require-models`).
        public var requiredModels: [String] = []
        /// Sessions of stateful models: how many, and how long one may idle.
        public var sessions = SessionRegistry.Limits()
        /// One log line per finished prediction call (`--log-calls`; `CallLog`).
        public var logCalls = false
        /// Per-call traces (`--trace-file`, `CallTracer`), closed when the server has stopped.
        public var tracer: CallTracer?
        /// Updates: how many at once, rows and memory (`UpdateRunner`).
        public var updates = UpdateRunner.Limits()
        /// Compiled variants kept in memory (`VariantRegistry`).
        public var maxVariants = 1000
        /// Where variant heads are stored (`--variant-store`; nil: the repository folder).
        public var variantStore: URL?
        public init() {}
    }

    /// Cortado's version, kept here only: ServerMetadata and `cortado --version` report it, and
    /// CHANGELOG.md's newest entry names it (Tests/CLI checks both).
    public static let version = "0.1.0"
    public let options: Options
    public let context: ServerContext
    public let pool: WorkerPool
    public let router = GRPCRouter()
    private var server: GRPCServer?
    private var poller: RepositoryPoller?
    private let logger: Logger

    public init(options: Options, logger: Logger = Logger(label: "cortado")) {
        self.options = options
        self.logger = logger
        pool = WorkerPool(threads: options.workers)
        let key = options.modelKey, root = options.repository, threads = options.modelThreads
        let repository = ModelRepository(root: root, pool: pool, defaultLimits: options.limits,
                                         loader: { url, name in try ModelRepository.loadFile(url, name: name, repository: root, key: key, threads: threads) })
        repository.limitsByModel = options.limitsByModel
        repository.modelKey = key
        repository.modelThreads = threads
        context = ServerContext(repository: repository, policy: options.policy, requiredModels: options.requiredModels,
                                sessions: options.sessions, updates: options.updates, maxVariants: options.maxVariants,
                                variantStore: (options.variantStore ?? root).map(VariantStore.init(folder:)), logger: logger)
        if options.logCalls { context.metrics.callLog = CallLog(logger: logger) }
        context.metrics.tracer = options.tracer
        let router = self.router
        let health = HealthService(context: context, services: { router.serviceNames })
        let services: [any ScopedService] = [PredictorService(context: context), InferenceService(context: context), health]
        for service in services {
            router.register(service)
            options.authorizer?.register(service)
        }
        if let authorizer = options.authorizer { router.admit(with: authorizer.admission()) }
        let variants = context.variants
        repository.onChange = { [weak health, weak variants] name, what in
            logger.info("model \(what)", metadata: ["model": "\(name)"])
            // A model that loads learns its stored variants (a listing: heads are read on use).
            if let found = variants?.learnStored(model: name), found > 0 {
                logger.info("stored variants found", metadata: ["model": "\(name)", "variants": "\(found)"])
            }
            health?.statusesChanged()
        }
    }

    /// Loads the repository and starts listening. Models that fail to load are logged and
    /// listed as unavailable; the others serve.
    @discardableResult
    public func start() throws -> (grpcPort: Int, httpPort: Int?, restPort: Int?) {
        if let root = options.repository {
            let found = context.repository.discover()
            logger.info("loading \(found.count) model(s) from \(root.path)")
            for (name, message) in context.repository.loadAll() {
                logger.error("model failed to load", metadata: ["model": "\(name)", "error": "\(message)"])
            }
            if options.policy.modelControl == .poll {
                let poller = RepositoryPoller(repository: context.repository, queue: context.adminQueue, interval: options.pollInterval, logger: logger)
                poller.start()
                self.poller = poller
                logger.info("watching the repository for changes", metadata: ["poll_interval_s": "\(options.pollInterval)"])
            }
        }
        let logger = self.logger
        if let authorizer = options.authorizer {
            logger.info("calls need bearer tokens", metadata: ["tokens": "\(authorizer.tokenCount)", "file": "\(authorizer.path)"])
        }
        if let problem = context.readinessProblem {
            logger.warning("not ready", metadata: ["reason": "\(problem)"])
        }
        let server = GRPCServer(configuration: options.transport, router: router, httpHandler: { [weak self] request in
            self?.http(request) ?? HTTPGetResponse(status: 503, text: "stopping\n")
        }, rest: RESTService(context: context).http, events: { event in
            switch event {
            case .listening(let host, let grpc, let http, let rest):
                logger.info("listening", metadata: ["host": "\(host)", "grpc_port": "\(grpc)", "http_port": "\(rest.map(String.init) ?? "none")",
                                                    "metrics_port": "\(http.map(String.init) ?? "none")"])
            case .protocolError(let peer, let message):
                logger.warning("protocol error", metadata: ["peer": "\(peer)", "error": "\(message)"])
            case .connectionRefused(let peer, let reason):
                logger.warning("connection closed", metadata: ["peer": "\(peer)", "reason": "\(reason)"])
            case .draining(let calls, let connections):
                logger.info("draining", metadata: ["calls_in_flight": "\(calls)", "connections": "\(connections)"])
            case .stopped:
                logger.info("stopped")
            case .connectionOpened(let peer):
                logger.debug("connection opened", metadata: ["peer": "\(peer)"])
            case .connectionClosed(let peer):
                logger.debug("connection closed", metadata: ["peer": "\(peer)"])
            }
        })
        self.server = server
        let ports = try server.start()
        if let certificate = server.tlsCertificate {
            logger.info("TLS on", metadata: ["certificate": "\(certificate)", "client_certificates": "\(options.transport.tls?.clientCAPath == nil ? "not asked" : "required")"])
        }
        return ports
    }

    /// SIGHUP: reads the TLS files and the token file again. What fails to load is logged
    /// and the old one stays in use; new connections (and, for tokens, new calls) get what
    /// loaded.
    public func reload() {
        if let server, options.transport.tls != nil {
            do {
                let certificate = try server.reloadTLS()
                logger.info("TLS certificate reloaded", metadata: ["certificate": "\(certificate)"])
            } catch {
                logger.error("TLS reload failed; the certificate in use stays", metadata: ["error": "\(error)"])
            }
        }
        if let authorizer = options.authorizer {
            do {
                let count = try authorizer.reload()
                logger.info("tokens reloaded", metadata: ["tokens": "\(count)", "file": "\(authorizer.path)"])
            } catch {
                logger.error("token reload failed; the tokens in use stay", metadata: ["error": "\(error)"])
            }
        }
    }

    /// Graceful stop: readiness turns false, new connections are refused, calls in flight finish.
    public func shutdown() {
        context.beginDrain()
        poller?.stop()
        server?.shutdown()
    }

    public func wait() {
        server?.wait()
        pool.stop()
        options.tracer?.close()
    }

    /// The metrics port: `/metrics` (Prometheus), `/healthz` (live), `/readyz` (ready). With
    /// tokens on, `/metrics` needs one with the `metrics` scope; the probes stay open.
    func http(_ request: HTTPGetRequest) -> HTTPGetResponse {
        switch request.path {
        case "/metrics":
            if let authorizer = options.authorizer, let refused = authorizer.check(http: request, needs: .metrics) { return refused }
            let loaded = context.repository.loaded
            let text = context.metrics.render(gauges: [
                ("cortado_models_loaded", "Models serving.", [("", Double(loaded.count))]),
                ("cortado_queue_depth", "Requests waiting in a model's queue.", loaded.map { ("model=\"\(ServerMetrics.label($0.name))\"", Double($0.depth.queued)) }),
                ("cortado_running", "Predictions running, by model.", loaded.map { ("model=\"\(ServerMetrics.label($0.name))\"", Double($0.depth.running)) }),
                ("cortado_calls_in_flight", "gRPC calls handed to handlers and not yet answered.", [("", Double(server?.callsInFlight ?? 0))]),
                ("cortado_connections", "Open HTTP/2 connections.", [("", Double(server?.connectionCount ?? 0))]),
                ("cortado_http_connections", "Open HTTP/1.1 connections on the REST port.", [("", Double(server?.restConnectionCount ?? 0))]),
                ("cortado_ready", "1 when the server is ready (not draining, every required model loaded).", [("", context.isReady ? 1 : 0)]),
            ])
            return HTTPGetResponse(status: 200, contentType: "text/plain; version=0.0.4", body: Array(text.utf8))
        case "/healthz", "/v2/health/live":
            return HTTPGetResponse(status: 200, text: "ok\n")
        case "/readyz", "/v2/health/ready":
            if let problem = context.readinessProblem { return HTTPGetResponse(status: 503, text: "not ready: \(problem)\n") }
            return HTTPGetResponse(status: 200, text: "ready\n")
        default:
            return HTTPGetResponse(status: 404, text: "not found: try /metrics, /healthz or /readyz\n")
        }
    }
}
