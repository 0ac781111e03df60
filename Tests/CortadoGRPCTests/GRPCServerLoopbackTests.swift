import CortadoGRPC
import Foundation
import XCTest
#if canImport(Glibc)
import Glibc
#endif

/// The whole transport in process: a `GRPCServer` on 127.0.0.1 with an ephemeral port, the
/// shared client layers calling it, and `HTTP2TestClient` for what happens on the wire. Handlers answer from a dispatch queue, as the
/// server's workers do. Every wait is bounded.
final class GRPCServerLoopbackTests: XCTestCase {
    static let failMessage = "model 'größe' is 100% broken\nsee logs"
    private var servers: [GRPCServer] = []

    override func setUp() {
        signal(SIGPIPE, SIG_IGN)
    }

    override func tearDown() {
        for server in servers { XCTAssertTrue(Self.stop(server, timeout: 10), "server did not stop") }
        servers = []
    }

    /// Shuts down and waits for the loop to stop, at most `timeout` seconds.
    static let hangRelease = DispatchSemaphore(value: 0)

    static func stop(_ server: GRPCServer, timeout: Double) -> Bool {
        server.shutdown()
        let stopped = DispatchSemaphore(value: 0)
        Thread { server.wait(); stopped.signal() }.start()
        return stopped.wait(timeout: .now() + timeout) == .success
    }

    private func startServer(_ configure: (inout GRPCServerConfiguration) -> Void = { _ in }) throws -> (GRPCServer, Int) {
        let worker = DispatchQueue(label: "test.worker", attributes: .concurrent)
        let router = GRPCRouter()
        router.register(path: "/test.Echo/Echo") { call in worker.async { call.respond(call.request) } }
        router.register(path: "/test.Echo/SlowEcho") { call in
            worker.asyncAfter(deadline: .now() + 0.3) { call.respond(call.request) }
        }
        // Answers only once the test signals `hangRelease`.
        router.register(path: "/test.Echo/Hang") { call in
            worker.async { Self.hangRelease.wait(); call.respond(call.request) }
        }
        router.register(path: "/test.Echo/Fail") { call in
            worker.async { call.fail(GRPCStatus(.failedPrecondition, Self.failMessage)) }
        }
        // Answers with what the handler saw: a metadata value and whether a deadline was set.
        router.register(path: "/test.Echo/Inspect") { call in
            let text = "\(call.metadata("x-test") ?? "-")|\(call.deadline == nil ? "no deadline" : "deadline")|\(call.method)"
            worker.async { call.respond(Array(text.utf8)) }
        }
        var configuration = GRPCServerConfiguration()
        configuration.host = "127.0.0.1"
        configuration.port = 0
        configuration.drainTimeout = 5
        configure(&configuration)
        let server = GRPCServer(configuration: configuration, router: router)
        let ports = try server.start()
        XCTAssertGreaterThan(ports.grpcPort, 0)
        XCTAssertNil(ports.httpPort)
        servers.append(server)
        return (server, ports.grpcPort)
    }

    // MARK: calls

    func testEchoReturnsTheMessageWithStatusOK() throws {
        let (_, port) = try startServer()
        let client = try HTTP2TestClient(port: port)
        let response = try client.call(path: "/test.Echo/Echo", message: Array("ping".utf8))
        XCTAssertEqual(response.value(":status"), "200")
        XCTAssertEqual(response.headers.first { $0.name == "content-type" }?.value, "application/grpc")
        XCTAssertEqual(try response.messages(), [Array("ping".utf8)])
        XCTAssertFalse(response.isTrailersOnly)
        XCTAssertEqual(response.trailers.first { $0.name == "grpc-status" }?.value, "0", "grpc-status belongs in the trailers")
        XCTAssertNil(response.headers.first { $0.name == "grpc-status" }, "not in the response headers")
        XCTAssertEqual(response.errorCode, 0)
    }

    func testEmptyMessageEcho() throws {
        let (_, port) = try startServer()
        let client = try SharedClientCall.transport(port: port)
        defer { client.close() }
        let response = SharedClientCall.call(client, "/test.Echo/Echo", [])
        XCTAssertEqual(response.status, .ok)
        XCTAssertEqual(response.message, [])
    }

    /// Larger than a DATA frame and than the default 64 KiB window, both ways.
    func testLargeMessageEcho() throws {
        let (_, port) = try startServer()
        let client = try SharedClientCall.transport(port: port)
        defer { client.close() }
        let message = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        let response = SharedClientCall.call(client, "/test.Echo/Echo", message)
        XCTAssertEqual(response.status, .ok)
        XCTAssertEqual(response.message, message)
    }

    func testConcurrentCallsOnOneConnection() throws {
        let (server, port) = try startServer()
        let client = try SharedClientCall.transport(port: port)
        defer { client.close() }
        let requests = (0..<20).map { i in (path: i % 2 == 0 ? "/test.Echo/Echo" : "/test.Echo/SlowEcho", message: Array("m\(i)".utf8)) }
        for (i, response) in SharedClientCall.calls(client, requests).enumerated() {
            XCTAssertEqual(response.status, .ok, "call \(i)")
            XCTAssertEqual(response.message, Array("m\(i)".utf8), "call \(i)")
        }
        XCTAssertEqual(server.connectionCount, 1, "the calls shared one connection")
    }

    func testMetadataAndDeadlineReachTheHandler() throws {
        let (_, port) = try startServer()
        let client = try SharedClientCall.transport(port: port)
        defer { client.close() }
        let with = SharedClientCall.call(client, "/test.Echo/Inspect", metadata: [("x-test", "abc")], timeout: .seconds(5))
        XCTAssertEqual(with.message.map { String(decoding: $0, as: UTF8.self) }, "abc|deadline|Inspect")
        let without = SharedClientCall.call(client, "/test.Echo/Inspect", timeout: nil)
        XCTAssertEqual(without.message.map { String(decoding: $0, as: UTF8.self) }, "-|no deadline|Inspect")
    }

    // MARK: errors

    func testUnknownMethodIsTrailersOnlyUnimplemented() throws {
        let (_, port) = try startServer()
        let client = try HTTP2TestClient(port: port)
        let response = try client.call(path: "/test.Echo/Nope", message: [1])
        XCTAssertTrue(response.isTrailersOnly, "\(response.headerBlocks)")
        XCTAssertEqual(response.value(":status"), "200")
        XCTAssertEqual(response.grpcStatus, 12)
        XCTAssertEqual(response.grpcMessage, "method Nope is not implemented by service test.Echo")
    }

    func testUnknownServiceIsUnimplemented() throws {
        let (_, port) = try startServer()
        let client = try HTTP2TestClient(port: port)
        let response = try client.call(path: "/other.Service/Echo", message: [1])
        XCTAssertTrue(response.isTrailersOnly)
        XCTAssertEqual(response.grpcStatus, 12)
        XCTAssertEqual(response.grpcMessage, "unknown service other.Service")
    }

    func testFailingHandlerSendsItsStatusPercentEncoded() throws {
        let (_, port) = try startServer()
        let client = try HTTP2TestClient(port: port)
        let response = try client.call(path: "/test.Echo/Fail", message: [1])
        XCTAssertTrue(response.isTrailersOnly)
        XCTAssertEqual(response.grpcStatus, GRPCStatus.Code.failedPrecondition.rawValue)
        XCTAssertEqual(response.rawGRPCMessage, "model 'gr%C3%B6%C3%9Fe' is 100%25 broken%0Asee logs")
        XCTAssertEqual(response.grpcMessage, Self.failMessage)
    }

    func testMessageOverTheLimitIsResourceExhausted() throws {
        let (_, port) = try startServer { $0.maxReceiveMessageSize = 16 }
        let client = try SharedClientCall.transport(port: port)
        defer { client.close() }
        XCTAssertEqual(SharedClientCall.call(client, "/test.Echo/Echo", [UInt8](repeating: 1, count: 16)).status, .ok)
        let response = SharedClientCall.call(client, "/test.Echo/Echo", [UInt8](repeating: 1, count: 17))
        XCTAssertEqual(response.status.code, .resourceExhausted)
        XCTAssertTrue(response.status.message.contains("17 bytes"), response.status.message)
    }

    func testMalformedBodies() throws {
        let (_, port) = try startServer()
        let client = try HTTP2TestClient(port: port)
        let cases: [(String, [UInt8], GRPCStatus.Code)] = [
            ("no message", [], .internal),
            ("two messages", GRPCMessageWriter.frame([1]) + GRPCMessageWriter.frame([2]), .unimplemented),
            ("ends inside a message", Array(GRPCMessageWriter.frame([1, 2, 3]).dropLast()), .internal),
            ("compressed", [1, 0, 0, 0, 1, 0], .unimplemented),
        ]
        for (name, body, code) in cases {
            let response = try client.call(path: "/test.Echo/Echo", body: body)
            XCTAssertEqual(response.grpcStatus, code.rawValue, "\(name): \(response.grpcMessage ?? "")")
            XCTAssertTrue(response.isTrailersOnly, name)
        }
    }

    func testMalformedTimeoutIsInvalidArgument() throws {
        let (_, port) = try startServer()
        let client = try HTTP2TestClient(port: port)
        let response = try client.call(path: "/test.Echo/Echo", message: [1], metadata: [("grpc-timeout", "1x")])
        XCTAssertEqual(response.grpcStatus, GRPCStatus.Code.invalidArgument.rawValue)
    }

    // MARK: shutdown

    func testShutdownWithoutConnections() throws {
        let (server, _) = try startServer()
        servers.removeAll()
        XCTAssertTrue(Self.stop(server, timeout: 5))
    }

    /// A call in flight when shutdown starts still gets its answer; the client sees GOAWAY,
    /// the connection closes, `wait()` returns and the port takes no new connections.
    func testShutdownDrainsACallInFlight() throws {
        let (server, port) = try startServer()
        servers.removeAll()
        let client = try HTTP2TestClient(port: port)
        let id = try client.startCall(path: "/test.Echo/SlowEcho", message: Array("last".utf8))
        try client.pump(timeout: 5) { server.callsInFlight == 1 }

        server.shutdown()
        try client.pump(timeout: 5) { client.responses[id]?.closed == true }
        let response = client.responses[id]!
        XCTAssertEqual(response.grpcStatus, 0)
        XCTAssertEqual(try response.messages(), [Array("last".utf8)])
        XCTAssertTrue(client.goAwayReceived)

        try client.waitForClose(timeout: 5)
        XCTAssertTrue(client.peerClosed, "the server closes the drained connection")

        let stopped = DispatchSemaphore(value: 0)
        Thread { server.wait(); stopped.signal() }.start()
        XCTAssertEqual(stopped.wait(timeout: .now() + 5), .success, "wait() returns once drained")
        XCTAssertEqual(server.callsInFlight, 0)
        XCTAssertEqual(server.connectionCount, 0)
        XCTAssertThrowsError(try HTTP2TestClient(port: port), "the listener is closed")
    }

    /// Past the drain timeout, a call that never answers is dropped and the loop stops anyway.
    func testDrainTimeoutStopsAStuckCall() throws {
        let (server, port) = try startServer { $0.drainTimeout = 0.2 }
        servers.removeAll()
        let client = try HTTP2TestClient(port: port)
        // Hang answers only when released, which happens after the loop stopped.
        try client.startCall(path: "/test.Echo/Hang", message: [1])
        try client.pump(timeout: 5) { server.callsInFlight == 1 }
        XCTAssertTrue(Self.stop(server, timeout: 5), "the loop stops at the drain timeout although the call never answered")
        XCTAssertEqual(server.callsInFlight, 1, "the stuck call was still running when the loop stopped")
        // The stuck call answers after the loop has stopped: the answer is dropped, not a crash.
        Self.hangRelease.signal()
        for _ in 0..<500 where server.callsInFlight != 0 { Thread.sleep(forTimeInterval: 0.01) }
        XCTAssertEqual(server.connectionCount, 0)
        XCTAssertEqual(server.callsInFlight, 0, "the dropped answer still ends the call")
    }

    /// `shutdown()` again after the loop stopped (a second SIGTERM) does nothing.
    func testShutdownAfterStopIsHarmless() throws {
        let (server, _) = try startServer()
        servers.removeAll()
        XCTAssertTrue(Self.stop(server, timeout: 5))
        server.shutdown()
        server.wait()
    }
}
