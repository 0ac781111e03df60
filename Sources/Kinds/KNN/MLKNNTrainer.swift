import CortadoCore
import CortadoSpec

/// Updates a k-NN classifier as Core ML does: the labelled examples are appended to the
/// index (after the samples it has, in the given order), in one pass with no loss. An
/// example must fit the model as it is: a vector of `numberOfDimensions` finite values and
/// a label of the model's label type (string or int64). k, the weighting and the index
/// type stay as they are; a k-d tree is rebuilt when the written model is loaded.
final class MLKNNTrainer: MLModelTrainer {
    private var spec: CoreML_Specification_Model
    private let vectorizer: MLInputVectorizer
    private let labelName: String
    private let stringLabels: Bool
    private var vectors: [[Float]] = []
    private var labels: [MLFeatureValue] = []
    private var appended = false

    var parameters: [MLParameterKey: MLParameterValue] { [.epochs: 1] }
    var epochCount: Int { 1 }

    init(spec: CoreML_Specification_Model, description: MLModelDescription, overrides: [MLParameterKey: MLParameterValue]) throws {
        self.spec = spec
        if let key = overrides.keys.map(\.rawValue).sorted().first(where: { $0 != MLParameterKey.epochs.rawValue }) {
            throw MLModelError(.featureType, "update parameter '\(key)' does not apply to a k-NN classifier (its update appends the examples; it takes no hyperparameters)")
        }
        if let epochs = overrides[.epochs], epochs.intValue != 1 {
            throw MLModelError(.featureType, "update parameter 'epochs' is \(epochs); a k-NN update is one pass (1)")
        }
        let knn = spec.kNearestNeighborsClassifier
        guard let label = description.predictedFeatureName,
              description.trainingInputs.contains(where: { $0.name == label }) else {
            throw MLModelError(.invalidModel, "the k-NN classifier's training inputs do not include its label (the predicted feature)")
        }
        labelName = label
        switch (knn.classLabels, knn.defaultClassLabel) {
        case (.stringClassLabels?, _), (nil, .defaultStringLabel?): stringLabels = true
        default: stringLabels = false
        }
        let vectorInputs = description.trainingInputs.filter { $0.name != label }
        vectorizer = try MLInputVectorizer(inputs: vectorInputs, expectedLength: Int(knn.nearestNeighborsIndex.numberOfDimensions))
    }

    func prepare(_ data: MLBatchProvider) throws {
        for i in 0..<data.count {
            let row = data.features(at: i)
            let vector: [Double]
            do { vector = try vectorizer.vector(row) } catch var error as MLModelError {
                error.message = "training example \(i): " + error.message
                throw error
            }
            if let d = vector.firstIndex(where: { !$0.isFinite }) {
                throw MLModelError.featureType(labelName, "training example \(i): element \(d) of the vector is \(vector[d]); a k-NN sample must be finite")
            }
            guard let label = row.featureValue(for: labelName) else {
                throw MLModelError.featureType(labelName, "training example \(i): the label is missing")
            }
            switch label.storage {
            case .string where stringLabels, .int64 where !stringLabels: break
            default:
                throw MLModelError.featureType(labelName, "training example \(i): the label must be \(stringLabels ? "a string" : "an int64"), as the model's labels are, not \(label.type)")
            }
            vectors.append(vector.map(Float.init))
            labels.append(label)
        }
    }

    func runEpoch(_ index: Int, miniBatchEnd: (_ batch: Int, _ loss: Double?) -> Bool) throws -> Double? {
        guard !appended else { return nil }
        var knn = spec.kNearestNeighborsClassifier
        for (vector, label) in zip(vectors, labels) {
            var sample = CoreML_Specification_FloatVector()
            sample.vector = vector
            knn.nearestNeighborsIndex.floatSamples.append(sample)
            if stringLabels { knn.stringClassLabels.vector.append(label.stringValue) } else { knn.int64ClassLabels.vector.append(label.int64Value) }
        }
        spec.kNearestNeighborsClassifier = knn
        appended = true
        _ = miniBatchEnd(0, nil)
        return nil
    }

    func currentSpecification() throws -> CoreML_Specification_Model { spec }
}

extension MLCompiledKNN: MLUpdatableCompiledModel {
    func makeTrainer(specification: CoreML_Specification_Model, description: MLModelDescription,
                     overrides: [MLParameterKey: MLParameterValue]) throws -> any MLModelTrainer {
        try MLKNNTrainer(spec: specification, description: description, overrides: overrides)
    }
}
