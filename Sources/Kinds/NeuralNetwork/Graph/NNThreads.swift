import COpenBLAS
import Dispatch
import Foundation

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
    static func run(workers: Int, _ body: (Int) -> Void) {
        if workers <= 1 { body(0); return }
        if NNSpinTeam.shared.run(workers: workers, body) { return }
        withoutActuallyEscaping(body) { body in
            let unchecked = WorkerBody(body: body)
            DispatchQueue.concurrentPerform(iterations: workers) { unchecked.body($0) }
        }
    }
}

/// A worker body handed to Dispatch; workers touch disjoint memory.
private struct WorkerBody: @unchecked Sendable {
    let body: (Int) -> Void
}
