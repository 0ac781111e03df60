import Foundation

/// Admission for one served model: at most `maxConcurrency` predictions run at once and at
/// most `maxQueue` wait; past that, callers get RESOURCE_EXHAUSTED at once instead of
/// queueing without bound.
public final class ModelScheduler: @unchecked Sendable {
    public struct Limits: Sendable, Equatable {
        /// Predictions of this model running at once (0: one per worker thread).
        public var maxConcurrency: Int
        /// Requests waiting beyond those running.
        public var maxQueue: Int
        /// Dynamic batching (models that run a batch as one computation): calls gathered
        /// per execution; 0 or 1 turns it off.
        public var maxBatchSize: Int
        /// Microseconds the oldest gathered call may wait for more to join it.
        public var maxQueueDelayMicroseconds: Int
        public init(maxConcurrency: Int = 0, maxQueue: Int = 1024, maxBatchSize: Int = 0, maxQueueDelayMicroseconds: Int = 0) {
            self.maxConcurrency = maxConcurrency
            self.maxQueue = maxQueue
            self.maxBatchSize = maxBatchSize
            self.maxQueueDelayMicroseconds = maxQueueDelayMicroseconds
        }
    }

    public let limits: Limits
    let pool: WorkerPool
    private let lock = NSLock()
    private var running = 0
    /// A job returns the answers to send once its slot is free again (so a client that got
    /// its answer finds the slot free when it calls again).
    typealias Job = () -> PendingAnswers
    private var waiting: [Job] = []
    private var head = 0
    /// Predictions that run at once: `maxConcurrency`, or the pool's thread count for 0.
    public let concurrency: Int

    public init(limits: Limits, pool: WorkerPool) {
        self.limits = limits
        self.pool = pool
        concurrency = limits.maxConcurrency > 0 ? limits.maxConcurrency : pool.threadCount
    }

    /// Requests queued and running.
    public var depth: (running: Int, queued: Int) {
        lock.withLock { (running, waiting.count - head) }
    }

    /// Runs `job` on a worker when the model has room; throws RESOURCE_EXHAUSTED when the
    /// queue is full.
    public func submit(_ job: @escaping () -> Void) throws(ServeStatus) {
        try enqueue { job(); return PendingAnswers() }
    }

    /// Like `submit`; the answers the job returns are sent after its slot was given back.
    func enqueue(_ job: @escaping Job) throws(ServeStatus) {
        lock.lock()
        if running < concurrency {
            running += 1
            lock.unlock()
            pool.submit { [self] in run(job) }
            return
        }
        guard waiting.count - head < limits.maxQueue else {
            let running = self.running
            lock.unlock()
            throw ServeStatus(.resourceExhausted, "the model's queue is full (\(limits.maxQueue) waiting, \(running) running); retry later or raise --max-queue")
        }
        waiting.append(job)
        lock.unlock()
    }

    private func run(_ job: @escaping Job) {
        var next: Job? = job
        while let current = next {
            let after = current()
            next = lock.withLock { () -> Job? in
                guard head < waiting.count else {
                    running -= 1
                    return nil
                }
                let job = waiting[head]
                head += 1
                if head == waiting.count { waiting.removeAll(keepingCapacity: true); head = 0 }
                return job
            }
            after.send()
        }
    }
}
