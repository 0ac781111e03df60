@testable import CortadoGRPCClient
import CortadoGRPCCore
@testable import CortadoLoad
import Foundation
import XCTest
#if canImport(Glibc)
import Glibc
#endif

/// The client's behaviour when nothing listens: connects back off instead of spinning, are
/// counted apart from calls, and calls either fail at once (the metadata call before a run)
/// or wait to their deadline (load calls). The behaviour against a draining and restarted
/// server is tested end to end in Tests/Load/test_load.py.
final class ReconnectTests: XCTestCase {
    /// A loopback port nothing listens on: bound by the kernel's choice, then closed.
    private func closedPort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        XCTAssertGreaterThanOrEqual(fd, 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        try withUnsafeMutablePointer(to: &address) { pointer in
            try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw in
                guard bind(fd, raw, length) == 0, getsockname(fd, raw, &length) == 0 else { throw LoadError("bind failed") }
            }
        }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    private func template(_ loop: HTTP2ClientLoop) -> HTTP2RequestTemplate {
        HTTP2RequestTemplate(path: "/cortado.v1.Predictor/Predict", authority: loop.authority, message: [], timeout: nil)
    }

    func testBackoffDoublesFromItsBaseUpToItsCap() {
        for n in 1...12 {
            let expected = min(HTTP2ClientConnection.backoffBase << UInt64(n - 1), HTTP2ClientConnection.backoffCap)
            for _ in 0..<20 {
                let delay = HTTP2ClientConnection.backoff(afterFailures: n)
                XCTAssertGreaterThanOrEqual(Double(delay), 0.8 * Double(expected) - 1, "after \(n) failures")
                XCTAssertLessThanOrEqual(Double(delay), 1.2 * Double(expected) + 1, "after \(n) failures")
            }
        }
        XCTAssertLessThanOrEqual(HTTP2ClientConnection.backoff(afterFailures: 10_000), UInt64(1.2 * Double(HTTP2ClientConnection.backoffCap)) + 1)
    }

    /// The call made before a run (metadata) fails at once with the connect error: a wrong
    /// address is reported, not waited for.
    func testFailFastCallFailsWithTheConnectError() throws {
        let loop = try HTTP2ClientLoop(host: "127.0.0.1", port: try closedPort())
        let outcome = loop.unary(template(loop), timeout: 30)
        XCTAssertEqual(outcome.status, GRPCStatus.Code.unavailable.number)
        XCTAssertTrue(outcome.message?.contains("connect to") == true, outcome.message ?? "")
        XCTAssertEqual(loop.connectionStats.connectFailures, 1)
        XCTAssertEqual(loop.connectionStats.reconnects, 0)
        loop.shutdown()
    }

    /// Load calls wait through failed connects until their deadline, each counted once, and
    /// the connects in between are spaced by the backoff: a handful before the deadline, not
    /// thousands.
    func testWaitingCallsExpireAfterBackedOffConnects() throws {
        let loop = try HTTP2ClientLoop(host: "127.0.0.1", port: try closedPort())
        loop.ensureConnections(1)
        let callers = 8
        var outcomes: [GRPCCallOutcome] = []
        loop.onComplete = { outcomes.append($0) }
        let now = monotonicNanos()
        let request = template(loop)
        let wait: UInt64 = 6 * HTTP2ClientConnection.backoffBase
        for token in 0..<callers {
            loop.connections[0].start(request, token: token, startNanos: now, deadline: now + wait)
        }
        // The loop's timers (the backoff) run on each turn; deadlines are checked between turns.
        while outcomes.count < callers {
            loop.runOnce(nowait: true)
            loop.expire(now: monotonicNanos())
            usleep(1000)
        }
        XCTAssertEqual(outcomes.count, callers)
        XCTAssertEqual(Set(outcomes.map(\.token)), Set(0..<callers))
        for outcome in outcomes {
            XCTAssertEqual(outcome.status, GRPCStatus.Code.deadlineExceeded.number)
            XCTAssertTrue(outcome.message?.contains("no connection") == true, outcome.message ?? "")
        }
        let stats = loop.connectionStats
        XCTAssertGreaterThanOrEqual(stats.connectFailures, 1)
        // Retries are spaced by at least 0.8 × the base delay (the spread's low end), so the
        // wait holds at most wait / (0.8 × base), rounded up, attempts after the first.
        let spacing = Double(HTTP2ClientConnection.backoffBase) * 0.8
        XCTAssertLessThanOrEqual(stats.connectFailures, 1 + Int((Double(wait) / spacing).rounded(.up)))
        XCTAssertNotNil(stats.lastConnectError)
        loop.shutdown()
    }
}
