/// Resizing and sampling (`image_resizing.py`): upsample_nearest_neighbor, upsample_bilinear,
/// resize_nearest_neighbor, resize_bilinear, resize (iOS17), crop, crop_resize (iOS15–iOS17
/// forms), affine and resample. Bilinear interpolation runs as two linear passes, one per axis,
/// which is the same interpolation.
enum MILImageResizeOps {
    nonisolated(unsafe) static let kernels: [String: MILKernel] = [
        "upsample_nearest_neighbor": { call in
            let x = try call.tensor("x")
            guard x.rank >= 3 else { throw call.error("x \(x.shape) must have rank 3 or more") }
            let sh = try call.float("scale_factor_height", default: 1), sw = try call.float("scale_factor_width", default: 1)
            var t = x
            for (axis, scale) in [(x.rank - 2, sh), (x.rank - 1, sw)] {
                let n = t.shape[axis], m = Int((Float(n) * scale).rounded(.down))
                guard m > 0 else { throw call.error("scaling axis \(axis) of size \(n) by \(scale) leaves nothing") }
                t = resampleAxis(t, axis: axis, taps: (0..<m).map { i in
                    let s = Swift.min(Int((Float(i) / scale).rounded(.down)), n - 1)
                    return Tap(lo: s, hi: s, weight: 0)
                })
            }
            return [.tensor(t)]
        },
        "resize_nearest_neighbor": { call in
            // TensorFlow's half-pixel nearest neighbour: source ⌊(i + ½)·X_in/X_out⌋.
            let x = try call.tensor("x")
            guard x.rank >= 3 else { throw call.error("x \(x.shape) must have rank 3 or more") }
            var t = x
            for (axis, m) in [(x.rank - 2, try call.int("target_size_height")), (x.rank - 1, try call.int("target_size_width"))] {
                guard m > 0 else { throw call.error("target sizes must be positive") }
                let n = t.shape[axis]
                t = resampleAxis(t, axis: axis, taps: (0..<m).map { i in
                    let s = Swift.min(Int(((Float(i) + 0.5) * Float(n) / Float(m)).rounded(.down)), n - 1)
                    return Tap(lo: s, hi: s, weight: 0)
                })
            }
            return [.tensor(t)]
        },
        "upsample_bilinear": { call in
            let x = try call.tensor("x")
            guard x.rank >= 3 else { throw call.error("x \(x.shape) must have rank 3 or more") }
            let align = try call.bool("align_corners", default: true)
            let halfPixel = try call.bool("half_pixel_centers", default: !align)
            let mode: String
            switch (align, halfPixel) {
            case (true, false): mode = "STRICT_ALIGN_CORNERS"
            case (false, true): mode = "UNALIGN_CORNERS"
            case (false, false): mode = "DEFAULT"
            default: throw call.error("align_corners and half_pixel_centers cannot both be true")
            }
            var t = x
            for (axis, scale) in [(x.rank - 2, try call.float("scale_factor_height", default: 1)), (x.rank - 1, try call.float("scale_factor_width", default: 1))] {
                let n = t.shape[axis], m = Int((Float(n) * scale).rounded(.down))
                guard m > 0 else { throw call.error("scaling axis \(axis) of size \(n) by \(scale) leaves nothing") }
                t = resampleAxis(t, axis: axis, taps: linearTaps(try grid(call, mode, from: 0, to: Float(n - 1), count: m), size: n))
            }
            return [.tensor(t)]
        },
        "resize_bilinear": { call in
            let x = try call.tensor("x")
            guard x.rank >= 3 else { throw call.error("x \(x.shape) must have rank 3 or more") }
            let mode = try call.string("sampling_mode", default: "DEFAULT")
            var t = x
            for (axis, m) in [(x.rank - 2, try call.int("target_size_height", default: 1)), (x.rank - 1, try call.int("target_size_width", default: 1))] {
                guard m > 0 else { throw call.error("target sizes must be positive") }
                let n = t.shape[axis]
                t = resampleAxis(t, axis: axis, taps: linearTaps(try grid(call, mode, from: 0, to: Float(n - 1), count: m), size: n))
            }
            return [.tensor(t)]
        },
        "resize": { call in
            // Nearest neighbour takes the sample nearest each grid point of the sampling mode.
            let x = try call.tensor("x")
            let shape = try call.ints("shape")
            let dims = try call.int("resized_dims")
            guard dims >= 0, dims <= shape.count, shape.count <= x.rank else {
                throw call.error("resized_dims \(dims) and shape \(shape) do not fit x \(x.shape)")
            }
            let mode = try call.string("sampling_mode", default: "DEFAULT")
            let interpolation = try call.string("interpolation_mode", default: "LINEAR")
            guard interpolation == "LINEAR" || interpolation == "NEAREST_NEIGHBOR" else { throw call.error("unknown interpolation_mode \(interpolation)") }
            var t = x.dataType.isFloat ? x : x.converted(to: .fp32)
            for i in 0..<dims {
                let axis = x.rank - dims + i, n = x.shape[axis]
                // A 0 keeps the axis as it is, rather than resampling it onto itself (which
                // OFFSET_CORNERS and UNALIGN_CORNERS would blend).
                let m = shape[shape.count - dims + i]
                if m == 0 { continue }
                guard m > 0 else { throw call.error("target size \(m) must be positive") }
                let points = try grid(call, mode, from: 0, to: Float(n - 1), count: m)
                let taps = interpolation == "LINEAR" ? linearTaps(points, size: n) : points.map { p in
                    let s = Swift.min(Swift.max(Int((p + 0.5).rounded(.down)), 0), n - 1)
                    return Tap(lo: s, hi: s, weight: 0)
                }
                t = resampleAxis(t, axis: axis, taps: taps)
            }
            if !x.dataType.isFloat { t = t.converted(to: x.dataType) }
            return [.tensor(t)]
        },
        "crop": { call in
            let x = try call.tensor("x")
            guard x.rank >= 3 else { throw call.error("x \(x.shape) must have rank 3 or more") }
            let ch = try call.ints("crop_height"), cw = try call.ints("crop_width")
            guard ch.count == 2, cw.count == 2, (ch + cw).allSatisfy({ $0 >= 0 }) else { throw call.error("crop_height and crop_width need two non-negative values each") }
            let h = x.shape[x.rank - 2], w = x.shape[x.rank - 1]
            guard ch[0] + ch[1] < h, cw[0] + cw[1] < w else { throw call.error("cropping \(ch), \(cw) leaves nothing of \(h)×\(w)") }
            var ranges = x.shape.map { Array(0..<$0) }
            ranges[x.rank - 2] = Array(ch[0]..<(h - ch[1]))
            ranges[x.rank - 1] = Array(cw[0]..<(w - cw[1]))
            return [.tensor(MILShapeOps.select(x, ranges))]
        },
        "crop_resize": { call in [.tensor(try cropResize(call))] },
        "resample": { call in
            let x = try call.tensor("x"), coordinates = try call.tensor("coordinates")
            return [.tensor(try resample(call, x, coordinates: coordinates, sampling: call.string("sampling_mode"), padding: call.string("padding_mode"),
                                         padValue: call.float("padding_value", default: 0), coordinatesMode: call.string("coordinates_mode"),
                                         alignCorners: call.bool("align_corners")))]
        },
        "affine": { call in
            // The output grid spans [-1, 1] corner to corner (align_corners); each point goes
            // through its batch's transform and is sampled like `resample` does.
            let x = try call.tensor("x"), matrix = try call.tensor("transform_matrix")
            guard x.rank == 4, matrix.rank == 2, matrix.shape[1] == 6, matrix.shape[0] == 1 || matrix.shape[0] == x.shape[0] else {
                throw call.error("x \(x.shape) must be [B, C, H, W] and transform_matrix \(matrix.shape) [B or 1, 6]")
            }
            let oh = try call.int("output_height"), ow = try call.int("output_width")
            let coordinatesMode = try call.string("coordinates_mode")
            let align = try call.bool("align_corners")
            let m = matrix.floats, b = x.shape[0]
            var coords = [Float](repeating: 0, count: b * oh * ow * 2)
            func normalized(_ i: Int, _ n: Int) -> Float {
                if align { return n > 1 ? -1 + 2 * Float(i) / Float(n - 1) : 0 }
                return (2 * Float(i) + 1) / Float(n) - 1
            }
            for image in 0..<b {
                let a = Array(m[(matrix.shape[0] == 1 ? 0 : image * 6)...].prefix(6))
                for r in 0..<oh {
                    for c in 0..<ow {
                        let px = normalized(c, ow), py = normalized(r, oh)
                        let at = ((image * oh + r) * ow + c) * 2
                        coords[at] = a[0] * px + a[1] * py + a[2]
                        coords[at + 1] = a[3] * px + a[4] * py + a[5]
                    }
                }
            }
            return [.tensor(try resample(call, x, coordinates: MILTensor(floats: coords, shape: [b, oh, ow, 2]), sampling: call.string("sampling_mode"),
                                         padding: call.string("padding_mode"), padValue: call.float("padding_value", default: 0),
                                         coordinatesMode: coordinatesMode, alignCorners: align))]
        },
    ]

    /// One output position along an axis: a blend of two input positions.
    struct Tap {
        var lo: Int
        var hi: Int
        var weight: Float // of `hi`
    }

    static func linearTaps(_ points: [Float], size n: Int) -> [Tap] {
        points.map { p in
            let q = Swift.min(Swift.max(p, 0), Float(n - 1))
            let lo = Int(q.rounded(.down))
            return Tap(lo: lo, hi: Swift.min(lo + 1, n - 1), weight: q - Float(lo))
        }
    }

    /// The sampling grid of `count` points over `[a, b]` (a whole axis is `[0, X-1]`), as
    /// `resize_bilinear`'s sampling modes define it, kept inside the interval.
    static func grid(_ call: MILOpCall, _ mode: String, from a: Float, to b: Float, count n: Int) throws -> [Float] {
        let span = b - a, lo = Swift.min(a, b), hi = Swift.max(a, b)
        let points: [Float]
        switch mode {
        case "STRICT_ALIGN_CORNERS", "ALIGN_CORNERS":
            if n == 1 { points = [mode == "ALIGN_CORNERS" ? a + span / 2 : a] }
            else { points = (0..<n).map { a + Float($0) * span / Float(n - 1) } }
        case "DEFAULT":
            points = (0..<n).map { a + Float($0) * (span + 1) / Float(n) }
        case "OFFSET_CORNERS":
            let delta = Swift.max(1, span) / Float(n)
            points = (0..<n).map { a + delta / 2 + Float($0) * delta }
        case "UNALIGN_CORNERS":
            let spacing = (span + 1) / Float(n)
            points = (0..<n).map { a + (Float($0) + 0.5) * spacing - 0.5 }
        default:
            throw call.error("unknown sampling_mode \(mode)")
        }
        return points.map { Swift.min(Swift.max($0, lo), hi) }
    }

    /// x resampled along `axis`: output position i blends the two input positions of `taps[i]`.
    static func resampleAxis(_ x: MILTensor, axis: Int, taps: [Tap]) -> MILTensor {
        let n = x.shape[axis], m = taps.count
        let outer = x.shape[..<axis].reduce(1, *), inner = x.shape[(axis + 1)...].reduce(1, *)
        let v = x.floats
        var out = [Float](repeating: 0, count: outer * m * inner)
        v.withUnsafeBufferPointer { src in
            out.withUnsafeMutableBufferPointer { dst in
                for o in 0..<outer {
                    let s = src.baseAddress! + o * n * inner, d = dst.baseAddress! + o * m * inner
                    for (i, tap) in taps.enumerated() {
                        let a = s + tap.lo * inner, b = s + tap.hi * inner, row = d + i * inner
                        if tap.weight == 0 {
                            row.update(from: a, count: inner)
                        } else {
                            for j in 0..<inner { row[j] = a[j] + tap.weight * (b[j] - a[j]) }
                        }
                    }
                }
            }
        }
        var shape = x.shape
        shape[axis] = m
        return MILTensor(floats: out, shape: shape, dataType: x.dataType)
    }

    /// Boxes in image coordinates scaled by `(H-1, W-1)` when normalized and by `spatial_scale`;
    /// each box's grid is its sampling mode's grid over the box. Points outside the image take
    /// `pad_value` (iOS16 and later); iOS15 clamps them to the edge.
    static func cropResize(_ call: MILOpCall) throws -> MILTensor {
        let x = try call.tensor("x")
        guard x.rank == 4 else { throw call.error("x \(x.shape) must be [B, C, H, W]") }
        let b = x.shape[0], c = x.shape[1], h = x.shape[2], w = x.shape[3]
        let th = try call.int("target_height", default: 1), tw = try call.int("target_width", default: 1)
        guard th > 0, tw > 0 else { throw call.error("target sizes must be positive") }
        let normalized = try call.bool("normalized_coordinates", default: false)
        let scale = try call.float("spatial_scale", default: 1)
        let boxMode = try call.string("box_coordinate_mode", default: "CORNERS_HEIGHT_FIRST")
        let mode = try call.string("sampling_mode", default: "DEFAULT")
        let padValue: Float? = call.has("pad_value") ? try call.float("pad_value", default: 0) : nil

        // (image, four coordinates) per crop, and the output's leading axes.
        var crops: [(image: Int, box: [Float])] = []
        let lead: [Int]
        if let boxes = try call.optionalTensor("boxes") {
            guard boxes.rank == 2, boxes.shape[1] == 4 else { throw call.error("boxes \(boxes.shape) must be [N, 4]") }
            let nBoxes = boxes.shape[0], bv = boxes.floats
            let indices = try call.optionalTensor("box_indices")?.ints ?? Array(0..<nBoxes)
            guard indices.count == nBoxes else { throw call.error("box_indices has \(indices.count) values for \(nBoxes) boxes") }
            for i in 0..<nBoxes {
                guard indices[i] >= 0 && indices[i] < b else { throw call.error("box index \(indices[i]) is out of range for \(b) images") }
                crops.append((indices[i], Array(bv[(i * 4)..<(i * 4 + 4)])))
            }
            lead = [nBoxes]
        } else {
            let roi = try call.tensor("roi")
            guard roi.rank == 5, roi.shape[2] == 4 || roi.shape[2] == 5 else { throw call.error("roi \(roi.shape) must be [N, 1, 4 or 5, 1, 1]") }
            let nBoxes = roi.shape[0], k = roi.shape[2], rv = roi.floats
            for i in 0..<nBoxes {
                let row = Array(rv[(i * k)..<(i * k + k)])
                if k == 5 {
                    let image = Int(row[0])
                    guard image >= 0 && image < b else { throw call.error("box index \(image) is out of range for \(b) images") }
                    crops.append((image, Array(row[1...])))
                } else {
                    for image in 0..<b { crops.append((image, row)) }
                }
            }
            lead = [nBoxes, k == 5 ? 1 : b]
        }
        let plane = h * w
        let xv = x.floats
        var out: [Float] = []
        out.reserveCapacity(crops.count * c * th * tw)
        for (image, v) in crops {
            var h0: Float, w0: Float, h1: Float, w1: Float
            switch boxMode {
            case "CORNERS_HEIGHT_FIRST": (h0, w0, h1, w1) = (v[0], v[1], v[2], v[3])
            case "CORNERS_WIDTH_FIRST": (w0, h0, w1, h1) = (v[0], v[1], v[2], v[3])
            case "CENTER_SIZE_HEIGHT_FIRST": (h0, w0, h1, w1) = (v[0] - v[2] / 2, v[1] - v[3] / 2, v[0] + v[2] / 2, v[1] + v[3] / 2)
            case "CENTER_SIZE_WIDTH_FIRST": (w0, h0, w1, h1) = (v[0] - v[2] / 2, v[1] - v[3] / 2, v[0] + v[2] / 2, v[1] + v[3] / 2)
            default: throw call.error("unknown box_coordinate_mode \(boxMode)")
            }
            let sh = (normalized ? Float(h - 1) : 1) * scale, sw = (normalized ? Float(w - 1) : 1) * scale
            let rows = try grid(call, mode, from: h0 * sh, to: h1 * sh, count: th)
            let cols = try grid(call, mode, from: w0 * sw, to: w1 * sw, count: tw)
            let rowOutside = rows.map { $0 < 0 || $0 > Float(h - 1) }, colOutside = cols.map { $0 < 0 || $0 > Float(w - 1) }
            let rowTaps = linearTaps(rows, size: h), colTaps = linearTaps(cols, size: w)
            let source = MILTensor(floats: Array(xv[(image * c * plane)..<((image + 1) * c * plane)]), shape: [c, h, w])
            var sampled = resampleAxis(resampleAxis(source, axis: 1, taps: rowTaps), axis: 2, taps: colTaps).floats
            if let padValue {
                for ch in 0..<c {
                    for r in 0..<th {
                        for q in 0..<tw where rowOutside[r] || colOutside[q] { sampled[(ch * th + r) * tw + q] = padValue }
                    }
                }
            }
            out.append(contentsOf: sampled)
        }
        return MILTensor(floats: out, shape: lead + [c, th, tw], dataType: x.dataType)
    }

    /// `resample`: samples each image at the (x, y) points of `coordinates` [B, H', W', 2].
    static func resample(_ call: MILOpCall, _ x: MILTensor, coordinates: MILTensor, sampling: String, padding: String, padValue: Float,
                         coordinatesMode: String, alignCorners: Bool) throws -> MILTensor {
        guard x.rank == 4, coordinates.rank == 4, coordinates.shape[3] == 2, coordinates.shape[0] == x.shape[0] else {
            throw call.error("x \(x.shape) must be [B, C, H, W] and coordinates \(coordinates.shape) [B, H', W', 2]")
        }
        guard ["bilinear", "nearest"].contains(sampling.lowercased()) else { throw call.error("unknown sampling_mode \(sampling)") }
        guard ["constant", "border", "reflection", "symmetric"].contains(padding.lowercased()) else { throw call.error("unknown padding_mode \(padding)") }
        let pad = padding.lowercased(), nearest = sampling.lowercased() == "nearest"
        let b = x.shape[0], c = x.shape[1], h = x.shape[2], w = x.shape[3], oh = coordinates.shape[1], ow = coordinates.shape[2]
        func pixel(_ v: Float, _ n: Int) throws -> Float {
            switch coordinatesMode.lowercased() {
            case "unnormalized": return v
            case "normalized_minus_one_to_one": return alignCorners ? (v + 1) / 2 * Float(n - 1) : ((v + 1) * Float(n) - 1) / 2
            case "normalized_zero_to_one": return alignCorners ? v * Float(n - 1) : v * Float(n) - 0.5
            default: throw call.error("unknown coordinates_mode \(coordinatesMode)")
            }
        }
        // An index of the padded image: its source index, or nil for the constant padding.
        func source(_ i: Int, _ n: Int) -> Int? {
            if i >= 0 && i < n { return i }
            switch pad {
            case "border": return Swift.min(Swift.max(i, 0), n - 1)
            case "reflection":
                guard n > 1 else { return 0 }
                let period = 2 * (n - 1), m = ((i % period) + period) % period
                return m < n ? m : period - m
            case "symmetric":
                let period = 2 * n, m = ((i % period) + period) % period
                return m < n ? m : period - 1 - m
            default: return nil
            }
        }
        let xv = x.floats, cv = coordinates.floats
        var out = [Float](repeating: 0, count: b * c * oh * ow)
        for image in 0..<b {
            for r in 0..<oh {
                for q in 0..<ow {
                    let at = ((image * oh + r) * ow + q) * 2
                    let px = try pixel(cv[at], w), py = try pixel(cv[at + 1], h)
                    // Up to four (row, column, weight) taps.
                    var taps: [(Int?, Int?, Float)] = []
                    if nearest {
                        taps = [(source(Int((py + 0.5).rounded(.down)), h), source(Int((px + 0.5).rounded(.down)), w), 1)]
                    } else {
                        let y0 = py.rounded(.down), x0 = px.rounded(.down), fy = py - y0, fx = px - x0
                        let iy = Int(y0), ix = Int(x0)
                        taps = [(source(iy, h), source(ix, w), (1 - fy) * (1 - fx)), (source(iy, h), source(ix + 1, w), (1 - fy) * fx),
                                (source(iy + 1, h), source(ix, w), fy * (1 - fx)), (source(iy + 1, h), source(ix + 1, w), fy * fx)]
                    }
                    for ch in 0..<c {
                        let base = (image * c + ch) * h * w
                        var acc: Float = 0
                        for (sy, sx, weight) in taps where weight != 0 {
                            if let sy, let sx { acc += weight * xv[base + sy * w + sx] } else { acc += weight * padValue }
                        }
                        out[((image * c + ch) * oh + r) * ow + q] = acc
                    }
                }
            }
        }
        return MILTensor(floats: out, shape: [b, c, oh, ow], dataType: x.dataType)
    }
}
