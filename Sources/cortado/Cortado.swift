import ArgumentParser
import CortadoModels
import Foundation

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
        version: "0.1.0",
        subcommands: [Inspect.self, Predict.self, Report.self, Serve.self]
    )
}

/// Loads a model for a subcommand, registering the built-in kinds first.
func loadModel(_ path: String) throws -> MLModel {
    CortadoModels.registerBuiltinKinds()
    return try MLModel(contentsOf: URL(fileURLWithPath: path))
}

/// Prints an error on stderr and exits non-zero.
func fail(_ message: String, code: Int32 = 1) -> Never {
    FileHandle.standardError.write(Data(("cortado: " + message + "\n").utf8))
    exit(code)
}
