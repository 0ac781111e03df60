import CortadoSpec

/// `TransposeLayerParams`: output axis `i` is input axis `axes[i]` (a permutation of every axis).
final class TransposeLayer: NNTensorLayer, @unchecked Sendable {
    let axes: [Int64]

    init(_ p: CoreML_Specification_TransposeLayerParams) { axes = p.axes.map { Int64($0) } }

    private func permutation(_ rank: Int) throws -> [Int] {
        guard axes.count == rank else { throw NNLayerError("axes \(axes) must name each of the input's \(rank) axes once") }
        let perm = try axes.map { try NNAxes.axis($0, rank: rank) }
        guard Set(perm).count == rank else { throw NNLayerError("axes \(axes) is not a permutation of the input's \(rank) axes") }
        return perm
    }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        guard inputs.count == 1 else { throw NNLayerError("takes one input, got \(inputs.count)") }
        let e = inputs[0].extents
        return [NNShape(tensor: try permutation(e.count).map { e[$0] })]
    }

    var detail: String { "axes \(axes)" }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let e = inputs[0].shape.extents
        guard let perm = try? permutation(e.count) else { return }
        let s = NNAxes.strides(e)
        NNGather.strided(context.pointer(inputs[0]), extents: perm.map { e[$0] }, strides: perm.map { s[$0] }, to: context.pointer(outputs[0]))
    }
}

/// `ConcatNDLayerParams`: inputs joined along one axis (their other axes equal). With
/// `interleave`, equal-sized inputs alternate along the axis instead (row 0 of each input,
/// then row 1 of each, …).
final class ConcatNDLayer: NNTensorLayer, @unchecked Sendable {
    let axis: Int64
    let interleave: Bool

    init(_ p: CoreML_Specification_ConcatNDLayerParams) {
        axis = p.axis
        interleave = p.interleave
    }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        guard let first = inputs.first?.extents else { throw NNLayerError("takes at least one input") }
        let a = try NNAxes.axis(axis, rank: first.count)
        var out = first
        out[a] = 0
        for (k, s) in inputs.enumerated() {
            var e = s.extents
            guard e.count == first.count else { throw NNLayerError("input \(k) has rank \(e.count); input 0 has rank \(first.count)") }
            out[a] += e[a]
            e[a] = first[a]
            guard e == first else { throw NNLayerError("input \(k) has shape \(s.extents); all inputs must match \(first) except along axis \(axis)") }
            if interleave && s.extents[a] != first[a] { throw NNLayerError("interleave needs inputs of equal size along axis \(axis)") }
        }
        return [NNShape(tensor: out)]
    }

    var detail: String { "axis \(axis)" + (interleave ? ", interleaved" : "") }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let e = outputs[0].shape.extents, y = context.pointer(outputs[0])
        let a = (try? NNAxes.axis(axis, rank: e.count)) ?? 0
        let outer = e[..<a].reduce(1, *), inner = e[(a + 1)...].reduce(1, *)
        let rowOut = e[a] * inner
        if interleave {
            let n = inputs.count, rows = inputs[0].shape.extents[a]
            for (k, t) in inputs.enumerated() {
                let x = context.pointer(t)
                for o in 0..<outer {
                    for r in 0..<rows { (y + o * rowOut + (r * n + k) * inner).update(from: x + (o * rows + r) * inner, count: inner) }
                }
            }
            return
        }
        var at = 0
        for t in inputs {
            let block = t.shape.extents[a] * inner
            NNCopy.rows(context.pointer(t), pitch: block, to: y + at, pitch: rowOut, rows: outer, width: block)
            at += block
        }
    }
}

/// `SplitNDLayerParams`: one input cut along an axis into `splitSizes`, or into as many equal
/// parts as the layer has outputs.
final class SplitNDLayer: NNTensorLayer, @unchecked Sendable {
    let axis: Int64
    let sizes: [Int]
    let parts: Int

    init(_ p: CoreML_Specification_SplitNDLayerParams, outputs: Int) throws {
        axis = p.axis
        sizes = p.splitSizes.map { Int($0) }
        parts = outputs
        guard sizes.isEmpty || sizes.count == outputs else { throw NNLayerError("splitSizes \(p.splitSizes) has \(sizes.count) parts for \(outputs) outputs") }
        guard p.numSplits == 0 || Int(p.numSplits) == outputs else { throw NNLayerError("numSplits \(p.numSplits) does not match the \(outputs) outputs") }
        guard sizes.allSatisfy({ $0 > 0 }) else { throw NNLayerError("splitSizes \(p.splitSizes) must be positive") }
    }

    private func split(_ size: Int) throws -> [Int] {
        if !sizes.isEmpty {
            guard sizes.reduce(0, +) == size else { throw NNLayerError("splitSizes \(sizes) add up to \(sizes.reduce(0, +)), not the axis size \(size)") }
            return sizes
        }
        guard size % parts == 0 else { throw NNLayerError("the axis size \(size) does not split into \(parts) equal parts") }
        return [Int](repeating: size / parts, count: parts)
    }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        guard inputs.count == 1 else { throw NNLayerError("takes one input, got \(inputs.count)") }
        let e = inputs[0].extents, a = try NNAxes.axis(axis, rank: e.count)
        return try split(e[a]).map { var o = e; o[a] = $0; return NNShape(tensor: o) }
    }

    var detail: String { "axis \(axis) into " + (sizes.isEmpty ? "\(parts) parts" : "\(sizes)") }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let e = inputs[0].shape.extents, x = context.pointer(inputs[0])
        let a = (try? NNAxes.axis(axis, rank: e.count)) ?? 0
        let outer = e[..<a].reduce(1, *), inner = e[(a + 1)...].reduce(1, *), rowIn = e[a] * inner
        var at = 0
        for t in outputs {
            let block = t.shape.extents[a] * inner
            NNCopy.rows(x + at, pitch: rowIn, to: context.pointer(t), pitch: block, rows: outer, width: block)
            at += block
        }
    }
}

/// NumPy basic slicing per axis, `x[begin:end:stride]`, as SliceStatic and SliceDynamic read
/// it: negative indices count from the end, masks mean "from the start / to the end",
/// negative strides walk backwards, `squeezeMasks` drop axes of size 1 (Core ML 4).
struct NNSlice {
    var begin: [Int], end: [Int], strides: [Int]
    var beginMasks: [Bool], endMasks: [Bool], squeezeMasks: [Bool]

    func check() throws {
        let n = begin.count
        guard end.count == n, strides.count == n, beginMasks.count == n, endMasks.count == n,
              squeezeMasks.isEmpty || squeezeMasks.count == n else {
            throw NNLayerError("beginIds, endIds, strides and the masks must have one entry per axis (\(n), \(end.count), \(strides.count), \(beginMasks.count), \(endMasks.count), \(squeezeMasks.count))")
        }
        guard strides.allSatisfy({ $0 != 0 }) else { throw NNLayerError("strides \(strides) must not be 0") }
    }

    /// Per axis: first index, step and count.
    func ranges(_ e: [Int]) throws -> [(start: Int, step: Int, count: Int)] {
        try check()
        guard e.count == begin.count else { throw NNLayerError("the slice names \(begin.count) axes; the input has rank \(e.count)") }
        return try e.indices.map { i in
            let d = e[i], st = strides[i]
            func clamp(_ v: Int, _ lo: Int, _ hi: Int) -> Int { Swift.min(hi, Swift.max(lo, v)) }
            func norm(_ v: Int) -> Int { v < 0 ? v + d : v }
            let b = beginMasks[i] ? (st > 0 ? 0 : d - 1) : (st > 0 ? clamp(norm(begin[i]), 0, d) : clamp(norm(begin[i]), -1, d - 1))
            let f = endMasks[i] ? (st > 0 ? d : -1) : (st > 0 ? clamp(norm(end[i]), 0, d) : clamp(norm(end[i]), -1, d - 1))
            let count = st > 0 ? (f - b + st - 1) / st : (b - f - st - 1) / (-st)
            guard count > 0 else { throw NNLayerError("axis \(i) (size \(d)) selects nothing from \(begin[i]) to \(end[i]) by \(st)") }
            if !squeezeMasks.isEmpty && squeezeMasks[i] && count != 1 { throw NNLayerError("axis \(i) is squeezed but keeps \(count) values") }
            return (b, st, count)
        }
    }

    func outputShape(_ e: [Int]) throws -> NNShape {
        let r = try ranges(e)
        let kept = r.indices.filter { squeezeMasks.isEmpty || !squeezeMasks[$0] }.map { r[$0].count }
        return NNShape(tensor: kept.isEmpty ? [1] : kept)
    }

    func copy(_ x: UnsafePointer<Float>, extents e: [Int], to y: UnsafeMutablePointer<Float>) {
        guard let r = try? ranges(e) else { return }
        let s = NNAxes.strides(e)
        let start = zip(r, s).reduce(0) { $0 + $1.0.start * $1.1 }
        NNGather.strided(x + start, extents: r.map(\.count), strides: zip(r, s).map { $0.step * $1 }, to: y)
    }
}

/// `SliceStaticLayerParams`: `NNSlice` with every bound in the parameters.
final class SliceStaticLayer: NNTensorLayer, @unchecked Sendable {
    let slice: NNSlice

    init(_ p: CoreML_Specification_SliceStaticLayerParams) throws {
        slice = NNSlice(begin: p.beginIds.map { Int($0) }, end: p.endIds.map { Int($0) }, strides: p.strides.map { Int($0) },
                        beginMasks: p.beginMasks, endMasks: p.endMasks, squeezeMasks: p.squeezeMasks)
        try slice.check()
    }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        guard inputs.count == 1 else { throw NNLayerError("takes one input, got \(inputs.count)") }
        return [try slice.outputShape(inputs[0].extents)]
    }

    var detail: String { "begin \(slice.begin), end \(slice.end), strides \(slice.strides)" }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        slice.copy(context.pointer(inputs[0]), extents: inputs[0].shape.extents, to: context.pointer(outputs[0]))
    }
}

/// `SliceDynamicLayerParams`: `NNSlice` whose begin indices come from input 1, and end
/// indices, strides, begin, end and squeeze masks from inputs 2–6 when present (else from the
/// parameters). The bounds are values, so this is a dynamic-shape layer.
final class SliceDynamicLayer: NNValueShapedLayer, @unchecked Sendable {
    let params: CoreML_Specification_SliceDynamicLayerParams
    let inputCount: Int

    init(_ p: CoreML_Specification_SliceDynamicLayerParams, inputCount: Int) throws {
        guard (2...7).contains(inputCount) else { throw NNLayerError("takes 2 to 7 inputs (data, begin ids, end ids, strides, begin, end and squeeze masks), got \(inputCount)") }
        params = p
        self.inputCount = inputCount
    }

    var shapeInputs: [Int] { Array(1..<inputCount) }

    private func slice(_ values: [[Float]?]) throws -> NNSlice {
        func ints(_ i: Int, _ fallback: [Int64]) -> [Int] { i < inputCount ? (values[i] ?? []).map { Int($0) } : fallback.map { Int($0) } }
        func bools(_ i: Int, _ fallback: [Bool]) -> [Bool] { i < inputCount ? (values[i] ?? []).map { $0 != 0 } : fallback }
        let begin = (values[1] ?? []).map { Int($0) }
        let p = params
        // A parameter list shorter than the rank (coremltools writes 5 entries) is cut to it.
        func fit<T>(_ a: [T]) -> [T] { a.count > begin.count ? Array(a.prefix(begin.count)) : a }
        return NNSlice(begin: begin, end: fit(ints(2, p.endIds)), strides: fit(ints(3, p.strides)),
                       beginMasks: fit(bools(4, p.beginMasks)), endMasks: fit(bools(5, p.endMasks)),
                       squeezeMasks: fit(bools(6, p.squeezeMasks)))
    }

    func outputShapes(_ inputs: [NNShape], values: [[Float]?]) throws -> [NNShape] {
        guard inputs.count == inputCount else { throw NNLayerError("takes \(inputCount) inputs, got \(inputs.count)") }
        return [try slice(values).outputShape(inputs[0].extents)]
    }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let values: [[Float]?] = inputs.indices.map { $0 == 0 ? nil : Array(UnsafeBufferPointer(start: context.pointer(inputs[$0]), count: inputs[$0].count)) }
        (try? slice(values))?.copy(context.pointer(inputs[0]), extents: inputs[0].shape.extents, to: context.pointer(outputs[0]))
    }
}

/// `SlidingWindowsLayerParams`: every window of `windowSize` entries, `step` apart, along
/// `axis`; the windows form that axis and the window's entries a new axis right after it.
final class SlidingWindowsLayer: NNTensorLayer, @unchecked Sendable {
    let axis: Int64
    let size: Int
    let step: Int

    init(_ p: CoreML_Specification_SlidingWindowsLayerParams) throws {
        axis = p.axis
        size = Int(p.windowSize)
        step = Int(p.step)
        guard size > 0, step > 0 else { throw NNLayerError("windowSize \(p.windowSize) and step \(p.step) must be positive") }
    }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        guard inputs.count == 1 else { throw NNLayerError("takes one input, got \(inputs.count)") }
        var e = inputs[0].extents
        let a = try NNAxes.axis(axis, rank: e.count)
        guard size <= e[a] else { throw NNLayerError("windowSize \(size) is larger than axis \(axis) (\(e[a]))") }
        e[a] = (e[a] - size) / step + 1
        e.insert(size, at: a + 1)
        return [NNShape(tensor: e)]
    }

    var detail: String { "\(size) wide, step \(step), along axis \(axis)" }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let e = inputs[0].shape.extents
        let a = (try? NNAxes.axis(axis, rank: e.count)) ?? 0
        var s = NNAxes.strides(e)
        s.insert(s[a], at: a + 1)
        s[a] *= step
        NNGather.strided(context.pointer(inputs[0]), extents: outputs[0].shape.extents, strides: s, to: context.pointer(outputs[0]))
    }
}

/// `ReverseSeqLayerParams`: for each entry `b` along `batchAxis`, the first `lengths[b]` entries
/// along `sequenceAxis` reversed (input 1 holds the lengths; longer ones are cut to the axis).
final class ReverseSeqLayer: NNTensorLayer, @unchecked Sendable {
    let batchAxis: Int64
    let sequenceAxis: Int64

    init(_ p: CoreML_Specification_ReverseSeqLayerParams) {
        batchAxis = p.batchAxis
        sequenceAxis = p.sequenceAxis
    }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        guard inputs.count == 2 else { throw NNLayerError("takes two inputs (the tensor and the lengths), got \(inputs.count)") }
        let e = inputs[0].extents
        let b = try NNAxes.axis(batchAxis, rank: e.count, what: "batchAxis"), t = try NNAxes.axis(sequenceAxis, rank: e.count, what: "sequenceAxis")
        guard b != t else { throw NNLayerError("batchAxis and sequenceAxis are the same axis") }
        guard inputs[1].count == e[b] else { throw NNLayerError("the lengths hold \(inputs[1].count) values for \(e[b]) batch entries") }
        return [inputs[0]]
    }

    var detail: String { "batch axis \(batchAxis), sequence axis \(sequenceAxis)" }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let e = inputs[0].shape.extents, s = NNAxes.strides(e)
        let x = context.pointer(inputs[0]), lengths = context.pointer(inputs[1]), y = context.pointer(outputs[0])
        guard let b = try? NNAxes.axis(batchAxis, rank: e.count), let t = try? NNAxes.axis(sequenceAxis, rank: e.count) else { return }
        for i in 0..<inputs[0].count {
            let bi = (i / s[b]) % e[b], ti = (i / s[t]) % e[t]
            let length = Swift.min(e[t], Swift.max(0, Int(lengths[bi])))
            y[i] = ti < length ? x[i + (length - 1 - 2 * ti) * s[t]] : x[i]
        }
    }
}

/// `TileLayerParams`: the input repeated `reps[i]` times along axis `i` (`reps` may be shorter
/// than the rank; missing leading entries are 1). With a second input (specification 5) `reps`
/// is empty and the repetitions are that input's values: `TileDynamicLayer`.
final class TileLayer: NNTensorLayer, @unchecked Sendable {
    let reps: [Int]

    /// The layer for a `tile` spec: repetitions from the parameters, or from input 1 when the
    /// layer has two inputs (the parameters are then ignored, as coremltools writes them empty).
    static func make(_ spec: CoreML_Specification_NeuralNetworkLayer) throws -> any NNLayer {
        spec.input.count == 2 ? TileDynamicLayer() : try TileLayer(spec.tile)
    }

    init(_ p: CoreML_Specification_TileLayerParams) throws {
        reps = p.reps.map { Int($0) }
        guard !reps.isEmpty, reps.allSatisfy({ $0 > 0 }) else { throw NNLayerError("reps \(p.reps) must hold positive counts") }
    }

    static func fullReps(_ reps: [Int], rank: Int) throws -> [Int] {
        guard reps.count <= rank else { throw NNLayerError("reps \(reps) has more entries than the input's rank \(rank)") }
        return [Int](repeating: 1, count: rank - reps.count) + reps
    }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        guard inputs.count == 1 else { throw NNLayerError("takes one input, got \(inputs.count)") }
        let e = inputs[0].extents
        return [NNShape(tensor: zip(e, try Self.fullReps(reps, rank: e.count)).map { $0 * $1 })]
    }

    var detail: String { "reps \(reps)" }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        guard let r = try? Self.fullReps(reps, rank: inputs[0].shape.rank) else { return }
        Self.tile(inputs[0], reps: r, to: outputs[0], context: context)
    }

    static func tile(_ x: NNTensor, reps r: [Int], to y: NNTensor, context: NNRunContext) {
        // Output axis i of size r·d is read as two axes [r, d]: stride 0 along the repeat.
        let e = x.shape.extents, s = NNAxes.strides(e)
        NNGather.strided(context.pointer(x), extents: e.indices.flatMap { [r[$0], e[$0]] },
                         strides: e.indices.flatMap { [0, s[$0]] }, to: context.pointer(y))
    }
}

/// `tile` with two inputs: input 0 repeated along each axis as many times as the values of
/// input 1 say (a rank-1 tensor of whole counts, at most one per axis; missing leading entries
/// are 1). The output shape depends on those values.
final class TileDynamicLayer: NNValueShapedLayer, @unchecked Sendable {
    var shapeInputs: [Int] { [1] }

    func outputShapes(_ inputs: [NNShape], values: [[Float]?]) throws -> [NNShape] {
        guard inputs.count == 2, let given = values[1] else { throw NNLayerError("takes two inputs (the tensor, the repetitions), got \(inputs.count)") }
        guard inputs[1].rank <= 1, given.allSatisfy({ $0 >= 1 && $0.rounded() == $0 && $0 < Float(1 << 31) }) else {
            throw NNLayerError("reps \(given) (input 1) must be a rank-1 list of positive whole counts")
        }
        let e = inputs[0].extents
        let r = try TileLayer.fullReps(given.map { Int($0) }, rank: e.count)
        return [NNShape(tensor: zip(e, r).map { $0 * $1 })]
    }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        // The repetitions the plan was made for, read back from the shapes.
        let e = inputs[0].shape.extents, out = outputs[0].shape.extents
        guard out.count == e.count, e.allSatisfy({ $0 > 0 }) else { return }
        TileLayer.tile(inputs[0], reps: zip(out, e).map { $0 / $1 }, to: outputs[0], context: context)
    }
}

/// `StackLayerParams`: inputs of one shape joined along a new axis (`axis` in `-(rank+1)…rank`).
final class StackLayer: NNTensorLayer, @unchecked Sendable {
    let axis: Int64

    init(_ p: CoreML_Specification_StackLayerParams) { axis = p.axis }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        guard let first = inputs.first?.extents else { throw NNLayerError("takes at least one input") }
        for (k, s) in inputs.enumerated() where s.extents != first {
            throw NNLayerError("input \(k) has shape \(s.extents); all inputs must have shape \(first)")
        }
        var out = first
        out.insert(inputs.count, at: try NNAxes.axis(axis, rank: first.count + 1))
        return [NNShape(tensor: out)]
    }

    var detail: String { "axis \(axis)" }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let e = inputs[0].shape.extents, y = context.pointer(outputs[0])
        let a = (try? NNAxes.axis(axis, rank: e.count + 1)) ?? 0
        let outer = e[..<a].reduce(1, *), inner = e[a...].reduce(1, *), n = inputs.count
        for (k, t) in inputs.enumerated() {
            NNCopy.rows(context.pointer(t), pitch: inner, to: y + k * inner, pitch: n * inner, rows: outer, width: inner)
        }
    }
}

/// `GatherLayerParams`: `np.take(params, indices, axis)`: the output is
/// `params.shape[:axis] + indices.shape + params.shape[axis+1:]`; negative indices count from
/// the end; an index out of range gives zeros.
final class GatherLayer: NNTensorLayer, @unchecked Sendable {
    let axis: Int64

    init(_ p: CoreML_Specification_GatherLayerParams) { axis = p.axis }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        guard inputs.count == 2 else { throw NNLayerError("takes two inputs (values and indices), got \(inputs.count)") }
        let e = inputs[0].extents, a = try NNAxes.axis(axis, rank: e.count)
        return [NNShape(tensor: Array(e[..<a]) + inputs[1].extents + Array(e[(a + 1)...]))]
    }

    var detail: String { "axis \(axis)" }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let e = inputs[0].shape.extents, x = context.pointer(inputs[0]), idx = context.pointer(inputs[1]), y = context.pointer(outputs[0])
        let a = (try? NNAxes.axis(axis, rank: e.count)) ?? 0
        let outer = e[..<a].reduce(1, *), inner = e[(a + 1)...].reduce(1, *), d = e[a], m = inputs[1].count
        for o in 0..<outer {
            for j in 0..<m {
                var i = Int(idx[j])
                if i < 0 { i += d }
                let dst = y + (o * m + j) * inner
                if i >= 0 && i < d { dst.update(from: x + (o * d + i) * inner, count: inner) } else { dst.update(repeating: 0, count: inner) }
            }
        }
    }
}

/// `GatherNDLayerParams`: `indices[…, k]` picks `params[i0, …, ik-1]` (a slice of the
/// remaining axes); the output is `indices.shape[:-1] + params.shape[k:]`.
final class GatherNDLayer: NNTensorLayer, @unchecked Sendable {
    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        guard inputs.count == 2 else { throw NNLayerError("takes two inputs (values and indices), got \(inputs.count)") }
        let e = inputs[0].extents, ie = inputs[1].extents
        guard let k = ie.last, k >= 1, k <= e.count else {
            throw NNLayerError("the indices' last axis (\(ie.last.map(String.init) ?? "none")) must be between 1 and the values' rank \(e.count)")
        }
        let out = Array(ie.dropLast()) + Array(e[k...])
        return [NNShape(tensor: out.isEmpty ? [1] : out)]
    }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let e = inputs[0].shape.extents, x = context.pointer(inputs[0]), idx = context.pointer(inputs[1]), y = context.pointer(outputs[0])
        let k = inputs[1].shape.extents.last!, s = NNAxes.strides(e)
        let inner = e[k...].reduce(1, *), m = inputs[1].count / k
        for j in 0..<m {
            var offset = 0, valid = true
            for q in 0..<k {
                var i = Int(idx[j * k + q])
                if i < 0 { i += e[q] }
                if i < 0 || i >= e[q] { valid = false; break }
                offset += i * s[q]
            }
            let dst = y + j * inner
            if valid { dst.update(from: x + offset, count: inner) } else { dst.update(repeating: 0, count: inner) }
        }
    }
}

/// `SliceBySizeLayerParams`: `size` entries along `axis` from the start index held in input 1
/// (negative counts from the end; clamped so the slice stays inside the axis).
final class SliceBySizeLayer: NNTensorLayer, @unchecked Sendable {
    let size: Int
    let axis: Int64

    init(_ p: CoreML_Specification_SliceBySizeLayerParams) throws {
        size = Int(p.size)
        axis = p.axis
        guard size > 0 else { throw NNLayerError("size must be positive, not \(p.size)") }
    }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        guard inputs.count == 2 else { throw NNLayerError("takes two inputs (the tensor and the start index), got \(inputs.count)") }
        var e = inputs[0].extents
        let a = try NNAxes.axis(axis, rank: e.count)
        guard size <= e[a] else { throw NNLayerError("size \(size) is larger than axis \(axis) (\(e[a]))") }
        e[a] = size
        return [NNShape(tensor: e)]
    }

    var detail: String { "\(size) along axis \(axis)" }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let e = inputs[0].shape.extents, x = context.pointer(inputs[0])
        let a = (try? NNAxes.axis(axis, rank: e.count)) ?? 0
        var begin = Int(context.pointer(inputs[1])[0])
        if begin < 0 { begin += e[a] }
        begin = Swift.min(Swift.max(begin, 0), e[a] - size)
        let outer = e[..<a].reduce(1, *), inner = e[(a + 1)...].reduce(1, *)
        NNCopy.rows(x + begin * inner, pitch: e[a] * inner, to: context.pointer(outputs[0]), pitch: size * inner, rows: outer, width: size * inner)
    }
}
