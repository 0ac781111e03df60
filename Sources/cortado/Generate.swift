import ArgumentParser
import CortadoModels
import Foundation

/// `cortado generate MODEL --swift`: the typed Swift wrapper of a model, as Xcode generates.
struct Generate: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Write a typed Swift interface for a model, like the classes Xcode generates.",
        discussion: """
        With --swift, writes <Name>Input (an MLFeatureProvider with a property per input), \
        <Name>Output (a typed property per output) and <Name> (init(contentsOf:configuration:), \
        async load(contentsOf:configuration:), prediction(input:), prediction(<inputs>), \
        predictions(inputs:)), with the model's and the features' descriptions as doc comments. \
        Types: int64 Int64, double Double, string String, multi-array MLMultiArray, image \
        MLImage (Cortado's image; Linux has no CVPixelBuffer), dictionary [String: Double] or \
        [Int64: Double], sequence [Int64] or [String]; optional inputs are optionals. Feature \
        names that are not Swift identifiers are spelt with `_` for other characters. The file \
        imports Cortado: build it in a package that depends on the Cortado library product. \
        Only the model's description is read (the model is not compiled).
        """
    )

    @Argument(help: "The model: .mlmodel file, .mlpackage folder, or a compiled or encrypted form.")
    var model: String

    @Flag(name: .long, help: "Write Swift (the only language so far; required).")
    var swift = false

    @Option(name: .long, help: "The file to write (default: stdout).")
    var output: String?

    @Option(name: .long, help: "The model class's name (default: the model file's name, as a Swift type name).")
    var name: String?

    @OptionGroup var keyOptions: ModelKeyOptions

    func validate() throws {
        guard swift else { throw ValidationError("say which language to write: --swift") }
        if let name, SwiftWrapperWriter.typeName(name) != name {
            throw ValidationError("--name \(name) is not a Swift type name (try \(SwiftWrapperWriter.typeName(name)))")
        }
    }

    func run() throws {
        let url = URL(fileURLWithPath: model)
        let source: String
        do {
            let configuration = keyOptions.configuration()
            let file = try MLModelFile.open(contentsOf: url, key: configuration.modelKey)
            let description = try MLModelDescription(file.specification.description_p, function: configuration.functionName)
            let typeName = name ?? SwiftWrapperWriter.typeName(file.name)
            source = try SwiftWrapperWriter(name: typeName, description: description, source: url.lastPathComponent).swiftSource()
        } catch {
            fail("\(error)")
        }
        if let output {
            do { try source.write(toFile: output, atomically: true, encoding: .utf8) } catch {
                fail("cannot write \(output): \(error.localizedDescription)")
            }
        } else {
            print(source, terminator: "")
        }
    }
}
