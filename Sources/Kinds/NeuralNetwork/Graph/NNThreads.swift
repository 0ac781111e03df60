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
    /// Runs `body(u0, u1, slot)` over `0..<units` on up to `slots` threads. Each slot owns an
    /// equal contiguous share and works through it from the front in halving ranges; a slot whose share is done takes the back half of what is left of the
    /// fullest other share. So a thread that starts late or runs slower (a core shared with
    /// other processes) does less of the work instead of holding up the section, while each
    /// thread keeps to the same rows from layer to layer (its own share), whose data its cache
    /// already holds. `slot` (in `0..<slots`) is the running thread's, for per-thread
    /// scratch; ranges on one slot run one after the other. One slot: a single call.
    static func claim(units: Int, slots: Int, _ body: (Int, Int, Int) -> Void) {
        let slots = Swift.max(1, Swift.min(slots, units))
        if slots <= 1 { if units > 0 { body(0, units, 0) }; return }
        let shares = NNClaimShares(units: units, slots: slots)
        run(workers: slots, finished: { shares.exhausted }) { slot in
            while let (u0, u1) = shares.claim(slot: slot) { body(u0, u1, slot) }
        }
    }
}

/// The unclaimed units of an `NNThreads.claim` section: per slot, the range [lo, hi) left of
/// its share, packed in one atomic word (lo above 32 bits, hi below) so the owner (taking
/// from the front) and a thief (from the back) claim with one compare-and-exchange.
final class NNClaimShares: @unchecked Sendable {
    private let left: UnsafeMutablePointer<Atomic<Int>>
    private let slots: Int

    init(units: Int, slots: Int) {
        precondition(units < 1 << 31)
        self.slots = slots
        left = .allocate(capacity: slots)
        let share = (units + slots - 1) / slots
        for s in 0..<slots {
            let lo = Swift.min(units, s * share), hi = Swift.min(units, lo + share)
            (left + s).initialize(to: Atomic(lo << 32 | hi))
        }
    }

    deinit {
        left.deinitialize(count: slots)
        left.deallocate()
    }

    /// Every unit is taken (not necessarily finished).
    var exhausted: Bool {
        (0..<slots).allSatisfy { s in let v = left[s].load(ordering: .relaxed); return v >> 32 >= v & 0xFFFF_FFFF }
    }

    /// The next range for `slot`: the front half of its own share's rest, else the back half
    /// of the fullest other share's; nil when every share is taken.
    func claim(slot: Int) -> (Int, Int)? {
        if let range = take(slot, front: true) { return range }
        while true {
            var victim = -1, most = 0
            for s in 0..<slots where s != slot {
                let v = left[s].load(ordering: .relaxed), count = v & 0xFFFF_FFFF - v >> 32
                if count > most { most = count; victim = s }
            }
            guard victim >= 0 else { return nil }
            if let range = take(victim, front: false) { return range }
        }
    }

    /// Half of what is left of share `s` (at least one unit), from its front or its back.
    private func take(_ s: Int, front: Bool) -> (Int, Int)? {
        var v = left[s].load(ordering: .relaxed)
        while true {
            let lo = v >> 32, hi = v & 0xFFFF_FFFF
            guard lo < hi else { return nil }
            let count = Swift.max(1, (hi - lo) / 2)
            let next = front ? (lo + count) << 32 | hi : lo << 32 | (hi - count)
            let (exchanged, original) = left[s].compareExchange(expected: v, desired: next, ordering: .relaxed)
            if exchanged { return front ? (lo, lo + count) : (hi - count, hi) }
            v = original
        }
    }
}

/// A worker body handed to Dispatch; workers touch disjoint memory.
private struct WorkerBody: @unchecked Sendable {
    let body: (Int) -> Void
}
