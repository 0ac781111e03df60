import CortadoSpec
import Foundation
import XCTest
@testable import CortadoCore

/// A test-only kind: outputs y = 2·x. It registers under a Model.Type case no Cortado kind
/// implements (the registry is shared by every test in the process, and other tests load
/// real identity models).
private enum DoublingKind: MLModelKind {
    static let specTypes = ["wordEmbedding"]
    static func compile(_ spec: CoreML_Specification_Model, context: MLCompileContext) throws -> any MLCompiledModel {
        Doubler()
    }
    final class Doubler: MLCompiledModel {
        func prediction(from input: MLFeatureProvider, options: MLPredictionOptions) throws -> MLFeatureProvider {
            MLDictionaryFeatureProvider(dictionary: ["y": MLFeatureValue(double: 2 * input.featureValue(for: "x")!.doubleValue)])
        }
    }
}

final class MLModelLoadingTests: XCTestCase {
    func spec(type: CoreML_Specification_Model.OneOf_Type?, version: Int32 = 4) -> CoreML_Specification_Model {
        var s = CoreML_Specification_Model()
        s.specificationVersion = version
        var x = CoreML_Specification_FeatureDescription(); x.name = "x"; x.type.doubleType = .init()
        var y = CoreML_Specification_FeatureDescription(); y.name = "y"; y.type.doubleType = .init()
        s.description_p.input = [x]
        s.description_p.output = [y]
        s.type = type
        return s
    }

    func testRegisteredKindCompilesAndPredicts() throws {
        MLModelKindRegistry.shared.register(DoublingKind.self)
        let data: Data = try spec(type: .wordEmbedding(.init())).serializedData()
        let model = try MLModel(data: data, name: "double")
        XCTAssertEqual(model.specType, "wordEmbedding")
        let out = try model.prediction(from: MLDictionaryFeatureProvider(dictionary: ["x": MLFeatureValue(double: 1.5)]))
        XCTAssertEqual(out.featureValue(for: "y")?.doubleValue, 3)
        XCTAssertThrowsError(try model.prediction(from: MLDictionaryFeatureProvider(dictionary: ["x": MLFeatureValue(string: "1")]))) { error in
            let e = error as! MLModelError
            XCTAssertEqual(e.model, "double")
            XCTAssertEqual(e.feature, "x")
        }
    }

    func testUnsupportedKindIsNamed() throws {
        let data: Data = try spec(type: .wordTagger(.init())).serializedData()
        XCTAssertThrowsError(try MLModel(data: data, name: "tagger")) { error in
            let e = error as! MLModelError
            XCTAssertEqual(e.code, .unsupported)
            XCTAssertTrue(e.description.contains("wordTagger"), e.description)
            XCTAssertTrue(e.description.contains("tagger"), e.description)
        }
    }

    func testNewerSpecificationVersionIsRejected() throws {
        MLModelKindRegistry.shared.register(DoublingKind.self)
        let data: Data = try spec(type: .wordEmbedding(.init()), version: 99).serializedData()
        XCTAssertThrowsError(try MLModel(data: data)) { error in
            XCTAssertTrue("\(error)".contains("99"), "\(error)")
        }
    }

    func testGarbageAndEmptyFilesAreNotModels() {
        XCTAssertThrowsError(try MLModel(data: Data([0xff, 0xff, 0xff, 0xff, 0x0f])))
        XCTAssertThrowsError(try MLModel(data: Data())) { error in
            XCTAssertEqual((error as! MLModelError).code, .invalidModel)
        }
    }

    func testSpecTypeNamesFollowTheFormat() {
        XCTAssertEqual(MLModelSpec.typeName(spec(type: .treeEnsembleClassifier(.init()))), "treeEnsembleClassifier")
        XCTAssertNil(MLModelSpec.typeName(spec(type: nil)))
    }
}
