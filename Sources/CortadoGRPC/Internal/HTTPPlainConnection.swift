import CLibUV
import Foundation

/// A minimal HTTP/1.1 responder for GET requests (Prometheus scrapes, health checks by
/// curl): reads the request head, answers once, closes. Loop thread only.
final class HTTPPlainConnection {
    let tcp: UnsafeMutablePointer<uv_tcp_t>
    unowned let core: GRPCServerCore
    let handler: HTTPGetHandler
    var head: [UInt8] = []
    let buffer = UnsafeMutableRawPointer.allocate(byteCount: 4096, alignment: 16)
    var done = false

    init(tcp: UnsafeMutablePointer<uv_tcp_t>, core: GRPCServerCore, handler: @escaping HTTPGetHandler) {
        self.tcp = tcp
        self.core = core
        self.handler = handler
    }

    deinit {
        buffer.deallocate()
        tcp.deallocate()
    }

    static func accept(_ server: UnsafeMutablePointer<uv_stream_t>, loop: UnsafeMutablePointer<uv_loop_t>, core: GRPCServerCore, handler: @escaping HTTPGetHandler) {
        let tcp = UnsafeMutablePointer<uv_tcp_t>.allocate(capacity: 1)
        uv_tcp_init(loop, tcp)
        let stream = UnsafeMutableRawPointer(tcp).assumingMemoryBound(to: uv_stream_t.self)
        guard uv_accept(server, stream) == 0 else {
            uv_close(UnsafeMutableRawPointer(tcp).assumingMemoryBound(to: uv_handle_t.self)) { $0?.deallocate() }
            return
        }
        let connection = HTTPPlainConnection(tcp: tcp, core: core, handler: handler)
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
        guard !done else { return }
        head.append(contentsOf: UnsafeRawBufferPointer(start: buffer, count: count))
        guard let end = findHeadEnd() else {
            if head.count > 16 * 1024 { respond(431, "text/plain", Array("request head too large\n".utf8)) }
            return
        }
        let requestLine = String(decoding: head[..<end], as: UTF8.self).split(separator: "\r\n").first ?? ""
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
        let answer = handler(path)
        respond(answer.status, answer.contentType, parts[0] == "HEAD" ? [] : answer.body)
    }

    private func findHeadEnd() -> Int? {
        guard head.count >= 4 else { return nil }
        for i in 0...(head.count - 4) where head[i] == 13 && head[i + 1] == 10 && head[i + 2] == 13 && head[i + 3] == 10 {
            return i
        }
        return nil
    }

    private func respond(_ status: Int, _ contentType: String, _ body: [UInt8]) {
        done = true
        let reason = [200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 431: "Request Header Fields Too Large", 503: "Service Unavailable"][status] ?? "Status"
        var bytes = Array("HTTP/1.1 \(status) \(reason)\r\nContent-Type: \(contentType)\r\nContent-Length: \(body.count)\r\nConnection: close\r\n\r\n".utf8)
        bytes.append(contentsOf: body)
        let stream = UnsafeMutableRawPointer(tcp).assumingMemoryBound(to: uv_stream_t.self)
        guard UVWrite.send(bytes, on: stream) else {
            close()
            return
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
