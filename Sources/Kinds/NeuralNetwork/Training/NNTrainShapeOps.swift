import CortadoSpec
import Foundation

/// `activation`: elementwise, the derivative read from the input (and output where cheaper).
final class NNTrainActivation: NNTrainOp {
    let layerName: String, inputs: [String], output: String
    let f: (Double) -> Double
    /// The derivative, given the input and the output.
    let df: (Double, Double) -> Double

    init(_ p: CoreML_Specification_ActivationParams, name: String, input: String, output: String) throws {
        layerName = name; inputs = [input]; self.output = output
        switch p.nonlinearityType {
        case .reLu?:
            f = { max($0, 0) }; df = { x, _ in x > 0 ? 1 : 0 }
        case .leakyReLu(let a)?:
            let alpha = Double(a.alpha)
            f = { $0 >= 0 ? $0 : alpha * $0 }; df = { x, _ in x >= 0 ? 1 : alpha }
        case .tanh?:
            f = { Foundation.tanh($0) }; df = { _, y in 1 - y * y }
        case .scaledTanh(let a)?:
            let alpha = Double(a.alpha), beta = Double(a.beta)
            f = { alpha * Foundation.tanh(beta * $0) }
            df = { x, _ in let t = Foundation.tanh(beta * x); return alpha * beta * (1 - t * t) }
        case .sigmoid?:
            f = { 1 / (1 + exp(-$0)) }; df = { _, y in y * (1 - y) }
        case .sigmoidHard(let a)?:
            let alpha = Double(a.alpha), beta = Double(a.beta)
            f = { min(max(alpha * $0 + beta, 0), 1) }
            df = { x, _ in let v = alpha * x + beta; return v > 0 && v < 1 ? alpha : 0 }
        case .linear(let a)?:
            let alpha = Double(a.alpha), beta = Double(a.beta)
            f = { alpha * $0 + beta }; df = { _, _ in alpha }
        case .elu(let a)?:
            let alpha = Double(a.alpha)
            f = { $0 >= 0 ? $0 : alpha * (exp($0) - 1) }; df = { x, y in x >= 0 ? 1 : y + alpha }
        case .softplus?:
            f = { x in x > 30 ? x : log1p(exp(x)) }; df = { x, _ in 1 / (1 + exp(-x)) }
        case let other?:
            throw NNTrainError("is a \(String(describing: other).prefix { $0 != "(" }) activation, which training does not differentiate")
        case nil:
            throw NNTrainError("has no activation type")
        }
    }

    func forward(_ x: [NNTrainTensor]) throws -> NNTrainTensor {
        var y = x[0]
        for i in y.data.indices { y.data[i] = f(y.data[i]) }
        return y
    }

    func backward(_ x: [NNTrainTensor], _ y: NNTrainTensor, _ dy: NNTrainTensor) -> [NNTrainTensor] {
        var dx = dy
        for i in dx.data.indices { dx.data[i] *= df(x[0].data[i], y.data[i]) }
        return [dx]
    }
}

/// `softmax` across the channels at each position.
final class NNTrainSoftmax: NNTrainOp {
    let layerName: String, inputs: [String], output: String

    init(name: String, input: String, output: String) {
        layerName = name; inputs = [input]; self.output = output
    }

    func forward(_ x: [NNTrainTensor]) throws -> NNTrainTensor {
        var y = x[0]
        let plane = y.h * y.w
        for p in 0..<plane {
            var m = -Double.infinity
            for c in 0..<y.c { m = max(m, y.data[c * plane + p]) }
            var s = 0.0
            for c in 0..<y.c { let e = exp(y.data[c * plane + p] - m); y.data[c * plane + p] = e; s += e }
            for c in 0..<y.c { y.data[c * plane + p] /= s }
        }
        return y
    }

    func backward(_ x: [NNTrainTensor], _ y: NNTrainTensor, _ dy: NNTrainTensor) -> [NNTrainTensor] {
        var dx = dy
        let plane = y.h * y.w
        for p in 0..<plane {
            var dot = 0.0
            for c in 0..<y.c { dot += dy.data[c * plane + p] * y.data[c * plane + p] }
            for c in 0..<y.c { dx.data[c * plane + p] = y.data[c * plane + p] * (dy.data[c * plane + p] - dot) }
        }
        return [dx]
    }
}

/// `flatten`: `[C, H, W]` to `[C·H·W, 1, 1]`, channel-first (the same order) or channel-last.
final class NNTrainFlatten: NNTrainOp {
    let layerName: String, inputs: [String], output: String
    let channelLast: Bool

    init(_ p: CoreML_Specification_FlattenLayerParams, name: String, input: String, output: String) throws {
        layerName = name; inputs = [input]; self.output = output
        switch p.mode {
        case .channelFirst: channelLast = false
        case .channelLast: channelLast = true
        case .UNRECOGNIZED(let v): throw NNTrainError("has an unknown flatten mode \(v)")
        }
    }

    func forward(_ x: [NNTrainTensor]) throws -> NNTrainTensor {
        let a = x[0]
        guard channelLast, a.h * a.w > 1 else { return NNTrainTensor(c: a.count, h: 1, w: 1, data: a.data) }
        var y = NNTrainTensor(zerosC: a.count, h: 1, w: 1)
        let plane = a.h * a.w
        for c in 0..<a.c { for p in 0..<plane { y.data[p * a.c + c] = a.data[c * plane + p] } }
        return y
    }

    func backward(_ x: [NNTrainTensor], _ y: NNTrainTensor, _ dy: NNTrainTensor) -> [NNTrainTensor] {
        let a = x[0]
        guard channelLast, a.h * a.w > 1 else { return [NNTrainTensor(c: a.c, h: a.h, w: a.w, data: dy.data)] }
        var dx = NNTrainTensor(zerosLike: a)
        let plane = a.h * a.w
        for c in 0..<a.c { for p in 0..<plane { dx.data[c * plane + p] = dy.data[p * a.c + c] } }
        return [dx]
    }
}

/// `reshape` in channel-first order: the values keep their order, so the gradient only takes
/// back the input's shape.
final class NNTrainReshape: NNTrainOp {
    let layerName: String, inputs: [String], output: String
    let c: Int, h: Int, w: Int

    init(_ p: CoreML_Specification_ReshapeLayerParams, name: String, input: String, output: String) throws {
        layerName = name; inputs = [input]; self.output = output
        guard p.mode == .channelFirst else { throw NNTrainError("reshapes in channel-last order; training runs channel-first reshapes") }
        let t = p.targetShape
        switch t.count {
        case 3: (c, h, w) = (Int(t[0]), Int(t[1]), Int(t[2]))
        case 4 where t[0] == 1: (c, h, w) = (Int(t[1]), Int(t[2]), Int(t[3]))
        default: throw NNTrainError("has target shape \(t); training reshapes to [C, H, W] (or [1, C, H, W])")
        }
        guard c > 0, h > 0, w > 0 else { throw NNTrainError("has target shape \(t) with a dimension that is not positive") }
    }

    func forward(_ x: [NNTrainTensor]) throws -> NNTrainTensor {
        guard x[0].count == c * h * w else {
            throw NNTrainError("cannot reshape \(x[0].shapeText) (\(x[0].count) values) to [\(c), \(h), \(w)]")
        }
        return NNTrainTensor(c: c, h: h, w: w, data: x[0].data)
    }

    func backward(_ x: [NNTrainTensor], _ y: NNTrainTensor, _ dy: NNTrainTensor) -> [NNTrainTensor] {
        [NNTrainTensor(c: x[0].c, h: x[0].h, w: x[0].w, data: dy.data)]
    }
}

/// `concat` along the channels.
final class NNTrainConcat: NNTrainOp {
    let layerName: String, inputs: [String], output: String

    init(name: String, inputs: [String], output: String) {
        layerName = name; self.inputs = inputs; self.output = output
    }

    func forward(_ x: [NNTrainTensor]) throws -> NNTrainTensor {
        guard let first = x.first else { throw NNTrainError("has no inputs") }
        for t in x where t.h != first.h || t.w != first.w {
            throw NNTrainError("concatenates \(first.shapeText) with \(t.shapeText); the heights and widths must agree")
        }
        return NNTrainTensor(c: x.reduce(0) { $0 + $1.c }, h: first.h, w: first.w, data: x.flatMap(\.data))
    }

    func backward(_ x: [NNTrainTensor], _ y: NNTrainTensor, _ dy: NNTrainTensor) -> [NNTrainTensor] {
        var start = 0
        return x.map { t in
            defer { start += t.count }
            return NNTrainTensor(c: t.c, h: t.h, w: t.w, data: Array(dy.data[start..<(start + t.count)]))
        }
    }
}

/// `batchnorm` with the stored statistics (inference mode, as Core ML trains through it):
/// `y = γ (x − μ) / √(σ² + ε) + β` per channel; γ, β, μ and σ² are not updated.
final class NNTrainBatchnorm: NNTrainOp {
    let layerName: String, inputs: [String], output: String
    let scale: [Double], shift: [Double]

    init(_ p: CoreML_Specification_BatchnormLayerParams, name: String, input: String, output: String) throws {
        layerName = name; inputs = [input]; self.output = output
        guard !p.computeMeanVar, !p.instanceNormalization else {
            throw NNTrainError("computes its statistics from the input; training runs batchnorm with stored mean and variance")
        }
        let n = Int(p.channels)
        func read(_ w: CoreML_Specification_WeightParams, _ what: String) throws -> [Double] {
            try NNTrainOps.parameter(w, count: n, channels: n, name: name, what: what, updatable: false).value
        }
        let gamma = try read(p.gamma, "gamma"), beta = try read(p.beta, "beta")
        let mean = try read(p.mean, "mean"), variance = try read(p.variance, "variance")
        let eps = Double(p.epsilon)
        scale = (0..<n).map { gamma[$0] / (variance[$0] + eps).squareRoot() }
        shift = (0..<n).map { beta[$0] - mean[$0] * gamma[$0] / (variance[$0] + eps).squareRoot() }
    }

    func forward(_ x: [NNTrainTensor]) throws -> NNTrainTensor {
        var y = x[0]
        guard y.c == scale.count else { throw NNTrainError("has \(scale.count) channels, the input \(y.shapeText)") }
        let plane = y.h * y.w
        for c in 0..<y.c { for p in 0..<plane { y.data[c * plane + p] = y.data[c * plane + p] * scale[c] + shift[c] } }
        return y
    }

    func backward(_ x: [NNTrainTensor], _ y: NNTrainTensor, _ dy: NNTrainTensor) -> [NNTrainTensor] {
        var dx = dy
        let plane = y.h * y.w
        for c in 0..<y.c { for p in 0..<plane { dx.data[c * plane + p] *= scale[c] } }
        return [dx]
    }
}

/// `pooling`, max or average, with the inference layer's window geometry (valid, same,
/// includeLastPixel, global). A max passes its gradient to the first position holding the
/// maximum; an average spreads it over the positions it divided by.
final class NNTrainPooling: NNTrainOp {
    let layerName: String, inputs: [String], output: String
    let layer: PoolingLayer

    init(_ p: CoreML_Specification_PoolingLayerParams, name: String, input: String, output: String) throws {
        layerName = name; inputs = [input]; self.output = output
        do { layer = try PoolingLayer(p) } catch let error as NNLayerError { throw NNTrainError(error.message) }
        guard layer.kind != .l2 else { throw NNTrainError("is an L2 pooling, which training does not differentiate") }
    }

    /// For each output position: the input positions of its window (inside the input) and
    /// the divisor of an average.
    private func windows(_ a: NNTrainTensor) throws -> (outH: Int, outW: Int, each: [(rows: Range<Int>, cols: Range<Int>, divisor: Double)]) {
        let g: PoolingLayer.Geometry
        do { g = try layer.geometry(h: a.h, w: a.w) } catch let error as NNLayerError { throw NNTrainError(error.message) }
        let global = layer.global
        let kh = global ? a.h : layer.kh, kw = global ? a.w : layer.kw
        let sh = global ? 1 : layer.sh, sw = global ? 1 : layer.sw
        var each: [(Range<Int>, Range<Int>, Double)] = []
        for oy in 0..<g.outH {
            for ox in 0..<g.outW {
                let y0 = oy * sh - g.top, x0 = ox * sw - g.left
                let rows = max(y0, 0)..<min(y0 + kh, a.h), cols = max(x0, 0)..<min(x0 + kw, a.w)
                let padded = (min(y0 + kh, a.h + g.bottom) - max(y0, -g.top)) * (min(x0 + kw, a.w + g.right) - max(x0, -g.left))
                let divisor = layer.excludePadding ? Double(rows.count * cols.count) : Double(padded)
                each.append((rows, cols, divisor))
            }
        }
        return (g.outH, g.outW, each)
    }

    func forward(_ x: [NNTrainTensor]) throws -> NNTrainTensor {
        let a = x[0]
        let (outH, outW, each) = try windows(a)
        var y = NNTrainTensor(zerosC: a.c, h: outH, w: outW)
        for c in 0..<a.c {
            for (j, win) in each.enumerated() {
                var acc = layer.kind == .max ? -Double.infinity : 0
                for r in win.rows { for q in win.cols {
                    let v = a.data[(c * a.h + r) * a.w + q]
                    if layer.kind == .max { acc = max(acc, v) } else { acc += v }
                } }
                y.data[c * outH * outW + j] = layer.kind == .max ? acc : (win.divisor > 0 ? acc / win.divisor : 0)
            }
        }
        return y
    }

    func backward(_ x: [NNTrainTensor], _ y: NNTrainTensor, _ dy: NNTrainTensor) -> [NNTrainTensor] {
        let a = x[0]
        let (outH, outW, each) = try! windows(a)
        var dx = NNTrainTensor(zerosLike: a)
        for c in 0..<a.c {
            for (j, win) in each.enumerated() {
                let g = dy.data[c * outH * outW + j]
                if layer.kind == .max {
                    let m = y.data[c * outH * outW + j]
                    search: for r in win.rows { for q in win.cols where a.data[(c * a.h + r) * a.w + q] == m {
                        dx.data[(c * a.h + r) * a.w + q] += g
                        break search
                    } }
                } else if win.divisor > 0 {
                    for r in win.rows { for q in win.cols { dx.data[(c * a.h + r) * a.w + q] += g / win.divisor } }
                }
            }
        }
        return [dx]
    }
}
