@testable import CortadoGRPC
import XCTest

/// Path routing and the UNIMPLEMENTED reasons.
final class GRPCRouterTests: XCTestCase {
    private final class TestService: GRPCService {
        let serviceName = "test.v1.Echo"
        var methods: [String: GRPCUnaryHandler] {
            ["Echo": { _ in }, "Reverse": { _ in }]
        }
    }

    private func router() -> GRPCRouter {
        let router = GRPCRouter()
        router.register(TestService())
        router.register(path: "/other.Single/Only") { _ in }
        return router
    }

    func testRegisteredPaths() {
        let r = router()
        XCTAssertNotNil(r.handler(for: "/test.v1.Echo/Echo"))
        XCTAssertNotNil(r.handler(for: "/test.v1.Echo/Reverse"))
        XCTAssertNotNil(r.handler(for: "/other.Single/Only"))
        XCTAssertEqual(r.serviceNames, ["other.Single", "test.v1.Echo"])
    }

    func testLookupIsExact() {
        let r = router()
        for path in ["/test.v1.Echo/echo", "test.v1.Echo/Echo", "/test.v1.Echo/Echo/", "/Test.v1.Echo/Echo", "/test.v1.Echo", ""] {
            XCTAssertNil(r.handler(for: path), path)
        }
    }

    func testTheRegisteredHandlerRuns() {
        let r = GRPCRouter()
        let ran = NSLock()
        nonisolated(unsafe) var paths: [String] = []
        r.register(path: "/a.B/C") { call in ran.withLock { paths.append(call.path) } }
        let call = GRPCServerCall(path: "/a.B/C", request: [], metadata: [], deadline: nil, completion: DiscardingCompletion())
        r.handler(for: "/a.B/C")?(call)
        XCTAssertEqual(ran.withLock { paths }, ["/a.B/C"])
    }

    func testMissReasonUnknownMethod() {
        XCTAssertEqual(router().missReason(for: "/test.v1.Echo/Nope"), "method Nope is not implemented by service test.v1.Echo")
        XCTAssertEqual(router().missReason(for: "/other.Single/Other"), "method Other is not implemented by service other.Single")
    }

    func testMissReasonUnknownService() {
        XCTAssertEqual(router().missReason(for: "/test.v2.Echo/Echo"), "unknown service test.v2.Echo")
    }

    func testMissReasonMalformedPath() {
        for path in ["", "/", "Echo", "test.v1.Echo/Echo", "/test.v1.Echo", "/a/b/c", "//Echo", "/test.v1.Echo/"] {
            XCTAssertEqual(router().missReason(for: path), "malformed method path \(path) (expected /package.Service/Method)", path)
        }
    }

    func testLaterRegistrationReplaces() {
        let r = GRPCRouter()
        nonisolated(unsafe) var which = ""
        r.register(path: "/a.B/C") { _ in which = "first" }
        r.register(path: "/a.B/C") { _ in which = "second" }
        r.handler(for: "/a.B/C")?(GRPCServerCall(path: "/a.B/C", request: [], metadata: [], deadline: nil, completion: DiscardingCompletion()))
        XCTAssertEqual(which, "second")
    }
}

/// Completion for calls made outside a server.
final class DiscardingCompletion: GRPCCallCompletion, @unchecked Sendable {
    func complete(_ call: GRPCServerCall, _ result: GRPCCallResult) {}
}
