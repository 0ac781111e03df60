import Foundation

/// Where updates (`cortado.v1.Predictor` Update) run, and what they may take: training is
/// long and heavy, so it never runs on the loop thread nor on the prediction workers. Each
/// update decodes and checks its rows on a thread of its own (`start`), then trains on
/// another (`MLUpdateTask`'s); both run at a lowered scheduling priority, so that predictions
/// win the cores when both want them. At most `maxConcurrent` updates run at once and together they may
/// hold `maxBytes` of training examples; an update beyond either is refused with
/// RESOURCE_EXHAUSTED at once (not queued: a client retries, as for a full queue).
public final class UpdateRunner: @unchecked Sendable {
    public struct Limits: Sendable {
        /// Updates running at once (`--max-concurrent-updates`).
        public var maxConcurrent = 1
        /// Training rows one update may send (`--max-update-rows`).
        public var maxRows = 100_000
        /// Bytes of training examples all running updates may hold, counted as the trainers
        /// hold them: 8 bytes per value (`--max-update-memory`, in MiB on the command line).
        public var maxBytes = 256 << 20
        public init() {}
    }

    /// Nice value of training threads (Linux: per thread); predictions run at 0.
    static let trainingNice: Int32 = 10

    public let limits: Limits
    private let lock = NSLock()
    private var running = 0
    private var heldBytes = 0

    public init(limits: Limits = Limits()) { self.limits = limits }

    /// A running update's share of the limits; give it back once with `release`.
    final class Reservation: @unchecked Sendable {
        private weak var runner: UpdateRunner?
        private let bytes: Int
        private let released = NSLock()
        private var done = false

        init(runner: UpdateRunner, bytes: Int) { self.runner = runner; self.bytes = bytes }

        func release() {
            let first = released.withLock { () -> Bool in
                defer { done = true }
                return !done
            }
            if first { runner?.give(bytes) }
        }

        deinit { release() }
    }

    /// Takes a place among the running updates and `bytes` of the budget, or throws
    /// RESOURCE_EXHAUSTED naming the flag.
    func reserve(bytes: Int) throws(ServeStatus) -> Reservation {
        if bytes > limits.maxBytes {
            throw ServeStatus(.resourceExhausted, "the training rows take about \(bytes >> 20) MiB as the trainer holds them; one update may hold at most \(limits.maxBytes >> 20) MiB (--max-update-memory)")
        }
        do {
            lock.lock(); defer { lock.unlock() }
            guard running < limits.maxConcurrent else {
                throw ServeStatus(.resourceExhausted, "\(running) update(s) are running, the most allowed at once (--max-concurrent-updates); try again when one has finished")
            }
            guard heldBytes + bytes <= limits.maxBytes else {
                throw ServeStatus(.resourceExhausted, "the running updates hold \(heldBytes >> 20) MiB of training rows; this one needs \(bytes >> 20) MiB more than the \(limits.maxBytes >> 20) MiB allowed (--max-update-memory)")
            }
            running += 1
            heldBytes += bytes
        }
        return Reservation(runner: self, bytes: bytes)
    }

    private func give(_ bytes: Int) {
        lock.withLock {
            running -= 1
            heldBytes -= bytes
        }
    }

    /// Updates running now.
    public var active: Int { lock.withLock { running } }

    /// Runs `body` on a new thread at the training priority (a thread of its own: the nice
    /// value stays with the thread, so a pooled thread must not be lowered).
    func start(_ body: @escaping @Sendable () -> Void) {
        let thread = Thread {
            Self.lowerThreadPriority()
            body()
        }
        thread.name = "cortado.update.prepare"
        thread.start()
    }

    /// Lowers the calling thread's scheduling priority (on Linux the nice value belongs to
    /// the thread, so this leaves the other threads as they are).
    static func lowerThreadPriority() {
        #if os(Linux)
        _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, trainingNice)
        #endif
    }
}
