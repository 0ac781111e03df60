/// Runs a compiled forest over rows of Doubles, writing the raw per-dimension sums
/// (base value plus every tree's leaf, trees in ascending `treeId` order).
///
/// Rows go in blocks of `blockRows`. Within a block the rows without NaN walk each tree
/// together, one level at a time across the block, so the block's independent walks overlap
/// their memory latency; rows holding NaN walk the generic form (Core ML's missing-value
/// routing) one at a time. Every path adds the trees in the same order, so a row's result
/// does not depend on its neighbours.
///
/// The layout lives in memory allocated once at load, read through raw pointers in the loops.
final class TreeEnsembleEvaluator: @unchecked Sendable {
    typealias FastNode = TreeEnsembleLayout.FastNode
    typealias GenericNode = TreeEnsembleLayout.GenericNode

    static let blockRows = 16

    let dimensions: Int
    /// Values a row must hold: one more than the largest feature index read.
    let featureCount: Int
    let layout: TreeEnsembleLayout
    private let trees: UnsafeMutableBufferPointer<TreeEnsembleLayout.Tree>
    private let fastNodes: UnsafeMutableBufferPointer<FastNode>
    private let compactLeaf: UnsafeMutableBufferPointer<Int32>
    private let genericNodes: UnsafeMutableBufferPointer<GenericNode>
    private let leafValues: UnsafeMutableBufferPointer<Double>
    private let base: UnsafeMutableBufferPointer<Double>

    init(_ forest: TreeForest) {
        let layout = TreeEnsembleLayout(forest)
        self.layout = layout
        dimensions = forest.dimensions
        featureCount = forest.featureCount
        trees = Self.copy(layout.trees)
        fastNodes = Self.copy(layout.fastNodes)
        compactLeaf = Self.copy(layout.compactLeaf)
        genericNodes = Self.copy(layout.genericNodes)
        leafValues = Self.copy(layout.leafValues)
        base = Self.copy(forest.base)
    }

    deinit {
        trees.deallocate()
        fastNodes.deallocate()
        compactLeaf.deallocate()
        genericNodes.deallocate()
        leafValues.deallocate()
        base.deallocate()
    }

    private static func copy<T>(_ values: [T]) -> UnsafeMutableBufferPointer<T> {
        let buffer = UnsafeMutableBufferPointer<T>.allocate(capacity: max(values.count, 1))
        _ = buffer.initialize(from: values)
        return buffer
    }

    /// Evaluates `count` rows (`rowStride` Doubles apart, at least `featureCount` each) and
    /// writes each row's `dimensions` sums at `out + row * outStride`.
    func evaluate(rows x: UnsafePointer<Double>, count: Int, rowStride: Int,
                  into out: UnsafeMutablePointer<Double>, outStride: Int) {
        let block = Self.blockRows
        withUnsafeTemporaryAllocation(of: UnsafePointer<Double>.self, capacity: block) { rowBuffer in
            withUnsafeTemporaryAllocation(of: UnsafeMutablePointer<Double>.self, capacity: block) { outBuffer in
                withUnsafeTemporaryAllocation(of: Int.self, capacity: block) { indexBuffer in
                    let rows = rowBuffer.baseAddress!
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
                            if hasNaN(row) {
                                evaluateGeneric(row, into: o)
                            } else {
                                rows[fast] = row
                                outs[fast] = o
                                fast += 1
                            }
                        }
                        if fast > 0 { evaluateFast(rows: rows, outs: outs, count: fast, index: index) }
                        start += n
                    }
                }
            }
        }
    }

    @inline(__always)
    private func hasNaN(_ row: UnsafePointer<Double>) -> Bool {
        var nan = false
        for f in 0..<featureCount { nan = nan || row[f].isNaN }
        return nan
    }

    /// The block's NaN-free rows through every tree's fast form.
    @inline(__always)
    private func evaluateFast(rows: UnsafeMutablePointer<UnsafePointer<Double>>, outs: UnsafeMutablePointer<UnsafeMutablePointer<Double>>,
                              count n: Int, index: UnsafeMutablePointer<Int>) {
        let nodesAll = UnsafePointer(fastNodes.baseAddress!)
        let leavesAll = UnsafePointer(leafValues.baseAddress!)
        for t in 0..<trees.count {
            let tree = trees[t]
            var leaves = leavesAll + tree.leafBase
            switch tree.kind {
            case .perfect:
                let nodes = nodesAll + tree.fastBase
                for r in 0..<n { index[r] = 0 }
                for _ in 0..<tree.depth {
                    for r in 0..<n {
                        let i = index[r]
                        let node = nodes[i]
                        let v = rows[r][Int(node.feature)]
                        index[r] = (i &<< 1) &+ (v <= node.threshold ? 1 : 2)
                    }
                }
                leaves = leavesAll + tree.perfectLeafBase - ((1 << tree.depth) - 1) * (tree.slot >= 0 ? 1 : dimensions)
            case .compact:
                let nodes = nodesAll + tree.fastBase
                for r in 0..<n { index[r] = 0 }
                var moved = true
                while moved {
                    moved = false
                    for r in 0..<n {
                        let i = index[r]
                        let node = nodes[i]
                        let v = rows[r][Int(node.feature)]
                        let next = v <= node.threshold ? i &+ 1 : Int(node.right)
                        moved = moved || next != i
                        index[r] = next
                    }
                }
                let leafOf = UnsafePointer(compactLeaf.baseAddress!) + tree.fastBase
                for r in 0..<n { index[r] = Int(leafOf[index[r]]) }
            case .generic:
                for r in 0..<n { index[r] = genericLeaf(tree, rows[r]) }
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
