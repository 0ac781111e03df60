import CortadoCore
import Foundation

/// Finds plugin libraries, opens them with libuv's `uv_dlopen`, checks their ABI version and
/// registers every class they provide with `MLCustomRegistry` (Plugins/include/cortado_plugin.h).
///
/// A directory that does not exist, a library that will not open, has no entry point, refuses
/// to load or speaks another ABI version, and a class name provided twice are *problems*: each
/// is returned (for the caller to log), noted in the registry (so a model that needs a class
/// that did not arrive says why) and skipped; the other plugins still load. Libraries are never
/// closed: one holding Swift code cannot be unloaded safely.
public final class CortadoPluginHost: @unchecked Sendable {
    public static let shared = CortadoPluginHost(registry: .shared)

    /// The environment variable listing plugin directories, colon-separated.
    public static let environmentVariable = "CORTADO_PLUGIN_PATH"

    /// Where plugins' log lines go (level 0 debug … 3 error, plugin name, text); nil: stderr as
    /// `cortado: plugin NAME [LEVEL]: TEXT`. Set before plugins load (the server's JSON logs).
    nonisolated(unsafe) public static var logSink: (@Sendable (Int, String, String) -> Void)?

    /// A plugin that loaded.
    public struct Loaded: Sendable {
        public let name: String
        public let path: String
        public let classes: [String]
    }

    private let registry: MLCustomRegistry
    private let lock = NSLock()
    private var searched: Set<String> = []
    private var opened: [String: PluginLibrary] = [:]
    private var plugins: [Loaded] = []

    /// The plugins loaded so far, in load order.
    public var loaded: [Loaded] {
        lock.lock(); defer { lock.unlock() }
        return plugins
    }

    public init(registry: MLCustomRegistry) {
        self.registry = registry
    }

    /// The directories to search: `directories` (from `--plugins`) first, then the entries of
    /// CORTADO_PLUGIN_PATH; empty entries are dropped.
    public static func searchPath(directories: [String], environment: [String: String] = ProcessInfo.processInfo.environment) -> [String] {
        let fromEnvironment = (environment[environmentVariable] ?? "").split(separator: ":").map(String.init)
        return (directories + fromEnvironment).filter { !$0.isEmpty }
    }

    /// Loads every `*.so` in each directory (sorted by name; a directory searched before is
    /// skipped). Returns the problems met, one line each.
    @discardableResult
    public func load(directories: [String]) -> [String] {
        lock.lock(); defer { lock.unlock() }
        var problems: [String] = []
        func problem(_ message: String) {
            problems.append(message)
            registry.note(problem: message)
        }
        for directory in directories {
            let url = URL(fileURLWithPath: directory).standardizedFileURL.resolvingSymlinksInPath()
            guard !searched.contains(url.path) else { continue }
            searched.insert(url.path)
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: url.path, isDirectory: &isDirectory), isDirectory.boolValue else {
                problem("plugin directory \(directory) does not exist")
                continue
            }
            let files: [String]
            do {
                files = try FileManager.default.contentsOfDirectory(atPath: url.path).filter { $0.hasSuffix(".so") }.sorted()
            } catch {
                problem("plugin directory \(directory) cannot be read: \(error.localizedDescription)")
                continue
            }
            for file in files {
                let path = url.appendingPathComponent(file).path
                do {
                    try load(library: path, problem: problem)
                } catch let error as PluginLibrary.LoadError {
                    problem(error.message)
                } catch {
                    problem("plugin \(path): \(error)")
                }
            }
        }
        return problems
    }

    private func load(library path: String, problem: (String) -> Void) throws {
        let real = URL(fileURLWithPath: path).resolvingSymlinksInPath().path
        guard opened[real] == nil else { return }
        let library = try PluginLibrary(path: path)
        opened[real] = library
        var classes: [String] = []
        for index in 0..<library.classCount {
            let factory: PluginClassFactory
            do {
                factory = try PluginClassFactory(library: library, index: index)
            } catch let error as PluginLibrary.LoadError {
                problem(error.message)
                continue
            }
            if let other = registry.factory(for: factory.className) {
                problem("\(factory.provider): class '\(factory.className)' is already provided by \(other.provider); the first one is used")
                continue
            }
            registry.register(className: factory.className, factory: factory)
            classes.append(factory.className)
        }
        plugins.append(Loaded(name: library.name, path: path, classes: classes))
    }
}
