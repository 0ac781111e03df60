import CCortadoGemm
import COpenBLAS

/// The work splitting and GEMM call the GEMM layers share (threading: `NNThreads`).
///
/// Layers split their work across `NNRunContext.threads` (row bands of the output image, or
/// blocks of output channels), each worker with its own slot of scratch space; with
/// `CORTADO_BLAS_THREADS` above 1 they make one GEMM call per layer and image instead.
enum NNGemm {
    /// Scratch slots a layer reserves: one per worker it may run.
    static var slots: Int { NNThreads.blas > 1 ? 1 : NNThreads.cores }

    /// Workers to use for `items` independent pieces of work.
    @inline(__always) static func workers(_ context: NNRunContext, items: Int) -> Int {
        NNThreads.blas > 1 ? 1 : Swift.max(1, Swift.min(context.threads, slots, items))
    }

    /// Runs `body(worker)` for `worker` in `0..<workers` (see `NNThreads.run`).
    static func run(workers: Int, _ body: (Int) -> Void) { NNThreads.run(workers: workers, body) }

    /// Row-major `C[m×n] = A[m×k] · B[k×n]` (`beta` 0) with leading dimensions.
    @inline(__always) static func gemm(m: Int, n: Int, k: Int,
                                       a: UnsafePointer<Float>, lda: Int, transA: Bool = false,
                                       b: UnsafePointer<Float>, ldb: Int, transB: Bool = false,
                                       c: UnsafeMutablePointer<Float>, ldc: Int) {
        cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
                    blasint(m), blasint(n), blasint(k), 1, a, blasint(lda), b, blasint(ldb), 0, c, blasint(ldc))
    }
}

/// Element-wise steps a GEMM layer applies per output channel right after its GEMM: its own
/// bias, then the batch norms, scales, biases and activations the graph folded into it.
/// Consecutive affine steps are composed into one `x * scale[c] + shift[c]` at load.
struct NNChannelEpilogue: Sendable {
    enum Step: Sendable {
        /// Full-length (C) arrays; a nil scale means 1.
        case affine(scale: [Float]?, shift: [Float])
        case activation(NNActivation)
        /// A tensor shaped like the output added (a residual add folded in, the tensor read
        /// at run time): only the direct convolution kernel applies it, so a layer accepts it
        /// only on that path (`acceptResidual`), and then only a ReLU or leaky ReLU after it.
        case residual
    }

    let channels: Int
    private(set) var steps: [Step] = []
    /// Layer names folded in, for `detail`.
    private(set) var names: [String] = []

    init(channels: Int, bias: [Float]?) {
        self.channels = channels
        if let bias { steps.append(.affine(scale: nil, shift: bias)) }
    }

    var isEmpty: Bool { steps.isEmpty }

    /// Whether a residual add is folded in.
    var hasResidual: Bool { steps.contains { if case .residual = $0 { return true } else { return false } } }

    /// Folds in a residual add, after at most one affine step (the kernel's order: scale and
    /// shift, residual, activation); false when other steps came first.
    mutating func acceptResidual() -> Bool {
        guard !hasResidual, steps.count <= 1 else { return false }
        if let first = steps.first, case .activation = first { return false }
        steps.append(.residual)
        names.append("residual add")
        return true
    }

    /// The steps before the residual, and the activation after it: how a layer applies them
    /// when the residual cannot go through the kernel (it broadcasts).
    var residualSplit: (head: NNChannelEpilogue, activation: NNActivation?) {
        var head = self
        guard let at = steps.firstIndex(where: { if case .residual = $0 { return true } else { return false } }) else { return (self, nil) }
        head.steps = Array(steps[..<at])
        var activation: NNActivation?
        if at + 1 < steps.count, case .activation(let a) = steps[at + 1] { activation = a }
        return (head, activation)
    }

    /// Adds a folded step; false when it does not fit the channel count.
    mutating func accept(_ op: NNEpilogueOp) -> Bool {
        guard op.fits(channels: channels) else { return false }
        if hasResidual {
            // After a residual the kernel applies one ReLU or leaky ReLU, nothing else.
            guard case .residual? = steps.last, case .activation(let a) = op else { return false }
            switch a {
            case .relu, .leakyRelu: break
            default: return false
            }
        }
        func full(_ a: [Float]) -> [Float] { a.count == channels ? a : [Float](repeating: a[0], count: channels) }
        switch op {
        case .affine(let scale, let shift):
            let s = scale.map(full)
            let t = shift.map(full) ?? [Float](repeating: 0, count: channels)
            if case .affine(let s0, let t0)? = steps.last {
                // (x * s0 + t0) * s + t
                let scale: [Float]? = s.map { s in s0.map { s0 in zip(s0, s).map { $0 * $1 } } ?? s } ?? s0
                let shift = (0..<channels).map { c in t0[c] * (s?[c] ?? 1) + t[c] }
                steps[steps.count - 1] = .affine(scale: scale, shift: shift)
            } else {
                steps.append(.affine(scale: s, shift: t))
            }
            names.append("affine")
        case .activation(let a):
            steps.append(.activation(a))
            names.append(a.description)
        }
        return true
    }

    /// The steps as Cortado's GEMM applies them to each finished tile (`cg_epilogue`): one
    /// affine step, one ReLU or leaky ReLU, or an affine step then one of those. Nil for no
    /// steps or other ones (those run in `apply` / `applyRows` after the GEMM).
    private var gemmForm: (scale: [Float]?, shift: [Float]?, activation: cg_activation, alpha: Float, residual: Bool)? {
        // The steps must read: [affine] [residual] [ReLU or leaky ReLU], each optional.
        var rest = steps[...]
        var form: (scale: [Float]?, shift: [Float]?, activation: cg_activation, alpha: Float, residual: Bool) = (nil, nil, CG_ACT_NONE, 0, false)
        if case .affine(let scale, let shift)? = rest.first {
            (form.scale, form.shift) = (scale, shift)
            rest = rest.dropFirst()
        }
        if case .residual? = rest.first {
            form.residual = true
            rest = rest.dropFirst()
        }
        switch rest.first {
        case .activation(.relu)?: form.activation = CG_ACT_RELU
        case .activation(.leakyRelu(let alpha))?: (form.activation, form.alpha) = (CG_ACT_LEAKY_RELU, alpha)
        case nil: break
        default: return nil
        }
        guard rest.count <= 1, !steps.isEmpty else { return nil }
        return form
    }

    /// Whether steps remain for `apply` / `applyRows` after a GEMM that took
    /// `withGemmEpilogue`'s epilogue.
    var needsPass: Bool { !steps.isEmpty && gemmForm == nil }

    /// Runs `body` with the steps as a GEMM epilogue for a C whose first row (or, with
    /// `perColumn`, column) is channel `offset`; with nil when the GEMM cannot apply them.
    /// `residual` is the tensor a folded residual add reads (laid out as the output).
    func withGemmEpilogue<R>(perColumn: Bool, offset: Int, residual: UnsafePointer<Float>? = nil,
                             _ body: (UnsafePointer<cg_epilogue>?) -> R) -> R {
        guard let form = gemmForm else { return body(nil) }
        precondition(!form.residual || residual != nil, "a folded residual add needs its tensor")
        func pointer<T>(_ a: [Float]?, _ f: (UnsafePointer<Float>?) -> T) -> T {
            guard let a else { return f(nil) }
            return a.withUnsafeBufferPointer { f($0.baseAddress! + offset) }
        }
        return pointer(form.scale) { scale in
            pointer(form.shift) { shift in
                var e = cg_epilogue(scale: scale, shift: shift, per_column: perColumn ? 1 : 0, activation: form.activation, alpha: form.alpha,
                                    residual: form.residual ? residual : nil)
                return withUnsafePointer(to: &e) { body($0) }
            }
        }
    }

    /// Applies every step to `count` contiguous values of channel `c`.
    @inline(__always) func apply(_ p: UnsafeMutablePointer<Float>, count: Int, channel c: Int) {
        var i = 0
        while i < steps.count {
            if case .affine(let scale, let shift) = steps[i] {
                let s = scale?[c] ?? 1, t = shift[c]
                // Affine followed by (leaky) ReLU: one pass.
                if i + 1 < steps.count, case .activation(let a) = steps[i + 1] {
                    switch a {
                    case .relu:
                        for j in 0..<count { p[j] = Swift.max(p[j] * s + t, 0) }
                        i += 2; continue
                    case .leakyRelu(let alpha):
                        for j in 0..<count { let x = p[j] * s + t; p[j] = x >= 0 ? x : alpha * x }
                        i += 2; continue
                    default: break
                    }
                }
                if scale == nil {
                    for j in 0..<count { p[j] += t }
                } else {
                    for j in 0..<count { p[j] = p[j] * s + t }
                }
            } else if case .activation(let a) = steps[i] {
                a.apply(p, count: count, channel: c)
            } else {
                preconditionFailure("a residual add runs only in the direct convolution kernel")
            }
            i += 1
        }
    }

    /// Applies every step to `rows` rows of `channels` values (channel fastest), as an inner
    /// product writes them; with `columns`, only those channels of each row (`p` then points
    /// at channel `columns.lowerBound` of the first row).
    func applyRows(_ p: UnsafeMutablePointer<Float>, rows: Int, columns: Range<Int>? = nil) {
        let cols = columns ?? 0..<channels
        let c0 = cols.lowerBound
        for step in steps {
            switch step {
            case .affine(let scale, let shift):
                shift.withUnsafeBufferPointer { t in
                    if let scale {
                        scale.withUnsafeBufferPointer { s in
                            for r in 0..<rows {
                                let y = p + r * channels - c0
                                for c in cols { y[c] = y[c] * s[c] + t[c] }
                            }
                        }
                    } else {
                        for r in 0..<rows {
                            let y = p + r * channels - c0
                            for c in cols { y[c] += t[c] }
                        }
                    }
                }
            case .activation(let a):
                switch a {
                case .prelu, .parametricSoftplus:
                    for r in 0..<rows { for c in cols { a.apply(p + r * channels + c - c0, count: 1, channel: c) } }
                default:
                    if cols.count == channels {
                        a.apply(p, count: rows * channels, channel: 0)
                    } else {
                        for r in 0..<rows { a.apply(p + r * channels, count: cols.count, channel: 0) }
                    }
                }
            case .residual:
                preconditionFailure("a residual add runs only in the direct convolution kernel")
            }
        }
    }
}
