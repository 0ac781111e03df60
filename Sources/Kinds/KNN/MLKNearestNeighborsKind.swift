import CortadoCore
import CortadoSpec
import Foundation

/// k-nearest-neighbours classifiers (`kNearestNeighborsClassifier`, NearestNeighbors.proto).
///
/// What the format says and what Cortado does where it is silent:
/// - Samples are `floatSamples` (float32), one label per sample (`int64ClassLabels` or
///   `stringClassLabels`; coremltools' scikit-learn converter writes the encoded targets
///   `_y`, i.e. class indices 0..n-1). The label count must equal the sample count.
/// - The index is a linear scan or a k-d tree with `leafSize` points per leaf; the tree
///   is built at load time and finds exactly the neighbours the scan finds.
/// - Distance is squared Euclidean (the only distance function in the format).
/// - k is `numberOfNeighbors.defaultValue`, which must lie in its allowed range or set.
///   It may be overridden, within the same allowed values, at load time by the
///   configuration parameter "numberOfNeighbors" (Core ML's `MLParameterKey.numberOfNeighbors`),
///   and per prediction by an int64 input named "numberOfNeighbors" if the model
///   declares one (a Cortado convention: the format names no such input; the
///   scikit-learn converter never declares one). Fewer samples than k: all samples vote.
/// - Weighting, tie-breaking and the probabilities output: see `MLCompiledKNN`.
public enum MLKNearestNeighborsKind: MLModelKind {
    public static let specTypes = ["kNearestNeighborsClassifier"]

    /// The name of the configuration parameter and of the optional input that override k.
    public static let numberOfNeighborsName = "numberOfNeighbors"

    public static func compile(_ spec: CoreML_Specification_Model, context: MLCompileContext) throws -> any MLCompiledModel {
        guard case .kNearestNeighborsClassifier(let knn)? = spec.type else {
            throw MLModelError(.invalidModel, "not a kNearestNeighborsClassifier model")
        }
        guard knn.hasNearestNeighborsIndex else {
            throw MLModelError(.invalidModel, "kNearestNeighborsClassifier has no nearestNeighborsIndex")
        }
        let nn = knn.nearestNeighborsIndex
        let dims = Int(nn.numberOfDimensions)
        guard dims > 0 else {
            throw MLModelError(.invalidModel, "nearestNeighborsIndex.numberOfDimensions is \(dims); it must be positive")
        }
        guard case .squaredEuclideanDistance? = nn.distanceFunction else {
            throw MLModelError(.invalidModel, "nearestNeighborsIndex has no distance function (expected squaredEuclideanDistance)")
        }
        let leafSize: Int?
        let indexDescription: String
        switch nn.indexType {
        case .linearIndex?:
            leafSize = nil
            indexDescription = "linear index"
        case .singleKdTreeIndex(let t)?:
            guard t.leafSize > 0 else {
                throw MLModelError(.invalidModel, "singleKdTreeIndex.leafSize is \(t.leafSize); it must be positive")
            }
            leafSize = Int(t.leafSize)
            indexDescription = "k-d tree index, leaf size \(t.leafSize)"
        case nil:
            throw MLModelError(.invalidModel, "nearestNeighborsIndex has no index type (expected linearIndex or singleKdTreeIndex)")
        }

        var samples: [Double] = []
        samples.reserveCapacity(nn.floatSamples.count * dims)
        for (i, s) in nn.floatSamples.enumerated() {
            guard s.vector.count == dims else {
                throw MLModelError(.invalidModel, "sample \(i) has \(s.vector.count) values, expected numberOfDimensions = \(dims)")
            }
            if let j = s.vector.firstIndex(where: { !$0.isFinite }) {
                throw MLModelError(.invalidModel, "sample \(i) has a non-finite value \(s.vector[j]) at dimension \(j)")
            }
            samples += s.vector.lazy.map(Double.init)
        }
        let sampleCount = nn.floatSamples.count

        let (classes, sampleClass, defaultClass) = try labels(knn, sampleCount: sampleCount)
        let weighting: MLKNNWeighting
        switch knn.weightingScheme {
        case .uniformWeighting?: weighting = .uniform
        case .inverseDistanceWeighting?: weighting = .inverseDistance
        case nil: throw MLModelError(.invalidModel, "kNearestNeighborsClassifier has no weighting scheme (expected uniformWeighting or inverseDistanceWeighting)")
        }
        let count = try neighborCount(knn, configuration: context.configuration)

        let description = context.description
        var kInput: String?
        if let f = description.input(named: numberOfNeighborsName) {
            guard f.type == .int64 else {
                throw MLModelError(.invalidModel, feature: f.name, "the input that overrides the number of neighbours must be int64, not \(f.typeSummary)")
            }
            kInput = f.name
        }
        let vectorInputs = description.inputs.filter { $0.name != kInput }
        guard !vectorInputs.isEmpty else {
            throw MLModelError(.invalidModel, "kNearestNeighborsClassifier has no input to search with (expected a multiArray of \(dims) values)")
        }
        let vectorizer = try MLInputVectorizer(inputs: vectorInputs, expectedLength: dims)
        let names = try MLClassifierOutputNames(description, labels: classes)
        let probabilities = names.probabilitiesName.flatMap { description.output(named: $0) != nil ? $0 : nil }

        return MLCompiledKNN(
            index: MLKNNIndex(dims: dims, samples: samples, leafSize: leafSize),
            sampleClass: sampleClass, classes: classes, defaultClass: defaultClass,
            weighting: weighting, neighborCount: count, neighborCountInput: kInput,
            vectorizer: vectorizer, vectorName: vectorInputs.map(\.name).joined(separator: ", "),
            labelName: names.labelName, probabilitiesName: probabilities, indexDescription: indexDescription)
    }

    /// The classes (distinct labels, sorted), each sample's class and the default label's class.
    static func labels(_ knn: CoreML_Specification_KNearestNeighborsClassifier, sampleCount: Int)
        throws -> (MLClassLabels, [Int], Int) {
        switch (knn.classLabels, knn.defaultClassLabel) {
        case (.int64ClassLabels?, .defaultStringLabel?), (.stringClassLabels?, .defaultInt64Label?):
            throw MLModelError(.invalidModel, "the class labels and the default class label have different types")
        case (nil, nil):
            throw MLModelError(.invalidModel, "kNearestNeighborsClassifier has neither class labels nor a default class label")
        default:
            break
        }
        let isString: Bool
        switch knn.classLabels {
        case .stringClassLabels?: isString = true
        case .int64ClassLabels?: isString = false
        case nil: isString = { if case .defaultStringLabel? = knn.defaultClassLabel { return true } else { return false } }()
        }
        if isString {
            let l = knn.classLabels == nil ? [] : knn.stringClassLabels.vector
            return try build(l, sampleCount: sampleCount,
                             defaultLabel: knn.defaultClassLabel == nil ? nil : knn.defaultStringLabel,
                             sorted: { $0.unicodeScalars.lexicographicallyPrecedes($1.unicodeScalars) }, wrap: MLClassLabels.strings)
        } else {
            let l = knn.classLabels == nil ? [] : knn.int64ClassLabels.vector
            return try build(l, sampleCount: sampleCount,
                             defaultLabel: knn.defaultClassLabel == nil ? nil : knn.defaultInt64Label,
                             sorted: <, wrap: MLClassLabels.int64s)
        }
    }

    private static func build<L: Hashable>(_ perSample: [L], sampleCount: Int, defaultLabel: L?,
                                          sorted: (L, L) -> Bool, wrap: ([L]) -> MLClassLabels) throws -> (MLClassLabels, [Int], Int) {
        guard perSample.count == sampleCount else {
            throw MLModelError(.invalidModel, "kNearestNeighborsClassifier has \(perSample.count) class labels for \(sampleCount) samples (expected one label per sample)")
        }
        var distinct = Array(Set(perSample)).sorted(by: sorted)
        if distinct.isEmpty {
            guard let d = defaultLabel else {
                throw MLModelError(.invalidModel, "kNearestNeighborsClassifier has no samples and no default class label")
            }
            distinct = [d]
        }
        let position = Dictionary(uniqueKeysWithValues: distinct.enumerated().map { ($1, $0) })
        let sampleClass = perSample.map { position[$0]! }
        // The default label only answers when there are no samples; it need not be a class otherwise.
        let defaultClass = defaultLabel.flatMap { position[$0] } ?? 0
        return (wrap(distinct), sampleClass, defaultClass)
    }

    /// k's default and allowed values, with the configuration's override applied.
    static func neighborCount(_ knn: CoreML_Specification_KNearestNeighborsClassifier, configuration: MLModelConfiguration) throws -> MLKNNNeighborCount {
        guard knn.hasNumberOfNeighbors else {
            throw MLModelError(.invalidModel, "kNearestNeighborsClassifier has no numberOfNeighbors")
        }
        let p = knn.numberOfNeighbors
        var range: ClosedRange<Int64>?
        var allowed: Set<Int64>?
        switch p.allowedValues {
        case .range(let r)?:
            guard r.minValue > 0, r.maxValue >= r.minValue else {
                throw MLModelError(.invalidModel, "numberOfNeighbors allows \(r.minValue)…\(r.maxValue); the range must be positive and not empty")
            }
            range = r.minValue...r.maxValue
        case .set(let s)?:
            guard !s.values.isEmpty, s.values.allSatisfy({ $0 > 0 }) else {
                throw MLModelError(.invalidModel, "numberOfNeighbors allows \(s.values); the set must hold positive values")
            }
            allowed = Set(s.values)
        case nil:
            break
        }
        var count = MLKNNNeighborCount(defaultValue: Int(clamping: p.defaultValue), range: range, allowed: allowed)
        guard count.allows(p.defaultValue) else {
            throw MLModelError(.invalidModel, "numberOfNeighbors default \(p.defaultValue) is not allowed (expected \(count.allowedDescription))")
        }
        if let text = configuration.parameters[numberOfNeighborsName] {
            guard let k = Int64(text.trimmingCharacters(in: .whitespaces)), count.allows(k) else {
                throw MLModelError(.invalidModel, "configuration parameter \(numberOfNeighborsName) = '\(text)' is not allowed (expected \(count.allowedDescription))")
            }
            count = MLKNNNeighborCount(defaultValue: Int(k), range: range, allowed: allowed)
        }
        return count
    }
}
