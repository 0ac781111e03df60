import CCortadoGemm
import Foundation
import Synchronization

/// Helper threads for short parallel sections: after each piece of work they poll for the
/// next for a short while before they sleep, so a section that follows another within
/// microseconds starts at once (handing work to a Dispatch worker costs ~10 µs on this 2-core
/// machine, as much as half of a 784×512 GEMV).
///
/// The pieces of a section are claimed, not assigned: the calling thread runs piece 0, and
/// helpers claim the rest. Pieces still unclaimed when the caller has finished piece 0 (and
/// waited for a waking helper, within `wakeNanos` of the section's start) are claimed by the
/// caller, so a helper that is asleep or not scheduled (other processes on the cores) costs a
/// section at most its serial time plus that wait.
///
/// One section at a time: `run` returns false when the team is busy (another prediction or a
/// nested call), and the caller uses Dispatch instead.
final class NNSpinTeam: @unchecked Sendable {
    static let shared = NNSpinTeam(helpers: NNThreads.cores - 1)

    /// How long an idle helper polls before it sleeps: `spinNanos`, or after a long section a
    /// tenth of its length (up to `maxSpinNanos`), so that the next of a run of large batches
    /// (a batch split over the threads) does not wait ~25 µs for the helper to wake, while
    /// the polling costs at most a tenth of the work it waits for.
    static let spinNanos: UInt64 = 50_000
    static let maxSpinNanos: UInt64 = 1_000_000
    /// How long after a section begins its caller may wait for a helper to wake and claim a
    /// piece.
    static let wakeNanos: UInt64 = 100_000
    /// Bits of `next` holding the piece index; the section number is above them.
    private static let indexBits = 20

    let helpers: Int
    private let busy = Atomic<Bool>(false)
    /// Bumped for every section.
    private let epoch = Atomic<Int>(0)
    /// The section number and the next unclaimed piece.
    private let next = Atomic<Int>(0)
    /// Pieces after 0 finished in this section.
    private let done = Atomic<Int>(0)
    private let sleepers = Atomic<Int>(0)
    /// Length of the last section (nanoseconds).
    private let lastSection = Atomic<Int>(0)
    private let condition = NSCondition()
    /// The current section; written before `next` is published.
    private var body: ((Int) -> Void)?
    private var workers = 0

    private init(helpers: Int) {
        self.helpers = Swift.max(0, helpers)
        for index in 0..<self.helpers {
            let thread = Thread { [unowned self] in self.helperLoop() }
            thread.name = "cortado-nn-\(index + 1)"
            thread.start()
        }
    }

    /// Runs `body(piece)` for `piece` in `0..<workers` on the calling thread and the helpers,
    /// or returns false without running anything when the team is busy or has no helpers.
    ///
    /// `finished`, when given, says that the section's work is all taken (pieces that claim
    /// their work themselves, `NNThreads.claim`): the caller then does not wait for a helper.
    func run(workers: Int, finished: (() -> Bool)? = nil, _ body: (Int) -> Void) -> Bool {
        guard helpers > 0, workers < 1 << Self.indexBits,
              busy.compareExchange(expected: false, desired: true, ordering: .acquiring).exchanged else { return false }
        withoutActuallyEscaping(body) { body in
            let section = epoch.load(ordering: .relaxed) + 1
            self.body = body
            self.workers = workers
            done.store(0, ordering: .relaxed)
            next.store(section << Self.indexBits | 1, ordering: .releasing)
            epoch.store(section, ordering: .sequentiallyConsistent)
            if sleepers.load(ordering: .sequentiallyConsistent) > 0 {
                // Wake them for the next sections; this one does not wait for them.
                condition.lock()
                condition.broadcast()
                condition.unlock()
            }
            let start = DispatchTime.now().uptimeNanoseconds
            body(0)
            // A helper that has not claimed a piece yet may be waking up (a sleeping one
            // wakes in tens of microseconds on an idle core): wait for it until `wakeNanos`
            // after the section began, and no longer than piece 0 took, then take what is
            // left. Past that, the helper's core is busy with other work, and waiting would
            // only idle this one.
            let now = DispatchTime.now().uptimeNanoseconds
            let elapsed = now - start
            let deadline = now + Swift.min(elapsed, Self.wakeNanos > elapsed ? Self.wakeNanos - elapsed : 0)
            var polls = 0
            while unclaimed(section) {
                if let finished, finished() { break }
                cg_pause()
                polls += 1
                if polls % 64 == 0 && DispatchTime.now().uptimeNanoseconds >= deadline { break }
            }
            var finished = 0
            while let piece = claim(section) {
                body(piece)
                finished += 1
            }
            done.add(finished, ordering: .relaxed)
            while done.load(ordering: .acquiring) < workers - 1 { cg_pause() }
            lastSection.store(Int(DispatchTime.now().uptimeNanoseconds - start), ordering: .relaxed)
            self.body = nil
        }
        busy.store(false, ordering: .releasing)
        return true
    }

    /// True while section `section` has a piece nobody has claimed.
    private func unclaimed(_ section: Int) -> Bool {
        let current = next.load(ordering: .acquiring)
        return current >> Self.indexBits == section && current & (1 << Self.indexBits - 1) < workers
    }

    /// The next piece of section `section`, or nil when none is left (or the section is over).
    private func claim(_ section: Int) -> Int? {
        var current = next.load(ordering: .acquiring)
        while true {
            let piece = current & (1 << Self.indexBits - 1)
            guard current >> Self.indexBits == section, piece < workers else { return nil }
            let (exchanged, original) = next.compareExchange(expected: current, desired: current + 1, ordering: .acquiringAndReleasing)
            if exchanged { return piece }
            current = original
        }
    }

    private func helperLoop() {
        var seen = 0
        while true {
            var current = epoch.load(ordering: .acquiring)
            if current == seen {
                let start = DispatchTime.now().uptimeNanoseconds
                let spin = Swift.min(Self.maxSpinNanos, Swift.max(Self.spinNanos, UInt64(lastSection.load(ordering: .relaxed) / 10)))
                var polls = 0
                while current == seen {
                    cg_pause()
                    polls += 1
                    if polls % 256 == 0 && DispatchTime.now().uptimeNanoseconds - start > spin {
                        // Sleep until the epoch moves (checked under the lock after announcing
                        // the sleep, so a section published in between is never missed).
                        sleepers.add(1, ordering: .sequentiallyConsistent)
                        condition.lock()
                        while epoch.load(ordering: .sequentiallyConsistent) == seen { condition.wait() }
                        condition.unlock()
                        sleepers.subtract(1, ordering: .sequentiallyConsistent)
                    }
                    current = epoch.load(ordering: .acquiring)
                }
            }
            seen = current
            var finished = 0
            while let piece = claim(current), let body {
                body(piece)
                finished += 1
            }
            if finished > 0 { done.add(finished, ordering: .releasing) }
        }
    }
}
