import CortadoModels
@testable import CortadoServer
import Foundation
import XCTest

/// The columnar task core without any protocol: jobs whose call is a plain recorder (no gRPC,
/// no HTTP) decode into columns, run as one execution when the batcher groups them, and get
/// their own rows of the outputs; a job whose columns do not fit the group fails alone, and a
/// call that was cancelled or ran out of time is answered without running.
final class BatchExecutionTests: XCTestCase {
    private var pool: WorkerPool!
    override func setUp() { pool = WorkerPool(threads: 1) }
    override func tearDown() { pool.stop() }

    /// A call of no protocol: keeps its answer or its status.
    final class RecordingCall: PredictionCall, @unchecked Sendable {
        let receivedAt = DispatchTime.now().uptimeNanoseconds
        var deadline: UInt64?
        var isCancelled = false
        var requestID: String? { nil }
        var traceParent: String? { nil }
        var status: ServeStatus?
        var message: [UInt8]?
        func fail(_ status: ServeStatus) { self.status = status }
        func respond(_ message: [UInt8]) { self.message = message }
    }

    /// y = x0 + 2 x1 + 1, the model of every test here.
    private func served() throws -> ServedModel {
        ModelRepository(root: nil, pool: pool).add(try TestSpecs.model(TestSpecs.regressor(weights: [1, 2], offset: 1)), name: "m")
    }

    /// A job whose input is `rows` rows of `width` doubles (2 fits the model) and whose answer
    /// is each row's y as little-endian Doubles.
    private func job(_ call: RecordingCall, _ rows: [[Double]], width: Int = 2) -> PredictionJob {
        ClosureJob(call: call, metrics: nil, decode: {
            let x = try MLMultiArray(rows.flatMap { $0 }, shape: [rows.count, width])
            let columns = MLFeatureColumns(count: rows.count)
            columns.set("x", .arrays(x))
            return columns
        }, encode: { outputs in
            var bytes: [UInt8] = []
            for r in 0..<outputs.count {
                let value = outputs.value("y", row: r)
                let y = value?.multiArrayValue?.double(at: 0) ?? value?.doubleValue ?? .nan
                withUnsafeBytes(of: y) { bytes.append(contentsOf: $0) }
            }
            return bytes
        })
    }

    private func answer(_ call: RecordingCall) -> [Double]? {
        call.message.map { bytes in bytes.withUnsafeBytes { Array($0.bindMemory(to: Double.self)) } }
    }

    func testGroupedJobsRunAsOneExecutionAndGetTheirOwnRows() throws {
        let model = try served()
        let calls = (0..<3).map { _ in RecordingCall() }
        let jobs = [job(calls[0], [[1, 1]]), job(calls[1], [[2, 0.5], [0, 0]]), job(calls[2], [[3, 1], [-1, 1], [0, 2]])]
        model.execute(jobs, maxRows: 8).send()
        XCTAssertEqual(answer(calls[0]), [4])
        XCTAssertEqual(answer(calls[1]), [4, 1])
        XCTAssertEqual(answer(calls[2]), [6, 2, 5])
        XCTAssertTrue(calls.allSatisfy { $0.status == nil })
        let stats = model.statistics.snapshot
        XCTAssertEqual(stats.executionCount, 1, "the three jobs' six rows ran as one execution")
        XCTAssertEqual(stats.inferenceCount, 6)
    }

    func testGroupsStopAtMaxRows() throws {
        let model = try served()
        let calls = (0..<3).map { _ in RecordingCall() }
        let jobs = [job(calls[0], [[1, 1], [1, 1]]), job(calls[1], [[2, 0.5]]), job(calls[2], [[0, 0], [0, 1]])]
        model.execute(jobs, maxRows: 3).send()
        XCTAssertEqual(answer(calls[0]), [4, 4])
        XCTAssertEqual(answer(calls[1]), [4])
        XCTAssertEqual(answer(calls[2]), [1, 3])
        XCTAssertEqual(model.statistics.snapshot.executionCount, 2, "2 + 1 rows, then 2")
    }

    func testAJobThatDoesNotFitTheGroupFailsAlone() throws {
        let model = try served()
        let calls = (0..<3).map { _ in RecordingCall() }
        let jobs = [job(calls[0], [[1, 1]]), job(calls[1], [[1, 2, 3]], width: 3), job(calls[2], [[0, 0]])]
        model.execute(jobs, maxRows: 8).send()
        XCTAssertEqual(answer(calls[0]), [4])
        XCTAssertEqual(answer(calls[2]), [1])
        XCTAssertNil(calls[1].message)
        XCTAssertEqual(calls[1].status?.code, .invalidArgument, "\(String(describing: calls[1].status))")
        XCTAssertTrue(calls[1].status?.message.contains("'x'") == true, "the error names the input: \(String(describing: calls[1].status))")
    }

    func testCancelledAndLateCallsAreAnsweredWithoutRunning() throws {
        let model = try served()
        let cancelled = RecordingCall()
        cancelled.isCancelled = true
        let late = RecordingCall()
        late.deadline = late.receivedAt
        let fine = RecordingCall()
        model.execute([job(cancelled, [[1, 1]]), job(late, [[1, 1]]), job(fine, [[1, 1]])], maxRows: 8).send()
        XCTAssertEqual(cancelled.status, ServeStatus(.cancelled, "the client cancelled the call"))
        XCTAssertEqual(late.status?.code, .deadlineExceeded)
        XCTAssertNil(cancelled.message)
        XCTAssertNil(late.message)
        XCTAssertEqual(answer(fine), [4])
        XCTAssertEqual(model.statistics.snapshot.inferenceCount, 1, "only the call still waited for ran")
    }
}
