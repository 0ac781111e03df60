import CortadoGRPCCore

/// The status a client reads from a response that carries no `grpc-status`: gRPC's mapping
/// of HTTP/2 stream resets and of HTTP statuses (grpc/doc/http-grpc-status-mapping.md and
/// PROTOCOL-HTTP2.md), so every transport failure reaches callers as a gRPC code.
public enum GRPCResponseStatus {
    /// For an RST_STREAM error code (RFC 9113 §7).
    public static func code(forReset errorCode: UInt32) -> GRPCStatus.Code {
        switch errorCode {
        case 0x7: return .unavailable  // REFUSED_STREAM: no server worked on it
        case 0x8: return .cancelled  // CANCEL
        case 0xb: return .resourceExhausted  // ENHANCE_YOUR_CALM
        case 0xc: return .permissionDenied  // INADEQUATE_SECURITY
        default: return .internal
        }
    }

    /// For a response's `:status` when it has no `grpc-status`.
    public static func code(forHTTPStatus status: Int) -> GRPCStatus.Code {
        switch status {
        case 400: return .internal
        case 401: return .unauthenticated
        case 403: return .permissionDenied
        case 404: return .unimplemented
        case 429, 502, 503, 504: return .unavailable
        default: return .unknown
        }
    }

    /// The response message in a gRPC body (the bytes of its DATA frames): exactly one
    /// length-prefixed, uncompressed message; a status saying what is wrong otherwise.
    public static func message(inBody body: [UInt8]) -> Result<[UInt8], GRPCStatus> {
        var reader = GRPCMessageReader(maxMessageSize: Int(UInt32.max))
        do { try reader.append(body) } catch GRPCMessageReader.ReadError.compressed {
            return .failure(GRPCStatus(.internal, "the response message is compressed (no grpc-encoding was asked for)"))
        } catch {
            return .failure(GRPCStatus(.internal, "the response message cannot be read: \(error)"))
        }
        guard !reader.hasPartialMessage else { return .failure(GRPCStatus(.internal, "the response message is truncated")) }
        let messages = reader.takeMessages()
        guard messages.count == 1 else {
            return .failure(GRPCStatus(.internal, "a unary response carried \(messages.count) messages"))
        }
        return .success(messages[0])
    }
}
