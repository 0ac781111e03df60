import CortadoGRPC
import CortadoGRPCClient
import Foundation
import Synchronization
import XCTest

/// Calls made through the shared client layers (`HTTP2ClientTransport`, as `CortadoClient`
/// and `cortado-load` make them). `HTTP2TestClient` stays for what those layers never send
/// or hide: malformed bodies and headers, header blocks as they came, GOAWAY and the close.
enum SharedClientCall {
    static func transport(port: Int) throws -> HTTP2ClientTransport {
        try HTTP2ClientTransport(host: "127.0.0.1", port: port)
    }

    /// Starts the calls together (they share the transport's one connection) and waits for
    /// every answer, at most `wait` seconds.
    static func calls(_ transport: HTTP2ClientTransport, _ requests: [(path: String, message: [UInt8])],
                      metadata: [(name: String, value: String)] = [], timeout: Duration? = .seconds(10),
                      wait: Double = 20) -> [GRPCClientResponse] {
        let answers = Mutex([GRPCClientResponse?](repeating: nil, count: requests.count))
        let group = DispatchGroup()
        for (index, request) in requests.enumerated() {
            group.enter()
            transport.unary(path: request.path, message: request.message, metadata: metadata, timeout: timeout) { response in
                answers.withLock { $0[index] = response }
                group.leave()
            }
        }
        XCTAssertEqual(group.wait(timeout: .now() + wait), .success, "calls did not complete")
        return answers.withLock { $0 }.map { $0 ?? GRPCClientResponse(status: GRPCStatus(.unknown, "no answer"), message: nil) }
    }

    static func call(_ transport: HTTP2ClientTransport, _ path: String, _ message: [UInt8] = [],
                     metadata: [(name: String, value: String)] = [], timeout: Duration? = .seconds(10)) -> GRPCClientResponse {
        calls(transport, [(path, message)], metadata: metadata, timeout: timeout)[0]
    }
}
