import Foundation
import Logging

/// `--model-control poll`: looks at the repository folder every interval and brings the
/// served models in line with it. A model whose file (or version) changed, or that is new,
/// is loaded and swapped in atomically (`ModelRepository.load`: calls already admitted
/// finish on the old version); a model whose files are gone is unloaded. A file that fails
/// to load leaves the version that served before serving, and is tried again only once it
/// changes again (a half-written file fails once, then loads when the writer is done).
///
/// Polls run on the queue that runs explicit Load and Unload calls, so the two never race;
/// a poll reloads only what changed since the last one, so an explicit Unload of a model
/// whose files did not change stays unloaded.
public final class RepositoryPoller: @unchecked Sendable {
    /// What a poll compares: where the served file is and what it looks like.
    struct Fingerprint: Equatable {
        var version: String
        var path: String
        var modified: Double
        var size: Int
    }

    private let repository: ModelRepository
    private let queue: DispatchQueue
    private let interval: Double
    private let logger: Logger
    private var timer: DispatchSourceTimer?
    /// Touched on `queue` only.
    private var seen: [String: Fingerprint] = [:]

    public init(repository: ModelRepository, queue: DispatchQueue, interval: Double, logger: Logger) {
        self.repository = repository
        self.queue = queue
        self.interval = interval
        self.logger = logger
    }

    /// Remembers the folder as it is now (the models just loaded from it) and starts polling.
    public func start() {
        queue.sync { seen = Self.snapshot(repository) }
        let timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now() + interval, repeating: interval)
        timer.setEventHandler { [weak self] in self?.poll() }
        self.timer = timer
        timer.resume()
    }

    public func stop() {
        timer?.cancel()
        timer = nil
    }

    /// One look at the folder; returns what changed as (name, what) pairs. On `queue`.
    @discardableResult
    func poll() -> [(String, String)] {
        let now = Self.snapshot(repository)
        var changes: [(String, String)] = []
        for (name, print) in now.sorted(by: { $0.key < $1.key }) where seen[name] != print {
            seen[name] = print
            do {
                try repository.load(ModelRepository.Location(name: name, version: print.version, url: URL(fileURLWithPath: print.path)))
                changes.append((name, "loaded"))
            } catch {
                logger.error("model changed on disk but failed to load; the version loaded before keeps serving",
                             metadata: ["model": "\(name)", "error": "\(error)"])
                changes.append((name, "failed"))
            }
        }
        for name in seen.keys.sorted() where now[name] == nil {
            seen[name] = nil
            // Only models that came from the folder: a model sent as bytes has no files to lose.
            if let served = try? repository.model(name), served.source != nil {
                try? repository.unload(name)
                changes.append((name, "unloaded"))
            }
        }
        return changes
    }

    static func snapshot(_ repository: ModelRepository) -> [String: Fingerprint] {
        var prints: [String: Fingerprint] = [:]
        for location in repository.discover() {
            let (modified, size) = stamp(location.url)
            prints[location.name] = Fingerprint(version: location.version, path: location.url.path, modified: modified, size: size)
        }
        return prints
    }

    /// The newest modification time and the total size of a file, or of every file in a
    /// folder (an ML Program package is a folder whose weights may change alone).
    static func stamp(_ url: URL) -> (Double, Int) {
        let fm = FileManager.default
        func attributes(_ path: String) -> (Double, Int) {
            guard let a = try? fm.attributesOfItem(atPath: path) else { return (0, 0) }
            return ((a[.modificationDate] as? Date)?.timeIntervalSince1970 ?? 0, (a[.size] as? NSNumber)?.intValue ?? 0)
        }
        var (modified, size) = attributes(url.path)
        var isDir: ObjCBool = false
        if fm.fileExists(atPath: url.path, isDirectory: &isDir), isDir.boolValue, let files = fm.enumerator(atPath: url.path) {
            size = 0
            for case let file as String in files {
                let (m, s) = attributes(url.appendingPathComponent(file).path)
                modified = max(modified, m)
                size += s
            }
        }
        return (modified, size)
    }
}
