/// `conv` and `conv_transpose` (`conv.py`) for one to three spatial axes, as matrix products on
/// OpenBLAS's SGEMM: a convolution gathers each group's input windows into columns (im2col) and
/// multiplies them by the group's weights; a transposed convolution multiplies first and then
/// scatters the columns back onto the output (col2im).
enum MILConvolutionOps {
    nonisolated(unsafe) static let kernels: [String: MILKernel] = [
        "conv": { call in [.tensor(try conv(call))] },
        "conv_transpose": { call in [.tensor(try convTranspose(call))] },
    ]

    static func conv(_ call: MILOpCall) throws -> MILTensor {
        let x = try call.tensor("x"), w = try call.tensor("weight")
        guard x.rank >= 3, w.rank == x.rank else { throw call.error("x \(x.shape) and weight \(w.shape) must both be [N, C, *spatial] with 1 to 3 spatial axes") }
        let n = x.shape[0], cin = x.shape[1], cout = w.shape[0]
        let groups = try call.int("groups", default: 1)
        guard groups > 0, cin % groups == 0, cout % groups == 0, w.shape[1] == cin / groups else {
            throw call.error("weight \(w.shape) does not fit \(cin) input channels in \(groups) groups")
        }
        let g = try MILWindowGeometry.read(call, spatial: Array(x.shape[2...]), kernel: Array(w.shape[2...]), dilated: true)
        // A residual add and a ReLU the planner folded into this convolution (`MILFusion`).
        let relu = try call.string(MILFusion.activationInput, default: "") == "relu"
        let outShape = [n, cout] + g.declaredOutput
        let residual = try call.optionalTensor(MILFusion.residualInput)
        if let residual, residual.shape != outShape {
            throw call.error("the residual \(residual.shape) added to this convolution is not its output's shape \(outShape)")
        }
        let skip = residual?.floats
        if let direct = try MILDirectConvolution.run(call, x: x, w: w, g: g, groups: groups, relu: relu, residual: skip) {
            return MILTensor(floats: direct, shape: outShape, dataType: x.dataType)
        }
        let cinG = cin / groups, coutG = cout / groups
        let rows = cinG * g.kernelCount, cols = g.outputCount, spatialIn = g.inputCount
        var out = [Float](repeating: 0, count: n * cout * cols)
        let xv = x.floats, wv = w.floats
        // A 1×1 kernel that neither strides nor pads reads its columns straight from x.
        let direct = g.kernelCount == 1 && g.strides.allSatisfy { $0 == 1 } && g.padBefore.allSatisfy { $0 == 0 } && g.padAfter.allSatisfy { $0 == 0 }
        var columns = [Float](repeating: 0, count: direct ? 0 : rows * cols)
        xv.withUnsafeBufferPointer { xp in
            wv.withUnsafeBufferPointer { wp in
                out.withUnsafeMutableBufferPointer { op in
                    columns.withUnsafeMutableBufferPointer { cp in
                        for image in 0..<n {
                            for group in 0..<groups {
                                let src = xp.baseAddress! + (image * cin + group * cinG) * spatialIn
                                let b: UnsafePointer<Float>
                                if direct {
                                    b = src
                                } else {
                                    im2col(src, channels: cinG, g, into: cp.baseAddress!)
                                    b = UnsafePointer(cp.baseAddress!)
                                }
                                MILLinearAlgebraOps.gemmPointers(coutG, cols, rows, wp.baseAddress! + group * coutG * rows, transA: false,
                                                                 b, transB: false, op.baseAddress! + (image * cout + group * coutG) * cols, beta: 0,
                                                                 threads: call.threads)
                            }
                        }
                    }
                }
            }
        }
        try addBias(call, &out, channels: cout, planeSize: cols)
        MILDirectConvolution.finish(&out, residual: skip, relu: relu)
        return MILTensor(floats: out, shape: outShape, dataType: x.dataType)
    }

    static func convTranspose(_ call: MILOpCall) throws -> MILTensor {
        let x = try call.tensor("x"), w = try call.tensor("weight")
        guard x.rank >= 3, x.rank <= 5, w.rank == x.rank else {
            throw call.error("x \(x.shape) and weight \(w.shape) must both be [N, C, *spatial] with 1 to 3 spatial axes")
        }
        let n = x.shape[0], cin = x.shape[1], r = x.rank - 2
        let groups = try call.int("groups", default: 1)
        guard groups > 0, cin % groups == 0, w.shape[0] == cin else {
            throw call.error("weight \(w.shape) must be [C_in, C_out/groups, *K] for \(cin) input channels in \(groups) groups")
        }
        let coutG = w.shape[1], cout = coutG * groups, cinG = cin / groups
        let spatial = Array(x.shape[2...]), kernel = Array(w.shape[2...])
        let strides = try call.ints("strides", default: [Int](repeating: 1, count: r))
        let dilations = try call.ints("dilations", default: [Int](repeating: 1, count: r))
        guard strides.count == r, dilations.count == r, strides.allSatisfy({ $0 > 0 }), dilations.allSatisfy({ $0 > 0 }) else {
            throw call.error("strides \(strides) and dilations \(dilations) need \(r) positive values")
        }
        let padType = try call.string("pad_type", default: "valid").lowercased()
        let pad = try call.ints("pad", default: [Int](repeating: 0, count: 2 * r))
        var declared: [Int]? = nil
        if let shape = try call.optionalTensor("output_shape")?.ints {
            guard shape.count == r + 2 || shape.count == r else { throw call.error("output_shape \(shape) has neither \(r + 2) nor \(r) values") }
            declared = Array(shape.suffix(r))
        }
        // The transposed convolution writes the full `(D-1)·s + K_eff` extent and keeps the part
        // that starts `crop` in: the padding of the forward convolution it reverses.
        var outSpatial = [Int](repeating: 0, count: r), crop = [Int](repeating: 0, count: r)
        for d in 0..<r {
            let effective = (kernel[d] - 1) * dilations[d] + 1
            let full = (spatial[d] - 1) * strides[d] + effective
            switch padType {
            case "valid":
                outSpatial[d] = full
            case "custom":
                guard pad.count == 2 * r else { throw call.error("pad needs \(2 * r) values, has \(pad.count)") }
                crop[d] = pad[2 * d]
                outSpatial[d] = full - pad[2 * d] - pad[2 * d + 1]
            case "same":
                outSpatial[d] = spatial[d] * strides[d]
                crop[d] = Swift.max(0, full - (declared?[d] ?? outSpatial[d])) / 2
            default:
                throw call.error("unknown pad_type \(padType)")
            }
            if let declared { outSpatial[d] = declared[d] }
            guard outSpatial[d] > 0 else { throw call.error("the output of spatial axis \(d) would be empty") }
        }
        let lead = 3 - r
        func three(_ v: [Int], _ fill: Int) -> [Int] { [Int](repeating: fill, count: lead) + v }
        // Geometry of the forward convolution from the output back to x.
        let g = MILWindowGeometry(rank: r, input: three(outSpatial, 1), kernel: three(kernel, 1), strides: three(strides, 1),
                                  dilations: three(dilations, 1), padBefore: three(crop, 0), padAfter: three([Int](repeating: 0, count: r), 0),
                                  output: three(spatial, 1))
        let rows = coutG * g.kernelCount, cols = g.outputCount, outPlane = g.inputCount
        var out = [Float](repeating: 0, count: n * cout * outPlane)
        var columns = [Float](repeating: 0, count: rows * cols)
        let xv = x.floats, wv = w.floats
        xv.withUnsafeBufferPointer { xp in
            wv.withUnsafeBufferPointer { wp in
                out.withUnsafeMutableBufferPointer { op in
                    columns.withUnsafeMutableBufferPointer { cp in
                        for image in 0..<n {
                            for group in 0..<groups {
                                // columns[co·K + k, s] = Σ_ci weight[ci, co, k] · x[ci, s]
                                MILLinearAlgebraOps.gemmPointers(rows, cols, cinG, wp.baseAddress! + group * cinG * rows, transA: true,
                                                                 xp.baseAddress! + (image * cin + group * cinG) * cols, transB: false,
                                                                 cp.baseAddress!, beta: 0)
                                col2im(UnsafePointer(cp.baseAddress!), channels: coutG, g, into: op.baseAddress! + (image * cout + group * coutG) * outPlane)
                            }
                        }
                    }
                }
            }
        }
        try addBias(call, &out, channels: cout, planeSize: outPlane)
        return MILTensor(floats: out, shape: [n, cout] + outSpatial, dataType: x.dataType)
    }

    static func addBias(_ call: MILOpCall, _ out: inout [Float], channels: Int, planeSize: Int) throws {
        guard let bias = try call.optionalTensor("bias") else { return }
        let b = bias.floats
        guard b.count == channels else { throw call.error("bias has \(b.count) values for \(channels) output channels") }
        let images = out.count / Swift.max(channels * planeSize, 1)
        out.withUnsafeMutableBufferPointer { op in
            for image in 0..<images {
                for c in 0..<channels {
                    let p = op.baseAddress! + (image * channels + c) * planeSize
                    for i in 0..<planeSize { p[i] += b[c] }
                }
            }
        }
    }

    /// Rows `(c, kd, kh, kw)`, columns the output positions: the input value each kernel tap
    /// sees at each position, zero in the padding.
    static func im2col(_ src: UnsafePointer<Float>, channels: Int, _ g: MILWindowGeometry, into dst: UnsafeMutablePointer<Float>) {
        let (id, ih, iw) = (g.input[0], g.input[1], g.input[2])
        let (od, oh, ow) = (g.output[0], g.output[1], g.output[2])
        var row = dst
        for c in 0..<channels {
            let plane = src + c * id * ih * iw
            for kd in 0..<g.kernel[0] {
                for kh in 0..<g.kernel[1] {
                    for kw in 0..<g.kernel[2] {
                        var o = row
                        for zd in 0..<od {
                            let sd = zd * g.strides[0] - g.padBefore[0] + kd * g.dilations[0]
                            for zh in 0..<oh {
                                let sh = zh * g.strides[1] - g.padBefore[1] + kh * g.dilations[1]
                                if sd < 0 || sd >= id || sh < 0 || sh >= ih {
                                    o.update(repeating: 0, count: ow)
                                    o += ow
                                    continue
                                }
                                let line = plane + (sd * ih + sh) * iw
                                var sw = kw * g.dilations[2] - g.padBefore[2]
                                for zw in 0..<ow {
                                    o[zw] = sw >= 0 && sw < iw ? line[sw] : 0
                                    sw += g.strides[2]
                                }
                                o += ow
                            }
                        }
                        row += od * oh * ow
                    }
                }
            }
        }
    }

    /// The reverse of `im2col`: adds each column entry onto the input position it came from,
    /// dropping those that fall in the padding.
    static func col2im(_ src: UnsafePointer<Float>, channels: Int, _ g: MILWindowGeometry, into dst: UnsafeMutablePointer<Float>) {
        let (id, ih, iw) = (g.input[0], g.input[1], g.input[2])
        let (od, oh, ow) = (g.output[0], g.output[1], g.output[2])
        var row = src
        for c in 0..<channels {
            let plane = dst + c * id * ih * iw
            for kd in 0..<g.kernel[0] {
                for kh in 0..<g.kernel[1] {
                    for kw in 0..<g.kernel[2] {
                        var o = row
                        for zd in 0..<od {
                            let sd = zd * g.strides[0] - g.padBefore[0] + kd * g.dilations[0]
                            for zh in 0..<oh {
                                let sh = zh * g.strides[1] - g.padBefore[1] + kh * g.dilations[1]
                                if sd >= 0 && sd < id && sh >= 0 && sh < ih {
                                    let line = plane + (sd * ih + sh) * iw
                                    var sw = kw * g.dilations[2] - g.padBefore[2]
                                    for zw in 0..<ow {
                                        if sw >= 0 && sw < iw { line[sw] += o[zw] }
                                        sw += g.strides[2]
                                    }
                                }
                                o += ow
                            }
                        }
                        row += od * oh * ow
                    }
                }
            }
        }
    }
}
