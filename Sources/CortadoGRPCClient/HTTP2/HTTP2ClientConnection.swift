import CLibUV
import CortadoGRPCCore
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// What happened to one connection's sockets over a run (summed over a loop's connections).
public struct HTTP2ConnectionStats: Codable, Sendable, Equatable {
    /// GOAWAY frames received: the server stopped taking new streams on a connection.
    public var goaways = 0
    /// Connections opened after an earlier one of the same slot was lost or went away.
    public var reconnects = 0
    /// Connection attempts that failed: refused, unreachable, or closed before the server's
    /// HTTP/2 SETTINGS arrived. Not call failures: calls wait through them (to their deadline).
    public var connectFailures = 0
    /// Calls refused unprocessed (REFUSED_STREAM: past a GOAWAY's last stream id, or by the
    /// server's budgets) and sent again, once.
    public var retriedCalls = 0
    /// Why the latest failed connect failed.
    public var lastConnectError: String?

    public init() {}

    public static func + (a: HTTP2ConnectionStats, b: HTTP2ConnectionStats) -> HTTP2ConnectionStats {
        var sum = a
        sum.goaways += b.goaways
        sum.reconnects += b.reconnects
        sum.connectFailures += b.connectFailures
        sum.retriedCalls += b.retriedCalls
        sum.lastConnectError = b.lastConnectError ?? a.lastConnectError
        return sum
    }

    public static func - (a: HTTP2ConnectionStats, b: HTTP2ConnectionStats) -> HTTP2ConnectionStats {
        var diff = a
        diff.goaways -= b.goaways
        diff.reconnects -= b.reconnects
        diff.connectFailures -= b.connectFailures
        diff.retriedCalls -= b.retriedCalls
        return diff
    }
}

/// One client connection to the server as callers see it: a slot that always
/// has somewhere to send the next call. Calls go to its current HTTP/2 session
/// (`HTTP2ClientSession`). After a GOAWAY that session keeps only its streams up to the GOAWAY's
/// last stream id, and new calls go to a new session; calls it refused are sent again once.
/// After a lost connection its open calls fail with UNAVAILABLE (they may have reached the
/// server), and the next call opens a new one. While connects fail, calls wait here (to their
/// deadline) and connects are retried with capped exponential backoff: one failed connect
/// costs a counter and a timer, not a failed call per caller per loop turn.
public final class HTTP2ClientConnection {
    unowned let owner: HTTP2ClientLoop
    let index: Int

    private var current: HTTP2ClientSession?
    /// Sessions after a GOAWAY, answering their last streams.
    private var retiring: [HTTP2ClientSession] = []
    /// Closed sessions, kept until the next flush: one may still be on the stack below.
    private var closed: [HTTP2ClientSession] = []
    /// Calls waiting out a backoff for the next connect.
    private var waiting: [HTTP2ClientCall] = []
    var dirty = false

    public internal(set) var bytesSent: UInt64 = 0
    public internal(set) var bytesReceived: UInt64 = 0
    public private(set) var stats = HTTP2ConnectionStats()

    /// The first retry waits `backoffBase`, each further failure doubles it, up to
    /// `backoffCap`; each delay is spread ±20% so connections do not retry in step.
    static let backoffBase: UInt64 = 50_000_000
    static let backoffCap: UInt64 = 1_000_000_000
    private var failuresInARow = 0
    /// No connect starts before this time (monotonic nanoseconds).
    private var retryAt: UInt64 = 0
    private var timer: UnsafeMutablePointer<uv_timer_t>?
    private var timerArmed = false
    private var everReady = false
    private var shutDown = false

    /// Calls started and not yet delivered.
    public var open: Int {
        (current?.open ?? 0) + retiring.reduce(0) { $0 + $1.open } + waiting.count
    }

    init(owner: HTTP2ClientLoop, index: Int) {
        self.owner = owner
        self.index = index
    }

    // MARK: calls

    /// Starts one unary call; its outcome arrives through `owner.onComplete`. With
    /// `waitForReady` false a failed connect fails the call at once (UNAVAILABLE) instead of
    /// letting it wait for the next attempt.
    public func start(_ template: HTTP2RequestTemplate, token: Int, startNanos: UInt64, deadline: UInt64, collect: Bool = false,
                      waitForReady: Bool = true) {
        submit(HTTP2ClientCall(token: token, startNanos: startNanos, deadline: deadline, template: template, collect: collect,
                          waitForReady: waitForReady))
    }

    private func submit(_ call: HTTP2ClientCall) {
        if let session = usableSession() {
            session.submit(call)
        } else if shutDown {
            deliver(call, status: GRPCStatus.Code.unavailable.number, message: "client shutting down", body: [], deferred: true)
        } else {
            waiting.append(call)
            armTimer()
        }
    }

    /// The session new calls go to: the current one unless it went away; a new one (connected
    /// at the next flush) unless a backoff is running.
    private func usableSession() -> HTTP2ClientSession? {
        if let session = current, session.acceptsCalls { return session }
        if let session = current {
            current = nil
            if session.state != .closed { retiring.append(session) }
        }
        if shutDown || timerArmed || monotonicNanos() < retryAt { return nil }
        let session = HTTP2ClientSession(channel: self)
        current = session
        markDirty()
        return session
    }

    /// Opens a session ahead of the first call (no-op if one is open or a backoff runs).
    func ensureSession() {
        if current == nil && waiting.isEmpty { _ = usableSession() }
    }

    func deliver(_ call: HTTP2ClientCall, status: Int32, message: String?, body: [UInt8],
                 metadata: [(name: String, value: String)] = [], deferred: Bool) {
        var outcome = GRPCCallOutcome(token: call.token, startNanos: call.startNanos, endNanos: monotonicNanos(),
                                      status: status, message: message, body: body, metadata: metadata)
        if deferred { owner.deferredFailures.append(outcome) } else { owner.onComplete?(&outcome) }
    }

    /// A call its session refused unprocessed: sent again once, wherever new calls go now.
    func retry(_ call: HTTP2ClientCall) {
        stats.retriedCalls += 1
        submit(call)
    }

    /// Fails calls past their deadline, the waiting ones too.
    func expire(now: UInt64) {
        current?.expire(now: now)
        for session in retiring { session.expire(now: now) }
        guard waiting.contains(where: { $0.deadline <= now }) else { return }
        let expired = waiting.filter { $0.deadline <= now }
        waiting.removeAll { $0.deadline <= now }
        let reason = "no connection to \(owner.authority) before the deadline" + (stats.lastConnectError.map { " (\($0))" } ?? "")
        for call in expired { deliver(call, status: GRPCStatus.Code.deadlineExceeded.number, message: reason, body: [], deferred: false) }
    }

    func markDirty() { owner.markDirty(self) }

    /// Connects new sessions and sends what every session has ready; closes the sessions
    /// that went away once their last calls are answered.
    func flush() {
        closed.removeAll()
        current?.flush()
        guard !retiring.isEmpty else { return }
        for session in retiring {
            if session.open == 0 { sessionEnded(session, reason: "the server ended the connection (GOAWAY)") } else { session.flush() }
        }
    }

    // MARK: session events

    func sessionReady(_ session: HTTP2ClientSession) {
        failuresInARow = 0
        retryAt = 0
        if everReady { stats.reconnects += 1 }
        everReady = true
    }

    func sessionGoingAway(_ session: HTTP2ClientSession) {
        stats.goaways += 1
        if current === session {
            current = nil
            retiring.append(session)
        }
    }

    /// A session's connection is gone. Before the server's SETTINGS that is a failed connect:
    /// its calls were never read, so they wait for the next attempt (after a backoff). After,
    /// its open calls fail: they may have reached the server.
    func sessionEnded(_ session: HTTP2ClientSession, reason: String) {
        guard session.state != .closed else { return }
        if !session.ready {
            stats.connectFailures += 1
            stats.lastConnectError = reason
            failuresInARow += 1
            retryAt = monotonicNanos() + Self.backoff(afterFailures: failuresInARow)
            waiting += session.takeUnsentCalls(failing: reason)
        } else {
            session.failOpenCalls(reason)
        }
        session.close()
        closed.append(session)
        if current === session { current = nil } else { retiring.removeAll { $0 === session } }
        if !waiting.isEmpty { armTimer() }
    }

    static func backoff(afterFailures n: Int) -> UInt64 {
        let doubled = backoffBase << UInt64(min(max(n - 1, 0), 20))
        return UInt64(Double(min(doubled, backoffCap)) * Double.random(in: 0.8...1.2))
    }

    private func armTimer() {
        guard !timerArmed, !shutDown else { return }
        if timer == nil {
            let t = UnsafeMutablePointer<uv_timer_t>.allocate(capacity: 1)
            uv_timer_init(owner.loop, t)
            t.pointee.data = Unmanaged.passUnretained(self).toOpaque()
            timer = t
        }
        timerArmed = true
        let now = monotonicNanos()
        let ms = retryAt > now ? (retryAt - now + 999_999) / 1_000_000 : 0
        uv_timer_start(timer, { t in
            Unmanaged<HTTP2ClientConnection>.fromOpaque(t!.pointee.data).takeUnretainedValue().backoffEnded()
        }, ms, 0)
    }

    private func backoffEnded() {
        timerArmed = false
        let calls = waiting
        waiting.removeAll()
        for call in calls { submit(call) }
    }

    /// Fails every call (UNAVAILABLE, delivered from the loop's prepare step), closes every
    /// session and stops reconnecting.
    func close(reason: String) {
        shutDown = true
        for session in [current].compactMap({ $0 }) + retiring {
            session.failOpenCalls(reason)
            session.close()
            closed.append(session)
        }
        current = nil
        retiring.removeAll()
        for call in waiting { deliver(call, status: GRPCStatus.Code.unavailable.number, message: reason, body: [], deferred: true) }
        waiting.removeAll()
        if let timer {
            self.timer = nil
            timerArmed = false
            uv_timer_stop(timer)
            uv_close(UnsafeMutableRawPointer(timer).assumingMemoryBound(to: uv_handle_t.self)) { h in
                UnsafeMutableRawPointer(h!).assumingMemoryBound(to: uv_timer_t.self).deallocate()
            }
        }
    }
}
