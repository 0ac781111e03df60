import CortadoCore
import CortadoSpec
import Foundation

/// `glmClassifier`: one linear score per weight row, turned into class probabilities.
///
/// - One weight row (two classes, either encoding): the row scores the *second* class,
///   `p1 = f(s)`, `p0 = 1 - p1` (what coremltools writes for a binary LogisticRegression,
///   matching scikit-learn's `predict_proba`).
/// - OneVsRest, K > 2 classes, K rows: `p_k = f(s_k) / Σ_j f(s_j)` (scikit-learn's OvR
///   `predict_proba` normalizes the per-class sigmoids the same way).
/// - ReferenceClass, K > 2 classes, K-1 rows: the first class is the reference with score 0,
///   the rows score classes 1…K-1, and with Logit `p = softmax(0, s_1, …, s_{K-1})`, the
///   multinomial logit with a reference category (which reduces to the binary rule for K = 2).
///
/// `f` is the logistic sigmoid (Logit) or the normal CDF (Probit, two classes only, as the
/// format requires). The predicted label is the most probable class; ties go to the first.
public enum GLMClassifierKind: MLModelKind {
    public static let specTypes = ["glmClassifier"]

    public static func compile(_ spec: CoreML_Specification_Model, context: MLCompileContext) throws -> any MLCompiledModel {
        try GLMClassifierModel(spec.glmClassifier, description: context.description)
    }
}

final class GLMClassifierModel: MLCompiledModel, MLDenseFeaturePredicting, MLColumnarPredicting {
    enum Encoding: String, Sendable {
        /// One row scoring the second of two classes.
        case binary = "binary (one row scores the second class)"
        case oneVsRest = "OneVsRest"
        case referenceClass = "ReferenceClass"
    }

    let map: GLMLinearMap
    let link: GLMLink
    let encoding: Encoding
    let labels: MLClassLabels
    let outputs: MLClassifierOutputNames
    let vectorizer: MLInputVectorizer

    init(_ glm: CoreML_Specification_GLMClassifier, description: MLModelDescription) throws {
        switch glm.classLabels {
        case .int64ClassLabels(let v)?: labels = MLClassLabels(int64s: v)
        case .stringClassLabels(let v)?: labels = MLClassLabels(strings: v)
        case nil: throw MLModelError(.invalidModel, "glmClassifier has no class labels (expected int64ClassLabels or stringClassLabels)")
        }
        let k = labels.count
        guard k >= 2 else {
            throw MLModelError(.invalidModel, "glmClassifier has \(k) class label\(k == 1 ? "" : "s") (expected at least 2)")
        }
        map = try GLMLinearMap(weights: glm.weights.map(\.value), offsets: glm.offset, kind: "glmClassifier")

        switch glm.postEvaluationTransform {
        case .logit: link = .logit
        case .probit: link = .probit
        case .UNRECOGNIZED(let raw):
            throw MLModelError(.invalidModel, "glmClassifier postEvaluationTransform \(raw) is unknown (expected Logit or Probit)")
        }
        switch glm.classEncoding {
        case .referenceClass:
            guard map.rows == k - 1 else {
                throw MLModelError(.invalidModel, "glmClassifier with ReferenceClass encoding has \(map.rows) weight rows for \(k) classes (expected \(k - 1), one less than the number of classes)")
            }
            encoding = k == 2 ? .binary : .referenceClass
        case .oneVsRest:
            let expected = k == 2 ? 1 : k
            guard map.rows == expected else {
                throw MLModelError(.invalidModel, "glmClassifier with OneVsRest encoding has \(map.rows) weight rows for \(k) classes (expected \(expected)\(k == 2 ? ": two classes take one row, scoring the second class" : ", one per class"))")
            }
            encoding = k == 2 ? .binary : .oneVsRest
        case .UNRECOGNIZED(let raw):
            throw MLModelError(.invalidModel, "glmClassifier classEncoding \(raw) is unknown (expected ReferenceClass or OneVsRest)")
        }
        if link == .probit && k > 2 {
            throw MLModelError(.invalidModel, "glmClassifier uses the Probit transform with \(k) classes (Probit is defined for two classes only)")
        }
        vectorizer = try map.vectorizer(for: description.inputs, kind: "glmClassifier")
        outputs = try MLClassifierOutputNames(description, labels: labels)
    }

    var classLabels: MLClassLabels? { labels }
    var inputWidth: Int { map.width }
    /// Per-class probabilities.
    var outputWidth: Int { labels.count }

    var summary: [String] {
        ["GLM classifier: \(labels.count) classes, \(map.rows) weight row\(map.rows == 1 ? "" : "s") × \(map.width) input values, \(encoding.rawValue), transform \(link.rawValue)"]
    }

    /// Class probabilities for one row. `scratch` holds `map.rows` values.
    @inline(__always)
    func probabilities(_ x: UnsafePointer<Double>, scratch s: UnsafeMutablePointer<Double>, into p: UnsafeMutablePointer<Double>) {
        map.evaluate(x, into: s)
        let k = labels.count
        switch encoding {
        case .binary:
            let p1 = link.apply(s[0])
            p[0] = 1 - p1
            p[1] = p1
        case .oneVsRest:
            var sum = 0.0
            for c in 0..<k {
                p[c] = link.apply(s[c])
                sum += p[c]
            }
            if sum > 0 {
                for c in 0..<k { p[c] /= sum }
            } else {
                // Every sigmoid underflowed: the normalized limit is the softmax of the scores.
                softmax(s, count: k, into: p)
            }
        case .referenceClass:
            // softmax(0, s_1, …, s_{k-1}), shifted by the largest score for stability.
            var top = 0.0
            for c in 0..<(k - 1) { top = max(top, s[c]) }
            p[0] = exp(-top)
            var z = p[0]
            for c in 1..<k {
                p[c] = exp(s[c - 1] - top)
                z += p[c]
            }
            for c in 0..<k { p[c] /= z }
        }
    }

    @inline(__always)
    private func softmax(_ s: UnsafePointer<Double>, count: Int, into p: UnsafeMutablePointer<Double>) {
        var top = -Double.infinity
        for c in 0..<count { top = max(top, s[c]) }
        var z = 0.0
        for c in 0..<count {
            p[c] = exp(s[c] - top)
            z += p[c]
        }
        for c in 0..<count { p[c] /= z }
    }

    func prediction(from input: MLFeatureProvider, options: MLPredictionOptions) throws -> MLFeatureProvider {
        let k = labels.count
        return try withUnsafeTemporaryAllocation(of: Double.self, capacity: map.width + map.rows + k) { buffer in
            let x = buffer.baseAddress!
            let s = x + map.width
            let p = s + map.rows
            try vectorizer.gather(input, into: x)
            probabilities(x, scratch: s, into: p)
            return features(p)
        }
    }

    @inline(__always)
    private func features(_ p: UnsafePointer<Double>) -> MLFeatureProvider {
        let k = labels.count
        var winner = 0
        for c in 1..<k where p[c] > p[winner] { winner = c }
        return outputs.provider(labels: labels, winner: winner, scores: UnsafeBufferPointer(start: p, count: k))
    }

    var denseInput: MLInputVectorizer? { vectorizer }

    func outputFeatures(dense row: UnsafePointer<Double>) throws -> MLFeatureProvider { features(row) }

    func outputColumns(dense rows: UnsafePointer<Double>, count: Int, options: MLPredictionOptions) throws -> MLFeatureColumns {
        outputs.columns(labels: labels, scores: rows, count: count)
    }

    func predict(rows: UnsafePointer<Double>, count: Int, into output: UnsafeMutablePointer<Double>) {
        withUnsafeTemporaryAllocation(of: Double.self, capacity: map.rows) { scratch in
            for i in 0..<count {
                probabilities(rows + i * map.width, scratch: scratch.baseAddress!, into: output + i * labels.count)
            }
        }
    }
}
