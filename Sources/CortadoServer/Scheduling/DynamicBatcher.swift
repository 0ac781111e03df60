import Foundation

/// Gathers one model's prediction calls into batches that run as one model execution.
///
/// A batch leaves the queue when the model has a free slot (fewer than `maxConcurrency`
/// batches running) and either `maxBatchSize` calls wait or the oldest has waited
/// `maxQueueDelay`. With a delay of 0 a free slot takes whatever waits, so calls batch up
/// exactly while the model is busy and an idle model adds no latency. A full queue
/// (`maxQueue` waiting) answers RESOURCE_EXHAUSTED at once, as without batching.
final class DynamicBatcher: @unchecked Sendable {
    let maxBatchSize: Int
    /// Nanoseconds the oldest call may wait for others to join it.
    let maxQueueDelay: UInt64
    private let maxQueue: Int
    private let concurrency: Int
    private let pool: WorkerPool
    /// Runs a batch; returns the answers to send once the batch's slot is free again.
    private let execute: ([PredictionJob]) -> PendingAnswers

    private let lock = NSLock()
    private var waiting: [(job: PredictionJob, arrived: UInt64)] = []
    private var head = 0
    private var running = 0
    private var timerArmed = false

    init(maxBatchSize: Int, maxQueueDelayMicroseconds: Int, limits: ModelScheduler.Limits, pool: WorkerPool,
         execute: @escaping ([PredictionJob]) -> PendingAnswers) {
        self.maxBatchSize = max(1, maxBatchSize)
        maxQueueDelay = UInt64(max(0, maxQueueDelayMicroseconds)) * 1000
        maxQueue = limits.maxQueue
        concurrency = limits.maxConcurrency > 0 ? limits.maxConcurrency : pool.threadCount
        self.pool = pool
        self.execute = execute
    }

    /// Batches running and calls waiting.
    var depth: (running: Int, queued: Int) { lock.withLock { (running, waiting.count - head) } }

    func submit(_ job: PredictionJob) throws(ServeStatus) {
        lock.lock()
        defer { lock.unlock() }
        let queued = waiting.count - head
        guard queued < maxQueue || (queued == 0 && running < concurrency) else {
            throw ServeStatus(.resourceExhausted, "the model's queue is full (\(maxQueue) waiting, \(running) batches running); retry later or raise --max-queue")
        }
        waiting.append((job, DispatchTime.now().uptimeNanoseconds))
        dispatchLocked()
    }

    /// Starts batches while there are free slots and batches ready; otherwise arms a timer
    /// for when the oldest call's delay runs out.
    private func dispatchLocked() {
        while running < concurrency && head < waiting.count {
            let queued = waiting.count - head
            if queued < maxBatchSize && maxQueueDelay > 0 {
                let waited = DispatchTime.now().uptimeNanoseconds - waiting[head].arrived
                if waited < maxQueueDelay {
                    armTimerLocked(after: maxQueueDelay - waited)
                    return
                }
            }
            let take = min(queued, maxBatchSize)
            let batch = waiting[head..<head + take].map(\.job)
            head += take
            if head == waiting.count { waiting.removeAll(keepingCapacity: true); head = 0 }
            running += 1
            pool.submit { [self] in
                let answers = execute(batch)
                lock.withLock {
                    running -= 1
                    dispatchLocked()
                }
                answers.send()
            }
        }
    }

    private func armTimerLocked(after nanoseconds: UInt64) {
        guard !timerArmed else { return }
        timerArmed = true
        DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(Int(nanoseconds))) { [self] in
            lock.withLock {
                timerArmed = false
                dispatchLocked()
            }
        }
    }
}
