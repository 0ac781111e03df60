import CortadoGRPC
import Foundation

/// Checks bearer tokens (`--auth-tokens`) on gRPC calls and on the metrics port.
///
/// A gRPC call is checked from its head (`GRPCRouter.admit`), on the loop thread, before its
/// message is read: so before it is decoded and before any model is looked up. No
/// `authorization: Bearer TOKEN` metadata, or an unknown token: UNAUTHENTICATED. A known token
/// without the method's scope (`ScopedService.access`): PERMISSION_DENIED. The token table
/// can be replaced while serving (`reload`, on SIGHUP).
public final class CallAuthorizer: @unchecked Sendable {
    public let path: String
    private let lock = NSLock()
    private var tokens: AuthTokens
    /// `/package.Service/Method` to what it needs, from the registered services.
    private var access: [String: MethodAccess] = [:]

    public init(path: String) throws(AuthTokens.ParseError) {
        self.path = path
        tokens = try AuthTokens(contentsOf: path)
    }

    public init(tokens: AuthTokens, path: String = "") {
        self.path = path
        self.tokens = tokens
    }

    public var tokenCount: Int { lock.withLock { tokens.count } }

    /// Reads the token file again; on failure the tokens in use stay.
    @discardableResult
    public func reload() throws(AuthTokens.ParseError) -> Int {
        let fresh = try AuthTokens(contentsOf: path)
        lock.withLock { tokens = fresh }
        return fresh.count
    }

    /// Records what each of a service's methods needs (call before the server starts).
    public func register(_ service: any ScopedService) {
        let table = service.access
        for method in Array(service.methods.keys) + Array(service.messageStreams.keys) {
            access["/\(service.serviceName)/\(method)"] = table[method] ?? .scope(.admin)
        }
    }

    /// What a path needs (`admin` for a path no service registered).
    public func access(for path: String) -> MethodAccess { access[path] ?? .scope(.admin) }

    /// The check `GRPCRouter.admit(with:)` runs for every call.
    public func admission() -> GRPCAdmission {
        { [self] path, metadata in
            let needed = access(for: path)
            guard case .scope(let scope) = needed else { return nil }
            let value = metadata.first(where: { $0.name == "authorization" })?.value
            return check(authorization: value, needs: scope, what: path).map { problem in
                GRPCStatus(problem.unknown ? .unauthenticated : .permissionDenied, problem.message)
            }
        }
    }

    /// The metrics port's check: nil when allowed, else the HTTP answer (401 or 403).
    public func check(http request: HTTPGetRequest, needs scope: AuthScope) -> HTTPGetResponse? {
        guard let problem = check(authorization: request.header("authorization"), needs: scope, what: request.path) else { return nil }
        return problem.unknown
            ? HTTPGetResponse(status: 401, text: problem.message + "\n", headers: [("WWW-Authenticate", "Bearer realm=\"cortado\"")])
            : HTTPGetResponse(status: 403, text: problem.message + "\n")
    }

    /// Why an `authorization` value does not allow `scope`, or nil. `unknown`: no usable
    /// token (authentication failed) rather than a token without the scope. Messages never
    /// repeat the token.
    func check(authorization: String?, needs scope: AuthScope, what: String) -> (unknown: Bool, message: String)? {
        guard let authorization, !authorization.isEmpty else {
            return (true, "\(what) needs a bearer token: send the metadata 'authorization: Bearer TOKEN' (the server checks tokens, --auth-tokens)")
        }
        // RFC 6750: the scheme is case-insensitive, one space, then the token.
        guard authorization.count > 7, authorization.prefix(7).lowercased() == "bearer " else {
            return (true, "the authorization metadata must be 'Bearer TOKEN'")
        }
        let token = authorization.dropFirst(7).drop(while: { $0 == " " })
        guard let scopes = lock.withLock({ tokens.scopes(of: token) }) else {
            return (true, "the bearer token is not known to this server")
        }
        guard scopes.contains(scope) else {
            return (false, "the bearer token lacks the '\(scope.rawValue)' scope that \(what) needs (it has: \(scopes.sorted().map(\.rawValue).joined(separator: ", ")))")
        }
        return nil
    }
}
