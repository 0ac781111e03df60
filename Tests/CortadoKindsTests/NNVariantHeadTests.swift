import CortadoModels
import Foundation
import XCTest

/// A network variant's stored head (`MLModel.variantHead`, `MLVariantHead`,
/// `MLModel.variantSpecification(head:)`): only the layers an update changed travel, and
/// base + head gives back the variant's spec and its predictions.
final class NNVariantHeadTests: XCTestCase {
    override class func setUp() { CortadoModels.registerBuiltinKinds() }

    private static func dense(_ name: String, _ input: String, _ output: String, cin: Int, cout: Int, seed: Int,
                              updatable: Bool) -> CoreML_Specification_NeuralNetworkLayer {
        var layer = CoreML_Specification_NeuralNetworkLayer()
        layer.name = name; layer.input = [input]; layer.output = [output]; layer.isUpdatable = updatable
        var ip = CoreML_Specification_InnerProductLayerParams()
        ip.inputChannels = UInt64(cin); ip.outputChannels = UInt64(cout); ip.hasBias_p = true
        ip.weights.floatValue = (0 ..< cin * cout).map { Float(sin(Double($0 * 7 + seed))) * 0.3 }
        ip.bias.floatValue = (0 ..< cout).map { Float(cos(Double($0 + seed))) * 0.1 }
        ip.weights.isUpdatable = updatable; ip.bias.isUpdatable = updatable
        layer.innerProduct = ip
        return layer
    }

    /// x[8] → body (8 → 16, fixed) → ReLU → head (16 → 3, updatable) → softmax "probs".
    private func baseSpec() -> CoreML_Specification_Model {
        var spec = CoreML_Specification_Model()
        spec.specificationVersion = 4
        spec.isUpdatable = true
        func array(_ name: String, _ size: Int64, _ type: CoreML_Specification_ArrayFeatureType.ArrayDataType) -> CoreML_Specification_FeatureDescription {
            arrayDescription(name, [size], type)
        }
        spec.description_p.input = [array("x", 8, .float32)]
        spec.description_p.output = [array("probs", 3, .float32)]
        spec.description_p.trainingInput = [array("x", 8, .float32), array("probs_true", 1, .int32)]
        var relu = CoreML_Specification_NeuralNetworkLayer()
        relu.name = "relu"; relu.input = ["h"]; relu.output = ["hr"]; relu.activation.reLu = .init()
        var sm = CoreML_Specification_NeuralNetworkLayer()
        sm.name = "sm"; sm.input = ["z"]; sm.output = ["probs"]; sm.softmax = .init()
        spec.neuralNetwork.layers = [Self.dense("body", "x", "h", cin: 8, cout: 16, seed: 1, updatable: false), relu,
                                     Self.dense("head", "hr", "z", cin: 16, cout: 3, seed: 2, updatable: true), sm]
        var loss = CoreML_Specification_LossLayer()
        loss.name = "loss"
        loss.categoricalCrossEntropyLossLayer.input = "probs"
        loss.categoricalCrossEntropyLossLayer.target = "probs_true"
        spec.neuralNetwork.updateParams.lossLayers = [loss]
        spec.neuralNetwork.updateParams.optimizer.sgdOptimizer.learningRate.defaultValue = 0.1
        spec.neuralNetwork.updateParams.optimizer.sgdOptimizer.miniBatchSize.defaultValue = 1
        spec.neuralNetwork.updateParams.epochs.defaultValue = 1
        return spec
    }

    /// The base with other head weights: what an update leaves.
    private func variantSpec(_ base: CoreML_Specification_Model) -> CoreML_Specification_Model {
        var spec = base
        spec.neuralNetwork.layers[2] = Self.dense("head", "hr", "z", cin: 16, cout: 3, seed: 9, updatable: true)
        return spec
    }

    private func probs(_ model: MLModel, _ x: [Float]) throws -> [Double] {
        let out = try model.prediction(from: MLDictionaryFeatureProvider(dictionary: ["x": MLMultiArray(x.map(Double.init), shape: [8], dataType: .float32)]))
        let array = try XCTUnwrap(out.featureValue(for: "probs")?.multiArrayValue)
        return array.doubleValues()
    }

    func testHeadHoldsOnlyTheChangedLayerAndRoundTrips() throws {
        let baseSpec = baseSpec()
        let base = try MLModel(specification: baseSpec, name: "net")
        let variant = variantSpec(baseSpec)

        let head = base.variantHead(of: variant)
        XCTAssertEqual(head.neuralNetwork.layers.map(\.name), ["head"])
        XCTAssertTrue(head.description_p.input.isEmpty, "a head carries no description of its own")
        XCTAssertFalse(head.neuralNetwork.hasUpdateParams)

        let stored = try MLVariantHead(specification: head, baseVersion: "3", updates: 2).serializedData()
        XCTAssertLessThan(stored.count, (try baseSpec.serializedData()).count / 2)
        let read = try MLVariantHead(serializedBytes: stored)
        XCTAssertEqual(read.baseVersion, "3")
        XCTAssertEqual(read.updates, 2)
        XCTAssertNil(read.specification.description_p.metadata.userDefined[MLVariantHead.baseVersionKey])

        let merged = try base.variantSpecification(head: read.specification)
        XCTAssertEqual(merged, variant)

        // Compiled over the base (sharing its body) it answers as the variant compiled alone,
        // and not as the base.
        let shared = try base.variant(specification: merged)
        XCTAssertTrue(shared.sharesBase)
        let alone = try MLModel(specification: variant, name: "net")
        let x: [Float] = [0.5, -1, 2, 0.25, -0.75, 1.5, 0, -2]
        XCTAssertEqual(try probs(shared, x), try probs(alone, x))
        XCTAssertNotEqual(try probs(shared, x), try probs(base, x))
    }

    func testUnchangedVariantHasAnEmptyHead() throws {
        let baseSpec = baseSpec()
        let base = try MLModel(specification: baseSpec, name: "net")
        let head = base.variantHead(of: baseSpec)
        XCTAssertTrue(head.neuralNetwork.layers.isEmpty)
        XCTAssertEqual(try base.variantSpecification(head: head), baseSpec)
    }

    func testVariantChangedElsewhereStoresItsWholeSpec() throws {
        let baseSpec = baseSpec()
        let base = try MLModel(specification: baseSpec, name: "net")
        var variant = variantSpec(baseSpec)
        variant.description_p.metadata.shortDescription = "renamed"
        let head = base.variantHead(of: variant)
        XCTAssertEqual(head, variant)
        XCTAssertEqual(try base.variantSpecification(head: head), variant)
    }

    func testHeadsThatDoNotFitTheBaseAreRefused() throws {
        let baseSpec = baseSpec()
        let base = try MLModel(specification: baseSpec, name: "net")
        var head = base.variantHead(of: variantSpec(baseSpec))

        var unknown = head
        unknown.neuralNetwork.layers[0].name = "nope"
        XCTAssertThrowsError(try base.variantSpecification(head: unknown)) { error in
            XCTAssertTrue("\(error)".contains("'nope'"), "\(error)")
        }
        var rewired = head
        rewired.neuralNetwork.layers[0].input = ["x"]
        XCTAssertThrowsError(try base.variantSpecification(head: rewired)) { error in
            XCTAssertTrue("\(error)".contains("other blobs"), "\(error)")
        }
        head.neuralNetworkRegressor.layers = head.neuralNetwork.layers
        XCTAssertThrowsError(try base.variantSpecification(head: head))
        XCTAssertThrowsError(try MLVariantHead(serializedBytes: Data([0xff, 0xff, 0xff, 0x07]))) { error in
            XCTAssertTrue("\(error)".contains("not a variant head"), "\(error)")
        }
        XCTAssertThrowsError(try MLVariantHead(serializedBytes: try CoreML_Specification_Model().serializedData())) { error in
            XCTAssertTrue("\(error)".contains(MLVariantHead.baseVersionKey), "\(error)")
        }
    }
}
