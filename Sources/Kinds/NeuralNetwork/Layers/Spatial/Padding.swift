import CortadoSpec

/// `PaddingLayerParams`: grows every `[H, W]` plane by top/bottom/left/right borders filled with
/// a constant, the reflection of the edge (edge excluded) or the replicated edge.
/// `[S, B, C, H, W]` → `[S, B, C, H + top + bottom, W + left + right]`.
final class PaddingLayer: NNLayer, @unchecked Sendable {
    enum Kind { case constant(Float), reflection, replication }
    let kind: Kind
    let top: Int, bottom: Int, left: Int, right: Int

    init(_ p: CoreML_Specification_PaddingLayerParams) throws {
        switch p.paddingType {
        case .constant(let c)?: kind = .constant(c.value)
        case .reflection?: kind = .reflection
        case .replication?: kind = .replication
        case nil: throw NNLayerError("padding has no type (constant, reflection or replication)")
        }
        (top, bottom, left, right) = try NNWindow.borders(p.paddingAmounts, what: "paddingAmounts")
    }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        guard inputs.count == 1 else { throw NNLayerError("takes one input, got \(inputs.count)") }
        var s = inputs[0]
        if case .reflection = kind {
            guard top < s.h, bottom < s.h, left < s.w, right < s.w else {
                throw NNLayerError("reflection padding (top \(top), bottom \(bottom), left \(left), right \(right)) must be smaller than the input's height \(s.h) and width \(s.w)")
            }
        }
        s.h += top + bottom
        s.w += left + right
        return [s]
    }

    var detail: String {
        let name: String
        switch kind {
        case .constant(let v): name = "constant \(v)"
        case .reflection: name = "reflection"
        case .replication: name = "replication"
        }
        return "\(name), top \(top) bottom \(bottom) left \(left) right \(right)"
    }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let x = context.pointer(inputs[0]), y = context.pointer(outputs[0])
        let inShape = inputs[0].shape, outShape = outputs[0].shape
        let h = inShape.h, w = inShape.w, oh = outShape.h, ow = outShape.w
        let top = top, left = left, right = right, kind = kind
        context.parallelFor(inShape.images * inShape.c, costPerItem: oh * ow) { range in
            for plane in range {
                let src = x + plane * h * w, dst = y + plane * oh * ow
                for r in 0..<oh {
                    let row = dst + r * ow
                    var sr = r - top
                    if sr < 0 || sr >= h {
                        switch kind {
                        case .constant(let v):
                            row.update(repeating: v, count: ow)
                            continue
                        case .reflection: sr = sr < 0 ? -sr : 2 * (h - 1) - sr
                        case .replication: sr = sr < 0 ? 0 : h - 1
                        }
                    }
                    let s = src + sr * w
                    (row + left).update(from: s, count: w)
                    switch kind {
                    case .constant(let v):
                        row.update(repeating: v, count: left)
                        (row + left + w).update(repeating: v, count: right)
                    case .reflection:
                        for i in 0..<left { row[i] = s[left - i] }
                        for i in 0..<right { row[left + w + i] = s[w - 2 - i] }
                    case .replication:
                        row.update(repeating: s[0], count: left)
                        (row + left + w).update(repeating: s[w - 1], count: right)
                    }
                }
            }
        }
    }
}

/// `CropLayerParams`: cuts a window out of every `[H, W]` plane. With one input the window drops
/// `cropAmounts` from each edge; with two, it has the second input's `H × W` and starts at
/// `offset` `[h, w]`. `[S, B, C, H, W]` → `[S, B, C, H_out, W_out]`.
final class CropLayer: NNLayer, @unchecked Sendable {
    let twoInputs: Bool
    let top: Int, bottom: Int, left: Int, right: Int

    init(_ p: CoreML_Specification_CropLayerParams, inputs: Int) throws {
        guard inputs == 1 || inputs == 2 else { throw NNLayerError("takes 1 or 2 inputs, got \(inputs)") }
        twoInputs = inputs == 2
        if twoInputs {
            guard p.offset.isEmpty || p.offset.count == 2 else {
                throw NNLayerError("offset must have 2 values [h, w], not \(p.offset.count)")
            }
            guard p.offset.allSatisfy({ $0 < 1 << 31 }) else { throw NNLayerError("offset \(p.offset) is too large") }
            top = p.offset.isEmpty ? 0 : Int(p.offset[0])
            left = p.offset.isEmpty ? 0 : Int(p.offset[1])
            bottom = 0; right = 0
        } else {
            (top, bottom, left, right) = try NNWindow.borders(p.cropAmounts, what: "cropAmounts")
        }
    }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        guard inputs.count == (twoInputs ? 2 : 1) else { throw NNLayerError("takes \(twoInputs ? 2 : 1) inputs, got \(inputs.count)") }
        var s = inputs[0]
        if twoInputs {
            let ref = inputs[1]
            guard top + ref.h <= s.h, left + ref.w <= s.w else {
                throw NNLayerError("a \(ref.h)×\(ref.w) window at offset [\(top), \(left)] does not fit in the \(s.h)×\(s.w) input")
            }
            s.h = ref.h; s.w = ref.w
        } else {
            guard top + bottom < s.h, left + right < s.w else {
                throw NNLayerError("cropping top \(top) bottom \(bottom) left \(left) right \(right) leaves nothing of the \(s.h)×\(s.w) input")
            }
            s.h -= top + bottom
            s.w -= left + right
        }
        return [s]
    }

    var detail: String { twoInputs ? "offset [\(top), \(left)]" : "top \(top) bottom \(bottom) left \(left) right \(right)" }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let x = context.pointer(inputs[0]), y = context.pointer(outputs[0])
        let inShape = inputs[0].shape, outShape = outputs[0].shape
        let h = inShape.h, w = inShape.w, oh = outShape.h, ow = outShape.w
        let start = top * w + left
        context.parallelFor(inShape.images * inShape.c, costPerItem: oh * ow) { range in
            for plane in range {
                NNCopy.rows(x + plane * h * w + start, pitch: w, to: y + plane * oh * ow, pitch: ow, rows: oh, width: ow)
            }
        }
    }
}
