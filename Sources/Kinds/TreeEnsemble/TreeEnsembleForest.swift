import CortadoCore
import CortadoSpec

/// The comparison a branch node makes; `true` sends a row to the true child.
enum TreeBranchOp: UInt8, Sendable {
    case lessThanOrEqual, lessThan, greaterThanOrEqual, greaterThan, equal, notEqual, leaf

    init(_ behavior: CoreML_Specification_TreeEnsembleParameters.TreeNode.TreeNodeBehavior, tree: UInt64, node: UInt64) throws {
        switch behavior {
        case .branchOnValueLessThanEqual: self = .lessThanOrEqual
        case .branchOnValueLessThan: self = .lessThan
        case .branchOnValueGreaterThanEqual: self = .greaterThanOrEqual
        case .branchOnValueGreaterThan: self = .greaterThan
        case .branchOnValueEqual: self = .equal
        case .branchOnValueNotEqual: self = .notEqual
        case .leafNode: self = .leaf
        case .UNRECOGNIZED(let raw):
            throw MLModelError(.invalidModel, "tree ensemble: tree \(tree) node \(node) has unknown node behavior \(raw) (expected a BranchOnValue… behavior or LeafNode)")
        }
    }

    /// Core ML's comparison, for a value that is not NaN.
    @inline(__always)
    func holds(_ x: Double, _ t: Double) -> Bool {
        switch self {
        case .lessThanOrEqual: return x <= t
        case .lessThan: return x < t
        case .greaterThanOrEqual: return x >= t
        case .greaterThan: return x > t
        case .equal: return x == t
        case .notEqual: return x != t
        case .leaf: return false
        }
    }
}

/// One node of a validated tree. Children are indices into the tree's `nodes`.
struct TreeNode: Sendable {
    var op: TreeBranchOp
    var feature: Int
    var threshold: Double
    var trueChild: Int
    var falseChild: Int
    var missingTracksTrue: Bool
    /// For a leaf: its number in `TreeModel.leaves`; -1 for a branch.
    var leaf: Int
}

/// A validated tree: `nodes[0]` is the root, nodes in pre-order (true child first).
struct TreeModel: Sendable {
    let id: UInt64
    var nodes: [TreeNode]
    /// Per leaf, what it adds: (output slot, value) pairs.
    var leaves: [[(slot: Int, value: Double)]]
    /// Edges on the longest root-to-leaf path (0 for a lone leaf).
    var depth: Int
    /// Whether some branch compares for (in)equality.
    var usesEquality: Bool

    /// The one slot every leaf writes, when there is one (nil: leaves write several slots).
    var singleSlot: Int? {
        var slot: Int?
        for leaf in leaves {
            for (s, _) in leaf {
                if let known = slot, known != s { return nil }
                slot = s
            }
        }
        return slot ?? 0
    }

    /// A leaf's contribution to each of `dimensions` slots.
    func leafVector(_ leaf: Int, dimensions: Int) -> [Double] {
        var v = [Double](repeating: 0, count: dimensions)
        for (s, value) in leaves[leaf] { v[s] += value }
        return v
    }
}

/// A tree ensemble's parameters, checked: every child exists, every tree is a tree (one root,
/// no cycle, no node with two parents), every evaluation slot is in range.
struct TreeForest: Sendable {
    /// Trees in ascending `treeId` order (the order their values are summed in).
    let trees: [TreeModel]
    let dimensions: Int
    /// Per dimension, added before the trees.
    let base: [Double]
    /// One more than the largest feature index a branch reads (0 when none).
    let featureCount: Int

    /// The largest number of prediction dimensions accepted (a guard against absurd specs).
    static let maxDimensions = 1 << 20

    init(_ p: CoreML_Specification_TreeEnsembleParameters, kind: String) throws {
        guard p.numPredictionDimensions >= 1 else {
            throw MLModelError(.invalidModel, "\(kind): numPredictionDimensions is 0 (expected at least 1)")
        }
        guard p.numPredictionDimensions <= UInt64(Self.maxDimensions) else {
            throw MLModelError(.invalidModel, "\(kind): numPredictionDimensions \(p.numPredictionDimensions) is too large (at most \(Self.maxDimensions))")
        }
        let dimensions = Int(p.numPredictionDimensions)
        switch p.basePredictionValue.count {
        case 0: base = [Double](repeating: 0, count: dimensions)
        case dimensions: base = p.basePredictionValue
        default:
            throw MLModelError(.invalidModel, "\(kind): basePredictionValue has \(p.basePredictionValue.count) values but numPredictionDimensions is \(dimensions) (expected \(dimensions) values or none)")
        }
        self.dimensions = dimensions

        var byTree: [UInt64: [Int]] = [:]
        for (i, node) in p.nodes.enumerated() { byTree[node.treeID, default: []].append(i) }
        var trees: [TreeModel] = []
        trees.reserveCapacity(byTree.count)
        var featureCount = 0
        for id in byTree.keys.sorted() {
            let tree = try Self.buildTree(id, members: byTree[id]!, nodes: p.nodes, dimensions: dimensions, kind: kind)
            for node in tree.nodes where node.op != .leaf { featureCount = max(featureCount, node.feature + 1) }
            trees.append(tree)
        }
        self.trees = trees
        self.featureCount = featureCount
    }

    var nodeCount: Int { trees.reduce(0) { $0 + $1.nodes.count } }

    private static func buildTree(_ id: UInt64, members: [Int], nodes spec: [CoreML_Specification_TreeEnsembleParameters.TreeNode],
                                  dimensions: Int, kind: String) throws -> TreeModel {
        let count = members.count
        func fail(_ message: String) -> MLModelError {
            MLModelError(.invalidModel, "\(kind): tree \(id) \(message)")
        }
        // Local numbering: position in `members`.
        var local: [UInt64: Int] = [:]
        local.reserveCapacity(count)
        for (k, i) in members.enumerated() {
            let nodeID = spec[i].nodeID
            if local.updateValue(k, forKey: nodeID) != nil {
                throw fail("has two nodes with nodeId \(nodeID)")
            }
        }
        var ops = [TreeBranchOp](repeating: .leaf, count: count)
        var trueChild = [Int](repeating: -1, count: count)
        var falseChild = [Int](repeating: -1, count: count)
        var parent = [Int](repeating: -1, count: count)
        for (k, i) in members.enumerated() {
            let node = spec[i]
            let op = try TreeBranchOp(node.nodeBehavior, tree: id, node: node.nodeID)
            ops[k] = op
            if op == .leaf {
                for info in node.evaluationInfo where info.evaluationIndex >= UInt64(dimensions) {
                    throw fail("node \(node.nodeID): evaluationIndex \(info.evaluationIndex) is out of range (numPredictionDimensions is \(dimensions), so indices run 0…\(dimensions - 1))")
                }
                continue
            }
            guard node.branchFeatureIndex < UInt64(Int32.max) else {
                throw fail("node \(node.nodeID): branchFeatureIndex \(node.branchFeatureIndex) is too large")
            }
            guard let t = local[node.trueChildNodeID] else {
                throw fail("node \(node.nodeID): trueChildNodeId \(node.trueChildNodeID) is not a node of tree \(id)")
            }
            guard let f = local[node.falseChildNodeID] else {
                throw fail("node \(node.nodeID): falseChildNodeId \(node.falseChildNodeID) is not a node of tree \(id)")
            }
            trueChild[k] = t
            falseChild[k] = f
            for child in (t == f ? [t] : [t, f]) {
                if parent[child] >= 0 {
                    throw fail("node \(spec[members[child]].nodeID) has two parents (nodes \(spec[members[parent[child]]].nodeID) and \(node.nodeID)); each node may be the child of one node only")
                }
                parent[child] = k
            }
        }
        let roots = (0..<count).filter { parent[$0] < 0 }
        guard let root = roots.first else {
            throw fail("has no root: every node is some node's child, so the nodes form a cycle")
        }
        guard roots.count == 1 else {
            let names = roots.prefix(5).map { String(spec[members[$0]].nodeID) }.joined(separator: ", ")
            throw fail("has \(roots.count) roots (nodes \(names)\(roots.count > 5 ? ", …" : "")); a tree needs exactly one node that no other node points to")
        }

        // Pre-order from the root, true child first. With one parent per node, a node can be
        // reached only once; nodes not reached sit on a cycle apart from the root.
        var order: [Int] = []
        order.reserveCapacity(count)
        var canonical = [Int](repeating: -1, count: count)
        var depthOf = [Int](repeating: 0, count: count)
        var stack = [root]
        var depth = 0
        while let k = stack.popLast() {
            canonical[k] = order.count
            order.append(k)
            depth = max(depth, depthOf[k])
            if ops[k] != .leaf {
                let (t, f) = (trueChild[k], falseChild[k])
                if f != t {
                    depthOf[f] = depthOf[k] + 1
                    stack.append(f)
                }
                depthOf[t] = depthOf[k] + 1
                stack.append(t)
            }
        }
        if order.count < count {
            let lost = (0..<count).filter { canonical[$0] < 0 }
            let names = lost.prefix(5).map { String(spec[members[$0]].nodeID) }.joined(separator: ", ")
            throw fail("has nodes that the root (node \(spec[members[root]].nodeID)) does not reach: \(names)\(lost.count > 5 ? ", …" : "") (they form a cycle)")
        }

        var nodes: [TreeNode] = []
        nodes.reserveCapacity(count)
        var leaves: [[(slot: Int, value: Double)]] = []
        var usesEquality = false
        for k in order {
            let node = spec[members[k]]
            let op = ops[k]
            if op == .leaf {
                nodes.append(TreeNode(op: .leaf, feature: 0, threshold: 0, trueChild: -1, falseChild: -1,
                                      missingTracksTrue: false, leaf: leaves.count))
                leaves.append(node.evaluationInfo.map { (Int($0.evaluationIndex), $0.evaluationValue) })
            } else {
                if op == .equal || op == .notEqual { usesEquality = true }
                nodes.append(TreeNode(op: op, feature: Int(node.branchFeatureIndex), threshold: node.branchFeatureValue,
                                      trueChild: canonical[trueChild[k]], falseChild: canonical[falseChild[k]],
                                      missingTracksTrue: node.missingValueTracksTrueChild, leaf: -1))
            }
        }
        return TreeModel(id: id, nodes: nodes, leaves: leaves, depth: depth, usesEquality: usesEquality)
    }
}
