import Foundation

/// Files that come with a model besides its spec, by their path under `@model_path` (e.g.
/// `weights/weight.bin`): an `.mlpackage`'s weight blobs, read from the package folder
/// (memory-mapped, never copied) or from sections of a compiled container that carries them.
public final class MLModelResources: @unchecked Sendable {
    /// Where the files live.
    public enum Source: Sendable {
        /// The folder `@model_path` names.
        case folder(URL)
        /// A compiled container whose sections named `@<path>` hold the files.
        case payload(MLCompiledPayload)
    }

    public let source: Source
    private let lock = NSLock()
    private var mapped: [String: MLModelBytes] = [:]

    /// The section name prefix of a resource in a compiled container (section names are short:
    /// `@weights/weight.bin`).
    public static let sectionPrefix = "@"

    public init(_ source: Source) {
        self.source = source
    }

    /// Resources held by a compiled container, or nil when it holds none.
    public static func inPayload(_ payload: MLCompiledPayload) -> MLModelResources? {
        payload.sectionNames.contains { $0.hasPrefix(sectionPrefix) } ? MLModelResources(.payload(payload)) : nil
    }

    /// The bytes of one file, mapped, and the object that keeps them alive.
    /// `path` is relative to `@model_path` (a leading `@model_path/` is dropped).
    public func file(_ path: String, model: String) throws -> (bytes: UnsafeRawBufferPointer, owner: AnyObject) {
        let relative = Self.relativePath(path)
        guard !relative.isEmpty, !relative.hasPrefix("/"), !relative.split(separator: "/").contains("..") else {
            throw MLModelError(.invalidModel, model: model, "the weight file \(path) is outside the model's folder")
        }
        switch source {
        case .payload(let payload):
            guard let section = payload.section(Self.sectionPrefix + relative) else {
                throw MLModelError(.invalidModel, model: model, "the weight file \(path) is not in the compiled model")
            }
            return (section, payload)
        case .folder(let folder):
            lock.lock(); defer { lock.unlock() }
            if let bytes = mapped[relative] {
                return (UnsafeRawBufferPointer(start: bytes.base, count: bytes.count), bytes)
            }
            let url = folder.appendingPathComponent(relative)
            guard FileManager.default.fileExists(atPath: url.path) else {
                throw MLModelError(.invalidModel, model: model, "the weight file \(url.path) does not exist")
            }
            let bytes = try MLModelBytes(mapping: url, name: model)
            mapped[relative] = bytes
            return (UnsafeRawBufferPointer(start: bytes.base, count: bytes.count), bytes)
        }
    }

    /// Every file, by relative path, for writing them into a compiled container.
    public func allFiles(model: String) throws -> [(path: String, data: Data)] {
        switch source {
        case .payload(let payload):
            return payload.sectionNames.filter { $0.hasPrefix(Self.sectionPrefix) }.map {
                (String($0.dropFirst(Self.sectionPrefix.count)), payload.data($0)!)
            }
        case .folder(let folder):
            guard let walker = FileManager.default.enumerator(at: folder, includingPropertiesForKeys: [.isRegularFileKey]) else { return [] }
            var files: [(String, Data)] = []
            let root = folder.standardizedFileURL.path
            for case let url as URL in walker {
                guard (try? url.resourceValues(forKeys: [.isRegularFileKey]).isRegularFile) == true else { continue }
                let full = url.standardizedFileURL.path
                guard full.hasPrefix(root + "/") else { continue }
                let relative = String(full.dropFirst(root.count + 1))
                if relative == "model.mlmodel" { continue }
                do { files.append((relative, try Data(contentsOf: url))) } catch {
                    throw MLModelError(.io, model: model, "cannot read \(url.path): \(error.localizedDescription)")
                }
            }
            return files.sorted { $0.0 < $1.0 }
        }
    }

    static func relativePath(_ path: String) -> String {
        var p = Substring(path)
        if p.hasPrefix("@model_path/") { p = p.dropFirst("@model_path/".count) }
        while p.hasPrefix("./") { p = p.dropFirst(2) }
        return String(p)
    }
}
