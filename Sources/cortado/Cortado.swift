import ArgumentParser
import CortadoEncryption
import CortadoModels
import CortadoServer
import Foundation
import Logging

@main
struct Cortado: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cortado",
        abstract: "Run Apple Core ML (.mlmodel) models on Linux.",
        discussion: """
        Inputs and outputs use Cortado's JSON encoding of feature values: numbers for int64 \
        and double, strings, objects for dictionaries (int64 keys as decimal strings), \
        {"shape":[…],"dataType":"DOUBLE","data":[…]} or nested arrays for multi-arrays, \
        and JSON arrays for sequences.
        """,
        // `cortado --version`; the same string the server reports in ServerMetadata.
        version: CortadoServerApp.version,
        subcommands: [Inspect.self, Predict.self, Report.self, Serve.self, Compile.self, Encrypt.self, Update.self, Generate.self]
    )

    /// Registers the built-in kinds and the decryptor once, before any subcommand runs.
    static func main() {
        CortadoModels.registerBuiltinKinds()
        CortadoEncryption.register()
        main(nil)
    }
}

/// Loads a model for a subcommand (any form, recognised by its first bytes).
func loadModel(_ path: String, configuration: MLModelConfiguration = MLModelConfiguration()) throws -> MLModel {
    try MLModel(contentsOf: URL(fileURLWithPath: path), configuration: configuration)
}

/// `--key-file`, shared by the subcommands that open models.
struct ModelKeyOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp(
        "File holding the key for encrypted models (64 hex digits or base64 of 32 bytes).",
        discussion: "Without it, the key comes from the CORTADO_MODEL_KEY environment variable (same encodings). Models that are not encrypted need no key.",
        valueName: "file"))
    var keyFile: String?

    @Option(name: .long, help: ArgumentHelp(
        "The function of a multi-function ML Program to use (MLModelConfiguration.functionName).",
        discussion: "Without it, the model's default function. `cortado inspect` lists a model's functions.",
        valueName: "name"))
    var function: String?

    /// The key to use, or nil for the environment's (read by the core when needed).
    func key() -> MLModelKey? {
        guard let keyFile else { return nil }
        do { return try MLModelKey.read(file: keyFile) } catch { fail("\(error)") }
    }

    /// A load configuration carrying the key.
    func configuration() -> MLModelConfiguration {
        var configuration = MLModelConfiguration()
        configuration.modelKey = key()
        configuration.functionName = function
        return configuration
    }
}

/// A JSON-lines input file ('-': stdin) of input rows, as `predict` and `report` read it.
struct JSONRowsInput {
    let path: String
    let data: Data

    init(path: String) {
        self.path = path
        if path == "-" {
            data = FileHandle.standardInput.readDataToEndOfFile()
        } else {
            do { data = try Data(contentsOf: URL(fileURLWithPath: path)) } catch { fail("cannot read \(path): \(error.localizedDescription)") }
        }
    }

    /// How messages name the input: the path, or "stdin".
    var name: String { path == "-" ? "stdin" : path }

    /// Calls `body` with each non-blank line's 1-based number and its decoded row, or the
    /// error that line gave (malformed JSON, a missing, unknown or mistyped feature).
    func forEachRow(_ description: MLModelDescription, _ body: (Int, Result<MLFeatureProvider, Error>) throws -> Void) rethrows {
        var lineNumber = 0
        for line in data.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false) {
            lineNumber += 1
            if line.allSatisfy({ $0 == 32 || $0 == 9 || $0 == 13 }) { continue }
            let row = Result<MLFeatureProvider, Error> {
                guard let object = try MLJSONParser.parse(line) as? [String: Any] else {
                    throw MLModelError(.parse, "expected a JSON object of input features")
                }
                return try MLFeatureJSON.decodeInputs(object, description: description)
            }
            try body(lineNumber, row)
        }
    }
}

/// Where `fail` reports when set (`cortado serve --log-format json`): a critical log line.
nonisolated(unsafe) var failureLogger: Logger?

/// Prints an error on stderr and exits non-zero.
func fail(_ message: String, code: Int32 = 1) -> Never {
    if let failureLogger {
        failureLogger.critical("\(message)")
    } else {
        FileHandle.standardError.write(Data(("cortado: " + message + "\n").utf8))
    }
    exit(code)
}
