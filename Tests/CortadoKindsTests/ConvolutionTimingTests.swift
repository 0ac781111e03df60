@testable import CortadoNeuralNetwork
import XCTest

/// The convolution algorithm measurement's bookkeeping (`ConvolutionTiming`): forms compared
/// round by round, clear losers dropped after the first round, and the margin that says
/// whether more rounds are needed.
final class ConvolutionTimingTests: XCTestCase {
    /// A timing with `warmUp` and then `rounds` of nanoseconds per form (nil: sat out).
    private func timing(warmUp: [UInt64], rounds: [[UInt64?]]) -> ConvolutionTiming {
        var clock = ConvolutionTiming(count: warmUp.count)
        for (i, t) in warmUp.enumerated() { clock.noteWarmUp(i, t) }
        for round in rounds {
            clock.beginRound()
            for (i, t) in round.enumerated() { if let t { clock.record(i, t) } }
        }
        return clock
    }

    func testOneLuckyRunDoesNotDecide() {
        // Form 1 is 10% slower in rounds 1 and 3. In round 2 form 0 ran in a slow moment and
        // form 1 in a fast one: the best time of each (the measurement before this one) would
        // pick form 1; round by round, form 0 is ahead twice of three.
        let clock = timing(warmUp: [100, 110], rounds: [[100, 110], [300, 90], [100, 110]])
        XCTAssertEqual(clock.ranked.first, 0)
        XCTAssertEqual(clock.score(0), 1.0, accuracy: 1e-9)
        XCTAssertEqual(clock.score(1), 1.1, accuracy: 1e-9)
        XCTAssertEqual(clock.margin, 1.1, accuracy: 1e-9)
        XCTAssertEqual(clock.median(0), 100)
        XCTAssertEqual(clock.median(1), 110)
    }

    func testClearLosersAreDroppedAfterTheFirstRound() {
        // Form 2 is 2× the fastest; form 1's round was slow but its warm-up was not.
        var clock = timing(warmUp: [100, 120, 200], rounds: [[100, 160, 210]])
        let note = clock.dropSlow(names: ["winograd", "direct", "gemm"])
        XCTAssertEqual(clock.alive, [0, 1])
        XCTAssertTrue(note.contains("gemm"), note)
        XCTAssertFalse(note.contains("direct"), note)
        XCTAssertEqual(clock.ranked, [0, 1, 2])
        // A form sitting out later rounds is not counted in them.
        clock.beginRound()
        clock.record(0, 100)
        clock.record(1, 104)
        XCTAssertEqual(clock.margin, (1.6 / 1.0 + 1.04) / 2, accuracy: 1e-9)
    }

    func testTheFastestIsNeverDropped() {
        var clock = timing(warmUp: [500, 100], rounds: [[90, 100]])
        _ = clock.dropSlow(names: ["a", "b"])
        XCTAssertEqual(clock.alive, [0, 1])
        var alone = timing(warmUp: [100], rounds: [[100]])
        XCTAssertEqual(alone.dropSlow(names: ["a"]), "")
        XCTAssertEqual(alone.alive, [0])
        XCTAssertEqual(alone.margin, .infinity)
    }

    func testACloseCallGoesToTheFewerMultiplications() {
        let names: [ConvolutionAlgorithm] = [.gemm, .winograd2, .winograd]
        let cost = { (i: Int) in names[i].multiplicationsPerOutput }
        // Within 8% of the GEMM: F(2×2) and F(4×4) both; F(4×4) multiplies least.
        let close = timing(warmUp: [100, 100, 100], rounds: [[100, 103, 106], [100, 103, 106], [100, 103, 106]])
        XCTAssertEqual(close.choice(within: 1.08, cost: cost).form, 2)
        XCTAssertTrue(close.choice(within: 1.08, cost: cost).tie)
        // F(4×4) 10% behind: the tie is between the GEMM and F(2×2).
        let clear = timing(warmUp: [100, 100, 100], rounds: [[100, 103, 110], [100, 103, 110], [100, 103, 110]])
        XCTAssertEqual(clear.choice(within: 1.08, cost: cost).form, 1)
        // The leader multiplying least stays, without a tie.
        let leader = timing(warmUp: [100, 100, 100], rounds: [[107, 103, 100], [107, 103, 100], [107, 103, 100]])
        XCTAssertEqual(leader.choice(within: 1.08, cost: cost).form, 2)
        XCTAssertFalse(leader.choice(within: 1.08, cost: cost).tie)
    }
}
