import ArgumentParser
import CortadoModels
import Foundation
import SwiftProtobuf

struct Inspect: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show a model's type, version, inputs, outputs, metadata and labels.",
        discussion: "What Xcode's model view shows. A model of a kind Cortado does not run is still described, with the reason it cannot run."
    )

    @Argument(help: "The model: .mlmodel file (or .mlpackage folder), compiled or encrypted model; not needed with --layers-supported.")
    var model: String?

    @OptionGroup var keyOptions: ModelKeyOptions

    @Flag(help: "Print the whole specification as protobuf JSON (field names as in the Core ML format) instead of the summary.")
    var specJSON = false

    @OptionGroup var plugins: PluginOptions

    @Flag(help: "Print, for each model kind that lists its parts (the neural-network layer types of the format, the ML Program operations), how many Cortado runs out of the total, then every part with its status.")
    var layersSupported = false

    @Flag(help: "Print every ML Program operation of the iOS15–iOS18 opsets with whether Cortado runs it (and why not, where it does not).")
    var opsSupported = false

    func validate() throws {
        if model == nil && !layersSupported && !opsSupported {
            throw ValidationError("Name a model file (or pass --layers-supported or --ops-supported).")
        }
    }

    func run() throws {
        if layersSupported || opsSupported {
            printCoverage(parts: layersSupported && opsSupported ? nil : (opsSupported ? "ops" : nil))
            return
        }
        guard let model else { return }
        let url = URL(fileURLWithPath: model)
        let file: MLModelFile
        do { file = try MLModelFile.open(contentsOf: url, key: keyOptions.key()) } catch { fail("\(error)") }
        let spec = file.specification
        if specJSON {
            var options = JSONEncodingOptions()
            options.preserveProtoFieldNames = false
            do { print(try spec.jsonString(options: options)) } catch { fail("cannot encode the spec as JSON: \(error)") }
            return
        }
        let typeName = MLModelSpec.typeName(spec) ?? "none"
        print("Model:         \(url.lastPathComponent)")
        print("Form:          \(file.formDescription)")
        print("Type:          \(typeName)")
        print("Spec version:  \(spec.specificationVersion)")
        let description: MLModelDescription
        do { description = try MLModelDescription(spec.description_p, function: keyOptions.function) } catch { fail("\(error)") }
        if let function = description.functionName {
            print("Functions:     \(description.functionNames.joined(separator: ", ")) (described: \(function); --function NAME picks another)")
        }
        let meta = [("Description", description.shortDescription), ("Author", description.author),
                    ("License", description.license), ("Version", description.versionString)]
        for (key, value) in meta where !value.isEmpty { print("\((key + ":").padding(toLength: 15, withPad: " ", startingAt: 0))\(value)") }
        for (key, value) in description.userDefined.sorted(by: { $0.key < $1.key }) { print("Metadata:      \(key) = \(value)") }
        print("Inputs:")
        for f in description.inputs { print("  \(f)\(f.shortDescription.isEmpty ? "" : "  — \(f.shortDescription)")") }
        print("Outputs:")
        for f in description.outputs { print("  \(f)\(f.shortDescription.isEmpty ? "" : "  — \(f.shortDescription)")") }
        if let p = description.predictedFeatureName { print("Predicted feature:        \(p)") }
        if let p = description.predictedProbabilitiesName { print("Predicted probabilities:  \(p)") }
        if !description.states.isEmpty {
            print("States:")
            for f in description.states { print("  \(f)") }
        }
        if !description.trainingInputs.isEmpty {
            print("Training inputs:")
            for f in description.trainingInputs { print("  \(f)") }
        }
        plugins.load()
        do {
            let loaded = try loadModel(model, configuration: keyOptions.configuration())
            if let labels = loaded.compiled.classLabels {
                let shown = labels.labelStrings.prefix(20).joined(separator: ", ")
                print("Class labels:  \(labels.count) (\(labels.type)): \(shown)\(labels.count > 20 ? ", …" : "")")
            }
            for line in loaded.compiled.summary { print("  \(line)") }
            print("Runs:          yes")
            print("Kernel path:   \(KernelPath.summary) (CORTADO_ISA=avx512|avx2|neon|portable forces a narrower one)")
            if spec.isUpdatable { printUpdatable(loaded) }
        } catch {
            print("Runs:          no — \(error)")
        }
    }

    /// Whether `cortado update` can train the model, and the hyperparameters it would use.
    private func printUpdatable(_ loaded: MLModel) {
        guard let updatable = loaded.compiled as? any MLUpdatableCompiledModel else {
            print("Updatable:     marked, but Cortado does not train \(loaded.specType) models")
            return
        }
        do {
            let trainer = try updatable.makeTrainer(specification: loaded.specification, description: loaded.modelDescription, overrides: [:])
            let settings = trainer.parameters.sorted { $0.key.rawValue < $1.key.rawValue }.map { "\($0.key)=\($0.value)" }
            print("Updatable:     yes (\(settings.joined(separator: ", ")))")
        } catch {
            print("Updatable:     marked, but Cortado cannot train it — \(error)")
        }
    }

    /// `parts`: only the lists of that part name ("ops"); nil: every list.
    private func printCoverage(parts: String?) {
        for coverage in MLModelKindRegistry.shared.coverages where parts == nil || coverage.partName == parts {
            print("\(coverage.title): \(coverage.runCount) of \(coverage.items.count) run")
            // Names never truncated: the column is as wide as the longest name (at least 26).
            let width = Swift.max(26, (coverage.items.map(\.name.count).max() ?? 0) + 1)
            for item in coverage.items {
                let status = item.runs ? "runs" : (item.note.isEmpty ? "not yet" : "no — \(item.note)")
                print("  \(item.name.padding(toLength: width, withPad: " ", startingAt: 0)) \(status)")
            }
        }
    }
}
