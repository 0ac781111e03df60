import CortadoSpec

/// The labels a classifier chooses between: all int64 or all strings.
public enum MLClassLabels: Sendable, Equatable {
    case int64s([Int64])
    case strings([String])

    public var count: Int {
        switch self {
        case .int64s(let l): return l.count
        case .strings(let l): return l.count
        }
    }

    /// `.int64` or `.string`.
    public var type: MLFeatureType {
        switch self {
        case .int64s: return .int64
        case .strings: return .string
        }
    }

    /// The format's label list messages.
    public init(strings: CoreML_Specification_StringVector) { self = .strings(strings.vector) }
    public init(int64s: CoreML_Specification_Int64Vector) { self = .int64s(int64s.vector) }

    /// The label at `index` as a feature value.
    public func value(at index: Int) -> MLFeatureValue {
        switch self {
        case .int64s(let l): return MLFeatureValue(int64: l[index])
        case .strings(let l): return MLFeatureValue(string: l[index])
        }
    }

    /// A label → score dictionary feature value (its dictionary is built when first read).
    public func dictionary(scores: UnsafeBufferPointer<Double>) -> MLFeatureValue {
        precondition(scores.count == count)
        return MLFeatureValue(classScores: MLClassScores(labels: self, scores: Array(scores)))
    }

    public func dictionary(scores: [Double]) -> MLFeatureValue {
        precondition(scores.count == count)
        return MLFeatureValue(classScores: MLClassScores(labels: self, scores: scores))
    }

    public var labelStrings: [String] {
        switch self {
        case .int64s(let l): return l.map(String.init)
        case .strings(let l): return l
        }
    }
}

/// A classifier's scores, `scores[i]` for `labels[i]`.
public struct MLClassScores: Sendable {
    public let labels: MLClassLabels
    public let scores: [Double]

    public init(labels: MLClassLabels, scores: [Double]) {
        self.labels = labels
        self.scores = scores
    }

    /// The label → score dictionary.
    public var dictionary: MLFeatureDictionary {
        switch labels {
        case .int64s(let l):
            var d = [Int64: Double](minimumCapacity: l.count)
            for (i, label) in l.enumerated() { d[label] = scores[i] }
            return .int64Keyed(d)
        case .strings(let l):
            var d = [String: Double](minimumCapacity: l.count)
            for (i, label) in l.enumerated() { d[label] = scores[i] }
            return .stringKeyed(d)
        }
    }
}

/// Where a classifier writes its results, read from the model description: the predicted
/// label under `predictedFeatureName`, the label → probability dictionary under
/// `predictedProbabilitiesName`, as Core ML does.
public struct MLClassifierOutputNames: Sendable {
    public let labelName: String
    public let probabilitiesName: String?
    /// Each class's label as a feature value, made once: a value is immutable, so every
    /// prediction that picks the class shares it instead of allocating its own.
    private let labelValues: [MLFeatureValue]

    public init(_ description: MLModelDescription, labels: MLClassLabels) throws {
        guard let label = description.predictedFeatureName ?? description.outputs.first(where: { $0.type == labels.type })?.name else {
            throw MLModelError(.invalidModel, "classifier has no predicted feature name and no output of the label type \(labels.type)")
        }
        if let out = description.output(named: label), out.type != labels.type {
            throw MLModelError(.invalidModel, feature: label, "predicted label output is \(out.type) but the class labels are \(labels.type)")
        }
        // The outputs' own name strings where they are declared: the same storage as the names
        // the model's outputs are matched against, so comparing them is a pointer check.
        labelName = description.output(named: label)?.name ?? label
        labelValues = (0..<labels.count).map { labels.value(at: $0) }
        let probabilities: String?
        if let p = description.predictedProbabilitiesName {
            probabilities = description.output(named: p)?.name ?? p
        } else {
            probabilities = description.outputs.first(where: { $0.type == .dictionary && $0.name != label })?.name
        }
        probabilitiesName = probabilities
        distinctNames = probabilities != nil && probabilities != label
    }

    /// Whether the probabilities have an output of their own (not the label's name).
    public let distinctNames: Bool

    /// The output features for a winning class and per-class scores.
    /// The outputs as a provider (a list: two features at most).
    public func provider(labels: MLClassLabels, winner: Int, scores: UnsafeBufferPointer<Double>) -> MLFeatureProvider {
        guard let p = probabilitiesName else { return MLFeatureListProvider(entries: [(labelName, label(winner, labels))]) }
        // One name for both: the probabilities win, as in `outputs`.
        if p == labelName { return MLFeatureListProvider(entries: [(p, labels.dictionary(scores: scores))]) }
        return MLFeatureListProvider(entries: [(labelName, label(winner, labels)), (p, labels.dictionary(scores: scores))])
    }

    /// The winning class's label value (the shared one when `labels` are the ones given at init).
    func label(_ winner: Int, _ labels: MLClassLabels) -> MLFeatureValue {
        winner < labelValues.count && labelValues.count == labels.count ? labelValues[winner] : labels.value(at: winner)
    }

    public func outputs(labels: MLClassLabels, winner: Int, scores: UnsafeBufferPointer<Double>) -> [String: MLFeatureValue] {
        var out = [String: MLFeatureValue](minimumCapacity: 2)
        out[labelName] = label(winner, labels)
        if let p = probabilitiesName { out[p] = labels.dictionary(scores: scores) }
        return out
    }
}
