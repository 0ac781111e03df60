import CortadoGRPC
import Foundation
import XCTest
#if canImport(Glibc)
import Glibc
#endif

/// `GRPCRouter.admit(with:)`: the check a call's head passes before its message is read, and
/// TLS files that cannot be used stopping the start. Loopback, bounded waits.
final class GRPCAdmissionTests: XCTestCase {
    private var servers: [GRPCServer] = []

    /// Handler runs, counted from the loop thread and read from the test's.
    final class Counter: @unchecked Sendable {
        private let lock = NSLock()
        private var count = 0
        func add() { lock.withLock { count += 1 } }
        var value: Int { lock.withLock { count } }
    }

    override func setUp() { signal(SIGPIPE, SIG_IGN) }

    override func tearDown() {
        for server in servers { XCTAssertTrue(GRPCServerLoopbackTests.stop(server, timeout: 10), "server did not stop") }
        servers = []
    }

    /// An echo server whose admission lets only calls with `x-key: open` through; counts the
    /// handler's runs.
    private func startServer(handled: Counter) throws -> Int {
        let router = GRPCRouter()
        let worker = DispatchQueue(label: "test.worker")
        router.register(path: "/test.Echo/Echo") { call in
            handled.add()
            worker.async { call.respond(call.request) }
        }
        router.admit { path, metadata in
            guard metadata.contains(where: { $0.name == "x-key" && $0.value == "open" }) else {
                return GRPCStatus(.unauthenticated, "no key for \(path)")
            }
            return nil
        }
        var configuration = GRPCServerConfiguration()
        configuration.port = 0
        configuration.drainTimeout = 5
        let server = GRPCServer(configuration: configuration, router: router)
        let ports = try server.start()
        servers.append(server)
        return ports.grpcPort
    }

    func testAdmittedCallReachesItsHandler() throws {
        let handled = Counter()
        let client = try SharedClientCall.transport(port: try startServer(handled: handled))
        defer { client.close() }
        let response = SharedClientCall.call(client, "/test.Echo/Echo", Array("hi".utf8), metadata: [("x-key", "open")])
        XCTAssertEqual(response.status, .ok)
        XCTAssertEqual(response.message, Array("hi".utf8))
        XCTAssertEqual(handled.value, 1)
    }

    func testRefusedCallGetsTheStatusAndNeverReachesItsHandler() throws {
        let handled = Counter()
        let client = try HTTP2TestClient(port: try startServer(handled: handled))
        // A large message: refused from its head, the body is dropped unread.
        let response = try client.call(path: "/test.Echo/Echo", message: [UInt8](repeating: 7, count: 200_000), metadata: [("x-key", "wrong")])
        XCTAssertEqual(response.grpcStatus, Int(GRPCStatus.Code.unauthenticated.rawValue))
        XCTAssertEqual(response.grpcMessage, "no key for /test.Echo/Echo")
        XCTAssertTrue(response.isTrailersOnly)
        XCTAssertEqual(handled.value, 0)
        // The connection goes on.
        let next = try client.call(path: "/test.Echo/Echo", message: Array("again".utf8), metadata: [("x-key", "open")])
        XCTAssertEqual(try next.messages(), [Array("again".utf8)])
    }

    func testUnknownMethodIsUnimplementedBeforeAdmission() throws {
        let handled = Counter()
        let client = try SharedClientCall.transport(port: try startServer(handled: handled))
        defer { client.close() }
        XCTAssertEqual(SharedClientCall.call(client, "/test.Echo/Nope").status.code, .unimplemented)
        XCTAssertEqual(handled.value, 0)
    }

    func testUnusableTLSFilesStopTheStart() throws {
        var configuration = GRPCServerConfiguration()
        configuration.port = 0
        configuration.tls = GRPCTLSConfiguration(certificatePath: "/nonexistent/cert.pem", privateKeyPath: "/nonexistent/key.pem")
        let server = GRPCServer(configuration: configuration, router: GRPCRouter())
        XCTAssertThrowsError(try server.start()) { error in
            XCTAssertTrue("\(error)".contains("/nonexistent/cert.pem"), "\(error)")
        }
        XCTAssertThrowsError(try server.reloadTLS())
    }
}
