import CortadoSpec

/// Parameters of sliding-window layers (convolution, pooling, padding, crop), read the same
/// way everywhere.
enum NNWindow {
    /// A (height, width) pair of positive values, as `kernelSize`, `stride` and
    /// `dilationFactor` hold them; empty means `fallback` for both.
    static func pair(_ v: [UInt64], _ fallback: Int, _ what: String) throws -> (Int, Int) {
        if v.isEmpty { return (fallback, fallback) }
        guard v.count == 2, v[0] > 0, v[1] > 0, v[0] < 1 << 31, v[1] < 1 << 31 else {
            throw NNLayerError("\(what) must hold two positive values, got \(v)")
        }
        return (Int(v[0]), Int(v[1]))
    }

    /// The two `EdgeSizes` (height, then width) of a `BorderAmounts`; absent means 0.
    static func borders(_ b: CoreML_Specification_BorderAmounts, what: String) throws -> (top: Int, bottom: Int, left: Int, right: Int) {
        let e = b.borderAmounts
        guard e.count == 0 || e.count == 2 else {
            throw NNLayerError("\(what) must give 2 edge sizes (height, width), not \(e.count)")
        }
        guard e.count == 2 else { return (0, 0, 0, 0) }
        let v = [e[0].startEdgeSize, e[0].endEdgeSize, e[1].startEdgeSize, e[1].endEdgeSize]
        guard v.allSatisfy({ $0 < 1 << 31 }) else { throw NNLayerError("\(what) \(v) is too large") }
        return (Int(v[0]), Int(v[1]), Int(v[2]), Int(v[3]))
    }

    /// Same padding along one axis: `total` padding split so that the larger half goes
    /// after the data (BOTTOM_RIGHT_HEAVY) or before it (TOP_LEFT_HEAVY); returns the part
    /// before.
    @inline(__always) static func before(total: Int, topLeftHeavy: Bool) -> Int {
        topLeftHeavy ? total - total / 2 : total / 2
    }
}
