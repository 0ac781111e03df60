import CortadoGRPC
import CortadoModels
@testable import CortadoServer
import Foundation
import XCTest

/// The repository folder: discovery of `DIR/<name>/<version>/model.mlmodel` and
/// `DIR/<name>.mlmodel`, loading, failures, unloading and lookup messages.
final class ModelRepositoryTests: XCTestCase {
    private var root: URL!
    private var pool: WorkerPool!

    override func setUpWithError() throws {
        CortadoModels.registerBuiltinKinds()
        root = FileManager.default.temporaryDirectory.appendingPathComponent("cortado-repo-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        pool = WorkerPool(threads: 1)
    }

    override func tearDownWithError() throws {
        pool.stop()
        try? FileManager.default.removeItem(at: root)
    }

    /// Writes a spec (or raw bytes) at a path under the root.
    private func write(_ spec: CoreML_Specification_Model, _ path: String) throws {
        try write(try spec.serializedData(), path)
    }

    private func write(_ data: Data, _ path: String) throws {
        let url = root.appendingPathComponent(path)
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        try data.write(to: url)
    }

    private func repository(limits: ModelScheduler.Limits = .init()) -> ModelRepository {
        ModelRepository(root: root, pool: pool, defaultLimits: limits)
    }

    // MARK: discovery

    /// Versions compare as numbers (10 > 9 > 2), and non-numeric folders are ignored.
    func testHighestNumericVersionServes() throws {
        try write(TestSpecs.regressor(offset: 2), "m/2/model.mlmodel")
        try write(TestSpecs.regressor(offset: 9), "m/9/model.mlmodel")
        try write(TestSpecs.regressor(offset: 10), "m/10/model.mlmodel")
        try write(TestSpecs.regressor(offset: 99), "m/latest/model.mlmodel")
        let repo = repository()
        let found = repo.discover()
        XCTAssertEqual(found.map(\.name), ["m"])
        XCTAssertEqual(found.first?.version, "10")
        XCTAssertEqual(found.first?.url.path, root.appendingPathComponent("m/10/model.mlmodel").path)

        XCTAssertTrue(repo.loadAll().isEmpty)
        let served = try repo.model("m")
        XCTAssertEqual(served.version, "10")
        XCTAssertEqual(try TestSpecs.predictOnes(served.model), 1 + 2 + 10, "version 10's offset")
    }

    /// A version folder without a model falls back to the next lower version; a folder
    /// with another `.mlmodel` name uses that file.
    func testVersionFolderContents() throws {
        try FileManager.default.createDirectory(at: root.appendingPathComponent("a/5"), withIntermediateDirectories: true)
        try write(TestSpecs.regressor(offset: 3), "a/3/model.mlmodel")
        try write(TestSpecs.regressor(offset: 4), "b/4/exported.mlmodel")
        let found = repository().discover()
        XCTAssertEqual(found.map { "\($0.name)@\($0.version)" }, ["a@3", "b@4"])
        XCTAssertEqual(found.last?.url.lastPathComponent, "exported.mlmodel")
    }

    func testBareModelFileIsVersionOne() throws {
        try write(TestSpecs.regressor(offset: 5), "bare.mlmodel")
        try write(Data("not a model".utf8), "notes.txt")
        try write(TestSpecs.regressor(), ".hidden.mlmodel")
        let repo = repository()
        let found = repo.discover()
        XCTAssertEqual(found.map(\.name), ["bare"])
        XCTAssertEqual(found.first?.version, "1")
        let served = try repo.load("bare")
        XCTAssertEqual(served.version, "1")
        XCTAssertEqual(served.source?.lastPathComponent, "bare.mlmodel")
        XCTAssertEqual(try TestSpecs.predictOnes(served.model), 8)
    }

    func testNoRootDiscoversNothing() {
        let repo = ModelRepository(root: nil, pool: pool)
        XCTAssertTrue(repo.discover().isEmpty)
        XCTAssertThrowsError(try repo.load("m")) { error in
            XCTAssertEqual((error as? ServeStatus)?.code, .notFound)
            XCTAssertEqual((error as? ServeStatus)?.message, "no model repository is configured")
        }
    }

    func testMissingFolderDiscoversNothing() {
        let repo = ModelRepository(root: root.appendingPathComponent("absent"), pool: pool)
        XCTAssertTrue(repo.discover().isEmpty)
        XCTAssertTrue(repo.loadAll().isEmpty)
    }

    // MARK: loading

    func testLoadErrorsNameTheFile() throws {
        try write(Data([0xFF, 0x01, 0x02, 0x03]), "broken/1/model.mlmodel")
        try write(TestSpecs.regressor(), "good.mlmodel")
        let repo = repository()
        let failures = repo.loadAll()
        XCTAssertEqual(failures.map(\.0), ["broken"])
        let message = failures.first?.1 ?? ""
        XCTAssertTrue(message.contains(root.appendingPathComponent("broken/1/model.mlmodel").path), message)
        XCTAssertTrue(message.contains("'broken' version 1"), message)
        XCTAssertNoThrow(try repo.model("good"))

        XCTAssertThrowsError(try repo.load("broken")) { error in
            XCTAssertEqual((error as? ServeStatus)?.code, .invalidArgument)
            XCTAssertTrue((error as? ServeStatus)?.message.contains("model.mlmodel") == true)
        }
    }

    /// A model that failed to load answers UNAVAILABLE with the reason, and the index shows it.
    func testFailedModelIsUnavailableWithTheReason() throws {
        try write(Data([0xFF, 0x01]), "broken.mlmodel")
        let repo = repository()
        repo.loadAll()
        XCTAssertThrowsError(try repo.model("broken")) { error in
            let status = error as? ServeStatus
            XCTAssertEqual(status?.code, .unavailable)
            XCTAssertEqual(status?.message.hasPrefix("model 'broken' failed to load: "), true, status?.message ?? "")
        }
        let entry = repo.index().first { $0.name == "broken" }
        XCTAssertEqual(entry?.state, .unavailable)
        XCTAssertNotEqual(entry?.reason, "not loaded")
        XCTAssertFalse(entry?.reason.isEmpty ?? true)
        XCTAssertTrue(repo.index(readyOnly: true).isEmpty)

        // Fixed on disk and loaded again: ready, the failure forgotten.
        try write(TestSpecs.regressor(), "broken.mlmodel")
        try repo.load("broken")
        XCTAssertNoThrow(try repo.model("broken"))
        XCTAssertEqual(repo.index().first?.state, .ready)
    }

    /// A failed reload keeps the version already serving.
    func testFailedReloadKeepsTheServingVersion() throws {
        try write(TestSpecs.regressor(offset: 1), "m.mlmodel")
        let repo = repository()
        try repo.load("m")
        try write(Data([0xFF]), "m.mlmodel")
        XCTAssertThrowsError(try repo.load("m"))
        XCTAssertEqual(try TestSpecs.predictOnes(repo.model("m").model), 4)
    }

    func testReloadPicksUpANewVersion() throws {
        try write(TestSpecs.regressor(offset: 1), "m/1/model.mlmodel")
        let repo = repository()
        nonisolated(unsafe) var changes: [String] = []
        let lock = NSLock()
        repo.onChange = { name, what in lock.withLock { changes.append("\(name): \(what)") } }
        let first = try repo.load("m")
        try write(TestSpecs.regressor(offset: 2), "m/2/model.mlmodel")
        try repo.load("m")
        XCTAssertEqual(try repo.model("m").version, "2")
        XCTAssertEqual(first.version, "1", "an admitted call keeps the entry it started with")
        try repo.unload("m")
        XCTAssertEqual(lock.withLock { changes }, ["m: loaded version 1", "m: reloaded version 2", "m: unloaded"])
    }

    func testLimitsPerModel() throws {
        try write(TestSpecs.regressor(), "a.mlmodel")
        try write(TestSpecs.regressor(), "b.mlmodel")
        let repo = repository(limits: .init(maxConcurrency: 3, maxQueue: 7))
        repo.limitsByModel["b"] = .init(maxConcurrency: 1, maxQueue: 2)
        repo.loadAll()
        XCTAssertEqual(try repo.model("a").scheduler.limits, .init(maxConcurrency: 3, maxQueue: 7))
        XCTAssertEqual(try repo.model("b").scheduler.limits, .init(maxConcurrency: 1, maxQueue: 2))
    }

    // MARK: unload and lookup

    func testUnload() throws {
        try write(TestSpecs.regressor(), "m.mlmodel")
        let repo = repository()
        let served = try repo.load("m")
        try repo.unload("m")
        XCTAssertThrowsError(try repo.model("m")) { XCTAssertEqual(($0 as? ServeStatus)?.code, .notFound) }
        XCTAssertThrowsError(try repo.unload("m")) { error in
            XCTAssertEqual(error as? ServeStatus, ServeStatus(.notFound, "model 'm' is not loaded"))
        }
        XCTAssertEqual(try TestSpecs.predictOnes(served.model), 3, "the unloaded entry still predicts for calls in flight")
        XCTAssertEqual(repo.index().first.map { "\($0.name) \($0.state.rawValue) \($0.reason)" }, "m UNAVAILABLE not loaded")
    }

    func testLookupNotFoundMessages() throws {
        let repo = repository()
        XCTAssertThrowsError(try repo.model("x")) { error in
            XCTAssertEqual(error as? ServeStatus, ServeStatus(.notFound, "no model named 'x' is loaded"))
        }
        _ = repo.add(try TestSpecs.model(TestSpecs.regressor()), name: "b")
        _ = repo.add(try TestSpecs.model(TestSpecs.regressor()), name: "a", version: "3")
        XCTAssertThrowsError(try repo.model("x")) { error in
            XCTAssertEqual(error as? ServeStatus, ServeStatus(.notFound, "no model named 'x' is loaded (loaded: a, b)"))
        }
        XCTAssertThrowsError(try repo.model("a", version: "2")) { error in
            XCTAssertEqual(error as? ServeStatus, ServeStatus(.notFound, "model 'a' has no version 2 loaded (serving version 3)"))
        }
        XCTAssertEqual(try repo.model("a", version: "3").version, "3")
        XCTAssertEqual(try repo.model("a").version, "3")
        XCTAssertEqual(repo.loaded.map(\.name), ["a", "b"])
    }

    func testLoadUnknownNameIsNotFound() {
        let repo = repository()
        XCTAssertThrowsError(try repo.load("ghost")) { error in
            let status = error as? ServeStatus
            XCTAssertEqual(status?.code, .notFound)
            XCTAssertEqual(status?.message.contains("expected ghost/<version>/model.mlmodel, model.mlpackage or ghost.mlmodel"), true, status?.message ?? "")
        }
    }

    /// Names cannot reach outside the repository folder.
    func testNamesCannotEscapeTheRoot() throws {
        let inner = root.appendingPathComponent("inner")
        try FileManager.default.createDirectory(at: inner, withIntermediateDirectories: true)
        try write(TestSpecs.regressor(), "outside.mlmodel")
        try write(TestSpecs.regressor(), "sub/1/model.mlmodel")
        let repo = ModelRepository(root: inner, pool: pool)
        for name in ["../outside", "..", ".", "", "a/b", "../sub"] {
            XCTAssertThrowsError(try repo.load(name), name) { XCTAssertEqual(($0 as? ServeStatus)?.code, .notFound, name) }
        }
    }

    func testIndexListsDiskAndLoadedModels() throws {
        try write(TestSpecs.regressor(), "on-disk/4/model.mlmodel")
        let repo = repository()
        _ = repo.add(try TestSpecs.model(TestSpecs.regressor()), name: "in-memory", version: "7")
        let index = repo.index()
        XCTAssertEqual(index.map { "\($0.name)@\($0.version) \($0.state.rawValue)" }, ["in-memory@7 READY", "on-disk@4 UNAVAILABLE"])
        XCTAssertEqual(repo.index(readyOnly: true).map(\.name), ["in-memory"])
    }

    // MARK: linked models

    /// Two repository models linking one file (found relative to the repository) share one
    /// compiled copy; unloading one keeps the other working; unloading both frees it.
    func testModelsLinkingOneFileShareItAndUnloadingOneKeepsTheOther() throws {
        try write(TestSpecs.regressor(weights: [1, 2], offset: 3), "shared/reg.mlmodel")
        var link = CoreML_Specification_Model()
        link.specificationVersion = 4
        link.description_p = TestSpecs.regressor().description_p
        link.linkedModel.linkedModelFile.linkedModelFileName.defaultValue = "reg.mlmodelc"
        link.linkedModel.linkedModelFile.linkedModelSearchPath.defaultValue = "shared"
        try write(link, "a/1/model.mlmodel")
        try write(link, "b/2/model.mlmodel")
        let repo = repository()
        XCTAssertEqual(repo.loadAll().map(\.0), [])
        XCTAssertEqual(repo.loaded.map(\.name), ["a", "b"], "shared/ holds no version folder, so it is not a model")

        var configuration = MLModelConfiguration()  // as the repository loads: its root is searched too
        configuration.linkedModelSearchDirectories = [root]
        weak var shared = MLModelCache.shared.cachedModel(contentsOf: root.appendingPathComponent("shared/reg.mlmodel"), configuration: configuration)
        XCTAssertNotNil(shared)
        XCTAssertEqual(try TestSpecs.predictOnes(try repo.model("a").model), 6)
        XCTAssertEqual(try TestSpecs.predictOnes(try repo.model("b").model), 6)

        try repo.unload("a")
        XCTAssertNotNil(shared, "b still links it")
        XCTAssertEqual(try TestSpecs.predictOnes(try repo.model("b").model), 6)
        try repo.load("a")
        XCTAssertEqual(try TestSpecs.predictOnes(try repo.model("a").model), 6)
        try repo.unload("a")
        try repo.unload("b")
        XCTAssertNil(shared, "no model links it any more")
    }
}
