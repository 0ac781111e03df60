@testable import CortadoServer
import Foundation
import Logging
import XCTest

/// `--log-format json` lines: each parses as one JSON object (JSONSerialization is the
/// reader), strings keep every character, numbers and booleans stay typed, the fixed fields
/// come first and are not overwritten by metadata of the same name.
final class JSONLogHandlerTests: XCTestCase {
    private func parse(_ line: String) throws -> [String: Any] {
        XCTAssertTrue(line.hasSuffix("}\n"))
        XCTAssertEqual(line.filter { $0 == "\n" }.count, 1, "one line: \(line)")
        return try XCTUnwrap(JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
    }

    func testFieldsAndEscaping() throws {
        let awkward = "quote \" backslash \\ newline \n tab \t bell \u{7} é 🙂"
        let line = JSONLogHandler.line(time: Date(timeIntervalSince1970: 1_790_000_000.25), level: .warning, label: "cortado",
                                       message: awkward, metadata: [
                                           "text": .string(awkward),
                                           "latency_ms": .stringConvertible(1.5),
                                           "count": .stringConvertible(42),
                                           "on": .stringConvertible(true),
                                           "list": .array([.string("a"), .stringConvertible(2)]),
                                           "nested": .dictionary(["k": .string("v")]),
                                           "level": .string("not the level"),
                                       ])
        XCTAssertTrue(line.hasPrefix("{\"time\":\"2026-09-21T"), line)
        let object = try parse(line)
        XCTAssertEqual(object["time"] as? String, "2026-09-21T14:13:20.250Z")
        XCTAssertEqual(object["level"] as? String, "warning")
        XCTAssertEqual(object["label"] as? String, "cortado")
        XCTAssertEqual(object["message"] as? String, awkward)
        XCTAssertEqual(object["text"] as? String, awkward)
        XCTAssertEqual((object["latency_ms"] as? NSNumber)?.doubleValue, 1.5)
        XCTAssertEqual((object["count"] as? NSNumber)?.intValue, 42)
        XCTAssertEqual(object["on"] as? Bool, true)
        let list = try XCTUnwrap(object["list"] as? [Any])
        XCTAssertEqual(list.count, 2)
        XCTAssertEqual(list.first as? String, "a")
        XCTAssertEqual((list.last as? NSNumber)?.intValue, 2)
        XCTAssertEqual(object["nested"] as? [String: String], ["k": "v"])
    }

    func testHandlerMergesMetadataAndWritesOneLinePerEvent() throws {
        let lines = LinesBox()
        var handler = JSONLogHandler(label: "test", write: { lines.append($0) })
        handler.logLevel = .debug
        handler[metadataKey: "pod"] = "a"
        let logger = Logger(label: "test", factory: { _ in handler })
        logger.info("one", metadata: ["model": "m"])
        logger.debug("two")
        let written = lines.all
        XCTAssertEqual(written.count, 2)
        let first = try parse(written[0]), second = try parse(written[1])
        XCTAssertEqual(first["message"] as? String, "one")
        XCTAssertEqual(first["pod"] as? String, "a")
        XCTAssertEqual(first["model"] as? String, "m")
        XCTAssertEqual(second["level"] as? String, "debug")
    }
}

private final class LinesBox: @unchecked Sendable {
    private let lock = NSLock()
    private var lines: [String] = []
    func append(_ line: String) { lock.withLock { lines.append(line) } }
    var all: [String] { lock.withLock { lines } }
}
