import CortadoClient
import Foundation
import XCTest
#if canImport(Glibc)
import Glibc
#endif

/// `CortadoClient` over HTTP/2 against a real `cortado serve` (the debug binary next to this
/// test bundle, or `CORTADO_BIN`) serving examples/repository on a port the OS picks; the
/// server is stopped by its PID. The same checks as in process.
final class CortadoServeTests: XCTestCase {
    // Set once in the class's setUp, read by its tests.
    nonisolated(unsafe) private static var server: Process?
    nonisolated(unsafe) private static var port = 0
    nonisolated(unsafe) private static var log: URL?

    /// The `cortado` executable SwiftPM built beside this test bundle.
    static var binary: String {
        if let path = ProcessInfo.processInfo.environment["CORTADO_BIN"] { return path }
        // The test bundle is a file (`….xctest`) or, on Linux, the build folder holding it.
        let bundle = Bundle(for: CortadoServeTests.self).bundleURL
        let folder = bundle.pathExtension == "xctest" ? bundle.deletingLastPathComponent() : bundle
        return folder.appendingPathComponent("cortado").path
    }

    override class func setUp() {
        super.setUp()
        guard FileManager.default.isExecutableFile(atPath: binary) else { return }
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("cortado-client-serve-\(getpid()).log")
        FileManager.default.createFile(atPath: log.path, contents: nil)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = ["serve", "--models", CortadoClientTests.repository.path, "--host", "127.0.0.1", "--port", "0",
                             "--http-port", "0", "--metrics-port=-1"]
        process.standardOutput = try? FileHandle(forWritingTo: log)
        process.standardError = process.standardOutput
        do { try process.run() } catch { return }
        server = process
        self.log = log
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline && process.isRunning {
            let text = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
            if text.contains("listening"), let range = text.range(of: #"grpc_port=(\d+)"#, options: .regularExpression) {
                port = Int(text[range].dropFirst("grpc_port=".count)) ?? 0
                break
            }
            usleep(50_000)
        }
    }

    override class func tearDown() {
        if let server, server.isRunning {
            kill(server.processIdentifier, SIGTERM)
            let deadline = Date().addingTimeInterval(20)
            while server.isRunning && Date() < deadline { usleep(50_000) }
            if server.isRunning { kill(server.processIdentifier, SIGKILL) }
            server.waitUntilExit()
        }
        if let log { try? FileManager.default.removeItem(at: log) }
        super.tearDown()
    }

    private func client() throws -> CortadoClient {
        XCTAssertTrue(FileManager.default.isExecutableFile(atPath: Self.binary), "\(Self.binary) is missing: swift build first")
        guard Self.port > 0 else {
            let text = Self.log.flatMap { try? String(contentsOf: $0, encoding: .utf8) } ?? ""
            throw CortadoClientError(code: .unavailable, message: "cortado serve did not start:\n\(text)")
        }
        return try CortadoClient(host: "127.0.0.1", port: Self.port)
    }

    func testNativePredictGivesWhatTheModelGives() async throws {
        let client = try client()
        defer { client.close() }
        try await CortadoClientTests.checkNativePredict(client)
    }

    func testOpenInferenceProtocolGivesWhatTheModelGives() async throws {
        let client = try client()
        defer { client.close() }
        try await CortadoClientTests.checkInfer(client)
    }

    func testReadinessMetadataAndErrors() async throws {
        let client = try client()
        defer { client.close() }
        try await CortadoClientTests.checkReadinessAndMetadata(client)
        try await CortadoClientTests.checkErrors(client)
    }

    /// Many tasks share one client: every call crosses to the transport's loop thread and
    /// comes back with its own row's answer.
    func testConcurrentCallsFromManyTasks() async throws {
        let client = try client()
        defer { client.close() }
        let model = try CortadoClientTests.localModel()
        let rows = (0..<64).map { CortadoClientTests.flowers[$0 % CortadoClientTests.flowers.count] }
        let truth = try rows.map {
            try model.prediction(from: MLDictionaryFeatureProvider(dictionary: CortadoClientTests.features($0)))
                .featureValue(for: "species")?.stringValue
        }
        let answers = try await withThrowingTaskGroup(of: (Int, String?).self) { group in
            for (index, row) in rows.enumerated() {
                group.addTask {
                    let outputs = try await client.predict(model: "iris", inputs: CortadoClientTests.features(row), outputs: ["species"])
                    return (index, outputs["species"]?.stringValue)
                }
            }
            var answers = [String?](repeating: nil, count: rows.count)
            for try await (index, species) in group { answers[index] = species }
            return answers
        }
        XCTAssertEqual(answers, truth)
    }

    /// Nothing listens: the call fails UNAVAILABLE at once (a gRPC client's fail-fast default).
    func testNoServerIsUnavailable() async throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        close(fd)
        let client = try CortadoClient(host: "127.0.0.1", port: Int(UInt16(bigEndian: address.sin_port)))
        defer { client.close() }
        do {
            _ = try await client.serverLive()
            XCTFail("a call to a closed port answered")
        } catch {
            XCTAssertEqual(error.code, .unavailable, error.description)
        }
    }
}
