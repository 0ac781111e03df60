import CortadoCore
import CortadoSpec

/// What the regressor and the classifier share: the checked forest compiled into an
/// evaluator, the transform, and the input vectorizer.
struct TreeEnsembleEngine: Sendable {
    let evaluator: TreeEnsembleEvaluator
    let transform: TreeEnsembleTransform
    let vectorizer: MLInputVectorizer
    let treeCount: Int
    let nodeCount: Int

    init(_ parameters: CoreML_Specification_TreeEnsembleParameters, hasParameters: Bool,
         transform: CoreML_Specification_TreeEnsemblePostEvaluationTransform,
         description: MLModelDescription, kind: String) throws {
        guard hasParameters else {
            throw MLModelError(.invalidModel, "\(kind) has no treeEnsemble parameters")
        }
        let forest = try TreeForest(parameters, kind: kind)
        self.transform = try TreeEnsembleTransform(transform, kind: kind)
        treeCount = forest.trees.count
        nodeCount = forest.nodeCount

        // A lone multi-array input with no fixed shape takes the width the trees read.
        let inputs = description.inputs
        let open = inputs.count == 1 && inputs[0].type == .multiArray && (inputs[0].multiArrayConstraint?.shape.isEmpty ?? true)
        vectorizer = try MLInputVectorizer(inputs: inputs, expectedLength: open ? max(forest.featureCount, 1) : nil)
        if vectorizer.length < forest.featureCount {
            let (tree, node) = Self.firstReader(of: forest.featureCount - 1, in: forest)
            throw MLModelError(.invalidModel, "\(kind): tree \(tree) node \(node) branches on feature index \(forest.featureCount - 1), but the inputs give only \(vectorizer.length) value\(vectorizer.length == 1 ? "" : "s") (indices 0…\(vectorizer.length - 1))")
        }
        evaluator = TreeEnsembleEvaluator(forest)
    }

    /// The tree and position of a branch reading `feature`, for messages.
    private static func firstReader(of feature: Int, in forest: TreeForest) -> (UInt64, Int) {
        for tree in forest.trees {
            if let at = tree.nodes.firstIndex(where: { $0.op != .leaf && $0.feature == feature }) { return (tree.id, at) }
        }
        return (0, 0)
    }

    var dimensions: Int { evaluator.dimensions }
    var inputWidth: Int { vectorizer.length }

    var summary: [String] {
        let c = evaluator.layout.count
        var forms: [String] = []
        if c.perfect > 0 { forms.append("\(c.perfect) perfect") }
        if c.compact > 0 { forms.append("\(c.compact) compact") }
        if c.generic > 0 { forms.append("\(c.generic) generic") }
        let depth = evaluator.layout.trees.map(\.depth).max() ?? 0
        return [
            "\(treeCount) tree\(treeCount == 1 ? "" : "s"), \(nodeCount) nodes, max depth \(depth), \(dimensions) prediction dimension\(dimensions == 1 ? "" : "s"), \(inputWidth) input values",
            "layout: " + (forms.isEmpty ? "no trees" : forms.joined(separator: ", ")) + "; transform \(transform.rawValue)",
        ]
    }

    /// Raw sums of `count` rows (`inputWidth` apart) into `out + row * outStride`.
    @inline(__always)
    func evaluate(rows: UnsafePointer<Double>, count: Int, into out: UnsafeMutablePointer<Double>, outStride: Int) {
        evaluator.evaluate(rows: rows, count: count, rowStride: inputWidth, into: out, outStride: outStride)
    }

    /// Gathers a batch's inputs into one row-major matrix and hands it to `body`.
    func withMatrix<R>(of batch: MLBatchProvider, _ body: (UnsafePointer<Double>) throws -> R) throws -> R {
        let width = inputWidth
        return try withUnsafeTemporaryAllocation(of: Double.self, capacity: max(batch.count * width, 1)) { buffer in
            let x = buffer.baseAddress!
            for i in 0..<batch.count { try vectorizer.gather(batch.features(at: i), into: x + i * width) }
            return try body(x)
        }
    }
}
