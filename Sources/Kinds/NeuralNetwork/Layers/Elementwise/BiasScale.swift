import CortadoSpec

/// A constant broadcast over every `[C, H, W]` image, stored row-major with shape `[1]`, `[C]`,
/// `[1, H, W]` or `[C, H, W]` (the shapes bias and scale layers take). `c` is 1 or the input's
/// channel count; `h × w` is 1 × 1 or the input's plane.
struct NNImageConstant: Sendable {
    let values: [Float]
    let c: Int
    let h: Int
    let w: Int

    /// Decodes `weights` for `shape`; an empty shape means one value per channel (or one value).
    init(shape: [UInt64], weights: CoreML_Specification_WeightParams, name: String) throws {
        let dims = shape.map { Int(clamping: $0) }
        guard dims.allSatisfy({ $0 > 0 }) else { throw NNLayerError("\(name) shape \(dims) has a zero dimension") }
        switch dims.count {
        case 0:
            values = try NNWeights.floats(weights, name: name)
            guard !values.isEmpty else { throw NNLayerError("\(name) has no values") }
            c = values.count; h = 1; w = 1
            return
        case 1: c = dims[0]; h = 1; w = 1
        case 3: c = dims[0]; h = dims[1]; w = dims[2]
        default: throw NNLayerError("\(name) shape \(dims) must be [1], [C], [1, H, W] or [C, H, W]")
        }
        values = try NNWeights.floats(weights, count: c * h * w, channels: c, name: name)
    }

    /// One value per image (1 × 1 × 1) or per channel (C × 1 × 1).
    var isPerChannel: Bool { h == 1 && w == 1 }

    /// Throws unless the constant broadcasts onto `shape`'s `[C, H, W]`.
    func check(_ shape: NNShape, name: String) throws {
        guard (c == 1 || c == shape.c) && (isPerChannel || (h == shape.h && w == shape.w)) else {
            throw NNLayerError("\(name) has shape [\(c), \(h), \(w)], which does not broadcast onto the input's [C, H, W] = [\(shape.c), \(shape.h), \(shape.w)] (give [1], [C], [1, H, W] or [C, H, W])")
        }
    }

    var shapeDescription: String { isPerChannel ? (c == 1 ? "scalar" : "[\(c)]") : "[\(c), \(h), \(w)]" }
}

extension UnsafeBufferPointer where Element == Float {
    /// The part of an `NNImageConstant`'s values that applies to channel `channel`: a whole
    /// `H × W` plane (`spatial`) or a single value.
    @inline(__always) func plane(of k: NNImageConstant, channel: Int) -> (UnsafePointer<Float>, spatial: Bool) {
        let base = baseAddress!
        if k.isPerChannel { return (base + (k.c == 1 ? 0 : channel), false) }
        return (base + (k.c == 1 ? 0 : channel) * k.h * k.w, true)
    }
}

/// `BiasLayerParams`: `y = x + bias`, the bias broadcast from `[1]`, `[C]`, `[1, H, W]` or
/// `[C, H, W]` over every image. Runs in place; a scalar or per-channel bias folds into a
/// preceding convolution or inner product as an affine step.
final class BiasLayer: NNLayer, @unchecked Sendable {
    let bias: NNImageConstant

    init(_ p: CoreML_Specification_BiasLayerParams) throws {
        bias = try NNImageConstant(shape: p.shape, weights: p.bias, name: "bias")
    }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        guard inputs.count == 1 else { throw NNLayerError("takes one input, got \(inputs.count)") }
        try bias.check(inputs[0], name: "bias")
        return inputs
    }

    var runsInPlace: Bool { true }
    var epilogue: NNEpilogueOp? { bias.isPerChannel ? .affine(scale: nil, shift: bias.values) : nil }
    var detail: String { "bias \(bias.shapeDescription)" }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let x = context.pointer(inputs[0]), y = context.pointer(outputs[0])
        let shape = inputs[0].shape, hw = shape.hw, channels = shape.c
        let bias = self.bias
        bias.values.withUnsafeBufferPointer { v in
            context.parallelFor(shape.images * channels, costPerItem: hw) { range in
                for q in range {
                    let xp = x + q * hw, yp = y + q * hw
                    let (b, spatial) = v.plane(of: bias, channel: q % channels)
                    if spatial {
                        for i in 0..<hw { yp[i] = xp[i] + b[i] }
                    } else {
                        let t = b[0]
                        for i in 0..<hw { yp[i] = xp[i] + t }
                    }
                }
            }
        }
    }
}

/// `ScaleLayerParams`: `y = x * scale (+ bias when hasBias)`, scale and bias each broadcast from
/// `[1]`, `[C]`, `[1, H, W]` or `[C, H, W]`. Runs in place; folds into a preceding convolution
/// or inner product when both are scalar or per channel.
final class ScaleLayer: NNLayer, @unchecked Sendable {
    let scale: NNImageConstant
    let bias: NNImageConstant?

    init(_ p: CoreML_Specification_ScaleLayerParams) throws {
        scale = try NNImageConstant(shape: p.shapeScale, weights: p.scale, name: "scale")
        bias = p.hasBias_p ? try NNImageConstant(shape: p.shapeBias, weights: p.bias, name: "bias") : nil
    }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        guard inputs.count == 1 else { throw NNLayerError("takes one input, got \(inputs.count)") }
        try scale.check(inputs[0], name: "scale")
        try bias?.check(inputs[0], name: "bias")
        return inputs
    }

    var runsInPlace: Bool { true }
    var epilogue: NNEpilogueOp? {
        guard scale.isPerChannel, bias?.isPerChannel ?? true else { return nil }
        return .affine(scale: scale.values, shift: bias?.values)
    }
    var detail: String { "scale \(scale.shapeDescription)" + (bias.map { ", bias \($0.shapeDescription)" } ?? "") }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let x = context.pointer(inputs[0]), y = context.pointer(outputs[0])
        let shape = inputs[0].shape, hw = shape.hw, channels = shape.c
        let scale = self.scale, bias = self.bias
        let biasValues = bias?.values ?? []
        scale.values.withUnsafeBufferPointer { sv in
            biasValues.withUnsafeBufferPointer { bv in
                context.parallelFor(shape.images * channels, costPerItem: hw) { range in
                    for q in range {
                        let xp = x + q * hw, yp = y + q * hw, channel = q % channels
                        let (s, spatial) = sv.plane(of: scale, channel: channel)
                        if spatial {
                            for i in 0..<hw { yp[i] = xp[i] * s[i] }
                        } else {
                            let t = s[0]
                            for i in 0..<hw { yp[i] = xp[i] * t }
                        }
                        guard let bias else { continue }
                        let (b, bSpatial) = bv.plane(of: bias, channel: channel)
                        if bSpatial {
                            for i in 0..<hw { yp[i] += b[i] }
                        } else {
                            let t = b[0]
                            for i in 0..<hw { yp[i] += t }
                        }
                    }
                }
            }
        }
    }
}
