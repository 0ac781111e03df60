import CortadoSpec

/// The neural-network layer (`NeuralNetwork.proto`) that computes one planned MIL op exactly,
/// for `MILLowering`: the same arithmetic up to the order of fp32 sums. Only what both formats
/// define alike maps; anything else (another rank or element type, a shape the program does not
/// declare, a weight or parameter computed at run time, an input the op does not expect)
/// leaves the op to the interpreter.
///
/// Every tensor an op reads or writes at run time must be declared fp32 or fp16 `[N, C, H, W]`
/// with every dimension known: under `EXACT_ARRAY_MAPPING` such a blob is the same rank-4
/// tensor (fp32: the network computes fp16 ops in fp32, with their fp16 weights and parameters
/// widened exactly, as the interpreter does).
/// - `conv` (constant weight and bias, any groups, strides and dilations): a convolution with
///   its padding written out before/after as `MILWindowGeometry` computes it for every
///   `pad_type` (MIL's `same` and the format's same-padding modes split odd padding alike, but
///   writing the amounts leaves nothing to agree on);
/// - `relu`, `leaky_relu`, `sigmoid`, `tanh`: the activation layer (the same formulas, the same
///   libm calls); `relu6`: a clip to [0, 6];
/// - `add` of two computed tensors of one declared shape: the two-input add;
/// - `max_pool`, `avg_pool` (2-D, padding smaller than the window so no window lies wholly in
///   it, `ceil_mode` only where it changes no size): pooling with explicit padding and the
///   program's `exclude_padding_from_average`;
/// - `concat` of computed tensors along the channel axis (not interleaved): the channel concat;
/// - `reduce_mean` over H and W with `keep_dims` (a global average pool): the global average
///   pooling layer.
enum MILLayerMapping {
    /// The layer for `step`, or nil when it does not map. `types` are the declared types of the
    /// values by slot; `slotCount` sizes the scratch frame the op's constants are read through.
    static func layer(for step: MILStep, types: [Int: MILType], slotCount: Int) -> CoreML_Specification_NeuralNetworkLayer? {
        guard step.blocks.isEmpty, step.outputSlots.count == 1, let out = shape4(step.outputTypes[0]),
              let allowed = inputsRead[step.type], Set(step.inputs.keys).isSubset(of: allowed) else { return nil }
        var layer = CoreML_Specification_NeuralNetworkLayer()
        layer.name = step.name
        layer.output = step.outputNames
        let call = MILOpCall(step: step, frame: MILFrame(slotCount: slotCount), runner: MILRunner())
        switch step.type {
        case "conv":
            guard let (x, shape) = computed(step, "x", types), let p = convolution(call, input: shape, output: out) else { return nil }
            layer.input = [x]
            layer.convolution = p
        case "relu", "leaky_relu", "sigmoid", "tanh":
            guard let (x, shape) = computed(step, "x", types), shape == out else { return nil }
            layer.input = [x]
            var a = CoreML_Specification_ActivationParams()
            switch step.type {
            case "relu": a.reLu = .init()
            case "leaky_relu":
                guard !call.has("alpha") || call.isConstant("alpha"), let alpha = try? call.float("alpha", default: 0.01) else { return nil }
                a.leakyReLu.alpha = alpha
            case "sigmoid": a.sigmoid = .init()
            default: a.tanh = .init()
            }
            layer.activation = a
        case "relu6":
            guard let (x, shape) = computed(step, "x", types), shape == out else { return nil }
            layer.input = [x]
            var clip = CoreML_Specification_ClipLayerParams()
            (clip.minVal, clip.maxVal) = (0, 6)
            layer.clip = clip
        case "add":
            guard let (x, xs) = computed(step, "x", types), let (y, ys) = computed(step, "y", types), xs == out, ys == out else { return nil }
            layer.input = [x, y]
            layer.add = .init()
        case "max_pool", "avg_pool":
            guard let (x, shape) = computed(step, "x", types), let p = pooling(step, call, input: shape, output: out) else { return nil }
            layer.input = [x]
            layer.pooling = p
        case "reduce_mean":
            // The global average pool (`AdaptiveAvgPool2d(1)`): the mean over H and W, kept as 1×1.
            guard let (x, shape) = computed(step, "x", types), out == [shape[0], shape[1], 1, 1],
                  call.isConstant("axes"), (!call.has("keep_dims") || call.isConstant("keep_dims")),
                  let axes = try? call.ints("axes"), axes.count == 2, Set(axes.map { $0 < 0 ? $0 + 4 : $0 }) == [2, 3],
                  (try? call.bool("keep_dims", default: false)) == true else { return nil }
            layer.input = [x]
            var p = CoreML_Specification_PoolingLayerParams()
            p.type = .average
            p.globalPooling = true
            p.valid = .init()
            layer.pooling = p
        case "concat":
            guard let bound = step.inputs["values"], !bound.isEmpty, let axis = try? call.int("axis"), axis == 1 || axis == -3,
                  (try? call.bool("interleave", default: false)) == false else { return nil }
            var names: [String] = []
            var channels = 0
            for argument in bound {
                guard case .slot(let s, let name) = argument, let shape = shape4(types[s]),
                      shape[0] == out[0], shape[2] == out[2], shape[3] == out[3] else { return nil }
                names.append(name)
                channels += shape[1]
            }
            guard channels == out[1] else { return nil }
            layer.input = names
            layer.concat = .init()
        default:
            return nil
        }
        return layer
    }

    /// The inputs each mapped op may have: an op bound to any other (a newer opset's argument,
    /// a fusion's) keeps its own kernel.
    static let inputsRead: [String: Set<String>] = [
        "conv": ["x", "weight", "bias", "strides", "pad_type", "pad", "dilations", "groups"],
        "relu": ["x"], "relu6": ["x"], "sigmoid": ["x"], "tanh": ["x"], "leaky_relu": ["x", "alpha"],
        "add": ["x", "y"],
        "max_pool": ["x", "kernel_sizes", "strides", "pad_type", "pad", "ceil_mode"],
        "avg_pool": ["x", "kernel_sizes", "strides", "pad_type", "pad", "ceil_mode", "exclude_padding_from_average"],
        "concat": ["values", "axis", "interleave"],
        "reduce_mean": ["x", "axes", "keep_dims"],
    ]

    /// A declared fp32 or fp16 `[N, C, H, W]` with every dimension known, else nil.
    static func shape4(_ type: MILType?) -> [Int]? {
        guard case .tensor(let dt, let dims?)? = type, dt == .fp32 || dt == .fp16, dims.count == 4, dims.allSatisfy({ ($0 ?? 0) > 0 }) else { return nil }
        return dims.map { $0! }
    }

    /// The value bound to `input` when it is computed at run time and declared fp32 or fp16 rank 4:
    /// its name (the blob it becomes) and shape.
    private static func computed(_ step: MILStep, _ input: String, _ types: [Int: MILType]) -> (String, [Int])? {
        guard let bound = step.inputs[input], bound.count == 1, case .slot(let s, let name) = bound[0],
              let shape = shape4(types[s]) else { return nil }
        return (name, shape)
    }

    /// `conv` with constant parameters as `ConvolutionLayerParams`, its output size checked
    /// against the declared one.
    private static func convolution(_ call: MILOpCall, input x: [Int], output: [Int]) -> CoreML_Specification_ConvolutionLayerParams? {
        guard call.isConstant("weight"), !call.has("bias") || call.isConstant("bias"),
              let w = try? call.tensor("weight"), w.rank == 4, w.dataType.isFloat,
              let groups = try? call.int("groups", default: 1), groups > 0, x[1] % groups == 0, w.shape[0] % groups == 0,
              w.shape[1] == x[1] / groups,
              let g = try? MILWindowGeometry.read(call, spatial: [x[2], x[3]], kernel: [w.shape[2], w.shape[3]], dilated: true),
              [x[0], w.shape[0]] + g.declaredOutput == output else { return nil }
        var bias: MILTensor?
        if call.has("bias") {
            guard let b = try? call.tensor("bias"), b.count == w.shape[0], b.dataType.isFloat else { return nil }
            bias = b
        }
        var p = CoreML_Specification_ConvolutionLayerParams()
        p.outputChannels = UInt64(w.shape[0])
        p.kernelChannels = UInt64(w.shape[1])
        p.nGroups = UInt64(groups)
        p.kernelSize = [UInt64(w.shape[2]), UInt64(w.shape[3])]
        p.stride = g.strides.suffix(2).map(UInt64.init)
        p.dilationFactor = g.dilations.suffix(2).map(UInt64.init)
        p.valid.paddingAmounts = borders(g)
        // [C_out, C_in/groups, kH, kW]: MIL's layout is the format's. fp16 weights are held
        // as their values in Floats: written as floats, they are widened exactly.
        p.weights.floatValue = w.floats
        if let bias {
            p.hasBias_p = true
            p.bias.floatValue = bias.floats
        }
        return p
    }

    /// `max_pool` / `avg_pool` with constant parameters as `PoolingLayerParams`.
    private static func pooling(_ step: MILStep, _ call: MILOpCall, input x: [Int], output: [Int]) -> CoreML_Specification_PoolingLayerParams? {
        guard ["kernel_sizes", "strides", "pad_type", "pad", "ceil_mode", "exclude_padding_from_average"].allSatisfy({ !call.has($0) || call.isConstant($0) }),
              let kernel = try? call.ints("kernel_sizes"), kernel.count == 2,
              let ceil = try? call.bool("ceil_mode", default: false),
              let exclude = try? call.bool("exclude_padding_from_average", default: false),
              let g = try? MILWindowGeometry.read(call, spatial: [x[2], x[3]], kernel: kernel, dilated: false),
              [x[0], x[1]] + g.declaredOutput == output else { return nil }
        // Ceil mode maps only where it adds no window (the sizes equal the floor mode's).
        if ceil, (try? MILWindowGeometry.read(call, spatial: [x[2], x[3]], kernel: kernel, dilated: false, ceilMode: true))?.output != g.output {
            return nil
        }
        // Padding as wide as the window would leave windows over padding alone (MIL: -inf or
        // 0/0, the layer: 0).
        for d in 1...2 where g.padBefore[d] >= g.kernel[d] || g.padAfter[d] >= g.kernel[d] { return nil }
        var p = CoreML_Specification_PoolingLayerParams()
        p.type = step.type == "max_pool" ? .max : .average
        p.kernelSize = kernel.map(UInt64.init)
        p.stride = g.strides.suffix(2).map(UInt64.init)
        p.valid.paddingAmounts = borders(g)
        p.avgPoolExcludePadding = exclude
        return p
    }

    /// A window's padding as the format writes it: (top, bottom), then (left, right).
    private static func borders(_ g: MILWindowGeometry) -> CoreML_Specification_BorderAmounts {
        var b = CoreML_Specification_BorderAmounts()
        b.borderAmounts = [1, 2].map { d in
            var e = CoreML_Specification_BorderAmounts.EdgeSizes()
            e.startEdgeSize = UInt64(g.padBefore[d])
            e.endEdgeSize = UInt64(g.padAfter[d])
            return e
        }
        return b
    }
}
