import COpenBLAS
import CortadoSpec
import Foundation

/// Simple recurrent, LSTM (one and both directions) and GRU layers.
enum RecurrentLayers {
    static let builders: [String: NNLayerBuilder] = [
        "simpleRecurrent": { spec in try SimpleRecurrentLayer(spec.simpleRecurrent, inputs: spec.input.count, outputs: spec.output.count) },
        "gru": { spec in try GRULayer(spec.gru, inputs: spec.input.count, outputs: spec.output.count) },
        "uniDirectionalLstm": { spec in try UniDirectionalLSTMLayer(spec.uniDirectionalLstm, inputs: spec.input.count, outputs: spec.output.count) },
        "biDirectionalLstm": { spec in try BiDirectionalLSTMLayer(spec.biDirectionalLstm, inputs: spec.input.count, outputs: spec.output.count) },
    ]
}

/// What the recurrent layers share: the classic sequence layout, state inputs, weight stacking,
/// the gate pre-activation clip and the GEMMs.
///
/// Layout: the input `x` is `[S, B, I, 1, 1]`, so step `t` of batch row `b` is the `I` floats at
/// `(t * B + b) * I`; states and per-step outputs are rows of `H` floats in the same order.
enum NNRecurrent {
    /// Core ML clips every gate pre-activation to this range before its activation.
    static let gateClip: Float = 50

    /// Checks the vector sizes a layer declares.
    static func checkSizes(input: UInt64, output: UInt64) throws -> (Int, Int) {
        guard input > 0, output > 0, input < 1 << 24, output < 1 << 24 else {
            throw NNLayerError("inputVectorSize (\(input)) and outputVectorSize (\(output)) must be between 1 and 2^24")
        }
        return (Int(input), Int(output))
    }

    /// Checks the number of blobs a layer reads and writes.
    static func checkCounts(inputs: Int, maxInputs: Int, outputs: Int, maxOutputs: Int, names: String) throws {
        guard (1...maxInputs).contains(inputs) else {
            throw NNLayerError("takes 1 to \(maxInputs) inputs (\(names)), got \(inputs)")
        }
        guard (1...maxOutputs).contains(outputs) else {
            throw NNLayerError("makes 1 to \(maxOutputs) outputs, got \(outputs)")
        }
    }

    /// Checks the sequence input `[S, B, I, 1, 1]`.
    static func checkSequence(_ x: NNShape, inputSize: Int) throws {
        guard x.c == inputSize, x.h == 1, x.w == 1 else {
            throw NNLayerError("input must be [Seq, Batch, \(inputSize), 1, 1] (inputVectorSize \(inputSize)), got \(x)")
        }
    }

    /// Checks a state input: `H` values per batch row (`[1, B, H, 1, 1]`), or one row for all.
    static func checkState(_ s: NNShape, batch: Int, units: Int, what: String) throws {
        guard s.chw == units, s.images == batch || s.images == 1 else {
            throw NNLayerError("\(what) must be [1, \(batch), \(units), 1, 1] (outputVectorSize \(units)), got \(s)")
        }
    }

    /// A `[rows, cols]` matrix; `required` false lets a missing one read as zeros.
    static func matrix(_ w: CoreML_Specification_WeightParams, rows: Int, cols: Int, name: String, required: Bool = true) throws -> [Float] {
        if !required && NNWeights.isEmpty(w) { return [Float](repeating: 0, count: rows * cols) }
        return try NNWeights.floats(w, count: rows * cols, channels: rows, name: "\(name) (\(rows)×\(cols))")
    }

    /// A vector of `units` values (a bias or a peephole).
    static func vector(_ w: CoreML_Specification_WeightParams, units: Int, name: String) throws -> [Float] {
        try NNWeights.floats(w, count: units, channels: units, name: name)
    }

    /// The activations list of a gated layer: `count` entries, or none for `defaults`.
    static func activations(_ list: [CoreML_Specification_ActivationParams], defaults: [NNActivation], units: Int) throws -> [NNActivation] {
        if list.isEmpty { return defaults }
        guard list.count == defaults.count else {
            throw NNLayerError("has \(list.count) activations; expected \(defaults.count)")
        }
        return try list.map { try activation($0, units: units) }
    }

    /// A recurrent layer's activation. coremltools writes linear, hard sigmoid and scaled tanh
    /// with no parameters (all zero), which Core ML's recurrent layers read as the standard
    /// ones: `x`, `clamp(0.2x + 0.5, 0, 1)` and `tanh(x)`. Parameters that are set are used.
    static func activation(_ p: CoreML_Specification_ActivationParams, units: Int) throws -> NNActivation {
        var a = try NNActivation(p)
        switch a {
        case .linear(0, 0): a = .linear(alpha: 1, beta: 0)
        case .sigmoidHard(0, 0): a = .sigmoidHard(alpha: 0.2, beta: 0.5)
        case .scaledTanh(0, 0): a = .scaledTanh(alpha: 1, beta: 1)
        default: break
        }
        try a.check(channels: units)
        return a
    }

    /// Copies a state input into `dst` (`batch` rows of `units`), repeating a single row; zeros
    /// when the layer has no such input.
    static func loadState(_ t: NNTensor?, into dst: UnsafeMutablePointer<Float>, batch: Int, units: Int, context: NNRunContext) {
        guard let t else { dst.update(repeating: 0, count: batch * units); return }
        let src = context.pointer(t)
        if t.shape.images == batch {
            dst.update(from: src, count: batch * units)
        } else {
            for b in 0..<batch { (dst + b * units).update(from: src, count: units) }
        }
    }

    /// `c[m×n] (ldc) = a[m×k] · wᵀ` with `w` row-major `[n, k]`; `accumulate` adds to `c`.
    /// One row goes through `sgemv`.
    @inline(__always)
    static func gemmTransposed(m: Int, n: Int, k: Int, a: UnsafePointer<Float>, lda: Int,
                               w: UnsafePointer<Float>, c: UnsafeMutablePointer<Float>, ldc: Int, accumulate: Bool) {
        let beta: Float = accumulate ? 1 : 0
        if m == 1 {
            if !accumulate { c.update(repeating: 0, count: n) }
            cblas_sgemv(CblasRowMajor, CblasNoTrans, blasint(n), blasint(k), 1, w, blasint(k), a, 1, beta, c, 1)
        } else {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blasint(m), blasint(n), blasint(k),
                        1, a, blasint(lda), w, blasint(k), beta, c, blasint(ldc))
        }
    }

    /// Input projections for every step at once: `gates[S·B, n] = x[S·B, I] · wxᵀ`.
    static func project(_ x: UnsafePointer<Float>, rows: Int, inputSize: Int, wx: [Float], gates: UnsafeMutablePointer<Float>, width: Int) {
        wx.withUnsafeBufferPointer { w in
            gemmTransposed(m: rows, n: width, k: inputSize, a: x, lda: inputSize, w: w.baseAddress!, c: gates, ldc: width, accumulate: false)
        }
    }

    /// `p[j] = clip(p[j] + bias[j])` for `count` values.
    @inline(__always)
    static func addBiasClip(_ p: UnsafeMutablePointer<Float>, _ bias: UnsafePointer<Float>, count: Int) {
        for j in 0..<count { p[j] = Swift.min(Swift.max(p[j] + bias[j], -gateClip), gateClip) }
    }
}

extension NNActivation {
    /// Applies the activation to one row of `units` hidden units (the unit index is the channel
    /// for per-channel parameters); sigmoid and tanh take the vectorised `NNRecurrentMath` path.
    @inline(__always)
    func applyUnits(_ p: UnsafeMutablePointer<Float>, units: Int) {
        switch self {
        case .sigmoid: NNRecurrentMath.map(p, count: units, NNRecurrentMath.sigmoid)
        case .tanh: NNRecurrentMath.map(p, count: units, NNRecurrentMath.tanh)
        case .prelu(let a) where a.count > 1:
            for j in 0..<units { apply(p + j, count: 1, channel: j) }
        case .parametricSoftplus(let a, let b) where a.count > 1 || b.count > 1:
            for j in 0..<units { apply(p + j, count: 1, channel: j) }
        default:
            apply(p, count: units, channel: 0)
        }
    }
}
