import CortadoCore
import Foundation

/// The models a server serves, from a repository folder laid out as
/// `DIR/<name>/<version>/model.mlmodel` or `model.mlpackage/` (or a bare `DIR/<name>.mlmodel`, version 1). A version
/// folder may hold `model.cortado` (compiled), `model.cortado-enc` (encrypted) or
/// `model.mlmodel`, preferred in that order (`MLModelForm.repositoryFileNames`); any file is
/// read by its first bytes, whatever its extension.
/// The highest numeric version of each name serves. Loading, reloading and unloading at run
/// time swap the entry atomically; calls already admitted keep their `ServedModel`.
public final class ModelRepository: @unchecked Sendable {
    public enum State: String, Sendable { case ready = "READY", unavailable = "UNAVAILABLE", loading = "LOADING" }

    public struct IndexEntry: Sendable {
        public var name: String
        public var version: String
        public var state: State
        public var reason: String
    }

    /// Where a model's file is on disk.
    public struct Location: Sendable {
        public var name: String
        public var version: String
        public var url: URL
    }

    public let root: URL?
    public let pool: WorkerPool
    public var defaultLimits: ModelScheduler.Limits
    public var limitsByModel: [String: ModelScheduler.Limits] = [:]
    private let loader: @Sendable (URL, String) throws -> MLModel
    private let lock = NSLock()
    private var served: [String: ServedModel] = [:]
    private var failures: [String: String] = [:]
    private var loading: Set<String> = []
    /// The key for encrypted models sent as bytes (files use the loader's).
    public var modelKey: MLModelKey?
    /// Threads one prediction may use, for models sent as bytes (files use the loader's).
    public var modelThreads = 0
    /// Called after a model is loaded, replaced or unloaded (for logs and metrics).
    public var onChange: (@Sendable (String, String) -> Void)?

    public init(root: URL?, pool: WorkerPool, defaultLimits: ModelScheduler.Limits = .init(),
                loader: (@Sendable (URL, String) throws -> MLModel)? = nil) {
        self.root = root
        self.pool = pool
        self.defaultLimits = defaultLimits
        self.loader = loader ?? { url, name in try ModelRepository.loadFile(url, name: name, repository: root) }
    }

    /// Loads a model file under the name it is served by, so errors name the model a client
    /// asked for ("model 'iris'") rather than the file ("model.mlmodel" → "model").
    /// Any form (specification, compiled, encrypted with `key` or `CORTADO_MODEL_KEY`). Linked
    /// models resolve relative to the file's folder, then to `repository`; models linking the
    /// same file share one copy of it (`MLModelCache`).
    public static func loadFile(_ url: URL, name: String, repository: URL? = nil, key: MLModelKey? = nil, threads: Int = 0) throws -> MLModel {
        var configuration = MLModelConfiguration()
        configuration.threadCount = threads
        configuration.modelDirectory = url.deletingLastPathComponent()
        configuration.linkedModelSearchDirectories = repository.map { [$0] } ?? []
        configuration.modelKey = key
        return try MLModel(file: MLModelFile.open(contentsOf: url, name: name, key: key), configuration: configuration, name: name)
    }

    /// A bare model file in the repository's folder: `<name>.<ext>` for the three forms.
    static func bareModelName(_ entry: String) -> String? {
        for ext in MLModelForm.fileExtensions where entry.hasSuffix("." + ext) && entry.count > ext.count + 1 {
            return String(entry.dropLast(ext.count + 1))
        }
        return nil
    }

    // MARK: discovery

    /// Every model the folder holds, each with its highest version.
    public func discover() -> [Location] {
        guard let root else { return [] }
        let fm = FileManager.default
        guard let names = try? fm.contentsOfDirectory(atPath: root.path) else { return [] }
        var found: [Location] = []
        for entry in names.sorted() where !entry.hasPrefix(".") {
            let url = root.appendingPathComponent(entry)
            if let name = Self.bareModelName(entry) {
                if !found.contains(where: { $0.name == name }) { found.append(Location(name: name, version: "1", url: url)) }
                continue
            }
            if let location = Self.latestVersion(name: entry, folder: url) { found.append(location) }
        }
        return found
    }

    static func latestVersion(name: String, folder: URL) -> Location? {
        let fm = FileManager.default
        var isDir: ObjCBool = false
        guard fm.fileExists(atPath: folder.path, isDirectory: &isDir), isDir.boolValue,
              let versions = try? fm.contentsOfDirectory(atPath: folder.path) else { return nil }
        // Folder names as written ("007" too), highest number first.
        let numbered = versions.compactMap { entry in Int(entry).map { (number: $0, folder: entry) } }.sorted { $0.number > $1.number }
        for (version, versionFolder) in numbered {
            let dir = folder.appendingPathComponent(versionFolder)
            for file in MLModelForm.repositoryFileNames {
                let preferred = dir.appendingPathComponent(file)
                if fm.fileExists(atPath: preferred.path) { return Location(name: name, version: String(version), url: preferred) }
            }
            if let any = (try? fm.contentsOfDirectory(atPath: dir.path))?.sorted().first(where: { bareModelName($0) != nil }) {
                return Location(name: name, version: String(version), url: dir.appendingPathComponent(any))
            }
        }
        return nil
    }

    func location(of name: String) -> Location? {
        guard let root, !name.isEmpty, !name.contains("/"), name != "..", name != "." else { return nil }
        if let folder = Self.latestVersion(name: name, folder: root.appendingPathComponent(name)) { return folder }
        for ext in MLModelForm.fileExtensions {
            let bare = root.appendingPathComponent(name + "." + ext)
            if FileManager.default.fileExists(atPath: bare.path) { return Location(name: name, version: "1", url: bare) }
        }
        return nil
    }

    // MARK: load and unload

    /// Loads every model in the folder; returns the failures (name, message).
    @discardableResult
    public func loadAll() -> [(String, String)] {
        var failed: [(String, String)] = []
        for location in discover() {
            do { _ = try load(location) } catch { failed.append((location.name, "\(error)")) }
        }
        return failed
    }

    /// Loads (or reloads) the highest version of `name` from the folder.
    @discardableResult
    public func load(_ name: String) throws -> ServedModel {
        guard let location = location(of: name) else {
            throw ServeStatus(.notFound, root == nil ? "no model repository is configured" : "no model named '\(name)' in the repository \(root!.path) (expected \(name)/<version>/model.mlmodel, model.mlpackage or \(name).mlmodel, or compiled or encrypted: model.cortado, model.cortado-enc)")
        }
        return try load(location)
    }

    /// Loads a model file under a name, replacing what served under that name.
    @discardableResult
    public func load(_ location: Location) throws -> ServedModel {
        try install(name: location.name, version: location.version, source: location.url, from: location.url.path) {
            try loader(location.url, location.name)
        }
    }

    /// Loads a model from bytes in memory (a client's `LoadRequest.model_data`: any form,
    /// encrypted ones with `modelKey`), served under `name`, replacing what served there.
    @discardableResult
    public func load(data: Data, name: String, version: String) throws -> ServedModel {
        guard !name.isEmpty, !name.contains("/"), name != ".", name != ".." else {
            throw ServeStatus(.invalidArgument, "a model sent with its bytes needs a name without '/' (got '\(name)')")
        }
        var configuration = MLModelConfiguration()
        configuration.modelDirectory = root
        configuration.linkedModelSearchDirectories = root.map { [$0] } ?? []
        configuration.modelKey = modelKey
        configuration.threadCount = modelThreads
        return try install(name: name, version: version.isEmpty ? "1" : version, source: nil, from: "\(data.count) bytes sent with the request") {
            try MLModel(data: data, name: name, configuration: configuration)
        }
    }

    private func install(name: String, version: String, source: URL?, from: String, _ build: () throws -> MLModel) throws -> ServedModel {
        lock.withLock { _ = loading.insert(name) }
        defer { lock.withLock { _ = loading.remove(name) } }
        let start = DispatchTime.now().uptimeNanoseconds
        let model: MLModel
        do {
            model = try build()
        } catch {
            let message = "\(error)"
            lock.withLock { failures[name] = message }
            throw ServeStatus(.invalidArgument, "failed to load model '\(name)' version \(version) from \(from): \(message)")
        }
        let seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
        let limits = lock.withLock { limitsByModel[name] ?? defaultLimits }
        let entry = ServedModel(name: name, version: version, model: model,
                                scheduler: ModelScheduler(limits: limits, pool: pool), source: source, loadSeconds: seconds)
        let replaced = lock.withLock { () -> Bool in
            failures[name] = nil
            return served.updateValue(entry, forKey: name) != nil
        }
        onChange?(name, replaced ? "reloaded version \(version)" : "loaded version \(version)")
        return entry
    }

    /// Adds an already loaded model (tests, in-process use).
    public func add(_ model: MLModel, name: String, version: String = "1") -> ServedModel {
        let limits = lock.withLock { limitsByModel[name] ?? defaultLimits }
        let entry = ServedModel(name: name, version: version, model: model, scheduler: ModelScheduler(limits: limits, pool: pool), source: nil, loadSeconds: 0)
        lock.withLock { served[name] = entry }
        onChange?(name, "loaded version \(version)")
        return entry
    }

    /// Stops serving `name`; calls in flight finish on it.
    public func unload(_ name: String) throws {
        let removed = lock.withLock { served.removeValue(forKey: name) }
        guard removed != nil else { throw ServeStatus(.notFound, "model '\(name)' is not loaded") }
        onChange?(name, "unloaded")
    }

    // MARK: lookup

    /// The serving entry for a request; NOT_FOUND names what is there instead.
    public func model(_ name: String, version: String = "") throws(ServeStatus) -> ServedModel {
        let found = lock.withLock { served[name] }
        guard let found else {
            let failure = lock.withLock { failures[name] }
            if let failure { throw ServeStatus(.unavailable, "model '\(name)' failed to load: \(failure)") }
            let names = lock.withLock { served.keys.sorted() }
            throw ServeStatus(.notFound, "no model named '\(name)' is loaded" + (names.isEmpty ? "" : " (loaded: \(names.prefix(20).joined(separator: ", ")))"))
        }
        guard version.isEmpty || version == found.version else {
            throw ServeStatus(.notFound, "model '\(name)' has no version \(version) loaded (serving version \(found.version))")
        }
        return found
    }

    public var loaded: [ServedModel] { lock.withLock { served.values.sorted { $0.name < $1.name } } }

    /// Loaded models and models on disk that are not loaded, with their state.
    public func index(readyOnly: Bool = false) -> [IndexEntry] {
        var entries: [String: IndexEntry] = [:]
        if !readyOnly {
            for location in discover() {
                let reason = lock.withLock { failures[location.name] } ?? "not loaded"
                entries[location.name] = IndexEntry(name: location.name, version: location.version, state: .unavailable, reason: reason)
            }
        }
        lock.withLock {
            for name in loading { entries[name] = IndexEntry(name: name, version: entries[name]?.version ?? "", state: .loading, reason: "") }
            for (name, model) in served { entries[name] = IndexEntry(name: name, version: model.version, state: .ready, reason: "") }
        }
        return entries.values.sorted { $0.name < $1.name }
    }
}
