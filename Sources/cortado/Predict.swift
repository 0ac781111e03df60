import ArgumentParser
import CortadoModels
import Foundation

struct Predict: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Predict outputs for JSON lines of inputs.",
        discussion: """
        Reads one JSON object of input features per line (blank lines are skipped) and writes \
        one JSON object of outputs per line on stdout, in the same order. A bad row (malformed \
        JSON, a missing, unknown or mistyped feature) is reported on stderr with its line number \
        and the run exits with status 1.
        """
    )

    @Argument(help: "The .mlmodel file (or .mlpackage folder).")
    var model: String

    @Option(name: .shortAndLong, help: "JSON-lines file of inputs; '-' reads stdin.")
    var input: String = "-"

    @Option(name: .shortAndLong, help: "Write outputs here instead of stdout.")
    var output: String?

    @Flag(help: "After a bad row, write {\"error\": …} for it and go on; still exit 1 at the end.")
    var keepGoing = false

    func run() throws {
        let loaded: MLModel
        do { loaded = try loadModel(model) } catch { fail("\(error)") }
        let description = loaded.modelDescription
        let outputNames = description.outputs.map(\.name)

        let data: Data
        if input == "-" {
            data = FileHandle.standardInput.readDataToEndOfFile()
        } else {
            do { data = try Data(contentsOf: URL(fileURLWithPath: input)) } catch { fail("cannot read \(input): \(error.localizedDescription)") }
        }
        var sink = OutputSink(path: output)
        var failures = 0
        var lineNumber = 0
        for rawLine in data.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false) {
            lineNumber += 1
            if rawLine.allSatisfy({ $0 == 32 || $0 == 9 || $0 == 13 }) { continue }
            do {
                guard let object = try MLJSONParser.parse(rawLine) as? [String: Any] else {
                    throw MLModelError(.parse, "expected a JSON object of input features")
                }
                let features = try MLFeatureJSON.decodeInputs(object, description: description)
                let result = try loaded.prediction(from: features)
                sink.write(MLFeatureJSON.encode(result, names: outputNames))
            } catch {
                failures += 1
                let message = "\(input == "-" ? "stdin" : input) line \(lineNumber): \(error)"
                FileHandle.standardError.write(Data(("cortado: " + message + "\n").utf8))
                guard keepGoing else { sink.flush(); throw ExitCode(1) }
                var escaped = ""
                MLFeatureJSON.encode(MLFeatureValue(string: message), into: &escaped)
                sink.write("{\"error\":\(escaped)}")
            }
        }
        sink.flush()
        if failures > 0 { throw ExitCode(1) }
    }
}

/// Buffers output lines and writes them in large chunks.
struct OutputSink {
    private var buffer = ""
    private let handle: FileHandle

    init(path: String?) {
        if let path {
            _ = FileManager.default.createFile(atPath: path, contents: nil)
            guard let h = FileHandle(forWritingAtPath: path) else { fail("cannot write \(path)") }
            handle = h
        } else {
            handle = FileHandle.standardOutput
        }
    }

    mutating func write(_ line: String) {
        buffer += line
        buffer += "\n"
        if buffer.utf8.count > 1 << 16 { flush() }
    }

    mutating func flush() {
        handle.write(Data(buffer.utf8))
        buffer = ""
    }
}
