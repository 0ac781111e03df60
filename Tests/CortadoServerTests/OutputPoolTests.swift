@testable import CortadoGRPC
import CortadoModels
@testable import CortadoServer
import CortadoServerProtos
import Foundation
import XCTest

/// Pooled output arrays on the real ModelInfer path (`InferenceService.infer`: peek, worker,
/// decode, predict, respond): after the first call teaches the pool the output shapes, one
/// set of arrays is allocated and every later call reuses it, and each answer is still its
/// own request's (the response bytes were written before the arrays went back).
final class OutputPoolTests: XCTestCase {
    private var pool: WorkerPool!
    override func setUp() { pool = WorkerPool(threads: 1) }
    override func tearDown() { pool.stop() }

    private func infer(_ context: ServerContext, model: String, _ values: [Double]) throws -> Inference_ModelInferResponse {
        var request = Inference_ModelInferRequest()
        request.modelName = model
        var t = Inference_ModelInferRequest.InferInputTensor()
        t.name = "x"
        t.datatype = "FP64"
        t.shape = [1, Int64(values.count)]
        request.inputs = [t]
        request.rawInputContents = [values.withUnsafeBytes { Data($0) }]
        return try modelInfer(request, on: context)
    }

    func testSteadyStatePredictionsReuseOnePooledSet() throws {
        let repository = ModelRepository(root: nil, pool: pool)
        let served = repository.add(try TestSpecs.model(TestSpecs.identity([TestSpecs.array("x", [3])])), name: "id")
        let context = ServerContext(repository: repository)
        let outputPool = try XCTUnwrap(served.outputPool, "a fixed-shape multi-array output gets a pool")
        for i in 0..<20 {
            let x = [Double(i), Double(i) + 0.5, -Double(i)]
            let response = try infer(context, model: "id", x)
            XCTAssertEqual(response.outputs.first?.shape, [1, 3])
            XCTAssertEqual(response.rawOutputContents.first?.withUnsafeBytes { Array($0.bindMemory(to: Double.self)) }, x, "call \(i)")
        }
        // Call 1 runs without backings and teaches the shapes; call 2 allocates the one set;
        // calls 3…20 reuse it.
        XCTAssertEqual(outputPool.statistics, OutputPool.Counts(hits: 18, allocations: 1))
        XCTAssertEqual(served.statistics.snapshot.executionCount, 20)
    }

    func testModelsWhoseOutputsCanChangeShapeGetNoPool() throws {
        let flexible = TestSpecs.array("x", [3]) { a in
            var r = CoreML_Specification_ArrayFeatureType.ShapeRange()
            var d = CoreML_Specification_SizeRange()
            d.lowerBound = 1
            d.upperBound = 8
            r.sizeRanges = [d]
            a.shapeRange = r
        }
        let repository = ModelRepository(root: nil, pool: pool)
        XCTAssertNil(repository.add(try TestSpecs.model(TestSpecs.identity([flexible])), name: "flex").outputPool)
        XCTAssertNil(repository.add(try TestSpecs.model(TestSpecs.regressor()), name: "glm").outputPool, "a double output needs no array")
    }
}
