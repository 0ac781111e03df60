/// Custom metadata: the request headers (or response headers and trailers) that are not the
/// protocol's own, as (name, value) pairs in arrival order. Names are lower-case ASCII.
/// Binary values (`-bin` names) travel base64-encoded; Cortado passes them through as text.
public enum GRPCMetadata {
    /// Headers the gRPC protocol (or HTTP/2) sets itself: a caller's metadata may not carry them.
    public static let reservedNames: Set<String> = [
        "content-type", "te", "grpc-timeout", "grpc-encoding", "grpc-accept-encoding",
        "grpc-status", "grpc-message", "grpc-status-details-bin", "user-agent", "connection",
        "host", "transfer-encoding", "keep-alive", "upgrade",
    ]

    /// Whether `name` may be sent as custom metadata: lower-case letters, digits, `-`, `_`
    /// and `.`, not a pseudo-header and not one of `reservedNames`.
    public static func isValidCustomName(_ name: String) -> Bool {
        guard !name.isEmpty, !reservedNames.contains(name) else { return false }
        return name.utf8.allSatisfy { byte in
            (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z")) || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9"))
                || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_") || byte == UInt8(ascii: ".")
        }
    }

    /// The first value of `name` in `metadata`.
    public static func value(_ name: String, in metadata: [(name: String, value: String)]) -> String? {
        metadata.first(where: { $0.name == name })?.value
    }
}
