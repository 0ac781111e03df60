import ArgumentParser
import CortadoGRPC
import CortadoModels
import CortadoPlugins
import CortadoServer
import Foundation
import Logging

struct Serve: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Serve every model in a repository over gRPC and HTTP/REST.",
        discussion: """
        Serves cortado.v1.Predictor (typed Core ML features), inference.GRPCInferenceService \
        (the Open Inference Protocol / Triton gRPC API, for tritonclient and perf_analyzer) and \
        grpc.health.v1.Health on one port (--port, 8001), the Open Inference Protocol over \
        HTTP/1.1 (KServe v2 REST, as Triton serves it; tritonclient.http) on --http-port (8000), \
        and Prometheus metrics (/metrics), /healthz and /readyz over plain HTTP on the metrics \
        port (8002). All bind to --host.

        REST endpoints (JSON; errors are {"error": "..."} with 400 bad request, 404 unknown \
        model or path, 403 model control turned off, 413 body over --max-message-size, 431 \
        request head over 64 KiB, 429 queue full or connection budget spent, 503 unavailable \
        or draining, 500 internal): GET /v2 (server metadata), /v2/health/live, \
        /v2/health/ready; GET /v2/models/NAME[/versions/V] (metadata), .../ready, .../config, \
        .../stats (and /v2/models/stats for every model); POST .../infer with \
        {"id", "parameters": {"binary_data_output": bool}, "inputs": [{"name", "shape", \
        "datatype", "data"}], "outputs": [{"name", "parameters": {"binary_data": bool, \
        "classification": K}}]}; Triton's binary tensor data extension: with an \
        Inference-Header-Content-Length header the body is that many bytes of JSON followed by \
        the inputs' bytes (each input's parameters.binary_data_size), and binary outputs follow \
        the answer's JSON, whose length is the answer's Inference-Header-Content-Length; POST \
        /v2/repository/index, /v2/repository/models/NAME/load and .../unload (403 unless \
        --model-control explicit or poll). Keep-alive and pipelining: answers come in request \
        order; a connection reads on while fewer than 64 of its requests await answers.

        Repository layout: DIR/<name>/<version>/model.mlmodel (the highest version serves) or \
        DIR/<name>.mlmodel. A version folder may instead hold model.cortado (from `cortado \
        compile`) or model.cortado-enc (from `cortado encrypt`; the key from --key-file or \
        CORTADO_MODEL_KEY), preferred in that order; files are read by their first bytes. Linked \
        models resolve against the linking model's folder, then DIR (e.g. DIR/shared/x.mlmodel \
        with the search path "shared"); a file linked by several models is loaded once and \
        shared. SIGTERM or SIGINT drains: calls in flight finish, then exit 0.

        Kernels: neural networks run on the widest kernel path the CPU has (x86-64: avx512, \
        avx2, portable; aarch64: neon, portable); the environment variable \
        CORTADO_ISA=avx512|avx2|neon|portable forces a narrower one (`cortado report` and \
        `inspect` print the path in use).

        Config file (JSON; flags win): {"host", "port", "httpPort", "metricsPort", "workers", "maxQueue", \
        "maxConcurrency", "maxMessageSize", "drainTimeout", \
        "maxBatchSize", "maxQueueDelayUs", "modelControl", "pollInterval", "allowSharedMemory", \
        "sharedMemoryPrefix", "maxStreamBuffer", "maxConnectionBuffer", "maxProcessBuffer", \
        "maxConnections", "maxConnectionsPerPeer", "headerTimeout", "tlsCert", "tlsKey", "tlsClientCA", \
        "authTokens", "requireModels": ["a", "b"], "maxSessions", "sessionIdleTimeout", \
        "maxConcurrentUpdates", "maxUpdateRows", "maxUpdateMemory", "maxVariants", "variantStore", \
        "traceFile", "traceSampleRate", "traceLayers", "traceMaxSize", \
        "models": {"<name>": {"maxConcurrency": N, "maxQueue": N, "maxBatchSize": N, "maxQueueDelayUs": N}}}.

        Model control (--model-control, as Triton's --model-control-mode): with none (the \
        default) the models found at start serve and cortado.v1.Predictor Load and Unload, \
        RepositoryModelLoad/Unload and model bytes sent over RPC answer PERMISSION_DENIED; \
        explicit lets clients load and unload; poll does too and also looks at the repository \
        every --poll-interval seconds: changed or added models are loaded and swapped in, \
        removed ones unloaded. Shared memory (SystemSharedMemoryRegister) answers \
        PERMISSION_DENIED unless --allow-shared-memory; a registered key must start with \
        --shared-memory-prefix (default /cortado) and hold no '..' and no '/' after the first \
        character. perf_analyzer --shared-memory=system registers "/" + its region name: start \
        the server with --shared-memory-prefix / to allow any key.

        Per-client budgets: a request message is held in memory from its first bytes until \
        its call is answered. One stream may hold --max-stream-buffer bytes, one connection \
        --max-connection-buffer, the whole server --max-process-buffer; a message that would \
        go over one gets RESOURCE_EXHAUSTED at once (the rest of its bytes are dropped), and \
        while a connection's or the server's budget is spent new streams are refused \
        (RST_STREAM REFUSED_STREAM, which clients retry). HTTP/2 flow control follows the \
        budgets: received bytes are acknowledged (WINDOW_UPDATE) only once admitted or \
        dropped, and the windows offered never exceed them. --max-connections and \
        --max-connections-per-peer close connections beyond the limits at once; a client \
        must finish each header block (and a new connection its first frame) within \
        --header-timeout seconds.

        Dynamic batching (--max-batch-size N > 1): calls to a model that runs a batch as one \
        computation (neural networks, tree ensembles, pipelines holding them) are gathered, up \
        to N calls or until the oldest waited --max-queue-delay-us, and run as one execution; \
        a row that fails fails only its own call.

        TLS (--tls-cert and --tls-key, PEM; OpenSSL 3): the gRPC port speaks HTTP/2 inside TLS \
        1.2 or 1.3 and ALPN must select h2; plaintext clients fail their handshake. The metrics \
        port serves HTTPS with the same certificate (it never asks for a client certificate, so \
        probes work). --tls-client-ca FILE turns on mutual TLS on the gRPC port: a client \
        certificate is required and must chain to a CA in FILE. SIGHUP reads the certificate, \
        key and CA files again: new connections use them, open ones keep theirs; a reload that \
        fails keeps the files in use and logs why.

        Tokens (--auth-tokens FILE): one token per line, `TOKEN SCOPE[,SCOPE...]` (at least 16 \
        characters; scopes infer, admin, metrics; `#` starts a comment). Every gRPC call then \
        needs the metadata `authorization: Bearer TOKEN`: none or an unknown token gets \
        UNAUTHENTICATED, a token without the method's scope PERMISSION_DENIED, checked before the \
        request is read. infer: Predict, PredictBatch, List, Describe, ModelInfer, \
        ModelStreamInfer, ServerMetadata, ModelReady, ModelMetadata, ModelConfig, \
        ModelStatistics, ListVariants. admin: Load, Unload, Update, DeleteVariant, RepositoryIndex, RepositoryModelLoad/Unload, \
        SystemSharedMemoryRegister/Status/Unregister. metrics: /metrics on the metrics port \
        (the `Authorization: Bearer TOKEN` header; 401 or 403 without). Open without a token, \
        for probes: grpc.health.v1.Health, ServerLive, ServerReady, /healthz, /readyz. SIGHUP \
        reads the token file again (a file that fails to parse keeps the tokens in use). Use \
        tokens with TLS: over plaintext they travel in the clear.

        Updates (cortado.v1.Predictor Update, Core ML's MLUpdateTask; model control: needs \
        --model-control explicit or poll and, with tokens, the admin scope): the request's rows \
        hold the model's training inputs (features and target, typed as Predict's inputs); the \
        answer streams one UpdateEvent per epoch with the loss, then the result. Without a \
        variant name the trained model serves as the model's next version (the old one serves \
        until it is ready); with one it becomes that variant of the model (trained further when \
        it exists), which PredictRequest.variant (and PredictBatchRequest.variant) selects. A \
        variant shares its base's compiled layers where the kind can (neural networks: all but \
        the layers the update changed). A variant is stored as a head, only what differs from \
        its base (a network: the layers the update changed) and the base version, in \
        DIR/<model>/variants/<variant>.head of the repository or of --variant-store DIR, written \
        atomically; at start, and when a model loads, the stored variants are listed (no file \
        is read) and each is read, merged with its base and compiled on first use. A head \
        whose base version is not the one loaded answers FAILED_PRECONDITION, an unreadable \
        or corrupt one DATA_LOSS naming the file; other calls go on. A store that cannot be \
        written leaves the variant in memory only (a warning, UpdateResult.stored false). \
        Variants are listed by ListVariants (stored, loaded), dropped with their file by \
        DeleteVariant, and at most --max-variants stay compiled (the least recently used are \
        dropped, a stored one with its spec, and compiled again on their next use). Training runs on its own threads at a lower \
        priority than predictions, at most --max-concurrent-updates at once, each with at most \
        --max-update-rows rows and all with at most --max-update-memory MiB of examples; a \
        client that cancels cancels its update; bad rows, hyperparameters out of range or a loss \
        that diverges answer INVALID_ARGUMENT, a model that is not updatable FAILED_PRECONDITION, \
        and nothing is replaced.

        Readiness (--require-models a,b): /readyz (503), OIP ServerReady and the health \
        service's overall status ("") are not ready while a listed model is not loaded (it \
        failed to load, is missing, or was unloaded), and while draining.
        """
    )

    @Option(name: .long, help: "Model repository folder.")
    var models: String = "examples/repository"

    @OptionGroup var keyOptions: ModelKeyOptions

    @Option(name: .long, help: "A JSON config file (see above).")
    var config: String?

    @Option(name: .long, help: "Address to listen on (default 127.0.0.1; 0.0.0.0 or :: for every interface).")
    var host: String?

    @Option(name: .long, help: "gRPC port (default 8001; 0 picks a free port, printed in the log).")
    var port: Int?

    @Option(name: .long, help: "HTTP/1.1 port for the Open Inference Protocol's REST form (KServe v2 / Triton HTTP; default 8000; 0 turns it off).")
    var httpPort: Int?

    @Option(name: .long, help: "Plain-HTTP port for /metrics, /healthz, /readyz (default 8002; --metrics-port=-1 turns it off).")
    var metricsPort: Int?

    @Option(name: .long, help: "Worker threads running predictions (default: one per core less the event loop's, at least 1).")
    var workers: Int?

    @Option(name: .long, help: "Threads one prediction may use inside a model (neural-network kernels; default 0: every core). 1 suits many concurrent calls, more suits few large ones.")
    var modelThreads: Int?

    @Option(name: .long, help: "Requests a model may queue beyond those running; more get RESOURCE_EXHAUSTED (default 1024).")
    var maxQueue: Int?

    @Option(name: .long, help: "Predictions of one model running at once (default: the worker count).")
    var maxConcurrency: Int?

    @Option(name: .long, help: "Dynamic batching: calls gathered into one execution, for models that run a batch as one computation (default 0: off).")
    var maxBatchSize: Int?

    @Option(name: .long, help: "Dynamic batching: microseconds the oldest gathered call waits for more before its batch runs anyway (default 0: batch only what waits while the model is busy).")
    var maxQueueDelayUs: Int?

    @Option(name: .long, help: "Largest request message in bytes; larger get RESOURCE_EXHAUSTED (default 67108864).")
    var maxMessageSize: Int?

    @Option(name: .long, help: "Seconds a shutdown waits for calls in flight (default 30).")
    var drainTimeout: Double?

    @Option(name: .long, help: "none, explicit or poll: whether clients may load and unload models, and whether the server reloads changed files (default none).")
    var modelControl: String?

    @Option(name: .long, help: "Seconds between looks at the repository with --model-control poll (default 5).")
    var pollInterval: Double?

    @Flag(name: .long, help: "Let clients register system shared-memory regions (default off: PERMISSION_DENIED).")
    var allowSharedMemory = false

    @Option(name: .long, help: "The prefix every shared-memory key must start with (default /cortado; / allows every key, as perf_analyzer needs).")
    var sharedMemoryPrefix: String?

    @Option(name: .long, help: "Bytes of request messages one stream may hold until its call is answered (default: --max-message-size).")
    var maxStreamBuffer: Int?

    @Option(name: .long, help: "Bytes of request messages one connection's calls may hold (default: twice --max-stream-buffer).")
    var maxConnectionBuffer: Int?

    @Option(name: .long, help: "Bytes of request messages all calls together may hold (default: a quarter of physical memory, at most 2 GiB, at least --max-connection-buffer).")
    var maxProcessBuffer: Int?

    @Option(name: .long, help: "Open gRPC connections; more are closed at once (default 1024).")
    var maxConnections: Int?

    @Option(name: .long, help: "Open gRPC connections from one IP address (default 0: no limit; behind a proxy every client shares its address).")
    var maxConnectionsPerPeer: Int?

    @Option(name: .long, help: "Seconds a client has to finish a header block, and a new connection its first frame; 0 turns it off (default 10).")
    var headerTimeout: Double?

    @Option(name: .long, help: ArgumentHelp("TLS: the server's certificate chain (PEM); needs --tls-key. Reloaded on SIGHUP.", valueName: "FILE"))
    var tlsCert: String?

    @Option(name: .long, help: ArgumentHelp("TLS: the certificate's private key (PEM, unencrypted).", valueName: "FILE"))
    var tlsKey: String?

    @Option(name: .long, help: ArgumentHelp("Mutual TLS: CA certificates (PEM) client certificates must chain to; a client certificate is then required on the gRPC port.", valueName: "FILE"))
    var tlsClientCa: String?

    @Option(name: .long, help: ArgumentHelp("Bearer tokens with scopes, one per line: TOKEN SCOPE[,SCOPE...] (infer, admin, metrics). Every gRPC call but health and ServerLive/Ready then needs 'authorization: Bearer TOKEN'. Reloaded on SIGHUP.", valueName: "FILE"))
    var authTokens: String?

    @Option(name: .long, help: ArgumentHelp("Comma-separated model names that must be loaded for /readyz, ServerReady and the overall health status to say ready.", valueName: "a,b"))
    var requireModels: String?

    @Option(name: .long, help: "Sessions of stateful models (cortado.v1.Predictor CreateSession) open at once; more get RESOURCE_EXHAUSTED (default 256).")
    var maxSessions: Int?

    @Option(name: .long, help: "Seconds a session may go without a call before it ends and its state is dropped (default 600).")
    var sessionIdleTimeout: Double?

    @Option(name: .long, help: "Updates (cortado.v1.Predictor Update) training at once; more get RESOURCE_EXHAUSTED (default 1).")
    var maxConcurrentUpdates: Int?

    @Option(name: .long, help: "Training rows one Update may send; more get INVALID_ARGUMENT (default 100000).")
    var maxUpdateRows: Int?

    @Option(name: .long, help: "MiB of training examples all running updates may hold, 8 bytes per value; more get RESOURCE_EXHAUSTED (default 256).")
    var maxUpdateMemory: Int?

    @Option(name: .long, help: "Variants (made by Update) kept compiled in memory; the least recently used beyond are dropped and compiled again on use (default 1000).")
    var maxVariants: Int?

    @Option(name: .long, help: ArgumentHelp("""
        Folder where variants made by Update are stored as heads, DIR/<model>/variants/<variant>.head (default: the \
        model repository). Use it when the repository is read-only; if the store cannot be written an update still \
        serves its variant from memory, logs a warning and answers stored=false.
        """, valueName: "DIR"))
    var variantStore: String?

    @Option(name: .long, help: ArgumentHelp("""
        Write per-call traces to FILE in Chrome's trace event format (open it in ui.perfetto.dev or chrome://tracing): \
        for each traced prediction call, nested spans for the queue wait, input decode and checks, compute and \
        output encoding, with model, version, service, status, x-request-id and a W3C trace context (a client's \
        traceparent, gRPC metadata or HTTP header, keeps its trace id and names the parent span). Off by default; \
        costs nothing when off.
        """, valueName: "FILE"))
    var traceFile: String?

    @Option(name: .long, help: ArgumentHelp("""
        With --trace-file: the fraction of calls traced, 0 to 1 (default 1). A call that brings a traceparent is \
        traced when its sampled flag is set, whatever the rate.
        """, valueName: "R"))
    var traceSampleRate: Double?

    @Flag(name: .long, help: """
        With --trace-file: also a span per layer of a neural network or ML Program under compute (a pipeline's \
        models get spans always). Costs a clock reading per layer, and a traced network runs a batch on one \
        thread instead of splitting it.
        """)
    var traceLayers = false

    @Option(name: .long, help: ArgumentHelp("""
        With --trace-file: the most the trace file may hold, in MiB (default 1024). Any client can ask for its calls \
        to be traced (a sampled traceparent), so once the next call would pass it the file is closed, tracing stops \
        and a warning is logged; serving goes on.
        """, valueName: "MiB"))
    var traceMaxSize: Int?

    @Option(name: .long, help: "trace, debug, info, notice, warning, error or critical (default info).")
    var logLevel: String = "info"

    @Option(name: .long, help: """
        text (default: `TIME LEVEL cortado: [key=value ...] message` lines) or json: one JSON object per line on stderr \
        with time (UTC, ISO 8601), level, label, message and every detail as its own field (errors that stop the \
        server and plugins' log lines too), for log collectors.
        """)
    var logFormat: String = "text"

    @Flag(name: .long, help: """
        Log every finished prediction call at info level: message "call" with request_id (the client's x-request-id, \
        else one made up), model, version, service, status (gRPC code name), latency_ms and, on failure, error.
        """)
    var logCalls = false

    @OptionGroup var plugins: PluginOptions

    struct FileConfig: Decodable {
        struct Model: Decodable { var maxConcurrency: Int?; var maxQueue: Int?; var maxBatchSize: Int?; var maxQueueDelayUs: Int? }
        var host: String?
        var port: Int?
        var httpPort: Int?
        var metricsPort: Int?
        var workers: Int?
        var modelThreads: Int?
        var maxQueue: Int?
        var maxConcurrency: Int?
        var maxBatchSize: Int?
        var maxQueueDelayUs: Int?
        var maxMessageSize: Int?
        var drainTimeout: Double?
        var modelControl: String?
        var pollInterval: Double?
        var allowSharedMemory: Bool?
        var sharedMemoryPrefix: String?
        var maxStreamBuffer: Int?
        var maxConnectionBuffer: Int?
        var maxProcessBuffer: Int?
        var maxConnections: Int?
        var maxConnectionsPerPeer: Int?
        var headerTimeout: Double?
        var tlsCert: String?
        var tlsKey: String?
        var tlsClientCA: String?
        var authTokens: String?
        var requireModels: [String]?
        var maxSessions: Int?
        var sessionIdleTimeout: Double?
        var maxConcurrentUpdates: Int?
        var maxUpdateRows: Int?
        var maxUpdateMemory: Int?
        var maxVariants: Int?
        var variantStore: String?
        var traceFile: String?
        var traceSampleRate: Double?
        var traceLayers: Bool?
        var traceMaxSize: Int?
        var models: [String: Model]?
    }

    func run() throws {
        guard let level = Logger.Level(rawValue: logLevel) else { throw ValidationError("unknown --log-level \(logLevel)") }
        switch logFormat {
        case "text":
            LoggingSystem.bootstrap { label in
                var handler = StreamLogHandler.standardError(label: label)
                handler.logLevel = level
                return handler
            }
        case "json":
            LoggingSystem.bootstrap { label in
                var handler = JSONLogHandler(label: label)
                handler.logLevel = level
                return handler
            }
        default:
            throw ValidationError("unknown --log-format \(logFormat) (text or json)")
        }
        let logger = Logger(label: "cortado")
        if logFormat == "json" {
            // Errors that stop the server and plugins' own lines go through the logger too, so
            // every line on stderr is JSON.
            failureLogger = logger
            CortadoPluginHost.logSink = { level, plugin, text in
                let levels: [Logger.Level] = [.debug, .info, .warning, .error]
                logger.log(level: level >= 0 && level < levels.count ? levels[level] : .info, "\(text)", metadata: ["plugin": "\(plugin)"])
            }
        }
        var file = FileConfig()
        if let config {
            do {
                file = try JSONDecoder().decode(FileConfig.self, from: Data(contentsOf: URL(fileURLWithPath: config)))
            } catch {
                fail("config file \(config): \(error)")
            }
        }
        var isDir: ObjCBool = false
        guard FileManager.default.fileExists(atPath: models, isDirectory: &isDir), isDir.boolValue else {
            fail("model repository \(models) is not a folder (expected DIR/<name>/<version>/model.mlmodel)")
        }
        plugins.load(warn: { logger.warning("\($0)") }, info: { logger.info("\($0)") })
        logger.info("allocator: \(Allocator.description)")
        var options = CortadoServerApp.Options()
        options.modelKey = keyOptions.key()
        options.logCalls = logCalls
        options.repository = URL(fileURLWithPath: models)
        options.transport.host = host ?? file.host ?? "127.0.0.1"
        options.transport.port = port ?? file.port ?? 8001
        let rest = httpPort ?? file.httpPort ?? 8000
        guard rest >= 0 else { throw ValidationError("--http-port must be ≥ 0 (0 turns the REST port off)") }
        options.transport.restPort = rest == 0 ? nil : rest
        let metrics = metricsPort ?? file.metricsPort ?? 8002
        options.transport.httpPort = metrics < 0 ? nil : metrics
        options.transport.maxReceiveMessageSize = maxMessageSize ?? file.maxMessageSize ?? (64 << 20)
        options.transport.drainTimeout = drainTimeout ?? file.drainTimeout ?? 30
        options.workers = workers ?? file.workers ?? 0
        options.modelThreads = modelThreads ?? file.modelThreads ?? 0
        guard options.modelThreads >= 0 else { throw ValidationError("--model-threads must be ≥ 0 (0: every core)") }
        options.limits = .init(maxConcurrency: maxConcurrency ?? file.maxConcurrency ?? 0, maxQueue: maxQueue ?? file.maxQueue ?? 1024,
                               maxBatchSize: maxBatchSize ?? file.maxBatchSize ?? 0, maxQueueDelayMicroseconds: maxQueueDelayUs ?? file.maxQueueDelayUs ?? 0)
        for (name, m) in file.models ?? [:] {
            let d = options.limits
            options.limitsByModel[name] = .init(maxConcurrency: m.maxConcurrency ?? d.maxConcurrency, maxQueue: m.maxQueue ?? d.maxQueue,
                                                maxBatchSize: m.maxBatchSize ?? d.maxBatchSize, maxQueueDelayMicroseconds: m.maxQueueDelayUs ?? d.maxQueueDelayMicroseconds)
        }
        for limits in [options.limits] + Array(options.limitsByModel.values) {
            guard limits.maxQueue >= 0, limits.maxBatchSize >= 0, limits.maxQueueDelayMicroseconds >= 0 else {
                throw ValidationError("--max-queue, --max-batch-size and --max-queue-delay-us (and their config entries) must be ≥ 0")
            }
        }
        guard options.workers >= 0, options.transport.maxReceiveMessageSize > 0 else {
            throw ValidationError("--workers must be ≥ 0, --max-message-size > 0")
        }
        try applyPolicy(to: &options, file: file)
        try applyBudgets(to: &options.transport, file: file)
        try applySecurity(to: &options, file: file)
        if let tracer = options.tracer, let path = traceFile ?? file.traceFile {
            logger.info("tracing calls", metadata: ["file": "\(path)", "sample_rate": "\(tracer.rate)"])
        }

        signal(SIGPIPE, SIG_IGN)
        var sources: [DispatchSourceSignal] = []
        let app = CortadoServerApp(options: options, logger: logger)
        // SIGHUP reloads the certificate and the tokens (and never stops the server).
        signal(SIGHUP, SIG_IGN)
        let reloadable = options.transport.tls != nil || options.authorizer != nil
        let hangup = DispatchSource.makeSignalSource(signal: SIGHUP, queue: .global())
        hangup.setEventHandler {
            guard reloadable else {
                logger.info("signal SIGHUP: nothing to reload (no --tls-cert, no --auth-tokens)")
                return
            }
            logger.info("signal SIGHUP: reloading")
            app.reload()
        }
        hangup.resume()
        sources.append(hangup)
        for sig in [SIGTERM, SIGINT] {
            signal(sig, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            source.setEventHandler {
                logger.info("signal \(sig == SIGTERM ? "SIGTERM" : "SIGINT"): draining")
                app.shutdown()
            }
            source.resume()
            sources.append(source)
        }
        do {
            try app.start()
        } catch {
            fail("\(error)")
        }
        app.wait()
        _ = sources
    }

    /// Model control and shared memory, from the flags or the config file.
    func applyPolicy(to options: inout CortadoServerApp.Options, file: FileConfig) throws {
        let control = modelControl ?? file.modelControl ?? "none"
        guard let mode = ServerPolicy.ModelControl(rawValue: control) else {
            throw ValidationError("--model-control must be none, explicit or poll (got '\(control)')")
        }
        options.policy.modelControl = mode
        options.pollInterval = pollInterval ?? file.pollInterval ?? 5
        guard options.pollInterval > 0 else { throw ValidationError("--poll-interval must be > 0 seconds") }
        options.policy.allowSharedMemory = allowSharedMemory || (file.allowSharedMemory ?? false)
        options.policy.sharedMemoryPrefix = sharedMemoryPrefix ?? file.sharedMemoryPrefix ?? ServerPolicy.defaultSharedMemoryPrefix
        guard options.policy.sharedMemoryPrefix.hasPrefix("/"), !options.policy.sharedMemoryPrefix.contains("..") else {
            throw ValidationError("--shared-memory-prefix must start with '/' and hold no '..' (shm_open names look like /name)")
        }
    }

    /// TLS, tokens and required models, from the flags or the config file. Files are checked
    /// here, so a wrong path stops the start with a message rather than failing every call.
    func applySecurity(to options: inout CortadoServerApp.Options, file: FileConfig) throws {
        let cert = tlsCert ?? file.tlsCert, key = tlsKey ?? file.tlsKey, clientCA = tlsClientCa ?? file.tlsClientCA
        switch (cert, key) {
        case let (cert?, key?):
            options.transport.tls = GRPCTLSConfiguration(certificatePath: cert, privateKeyPath: key, clientCAPath: clientCA)
        case (nil, nil):
            if clientCA != nil { throw ValidationError("--tls-client-ca needs --tls-cert and --tls-key (mutual TLS is TLS first)") }
        default:
            throw ValidationError("--tls-cert and --tls-key go together (the certificate and its private key, PEM)")
        }
        if let path = authTokens ?? file.authTokens {
            do { options.authorizer = try CallAuthorizer(path: path) } catch { throw ValidationError("--auth-tokens: \(error)") }
        }
        let required = requireModels.map { $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) } } ?? file.requireModels ?? []
        options.requiredModels = required.filter { !$0.isEmpty }
        options.sessions.maxSessions = maxSessions ?? file.maxSessions ?? 256
        options.sessions.idleSeconds = sessionIdleTimeout ?? file.sessionIdleTimeout ?? 600
        guard options.sessions.maxSessions >= 0, options.sessions.idleSeconds > 0 else {
            throw ValidationError("--max-sessions must be ≥ 0 and --session-idle-timeout > 0")
        }
        options.updates.maxConcurrent = maxConcurrentUpdates ?? file.maxConcurrentUpdates ?? 1
        options.updates.maxRows = maxUpdateRows ?? file.maxUpdateRows ?? 100_000
        let updateMemory = maxUpdateMemory ?? file.maxUpdateMemory ?? 256
        options.maxVariants = maxVariants ?? file.maxVariants ?? 1000
        options.variantStore = (variantStore ?? file.variantStore).map { URL(fileURLWithPath: $0) }
        let rate = traceSampleRate ?? file.traceSampleRate ?? 1
        guard rate >= 0, rate <= 1 else { throw ValidationError("--trace-sample-rate must be between 0 and 1, got \(rate)") }
        let traceMiB = traceMaxSize ?? file.traceMaxSize ?? 1024
        guard traceMiB > 0, traceMiB < (1 << 30) else { throw ValidationError("--trace-max-size must be a positive number of MiB") }
        if let path = traceFile ?? file.traceFile {
            let logger = Logger(label: "cortado")
            do {
                options.tracer = try CallTracer(path: path, rate: rate, layers: traceLayers || (file.traceLayers ?? false),
                                                maxBytes: traceMiB << 20, onFull: { bytes in
                    logger.warning("trace file full: tracing stopped", metadata: ["file": "\(path)", "max_bytes": "\(bytes)"])
                })
            } catch {
                throw ValidationError("--trace-file \(path): cannot be written (\(error.localizedDescription))")
            }
        }
        guard options.updates.maxConcurrent >= 0, options.updates.maxRows > 0, updateMemory > 0, updateMemory < (1 << 40),
              options.maxVariants > 0 else {
            throw ValidationError("--max-concurrent-updates must be ≥ 0 (0 refuses every update), --max-update-rows, --max-update-memory and --max-variants > 0")
        }
        options.updates.maxBytes = updateMemory << 20
    }

    /// The per-client budgets, from the flags or the config file; defaults derive from the
    /// message size and the machine's memory.
    func applyBudgets(to transport: inout GRPCServerConfiguration, file: FileConfig) throws {
        transport.maxStreamBuffer = maxStreamBuffer ?? file.maxStreamBuffer ?? transport.maxReceiveMessageSize
        transport.maxConnectionBuffer = maxConnectionBuffer ?? file.maxConnectionBuffer ?? 2 * transport.maxStreamBuffer
        transport.maxProcessBuffer = maxProcessBuffer ?? file.maxProcessBuffer
            ?? max(transport.maxConnectionBuffer, GRPCServerConfiguration.defaultProcessBuffer(physicalMemory: ProcessInfo.processInfo.physicalMemory))
        transport.maxConnections = maxConnections ?? file.maxConnections ?? 1024
        transport.maxConnectionsPerPeer = maxConnectionsPerPeer ?? file.maxConnectionsPerPeer ?? 0
        transport.headerTimeout = headerTimeout ?? file.headerTimeout ?? 10
        guard transport.maxStreamBuffer > 0, transport.maxConnectionBuffer > 0, transport.maxProcessBuffer > 0 else {
            throw ValidationError("--max-stream-buffer, --max-connection-buffer and --max-process-buffer must be > 0")
        }
        guard transport.maxConnections > 0, transport.maxConnectionsPerPeer >= 0, transport.headerTimeout >= 0 else {
            throw ValidationError("--max-connections must be > 0, --max-connections-per-peer and --header-timeout ≥ 0")
        }
    }
}
