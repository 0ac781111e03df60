/// Tensor construction and rearrangement (`tensor_operation.py`, `tensor_transformation.py`):
/// tile, pad, reverse, reverse_sequence, fill, fill_like, reshape_like, range_1d, band_part,
/// one_hot, non_zero, cumsum and the iOS18 slice_update.
///
/// Most of these pick, for every output element, one element of the input (or of a constant
/// such as the pad value), so they compute flat offsets and reuse `MILShapeOps.gather`, which
/// keeps every element type without a per-type copy of the op.
enum MILTensorOps {
    nonisolated(unsafe) static let kernels: [String: MILKernel] = [
        "tile": { call in
            let x = try call.tensor("x")
            let reps = try call.ints("reps")
            guard reps.count == x.rank else { throw call.error("reps \(reps) must have one value per axis of \(x.shape)") }
            guard reps.allSatisfy({ $0 > 0 }) else { throw call.error("reps \(reps) must be positive") }
            let shape = zip(x.shape, reps).map { $0 * $1 }
            let strides = MILShape.strides(x.shape)
            let offsets = coordinateOffsets(shape) { c in
                var o = 0
                for d in 0..<c.count { o += (c[d] % x.shape[d]) * strides[d] }
                return o
            }
            return [.tensor(MILShapeOps.gather(x, offsets: offsets, shape: shape))]
        },
        "pad": { call in
            let x = try call.tensor("x")
            let pad = try call.ints("pad")
            let mode = try call.string("mode", default: "constant")
            guard pad.count % 2 == 0, pad.count / 2 <= x.rank else {
                throw call.error("pad has \(pad.count) values; it needs two per padded axis, at most \(2 * x.rank)")
            }
            guard pad.allSatisfy({ $0 >= 0 }) else { throw call.error("pad \(pad) must not be negative") }
            var before = [Int](repeating: 0, count: x.rank), after = before
            let first = x.rank - pad.count / 2
            for i in 0..<(pad.count / 2) { before[first + i] = pad[2 * i]; after[first + i] = pad[2 * i + 1] }
            for d in 0..<x.rank {
                let n = x.shape[d]
                switch mode {
                case "constant": break
                case "reflect":
                    guard (before[d] == 0 && after[d] == 0) || (before[d] < n && after[d] < n) else {
                        throw call.error("reflect padding of axis \(d) needs at most \(n - 1) values a side, got \(before[d]) and \(after[d])")
                    }
                case "replicate":
                    guard (before[d] == 0 && after[d] == 0) || n > 0 else { throw call.error("cannot replicate an empty axis \(d)") }
                default: throw call.error("unknown pad mode '\(mode)' (constant, reflect, replicate)")
                }
            }
            let shape = (0..<x.rank).map { x.shape[$0] + before[$0] + after[$0] }
            let strides = MILShape.strides(x.shape)
            // The constant sits one past x's last element, so padded positions point at it.
            let source = mode == "constant" ? appending(x, try call.optionalTensor("constant_val") ?? .scalar(Float(0))) : x
            let offsets = coordinateOffsets(shape) { c in
                var o = 0
                for d in 0..<c.count {
                    var i = c[d] - before[d]
                    let n = x.shape[d]
                    if i < 0 || i >= n {
                        switch mode {
                        case "reflect": i = i < 0 ? -i : 2 * (n - 1) - i
                        case "replicate": i = i < 0 ? 0 : n - 1
                        default: return x.count
                        }
                    }
                    o += i * strides[d]
                }
                return o
            }
            return [.tensor(MILShapeOps.gather(source, offsets: offsets, shape: shape))]
        },
        "reverse": { call in
            let x = try call.tensor("x")
            let axes = try call.optionalTensor("axes").map { try $0.ints.map { try MILShape.axis($0, rank: x.rank, op: call.name) } }
                ?? Array(0..<x.rank)
            var flip = [Bool](repeating: false, count: x.rank)
            for a in axes { flip[a].toggle() }
            let strides = MILShape.strides(x.shape)
            let offsets = coordinateOffsets(x.shape) { c in
                var o = 0
                for d in 0..<c.count { o += (flip[d] ? x.shape[d] - 1 - c[d] : c[d]) * strides[d] }
                return o
            }
            return [.tensor(MILShapeOps.gather(x, offsets: offsets, shape: x.shape))]
        },
        "reverse_sequence": { call in
            let x = try call.tensor("x")
            let lengths = try call.ints("lengths")
            let seq = try MILShape.axis(try call.int("seq_axis", default: 0), rank: x.rank, op: call.name)
            let batch = try MILShape.axis(try call.int("batch_axis", default: 0), rank: x.rank, op: call.name)
            guard seq != batch else { throw call.error("seq_axis and batch_axis are both \(seq)") }
            guard lengths.count == x.shape[batch] else {
                throw call.error("\(lengths.count) lengths for a batch axis of \(x.shape[batch])")
            }
            if let bad = lengths.first(where: { $0 < 0 || $0 > x.shape[seq] }) {
                throw call.error("length \(bad) is outside [0, \(x.shape[seq])]")
            }
            let strides = MILShape.strides(x.shape)
            let offsets = coordinateOffsets(x.shape) { c in
                var o = 0
                let n = lengths[c[batch]]
                for d in 0..<c.count { o += (d == seq && c[d] < n ? n - 1 - c[d] : c[d]) * strides[d] }
                return o
            }
            return [.tensor(MILShapeOps.gather(x, offsets: offsets, shape: x.shape))]
        },
        "fill": { call in
            let shape = try call.ints("shape")
            guard shape.allSatisfy({ $0 >= 0 }) else { throw call.error("shape \(shape) has a negative dimension") }
            return [.tensor(filled(shape, with: try call.optionalTensor("value") ?? .scalar(Float(0))))]
        },
        "fill_like": { call in
            let ref = try call.tensor("ref_tensor")
            return [.tensor(filled(ref.shape, with: try call.optionalTensor("value") ?? .scalar(Float(0))))]
        },
        "reshape_like": { call in
            var x = try call.tensor("x")
            let refs = try call.tensors("ref_tensors")
            let begins = try call.tensors("begins"), ends = try call.tensors("ends"), masks = try call.tensors("end_masks")
            guard begins.count == refs.count, ends.count == refs.count, masks.count == refs.count else {
                throw call.error("ref_tensors, begins, ends and end_masks must have one entry each, got \(refs.count), \(begins.count), \(ends.count), \(masks.count)")
            }
            var shape: [Int] = []
            for (i, ref) in refs.enumerated() {
                let r = ref.rank
                // Python slice bounds: negative counts from the end, both clamp to the rank.
                func bound(_ v: Int) -> Int { v < 0 ? Swift.max(v + r, 0) : Swift.min(v, r) }
                let b = bound(begins[i].ints.first ?? 0)
                let e = masks[i].bools.first == true ? r : bound(ends[i].ints.first ?? r)
                if b < e { shape += ref.shape[b..<e] }
            }
            guard MILShape.count(shape) == x.count else { throw call.error("cannot reshape \(x.shape) (\(x.count) elements) to \(shape)") }
            x.shape = shape
            return [.tensor(x)]
        },
        "range_1d": { call in
            let start = try call.tensor("start"), end = try call.tensor("end"), step = try call.tensor("step")
            if case .int = start.storage, case .int = end.storage, case .int = step.storage {
                let (s, e, d) = (start.ints[0], end.ints[0], step.ints[0])
                guard d != 0 else { throw call.error("step is 0") }
                let n = d > 0 ? Swift.max(0, (e - s + d - 1) / d) : Swift.max(0, (s - e - d - 1) / -d)
                return [.tensor(MILTensor(ints: (0..<n).map { s + $0 * d }, shape: [n], dataType: start.dataType))]
            }
            let (s, e, d) = (start.floats[0], end.floats[0], step.floats[0])
            guard d != 0, d.isFinite, s.isFinite, e.isFinite else { throw call.error("range [\(s), \(e)) with step \(d) is not finite") }
            let steps = ((Double(e) - Double(s)) / Double(d)).rounded(.up)
            let n = Int(Swift.max(0, steps))
            let type = start.dataType.isFloat ? start.dataType : MILDataType.fp32
            return [.tensor(MILTensor(floats: (0..<n).map { Float(Double(s) + Double($0) * Double(d)) }, shape: [n], dataType: type))]
        },
        "band_part": { call in
            let x = try call.tensor("x")
            guard x.rank >= 2 else { throw call.error("x must have rank 2 or more, has \(x.shape)") }
            let lower = try call.int("lower", default: -1), upper = try call.int("upper", default: -1)
            let rows = x.shape[x.rank - 2], cols = x.shape[x.rank - 1]
            let zero = appending(x, zeroScalar(like: x))
            var offsets = Array(0..<x.count)
            for i in offsets.indices {
                let m = (i / cols) % rows, n = i % cols
                let inBand = (lower < 0 || m - n <= lower) && (upper < 0 || n - m <= upper)
                if !inBand { offsets[i] = x.count }
            }
            return [.tensor(MILShapeOps.gather(zero, offsets: offsets, shape: x.shape))]
        },
        "one_hot": { call in
            let indices = try call.tensor("indices")
            let depth = try call.int("one_hot_vector_size")
            guard depth >= 0 else { throw call.error("one_hot_vector_size \(depth) is negative") }
            let axisGiven = try call.int("axis", default: -1)
            let rank = indices.rank + 1
            let axis = try MILShape.axis(axisGiven, rank: rank, op: call.name)
            let on = try call.optionalTensor("on_value") ?? .scalar(1, .int32)
            let off = try call.optionalTensor("off_value") ?? .scalar(0, .int32)
            var shape = indices.shape
            shape.insert(depth, at: axis)
            // Offset 0 is the off value, 1 the on value; an index outside [0, depth) sets no slot.
            let values = appending(off, on.converted(to: off.dataType))
            let idx = indices.ints
            let offsets = coordinateOffsets(shape) { c in
                var flat = 0
                for d in 0..<c.count where d != axis { flat = flat * shape[d] + c[d] }
                return idx[flat] == c[axis] ? 1 : 0
            }
            var out = MILShapeOps.gather(values, offsets: offsets, shape: shape)
            out.dataType = on.dataType
            return [.tensor(out)]
        },
        "non_zero": { call in
            let x = try call.tensor("x")
            let flags = x.bools
            var rows: [Int] = []
            var count = 0
            let strides = MILShape.strides(x.shape)
            for i in flags.indices where flags[i] {
                for d in 0..<x.rank { rows.append((i / strides[d]) % x.shape[d]) }
                count += 1
            }
            return [.tensor(MILTensor(ints: rows, shape: [count, x.rank], dataType: .int32))]
        },
        "cumsum": { call in
            let x = try call.tensor("x")
            let axis = try MILShape.axis(try call.int("axis", default: 0), rank: x.rank, op: call.name)
            let exclusive = try call.bool("exclusive", default: false), reverse = try call.bool("reverse", default: false)
            let n = x.shape.isEmpty ? 1 : x.shape[axis]
            let inner = x.shape.isEmpty ? 1 : x.shape[(axis + 1)...].reduce(1, *)
            let outer = n * inner == 0 ? 0 : x.count / (n * inner)
            func scan<T: AdditiveArithmetic>(_ v: [T]) -> [T] {
                var out = v
                for o in 0..<outer {
                    for i in 0..<inner {
                        var acc = T.zero
                        for step in 0..<n {
                            let j = reverse ? n - 1 - step : step
                            let k = (o * n + j) * inner + i
                            if exclusive { out[k] = acc; acc += v[k] } else { acc += v[k]; out[k] = acc }
                        }
                    }
                }
                return out
            }
            if case .int(let v) = x.storage { return [.tensor(MILTensor(ints: scan(v), shape: x.shape, dataType: x.dataType))] }
            return [.tensor(MILTensor(floats: scan(x.floats), shape: x.shape, dataType: x.dataType.isFloat ? x.dataType : .fp32))]
        },
        "slice_update": { call in
            let x = try call.tensor("x"), update = try call.tensor("update")
            let r = x.rank
            let ranges = try sliceRanges(
                x.shape, begin: try call.ints("begin"), end: try call.ints("end"),
                stride: try call.ints("stride", default: [Int](repeating: 1, count: r)),
                beginMask: try call.optionalTensor("begin_mask")?.bools ?? [Bool](repeating: false, count: r),
                endMask: try call.optionalTensor("end_mask")?.bools ?? [Bool](repeating: false, count: r),
                squeezeMask: try call.optionalTensor("squeeze_mask")?.bools ?? [Bool](repeating: false, count: r), call: call)
            let sliceShape = ranges.ranges.map(\.count)
            let kept = zip(sliceShape, ranges.kept).filter(\.1).map(\.0)
            guard update.shape == kept else {
                throw call.error("update has shape \(update.shape), the slice has \(kept)")
            }
            let strides = MILShape.strides(x.shape)
            let targets = coordinateOffsets(sliceShape) { c in
                var o = 0
                for d in 0..<c.count { o += ranges.ranges[d][c[d]] * strides[d] }
                return o
            }
            // x with each slice position pointing at the update element written there.
            var offsets = Array(0..<x.count)
            for (k, t) in targets.enumerated() { offsets[t] = x.count + k }
            let joined = try MILShapeOps.concat([flat(x), flat(update.converted(to: x.dataType))], axis: 0, call: call)
            return [.tensor(MILShapeOps.gather(joined, offsets: offsets, shape: x.shape))]
        },
    ]

    /// For each coordinate of `shape` in row-major order, the flat offset `source` gives it.
    static func coordinateOffsets(_ shape: [Int], _ source: ([Int]) throws -> Int) rethrows -> [Int] {
        let total = MILShape.count(shape)
        var out: [Int] = []
        out.reserveCapacity(total)
        guard total > 0 else { return out }
        var coord = [Int](repeating: 0, count: shape.count)
        for _ in 0..<total {
            out.append(try source(coord))
            var d = shape.count - 1
            while d >= 0 {
                coord[d] += 1
                if coord[d] < shape[d] { break }
                coord[d] = 0; d -= 1
            }
        }
        return out
    }

    /// x as a vector with v's first element appended (v converted to x's element kind).
    static func appending(_ x: MILTensor, _ v: MILTensor) -> MILTensor {
        let n = x.count + 1
        switch x.storage {
        case .float(let a): return MILTensor(x.dataType, shape: [n], storage: .float(a + [v.floats.first ?? 0]))
        case .int(let a): return MILTensor(x.dataType, shape: [n], storage: .int(a + [v.ints.first ?? 0]))
        case .bool(let a): return MILTensor(x.dataType, shape: [n], storage: .bool(a + [v.bools.first ?? false]))
        case .string(let a): return MILTensor(x.dataType, shape: [n], storage: .string(a + [v.strings.first ?? ""]))
        }
    }

    static func flat(_ x: MILTensor) -> MILTensor {
        var t = x
        t.shape = [x.count]
        return t
    }

    static func zeroScalar(like x: MILTensor) -> MILTensor {
        switch x.storage {
        case .float: return .scalar(Float(0), x.dataType)
        case .int: return .scalar(0, x.dataType)
        case .bool: return MILTensor(bools: [false], shape: [])
        case .string: return MILTensor(.string, shape: [], storage: .string([""]))
        }
    }

    /// A tensor of `shape` holding `value`'s first element, in `value`'s element type.
    static func filled(_ shape: [Int], with value: MILTensor) -> MILTensor {
        let n = MILShape.count(shape)
        switch value.storage {
        case .float(let a): return MILTensor(value.dataType, shape: shape, storage: .float(.init(repeating: a.first ?? 0, count: n)))
        case .int(let a): return MILTensor(value.dataType, shape: shape, storage: .int(.init(repeating: a.first ?? 0, count: n)))
        case .bool(let a): return MILTensor(value.dataType, shape: shape, storage: .bool(.init(repeating: a.first ?? false, count: n)))
        case .string(let a): return MILTensor(value.dataType, shape: shape, storage: .string(.init(repeating: a.first ?? "", count: n)))
        }
    }

    /// The indices `slice_by_index` selects on each axis (its begin, end, stride and masks),
    /// and which axes survive the squeeze mask.
    static func sliceRanges(_ shape: [Int], begin: [Int], end: [Int], stride strides: [Int], beginMask: [Bool], endMask: [Bool],
                            squeezeMask: [Bool], call: MILOpCall) throws -> (ranges: [[Int]], kept: [Bool]) {
        let r = shape.count
        guard begin.count == r, end.count == r, strides.count == r, beginMask.count == r, endMask.count == r, squeezeMask.count == r else {
            throw call.error("begin, end, stride and the masks need \(r) values each")
        }
        var ranges: [[Int]] = [], kept: [Bool] = []
        for d in 0..<r {
            let n = shape[d], s = strides[d]
            guard s != 0 else { throw call.error("stride 0 on axis \(d)") }
            if squeezeMask[d] {
                var b = begin[d] < 0 ? begin[d] + n : begin[d]
                if beginMask[d] { b = s > 0 ? 0 : n - 1 }
                guard b >= 0 && b < n else { throw call.error("index \(begin[d]) is out of range for axis \(d) of \(shape)") }
                ranges.append([b]); kept.append(false)
                continue
            }
            var b = begin[d], e = end[d]
            if s > 0 {
                b = beginMask[d] ? 0 : (b < 0 ? Swift.max(b + n, 0) : Swift.min(b, n))
                e = endMask[d] ? n : (e < 0 ? Swift.max(e + n, 0) : Swift.min(e, n))
                ranges.append(b < e ? Array(Swift.stride(from: b, to: e, by: s)) : [])
            } else {
                b = beginMask[d] ? n - 1 : (b < 0 ? Swift.max(b + n, -1) : Swift.min(b, n - 1))
                e = endMask[d] ? -1 : (e < 0 ? Swift.max(e + n, -1) : Swift.min(e, n - 1))
                ranges.append(b > e ? Array(Swift.stride(from: b, to: e, by: s)) : [])
            }
            kept.append(true)
        }
        return (ranges, kept)
    }
}
