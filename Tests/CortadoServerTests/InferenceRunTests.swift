@testable import CortadoGRPC
import CortadoModels
@testable import CortadoServer
import CortadoServerProtos
import Foundation
import XCTest

/// A ModelInfer request on the real path (`InferenceService.infer`: peek, worker, decode into
/// columns, predict, encode), for the inputs a client controls: shapes whose sizes overflow
/// and floats outside Int64 must come back as statuses or clamped values, not trap the server.
final class InferenceRunTests: XCTestCase {
    private var pool: WorkerPool!
    override func setUp() { pool = WorkerPool(threads: 1) }
    override func tearDown() { pool.stop() }

    /// A context serving `spec` as model "m".
    private func context(_ spec: CoreML_Specification_Model) throws -> ServerContext {
        let repository = ModelRepository(root: nil, pool: pool)
        repository.add(try TestSpecs.model(spec), name: "m")
        return ServerContext(repository: repository)
    }

    /// The response, or the status the call failed with (thrown).
    private func run(_ request: Inference_ModelInferRequest, on context: ServerContext) throws -> Inference_ModelInferResponse {
        var request = request
        request.modelName = "m"
        return try modelInfer(request, on: context)
    }

    func testRawRegressorCall() throws {
        var request = Inference_ModelInferRequest()
        request.inputs = [tensor("x", "FP64", [2, 2])]
        request.rawInputContents = [[1.0, 1.0, 2.0, 0.5].withUnsafeBytes { Data($0) }]
        let response = try run(request, on: try context(TestSpecs.regressor(weights: [1, 2], offset: 1)))
        XCTAssertEqual(response.outputs.map(\.name), ["y"])
        XCTAssertEqual(response.outputs.first?.datatype, "FP64")
        XCTAssertEqual(response.outputs.first?.shape, [2, 1])
        XCTAssertEqual(response.rawOutputContents.first?.withUnsafeBytes { Array($0.bindMemory(to: Double.self)) }, [4, 4])
    }

    /// A raw FP32 tensor is read where it lies in the request; typed contents too; an odd
    /// offset (not aligned for Float) is copied first. Each gives the same answer.
    func testFloatInputsInEveryPlacement() throws {
        let model = try context(TestSpecs.identity([TestSpecs.array("x", [3], .float32)]))
        let x: [Float] = [1.5, -2, 1e-3]
        var raw = Inference_ModelInferRequest()
        raw.inputs = [tensor("x", "FP32", [1, 3])]
        raw.rawInputContents = [x.withUnsafeBytes { Data($0) }]
        var typed = Inference_ModelInferRequest()
        typed.inputs = [tensor("x", "FP32", [1, 3])]
        typed.inputs[0].contents.fp32Contents = x
        // An id of 1 byte moves the raw bytes by one against the one above.
        var shifted = raw
        shifted.id = "a"
        for (label, request) in [("raw", raw), ("typed", typed), ("shifted", shifted)] {
            let response = try run(request, on: model)
            XCTAssertEqual(response.outputs.first?.datatype, "FP32", label)
            XCTAssertEqual(response.outputs.first?.shape, [1, 3], label)
            XCTAssertEqual(response.rawOutputContents.first?.withUnsafeBytes { Array($0.bindMemory(to: Float.self)) }, x, label)
        }
    }

    /// [2^33, 2^33] elements overflow Int: INVALID_ARGUMENT.
    func testOverflowingShapeIsInvalidArgument() throws {
        let model = try context(TestSpecs.regressor())
        for (datatype, shape) in [("FP64", [1 << 33, 1 << 33] as [Int64]), ("FP64", [1, 1 << 61]), ("BYTES", [1 << 40, 1 << 40])] {
            var request = Inference_ModelInferRequest()
            request.inputs = [tensor("x", datatype, shape)]
            request.rawInputContents = [Data(count: 16)]
            XCTAssertThrowsError(try run(request, on: model), "\(datatype) \(shape)") { error in
                XCTAssertEqual((error as? GRPCStatus)?.code, .invalidArgument, "\(error)")
            }
        }
    }

    /// FP64 values sent to an int64 feature clamp to Int64's range.
    func testFloatsBeyondInt64Clamp() throws {
        let model = try context(TestSpecs.identity([TestSpecs.int64("n")]))
        var request = Inference_ModelInferRequest()
        request.inputs = [tensor("n", "FP64", [3, 1])]
        request.rawInputContents = [[1e30, -1e30, 42.9].withUnsafeBytes { Data($0) }]
        let response = try run(request, on: model)
        XCTAssertEqual(response.outputs.first?.datatype, "INT64")
        XCTAssertEqual(response.rawOutputContents.first?.withUnsafeBytes { Array($0.bindMemory(to: Int64.self)) }, [.max, .min, 42])
    }
}
