import Dispatch
import Synchronization

/// `GRPCClientTransport` over an `InProcessServerTransport`: typed clients call a router's
/// services without sockets. The deadline is the client's, as over HTTP/2: when it passes
/// the call ends with DEADLINE_EXCEEDED and the server's call is cancelled.
public final class InProcessClientTransport: GRPCClientTransport, @unchecked Sendable {
    public let server: InProcessServerTransport
    private let closed = Mutex(false)

    public init(server: InProcessServerTransport) {
        self.server = server
    }

    /// A client of `router`'s services (its admission check included).
    public convenience init(router: GRPCRouter) {
        self.init(server: InProcessServerTransport(router: router))
    }

    public func unary(path: String, message: [UInt8], metadata: [(name: String, value: String)], timeout: Duration?,
                      completion: @escaping @Sendable (GRPCClientResponse) -> Void) {
        guard !closed.withLock({ $0 }) else {
            return completion(GRPCClientResponse(status: GRPCStatus(.unavailable, "the transport is closed"), message: nil))
        }
        let once = Once(completion)
        let nanos = timeout?.saturatingNanoseconds
        let now = DispatchTime.now().uptimeNanoseconds
        let deadline = nanos.map { $0 > UInt64.max - now ? UInt64.max : now + $0 }
        let handle = server.start(path: path, metadata: metadata, deadline: deadline, request: { message }) { result in
            guard result.status.code == .ok else { return once(GRPCClientResponse(status: result.status, message: nil)) }
            guard result.messages.count == 1 else {
                return once(GRPCClientResponse(status: GRPCStatus(.internal, "a unary response carried \(result.messages.count) messages"),
                                               message: nil))
            }
            once(GRPCClientResponse(status: .ok, message: result.messages[0]))
        }
        if let deadline, deadline != UInt64.max {
            server.queue.asyncAfter(deadline: DispatchTime(uptimeNanoseconds: deadline)) {
                guard once.isPending else { return }
                handle.cancel()
                once(GRPCClientResponse(status: GRPCStatus(.deadlineExceeded, "client deadline passed"), message: nil))
            }
        }
    }

    /// Later calls fail with UNAVAILABLE; calls in flight run to their end.
    public func close() { closed.withLock { $0 = true } }
}

/// A completion that runs once, whichever of the answer and the deadline comes first.
private final class Once: @unchecked Sendable {
    private let completion: Mutex<(@Sendable (GRPCClientResponse) -> Void)?>
    init(_ body: @escaping @Sendable (GRPCClientResponse) -> Void) { completion = Mutex(body) }
    var isPending: Bool { completion.withLock { $0 != nil } }
    func callAsFunction(_ response: GRPCClientResponse) {
        let body = completion.withLock { c -> (@Sendable (GRPCClientResponse) -> Void)? in
            defer { c = nil }
            return c
        }
        body?(response)
    }
}
