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
        and the run exits with status 1. Rows are predicted in batches of up to --batch rows \
        (a neural network runs a batch as one pass along its batch axis); a row that fails \
        inside a batch is retried alone, so errors still name their line. The rows of a stateful \
        model (an ML Program with state) run in order through one state, as one session.
        """
    )

    @Argument(help: "The model: .mlmodel file (or .mlpackage folder), compiled or encrypted model.")
    var model: String

    @OptionGroup var keyOptions: ModelKeyOptions

    @Option(name: .shortAndLong, help: "JSON-lines file of inputs; '-' reads stdin.")
    var input: String = "-"

    @Option(name: .shortAndLong, help: "Write outputs here instead of stdout.")
    var output: String?

    @Flag(help: "After a bad row, write {\"error\": …} for it and go on; still exit 1 at the end.")
    var keepGoing = false

    @Option(help: "Rows predicted together (1: one at a time).")
    var batch: Int = 64

    @OptionGroup var plugins: PluginOptions

    func run() throws {
        let loaded: MLModel
        plugins.load()
        do { loaded = try loadModel(model, configuration: keyOptions.configuration()) } catch { fail("\(error)") }
        let description = loaded.modelDescription
        let outputNames = description.outputs.map(\.name)

        guard batch >= 1 else { fail("--batch must be at least 1") }
        // A stateful model's rows run in order through one state (one session, as an app's
        // MLState would carry them).
        var state: MLState?
        if loaded.isStateful {
            do { state = try loaded.makeState() } catch { fail("\(error)") }
        }
        let rows = JSONRowsInput(path: input)
        var sink = OutputSink(path: output)
        var failures = 0
        var pending: [(line: Int, features: MLFeatureProvider)] = []

        func report(_ line: Int, _ error: Error) throws {
            failures += 1
            let message = "\(rows.name) line \(line): \(error)"
            FileHandle.standardError.write(Data(("cortado: " + message + "\n").utf8))
            guard keepGoing else { sink.flush(); throw ExitCode(1) }
            var escaped = ""
            MLFeatureJSON.encode(MLFeatureValue(string: message), into: &escaped)
            sink.write("{\"error\":\(escaped)}")
        }
        // Predicts the pending rows as one batch; on failure, row by row to find the bad one.
        func flushPending() throws {
            defer { pending.removeAll(keepingCapacity: true) }
            if state == nil, pending.count > 1, let results = try? loaded.predictions(fromBatch: MLArrayBatchProvider(array: pending.map(\.features))) {
                for i in 0..<results.count { sink.write(MLFeatureJSON.encode(results.features(at: i), names: outputNames)) }
                return
            }
            for row in pending {
                do {
                    let result = try state.map { try loaded.prediction(from: row.features, using: $0) } ?? loaded.prediction(from: row.features)
                    sink.write(MLFeatureJSON.encode(result, names: outputNames))
                } catch {
                    try report(row.line, error)
                }
            }
        }

        try rows.forEachRow(description) { line, row in
            switch row {
            case .success(let features):
                pending.append((line, features))
                if pending.count >= batch { try flushPending() }
            case .failure(let error):
                try flushPending()
                try report(line, error)
            }
        }
        try flushPending()
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
