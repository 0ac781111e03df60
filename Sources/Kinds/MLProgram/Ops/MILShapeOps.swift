/// Shape and layout operations every converted program uses (`tensor_transformation.py`,
/// `tensor_operation.py`): reshape, transpose, concat, split, stack, squeeze, expand_dims,
/// slicing, cast, shape, identity, flatten2d.
enum MILShapeOps {
    nonisolated(unsafe) static let kernels: [String: MILKernel] = [
        "identity": { call in [try call.value("x")!] },
        "cast": { call in
            let x = try call.tensor("x")
            let name = try call.string("dtype")
            guard let t = MILDataType(castName: name) else { throw call.error("unknown dtype \(name)") }
            return [.tensor(x.converted(to: t))]
        },
        "shape": { call in
            let x = try call.tensor("x")
            return [.tensor(MILTensor(ints: x.shape, shape: [x.rank], dataType: .int32))]
        },
        "reshape": { call in
            var x = try call.tensor("x")
            let spec = try call.ints("shape")
            var shape = spec.enumerated().map { i, d in d == 0 && i < x.rank ? x.shape[i] : d }
            if let unknown = shape.firstIndex(of: -1) {
                let known = shape.enumerated().filter { $0.offset != unknown }.reduce(1) { $0 * $1.element }
                guard known > 0, x.count % known == 0 else { throw call.error("cannot reshape \(x.shape) to \(spec)") }
                shape[unknown] = x.count / known
            }
            guard shape.reduce(1, *) == x.count, shape.allSatisfy({ $0 >= 0 }) else {
                throw call.error("cannot reshape \(x.shape) (\(x.count) elements) to \(spec)")
            }
            x.shape = shape
            return [.tensor(x)]
        },
        "flatten2d": { call in
            var x = try call.tensor("x")
            let axis = try call.int("axis", default: 1)
            let a = axis < 0 ? axis + x.rank : axis
            guard a >= 0 && a <= x.rank else { throw call.error("axis \(axis) is out of range for rank \(x.rank)") }
            x.shape = [x.shape[..<a].reduce(1, *), x.shape[a...].reduce(1, *)]
            return [.tensor(x)]
        },
        "expand_dims": { call in
            var x = try call.tensor("x")
            let axes = try call.ints("axes")
            let rank = x.rank + axes.count
            let positive = try axes.map { try MILShape.axis($0, rank: rank, op: call.name) }.sorted()
            var shape = x.shape
            for a in positive { shape.insert(1, at: a) }
            x.shape = shape
            return [.tensor(x)]
        },
        "squeeze": { call in
            var x = try call.tensor("x")
            if let axes = try call.optionalTensor("axes") {
                let drop = Set(try axes.ints.map { try MILShape.axis($0, rank: x.rank, op: call.name) })
                for a in drop where x.shape[a] != 1 { throw call.error("axis \(a) of \(x.shape) is not 1") }
                x.shape = x.shape.enumerated().filter { !drop.contains($0.offset) }.map(\.element)
            } else {
                x.shape = x.shape.filter { $0 != 1 }
            }
            return [.tensor(x)]
        },
        "transpose": { call in
            let x = try call.tensor("x")
            let perm = try call.ints("perm").map { try MILShape.axis($0, rank: x.rank, op: call.name) }
            guard perm.count == x.rank, Set(perm).count == perm.count else { throw call.error("perm \(perm) is not a permutation of rank \(x.rank)") }
            return [.tensor(transpose(x, perm))]
        },
        "concat": { call in
            let values = try call.tensors("values")
            guard let first = values.first else { throw call.error("no values to concatenate") }
            let axis = try MILShape.axis(try call.int("axis"), rank: first.rank, op: call.name)
            if try call.bool("interleave", default: false) {
                return [.tensor(try interleave(values, axis: axis, call: call))]
            }
            return [.tensor(try concat(values, axis: axis, call: call))]
        },
        "stack": { call in
            let values = try call.tensors("values")
            guard let first = values.first else { throw call.error("no values to stack") }
            let axis = try MILShape.axis(try call.int("axis"), rank: first.rank + 1, op: call.name)
            let expanded = values.map { v -> MILTensor in var t = v; t.shape.insert(1, at: axis); return t }
            return [.tensor(try concat(expanded, axis: axis, call: call))]
        },
        "split": { call in
            let x = try call.tensor("x")
            let axis = try MILShape.axis(try call.int("axis"), rank: x.rank, op: call.name)
            let dim = x.shape[axis]
            var sizes: [Int]
            if let given = try call.optionalTensor("split_sizes") {
                sizes = given.ints
            } else {
                let n = try call.int("num_splits")
                guard n > 0 else { throw call.error("num_splits must be positive") }
                let each = (dim + n - 1) / n
                sizes = (0..<n).map { Swift.min(each, Swift.max(dim - $0 * each, 0)) }
            }
            guard sizes.reduce(0, +) == dim else { throw call.error("split sizes \(sizes) do not add up to \(dim)") }
            var start = 0
            return sizes.map { size in
                var ranges = x.shape.map { Array(0..<$0) }
                ranges[axis] = Array(start..<(start + size))
                start += size
                return .tensor(select(x, ranges))
            }
        },
        "slice_by_size": { call in
            let x = try call.tensor("x")
            let begin = try call.ints("begin"), size = try call.ints("size")
            guard begin.count == x.rank, size.count == x.rank else { throw call.error("begin and size need \(x.rank) values") }
            var ranges: [[Int]] = []
            for d in 0..<x.rank {
                let b = begin[d] < 0 ? begin[d] + x.shape[d] : begin[d]
                let n = size[d] == -1 ? x.shape[d] - b : size[d]
                guard b >= 0, n >= 0, b + n <= x.shape[d] else { throw call.error("slice [\(b), \(b + n)) leaves axis \(d) of \(x.shape)") }
                ranges.append(Array(b..<(b + n)))
            }
            return [.tensor(select(x, ranges))]
        },
        "slice_by_index": { call in
            let x = try call.tensor("x")
            let r = x.rank
            let none = [Bool](repeating: false, count: r)
            let (ranges, kept) = try MILTensorOps.sliceRanges(
                x.shape, begin: try call.ints("begin"), end: try call.ints("end"),
                stride: try call.ints("stride", default: [Int](repeating: 1, count: r)),
                beginMask: try call.optionalTensor("begin_mask")?.bools ?? none,
                endMask: try call.optionalTensor("end_mask")?.bools ?? none,
                squeezeMask: try call.optionalTensor("squeeze_mask")?.bools ?? none, call: call)
            var out = select(x, ranges)
            out.shape = zip(out.shape, kept).filter(\.1).map(\.0)
            return [.tensor(out)]
        },
    ]

    /// The elements at the given indices of each axis (an outer product of index lists).
    static func select(_ x: MILTensor, _ ranges: [[Int]]) -> MILTensor {
        let shape = ranges.map(\.count)
        let total = shape.reduce(1, *)
        let strides = MILShape.strides(x.shape)
        var offsets = [Int](repeating: 0, count: total)
        if total > 0 {
            var coord = [Int](repeating: 0, count: shape.count)
            for k in 0..<total {
                var o = 0
                for d in 0..<shape.count { o += ranges[d][coord[d]] * strides[d] }
                offsets[k] = o
                var d = shape.count - 1
                while d >= 0 {
                    coord[d] += 1
                    if coord[d] < shape[d] { break }
                    coord[d] = 0; d -= 1
                }
            }
        }
        return gather(x, offsets: offsets, shape: shape)
    }

    /// A tensor of x's elements at flat `offsets`, with `shape`.
    static func gather(_ x: MILTensor, offsets: [Int], shape: [Int]) -> MILTensor {
        switch x.storage {
        case .float(let v): return MILTensor(x.dataType, shape: shape, storage: .float(offsets.map { v[$0] }))
        case .int(let v): return MILTensor(x.dataType, shape: shape, storage: .int(offsets.map { v[$0] }))
        case .bool(let v): return MILTensor(x.dataType, shape: shape, storage: .bool(offsets.map { v[$0] }))
        case .string(let v): return MILTensor(x.dataType, shape: shape, storage: .string(offsets.map { v[$0] }))
        }
    }

    static func transpose(_ x: MILTensor, _ perm: [Int]) -> MILTensor {
        let shape = perm.map { x.shape[$0] }
        let inStrides = MILShape.strides(x.shape)
        let total = shape.reduce(1, *)
        var offsets = [Int](repeating: 0, count: total)
        var coord = [Int](repeating: 0, count: shape.count)
        var o = 0
        let eff = perm.map { inStrides[$0] }
        for k in 0..<total {
            offsets[k] = o
            var d = shape.count - 1
            while d >= 0 {
                coord[d] += 1; o += eff[d]
                if coord[d] < shape[d] { break }
                o -= eff[d] * coord[d]; coord[d] = 0; d -= 1
            }
        }
        return gather(x, offsets: offsets, shape: shape)
    }

    static func concat(_ values: [MILTensor], axis: Int, call: MILOpCall) throws -> MILTensor {
        let first = values[0]
        for v in values where v.rank != first.rank || (0..<v.rank).contains(where: { $0 != axis && v.shape[$0] != first.shape[$0] }) {
            throw call.error("cannot concatenate \(v.shape) with \(first.shape) on axis \(axis)")
        }
        var shape = first.shape
        shape[axis] = values.reduce(0) { $0 + $1.shape[axis] }
        let outer = first.shape[..<axis].reduce(1, *)
        let type = values.contains { $0.dataType.isFloat } ? (values.first { $0.dataType.isFloat }!.dataType) : first.dataType
        func join<T>(_ arrays: [[T]]) -> [T] {
            var out: [T] = []
            out.reserveCapacity(shape.reduce(1, *))
            for o in 0..<outer {
                for (v, a) in zip(values, arrays) {
                    let chunk = v.shape[axis...].reduce(1, *)
                    out.append(contentsOf: a[(o * chunk)..<((o + 1) * chunk)])
                }
            }
            return out
        }
        if type.isFloat { return MILTensor(type, shape: shape, storage: .float(join(values.map(\.floats)))) }
        switch first.storage {
        case .bool: return MILTensor(.bool, shape: shape, storage: .bool(join(values.map(\.bools))))
        case .string: return MILTensor(.string, shape: shape, storage: .string(join(values.map(\.strings))))
        default: return MILTensor(type, shape: shape, storage: .int(join(values.map(\.ints))))
        }
    }

    /// Concatenation that takes one slice of each input in turn along `axis`.
    static func interleave(_ values: [MILTensor], axis: Int, call: MILOpCall) throws -> MILTensor {
        let first = values[0]
        for v in values where v.shape != first.shape { throw call.error("interleaved values must share a shape") }
        var stacked = try concat(values.map { v -> MILTensor in var t = v; t.shape.insert(1, at: axis + 1); return t }, axis: axis + 1, call: call)
        var shape = first.shape
        shape[axis] *= values.count
        stacked.shape = shape
        return stacked
    }
}
