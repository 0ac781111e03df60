/// Where a sliding window (a convolution kernel or a pooling window) sits over the spatial axes
/// of an `[N, C, *spatial]` tensor. One to three spatial axes are stored as three, the missing
/// leading axes of size one, so one loop nest serves every rank.
struct MILWindowGeometry {
    /// Number of spatial axes the program declared (1, 2 or 3).
    let rank: Int
    var input: [Int]
    var kernel: [Int]
    var strides: [Int]
    var dilations: [Int]
    var padBefore: [Int]
    var padAfter: [Int]
    var output: [Int]

    var inputCount: Int { input.reduce(1, *) }
    var kernelCount: Int { kernel.reduce(1, *) }
    var outputCount: Int { output.reduce(1, *) }
    /// The declared spatial output sizes (without the added leading axes).
    var declaredOutput: [Int] { Array(output.suffix(rank)) }

    /// Reads `strides`, `dilations`, `pad_type`, `pad` (and `ceil_mode` for pooling) as
    /// `conv.py` / `pool.py` define them, with `_utils.aggregated_pad` and
    /// `spatial_dimensions_out_shape` for the padding and output sizes: "same" puts the odd
    /// padding element after (bottom/right), "same_lower" before.
    static func read(_ call: MILOpCall, spatial: [Int], kernel: [Int], dilated: Bool, ceilMode: Bool = false) throws -> MILWindowGeometry {
        let r = spatial.count
        guard (1...3).contains(r) else { throw call.error("needs 1 to 3 spatial axes, x has \(r)") }
        guard kernel.count == r else { throw call.error("the kernel has \(kernel.count) spatial sizes for \(r) spatial axes") }
        let strides = try call.ints("strides", default: [Int](repeating: 1, count: r))
        let dilations = dilated ? try call.ints("dilations", default: [Int](repeating: 1, count: r)) : [Int](repeating: 1, count: r)
        guard strides.count == r, dilations.count == r else { throw call.error("strides and dilations need \(r) values") }
        guard strides.allSatisfy({ $0 > 0 }), dilations.allSatisfy({ $0 > 0 }), kernel.allSatisfy({ $0 > 0 }) else {
            throw call.error("strides \(strides), dilations \(dilations) and kernel sizes \(kernel) must be positive")
        }
        let padType = try call.string("pad_type", default: "valid").lowercased()
        var before = [Int](repeating: 0, count: r), after = before
        for d in 0..<r {
            let effective = (kernel[d] - 1) * dilations[d] + 1
            switch padType {
            case "valid": break
            case "custom":
                let pad = try call.ints("pad", default: [Int](repeating: 0, count: 2 * r))
                guard pad.count == 2 * r, pad.allSatisfy({ $0 >= 0 }) else { throw call.error("pad needs \(2 * r) non-negative values, has \(pad)") }
                before[d] = pad[2 * d]; after[d] = pad[2 * d + 1]
            case "same", "same_lower":
                let s = strides[d], i = spatial[d]
                let total = Swift.max(0, ((i + s - 1) / s - 1) * s + effective - i)
                let small = total / 2
                before[d] = padType == "same" ? small : total - small
                after[d] = total - before[d]
            default:
                throw call.error("unknown pad_type \(padType)")
            }
        }
        var output = [Int](repeating: 0, count: r)
        for d in 0..<r {
            let effective = (kernel[d] - 1) * dilations[d] + 1
            let padded = spatial[d] + before[d] + after[d]
            if ceilMode {
                var o = (padded - effective + strides[d] - 1) / strides[d] + 1
                // pool.py's rule: the last window may not start inside the trailing padding.
                if before[d] + after[d] > 0 && 2 * (o - 1) * strides[d] >= 2 * spatial[d] + before[d] + after[d] { o -= 1 }
                output[d] = o
            } else {
                output[d] = padded >= effective ? (padded - effective) / strides[d] + 1 : 0
            }
            guard output[d] > 0 else {
                throw call.error("the window (\(effective) wide) does not fit spatial axis \(d) of size \(spatial[d]) with padding \(before[d])+\(after[d])")
            }
        }
        let lead = 3 - r
        func three(_ v: [Int], _ fill: Int) -> [Int] { [Int](repeating: fill, count: lead) + v }
        return MILWindowGeometry(rank: r, input: three(spatial, 1), kernel: three(kernel, 1), strides: three(strides, 1),
                                 dilations: three(dilations, 1), padBefore: three(before, 0), padAfter: three(after, 0),
                                 output: three(output, 1))
    }
}
