import Foundation
import Synchronization

/// One HTTP/1.1 request as a handler sees it: method, target, headers and the whole body.
/// Handlers run on the loop thread and must not block: they answer at once or pass the
/// request to a worker; `respond` may be called from any thread, once. Answers go out in
/// the order the requests arrived on their connection, whatever order they are given in.
public final class HTTPServerRequest: @unchecked Sendable {
    /// `GET`, `POST`, …
    public let method: String
    /// The target's path, still percent-encoded (`/v2/models/a%20b/infer`).
    public let path: String
    /// The target's query, without the `?` (empty when there is none).
    public let query: String
    /// Header fields in arrival order, names lower-cased.
    public let headers: [(name: String, value: String)]
    public let body: [UInt8]
    /// When the request was complete, in `DispatchTime` nanoseconds.
    public let receivedAt: UInt64

    /// Cancelled and answered, set from different threads.
    private let state = Mutex((cancelled: false, answered: false))
    private let completion: HTTPRequestCompletion

    // Loop thread only.
    /// The answer, once given; sent when every earlier request of the connection has been.
    var response: HTTPServerResponse?
    /// Close the connection once this answer is written (the client asked, or the transport
    /// refused the request and cannot read on safely).
    var closeAfter = false
    /// Bytes this request holds against the connection's budget, released once answered.
    var reserved = 0
    /// An HTTP/1.0 request that asked to keep the connection: its answer says so.
    var keepAlive10 = false
    /// The connection the answer goes to; cleared once it is written (or dropped).
    var connection: HTTP1Connection?

    init(method: String, path: String, query: String, headers: [(name: String, value: String)], body: [UInt8], completion: HTTPRequestCompletion) {
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
        self.completion = completion
        receivedAt = DispatchTime.now().uptimeNanoseconds
    }

    /// The first value of a header (`name` lower-case), if present.
    public func header(_ name: String) -> String? {
        headers.first(where: { $0.name == name })?.value
    }

    /// True once the client closed the connection: the answer would be dropped.
    public var isCancelled: Bool { state.withLock { $0.cancelled } }

    /// Answers the request (from any thread; later calls are ignored).
    public func respond(_ response: HTTPServerResponse) {
        let first = state.withLock { s in
            defer { s.answered = true }
            return !s.answered
        }
        guard first else { return }
        completion.complete(self, response)
    }

    func cancel() { state.withLock { $0.cancelled = true } }
}

/// An HTTP answer: status, extra header fields (the transport adds `Content-Length` and
/// `Connection`), body.
public struct HTTPServerResponse: Sendable {
    public var status: Int
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]

    public init(status: Int, headers: [(name: String, value: String)] = [], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// The reason phrase of the statuses this server sends.
    static func reason(_ status: Int) -> String {
        switch status {
        case 100: return "Continue"
        case 200: return "OK"
        case 400: return "Bad Request"
        case 401: return "Unauthorized"
        case 403: return "Forbidden"
        case 404: return "Not Found"
        case 405: return "Method Not Allowed"
        case 408: return "Request Timeout"
        case 409: return "Conflict"
        case 411: return "Length Required"
        case 413: return "Content Too Large"
        case 415: return "Unsupported Media Type"
        case 429: return "Too Many Requests"
        case 431: return "Request Header Fields Too Large"
        case 499: return "Client Closed Request"
        case 500: return "Internal Server Error"
        case 501: return "Not Implemented"
        case 503: return "Service Unavailable"
        case 504: return "Gateway Timeout"
        case 505: return "HTTP Version Not Supported"
        default: return "Status \(status)"
        }
    }
}

/// An HTTP/1.1 request handler. It runs on the loop thread, so it must not block.
public typealias HTTPRequestHandler = @Sendable (HTTPServerRequest) -> Void

/// What serves the HTTP/1.1 port: the request handler, and the answer for a request the
/// transport refuses itself (malformed, head or body too large, budget spent), so that
/// such answers have the same form as the service's own errors.
public struct HTTPService: Sendable {
    public let handler: HTTPRequestHandler
    public let refusal: @Sendable (_ status: Int, _ message: String) -> HTTPServerResponse

    public init(handler: @escaping HTTPRequestHandler, refusal: @escaping @Sendable (_ status: Int, _ message: String) -> HTTPServerResponse) {
        self.handler = handler
        self.refusal = refusal
    }
}

/// Receives answered requests (from any thread) for the transport to send.
protocol HTTPRequestCompletion: AnyObject, Sendable {
    func complete(_ request: HTTPServerRequest, _ response: HTTPServerResponse)
}
