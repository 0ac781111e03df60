/// `conv_quantized` (iOS15's experimental op): a convolution whose uint8 weights are stored
/// quantized, `linear` (w · scale + bias, the scale and bias scalars or one per output
/// channel) or `lut` (each weight an index into the table `quant_scale`). The weights are
/// decoded once per call (at load, when the op is folded) and the convolution itself is the
/// `conv` kernel's.
enum MILQuantizedConvOps {
    nonisolated(unsafe) static let kernels: [String: MILKernel] = [
        "conv_quantized": { call in
            guard let conv = MILConvolutionOps.kernels["conv"] else { throw call.error("no conv kernel") }
            let q = try call.tensor("weight")
            let kind = try call.string("quantization_type")
            let scale = try call.floats("quant_scale"), bias = try call.floats("quant_bias")
            let codes = q.ints
            let outChannels = max(q.shape.first ?? 1, 1)
            let perChannel = codes.count / outChannels
            var w = [Float](repeating: 0, count: codes.count)
            switch kind {
            case "linear":
                for c in [scale.count, bias.count] where c != 1 && c != outChannels {
                    throw call.error("quant_scale and quant_bias need 1 or \(outChannels) values, have \(scale.count) and \(bias.count)")
                }
                for i in codes.indices {
                    let ch = i / max(perChannel, 1)
                    w[i] = Float(codes[i]) * scale[scale.count == 1 ? 0 : ch] + bias[bias.count == 1 ? 0 : ch]
                }
            case "lut":
                for i in codes.indices {
                    guard codes[i] >= 0 && codes[i] < scale.count else {
                        throw call.error("weight index \(codes[i]) is outside the \(scale.count)-entry table")
                    }
                    w[i] = scale[codes[i]]
                }
            default:
                throw call.error("unknown quantization_type \(kind) (linear or lut)")
            }
            var inputs = call.step.inputs
            inputs["weight"] = [.constant(.tensor(MILTensor(floats: w, shape: q.shape, dataType: .fp32)))]
            for key in ["quantization_type", "nbits", "quant_scale", "quant_bias"] { inputs[key] = nil }
            let step = MILStep(type: "conv", name: call.name, kernel: conv, inputs: inputs, outputSlots: call.step.outputSlots,
                               outputNames: call.step.outputNames, outputTypes: call.step.outputTypes, blocks: [])
            return try conv(MILOpCall(step: step, frame: call.frame, runner: call.runner))
        },
    ]
}
