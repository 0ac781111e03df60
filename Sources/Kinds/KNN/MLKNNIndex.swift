/// The samples of a k-NN model and the index that finds the nearest ones: a linear scan
/// or a k-d tree (`SingleKdTreeIndex`), built once at load time.
///
/// Both indexes return exactly the same neighbours: the k smallest samples under the
/// order (squared distance, sample index). The tree only prunes a box when its lower
/// bound is strictly greater than the current k-th distance, and its bound sums the
/// per-dimension gaps in the same order as the distance itself, so in floating point it
/// never exceeds the distance of a sample inside the box.
struct MLKNNIndex: Sendable {
    let dims: Int
    let count: Int
    /// Samples row-major, in the model's order.
    let samples: [Double]
    let tree: MLKNNKdTree?

    init(dims: Int, samples: [Double], leafSize: Int?) {
        self.dims = dims
        self.count = dims == 0 ? 0 : samples.count / dims
        self.samples = samples
        self.tree = leafSize.map { MLKNNKdTree(dims: dims, samples: samples, count: samples.count / max(dims, 1), leafSize: $0) }
    }

    /// Finds the k nearest samples to `query`; returns how many were found (min(k, count)),
    /// written nearest first into `out` (capacity k).
    func search(_ query: UnsafePointer<Double>, k: Int, into out: UnsafeMutablePointer<MLKNNNeighbor>) -> Int {
        var heap = MLKNNNeighborHeap(storage: out, capacity: min(k, count))
        if let tree {
            tree.search(query, heap: &heap)
        } else {
            samples.withUnsafeBufferPointer { s in
                let base = s.baseAddress!
                for i in 0..<count {
                    heap.offer(MLKNNNeighbor(distance: mlKNNSquaredDistance(query, base + i * dims, dims), sample: i))
                }
            }
        }
        return heap.sortAscending()
    }
}

/// A k-d tree over the samples: each node splits its points at the median of the
/// dimension where they spread most; nodes with at most `leafSize` points are leaves.
/// Every node keeps its points' bounding box for pruning.
struct MLKNNKdTree: Sendable {
    struct Node: Sendable {
        /// Range of the node's points in `points`/`ids`.
        var start: Int
        var end: Int
        /// Children (node indices), or -1 for a leaf.
        var left: Int
        var right: Int
    }

    let dims: Int
    /// Points reordered so each node's points are contiguous.
    private(set) var points: [Double] = []
    /// The model's sample index of each reordered point.
    private(set) var ids: [Int] = []
    private(set) var nodes: [Node] = []
    /// Per node: `dims` lower bounds then `dims` upper bounds.
    private(set) var boxes: [Double] = []

    init(dims: Int, samples: [Double], count: Int, leafSize: Int) {
        self.dims = dims
        guard count > 0, dims > 0 else { return }
        var order = Array(0..<count)
        nodes.reserveCapacity(2 * (count / max(leafSize, 1)) + 1)
        _ = build(&order, 0, count, samples: samples, leafSize: max(leafSize, 1))
        ids = order
        points.reserveCapacity(count * dims)
        for i in order { points += samples[(i * dims)..<((i + 1) * dims)] }
    }

    /// Builds the node for `order[start..<end]` and returns its index.
    private mutating func build(_ order: inout [Int], _ start: Int, _ end: Int, samples: [Double], leafSize: Int) -> Int {
        let me = nodes.count
        nodes.append(Node(start: start, end: end, left: -1, right: -1))
        var lo = [Double](repeating: .infinity, count: dims)
        var hi = [Double](repeating: -.infinity, count: dims)
        for i in order[start..<end] {
            for d in 0..<dims {
                let v = samples[i * dims + d]
                lo[d] = Swift.min(lo[d], v)
                hi[d] = Swift.max(hi[d], v)
            }
        }
        boxes += lo
        boxes += hi
        guard end - start > leafSize else { return me }
        var split = 0
        var spread = -1.0
        for d in 0..<dims where hi[d] - lo[d] > spread {
            spread = hi[d] - lo[d]
            split = d
        }
        guard spread > 0 else { return me }  // all points equal: nothing to split
        // Median split on the widest dimension (ties ordered by sample index: deterministic).
        order[start..<end].sort { a, b in
            let va = samples[a * dims + split], vb = samples[b * dims + split]
            return va < vb || (va == vb && a < b)
        }
        let mid = (start + end) / 2
        let left = build(&order, start, mid, samples: samples, leafSize: leafSize)
        let right = build(&order, mid, end, samples: samples, leafSize: leafSize)
        nodes[me].left = left
        nodes[me].right = right
        return me
    }

    /// Lower bound of the squared distance from `q` to any point in node `n`'s box.
    @inline(__always)
    private func boxDistance(_ q: UnsafePointer<Double>, _ n: Int, _ box: UnsafePointer<Double>) -> Double {
        let lo = box + 2 * dims * n
        let hi = lo + dims
        var s = 0.0
        for d in 0..<dims {
            let v = q[d]
            if v < lo[d] {
                let t = lo[d] - v
                s += t * t
            } else if v > hi[d] {
                let t = v - hi[d]
                s += t * t
            }
        }
        return s
    }

    func search(_ q: UnsafePointer<Double>, heap: inout MLKNNNeighborHeap) {
        guard !nodes.isEmpty, heap.capacity > 0 else { return }
        points.withUnsafeBufferPointer { p in
            boxes.withUnsafeBufferPointer { b in
                nodes.withUnsafeBufferPointer { nb in
                    ids.withUnsafeBufferPointer { idb in
                        visit(0, bound: boxDistance(q, 0, b.baseAddress!), q, &heap,
                              points: p.baseAddress!, boxes: b.baseAddress!, nodes: nb.baseAddress!, ids: idb.baseAddress!)
                    }
                }
            }
        }
    }

    private func visit(_ n: Int, bound: Double, _ q: UnsafePointer<Double>, _ heap: inout MLKNNNeighborHeap,
                       points: UnsafePointer<Double>, boxes: UnsafePointer<Double>,
                       nodes: UnsafePointer<Node>, ids: UnsafePointer<Int>) {
        // Strictly greater: a box at exactly the k-th distance may hold a sample that wins the tie by index.
        if heap.isFull && bound > heap.worst.distance { return }
        let node = nodes[n]
        if node.left < 0 {
            for i in node.start..<node.end {
                heap.offer(MLKNNNeighbor(distance: mlKNNSquaredDistance(q, points + i * dims, dims), sample: ids[i]))
            }
            return
        }
        let bl = boxDistance(q, node.left, boxes)
        let br = boxDistance(q, node.right, boxes)
        if bl <= br {
            visit(node.left, bound: bl, q, &heap, points: points, boxes: boxes, nodes: nodes, ids: ids)
            visit(node.right, bound: br, q, &heap, points: points, boxes: boxes, nodes: nodes, ids: ids)
        } else {
            visit(node.right, bound: br, q, &heap, points: points, boxes: boxes, nodes: nodes, ids: ids)
            visit(node.left, bound: bl, q, &heap, points: points, boxes: boxes, nodes: nodes, ids: ids)
        }
    }

    var leafCount: Int { nodes.filter { $0.left < 0 }.count }
    var depth: Int {
        func d(_ n: Int) -> Int { nodes[n].left < 0 ? 1 : 1 + Swift.max(d(nodes[n].left), d(nodes[n].right)) }
        return nodes.isEmpty ? 0 : d(0)
    }
}
