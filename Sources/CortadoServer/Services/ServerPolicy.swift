import CortadoGRPC

/// What a client may change on the server, as opposed to what it may ask. Loading models
/// (from the repository or from bytes sent over RPC) runs arbitrary model code paths on the
/// server's files, and shared memory maps memory a client names; both are off unless the
/// operator turns them on, as Triton's `--model-control-mode` and its shared-memory settings.
public struct ServerPolicy: Sendable {
    /// Who may load and unload models at run time.
    public enum ModelControl: String, Sendable, CaseIterable {
        /// The repository is loaded at start; Load, Unload and model bytes over RPC are refused.
        case none
        /// Clients load and unload (Predictor Load/Unload, RepositoryModelLoad/Unload).
        case explicit
        /// As `explicit`, and the server also reloads models whose files change on disk.
        case poll
    }

    public var modelControl: ModelControl = .none
    /// Whether clients may register system shared-memory regions.
    public var allowSharedMemory = false
    /// The start every registered shared-memory key must have (POSIX `shm_open` names).
    public var sharedMemoryPrefix = ServerPolicy.defaultSharedMemoryPrefix

    public static let defaultSharedMemoryPrefix = "/cortado"

    public init() {}

    /// PERMISSION_DENIED for a model-control call under `none`, naming the flag; nil when allowed.
    public func deniedModelControl(_ what: String) -> GRPCStatus? {
        guard modelControl == .none else { return nil }
        return GRPCStatus(.permissionDenied, "\(what) is turned off: model control is 'none'; start the server with --model-control explicit (or \"modelControl\": \"explicit\" in the config file) to allow it")
    }

    /// PERMISSION_DENIED for shared-memory registration when it is off; nil when allowed.
    public func deniedSharedMemory() -> GRPCStatus? {
        guard !allowSharedMemory else { return nil }
        return GRPCStatus(.permissionDenied, "shared-memory registration is turned off; start the server with --allow-shared-memory (or \"allowSharedMemory\": true in the config file) to allow it")
    }

    /// Why `key` may not be registered, or nil. A key must start with the prefix and name
    /// one object of `/dev/shm`: no ".." and no "/" after its first character, so a client
    /// can neither climb out of the folder nor reach another program's objects.
    public func keyProblem(_ key: String) -> String? {
        if key.isEmpty { return "an empty key" }
        if key.contains("..") { return "key '\(key)' contains '..'" }
        if key.dropFirst().contains("/") { return "key '\(key)' contains '/' after its first character" }
        if !key.hasPrefix(sharedMemoryPrefix) {
            return "key '\(key)' does not start with the allowed prefix '\(sharedMemoryPrefix)' (--shared-memory-prefix; '/' allows every key)"
        }
        return nil
    }
}
