import CortadoGRPC
@testable import CortadoServer
import XCTest

/// What a client may change: model control off by default, shared-memory keys under a prefix.
final class ServerPolicyTests: XCTestCase {
    func testModelControlAndSharedMemoryAreOffByDefault() {
        let policy = ServerPolicy()
        XCTAssertEqual(policy.deniedModelControl("Load")?.code, .permissionDenied)
        XCTAssertTrue(policy.deniedModelControl("Load")?.message.contains("--model-control") ?? false)
        XCTAssertEqual(policy.deniedSharedMemory()?.code, .permissionDenied)
        XCTAssertTrue(policy.deniedSharedMemory()?.message.contains("--allow-shared-memory") ?? false)
        var open = ServerPolicy()
        open.modelControl = .explicit
        open.allowSharedMemory = true
        XCTAssertNil(open.deniedModelControl("Load"))
        XCTAssertNil(open.deniedSharedMemory())
        open.modelControl = .poll
        XCTAssertNil(open.deniedModelControl("Unload"))
    }

    func testSharedMemoryKeysStayUnderThePrefix() {
        var policy = ServerPolicy()
        XCTAssertNil(policy.keyProblem("/cortado_in"))
        XCTAssertNil(policy.keyProblem("/cortado"))
        XCTAssertNotNil(policy.keyProblem("/other"))
        XCTAssertNotNil(policy.keyProblem(""))
        XCTAssertNotNil(policy.keyProblem("/cortado..x"))
        XCTAssertNotNil(policy.keyProblem("/cortado/../x"))
        XCTAssertNotNil(policy.keyProblem("/cortado_a/b"))
        policy.sharedMemoryPrefix = "/"
        XCTAssertNil(policy.keyProblem("/input0_data"))
        XCTAssertNotNil(policy.keyProblem("/a/b"))
    }
}
