import CortadoCore
import CortadoGRPC
import CortadoServerProtos
import Foundation

/// `inference.GRPCInferenceService`: the Open Inference Protocol (KServe v2) with the Triton
/// extensions standard tools use. Core ML features map to tensors as `TensorMapping` says.
public final class InferenceService: ScopedService, @unchecked Sendable {
    public let serviceName = "inference.GRPCInferenceService"
    let context: ServerContext
    /// Rows per request: the leading dimension every tensor carries.
    static let maxBatchSize: Int32 = 1024
    static let service = "inference"
    /// The protocol extensions the server metadata advertises (gRPC and REST alike).
    static let extensions = ["classification", "model_repository", "model_repository(unload_dependents)", "model_configuration", "system_shared_memory", "statistics", "binary_tensor_data"]

    public init(context: ServerContext) { self.context = context }

    /// With `--auth-tokens`. ServerLive and ServerReady stay open: they are KServe's probes
    /// and say nothing a probe may not know. Model reads and inference need `infer`; the
    /// repository (index included: it lists what is on disk) and shared memory need `admin`.
    public var access: [String: MethodAccess] {
        [
            "ServerLive": .open, "ServerReady": .open,
            "ServerMetadata": .scope(.infer), "ModelReady": .scope(.infer), "ModelMetadata": .scope(.infer),
            "ModelConfig": .scope(.infer), "ModelStatistics": .scope(.infer),
            "ModelInfer": .scope(.infer), "ModelStreamInfer": .scope(.infer),
            "RepositoryIndex": .scope(.admin), "RepositoryModelLoad": .scope(.admin), "RepositoryModelUnload": .scope(.admin),
            "SystemSharedMemoryRegister": .scope(.admin), "SystemSharedMemoryUnregister": .scope(.admin),
            "SystemSharedMemoryStatus": .scope(.admin),
        ]
    }

    public var methods: [String: GRPCUnaryHandler] {
        let c = context
        return [
            "ServerLive": { call in c.inline(call) { var r = Inference_ServerLiveResponse(); r.live = true; return r } },
            "ServerReady": { call in c.inline(call) { var r = Inference_ServerReadyResponse(); r.ready = c.isReady; return r } },
            "ModelReady": { call in
                c.inline(call) {
                    let request = try c.decode(Inference_ModelReadyRequest.self, call)
                    var r = Inference_ModelReadyResponse()
                    r.ready = (try? c.repository.model(request.name, version: request.version)) != nil
                    return r
                }
            },
            "ServerMetadata": { call in
                c.inline(call) {
                    var r = Inference_ServerMetadataResponse()
                    r.name = "cortado"
                    r.version = CortadoServerApp.version
                    r.extensions = Self.extensions
                    return r
                }
            },
            "ModelMetadata": { call in
                c.inline(call) {
                    let request = try c.decode(Inference_ModelMetadataRequest.self, call)
                    return Self.metadata(try c.repository.model(request.name, version: request.version))
                }
            },
            "ModelConfig": { call in
                c.inline(call) {
                    let request = try c.decode(Inference_ModelConfigRequest.self, call)
                    var r = Inference_ModelConfigResponse()
                    r.config = Self.config(try c.repository.model(request.name, version: request.version))
                    return r
                }
            },
            "ModelStatistics": { call in
                c.inline(call) {
                    let request = try c.decode(Inference_ModelStatisticsRequest.self, call)
                    return try Self.statistics(c, name: request.name, version: request.version)
                }
            },
            "ModelInfer": { call in Self.infer(call, c) },
            "RepositoryIndex": { call in
                c.inline(call) {
                    let request = try c.decode(Inference_RepositoryIndexRequest.self, call)
                    var r = Inference_RepositoryIndexResponse()
                    r.models = c.repository.index(readyOnly: request.ready).map { entry in
                        var m = Inference_RepositoryIndexResponse.ModelIndex()
                        m.name = entry.name
                        m.version = entry.version
                        m.state = entry.state.rawValue
                        m.reason = entry.reason
                        return m
                    }
                    return r
                }
            },
            "RepositoryModelLoad": { call in
                guard c.permitted(call, c.policy.deniedModelControl("RepositoryModelLoad")) else { return }
                c.admin(call) {
                    let request = try c.decode(Inference_RepositoryModelLoadRequest.self, call)
                    try c.repository.load(request.modelName)
                    return Inference_RepositoryModelLoadResponse()
                }
            },
            "RepositoryModelUnload": { call in
                guard c.permitted(call, c.policy.deniedModelControl("RepositoryModelUnload")) else { return }
                c.admin(call) {
                    let request = try c.decode(Inference_RepositoryModelUnloadRequest.self, call)
                    try c.repository.unload(request.modelName)
                    return Inference_RepositoryModelUnloadResponse()
                }
            },
            "SystemSharedMemoryRegister": { call in
                guard c.permitted(call, c.policy.deniedSharedMemory()) else { return }
                c.inline(call) {
                    let request = try c.decode(Inference_SystemSharedMemoryRegisterRequest.self, call)
                    if let problem = c.policy.keyProblem(request.key) {
                        throw GRPCStatus(.permissionDenied, "shared-memory region '\(request.name)': \(problem)")
                    }
                    try c.sharedMemory.register(name: request.name, key: request.key, offset: Int(clamping: request.offset), byteSize: Int(clamping: request.byteSize))
                    return Inference_SystemSharedMemoryRegisterResponse()
                }
            },
            "SystemSharedMemoryUnregister": { call in
                c.inline(call) {
                    let request = try c.decode(Inference_SystemSharedMemoryUnregisterRequest.self, call)
                    c.sharedMemory.unregister(name: request.name)
                    return Inference_SystemSharedMemoryUnregisterResponse()
                }
            },
            "SystemSharedMemoryStatus": { call in
                c.inline(call) {
                    let request = try c.decode(Inference_SystemSharedMemoryStatusRequest.self, call)
                    var r = Inference_SystemSharedMemoryStatusResponse()
                    for region in try c.sharedMemory.status(name: request.name) {
                        var s = Inference_SystemSharedMemoryStatusResponse.RegionStatus()
                        s.name = region.name
                        s.key = region.key
                        s.offset = UInt64(region.offset)
                        s.byteSize = UInt64(region.byteSize)
                        r.regions[region.name] = s
                    }
                    return r
                }
            },
        ]
    }

    // MARK: metadata and configuration

    static func metadata(_ served: ServedModel) -> Inference_ModelMetadataResponse {
        var r = Inference_ModelMetadataResponse()
        r.name = served.name
        r.versions = [served.version]
        r.platform = "coreml"
        func tensor(_ m: TensorMapping) -> Inference_ModelMetadataResponse.TensorMetadata {
            var t = Inference_ModelMetadataResponse.TensorMetadata()
            t.name = m.name
            t.datatype = m.datatype
            t.shape = [-1] + m.dims
            return t
        }
        r.inputs = served.tensorInputs.map(tensor)
        r.outputs = served.tensorOutputs.map(tensor)
        return r
    }

    static func configType(_ datatype: String) -> Inference_DataType {
        switch datatype {
        case "BOOL": return .typeBool
        case "UINT8": return .typeUint8
        case "INT32": return .typeInt32
        case "INT64": return .typeInt64
        case "FP16": return .typeFp16
        case "FP32": return .typeFp32
        case "FP64": return .typeFp64
        case "BYTES": return .typeString
        default: return .typeInvalid
        }
    }

    static func config(_ served: ServedModel) -> Inference_ModelConfig {
        var config = Inference_ModelConfig()
        config.name = served.name
        config.platform = "coreml"
        config.backend = "cortado"
        config.maxBatchSize = maxBatchSize
        config.input = served.tensorInputs.map { m in
            var i = Inference_ModelInput()
            i.name = m.name
            i.dataType = configType(m.datatype)
            i.dims = m.dims
            i.optional = m.feature.isOptional
            return i
        }
        config.output = served.tensorOutputs.map { m in
            var o = Inference_ModelOutput()
            o.name = m.name
            o.dataType = configType(m.datatype)
            o.dims = m.dims
            return o
        }
        var group = Inference_ModelInstanceGroup()
        group.name = served.name
        group.kind = .cpu
        // What the scheduler really runs at once (not the model's own compute threads).
        group.count = Int32(clamping: served.scheduler.concurrency)
        config.instanceGroup = [group]
        if let batcher = served.batcher {
            var batching = Inference_ModelDynamicBatching()
            batching.preferredBatchSize = [Int32(clamping: batcher.maxBatchSize)]
            batching.maxQueueDelayMicroseconds = batcher.maxQueueDelay / 1000
            config.dynamicBatching = batching
        }
        return config
    }

    static func statistics(_ c: ServerContext, name: String, version: String) throws -> Inference_ModelStatisticsResponse {
        var r = Inference_ModelStatisticsResponse()
        let models = name.isEmpty ? c.repository.loaded : [try c.repository.model(name, version: version)]
        for served in models {
            let s = served.statistics.snapshot
            func duration(_ d: ServedModelStatistics.Duration) -> Inference_StatisticDuration {
                var out = Inference_StatisticDuration()
                out.count = d.count
                out.ns = d.nanoseconds
                return out
            }
            var m = Inference_ModelStatistics()
            m.name = served.name
            m.version = served.version
            m.lastInference = s.lastInference
            m.inferenceCount = s.inferenceCount
            m.executionCount = s.executionCount
            var stats = Inference_InferStatistics()
            stats.success = duration(s.success)
            stats.fail = duration(s.failure)
            stats.queue = duration(s.queue)
            stats.computeInput = duration(s.computeInput)
            stats.computeInfer = duration(s.computeInfer)
            stats.computeOutput = duration(s.computeOutput)
            m.inferenceStats = stats
            m.batchStats = s.batches.keys.sorted().map { size in
                var b = Inference_InferBatchStatistics()
                b.batchSize = UInt64(size)
                b.computeInfer = duration(s.batches[size]!)
                return b
            }
            r.modelStats.append(m)
        }
        return r
    }

    /// ModelStreamInfer: each ModelInferRequest on the stream runs as a ModelInfer call and
    /// is answered by one ModelStreamInferResponse, `infer_response` (field 2) or, when it
    /// failed, `error_message` (field 1), and the stream goes on.
    public var messageStreams: [String: GRPCMessageStreamMethod] {
        let c = context
        return ["ModelStreamInfer": GRPCMessageStreamMethod(handler: { call in Self.infer(call, c, streamed: true) }, failure: { status in
            var w = ProtobufWriter(capacity: status.message.utf8.count + 8)
            w.string(1, status.message.isEmpty ? "\(status.code)" : status.message)
            return w.bytes
        })]
    }

    // MARK: inference

    /// `streamed`: wrap the answer as a ModelStreamInferResponse's `infer_response`.
    static func infer(_ call: GRPCServerCall, _ c: ServerContext, streamed: Bool = false) {
        guard let served = c.admit(Inference_ModelInferRequest.self, call, service: service) else { return }
        c.submit(ModelInferJob(call: call, served: served, context: c, streamed: streamed), to: served)
    }
}

/// One ModelInfer call (unary, or one message of a stream) as a prediction job: decoded on
/// the worker into columns, its `InferenceRun` kept for the answer.
final class ModelInferJob: PredictionJob, @unchecked Sendable {
    private let grpcCall: GRPCServerCall
    private let served: ServedModel
    private let context: ServerContext
    private let streamed: Bool
    private var run: InferenceRun?

    init(call: GRPCServerCall, served: ServedModel, context: ServerContext, streamed: Bool) {
        grpcCall = call
        self.served = served
        self.context = context
        self.streamed = streamed
        super.init(call: call, metrics: (served, InferenceService.service, context.metrics))
    }

    override func decode() throws -> MLFeatureColumns {
        // The hand-written decoder takes the common form of the request (matching its tensors'
        // names against the model's inputs as it reads them), SwiftProtobuf the rest.
        let request = try ModelInferRequestDecoder.decode(grpcCall.request, inputs: served.tensorInputs)
            ?? InferRequestView(context.decode(Inference_ModelInferRequest.self, grpcCall))
        let run = InferenceRun(request: request, served: served, sharedMemory: context.sharedMemory)
        self.run = run
        return try run.columns()
    }

    override func encode(_ results: MLFeatureColumns) throws -> [UInt8] {
        guard streamed else {
            // Framed here, while the bytes are not yet shared (no copy).
            var bytes = try run!.serializedResponse(results, reservingPrefix: true)
            GRPCMessageWriter.fillPrefix(&bytes)
            return bytes
        }
        // A stream's answer is a ModelStreamInferResponse: the response in field 2.
        let response = try run!.serializedResponse(results)
        var w = ProtobufWriter(capacity: response.count + 8)
        w.lengthDelimited(2, length: response.count)
        w.bytes.append(contentsOf: response)
        return w.bytes
    }

    /// A unary answer was framed in place by `encode`; a stream's goes out as a message.
    override func deliver(_ message: [UInt8]) {
        if streamed { grpcCall.respond(message) } else { grpcCall.respond(framed: message) }
    }
}
