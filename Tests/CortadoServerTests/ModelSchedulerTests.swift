import CortadoGRPC
@testable import CortadoServer
import Foundation
import XCTest

/// Admission per model: at most `maxConcurrency` running, at most `maxQueue` waiting,
/// RESOURCE_EXHAUSTED past that, and every admitted job runs.
final class ModelSchedulerTests: XCTestCase {
    private var pool: WorkerPool!

    override func setUp() { pool = WorkerPool(threads: 4) }
    override func tearDown() { pool.stop() }

    /// The last job's slot is released just after its body returns: wait (bounded) for it.
    private func settles(_ scheduler: ModelScheduler, timeout: Double = 5) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if scheduler.depth == (0, 0) { return true }
            Thread.sleep(forTimeInterval: 0.001)
        }
        return false
    }

    func testAtMostMaxConcurrencyRunAtOnce() throws {
        let scheduler = ModelScheduler(limits: .init(maxConcurrency: 2, maxQueue: 100), pool: pool)
        let running = Counter()
        let done = DispatchSemaphore(value: 0)
        for _ in 0..<12 {
            try scheduler.submit {
                running.enter()
                Thread.sleep(forTimeInterval: 0.01)
                running.leave()
                done.signal()
            }
        }
        waitOrFail(done, count: 12, "12 jobs")
        XCTAssertEqual(running.maximum, 2, "four threads, but the model takes two at once")
        XCTAssertTrue(settles(scheduler), "\(scheduler.depth)")
    }

    func testZeroConcurrencyMeansOnePerWorker() throws {
        let scheduler = ModelScheduler(limits: .init(maxConcurrency: 0, maxQueue: 100), pool: pool)
        let running = Counter()
        let gate = DispatchSemaphore(value: 0)
        let started = DispatchSemaphore(value: 0)
        let done = DispatchSemaphore(value: 0)
        for _ in 0..<6 {
            try scheduler.submit {
                running.enter()
                started.signal()
                _ = gate.wait(timeout: .now() + 5)
                running.leave()
                done.signal()
            }
        }
        waitOrFail(started, count: 4, "four running jobs")
        XCTAssertTrue(scheduler.depth == (4, 2), "\(scheduler.depth)")
        for _ in 0..<6 { gate.signal() }
        waitOrFail(done, count: 6, "all jobs")
        XCTAssertEqual(running.maximum, 4)
    }

    func testFullQueueIsResourceExhausted() throws {
        let scheduler = ModelScheduler(limits: .init(maxConcurrency: 1, maxQueue: 2), pool: pool)
        let gate = DispatchSemaphore(value: 0)
        let started = DispatchSemaphore(value: 0)
        let done = DispatchSemaphore(value: 0)
        defer { gate.signal() }
        try scheduler.submit { started.signal(); _ = gate.wait(timeout: .now() + 5); done.signal() }
        waitOrFail(started, "the first job")
        try scheduler.submit { done.signal() }
        try scheduler.submit { done.signal() }
        XCTAssertTrue(scheduler.depth == (1, 2), "\(scheduler.depth)")
        XCTAssertThrowsError(try scheduler.submit { XCTFail("a rejected job ran") }) { error in
            let status = error as? ServeStatus
            XCTAssertEqual(status?.code, .resourceExhausted)
            XCTAssertEqual(status?.message.contains("2 waiting, 1 running"), true, status?.message ?? "")
        }
        gate.signal()
        waitOrFail(done, count: 3, "the running and the two queued jobs")
        // Room again once the queue drained.
        let again = DispatchSemaphore(value: 0)
        try scheduler.submit { again.signal() }
        waitOrFail(again, "a job after the queue drained")
    }

    func testZeroQueueRejectsWhenBusy() throws {
        let scheduler = ModelScheduler(limits: .init(maxConcurrency: 1, maxQueue: 0), pool: pool)
        let gate = DispatchSemaphore(value: 0)
        let done = DispatchSemaphore(value: 0)
        try scheduler.submit { _ = gate.wait(timeout: .now() + 5); done.signal() }
        XCTAssertThrowsError(try scheduler.submit {})
        gate.signal()
        waitOrFail(done, "the running job")
    }

    /// Queued jobs all run, in order, once the running one finishes.
    func testQueuedJobsAllRunInOrder() throws {
        let scheduler = ModelScheduler(limits: .init(maxConcurrency: 1, maxQueue: 1000), pool: pool)
        let gate = DispatchSemaphore(value: 0)
        let done = DispatchSemaphore(value: 0)
        let order = Counter()
        let running = Counter()
        try scheduler.submit { _ = gate.wait(timeout: .now() + 5) }
        for i in 0..<500 {
            try scheduler.submit {
                running.enter()
                order.record(i)
                running.leave()
                done.signal()
            }
        }
        XCTAssertEqual(scheduler.depth.queued, 500)
        gate.signal()
        waitOrFail(done, count: 500, "500 queued jobs")
        XCTAssertEqual(order.order, Array(0..<500))
        XCTAssertEqual(running.maximum, 1)
        XCTAssertTrue(settles(scheduler), "\(scheduler.depth)")
    }

    /// Two models share the pool but each keeps its own limit.
    func testModelsHaveSeparateLimits() throws {
        let a = ModelScheduler(limits: .init(maxConcurrency: 1, maxQueue: 0), pool: pool)
        let b = ModelScheduler(limits: .init(maxConcurrency: 1, maxQueue: 0), pool: pool)
        let gate = DispatchSemaphore(value: 0)
        let done = DispatchSemaphore(value: 0)
        try a.submit { _ = gate.wait(timeout: .now() + 5); done.signal() }
        XCTAssertNoThrow(try b.submit { done.signal() })
        XCTAssertThrowsError(try a.submit {})
        gate.signal()
        waitOrFail(done, count: 2, "both models' jobs")
    }
}
