import Foundation

/// Counters for one served model version, in the shape the Open Inference Protocol's
/// ModelStatistics reports: counts and cumulative nanoseconds per phase.
public final class ServedModelStatistics: @unchecked Sendable {
    public struct Snapshot: Sendable {
        public var lastInference: UInt64 = 0  // ms since the epoch
        public var inferenceCount: UInt64 = 0  // rows predicted
        public var executionCount: UInt64 = 0  // model executions (a batch is one)
        public var success = Duration()
        public var failure = Duration()
        public var queue = Duration()
        public var computeInput = Duration()
        public var computeInfer = Duration()
        public var computeOutput = Duration()
        /// Per batch size: count and compute time.
        public var batches: [Int: Duration] = [:]
    }

    public struct Duration: Sendable {
        public var count: UInt64 = 0
        public var nanoseconds: UInt64 = 0
        mutating func add(_ ns: UInt64) { count += 1; nanoseconds &+= ns }
    }

    private let lock = NSLock()
    private var state = Snapshot()

    public init() {}

    public var snapshot: Snapshot { lock.withLock { state } }

    /// Records a request answered successfully; with the dynamic batcher, the compute times
    /// are those of the batch it ran in (what Triton reports too).
    public func recordRequest(total: UInt64, queue: UInt64, input: UInt64, infer: UInt64, output: UInt64) {
        let now = UInt64(Date().timeIntervalSince1970 * 1000)
        lock.withLock {
            state.lastInference = now
            state.success.add(total)
            state.queue.add(queue)
            state.computeInput.add(input)
            state.computeInfer.add(infer)
            state.computeOutput.add(output)
        }
    }

    /// Records one model execution of `rows` rows (a batch counts once).
    public func recordExecution(rows: Int, nanoseconds: UInt64) {
        lock.withLock {
            state.inferenceCount += UInt64(rows)
            state.executionCount += 1
            state.batches[rows, default: Duration()].add(nanoseconds)
        }
    }

    public func recordFailure(total: UInt64) {
        lock.withLock { state.failure.add(total) }
    }
}
