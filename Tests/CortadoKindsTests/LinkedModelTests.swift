import CortadoModels
import Foundation
import XCTest

/// Linked models and the model cache: one compiled copy per linked file, shared by every
/// model that links it, freed with its last user (a weak reference proves it).
final class LinkedModelTests: XCTestCase {
    private var folder: URL!

    override func setUpWithError() throws {
        CortadoModels.registerBuiltinKinds()
        folder = FileManager.default.temporaryDirectory.appendingPathComponent("cortado-linked-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(at: folder)
    }

    // MARK: specs

    private static func array(_ name: String, _ shape: [Int64]) -> CoreML_Specification_FeatureDescription {
        var f = CoreML_Specification_FeatureDescription()
        f.name = name
        f.type.multiArrayType.shape = shape
        f.type.multiArrayType.dataType = .double
        return f
    }

    private static func double(_ name: String) -> CoreML_Specification_FeatureDescription {
        var f = CoreML_Specification_FeatureDescription()
        f.name = name
        f.type.doubleType = .init()
        return f
    }

    /// y = w·x + offset on x (2 doubles).
    private static func regressor(_ w: [Double], offset: Double) -> CoreML_Specification_Model {
        CoreML_Specification_Model.with {
            $0.specificationVersion = 1
            $0.description_p.input = [array("x", [2])]
            $0.description_p.output = [double("y")]
            $0.glmRegressor.weights = [.with { $0.value = w }]
            $0.glmRegressor.offset = [offset]
        }
    }

    private static func link(_ fileName: String, searchPath: String = "", like: CoreML_Specification_Model) -> CoreML_Specification_Model {
        var spec = CoreML_Specification_Model()
        spec.specificationVersion = 4
        spec.description_p = like.description_p
        var file = CoreML_Specification_LinkedModelFile()
        file.linkedModelFileName.defaultValue = fileName
        file.linkedModelSearchPath.defaultValue = searchPath
        spec.linkedModel.linkedModelFile = file
        return spec
    }

    /// A one-stage pipeline around a link to `fileName`.
    private static func pipeline(linking fileName: String, like: CoreML_Specification_Model) -> CoreML_Specification_Model {
        var spec = CoreML_Specification_Model()
        spec.specificationVersion = 4
        spec.description_p = like.description_p
        spec.pipeline.models = [link(fileName, like: like)]
        return spec
    }

    @discardableResult
    private func write(_ spec: CoreML_Specification_Model, _ name: String) throws -> URL {
        let url = folder.appendingPathComponent(name)
        try spec.serializedData().write(to: url)
        return url
    }

    private func predict(_ model: MLModel?, _ x: [Double]) throws -> Double? {
        let input = try MLDictionaryFeatureProvider(dictionary: ["x": MLFeatureValue(multiArray: try MLMultiArray(x))])
        return try model?.prediction(from: input).featureValue(for: "y")?.doubleValue
    }

    // MARK: sharing

    func testTwoPipelinesShareOneCompiledModelAndTheLastUserFreesIt() throws {
        let linked = try write(Self.regressor([2, -1], offset: 0.5), "reg.mlmodel")
        try write(Self.pipeline(linking: "reg.mlmodelc", like: Self.regressor([], offset: 0)), "a.mlmodel")
        try write(Self.pipeline(linking: "reg.mlmodelc", like: Self.regressor([], offset: 0)), "b.mlmodel")
        let cache = MLModelCache.shared
        let before = cache.statistics

        var a: MLModel? = try MLModel(contentsOf: folder.appendingPathComponent("a.mlmodel"))
        var b: MLModel? = try MLModel(contentsOf: folder.appendingPathComponent("b.mlmodel"))
        let after = cache.statistics
        XCTAssertEqual(after.compiles - before.compiles, 1, "the linked file is compiled once")
        XCTAssertEqual(after.hits - before.hits, 1, "the second pipeline got the cached model")

        weak var shared = cache.cachedModel(contentsOf: linked)
        XCTAssertNotNil(shared)
        XCTAssertEqual(try predict(a, [3, 4]), 2 * 3 - 4 + 0.5)
        XCTAssertEqual(try predict(b, [1, 1]), 2 - 1 + 0.5)

        a = nil
        XCTAssertNotNil(shared, "b still links it")
        XCTAssertEqual(try predict(b, [0, 2]), -2 + 0.5)
        b = nil
        XCTAssertNil(shared, "the last user is gone, so is the compiled model")
        XCTAssertNil(cache.cachedModel(contentsOf: linked))

        // A new user compiles it again.
        let c = try MLModel(contentsOf: folder.appendingPathComponent("a.mlmodel"))
        XCTAssertEqual(cache.statistics.compiles - before.compiles, 2)
        XCTAssertEqual(try predict(c, [1, 0]), 2.5)
    }

    func testColumnsGoThroughTheLinkToTheSharedModel() throws {
        try write(Self.regressor([2, -1], offset: 0.5), "reg.mlmodel")
        let url = try write(Self.pipeline(linking: "reg.mlmodel", like: Self.regressor([], offset: 0)), "p.mlmodel")
        let model = try MLModel(contentsOf: url)
        let x = try MLMultiArray([3, 4, 1, 1, 0, 2], shape: [3, 2])
        let columns = MLFeatureColumns(count: 3)
        columns.set("x", .arrays(x))
        let out = try model.predictions(fromColumns: columns)
        XCTAssertEqual(out.names, ["y"])
        let expectations: [Double] = [2.5, 1.5, -1.5] // 2·x0 − x1 + 0.5
        for (r, expected) in expectations.enumerated() {
            XCTAssertEqual(out.value("y", row: r)?.doubleValue, expected)
            XCTAssertEqual(try model.prediction(from: columns.features(at: r)).featureValue(for: "y")?.doubleValue, expected)
        }
    }

    func testConcurrentLoadsCompileOnce() throws {
        try write(Self.regressor([1, 1], offset: 0), "sum.mlmodel")
        let url = try write(Self.pipeline(linking: "sum.mlmodel", like: Self.regressor([], offset: 0)), "p.mlmodel")
        let before = MLModelCache.shared.statistics
        final class Box: @unchecked Sendable { var models = [MLModel?](repeating: nil, count: 8); let lock = NSLock() }
        let box = Box()
        DispatchQueue.concurrentPerform(iterations: 8) { i in
            let m = try? MLModel(contentsOf: url)
            box.lock.withLock { box.models[i] = m }
        }
        XCTAssertTrue(box.models.allSatisfy { $0 != nil })
        XCTAssertEqual(MLModelCache.shared.statistics.compiles - before.compiles, 1)
        for m in box.models { XCTAssertEqual(try predict(m, [2, 5]), 7) }
    }

    func testAChangedFileIsCompiledAfresh() throws {
        let linked = try write(Self.regressor([1, 0], offset: 0), "r.mlmodel")
        let url = try write(Self.pipeline(linking: "r.mlmodel", like: Self.regressor([], offset: 0)), "p.mlmodel")
        let first = try MLModel(contentsOf: url)
        try write(Self.regressor([1, 0], offset: 100), "r.mlmodel")  // another size, so another key
        let second = try MLModel(contentsOf: url)
        XCTAssertEqual(try predict(first, [1, 1]), 1)
        XCTAssertEqual(try predict(second, [1, 1]), 101)
        XCTAssertNotNil(MLModelCache.shared.cachedModel(contentsOf: linked))
    }

    func testModelsLoadedWithoutAFileResolveAgainstTheSearchDirectories() throws {
        try write(Self.regressor([0, 3], offset: 1), "r.mlmodel")
        let spec = Self.pipeline(linking: "r.mlmodel", like: Self.regressor([], offset: 0))
        XCTAssertThrowsError(try MLModel(specification: spec, name: "mem")) { error in
            let text = "\(error)"
            XCTAssertTrue(text.contains("mem") && text.contains("r.mlmodel") && text.contains("modelDirectory"), text)
        }
        var configuration = MLModelConfiguration()
        configuration.linkedModelSearchDirectories = [folder]
        let model = try MLModel(specification: spec, configuration: configuration, name: "mem")
        XCTAssertEqual(try predict(model, [0, 1]), 4)
    }

    func testBundleMainMeansTheSearchDirectories() throws {
        let lib = folder.appendingPathComponent("lib")
        try FileManager.default.createDirectory(at: lib, withIntermediateDirectories: true)
        try Self.regressor([1, 1], offset: 10).serializedData().write(to: lib.appendingPathComponent("r.mlmodel"))
        let url = try write(Self.link("r.mlmodelc", searchPath: "$BUNDLE_MAIN", like: Self.regressor([], offset: 0)), "p.mlmodel")
        XCTAssertThrowsError(try MLModel(contentsOf: url)) { error in
            XCTAssertTrue("\(error)".contains("'$BUNDLE_MAIN' names no folder"), "\(error)")
        }
        var configuration = MLModelConfiguration()
        configuration.linkedModelSearchDirectories = [lib]
        XCTAssertEqual(try predict(try MLModel(contentsOf: url, configuration: configuration), [1, 2]), 13)
    }

    /// a links b and b links a, loaded from both ends at once: each thread holds one file
    /// and wants the other. The cache refuses the wait that would close the loop, so both
    /// loads fail with a cycle error instead of waiting forever. (A private cache whose
    /// compile step "links" the other file, with both threads inside a compile at once.)
    func testFilesLinkingEachOtherLoadedAtOnceFailWithoutHanging() throws {
        let a = try write(Self.regressor([1, 1], offset: 0), "a.mlmodel")
        let b = try write(Self.regressor([1, 1], offset: 1), "b.mlmodel")
        let cache = MLModelCache()
        let started = [a.path: DispatchSemaphore(value: 0), b.path: DispatchSemaphore(value: 0)]
        @Sendable func compile(_ url: URL, _ configuration: MLModelConfiguration) throws -> MLModel {
            let other = url.lastPathComponent == "a.mlmodel" ? b : a
            started[url.path]!.signal()
            _ = started[other.path]!.wait(timeout: .now() + 2)  // both inside a compile
            started[other.path]!.signal()
            return try cache.model(contentsOf: other, configuration: configuration, load: compile)
        }
        final class Errors: @unchecked Sendable { var texts: [String] = []; let lock = NSLock() }
        let errors = Errors()
        let done = DispatchSemaphore(value: 0)
        for url in [a, b] {
            Thread.detachNewThread {
                do { _ = try cache.model(contentsOf: url, load: compile) } catch { errors.lock.withLock { errors.texts.append("\(error)") } }
                done.signal()
            }
        }
        for _ in 0..<2 where done.wait(timeout: .now() + 20) == .timedOut {
            return XCTFail("the loads wait for each other forever")
        }
        XCTAssertEqual(errors.texts.count, 2)
        for text in errors.texts { XCTAssertTrue(text.contains("cycle"), text) }
    }

    func testALinkToItselfIsACycle() throws {
        try write(Self.link("self.mlmodel", like: Self.regressor([], offset: 0)), "self.mlmodel")
        XCTAssertThrowsError(try MLModel(contentsOf: folder.appendingPathComponent("self.mlmodel"))) { error in
            XCTAssertTrue("\(error)".contains("cycle"), "\(error)")
        }
    }
}
