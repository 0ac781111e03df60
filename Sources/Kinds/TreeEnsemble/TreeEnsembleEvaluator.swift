/// Runs a compiled forest over rows of Doubles, writing the raw per-dimension sums
/// (base value plus every tree's leaf, trees in ascending `treeId` order).
///
/// Rows go in blocks of `blockRows`. A block's rows without NaN are copied column-major into
/// a small buffer (value of feature `f` for block row `r` at `f * blockRows + r`; the fast
/// forms store `f * blockRows`), then walk each tree together, one level at a time across
/// the block: the walks are independent, so the core overlaps their memory latency, and a
/// step is a handful of instructions with no branch. Rows holding NaN walk the generic form
/// (Core ML's missing-value routing) one at a time. Every path adds the trees in the same
/// order, so a row's result does not depend on its neighbours.
///
/// The layout lives in memory allocated once at load, read through raw pointers in the loops.
final class TreeEnsembleEvaluator: @unchecked Sendable {
    typealias GenericNode = TreeEnsembleLayout.GenericNode

    /// Rows per block: 64 measured best (32 is ~5% slower, 256 ~50% slower), fewer when
    /// rows are so wide that the block buffer would pass 256 KB.
    let blockRows: Int

    let dimensions: Int
    /// Values a row must hold: one more than the largest feature index read.
    let featureCount: Int
    let layout: TreeEnsembleLayout
    private let trees: UnsafeMutableBufferPointer<TreeEnsembleLayout.Tree>
    /// The fast forms, split by field so each load is one scaled address.
    private let thresholds: UnsafeMutableBufferPointer<Double>
    /// Feature index × `blockRows`: the column's offset in the block buffer.
    private let columns: UnsafeMutableBufferPointer<Int32>
    /// Compact form: node `i`'s next node is `children[2i + (x ≤ c ? 1 : 0)]` (tree-relative;
    /// a leaf's children are itself), so choosing the child is a load, not a branch.
    private let children: UnsafeMutableBufferPointer<Int32>
    private let compactLeaf: UnsafeMutableBufferPointer<Int32>
    private let genericNodes: UnsafeMutableBufferPointer<GenericNode>
    private let leafValues: UnsafeMutableBufferPointer<Double>
    private let base: UnsafeMutableBufferPointer<Double>

    init(_ forest: TreeForest) {
        let layout = TreeEnsembleLayout(forest)
        self.layout = layout
        dimensions = forest.dimensions
        featureCount = forest.featureCount
        let blockRows = max(1, min(64, (1 << 15) / max(forest.featureCount, 1)))
        self.blockRows = blockRows
        trees = Self.copy(layout.trees)
        thresholds = Self.copy(layout.fastNodes.map(\.threshold))
        columns = Self.copy(layout.fastNodes.map { $0.feature &* Int32(blockRows) })
        children = Self.copy(layout.compactChildren)
        compactLeaf = Self.copy(layout.compactLeaf)
        genericNodes = Self.copy(layout.genericNodes)
        leafValues = Self.copy(layout.leafValues)
        base = Self.copy(forest.base)
    }

    deinit {
        trees.deallocate()
        thresholds.deallocate()
        columns.deallocate()
        children.deallocate()
        compactLeaf.deallocate()
        genericNodes.deallocate()
        leafValues.deallocate()
        base.deallocate()
    }

    private static func copy<T>(_ values: [T]) -> UnsafeMutableBufferPointer<T> {
        // Never a zero-byte allocation, but the buffer's count is the values' count.
        let buffer = UnsafeMutableBufferPointer<T>.allocate(capacity: max(values.count, 1))
        _ = buffer.initialize(from: values)
        return UnsafeMutableBufferPointer(start: buffer.baseAddress, count: values.count)
    }

    /// Evaluates `count` rows (`rowStride` Doubles apart, at least `featureCount` each) and
    /// writes each row's `dimensions` sums at `out + row * outStride`.
    func evaluate(rows x: UnsafePointer<Double>, count: Int, rowStride: Int,
                  into out: UnsafeMutablePointer<Double>, outStride: Int) {
        let block = blockRows
        let width = featureCount
        withUnsafeTemporaryAllocation(of: Double.self, capacity: max(block * width, 1)) { columnBuffer in
            withUnsafeTemporaryAllocation(of: UnsafeMutablePointer<Double>.self, capacity: block) { outBuffer in
                withUnsafeTemporaryAllocation(of: Int.self, capacity: block) { indexBuffer in
                    let xb = columnBuffer.baseAddress!
                    let outs = outBuffer.baseAddress!
                    let index = indexBuffer.baseAddress!
                    var start = 0
                    while start < count {
                        let n = min(block, count - start)
                        var fast = 0
                        for r in 0..<n {
                            let row = x + (start + r) * rowStride
                            let o = out + (start + r) * outStride
                            for d in 0..<dimensions { o[d] = base[d] }
                            var nan = false
                            for f in 0..<width {
                                let v = row[f]
                                nan = nan || v.isNaN
                                xb[f &* block &+ fast] = v
                            }
                            if nan {
                                evaluateGeneric(row, into: o)
                            } else {
                                outs[fast] = o
                                fast += 1
                            }
                        }
                        if fast > 0 { evaluateFast(xb, outs: outs, count: fast, index: index) }
                        start += n
                    }
                }
            }
        }
    }

    /// The block's NaN-free rows (column-major in `xb`) through every tree's fast form.
    @inline(__always)
    private func evaluateFast(_ xb: UnsafePointer<Double>, outs: UnsafeMutablePointer<UnsafeMutablePointer<Double>>,
                              count n: Int, index: UnsafeMutablePointer<Int>) {
        let thresholdsAll = UnsafePointer(thresholds.baseAddress!)
        let columnsAll = UnsafePointer(columns.baseAddress!)
        let leavesAll = UnsafePointer(leafValues.baseAddress!)
        for t in 0..<trees.count {
            let tree = trees[t]
            var leaves = leavesAll + tree.leafBase
            switch tree.kind {
            case .perfect:
                Self.walkPerfect(thresholdsAll + tree.fastBase, columnsAll + tree.fastBase, depth: tree.depth,
                                 xb: xb, count: n, index: index)
                leaves = leavesAll + tree.perfectLeafBase - ((1 << tree.depth) - 1) * (tree.slot >= 0 ? 1 : dimensions)
            case .compact:
                Self.walkCompact(thresholdsAll + tree.fastBase, columnsAll + tree.fastBase,
                                 UnsafePointer(children.baseAddress!) + 2 * tree.fastBase, xb: xb, count: n, index: index)
                let leafOf = UnsafePointer(compactLeaf.baseAddress!) + tree.fastBase
                for r in 0..<n { index[r] = Int(leafOf[index[r]]) }
            case .generic:
                // Gather the row back from the block's columns.
                withUnsafeTemporaryAllocation(of: Double.self, capacity: max(featureCount, 1)) { row in
                    for r in 0..<n {
                        for f in 0..<featureCount { row[f] = xb[f &* blockRows &+ r] }
                        index[r] = genericLeaf(tree, UnsafePointer(row.baseAddress!))
                    }
                }
            }
            if tree.slot >= 0 {
                let slot = tree.slot
                for r in 0..<n { outs[r][slot] += leaves[index[r]] }
            } else {
                let d = dimensions
                for r in 0..<n {
                    let values = leaves + index[r] * d
                    let o = outs[r]
                    for k in 0..<d { o[k] += values[k] }
                }
            }
        }
    }

    /// 1 for true, 0 for false, with no branch (a compare and `setcc`/`adc`).
    @inline(__always)
    static func bit(_ b: Bool) -> Int { Int(unsafeBitCast(b, to: UInt8.self)) }

    /// Walks the block down a perfect tree: `depth` steps of `i = 2i + 1 + (x > c ? 1 : 0)` (the same as
    /// "left iff x ≤ c" for a value that is not NaN), one
    /// level at a time across the block. Every row starts at the root, read once.
    @inline(__always)
    static func walkPerfect(_ threshold: UnsafePointer<Double>, _ column: UnsafePointer<Int32>, depth: Int,
                            xb: UnsafePointer<Double>, count n: Int, index: UnsafeMutablePointer<Int>) {
        guard depth > 0 else {
            for r in 0..<n { index[r] = 0 }
            return
        }
        let c0 = threshold[0]
        let x0 = xb + Int(column[0])
        for r in 0..<n { index[r] = 1 &+ bit(x0[r] > c0) }
        var level = 1
        while level < depth {
            // `x` walks the block's first column; `x[column]` is the row's value of that feature.
            var x = xb
            for r in 0..<n {
                let i = index[r]
                index[r] = (i &<< 1) &+ 1 &+ bit(x[Int(column[i])] > threshold[i])
                x += 1
            }
            level &+= 1
        }
    }

    /// Walks the block down a compact tree in lockstep until no row moves (leaves loop to
    /// themselves).
    @inline(__always)
    static func walkCompact(_ threshold: UnsafePointer<Double>, _ column: UnsafePointer<Int32>, _ children: UnsafePointer<Int32>,
                            xb: UnsafePointer<Double>, count n: Int, index: UnsafeMutablePointer<Int>) {
        for r in 0..<n { index[r] = 0 }
        var moved = 1
        while moved != 0 {
            moved = 0
            for r in 0..<n {
                let i = index[r]
                let next = Int(children[(i &<< 1) &+ bit(xb[Int(column[i]) &+ r] <= threshold[i])])
                moved |= next ^ i
                index[r] = next
            }
        }
    }

    /// One row through every tree's generic form (NaN-aware).
    private func evaluateGeneric(_ row: UnsafePointer<Double>, into o: UnsafeMutablePointer<Double>) {
        let leavesAll = UnsafePointer(leafValues.baseAddress!)
        for t in 0..<trees.count {
            let tree = trees[t]
            let leaf = genericLeaf(tree, row)
            let leaves = leavesAll + tree.leafBase
            if tree.slot >= 0 {
                o[tree.slot] += leaves[leaf]
            } else {
                let values = leaves + leaf * dimensions
                for k in 0..<dimensions { o[k] += values[k] }
            }
        }
    }

    /// The leaf number a row reaches in a tree, by Core ML's rules: a NaN value goes to the
    /// true child when `missingValueTracksTrueChild` is set, else to the false child.
    @inline(__always)
    private func genericLeaf(_ tree: TreeEnsembleLayout.Tree, _ row: UnsafePointer<Double>) -> Int {
        let nodes = UnsafePointer(genericNodes.baseAddress!) + tree.genericBase
        var i = 0
        while true {
            let node = nodes[i]
            if node.op == .leaf { return Int(node.trueChild) }
            let v = row[Int(node.feature)]
            let goTrue = v.isNaN ? node.missingTracksTrue : node.op.holds(v, node.threshold)
            i = Int(goTrue ? node.trueChild : node.falseChild)
        }
    }
}
