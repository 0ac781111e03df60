/// Moves between the spatial, channel and batch axes of `[N, C, H, W]` tensors
/// (`tensor_transformation.py`): depth_to_space, space_to_depth, pixel_shuffle, pixel_unshuffle,
/// space_to_batch, batch_to_space, and sliding_windows. Each rearrangement is a reshape, a
/// transpose and a reshape.
enum MILSpaceOps {
    nonisolated(unsafe) static let kernels: [String: MILKernel] = [
        // TensorFlow's layout (DCR): out[n, c, h·b+i, w·b+j] = x[n, (i·b+j)·C' + c, h, w].
        "depth_to_space": { call in
            let x = try image(call), b = try call.int("block_size")
            let (n, c, h, w) = (x.shape[0], x.shape[1], x.shape[2], x.shape[3])
            guard b > 0, c % (b * b) == 0 else { throw call.error("\(c) channels do not divide into blocks of \(b)×\(b)") }
            return [.tensor(rearrange(x, [n, b, b, c / (b * b), h, w], [0, 3, 4, 1, 5, 2], [n, c / (b * b), h * b, w * b]))]
        },
        // PyTorch's PixelShuffle (CRD): out[n, c, h·f+i, w·f+j] = x[n, c·f² + i·f + j, h, w].
        "pixel_shuffle": { call in
            let x = try image(call), f = try call.int("upscale_factor")
            let (n, c, h, w) = (x.shape[0], x.shape[1], x.shape[2], x.shape[3])
            guard f > 0, c % (f * f) == 0 else { throw call.error("\(c) channels do not divide by \(f)²") }
            return [.tensor(rearrange(x, [n, c / (f * f), f, f, h, w], [0, 1, 4, 2, 5, 3], [n, c / (f * f), h * f, w * f]))]
        },
        "space_to_depth": { call in
            let x = try image(call), b = try call.int("block_size")
            let (n, c, h, w) = (x.shape[0], x.shape[1], x.shape[2], x.shape[3])
            guard b > 0, h % b == 0, w % b == 0 else { throw call.error("\(h)×\(w) does not divide into blocks of \(b)") }
            return [.tensor(rearrange(x, [n, c, h / b, b, w / b, b], [0, 3, 5, 1, 2, 4], [n, c * b * b, h / b, w / b]))]
        },
        "pixel_unshuffle": { call in
            let x = try image(call), f = try call.int("downscale_factor")
            let (n, c, h, w) = (x.shape[0], x.shape[1], x.shape[2], x.shape[3])
            guard f > 0, h % f == 0, w % f == 0 else { throw call.error("\(h)×\(w) does not divide by \(f)") }
            return [.tensor(rearrange(x, [n, c, h / f, f, w / f, f], [0, 1, 3, 5, 2, 4], [n, c * f * f, h / f, w / f]))]
        },
        // TensorFlow's layout: out[(i·bw + j)·N + n, c, h, w] = padded[n, c, h·bh + i, w·bw + j].
        "space_to_batch": { call in
            let x = try image(call)
            let block = try call.ints("block_shape"), pads = try call.ints("paddings")
            guard block.count == 2, block.allSatisfy({ $0 > 0 }), pads.count == 4, pads.allSatisfy({ $0 >= 0 }) else {
                throw call.error("block_shape needs two positive values and paddings 2×2 non-negative ones")
            }
            let (n, c) = (x.shape[0], x.shape[1])
            let h = x.shape[2] + pads[0] + pads[1], w = x.shape[3] + pads[2] + pads[3]
            let (bh, bw) = (block[0], block[1])
            guard h % bh == 0, w % bw == 0 else { throw call.error("padded \(h)×\(w) does not divide into blocks of \(bh)×\(bw)") }
            let padded = pad(x, top: pads[0], left: pads[2], height: h, width: w)
            return [.tensor(rearrange(padded, [n, c, h / bh, bh, w / bw, bw], [3, 5, 0, 1, 2, 4], [bh * bw * n, c, h / bh, w / bw]))]
        },
        "batch_to_space": { call in
            let x = try image(call)
            let block = try call.ints("block_shape"), crops = try call.ints("crops")
            guard block.count == 2, block.allSatisfy({ $0 > 0 }), crops.count == 4, crops.allSatisfy({ $0 >= 0 }) else {
                throw call.error("block_shape needs two positive values and crops 2×2 non-negative ones")
            }
            let (bh, bw) = (block[0], block[1])
            let (nb, c, h, w) = (x.shape[0], x.shape[1], x.shape[2], x.shape[3])
            guard nb % (bh * bw) == 0 else { throw call.error("batch \(nb) does not divide by \(bh)×\(bw)") }
            let n = nb / (bh * bw)
            let full = rearrange(x, [bh, bw, n, c, h, w], [2, 3, 4, 0, 5, 1], [n, c, h * bh, w * bw])
            guard crops[0] + crops[1] < h * bh, crops[2] + crops[3] < w * bw else { throw call.error("crops \(crops) leave nothing") }
            return [.tensor(MILShapeOps.select(full, [Array(0..<n), Array(0..<c), Array(crops[0]..<(h * bh - crops[1])),
                                                      Array(crops[2]..<(w * bw - crops[3]))]))]
        },
        "sliding_windows": { call in
            let x = try call.tensor("x")
            let axis = try MILShape.axis(try call.int("axis"), rank: x.rank, op: call.name)
            let size = try call.int("size"), step = try call.int("stride", default: 1)
            let d = x.shape[axis]
            guard size > 0, step > 0, size <= d else { throw call.error("size \(size) and stride \(step) do not fit axis \(axis) of size \(d)") }
            let windows = (d - size) / step + 1
            let outer = x.shape[..<axis].reduce(1, *), inner = x.shape[(axis + 1)...].reduce(1, *)
            var offsets: [Int] = []
            offsets.reserveCapacity(outer * windows * size * inner)
            for o in 0..<outer {
                for k in 0..<windows {
                    for j in 0..<size {
                        let start = (o * d + k * step + j) * inner
                        offsets.append(contentsOf: start..<(start + inner))
                    }
                }
            }
            var shape = x.shape
            shape.replaceSubrange(axis...axis, with: [windows, size])
            return [.tensor(MILShapeOps.gather(x, offsets: offsets, shape: shape))]
        },
    ]

    static func image(_ call: MILOpCall) throws -> MILTensor {
        let x = try call.tensor("x")
        guard x.rank == 4 else { throw call.error("x \(x.shape) must be [N, C, H, W]") }
        return x
    }

    static func rearrange(_ x: MILTensor, _ split: [Int], _ perm: [Int], _ shape: [Int]) -> MILTensor {
        var t = x
        t.shape = split
        t = MILShapeOps.transpose(t, perm)
        t.shape = shape
        return t
    }

    /// x `[N, C, H, W]` placed at (top, left) in a zero `[N, C, height, width]`.
    static func pad(_ x: MILTensor, top: Int, left: Int, height: Int, width: Int) -> MILTensor {
        let (n, c, h, w) = (x.shape[0], x.shape[1], x.shape[2], x.shape[3])
        let v = x.floats
        var out = [Float](repeating: 0, count: n * c * height * width)
        for p in 0..<(n * c) {
            for r in 0..<h {
                let src = (p * h + r) * w, dst = (p * height + r + top) * width + left
                out.replaceSubrange(dst..<(dst + w), with: v[src..<(src + w)])
            }
        }
        return MILTensor(floats: out, shape: [n, c, height, width], dataType: x.dataType)
    }
}
