import Dispatch
import Foundation
import Synchronization

/// A server transport without sockets: calls reach a `GRPCRouter` straight from the same
/// process, through the same steps the HTTP/2 transport takes — routing (UNIMPLEMENTED for
/// an unknown path), the router's admission check on the path and metadata before the
/// request message is read, then the unary handler or the message stream's handler with a
/// `GRPCServerCall`. A serial queue plays the loop thread: handlers run on it, and answers
/// given from any thread cross back to it before they are delivered. For tests and for
/// embedding a server's services in a program (swift-nio's `EmbeddedChannel` is the model).
public final class InProcessServerTransport: GRPCCallCompletion, @unchecked Sendable {
    public let router: GRPCRouter
    /// The loop thread's stand-in: handlers run here, and answers are delivered here.
    let queue = DispatchQueue(label: "cortado.inprocess")

    /// One call in flight: where its answer goes, and the message stream that took it (if any).
    private struct Open {
        var deliver: @Sendable (InProcessServerResult) -> Void
        var stream: GRPCMessageStreamMethod?
        var streamed: [[UInt8]] = []
    }
    private let open = Mutex<[ObjectIdentifier: Open]>([:])

    public init(router: GRPCRouter) {
        self.router = router
    }

    /// Starts one call. `request` is asked for the request message only once the call is
    /// routed and admitted (a refused call's message is never read); `deadline` is in
    /// `DispatchTime` nanoseconds. `deliver` runs once, on the transport's queue. Returns the
    /// handle that cancels the call (as an HTTP/2 RST_STREAM would).
    @discardableResult
    public func start(path: String, metadata: [(name: String, value: String)], deadline: UInt64?,
                      request: @escaping @Sendable () -> [UInt8],
                      deliver: @escaping @Sendable (InProcessServerResult) -> Void) -> InProcessCallHandle {
        let handle = InProcessCallHandle()
        queue.async { [self] in
            let unary = router.handler(for: path)
            let stream = unary == nil ? router.messageStream(for: path) : nil
            guard unary != nil || stream != nil else {
                return deliver(.init(status: GRPCStatus(.unimplemented, router.missReason(for: path)), messages: []))
            }
            if let admission = router.admission, let refused = admission(path, metadata) {
                return deliver(.init(status: refused, messages: []))
            }
            guard !handle.isCancelled else { return deliver(.init(status: GRPCStatus(.cancelled, "cancelled by the client"), messages: [])) }
            let call = GRPCServerCall(path: path, request: request(), metadata: metadata, deadline: deadline, completion: self)
            open.withLock { $0[ObjectIdentifier(call)] = Open(deliver: deliver, stream: stream) }
            handle.attach(call) { [weak self] in
                // As over HTTP/2 after a reset: the call's answer, when it comes, is dropped.
                guard let server = self else { return }
                let id = ObjectIdentifier(call)
                server.queue.async { _ = server.open.withLock { $0.removeValue(forKey: id) } }
            }
            if let unary { unary(call) } else { stream!.handler(call) }
        }
        return handle
    }

    /// From any thread: the handler's answer, delivered on the queue.
    func complete(_ call: GRPCServerCall, _ result: GRPCCallResult) {
        queue.async { [self] in
            let id = ObjectIdentifier(call)
            if case .streamed(let framed) = result {
                open.withLock { $0[id]?.streamed.append(Array(framed.dropFirst(GRPCMessageWriter.prefixLength))) }
                return
            }
            guard let entry = open.withLock({ $0.removeValue(forKey: id) }) else { return }
            switch result {
            case .message(let framed), .streamed(let framed):
                let message = Array(framed.dropFirst(GRPCMessageWriter.prefixLength))
                entry.deliver(.init(status: .ok, messages: entry.streamed + [message]))
            case .status(let status):
                // A message stream turns a failed call into a message of its own, when it can.
                if status.code != .ok, let stream = entry.stream, let message = stream.failure(status) {
                    entry.deliver(.init(status: .ok, messages: entry.streamed + [message]))
                } else {
                    entry.deliver(.init(status: status, messages: status.code == .ok ? entry.streamed : []))
                }
            }
        }
    }

    /// Calls started and not yet answered.
    public var openCalls: Int { open.withLock { $0.count } }
}

/// How an in-process call ended: its status and the response messages (unframed; one for a
/// unary call, the streamed ones for a server-streaming call).
public struct InProcessServerResult: Sendable {
    public var status: GRPCStatus
    public var messages: [[UInt8]]
}

/// Cancels an in-process call: the handler sees `isCancelled` and its `onCancel` runs, as
/// when an HTTP/2 client resets the stream.
public final class InProcessCallHandle: @unchecked Sendable {
    private struct State {
        var cancelled = false
        var call: GRPCServerCall?
        var forget: (@Sendable () -> Void)?
    }
    private let state = Mutex(State())

    var isCancelled: Bool { state.withLock { $0.cancelled } }

    func attach(_ call: GRPCServerCall, forget: @escaping @Sendable () -> Void) {
        let cancelNow = state.withLock { s -> Bool in
            s.call = call
            s.forget = forget
            return s.cancelled
        }
        if cancelNow { cancel() }
    }

    public func cancel() {
        let (call, forget) = state.withLock { s -> (GRPCServerCall?, (@Sendable () -> Void)?) in
            s.cancelled = true
            defer { s.call = nil; s.forget = nil }
            return (s.call, s.forget)
        }
        call?.cancel()
        forget?()
    }
}
