/// The flat, evaluation-ready forms of a validated forest, built once at load.
///
/// Every tree gets one of three forms for rows without NaN:
/// - **perfect**: a shallow tree padded to a complete binary tree of its depth `D`, stored
///   breadth-first (children of slot `i` at `2i+1`, `2i+2`) with `2^D` leaf slots. A row
///   takes exactly `D` steps and no child pointer is loaded: `i = 2i + 1 + (x > c ? 1 : 0)`.
///   Padding and constant tests are "always left" nodes (`c = +∞`); no threshold is NaN.
/// - **compact**: any depth, pre-order (left child at `i+1`, right child stored); leaves loop
///   to themselves so a block of rows steps in lockstep until none moves.
/// - **generic**: Core ML's node semantics verbatim (every comparison, NaN routing); used by
///   trees that test (in)equality.
///
/// Perfect and compact nodes share one normalized comparison, "go left iff x ≤ c", which for
/// any non-NaN `x` is exactly Core ML's double comparison (`x < t` ⟺ `x ≤ t.nextDown`,
/// `x > t` ⟺ `¬(x ≤ t)` with the children swapped, …). Rows holding NaN take the generic
/// form of every tree, which routes missing values by `missingValueTracksTrueChild`.
struct TreeEnsembleLayout: Sendable {
    enum Kind: UInt8, Sendable { case perfect, compact, generic }

    struct FastNode: Sendable {
        var threshold: Double
        var feature: Int32
        /// Compact form: the right child's index within the tree (a leaf: itself).
        var right: Int32
    }

    struct GenericNode: Sendable {
        var threshold: Double
        var feature: Int32
        /// For a leaf: its leaf number.
        var trueChild: Int32
        var falseChild: Int32
        var op: TreeBranchOp
        var missingTracksTrue: Bool
    }

    struct Tree: Sendable {
        var kind: Kind
        var depth: Int
        /// Start of the tree's nodes in `fastNodes` (perfect, compact).
        var fastBase: Int
        /// Start of the perfect form's padded leaf table in `leafValues`.
        var perfectLeafBase: Int
        /// Start of the tree's generic nodes in `genericNodes`.
        var genericBase: Int
        /// Start of the tree's leaf table (by leaf number) in `leafValues`.
        var leafBase: Int
        /// The one output slot every leaf adds to, or -1 when leaves hold a value per dimension.
        var slot: Int
    }

    /// Trees at most this deep may take the perfect form.
    static let maxPerfectDepth = 10

    var trees: [Tree] = []
    var fastNodes: [FastNode] = []
    /// Compact form: per fast node, the leaf number of a leaf (else -1).
    var compactLeaf: [Int32] = []
    /// Compact form: per fast node, two tree-relative successors: `[2i]` when `x ≤ c` fails
    /// (the right child), `[2i + 1]` when it holds (`i + 1`); a leaf's are itself.
    var compactChildren: [Int32] = []
    var genericNodes: [GenericNode] = []
    /// Leaf tables: one value per leaf (single-slot trees) or `dimensions` values per leaf.
    var leafValues: [Double] = []
    let dimensions: Int

    init(_ forest: TreeForest) {
        dimensions = forest.dimensions
        for tree in forest.trees { add(tree) }
    }

    var count: (perfect: Int, compact: Int, generic: Int) {
        (trees.count(where: { $0.kind == .perfect }), trees.count(where: { $0.kind == .compact }), trees.count(where: { $0.kind == .generic }))
    }

    /// "go left iff x ≤ c" for non-NaN `x`, and whether the true child is the left one.
    /// nil for (in)equality tests. `c = NaN` never goes left; `c = +∞` always does.
    static func normalize(_ op: TreeBranchOp, _ t: Double) -> (c: Double, trueIsLeft: Bool)? {
        switch op {
        case .lessThanOrEqual:
            return (t, true)
        case .lessThan:
            return (t.isNaN || t == -.infinity ? .nan : t.nextDown, true)
        case .greaterThan:
            return (t.isNaN ? .infinity : t, false)
        case .greaterThanOrEqual:
            if t.isNaN { return (.infinity, false) }
            return (t == -.infinity ? .nan : t.nextDown, false)
        case .equal, .notEqual, .leaf:
            return nil
        }
    }

    private mutating func add(_ tree: TreeModel) {
        let slot = tree.singleSlot ?? -1
        var info = Tree(kind: .generic, depth: tree.depth, fastBase: fastNodes.count, perfectLeafBase: 0,
                        genericBase: genericNodes.count, leafBase: leafValues.count, slot: slot)
        for leaf in 0..<tree.leaves.count { appendLeaf(tree, leaf, slot: slot) }
        addGeneric(tree)
        if !tree.usesEquality {
            let internalCount = tree.nodes.count - tree.leaves.count
            let padded = (1 << min(tree.depth, 62)) - 1
            // Perfect when shallow, or up to depth 10 when padding at most quadruples the
            // branch nodes (a sparse deep tree would pay steps and memory for empty slots).
            if tree.depth <= 6 || (tree.depth <= Self.maxPerfectDepth && padded <= 4 * internalCount) {
                info.kind = .perfect
                info.perfectLeafBase = leafValues.count
                addPerfect(tree, slot: slot)
            } else {
                info.kind = .compact
                addCompact(tree)
            }
        }
        trees.append(info)
    }

    private mutating func appendLeaf(_ tree: TreeModel, _ leaf: Int, slot: Int) {
        if slot >= 0 {
            leafValues.append(tree.leaves[leaf].reduce(0) { $0 + $1.value })
        } else {
            leafValues.append(contentsOf: tree.leafVector(leaf, dimensions: dimensions))
        }
    }

    private mutating func addGeneric(_ tree: TreeModel) {
        for node in tree.nodes {
            if node.op == .leaf {
                genericNodes.append(GenericNode(threshold: 0, feature: 0, trueChild: Int32(node.leaf), falseChild: Int32(node.leaf),
                                                op: .leaf, missingTracksTrue: false))
            } else {
                genericNodes.append(GenericNode(threshold: node.threshold, feature: Int32(node.feature),
                                                trueChild: Int32(node.trueChild), falseChild: Int32(node.falseChild),
                                                op: node.op, missingTracksTrue: node.missingTracksTrue))
            }
        }
    }

    private mutating func addPerfect(_ tree: TreeModel, slot: Int) {
        let depth = tree.depth
        let internalCount = (1 << depth) - 1
        let leafCount = 1 << depth
        let base = fastNodes.count
        let alwaysLeft = FastNode(threshold: .infinity, feature: 0, right: 0)
        fastNodes.append(contentsOf: repeatElement(alwaysLeft, count: internalCount))
        compactLeaf.append(contentsOf: repeatElement(-1, count: internalCount))
        compactChildren.append(contentsOf: repeatElement(0, count: 2 * internalCount))
        let leafBase = leafValues.count
        let width = slot >= 0 ? 1 : dimensions
        leafValues.append(contentsOf: repeatElement(0, count: leafCount * width))

        var stack: [(node: Int, slot: Int, level: Int)] = [(0, 0, 0)]
        while let (c, s, level) = stack.popLast() {
            let node = tree.nodes[c]
            if level == depth {
                // The deepest level holds leaves only (depth is the longest path).
                let at = leafBase + (s - internalCount) * width
                if slot >= 0 {
                    leafValues[at] = tree.leaves[node.leaf].reduce(0) { $0 + $1.value }
                } else {
                    let v = tree.leafVector(node.leaf, dimensions: dimensions)
                    for d in 0..<dimensions { leafValues[at + d] = v[d] }
                }
                continue
            }
            if node.op == .leaf || node.trueChild == node.falseChild {
                // A shallow leaf (or an unconditional branch): always left; the right
                // subtree's leaves stay zero and are never reached by a non-NaN row.
                stack.append((node.op == .leaf ? c : node.trueChild, 2 * s + 1, level + 1))
                continue
            }
            let (c0, trueIsLeft) = Self.normalize(node.op, node.threshold)!
            let (left, right) = trueIsLeft ? (node.trueChild, node.falseChild) : (node.falseChild, node.trueChild)
            if c0.isNaN {
                // Never left: the right subtree moves to the left of an always-left node, so
                // the perfect walk's `x > c` test never meets a NaN threshold.
                stack.append((right, 2 * s + 1, level + 1))
                continue
            }
            fastNodes[base + s] = FastNode(threshold: c0, feature: Int32(node.feature), right: 0)
            stack.append((right, 2 * s + 2, level + 1))
            stack.append((left, 2 * s + 1, level + 1))
        }
    }

    private mutating func addCompact(_ tree: TreeModel) {
        let base = fastNodes.count
        var stack: [(node: Int, parent: Int)] = [(0, -1)]
        while let (c, parent) = stack.popLast() {
            let i = fastNodes.count - base
            if parent >= 0 {
                fastNodes[base + parent].right = Int32(i)
                compactChildren[2 * (base + parent)] = Int32(i)
            }
            let node = tree.nodes[c]
            if node.op == .leaf {
                // x ≤ NaN is false for every x: the row stays here.
                fastNodes.append(FastNode(threshold: .nan, feature: 0, right: Int32(i)))
                compactLeaf.append(Int32(node.leaf))
                compactChildren.append(contentsOf: [Int32(i), Int32(i)])
                continue
            }
            compactLeaf.append(-1)
            if node.trueChild == node.falseChild {
                fastNodes.append(FastNode(threshold: .infinity, feature: 0, right: Int32(i + 1)))
                compactChildren.append(contentsOf: [Int32(i + 1), Int32(i + 1)])
                stack.append((node.trueChild, -1))
                continue
            }
            let (c0, trueIsLeft) = Self.normalize(node.op, node.threshold)!
            fastNodes.append(FastNode(threshold: c0, feature: Int32(node.feature), right: -1))
            compactChildren.append(contentsOf: [-1, Int32(i + 1)])
            let (left, right) = trueIsLeft ? (node.trueChild, node.falseChild) : (node.falseChild, node.trueChild)
            stack.append((right, i))
            stack.append((left, -1))
        }
    }
}
