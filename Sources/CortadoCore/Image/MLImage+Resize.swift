/// Resizing an image to a model's input size (Vision's crop-and-scale options).
///
/// Sampling is bilinear with half-pixel centres: destination pixel `x` of a run of `n`
/// pixels showing source span `[s0, s0 + len)` reads source coordinate
/// `u = s0 + (x + 0.5) * len / n - 0.5`, clamped to `[0, W - 1]`, and blends pixels
/// `floor(u)` and `floor(u) + 1` (the edge pixel repeats). The same along rows. 8-bit results
/// are rounded to the nearest integer; GRAY16F stays half float. No antialiasing filter is
/// applied when shrinking.
///
/// - centerCrop: scale `s = max(dw / W, dh / H)`; the source span is the centred
///   `dw / s` × `dh / s` window; the destination is filled.
/// - scaleFit: scale `s = min(dw / W, dh / H)`; the whole source lands in a centred
///   `round(W * s)` × `round(H * s)` box (offset `(dw - boxW) / 2`, rounded down); the border
///   outside it is zero.
/// - scaleFill: the whole source onto the whole destination.
extension MLImage {
    /// The image resampled to `width` × `height` by `mode` (default: the image's own
    /// `cropAndScale`). Returns the image itself when it already has that size.
    public func resized(width dw: Int, height dh: Int, mode: MLImageCropAndScale? = nil) -> MLImage {
        precondition(dw > 0 && dh > 0, "resize target must not be empty")
        if dw == width && dh == height { return self }
        let (W, H) = (Double(width), Double(height))
        // Source window (sx0, sy0, sw, sh) and destination box (ox, oy, bw, bh).
        var (sx0, sy0, sw, sh) = (0.0, 0.0, W, H)
        var (ox, oy, bw, bh) = (0, 0, dw, dh)
        switch mode ?? cropAndScale {
        case .scaleFill:
            break
        case .centerCrop:
            let s = Swift.max(Double(dw) / W, Double(dh) / H)
            (sw, sh) = (Double(dw) / s, Double(dh) / s)
            (sx0, sy0) = ((W - sw) / 2, (H - sh) / 2)
        case .scaleFit:
            let s = Swift.min(Double(dw) / W, Double(dh) / H)
            bw = Swift.max(1, Swift.min(dw, Int((W * s).rounded())))
            bh = Swift.max(1, Swift.min(dh, Int((H * s).rounded())))
            (ox, oy) = ((dw - bw) / 2, (dh - bh) / 2)
        }
        let xs = Self.taps(count: bw, start: sx0, span: sw, limit: width)
        let ys = Self.taps(count: bh, start: sy0, span: sh, limit: height)
        let channels = pixelFormat == .gray16f ? 1 : pixelFormat.bytesPerPixel
        var out = [UInt8](repeating: 0, count: dw * dh * pixelFormat.bytesPerPixel)
        data.withUnsafeBufferPointer { src in
            out.withUnsafeMutableBufferPointer { dst in
                if pixelFormat == .gray16f {
                    Self.resampleHalf(src, width: width, into: dst, rowLength: dw, ox: ox, oy: oy, xs: xs, ys: ys)
                } else {
                    Self.resampleBytes(src, width: width, channels: channels, into: dst, rowLength: dw, ox: ox, oy: oy, xs: xs, ys: ys)
                }
            }
        }
        // Sizes are positive and the byte count matches, so this cannot fail.
        return try! MLImage(width: dw, height: dh, pixelFormat: pixelFormat, data: out, cropAndScale: cropAndScale)
    }

    /// One destination position's two source indices and the weight of the second.
    struct Tap {
        var i0: Int
        var i1: Int
        var t: Float
    }

    static func taps(count: Int, start: Double, span: Double, limit: Int) -> [Tap] {
        let step = span / Double(count)
        return (0..<count).map { x in
            let u = Swift.min(Swift.max(start + (Double(x) + 0.5) * step - 0.5, 0), Double(limit - 1))
            let i0 = Int(u)
            return Tap(i0: i0, i1: Swift.min(i0 + 1, limit - 1), t: Float(u - Double(i0)))
        }
    }

    private static func resampleBytes(_ src: UnsafeBufferPointer<UInt8>, width: Int, channels: Int, into dst: UnsafeMutableBufferPointer<UInt8>,
                                      rowLength: Int, ox: Int, oy: Int, xs: [Tap], ys: [Tap]) {
        let stride = width * channels
        xs.withUnsafeBufferPointer { xs in
            for (y, ty) in ys.enumerated() {
                let r0 = src.baseAddress! + ty.i0 * stride, r1 = src.baseAddress! + ty.i1 * stride
                let wy = ty.t
                var d = dst.baseAddress! + ((oy + y) * rowLength + ox) * channels
                for tx in xs {
                    let a = tx.i0 * channels, b = tx.i1 * channels, wx = tx.t
                    for k in 0..<channels {
                        let top = Float(r0[a + k]) + wx * (Float(r0[b + k]) - Float(r0[a + k]))
                        let bottom = Float(r1[a + k]) + wx * (Float(r1[b + k]) - Float(r1[a + k]))
                        d[k] = UInt8(top + wy * (bottom - top) + 0.5)
                    }
                    d += channels
                }
            }
        }
    }

    private static func resampleHalf(_ src: UnsafeBufferPointer<UInt8>, width: Int, into dst: UnsafeMutableBufferPointer<UInt8>,
                                     rowLength: Int, ox: Int, oy: Int, xs: [Tap], ys: [Tap]) {
        let s = UnsafeRawPointer(src.baseAddress!)
        let d = UnsafeMutableRawPointer(dst.baseAddress!)
        func at(_ i: Int) -> Float { MLImage.half(s, i) }
        for (y, ty) in ys.enumerated() {
            for (x, tx) in xs.enumerated() {
                let top = at(ty.i0 * width + tx.i0) + tx.t * (at(ty.i0 * width + tx.i1) - at(ty.i0 * width + tx.i0))
                let bottom = at(ty.i1 * width + tx.i0) + tx.t * (at(ty.i1 * width + tx.i1) - at(ty.i1 * width + tx.i0))
                let bits = Float16(top + ty.t * (bottom - top)).bitPattern.littleEndian
                d.storeBytes(of: bits, toByteOffset: 2 * ((oy + y) * rowLength + ox + x), as: UInt16.self)
            }
        }
    }
}
