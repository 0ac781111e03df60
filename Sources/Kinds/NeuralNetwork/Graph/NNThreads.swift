import COpenBLAS
import Dispatch
import Foundation
import Synchronization

/// Threads of the neural-network kernels: the machine's core count, OpenBLAS's thread count
/// (one setting for every layer that calls BLAS), and running work on several workers.
///
/// By default each BLAS call runs on one OpenBLAS thread and the layers split their work over
/// `NNRunContext.threads` themselves: on this 2-core machine that beat OpenBLAS's own
/// threading (see bench/README.md), and the small per-step GEMMs of recurrent layers spent
/// most of their time in OpenBLAS threads yielding to each other. `CORTADO_BLAS_THREADS=n`
/// (n > 1) hands the threading to OpenBLAS instead.
enum NNThreads {
    /// Cores, read once (Foundation's `activeProcessorCount` opens cgroup files in /sys on
    /// every call).
    static let cores = Swift.max(1, ProcessInfo.processInfo.activeProcessorCount)

    /// BLAS threads per call; OpenBLAS is set up the first time this is read (when a
    /// network loads).
    static let blas: Int = {
        let n = Swift.max(1, ProcessInfo.processInfo.environment["CORTADO_BLAS_THREADS"].flatMap(Int.init) ?? 1)
        openblas_set_num_threads(Int32(n))
        return n
    }()

    /// Runs `body(worker)` for `worker` in `0..<workers`, on the calling thread plus the
    /// helpers of `NNSpinTeam` (Dispatch workers when the team is busy); the calling thread
    /// alone when `workers` is 1. Workers must touch disjoint memory; several may run on one
    /// thread, one after the other.
    static func run(workers: Int, finished: (() -> Bool)? = nil, _ body: (Int) -> Void) {
        if workers <= 1 { body(0); return }
        if NNSpinTeam.shared.run(workers: workers, finished: finished, body) { return }
        withoutActuallyEscaping(body) { body in
            let unchecked = WorkerBody(body: body)
            DispatchQueue.concurrentPerform(iterations: workers) { unchecked.body($0) }
        }
    }
}

extension NNThreads {
    /// Runs `body(u0, u1, slot)` over `0..<units` in contiguous ranges claimed by up to `slots`
    /// threads as they come free, each range smaller than the last (a share of what is left,
    /// at least `minUnits`), so a thread that starts late or runs slower (a core shared with
    /// other processes) takes less of the work instead of holding up the section. `slot` (in
    /// `0..<slots`) is the claiming thread's, for per-thread scratch; ranges on one slot run
    /// one after the other. One slot: a single call over everything.
    static func claim(units: Int, slots: Int, minUnits: Int = 1, _ body: (Int, Int, Int) -> Void) {
        let slots = Swift.max(1, Swift.min(slots, units))
        if slots <= 1 { if units > 0 { body(0, units, 0) }; return }
        let next = NNClaimCounter()
        run(workers: slots, finished: { next.exhausted(units) }) { slot in
            while let (u0, u1) = next.claim(units: units, slots: slots, minUnits: minUnits) { body(u0, u1, slot) }
        }
    }
}

/// The next unclaimed unit of an `NNThreads.claim` section.
final class NNClaimCounter: @unchecked Sendable {
    private let next = Atomic<Int>(0)

    func exhausted(_ units: Int) -> Bool { next.load(ordering: .relaxed) >= units }

    /// The next range: half of what is left divided among the slots (guided scheduling: the
    /// first ranges are long, for locality; the last short, for balance), nil when none is left.
    func claim(units: Int, slots: Int, minUnits: Int) -> (Int, Int)? {
        var current = next.load(ordering: .relaxed)
        while current < units {
            let count = Swift.min(units - current, Swift.max(minUnits, (units - current) / (2 * slots)))
            let (exchanged, original) = next.compareExchange(expected: current, desired: current + count, ordering: .relaxed)
            if exchanged { return (current, current + count) }
            current = original
        }
        return nil
    }
}

/// A worker body handed to Dispatch; workers touch disjoint memory.
private struct WorkerBody: @unchecked Sendable {
    let body: (Int) -> Void
}
