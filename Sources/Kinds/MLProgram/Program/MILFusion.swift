/// Fusions the planner makes once at load, so an op and the ones that only finish its result
/// run as one instead of as passes that each read one array and allocate another:
/// - a `batch_norm` with constant statistics that alone reads a convolution with constant
///   weights is folded into those weights and the bias (coremltools' default passes already
///   do this when they convert; a program saved without them keeps the op);
/// - a ReLU that alone reads a convolution's, a linear layer's or an addition's result (a
///   residual block's) runs inside that op (in the convolution kernel's epilogue while the
///   tile is in cache, or over the op's own fresh output);
/// - a residual block's `relu(conv(x) + skip)`: a `conv` whose only reader is an `add` of a
///   tensor of the same declared shape computed before the convolution (optionally followed by
///   a ReLU that alone reads the sum) runs as one convolution whose epilogue adds `skip` and
///   then applies the ReLU (the direct kernel's residual epilogue; other paths add afterwards).
///   An add that broadcasts, a convolution read by anything else, or shapes the program does
///   not declare leave the ops as they are;
/// - attention, `matmul(Q, K, transpose_y) [→ mul or real_div by a constant scalar] →
///   softmax(last axis) → matmul(·, V)`, each value read only by the next op and Q, K, V of
///   one declared batch shape, runs as one op (`MILFusedAttention`) that never writes the
///   whole score tensor.
enum MILFusion {
    /// The constant input a fused op reads to learn its activation ("relu").
    static let activationInput = "__fused_activation"
    /// The input a fused convolution adds to its result before the activation.
    static let residualInput = "__fused_residual"
    static let producers: Set<String> = ["conv", "linear", "add"]

    /// The steps with each fusable group merged; `fused` counts the groups by name
    /// ("conv+add+relu", "conv+add", "conv+relu", …). `inputTypes` are the declared types of
    /// the block's values no step writes (the function's inputs), for the shape checks.
    static func fuse(_ steps: [MILStep], outputs: [MILArgument], inputTypes: [Int: MILType], fused: inout [String: Int]) -> [MILStep] {
        let attention = fuseAttention(steps, outputs: outputs, inputTypes: inputTypes, fused: &fused)
        let folded = foldBatchNorms(attention, outputs: outputs, fused: &fused)
        let withResiduals = fuseResiduals(folded, outputs: outputs, inputTypes: inputTypes, fused: &fused)
        return fuseRelus(withResiduals, outputs: outputs, fused: &fused)
    }

    /// How many steps (and block outputs) read each slot.
    static func readers(_ steps: [MILStep], outputs: [MILArgument]) -> [Int: Int] {
        var readers: [Int: Int] = [:]
        for step in steps { for slot in step.readSlots { readers[slot, default: 0] += 1 } }
        for step in steps { for block in step.blocks { for case .slot(let s, _) in block.outputs { readers[s, default: 0] += 1 } } }
        for case .slot(let s, _) in outputs { readers[s, default: 0] += 1 }
        return readers
    }

    /// The one later step that reads `slot` when it is its only reader, with its index.
    private static func onlyReader(of slot: Int, after i: Int, in steps: [MILStep], readers: [Int: Int]) -> Int? {
        guard readers[slot] == 1 else { return nil }
        return steps.indices.first { $0 > i && steps[$0].readSlots.contains(slot) }
    }

    /// The slot bound to a single-valued input, if it is one.
    private static func slot(_ step: MILStep, _ input: String) -> (Int, String)? {
        guard let bound = step.inputs[input], bound.count == 1, case .slot(let s, let n) = bound[0] else { return nil }
        return (s, n)
    }

    /// A declared shape with every dimension known, else nil.
    private static func knownShape(_ type: MILType?) -> [Int]? {
        guard let dims = type?.dimensions, dims.allSatisfy({ $0 != nil }) else { return nil }
        return dims.map { $0! }
    }

    /// A constant tensor bound to an input, nil when absent; `.none` when bound to a computed value.
    private static func constant(_ step: MILStep, _ input: String) -> MILTensor?? {
        guard let bound = step.inputs[input] else { return .some(nil) }
        guard bound.count == 1, case .constant(let v) = bound[0], let t = v.tensor else { return .none }
        return .some(t)
    }

    /// conv → batch_norm (constant mean, variance, gamma, beta, epsilon) as the convolution with
    /// weight[o]·s[o] and bias (bias[o] − mean[o])·s[o] + beta[o], s = gamma / √(variance + ε).
    static func foldBatchNorms(_ steps: [MILStep], outputs: [MILArgument], fused: inout [String: Int]) -> [MILStep] {
        let readers = readers(steps, outputs: outputs)
        var result: [MILStep] = []
        var skip = Set<Int>()
        for (i, step) in steps.enumerated() {
            if skip.contains(i) { continue }
            guard step.type == "conv", step.outputSlots.count == 1, step.blocks.isEmpty, step.inputs[activationInput] == nil,
                  case .some(let w?) = constant(step, "weight"), w.rank >= 3, w.dataType.isFloat, case .some(let bias) = constant(step, "bias"),
                  let j = onlyReader(of: step.outputSlots[0], after: i, in: steps, readers: readers),
                  steps[j].type == "batch_norm", steps[j].blocks.isEmpty, let x = slot(steps[j], "x"), x.0 == step.outputSlots[0],
                  case .some(let mean?) = constant(steps[j], "mean"), case .some(let variance?) = constant(steps[j], "variance"),
                  case .some(let gamma) = constant(steps[j], "gamma"), case .some(let beta) = constant(steps[j], "beta"),
                  case .some(let epsilon) = constant(steps[j], "epsilon") else {
                result.append(step)
                continue
            }
            let c = w.shape[0]
            let eps = epsilon?.floats.first ?? 1e-5
            let m = mean.floats, v = variance.floats, g = gamma?.floats ?? [Float](repeating: 1, count: c)
            let be = beta?.floats ?? [Float](repeating: 0, count: c), b = bias?.floats ?? [Float](repeating: 0, count: c)
            guard m.count == c, v.count == c, g.count == c, be.count == c, b.count == c, epsilon.map({ $0.count == 1 }) ?? true else {
                result.append(step)
                continue
            }
            let scale = (0..<c).map { g[$0] / (v[$0] + eps).squareRoot() }
            var weights = w.floats
            let per = weights.count / c
            for o in 0..<c { for q in 0..<per { weights[o * per + q] *= scale[o] } }
            let shift = (0..<c).map { (b[$0] - m[$0]) * scale[$0] + be[$0] }
            var inputs = step.inputs
            inputs["weight"] = [.constant(.tensor(MILTensor(floats: weights, shape: w.shape, dataType: w.dataType)))]
            inputs["bias"] = [.constant(.tensor(MILTensor(floats: shift, shape: [c], dataType: bias?.dataType ?? w.dataType)))]
            let bn = steps[j]
            result.append(MILStep(type: step.type, name: step.name, kernel: step.kernel, inputs: inputs, outputSlots: bn.outputSlots,
                                  outputNames: bn.outputNames, outputTypes: bn.outputTypes, blocks: []))
            skip.insert(j)
            fused["conv+batch_norm", default: 0] += 1
        }
        return result
    }

    /// conv → add(conv, skip) [→ relu] as one convolution with a residual epilogue.
    static func fuseResiduals(_ steps: [MILStep], outputs: [MILArgument], inputTypes: [Int: MILType], fused: inout [String: Int]) -> [MILStep] {
        let readers = readers(steps, outputs: outputs)
        var writer: [Int: Int] = [:]
        var types = inputTypes
        for (i, step) in steps.enumerated() {
            for (slot, type) in zip(step.outputSlots, step.outputTypes) { writer[slot] = i; types[slot] = type }
        }
        var result: [MILStep] = []
        var skip = Set<Int>()
        for (i, step) in steps.enumerated() {
            if skip.contains(i) { continue }
            guard step.type == "conv", step.outputSlots.count == 1, step.blocks.isEmpty, step.inputs[activationInput] == nil,
                  step.inputs[residualInput] == nil,
                  let j = onlyReader(of: step.outputSlots[0], after: i, in: steps, readers: readers),
                  steps[j].type == "add", steps[j].blocks.isEmpty, steps[j].outputSlots.count == 1,
                  let x = slot(steps[j], "x"), let y = slot(steps[j], "y") else {
                result.append(step)
                continue
            }
            let out = step.outputSlots[0]
            let skipValue = x.0 == out ? y : x
            // The skip tensor must exist before the convolution runs (not written between the
            // two), be another value, and have the convolution's declared shape and type: an
            // add that broadcasts stays an add.
            guard (x.0 == out) != (y.0 == out), writer[skipValue.0].map({ $0 < i }) ?? true,
                  let convShape = knownShape(step.outputTypes[0]), knownShape(types[skipValue.0]) == convShape,
                  knownShape(steps[j].outputTypes[0]) == convShape,
                  types[skipValue.0]?.dataType == step.outputTypes[0].dataType else {
                result.append(step)
                continue
            }
            var inputs = step.inputs
            inputs[residualInput] = [.slot(skipValue.0, skipValue.1)]
            var last = steps[j]
            var name = "conv+add"
            if let k = onlyReader(of: last.outputSlots[0], after: j, in: steps, readers: readers), steps[k].type == "relu",
               steps[k].blocks.isEmpty, let r = slot(steps[k], "x"), r.0 == last.outputSlots[0] {
                inputs[activationInput] = [.constant(.tensor(MILTensor(.string, shape: [], storage: .string(["relu"]))))]
                last = steps[k]
                skip.insert(k)
                name += "+relu"
            }
            result.append(MILStep(type: step.type, name: step.name, kernel: step.kernel, inputs: inputs, outputSlots: last.outputSlots,
                                  outputNames: last.outputNames, outputTypes: last.outputTypes, blocks: []))
            skip.insert(j)
            fused[name, default: 0] += 1
        }
        return result
    }

    /// A constant bool input (absent: false); nil when it is bound to a computed value.
    private static func flag(_ step: MILStep, _ input: String) -> Bool? {
        guard case .some(let t) = constant(step, input) else { return nil }
        return t?.bools.first ?? false
    }

    /// matmul → [scale] → softmax → matmul as one attention op, placed where the last matmul was
    /// (Q and K are computed before the first matmul, V before the last).
    static func fuseAttention(_ steps: [MILStep], outputs: [MILArgument], inputTypes: [Int: MILType], fused: inout [String: Int]) -> [MILStep] {
        let readers = readers(steps, outputs: outputs)
        var types = inputTypes
        for step in steps { for (slot, type) in zip(step.outputSlots, step.outputTypes) { types[slot] = type } }
        var replaced: [Int: MILStep] = [:]
        var removed = Set<Int>()
        for (i, first) in steps.enumerated() where first.type == "matmul" && !removed.contains(i) && replaced[i] == nil {
            guard first.outputSlots.count == 1, let q = slot(first, "x"), let k = slot(first, "y"), flag(first, "transpose_x") == false,
                  let transposeK = flag(first, "transpose_y"), var next = onlyReader(of: first.outputSlots[0], after: i, in: steps, readers: readers)
            else { continue }
            var chain = [i]
            var current = first.outputSlots[0]
            var scale: Float = 1
            if steps[next].type == "mul" || steps[next].type == "real_div" {
                let op = steps[next]
                guard let x = op.inputs["x"], let y = op.inputs["y"], x.count == 1, y.count == 1 else { continue }
                let other: MILArgument
                if case .slot(let s, _) = x[0], s == current { other = y[0] }
                else if op.type == "mul", case .slot(let s, _) = y[0], s == current { other = x[0] }
                else { continue }
                guard case .constant(let value) = other, let t = value.tensor, t.count == 1, t.dataType.isFloat, let c = t.floats.first, c != 0,
                      op.outputSlots.count == 1, let after = onlyReader(of: op.outputSlots[0], after: next, in: steps, readers: readers) else { continue }
                scale = op.type == "mul" ? c : 1 / c
                chain.append(next)
                current = op.outputSlots[0]
                next = after
            }
            let softmax = steps[next]
            guard softmax.type == "softmax", softmax.outputSlots.count == 1, let sx = slot(softmax, "x"), sx.0 == current,
                  let rank = knownShape(softmax.outputTypes[0])?.count, rank >= 2,
                  case .some(let axis) = constant(softmax, "axis"), (axis?.ints.first ?? -1) == -1 || axis?.ints.first == rank - 1,
                  let last = onlyReader(of: softmax.outputSlots[0], after: next, in: steps, readers: readers) else { continue }
            chain.append(next)
            let second = steps[last]
            guard !removed.contains(last), second.type == "matmul", second.outputSlots.count == 1, let px = slot(second, "x"), px.0 == softmax.outputSlots[0],
                  let v = slot(second, "y"), v.0 != px.0, flag(second, "transpose_x") == false, flag(second, "transpose_y") == false,
                  let qs = knownShape(types[q.0]), let ks = knownShape(types[k.0]), let vs = knownShape(types[v.0]),
                  qs.count == rank, ks.count == rank, vs.count == rank,
                  qs.dropLast(2) == ks.dropLast(2), qs.dropLast(2) == vs.dropLast(2),
                  (transposeK ? ks[rank - 2] : ks[rank - 1]) == vs[rank - 2], (transposeK ? ks[rank - 1] : ks[rank - 2]) == qs[rank - 1]
            else { continue }
            let inputs: [String: [MILArgument]] = [
                "query": [.slot(q.0, q.1)], "key": [.slot(k.0, k.1)], "value": [.slot(v.0, v.1)],
                MILFusedAttention.scaleInput: [.constant(.tensor(.scalar(scale)))],
                MILFusedAttention.keyTransposedInput: [.constant(.tensor(MILTensor(bools: [!transposeK], shape: [])))],
            ]
            replaced[last] = MILStep(type: "attention", name: second.name, kernel: MILFusedAttention.kernel, inputs: inputs,
                                     outputSlots: second.outputSlots, outputNames: second.outputNames, outputTypes: second.outputTypes, blocks: [])
            removed.formUnion(chain)
            fused["matmul+softmax+matmul (attention)", default: 0] += 1
        }
        return steps.indices.compactMap { removed.contains($0) ? nil : replaced[$0] ?? steps[$0] }
    }

    /// An op → relu pair as the op with the ReLU in its epilogue.
    static func fuseRelus(_ steps: [MILStep], outputs: [MILArgument], fused: inout [String: Int]) -> [MILStep] {
        let readers = readers(steps, outputs: outputs)
        var result: [MILStep] = []
        var skip = Set<Int>()
        for (i, step) in steps.enumerated() {
            if skip.contains(i) { continue }
            guard producers.contains(step.type), step.outputSlots.count == 1, step.inputs[activationInput] == nil,
                  let j = onlyReader(of: step.outputSlots[0], after: i, in: steps, readers: readers),
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
