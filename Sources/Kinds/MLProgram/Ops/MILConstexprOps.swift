/// Weight decompression computed once at load (`constexpr_*`, iOS16 `constexpr_ops.py` and iOS18
/// `compression.py`), and `quantize`/`dequantize` (iOS17 `quantization_ops.py`).
///
/// The iOS16 and iOS18 forms of `constexpr_lut_to_dense` and `constexpr_sparse_to_dense` share a
/// name: the iOS16 ones carry a `shape` input and pack their indices or mask into uint8 bytes
/// themselves; the iOS18 ones declare sub-byte element types (uint1…uint6, int4), which the blob
/// reader has already unpacked into one element per value.
enum MILConstexprOps {
    nonisolated(unsafe) static let kernels: [String: MILKernel] = [
        "constexpr_affine_dequantize": { call in
            let q = try call.tensor("quantized_data"), scale = try call.tensor("scale")
            let zeroPoint = try call.tensor("zero_point")
            let axis = try MILShape.axis(try call.int("axis"), rank: q.rank, op: call.type)
            let s = try paramIndices(scale, data: q.shape, axis: axis, name: "scale", call: call)
            let z = try paramIndices(zeroPoint, data: q.shape, axis: axis, name: "zero_point", call: call)
            let qv = q.floats, sv = scale.floats, zv = zeroPoint.floats
            let out = (0..<qv.count).map { i in sv[s[i]] * (qv[i] - zv[z[i]]) }
            return [.tensor(MILTensor(floats: out, shape: q.shape, dataType: scale.dataType))]
        },
        "constexpr_cast": { call in
            let source = try call.tensor("source_val")
            let name = try call.string("output_dtype")
            guard let type = MILDataType(castName: name), type.isFloat else { throw call.error("cannot cast to '\(name)'") }
            return [.tensor(source.converted(to: type))]
        },
        "constexpr_lut_to_dense": { call in
            let lut = try call.tensor("lut"), indices = try call.tensor("indices")
            if call.has("shape") {
                let shape = try call.ints("shape")
                let palettes = lut.count
                let bits = palettes.trailingZeroBitCount
                guard lut.rank == 1, palettes > 1, palettes == 1 << bits else {
                    throw call.error("an iOS16 lut must be a vector of 2, 4, 16, 64 or 256 values, has shape \(lut.shape)")
                }
                let count = MILShape.count(shape)
                let keys = try unpack(indices, bits: bits, count: count, call: call)
                return [.tensor(MILShapeOps.gather(lut, offsets: keys, shape: shape))]
            }
            let vectorAxis = try call.optionalTensor("vector_axis").map { try MILShape.axis($0.ints.first ?? 0, rank: indices.rank, op: call.type) }
            return [.tensor(try lutToDense(indices, lut: lut, vectorAxis: vectorAxis, call: call))]
        },
        "constexpr_sparse_to_dense": { call in
            let values = try call.tensor("nonzero_data"), mask = try call.tensor("mask")
            if call.has("shape") {
                let shape = try call.ints("shape")
                let bitsSet = try unpack(mask, bits: 1, count: MILShape.count(shape), call: call)
                return [.tensor(try scatter(values, mask: bitsSet, shape: shape, call: call))]
            }
            return [.tensor(try scatter(values, mask: mask.ints, shape: mask.shape, call: call))]
        },
        "constexpr_blockwise_shift_scale": { call in
            let data = try call.tensor("data"), scale = try call.tensor("scale")
            return [.tensor(try shiftScale(data, scale: scale, offset: try call.optionalTensor("offset"), call: call))]
        },
        "constexpr_lut_to_sparse": { call in
            let mask = try call.tensor("indices_mask"), nonzero = try call.tensor("indices_nonzero_data")
            let lut = try call.tensor("lut")
            let vectorAxis = try call.optionalTensor("vector_axis").map { try MILShape.axis($0.ints.first ?? 0, rank: mask.rank, op: call.type) }
            // Absent entries read palette 0; they are dropped again when the mask selects the values.
            let indices = try scatter(nonzero, mask: mask.ints, shape: mask.shape, call: call)
            let dense = try lutToDense(indices, lut: lut, vectorAxis: vectorAxis, call: call)
            var outMask = mask
            if let vectorAxis, let size = lut.shape.last, size > 1 {
                outMask = MILShapeOps.select(mask, mask.shape.indices.map { d in
                    d == vectorAxis ? (0..<(mask.shape[d] * size)).map { $0 / size } : Array(0..<mask.shape[d])
                })
            }
            return [.tensor(outMask), .tensor(compact(dense, mask: outMask.ints))]
        },
        "constexpr_sparse_blockwise_shift_scale": { call in
            let mask = try call.tensor("data_mask"), nonzero = try call.tensor("nonzero_data")
            let scale = try call.tensor("scale")
            let data = try scatter(nonzero, mask: mask.ints, shape: mask.shape, call: call)
            let dense = try shiftScale(data, scale: scale, offset: try call.optionalTensor("offset"), call: call)
            return [.tensor(mask), .tensor(compact(dense, mask: mask.ints))]
        },
        "quantize": { call in
            let x = try call.tensor("input"), scale = try call.tensor("scale")
            let zeroPoint = try call.optionalTensor("zero_point")
            let name = try call.string("output_dtype")
            guard let type = MILDataType(castName: name), type == .int8 || type == .uint8 else {
                throw call.error("output_dtype must be int8 or uint8, is '\(name)'")
            }
            let axis = try call.optionalTensor("axis").map { try MILShape.axis($0.ints.first ?? 0, rank: x.rank, op: call.type) }
            let s = try paramIndices(scale, data: x.shape, axis: axis, name: "scale", call: call)
            let z = try zeroPoint.map { try paramIndices($0, data: x.shape, axis: axis, name: "zero_point", call: call) }
            let xv = x.floats, sv = scale.floats, zv = zeroPoint?.floats ?? []
            let (low, high): (Float, Float) = type == .int8 ? (-128, 127) : (0, 255)
            let out = (0..<xv.count).map { i -> Int in
                // NumPy's around: halves go to the even neighbour.
                var q = (xv[i] / sv[s[i]]).rounded(.toNearestOrEven)
                if let z { q += zv[z[i]] }
                return Int(min(max(q, low), high))
            }
            return [.tensor(MILTensor(ints: out, shape: x.shape, dataType: type))]
        },
        "dequantize": { call in
            let x = try call.tensor("input"), scale = try call.tensor("scale")
            let zeroPoint = try call.optionalTensor("zero_point")
            let axis = try call.optionalTensor("axis").map { try MILShape.axis($0.ints.first ?? 0, rank: x.rank, op: call.type) }
            let s = try paramIndices(scale, data: x.shape, axis: axis, name: "scale", call: call)
            let z = try zeroPoint.map { try paramIndices($0, data: x.shape, axis: axis, name: "zero_point", call: call) }
            let xv = x.floats, sv = scale.floats, zv = zeroPoint?.floats ?? []
            let out = (0..<xv.count).map { i -> Float in
                let shifted = z.map { xv[i] - zv[$0[i]] } ?? xv[i]
                return sv[s[i]] * shifted
            }
            return [.tensor(MILTensor(floats: out, shape: x.shape, dataType: scale.dataType))]
        },
    ]

    /// For each element of a tensor of shape `data`, the flat index of the element of `param`
    /// that applies to it: a scalar applies everywhere, a vector along `axis`, and a tensor of the
    /// data's rank block-wise (each of its dimensions divides the data's).
    static func paramIndices(_ param: MILTensor, data: [Int], axis: Int?, name: String, call: MILOpCall) throws -> [Int] {
        let total = MILShape.count(data)
        if param.count == 1 { return [Int](repeating: 0, count: total) }
        if param.rank == 1, data.count != 1 || axis != nil {
            guard let axis, param.count == data[axis] else {
                throw call.error("\(name) has \(param.count) values; a vector needs an axis and one value per element of that axis of \(data)")
            }
            var perDim = data.map { [Int](repeating: 0, count: $0) }
            perDim[axis] = Array(0..<data[axis])
            return offsets(data, perDim)
        }
        return try blockIndices(param.shape, data: data, name: name, call: call)
    }

    /// The flat index into a tensor of shape `blocks` for each element of `data`, where each
    /// dimension of `blocks` divides the data's and its elements cover equal contiguous blocks.
    static func blockIndices(_ blocks: [Int], data: [Int], name: String, call: MILOpCall) throws -> [Int] {
        guard blocks.count == data.count, zip(data, blocks).allSatisfy({ $1 > 0 && $0 % $1 == 0 }) else {
            throw call.error("\(name) of shape \(blocks) does not divide the data's shape \(data) into blocks")
        }
        let strides = MILShape.strides(blocks)
        let perDim = data.indices.map { d in
            let size = data[d] / blocks[d]
            return (0..<data[d]).map { $0 / size * strides[d] }
        }
        return offsets(data, perDim)
    }

    /// For each element of `shape` in row-major order, the sum over dimensions of
    /// `perDim[d][coordinate d]`.
    static func offsets(_ shape: [Int], _ perDim: [[Int]]) -> [Int] {
        let total = MILShape.count(shape)
        var out = [Int](repeating: 0, count: total)
        guard total > 0 else { return out }
        var coord = [Int](repeating: 0, count: shape.count)
        var sum = perDim.reduce(0) { $0 + $1[0] }
        for k in 0..<total {
            out[k] = sum
            var d = shape.count - 1
            while d >= 0 {
                sum -= perDim[d][coord[d]]
                coord[d] += 1
                if coord[d] < shape[d] { sum += perDim[d][coord[d]]; break }
                coord[d] = 0; sum += perDim[d][0]
                d -= 1
            }
        }
        return out
    }

    /// Values packed into uint8 bytes, least significant bits first (the iOS16 layout).
    static func unpack(_ bytes: MILTensor, bits: Int, count: Int, call: MILOpCall) throws -> [Int] {
        let b = bytes.ints
        guard b.count * 8 >= count * bits else {
            throw call.error("\(b.count) bytes hold fewer than \(count) values of \(bits) bits")
        }
        let mask = (1 << bits) - 1
        return (0..<count).map { i in
            let bit = i * bits
            var word = b[bit / 8] & 0xFF
            if bit / 8 + 1 < b.count { word |= (b[bit / 8 + 1] & 0xFF) << 8 }
            return (word >> (bit % 8)) & mask
        }
    }

    /// A palettized tensor: each index replaced by its entry (a scalar, or a vector laid along
    /// `vectorAxis`) in the lookup table of its block. The lut has shape
    /// `[blocks…, palettes, vector size]`.
    static func lutToDense(_ indices: MILTensor, lut: MILTensor, vectorAxis: Int?, call: MILOpCall) throws -> MILTensor {
        let rank = indices.rank
        guard lut.rank == rank + 2 else {
            throw call.error("lut of shape \(lut.shape) needs two more dimensions than the indices \(indices.shape)")
        }
        let palettes = lut.shape[rank], size = lut.shape[rank + 1]
        guard size == 1 || vectorAxis != nil else { throw call.error("a lut of vectors (size \(size)) needs vector_axis") }
        let block = try blockIndices(Array(lut.shape[..<rank]), data: indices.shape, name: "lut", call: call)
        let keys = indices.ints
        var shape = indices.shape
        if let vectorAxis { shape[vectorAxis] *= size }
        let outStrides = MILShape.strides(shape)
        let perDim = indices.shape.indices.map { d in
            (0..<indices.shape[d]).map { $0 * outStrides[d] * (d == vectorAxis ? size : 1) }
        }
        let base = offsets(indices.shape, perDim)
        let along = vectorAxis.map { outStrides[$0] } ?? 0
        var from = [Int](repeating: 0, count: keys.count * size)
        for i in keys.indices {
            guard keys[i] >= 0 && keys[i] < palettes else { throw call.error("index \(keys[i]) is outside the lut's \(palettes) entries") }
            let entry = (block[i] * palettes + keys[i]) * size
            for v in 0..<size { from[base[i] + v * along] = entry + v }
        }
        return MILShapeOps.gather(lut, offsets: from, shape: shape)
    }

    /// A dense tensor from its nonzero values in row-major order and a mask of where they go.
    static func scatter(_ values: MILTensor, mask: [Int], shape: [Int], call: MILOpCall) throws -> MILTensor {
        let set = mask.reduce(0) { $0 + ($1 != 0 ? 1 : 0) }
        guard set == values.count, mask.count == MILShape.count(shape) else {
            throw call.error("the mask sets \(set) of \(mask.count) elements for \(values.count) values (shape \(shape))")
        }
        func fill<T>(_ v: [T], zero: T) -> [T] {
            var out = [T](repeating: zero, count: mask.count)
            var next = 0
            for i in mask.indices where mask[i] != 0 { out[i] = v[next]; next += 1 }
            return out
        }
        switch values.storage {
        case .float(let v): return MILTensor(values.dataType, shape: shape, storage: .float(fill(v, zero: 0)))
        case .int(let v): return MILTensor(values.dataType, shape: shape, storage: .int(fill(v, zero: 0)))
        case .bool(let v): return MILTensor(values.dataType, shape: shape, storage: .bool(fill(v, zero: false)))
        case .string: throw call.error("string values cannot be sparse")
        }
    }

    /// The elements a mask selects, in row-major order, as a vector.
    static func compact(_ dense: MILTensor, mask: [Int]) -> MILTensor {
        let picked = mask.indices.filter { mask[$0] != 0 }
        return MILShapeOps.gather(dense, offsets: picked, shape: [picked.count])
    }

    /// `scale * (data - offset)`, scale and offset applied block-wise.
    static func shiftScale(_ data: MILTensor, scale: MILTensor, offset: MILTensor?, call: MILOpCall) throws -> MILTensor {
        let s = try blockIndices(scale.shape, data: data.shape, name: "scale", call: call)
        if let offset, offset.shape != scale.shape {
            throw call.error("offset of shape \(offset.shape) must have the scale's shape \(scale.shape)")
        }
        let dv = data.floats, sv = scale.floats, ov = offset?.floats
        let out = (0..<dv.count).map { i -> Float in
            let shifted = ov.map { dv[i] - $0[s[i]] } ?? dv[i]
            return sv[s[i]] * shifted
        }
        return MILTensor(floats: out, shape: data.shape, dataType: scale.dataType)
    }
}
