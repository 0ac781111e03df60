/// Fusions the planner makes once at load: a ReLU that alone reads a convolution's, a linear
/// layer's or an addition's result (a residual block's) runs inside that op (in the
/// convolution kernel's epilogue while the tile is in cache, or over the op's own fresh
/// output) instead of as a pass of its own that reads one array and allocates another.
enum MILFusion {
    /// The constant input a fused op reads to learn its activation ("relu").
    static let activationInput = "__fused_activation"
    static let producers: Set<String> = ["conv", "linear", "add"]

    /// The steps with each fusable pair merged; `fused` counts the pairs by name.
    static func fuse(_ steps: [MILStep], outputs: [MILArgument], fused: inout [String: Int]) -> [MILStep] {
        var readers: [Int: Int] = [:]
        for step in steps { for slot in step.readSlots { readers[slot, default: 0] += 1 } }
        for step in steps { for block in step.blocks { for case .slot(let s, _) in block.outputs { readers[s, default: 0] += 1 } } }
        for case .slot(let s, _) in outputs { readers[s, default: 0] += 1 }
        var result: [MILStep] = []
        var skip = Set<Int>()
        for (i, step) in steps.enumerated() {
            if skip.contains(i) { continue }
            guard producers.contains(step.type), step.outputSlots.count == 1, step.inputs[activationInput] == nil,
                  readers[step.outputSlots[0]] == 1,
                  let j = steps.indices.first(where: { $0 > i && steps[$0].readSlots.contains(step.outputSlots[0]) }),
                  steps[j].type == "relu", steps[j].blocks.isEmpty,
                  case .slot(let s, _)? = steps[j].inputs["x"]?.first, s == step.outputSlots[0] else {
                result.append(step)
                continue
            }
            let relu = steps[j]
            var inputs = step.inputs
            inputs[activationInput] = [.constant(.tensor(MILTensor(.string, shape: [], storage: .string(["relu"]))))]
            result.append(MILStep(type: step.type, name: step.name, kernel: step.kernel, inputs: inputs, outputSlots: relu.outputSlots,
                                  outputNames: relu.outputNames, outputTypes: relu.outputTypes, blocks: []))
            skip.insert(j)
            fused["\(step.type)+relu", default: 0] += 1
        }
        return result
    }
}
