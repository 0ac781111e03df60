import Foundation

/// A unary method handler. It runs on the loop thread, so it must not block: it answers at
/// once or passes the call on to a worker.
public typealias GRPCUnaryHandler = @Sendable (GRPCServerCall) -> Void

/// A bidirectional-streaming method served message by message: every request message on
/// the stream reaches `handler` as a call of its own (its `request` is that message), and
/// each call's answer is one response message on the stream, in the order answers come.
/// A call that fails sends the message `failure` makes of its status (a stream can carry
/// per-message errors, as the Open Inference Protocol's ModelStreamInfer does) or, when
/// `failure` returns nil, ends the stream with that status. Once the client has finished
/// sending and every message has been answered, the stream ends with OK.
public struct GRPCMessageStreamMethod: Sendable {
    public let handler: GRPCUnaryHandler
    public let failure: @Sendable (GRPCStatus) -> [UInt8]?
    public init(handler: @escaping GRPCUnaryHandler, failure: @escaping @Sendable (GRPCStatus) -> [UInt8]?) {
        self.handler = handler
        self.failure = failure
    }
}

/// Decides, from a call's head alone, whether it may go on: the path and the metadata, before
/// the request message is read (so a refused client cannot make the server hold its
/// message). Returns the status to answer with, or nil to let the call through. Runs on the
/// loop thread, once per call (once per message stream); it must be quick.
public typealias GRPCAdmission = @Sendable (_ path: String, _ metadata: [(name: String, value: String)]) -> GRPCStatus?

/// What a service contributes to the router: its full name and its methods.
public protocol GRPCService: AnyObject, Sendable {
    /// `package.Service`.
    var serviceName: String { get }
    /// Method name to handler.
    var methods: [String: GRPCUnaryHandler] { get }
    /// Bidirectional-streaming methods served message by message (none by default).
    var messageStreams: [String: GRPCMessageStreamMethod] { get }
}

extension GRPCService {
    public var messageStreams: [String: GRPCMessageStreamMethod] { [:] }
}

/// Maps `/package.Service/Method` paths to handlers. Built before the server starts and
/// read-only afterwards.
public final class GRPCRouter: @unchecked Sendable {
    private var handlers: [String: GRPCUnaryHandler] = [:]
    private var messageStreams: [String: GRPCMessageStreamMethod] = [:]
    private var services: Set<String> = []
    /// Checked for every routed call before its message is read (`GRPCAdmission`); nil: none.
    public private(set) var admission: GRPCAdmission?

    public init() {}

    /// Sets the check every routed call passes first (authentication, say). The transport
    /// knows nothing of what it checks.
    public func admit(with check: @escaping GRPCAdmission) { admission = check }

    /// Every routed path: unary methods and message streams.
    public var paths: [String] { (Array(handlers.keys) + Array(messageStreams.keys)).sorted() }

    public func register(_ service: any GRPCService) {
        services.insert(service.serviceName)
        for (method, handler) in service.methods {
            handlers["/\(service.serviceName)/\(method)"] = handler
        }
        for (method, stream) in service.messageStreams {
            messageStreams["/\(service.serviceName)/\(method)"] = stream
        }
    }

    public func register(path: String, _ handler: @escaping GRPCUnaryHandler) {
        handlers[path] = handler
        let parts = path.split(separator: "/")
        if parts.count == 2 { services.insert(String(parts[0])) }
    }

    public var serviceNames: [String] { services.sorted() }

    public func handler(for path: String) -> GRPCUnaryHandler? { handlers[path] }

    public func messageStream(for path: String) -> GRPCMessageStreamMethod? { messageStreams[path] }

    /// Why a path has no handler, for the UNIMPLEMENTED message.
    public func missReason(for path: String) -> String {
        let parts = path.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0].isEmpty, !parts[1].isEmpty, !parts[2].isEmpty else { return "malformed method path \(path) (expected /package.Service/Method)" }
        if services.contains(String(parts[1])) {
            return "method \(parts[2]) is not implemented by service \(parts[1])"
        }
        return "unknown service \(parts[1])"
    }
}
