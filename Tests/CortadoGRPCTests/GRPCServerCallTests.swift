@testable import CortadoGRPC
import Foundation
import XCTest

/// A call as handlers see it: answered once, from any thread; metadata, method, deadline.
final class GRPCServerCallTests: XCTestCase {
    /// Records what a call completed with.
    final class RecordingCompletion: GRPCCallCompletion, @unchecked Sendable {
        private let lock = NSLock()
        private var results: [GRPCCallResult] = []
        func complete(_ call: GRPCServerCall, _ result: GRPCCallResult) { lock.withLock { results.append(result) } }
        var recorded: [GRPCCallResult] { lock.withLock { results } }
    }

    private func call(deadline: UInt64? = nil, completion: GRPCCallCompletion) -> GRPCServerCall {
        GRPCServerCall(path: "/pkg.Svc/Method", request: [1, 2], metadata: [("x-id", "7"), ("te", "trailers")],
                       deadline: deadline, completion: completion)
    }

    func testRespondFramesTheMessage() {
        let completion = RecordingCompletion()
        call(completion: completion).respond([9, 8])
        guard case .message(let framed)? = completion.recorded.first else { return XCTFail("\(completion.recorded)") }
        XCTAssertEqual(framed, [0, 0, 0, 0, 2, 9, 8])
    }

    func testOnlyTheFirstAnswerCounts() {
        let completion = RecordingCompletion()
        let c = call(completion: completion)
        c.fail(GRPCStatus(.internal, "first"))
        c.respond([1])
        c.fail(GRPCStatus(.unknown, "third"))
        XCTAssertEqual(completion.recorded.count, 1)
        guard case .status(let status)? = completion.recorded.first else { return XCTFail() }
        XCTAssertEqual(status, GRPCStatus(.internal, "first"))
    }

    func testConcurrentAnswersCompleteOnce() {
        let completion = RecordingCompletion()
        let c = call(completion: completion)
        DispatchQueue.concurrentPerform(iterations: 64) { i in
            if i % 2 == 0 { c.respond([UInt8(i)]) } else { c.fail(GRPCStatus(.aborted)) }
        }
        XCTAssertEqual(completion.recorded.count, 1)
    }

    func testMethodAndMetadata() {
        let c = call(completion: RecordingCompletion())
        XCTAssertEqual(c.method, "Method")
        XCTAssertEqual(c.metadata("x-id"), "7")
        XCTAssertNil(c.metadata("x-missing"))
        XCTAssertEqual(c.request, [1, 2])
    }

    func testDeadline() {
        XCTAssertFalse(call(completion: RecordingCompletion()).isPastDeadline, "no deadline")
        let now = DispatchTime.now().uptimeNanoseconds
        XCTAssertTrue(call(deadline: now, completion: RecordingCompletion()).isPastDeadline)
        XCTAssertFalse(call(deadline: now + 60_000_000_000, completion: RecordingCompletion()).isPastDeadline)
    }

    func testCancel() {
        let c = call(completion: RecordingCompletion())
        XCTAssertFalse(c.isCancelled)
        c.cancel()
        XCTAssertTrue(c.isCancelled)
    }
}
