import CortadoCore
import CortadoSpec
import Foundation

/// Runs the convolution parts of a program on the neural-network kind: its planned arena, the
/// channel-blocked layout, fused depthwise and 1×1 steps, Winograd and the other measured
/// convolution algorithms, convolution + bias + add + ReLU epilogues — none of which an op
/// at a time here has.
///
/// At load, before the function body's fusions (`MILFusion`), each maximal run of consecutive
/// steps that all map to neural-network layers (`MILLayerMapping`) and hold at least one `conv`
/// becomes a `NeuralNetwork` model of its own (`EXACT_ARRAY_MAPPING`, so every blob keeps the
/// program's `[N, C, H, W]` shape): its inputs are the values the run reads from before it, its
/// outputs every value of the run that a later step or the function's outputs read. It is
/// compiled through the kind registry (`MLCompileContext.compileSubmodel`, as a pipeline compiles
/// its stages; this module knows no other kind) with the program's configuration, threads
/// included, and the run's steps are replaced by one step that predicts with it
/// (`MILLoweredSegment`). When the switch is off, the neural-network kind is not registered,
/// or the network does not compile, the steps stay as they are.
///
/// Only the function's own body is lowered (not the blocks of `cond` or loops). fp16 values
/// map too: the network computes in fp32 and a segment's fp16 values are what the interpreter
/// holds (fp16 values in Floats), so its fp16 inputs go in exactly and its fp16 outputs are
/// rounded to fp16 as every op's are (`MILRunner.conform`); only the values inside a segment
/// are no longer rounded between its ops.
final class MILLowering {
    /// What `CORTADO_MIL_LOWERING` lets the planner lower.
    enum Mode {
        /// `0`, `off` or `false`: every op stays on the interpreter.
        case off
        /// `fp32`: ops on fp32 values only (fp16 ones keep their per-op rounding).
        case fp32
        /// Anything else (the default): fp32 and fp16 ops.
        case all
    }

    static let mode: Mode = {
        switch ProcessInfo.processInfo.environment["CORTADO_MIL_LOWERING"]?.lowercased() {
        case "0", "off", "false": return .off
        case "fp32": return .fp32
        default: return .all
        }
    }()

    /// The kind registry's name for the networks a segment becomes.
    static let kindName = "neuralNetwork"

    enum Availability {
        case on
        /// `CORTADO_MIL_LOWERING=0`.
        case switchedOff
        /// No kind is registered for neural networks.
        case noKind
    }

    let availability: Availability
    private let compile: ((CoreML_Specification_Model, String) throws -> MLModel)?
    /// The segments made, in program order.
    private(set) var segments: [MILLoweredSegment] = []
    /// Runs that would have been lowered but did not compile, with why.
    private(set) var failures: [String] = []
    /// Steps of the function body before lowering (what the interpreter would run).
    private(set) var bodyCount = 0

    /// The lowering `context` allows: its sub-models compile with the program's configuration.
    init(context: MLCompileContext) {
        if Self.mode == .off {
            (availability, compile) = (.switchedOff, nil)
        } else if MLModelKindRegistry.shared.kind(for: Self.kindName) == nil {
            (availability, compile) = (.noKind, nil)
        } else {
            availability = .on
            // The program's configuration, less the function it chose (a network has one).
            var configuration = context.configuration
            configuration.functionName = nil
            let networks = MLCompileContext(modelName: context.modelName, description: context.description, configuration: configuration,
                                            depth: context.depth, resources: context.resources)
            compile = { spec, name in try networks.compileSubmodel(spec, name: name) }
        }
    }

    /// Operations the segments run.
    var loweredCount: Int { segments.reduce(0) { $0 + $1.opCount } }

    /// The steps of a function body with each lowerable run replaced by one step. `inputTypes` are
    /// the declared types of the values no step writes (the function's inputs); `outputs` the
    /// body's; `slotCount` the function's slots so far.
    func lower(_ steps: [MILStep], outputs: [MILArgument], inputTypes: [Int: MILType], slotCount: Int) -> [MILStep] {
        bodyCount = steps.count
        guard compile != nil else { return steps }
        var types = inputTypes
        for step in steps {
            for (slot, type) in zip(step.outputSlots, step.outputTypes) { types[slot] = type }
        }
        let layers = steps.map { step -> CoreML_Specification_NeuralNetworkLayer? in
            if Self.mode == .fp32, Self.touchesFP16(step, types) { return nil }
            return MILLayerMapping.layer(for: step, types: types, slotCount: slotCount)
        }
        // The last step reading each value; the body's outputs read after every step.
        var lastReader: [Int: Int] = [:]
        for (i, step) in steps.enumerated() {
            for slot in step.readSlots { lastReader[slot] = i }
        }
        for case .slot(let slot, _) in outputs { lastReader[slot] = steps.count }
        var result: [MILStep] = []
        var start = 0
        while start < steps.count {
            var end = start
            while end < steps.count, layers[end] != nil { end += 1 }
            if end == start {
                result.append(steps[start])
                start += 1
                continue
            }
            let run = start..<end
            if let step = segment(Array(steps[run]), layers: layers[run].map { $0! }, readAfter: { (lastReader[$0] ?? -1) >= end }, types: types) {
                result.append(step)
            } else {
                result += steps[run]
            }
            start = end
        }
        return result
    }

    /// Whether `step` reads or writes an fp16 value.
    private static func touchesFP16(_ step: MILStep, _ types: [Int: MILType]) -> Bool {
        (step.readSlots + step.outputSlots).contains { types[$0]?.dataType == .fp16 }
    }

    /// One run as a lowered step, or nil when it holds no convolution, leaves nothing to a later
    /// step, or its network does not compile (noted in `failures`).
    private func segment(_ run: [MILStep], layers: [CoreML_Specification_NeuralNetworkLayer], readAfter: (Int) -> Bool,
                         types: [Int: MILType]) -> MILStep? {
        guard let compile, run.contains(where: { $0.type == "conv" }) else { return nil }
        var written = Set<Int>(), seen = Set<Int>()
        var inputs: [(slot: Int, name: String)] = []
        for step in run {
            for key in step.inputs.keys.sorted() {
                for case .slot(let slot, let name) in step.inputs[key]! where !written.contains(slot) && seen.insert(slot).inserted {
                    inputs.append((slot, name))
                }
            }
            written.formUnion(step.outputSlots)
        }
        var outputs: [(slot: Int, name: String, type: MILType)] = []
        for step in run {
            for (i, slot) in step.outputSlots.enumerated() where readAfter(slot) {
                outputs.append((slot, step.outputNames[i], step.outputTypes[i]))
            }
        }
        guard !outputs.isEmpty else { return nil }
        let name = "neural network \(segments.count + 1)"
        let inputShapes = inputs.map { MILLayerMapping.shape4(types[$0.slot])! }
        let outputShapes = outputs.map { MILLayerMapping.shape4($0.type)! }
        let model: MLModel
        do {
            model = try compile(Self.network(layers, inputs: zip(inputs.map(\.name), inputShapes), outputs: zip(outputs.map(\.name), outputShapes)), name)
        } catch {
            failures.append("ops '\(run[0].name)' to '\(run[run.count - 1].name)' (\(run.count)) stay here: \(error)")
            return nil
        }
        var counts: [String: Int] = [:]
        for step in run { counts[step.type, default: 0] += 1 }
        let segment = MILLoweredSegment(name: name, model: model, inputNames: inputs.map(\.name), inputShapes: inputShapes,
                                        outputNames: outputs.map(\.name), outputShapes: outputShapes,
                                        outputTypes: outputs.map { $0.type.dataType ?? .fp32 }, opCounts: counts,
                                        computesFP16: run.contains { Self.touchesFP16($0, types) })
        segments.append(segment)
        return MILStep(type: MILLoweredSegment.stepType, name: name, kernel: segment.run, inputs: [MILLoweredSegment.valuesInput: inputs.map { .slot($0.slot, $0.name) }],
                       outputSlots: outputs.map(\.slot), outputNames: outputs.map(\.name), outputTypes: outputs.map(\.type), blocks: [])
    }

    /// The function inputs declared fp32 that lowered segments read and nothing else does (no
    /// other step, nor the function's outputs). (An fp16 input is rounded to fp16 when it is
    /// read, whatever array the request holds.)
    func inputsOnlySegmentsRead(_ body: MILBlock, inputs: [(slot: Int, type: MILType)]) -> Set<Int> {
        var only = Set<Int>()
        for (slot, type) in inputs where type.dataType == .fp32 {
            let readers = body.steps.filter { $0.readSlots.contains(slot) }
            let returned = body.outputs.contains { if case .slot(slot, _) = $0 { return true } else { return false } }
            if !readers.isEmpty && !returned && readers.allSatisfy({ $0.type == MILLoweredSegment.stepType }) { only.insert(slot) }
        }
        return only
    }

    /// The `NeuralNetwork` model of a run: fp32 array features of the values' own shapes.
    static func network<I: Sequence, O: Sequence>(_ layers: [CoreML_Specification_NeuralNetworkLayer], inputs: I, outputs: O) -> CoreML_Specification_Model
        where I.Element == (String, [Int]), O.Element == (String, [Int]) {
        func feature(_ name: String, _ shape: [Int]) -> CoreML_Specification_FeatureDescription {
            var f = CoreML_Specification_FeatureDescription()
            f.name = name
            f.type.multiArrayType.shape = shape.map(Int64.init)
            f.type.multiArrayType.dataType = .float32
            return f
        }
        var spec = CoreML_Specification_Model()
        spec.specificationVersion = 4  // Core ML 3: EXACT_ARRAY_MAPPING
        spec.description_p.input = inputs.map(feature)
        spec.description_p.output = outputs.map(feature)
        spec.neuralNetwork.layers = layers
        spec.neuralNetwork.arrayInputShapeMapping = .exactArrayMapping
        return spec
    }

    /// Lines for `cortado inspect`: how many ops run on the neural-network kind, in how many
    /// segments, and each segment's network. Nothing for a program without convolutions.
    func summary(_ plan: MILFunctionPlan) -> [String] {
        let convolutions = plan.opCounts["conv"] ?? 0
        guard convolutions > 0 || !segments.isEmpty else { return [] }
        let head = "neural-network engine: "
        switch availability {
        case .switchedOff: return [head + "off (CORTADO_MIL_LOWERING=0): every op runs here"]
        case .noKind: return [head + "not available (no kind is registered for neural networks): every op runs here"]
        case .on: break
        }
        var lines: [String] = []
        if segments.isEmpty {
            lines.append(head + "no segment" + (Self.mode == .fp32 && plan.computeTypes.contains(.fp16) ? " (CORTADO_MIL_LOWERING=fp32: fp16 ops stay here)" : ""))
        } else {
            let plural = segments.count == 1 ? "" : "s"
            lines.append(head + "\(loweredCount) of \(bodyCount) operations in \(segments.count) segment\(plural)")
        }
        for segment in segments {
            let ops = segment.opCounts.sorted { $0.key < $1.key }.map { "\($0.key) ×\($0.value)" }.joined(separator: ", ")
            lines.append("  \(segment.name): \(segment.opCount) ops (\(ops)); reads \(segment.inputNames.joined(separator: ", ")), writes \(segment.outputNames.joined(separator: ", "))"
                         + (segment.computesFP16 ? "; fp16 values computed in fp32, rounded to fp16 at its outputs" : ""))
            lines += segment.model.compiled.summary.map { "    " + $0 }
        }
        lines += failures.map { "  " + $0 }
        return lines
    }
}
