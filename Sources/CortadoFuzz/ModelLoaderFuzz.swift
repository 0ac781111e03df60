#if DEBUG
import CortadoCore
import CortadoEncryption
import CortadoModels
import Foundation

/// The model loader, fed what a model file could hold. The first byte picks how the rest is
/// used:
/// - 0: a model file in memory, in whatever form its first bytes say (specification,
///   compiled container, encrypted — the fuzz key opens it);
/// - 1: a plain model that is encrypted with the fuzz key first: it must load exactly when the
///   plain bytes load (the encryption layer adds no outcome of its own);
/// - 2: an `.mlpackage` folder written from the rest (`files(_:)`) and opened from disk;
/// - 3: a model that, when it loads, is compiled into Cortado's container, which must load
///   again with the same inputs and outputs.
enum ModelLoaderFuzz {
    static let key = try! MLModelKey(bytes: (0..<32).map { UInt8($0) &* 7 &+ 1 })

    static let setUp: Void = {
        CortadoModels.registerBuiltinKinds()
        CortadoEncryption.register()
    }()

    /// A folder of this process's own for the packages it writes.
    static let scratch: URL = {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("cortado-fuzz-\(getpid())", isDirectory: true)
        try? FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }()

    static var configuration: MLModelConfiguration {
        var c = MLModelConfiguration()
        c.modelKey = key
        c.threadCount = 1
        return c
    }

    static func run(_ bytes: UnsafeRawBufferPointer) {
        _ = setUp
        guard let mode = bytes.first else { return }
        let rest = Data(bytes.dropFirst())
        switch mode % 4 {
        case 0:
            _ = try? MLModel(data: rest, configuration: configuration)
        case 1:
            guard MLModelForm.recognise(rest.prefix(8)) != .encrypted else { return }
            let plain = (try? MLModel(data: rest, configuration: configuration)) != nil
            guard let sealed = try? CortadoEncryption.encrypt(rest, key: key) else { fuzzFailure("encrypting \(rest.count) bytes failed") }
            let opened = (try? MLModel(data: sealed, configuration: configuration)) != nil
            if plain != opened { fuzzFailure("the plain model \(plain ? "loads" : "fails") but its encrypted form \(opened ? "loads" : "fails")") }
        case 2:
            let package = scratch.appendingPathComponent("model.mlpackage", isDirectory: true)
            try? FileManager.default.removeItem(at: package)
            defer { try? FileManager.default.removeItem(at: package) }
            for (path, data) in files(rest) {
                let url = package.appendingPathComponent(path)
                try? FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
                try? data.write(to: url)
            }
            guard FileManager.default.fileExists(atPath: package.path) else { return }
            _ = try? MLModel(contentsOf: package, configuration: configuration)
        default:
            guard let file = try? MLModelFile.open(data: rest, key: key), file.form == .specification,
                  let model = try? MLModel(file: file, configuration: configuration) else { return }
            let compiled: Data
            do { compiled = try MLModelCompiler.compiledContainer(file, configuration: configuration) } catch { return }
            do {
                let again = try MLModel(data: compiled, configuration: configuration)
                let names = { (m: MLModel) in (m.modelDescription.inputs.map(\.name), m.modelDescription.outputs.map(\.name)) }
                if names(again) != names(model) { fuzzFailure("the compiled model describes other features: \(names(again)) vs \(names(model))") }
            } catch {
                fuzzFailure("a model that loads compiled to a container that does not: \(error)")
            }
        }
    }

    /// Files for a package: records of a 1-byte path length, the path, a 2-byte little-endian
    /// data length and the data, until the bytes run out. Paths are cut down to letters,
    /// digits, `._-` and `/`, without empty, `.` or `..` components, so every file lands
    /// inside the package.
    static func files(_ bytes: Data) -> [(String, Data)] {
        var out: [(String, Data)] = []
        var i = bytes.startIndex
        while i < bytes.endIndex {
            let pathLength = Int(bytes[i])
            i += 1
            guard bytes.endIndex - i >= pathLength + 2 else { break }
            let raw = bytes[i..<(i + pathLength)]
            i += pathLength
            let length = Int(bytes[i]) | Int(bytes[i + 1]) << 8
            i += 2
            let data = bytes[i..<min(i + length, bytes.endIndex)]
            i = min(i + length, bytes.endIndex)
            let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-/".utf8)
            let path = String(decoding: raw.filter { allowed.contains($0) }, as: UTF8.self)
                .split(separator: "/").filter { $0 != "." && $0 != ".." }.prefix(6).joined(separator: "/")
            if !path.isEmpty { out.append((path, Data(data))) }
        }
        return out
    }
}
#endif
