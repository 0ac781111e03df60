import CortadoGRPCClient
import SwiftProtobuf

/// A typed Swift client of Cortado's two gRPC APIs — the native `cortado.v1.Predictor`
/// (Core ML feature values in and out, every feature type) and the Open Inference Protocol
/// (`inference.GRPCInferenceService`: `MLMultiArray` tensors, readiness, metadata) — on any
/// `GRPCClientTransport`: HTTP/2 to a server (`init(host:port:)`), or in-process.
/// Every call is `async`, takes a timeout (the deadline, from now) and metadata, and throws
/// `CortadoClientError`. Safe to share between tasks.
public final class CortadoClient: Sendable {
    public let transport: any GRPCClientTransport
    /// Metadata every call carries (an `authorization` token, say) before its own.
    public let metadata: [(name: String, value: String)]
    /// The timeout of calls that give none (nil: no deadline).
    public let defaultTimeout: Duration?

    public init(transport: any GRPCClientTransport, metadata: [(name: String, value: String)] = [],
                defaultTimeout: Duration? = .seconds(30)) {
        self.transport = transport
        self.metadata = metadata
        self.defaultTimeout = defaultTimeout
    }

    /// A client of the server at `host:port` over HTTP/2 (plaintext); `bearerToken` is sent as
    /// `authorization: Bearer …` with every call. Close it when done.
    public convenience init(host: String, port: Int, bearerToken: String? = nil,
                            defaultTimeout: Duration? = .seconds(30)) throws(CortadoClientError) {
        let transport: HTTP2ClientTransport
        do { transport = try HTTP2ClientTransport(host: host, port: port) } catch let status as GRPCStatus {
            throw CortadoClientError(status)
        } catch {
            throw CortadoClientError(code: .unavailable, message: "\(error)")
        }
        self.init(transport: transport, metadata: bearerToken.map { [("authorization", "Bearer \($0)")] } ?? [],
                  defaultTimeout: defaultTimeout)
    }

    /// Closes the transport: calls in flight fail with UNAVAILABLE.
    public func close() { transport.close() }

    /// One unary call with typed messages.
    func call<Response: SwiftProtobuf.Message>(_ path: String, _ request: some SwiftProtobuf.Message,
                                                as: Response.Type, timeout: Duration?,
                                                metadata extra: [(name: String, value: String)]) async throws(CortadoClientError) -> Response {
        let bytes: [UInt8]
        do { bytes = try request.serializedBytes() } catch {
            throw CortadoClientError(code: .internal, message: "cannot serialize the request: \(error)")
        }
        let answer: [UInt8]
        do {
            answer = try await transport.unary(path: path, message: bytes, metadata: metadata + extra,
                                               timeout: timeout ?? defaultTimeout).message
        } catch let status as GRPCStatus {
            throw CortadoClientError(status)
        } catch {
            throw CortadoClientError(code: .unknown, message: "\(error)")
        }
        do { return try Response(serializedBytes: answer) } catch {
            throw CortadoClientError(code: .internal, message: "cannot read the \(Response.protoMessageName) answer of \(path): \(error)")
        }
    }
}
