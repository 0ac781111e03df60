@testable import CortadoNeuralNetwork
import Dispatch
import Foundation
import Synchronization
import XCTest

/// `NNThreads.run` through `NNSpinTeam`: every piece runs exactly once, whoever runs it,
/// with helpers polling or asleep, with concurrent callers (one gets the team, the others
/// Dispatch) and with a nested call.
final class NNThreadsTests: XCTestCase {
    /// Counts of runs per piece, filled by a parallel section.
    private final class Tally: @unchecked Sendable {
        let counts: UnsafeMutablePointer<Atomic<Int>>
        let size: Int
        init(_ size: Int) {
            self.size = size
            counts = .allocate(capacity: size)
            for i in 0..<size { (counts + i).initialize(to: Atomic(0)) }
        }
        deinit { counts.deinitialize(count: size); counts.deallocate() }
        func hit(_ i: Int) { counts[i].add(1, ordering: .relaxed) }
        var values: [Int] { (0..<size).map { counts[$0].load(ordering: .relaxed) } }
    }

    func testEveryPieceRunsOnceWhetherHelpersPollOrSleep() {
        for workers in 1...9 {
            for pause in [0, 200] {  // µs between sections: helpers still polling, or asleep
                for _ in 0..<20 {
                    let tally = Tally(workers)
                    NNThreads.run(workers: workers) { tally.hit($0) }
                    XCTAssertEqual(tally.values, [Int](repeating: 1, count: workers), "\(workers) workers, \(pause) µs apart")
                    if pause > 0 { usleep(useconds_t(pause)) }
                }
            }
        }
    }

    func testConcurrentAndNestedSections() {
        let callers = 4, rounds = 200, workers = 3
        let failures = Atomic<Int>(0)
        DispatchQueue.concurrentPerform(iterations: callers) { _ in
            for _ in 0..<rounds {
                let outer = Tally(workers), inner = Tally(workers * 2)
                NNThreads.run(workers: workers) { piece in
                    outer.hit(piece)
                    // A nested section: the team is busy, so it runs on Dispatch.
                    NNThreads.run(workers: 2) { inner.hit(piece * 2 + $0) }
                }
                if outer.values != [Int](repeating: 1, count: workers) || inner.values != [Int](repeating: 1, count: workers * 2) {
                    failures.add(1, ordering: .relaxed)
                }
            }
        }
        XCTAssertEqual(failures.load(ordering: .relaxed), 0, "sections where a piece ran other than once")
    }

    /// `NNThreads.claim`: every unit runs exactly once in non-empty ranges, each slot runs its
    /// ranges one at a time (its scratch is never shared), and a section for one slot is one
    /// call; with helpers polling or asleep and with concurrent callers (one on the team, the
    /// others on Dispatch).
    func testClaimedRangesCoverEveryUnitOnce() {
        let failures = Atomic<Int>(0)
        let check: @Sendable (Int, Int) -> Void = { units, slots in
            let tally = Tally(Swift.max(units, 1)), busy = Tally(Swift.max(slots, 1))
            let ranges = Mutex<[(Int, Int)]>([])
            NNThreads.claim(units: units, slots: slots) { u0, u1, slot in
                if slot < 0 || slot >= slots || busy.counts[slot].add(1, ordering: .relaxed).newValue != 1 { failures.add(1, ordering: .relaxed) }
                for u in u0..<u1 { tally.hit(u) }
                ranges.withLock { $0.append((u0, u1)) }
                busy.counts[slot].subtract(1, ordering: .relaxed)
            }
            let taken = ranges.withLock { $0 }
            let covered = units == 0 ? [] : tally.values
            // A slot alone (one slot, or a section of one unit) gets everything in one range.
            let alone = Swift.min(slots, units) <= 1
            if covered != [Int](repeating: 1, count: units) || taken.contains(where: { $0.0 >= $0.1 })
                || (alone && units > 0 && taken.count != 1) {
                failures.add(1, ordering: .relaxed)
            }
        }
        for units in [0, 1, 2, 3, 7, 64, 1000] {
            for slots in 1...4 {
                for pause in [0, 200] {
                    check(units, slots)
                    if pause > 0 { usleep(useconds_t(pause)) }
                }
            }
        }
        DispatchQueue.concurrentPerform(iterations: 4) { _ in
            for _ in 0..<100 { check(257, 2) }
        }
        XCTAssertEqual(failures.load(ordering: .relaxed), 0, "claims that missed or repeated a unit, gave an empty range, shared a slot or split a one-slot section")
    }
}
