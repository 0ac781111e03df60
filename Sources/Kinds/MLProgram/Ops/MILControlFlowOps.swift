/// Control flow and program-level operations (`control_flow.py`, `classify.py`): `cond`,
/// `while_loop`, `select`, and `classify`, which turns probabilities into Core ML's label
/// and probability dictionary.
enum MILControlFlowOps {
    /// A bound on `while_loop` iterations, so that a program that never ends fails instead of
    /// holding a worker forever.
    static let maxIterations = 10_000_000

    nonisolated(unsafe) static let kernels: [String: MILKernel] = [
        "cond": { call in
            let pred = try call.tensor("pred")
            guard pred.count == 1 else { throw call.error("pred must be one bool, has \(pred.count) values") }
            guard call.blockCount == 2 else { throw call.error("cond needs two blocks, has \(call.blockCount)") }
            return try call.runBlock(pred.bools[0] ? 0 : 1, inputs: [])
        },
        "while_loop": { call in
            var vars = try call.values("loop_vars")
            guard call.blockCount == 2 else { throw call.error("while_loop needs a condition and a body block, has \(call.blockCount)") }
            var iterations = 0
            while true {
                guard let c = try call.runBlock(0, inputs: vars).first?.tensor, c.count == 1 else {
                    throw call.error("the condition block must return one bool")
                }
                if !c.bools[0] { break }
                vars = try call.runBlock(1, inputs: vars)
                iterations += 1
                if iterations > maxIterations { throw call.error("more than \(maxIterations) iterations") }
            }
            return vars
        },
        "select": { call in
            let cond = try call.tensor("cond"), a = try call.tensor("a"), b = try call.tensor("b")
            guard let ab = MILShape.broadcast(a.shape, b.shape), let shape = MILShape.broadcast(cond.shape, ab) else {
                throw call.error("cond \(cond.shape), a \(a.shape) and b \(b.shape) do not broadcast")
            }
            let ic = MILShape.broadcastIndices(from: cond.shape, to: shape)
            let ia = MILShape.broadcastIndices(from: a.shape, to: shape), ib = MILShape.broadcastIndices(from: b.shape, to: shape)
            let c = cond.bools
            switch (a.storage, b.storage) {
            case (.int(let av), .int(let bv)):
                return [.tensor(MILTensor(ints: (0..<ic.count).map { c[ic[$0]] ? av[ia[$0]] : bv[ib[$0]] }, shape: shape, dataType: a.dataType))]
            case (.bool(let av), .bool(let bv)):
                return [.tensor(MILTensor(bools: (0..<ic.count).map { c[ic[$0]] ? av[ia[$0]] : bv[ib[$0]] }, shape: shape))]
            default:
                let av = a.floats, bv = b.floats
                let type = a.dataType.isFloat ? a.dataType : b.dataType
                return [.tensor(MILTensor(floats: (0..<ic.count).map { c[ic[$0]] ? av[ia[$0]] : bv[ib[$0]] }, shape: shape, dataType: type))]
            }
        },
        "classify": { call in
            let p = try call.tensor("probabilities")
            guard let classes = try call.value("classes") else { throw call.error("the input 'classes' is missing") }
            let labels: [MILTensor]
            switch classes {
            case .list(let items): labels = items.compactMap(\.tensor)
            case .tensor(let t):
                labels = t.dataType == .string ? t.strings.map { MILTensor(.string, shape: [], storage: .string([$0])) }
                    : t.ints.map { MILTensor(ints: [$0], shape: [], dataType: .int64) }
            default: throw call.error("classes must be a list or a tensor")
            }
            let scores = p.floats
            guard scores.count == labels.count else {
                throw call.error("\(scores.count) probabilities for \(labels.count) classes")
            }
            var best = 0
            for i in scores.indices where scores[i] > scores[best] { best = i }
            let pairs = zip(labels, scores).map { (key: MILValue.tensor($0.0), value: MILValue.tensor(.scalar($0.1))) }
            return [.tensor(labels[best]), .dictionary(pairs)]
        },
    ]
}
