import CortadoCore

/// The growing set of features while one prediction runs through a pipeline: the
/// caller's input, with the outputs that stages have produced laid over it.
///
/// Only the outputs the plan says are read later are kept, each in a fixed slot, so a
/// lookup is one dictionary probe into the plan's shared slot table plus an array read.
final class MLPipelineFeatures: MLFeatureProvider {
    let input: MLFeatureProvider
    let slotIndex: [String: Int]
    private(set) var values: [MLFeatureValue?]

    init(input: MLFeatureProvider, slotIndex: [String: Int], slotCount: Int) {
        self.input = input
        self.slotIndex = slotIndex
        self.values = Array(repeating: nil, count: slotCount)
    }

    func set(_ value: MLFeatureValue?, slot: Int) { values[slot] = value }

    func value(slot: Int) -> MLFeatureValue? { values[slot] }

    var featureNames: Set<String> {
        var names = input.featureNames
        for (name, slot) in slotIndex where values[slot] != nil { names.insert(name) }
        return names
    }

    func featureValue(for featureName: String) -> MLFeatureValue? {
        if let slot = slotIndex[featureName], let value = values[slot] { return value }
        return input.featureValue(for: featureName)
    }
}
