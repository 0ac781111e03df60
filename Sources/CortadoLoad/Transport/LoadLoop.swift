import CLibUV
import CNGHTTP2
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The monotonic clock every latency is measured with (libuv's `uv_hrtime`, CLOCK_MONOTONIC).
@inline(__always) public func monotonicNanos() -> UInt64 { uv_hrtime() }

/// gRPC status codes by number, for reports.
public enum GRPCStatusName {
    public static let names = ["OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
                               "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
                               "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
                               "UNAUTHENTICATED"]
    public static func name(_ code: Int32) -> String {
        code >= 0 && Int(code) < names.count ? names[Int(code)] : "STATUS_\(code)"
    }
    public static let ok: Int32 = 0, cancelled: Int32 = 1, unknown: Int32 = 2, deadlineExceeded: Int32 = 4
    public static let resourceExhausted: Int32 = 8, unimplemented: Int32 = 12, internalError: Int32 = 13
    public static let unavailable: Int32 = 14, permissionDenied: Int32 = 7, unauthenticated: Int32 = 16

    /// grpc-message is percent-encoded on the wire.
    public static func percentDecode(_ s: String) -> String {
        guard s.contains("%") else { return s }
        var out: [UInt8] = []
        let bytes = Array(s.utf8)
        var i = 0
        while i < bytes.count {
            if bytes[i] == UInt8(ascii: "%"), i + 2 < bytes.count,
               let v = UInt8(String(decoding: bytes[i + 1...i + 2], as: UTF8.self), radix: 16) {
                out.append(v); i += 3
            } else { out.append(bytes[i]); i += 1 }
        }
        return String(decoding: out, as: UTF8.self)
    }
}

/// A unary call's request, ready to send many times: the HTTP/2 header block (built once,
/// kept alive for the run) and the length-prefixed gRPC message.
public final class RequestTemplate {
    public let path: String
    public let body: UnsafeMutableRawBufferPointer
    let headerStorage: UnsafeMutableRawBufferPointer
    let nva: UnsafeMutablePointer<nghttp2_nv>
    let nvaCount: Int

    /// `message`: the serialized protobuf; `timeout`: sent as `grpc-timeout` (nil: none);
    /// `metadata`: more headers for every call (e.g. `authorization`).
    public init(path: String, authority: String, message: [UInt8], timeout: Double?, metadata: [(String, String)] = []) {
        self.path = path
        var framed = [UInt8](repeating: 0, count: 5)
        let n = UInt32(message.count)
        framed[1] = UInt8(n >> 24); framed[2] = UInt8((n >> 16) & 0xff); framed[3] = UInt8((n >> 8) & 0xff); framed[4] = UInt8(n & 0xff)
        framed += message
        let body = UnsafeMutableRawBufferPointer.allocate(byteCount: max(framed.count, 1), alignment: 16)
        framed.withUnsafeBytes { body.copyMemory(from: $0) }
        self.body = body
        var headers = [(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", authority),
                       ("content-type", "application/grpc"), ("te", "trailers"), ("user-agent", "cortado-load")]
        if let timeout {
            // At most 8 digits: pick the unit so the value fits.
            let ms = max(1, Int((timeout * 1000).rounded(.up)))
            headers.append(("grpc-timeout", ms < 100_000_000 ? "\(ms)m" : "\(min(99_999_999, Int(timeout)))S"))
        }
        headers += metadata
        let total = headers.reduce(0) { $0 + $1.0.utf8.count + $1.1.utf8.count }
        headerStorage = UnsafeMutableRawBufferPointer.allocate(byteCount: total, alignment: 1)
        nva = UnsafeMutablePointer<nghttp2_nv>.allocate(capacity: headers.count)
        nvaCount = headers.count
        var offset = 0
        let base = headerStorage.baseAddress!.assumingMemoryBound(to: UInt8.self)
        for (i, (name, value)) in headers.enumerated() {
            let nameAt = base + offset
            for b in name.utf8 { base[offset] = b; offset += 1 }
            let valueAt = base + offset
            for b in value.utf8 { base[offset] = b; offset += 1 }
            nva[i] = nghttp2_nv(name: nameAt, value: valueAt, namelen: name.utf8.count, valuelen: value.utf8.count,
                                flags: UInt8(NGHTTP2_NV_FLAG_NO_COPY_NAME.rawValue | NGHTTP2_NV_FLAG_NO_COPY_VALUE.rawValue))
        }
    }

    deinit {
        body.deallocate()
        headerStorage.deallocate()
        nva.deallocate()
    }

}

/// How one call ended.
public struct CallOutcome {
    public var token: Int
    /// When the call's latency starts: the actual send time (closed loop) or the intended
    /// send time (open loop).
    public var startNanos: UInt64
    public var endNanos: UInt64
    public var status: Int32
    public var message: String?
    /// The response body (gRPC-framed), only when the call asked to collect it.
    public var body: [UInt8]
}

/// One libuv loop on the calling thread with many HTTP/2 client connections to one
/// address. Everything runs on that thread: callbacks, timers, completions.
public final class LoadLoop {
    public let loop: UnsafeMutablePointer<uv_loop_t>
    public let address: sockaddr_storage
    public let authority: String
    /// Headers every call carries besides the protocol's own (`--token`'s `authorization`).
    public var metadata: [(String, String)] = []
    public private(set) var connections: [ClientConnection] = []
    /// Called once per finished call (success or failure), on the loop thread.
    public var onComplete: ((inout CallOutcome) -> Void)?
    private let prepare: UnsafeMutablePointer<uv_prepare_t>
    private let sigint: UnsafeMutablePointer<uv_signal_t>
    /// Set by the first SIGINT (Ctrl-C): a run stops offering load, lets its calls finish and
    /// reports; a second SIGINT exits at once.
    public private(set) var interrupted = false
    var dirty: [ClientConnection] = []
    /// Calls that failed before reaching the wire; delivered from the prepare callback so a
    /// closed-loop caller never recurses.
    var deferredFailures: [CallOutcome] = []
    /// Where every connection's socket reads land (consumed before the next read).
    let readBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 256 * 1024, alignment: 16)

    public init(host: String, port: Int) throws {
        signal(SIGPIPE, SIG_IGN)
        address = try Self.resolve(host: host, port: port)
        authority = host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        loop = UnsafeMutablePointer<uv_loop_t>.allocate(capacity: 1)
        uv_loop_init(loop)
        prepare = UnsafeMutablePointer<uv_prepare_t>.allocate(capacity: 1)
        sigint = UnsafeMutablePointer<uv_signal_t>.allocate(capacity: 1)
        uv_prepare_init(loop, prepare)
        prepare.pointee.data = Unmanaged.passUnretained(self).toOpaque()
        uv_prepare_start(prepare) { handle in
            let me = Unmanaged<LoadLoop>.fromOpaque(handle!.pointee.data).takeUnretainedValue()
            me.flushAll()
        }
        uv_unref(UnsafeMutableRawPointer(prepare).assumingMemoryBound(to: uv_handle_t.self))
        uv_signal_init(loop, sigint)
        sigint.pointee.data = Unmanaged.passUnretained(self).toOpaque()
        uv_signal_start(sigint, { handle, _ in
            let me = Unmanaged<LoadLoop>.fromOpaque(handle!.pointee.data).takeUnretainedValue()
            if me.interrupted { exit(130) }
            me.interrupted = true
            FileHandle.standardError.write("\ncortado-load: interrupted; finishing the calls in flight (Ctrl-C again to quit)\n".data(using: .utf8)!)
        }, SIGINT)
        uv_unref(UnsafeMutableRawPointer(sigint).assumingMemoryBound(to: uv_handle_t.self))
    }

    static func resolve(host: String, port: Int) throws -> sockaddr_storage {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_family = AF_UNSPEC
        var result: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(host, String(port), &hints, &result)
        guard rc == 0, let first = result else {
            throw LoadError("cannot resolve \(host): \(String(cString: gai_strerror(rc)))")
        }
        defer { freeaddrinfo(result) }
        var storage = sockaddr_storage()
        withUnsafeMutableBytes(of: &storage) { dst in
            dst.copyMemory(from: UnsafeRawBufferPointer(start: first.pointee.ai_addr, count: Int(first.pointee.ai_addrlen)))
        }
        return storage
    }

    /// Opens `count` connections (more if already open: no-op).
    public func ensureConnections(_ count: Int) {
        while connections.count < count {
            connections.append(ClientConnection(owner: self, index: connections.count))
        }
        for c in connections.prefix(count) { c.ensureSession() }
    }

    public var inFlight: Int { connections.reduce(0) { $0 + $1.open } }
    public var bytesSent: UInt64 { connections.reduce(0) { $0 + $1.bytesSent } }
    public var bytesReceived: UInt64 { connections.reduce(0) { $0 + $1.bytesReceived } }
    /// GOAWAYs, reconnects, failed connects and retried calls, over every connection.
    public var connectionStats: ConnectionStats { connections.reduce(ConnectionStats()) { $0 + $1.stats } }

    func markDirty(_ c: ClientConnection) {
        if !c.dirty { c.dirty = true; dirty.append(c) }
    }

    func flushAll() {
        var rounds = 0
        repeat {
            rounds += 1
            if !deferredFailures.isEmpty {
                let failures = deferredFailures
                deferredFailures.removeAll(keepingCapacity: true)
                for var f in failures { onComplete?(&f) }
            }
            while !dirty.isEmpty {
                let list = dirty
                dirty.removeAll(keepingCapacity: true)
                for c in list { c.dirty = false; c.flush() }
            }
        } while !deferredFailures.isEmpty && rounds < 64
    }

    /// Fails every call whose deadline passed (checked by a timer the runner owns).
    public func expire(now: UInt64) {
        for c in connections { c.expire(now: now) }
    }

    /// Runs the loop once (blocking for I/O unless `nowait`).
    @discardableResult public func runOnce(nowait: Bool = false) -> Bool {
        flushAll()
        return uv_run(loop, nowait ? UV_RUN_NOWAIT : UV_RUN_ONCE) != 0
    }

    public func run() { flushAll(); uv_run(loop, UV_RUN_DEFAULT) }
    public func stop() { uv_stop(loop) }

    /// Closes every connection and runs the loop until their handles are closed.
    public func shutdown() {
        for c in connections { c.close(reason: "client shutting down") }
        flushAll()
        var spins = 0
        while uv_run(loop, UV_RUN_NOWAIT) != 0 && spins < 1000 { spins += 1; usleep(1000) }
    }

    // MARK: one blocking call, for metadata before the load starts

    /// Sends one call and runs the loop until it ends (or `timeout` seconds pass).
    public func unary(_ template: RequestTemplate, timeout: Double = 10) -> CallOutcome {
        ensureConnections(1)
        var result: CallOutcome?
        let previous = onComplete
        onComplete = { outcome in if outcome.token == -42 { result = outcome } }
        defer { onComplete = previous }
        let now = monotonicNanos()
        // Fails fast: a wrong address is an error now, not a wait for the deadline.
        connections[0].start(template, token: -42, startNanos: now, deadline: now + UInt64(timeout * 1e9), collect: true,
                             waitForReady: false)
        let timer = UnsafeMutablePointer<uv_timer_t>.allocate(capacity: 1)
        uv_timer_init(loop, timer)
        timer.pointee.data = Unmanaged.passUnretained(self).toOpaque()
        uv_timer_start(timer, { t in
            let me = Unmanaged<LoadLoop>.fromOpaque(t!.pointee.data).takeUnretainedValue()
            me.expire(now: monotonicNanos())
        }, 50, 50)
        while result == nil { runOnce() }
        uv_timer_stop(timer)
        uv_close(UnsafeMutableRawPointer(timer).assumingMemoryBound(to: uv_handle_t.self)) { h in
            UnsafeMutableRawPointer(h!).assumingMemoryBound(to: uv_timer_t.self).deallocate()
        }
        runOnce(nowait: true)
        return result!
    }
}

public struct LoadError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
