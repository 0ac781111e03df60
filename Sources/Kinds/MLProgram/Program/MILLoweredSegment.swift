import CortadoCore

/// A run of a program's ops compiled as a neural network (`MILLowering`), run as one step: the
/// input tensors go in as multi-arrays over their own storage, function inputs only segments
/// read as the request's arrays (`MILFrame.arrays`; neither is copied), and the network writes
/// each output straight into the storage of the tensor that becomes its value (no zero fill,
/// no copy after). The network computes in fp32: an fp16 tensor's elements (fp16 values held
/// as Floats) go in as they are, exactly, and an fp16 output comes back as the network's
/// Floats, which the runner rounds to fp16 as it does every op's (`MILRunner.conform`).
final class MILLoweredSegment: @unchecked Sendable {
    /// The lowered step's type (`cortado report --layers` shows it) and its one variadic input.
    static let stepType = "neural_network"
    static let valuesInput = "values"

    let name: String
    let model: MLModel
    let inputNames: [String]
    let inputShapes: [[Int]]
    let outputNames: [String]
    let outputShapes: [[Int]]
    /// The declared element types of the outputs (fp32 or fp16).
    let outputTypes: [MILDataType]
    /// The program's ops it runs, by type.
    let opCounts: [String: Int]
    /// How many ops it runs.
    var opCount: Int { opCounts.values.reduce(0, +) }
    /// Whether it reads or writes fp16 values (which it computes in fp32).
    let computesFP16: Bool

    init(name: String, model: MLModel, inputNames: [String], inputShapes: [[Int]], outputNames: [String], outputShapes: [[Int]],
         outputTypes: [MILDataType], opCounts: [String: Int], computesFP16: Bool) {
        self.name = name; self.model = model
        self.inputNames = inputNames; self.inputShapes = inputShapes
        self.outputNames = outputNames; self.outputShapes = outputShapes; self.outputTypes = outputTypes
        self.opCounts = opCounts; self.computesFP16 = computesFP16
    }

    /// One input of a prediction: a function input as the request holds it, or a tensor's floats.
    private enum Input {
        case array(MLMultiArray)
        case floats([Float])
    }

    /// The step's kernel: one prediction of the network.
    func run(_ call: MILOpCall) throws -> [MILValue] {
        let bound = call.step.inputs[Self.valuesInput] ?? []
        var inputs: [Input] = []
        inputs.reserveCapacity(bound.count)
        for (i, argument) in bound.enumerated() {
            if case .slot(let slot, _) = argument, let array = call.frame.arrays[slot] {
                inputs.append(.array(array))
                continue
            }
            guard let t = try call.resolve(argument).tensor, t.shape == inputShapes[i], t.dataType == .fp32 || t.dataType == .fp16,
                  case .float(let values) = t.storage else {
                throw call.error("its input '\(inputNames[i])' is not the fp32 or fp16 \(inputShapes[i]) tensor the program declares")
            }
            inputs.append(.floats(values))
        }
        var options = MLPredictionOptions()
        if let outer = call.runner.layerTimes {
            // The network's layers, each timed inside this step's entry.
            let inner = MLLayerTimes()
            let parent = name
            inner.onLayer = { layer, type, nanoseconds in outer.add(name: layer, type: type, nanoseconds: nanoseconds, parent: parent) }
            options.layerTimes = inner
        }
        let results = try wrapping(inputs) { input in try predicting(input, options) }
        return results.indices.map { .tensor(MILTensor(floats: results[$0], shape: outputShapes[$0], dataType: outputTypes[$0])) }
    }

    /// `body` with the inputs from `index` on as features: arrays as they are, floats wrapped
    /// in multi-arrays over their storage (read, never written).
    private func wrapping<R>(_ inputs: [Input], from index: Int = 0, _ features: [(name: String, value: MLFeatureValue)] = [],
                             _ body: (MLFeatureProvider) throws -> R) throws -> R {
        if index == inputs.count { return try body(MLFeatureListProvider.make(features)) }
        switch inputs[index] {
        case .array(let array):
            return try wrapping(inputs, from: index + 1, features + [(inputNames[index], MLFeatureValue(multiArray: array))], body)
        case .floats(let floats):
            return try floats.withUnsafeBufferPointer { p in
                let array = try MLMultiArray(dataPointer: UnsafeMutableRawPointer(mutating: p.baseAddress!), shape: inputShapes[index], dataType: .float32)
                return try wrapping(inputs, from: index + 1, features + [(inputNames[index], MLFeatureValue(multiArray: array))], body)
            }
        }
    }

    /// Predicts with the outputs from `index` on backed by new, uninitialised arrays of floats
    /// (the network writes every element); returns them.
    private func predicting(_ input: MLFeatureProvider, _ options: MLPredictionOptions, from index: Int = 0) throws -> [[Float]] {
        if index == outputNames.count {
            let out: MLFeatureProvider
            do {
                out = try model.compiled.prediction(from: input, options: options)
            } catch let error as MLModelError {
                throw error.inModel(model.name)
            }
            for name in outputNames {
                guard let backing = options.outputBackings[name], let array = out.featureValue(for: name)?.multiArrayValue else {
                    throw MLModelError(.generic, model: model.name, "the network did not compute '\(name)'")
                }
                // (A path that did not write into the backing: copied.)
                if array !== backing { array.copyFloats(into: backing.dataPointer.assumingMemoryBound(to: Float.self)) }
            }
            return []
        }
        var rest: [[Float]] = []
        let count = outputShapes[index].reduce(1, *)
        let values = try [Float](unsafeUninitializedCapacity: count) { buffer, initialized in
            var options = options
            options.outputBackings[outputNames[index]] = try MLMultiArray(dataPointer: buffer.baseAddress!, shape: outputShapes[index], dataType: .float32)
            rest = try predicting(input, options, from: index + 1)
            initialized = count
        }
        return [values] + rest
    }
}
