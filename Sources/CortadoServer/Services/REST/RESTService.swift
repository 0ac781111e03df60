import CortadoCore
import CortadoGRPC
import CortadoServerProtos
import Foundation
import SwiftProtobuf

/// The Open Inference Protocol over HTTP/1.1 (KServe v2 REST, with Triton's extensions as
/// `tritonclient.http` uses them), on the REST port:
///
/// | method | path | answer |
/// |---|---|---|
/// | GET | /v2 | server metadata |
/// | GET | /v2/health/live, /v2/health/ready | 200, or 503 while draining |
/// | GET | /v2/models/{name}[/versions/{v}] | model metadata |
/// | GET | …/ready | 200 when the model serves |
/// | GET | …/config | the model configuration (as ModelConfig over gRPC) |
/// | GET | …/stats, /v2/models/stats | statistics (as ModelStatistics) |
/// | POST | …/infer | inference: JSON tensors, or JSON plus binary tensor data |
/// | POST | /v2/repository/index | the repository's models and their states |
/// | POST | /v2/repository/models/{name}/load, …/unload | model control (403 unless enabled) |
///
/// The answers are those of `InferenceService`, written as JSON: the same lookups, the same
/// tensor mapping (`InferenceRun`), the same scheduling on workers. Errors are
/// `{"error": "…"}` with the HTTP status of the gRPC status the same call would get.
public final class RESTService: @unchecked Sendable {
    let context: ServerContext
    /// The `service` label of the metrics.
    static let service = "rest"

    public init(context: ServerContext) { self.context = context }

    /// What the transport serves on the REST port.
    public var http: HTTPService {
        HTTPService(handler: { [self] request in handle(request) }, refusal: { status, message in Self.error(status, message) })
    }

    // MARK: routing

    func handle(_ request: HTTPServerRequest) {
        do {
            try route(request)
        } catch {
            request.fail(ServeStatus(for: error))
        }
    }

    private func route(_ request: HTTPServerRequest) throws {
        if let encoding = request.header("content-encoding"), encoding.lowercased() != "identity" {
            return request.respond(Self.error(415, "Content-Encoding '\(encoding)' is not supported; send the body uncompressed"))
        }
        var parts: [String] = []
        for segment in request.path.split(separator: "/") {
            // Foundation's decoding goes through NSString, a cost on the loop thread for
            // every call: only segments holding a '%' need it.
            guard segment.utf8.contains(UInt8(ascii: "%")) else {
                parts.append(String(segment))
                continue
            }
            guard let decoded = segment.removingPercentEncoding else { throw ServeStatus(.invalidArgument, "malformed percent-encoding in \(request.path)") }
            parts.append(decoded)
        }
        guard parts.first == "v2" else { return notFound(request) }
        let rest = parts.dropFirst()
        switch (request.method, Array(rest)) {
        case ("GET", []):
            return request.respond(Self.json(serverMetadata()))
        case ("GET", ["health", "live"]):
            return request.respond(HTTPServerResponse(status: 200))
        case ("GET", ["health", "ready"]):
            return request.respond(context.isReady ? HTTPServerResponse(status: 200) : Self.error(503, "the server is draining"))
        case ("GET", ["models", "stats"]):
            return request.respond(Self.json(Self.statistics(try InferenceService.statistics(context, name: "", version: ""))))
        case ("POST", ["repository", "index"]):
            return try repositoryIndex(request)
        case ("POST", let p) where p.count == 4 && p[0] == "repository" && p[1] == "models" && (p[3] == "load" || p[3] == "unload"):
            return modelControl(request, name: p[2], load: p[3] == "load")
        default:
            break
        }
        // /v2/models/{name}[/versions/{v}][/ready|/config|/stats|/infer]
        guard rest.count >= 2, rest.first == "models" else { return notFound(request) }
        let name = rest[rest.startIndex + 1]
        var tail = Array(rest.dropFirst(2))
        var version = ""
        if tail.count >= 2 && tail[0] == "versions" {
            version = tail[1]
            tail.removeFirst(2)
        }
        guard tail.count <= 1 else { return notFound(request) }
        let action = tail.first ?? ""
        let expected = action == "infer" ? "POST" : "GET"
        guard ["", "ready", "config", "stats", "infer"].contains(action) else { return notFound(request) }
        guard request.method == expected else {
            return request.respond(Self.error(405, "\(request.path) answers \(expected), not \(request.method)"))
        }
        switch action {
        case "ready":
            _ = try context.repository.model(name, version: version)
            request.respond(HTTPServerResponse(status: 200))
        case "config":
            request.respond(try Self.protobufJSON(InferenceService.config(try context.repository.model(name, version: version))))
        case "stats":
            request.respond(Self.json(Self.statistics(try InferenceService.statistics(context, name: name, version: version))))
        case "infer":
            infer(request, name: name, version: version)
        default:
            request.respond(Self.json(Self.metadata(try context.repository.model(name, version: version))))
        }
    }

    private func notFound(_ request: HTTPServerRequest) {
        request.respond(Self.error(404, "no endpoint \(request.method) \(request.path) (the Open Inference Protocol's paths start with /v2)"))
    }

    // MARK: inference

    /// Looks the model up here (the loop thread), then decodes, runs and encodes on a worker.
    private func infer(_ request: HTTPServerRequest, name: String, version: String) {
        let served: ServedModel
        var headerLength: Int?
        do {
            if let text = request.header("inference-header-content-length") {
                guard let n = Int(text.trimmingCharacters(in: .whitespaces)), n >= 0 else {
                    throw ServeStatus(.invalidArgument, "Inference-Header-Content-Length must be a byte count, got '\(text)'")
                }
                headerLength = n
            }
            served = try context.repository.model(name, version: version)
        } catch {
            let status = ServeStatus(for: error)
            request.fail(status)
            let nanoseconds = DispatchTime.now().uptimeNanoseconds - request.receivedAt
            context.metrics.observe(model: "", service: Self.service, code: status.code, seconds: Double(nanoseconds) / 1e9)
            context.metrics.callLog?.record(requestID: request.requestID, model: name, version: version, service: Self.service, status: status.code,
                                            error: status.message, nanoseconds: nanoseconds)
            return
        }
        context.submit(RESTInferJob(request: request, served: served, context: context, headerLength: headerLength), to: served)
    }

    // MARK: model repository

    private func repositoryIndex(_ request: HTTPServerRequest) throws {
        var readyOnly = false
        if !request.body.isEmpty {
            let parsed: Any
            do { parsed = try MLJSONParser.parse(request.body) } catch { throw ServeStatus(.invalidArgument, "the request body is not valid JSON: \(error)") }
            if let object = parsed as? [String: Any], let ready = object["ready"] as? NSNumber { readyOnly = ready.boolValue }
        }
        var w = JSONWriter()
        w.byte(UInt8(ascii: "["))
        for (i, entry) in context.repository.index(readyOnly: readyOnly).enumerated() {
            if i > 0 { w.comma() }
            w.raw("{\"name\":")
            w.string(entry.name)
            w.raw(",\"version\":")
            w.string(entry.version)
            w.raw(",\"state\":")
            w.string(entry.state.rawValue)
            w.raw(",\"reason\":")
            w.string(entry.reason)
            w.byte(UInt8(ascii: "}"))
        }
        w.byte(UInt8(ascii: "]"))
        request.respond(Self.json(w.bytes))
    }

    /// Load and unload: refused under `--model-control none` before the body is read, run on
    /// the admin queue (they read files and compile), as RepositoryModelLoad/Unload.
    private func modelControl(_ request: HTTPServerRequest, name: String, load: Bool) {
        if let denied = context.policy.deniedModelControl(load ? "RepositoryModelLoad" : "RepositoryModelUnload") {
            return request.fail(denied.serveStatus)
        }
        let repository = context.repository
        context.adminQueue.async {
            do {
                if load { _ = try repository.load(name) } else { try repository.unload(name) }
                request.respond(HTTPServerResponse(status: 200))
            } catch {
                request.fail(ServeStatus(for: error))
            }
        }
    }

    // MARK: JSON answers

    private func serverMetadata() -> [UInt8] {
        var w = JSONWriter()
        w.raw("{\"name\":\"cortado\",\"version\":")
        w.string(CortadoServerApp.version)
        w.raw(",\"extensions\":[")
        for (i, e) in InferenceService.extensions.enumerated() {
            if i > 0 { w.comma() }
            w.string(e)
        }
        w.raw("]}")
        return w.bytes
    }

    /// Model metadata with numeric shapes (the protobuf JSON mapping would quote int64s).
    static func metadata(_ served: ServedModel) -> [UInt8] {
        let m = InferenceService.metadata(served)
        var w = JSONWriter()
        w.raw("{\"name\":")
        w.string(m.name)
        w.raw(",\"versions\":[")
        for (i, v) in m.versions.enumerated() {
            if i > 0 { w.comma() }
            w.string(v)
        }
        w.raw("],\"platform\":")
        w.string(m.platform)
        for (key, tensors) in [("inputs", m.inputs), ("outputs", m.outputs)] {
            w.raw(",")
            w.key(key)
            w.byte(UInt8(ascii: "["))
            for (i, t) in tensors.enumerated() {
                if i > 0 { w.comma() }
                w.raw("{\"name\":")
                w.string(t.name)
                w.raw(",\"datatype\":")
                w.string(t.datatype)
                w.raw(",\"shape\":[")
                for (k, d) in t.shape.enumerated() {
                    if k > 0 { w.comma() }
                    w.int(d)
                }
                w.raw("]}")
            }
            w.byte(UInt8(ascii: "]"))
        }
        w.byte(UInt8(ascii: "}"))
        return w.bytes
    }

    /// Statistics as Triton writes them: every count and duration present, zeros too (the
    /// protobuf JSON mapping would leave zeros out, and readers index them directly).
    static func statistics(_ r: Inference_ModelStatisticsResponse) -> [UInt8] {
        var w = JSONWriter()
        func duration(_ key: String, _ d: Inference_StatisticDuration) {
            w.key(key)
            w.raw("{\"count\":")
            w.int(d.count)
            w.raw(",\"ns\":")
            w.int(d.ns)
            w.byte(UInt8(ascii: "}"))
        }
        w.raw("{\"model_stats\":[")
        for (i, m) in r.modelStats.enumerated() {
            if i > 0 { w.comma() }
            w.raw("{\"name\":")
            w.string(m.name)
            w.raw(",\"version\":")
            w.string(m.version)
            w.raw(",\"last_inference\":")
            w.int(m.lastInference)
            w.raw(",\"inference_count\":")
            w.int(m.inferenceCount)
            w.raw(",\"execution_count\":")
            w.int(m.executionCount)
            w.raw(",\"inference_stats\":{")
            let s = m.inferenceStats
            for (k, (key, d)) in [("success", s.success), ("fail", s.fail), ("queue", s.queue), ("compute_input", s.computeInput),
                                  ("compute_infer", s.computeInfer), ("compute_output", s.computeOutput), ("cache_hit", s.cacheHit),
                                  ("cache_miss", s.cacheMiss)].enumerated() {
                if k > 0 { w.comma() }
                duration(key, d)
            }
            w.raw("},\"batch_stats\":[")
            for (k, b) in m.batchStats.enumerated() {
                if k > 0 { w.comma() }
                w.raw("{\"batch_size\":")
                w.int(b.batchSize)
                w.comma()
                duration("compute_input", b.computeInput)
                w.comma()
                duration("compute_infer", b.computeInfer)
                w.comma()
                duration("compute_output", b.computeOutput)
                w.byte(UInt8(ascii: "}"))
            }
            w.raw("]}")
        }
        w.raw("]}")
        return w.bytes
    }

    /// A protobuf answer in Triton's JSON form: field names as in the .proto, int64s as numbers.
    static func protobufJSON(_ message: some SwiftProtobuf.Message) throws -> HTTPServerResponse {
        var options = JSONEncodingOptions()
        options.preserveProtoFieldNames = true
        options.alwaysPrintInt64sAsNumbers = true
        do {
            return json(try message.jsonUTF8Bytes(options: options))
        } catch {
            throw ServeStatus(.internal, "could not encode the answer as JSON: \(error)")
        }
    }

    static func json(_ body: [UInt8]) -> HTTPServerResponse {
        HTTPServerResponse(status: 200, headers: [("Content-Type", "application/json")], body: body)
    }

    /// `{"error": message}` with `status`.
    static func error(_ status: Int, _ message: String) -> HTTPServerResponse {
        var w = JSONWriter(capacity: message.utf8.count + 16)
        w.raw("{\"error\":")
        w.string(message)
        w.byte(UInt8(ascii: "}"))
        return HTTPServerResponse(status: status, headers: [("Content-Type", "application/json")], body: w.bytes)
    }

    /// The HTTP status for a status code (the one the same call would get over gRPC).
    static func httpStatus(_ code: ServeStatus.Code) -> Int {
        switch code {
        case .ok: return 200
        case .invalidArgument, .failedPrecondition, .outOfRange: return 400
        case .unauthenticated: return 401
        case .permissionDenied: return 403
        case .notFound: return 404
        case .alreadyExists, .aborted: return 409
        // A full queue or a spent budget: the client should slow down and retry.
        case .resourceExhausted: return 429
        case .cancelled: return 499
        case .unimplemented: return 501
        case .unavailable: return 503
        case .deadlineExceeded: return 504
        case .unknown, .internal, .dataLoss: return 500
        }
    }
}

/// An HTTP request as the call a prediction job answers.
extension HTTPServerRequest: PredictionCall {
    var deadline: UInt64? { nil }
    var requestID: String? { header("x-request-id") }

    func fail(_ status: ServeStatus) {
        respond(RESTService.error(RESTService.httpStatus(status.code), status.message.isEmpty ? "\(status.code)" : status.message))
    }

    func respond(_ message: [UInt8]) {
        respond(RESTService.json(message))
    }
}

/// One REST inference request as a prediction job: the body decoded on the worker into the
/// form `InferenceRun` reads and from there into columns (as a ModelInfer call), the answer
/// encoded as JSON (and binary data) from the output columns.
final class RESTInferJob: PredictionJob, @unchecked Sendable {
    private let request: HTTPServerRequest
    private let served: ServedModel
    private let context: ServerContext
    private let headerLength: Int?
    private var run: InferenceRun?
    private var binaryOutput = false
    /// The answer's JSON length when binary outputs follow it.
    private var answerHeaderLength: Int?

    init(request: HTTPServerRequest, served: ServedModel, context: ServerContext, headerLength: Int?) {
        self.request = request
        self.served = served
        self.context = context
        self.headerLength = headerLength
        super.init(call: request, metrics: (served, RESTService.service, context.metrics))
    }

    override func decode() throws -> MLFeatureColumns {
        let decoded = try RESTInferCodec.decode(request.body, headerLength: headerLength, model: served.name, version: served.version)
        binaryOutput = decoded.binaryOutput
        let run = InferenceRun(request: decoded.view, served: served, sharedMemory: context.sharedMemory)
        self.run = run
        return try run.columns()
    }

    override func encode(_ results: MLFeatureColumns) throws -> [UInt8] {
        let (body, headerLength) = try RESTInferCodec.encode(run!, results, binaryOutput: binaryOutput)
        answerHeaderLength = headerLength
        return body
    }

    override func deliver(_ message: [UInt8]) {
        if let n = answerHeaderLength {
            request.respond(HTTPServerResponse(status: 200, headers: [("Content-Type", "application/octet-stream"), ("Inference-Header-Content-Length", "\(n)")], body: message))
        } else {
            request.respond(RESTService.json(message))
        }
    }
}
