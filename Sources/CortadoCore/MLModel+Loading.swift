import Foundation

/// The rest of CoreML.framework's loading API: compiling a model downloaded at run time, and
/// loading without blocking the caller's task.
extension MLModel {
    /// Compiles a model (`.mlmodel` file or `.mlpackage` folder, plain or encrypted with the
    /// key from `CORTADO_MODEL_KEY`) into Cortado's compiled form, written to a new folder
    /// under the temporary directory, and returns the compiled file's URL
    /// (`<temporary>/cortado-<UUID>/<name>.mlmodelc`). As on Apple platforms the caller moves
    /// it somewhere permanent to keep it; `MLModel(contentsOf:)` loads it by its first bytes.
    /// The compiled file holds the specification and, for neural networks, their weights
    /// already laid out for the kernels (as `cortado compile` writes).
    public static func compileModel(at url: URL) throws -> URL {
        let file = try MLModelFile.open(contentsOf: url)
        let data = try MLModelCompiler.compiledContainer(file)
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("cortado-\(UUID().uuidString)", isDirectory: true)
        do {
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            let out = folder.appendingPathComponent("\(file.name).mlmodelc")
            try data.write(to: out, options: .atomic)
            return out
        } catch {
            throw MLModelError(.io, model: file.name, "cannot write the compiled model under \(folder.path): \(error.localizedDescription)")
        }
    }

    /// `compileModel(at:)` without blocking the caller's task.
    public static func compileModel(at url: URL) async throws -> URL {
        try await offTask { try compileModel(at: url) }
    }

    /// Loads a model without blocking the caller's task (the load runs on a global queue).
    public static func load(contentsOf url: URL, configuration: MLModelConfiguration = MLModelConfiguration()) async throws -> MLModel {
        try await offTask { try MLModel(contentsOf: url, configuration: configuration) }
    }

    /// Runs `body` on a global dispatch queue: loading reads files and compiles, which must not
    /// hold one of the cooperative pool's few threads.
    private static func offTask<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async { continuation.resume(with: Result { try body() }) }
        }
    }
}
