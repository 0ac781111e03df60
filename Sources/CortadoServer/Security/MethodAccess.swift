import CortadoGRPC

/// Who may call a method when the server checks tokens (`--auth-tokens`).
public enum MethodAccess: Sendable, Equatable {
    /// Anyone, without a token: probes (health, liveness, readiness) must work without one.
    case open
    /// A token holding this scope.
    case scope(AuthScope)
}

/// A service that says, for each of its methods, what a caller needs. The mapping lives
/// with the service, beside the methods it describes; the transport only asks the answer.
/// A method missing from `access` needs the `admin` scope: a method added without thinking
/// about access is closed, not open.
public protocol ScopedService: GRPCService {
    /// Method name (unary or message stream) to what it needs.
    var access: [String: MethodAccess] { get }
}
