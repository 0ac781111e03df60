import COpenSSL
import Foundation

/// One connection's TLS, between libuv and the protocol, as Node arranges it: OpenSSL never
/// touches the socket. Bytes libuv read go into a memory BIO that `SSL_read` decrypts from;
/// the protocol's output goes through `SSL_write` into another memory BIO, which the
/// connection drains into `uv_write`. So the loop stays the only thing doing I/O, and a
/// handshake is just more bytes in each direction. Loop thread only.
final class TLSSession {
    /// What the connection speaks inside TLS: which ALPN protocol to select.
    enum Application: Int {
        /// gRPC: `h2`, required.
        case http2 = 1
        /// The metrics port: `http/1.1` when offered; no client certificate.
        case http1 = 2
    }

    enum Outcome {
        /// Everything given was taken; more may come.
        case ok
        /// The peer ended TLS (close_notify).
        case closed
        /// The handshake or a record failed; why.
        case failed(String)
    }

    private let ssl: OpaquePointer
    /// Ciphertext from the socket (OpenSSL reads it) and for the socket (OpenSSL writes it).
    private let input: OpaquePointer
    private let output: OpaquePointer
    let application: Application
    private(set) var isEstablished = false

    init?(context: OpaquePointer, application: Application) {
        guard let ssl = SSL_new(context) else { return nil }
        guard let input = BIO_new(BIO_s_mem()), let output = BIO_new(BIO_s_mem()) else {
            SSL_free(ssl)
            return nil
        }
        cortado_bio_set_mem_eof_retry(input)
        cortado_bio_set_mem_eof_retry(output)
        SSL_set_bio(ssl, input, output)  // the SSL owns both BIOs from here
        SSL_set_accept_state(ssl)
        // The ALPN callback (one per context) reads the wanted protocol from here.
        _ = cortado_ssl_set_app_data(ssl, UnsafeMutableRawPointer(bitPattern: application.rawValue))
        if application == .http1 { SSL_set_verify(ssl, SSL_VERIFY_NONE, nil) }
        self.ssl = ssl
        self.input = input
        self.output = output
        self.application = application
    }

    deinit { SSL_free(ssl) }

    /// Takes ciphertext read from the socket and hands each piece of plaintext it yields to
    /// `plaintext` (a span of `scratch`, valid during the call; return false to stop).
    /// `bytes` may lie in `scratch`: they are copied into the BIO before anything is decrypted.
    func receive(_ bytes: UnsafeRawBufferPointer, scratch: UnsafeMutableRawPointer, capacity: Int,
                 _ plaintext: (UnsafeRawBufferPointer) -> Bool) -> Outcome {
        if bytes.count > 0 {
            // A memory BIO takes everything (it grows); what it holds is at most one read ahead.
            guard BIO_write(input, bytes.baseAddress, Int32(bytes.count)) == Int32(bytes.count) else {
                return .failed("cannot buffer \(bytes.count) bytes: \(Self.errors())")
            }
        }
        if !isEstablished {
            ERR_clear_error()
            let status = SSL_do_handshake(ssl)
            if status != 1 {
                let error = SSL_get_error(ssl, status)
                if error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE { return .ok }
                return .failed("handshake failed: \(Self.reason(error))")
            }
            isEstablished = true
            if application == .http2 && negotiatedProtocol != "h2" {
                // The client offered no ALPN at all (a client offering only other protocols
                // was refused in `selectProtocol`): gRPC over TLS must negotiate h2.
                return .failed("the client did not negotiate HTTP/2 with ALPN (h2)")
            }
        }
        while true {
            ERR_clear_error()
            let n = SSL_read(ssl, scratch, Int32(capacity))
            if n > 0 {
                if !plaintext(UnsafeRawBufferPointer(start: scratch, count: Int(n))) { return .ok }
                continue
            }
            let error = SSL_get_error(ssl, n)
            if error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE { return .ok }
            if error == SSL_ERROR_ZERO_RETURN { return .closed }
            return .failed(Self.reason(error))
        }
    }

    /// Encrypts `bytes` into the outgoing BIO (a memory BIO takes all of it at once).
    func send(_ bytes: UnsafeRawBufferPointer) -> String? {
        guard bytes.count > 0 else { return nil }
        ERR_clear_error()
        let n = SSL_write(ssl, bytes.baseAddress, Int32(bytes.count))
        return n == Int32(bytes.count) ? nil : "cannot encrypt \(bytes.count) bytes: \(Self.reason(SSL_get_error(ssl, n)))"
    }

    /// Moves the ciphertext waiting for the socket into `out` (replacing what it held); false
    /// when there is none.
    func takeOutput(into out: inout [UInt8]) -> Bool {
        let pending = Int(cortado_bio_pending(output))
        guard pending > 0 else { return false }
        out.removeAll(keepingCapacity: true)
        out.append(contentsOf: repeatElement(0, count: pending))
        let n = out.withUnsafeMutableBytes { BIO_read(output, $0.baseAddress, Int32(pending)) }
        if n < pending { out.removeLast(pending - max(0, Int(n))) }
        return !out.isEmpty
    }

    /// Queues close_notify (sent with the next `takeOutput`).
    func shutdown() {
        guard isEstablished else { return }
        ERR_clear_error()
        _ = SSL_shutdown(ssl)
    }

    /// The ALPN protocol selected in the handshake.
    var negotiatedProtocol: String? {
        var data: UnsafePointer<UInt8>?
        var length: UInt32 = 0
        SSL_get0_alpn_selected(ssl, &data, &length)
        guard let data, length > 0 else { return nil }
        return String(decoding: UnsafeBufferPointer(start: data, count: Int(length)), as: UTF8.self)
    }

    // MARK: ALPN

    /// Picks `h2` (gRPC port) or `http/1.1` (metrics port) from the client's list. A gRPC
    /// client that does not offer h2 gets the no_application_protocol alert; a metrics client
    /// that offers no http/1.1 goes on without ALPN (HTTP/1.1 is then implied).
    static let selectProtocol: @convention(c) (OpaquePointer?, UnsafeMutablePointer<UnsafePointer<UInt8>?>?, UnsafeMutablePointer<UInt8>?,
                                              UnsafePointer<UInt8>?, UInt32, UnsafeMutableRawPointer?) -> Int32 = { ssl, out, outLength, offered, offeredLength, _ in
        guard let ssl, let out, let outLength, let offered else { return SSL_TLSEXT_ERR_NOACK }
        let application = Application(rawValue: Int(bitPattern: cortado_ssl_get_app_data(ssl))) ?? .http2
        let wanted: [UInt8] = application == .http2 ? Array("h2".utf8) : Array("http/1.1".utf8)
        // The list is a sequence of length-prefixed names.
        var i = 0
        while i < Int(offeredLength) {
            let length = Int(offered[i])
            guard i + 1 + length <= Int(offeredLength) else { break }
            if length == wanted.count && (0..<length).allSatisfy({ offered[i + 1 + $0] == wanted[$0] }) {
                out.pointee = offered + i + 1
                outLength.pointee = UInt8(length)
                return SSL_TLSEXT_ERR_OK
            }
            i += 1 + length
        }
        return application == .http2 ? SSL_TLSEXT_ERR_ALERT_FATAL : SSL_TLSEXT_ERR_NOACK
    }

    // MARK: errors

    /// Why an operation failed, from `SSL_get_error` and the thread's error queue.
    private static func reason(_ error: Int32) -> String {
        switch error {
        case SSL_ERROR_SSL: return errors()
        case SSL_ERROR_SYSCALL: return "unexpected end of the TLS stream \(errors())"
        default: return "OpenSSL error \(error) \(errors())"
        }
    }

    /// The thread's OpenSSL error queue as text (and emptied).
    static func errors() -> String {
        var messages: [String] = []
        while true {
            let code = ERR_get_error()
            if code == 0 { break }
            var buffer = [CChar](repeating: 0, count: 256)
            ERR_error_string_n(code, &buffer, buffer.count)
            messages.append(buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) })
        }
        return messages.isEmpty ? "(no OpenSSL detail)" : messages.joined(separator: "; ")
    }
}
