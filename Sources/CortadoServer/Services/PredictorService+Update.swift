import CortadoCore
import CortadoGRPC
import CortadoNativeCoding
import CortadoServerProtos
import Foundation

/// `cortado.v1.Predictor` Update, ListVariants and DeleteVariant: Core ML's `MLUpdateTask` on
/// the server. The model kind is never named here: whatever the kind, the core's task trains
/// it, and `MLModel.variant(specification:)` compiles a variant (sharing what the kind can).
extension PredictorService {
    /// Update: decode and check on a thread of its own, train on the task's, stream
    /// one event per epoch, then install the result (a new version, or a variant) and send it.
    static func update(_ call: GRPCServerCall, _ context: ServerContext) {
        guard context.permitted(call, context.policy.deniedModelControl("Update")) else { return }
        context.updates.start {
            do {
                try startUpdate(call, context)
            } catch {
                call.fail(updateStatus(for: error))
            }
        }
    }

    /// The status an update's failure answers with: bad rows, parameters or a diverging loss
    /// are the caller's to fix (INVALID_ARGUMENT); a model that cannot be updated is
    /// FAILED_PRECONDITION.
    static func updateStatus(for error: Error) -> GRPCStatus {
        if let status = error as? GRPCStatus { return status }
        if let status = error as? ServeStatus { return GRPCStatus(status) }
        if let error = error as? MLModelError {
            switch error.code {
            case .featureType, .parse, .generic: return GRPCStatus(.invalidArgument, error.description)
            case .unsupported, .invalidModel: return GRPCStatus(.failedPrecondition, error.description)
            default: return GRPCStatus(.internal, error.description)
            }
        }
        return GRPCStatus(.internal, "\(error)")
    }

    private static func startUpdate(_ call: GRPCServerCall, _ context: ServerContext) throws {
        if call.isCancelled { return }
        let request = try context.decode(Cortado_V1_UpdateRequest.self, call)
        let variant = request.variant
        if !variant.isEmpty, let problem = VariantRegistry.nameProblem(variant) {
            throw GRPCStatus(.invalidArgument, problem)
        }
        let served = try context.repository.model(request.model, version: request.version)
        // A variant that exists trains on from its own parameters; its base stays the one it
        // was made over, so that variants never chain.
        // A stored variant is read (and its base checked) here; one that cannot be read fails
        // the update, and nothing is overwritten.
        var existing: VariantRegistry.Resolved?
        if !variant.isEmpty, context.variants.contains(served.name, variant) {
            existing = try context.variants.resolve(served.name, variant)
        }
        let start = existing?.model ?? served.model
        let base = existing?.base ?? served.model
        let baseVersion = existing?.baseVersion ?? served.version
        let updates = (existing?.updates ?? 0) + 1
        guard start.modelDescription.isUpdatable else {
            throw GRPCStatus(.failedPrecondition, "model '\(served.name)' is not updatable (its spec does not set isUpdatable); nothing was changed")
        }
        let limits = context.updates.limits
        guard !request.rows.isEmpty else { throw GRPCStatus(.invalidArgument, "the update holds no training rows") }
        guard request.rows.count <= limits.maxRows else {
            throw GRPCStatus(.invalidArgument, "the update holds \(request.rows.count) training rows; at most \(limits.maxRows) are allowed (--max-update-rows)")
        }
        let (examples, bytes) = try trainingRows(request.rows, model: start)
        let reservation = try context.updates.reserve(bytes: bytes)

        var configuration = start.configuration
        configuration.updateParameters = overrides(request.parameters)
        let run = UpdateRun(call: call, context: context, reservation: reservation, servedName: served.name, served: served,
                            variant: variant, base: base, baseVersion: baseVersion, updates: updates, examples: examples.count)
        let handlers = MLUpdateProgressHandlers(forEvents: [.trainingBegin, .epochEnd], progressHandler: { progress in
            run.progress(progress)
        }, completionHandler: { result in
            run.complete(result)
        })
        let task: MLUpdateTask
        do {
            task = try MLUpdateTask(model: start, trainingData: MLArrayBatchProvider(array: examples), configuration: configuration,
                                    progressHandlers: handlers)
        } catch {
            reservation.release()
            throw error
        }
        call.onCancel { task.cancel() }
        task.resume()
    }

    /// The rows as feature providers over the model's training inputs, and the bytes the
    /// trainer will hold for them (8 per value).
    private static func trainingRows(_ rows: [Cortado_V1_Row], model: MLModel) throws(GRPCStatus) -> ([MLFeatureProvider], Int) {
        let inputs = model.modelDescription.trainingInputs
        guard !inputs.isEmpty else {
            throw GRPCStatus(.failedPrecondition, "model '\(model.name)' declares no training inputs")
        }
        var examples: [MLFeatureProvider] = []
        examples.reserveCapacity(rows.count)
        var bytes = 0
        for (i, row) in rows.enumerated() {
            var values: [String: MLFeatureValue] = [:]
            for feature in row.features {
                guard let expected = inputs.first(where: { $0.name == feature.name }) else {
                    throw GRPCStatus(.invalidArgument, "training row \(i): model '\(model.name)' has no training input named '\(feature.name)' (training inputs: \(inputs.map(\.name).joined(separator: ", ")))")
                }
                guard values[feature.name] == nil else { throw GRPCStatus(.invalidArgument, "training row \(i): input '\(feature.name)' is given twice") }
                let value: MLFeatureValue
                do { value = try NativeFeatureCoding.decode(feature.value, name: feature.name, expected: expected) } catch {
                    throw GRPCStatus(.invalidArgument, "training row \(i): \(error.message)")
                }
                do { try expected.validate(value) } catch {
                    throw GRPCStatus(.invalidArgument, "training row \(i): \((error as? MLModelError)?.description ?? "\(error)")")
                }
                bytes += 8 * (value.multiArrayValue?.count ?? 1)
                values[feature.name] = value
            }
            for input in inputs where values[input.name] == nil && !input.isOptional {
                throw GRPCStatus(.invalidArgument, "training row \(i): training input '\(input.name)' is missing (expected \(input.typeSummary))")
            }
            examples.append(MLDictionaryFeatureProvider(dictionary: values))
        }
        return (examples, bytes)
    }

    private static func overrides(_ p: Cortado_V1_UpdateParameters) -> [MLParameterKey: MLParameterValue] {
        var o: [MLParameterKey: MLParameterValue] = [:]
        if p.hasEpochs { o[.epochs] = .int(p.epochs) }
        if p.hasLearningRate { o[.learningRate] = .double(p.learningRate) }
        if p.hasMiniBatchSize { o[.miniBatchSize] = .int(p.miniBatchSize) }
        if p.hasMomentum { o[.momentum] = .double(p.momentum) }
        if p.hasBeta1 { o[.beta1] = .double(p.beta1) }
        if p.hasBeta2 { o[.beta2] = .double(p.beta2) }
        if p.hasEps { o[.eps] = .double(p.eps) }
        if p.hasShuffle { o[.shuffle] = .bool(p.shuffle) }
        if p.hasSeed { o[.seed] = .int(p.seed) }
        return o
    }

    static func listVariants(_ context: ServerContext, _ request: Cortado_V1_ListVariantsRequest) -> Cortado_V1_ListVariantsResponse {
        var response = Cortado_V1_ListVariantsResponse()
        response.variants = context.variants.list(model: request.model).map { s in
            var v = Cortado_V1_VariantStatus()
            v.model = s.model
            v.variant = s.variant
            v.baseVersion = s.baseVersion
            v.loaded = s.loaded
            v.stored = s.stored
            v.updates = Int64(s.updates)
            return v
        }
        return response
    }

    static func deleteVariant(_ call: GRPCServerCall, _ context: ServerContext) {
        guard context.permitted(call, context.policy.deniedModelControl("DeleteVariant")) else { return }
        context.inline(call) { () throws -> Cortado_V1_DeleteVariantResponse in
            let request = try context.decode(Cortado_V1_DeleteVariantRequest.self, call)
            try context.variants.delete(model: request.model, variant: request.variant)
            context.logger.info("variant deleted", metadata: ["model": "\(request.model)", "variant": "\(request.variant)"])
            return Cortado_V1_DeleteVariantResponse()
        }
    }
}

/// One update in flight: sends its progress and installs its result.
private final class UpdateRun: @unchecked Sendable {
    let call: GRPCServerCall
    let context: ServerContext
    let reservation: UpdateRunner.Reservation
    let servedName: String
    let served: ServedModel
    let variant: String
    let base: MLModel
    let baseVersion: String
    /// Updates that will have made the variant, this one included.
    let updates: Int
    let examples: Int
    private var epochs = 0

    init(call: GRPCServerCall, context: ServerContext, reservation: UpdateRunner.Reservation, servedName: String, served: ServedModel,
         variant: String, base: MLModel, baseVersion: String, updates: Int, examples: Int) {
        self.call = call; self.context = context; self.reservation = reservation; self.servedName = servedName; self.served = served
        self.variant = variant; self.base = base; self.baseVersion = baseVersion; self.updates = updates; self.examples = examples
    }

    /// On the training thread.
    func progress(_ progress: MLUpdateContext) {
        if progress.event == .trainingBegin {
            UpdateRunner.lowerThreadPriority()
            epochs = Int(progress.parameters[.epochs]?.intValue ?? 1)
            return
        }
        var p = Cortado_V1_UpdateProgress()
        p.epoch = progress.metrics[.epochIndex]?.intValue ?? 0
        p.epochs = Int64(epochs)
        if let loss = progress.metrics[.lossValue] { p.loss = loss.doubleValue }
        var event = Cortado_V1_UpdateEvent()
        event.progress = p
        if let bytes: [UInt8] = try? event.serializedBytes() { call.send(bytes) }
    }

    /// On the training thread, once: the result is compiled and installed here, and only
    /// when the update completed and its client is still there.
    func complete(_ result: MLUpdateContext) {
        // The update's place is given back before its client hears the end, so that a client
        // sending its next update on the answer finds the place free.
        func fail(_ status: GRPCStatus) {
            reservation.release()
            call.fail(status)
        }
        let task = result.task
        if call.isCancelled {
            context.logger.info("update cancelled by its client; nothing was changed", metadata: ["model": "\(servedName)"])
            fail(GRPCStatus(.cancelled, "the update was cancelled; nothing was changed"))
            return
        }
        guard task.state == .completed, let spec = result.specification else {
            let error = task.error.map(PredictorService.updateStatus(for:)) ?? GRPCStatus(.internal, "the update ended without a model")
            fail(GRPCStatus(error.code, "\(error.message); nothing was changed"))
            return
        }
        var out = Cortado_V1_UpdateResult()
        out.model = servedName
        out.variant = variant
        out.examples = Int64(examples)
        out.epochs = result.metrics[.epochIndex].flatMap(\.intValue).map { $0 + 1 } ?? Int64(epochs)
        if let loss = result.metrics[.lossValue] { out.loss = loss.doubleValue }
        out.parameters = result.parameters.sorted { $0.key.rawValue < $1.key.rawValue }.map { "\($0.key)=\($0.value)" }
        do {
            if variant.isEmpty {
                // A new version: compiled in full (the old version goes once calls on it end).
                let model = try MLModel(specification: spec, configuration: served.model.configuration, name: servedName)
                let version = Int(served.version).map { String($0 + 1) } ?? served.version + ".1"
                _ = context.repository.add(model, name: servedName, version: version)
                out.version = version
            } else {
                let model = try base.variant(specification: spec, name: servedName)
                // Stored before it serves, so a variant that answered survives a restart;
                // one the store cannot take serves from memory.
                let problem = context.variants.storeHead(model: servedName, variant: variant, base: base, baseVersion: baseVersion,
                                                         specification: spec, updates: updates)
                context.variants.put(model: servedName, variant: variant, baseVersion: baseVersion, base: base,
                                     specification: spec, compiled: model, updates: updates, stored: problem == nil)
                out.version = baseVersion
                out.stored = problem == nil
                if let problem {
                    out.storeError = problem
                    context.logger.warning("variant not stored: it serves from memory until the server stops",
                                           metadata: ["model": "\(servedName)", "variant": "\(variant)", "reason": "\(problem)"])
                }
                context.logger.info("variant updated", metadata: ["model": "\(servedName)", "variant": "\(variant)",
                                                                  "sharesBase": "\(model.sharesBase)", "stored": "\(problem == nil)"])
            }
        } catch {
            fail(GRPCStatus(.internal, "the trained model failed to load: \(error); nothing was changed"))
            return
        }
        var event = Cortado_V1_UpdateEvent()
        event.result = out
        guard let bytes: [UInt8] = try? event.serializedBytes() else {
            fail(GRPCStatus(.internal, "could not encode the update's result"))
            return
        }
        reservation.release()
        call.send(bytes)
        call.finish()
    }
}
