import CortadoCore
import CortadoGRPC
import Foundation

/// Per-call traces in Chrome's trace event format (`cortado serve --trace-file`), which
/// Perfetto (ui.perfetto.dev) and chrome://tracing open: for each sampled prediction call, the
/// steps Core ML's Instrument shows — the wait in the model's queue, reading and checking the
/// input, the model's computation, writing the answer — as nested async spans under one span
/// for the call, on the protocol's track (gRPC or REST), timed in microseconds of the process's
/// monotonic clock.
///
/// Every span carries the model, its version, the service, the client's `x-request-id`, and a
/// W3C trace context: a call that came with a valid `traceparent` (gRPC metadata or HTTP
/// header) keeps its trace id and names its parent span, so the server's spans join the
/// client's trace; the call's own span id is new. Sampling: a call with a `traceparent` is
/// traced when the caller's sampled flag is set; any other call with probability
/// `--trace-sample-rate`. With no `--trace-file` the server holds no tracer and a call pays one
/// nil test.
///
/// The file is bounded (`--trace-max-size`, MiB): a client can ask for every call to be traced
/// (a `traceparent` with the sampled flag), so once the next call would pass the bound the
/// array is closed and tracing stops, with a warning in the log; the server goes on serving.
///
/// Events are appended as they come (a lock and a buffered file write on the worker that
/// answered); the file is a JSON array closed by `close()` at shutdown — a file cut short by a
/// crash lacks only the closing bracket, which both viewers accept.
public final class CallTracer: @unchecked Sendable {
    /// A sampled call's trace context: its trace, the caller's span (from its `traceparent`)
    /// and its own span.
    struct Context {
        let traceID: String
        let parentID: String?
        let spanID: String
    }

    public let rate: Double
    /// Whether each layer of a network or ML Program gets a span under compute
    /// (`--trace-layers`).
    public let layers: Bool
    private let lock = NSLock()
    private let handle: FileHandle
    private var buffer: [UInt8] = []
    private var first = true
    private var closed = false
    /// Bytes the file may hold, and bytes given to it so far (written or buffered).
    private let maxBytes: Int
    private var size = 0
    /// Told once, when the bound stops tracing.
    private let onFull: @Sendable (Int) -> Void
    private var nextSpan: UInt64
    private var lastFlush: UInt64 = 0

    /// Opens (truncates) `path`. Throws when it cannot be created.
    public init(path: String, rate: Double, layers: Bool = false, maxBytes: Int = 1 << 30,
                onFull: @escaping @Sendable (Int) -> Void = { _ in }) throws {
        self.maxBytes = max(64, maxBytes)
        self.onFull = onFull
        self.layers = layers
        guard FileManager.default.createFile(atPath: path, contents: nil) else {
            throw CocoaError(.fileWriteNoPermission, userInfo: [NSFilePathErrorKey: path])
        }
        handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        self.rate = rate
        nextSpan = UInt64.random(in: 1 ... .max >> 8)
        buffer.reserveCapacity(1 << 16)
        buffer.append(contentsOf: Array("[\n".utf8))
        size = buffer.count
    }

    /// W3C `traceparent`: version 00, 32 hex digits of trace id, 16 of parent span id, 2 of
    /// flags; all-zero ids are invalid. Nil for anything else.
    static func parse(_ header: String?) -> (traceID: String, parentID: String, sampled: Bool)? {
        guard let header else { return nil }
        let parts = header.trimmingCharacters(in: .whitespaces).lowercased().split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count >= 4, parts[0].count == 2, parts[0] != "ff", parts[1].count == 32, parts[2].count == 16, parts[3].count == 2,
              parts.prefix(4).allSatisfy({ $0.allSatisfy(\.isHexDigit) }),
              parts[1].contains(where: { $0 != "0" }), parts[2].contains(where: { $0 != "0" }),
              let flags = UInt8(parts[3], radix: 16) else { return nil }
        if parts[0] == "00" && parts.count != 4 { return nil }
        return (String(parts[1]), String(parts[2]), flags & 1 == 1)
    }

    /// Whether to trace this call, and its context if so: a call with a valid `traceparent`
    /// when its sampled flag is set (keeping its trace id), any other with probability `rate`.
    func sample(_ call: any PredictionCall) -> Context? {
        let parent = Self.parse(call.traceParent)
        if let parent {
            guard parent.sampled else { return nil }
        } else if rate < 1 {
            guard rate > 0, Double.random(in: 0 ..< 1) < rate else { return nil }
        }
        let traceID = parent?.traceID ?? Self.hex(UInt64.random(in: 0 ... .max)) + Self.hex(UInt64.random(in: 1 ... .max))
        let span = lock.withLock { nextSpan &+= 1; return nextSpan }
        return Context(traceID: traceID, parentID: parent?.parentID, spanID: Self.hex(span))
    }

    /// The steps of one sampled call, in `DispatchTime` nanoseconds: it was received at
    /// `received`, waited `queued`, was read in `input`, computed in `infer` (ending when the
    /// encoding began; `compute` holds the models of a pipeline and the layers it ran, when
    /// recorded) and encoded until `done`. Failed calls pass zeros for the steps they did not
    /// reach.
    func record(_ context: Context, call: any PredictionCall, model: String, version: String, service: String, status: ServeStatus.Code,
                queued: UInt64, input: UInt64, infer: UInt64, encodeBegan: UInt64, done: UInt64, compute: [MLComputeSpans.Span] = []) {
        let received = call.receivedAt
        var w = JSONWriter(capacity: 1024 + 160 * compute.count)
        lock.lock()
        defer { lock.unlock() }
        guard !closed else { return }
        let span = context.spanID
        let track = service == "rest" ? "REST" : "gRPC"
        var args: [(String, String)] = [("model", model), ("version", version), ("service", service), ("status", status.description),
                                        ("trace_id", context.traceID), ("span_id", span)]
        if let parent = context.parentID { args.append(("parent_id", parent)) }
        if let id = call.requestID { args.append(("request_id", id)) }
        func pair(_ name: String, _ from: UInt64, _ to: UInt64) {
            event(&w, "b", name, track: track, id: span, at: from, args: [])
            event(&w, "e", name, track: track, id: span, at: Swift.max(from, to), args: [])
        }
        event(&w, "b", "\(model) \(service)", track: track, id: span, at: received, args: args)
        var t = received
        if queued > 0 || input > 0 {
            pair("queue wait", t, t + queued)
            t += queued
            pair("input decode and checks", t, t + input)
            t += input
        }
        if infer > 0 {
            event(&w, "b", "compute", track: track, id: span, at: encodeBegan - infer, args: [("model", model)])
            // A pipeline's models hold the layers that ran inside them: begins and ends in
            // time order; at one instant ends first, the inner (shorter) span's end before the
            // outer's, the outer span's begin before the inner's.
            var marks: [(at: UInt64, begin: Bool, key: Int64, span: MLComputeSpans.Span)] = []
            for s in compute {
                let length = Int64(clamping: s.end &- Swift.min(s.start, s.end))
                marks.append((s.start, true, -length, s))
                marks.append((Swift.max(s.start, s.end), false, length, s))
            }
            marks.sort { ($0.at, $0.begin ? 1 : 0, $0.key) < ($1.at, $1.begin ? 1 : 0, $1.key) }
            for m in marks {
                let name = m.span.kind == "model" ? "model \(m.span.name)" : "\(m.span.name) (\(m.span.kind))"
                event(&w, m.begin ? "b" : "e", name, track: track, id: span, at: m.at, args: [])
            }
            event(&w, "e", "compute", track: track, id: span, at: encodeBegan, args: [])
        }
        if encodeBegan > 0 { pair("output encoding", encodeBegan, done) }
        event(&w, "e", "\(model) \(service)", track: track, id: span, at: done, args: [])
        // Room kept for the closing bracket.
        guard size + w.bytes.count + 3 <= maxBytes else {
            closeLocked()
            onFull(maxBytes)
            return
        }
        size += w.bytes.count
        buffer.append(contentsOf: w.bytes)
        // Written out by the 64 KiB, or with the first call more than a second after the
        // last write (so a slow trickle of calls reaches the file as it goes).
        if buffer.count >= 1 << 16 || done &- lastFlush > 1_000_000_000 { flushLocked() }
    }

    private func event(_ w: inout JSONWriter, _ phase: String, _ name: String, track: String, id: String, at ns: UInt64,
                       args: [(String, String)]) {
        if !first { w.raw(",\n") }
        first = false
        w.bytes.append(contentsOf: "{\"ph\":\"\(phase)\",\"cat\":\"\(track)\",\"name\":".utf8)
        w.string(name)
        w.bytes.append(contentsOf: ",\"id\":\"0x\(id)\",\"pid\":1,\"tid\":1,\"ts\":".utf8)
        // Microseconds with three decimals (nanosecond resolution).
        w.bytes.append(contentsOf: "\(ns / 1000).\(String(ns % 1000 + 1000).dropFirst())".utf8)
        if !args.isEmpty {
            w.raw(",\"args\":{")
            for (k, (key, value)) in args.enumerated() {
                if k > 0 { w.raw(",") }
                w.string(key)
                w.raw(":")
                w.string(value)
            }
            w.raw("}")
        }
        w.raw("}")
    }

    private func flushLocked() {
        lastFlush = DispatchTime.now().uptimeNanoseconds
        guard !buffer.isEmpty else { return }
        handle.write(Data(buffer))
        buffer.removeAll(keepingCapacity: true)
    }

    /// Closes the array and the file; later calls are not recorded.
    public func close() {
        lock.withLock { closeLocked() }
    }

    private func closeLocked() {
        guard !closed else { return }
        closed = true
        buffer.append(contentsOf: Array("\n]\n".utf8))
        flushLocked()
        try? handle.close()
    }

    private static func hex(_ v: UInt64) -> String {
        let s = String(v, radix: 16)
        return String(repeating: "0", count: 16 - s.count) + s
    }
}

extension HTTPServerRequest {
    var traceParent: String? { header("traceparent") }
}
