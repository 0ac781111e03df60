import CLibUV
import Foundation

/// Limits and addresses of a `GRPCServer`.
public struct GRPCServerConfiguration: Sendable {
    /// Address to listen on; 127.0.0.1 by default (use 0.0.0.0 or :: to accept remote clients).
    public var host = "127.0.0.1"
    /// gRPC port; 0 picks a free one (read it back from `start()`).
    public var port = 8001
    /// Largest request message accepted, in bytes; larger ones get RESOURCE_EXHAUSTED.
    public var maxReceiveMessageSize = 64 << 20
    /// HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS per connection.
    public var maxConcurrentStreams = 1024
    /// HTTP/2 flow-control window per stream and per connection, in bytes; never more than
    /// the buffer budgets below (`streamWindow`, `connectionWindow`).
    public var initialWindowSize = 1 << 20
    public var connectionWindowSize = 16 << 20
    /// Bytes of request messages one stream may hold in memory, from a message's first bytes
    /// until its call is answered.
    public var maxStreamBuffer = 64 << 20
    /// The same for all the streams of one connection.
    public var maxConnectionBuffer = 128 << 20
    /// The same for the whole server.
    public var maxProcessBuffer = GRPCServerConfiguration.defaultProcessBuffer(physicalMemory: ProcessInfo.processInfo.physicalMemory)
    /// Open HTTP/2 connections; more are closed as soon as they are accepted.
    public var maxConnections = 1024
    /// Open HTTP/2 connections from one IP address (0: no limit).
    public var maxConnectionsPerPeer = 0
    /// Seconds a client has to finish a header block, and a new connection its first frame
    /// (0: no limit).
    public var headerTimeout: Double = 10
    /// A plain HTTP/1.1 port on the same loop (metrics); nil: none.
    public var httpPort: Int?
    /// The HTTP/1.1 service port (the Open Inference Protocol's REST form) on the same loop;
    /// nil: none. Its bodies are limited by `maxReceiveMessageSize`, its connections by
    /// `maxConnections` and `maxConnectionsPerPeer` (counted apart from the gRPC ones), its
    /// unanswered bodies by the buffer budgets.
    public var restPort: Int?
    /// Bytes of one HTTP/1.1 request head (request line and header fields); more get 431.
    public var maxRequestHeaderSize = 64 << 10
    /// Requests one HTTP/1.1 connection may have read and not yet answered; past it the
    /// connection is not read until answers go out.
    public var maxPipelinedRequests = 64
    /// How long a graceful shutdown waits for calls in flight, in seconds.
    public var drainTimeout: Double = 30
    /// TLS on both ports (the metrics port serves HTTPS); nil: plaintext (h2c and HTTP/1.1).
    public var tls: GRPCTLSConfiguration?

    public init() {}

    /// A quarter of the machine's memory, at most 2 GiB: room for many clients' requests
    /// while the models and their workspaces keep the rest.
    public static func defaultProcessBuffer(physicalMemory: UInt64) -> Int {
        Int(min(physicalMemory / 4, 2 << 30))
    }

    /// The stream window offered in SETTINGS_INITIAL_WINDOW_SIZE: the configured one, but no
    /// more than a budget can hold, so a client is never invited to send what must be refused.
    var streamWindow: Int { max(1, min(initialWindowSize, maxStreamBuffer, maxConnectionBuffer, maxProcessBuffer)) }
    /// The connection window, likewise.
    var connectionWindow: Int { max(1, min(connectionWindowSize, maxConnectionBuffer, maxProcessBuffer)) }
}

/// What the transport reports (for logs).
public enum GRPCServerEvent: Sendable {
    case listening(host: String, grpcPort: Int, httpPort: Int?, restPort: Int?)
    case connectionOpened(peer: String)
    case connectionClosed(peer: String)
    case protocolError(peer: String, message: String)
    /// A connection closed by the server because of a limit (connections, header timeout).
    case connectionRefused(peer: String, reason: String)
    case draining(calls: Int, connections: Int)
    case stopped
}

/// A GET (or HEAD) request on the metrics port.
public struct HTTPGetRequest: Sendable {
    /// The path without its query.
    public var path: String
    /// Request headers, names lower-cased.
    public var headers: [(name: String, value: String)]

    public init(path: String, headers: [(name: String, value: String)] = []) {
        self.path = path
        self.headers = headers
    }

    /// The first header named `name` (lower case).
    public func header(_ name: String) -> String? { headers.first { $0.name == name }?.value }
}

/// The answer to an `HTTPGetRequest`.
public struct HTTPGetResponse: Sendable {
    public var status: Int
    public var contentType: String
    public var body: [UInt8]
    /// Further response headers (e.g. `WWW-Authenticate` with a 401).
    public var headers: [(name: String, value: String)]

    public init(status: Int, contentType: String = "text/plain", body: [UInt8], headers: [(name: String, value: String)] = []) {
        self.status = status
        self.contentType = contentType
        self.body = body
        self.headers = headers
    }

    public init(status: Int, text: String, headers: [(name: String, value: String)] = []) {
        self.init(status: status, contentType: "text/plain", body: Array(text.utf8), headers: headers)
    }
}

/// A plain HTTP GET handler for the metrics port. Runs on the loop thread.
public typealias HTTPGetHandler = @Sendable (_ request: HTTPGetRequest) -> HTTPGetResponse

public enum GRPCServerError: Error, CustomStringConvertible {
    case bind(host: String, port: Int, message: String)
    case loop(String)
    /// The TLS files could not be used (at start, or on a reload).
    case tls(String)

    public var description: String {
        switch self {
        case .bind(let host, let port, let message): return "cannot listen on \(host):\(port): \(message)"
        case .loop(let message): return "event loop: \(message)"
        case .tls(let message): return "TLS: \(message)"
        }
    }
}

/// A gRPC server on one libuv loop thread: HTTP/2 via nghttp2, unary calls routed by path.
/// Handlers run on the loop thread and hand work to workers; answers come back through an
/// async wake-up, so the loop never waits on a model.
public final class GRPCServer: @unchecked Sendable {
    let core: GRPCServerCore
    private var thread: Thread?
    private let finished = DispatchSemaphore(value: 0)

    /// `rest`: what serves `configuration.restPort`.
    public init(configuration: GRPCServerConfiguration, router: GRPCRouter, httpHandler: HTTPGetHandler? = nil, rest: HTTPService? = nil,
                events: @escaping @Sendable (GRPCServerEvent) -> Void = { _ in }) {
        core = GRPCServerCore(configuration: configuration, router: router, httpHandler: httpHandler, rest: rest, events: events)
    }

    /// Binds the ports and starts the loop thread. Returns the bound ports.
    @discardableResult
    public func start() throws -> (grpcPort: Int, httpPort: Int?, restPort: Int?) {
        let ports = try core.bind()
        let thread = Thread { [core, finished] in
            // Named from inside: on Linux the name set before start() does not reach the
            // kernel, and tools (top -H, perf, /proc) show it only then.
            ThreadName.set("cortado-loop")
            core.run()
            finished.signal()
        }
        thread.name = "cortado-loop"
        thread.stackSize = 8 << 20
        self.thread = thread
        thread.start()
        core.event(.listening(host: core.configuration.host, grpcPort: ports.grpcPort, httpPort: ports.httpPort, restPort: ports.restPort))
        return ports
    }

    /// Starts a graceful shutdown from any thread: stop accepting, GOAWAY every connection,
    /// let calls in flight finish (up to the drain timeout), then stop the loop.
    public func shutdown() { core.requestShutdown() }

    /// Blocks until the loop has stopped.
    public func wait() {
        finished.wait()
        finished.signal()
    }

    /// Calls handed to handlers and not yet answered.
    public var callsInFlight: Int { core.inFlightCount }
    /// Open HTTP/2 connections.
    public var connectionCount: Int { core.connectionCountValue }
    /// Open HTTP/1.1 connections on the REST port.
    public var restConnectionCount: Int { core.restConnectionCountValue }

    /// Reads the TLS certificate, key and client CA files again (from any thread): new
    /// connections use them, open ones keep what they started with. On failure the files in
    /// use stay and the error says why. Returns the new certificate's subject, expiry and
    /// fingerprint.
    @discardableResult
    public func reloadTLS() throws(GRPCServerError) -> String {
        guard let tls = core.tls else { throw .tls("TLS is off: nothing to reload") }
        return try tls.reload()
    }

    /// The subject, expiry and fingerprint of the certificate in use; nil without TLS.
    public var tlsCertificate: String? { core.tls?.summary }
}
