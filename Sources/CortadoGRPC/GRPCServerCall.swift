import Foundation
import Synchronization

/// One unary gRPC call as a handler sees it: the request message, the metadata, the
/// deadline, and a way to answer. Handlers run on the loop thread and must not block: they
/// hand the call to a worker and answer from there; `respond` and `fail` may be called
/// from any thread, once.
public final class GRPCServerCall: @unchecked Sendable {
    /// `/package.Service/Method`.
    public let path: String
    /// The request message (without its 5-byte prefix).
    public let request: [UInt8]
    /// Request headers other than the HTTP/2 pseudo-headers, lower-cased names.
    public let metadata: [(name: String, value: String)]
    /// When the client stops waiting, in `DispatchTime` nanoseconds; nil: no deadline.
    public let deadline: UInt64?
    /// When the call's request was complete, in `DispatchTime` nanoseconds.
    public let receivedAt: UInt64

    private let completion: GRPCCallCompletion
    private let state = GRPCCallState()
    /// Where the answer goes (loop thread only). Strong, and cleared by the loop once the
    /// final answer is delivered (or dropped): a weak reference would give the connection
    /// a side table, and every retain and release of it — several per frame in the nghttp2
    /// callbacks — would take the slow path. A connection that closed while a worker still
    /// holds the call lives until that answer arrives, then goes.
    var connection: HTTP2Connection?
    var streamID: Int32 = 0

    init(path: String, request: [UInt8], metadata: [(name: String, value: String)], deadline: UInt64?, completion: GRPCCallCompletion) {
        self.path = path
        self.request = request
        self.metadata = metadata
        self.deadline = deadline
        self.completion = completion
        self.receivedAt = DispatchTime.now().uptimeNanoseconds
    }

    /// The method's name (the last path component).
    public var method: Substring { path[path.index(after: path.lastIndex(of: "/") ?? path.startIndex)...] }

    /// The value of a metadata entry, if present.
    public func metadata(_ name: String) -> String? {
        metadata.first(where: { $0.name == name })?.value
    }

    /// True once the client reset the stream or went away: the answer would be dropped.
    public var isCancelled: Bool { state.isCancelled }

    /// True when the deadline has passed.
    public var isPastDeadline: Bool {
        guard let deadline else { return false }
        return DispatchTime.now().uptimeNanoseconds >= deadline
    }

    /// Answers with a message and status OK.
    public func respond(_ message: [UInt8]) {
        guard state.complete() else { return }
        completion.complete(self, .message(GRPCMessageWriter.frame(message)))
    }

    /// Answers with a message already framed: written behind `GRPCMessageWriter.prefixLength`
    /// bytes left free, then `GRPCMessageWriter.fillPrefix` (the message is not copied; fill
    /// the prefix while the array is not shared, or the write copies it).
    public func respond(framed message: [UInt8]) {
        guard state.complete() else { return }
        completion.complete(self, .message(message))
    }

    /// Answers with an error status and no message (after `send`: ends the stream with it).
    public func fail(_ status: GRPCStatus) {
        guard state.complete() else { return }
        completion.complete(self, .status(status))
    }

    /// Server streaming: sends one message and keeps the call open. End it with `finish`
    /// (or `fail`). Ignored once the call has ended.
    public func send(_ message: [UInt8]) {
        guard !state.isCompleted else { return }
        completion.complete(self, .streamed(GRPCMessageWriter.frame(message)))
    }

    /// Server streaming: ends the call with OK trailers after the messages sent.
    public func finish() {
        guard state.complete() else { return }
        completion.complete(self, .status(GRPCStatus(.ok, "")))
    }

    /// Runs `body` (on the loop thread, or at once if already so) when the client cancels
    /// the call or goes away; for calls that stay open (server streaming).
    public func onCancel(_ body: @escaping @Sendable () -> Void) {
        if state.setCancelHandler(body) { body() }
    }

    func cancel() { state.cancel()?() }
}

/// How a call ended, as the transport sends it.
enum GRPCCallResult: Sendable {
    /// A framed message, then OK trailers.
    case message([UInt8])
    /// Trailers only (after streamed messages: the trailers that end the stream).
    case status(GRPCStatus)
    /// A framed message of a server-streaming call that stays open.
    case streamed([UInt8])

    /// Whether the call ends with this result.
    var isFinal: Bool {
        if case .streamed = self { return false }
        return true
    }
}

/// Receives completed calls (from any thread) for the transport to send.
protocol GRPCCallCompletion: AnyObject, Sendable {
    func complete(_ call: GRPCServerCall, _ result: GRPCCallResult)
}

/// Cancelled and completed flags, set from different threads. A `Mutex` stored inline in the
/// call: one of these is made per call, and a class with an `NSLock` would be two objects more.
struct GRPCCallState: ~Copyable, @unchecked Sendable {
    private struct Flags {
        var cancelled = false
        var completed = false
        var onCancel: (@Sendable () -> Void)?
    }
    private let flags = Mutex(Flags())

    var isCancelled: Bool { flags.withLock { $0.cancelled } }
    var isCompleted: Bool { flags.withLock { $0.completed } }
    /// Marks the call cancelled; returns the cancel handler to run, once.
    func cancel() -> (@Sendable () -> Void)? {
        flags.withLock { f in
            f.cancelled = true
            defer { f.onCancel = nil }
            return f.onCancel
        }
    }
    /// Keeps the handler; true when the call was already cancelled (run it now).
    func setCancelHandler(_ body: @escaping @Sendable () -> Void) -> Bool {
        flags.withLock { f in
            if f.cancelled { return true }
            f.onCancel = body
            return false
        }
    }
    /// True the first time only.
    func complete() -> Bool {
        flags.withLock { f in
            if f.completed { return false }
            f.completed = true
            f.onCancel = nil  // it may hold the call: no cycle once the call has ended
            return true
        }
    }
}
