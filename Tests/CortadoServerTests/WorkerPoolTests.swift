@testable import CortadoServer
import Foundation
import XCTest

/// The worker threads: every job runs, FIFO, in parallel up to the thread count, and
/// `stop()` lets queued jobs finish.
final class WorkerPoolTests: XCTestCase {
    func testThreadCount() {
        let two = WorkerPool(threads: 2)
        defer { two.stop() }
        XCTAssertEqual(two.threadCount, 2)
        let automatic = WorkerPool(threads: 0)
        defer { automatic.stop() }
        XCTAssertEqual(automatic.threadCount, WorkerPool.defaultThreadCount)
        XCTAssertGreaterThanOrEqual(automatic.threadCount, 1)
    }

    /// A pool stopped and released at once, before its threads got going, must not crash
    /// them (they captured the pool `unowned` and read a freed object).
    /// Nor may its threads keep it alive: a thread holds the pool only while inside `work()`,
    /// which a stopped pool's threads leave at once, so every pool is freed (polled up to 10 s;
    /// a thread capturing the pool strongly would keep it forever).
    func testReleasingAStoppedPoolRightAway() {
        var released: [() -> WorkerPool?] = []
        for _ in 0..<50 {
            let pool = WorkerPool(threads: 2)
            pool.stop()
            released.append { [weak pool] in pool }
        }
        for _ in 0..<1000 where released.contains(where: { $0() != nil }) { Thread.sleep(forTimeInterval: 0.01) }
        for (i, weakPool) in released.enumerated() {
            XCTAssertNil(weakPool(), "pool \(i) is still referenced after its owner released it")
        }
        // The threads that start late find the pool gone and end; running more jobs on a new
        // pool proves the process is still sound.
        let pool = WorkerPool(threads: 2)
        defer { pool.stop() }
        let done = DispatchSemaphore(value: 0)
        pool.submit { done.signal() }
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success)
    }

    func testEveryJobRunsOnAWorkerThread() {
        let pool = WorkerPool(threads: 3)
        defer { pool.stop() }
        let done = DispatchSemaphore(value: 0)
        let offMain = Counter()
        for _ in 0..<100 {
            pool.submit {
                if !Thread.isMainThread { offMain.enter() }
                done.signal()
            }
        }
        waitOrFail(done, count: 100, "100 jobs")
        XCTAssertEqual(offMain.current, 100)
    }

    /// With three threads, three jobs that each wait for the others all start.
    func testJobsRunInParallelUpToTheThreadCount() {
        let pool = WorkerPool(threads: 3)
        let started = DispatchSemaphore(value: 0)
        let gate = DispatchSemaphore(value: 0)
        let running = Counter()
        for _ in 0..<4 {
            pool.submit {
                running.enter()
                started.signal()
                _ = gate.wait(timeout: .now() + 5)
                running.leave()
            }
        }
        waitOrFail(started, count: 3, "three jobs at once")
        Thread.sleep(forTimeInterval: 0.05)
        XCTAssertEqual(running.maximum, 3, "the fourth job waits for a thread")
        XCTAssertEqual(pool.pending, 1)
        for _ in 0..<4 { gate.signal() }
        waitOrFail(started, "the fourth job")
        pool.stop()
    }

    /// One thread takes jobs in submission order, also past the queue's compaction point.
    func testFIFOWithOneThread() {
        let pool = WorkerPool(threads: 1)
        defer { pool.stop() }
        let gate = DispatchSemaphore(value: 0)
        let done = DispatchSemaphore(value: 0)
        let order = Counter()
        let started = DispatchSemaphore(value: 0)
        pool.submit { started.signal(); _ = gate.wait(timeout: .now() + 5) }
        waitOrFail(started, "the blocking job")
        let n = 5000
        for i in 0..<n { pool.submit { order.record(i); if i == n - 1 { done.signal() } } }
        XCTAssertEqual(pool.pending, n)
        gate.signal()
        waitOrFail(done, "the last job")
        XCTAssertEqual(order.order, Array(0..<n))
        XCTAssertEqual(pool.pending, 0)
    }

    func testStopLetsQueuedJobsFinish() {
        let pool = WorkerPool(threads: 1)
        let gate = DispatchSemaphore(value: 0)
        let done = DispatchSemaphore(value: 0)
        pool.submit { _ = gate.wait(timeout: .now() + 5) }
        for _ in 0..<5 { pool.submit { done.signal() } }
        pool.stop()
        gate.signal()
        waitOrFail(done, count: 5, "queued jobs after stop()")
    }
}
