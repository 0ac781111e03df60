import CortadoGRPC
import Foundation
import Synchronization
import XCTest

/// The in-process transport: a router's handlers reached without sockets, through routing,
/// admission (before the message is read), deadlines and cancellation, as over HTTP/2.
final class InProcessTransportTests: XCTestCase {
    /// Set once from another thread, read by the test.
    final class Flag: @unchecked Sendable {
        private let value = Mutex(0)
        func add() { value.withLock { $0 += 1 } }
        var count: Int { value.withLock { $0 } }
    }

    private let worker = DispatchQueue(label: "test.worker", attributes: .concurrent)

    /// `/test.Echo/Echo` echoes; `Hang` answers only when cancelled (and counts that);
    /// `Fail` fails; `Lines` is a message stream whose failures become messages; admission
    /// wants `x-key: open` unless `open` is true.
    private func router(cancelled: Flag, handled: Flag, open: Bool = true) -> GRPCRouter {
        let router = GRPCRouter()
        let worker = self.worker
        router.register(path: "/test.Echo/Echo") { call in
            handled.add()
            worker.async { call.respond(call.request) }
        }
        router.register(path: "/test.Echo/Hang") { call in
            handled.add()
            call.onCancel { cancelled.add() }
        }
        router.register(path: "/test.Echo/Fail") { call in
            worker.async { call.fail(GRPCStatus(.failedPrecondition, "broken \(call.metadata("x-why") ?? "-")")) }
        }
        if !open {
            router.admit { path, metadata in
                GRPCMetadata.value("x-key", in: metadata) == "open" ? nil : GRPCStatus(.unauthenticated, "no key for \(path)")
            }
        }
        return router
    }

    private func call(_ transport: any GRPCClientTransport, _ path: String, _ message: [UInt8] = [],
                      metadata: [(name: String, value: String)] = [], timeout: Duration? = .seconds(30)) -> GRPCClientResponse {
        let done = DispatchSemaphore(value: 0)
        let result = Mutex<GRPCClientResponse?>(nil)
        transport.unary(path: path, message: message, metadata: metadata, timeout: timeout) { response in
            result.withLock { $0 = response }
            done.signal()
        }
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success, "\(path) did not complete")
        return result.withLock { $0 } ?? GRPCClientResponse(status: GRPCStatus(.unknown, "no answer"), message: nil)
    }

    func testUnaryCallsReachTheirHandlers() async throws {
        let transport = InProcessClientTransport(router: router(cancelled: Flag(), handled: Flag()))
        let echo = call(transport, "/test.Echo/Echo", Array("ping".utf8))
        XCTAssertEqual(echo.status.code, .ok)
        XCTAssertEqual(echo.message, Array("ping".utf8))
        let failed = call(transport, "/test.Echo/Fail", metadata: [("x-why", "on purpose")])
        XCTAssertEqual(failed.status, GRPCStatus(.failedPrecondition, "broken on purpose"))
        XCTAssertNil(failed.message)
        // The async form throws the status.
        let (message, _) = try await transport.unary(path: "/test.Echo/Echo", message: [1, 2, 3])
        XCTAssertEqual(message, [1, 2, 3])
        do {
            _ = try await transport.unary(path: "/test.Echo/Fail", message: [])
            XCTFail("Fail answered")
        } catch let status as GRPCStatus {
            XCTAssertEqual(status.code, .failedPrecondition)
        }
    }

    func testUnknownPathsAreUnimplemented() {
        let transport = InProcessClientTransport(router: router(cancelled: Flag(), handled: Flag()))
        let method = call(transport, "/test.Echo/Nope")
        XCTAssertEqual(method.status.code, .unimplemented)
        XCTAssertTrue(method.status.message.contains("Nope"), method.status.message)
        XCTAssertEqual(call(transport, "/other.Service/Echo").status.code, .unimplemented)
    }

    /// A refused call never reaches its handler, and its request message is never read.
    func testAdmissionRefusesBeforeTheMessageIsRead() {
        let handled = Flag(), read = Flag()
        let server = InProcessServerTransport(router: router(cancelled: Flag(), handled: handled, open: false))
        let done = DispatchSemaphore(value: 0)
        let result = Mutex<InProcessServerResult?>(nil)
        server.start(path: "/test.Echo/Echo", metadata: [("x-key", "wrong")], deadline: nil, request: {
            read.add()
            return [1]
        }) { answer in
            result.withLock { $0 = answer }
            done.signal()
        }
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(result.withLock { $0?.status.code }, .unauthenticated)
        XCTAssertEqual(read.count, 0, "the refused call's message was read")
        XCTAssertEqual(handled.count, 0)
        // The same call with the key goes through, and its message is read once.
        server.start(path: "/test.Echo/Echo", metadata: [("x-key", "open")], deadline: nil, request: {
            read.add()
            return [7]
        }) { answer in
            result.withLock { $0 = answer }
            done.signal()
        }
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(result.withLock { $0?.status.code }, .ok)
        XCTAssertEqual(result.withLock { $0?.messages }, [[7]])
        XCTAssertEqual(read.count, 1)
        XCTAssertEqual(handled.count, 1)
    }

    /// A call past its deadline ends DEADLINE_EXCEEDED and the server's call is cancelled,
    /// as an HTTP/2 client's RST_STREAM cancels it.
    func testTheDeadlineEndsTheCallAndCancelsTheHandler() {
        let cancelled = Flag(), handled = Flag()
        let transport = InProcessClientTransport(router: router(cancelled: cancelled, handled: handled))
        let response = call(transport, "/test.Echo/Hang", timeout: .milliseconds(50))
        XCTAssertEqual(response.status.code, .deadlineExceeded)
        XCTAssertEqual(handled.count, 1)
        let deadline = Date().addingTimeInterval(30)
        while (cancelled.count == 0 || transport.server.openCalls > 0) && Date() < deadline { usleep(1000) }
        XCTAssertEqual(cancelled.count, 1, "the handler's onCancel did not run")
        XCTAssertEqual(transport.server.openCalls, 0)
    }

    /// A message stream's method answers each message; a failure the method turns into a
    /// message of its own arrives as that message (the stream carries per-message errors).
    func testMessageStreamsAnswerPerMessage() {
        final class Lines: GRPCService, @unchecked Sendable {
            let serviceName = "test.Lines"
            let methods: [String: GRPCUnaryHandler] = [:]
            var messageStreams: [String: GRPCMessageStreamMethod] {
                ["Upper": GRPCMessageStreamMethod(handler: { call in
                    guard !call.request.isEmpty else { return call.fail(GRPCStatus(.invalidArgument, "empty line")) }
                    call.respond(Array(String(decoding: call.request, as: UTF8.self).uppercased().utf8))
                }, failure: { status in Array("error: \(status.message)".utf8) })]
            }
        }
        let router = GRPCRouter()
        router.register(Lines())
        let transport = InProcessClientTransport(router: router)
        let upper = call(transport, "/test.Lines/Upper", Array("abc".utf8))
        XCTAssertEqual(upper.status.code, .ok)
        XCTAssertEqual(upper.message, Array("ABC".utf8))
        let failed = call(transport, "/test.Lines/Upper", [])
        XCTAssertEqual(failed.status.code, .ok)
        XCTAssertEqual(failed.message, Array("error: empty line".utf8))
    }

    func testAClosedTransportRefusesCalls() {
        let transport = InProcessClientTransport(router: router(cancelled: Flag(), handled: Flag()))
        transport.close()
        XCTAssertEqual(call(transport, "/test.Echo/Echo", [1]).status.code, .unavailable)
    }
}
