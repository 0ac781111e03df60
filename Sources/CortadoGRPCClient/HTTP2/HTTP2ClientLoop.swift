import CLibUV
import CNGHTTP2
import CortadoGRPCCore
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The monotonic clock every latency is measured with (libuv's `uv_hrtime`, CLOCK_MONOTONIC).
@inline(__always) public func monotonicNanos() -> UInt64 { uv_hrtime() }

/// How one call ended.
public struct GRPCCallOutcome {
    public var token: Int
    /// When the call's latency starts: the actual send time (closed loop) or the intended
    /// send time (open loop).
    public var startNanos: UInt64
    public var endNanos: UInt64
    public var status: Int32
    public var message: String?
    /// The response body (gRPC-framed), only when the call asked to collect it.
    public var body: [UInt8]
    /// Response headers and trailers other than pseudo-headers, `grpc-status` and
    /// `grpc-message`, only when the call asked to collect its answer.
    public var metadata: [(name: String, value: String)] = []
}

/// One libuv loop on the calling thread with many HTTP/2 client connections to one
/// address. Everything runs on that thread: callbacks, timers, completions.
public final class HTTP2ClientLoop {
    public let loop: UnsafeMutablePointer<uv_loop_t>
    public let address: sockaddr_storage
    public let authority: String
    /// Headers every call carries besides the protocol's own (`authorization`, say).
    public var metadata: [(String, String)] = []
    public private(set) var connections: [HTTP2ClientConnection] = []
    /// Called once per finished call (success or failure), on the loop thread.
    public var onComplete: ((inout GRPCCallOutcome) -> Void)?
    private let prepare: UnsafeMutablePointer<uv_prepare_t>
    var dirty: [HTTP2ClientConnection] = []
    /// Calls that failed before reaching the wire; delivered from the prepare callback so a
    /// closed-loop caller never recurses.
    var deferredFailures: [GRPCCallOutcome] = []
    /// Where every connection's socket reads land (consumed before the next read).
    let readBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 256 * 1024, alignment: 16)

    public init(host: String, port: Int) throws {
        signal(SIGPIPE, SIG_IGN)
        address = try Self.resolve(host: host, port: port)
        authority = host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        loop = UnsafeMutablePointer<uv_loop_t>.allocate(capacity: 1)
        uv_loop_init(loop)
        prepare = UnsafeMutablePointer<uv_prepare_t>.allocate(capacity: 1)
        uv_prepare_init(loop, prepare)
        prepare.pointee.data = Unmanaged.passUnretained(self).toOpaque()
        uv_prepare_start(prepare) { handle in
            let me = Unmanaged<HTTP2ClientLoop>.fromOpaque(handle!.pointee.data).takeUnretainedValue()
            me.flushAll()
        }
        uv_unref(UnsafeMutableRawPointer(prepare).assumingMemoryBound(to: uv_handle_t.self))
    }

    static func resolve(host: String, port: Int) throws -> sockaddr_storage {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_family = AF_UNSPEC
        var result: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(host, String(port), &hints, &result)
        guard rc == 0, let first = result else {
            throw GRPCStatus(.unavailable, "cannot resolve \(host): \(String(cString: gai_strerror(rc)))")
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
            connections.append(HTTP2ClientConnection(owner: self, index: connections.count))
        }
        for c in connections.prefix(count) { c.ensureSession() }
    }

    public var inFlight: Int { connections.reduce(0) { $0 + $1.open } }
    public var bytesSent: UInt64 { connections.reduce(0) { $0 + $1.bytesSent } }
    public var bytesReceived: UInt64 { connections.reduce(0) { $0 + $1.bytesReceived } }
    /// GOAWAYs, reconnects, failed connects and retried calls, over every connection.
    public var connectionStats: HTTP2ConnectionStats { connections.reduce(HTTP2ConnectionStats()) { $0 + $1.stats } }

    func markDirty(_ c: HTTP2ClientConnection) {
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

    /// Fails every open call (UNAVAILABLE), closes every connection and stops reconnecting;
    /// the sockets finish closing as the loop runs on.
    public func closeConnections(reason: String = "client shutting down") {
        for c in connections { c.close(reason: reason) }
        flushAll()
    }

    /// Closes every connection and runs the loop until their handles are closed.
    public func shutdown() {
        closeConnections()
        var spins = 0
        while uv_run(loop, UV_RUN_NOWAIT) != 0 && spins < 1000 { spins += 1; usleep(1000) }
    }

    /// Frees the libuv loop and the read buffer, once nothing runs on it any more (every
    /// connection closed and `run()` returned, say). The loop cannot be used afterwards.
    public func release() {
        guard !released else { return }
        released = true
        uv_prepare_stop(prepare)
        uv_close(UnsafeMutableRawPointer(prepare).assumingMemoryBound(to: uv_handle_t.self)) { h in
            UnsafeMutableRawPointer(h!).assumingMemoryBound(to: uv_prepare_t.self).deallocate()
        }
        var spins = 0
        while uv_run(loop, UV_RUN_NOWAIT) != 0 && spins < 1000 { spins += 1; usleep(1000) }
        // A handle still open (never expected here) keeps the loop: leaked rather than freed under it.
        if uv_loop_close(loop) == 0 { loop.deallocate() }
        readBuffer.deallocate()
    }
    private var released = false

    // MARK: one blocking call (a load tester's metadata call before its run, say)

    /// Sends one call and runs the loop until it ends (or `timeout` seconds pass).
    public func unary(_ template: HTTP2RequestTemplate, timeout: Double = 10) -> GRPCCallOutcome {
        ensureConnections(1)
        var result: GRPCCallOutcome?
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
            let me = Unmanaged<HTTP2ClientLoop>.fromOpaque(t!.pointee.data).takeUnretainedValue()
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
