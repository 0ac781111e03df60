import CortadoCore
import CortadoSpec

/// `treeEnsembleClassifier`: the ensemble's summed dimensions become class probabilities.
///
/// - One dimension, two classes (binary): the transformed value is `p(class 1)` and
///   `p(class 0) = 1 - p1`. With NoTransform the raw sum is `p1` (scikit-learn trees and
///   forests store class-1 fractions); with Regression_Logistic `p1 = σ(sum)` (XGBoost,
///   GradientBoosting); with the zero-reference softmax `p1 = softmax(0, sum)[1] = σ(sum)`.
///   (Classification_SoftMax over one value is 1: taken literally.)
/// - One dimension per class: the transform applies across the classes (NoTransform: raw
///   sums, e.g. a random forest's summed class fractions; Classification_SoftMax; or
///   Regression_Logistic per class, not renormalized).
/// - Classification_SoftMaxWithZeroClassReference with one dimension fewer than classes:
///   `p = softmax(0, v_0, …, v_{K-2})`, the first class scoring 0.
///
/// The predicted label is the most probable class; ties go to the first.
public enum TreeEnsembleClassifierKind: MLModelKind {
    public static let specTypes = ["treeEnsembleClassifier"]

    public static func compile(_ spec: CoreML_Specification_Model, context: MLCompileContext) throws -> any MLCompiledModel {
        try TreeEnsembleClassifierModel(spec.treeEnsembleClassifier, description: context.description)
    }
}

final class TreeEnsembleClassifierModel: MLCompiledModel, MLDenseFeaturePredicting, MLColumnarPredicting {
    enum Encoding: String, Sendable {
        case binary = "binary (one dimension scores the second class)"
        case perClass = "one dimension per class"
        case zeroReference = "first class as zero reference"
    }

    let engine: TreeEnsembleEngine
    let encoding: Encoding
    let labels: MLClassLabels
    let outputs: MLClassifierOutputNames

    init(_ spec: CoreML_Specification_TreeEnsembleClassifier, description: MLModelDescription) throws {
        let kind = "treeEnsembleClassifier"
        switch spec.classLabels {
        case .int64ClassLabels(let v)?: labels = MLClassLabels(int64s: v)
        case .stringClassLabels(let v)?: labels = MLClassLabels(strings: v)
        case nil: throw MLModelError(.invalidModel, "\(kind) has no class labels (expected int64ClassLabels or stringClassLabels)")
        }
        let k = labels.count
        guard k >= 2 else {
            throw MLModelError(.invalidModel, "\(kind) has \(k) class label\(k == 1 ? "" : "s") (expected at least 2)")
        }
        engine = try TreeEnsembleEngine(spec.treeEnsemble, hasParameters: spec.hasTreeEnsemble,
                                        transform: spec.postEvaluationTransform, description: description, kind: kind)
        let dims = engine.dimensions
        if dims == 1 && k == 2 {
            encoding = .binary
        } else if engine.transform == .softmaxZeroReference {
            guard dims == k - 1 else {
                throw MLModelError(.invalidModel, "\(kind) with Classification_SoftMaxWithZeroClassReference has \(dims) prediction dimensions for \(k) classes (expected \(k - 1): the first class is the zero reference)")
            }
            encoding = .zeroReference
        } else {
            guard dims == k else {
                throw MLModelError(.invalidModel, "\(kind) has \(dims) prediction dimension\(dims == 1 ? "" : "s") for \(k) classes (expected \(k), one per class\(k == 2 ? ", or 1 scoring the second class" : ""))")
            }
            encoding = .perClass
        }
        outputs = try MLClassifierOutputNames(description, labels: labels)
    }

    var classLabels: MLClassLabels? { labels }
    var inputWidth: Int { engine.inputWidth }
    /// Per-class probabilities.
    var outputWidth: Int { labels.count }

    var summary: [String] {
        ["Tree ensemble classifier: \(labels.count) classes, \(encoding.rawValue)"] + engine.summary
    }

    /// Class probabilities of `count` rows, `labels.count` per row.
    func predict(rows: UnsafePointer<Double>, count: Int, into out: UnsafeMutablePointer<Double>) {
        let k = labels.count
        let transform = engine.transform
        switch encoding {
        case .binary:
            engine.evaluate(rows: rows, count: count, into: out + 1, outStride: 2)
            for i in 0..<count {
                let p = out + 2 * i
                transform.apply(p + 1, count: 1)
                p[0] = 1 - p[1]
            }
        case .perClass:
            engine.evaluate(rows: rows, count: count, into: out, outStride: k)
            if transform != .none {
                for i in 0..<count { transform.apply(out + i * k, count: k) }
            }
        case .zeroReference:
            engine.evaluate(rows: rows, count: count, into: out + 1, outStride: k)
            for i in 0..<count {
                let p = out + i * k
                p[0] = transform.apply(p + 1, count: k - 1)
            }
        }
    }

    @inline(__always)
    private func features(_ p: UnsafePointer<Double>) -> MLFeatureProvider {
        let k = labels.count
        var winner = 0
        for c in 1..<k where p[c] > p[winner] { winner = c }
        return outputs.provider(labels: labels, winner: winner, scores: UnsafeBufferPointer(start: p, count: k))
    }

    var denseInput: MLInputVectorizer? { engine.vectorizer }

    func outputFeatures(dense row: UnsafePointer<Double>) throws -> MLFeatureProvider { features(row) }

    func outputColumns(dense rows: UnsafePointer<Double>, count: Int, options: MLPredictionOptions) throws -> MLFeatureColumns {
        outputs.columns(labels: labels, scores: rows, count: count)
    }

    func prediction(from input: MLFeatureProvider, options: MLPredictionOptions) throws -> MLFeatureProvider {
        try withUnsafeTemporaryAllocation(of: Double.self, capacity: inputWidth + outputWidth) { buffer in
            let x = buffer.baseAddress!
            let p = x + inputWidth
            try engine.vectorizer.gather(input, into: x)
            predict(rows: x, count: 1, into: p)
            return features(p)
        }
    }

    var runsBatchesAsOne: Bool { true }

    func predictions(from batch: MLBatchProvider, options: MLPredictionOptions) throws -> [MLFeatureProvider] {
        let n = batch.count
        let k = outputWidth
        return try engine.withMatrix(of: batch) { x in
            withUnsafeTemporaryAllocation(of: Double.self, capacity: max(n * k, 1)) { buffer in
                let p = buffer.baseAddress!
                predict(rows: x, count: n, into: p)
                return (0..<n).map { features(p + $0 * k) }
            }
        }
    }
}
