import CortadoCore
import CortadoGRPC
import CortadoNativeCoding
import CortadoServerProtos
import Dispatch
import Foundation

/// `cortado.v1.Predictor`: Cortado's own API, typed feature values for every Core ML type.
public final class PredictorService: ScopedService, @unchecked Sendable {
    public let serviceName = "cortado.v1.Predictor"
    let context: ServerContext

    public init(context: ServerContext) { self.context = context }

    public var methods: [String: GRPCUnaryHandler] {
        [
            "Predict": { [context] call in Self.predict(call, context) },
            "PredictBatch": { [context] call in Self.predictBatch(call, context) },
            "Load": { [context] call in Self.load(call, context) },
            "Unload": { [context] call in Self.unload(call, context) },
            "List": { [context] call in context.inline(call) { Self.list(context) } },
            "Describe": { [context] call in Self.describe(call, context) },
            "CreateSession": { [context] call in Self.createSession(call, context) },
            "EndSession": { [context] call in
                context.inline(call) { () throws -> Cortado_V1_EndSessionResponse in
                    let request = try context.decode(Cortado_V1_EndSessionRequest.self, call)
                    try context.sessions.end(request.session)
                    return Cortado_V1_EndSessionResponse()
                }
            },
            "Update": { [context] call in Self.update(call, context) },
            "ListVariants": { [context] call in
                context.inline(call) { Self.listVariants(context, try context.decode(Cortado_V1_ListVariantsRequest.self, call)) }
            },
            "DeleteVariant": { [context] call in Self.deleteVariant(call, context) },
        ]
    }

    /// With `--auth-tokens`: predictions and reads need `infer`, changes `admin`.
    public var access: [String: MethodAccess] {
        ["Predict": .scope(.infer), "PredictBatch": .scope(.infer), "List": .scope(.infer), "Describe": .scope(.infer),
         "CreateSession": .scope(.infer), "EndSession": .scope(.infer), "ListVariants": .scope(.infer),
         "Load": .scope(.admin), "Unload": .scope(.admin), "Update": .scope(.admin), "DeleteVariant": .scope(.admin)]
    }

    static let service = "predictor"

    static func inputs(_ features: [Cortado_V1_Feature], model: MLModel) throws(GRPCStatus) -> MLDictionaryFeatureProvider {
        var values: [String: MLFeatureValue] = [:]
        values.reserveCapacity(features.count)
        let description = model.modelDescription
        for feature in features {
            guard let expected = description.inputs.first(where: { $0.name == feature.name }) else {
                throw GRPCStatus(.invalidArgument, "model '\(model.name)' has no input named '\(feature.name)' (inputs: \(description.inputs.map(\.name).joined(separator: ", ")))")
            }
            guard values[feature.name] == nil else { throw GRPCStatus(.invalidArgument, "input '\(feature.name)' is given twice") }
            values[feature.name] = try NativeFeatureCoding.decode(feature.value, name: feature.name, expected: expected)
        }
        return MLDictionaryFeatureProvider(dictionary: values)
    }

    static func outputs(_ provider: MLFeatureProvider, model: MLModel, wanted: [String]) throws(GRPCStatus) -> [Cortado_V1_Feature] {
        let names = wanted.isEmpty ? model.modelDescription.outputs.map(\.name) : wanted
        var out: [Cortado_V1_Feature] = []
        out.reserveCapacity(names.count)
        for name in names {
            guard let value = provider.featureValue(for: name) else {
                throw GRPCStatus(.invalidArgument, "model '\(model.name)' has no output named '\(name)' (outputs: \(model.modelDescription.outputs.map(\.name).joined(separator: ", ")))")
            }
            var feature = Cortado_V1_Feature()
            feature.name = name
            feature.value = NativeFeatureCoding.encode(value)
            out.append(feature)
        }
        return out
    }

    static func predict(_ call: GRPCServerCall, _ context: ServerContext) {
        guard let served = context.admit(Cortado_V1_PredictRequest.self, call, service: service) else { return }
        if ProtobufPeek.hasNonEmpty(call.request, fields: [5, 6, 7]) {
            predictWithFunctionOrSession(call, served, context)
            return
        }
        let state = JobState<Cortado_V1_PredictRequest>()
        context.infer(call, model: served, service: service, rows: {
            let request = try context.decode(Cortado_V1_PredictRequest.self, call)
            state.value = request
            return [try inputs(request.inputs, model: served.model)]
        }, encode: { results in
            var response = Cortado_V1_PredictResponse()
            response.model = served.name
            response.version = served.version
            response.outputs = try outputs(results[0], model: served.model, wanted: state.value!.outputs)
            return try response.serializedBytes()
        })
    }

    static func predictBatch(_ call: GRPCServerCall, _ context: ServerContext) {
        guard let served = context.admit(Cortado_V1_PredictBatchRequest.self, call, service: service) else { return }
        if ProtobufPeek.hasNonEmpty(call.request, fields: [5]) {
            predictBatchOfVariant(call, served, context)
            return
        }
        let state = JobState<Cortado_V1_PredictBatchRequest>()
        context.infer(call, model: served, service: service, rows: {
            let request = try context.decode(Cortado_V1_PredictBatchRequest.self, call)
            state.value = request
            var batch: [MLFeatureProvider] = []
            batch.reserveCapacity(request.rows.count)
            for (i, row) in request.rows.enumerated() {
                do { batch.append(try inputs(row.features, model: served.model)) } catch {
                    throw GRPCStatus(.invalidArgument, "row \(i): \((error as? GRPCStatus)?.message ?? (error as? ServeStatus)?.message ?? "\(error)")")
                }
            }
            return batch
        }, encode: { results in
            var response = Cortado_V1_PredictBatchResponse()
            response.model = served.name
            response.version = served.version
            response.rows.reserveCapacity(results.count)
            for result in results {
                var row = Cortado_V1_Row()
                row.features = try outputs(result, model: served.model, wanted: state.value!.outputs)
                response.rows.append(row)
            }
            return try response.serializedBytes()
        })
    }

    /// A prediction of one function of a multi-function program, in a session (with its
    /// state), or of a variant (`VariantRegistry`): run as one job on the model's scheduler, never batched with other calls (a
    /// session's predictions must see each other's state updates in order).
    static func predictWithFunctionOrSession(_ call: GRPCServerCall, _ served: ServedModel, _ context: ServerContext) {
        do {
            try served.scheduler.submit {
                let started = DispatchTime.now().uptimeNanoseconds
                do {
                    let request = try context.decode(Cortado_V1_PredictRequest.self, call)
                    var model = served.model
                    var version = served.version
                    var state: MLState?
                    if !request.variant.isEmpty {
                        guard request.session.isEmpty, request.function.isEmpty else {
                            throw GRPCStatus(.invalidArgument, "a variant is predicted without a session or function")
                        }
                        (model, version) = try context.variants.model(served.name, variant: request.variant)
                    } else if !request.session.isEmpty {
                        let session = try context.sessions.use(request.session, model: request.model)
                        guard request.function.isEmpty || request.function == session.model.modelDescription.functionName else {
                            throw GRPCStatus(.invalidArgument, "session '\(request.session)' runs function '\(session.model.modelDescription.functionName ?? "main")'")
                        }
                        model = session.model
                        version = session.served.version
                        state = session.state
                    } else {
                        model = try served.model(function: request.function)
                    }
                    let input = try inputs(request.inputs, model: model)
                    let result = try state.map { try model.prediction(from: input, using: $0) } ?? model.prediction(from: input)
                    var response = Cortado_V1_PredictResponse()
                    response.model = served.name
                    response.version = version
                    response.outputs = try outputs(result, model: model, wanted: request.outputs)
                    context.reply(call, response)
                    context.metrics.observe(model: served.name, service: service, code: .ok,
                                            seconds: Double(DispatchTime.now().uptimeNanoseconds - started) / 1e9)
                    context.metrics.callLog?.record(requestID: call.requestID, model: served.name, version: version, service: service, status: .ok,
                                                    nanoseconds: DispatchTime.now().uptimeNanoseconds - call.receivedAt)
                } catch {
                    let status = ServerContext.status(for: error)
                    call.fail(status)
                    context.metrics.observe(model: served.name, service: service, code: status.serveStatus.code,
                                            seconds: Double(DispatchTime.now().uptimeNanoseconds - started) / 1e9)
                    context.metrics.callLog?.record(requestID: call.requestID, model: served.name, version: served.version, service: service,
                                                    status: status.serveStatus.code, error: status.message,
                                                    nanoseconds: DispatchTime.now().uptimeNanoseconds - call.receivedAt)
                }
            }
        } catch {
            context.rejected(call, model: served.name, service: service, error)
        }
    }

    /// PredictBatch on a variant: one job on the base model's scheduler, the rows as one batch.
    static func predictBatchOfVariant(_ call: GRPCServerCall, _ served: ServedModel, _ context: ServerContext) {
        do {
            try served.scheduler.submit {
                let started = DispatchTime.now().uptimeNanoseconds
                do {
                    let request = try context.decode(Cortado_V1_PredictBatchRequest.self, call)
                    let (model, version) = try context.variants.model(served.name, variant: request.variant)
                    var batch: [MLFeatureProvider] = []
                    batch.reserveCapacity(request.rows.count)
                    for (i, row) in request.rows.enumerated() {
                        do { batch.append(try inputs(row.features, model: model)) } catch {
                            throw GRPCStatus(.invalidArgument, "row \(i): \((error as? GRPCStatus)?.message ?? (error as? ServeStatus)?.message ?? "\(error)")")
                        }
                    }
                    let results = try model.predictions(fromBatch: MLArrayBatchProvider(array: batch))
                    var response = Cortado_V1_PredictBatchResponse()
                    response.model = served.name
                    response.version = version
                    for i in 0..<results.count {
                        var row = Cortado_V1_Row()
                        row.features = try outputs(results.features(at: i), model: model, wanted: request.outputs)
                        response.rows.append(row)
                    }
                    context.reply(call, response)
                    context.metrics.observe(model: served.name, service: service, code: .ok,
                                            seconds: Double(DispatchTime.now().uptimeNanoseconds - started) / 1e9)
                } catch {
                    let status = ServerContext.status(for: error)
                    call.fail(status)
                    context.metrics.observe(model: served.name, service: service, code: status.serveStatus.code,
                                            seconds: Double(DispatchTime.now().uptimeNanoseconds - started) / 1e9)
                }
            }
        } catch {
            context.rejected(call, model: served.name, service: service, error)
        }
    }

    /// CreateSession: a state for one version (and function) of a stateful model.
    static func createSession(_ call: GRPCServerCall, _ context: ServerContext) {
        guard let served = context.admit(Cortado_V1_CreateSessionRequest.self, call, service: service) else { return }
        do {
            try served.scheduler.submit {
                do {
                    let request = try context.decode(Cortado_V1_CreateSessionRequest.self, call)
                    let model = try served.model(function: request.function)
                    let session = try context.sessions.create(served: served, model: model)
                    var response = Cortado_V1_CreateSessionResponse()
                    response.session = session.id
                    response.idleTimeoutMs = Int64(context.sessions.limits.idleSeconds * 1000)
                    context.reply(call, response)
                } catch {
                    call.fail(ServerContext.status(for: error))
                }
            }
        } catch {
            context.rejected(call, model: served.name, service: service, error)
        }
    }

    static func status(_ served: ServedModel) -> Cortado_V1_ModelStatus {
        var s = Cortado_V1_ModelStatus()
        s.name = served.name
        s.version = served.version
        s.state = .ready
        s.specType = served.model.specType
        return s
    }

    static func load(_ call: GRPCServerCall, _ context: ServerContext) {
        guard context.permitted(call, context.policy.deniedModelControl("Load (from the repository or from model bytes)")) else { return }
        context.admin(call) {
            let request = try context.decode(Cortado_V1_LoadRequest.self, call)
            let served = request.modelData.isEmpty ? try context.repository.load(request.model)
                : try context.repository.load(data: request.modelData, name: request.model, version: request.version)
            var response = Cortado_V1_LoadResponse()
            response.status = status(served)
            return response
        }
    }

    static func unload(_ call: GRPCServerCall, _ context: ServerContext) {
        guard context.permitted(call, context.policy.deniedModelControl("Unload")) else { return }
        context.admin(call) {
            let request = try context.decode(Cortado_V1_UnloadRequest.self, call)
            try context.repository.unload(request.model)
            return Cortado_V1_UnloadResponse()
        }
    }

    static func list(_ context: ServerContext) -> Cortado_V1_ListResponse {
        var response = Cortado_V1_ListResponse()
        let loaded = Dictionary(uniqueKeysWithValues: context.repository.loaded.map { ($0.name, $0) })
        for entry in context.repository.index() {
            var s = Cortado_V1_ModelStatus()
            s.name = entry.name
            s.version = entry.version
            switch entry.state {
            case .ready: s.state = .ready
            case .loading: s.state = .loading
            case .unavailable: s.state = .unavailable
            }
            s.reason = entry.reason
            s.specType = loaded[entry.name]?.model.specType ?? ""
            response.models.append(s)
        }
        return response
    }

    static func describe(_ call: GRPCServerCall, _ context: ServerContext) {
        context.inline(call) {
            let request = try context.decode(Cortado_V1_DescribeRequest.self, call)
            let served = try context.repository.model(request.model, version: request.version)
            let model = served.model
            let d = model.modelDescription
            var response = Cortado_V1_DescribeResponse()
            response.status = status(served)
            response.specificationVersion = model.specification.specificationVersion
            response.inputs = d.inputs.map(describe)
            response.outputs = d.outputs.map(describe)
            switch d.classLabels {
            case .strings(let l)?: response.classLabels = l
            case .int64s(let l)?: response.int64ClassLabels = l
            case nil: break
            }
            response.predictedFeatureName = d.predictedFeatureName ?? ""
            response.predictedProbabilitiesName = d.predictedProbabilitiesName ?? ""
            response.author = d.author
            response.license = d.license
            response.shortDescription = d.shortDescription
            response.userDefined = d.userDefined
            response.summary = model.compiled.summary
            return response
        }
    }

    static func describe(_ f: MLFeatureDescription) -> Cortado_V1_FeatureDescription {
        var out = Cortado_V1_FeatureDescription()
        out.name = f.name
        out.shortDescription = f.shortDescription
        out.type = "\(f.type)"
        out.optional = f.isOptional
        if let c = f.multiArrayConstraint {
            if let dt = c.dataType { out.dataType = NativeFeatureCoding.wireType(dt) }
            out.shape = c.shape.map { Int64($0) }
        }
        out.constraint = f.typeSummary
        return out
    }
}
