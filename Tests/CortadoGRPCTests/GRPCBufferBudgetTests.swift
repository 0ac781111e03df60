@testable import CortadoGRPC
import XCTest

/// The buffer budgets: a connection's reservations count against the process's, a reservation
/// is all or nothing, and the budget that is short is the one reported. The reader asks for a
/// message's bytes before keeping any of them.
final class GRPCBufferBudgetTests: XCTestCase {
    func testReservationsCountInTheParentAndAreAllOrNothing() {
        let process = GRPCBufferBudget(limit: 100)
        let a = GRPCBufferBudget(limit: 60, parent: process)
        let b = GRPCBufferBudget(limit: 60, parent: process)
        XCTAssertNil(a.reserve(50))
        XCTAssertTrue(a.reserve(20) === a, "the connection is short")
        XCTAssertEqual(a.used, 50)
        XCTAssertEqual(process.used, 50)
        XCTAssertTrue(b.reserve(55) === process, "the process is short")
        XCTAssertEqual(b.used, 0)
        XCTAssertEqual(process.used, 50)
        XCTAssertNil(b.reserve(50))
        XCTAssertTrue(b.isSpent(below: 1))
        XCTAssertTrue(a.isSpent(below: 1), "the process's budget is spent for every connection")
        a.release(50)
        XCTAssertEqual(process.used, 50)
        XCTAssertFalse(a.isSpent(below: 50))
    }

    func testTheReaderAsksBeforeKeepingAMessage() throws {
        var reader = GRPCMessageReader(maxMessageSize: 1000)
        var asked: [Int] = []
        let two: [UInt8] = [0, 0, 0, 0, 3, 1, 2, 3, 0, 0, 0, 0, 200]
        try two.withUnsafeBytes { raw in try reader.append(raw, admit: { asked.append($0) }) }
        XCTAssertEqual(asked, [3, 200])
        XCTAssertEqual(reader.messages, [[1, 2, 3]])
        XCTAssertTrue(reader.hasPartialMessage)

        struct Refused: Error {}
        var refusing = GRPCMessageReader(maxMessageSize: 1000)
        XCTAssertThrowsError(try [UInt8]([0, 0, 0, 1, 0, 9]).withUnsafeBytes { raw in
            try refusing.append(raw, admit: { _ in throw Refused() })
        }) { XCTAssertTrue($0 is Refused) }
        XCTAssertTrue(refusing.messages.isEmpty)
        // Over the message limit: the limit's error, before the budget is asked.
        var large = GRPCMessageReader(maxMessageSize: 10)
        XCTAssertThrowsError(try [UInt8]([0, 0, 0, 0, 11]).withUnsafeBytes { raw in
            try large.append(raw, admit: { _ in XCTFail("asked for a message over the limit") })
        }) { XCTAssertEqual($0 as? GRPCMessageReader.ReadError, .tooLarge(declared: 11, limit: 10)) }
    }
}
