import ArgumentParser
import CortadoEncryption
import CortadoModels
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// `cortado encrypt MODEL OUT`: writes an encrypted model; `--generate-key F` makes a key.
struct Encrypt: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Encrypt a model (AES-256-GCM) so that it is not readable at rest.",
        discussion: """
        MODEL may be a .mlmodel, an .mlpackage folder (its spec and weights are sealed together, \
        as a compiled model) or a compiled model (from `cortado compile`); OUT (magic \
        CORTADOE, name it model.cortado-enc in a served repository) loads in predict, inspect, \
        report, compile and serve given the same key through --key-file or CORTADO_MODEL_KEY. \
        A wrong key, a missing key or altered bytes fail the load with a message naming the \
        model. --generate-key FILE writes a new random key (64 hex digits, mode 0600) and, with \
        MODEL and OUT, encrypts with it.
        """
    )

    @Argument(help: "The model to encrypt (.mlmodel, .mlpackage folder or compiled).")
    var model: String?

    @Argument(help: "The encrypted file to write (e.g. model.cortado-enc).")
    var out: String?

    @OptionGroup var keyOptions: ModelKeyOptions

    @Option(name: .long, help: ArgumentHelp("Write a new random key to this file (refuses to overwrite one).", valueName: "file"))
    var generateKey: String?

    func validate() throws {
        guard (model == nil) == (out == nil) else { throw ValidationError("give both MODEL and OUT") }
        guard model != nil || generateKey != nil else { throw ValidationError("give MODEL and OUT, or --generate-key FILE") }
        guard generateKey == nil || keyOptions.keyFile == nil else { throw ValidationError("--generate-key and --key-file exclude each other") }
    }

    func run() throws {
        var key: MLModelKey?
        if let generateKey {
            let new = CortadoEncryption.generateKey()
            let fd = open(generateKey, O_WRONLY | O_CREAT | O_EXCL, 0o600)
            guard fd >= 0 else { fail("cannot create the key file \(generateKey): \(String(cString: strerror(errno)))") }
            let text = Array((new.hex + "\n").utf8)
            let written = write(fd, text, text.count)
            close(fd)
            guard written == text.count else { fail("cannot write the key file \(generateKey)") }
            FileHandle.standardError.write(Data("cortado: wrote a new key to \(generateKey)\n".utf8))
            key = new
        }
        guard let model, let out else { return }
        do {
            key = try key ?? keyOptions.key() ?? MLModelKey.fromEnvironment()
        } catch {
            fail("\(error)")
        }
        guard let key else { fail("no key: use --key-file FILE, --generate-key FILE or set \(MLModelKey.environmentVariable)") }
        var data: Data
        if MLModelPackage.isPackage(URL(fileURLWithPath: model)) {
            // A package is a folder: its spec and weight files travel as one compiled container.
            do {
                data = try MLModelCompiler.compiledContainer(try MLModelFile.open(contentsOf: URL(fileURLWithPath: model)))
            } catch { fail("\(error)") }
        } else {
            do { data = try Data(contentsOf: URL(fileURLWithPath: model)) } catch { fail("cannot read \(model): \(error.localizedDescription)") }
        }
        let name = URL(fileURLWithPath: model).deletingPathExtension().lastPathComponent
        do {
            guard MLModelForm.recognise(data.prefix(8)) != .encrypted else { fail("\(model) is already encrypted") }
            // Only models are encrypted: the bytes must open as a specification or a compiled model.
            let file = try MLModelFile.open(data: data, name: name)
            let sealed = try CortadoEncryption.encrypt(data, key: key)
            try sealed.write(to: URL(fileURLWithPath: out), options: .atomic)
            print("wrote \(out): \(sealed.count) bytes (\(file.formDescription) inside, AES-256-GCM)")
        } catch {
            fail("\(error)")
        }
    }
}
