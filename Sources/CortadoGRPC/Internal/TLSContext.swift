import COpenSSL
import Foundation

/// The OpenSSL context new connections take their TLS sessions from, replaced whole by
/// `reload()`: a connection's `SSL` holds a reference to the context it was made from, so
/// connections open before a reload finish on the old certificate and new ones get the new.
final class TLSContext: @unchecked Sendable {
    let configuration: GRPCTLSConfiguration
    private let lock = NSLock()
    private var current: OpaquePointer
    private var loadedSummary: String
    /// What the certificate in use is (subject, expiry, fingerprint), for logs.
    var summary: String { lock.withLock { loadedSummary } }

    init(_ configuration: GRPCTLSConfiguration) throws(GRPCServerError) {
        self.configuration = configuration
        (current, loadedSummary) = try Self.make(configuration)
    }

    deinit { SSL_CTX_free(current) }

    /// Reads the files again. On failure the context in use stays, and the error says why.
    @discardableResult
    func reload() throws(GRPCServerError) -> String {
        let (fresh, summary) = try Self.make(configuration)
        let old = lock.withLock { () -> OpaquePointer in
            defer { current = fresh; loadedSummary = summary }
            return current
        }
        SSL_CTX_free(old)  // sessions made from it keep their own references
        return summary
    }

    /// A server-side session for one accepted connection; nil when OpenSSL cannot make one.
    func session(for application: TLSSession.Application) -> TLSSession? {
        lock.withLock { TLSSession(context: current, application: application) }
    }

    // MARK: building a context

    private static func make(_ configuration: GRPCTLSConfiguration) throws(GRPCServerError) -> (OpaquePointer, String) {
        ERR_clear_error()
        guard let ctx = SSL_CTX_new(TLS_server_method()) else { throw .tls("cannot create an OpenSSL context: \(TLSSession.errors())") }
        var done = false
        defer { if !done { SSL_CTX_free(ctx) } }
        // HTTP/2 over TLS needs TLS 1.2 or later, without compression or renegotiation, and
        // (for 1.2) an ephemeral key exchange with an AEAD cipher (RFC 9113 §9.2).
        _ = cortado_ssl_ctx_set_min_tls12(ctx)
        cortado_ssl_ctx_set_http2_options(ctx)
        guard SSL_CTX_set_cipher_list(ctx, "ECDHE+AESGCM:ECDHE+CHACHA20") == 1 else { throw .tls("cipher list: \(TLSSession.errors())") }
        // Idle connections give their 34 KiB of record buffers back.
        _ = cortado_ssl_ctx_set_mode(ctx, Int(SSL_MODE_RELEASE_BUFFERS))
        // An encrypted key would make OpenSSL prompt on the terminal (and a SIGHUP reload hang):
        // answer every passphrase prompt with nothing, so the load fails with a message instead.
        SSL_CTX_set_default_passwd_cb(ctx) { _, _, _, _ in 0 }
        // Resumed sessions are tied to this server; with client verification on, OpenSSL
        // refuses to resume without this id.
        _ = SSL_CTX_set_session_id_context(ctx, "cortado", 7)

        let cert = configuration.certificatePath, key = configuration.privateKeyPath
        guard FileManager.default.isReadableFile(atPath: cert) else { throw .tls("certificate \(cert) is missing or not readable (--tls-cert)") }
        guard FileManager.default.isReadableFile(atPath: key) else { throw .tls("private key \(key) is missing or not readable (--tls-key)") }
        guard SSL_CTX_use_certificate_chain_file(ctx, cert) == 1 else { throw .tls("certificate \(cert) (--tls-cert): \(TLSSession.errors())") }
        guard SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) == 1 else {
            let detail = TLSSession.errors()
            // OpenSSL checks the pair as it loads the key; say so plainly (a half-done rotation).
            if detail.contains("key values mismatch") { throw .tls("private key \(key) does not match certificate \(cert): \(detail)") }
            throw .tls("private key \(key) (--tls-key): \(detail)")
        }
        guard SSL_CTX_check_private_key(ctx) == 1 else { throw .tls("private key \(key) does not match certificate \(cert): \(TLSSession.errors())") }

        if let ca = configuration.clientCAPath {
            guard FileManager.default.isReadableFile(atPath: ca) else { throw .tls("client CA file \(ca) is missing or not readable (--tls-client-ca)") }
            guard SSL_CTX_load_verify_locations(ctx, ca, nil) == 1 else { throw .tls("client CA file \(ca) (--tls-client-ca): \(TLSSession.errors())") }
            // Tells clients which CAs are accepted, so one with several certificates picks right.
            guard let names = SSL_load_client_CA_file(ca) else { throw .tls("client CA file \(ca) holds no certificate (--tls-client-ca): \(TLSSession.errors())") }
            SSL_CTX_set_client_CA_list(ctx, names)
            SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nil)
        }
        SSL_CTX_set_alpn_select_cb(ctx, TLSSession.selectProtocol, nil)
        done = true
        return (ctx, describeCertificate(ctx))
    }

    /// Subject, expiry and SHA-256 fingerprint of a context's certificate.
    private static func describeCertificate(_ ctx: OpaquePointer) -> String {
        guard let x509 = SSL_CTX_get0_certificate(ctx) else { return "no certificate" }
        var parts: [String] = []
        if let name = X509_get_subject_name(x509), let text = X509_NAME_oneline(name, nil, 0) {
            parts.append("subject \(String(cString: text))")
            CRYPTO_free(text, #file, #line)
        }
        if let notAfter = X509_get0_notAfter(x509), let bio = BIO_new(BIO_s_mem()) {
            if ASN1_TIME_print(bio, notAfter) == 1 {
                var bytes = [UInt8](repeating: 0, count: 64)
                let n = BIO_read(bio, &bytes, Int32(bytes.count))
                if n > 0 { parts.append("expires \(String(decoding: bytes[..<Int(n)], as: UTF8.self))") }
            }
            BIO_free(bio)
        }
        var digest = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        if X509_digest(x509, EVP_sha256(), &digest, &length) == 1 {
            parts.append("sha256 " + digest[..<Int(length)].map { String(format: "%02X", $0) }.joined(separator: ":"))
        }
        return parts.joined(separator: ", ")
    }
}
