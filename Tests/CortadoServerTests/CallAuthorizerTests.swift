import CortadoGRPC
@testable import CortadoServer
import Foundation
import XCTest

/// `--auth-tokens`: the token file's format, constant-time lookups, the status each refusal
/// gets, and that every method of every service says what it needs.
final class CallAuthorizerTests: XCTestCase {
    private var pool: WorkerPool!
    override func setUp() { pool = WorkerPool(threads: 1) }
    override func tearDown() { pool.stop() }

    static let infer = "infer-token-0123456789"
    static let admin = "admin-token-0123456789"
    static let file = """
    # comment line
    \(infer) infer   # trailing comment

    \(admin)\tadmin,metrics
    """

    func testParsesTokensScopesAndComments() throws {
        let tokens = try AuthTokens(parsing: Self.file)
        XCTAssertEqual(tokens.count, 2)
        XCTAssertEqual(tokens.scopes(of: Substring(Self.infer)), [.infer])
        XCTAssertEqual(tokens.scopes(of: Substring(Self.admin)), [.admin, .metrics])
        XCTAssertNil(tokens.scopes(of: "infer-token-012345678"), "a prefix is not the token")
        XCTAssertNil(tokens.scopes(of: "infer-token-01234567890"), "nor a longer one")
        XCTAssertNil(tokens.scopes(of: ""))
    }

    func testRejectsMalformedFilesNamingTheLine() {
        for (text, words) in [("x\n", "line 1"), ("\n0123456789abcdef infer,root\n", "line 2: unknown scope 'root'"),
                              ("short infer\n", "16 characters"), ("0123456789abcdef infer\n0123456789abcdef admin\n", "twice"),
                              ("# only comments\n", "no token"), ("0123456789abcdef infer, admin\n", "line 1")] {
            XCTAssertThrowsError(try AuthTokens(parsing: text, source: "t.txt")) { error in
                XCTAssertTrue("\(error)".contains(words), "\(text.debugDescription): \(error)")
            }
        }
    }

    func testConstantTimeEqual() {
        let a = Array("0123456789abcdef".utf8)
        XCTAssertTrue(AuthTokens.constantTimeEqual(a, a))
        XCTAssertFalse(AuthTokens.constantTimeEqual(Array("0123456789abcdeF".utf8), a))
        XCTAssertFalse(AuthTokens.constantTimeEqual([], a))
        // The token repeated: every byte matches the known one's (compared modulo its length),
        // and the lengths differ by 256, which a truncated XOR of the counts would miss.
        XCTAssertFalse(AuthTokens.constantTimeEqual(Array(repeating: a, count: 17).flatMap { $0 }, a))
    }

    func testStatusesForMissingUnknownAndUnscopedTokens() throws {
        let authorizer = CallAuthorizer(tokens: try AuthTokens(parsing: Self.file))
        let context = ServerContext(repository: ModelRepository(root: nil, pool: pool))
        authorizer.register(PredictorService(context: context))
        let admit = authorizer.admission()
        let predict = "/cortado.v1.Predictor/Predict", load = "/cortado.v1.Predictor/Load"
        XCTAssertEqual(admit(predict, [])?.code, .unauthenticated)
        XCTAssertEqual(admit(predict, [("authorization", "Bearer nope-nope-nope-nope")])?.code, .unauthenticated)
        XCTAssertEqual(admit(predict, [("authorization", "Basic \(Self.infer)")])?.code, .unauthenticated)
        XCTAssertNil(admit(predict, [("authorization", "Bearer \(Self.infer)")]))
        XCTAssertNil(admit(predict, [("authorization", "BEARER \(Self.infer)")]))
        XCTAssertEqual(admit(load, [("authorization", "Bearer \(Self.infer)")])?.code, .permissionDenied)
        XCTAssertNil(admit(load, [("authorization", "Bearer \(Self.admin)")]))
        XCTAssertEqual(admit(predict, [("authorization", "Bearer \(Self.admin)")])?.code, .permissionDenied)
        // A path no service registered needs admin.
        XCTAssertEqual(authorizer.access(for: "/x.Y/Z"), .scope(.admin))
        for status in [admit(predict, [("authorization", "Bearer \(Self.infer)x")]), admit(load, [("authorization", "Bearer \(Self.infer)")])] {
            XCTAssertFalse(status?.message.contains(Self.infer) ?? true, "a refusal never repeats the token")
        }
    }

    /// A method without an entry would silently need admin: every method is listed on purpose.
    func testEveryMethodOfEveryServiceDeclaresItsAccess() {
        let context = ServerContext(repository: ModelRepository(root: nil, pool: pool))
        let services: [any ScopedService] = [PredictorService(context: context), InferenceService(context: context),
                                             HealthService(context: context, services: { [] })]
        for service in services {
            let methods = Set(service.methods.keys).union(service.messageStreams.keys)
            XCTAssertEqual(methods, Set(service.access.keys), service.serviceName)
        }
        let health = HealthService(context: context, services: { [] })
        XCTAssertEqual(health.access["Check"], .open)
        let inference = InferenceService(context: context)
        XCTAssertEqual(inference.access["ModelStreamInfer"], .scope(.infer))
        XCTAssertEqual(inference.access["SystemSharedMemoryRegister"], .scope(.admin))
        XCTAssertEqual(inference.access["ServerReady"], .open)
    }
}
