import CortadoCore
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Where variant heads (`MLVariantHead`) live on disk: `<folder>/<model>/variants/<variant>.head`,
/// the folder being the model repository unless `--variant-store` moves it (a repository
/// mounted read-only). The repository's loader and poller never look there: they read only
/// numeric version folders. A head is written to a temporary file in the same folder, flushed
/// and renamed over the old one, so a reader sees the old head or the new one, never part of
/// one; temporary files do not end in `.head` and are never listed.
public struct VariantStore: Sendable {
    public static let folderName = "variants"
    public static let fileExtension = "head"

    public let folder: URL

    public init(folder: URL) { self.folder = folder }

    public func url(model: String, variant: String) -> URL {
        folder.appendingPathComponent(model).appendingPathComponent(Self.folderName)
            .appendingPathComponent(variant + "." + Self.fileExtension)
    }

    /// The variant names stored for `model`: a listing of its folder, no file is read.
    public func names(model: String) -> [String] {
        let dir = folder.appendingPathComponent(model).appendingPathComponent(Self.folderName)
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: dir.path) else { return [] }
        let suffix = "." + Self.fileExtension
        return entries.compactMap { entry in
            guard entry.hasSuffix(suffix) else { return nil }
            let name = String(entry.dropLast(suffix.count))
            return VariantRegistry.nameProblem(name) == nil ? name : nil
        }
    }

    public func exists(model: String, variant: String) -> Bool {
        FileManager.default.fileExists(atPath: url(model: model, variant: variant).path)
    }

    public func read(model: String, variant: String) throws -> Data {
        try Data(contentsOf: url(model: model, variant: variant))
    }

    /// Writes a head atomically (temporary file, fsync, rename), making the folders it needs.
    /// Throws a message naming the path and the reason.
    public func write(_ data: Data, model: String, variant: String) throws(VariantStoreError) {
        let target = url(model: model, variant: variant)
        let dir = target.deletingLastPathComponent()
        try Self.makeDirectories(dir.path)
        let temporary = dir.appendingPathComponent("\(variant).head.tmp-\(getpid())-\(UInt32.random(in: 0 ... .max))")
        let fd = open(temporary.path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw VariantStoreError("cannot write \(temporary.path): \(String(cString: strerror(errno)))") }
        var problem: String?
        data.withUnsafeBytes { (raw: UnsafeRawBufferPointer) in
            var offset = 0
            while offset < raw.count {
                let n = Glibc.write(fd, raw.baseAddress! + offset, raw.count - offset)
                if n < 0 {
                    if errno == EINTR { continue }
                    problem = String(cString: strerror(errno))
                    return
                }
                offset += n
            }
        }
        if problem == nil, fsync(fd) != 0 { problem = String(cString: strerror(errno)) }
        close(fd)
        if problem == nil, rename(temporary.path, target.path) != 0 { problem = String(cString: strerror(errno)) }
        if let problem {
            unlink(temporary.path)
            throw VariantStoreError("cannot write \(target.path): \(problem)")
        }
    }

    /// Removes a stored head; true when there was one.
    @discardableResult
    public func remove(model: String, variant: String) throws(VariantStoreError) -> Bool {
        let path = url(model: model, variant: variant).path
        if unlink(path) == 0 { return true }
        if errno == ENOENT || errno == ENOTDIR { return false }
        throw VariantStoreError("cannot remove \(path): \(String(cString: strerror(errno)))")
    }

    /// `mkdir -p`, with the reason a folder could not be made (errno's words: "Read-only
    /// file system", "Not a directory", "Permission denied").
    private static func makeDirectories(_ path: String) throws(VariantStoreError) {
        var prefix = path.hasPrefix("/") ? "" : "."
        for part in path.split(separator: "/") {
            prefix += "/" + part
            if mkdir(prefix, 0o755) != 0, errno != EEXIST {
                throw VariantStoreError("cannot make \(prefix): \(String(cString: strerror(errno)))")
            }
        }
        var info = stat()
        guard stat(path, &info) == 0, (info.st_mode & mode_t(S_IFMT)) == mode_t(S_IFDIR) else {
            throw VariantStoreError("cannot make \(path): \(String(cString: strerror(ENOTDIR)))")
        }
    }
}

public struct VariantStoreError: Error, CustomStringConvertible, Sendable {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}
