import CortadoCore
import Foundation

/// A planned ML Program function, ready to predict: features in, features out.
final class MLCompiledProgram: MLStatefulCompiledModel, @unchecked Sendable {
    let plan: MILFunctionPlan
    let description: MLModelDescription
    let model: String
    let runner = MILRunner()
    /// Threads an op may use.
    let threads: Int
    /// For each function input, the description's feature of the same name.
    private let inputFeatures: [MLFeatureDescription?]

    /// The labels of the program's `classify` op, when it has one with constant classes.
    let classLabels: MLClassLabels?

    init(plan: MILFunctionPlan, description: MLModelDescription, model: String, threads: Int) throws {
        self.plan = plan
        self.threads = threads
        classLabels = Self.labels(plan.body)
        self.description = description
        self.model = model
        inputFeatures = plan.inputs.map { description.input(named: $0.name) }
        for (i, input) in plan.inputs.enumerated() where inputFeatures[i] == nil {
            if case .state = input.type { continue }
            throw MLModelError(.invalidModel, model: model, "the program's input '\(input.name)' is not among the model's inputs")
        }
        guard plan.outputNames.count >= description.outputs.count || description.predictedProbabilitiesName != nil else {
            throw MLModelError(.invalidModel, model: model, "the model declares \(description.outputs.count) outputs, the program returns \(plan.outputNames.count)")
        }
    }

    func prediction(from input: MLFeatureProvider, options: MLPredictionOptions) throws -> MLFeatureProvider {
        guard plan.inputs.allSatisfy({ if case .state = $0.type { return false } else { return true } }) else {
            throw MLModelError(.generic, model: model, "the model keeps state: predict with a state from makeState()")
        }
        return try prediction(from: input, options: options, states: [:])
    }

    /// States of one session: a zero tensor per state input of the program.
    final class States {
        var cells: [String: MILStateCell]
        init(_ cells: [String: MILStateCell]) { self.cells = cells }
    }

    var keepsState: Bool {
        plan.inputs.contains { if case .state = $0.type { return true } else { return false } }
    }

    func makeStateStorage() throws -> AnyObject {
        var cells: [String: MILStateCell] = [:]
        for input in plan.inputs {
            guard case .state(let wrapped) = input.type else { continue }
            guard let dt = wrapped.dataType, let dims = wrapped.dimensions, dims.allSatisfy({ $0 != nil }) else {
                throw MLModelError(.invalidModel, model: model, "the state '\(input.name)' has no fixed shape")
            }
            let shape = dims.map { $0! }
            let zeros = MILTensor(floats: [Float](repeating: 0, count: shape.reduce(1, *)), shape: shape, dataType: .fp32)
            cells[input.name] = MILStateCell(zeros.converted(to: dt))
        }
        return States(cells)
    }

    func prediction(from input: MLFeatureProvider, state: AnyObject, options: MLPredictionOptions) throws -> MLFeatureProvider {
        guard let states = state as? States else {
            throw MLModelError(.generic, model: model, "the state was not made by this model")
        }
        return try prediction(from: input, options: options, states: states.cells)
    }

    /// The state tensors' current values, for tests and inspection.
    func stateValues(_ state: AnyObject) -> [String: MILTensor] {
        (state as? States)?.cells.mapValues(\.value) ?? [:]
    }

    /// One prediction; `states` hold the session's state tensors (stateful programs).
    func prediction(from input: MLFeatureProvider, options: MLPredictionOptions, states: [String: MILStateCell]) throws -> MLFeatureProvider {
        let frame = MILFrame(slotCount: plan.slotCount, states: states, threads: threads)
        for (i, item) in plan.inputs.enumerated() {
            if case .state = item.type {
                guard let cell = states[item.name] else {
                    throw MLModelError(.invalidModel, model: model, "the program's state '\(item.name)' needs a state (make one with makeState())")
                }
                frame.slots[item.slot] = .state(cell)
                continue
            }
            guard let feature = inputFeatures[i], let value = input.featureValue(for: item.name) else {
                throw MLModelError.featureType(item.name, "the input is missing")
            }
            if plan.arrayInputs.contains(item.slot), let array = value.multiArrayValue, array.dataType == .float32, array.isContiguous,
               let dims = item.type.dimensions, array.shape == dims.map({ $0 ?? -1 }) {
                frame.arrays[item.slot] = array  // read by lowered segments only, as it is
                continue
            }
            frame.slots[item.slot] = .tensor(try MILFeatureIO.tensor(from: value, feature: feature, type: item.type))
        }
        let results: [MILValue]
        do {
            results = try (options.layerTimes.map { MILRunner(layerTimes: $0) } ?? runner).run(plan.body, frame: frame, inputs: [])
        } catch let error as MILError {
            throw MLModelError(.generic, model: model, error.description)
        }
        var outputs: [(name: String, value: MLFeatureValue)] = []
        for (i, name) in plan.outputNames.enumerated() where i < results.count {
            guard let feature = description.output(named: name) ?? (i < description.outputs.count ? description.outputs[i] : nil) else { continue }
            outputs.append((feature.name, try MILFeatureIO.feature(from: results[i], feature: feature, backing: options.outputBackings[feature.name])))
        }
        return MLFeatureListProvider.make(outputs)
    }

    /// The classes of a top-level `classify` op.
    static func labels(_ block: MILBlock) -> MLClassLabels? {
        guard let step = block.steps.last(where: { $0.type == "classify" }), let bound = step.inputs["classes"]?.first,
              case .constant(let value) = bound else { return nil }
        var tensors: [MILTensor] = []
        switch value {
        case .list(let items): tensors = items.compactMap(\.tensor)
        case .tensor(let t):
            tensors = t.dataType == .string ? t.strings.map { MILTensor(.string, shape: [], storage: .string([$0])) }
                : t.ints.map { MILTensor(ints: [$0], shape: []) }
        default: return nil
        }
        if tensors.allSatisfy({ $0.dataType == .string }) { return .strings(tensors.compactMap { $0.strings.first }) }
        return .int64s(tensors.compactMap { $0.ints.first.map(Int64.init) })
    }

    var summary: [String] {
        var lines = ["function: \(plan.name) (\(plan.runCount) operations per prediction, \(plan.foldedCount) computed at load)"]
        let types = plan.computeTypes
        if types.contains(.fp16), plan.lowering?.segments.contains(where: \.computesFP16) == true {
            lines.append("precision: fp16 tensors computed in fp32 (no fp16 arithmetic path on this CPU), stored rounded to fp16 after "
                         + "each op here and at the outputs of the neural-network segments (inside a segment kept in fp32)")
        } else if types.contains(.fp16) {
            lines.append("precision: fp16 tensors computed in fp32 and stored rounded to fp16 (no fp16 arithmetic path on this CPU)")
        } else {
            lines.append("precision: fp32")
        }
        let ops = plan.opCounts.sorted { $0.key < $1.key }.map { "\($0.key) ×\($0.value)" }
        lines.append("operations: " + ops.joined(separator: ", "))
        if !plan.fused.isEmpty {
            lines.append("fused: " + plan.fused.sorted { $0.key < $1.key }.map { "\($0.key) ×\($0.value)" }.joined(separator: ", "))
        }
        return lines + (plan.lowering?.summary(plan) ?? [])
    }
}
