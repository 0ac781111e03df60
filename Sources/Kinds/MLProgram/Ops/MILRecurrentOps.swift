import Foundation

/// `rnn`, `gru` and `lstm` (iOS15 `recurrent.py`; iOS17 adds fp16; iOS18 gives `gru`
/// `reset_after` and `input_bias`). `x` is `[sequence, batch, input]`; gate weights are stacked
/// by rows (`gru`: reset, output, update; `lstm`: input, forget, output, cell).
///
/// A `reverse` layer reads the sequence from its end and writes its outputs in the order it
/// computes them; in a `bidirectional` lstm the backward half of each output row belongs to the
/// same time step as the forward half (as coremltools' PyTorch-checked tests expect).
enum MILRecurrentOps {
    nonisolated(unsafe) static let kernels: [String: MILKernel] = [
        "rnn": { call in
            let seq = try Sequence(call)
            let wih = try call.tensor("weight_ih"), whh = try call.tensor("weight_hh")
            let hidden = whh.shape.first ?? 0
            try seq.checkWeights(wih, whh, gates: 1, hidden: hidden, call: call)
            let bias = try vector(call, "bias", count: hidden) ?? [Float](repeating: 0, count: hidden)
            let act = try activation(try call.string("activation", default: "tanh"), call: call)
            let reverse = try unidirectionalReverse(call)
            var h = try state(call, "initial_h", batch: seq.batch, width: hidden)
            let xp = seq.project(wih)
            let b = seq.batch
            var steps: [[Float]] = []
            var pre = [Float](repeating: 0, count: b * hidden)
            for k in 0..<seq.length {
                let t = reverse ? seq.length - 1 - k : k
                MILLinearAlgebraOps.gemm(b, hidden, hidden, h, transA: false, whh.floats, transB: true, &pre, beta: 0)
                for r in 0..<b {
                    for j in 0..<hidden {
                        h[r * hidden + j] = act(xp[(t * b + r) * hidden + j] + pre[r * hidden + j] + bias[j])
                    }
                }
                steps.append(h)
            }
            return try outputs(call, seq: seq, steps: steps, width: hidden) + [.tensor(seq.tensor(h, [b, hidden]))]
        },
        "gru": { call in
            let seq = try Sequence(call)
            let wih = try call.tensor("weight_ih"), whh = try call.tensor("weight_hh")
            let hidden = whh.shape.last ?? 0
            try seq.checkWeights(wih, whh, gates: 3, hidden: hidden, call: call)
            let bias = try vector(call, "bias", count: 3 * hidden) ?? [Float](repeating: 0, count: 3 * hidden)
            let inputBias = try vector(call, "input_bias", count: 3 * hidden) ?? [Float](repeating: 0, count: 3 * hidden)
            let resetAfter = try call.bool("reset_after", default: false)
            let gate = try activation(try call.string("recurrent_activation", default: "sigmoid"), call: call)
            let act = try activation(try call.string("activation", default: "tanh"), call: call)
            let reverse = try unidirectionalReverse(call)
            var h = try state(call, "initial_h", batch: seq.batch, width: hidden)
            let xp = seq.project(wih)
            let b = seq.batch, H = hidden
            let w = whh.floats
            // Recurrent weights of the output gate alone, for the reset-before form.
            let wo = Array(w[(H * H)..<(2 * H * H)])
            var steps: [[Float]] = []
            var pre = [Float](repeating: 0, count: b * 3 * H)
            var reset = [Float](repeating: 0, count: b * H), preO = [Float](repeating: 0, count: b * H)
            for k in 0..<seq.length {
                let t = reverse ? seq.length - 1 - k : k
                MILLinearAlgebraOps.gemm(b, 3 * H, H, h, transA: false, w, transB: true, &pre, beta: 0)
                var z = [Float](repeating: 0, count: b * H)
                for r in 0..<b {
                    let x = (t * b + r) * 3 * H
                    for j in 0..<H {
                        let rr = gate(xp[x + j] + inputBias[j] + pre[r * 3 * H + j] + bias[j])
                        z[r * H + j] = gate(xp[x + 2 * H + j] + inputBias[2 * H + j] + pre[r * 3 * H + 2 * H + j] + bias[2 * H + j])
                        reset[r * H + j] = rr
                    }
                }
                if !resetAfter {
                    // The reset gate scales the state before it meets the output gate's weights.
                    var scaled = h
                    for i in scaled.indices { scaled[i] *= reset[i] }
                    MILLinearAlgebraOps.gemm(b, H, H, scaled, transA: false, wo, transB: true, &preO, beta: 0)
                }
                for r in 0..<b {
                    let x = (t * b + r) * 3 * H
                    for j in 0..<H {
                        let i = r * H + j
                        let recurrent = resetAfter ? reset[i] * (pre[r * 3 * H + H + j] + bias[H + j]) : preO[i] + bias[H + j]
                        let o = act(xp[x + H + j] + inputBias[H + j] + recurrent)
                        h[i] = (1 - z[i]) * o + z[i] * h[i]
                    }
                }
                steps.append(h)
            }
            return try outputs(call, seq: seq, steps: steps, width: hidden) + [.tensor(seq.tensor(h, [b, hidden]))]
        },
        "lstm": { call in
            let seq = try Sequence(call)
            let direction = try call.string("direction", default: "forward")
            guard ["forward", "reverse", "bidirectional"].contains(direction) else {
                throw call.error("direction must be forward, reverse or bidirectional, is '\(direction)'")
            }
            let dirs = direction == "bidirectional" ? 2 : 1
            let whh = try call.tensor("weight_hh")
            let H = whh.shape.last ?? 0, b = seq.batch
            let acts = LSTMActivations(
                gate: try activation(try call.string("recurrent_activation", default: "sigmoid"), call: call),
                cell: try activation(try call.string("cell_activation", default: "tanh"), call: call),
                output: try activation(try call.string("activation", default: "tanh"), call: call),
                clip: try call.optionalTensor("clip").map { $0.floats.first ?? .infinity })
            let h0 = try state(call, "initial_h", batch: b, width: dirs * H)
            let c0 = try state(call, "initial_c", batch: b, width: dirs * H)
            var runs: [(steps: [[Float]], h: [Float], c: [Float])] = []
            for d in 0..<dirs {
                let suffix = d == 0 ? "" : "_back"
                let wih = try call.tensor("weight_ih" + suffix), wh = try call.tensor("weight_hh" + suffix)
                try seq.checkWeights(wih, wh, gates: 4, hidden: H, call: call)
                let layer = LSTMLayer(
                    hidden: H, recurrent: wh.floats,
                    bias: try vector(call, "bias" + suffix, count: 4 * H) ?? [Float](repeating: 0, count: 4 * H),
                    peephole: try vector(call, "peephole" + suffix, count: 3 * H) ?? [Float](repeating: 0, count: 3 * H))
                runs.append(layer.run(seq, projected: seq.project(wih), h0: slice(h0, batch: b, width: dirs * H, part: d, of: H),
                                      c0: slice(c0, batch: b, width: dirs * H, part: d, of: H),
                                      reverse: d == 1 || direction == "reverse", acts: acts))
            }
            let hOut = join(runs.map(\.h), batch: b, width: H), cOut = join(runs.map(\.c), batch: b, width: H)
            var steps = runs[0].steps
            if dirs == 2 {
                // The backward half of step t is what the backward pass computed at time t.
                let back = runs[1].steps
                steps = (0..<seq.length).map { t in join([runs[0].steps[t], back[seq.length - 1 - t]], batch: b, width: H) }
                if try !call.bool("output_sequence", default: false) {
                    steps = [hOut]
                }
            }
            return try outputs(call, seq: seq, steps: steps, width: dirs * H)
                + [.tensor(seq.tensor(hOut, [b, dirs * H])), .tensor(seq.tensor(cOut, [b, dirs * H]))]
        },
    ]

    /// The input sequence `x` of shape `[sequence, batch, input]`.
    struct Sequence {
        let x: [Float]
        let length: Int, batch: Int, width: Int
        let dataType: MILDataType

        init(_ call: MILOpCall) throws {
            let t = try call.tensor("x")
            guard t.rank == 3 else { throw call.error("x must be [sequence, batch, input], has shape \(t.shape)") }
            x = t.floats; length = t.shape[0]; batch = t.shape[1]; width = t.shape[2]; dataType = t.dataType
        }

        func checkWeights(_ wih: MILTensor, _ whh: MILTensor, gates: Int, hidden: Int, call: MILOpCall) throws {
            guard wih.shape == [gates * hidden, width], whh.shape == [gates * hidden, hidden] else {
                throw call.error("weight_ih \(wih.shape) and weight_hh \(whh.shape) must be [\(gates)·H, \(width)] and [\(gates)·H, H]")
            }
        }

        /// Every step's input times the stacked input weights: `[sequence·batch, rows of w]`.
        func project(_ w: MILTensor) -> [Float] {
            let rows = length * batch, n = w.shape[0]
            var out = [Float](repeating: 0, count: rows * n)
            MILLinearAlgebraOps.gemm(rows, n, width, x, transA: false, w.floats, transB: true, &out, beta: 0)
            return out
        }

        func tensor(_ v: [Float], _ shape: [Int]) -> MILTensor { MILTensor(floats: v, shape: shape, dataType: dataType) }
    }

    struct LSTMActivations {
        let gate: (Float) -> Float, cell: (Float) -> Float, output: (Float) -> Float
        let clip: Float?
    }

    /// One direction of an lstm: recurrent weights `[4H, H]`, summed bias `[4H]`, peepholes `[3H]`.
    struct LSTMLayer {
        let hidden: Int
        let recurrent: [Float], bias: [Float], peephole: [Float]

        func run(_ seq: Sequence, projected xp: [Float], h0: [Float], c0: [Float], reverse: Bool,
                 acts: LSTMActivations) -> (steps: [[Float]], h: [Float], c: [Float]) {
            let H = hidden, b = seq.batch
            var h = h0, c = c0
            var pre = [Float](repeating: 0, count: b * 4 * H)
            var steps: [[Float]] = []
            for k in 0..<seq.length {
                let t = reverse ? seq.length - 1 - k : k
                MILLinearAlgebraOps.gemm(b, 4 * H, H, h, transA: false, recurrent, transB: true, &pre, beta: 0)
                for r in 0..<b {
                    let x = (t * b + r) * 4 * H, p = r * 4 * H
                    for j in 0..<H {
                        let s = r * H + j
                        func gate(_ g: Int) -> Float { xp[x + g * H + j] + pre[p + g * H + j] + bias[g * H + j] }
                        let i = acts.gate(gate(0) + peephole[j] * c[s])
                        let f = acts.gate(gate(1) + peephole[H + j] * c[s])
                        let z = acts.cell(gate(3))
                        var cell = f * c[s] + i * z
                        if let clip = acts.clip { cell = min(max(cell, -clip), clip) }
                        let o = acts.gate(gate(2) + peephole[2 * H + j] * cell)
                        c[s] = cell
                        h[s] = o * acts.output(cell)
                    }
                }
                steps.append(h)
            }
            return (steps, h, c)
        }
    }

    /// The first output: every step's hidden state `[sequence, batch, width]`, or the last one's.
    static func outputs(_ call: MILOpCall, seq: Sequence, steps: [[Float]], width: Int) throws -> [MILValue] {
        if try call.bool("output_sequence", default: false) {
            return [.tensor(seq.tensor(steps.flatMap { $0 }, [steps.count, seq.batch, width]))]
        }
        return [.tensor(seq.tensor(steps.last ?? [Float](repeating: 0, count: seq.batch * width), [1, seq.batch, width]))]
    }

    static func unidirectionalReverse(_ call: MILOpCall) throws -> Bool {
        let direction = try call.string("direction", default: "forward")
        guard direction == "forward" || direction == "reverse" else {
            throw call.error("direction must be forward or reverse, is '\(direction)'")
        }
        return direction == "reverse"
    }

    static func state(_ call: MILOpCall, _ name: String, batch: Int, width: Int) throws -> [Float] {
        let t = try call.tensor(name)
        guard t.count == batch * width else { throw call.error("\(name) has shape \(t.shape), expected [\(batch), \(width)]") }
        return t.floats
    }

    static func vector(_ call: MILOpCall, _ name: String, count: Int) throws -> [Float]? {
        guard let t = try call.optionalTensor(name) else { return nil }
        guard t.count == count else { throw call.error("\(name) has \(t.count) values, expected \(count)") }
        return t.floats
    }

    /// Columns `[part·H, (part+1)·H)` of a `[batch, width]` state.
    static func slice(_ v: [Float], batch: Int, width: Int, part: Int, of H: Int) -> [Float] {
        var out: [Float] = []
        out.reserveCapacity(batch * H)
        for r in 0..<batch {
            let start = r * width + part * H
            out.append(contentsOf: v[start..<(start + H)])
        }
        return out
    }

    /// `[batch, H]` states side by side: `[batch, parts·H]`.
    static func join(_ parts: [[Float]], batch: Int, width H: Int) -> [Float] {
        var out: [Float] = []
        out.reserveCapacity(batch * H * parts.count)
        for r in 0..<batch {
            for part in parts { out.append(contentsOf: part[(r * H)..<((r + 1) * H)]) }
        }
        return out
    }

    /// The activations recurrent layers name, with their default parameters.
    static func activation(_ name: String, call: MILOpCall) throws -> (Float) -> Float {
        switch name.lowercased() {
        case "sigmoid": return { 1 / (1 + expf(-$0)) }
        case "tanh", "scaled_tanh": return { tanhf($0) }
        case "relu": return { max($0, 0) }
        case "linear": return { $0 }
        case "hard_sigmoid", "sigmoid_hard": return { min(max(0.2 * $0 + 0.5, 0), 1) }
        default: throw call.error("unknown activation '\(name)'")
        }
    }
}
