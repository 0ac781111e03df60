/// `avg_pool`, `max_pool` and `l2_pool` (`pool.py`) over one to three spatial axes.
enum MILPoolingOps {
    nonisolated(unsafe) static let kernels: [String: MILKernel] = [
        "avg_pool": { call in [.tensor(try pool(call, .average(excludePadding: try call.bool("exclude_padding_from_average", default: false))))] },
        "max_pool": { call in [.tensor(try pool(call, .max))] },
        "l2_pool": { call in [.tensor(try pool(call, .l2))] },
    ]

    enum Reduction {
        case average(excludePadding: Bool)
        case max
        case l2
    }

    /// Padding never contributes a value. An average divides by the window's size clipped to
    /// the padded input (a `ceil_mode` window may run past it), or, excluding padding, by the
    /// number of input elements it covers.
    static func pool(_ call: MILOpCall, _ reduction: Reduction) throws -> MILTensor {
        let x = try call.tensor("x")
        guard x.rank >= 3, x.rank <= 5 else { throw call.error("x \(x.shape) must be [N, C, *spatial] with 1 to 3 spatial axes") }
        let kernel = try call.ints("kernel_sizes")
        let g = try MILWindowGeometry.read(call, spatial: Array(x.shape[2...]), kernel: kernel, dilated: false,
                                           ceilMode: try call.bool("ceil_mode", default: false))
        let planes = x.shape[0] * x.shape[1]
        let inPlane = g.inputCount, outPlane = g.outputCount
        let xv = x.floats
        var out = [Float](repeating: 0, count: planes * outPlane)
        let input = g.input, output = g.output, k = g.kernel, s = g.strides, before = g.padBefore, after = g.padAfter
        xv.withUnsafeBufferPointer { xp in
            out.withUnsafeMutableBufferPointer { op in
                for plane in 0..<planes {
                    let src = xp.baseAddress! + plane * inPlane
                    var dst = op.baseAddress! + plane * outPlane
                    for zd in 0..<output[0] {
                        let d0 = zd * s[0] - before[0]
                        let dLo = Swift.max(d0, 0), dHi = Swift.min(d0 + k[0], input[0])
                        let dSpan = Swift.min(d0 + k[0], input[0] + after[0]) - d0
                        for zh in 0..<output[1] {
                            let h0 = zh * s[1] - before[1]
                            let hLo = Swift.max(h0, 0), hHi = Swift.min(h0 + k[1], input[1])
                            let hSpan = Swift.min(h0 + k[1], input[1] + after[1]) - h0
                            for zw in 0..<output[2] {
                                let w0 = zw * s[2] - before[2]
                                let wLo = Swift.max(w0, 0), wHi = Swift.min(w0 + k[2], input[2])
                                let wSpan = Swift.min(w0 + k[2], input[2] + after[2]) - w0
                                var acc: Float
                                switch reduction {
                                case .max:
                                    acc = -Float.infinity
                                    for d in dLo..<Swift.max(dHi, dLo) {
                                        for h in hLo..<Swift.max(hHi, hLo) {
                                            let line = src + (d * input[1] + h) * input[2]
                                            for w in wLo..<Swift.max(wHi, wLo) { acc = Swift.max(acc, line[w]) }
                                        }
                                    }
                                case .l2, .average:
                                    acc = 0
                                    let square = if case .l2 = reduction { true } else { false }
                                    for d in dLo..<Swift.max(dHi, dLo) {
                                        for h in hLo..<Swift.max(hHi, hLo) {
                                            let line = src + (d * input[1] + h) * input[2]
                                            for w in wLo..<Swift.max(wHi, wLo) { acc += square ? line[w] * line[w] : line[w] }
                                        }
                                    }
                                    if square {
                                        acc = acc.squareRoot()
                                    } else if case .average(let exclude) = reduction {
                                        let count = exclude
                                            ? Swift.max(dHi - dLo, 0) * Swift.max(hHi - hLo, 0) * Swift.max(wHi - wLo, 0)
                                            : dSpan * hSpan * wSpan
                                        acc = count > 0 ? acc / Float(count) : 0
                                    }
                                }
                                dst.pointee = acc
                                dst += 1
                            }
                        }
                    }
                }
            }
        }
        return MILTensor(floats: out, shape: Array(x.shape[..<2]) + g.declaredOutput, dataType: x.dataType)
    }
}
