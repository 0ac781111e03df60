import CLibUV
import CortadoGRPCCore
import Foundation
import Synchronization

/// `GRPCClientTransport` over HTTP/2 (h2c, prior knowledge) on libuv + nghttp2: an
/// `HTTP2ClientLoop` with one connection, run by a thread of its own. Calls may start from
/// any thread; they cross to the loop through a queue and a `uv_async_t`, and complete on
/// the loop thread. The connection reconnects after a GOAWAY or a lost socket, as
/// `HTTP2ClientConnection` does; a call fails at once (UNAVAILABLE) while no server answers.
/// The loop thread holds the transport until `close()`: close it when done.
public final class HTTP2ClientTransport: GRPCClientTransport, @unchecked Sendable {
    private struct Pending {
        var path: String
        var message: [UInt8]
        var metadata: [(name: String, value: String)]
        var timeout: Duration?
        var completion: @Sendable (GRPCClientResponse) -> Void
    }

    private struct Shared {
        var pending: [Pending] = []
        var closed = false
    }

    /// `host:port` as sent in `:authority`.
    public let authority: String
    private let shared = Mutex(Shared())
    // Loop thread only, after start.
    private let clientLoop: HTTP2ClientLoop
    private let wake = UnsafeMutablePointer<uv_async_t>.allocate(capacity: 1)
    private let deadlines = UnsafeMutablePointer<uv_timer_t>.allocate(capacity: 1)
    private var deadlinesArmed = false
    private var completions: [Int: @Sendable (GRPCClientResponse) -> Void] = [:]
    private var nextToken = 0
    private var thread: Thread?
    private let stopped = DispatchSemaphore(value: 0)

    /// Resolves `host` (throws UNAVAILABLE when it cannot) and starts the loop thread; the
    /// connection opens with the first call.
    public init(host: String, port: Int) throws {
        clientLoop = try HTTP2ClientLoop(host: host, port: port)
        authority = clientLoop.authority
        uv_async_init(clientLoop.loop, wake) { handle in
            Unmanaged<HTTP2ClientTransport>.fromOpaque(handle!.pointee.data).takeUnretainedValue().drain()
        }
        wake.pointee.data = Unmanaged.passUnretained(self).toOpaque()
        uv_timer_init(clientLoop.loop, deadlines)
        deadlines.pointee.data = Unmanaged.passUnretained(self).toOpaque()
        clientLoop.onComplete = { [unowned self] outcome in self.completed(outcome) }
        let thread = Thread { [self] in
            clientLoop.run()
            clientLoop.release()
            stopped.signal()
        }
        self.thread = thread
        thread.start()
    }

    deinit {
        close()
        wake.deallocate()
        deadlines.deallocate()
    }

    public func unary(path: String, message: [UInt8], metadata: [(name: String, value: String)], timeout: Duration?,
                      completion: @escaping @Sendable (GRPCClientResponse) -> Void) {
        let accepted = shared.withLock { state -> Bool in
            guard !state.closed else { return false }
            state.pending.append(Pending(path: path, message: message, metadata: metadata, timeout: timeout, completion: completion))
            return true
        }
        guard accepted else {
            return completion(GRPCClientResponse(status: GRPCStatus(.unavailable, "the transport is closed"), message: nil))
        }
        uv_async_send(wake)
    }

    /// Fails the open calls, closes the connection and stops the loop thread (waiting for it,
    /// unless called from it).
    public func close() {
        let first = shared.withLock { state -> Bool in
            defer { state.closed = true }
            return !state.closed
        }
        guard first else { return }
        uv_async_send(wake)
        if Thread.current !== thread { stopped.wait() }
    }

    // MARK: loop thread

    private func drain() {
        let (calls, closing) = shared.withLock { state in
            defer { state.pending.removeAll() }
            return (state.pending, state.closed)
        }
        if clientLoop.connections.isEmpty && !calls.isEmpty { clientLoop.ensureConnections(1) }
        let now = monotonicNanos()
        for call in calls {
            let token = nextToken
            nextToken += 1
            completions[token] = call.completion
            let nanos = call.timeout?.saturatingNanoseconds
            let template = HTTP2RequestTemplate(path: call.path, authority: authority, message: call.message,
                                                timeout: nanos.map { Double($0) / 1e9 },
                                                metadata: call.metadata.map { ($0.name, $0.value) })
            let deadline = nanos.map { $0 > UInt64.max - now ? UInt64.max : now + $0 } ?? UInt64.max
            clientLoop.connections[0].start(template, token: token, startNanos: now, deadline: deadline, collect: true,
                                            waitForReady: false)
        }
        if !completions.isEmpty && !deadlinesArmed {
            deadlinesArmed = true
            uv_timer_start(deadlines, { timer in
                let me = Unmanaged<HTTP2ClientTransport>.fromOpaque(timer!.pointee.data).takeUnretainedValue()
                me.clientLoop.expire(now: monotonicNanos())
            }, 5, 5)
        }
        if closing {
            clientLoop.closeConnections(reason: "the transport is closed")
            uv_close(UnsafeMutableRawPointer(wake).assumingMemoryBound(to: uv_handle_t.self), nil)
            uv_close(UnsafeMutableRawPointer(deadlines).assumingMemoryBound(to: uv_handle_t.self), nil)
        }
    }

    private func completed(_ outcome: GRPCCallOutcome) {
        guard let completion = completions.removeValue(forKey: outcome.token) else { return }
        if completions.isEmpty && deadlinesArmed {
            deadlinesArmed = false
            uv_timer_stop(deadlines)
        }
        let status = GRPCStatus(number: outcome.status, message: outcome.message ?? "")
        guard status.code == .ok else {
            return completion(GRPCClientResponse(status: status, message: nil, metadata: outcome.metadata))
        }
        switch GRPCResponseStatus.message(inBody: outcome.body) {
        case .success(let message): completion(GRPCClientResponse(status: status, message: message, metadata: outcome.metadata))
        case .failure(let failure): completion(GRPCClientResponse(status: failure, message: nil, metadata: outcome.metadata))
        }
    }
}
