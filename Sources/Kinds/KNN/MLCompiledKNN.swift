import CortadoCore

/// How neighbours vote.
enum MLKNNWeighting: Sendable {
    /// Each of the k neighbours has one vote.
    case uniform
    /// A neighbour's vote is 1 / distance, where distance is the index's distance
    /// function (squared Euclidean: the format's `InverseDistanceWeighting` says "highest
    /// sum of (1 / distance)" and its only distance function is `SquaredEuclideanDistance`).
    /// When some neighbours are at distance 0 (exact matches), they alone vote, one vote
    /// each, as scikit-learn does for `weights='distance'`.
    case inverseDistance
}

/// How many neighbours vote: the model's default, and what a caller may ask for instead.
struct MLKNNNeighborCount: Sendable {
    let defaultValue: Int
    let range: ClosedRange<Int64>?
    let allowed: Set<Int64>?

    func allows(_ k: Int64) -> Bool {
        guard k > 0 else { return false }
        if let range, !range.contains(k) { return false }
        if let allowed, !allowed.contains(k) { return false }
        return true
    }

    var allowedDescription: String {
        if let allowed { return "one of " + allowed.sorted().map(String.init).joined(separator: ", ") }
        if let range { return "\(range.lowerBound)…\(range.upperBound)" }
        return "a positive number"
    }
}

/// A compiled k-nearest-neighbours classifier.
///
/// Prediction: gather the input vector, find the k nearest samples (squared Euclidean
/// distance; ties between samples at the same distance go to the earlier sample), add
/// up their votes per class, and pick the class with the highest total. Classes are the
/// distinct sample labels sorted ascending (numbers by value, strings by Unicode scalar
/// values), as scikit-learn's `classes_`; a tie in votes goes to the first of them, as
/// scikit-learn's `predict` does (argmax / weighted mode pick the smallest class index).
/// The probabilities output, when declared, is each class's share of the votes.
/// A model with no samples predicts its default label (probability 1).
final class MLCompiledKNN: MLCompiledModel, @unchecked Sendable {
    let index: MLKNNIndex
    /// Class index (into `classes`) of each sample.
    let sampleClass: [Int]
    let classes: MLClassLabels
    let defaultClass: Int
    let weighting: MLKNNWeighting
    let neighborCount: MLKNNNeighborCount
    /// An optional int64 input that overrides k per prediction.
    let neighborCountInput: String?
    let vectorizer: MLInputVectorizer
    /// The vectorized inputs' name(s), for messages.
    let vectorName: String
    let labelName: String
    let probabilitiesName: String?
    let indexDescription: String

    init(index: MLKNNIndex, sampleClass: [Int], classes: MLClassLabels, defaultClass: Int,
         weighting: MLKNNWeighting, neighborCount: MLKNNNeighborCount, neighborCountInput: String?,
         vectorizer: MLInputVectorizer, vectorName: String, labelName: String, probabilitiesName: String?,
         indexDescription: String) {
        self.index = index
        self.sampleClass = sampleClass
        self.classes = classes
        self.defaultClass = defaultClass
        self.weighting = weighting
        self.neighborCount = neighborCount
        self.neighborCountInput = neighborCountInput
        self.vectorizer = vectorizer
        self.vectorName = vectorName
        self.labelName = labelName
        self.probabilitiesName = probabilitiesName
        self.indexDescription = indexDescription
    }

    var classLabels: MLClassLabels? { classes }

    var summary: [String] {
        [
            "\(index.count) samples of \(index.dims) dimensions, \(classes.count) classes",
            indexDescription + (index.tree.map { " (\($0.leafCount) leaves, depth \($0.depth))" } ?? ""),
            "k = \(neighborCount.defaultValue) (allowed \(neighborCount.allowedDescription))"
                + (neighborCountInput.map { ", overridable by input '\($0)'" } ?? ""),
            "weighting: \(weighting == .uniform ? "uniform" : "inverse distance")",
        ]
    }

    /// The k this prediction uses.
    func k(for input: MLFeatureProvider) throws -> Int {
        guard let name = neighborCountInput, let value = input.featureValue(for: name), !value.isUndefined else {
            return neighborCount.defaultValue
        }
        let k: Int64
        switch value.storage {
        case .int64(let v): k = v
        case .double(let v) where v == v.rounded() && abs(v) < 1e15: k = Int64(v)
        default: throw MLModelError.featureType(name, "number of neighbours must be an integer, got \(value)")
        }
        guard neighborCount.allows(k) else {
            throw MLModelError.featureType(name, "number of neighbours \(k) is not allowed (expected \(neighborCount.allowedDescription))")
        }
        return Int(k)
    }

    func prediction(from input: MLFeatureProvider, options: MLPredictionOptions) throws -> MLFeatureProvider {
        let k = try k(for: input)
        let dims = vectorizer.length
        let classCount = classes.count
        return try withUnsafeTemporaryAllocation(of: Double.self, capacity: dims + classCount) { buf in
            let x = buf.baseAddress!
            let scores = x + dims
            try vectorizer.gather(input, into: x)
            for d in 0..<dims where !x[d].isFinite {
                throw MLModelError.featureType(vectorName, "element \(d) of the input vector is \(x[d]); distances to it are undefined")
            }
            scores.initialize(repeating: 0, count: classCount)
            let found = withUnsafeTemporaryAllocation(of: MLKNNNeighbor.self, capacity: max(min(k, index.count), 1)) { nb in
                let n = index.search(x, k: k, into: nb.baseAddress!)
                vote(nb.baseAddress!, n, scores)
                return n
            }
            var winner = defaultClass
            if found == 0 {
                scores[defaultClass] = 1
            } else {
                var total = 0.0
                var best = -Double.infinity
                for c in 0..<classCount {
                    total += scores[c]
                    if scores[c] > best { best = scores[c]; winner = c }  // first maximum wins ties
                }
                if total > 0 { for c in 0..<classCount { scores[c] /= total } }
            }
            var out: [String: MLFeatureValue] = [labelName: classes.value(at: winner)]
            if let p = probabilitiesName {
                out[p] = classes.dictionary(scores: UnsafeBufferPointer(start: scores, count: classCount))
            }
            return MLDictionaryFeatureProvider(dictionary: out)
        }
    }

    /// Adds the votes of `n` neighbours (nearest first) into `scores`.
    @inline(__always)
    func vote(_ nb: UnsafePointer<MLKNNNeighbor>, _ n: Int, _ scores: UnsafeMutablePointer<Double>) {
        switch weighting {
        case .uniform:
            for i in 0..<n { scores[sampleClass[nb[i].sample]] += 1 }
        case .inverseDistance:
            if n > 0 && nb[0].distance == 0 {
                // Exact matches win outright (scikit-learn's rule): only they vote.
                for i in 0..<n where nb[i].distance == 0 { scores[sampleClass[nb[i].sample]] += 1 }
            } else {
                for i in 0..<n { scores[sampleClass[nb[i].sample]] += 1 / nb[i].distance }
            }
        }
    }
}
