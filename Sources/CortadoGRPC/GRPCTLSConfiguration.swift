/// TLS for a `GRPCServer`'s ports: PEM files read at start and again on `reloadTLS()`.
///
/// The gRPC port negotiates HTTP/2 with ALPN (`h2`); a client that offers other protocols
/// only is refused during the handshake, and one that offers none after it (RFC 9113 §3.2).
/// The metrics port serves HTTPS with the same certificate, but never asks for a client
/// certificate: probes (a kubelet's HTTPS `httpGet`) cannot present one.
public struct GRPCTLSConfiguration: Sendable, Equatable {
    /// The server's certificate, followed by any intermediates (PEM).
    public var certificatePath: String
    /// The certificate's private key (PEM, unencrypted: a reload cannot ask for a passphrase).
    public var privateKeyPath: String
    /// CA certificates (PEM) that client certificates must chain to. When set, the gRPC port
    /// requires and verifies a client certificate (mutual TLS); nil: no client certificate.
    public var clientCAPath: String?

    public init(certificatePath: String, privateKeyPath: String, clientCAPath: String? = nil) {
        self.certificatePath = certificatePath
        self.privateKeyPath = privateKeyPath
        self.clientCAPath = clientCAPath
    }
}
