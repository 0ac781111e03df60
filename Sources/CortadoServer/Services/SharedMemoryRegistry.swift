import CortadoGRPC
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// System shared-memory regions registered by clients (POSIX `shm_open` keys). Inputs are
/// read from them and outputs written into them in place: Core ML's output backings, over RPC.
public final class SharedMemoryRegistry: @unchecked Sendable {
    public struct Region: @unchecked Sendable {
        public let name: String
        public let key: String
        public let offset: Int
        public let byteSize: Int
        let base: UnsafeMutableRawPointer  // the mapping (covers offset + byteSize)
        let mappedSize: Int
        /// The region's bytes (after its offset).
        var bytes: UnsafeMutableRawPointer { base.advanced(by: offset) }
    }

    private let lock = NSLock()
    private var regions: [String: Region] = [:]

    public init() {}

    deinit {
        for region in regions.values { munmap(region.base, region.mappedSize) }
    }

    public func register(name: String, key: String, offset: Int, byteSize: Int) throws(GRPCStatus) {
        guard !name.isEmpty else { throw GRPCStatus(.invalidArgument, "a shared-memory region needs a name") }
        guard offset >= 0, byteSize > 0 else { throw GRPCStatus(.invalidArgument, "shared-memory region '\(name)': offset \(offset) and byte size \(byteSize) must be ≥ 0 and > 0") }
        if lock.withLock({ regions[name] != nil }) {
            throw GRPCStatus(.alreadyExists, "shared-memory region '\(name)' is already registered")
        }
        let fd = shm_open(key, O_RDWR, 0)
        guard fd >= 0 else {
            throw GRPCStatus(.invalidArgument, "shared-memory region '\(name)': cannot open key '\(key)': \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, Int(info.st_size) >= offset + byteSize else {
            throw GRPCStatus(.invalidArgument, "shared-memory region '\(name)': key '\(key)' holds \(info.st_size) bytes, fewer than offset \(offset) + size \(byteSize)")
        }
        let size = offset + byteSize
        guard let base = mmap(nil, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0), base != MAP_FAILED else {
            throw GRPCStatus(.internal, "shared-memory region '\(name)': mmap failed: \(String(cString: strerror(errno)))")
        }
        let region = Region(name: name, key: key, offset: offset, byteSize: byteSize, base: base, mappedSize: size)
        let clash = lock.withLock { () -> Bool in
            if regions[name] != nil { return true }
            regions[name] = region
            return false
        }
        if clash {
            munmap(base, size)
            throw GRPCStatus(.alreadyExists, "shared-memory region '\(name)' is already registered")
        }
    }

    /// Unregisters one region, or all when `name` is empty.
    public func unregister(name: String) {
        let removed = lock.withLock { () -> [Region] in
            if name.isEmpty {
                defer { regions.removeAll() }
                return Array(regions.values)
            }
            return regions.removeValue(forKey: name).map { [$0] } ?? []
        }
        // Calls in flight may still hold a region's pointer for a moment; the mapping is
        // small next to the process, so unmapping waits for nothing and leaks nothing:
        // unregister happens after the client has its results.
        for region in removed { munmap(region.base, region.mappedSize) }
    }

    public func status(name: String) throws(GRPCStatus) -> [Region] {
        let all = lock.withLock { regions }
        if name.isEmpty { return all.values.sorted { $0.name < $1.name } }
        guard let r = all[name] else { throw GRPCStatus(.notFound, "no shared-memory region named '\(name)'") }
        return [r]
    }

    /// A byte range inside a region, checked.
    func span(region name: String, offset: Int, byteSize: Int) throws(GRPCStatus) -> UnsafeMutableRawBufferPointer {
        guard let region = lock.withLock({ regions[name] }) else {
            throw GRPCStatus(.invalidArgument, "no shared-memory region named '\(name)' is registered")
        }
        guard offset >= 0, byteSize >= 0, offset + byteSize <= region.byteSize else {
            throw GRPCStatus(.invalidArgument, "shared-memory region '\(name)' holds \(region.byteSize) bytes; offset \(offset) + size \(byteSize) does not fit")
        }
        return UnsafeMutableRawBufferPointer(start: region.bytes.advanced(by: offset), count: byteSize)
    }
}
