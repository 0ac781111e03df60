import CortadoSpec

/// The layers that move data: padding, crop, resize, reshape, permute, concat, split, slice.
enum SpatialLayers {
    static let builders: [String: NNLayerBuilder] = [
        "padding": { spec in try PaddingLayer(spec.padding) },
        "crop": { spec in try CropLayer(spec.crop, inputs: spec.input.count) },
        "upsample": { spec in try UpsampleLayer(spec.upsample) },
        "resizeBilinear": { spec in try ResizeBilinearLayer(spec.resizeBilinear) },
        "cropResize": { spec in try CropResizeLayer(spec.cropResize) },
        "reshape": { spec in try ReshapeLayer(spec.reshape) },
        "flatten": { spec in try FlattenLayer(spec.flatten) },
        "permute": { spec in try PermuteLayer(spec.permute) },
        "reorganizeData": { spec in try ReorganizeDataLayer(spec.reorganizeData) },
        "concat": { spec in try ConcatLayer(spec.concat, inputs: spec.input.count) },
        "split": { spec in try SplitLayer(spec.split, outputs: spec.output.count) },
        "slice": { spec in try SliceLayer(spec.slice) },
        "sequenceRepeat": { spec in SequenceRepeatLayer(spec.sequenceRepeat) },
    ]
}

/// Copies of strided float data, shared by the data-moving layers.
enum NNCopy {
    /// Copies `rows` rows of `width` floats from `src` (row pitch `srcPitch`) to `dst` (row pitch
    /// `dstPitch`); a single copy when both are contiguous.
    @inline(__always)
    static func rows(_ src: UnsafePointer<Float>, pitch srcPitch: Int, to dst: UnsafeMutablePointer<Float>, pitch dstPitch: Int, rows: Int, width: Int) {
        if srcPitch == width && dstPitch == width {
            dst.update(from: src, count: rows * width)
            return
        }
        for r in 0..<rows { (dst + r * dstPitch).update(from: src + r * srcPitch, count: width) }
    }

    /// Copies `count` floats taken every `stride` floats from `src` into contiguous `dst`.
    @inline(__always)
    static func strided(_ src: UnsafePointer<Float>, stride: Int, to dst: UnsafeMutablePointer<Float>, count: Int) {
        if stride == 1 {
            dst.update(from: src, count: count)
        } else {
            for i in 0..<count { dst[i] = src[i * stride] }
        }
    }

    /// Transposes a `rows × cols` matrix into a `cols × rows` one.
    @inline(__always)
    static func transpose(_ src: UnsafePointer<Float>, rows: Int, cols: Int, to dst: UnsafeMutablePointer<Float>) {
        // Blocks of 16×16 keep both sides in cache.
        let block = 16
        var r0 = 0
        while r0 < rows {
            let r1 = min(rows, r0 + block)
            var c0 = 0
            while c0 < cols {
                let c1 = min(cols, c0 + block)
                for r in r0..<r1 {
                    let s = src + r * cols
                    for c in c0..<c1 { dst[c * rows + r] = s[c] }
                }
                c0 = c1
            }
            r0 = r1
        }
    }
}
