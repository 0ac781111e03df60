import CortadoCore
import CortadoSpec

/// A blob's shape: a tensor of any rank (0…N) with a classic `[Seq, Batch, C, H, W]` view.
///
/// Why one type for both worlds: every classic layer (specification ≤ 3) and every layer written
/// against `NNLayer` reads `s`, `b`, `c`, `h`, `w`, while the Core ML 3 layers of networks with
/// `EXACT_ARRAY_MAPPING` see tensors of any rank with NumPy broadcasting. A shape therefore
/// carries its `extents` (one per axis) and keeps the five classic values as a right-aligned
/// view of them: `w` is the last axis, `h` the one before, then `c` and `b`, and `s` is the
/// product of every axis before those four (1 for missing axes). A classic blob is simply a
/// rank-5 tensor `[S, B, C, H, W]`, so classic layers and the plan run unchanged, and rank-N
/// layers (`NNTensorLayer`) read `extents`. Setting a classic value rewrites the matching
/// axis, growing the rank only as far as needed (setting `s` on a rank > 5 tensor folds its
/// leading axes into one).
public struct NNShape: Hashable, Sendable, CustomStringConvertible {
    /// The tensor's size along each axis, outermost first (empty for a scalar).
    public private(set) var extents: [Int]
    public var s: Int { didSet { extentsFromView() } }
    public var b: Int { didSet { extentsFromView() } }
    public var c: Int { didSet { extentsFromView() } }
    public var h: Int { didSet { extentsFromView() } }
    public var w: Int { didSet { extentsFromView() } }

    public init(s: Int = 1, b: Int = 1, c: Int, h: Int = 1, w: Int = 1) {
        self.s = s; self.b = b; self.c = c; self.h = h; self.w = w
        extents = [s, b, c, h, w]
    }

    /// A rank-N tensor shape (`EXACT_ARRAY_MAPPING` blobs and the Core ML 3 layers).
    public init(tensor extents: [Int]) {
        self.extents = extents
        let r = extents.count
        func at(_ fromEnd: Int) -> Int { r >= fromEnd ? extents[r - fromEnd] : 1 }
        w = at(1); h = at(2); c = at(3); b = at(4)
        s = r > 4 ? extents[0..<(r - 4)].reduce(1, *) : 1
    }

    /// From a rank-1…5 shape, right-aligned onto `[S, B, C, H, W]` with leading ones, except that
    /// rank 1 is `[C]` and rank 2 is `[S, C]` (sequence of vectors), as the classic layout reads them.
    public init(_ dims: [Int]) throws {
        switch dims.count {
        case 1: self.init(c: dims[0])
        case 2: self.init(s: dims[0], c: dims[1])
        case 3: self.init(c: dims[0], h: dims[1], w: dims[2])
        case 4: self.init(b: dims[0], c: dims[1], h: dims[2], w: dims[3])
        case 5: self.init(s: dims[0], b: dims[1], c: dims[2], h: dims[3], w: dims[4])
        default: throw MLModelError(.invalidModel, "shape \(dims) has rank \(dims.count); classic layers take rank 1 to 5")
        }
        guard dims.allSatisfy({ $0 > 0 }) else { throw MLModelError(.invalidModel, "shape \(dims) has a dimension below 1") }
    }

    private mutating func extentsFromView() {
        let view = [s, b, c, h, w], r = extents.count
        if r >= 5 {
            let lead = Array(extents[0..<(r - 4)])
            extents = (lead.reduce(1, *) == s ? lead : [s]) + [b, c, h, w]
        } else {
            let needed = 5 - (view.firstIndex { $0 != 1 } ?? 5)
            extents = Array(view.suffix(Swift.max(r, needed)))
        }
    }

    /// The classic five values `[S, B, C, H, W]` (for a rank-5 blob, its extents).
    public var dims: [Int] { [s, b, c, h, w] }
    public var rank: Int { extents.count }
    public var count: Int { s * b * c * h * w }
    /// Elements of one `[C, H, W]` image.
    public var chw: Int { c * h * w }
    public var hw: Int { h * w }
    /// Number of `[C, H, W]` images (`S × B`).
    public var images: Int { s * b }
    public var description: String { "[" + extents.map(String.init).joined(separator: ", ") + "]" }
}

/// Where a blob lives while a plan runs: an offset into the workspace, in floats.
public struct NNTensor: Sendable {
    public var offset: Int
    public var shape: NNShape
    /// Laid out channel-blocked, `[images][ceil(C/16)][H][W][16]` (`NNBlockedLayout`), not planar.
    public var blocked = false
    public var count: Int { shape.count }
    /// Floats the blob takes in the workspace (a blocked one pads its channels to 16).
    public var floats: Int { blocked ? shape.images * ((shape.c + 15) / 16 * 16) * shape.hw : count }
}

/// What a kernel gets when it runs: the workspace, its scratch space and the threads it may use.
public struct NNRunContext {
    /// The workspace: every blob of the plan at its offset.
    public let base: UnsafeMutablePointer<Float>
    /// This layer's scratch space (`scratchCount` floats, uninitialised).
    public let scratch: UnsafeMutablePointer<Float>
    /// Threads a kernel may use (≥ 1).
    public let threads: Int
    /// Input 0's rows where the request left them, when the plan did not copy that network
    /// input into the workspace (only for an `NNRowReading` layer; nil otherwise).
    public var inputRows: NNInputRows? = nil

    @inline(__always) public func pointer(_ t: NNTensor) -> UnsafeMutablePointer<Float> { base + t.offset }

    /// Runs `body` over `0..<count` in up to `threads` contiguous chunks, on the calling thread
    /// plus Dispatch workers. Stays on the calling thread for small work (`count * costPerItem`
    /// below about 32k operations).
    public func parallelFor(_ count: Int, costPerItem: Int = 1, _ body: (Range<Int>) -> Void) {
        let chunks = Swift.min(threads, count, Swift.max(1, count * costPerItem / 32_768))
        if chunks <= 1 { body(0..<count); return }
        let per = (count + chunks - 1) / chunks
        NNThreads.run(workers: chunks) { i in
            let lo = i * per, hi = Swift.min(count, lo + per)
            if lo < hi { body(lo..<hi) }
        }
    }
}

/// One compiled layer: shape inference at load, a kernel at run time.
///
/// Layers are built once from their spec (weights decoded and laid out then) and are
/// immutable afterwards, so many predictions may run one layer at once.
public protocol NNLayer: AnyObject, Sendable {
    /// Output shapes for these input shapes. Throw `NNLayerError` for a shape the layer
    /// cannot take; the graph adds the layer's name and type.
    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape]
    /// Floats of scratch space `run` needs for these input shapes (default 0).
    func scratchCount(_ inputs: [NNShape]) -> Int
    /// True when output 0 may share input 0's memory (same count, element by element).
    var runsInPlace: Bool { get }
    /// This layer as an element-wise step another layer can absorb (batch norm, bias, scale,
    /// activation); nil when it cannot be folded (the default).
    var epilogue: NNEpilogueOp? { get }
    /// Lines for `cortado inspect` beyond type and shape (e.g. "3×3 stride 1, 64 filters").
    var detail: String { get }
    /// A word `cortado report --layers` adds to the layer's type: the kernel or algorithm it
    /// runs when it has several (a convolution's "winograd"); empty by default.
    var timingNote: String { get }
    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext)
}

extension NNLayer {
    public func scratchCount(_ inputs: [NNShape]) -> Int { 0 }
    public var runsInPlace: Bool { false }
    public var epilogue: NNEpilogueOp? { nil }
    public var detail: String { "" }
    public var timingNote: String { "" }
}

/// A layer that can apply element-wise steps to its output while it is still in cache
/// (convolution, inner product). `accept` returns false for a step it cannot apply.
public protocol NNEpilogueAccepting: NNLayer {
    func accept(_ op: NNEpilogueOp) -> Bool
}

/// A layer that can add a second tensor to its output (the residual add of a ResNet or
/// MobileNet block) while the output is in cache; the graph then gives it that tensor as
/// input 1, and the layer's output is the add's. `acceptResidual` returns false when it cannot.
public protocol NNResidualAccepting: NNLayer {
    func acceptResidual() -> Bool
}

/// A layer that is a plain add of two tensors (which a `NNResidualAccepting` producer of one
/// of them can take over).
public protocol NNResidualAdd: NNLayer {
    var addsTwoTensors: Bool { get }
}

/// A layer that can take over the pooling layer that follows it (its output's only reader),
/// pooling each part of its output while it is in cache. `acceptPool` returns false for a
/// pooling it cannot fold; once it returns true the layer's output is the pooled one.
public protocol NNPoolAccepting: NNLayer {
    func acceptPool(_ layer: any NNLayer) -> Bool
}

/// A network input's rows where a batch's requests left them: row r's `floats` values at
/// `pointers[r]` (float32, contiguous), read in place instead of copied into the workspace.
public struct NNInputRows {
    public let pointers: UnsafePointer<UnsafePointer<Float>>
    public let floats: Int
}

/// A layer that can read its first input as rows left in the requests (`NNInputRows`): a
/// network input whose only readers are such layers is not copied into the workspace. `run`
/// must still read the blob when `context.inputRows` is nil (rows of another data type are
/// converted into it).
public protocol NNRowReading: NNLayer {
    /// Whether `run` reads input 0 of this shape from `context.inputRows` when given them.
    func readsRows(_ input: NNShape) -> Bool
    /// The same for a step whose outputs the plan laid out as `outputs`: a layer whose kernel
    /// depends on its output's layout (blocked or planar) answers here. By default
    /// `readsRows(input)`.
    func readsRows(_ input: NNShape, outputs: [NNTensor]) -> Bool
}

extension NNRowReading {
    public func readsRows(_ input: NNShape, outputs: [NNTensor]) -> Bool { readsRows(input) }
}

/// A shape or parameter problem, reported by a layer; the graph prefixes the layer name.
public struct NNLayerError: Error, CustomStringConvertible {
    public let message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// Builds a layer from its spec. Throw `NNLayerError` for bad parameters.
public typealias NNLayerBuilder = @Sendable (CoreML_Specification_NeuralNetworkLayer) throws -> any NNLayer
