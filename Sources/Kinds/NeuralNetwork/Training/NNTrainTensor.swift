/// One example's blob while training: `[C, H, W]` row-major, in Double. Training runs the
/// classic rank-5 layout with one sequence step and one batch row per example, so a blob
/// is one image (or a vector `[C, 1, 1]`); a mini-batch is its examples one after another.
/// Double keeps the summed gradients of a mini-batch exact enough to match a reference run
/// to 1e-6; weights go back to Float32 only when a spec is written.
struct NNTrainTensor {
    var c: Int, h: Int, w: Int
    var data: [Double]

    init(c: Int, h: Int, w: Int, data: [Double]) {
        self.c = c; self.h = h; self.w = w; self.data = data
    }

    init(zerosC c: Int, h: Int, w: Int) {
        self.init(c: c, h: h, w: w, data: [Double](repeating: 0, count: c * h * w))
    }

    init(zerosLike t: NNTrainTensor) { self.init(zerosC: t.c, h: t.h, w: t.w) }

    var count: Int { data.count }
    var shapeText: String { "[\(c), \(h), \(w)]" }

    /// Adds `other` elementwise (gradients reaching a blob from several consumers).
    mutating func add(_ other: NNTrainTensor) {
        for i in data.indices { data[i] += other.data[i] }
    }
}

/// A layer's weights or bias while training. Updatable ones gather a gradient and carry the
/// optimizer's state; the others only take part in the forward and backward passes.
final class NNTrainParameter {
    /// e.g. "layer 'dense1' weights", for messages.
    let name: String
    var value: [Double]
    var grad: [Double]
    let updatable: Bool
    /// Optimizer state: SGD's velocity (`first`), Adam's moments (`first`, `second`).
    var first: [Double]
    var second: [Double]

    init(name: String, value: [Float], updatable: Bool) {
        self.name = name
        self.value = value.map(Double.init)
        self.updatable = updatable
        grad = updatable ? [Double](repeating: 0, count: value.count) : []
        first = updatable ? [Double](repeating: 0, count: value.count) : []
        second = first
    }

    func zeroGrad() {
        for i in grad.indices { grad[i] = 0 }
    }
}
