import COpenBLAS
import CortadoCore
import CortadoSpec

/// One layer as training runs it: a forward pass for one example, and a backward pass that
/// turns the gradient of the loss with respect to the output into gradients with respect to
/// the inputs, adding the gradients of its updatable parameters on the way.
protocol NNTrainOp: AnyObject {
    var layerName: String { get }
    var inputs: [String] { get }
    var output: String { get }
    /// Weights and biases, updatable or not.
    var parameters: [NNTrainParameter] { get }
    func forward(_ x: [NNTrainTensor]) throws -> NNTrainTensor
    /// The forward pass of many examples (`xs[e]`: example e's inputs): for layers no
    /// parameter being trained reaches, run once over all the examples before training.
    func forwardBatch(_ xs: [[NNTrainTensor]]) throws -> [NNTrainTensor]
    /// `x`: the inputs of the forward pass, `y` its output, `dy` the loss's gradient there.
    func backward(_ x: [NNTrainTensor], _ y: NNTrainTensor, _ dy: NNTrainTensor) -> [NNTrainTensor]
}

extension NNTrainOp {
    var parameters: [NNTrainParameter] { [] }
    func forwardBatch(_ xs: [[NNTrainTensor]]) throws -> [NNTrainTensor] { try xs.map { try forward($0) } }
}

/// A layer's parameters are wrong for training (or for its inputs); the message names the layer.
struct NNTrainError: Error {
    let message: String
    init(_ message: String) { self.message = message }
}

/// Builds the training form of a spec layer, or says why there is none.
enum NNTrainOps {
    /// The layer types training runs through, for messages.
    static let supported = "innerProduct, convolution, activation (ReLU, leaky ReLU, sigmoid, tanh, linear, ELU, softplus, "
        + "hard sigmoid, scaled tanh), softmax, flatten, pooling (max, average), batchnorm (inference statistics), "
        + "concat, reshape"

    static func make(_ layer: CoreML_Specification_NeuralNetworkLayer) throws -> any NNTrainOp {
        let name = layer.name, inputs = layer.input
        guard layer.output.count == 1 else {
            throw NNTrainError("has \(layer.output.count) outputs; training runs layers with one")
        }
        let output = layer.output[0]
        func one() throws {
            guard inputs.count == 1 else { throw NNTrainError("takes one input, got \(inputs.count)") }
        }
        switch layer.layer {
        case .innerProduct(let p)?:
            try one()
            return try NNTrainInnerProduct(p, name: name, input: inputs[0], output: output, layerUpdatable: layer.isUpdatable)
        case .convolution(let p)?:
            try one()
            return try NNTrainConvolution(p, name: name, input: inputs[0], output: output, layerUpdatable: layer.isUpdatable)
        case .activation(let p)?:
            try one()
            return try NNTrainActivation(p, name: name, input: inputs[0], output: output)
        case .softmax?:
            try one()
            return NNTrainSoftmax(name: name, input: inputs[0], output: output)
        case .flatten(let p)?:
            try one()
            return try NNTrainFlatten(p, name: name, input: inputs[0], output: output)
        case .pooling(let p)?:
            try one()
            return try NNTrainPooling(p, name: name, input: inputs[0], output: output)
        case .batchnorm(let p)?:
            try one()
            return try NNTrainBatchnorm(p, name: name, input: inputs[0], output: output)
        case .concat(let p)?:
            guard !p.sequenceConcat else { throw NNTrainError("concatenates along the sequence axis; training concatenates channels only") }
            return NNTrainConcat(name: name, inputs: inputs, output: output)
        case .reshape(let p)?:
            try one()
            return try NNTrainReshape(p, name: name, input: inputs[0], output: output)
        default:
            throw NNTrainError("is a layer training cannot differentiate (it runs \(supported))")
        }
    }

    /// The parameter of a `WeightParams`, as Float32 values; an updatable one must be stored as
    /// Float32 (Core ML's rule: half-precision or quantized weights cannot be updated).
    static func parameter(_ w: CoreML_Specification_WeightParams, count: Int, channels: Int, name: String, what: String,
                          updatable: Bool) throws -> NNTrainParameter {
        if updatable, w.floatValue.isEmpty, !NNWeights.isEmpty(w) {
            throw NNTrainError("\(what) are updatable but stored as \(NNWeights.form(w)); updatable weights must be float32 (floatValue)")
        }
        let values: [Float]
        do { values = try NNWeights.floats(w, count: count, channels: channels, name: what) } catch let error as NNLayerError {
            throw NNTrainError(error.message)
        }
        return NNTrainParameter(name: "layer '\(name)' \(what)", value: values, updatable: updatable)
    }
}

/// `innerProduct`: `y = W x + b` over the channels of a `[C, 1, 1]` blob.
final class NNTrainInnerProduct: NNTrainOp {
    let layerName: String, inputs: [String], output: String
    let nIn: Int, nOut: Int
    let weights: NNTrainParameter
    let bias: NNTrainParameter?
    var parameters: [NNTrainParameter] { [weights] + (bias.map { [$0] } ?? []) }

    init(_ p: CoreML_Specification_InnerProductLayerParams, name: String, input: String, output: String, layerUpdatable: Bool) throws {
        layerName = name; inputs = [input]; self.output = output
        nIn = Int(p.inputChannels); nOut = Int(p.outputChannels)
        guard nIn > 0, nOut > 0 else { throw NNTrainError("inputChannels and outputChannels must be positive") }
        guard !p.int8DynamicQuantize else { throw NNTrainError("uses int8 dynamic quantization, which training does not run") }
        weights = try NNTrainOps.parameter(p.weights, count: nIn * nOut, channels: nOut, name: name, what: "weights",
                                           updatable: layerUpdatable && p.weights.isUpdatable)
        bias = p.hasBias_p ? try NNTrainOps.parameter(p.bias, count: nOut, channels: nOut, name: name, what: "bias",
                                                      updatable: layerUpdatable && p.bias.isUpdatable) : nil
    }

    func forward(_ x: [NNTrainTensor]) throws -> NNTrainTensor {
        let a = x[0]
        guard a.count == nIn, a.h == 1, a.w == 1 else {
            throw NNTrainError("expects a [\(nIn), 1, 1] input, got \(a.shapeText)")
        }
        var y = bias?.value ?? [Double](repeating: 0, count: nOut)
        weights.value.withUnsafeBufferPointer { wv in
            for o in 0..<nOut {
                var s = 0.0
                for i in 0..<nIn { s += wv[o * nIn + i] * a.data[i] }
                y[o] += s
            }
        }
        return NNTrainTensor(c: nOut, h: 1, w: 1, data: y)
    }

    /// All the examples as one product, `Y[n, out] = X[n, in] · Wᵀ + b` (OpenBLAS's dgemm, in
    /// Double as the one-example path).
    func forwardBatch(_ xs: [[NNTrainTensor]]) throws -> [NNTrainTensor] {
        let n = xs.count
        guard n > 1 else { return try xs.map { try forward($0) } }
        var x = [Double](repeating: 0, count: n * nIn)
        for (e, inputs) in xs.enumerated() {
            let a = inputs[0]
            guard a.count == nIn, a.h == 1, a.w == 1 else {
                throw NNTrainError("expects a [\(nIn), 1, 1] input, got \(a.shapeText)")
            }
            x.withUnsafeMutableBufferPointer { x in
                a.data.withUnsafeBufferPointer { (x.baseAddress! + e * nIn).update(from: $0.baseAddress!, count: nIn) }
            }
        }
        var y = [Double](repeating: 0, count: n * nOut)
        if let b = bias?.value {
            for e in 0..<n { for o in 0..<nOut { y[e * nOut + o] = b[o] } }
        }
        x.withUnsafeBufferPointer { x in
            weights.value.withUnsafeBufferPointer { w in
                y.withUnsafeMutableBufferPointer { y in
                    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blasint(n), blasint(nOut), blasint(nIn),
                                1, x.baseAddress, blasint(nIn), w.baseAddress, blasint(nIn), 1, y.baseAddress, blasint(nOut))
                }
            }
        }
        return (0..<n).map { e in NNTrainTensor(c: nOut, h: 1, w: 1, data: Array(y[(e * nOut)..<((e + 1) * nOut)])) }
    }

    func backward(_ x: [NNTrainTensor], _ y: NNTrainTensor, _ dy: NNTrainTensor) -> [NNTrainTensor] {
        let a = x[0]
        var dx = NNTrainTensor(zerosLike: a)
        for o in 0..<nOut {
            let g = dy.data[o]
            if g == 0 { continue }
            for i in 0..<nIn { dx.data[i] += weights.value[o * nIn + i] * g }
            if weights.updatable { for i in 0..<nIn { weights.grad[o * nIn + i] += g * a.data[i] } }
            if let bias, bias.updatable { bias.grad[o] += g }
        }
        return [dx]
    }
}

/// `convolution` (not deconvolution): groups, stride, dilation, valid or same padding, with
/// the geometry the inference layer uses.
final class NNTrainConvolution: NNTrainOp {
    let layerName: String, inputs: [String], output: String
    let outC: Int, kC: Int, groups: Int, kh: Int, kw: Int, sh: Int, sw: Int, dh: Int, dw: Int
    let geometryOf: (Int, Int) throws -> ConvolutionLayer.Geometry
    let weights: NNTrainParameter
    let bias: NNTrainParameter?
    var parameters: [NNTrainParameter] { [weights] + (bias.map { [$0] } ?? []) }

    init(_ p: CoreML_Specification_ConvolutionLayerParams, name: String, input: String, output: String, layerUpdatable: Bool) throws {
        layerName = name; inputs = [input]; self.output = output
        guard !p.isDeconvolution else { throw NNTrainError("is a deconvolution, which training does not differentiate") }
        let layer: ConvolutionLayer
        do { layer = try ConvolutionLayer(p, inputCount: 1) } catch let error as NNLayerError { throw NNTrainError(error.message) }
        outC = layer.outputChannels; kC = layer.kernelChannels; groups = layer.groups
        (kh, kw, sh, sw, dh, dw) = (layer.kh, layer.kw, layer.sh, layer.sw, layer.dh, layer.dw)
        geometryOf = { try layer.geometry(h: $0, w: $1) }
        weights = try NNTrainOps.parameter(p.weights, count: outC * kC * kh * kw, channels: outC, name: name, what: "weights",
                                           updatable: layerUpdatable && p.weights.isUpdatable)
        bias = p.hasBias_p ? try NNTrainOps.parameter(p.bias, count: outC, channels: outC, name: name, what: "bias",
                                                      updatable: layerUpdatable && p.bias.isUpdatable) : nil
    }

    private func geometry(_ a: NNTrainTensor) throws -> ConvolutionLayer.Geometry {
        guard a.c == kC * groups else {
            throw NNTrainError("expects \(kC * groups) input channels, got \(a.shapeText)")
        }
        do { return try geometryOf(a.h, a.w) } catch let error as NNLayerError { throw NNTrainError(error.message) }
    }

    /// Calls `body(weightIndex, inputIndex, outputIndex)` for every tap of the kernel that
    /// lands inside the input (padding contributes nothing).
    @inline(__always)
    private func taps(_ a: NNTrainTensor, _ g: ConvolutionLayer.Geometry, _ body: (Int, Int, Int) -> Void) {
        let outPerGroup = outC / groups
        for o in 0..<outC {
            let group = o / outPerGroup
            for oy in 0..<g.outH {
                for ox in 0..<g.outW {
                    let yi = (o * g.outH + oy) * g.outW + ox
                    for ci in 0..<kC {
                        let c = group * kC + ci
                        for ky in 0..<kh {
                            let iy = oy * sh - g.offH + ky * dh
                            if iy < 0 || iy >= a.h { continue }
                            for kx in 0..<kw {
                                let ix = ox * sw - g.offW + kx * dw
                                if ix < 0 || ix >= a.w { continue }
                                body(((o * kC + ci) * kh + ky) * kw + kx, (c * a.h + iy) * a.w + ix, yi)
                            }
                        }
                    }
                }
            }
        }
    }

    func forward(_ x: [NNTrainTensor]) throws -> NNTrainTensor {
        let a = x[0]
        let g = try geometry(a)
        var y = NNTrainTensor(zerosC: outC, h: g.outH, w: g.outW)
        let plane = g.outH * g.outW
        if let bias { for o in 0..<outC { for j in 0..<plane { y.data[o * plane + j] = bias.value[o] } } }
        let wv = weights.value
        taps(a, g) { wi, xi, yi in y.data[yi] += wv[wi] * a.data[xi] }
        return y
    }

    func backward(_ x: [NNTrainTensor], _ y: NNTrainTensor, _ dy: NNTrainTensor) -> [NNTrainTensor] {
        let a = x[0]
        let g = try! geometry(a)
        var dx = NNTrainTensor(zerosLike: a)
        let wv = weights.value
        let w = weights
        if w.updatable {
            taps(a, g) { wi, xi, yi in
                dx.data[xi] += wv[wi] * dy.data[yi]
                w.grad[wi] += a.data[xi] * dy.data[yi]
            }
        } else {
            taps(a, g) { wi, xi, yi in dx.data[xi] += wv[wi] * dy.data[yi] }
        }
        if let bias, bias.updatable {
            let plane = g.outH * g.outW
            for o in 0..<outC { for j in 0..<plane { bias.grad[o] += dy.data[o * plane + j] } }
        }
        return [dx]
    }
}
