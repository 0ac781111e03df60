@testable import CortadoGRPC
import CortadoModels
@testable import CortadoServer
import Foundation
import XCTest

/// The batcher's gathering rules with a stand-in for the model: batches form while the model
/// is busy, never exceed the size, start at once when full, and a full queue refuses.
final class DynamicBatcherTests: XCTestCase {
    private var pool: WorkerPool!
    override func setUp() { pool = WorkerPool(threads: 2) }
    override func tearDown() { pool.stop() }

    private func job() -> PredictionJob {
        let call = GRPCServerCall(path: "/a.B/C", request: [], metadata: [], deadline: nil, completion: Discard())
        return ClosureJob(call: call, metrics: nil, decode: { MLFeatureColumns(count: 0) }, encode: { _ in [] })
    }

    final class Discard: GRPCCallCompletion, @unchecked Sendable {
        func complete(_ call: GRPCServerCall, _ result: GRPCCallResult) {}
    }

    /// Records batch sizes; the first batch waits for `release`.
    final class Recorder: @unchecked Sendable {
        let lock = NSLock()
        var sizes: [Int] = []
        let started = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let done = DispatchSemaphore(value: 0)
        func run(_ jobs: [PredictionJob]) -> PendingAnswers {
            let first = lock.withLock { sizes.append(jobs.count); return sizes.count == 1 }
            if first {
                started.signal()
                release.wait()
            }
            done.signal()
            return PendingAnswers()
        }
    }

    func testCallsGatherWhileTheModelIsBusyUpToTheSize() throws {
        let recorder = Recorder()
        let batcher = DynamicBatcher(maxBatchSize: 4, maxQueueDelayMicroseconds: 0, limits: .init(maxConcurrency: 1, maxQueue: 9),
                                     pool: pool, execute: recorder.run)
        try batcher.submit(job())
        waitOrFail(recorder.started, "the first batch")
        for _ in 0..<9 { try batcher.submit(job()) }
        XCTAssertEqual(batcher.depth.queued, 9)
        XCTAssertThrowsError(try batcher.submit(job())) { error in
            XCTAssertEqual((error as? ServeStatus)?.code, .resourceExhausted)
        }
        recorder.release.signal()
        waitOrFail(recorder.done, count: 4, "four batches")
        XCTAssertEqual(recorder.lock.withLock { recorder.sizes }, [1, 4, 4, 1])
        XCTAssertEqual(batcher.depth.queued, 0)
    }

    /// With a long delay an idle model waits for company, but a full batch starts at once.
    func testAFullBatchDoesNotWaitForTheDelay() throws {
        let recorder = Recorder()
        recorder.release.signal()
        let batcher = DynamicBatcher(maxBatchSize: 3, maxQueueDelayMicroseconds: 600_000_000, limits: .init(maxConcurrency: 1, maxQueue: 16),
                                     pool: pool, execute: recorder.run)
        for _ in 0..<3 { try batcher.submit(job()) }
        waitOrFail(recorder.done, "the full batch")
        XCTAssertEqual(recorder.lock.withLock { recorder.sizes }, [3])
    }
}
