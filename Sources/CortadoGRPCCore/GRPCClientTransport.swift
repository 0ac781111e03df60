import CortadoGRPCCore

/// How a unary call ended, as a client transport hands it back: the status, the response
/// message (OK calls only), and the response's custom metadata (headers and trailers).
public struct GRPCClientResponse: Sendable {
    public var status: GRPCStatus
    /// The response message without its 5-byte prefix; nil unless the status is OK.
    public var message: [UInt8]?
    /// Response headers and trailers other than the protocol's own, lower-case names.
    public var metadata: [(name: String, value: String)]

    public init(status: GRPCStatus, message: [UInt8]?, metadata: [(name: String, value: String)] = []) {
        self.status = status
        self.message = message
        self.metadata = metadata
    }
}

/// Carries unary gRPC calls to a server: over HTTP/2 sockets (`HTTP2ClientTransport` in CortadoGRPCClient), or
/// straight into a router in the same process (`InProcessClientTransport` in CortadoGRPC);
/// the protocol lives here, apart from both, as grpc-swift 2 keeps `ClientTransport` in GRPCCore.
/// The typed clients above it know the messages; a transport knows bytes, paths, metadata
/// and deadlines.
public protocol GRPCClientTransport: AnyObject, Sendable {
    /// Sends one call: `message` is the serialized request (unframed), `metadata` custom
    /// headers (lower-case names; see `GRPCMetadata.isValidCustomName`), `timeout` the time
    /// from now the client waits (nil: no deadline). `completion` runs once, on a thread of
    /// the transport's choosing; it must not block.
    func unary(path: String, message: [UInt8], metadata: [(name: String, value: String)], timeout: Duration?,
               completion: @escaping @Sendable (GRPCClientResponse) -> Void)

    /// Fails the calls still open (UNAVAILABLE) and releases the transport's resources;
    /// calls started afterwards fail at once.
    func close()
}

extension GRPCClientTransport {
    /// `unary` as an `async` function; a status other than OK is thrown as the `GRPCStatus`.
    public func unary(path: String, message: [UInt8], metadata: [(name: String, value: String)] = [],
                      timeout: Duration? = nil) async throws -> (message: [UInt8], metadata: [(name: String, value: String)]) {
        let response = await withCheckedContinuation { (continuation: CheckedContinuation<GRPCClientResponse, Never>) in
            unary(path: path, message: message, metadata: metadata, timeout: timeout) { continuation.resume(returning: $0) }
        }
        guard response.status.code == .ok else { throw response.status }
        guard let body = response.message else { throw GRPCStatus(.internal, "\(path): the response carried no message") }
        return (body, response.metadata)
    }
}

extension Duration {
    /// The duration in whole nanoseconds, saturating (negative: 0).
    public var saturatingNanoseconds: UInt64 {
        let (seconds, attoseconds) = components
        guard seconds >= 0 else { return 0 }
        let (wholeSeconds, overflow) = UInt64(seconds).multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return UInt64.max }
        let (sum, overflow2) = wholeSeconds.addingReportingOverflow(UInt64(attoseconds / 1_000_000_000))
        return overflow2 ? UInt64.max : sum
    }
}
