import CortadoCore
import Foundation

/// A compiled pipeline: its stages, each a loaded `MLModel`, and the routing plan.
///
/// A prediction runs the stages in order over one `MLPipelineFeatures`, keeping only the
/// outputs that something later reads. A stage's input check is skipped when the plan
/// proved at load time that its inputs always satisfy its description. Output backings
/// go only to the stage that produces the backed pipeline output; if that stage did not
/// write into the backing, the pipeline copies the value in, so a backing is always honoured.
final class MLCompiledPipeline: MLCompiledModel, @unchecked Sendable {
    let plan: MLPipelinePlan
    let models: [MLModel]
    let isClassifier: Bool
    /// The last stage's class labels, looking through nested pipelines.
    let lastStageLabels: MLClassLabels?

    init(plan: MLPipelinePlan, models: [MLModel], isClassifier: Bool) {
        self.plan = plan
        self.models = models
        self.isClassifier = isClassifier
        if let last = models.last {
            if let nested = last.compiled as? MLCompiledPipeline {
                lastStageLabels = nested.lastStageLabels
            } else {
                lastStageLabels = last.compiled.classLabels
            }
        } else {
            lastStageLabels = nil
        }
    }

    /// For a `pipelineClassifier`: the labels of its last stage.
    var classLabels: MLClassLabels? { isClassifier ? lastStageLabels : nil }

    var summary: [String] {
        var lines = ["\(models.count) stage\(models.count == 1 ? "" : "s")"]
        for (stage, model) in zip(plan.stages, models) {
            lines.append(stage.label)
            lines += model.compiled.summary.map { "  " + $0 }
        }
        return lines
    }

    // MARK: One prediction

    func prediction(from input: MLFeatureProvider, options: MLPredictionOptions) throws -> MLFeatureProvider {
        let features = MLPipelineFeatures(input: input, slotIndex: plan.slotIndex, slotCount: plan.slotCount)
        let backed = !options.outputBackings.isEmpty
        let plain = Self.observing(options)
        for (stage, model) in zip(plan.stages, models) {
            let stageOptions = backed ? Self.options(options, for: stage) : plain
            let began = options.computeSpans == nil ? 0 : DispatchTime.now().uptimeNanoseconds
            defer { options.computeSpans?.add(model.name, kind: "model", start: began, end: DispatchTime.now().uptimeNanoseconds) }
            let out: MLFeatureProvider
            if stage.validatesInputs {
                out = try model.prediction(from: features, options: stageOptions)
            } else {
                do {
                    out = try model.compiled.prediction(from: features, options: stageOptions)
                } catch let error as MLModelError {
                    throw error.inModel(model.name)
                }
            }
            for (name, slot) in stage.stores { features.set(out.featureValue(for: name), slot: slot) }
        }
        var result = try gatherOutputs(input: input, features: features)
        if backed { try applyBackings(options.outputBackings, to: &result) }
        return MLDictionaryFeatureProvider(dictionary: result)
    }

    /// Options with no backings that keep what observes the prediction (layer times, spans).
    static func observing(_ options: MLPredictionOptions) -> MLPredictionOptions {
        var plain = MLPredictionOptions()
        plain.layerTimes = options.layerTimes
        plain.computeSpans = options.computeSpans
        return plain
    }

    /// The options a stage gets: only the backings of pipeline outputs it finally produces.
    static func options(_ options: MLPredictionOptions, for stage: MLPipelineStagePlan) -> MLPredictionOptions {
        var o = observing(options)
        if stage.backedOutputs.isEmpty { return o }
        for (name, backing) in options.outputBackings where stage.backedOutputs.contains(name) {
            o.outputBackings[name] = backing
        }
        return o
    }

    func gatherOutputs(input: MLFeatureProvider, features: MLPipelineFeatures) throws -> [String: MLFeatureValue] {
        var result = [String: MLFeatureValue](minimumCapacity: plan.outputs.count)
        for (name, source) in plan.outputs {
            switch source {
            case .input:
                // A passed-through optional input may be absent; then so is the output.
                if let v = input.featureValue(for: name) { result[name] = v }
            case .slot(let slot):
                guard let v = features.value(slot: slot) else {
                    let producer = plan.stages.last(where: { $0.backedOutputs.contains(name) })?.label ?? "its stage"
                    throw MLModelError(.generic, feature: name, "\(producer) did not produce the pipeline output '\(name)'")
                }
                result[name] = v
            }
        }
        return result
    }

    /// Makes every backed output live in its backing, copying when the producer did not
    /// write into it.
    func applyBackings(_ backings: [String: MLMultiArray], to result: inout [String: MLFeatureValue]) throws {
        for (name, backing) in backings {
            guard let value = result[name] else { continue }
            guard let array = value.multiArrayValue else {
                throw MLModelError.featureType(name, "an output backing was given, but the output is a \(value.type), not a multiArray")
            }
            if array === backing { continue }
            guard array.count == backing.count else {
                throw MLModelError.featureType(name, "output backing has \(backing.count) elements, the output has \(array.count) (shape \(array.shape))")
            }
            let values = array.doubleValues()
            values.withUnsafeBufferPointer { backing.write(contiguous: $0) }
            result[name] = MLFeatureValue(multiArray: backing)
        }
    }

    // MARK: Batches

    /// A batch pays when some stage runs its batch as one computation.
    var runsBatchesAsOne: Bool { models.contains { $0.compiled.runsBatchesAsOne } }

    /// Runs each stage over the whole batch in turn, so stages with batch kernels use them.
    /// With output backings, rows run one by one (a backing holds one row's output).
    func predictions(from batch: MLBatchProvider, options: MLPredictionOptions) throws -> [MLFeatureProvider] {
        if !options.outputBackings.isEmpty || batch.count <= 1 {
            return try (0..<batch.count).map { try prediction(from: batch.features(at: $0), options: options) }
        }
        let rows = (0..<batch.count).map {
            MLPipelineFeatures(input: batch.features(at: $0), slotIndex: plan.slotIndex, slotCount: plan.slotCount)
        }
        let rowBatch = MLArrayBatchProvider(array: rows)
        let plain = Self.observing(options)
        for (stage, model) in zip(plan.stages, models) {
            let began = options.computeSpans == nil ? 0 : DispatchTime.now().uptimeNanoseconds
            defer { options.computeSpans?.add(model.name, kind: "model", start: began, end: DispatchTime.now().uptimeNanoseconds) }
            let outs: [MLFeatureProvider]
            if stage.validatesInputs {
                let b = try model.predictions(fromBatch: rowBatch, options: plain)
                outs = (0..<b.count).map { b.features(at: $0) }
            } else {
                do {
                    outs = try model.compiled.predictions(from: rowBatch, options: plain)
                } catch let error as MLModelError {
                    throw error.inModel(model.name)
                }
            }
            for (row, out) in zip(rows, outs) {
                for (name, slot) in stage.stores { row.set(out.featureValue(for: name), slot: slot) }
            }
        }
        return try rows.map { MLDictionaryFeatureProvider(dictionary: try gatherOutputs(input: $0.input, features: $0)) }
    }
}
