import CortadoGRPC
import CortadoModels
@testable import CortadoServer
import CortadoServerProtos
import Foundation
import XCTest

/// A ModelInfer request on a worker, for the inputs a client controls: shapes whose sizes
/// overflow and floats outside Int64 must come back as statuses, not trap the server.
final class InferenceRunTests: XCTestCase {
    private var pool: WorkerPool!
    override func setUp() { pool = WorkerPool(threads: 1) }
    override func tearDown() { pool.stop() }

    private func served(_ spec: CoreML_Specification_Model) throws -> ServedModel {
        ModelRepository(root: nil, pool: pool).add(try TestSpecs.model(spec), name: "m")
    }

    private func run(_ request: Inference_ModelInferRequest, on model: ServedModel) throws -> InferenceRun.Result {
        try InferenceRun(request: request, served: model, sharedMemory: SharedMemoryRegistry()).run()
    }

    func testRawRegressorCall() throws {
        var request = Inference_ModelInferRequest()
        request.inputs = [tensor("x", "FP64", [2, 2])]
        request.rawInputContents = [[1.0, 1.0, 2.0, 0.5].withUnsafeBytes { Data($0) }]
        let result = try run(request, on: try served(TestSpecs.regressor(weights: [1, 2], offset: 1)))
        XCTAssertEqual(result.rows, 2)
        XCTAssertEqual(result.message.outputs.map(\.name), ["y"])
        XCTAssertEqual(result.message.outputs.first?.datatype, "FP64")
        XCTAssertEqual(result.message.outputs.first?.shape, [2, 1])
        XCTAssertEqual(result.message.rawOutputContents.first?.withUnsafeBytes { Array($0.bindMemory(to: Double.self)) }, [4, 4])
    }

    /// [2^33, 2^33] elements overflow Int: INVALID_ARGUMENT.
    func testOverflowingShapeIsInvalidArgument() throws {
        let model = try served(TestSpecs.regressor())
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
        let model = try served(TestSpecs.identity([TestSpecs.int64("n")]))
        var request = Inference_ModelInferRequest()
        request.inputs = [tensor("n", "FP64", [3, 1])]
        request.rawInputContents = [[1e30, -1e30, 42.9].withUnsafeBytes { Data($0) }]
        let result = try run(request, on: model)
        XCTAssertEqual(result.message.outputs.first?.datatype, "INT64")
        XCTAssertEqual(result.message.rawOutputContents.first?.withUnsafeBytes { Array($0.bindMemory(to: Int64.self)) }, [.max, .min, 42])
    }
}
