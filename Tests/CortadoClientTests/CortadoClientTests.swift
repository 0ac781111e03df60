import CortadoClient
import CortadoGRPC
import CortadoModels
import CortadoServer
import Foundation
import XCTest

/// `CortadoClient` against Cortado's real services: in process (the router a
/// `CortadoServerApp` builds, reached through `InProcessClientTransport`) and over HTTP/2
/// (`cortado serve`, in `CortadoServeTests`). The truth is the same model file predicted
/// here with `MLModel`.
final class CortadoClientTests: XCTestCase {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let repository = root.appendingPathComponent("examples/repository")
    static let irisFile = repository.appendingPathComponent("iris/1/model.mlmodel")
    static let flowers: [[String: Double]] = [
        ["sepal_length": 5.1, "sepal_width": 3.5, "petal_length": 1.4, "petal_width": 0.2],
        ["sepal_length": 6.7, "sepal_width": 3.0, "petal_length": 5.2, "petal_width": 2.3],
        ["sepal_length": 5.9, "sepal_width": 2.8, "petal_length": 4.3, "petal_width": 1.3],
    ]
    static let inferToken = "client-test-token-0123456789"

    private var apps: [CortadoServerApp] = []

    override class func setUp() {
        super.setUp()
        CortadoModels.registerBuiltinKinds()
    }

    override func tearDown() {
        for app in apps { app.pool.stop() }
        apps = []
    }

    /// The services `cortado serve` registers, on a router no socket reaches; models loaded.
    private func inProcessClient(tokens: String? = nil, metadata: [(name: String, value: String)] = []) throws -> CortadoClient {
        var options = CortadoServerApp.Options()
        options.repository = Self.repository
        options.workers = 1
        if let tokens { options.authorizer = CallAuthorizer(tokens: try AuthTokens(parsing: tokens)) }
        let app = CortadoServerApp(options: options)
        apps.append(app)
        XCTAssertEqual(app.context.repository.discover().count, 1)
        XCTAssertTrue(app.context.repository.loadAll().isEmpty, "a model failed to load")
        return CortadoClient(transport: InProcessClientTransport(router: app.router), metadata: metadata)
    }

    func testNativePredictGivesWhatTheModelGives() async throws {
        try await Self.checkNativePredict(try inProcessClient())
    }

    func testOpenInferenceProtocolGivesWhatTheModelGives() async throws {
        try await Self.checkInfer(try inProcessClient())
    }

    func testReadinessAndMetadata() async throws {
        try await Self.checkReadinessAndMetadata(try inProcessClient())
    }

    func testErrorsCarryTheCodeAndMessage() async throws {
        try await Self.checkErrors(try inProcessClient())
    }

    /// With tokens on, a call without one is refused by the router's admission (the check
    /// before a message is read); with one, it goes through.
    func testAdmissionRefusesACallWithoutAToken() async throws {
        let tokens = "\(Self.inferToken) infer\n"
        let anonymous = try inProcessClient(tokens: tokens)
        do {
            _ = try await anonymous.predict(model: "iris", inputs: Self.features(Self.flowers[0]))
            XCTFail("a call without a token was answered")
        } catch {
            XCTAssertEqual(error.code, .unauthenticated, error.description)
        }
        let holder = try inProcessClient(tokens: tokens, metadata: [("authorization", "Bearer \(Self.inferToken)")])
        let outputs = try await holder.predict(model: "iris", inputs: Self.features(Self.flowers[0]))
        XCTAssertNotNil(outputs["species"])
    }

    // MARK: checks shared with CortadoServeTests

    static func features(_ row: [String: Double]) -> [String: MLFeatureValue] {
        row.mapValues { MLFeatureValue(double: $0) }
    }

    static func localModel() throws -> MLModel { try MLModel(contentsOf: irisFile) }

    static func checkNativePredict(_ client: CortadoClient) async throws {
        let model = try localModel()
        for row in flowers {
            let outputs = try await client.predict(model: "iris", inputs: features(row), timeout: .seconds(20))
            let truth = try model.prediction(from: MLDictionaryFeatureProvider(dictionary: features(row)))
            XCTAssertEqual(Set(outputs.keys), truth.featureNames)
            XCTAssertEqual(outputs["species"]?.stringValue, truth.featureValue(for: "species")?.stringValue)
            let scores = try XCTUnwrap(outputs["classProbability"]?.dictionaryValue)
            let expected = try XCTUnwrap(truth.featureValue(for: "classProbability")?.dictionaryValue)
            XCTAssertEqual(scores.count, expected.count)
            for (label, score) in expected {
                XCTAssertEqual(scores[label]?.doubleValue ?? .nan, score.doubleValue, accuracy: 1e-12, "\(label)")
            }
        }
        // The provider form, with only one output asked for.
        let provider = try await client.prediction(model: "iris", from: MLDictionaryFeatureProvider(dictionary: features(flowers[1])))
        XCTAssertEqual(provider.featureValue(for: "species")?.stringValue,
                       try model.prediction(from: MLDictionaryFeatureProvider(dictionary: features(flowers[1])))
                           .featureValue(for: "species")?.stringValue)
    }

    /// Three rows as one batch of [3, 1] FP64 tensors; each row's probabilities as the model
    /// gives them, in label order.
    static func checkInfer(_ client: CortadoClient) async throws {
        var inputs: [String: MLMultiArray] = [:]
        for name in flowers[0].keys {
            let array = try MLMultiArray(shape: [flowers.count, 1], dataType: .double)
            for (index, row) in flowers.enumerated() { array[index] = NSNumber(value: row[name]!) }
            inputs[name] = array
        }
        let outputs = try await client.infer(model: "iris", inputs: inputs, outputs: ["classProbability"], timeout: .seconds(20))
        let probabilities = try XCTUnwrap(outputs["classProbability"])
        XCTAssertEqual(probabilities.dataType, .double)
        let model = try localModel()
        guard case .strings(let labels)? = model.modelDescription.classLabels else { return XCTFail("iris has no string labels") }
        XCTAssertEqual(probabilities.shape, [flowers.count, labels.count])
        for (index, row) in flowers.enumerated() {
            let truth = try XCTUnwrap(try model.prediction(from: MLDictionaryFeatureProvider(dictionary: features(row)))
                .featureValue(for: "classProbability")?.dictionaryValue)
            for (column, label) in labels.enumerated() {
                XCTAssertEqual(probabilities[[NSNumber(value: index), NSNumber(value: column)]].doubleValue,
                               truth[label]?.doubleValue ?? .nan, accuracy: 1e-12, "row \(index), \(label)")
            }
        }
    }

    static func checkReadinessAndMetadata(_ client: CortadoClient) async throws {
        let live = try await client.serverLive()
        let ready = try await client.serverReady()
        let modelReady = try await client.modelReady(model: "iris")
        XCTAssertTrue(live)
        XCTAssertTrue(ready)
        XCTAssertTrue(modelReady)
        let metadata = try await client.modelMetadata(model: "iris")
        XCTAssertEqual(metadata.name, "iris")
        XCTAssertEqual(Set(metadata.inputs.map(\.name)), Set(flowers[0].keys))
        let description = try await client.describe(model: "iris")
        XCTAssertEqual(Set(description.inputs.map(\.name)), Set(flowers[0].keys))
        let models = try await client.listModels()
        XCTAssertEqual(models.map(\.name), ["iris"])
    }

    static func checkErrors(_ client: CortadoClient) async throws {
        do {
            _ = try await client.predict(model: "no-such-model", inputs: features(flowers[0]))
            XCTFail("an unknown model answered")
        } catch {
            XCTAssertEqual(error.code, .notFound, error.description)
            XCTAssertTrue(error.message.contains("no-such-model"), error.message)
        }
        do {
            _ = try await client.predict(model: "iris", inputs: ["sepal_length": MLFeatureValue(string: "wide")])
            XCTFail("a wrong input answered")
        } catch {
            XCTAssertEqual(error.code, .invalidArgument, error.description)
        }
        // A deadline already past when the server reads the call: whichever side notices first
        // (the client's timer or the server's queue check), the call ends DEADLINE_EXCEEDED.
        do {
            _ = try await client.predict(model: "iris", inputs: features(flowers[0]), timeout: .nanoseconds(1))
            XCTFail("a call past its deadline answered")
        } catch {
            XCTAssertEqual(error.code, .deadlineExceeded, error.description)
        }
        let modelReady = try await client.modelReady(model: "no-such-model")
        XCTAssertFalse(modelReady)
    }
}
