import Foundation

/// One HTTP/2 stream carrying one unary gRPC call, from its HEADERS to its trailers.
/// Lives on the loop thread only.
final class HTTP2Stream {
    let id: Int32
    var path = ""
    var method = ""
    var contentType = ""
    var encoding = ""
    var timeoutNanos: UInt64?
    var badTimeout = false
    var metadata: [(name: String, value: String)] = []
    var reader: GRPCMessageReader
    /// The path's handler, looked up once the headers are complete.
    var handler: GRPCUnaryHandler?
    /// A bidirectional stream served message by message: the method, its calls not yet
    /// answered, whether the client finished sending, and the deadline every call shares.
    var messageStream: GRPCMessageStreamMethod?
    var streamCalls: [GRPCServerCall] = []
    var inputEnded = false
    var streamDeadline: UInt64?
    /// The call handed to a handler (nil until the request is complete).
    var call: GRPCServerCall?
    /// An answer was submitted to nghttp2 (after that, further request bytes are dropped).
    var answered = false
    /// The framed response message the data provider reads from.
    var response: [UInt8] = []
    var responseOffset = 0
    /// Server streaming: response headers went out and the data provider is attached.
    var streaming = false
    /// The status the trailers carry once `response` is drained (nil: more may come).
    var trailers: GRPCStatus?

    /// Request headers the transport drops on arrival (`te: trailers` is required by gRPC but
    /// carries nothing; the others only describe the client).
    static let ignoredHeaders: [StaticString] = ["te", "user-agent", "grpc-accept-encoding", "accept-encoding", ":scheme", ":authority"]

    init(id: Int32, maxMessageSize: Int) {
        self.id = id
        self.reader = GRPCMessageReader(maxMessageSize: maxMessageSize)
    }

    /// Whether a header's name is `name` (compared as bytes: no string is built).
    @inline(__always) static func matches(_ bytes: UnsafeBufferPointer<UInt8>, _ name: StaticString) -> Bool {
        bytes.count == name.utf8CodeUnitCount && (bytes.count == 0 || memcmp(bytes.baseAddress!, name.utf8Start, bytes.count) == 0)
    }

    static func isIgnored(_ name: UnsafeBufferPointer<UInt8>) -> Bool {
        ignoredHeaders.contains { matches(name, $0) }
    }

    /// Records one request header (the ignored ones never reach here). Pseudo-headers fill the
    /// routing fields; the rest is metadata.
    func addHeader(name: UnsafeBufferPointer<UInt8>, value: String) {
        if Self.matches(name, ":path") { path = value }
        else if Self.matches(name, ":method") { method = value }
        else if Self.matches(name, "content-type") { contentType = value }
        else if Self.matches(name, "grpc-encoding") { encoding = value }
        else if Self.matches(name, "grpc-timeout") {
            if let t = GRPCTimeout.parse(value) { timeoutNanos = t } else { badTimeout = true }
        } else {
            metadata.append((String(decoding: name, as: UTF8.self), value))
        }
    }

    /// Whether the request headers make a gRPC call this server can take; the status says why not.
    func headerProblem() -> (httpStatus: Int, status: GRPCStatus)? {
        if method != "POST" {
            return (405, GRPCStatus(.unimplemented, "gRPC calls use POST, not \(method.isEmpty ? "no method" : method)"))
        }
        if !(contentType == "application/grpc" || contentType.hasPrefix("application/grpc+") || contentType.hasPrefix("application/grpc;")) {
            return (415, GRPCStatus(.unknown, "content-type \(contentType.isEmpty ? "(none)" : contentType) is not application/grpc"))
        }
        if badTimeout {
            return (200, GRPCStatus(.invalidArgument, "malformed grpc-timeout header"))
        }
        return nil
    }
}
