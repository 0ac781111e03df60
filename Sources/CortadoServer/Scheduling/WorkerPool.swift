import Foundation

/// A fixed set of worker threads taking jobs from one FIFO. Models run here, never on the
/// loop thread.
public final class WorkerPool: @unchecked Sendable {
    private let condition = NSCondition()
    private var jobs: [() -> Void] = []
    private var head = 0
    private var stopping = false
    /// Threads asleep on the condition: a submit wakes one only when some are.
    private var idle = 0
    private var threads: [Thread] = []
    public let threadCount: Int

    /// `threads` 0 means one per core but the one the event loop keeps busy (measured on 2
    /// cores: one worker beside the loop thread served 15% more than two).
    public init(threads: Int = 0) {
        threadCount = threads > 0 ? threads : Self.defaultThreadCount
        startThreads()
    }

    public static var defaultThreadCount: Int { max(1, ProcessInfo.processInfo.activeProcessorCount - 1) }

    private func startThreads() {
        for i in 0..<threadCount {
            // Weak, not unowned: a thread may start after a stopped pool was released (it then
            // just ends); while `work()` runs, the call keeps the pool alive.
            let thread = Thread { [weak self] in
                // Named from inside, 15 characters at most: only then does the kernel see it.
                Self.nameForKernel("cortado-work-\(i)")
                self?.work()
            }
            thread.name = "cortado-work-\(i)"
            thread.stackSize = 16 << 20
            self.threads.append(thread)
            thread.start()
        }
    }

    /// Names the calling thread for the kernel (top -H, perf): on Linux `Thread.name` does not
    /// reach it, so the thread writes its own `comm` file (as the transport's `ThreadName`
    /// does for the loop thread; scheduling does not depend on the transport).
    private static func nameForKernel(_ name: String) {
        guard let file = FileHandle(forWritingAtPath: "/proc/thread-self/comm") else { return }
        file.write(Data(name.utf8.prefix(15)))
        try? file.close()
    }

    public func submit(_ job: @escaping () -> Void) {
        condition.lock()
        jobs.append(job)
        if idle > 0 { condition.signal() }
        condition.unlock()
    }

    /// Jobs waiting for a thread.
    public var pending: Int {
        condition.lock(); defer { condition.unlock() }
        return jobs.count - head
    }

    /// Lets queued jobs finish, then ends the threads.
    public func stop() {
        condition.lock()
        stopping = true
        condition.broadcast()
        condition.unlock()
    }

    private func work() {
        while true {
            condition.lock()
            while head == jobs.count && !stopping {
                idle += 1
                condition.wait()
                idle -= 1
            }
            if head == jobs.count {
                condition.unlock()
                return
            }
            let job = jobs[head]
            head += 1
            if head > 1024 && head * 2 > jobs.count {
                jobs.removeFirst(head)
                head = 0
            }
            condition.unlock()
            job()
        }
    }
}
