import CLibUV
import CortadoGRPCClient
import CortadoGRPCCore
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// How load is offered.
public enum LoadMode: Sendable, Equatable {
    /// N callers; each sends its next call when its last one returns.
    case closed(concurrency: Int)
    /// A fixed arrival rate (calls per second), whatever the server does; latency counts
    /// from each call's *intended* send time, so queueing in the client or the server shows.
    case open(rate: Double)

    public var name: String {
        switch self { case .closed: return "closed"; case .open: return "open" }
    }
    public var level: Double {
        switch self { case .closed(let n): return Double(n); case .open(let r): return r }
    }
}

public struct PhaseOptions: Sendable {
    public var mode: LoadMode
    /// Seconds of measured load (after warm-up); nil: until `requests` are sent.
    public var duration: Double?
    /// Measured calls to send; nil: as many as `duration` allows.
    public var requests: Int?
    public var warmup: Double = 1
    public var connections: Int = 4
    /// Per-call deadline (seconds), also sent as grpc-timeout.
    public var timeout: Double = 10
    /// Open loop: most calls on the wire at once; later arrivals wait (their latency still
    /// counts from the intended time).
    public var maxInFlight: Int = 10_000
    public var progress = true

    public init(mode: LoadMode) { self.mode = mode }
}

/// What one level measured.
public struct LevelResult: Codable, Sendable {
    public var mode: String
    /// Concurrency (closed) or offered rate per second (open).
    public var level: Double
    public var connections: Int
    public var sent = 0
    public var succeeded = 0
    public var failed = 0
    /// Failed calls by gRPC status name.
    public var errors: [String: Int] = [:]
    /// One message per failing status, as the server (or the client) gave it.
    public var errorMessages: [String: String] = [:]
    public var elapsedSeconds = 0.0
    /// Successful calls per second.
    public var throughput = 0.0
    /// Latency in milliseconds.
    public var p50 = 0.0, p90 = 0.0, p99 = 0.0, p999 = 0.0, max = 0.0, mean = 0.0, min = 0.0
    /// Open loop: how late calls left the client against their intended time (ms).
    public var sendLagP99: Double? = nil
    public var sendLagMax: Double? = nil
    public var bytesSent: UInt64 = 0
    public var bytesReceived: UInt64 = 0
    public var cpuUserSeconds = 0.0
    public var cpuSystemSeconds = 0.0
    /// The client's CPU use as a share of one core (its load runs on one thread).
    public var cpuPercent = 0.0
    /// Why the sweep stopped after this level (a threshold passed), if it did.
    public var stopReason: String? = nil
    /// Connection events over the level (warm-up included), apart from call outcomes: GOAWAYs
    /// received, connections reopened after one was lost or went away, failed connection
    /// attempts (calls wait through these, to their deadline), and calls the server refused
    /// unprocessed (REFUSED_STREAM, as past a GOAWAY's last stream id) and that were sent again once.
    public var goaways = 0
    public var reconnects = 0
    public var connectFailures = 0
    public var retriedCalls = 0
    /// Why the level's latest failed connect failed.
    public var lastConnectError: String? = nil

    public var errorRate: Double { sent == 0 ? 0 : Double(failed) / Double(sent) }
}

func cpuSeconds() -> (user: Double, system: Double) {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    return (Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6,
            Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6)
}

/// Runs one level of load on the loop thread and measures it.
public final class LoadPhase {
    let loop: HTTP2ClientLoop
    let templates: [HTTP2RequestTemplate]
    let options: PhaseOptions
    let connectionCount: Int

    private var nextTemplate = 0
    private var t0: UInt64 = 0
    private var warmupEnd: UInt64 = 0
    private var issueEnd: UInt64 = .max
    private var timeoutNanos: UInt64 = 0
    private var measuredIssued = 0
    private var outstanding = 0
    private var measuring = false
    private var finished = false

    // closed loop
    private var activeCallers = 0
    // open loop
    private var interval = 0.0
    private var arrivals: UInt64 = 0
    private var nextIntended: UInt64 = 0
    private var arriving = false
    /// Arrivals waiting for an in-flight slot: intended time << 1 | measured.
    private var backlog: [UInt64] = []
    private var backlogHead = 0

    // measurements
    private var histogram = LatencyHistogram(highestTrackableValue: 3_600_000_000_000, digits: .three)
    private var lag = LatencyHistogram(highestTrackableValue: 3_600_000_000_000, digits: .two)
    private var result: LevelResult
    private var statusCounts: [Int32: Int] = [:]
    private var lastMeasuredEnd: UInt64 = 0
    private var cpuAtStart = (user: 0.0, system: 0.0)
    private var bytesAtStart: (UInt64, UInt64) = (0, 0)
    private var connectionsAtStart = HTTP2ConnectionStats()
    // progress
    private var lastProgress: (time: UInt64, done: Int) = (0, 0)

    private var timers: [UnsafeMutablePointer<uv_timer_t>] = []
    private var timerFD: Int32 = -1
    private var timerPoll: UnsafeMutablePointer<uv_poll_t>?

    public init(loop: HTTP2ClientLoop, templates: [HTTP2RequestTemplate], options: PhaseOptions) {
        self.loop = loop
        self.templates = templates
        self.options = options
        switch options.mode {
        case .closed(let n): connectionCount = Swift.max(1, Swift.min(n, options.connections))
        case .open: connectionCount = Swift.max(1, options.connections)
        }
        result = LevelResult(mode: options.mode.name, level: options.mode.level, connections: connectionCount)
    }

    /// Runs the level to its end and returns what it measured.
    public func run() -> LevelResult {
        loop.ensureConnections(connectionCount)
        loop.onComplete = { [unowned self] outcome in self.completed(&outcome) }
        connectionsAtStart = loop.connectionStats
        timeoutNanos = UInt64(options.timeout * 1e9)
        t0 = monotonicNanos()
        warmupEnd = t0 + UInt64(options.warmup * 1e9)
        if let d = options.duration { issueEnd = warmupEnd + UInt64(d * 1e9) }
        if options.warmup <= 0 { startMeasuring() } else {
            addTimer(after: UInt64(options.warmup * 1000), repeat: 0) { $0.startMeasuring() }
        }
        addTimer(after: 20, repeat: 20) { me in
            me.loop.expire(now: monotonicNanos())
            me.expireBacklog()
            me.checkDone()
        }
        if options.progress { addTimer(after: 1000, repeat: 1000) { $0.printProgress(final: false) } }

        switch options.mode {
        case .closed(let n):
            activeCallers = n
            for caller in 0..<n { issue(caller: caller) }
        case .open(let rate):
            interval = 1e9 / rate
            nextIntended = t0
            arriving = true
            startPreciseTimer()
            addTimer(after: 1, repeat: 1) { $0.pace() }
            pace()
        }
        checkDone()
        while !finished { loop.runOnce() }
        if options.progress { printProgress(final: true) }
        teardown()
        return finish()
    }

    // MARK: issuing

    private func startCall(intended: UInt64, measured: Bool, token: Int, connection: Int) {
        let t = templates[nextTemplate]
        nextTemplate = nextTemplate + 1 == templates.count ? 0 : nextTemplate + 1
        outstanding += 1
        if measured { result.sent += 1 }
        loop.connections[connection].start(t, token: token << 1 | (measured ? 1 : 0), startNanos: intended,
                                           deadline: intended + timeoutNanos)
    }

    private func issue(caller: Int) {
        let now = monotonicNanos()
        let measured = now >= warmupEnd
        if now >= issueEnd || LoadInterrupt.requested || (measured && options.requests.map { measuredIssued >= $0 } == true) {
            activeCallers -= 1
            return
        }
        if measured { measuredIssued += 1 }
        startCall(intended: now, measured: measured, token: caller, connection: caller % connectionCount)
    }

    private var roundRobin = 0

    /// Open loop: sends every arrival whose intended time has come.
    private func pace() {
        guard arriving else { return }
        let now = monotonicNanos()
        while nextIntended <= now {
            let measured = nextIntended >= warmupEnd
            if nextIntended >= issueEnd || LoadInterrupt.requested || (measured && options.requests.map { measuredIssued >= $0 } == true) {
                arriving = false
                checkDone()
                return
            }
            if measured { measuredIssued += 1 }
            if outstanding < options.maxInFlight && backlogHead == backlog.count {
                send(intended: nextIntended, measured: measured, now: now)
            } else {
                backlog.append(nextIntended << 1 | (measured ? 1 : 0))
            }
            arrivals += 1
            nextIntended = t0 + UInt64(Double(arrivals) * interval)
        }
        arm(at: nextIntended)
    }

    /// Wakes the loop at the next arrival: a timerfd armed with an absolute CLOCK_MONOTONIC
    /// time (nanosecond precision; libuv's own timers tick in milliseconds), watched by a
    /// uv_poll handle. Without timerfd, the 1 ms uv_timer alone paces (arrivals then leave
    /// up to 1 ms late; the lag column shows it, and latency counts it).
    private func arm(at when: UInt64) {
        guard timerFD >= 0, let settime = PreciseTimer.settime else { return }
        var spec = itimerspec()
        spec.it_value.tv_sec = Int(when / 1_000_000_000)
        spec.it_value.tv_nsec = Int(when % 1_000_000_000)
        _ = settime(timerFD, 1 /* TFD_TIMER_ABSTIME */, &spec, nil)
    }

    private func startPreciseTimer() {
        guard let create = PreciseTimer.create else { return }
        let fd = create(CLOCK_MONOTONIC, Int32(O_NONBLOCK | O_CLOEXEC))
        guard fd >= 0 else { return }
        timerFD = fd
        let poll = UnsafeMutablePointer<uv_poll_t>.allocate(capacity: 1)
        uv_poll_init(loop.loop, poll, fd)
        poll.pointee.data = Unmanaged.passUnretained(self).toOpaque()
        uv_poll_start(poll, Int32(UV_READABLE.rawValue)) { handle, _, _ in
            let me = Unmanaged<LoadPhase>.fromOpaque(handle!.pointee.data).takeUnretainedValue()
            var expirations: UInt64 = 0
            _ = read(me.timerFD, &expirations, 8)
            me.pace()
        }
        timerPoll = poll
    }

    private func send(intended: UInt64, measured: Bool, now: UInt64) {
        if measured { lag.record(now > intended ? now - intended : 0) }
        let c = roundRobin
        roundRobin = roundRobin + 1 == connectionCount ? 0 : roundRobin + 1
        startCall(intended: intended, measured: measured, token: 0, connection: c)
    }

    /// Open loop: arrivals that waited past their deadline for a slot fail without being sent.
    private func expireBacklog() {
        guard backlogHead < backlog.count else { return }
        let now = monotonicNanos()
        while backlogHead < backlog.count {
            let entry = backlog[backlogHead]
            let intended = entry >> 1
            guard intended + timeoutNanos <= now else { break }
            backlogHead += 1
            if entry & 1 == 1 {
                result.sent += 1
                record(status: GRPCStatus.Code.deadlineExceeded.number, message: "waited in the client past the deadline (in-flight cap reached)",
                       start: intended, end: now)
            }
        }
        compactBacklog()
    }

    private func compactBacklog() {
        if backlogHead == backlog.count { backlog.removeAll(keepingCapacity: true); backlogHead = 0 }
        else if backlogHead > 4096 && backlogHead * 2 > backlog.count { backlog.removeFirst(backlogHead); backlogHead = 0 }
    }

    // MARK: completions

    private func completed(_ outcome: inout GRPCCallOutcome) {
        outstanding -= 1
        if outcome.token & 1 == 1 {
            record(status: outcome.status, message: outcome.message, start: outcome.startNanos, end: outcome.endNanos)
        }
        switch options.mode {
        case .closed:
            if !finished { issue(caller: outcome.token >> 1) }
        case .open:
            if backlogHead < backlog.count && outstanding < options.maxInFlight {
                let entry = backlog[backlogHead]
                backlogHead += 1
                compactBacklog()
                send(intended: entry >> 1, measured: entry & 1 == 1, now: monotonicNanos())
            }
        }
        if outstanding == 0 { checkDone() }
    }

    private func record(status: Int32, message: String?, start: UInt64, end: UInt64) {
        if end > lastMeasuredEnd { lastMeasuredEnd = end }
        if status == 0 {
            result.succeeded += 1
            histogram.record(end > start ? end - start : 1)
        } else {
            result.failed += 1
            statusCounts[status, default: 0] += 1
            let name = GRPCStatus.name(ofCode: status)
            if result.errorMessages[name] == nil { result.errorMessages[name] = message ?? "" }
        }
    }

    private func checkDone() {
        guard !finished, outstanding == 0, backlogHead == backlog.count else { return }
        let stillIssuing: Bool
        switch options.mode {
        case .closed: stillIssuing = activeCallers > 0
        case .open: stillIssuing = arriving
        }
        if !stillIssuing { finished = true; loop.stop() }
    }

    private func startMeasuring() {
        guard !measuring else { return }
        measuring = true
        cpuAtStart = cpuSeconds()
        bytesAtStart = (loop.bytesSent, loop.bytesReceived)
        lastProgress = (monotonicNanos(), 0)
    }

    // MARK: results

    private func finish() -> LevelResult {
        let end = Swift.max(lastMeasuredEnd, warmupEnd)
        let cpu = cpuSeconds()
        var r = result
        r.elapsedSeconds = Double(end - Swift.min(end, warmupEnd)) / 1e9
        r.throughput = r.elapsedSeconds > 0 ? Double(r.succeeded) / r.elapsedSeconds : 0
        if histogram.totalCount > 0 {
            func ms(_ v: UInt64) -> Double { Double(v) / 1e6 }
            r.p50 = ms(histogram.valueAtPercentile(50))
            r.p90 = ms(histogram.valueAtPercentile(90))
            r.p99 = ms(histogram.valueAtPercentile(99))
            r.p999 = ms(histogram.valueAtPercentile(99.9))
            r.max = ms(histogram.max)
            r.min = ms(histogram.min)
            r.mean = histogram.mean / 1e6
        }
        if case .open = options.mode, lag.totalCount > 0 {
            r.sendLagP99 = Double(lag.valueAtPercentile(99)) / 1e6
            r.sendLagMax = Double(lag.max) / 1e6
        }
        for (status, n) in statusCounts { r.errors[GRPCStatus.name(ofCode: status)] = n }
        let events = loop.connectionStats - connectionsAtStart
        r.goaways = events.goaways
        r.reconnects = events.reconnects
        r.connectFailures = events.connectFailures
        r.retriedCalls = events.retriedCalls
        if events.connectFailures > 0 { r.lastConnectError = events.lastConnectError }
        r.bytesSent = loop.bytesSent - bytesAtStart.0
        r.bytesReceived = loop.bytesReceived - bytesAtStart.1
        r.cpuUserSeconds = cpu.user - cpuAtStart.user
        r.cpuSystemSeconds = cpu.system - cpuAtStart.system
        let wall = Double(monotonicNanos() - Swift.min(monotonicNanos(), warmupEnd)) / 1e9
        r.cpuPercent = wall > 0 ? 100 * (r.cpuUserSeconds + r.cpuSystemSeconds) / wall : 0
        return r
    }

    private func printProgress(final: Bool) {
        let now = monotonicNanos()
        let done = result.succeeded + result.failed
        let rate = now > lastProgress.time ? Double(done - lastProgress.done) / (Double(now - lastProgress.time) / 1e9) : 0
        lastProgress = (now, done)
        let elapsed = Double(now - t0) / 1e9
        let phase = measuring ? "" : " (warm-up)"
        var line = String(format: "%@ %@ %6.1fs%@  ok %d  err %d  %8.0f/s  in-flight %d",
                          options.mode.name, formatLevel(options.mode), elapsed, phase, result.succeeded, result.failed, rate, outstanding)
        if histogram.totalCount > 0 {
            line += String(format: "  p50 %.3fms  p99 %.3fms", Double(histogram.valueAtPercentile(50)) / 1e6, Double(histogram.valueAtPercentile(99)) / 1e6)
        }
        if backlogHead < backlog.count { line += "  backlog \(backlog.count - backlogHead)" }
        let events = loop.connectionStats - connectionsAtStart
        if events.goaways > 0 { line += "  goaway \(events.goaways)" }
        if events.connectFailures > 0 { line += "  connect-failed \(events.connectFailures)" }
        if events.reconnects > 0 { line += "  reconnected \(events.reconnects)" }
        let tty = isatty(2) != 0
        let text = tty ? "\r\u{1b}[K" + line + (final ? "\n" : "") : line + "\n"
        FileHandle.standardError.write(text.data(using: .utf8)!)
    }

    private func formatLevel(_ mode: LoadMode) -> String {
        switch mode {
        case .closed(let n): return "c=\(n)"
        case .open(let r): return "rate=\(Int(r))/s"
        }
    }

    // MARK: timers

    private final class TimerBox {
        let phase: LoadPhase
        let body: (LoadPhase) -> Void
        init(_ p: LoadPhase, _ b: @escaping (LoadPhase) -> Void) { phase = p; body = b }
    }

    private func addTimer(after ms: UInt64, repeat every: UInt64, _ body: @escaping (LoadPhase) -> Void) {
        let timer = UnsafeMutablePointer<uv_timer_t>.allocate(capacity: 1)
        uv_timer_init(loop.loop, timer)
        timer.pointee.data = Unmanaged.passRetained(TimerBox(self, body)).toOpaque()
        uv_timer_start(timer, { t in
            let box = Unmanaged<TimerBox>.fromOpaque(t!.pointee.data).takeUnretainedValue()
            box.body(box.phase)
        }, ms, every)
        timers.append(timer)
    }

    private func teardown() {
        for timer in timers {
            uv_timer_stop(timer)
            Unmanaged<TimerBox>.fromOpaque(timer.pointee.data).release()
            uv_close(UnsafeMutableRawPointer(timer).assumingMemoryBound(to: uv_handle_t.self)) { h in
                UnsafeMutableRawPointer(h!).assumingMemoryBound(to: uv_timer_t.self).deallocate()
            }
        }
        timers.removeAll()
        if let timerPoll {
            uv_poll_stop(timerPoll)
            let fd = timerFD
            uv_close(UnsafeMutableRawPointer(timerPoll).assumingMemoryBound(to: uv_handle_t.self)) { h in
                UnsafeMutableRawPointer(h!).assumingMemoryBound(to: uv_poll_t.self).deallocate()
            }
            loop.runOnce(nowait: true)
            close(fd)
            self.timerPoll = nil
            timerFD = -1
        }
        loop.onComplete = nil
        loop.runOnce(nowait: true)
    }
}

/// timerfd_create / timerfd_settime, looked up in libc (Swift's Glibc module does not import
/// <sys/timerfd.h>).
enum PreciseTimer {
    typealias Create = @convention(c) (Int32, Int32) -> Int32
    typealias SetTime = @convention(c) (Int32, Int32, UnsafePointer<itimerspec>?, UnsafeMutablePointer<itimerspec>?) -> Int32
    static let create: Create? = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "timerfd_create").map { unsafeBitCast($0, to: Create.self) }
    static let settime: SetTime? = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "timerfd_settime").map { unsafeBitCast($0, to: SetTime.self) }
}
