import CortadoCore
import CortadoSpec

/// A function of a program, planned once at load: every value has a slot, `const` values and
/// operations whose inputs are all known at load (weight decompression among them) are
/// computed once and held as constants, and every other operation is bound to its kernel.
final class MILFunctionPlan {
    let name: String
    /// The function's inputs: name, declared type, slot.
    let inputs: [(name: String, type: MILType, slot: Int)]
    let body: MILBlock
    let outputNames: [String]
    let slotCount: Int
    /// Operations by type, as written in the program (const and folded ones included).
    let opCounts: [String: Int]
    /// Operations computed at load.
    let foldedCount: Int
    /// Operations run per prediction.
    let runCount: Int
    /// Element types of the tensors the program computes with (fp16, fp32, …).
    let computeTypes: Set<MILDataType>
    /// Groups of ops run as one ("conv+relu", "conv+add+relu" → count).
    let fused: [String: Int]
    /// The runs of ops handed to the neural-network kind, when the planner was given a lowering.
    let lowering: MILLowering?
    /// The fp32 inputs (by slot) that only lowered segments read: a prediction passes them on as
    /// the request's arrays when they are fp32 of the declared shape (`MILFrame.arrays`).
    let arrayInputs: Set<Int>

    init(name: String, inputs: [(name: String, type: MILType, slot: Int)], body: MILBlock, outputNames: [String], slotCount: Int,
         opCounts: [String: Int], foldedCount: Int, runCount: Int, computeTypes: Set<MILDataType>, fused: [String: Int],
         lowering: MILLowering?) {
        self.fused = fused
        self.lowering = lowering
        arrayInputs = lowering?.inputsOnlySegmentsRead(body, inputs: inputs.map { ($0.slot, $0.type) }) ?? []
        self.name = name; self.inputs = inputs; self.body = body; self.outputNames = outputNames; self.slotCount = slotCount
        self.opCounts = opCounts; self.foldedCount = foldedCount; self.runCount = runCount; self.computeTypes = computeTypes
    }
}

struct MILPlanner {
    let decoder: MILValueDecoder
    let runner = MILRunner()
    private var nextSlot = 0
    private var opCounts: [String: Int] = [:]
    private var folded = 0
    private var runCount = 0
    private var computeTypes = Set<MILDataType>()
    private var fused: [String: Int] = [:]
    /// The declared types of the function's inputs by slot (for the fusions' shape checks).
    private var inputTypes: [Int: MILType] = [:]
    /// Hands the function body's convolution runs to the neural-network kind (nil: none).
    let lowering: MILLowering?

    /// Operations never computed at load although their inputs may all be constants.
    static let neverFolded: Set<String> = [
        "random_bernoulli", "random_categorical", "random_normal", "random_uniform",
        "read_state", "write_state", "coreml_update_state", "make_list",
    ]

    init(decoder: MILValueDecoder, lowering: MILLowering? = nil) {
        self.decoder = decoder
        self.lowering = lowering
    }

    static func plan(_ program: CoreML_Specification_MILSpec_Program, function name: String, decoder: MILValueDecoder,
                     lowering: MILLowering? = nil) throws -> MILFunctionPlan {
        guard let function = program.functions[name] else {
            let known = program.functions.keys.sorted().joined(separator: ", ")
            throw MILError.invalid("program", "no function named '\(name)' (the program has: \(known))")
        }
        var planner = MILPlanner(decoder: decoder, lowering: lowering)
        return try planner.plan(function, name: name)
    }

    mutating func plan(_ function: CoreML_Specification_MILSpec_Function, name: String) throws -> MILFunctionPlan {
        let block: CoreML_Specification_MILSpec_Block
        if let b = function.blockSpecializations[function.opset] {
            block = b
        } else if function.blockSpecializations.count == 1, let b = function.blockSpecializations.values.first {
            block = b
        } else {
            throw MILError.invalid("function \(name)", "no block for its opset '\(function.opset)'")
        }
        var scope: [String: MILArgument] = [:]
        var inputs: [(name: String, type: MILType, slot: Int)] = []
        for input in function.inputs {
            let slot = newSlot()
            let type = try MILType(input.type, op: "function \(name) input \(input.name)")
            inputs.append((input.name, type, slot))
            inputTypes[slot] = type
            scope[input.name] = .slot(slot, input.name)
        }
        let body = try plan(block, scope: scope, inputSlots: [], isBody: true)
        return MILFunctionPlan(name: name, inputs: inputs, body: body, outputNames: block.outputs, slotCount: nextSlot,
                               opCounts: opCounts, foldedCount: folded, runCount: runCount, computeTypes: computeTypes, fused: fused,
                               lowering: lowering)
    }

    private mutating func newSlot() -> Int {
        defer { nextSlot += 1 }
        return nextSlot
    }

    /// `isBody`: the function's own block, whose convolution runs may be lowered.
    private mutating func plan(_ block: CoreML_Specification_MILSpec_Block, scope outer: [String: MILArgument], inputSlots: [Int],
                               isBody: Bool = false) throws -> MILBlock {
        var scope = outer
        var steps: [MILStep] = []
        for op in block.operations {
            let opName = Self.name(of: op)
            let label = "\(op.type) '\(opName)'"
            opCounts[op.type, default: 0] += 1
            let outputTypes = try op.outputs.map { try MILType($0.type, op: label) }
            if op.type == "const" {
                guard let val = op.attributes["val"], let out = op.outputs.first else {
                    throw MILError.invalid(label, "a const op without a value or an output")
                }
                scope[out.name] = .constant(try decoder.value(val, op: label))
                continue
            }
            guard let kernel = MILOpRegistry.kernel(op.type) else {
                throw MILError.unsupported(label, MILOpRegistry.whyNot(op.type))
            }
            var inputs: [String: [MILArgument]] = [:]
            for (key, argument) in op.inputs {
                inputs[key] = try argument.arguments.map { binding -> MILArgument in
                    switch binding.binding {
                    case .name(let n):
                        guard let a = scope[n] else { throw MILError.invalid(label, "its input '\(key)' names '\(n)', which no earlier op defines") }
                        return a
                    case .value(let v):
                        return .constant(try decoder.value(v, op: label))
                    case nil:
                        throw MILError.invalid(label, "its input '\(key)' has an empty binding")
                    }
                }
            }
            // The iOS16 constexpr ops write their parameters as attributes, not inputs.
            for (key, attribute) in op.attributes where key != "name" && inputs[key] == nil {
                inputs[key] = [.constant(try decoder.value(attribute, op: label))]
            }
            var blocks: [MILBlock] = []
            for nested in op.blocks {
                var inner = scope
                var slots: [Int] = []
                for input in nested.inputs {
                    let slot = newSlot()
                    slots.append(slot)
                    inner[input.name] = .slot(slot, input.name)
                }
                blocks.append(try plan(nested, scope: inner, inputSlots: slots))
            }
            let outputSlots = op.outputs.map { _ in newSlot() }
            let step = MILStep(type: op.type, name: opName, kernel: kernel, inputs: inputs, outputSlots: outputSlots,
                               outputNames: op.outputs.map(\.name), outputTypes: outputTypes, blocks: blocks)
            let allConstant = inputs.values.allSatisfy { $0.allSatisfy { if case .constant = $0 { return true } else { return false } } }
            if blocks.isEmpty && allConstant && !Self.neverFolded.contains(op.type) {
                let frame = MILFrame(slotCount: nextSlot)
                try runner.execute(step, frame: frame)
                for (out, slot) in zip(op.outputs, outputSlots) {
                    scope[out.name] = .constant(frame.slots[slot]!)
                }
                folded += 1
            } else {
                for (out, slot) in zip(op.outputs, outputSlots) { scope[out.name] = .slot(slot, out.name) }
                for t in outputTypes { if let dt = t.dataType, dt.isFloat { computeTypes.insert(dt) } }
                steps.append(step)
                runCount += 1
            }
        }
        let outputs = try block.outputs.map { n -> MILArgument in
            guard let a = scope[n] else { throw MILError.invalid("block", "its output '\(n)' is not defined in it") }
            return a
        }
        // Lowered before the fusions: the network's planner makes its own.
        var lowered = steps
        if isBody, let lowering {
            lowered = lowering.lower(steps, outputs: outputs, inputTypes: inputTypes, slotCount: nextSlot)
        }
        let fusedSteps = MILFusion.fuse(lowered, outputs: outputs, inputTypes: inputTypes, fused: &fused)
        runCount -= steps.count - fusedSteps.count
        return MILBlock(inputSlots: inputSlots, steps: fusedSteps, outputs: outputs)
    }

    /// An op's name: its `name` attribute, else its first output's name.
    static func name(of op: CoreML_Specification_MILSpec_Operation) -> String {
        if let attr = op.attributes["name"], case .immediateValue(let imm) = attr.value, case .tensor(let t) = imm.value,
           case .strings(let s) = t.value, let first = s.values.first {
            return first
        }
        return op.outputs.first?.name ?? op.type
    }
}
