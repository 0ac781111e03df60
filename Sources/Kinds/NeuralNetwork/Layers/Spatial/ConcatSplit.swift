import CortadoSpec

/// `ConcatLayerParams`: joins the inputs along the channel axis (each image's `[C_k, H, W]`
/// blocks one after another) or, with `sequenceConcat`, along the sequence axis.
/// Channel: `[S, B, C_k, H, W]` → `[S, B, ΣC_k, H, W]`; sequence: `[S_k, B, C, H, W]` → `[ΣS_k, B, C, H, W]`.
final class ConcatLayer: NNLayer, @unchecked Sendable {
    let sequence: Bool

    init(_ p: CoreML_Specification_ConcatLayerParams, inputs: Int) throws {
        guard inputs >= 1 else { throw NNLayerError("takes at least one input") }
        sequence = p.sequenceConcat
    }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        guard var s = inputs.first else { throw NNLayerError("takes at least one input") }
        for (k, x) in inputs.enumerated().dropFirst() {
            if sequence {
                guard x.b == s.b, x.c == s.c, x.h == s.h, x.w == s.w else {
                    throw NNLayerError("input \(k) has shape \(x), which differs from input 0 (\(inputs[0])) outside the sequence axis")
                }
                s.s += x.s
            } else {
                guard x.s == s.s, x.b == s.b, x.h == s.h, x.w == s.w else {
                    throw NNLayerError("input \(k) has shape \(x), which differs from input 0 (\(inputs[0])) outside the channel axis")
                }
                s.c += x.c
            }
        }
        return [s]
    }

    var detail: String { sequence ? "along sequence" : "along channels" }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let y = context.pointer(outputs[0])
        if sequence {
            var offset = 0
            for t in inputs {
                (y + offset).update(from: context.pointer(t), count: t.count)
                offset += t.count
            }
            return
        }
        let out = outputs[0].shape
        let outChw = out.chw
        context.parallelFor(out.images, costPerItem: outChw) { range in
            for image in range {
                var offset = image * outChw
                for t in inputs {
                    let chw = t.shape.chw
                    (y + offset).update(from: context.pointer(t) + image * chw, count: chw)
                    offset += chw
                }
            }
        }
    }
}

/// `SplitLayerParams`: cuts each image's channels into `nOutputs` equal parts, one per output.
/// `[S, B, C, H, W]` → n × `[S, B, C/n, H, W]`.
final class SplitLayer: NNLayer, @unchecked Sendable {
    let parts: Int

    init(_ p: CoreML_Specification_SplitLayerParams, outputs: Int) throws {
        let n = p.nOutputs == 0 ? outputs : Int(clamping: p.nOutputs)
        guard n >= 1, n == outputs else { throw NNLayerError("nOutputs is \(p.nOutputs) but the layer names \(outputs) outputs") }
        parts = n
    }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        guard inputs.count == 1 else { throw NNLayerError("takes one input, got \(inputs.count)") }
        var s = inputs[0]
        guard s.c % parts == 0 else { throw NNLayerError("cannot split \(s.c) channels into \(parts) equal parts") }
        s.c /= parts
        return Array(repeating: s, count: parts)
    }

    var detail: String { "\(parts) parts" }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let x = context.pointer(inputs[0])
        let shape = inputs[0].shape
        let inChw = shape.chw, part = outputs[0].shape.chw
        context.parallelFor(shape.images, costPerItem: inChw) { range in
            for image in range {
                for (k, t) in outputs.enumerated() {
                    (context.pointer(t) + image * part).update(from: x + image * inChw + k * part, count: part)
                }
            }
        }
    }
}

/// `SliceLayerParams`: keeps `[start, end)` with a stride along the channel, height or width axis
/// of each image, like numpy's `x[start:end:stride]` (negative indices count from the end; an end
/// past the axis stops at it). The slice must not be empty.
final class SliceLayer: NNLayer, @unchecked Sendable {
    enum Axis { case channel, height, width }
    let axis: Axis
    let start: Int, end: Int, stride: Int

    init(_ p: CoreML_Specification_SliceLayerParams) throws {
        switch p.axis {
        case .channelAxis: axis = .channel
        case .heightAxis: axis = .height
        case .widthAxis: axis = .width
        default: throw NNLayerError("unknown slice axis \(p.axis.rawValue)")
        }
        guard p.stride >= 1 else { throw NNLayerError("stride must be positive, not \(p.stride)") }
        start = Int(clamping: p.startIndex)
        end = Int(clamping: p.endIndex)
        stride = Int(clamping: p.stride)
    }

    /// First index and count along an axis of length n.
    private func range(_ n: Int) throws -> (first: Int, count: Int) {
        let first = start < 0 ? start + n : start
        let last = min(end < 0 ? end + n : end, n)
        guard first >= 0, first < n, last > first else {
            throw NNLayerError("slice [\(start):\(end):\(stride)] of an axis of length \(n) is empty or out of range")
        }
        return (first, (last - first + stride - 1) / stride)
    }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        guard inputs.count == 1 else { throw NNLayerError("takes one input, got \(inputs.count)") }
        var s = inputs[0]
        switch axis {
        case .channel: s.c = try range(s.c).count
        case .height: s.h = try range(s.h).count
        case .width: s.w = try range(s.w).count
        }
        return [s]
    }

    var detail: String { "\(axis) [\(start):\(end):\(stride)]" }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let x = context.pointer(inputs[0]), y = context.pointer(outputs[0])
        let inShape = inputs[0].shape, out = outputs[0].shape
        let stride = stride
        let first: Int
        switch axis {
        case .channel: first = start < 0 ? start + inShape.c : start
        case .height: first = start < 0 ? start + inShape.h : start
        case .width: first = start < 0 ? start + inShape.w : start
        }
        let axis = axis
        let hw = inShape.hw, w = inShape.w, oh = out.h, ow = out.w
        // One item = one output plane.
        context.parallelFor(out.images * out.c, costPerItem: oh * ow) { range in
            for plane in range {
                let image = plane / out.c, c = plane % out.c
                let dst = y + plane * oh * ow
                switch axis {
                case .channel:
                    dst.update(from: x + image * inShape.chw + (first + c * stride) * hw, count: hw)
                case .height:
                    NNCopy.rows(x + plane * hw + first * w, pitch: stride * w, to: dst, pitch: ow, rows: oh, width: ow)
                case .width:
                    let src = x + plane * hw + first
                    for r in 0..<oh { NNCopy.strided(src + r * w, stride: stride, to: dst + r * ow, count: ow) }
                }
            }
        }
    }
}

/// `SequenceRepeatLayerParams`: repeats the whole sequence `nRepetitions` times (0 means 1).
/// `[S, B, C, H, W]` → `[n·S, B, C, H, W]`.
final class SequenceRepeatLayer: NNLayer, @unchecked Sendable {
    let repetitions: Int

    init(_ p: CoreML_Specification_SequenceRepeatLayerParams) {
        repetitions = p.nRepetitions == 0 ? 1 : Int(clamping: min(p.nRepetitions, 1 << 20))
    }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        guard inputs.count == 1 else { throw NNLayerError("takes one input, got \(inputs.count)") }
        var s = inputs[0]
        s.s *= repetitions
        return [s]
    }

    var detail: String { "×\(repetitions)" }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let x = context.pointer(inputs[0]), y = context.pointer(outputs[0])
        let n = inputs[0].count
        for k in 0..<repetitions { (y + k * n).update(from: x, count: n) }
    }
}
