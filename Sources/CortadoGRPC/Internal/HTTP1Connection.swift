import CHTTPParser
import CLibUV
import Foundation

/// One connection of the HTTP/1.1 port: http-parser reads requests off the socket, each
/// complete request goes to the handler, and the answers are written in the order the
/// requests came, whatever order the workers finish in (pipelining).
///
/// What a client can make it hold is bounded: the request head (`maxRequestHeaderSize`), a
/// body (`maxReceiveMessageSize`), the bodies of the requests read and not yet answered
/// (the connection's buffer budget, whose parent is the server's), and their number
/// (`maxPipelinedRequests`: past it, reading pauses until answers go out). A request the
/// transport refuses is answered in its turn and the connection then closes, because the
/// rest of what the client sent cannot be told apart from the refused body. Loop thread only.
final class HTTP1Connection {
    unowned let core: GRPCServerCore
    let tcp: UnsafeMutablePointer<uv_tcp_t>
    let readBuffer: UnsafeMutableRawPointer
    static let readBufferSize = 64 * 1024
    let peer: String
    let peerHost: String
    private let service: HTTPService
    private let parser: UnsafeMutablePointer<http_parser>
    private let settings: UnsafeMutablePointer<http_parser_settings>
    private let budget: GRPCBufferBudget
    private let maxBody: Int
    private let maxHead: Int

    // The request being read.
    private var url: [UInt8] = []
    private var fields: [(name: String, value: String)] = []
    private var field: [UInt8] = []
    private var value: [UInt8] = []
    private var inValue = false
    private var headBytes = 0
    private var body: [UInt8] = []
    private var bodyReserved = 0
    /// Why the transport refuses the request being read (set by a callback that then fails
    /// the parse).
    private var refusal: (status: Int, message: String)?

    /// Requests read and not yet written, in arrival order.
    private var pending: [HTTPServerRequest] = []
    /// Since when a request head (or a new connection's first request) is owed; nil when none.
    private(set) var waitingSince: UInt64? = DispatchTime.now().uptimeNanoseconds
    /// Since when the connection has been closing gently (its last answer written, the rest
    /// of the client's bytes read and dropped until it closes); nil when not.
    private(set) var lingeringSince: UInt64?
    /// No more requests are read: the client asked to close, a request was refused, or the
    /// server drains. What arrives is dropped.
    private var finished = false
    /// Parsing paused (too many requests waiting for answers): the bytes not yet parsed.
    private var paused = false
    private var leftover: [UInt8] = []
    private(set) var closing = false
    /// The client sent EOF: nothing to wait for once the last answer is written.
    private var peerClosed = false

    init(core: GRPCServerCore, tcp: UnsafeMutablePointer<uv_tcp_t>, service: HTTPService) {
        self.core = core
        self.tcp = tcp
        self.service = service
        readBuffer = .allocate(byteCount: Self.readBufferSize, alignment: 16)
        let peer = HTTP2Connection.peerName(tcp)
        self.peer = peer
        peerHost = peer.lastIndex(of: ":").map { String(peer[..<$0]) } ?? peer
        let configuration = core.configuration
        budget = GRPCBufferBudget(limit: configuration.maxConnectionBuffer, parent: core.buffers)
        maxBody = configuration.maxReceiveMessageSize
        maxHead = configuration.maxRequestHeaderSize
        parser = .allocate(capacity: 1)
        http_parser_init(parser, HTTP_REQUEST)
        settings = .allocate(capacity: 1)
        http_parser_settings_init(settings)
        Self.install(settings)
        parser.pointee.data = Unmanaged.passUnretained(self).toOpaque()
    }

    deinit {
        readBuffer.deallocate()
        parser.deallocate()
        settings.deallocate()
        tcp.deallocate()
    }

    private var stream: UnsafeMutablePointer<uv_stream_t> { UnsafeMutableRawPointer(tcp).assumingMemoryBound(to: uv_stream_t.self) }

    // MARK: reading

    func received(_ bytes: UnsafeRawBufferPointer) {
        guard !finished, !closing else { return }
        if paused {
            leftover.append(contentsOf: bytes)
            return
        }
        parse(bytes)
    }

    private func parse(_ bytes: UnsafeRawBufferPointer) {
        guard bytes.count > 0 else { return }
        let base = bytes.baseAddress!.assumingMemoryBound(to: CChar.self)
        let parsed = http_parser_execute(parser, settings, base, bytes.count)
        let error = cortado_http_errno(parser)
        if error == HPE_PAUSED.rawValue {
            // Paused by `messageComplete`: the rest waits for answers (or is dropped when finished).
            if !finished && parsed < bytes.count { leftover.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[parsed...])) }
            if !finished { stopReading() }
        } else if error != HPE_OK.rawValue {
            let (status, message) = refusal ?? (error == HPE_HEADER_OVERFLOW.rawValue ? 431 : 400,
                                                "malformed HTTP/1.1 request: \(String(cString: http_errno_description(http_errno(rawValue: error))))")
            refuse(status, message)
        } else if cortado_http_upgrade(parser) != 0 {
            // What follows an Upgrade request is not HTTP/1.1: answer it, then close.
            pending.last?.closeAfter = true
            finish()
        }
    }

    /// Parses what was held back while paused, then reads again.
    private func resume() {
        guard paused, !finished, !closing else { return }
        paused = false
        http_parser_pause(parser, 0)
        let held = leftover
        leftover = []
        held.withUnsafeBytes { parse($0) }
        if !paused && !finished && !closing { startReading() }
    }

    private func stopReading() {
        paused = true
        uv_read_stop(stream)
    }

    func startReading() {
        uv_read_start(stream, { handle, _, buffer in
            guard let handle, let buffer, let data = handle.pointee.data else { return }
            let connection = Unmanaged<HTTP1Connection>.fromOpaque(data).takeUnretainedValue()
            buffer.pointee = uv_buf_init(connection.readBuffer.assumingMemoryBound(to: CChar.self), UInt32(HTTP1Connection.readBufferSize))
        }, { stream, count, _ in
            guard let stream, let data = stream.pointee.data else { return }
            let connection = Unmanaged<HTTP1Connection>.fromOpaque(data).takeUnretainedValue()
            if count == Int(UV_EOF.rawValue) {
                connection.peerFinished()
            } else if count < 0 {
                connection.close()  // a socket error: the client is gone.
            } else if count > 0 {
                connection.received(UnsafeRawBufferPointer(start: connection.readBuffer, count: count))
            }
        })
    }

    /// The client will send nothing more. A client may half-close after its last request and
    /// still read: the requests it sent are answered, then the connection closes.
    func peerFinished() {
        peerClosed = true
        guard !pending.isEmpty, lingeringSince == nil else { return close() }
        finished = true
        paused = false
        leftover = []
        uv_read_stop(stream)
        pending.last!.closeAfter = true
    }

    /// No more requests: what was read is answered, the rest dropped.
    private func finish() {
        finished = true
        leftover = []
        if paused {
            paused = false
            startReading()  // to see the client's EOF while the answers are written
        }
    }

    /// Answers the request being read with `status` in its turn, then closes.
    private func refuse(_ status: Int, _ message: String) {
        budget.release(bodyReserved)
        bodyReserved = 0
        body = []
        waitingSince = nil
        let request = HTTPServerRequest(method: "", path: "", query: "", headers: [], body: [], completion: core)
        request.response = service.refusal(status, message)
        request.closeAfter = true
        core.event(.protocolError(peer: peer, message: "HTTP/1.1 request refused (\(status)): \(message)"))
        pending.append(request)
        finish()
        flush()
    }

    // MARK: parser callbacks

    private func begin() {
        url.removeAll(keepingCapacity: true)
        fields = []
        field.removeAll(keepingCapacity: true)
        value.removeAll(keepingCapacity: true)
        inValue = false
        headBytes = 0
        body = []
        bodyReserved = 0
        refusal = nil
        if waitingSince == nil { waitingSince = DispatchTime.now().uptimeNanoseconds }
    }

    /// Counts head bytes; false (and a 431 refusal) past the limit.
    private func head(_ count: Int) -> Bool {
        headBytes += count
        guard headBytes <= maxHead else {
            refusal = (431, "the request head is larger than \(maxHead) bytes")
            return false
        }
        return true
    }

    private func endField() {
        guard inValue || !field.isEmpty else { return }
        fields.append((String(decoding: field, as: UTF8.self).lowercased(), String(decoding: value, as: UTF8.self)))
        field.removeAll(keepingCapacity: true)
        value.removeAll(keepingCapacity: true)
        inValue = false
    }

    /// 0 to read the body, anything else refuses the request (`refusal` says why).
    private func headersComplete() -> Int32 {
        endField()
        waitingSince = nil
        let length = parser.pointee.content_length
        let chunked = parser.pointee.flags & UInt32(F_CHUNKED.rawValue) != 0
        if !chunked && length != UInt64.max && length > 0 {
            guard length <= UInt64(maxBody) else {
                refusal = (413, "the request body of \(length) bytes is larger than the limit of \(maxBody) bytes (--max-message-size)")
                return 3
            }
            guard reserve(Int(length)) else { return 3 }
            body.reserveCapacity(Int(length))
        }
        if pending.isEmpty, fields.contains(where: { $0.name == "expect" && $0.value.lowercased() == "100-continue" }) {
            // Only with nothing unanswered before it: a 100 must not overtake earlier answers
            // (a client that waited in vain sends the body after its own timeout).
            _ = UVWrite.send(Array("HTTP/1.1 100 Continue\r\n\r\n".utf8), on: stream)
        }
        return 0
    }

    /// Takes `bytes` of the connection's (and the server's) budget; false with a refusal when short.
    private func reserve(_ bytes: Int) -> Bool {
        if let short = budget.reserve(bytes) {
            refusal = short === budget
                ? (429, "this connection's requests already hold \(budget.used) bytes awaiting answers (--max-connection-buffer \(budget.limit)); wait for the answers")
                : (503, "the server holds too many request bytes (--max-process-buffer); retry later")
            return false
        }
        bodyReserved += bytes
        return true
    }

    private func bodyData(_ bytes: UnsafeRawBufferPointer) -> Int32 {
        guard body.count + bytes.count <= maxBody else {
            refusal = (413, "the request body is larger than the limit of \(maxBody) bytes (--max-message-size)")
            return 1
        }
        // A chunked body is reserved as it arrives.
        if body.count + bytes.count > bodyReserved {
            guard reserve(body.count + bytes.count - bodyReserved) else { return 1 }
        }
        body.append(contentsOf: bytes)
        return 0
    }

    private func messageComplete() -> Int32 {
        let target = String(decoding: url, as: UTF8.self)
        var path = Substring(target)
        // The absolute form (a proxy's): the path starts after the authority.
        if let scheme = path.range(of: "://") { path = path[scheme.upperBound...].drop(while: { $0 != "/" }) }
        var query = Substring("")
        if let mark = path.firstIndex(of: "?") {
            query = path[path.index(after: mark)...]
            path = path[..<mark]
        }
        let method = String(cString: http_method_str(http_method(rawValue: cortado_http_method(parser))))
        let request = HTTPServerRequest(method: method, path: path.isEmpty ? "/" : String(path), query: String(query), headers: fields, body: body, completion: core)
        let keepAlive = http_should_keep_alive(parser) != 0
        request.closeAfter = !keepAlive
        request.keepAlive10 = keepAlive && parser.pointee.http_major == 1 && parser.pointee.http_minor == 0
        request.reserved = bodyReserved
        request.connection = self
        body = []
        bodyReserved = 0
        pending.append(request)
        core.httpRequestStarted()
        service.handler(request)
        if !keepAlive {
            finished = true
            http_parser_pause(parser, 1)
        } else if pending.count >= core.configuration.maxPipelinedRequests {
            http_parser_pause(parser, 1)
        }
        return 0
    }

    /// The callbacks, C functions that find their connection through `parser.data`.
    private static func install(_ s: UnsafeMutablePointer<http_parser_settings>) {
        func connection(_ p: UnsafeMutablePointer<http_parser>?) -> HTTP1Connection {
            Unmanaged<HTTP1Connection>.fromOpaque(p!.pointee.data).takeUnretainedValue()
        }
        s.pointee.on_message_begin = { p in
            connection(p).begin()
            return 0
        }
        s.pointee.on_url = { p, at, length in
            let c = connection(p)
            guard c.head(length) else { return 1 }
            c.url.append(contentsOf: UnsafeRawBufferPointer(start: at, count: length))
            return 0
        }
        s.pointee.on_header_field = { p, at, length in
            let c = connection(p)
            guard c.head(length) else { return 1 }
            if c.inValue { c.endField() }
            c.field.append(contentsOf: UnsafeRawBufferPointer(start: at, count: length))
            return 0
        }
        s.pointee.on_header_value = { p, at, length in
            let c = connection(p)
            guard c.head(length) else { return 1 }
            c.inValue = true
            c.value.append(contentsOf: UnsafeRawBufferPointer(start: at, count: length))
            return 0
        }
        s.pointee.on_headers_complete = { p in connection(p).headersComplete() }
        s.pointee.on_body = { p, at, length in connection(p).bodyData(UnsafeRawBufferPointer(start: at, count: length)) }
        s.pointee.on_message_complete = { p in connection(p).messageComplete() }
    }

    // MARK: answering

    /// A request's answer arrived (from `GRPCServerCore.wakeUp`): writes every answer that is
    /// next in line.
    func answered(_ request: HTTPServerRequest, _ response: HTTPServerResponse) {
        request.response = response
        flush()
    }

    private func flush() {
        while !closing, let first = pending.first, let response = first.response {
            pending.removeFirst()
            first.connection = nil
            budget.release(first.reserved)
            // While draining, the last answer read closes the connection.
            let close = first.closeAfter || (core.isDraining && pending.isEmpty)
            write(response, last: close, keepAlive10: first.keepAlive10)
            if close {
                closeAfterWrites()
                return
            }
        }
        if paused && pending.count < core.configuration.maxPipelinedRequests { resume() }
    }

    private func write(_ response: HTTPServerResponse, last: Bool, keepAlive10: Bool) {
        var head = "HTTP/1.1 \(response.status) \(HTTPServerResponse.reason(response.status))\r\n"
        for (name, value) in response.headers { head += "\(name): \(value)\r\n" }
        head += "Content-Length: \(response.body.count)\r\n"
        if last { head += "Connection: close\r\n" } else if keepAlive10 { head += "Connection: keep-alive\r\n" }
        head += "\r\n"
        var bytes = Array(head.utf8)
        bytes.append(contentsOf: response.body)
        if !UVWrite.send(bytes, on: stream) { close() }
    }

    /// The last answer is queued: send FIN once it is written, and read (dropping) until the
    /// client closes, so that bytes it still sends do not make the kernel reset the connection
    /// before the client has read the answer.
    private func closeAfterWrites() {
        finish()
        guard lingeringSince == nil, !closing else { return }
        lingeringSince = DispatchTime.now().uptimeNanoseconds
        let request = UnsafeMutablePointer<uv_shutdown_t>.allocate(capacity: 1)
        request.pointee.data = Unmanaged.passUnretained(self).toOpaque()
        if uv_shutdown(request, stream, { request, _ in
            guard let request else { return }
            // The handle holds the connection until its close callback, which runs after this one.
            let connection = request.pointee.data.map { Unmanaged<HTTP1Connection>.fromOpaque($0).takeUnretainedValue() }
            request.deallocate()
            if let connection, connection.peerClosed { connection.close() }
        }) != 0 {
            request.deallocate()
            close()
        }
    }

    /// The server drains: requests already read are answered, then the connection closes.
    func drain() {
        finish()
        if pending.isEmpty { close() }
    }

    func close() {
        guard !closing else { return }
        closing = true
        for request in pending {
            request.cancel()
            request.connection = nil
            budget.release(request.reserved)
        }
        pending = []
        budget.release(bodyReserved)
        bodyReserved = 0
        core.httpConnectionClosing(self)
        uv_read_stop(stream)
        uv_close(UnsafeMutableRawPointer(tcp).assumingMemoryBound(to: uv_handle_t.self)) { handle in
            guard let handle, let data = handle.pointee.data else { return }
            let connection = Unmanaged<HTTP1Connection>.fromOpaque(data).takeRetainedValue()
            connection.core.httpConnectionClosed(connection)
        }
    }
}
