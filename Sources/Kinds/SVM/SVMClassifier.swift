import CortadoCore
import CortadoSpec

/// `supportVectorClassifier`: LIBSVM's C-SVC / ν-SVC prediction.
///
/// The spec stores LIBSVM's model as is: support vectors grouped by class
/// (`numberOfSupportVectorsPerClass`), `sv_coef` as K-1 coefficient rows, and one `rho` per
/// class pair in LIBSVM's order (0,1), (0,2), …, (1,2), …. The decision value of pair (i, j) is
/// `Σ_{s∈i} coef[j-1][s] K(s,x) + Σ_{s∈j} coef[i][s] K(s,x) - rho`; positive votes for i.
/// Without a probability model the label is the class with most votes, the lowest index
/// winning ties, and the probability output (if declared) holds the vote counts. With `probA`
/// and `probB`, the probabilities are LIBSVM's (see `SVMProbability`) and the label is their
/// argmax, as `svm_predict_probability` does.
public enum SVMClassifierKind: MLModelKind {
    public static let specTypes = ["supportVectorClassifier"]

    public static func compile(_ spec: CoreML_Specification_Model, context: MLCompileContext) throws -> any MLCompiledModel {
        try SVMClassifierModel(spec.supportVectorClassifier, description: context.description)
    }
}

final class SVMClassifierModel: MLCompiledModel, MLDenseBatchPredicting {
    static let kind = "supportVectorClassifier"

    let kernel: SVMKernel
    let vectors: SVMSupportVectors
    let input: SVMInput
    let labels: MLClassLabels
    let outputs: MLClassifierOutputNames
    /// Number of classes.
    let k: Int
    /// Number of class pairs, k(k-1)/2.
    let pairs: Int
    /// Class c's support vectors are `start[c] ..< start[c + 1]`.
    let start: [Int]
    /// LIBSVM's `sv_coef`: (k-1) rows of one coefficient per support vector, row-major.
    let coefficients: [Double]
    let rho: [Double]
    /// Platt sigmoid parameters per pair; empty without a probability model.
    let probA: [Double]
    let probB: [Double]
    /// Linear kernel: one weight vector per pair (`pairs × foldWidth`), folded at compile.
    let linearWeights: [Double]?
    let foldWidth: Int

    var hasProbabilityModel: Bool { !probA.isEmpty }

    init(_ svm: CoreML_Specification_SupportVectorClassifier, description: MLModelDescription) throws {
        let kind = Self.kind
        switch svm.classLabels {
        case .int64ClassLabels(let v)?: labels = MLClassLabels(int64s: v)
        case .stringClassLabels(let v)?: labels = MLClassLabels(strings: v)
        case nil: throw MLModelError(.invalidModel, "\(kind) has no class labels (expected int64ClassLabels or stringClassLabels)")
        }
        k = labels.count
        guard k >= 2 else {
            throw MLModelError(.invalidModel, "\(kind) has \(k) class label\(k == 1 ? "" : "s") (expected at least 2)")
        }
        pairs = k * (k - 1) / 2
        kernel = try SVMKernel(svm.kernel, kind: kind)
        switch svm.supportVectors {
        case .denseSupportVectors(let d)?: vectors = try SVMSupportVectors(dense: d, kind: kind)
        case .sparseSupportVectors(let s)?: vectors = try SVMSupportVectors(sparse: s, kind: kind)
        case nil: vectors = try SVMSupportVectors(dense: nil, sparse: nil, kind: kind)
        }
        let total = vectors.count

        let perClass = svm.numberOfSupportVectorsPerClass
        guard perClass.count == k else {
            throw MLModelError(.invalidModel, "\(kind) numberOfSupportVectorsPerClass has \(perClass.count) entries for \(k) classes (expected one per class)")
        }
        if let c = perClass.firstIndex(where: { $0 < 0 }) {
            throw MLModelError(.invalidModel, "\(kind) numberOfSupportVectorsPerClass[\(c)] is \(perClass[c]) (expected a count of at least 0)")
        }
        var start = [0]
        for n in perClass { start.append(start.last! + Int(n)) }
        guard start.last! == total else {
            throw MLModelError(.invalidModel, "\(kind) numberOfSupportVectorsPerClass sums to \(start.last!) but there are \(total) support vectors")
        }
        self.start = start

        guard svm.coefficients.count == k - 1 else {
            throw MLModelError(.invalidModel, "\(kind) has \(svm.coefficients.count) coefficient rows for \(k) classes (expected \(k - 1), numberOfClasses - 1, as LIBSVM's sv_coef)")
        }
        for (row, c) in svm.coefficients.enumerated() {
            guard c.alpha.count == total else {
                throw MLModelError(.invalidModel, "\(kind) coefficient row \(row) has \(c.alpha.count) values but there are \(total) support vectors (expected one per support vector)")
            }
            if let i = c.alpha.firstIndex(where: { !$0.isFinite }) {
                throw MLModelError(.invalidModel, "\(kind) coefficient row \(row) value \(i) is \(c.alpha[i]) (coefficients must be finite)")
            }
        }
        coefficients = svm.coefficients.flatMap(\.alpha)

        guard svm.rho.count == pairs else {
            throw MLModelError(.invalidModel, "\(kind) has \(svm.rho.count) rho values for \(k) classes (expected \(pairs), one per class pair)")
        }
        if let i = svm.rho.firstIndex(where: { !$0.isFinite }) {
            throw MLModelError(.invalidModel, "\(kind) rho[\(i)] is \(svm.rho[i]) (expected a finite number)")
        }
        rho = svm.rho

        if !svm.probA.isEmpty || !svm.probB.isEmpty {
            guard svm.probA.count == svm.probB.count else {
                throw MLModelError(.invalidModel, "\(kind) has \(svm.probA.count) probA but \(svm.probB.count) probB values (probA and probB must be the same size)")
            }
            guard svm.probA.count == pairs else {
                throw MLModelError(.invalidModel, "\(kind) has \(svm.probA.count) probA/probB values for \(k) classes (expected \(pairs), one per class pair)")
            }
            if let i = (svm.probA + svm.probB).firstIndex(where: { !$0.isFinite }) {
                throw MLModelError(.invalidModel, "\(kind) \(i < pairs ? "probA[\(i)]" : "probB[\(i - pairs)]") is not finite")
            }
        }
        probA = svm.probA
        probB = svm.probB

        input = try SVMInput(inputs: description.inputs, vectors: vectors, kind: kind)
        outputs = try MLClassifierOutputNames(description, labels: labels)

        // A linear kernel folds each pair's support vectors into one weight vector, when that
        // is less work than a pass over the support vectors.
        let width = vectors.dimension ?? 0
        foldWidth = width
        if kernel.isLinear && width > 0 && pairs * width <= vectors.storedValues {
            var weights: [Double] = []
            weights.reserveCapacity(pairs * width)
            let l = total
            for i in 0..<k {
                for j in (i + 1)..<k {
                    let (si, sj) = (start[i]..<start[i + 1], start[j]..<start[j + 1])
                    let (rowI, rowJ) = ((j - 1) * l, i * l)
                    let coefficients = self.coefficients
                    weights += vectors.fold(dimension: width) { s in
                        if si.contains(s) { return coefficients[rowI + s] }
                        if sj.contains(s) { return coefficients[rowJ + s] }
                        return 0
                    }
                }
            }
            linearWeights = weights
        } else {
            linearWeights = nil
        }
    }

    var classLabels: MLClassLabels? { labels }
    var inputWidth: Int { input.width }
    /// Per-class probabilities, or vote counts without a probability model.
    var outputWidth: Int { k }

    var summary: [String] {
        [
            "SVM classifier: \(k) classes, \(vectors.count) support vectors (\(vectors.isSparse ? "sparse" : "dense"), \(vectors.dimension ?? 0) features), kernel \(kernel)\(linearWeights != nil ? " folded into \(pairs) weight vector\(pairs == 1 ? "" : "s")" : "")",
            hasProbabilityModel ? "probabilities: LIBSVM pairwise sigmoids + coupling; label = most probable class"
                : "no probability model: label by one-vs-one votes",
            "input: \(input.summary)",
        ]
    }

    /// Scratch doubles one row needs.
    var scratchCount: Int { vectors.count + pairs + SVMProbability.scratchCount(classes: k) }

    /// LIBSVM's decision values for every pair. `kvalue` holds `vectors.count` doubles.
    @inline(__always)
    func decisions(_ x: UnsafePointer<Double>, xNorm: Double, kvalue: UnsafeMutablePointer<Double>, into dec: UnsafeMutablePointer<Double>) {
        if let linearWeights {
            linearWeights.withUnsafeBufferPointer { w in
                for p in 0..<pairs {
                    dec[p] = SVMSupportVectors.dot(w.baseAddress! + p * foldWidth, x, foldWidth) - rho[p]
                }
            }
            return
        }
        kernel.evaluate(vectors, x: x, xNorm: xNorm, into: kvalue)
        let l = vectors.count
        coefficients.withUnsafeBufferPointer { coef in
            var p = 0
            for i in 0..<k {
                for j in (i + 1)..<k {
                    var sum = 0.0
                    let coef1 = (j - 1) * l
                    let coef2 = i * l
                    for s in start[i]..<start[i + 1] { sum += coef[coef1 + s] * kvalue[s] }
                    for s in start[j]..<start[j + 1] { sum += coef[coef2 + s] * kvalue[s] }
                    dec[p] = sum - rho[p]
                    p += 1
                }
            }
        }
    }

    /// Per-class scores (probabilities or votes) for one row; returns the winning class.
    @inline(__always)
    func scores(_ x: UnsafePointer<Double>, xNorm: Double, scratch: UnsafeMutablePointer<Double>, into out: UnsafeMutablePointer<Double>) -> Int {
        let kvalue = scratch
        let dec = kvalue + vectors.count
        decisions(x, xNorm: xNorm, kvalue: kvalue, into: dec)
        if hasProbabilityModel {
            probA.withUnsafeBufferPointer { a in
                probB.withUnsafeBufferPointer { b in
                    SVMProbability.estimate(decisions: dec, probA: a.baseAddress!, probB: b.baseAddress!, classes: k,
                                            scratch: dec + pairs, into: out)
                }
            }
        } else {
            for c in 0..<k { out[c] = 0 }
            var p = 0
            for i in 0..<k {
                for j in (i + 1)..<k {
                    if dec[p] > 0 { out[i] += 1 } else { out[j] += 1 }
                    p += 1
                }
            }
        }
        var winner = 0
        for c in 1..<k where out[c] > out[winner] { winner = c }
        return winner
    }

    func prediction(from provider: MLFeatureProvider, options: MLPredictionOptions) throws -> MLFeatureProvider {
        try input.withVector(provider) { x, xNorm in
            withUnsafeTemporaryAllocation(of: Double.self, capacity: scratchCount + k) { buffer in
                let out = buffer.baseAddress!
                let winner = scores(x, xNorm: xNorm, scratch: out + k, into: out)
                return outputs.provider(labels: labels, winner: winner, scores: UnsafeBufferPointer(start: out, count: k))
            }
        }
    }

    func predict(rows: UnsafePointer<Double>, count: Int, into output: UnsafeMutablePointer<Double>) {
        let width = input.width
        withUnsafeTemporaryAllocation(of: Double.self, capacity: scratchCount) { scratch in
            for r in 0..<count {
                let x = rows + r * width
                _ = scores(x, xNorm: SVMInput.squaredNorm(x, count: width), scratch: scratch.baseAddress!, into: output + r * k)
            }
        }
    }
}
