/// Indexed reads and writes (`scatter_gather.py`): gather, gather_along_axis, gather_nd and
/// their scatter counterparts.
///
/// Each scatter writes exactly the elements the matching gather would read, so both are built
/// on one offset computation: for every element of the gather's result (the scatter's
/// `updates`), the flat offset of the element of `x` (`data`) it names.
///
/// Negative indices count from the end of their axis, as iOS15 and iOS16 define. iOS17 calls
/// them out of bounds and undefined unless `validate_indices` is set, in which case they are
/// rejected; an index still out of range after wrapping is always an error rather than a read
/// of whatever lies there.
enum MILGatherScatterOps {
    nonisolated(unsafe) static let kernels: [String: MILKernel] = [
        "gather": { call in
            let x = try call.tensor("x")
            let (offsets, shape) = try gatherOffsets(call, x: x, indices: try call.tensor("indices"))
            return [.tensor(MILShapeOps.gather(x, offsets: offsets, shape: shape))]
        },
        "gather_along_axis": { call in
            let x = try call.tensor("x"), indices = try call.tensor("indices")
            let offsets = try alongAxisOffsets(call, x: x, indices: indices)
            return [.tensor(MILShapeOps.gather(x, offsets: offsets, shape: indices.shape))]
        },
        "gather_nd": { call in
            let x = try call.tensor("x")
            let (offsets, shape) = try ndOffsets(call, x: x, indices: try call.tensor("indices"))
            return [.tensor(MILShapeOps.gather(x, offsets: offsets, shape: shape))]
        },
        "scatter": { call in
            let data = try call.tensor("data"), updates = try call.tensor("updates")
            let (offsets, shape) = try gatherOffsets(call, x: data, indices: try call.tensor("indices"))
            guard updates.shape == shape else { throw call.error("updates have shape \(updates.shape), expected \(shape)") }
            return [.tensor(try scatter(data, offsets: offsets, updates: updates, call: call))]
        },
        "scatter_along_axis": { call in
            let data = try call.tensor("data"), indices = try call.tensor("indices"), updates = try call.tensor("updates")
            guard updates.shape == indices.shape else { throw call.error("updates have shape \(updates.shape), indices \(indices.shape)") }
            let offsets = try alongAxisOffsets(call, x: data, indices: indices)
            return [.tensor(try scatter(data, offsets: offsets, updates: updates, call: call))]
        },
        "scatter_nd": { call in
            let data = try call.tensor("data"), updates = try call.tensor("updates")
            let (offsets, shape) = try ndOffsets(call, x: data, indices: try call.tensor("indices"))
            guard updates.shape == shape else { throw call.error("updates have shape \(updates.shape), expected \(shape)") }
            return [.tensor(try scatter(data, offsets: offsets, updates: updates, call: call))]
        },
    ]

    /// An index along an axis of `size`, wrapped when negative unless `validate_indices` is set.
    static func position(_ i: Int, size: Int, call: MILOpCall, validate: Bool) throws -> Int {
        let p = i < 0 && !validate ? i + size : i
        guard p >= 0 && p < size else { throw call.error("index \(i) is out of range for an axis of \(size)") }
        return p
    }

    /// gather / scatter: result `x.shape[..<axis] + indices.shape[batch_dims...] + x.shape[(axis+1)...]`.
    static func gatherOffsets(_ call: MILOpCall, x: MILTensor, indices: MILTensor) throws -> ([Int], [Int]) {
        let axis = try MILShape.axis(try call.int("axis", default: 0), rank: x.rank, op: call.name)
        let batch = try call.int("batch_dims", default: 0)
        let validate = try call.bool("validate_indices", default: false)
        guard batch >= 0, batch <= axis, batch <= indices.rank else {
            throw call.error("batch_dims \(batch) must be at most the axis \(axis) and the indices' rank \(indices.rank)")
        }
        guard Array(x.shape[..<batch]) == Array(indices.shape[..<batch]) else {
            throw call.error("the first \(batch) dimensions of x \(x.shape) and indices \(indices.shape) differ")
        }
        let m = indices.rank - batch
        let shape = Array(x.shape[..<axis]) + Array(indices.shape[batch...]) + Array(x.shape[(axis + 1)...])
        let xs = MILShape.strides(x.shape), ns = MILShape.strides(indices.shape)
        let idx = indices.ints, size = x.shape[axis]
        let offsets = try MILTensorOps.coordinateOffsets(shape) { c in
            var o = 0, n = 0
            for d in 0..<axis { o += c[d] * xs[d] }
            for d in 0..<batch { n += c[d] * ns[d] }
            for j in 0..<m { n += c[axis + j] * ns[batch + j] }
            for j in (axis + 1)..<Swift.max(x.rank, axis + 1) { o += c[j - 1 + m] * xs[j] }
            return o + (try position(idx[n], size: size, call: call, validate: validate)) * xs[axis]
        }
        return (offsets, shape)
    }

    /// gather_along_axis / scatter_along_axis: one index per result element, replacing its
    /// coordinate on `axis`.
    static func alongAxisOffsets(_ call: MILOpCall, x: MILTensor, indices: MILTensor) throws -> [Int] {
        let axis = try MILShape.axis(try call.int("axis", default: 0), rank: x.rank, op: call.name)
        let validate = try call.bool("validate_indices", default: false)
        guard indices.rank == x.rank, (0..<x.rank).allSatisfy({ $0 == axis || indices.shape[$0] == x.shape[$0] }) else {
            throw call.error("indices \(indices.shape) must match \(x.shape) on every axis but \(axis)")
        }
        let xs = MILShape.strides(x.shape), idx = indices.ints
        var k = 0
        return try MILTensorOps.coordinateOffsets(indices.shape) { c in
            defer { k += 1 }
            var o = 0
            for d in 0..<c.count where d != axis { o += c[d] * xs[d] }
            return o + (try position(idx[k], size: x.shape[axis], call: call, validate: validate)) * xs[axis]
        }
    }

    /// gather_nd / scatter_nd: the last axis of `indices` holds a coordinate prefix of `x`
    /// (after `batch_dims` axes shared by both); result `indices.shape[..<-1] + x.shape[(batch_dims+depth)...]`.
    static func ndOffsets(_ call: MILOpCall, x: MILTensor, indices: MILTensor) throws -> ([Int], [Int]) {
        let batch = try call.int("batch_dims", default: 0)
        let validate = try call.bool("validate_indices", default: false)
        guard indices.rank >= 1 else { throw call.error("indices must have rank 1 or more") }
        let depth = indices.shape[indices.rank - 1]
        guard batch >= 0, batch < indices.rank, batch + depth <= x.rank,
              Array(x.shape[..<batch]) == Array(indices.shape[..<batch]) else {
            throw call.error("indices \(indices.shape) with batch_dims \(batch) do not index x \(x.shape)")
        }
        let lead = indices.rank - 1
        let tail = Array(x.shape[(batch + depth)...])
        let shape = Array(indices.shape[..<lead]) + tail
        let xs = MILShape.strides(x.shape), idx = indices.ints
        let offsets = try MILTensorOps.coordinateOffsets(shape) { c in
            var o = 0, row = 0
            for d in 0..<lead { row = row * indices.shape[d] + c[d] }
            for d in 0..<batch { o += c[d] * xs[d] }
            for j in 0..<depth {
                o += (try position(idx[row * depth + j], size: x.shape[batch + j], call: call, validate: validate)) * xs[batch + j]
            }
            for j in 0..<tail.count { o += c[lead + j] * xs[batch + depth + j] }
            return o
        }
        return (offsets, shape)
    }

    /// data with `updates[k]` combined into element `offsets[k]`, in order (so with `update`,
    /// the last of repeated indices wins).
    static func scatter(_ data: MILTensor, offsets: [Int], updates: MILTensor, call: MILOpCall) throws -> MILTensor {
        let mode = try call.string("mode", default: "add")
        if case .int(var out) = data.storage, case .int(let u) = updates.storage {
            let f: (Int, Int) throws -> Int
            switch mode {
            case "update": f = { _, b in b }
            case "add": f = { $0 &+ $1 }
            case "sub": f = { $0 &- $1 }
            case "mul": f = { $0 &* $1 }
            case "div": f = { a, b in
                guard b != 0 else { throw call.error("integer division by zero") }
                return a / b
            }
            case "max": f = { Swift.max($0, $1) }
            case "min": f = { Swift.min($0, $1) }
            default: throw call.error("unknown mode '\(mode)' (update, add, sub, mul, div, max, min)")
            }
            for (k, o) in offsets.enumerated() { out[o] = try f(out[o], u[k]) }
            return MILTensor(ints: out, shape: data.shape, dataType: data.dataType)
        }
        let f: (Float, Float) -> Float
        switch mode {
        case "update": f = { _, b in b }
        case "add": f = { $0 + $1 }
        case "sub": f = { $0 - $1 }
        case "mul": f = { $0 * $1 }
        case "div": f = { $0 / $1 }
        case "max": f = { Swift.max($0, $1) }
        case "min": f = { Swift.min($0, $1) }
        default: throw call.error("unknown mode '\(mode)' (update, add, sub, mul, div, max, min)")
        }
        var out = data.floats
        let u = updates.floats
        for (k, o) in offsets.enumerated() { out[o] = f(out[o], u[k]) }
        return MILTensor(floats: out, shape: data.shape, dataType: data.dataType.isFloat ? data.dataType : .fp32)
    }
}
