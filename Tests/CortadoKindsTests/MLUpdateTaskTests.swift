import CortadoModels
import Foundation
import XCTest

/// The Swift API of updates (`MLUpdateTask` and friends), with Core ML's names: events and
/// metrics as an app sees them, overrides, cancel, and what the written model is. The numbers
/// themselves are checked against a NumPy reference in Tests/Update.
final class MLUpdateTaskTests: XCTestCase {
    override class func setUp() { CortadoModels.registerBuiltinKinds() }

    /// x[2] → fc (2 → 2, updatable) → softmax "probs"; cross-entropy on "probs_true";
    /// SGD (learning rate 0.5, mini-batches of 2), 3 epochs, no shuffle.
    private func updatableSpec() -> CoreML_Specification_Model {
        var spec = CoreML_Specification_Model()
        spec.specificationVersion = 4
        spec.isUpdatable = true
        func array(_ name: String, _ size: Int64, _ type: CoreML_Specification_ArrayFeatureType.ArrayDataType) -> CoreML_Specification_FeatureDescription {
            arrayDescription(name, [size], type)
        }
        spec.description_p.input = [array("x", 2, .double)]
        spec.description_p.output = [array("probs", 2, .double)]
        spec.description_p.trainingInput = [array("x", 2, .double), array("probs_true", 1, .int32)]
        var fc = CoreML_Specification_NeuralNetworkLayer()
        fc.name = "fc"; fc.input = ["x"]; fc.output = ["z"]; fc.isUpdatable = true
        var ip = CoreML_Specification_InnerProductLayerParams()
        ip.inputChannels = 2; ip.outputChannels = 2; ip.hasBias_p = true
        ip.weights.floatValue = [0.1, -0.2, 0.3, 0.05]; ip.weights.isUpdatable = true
        ip.bias.floatValue = [0, 0]; ip.bias.isUpdatable = true
        fc.innerProduct = ip
        var sm = CoreML_Specification_NeuralNetworkLayer()
        sm.name = "sm"; sm.input = ["z"]; sm.output = ["probs"]; sm.softmax = .init()
        spec.neuralNetwork.layers = [fc, sm]
        var loss = CoreML_Specification_LossLayer()
        loss.name = "loss"
        loss.categoricalCrossEntropyLossLayer.input = "probs"
        loss.categoricalCrossEntropyLossLayer.target = "probs_true"
        var update = CoreML_Specification_NetworkUpdateParameters()
        update.lossLayers = [loss]
        update.optimizer.sgdOptimizer.learningRate.defaultValue = 0.5
        update.optimizer.sgdOptimizer.learningRate.range.maxValue = 1
        update.optimizer.sgdOptimizer.miniBatchSize.defaultValue = 2
        update.optimizer.sgdOptimizer.momentum.defaultValue = 0
        update.epochs.defaultValue = 3
        update.epochs.range.minValue = 1
        update.epochs.range.maxValue = 10
        update.shuffle.defaultValue = false
        spec.neuralNetwork.updateParams = update
        return spec
    }

    private func file(_ spec: CoreML_Specification_Model) throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("update-\(UUID().uuidString).mlmodel")
        try Data(spec.serializedBytes() as [UInt8]).write(to: url)
        addTeardownBlock { try? FileManager.default.removeItem(at: url) }
        return url
    }

    /// Four separable examples: class 0 where x₀ > x₁.
    private func examples() throws -> MLArrayBatchProvider {
        let rows: [([Double], Int)] = [([1, 0], 0), ([0, 1], 1), ([2, 0.5], 0), ([0.5, 2], 1)]
        return MLArrayBatchProvider(array: try rows.map { x, t in
            try MLDictionaryFeatureProvider(dictionary: [
                "x": MLMultiArray(x, shape: [2]),
                "probs_true": MLMultiArray([Double(t)], shape: [1], dataType: .int32),
            ])
        })
    }

    func testEventsMetricsAndTheWrittenModel() throws {
        var events: [(MLUpdateProgressEvent, [MLMetricKey: MLParameterValue])] = []
        var final: MLUpdateContext?
        let handlers = MLUpdateProgressHandlers(forEvents: [.trainingBegin, .epochEnd, .miniBatchEnd],
                                                progressHandler: { events.append(($0.event, $0.metrics)) },
                                                completionHandler: { final = $0 })
        let task = try MLUpdateTask(forModelAt: file(updatableSpec()), trainingData: examples(), configuration: nil, progressHandlers: handlers)
        XCTAssertEqual(task.state, .suspended)
        task.resume()
        task.waitUntilCompleted()
        XCTAssertEqual(task.state, .completed)
        XCTAssertEqual(events.filter { $0.0 == .trainingBegin }.count, 1)
        XCTAssertEqual(events.filter { $0.0 == .miniBatchEnd }.count, 6)  // 2 mini-batches × 3 epochs
        let epochEnds = events.filter { $0.0 == .epochEnd }
        XCTAssertEqual(epochEnds.map { $0.1[.epochIndex]?.intValue }, [0, 1, 2])
        let losses = epochEnds.compactMap { $0.1[.lossValue]?.doubleValue }
        XCTAssertEqual(losses.count, 3)
        XCTAssertLessThan(losses[2], losses[0], "the loss falls on separable data")
        let context = try XCTUnwrap(final)
        XCTAssertEqual(context.parameters[.epochs], .int(3))
        XCTAssertEqual(context.parameters[.learningRate], .double(0.5))

        // The trained model predicts class 0 for x₀ ≫ x₁, and its file is still updatable.
        let trained = try context.model
        let p = try trained.prediction(from: MLDictionaryFeatureProvider(dictionary: ["x": MLMultiArray([3, 0], shape: [2])]))
        let probs = try XCTUnwrap(p.featureValue(for: "probs")?.multiArrayValue)
        XCTAssertGreaterThan(probs.double(at: 0), probs.double(at: 1))
        let out = FileManager.default.temporaryDirectory.appendingPathComponent("trained-\(UUID().uuidString).mlmodel")
        defer { try? FileManager.default.removeItem(at: out) }
        try context.write(to: out)
        let reloaded = try MLModel(contentsOf: out)
        XCTAssertTrue(reloaded.modelDescription.isUpdatable)
        XCTAssertEqual(reloaded.modelDescription.trainingInputs.map(\.name), ["x", "probs_true"])
        XCTAssertNotEqual(reloaded.specification.neuralNetwork.layers[0].innerProduct.weights.floatValue, [0.1, -0.2, 0.3, 0.05])
    }

    func testOverridesAndCompletionHandlerForm() throws {
        var configuration = MLModelConfiguration()
        configuration.updateParameters = [.epochs: 1, .learningRate: 0.1, .shuffle: true, .seed: 3]
        var final: MLUpdateContext?
        let task = try MLUpdateTask(forModelAt: file(updatableSpec()), trainingData: examples(), configuration: configuration,
                                    completionHandler: { final = $0 })
        task.resume()
        task.waitUntilCompleted()
        let context = try XCTUnwrap(final)
        XCTAssertEqual(context.metrics[.epochIndex], .int(0))
        XCTAssertEqual(context.parameters[.epochs], .int(1))
        XCTAssertEqual(context.parameters[.shuffle], .bool(true))
        XCTAssertNotNil(context.metrics[.lossValue])
    }

    func testCancelStopsAfterTheMiniBatch() throws {
        var batches = 0
        var task: MLUpdateTask?
        let handlers = MLUpdateProgressHandlers(forEvents: [.miniBatchEnd], progressHandler: { _ in
            batches += 1
            task?.cancel()
        }, completionHandler: { _ in })
        task = try MLUpdateTask(forModelAt: file(updatableSpec()), trainingData: examples(), configuration: nil, progressHandlers: handlers)
        task?.resume()
        task?.waitUntilCompleted()
        XCTAssertEqual(batches, 1)
        XCTAssertEqual(task?.state, .completed)
    }

    func testRefusals() throws {
        var plain = updatableSpec()
        plain.isUpdatable = false
        XCTAssertThrowsError(try MLUpdateTask(forModelAt: file(plain), trainingData: examples(), completionHandler: { _ in })) {
            XCTAssertTrue("\($0)".contains("not updatable"), "\($0)")
        }
        var configuration = MLModelConfiguration()
        configuration.updateParameters = [.learningRate: -1]
        XCTAssertThrowsError(try MLUpdateTask(forModelAt: file(updatableSpec()), trainingData: examples(), configuration: configuration,
                                              completionHandler: { _ in })) {
            XCTAssertTrue("\($0)".contains("learningRate"), "\($0)")
        }
        configuration.updateParameters = [.beta1: 0.5]  // an Adam setting, on an SGD network
        XCTAssertThrowsError(try MLUpdateTask(forModelAt: file(updatableSpec()), trainingData: examples(), configuration: configuration,
                                              completionHandler: { _ in })) {
            XCTAssertTrue("\($0)".contains("beta1"), "\($0)")
        }
        let missingTarget = MLArrayBatchProvider(array: [try MLDictionaryFeatureProvider(dictionary: ["x": MLMultiArray([1, 0], shape: [2])])])
        XCTAssertThrowsError(try MLUpdateTask(forModelAt: file(updatableSpec()), trainingData: missingTarget, completionHandler: { _ in })) {
            XCTAssertTrue("\($0)".contains("probs_true"), "\($0)")
        }
    }

    /// A variant (`MLModel.variant(specification:)`) of a network with a fixed body: compiled
    /// over the base's layers, it predicts as the same spec compiled in full, and the base
    /// predicts as before. A spec that differs elsewhere than in its layers is compiled in full.
    func testVariantSharesTheBaseAndPredictsAsAFullCompile() throws {
        var spec = updatableSpec()
        var body = CoreML_Specification_NeuralNetworkLayer()
        body.name = "body"; body.input = ["x"]; body.output = ["h"]
        var ip = CoreML_Specification_InnerProductLayerParams()
        ip.inputChannels = 2; ip.outputChannels = 2; ip.hasBias_p = true
        ip.weights.floatValue = [0.7, -0.4, 0.2, 0.9]
        ip.bias.floatValue = [0.1, -0.1]
        body.innerProduct = ip
        var relu = CoreML_Specification_NeuralNetworkLayer()
        relu.name = "relu"; relu.input = ["h"]; relu.output = ["hr"]; relu.activation.reLu = .init()
        spec.neuralNetwork.layers[0].input = ["hr"]
        spec.neuralNetwork.layers.insert(contentsOf: [body, relu], at: 0)
        let base = try MLModel(specification: spec)
        var final: MLUpdateContext?
        let task = try MLUpdateTask(model: base, trainingData: examples(),
                                    progressHandlers: MLUpdateProgressHandlers(forEvents: [], progressHandler: nil, completionHandler: { final = $0 }))
        task.resume()
        task.waitUntilCompleted()
        let trained = try XCTUnwrap(XCTUnwrap(final).specification)

        let variant = try base.variant(specification: trained)
        XCTAssertTrue(variant.sharesBase)
        let full = try MLModel(specification: trained)
        func probs(_ model: MLModel, _ x: [Double]) throws -> [Double] {
            let out = try model.prediction(from: MLDictionaryFeatureProvider(dictionary: ["x": MLMultiArray(x, shape: [2])]))
            let a = try XCTUnwrap(out.featureValue(for: "probs")?.multiArrayValue)
            return (0..<a.count).map { a.double(at: $0) }
        }
        for x in [[1.0, 0], [0, 1], [0.3, -2], [2, 2]] {
            let want = try probs(full, x)
            let got = try probs(variant, x)
            for (g, w) in zip(got, want) { XCTAssertEqual(g, w, accuracy: 1e-6) }
            XCTAssertNotEqual(try probs(base, x), want, "the base keeps its own head")
        }

        var other = trained
        other.description_p.metadata.shortDescription = "not the base's description"
        let unshared = try base.variant(specification: other)
        XCTAssertFalse(unshared.sharesBase)
        for (g, w) in zip(try probs(unshared, [1, 0]), try probs(full, [1, 0])) { XCTAssertEqual(g, w, accuracy: 1e-6) }
    }
}
