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
    /// Bytes this stream holds in the connection's and the server's buffer budgets (its
    /// messages and its metadata), and the metadata's share of them.
    var reserved = 0
    private(set) var metadataBytes = 0

    /// Request pseudo-headers seen (bits: :method 1, :path 2, :scheme 4, :authority 8), and
    /// whether a regular header came yet (pseudo-headers must all come first).
    private var pseudo: UInt8 = 0
    private var regularSeen = false
    /// `content-length`, when the client sent one, and the body bytes received so far.
    private var declaredLength: Int?
    private(set) var bodyLength = 0

    init(id: Int32, maxMessageSize: Int) {
        self.id = id
        self.reader = GRPCMessageReader(maxMessageSize: maxMessageSize)
    }

    /// Whether a header's name is `name` (compared as bytes: no string is built).
    @inline(__always) static func matches(_ bytes: UnsafeBufferPointer<UInt8>, _ name: StaticString) -> Bool {
        bytes.count == name.utf8CodeUnitCount && (bytes.count == 0 || memcmp(bytes.baseAddress!, name.utf8Start, bytes.count) == 0)
    }

    /// Records one request header, and checks it as RFC 9113 §8.2–8.3 asks of a server (the
    /// session leaves HTTP messaging to this callback, which looks at every header anyway, so
    /// each is scanned once). Returns why the request is malformed, or nil.
    ///
    /// Pseudo-headers fill the routing fields; `te` (which must be `trailers`), `user-agent`,
    /// the accept-encoding headers, `:scheme` and `:authority` are checked and dropped; the
    /// rest is metadata.
    func header(name: UnsafeBufferPointer<UInt8>, value: UnsafeBufferPointer<UInt8>, on connection: HTTP2Connection) -> String? {
        guard HTTP2FieldCheck.isValidValue(value) else { return "header \(HTTP2FieldCheck.text(name)) has a value with NUL, CR, LF or surrounding whitespace" }
        if name.first == UInt8(ascii: ":") {
            if regularSeen { return "pseudo-header \(HTTP2FieldCheck.text(name)) after a regular header" }
            let bit: UInt8
            if Self.matches(name, ":path") {
                bit = 2
                if value.isEmpty { return "empty :path" }
                path = connection.headerValue(value)
            } else if Self.matches(name, ":method") {
                bit = 1
                method = connection.headerValue(value)
            } else if Self.matches(name, ":scheme") {
                bit = 4
                if value.isEmpty { return "empty :scheme" }
            } else if Self.matches(name, ":authority") {
                bit = 8
            } else {
                return "unknown pseudo-header \(HTTP2FieldCheck.text(name))"
            }
            if pseudo & bit != 0 { return "pseudo-header \(HTTP2FieldCheck.text(name)) given twice" }
            pseudo |= bit
            return nil
        }
        regularSeen = true
        if Self.matches(name, "content-type") { contentType = connection.headerValue(value) }
        else if Self.matches(name, "te") {
            if !Self.matches(value, "trailers") { return "te must be \"trailers\"" }
        } else if Self.matches(name, "user-agent") || Self.matches(name, "grpc-accept-encoding") || Self.matches(name, "accept-encoding") {
            // Describes the client only.
        } else if Self.matches(name, "content-length") {
            guard let length = HTTP2FieldCheck.decimal(value), declaredLength == nil || declaredLength == length else {
                return "content-length \(HTTP2FieldCheck.text(value)) is not one decimal number"
            }
            declaredLength = length
        } else if Self.matches(name, "grpc-encoding") { encoding = connection.headerValue(value) }
        else if Self.matches(name, "grpc-timeout") {
            if let t = GRPCTimeout.parse(connection.headerValue(value)) { timeoutNanos = t } else { badTimeout = true }
        } else {
            guard HTTP2FieldCheck.isValidName(name) else { return "header name \(HTTP2FieldCheck.text(name)) is not a lower-case token" }
            if HTTP2FieldCheck.isConnectionSpecific(name) { return "connection-specific header \(HTTP2FieldCheck.text(name))" }
            metadata.append((String(decoding: name, as: UTF8.self), String(decoding: value, as: UTF8.self)))
            metadataBytes += name.count + value.count
        }
        return nil
    }

    /// The header block ended: the pseudo-headers a request needs are there (:method, :path,
    /// :scheme), or why not.
    func headersEndProblem() -> String? {
        pseudo & 7 == 7 ? nil : "request without \(pseudo & 1 == 0 ? ":method" : pseudo & 2 == 0 ? ":path" : ":scheme")"
    }

    /// Counts body bytes against `content-length`; why the body is malformed, or nil.
    /// `ended`: the client finished sending.
    func bodyProblem(adding count: Int, ended: Bool) -> String? {
        bodyLength += count
        guard let declaredLength else { return nil }
        if bodyLength > declaredLength || (ended && bodyLength != declaredLength) {
            return "content-length \(declaredLength) but \(bodyLength)\(ended ? "" : " or more") body bytes"
        }
        return nil
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
