import CLibUV
import Foundation

/// A minimal HTTP/1.1 responder for GET requests (Prometheus scrapes, health checks by
/// curl): reads the request head, answers once, closes. With TLS on, the same inside a
/// `TLSSession` (HTTPS). Loop thread only.
final class HTTPPlainConnection {
    let tcp: UnsafeMutablePointer<uv_tcp_t>
    unowned let core: GRPCServerCore
    let handler: HTTPGetHandler
    let tls: TLSSession?
    private var ciphertext: [UInt8] = []
    var head: [UInt8] = []
    let buffer = UnsafeMutableRawPointer.allocate(byteCount: 4096, alignment: 16)
    var done = false

    init(tcp: UnsafeMutablePointer<uv_tcp_t>, core: GRPCServerCore, handler: @escaping HTTPGetHandler, tls: TLSSession?) {
        self.tcp = tcp
        self.core = core
        self.handler = handler
        self.tls = tls
    }

    deinit {
        buffer.deallocate()
        tcp.deallocate()
    }

    static func accept(_ server: UnsafeMutablePointer<uv_stream_t>, loop: UnsafeMutablePointer<uv_loop_t>, core: GRPCServerCore, handler: @escaping HTTPGetHandler,
                       tls: TLSContext?) {
        let tcp = UnsafeMutablePointer<uv_tcp_t>.allocate(capacity: 1)
        uv_tcp_init(loop, tcp)
        let stream = UnsafeMutableRawPointer(tcp).assumingMemoryBound(to: uv_stream_t.self)
        guard uv_accept(server, stream) == 0 else {
            uv_close(UnsafeMutableRawPointer(tcp).assumingMemoryBound(to: uv_handle_t.self)) { $0?.deallocate() }
            return
        }
        var session: TLSSession?
        if let tls {
            session = tls.session(for: .http1)
            if session == nil {
                uv_close(UnsafeMutableRawPointer(tcp).assumingMemoryBound(to: uv_handle_t.self)) { $0?.deallocate() }
                return
            }
        }
        let connection = HTTPPlainConnection(tcp: tcp, core: core, handler: handler, tls: session)
        tcp.pointee.data = Unmanaged.passRetained(connection).toOpaque()
        core.plainConnections += 1
        uv_read_start(stream, { handle, _, buffer in
            guard let handle, let buffer, let data = handle.pointee.data else { return }
            let connection = Unmanaged<HTTPPlainConnection>.fromOpaque(data).takeUnretainedValue()
            buffer.pointee = uv_buf_init(connection.buffer.assumingMemoryBound(to: CChar.self), 4096)
        }, { stream, count, _ in
            guard let stream, let data = stream.pointee.data else { return }
            let connection = Unmanaged<HTTPPlainConnection>.fromOpaque(data).takeUnretainedValue()
            if count < 0 { connection.close(); return }
            connection.received(count)
        })
    }

    private func received(_ count: Int) {
        guard !done, !closing else { return }
        guard let tls else {
            take(UnsafeRawBufferPointer(start: buffer, count: count))
            return
        }
        switch tls.receive(UnsafeRawBufferPointer(start: buffer, count: count), scratch: buffer, capacity: 4096, { plain in
            take(plain)
            return !done
        }) {
        case .ok:
            if !done { writeCiphertext() }  // handshake messages
        case .closed, .failed:
            // A client that cannot complete the handshake gets OpenSSL's alert, then the close.
            writeCiphertext()
            close()
        }
    }

    /// Sends what TLS has for the socket; false when libuv refused it.
    @discardableResult
    private func writeCiphertext() -> Bool {
        guard let tls, tls.takeOutput(into: &ciphertext) else { return true }
        return send(ciphertext)
    }

    private func send(_ bytes: [UInt8]) -> Bool {
        UVWrite.send(bytes, on: UnsafeMutableRawPointer(tcp).assumingMemoryBound(to: uv_stream_t.self))
    }

    /// Plaintext of the request head.
    private func take(_ bytes: UnsafeRawBufferPointer) {
        guard !done else { return }
        head.append(contentsOf: bytes)
        guard let end = findHeadEnd() else {
            if head.count > 16 * 1024 { respond(431, "text/plain", Array("request head too large\n".utf8)) }
            return
        }
        let lines = String(decoding: head[..<end], as: UTF8.self).split(separator: "\r\n")
        let requestLine = lines.first ?? ""
        let parts = requestLine.split(separator: " ")
        guard parts.count >= 2 else {
            respond(400, "text/plain", Array("malformed request line\n".utf8))
            return
        }
        guard parts[0] == "GET" || parts[0] == "HEAD" else {
            respond(405, "text/plain", Array("only GET is served here\n".utf8))
            return
        }
        let path = String(parts[1].split(separator: "?", maxSplits: 1).first ?? "/")
        var headers: [(name: String, value: String)] = []
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers.append((line[..<colon].lowercased(), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)))
        }
        let answer = handler(HTTPGetRequest(path: path, headers: headers))
        respond(answer.status, answer.contentType, parts[0] == "HEAD" ? [] : answer.body, headers: answer.headers)
    }

    private func findHeadEnd() -> Int? {
        guard head.count >= 4 else { return nil }
        for i in 0...(head.count - 4) where head[i] == 13 && head[i + 1] == 10 && head[i + 2] == 13 && head[i + 3] == 10 {
            return i
        }
        return nil
    }

    private func respond(_ status: Int, _ contentType: String, _ body: [UInt8], headers: [(name: String, value: String)] = []) {
        done = true
        let reason = [200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed",
                      431: "Request Header Fields Too Large", 503: "Service Unavailable"][status] ?? "Status"
        var text = "HTTP/1.1 \(status) \(reason)\r\nContent-Type: \(contentType)\r\nContent-Length: \(body.count)\r\nConnection: close\r\n"
        for (name, value) in headers { text += "\(name): \(value)\r\n" }
        var bytes = Array((text + "\r\n").utf8)
        bytes.append(contentsOf: body)
        let stream = UnsafeMutableRawPointer(tcp).assumingMemoryBound(to: uv_stream_t.self)
        if let tls {
            let sent = bytes.withUnsafeBytes { tls.send($0) } == nil
            tls.shutdown()  // close_notify after the answer
            guard sent, writeCiphertext() else {
                close()
                return
            }
        } else {
            guard send(bytes) else {
                close()
                return
            }
        }
        let shutdown = UnsafeMutablePointer<uv_shutdown_t>.allocate(capacity: 1)
        shutdown.pointee.data = Unmanaged.passUnretained(self).toOpaque()
        if uv_shutdown(shutdown, stream, { request, _ in
            guard let request, let data = request.pointee.data else { return }
            let connection = Unmanaged<HTTPPlainConnection>.fromOpaque(data).takeUnretainedValue()
            request.deallocate()
            connection.close()
        }) != 0 {
            shutdown.deallocate()
            close()
        }
    }

    private var closing = false

    private func close() {
        guard !closing else { return }
        closing = true
        uv_read_stop(UnsafeMutableRawPointer(tcp).assumingMemoryBound(to: uv_stream_t.self))
        uv_close(UnsafeMutableRawPointer(tcp).assumingMemoryBound(to: uv_handle_t.self)) { handle in
            guard let handle, let data = handle.pointee.data else { return }
            let connection = Unmanaged<HTTPPlainConnection>.fromOpaque(data).takeRetainedValue()
            connection.core.plainConnections -= 1
        }
    }
}
