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
}
