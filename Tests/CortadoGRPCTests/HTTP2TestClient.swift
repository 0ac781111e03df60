import CNGHTTP2
import CortadoGRPC
import Foundation
#if canImport(Glibc)
import Glibc
#endif

struct HTTP2TestError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// A wire-level gRPC client for loopback tests, for what the shared client layers
/// (`SharedClientCall`) never send or hide: malformed bodies and headers, the header blocks
/// as they came (trailers-only answers, percent-encoding), GOAWAY and the server's close.
/// HTTP/2 with prior knowledge over a blocking POSIX socket, frames through nghttp2's client session. Single-threaded; every wait is
/// bounded by a deadline so a broken server fails a test instead of hanging it.
final class HTTP2TestClient {
    /// What came back on one stream.
    struct Response {
        /// Each HEADERS block in order: the response headers, then the trailers (if any).
        var headerBlocks: [[(name: String, value: String)]] = []
        var data: [UInt8] = []
        var closed = false
        var errorCode: UInt32 = 0

        var headers: [(name: String, value: String)] { headerBlocks.first ?? [] }
        var trailers: [(name: String, value: String)] { headerBlocks.count > 1 ? headerBlocks.last! : [] }
        /// Only one HEADERS block and no DATA: gRPC's trailers-only answer.
        var isTrailersOnly: Bool { headerBlocks.count == 1 && data.isEmpty }

        /// A header from any block (the status is in the trailers, or the only block).
        func value(_ name: String) -> String? { headerBlocks.reversed().joined().first { $0.name == name }?.value }
        var grpcStatus: Int? { value("grpc-status").flatMap { Int($0) } }
        /// `grpc-message` as it was on the wire (percent-encoded).
        var rawGRPCMessage: String? { value("grpc-message") }
        var grpcMessage: String? { rawGRPCMessage.map(GRPCStatus.percentDecode) }

        /// The length-prefixed messages of the body.
        func messages() throws -> [[UInt8]] {
            var reader = GRPCMessageReader(maxMessageSize: 1 << 26)
            try reader.append(data)
            guard !reader.hasPartialMessage else { throw HTTP2TestError("response body ends inside a message") }
            return reader.messages
        }
    }

    let port: Int
    private let fd: Int32
    private var session: OpaquePointer?
    private(set) var responses: [Int32: Response] = [:]
    private var bodies: [Int32: (bytes: [UInt8], offset: Int)] = [:]
    private(set) var goAwayReceived = false
    private(set) var peerClosed = false
    private let buffer = UnsafeMutableRawPointer.allocate(byteCount: 64 * 1024, alignment: 16)

    init(port: Int) throws {
        self.port = port
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw HTTP2TestError("socket: errno \(errno)") }
        // Bound blocking writes; reads go through poll with a deadline.
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            let e = errno
            Glibc.close(fd)  // deinit frees the buffer (every stored property is set)
            throw HTTP2TestError("connect to 127.0.0.1:\(port): \(String(cString: strerror(e)))")
        }

        var callbacks: OpaquePointer?
        nghttp2_session_callbacks_new(&callbacks)
        defer { nghttp2_session_callbacks_del(callbacks) }
        nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, Self.beginHeaders)
        nghttp2_session_callbacks_set_on_header_callback(callbacks, Self.header)
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, Self.dataChunk)
        nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, Self.frameReceived)
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, Self.streamClosed)
        nghttp2_session_client_new(&session, callbacks, Unmanaged.passUnretained(self).toOpaque())
        var settings = [nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS.rawValue), value: 100)]
        nghttp2_submit_settings(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), &settings, settings.count)
    }

    deinit {
        close()
        buffer.deallocate()
    }

    func close() {
        if let session {
            nghttp2_session_del(session)
            self.session = nil
            Glibc.close(fd)
        }
    }

    // MARK: calls

    /// Submits a unary call; `body` replaces the framed `message` (for malformed requests).
    @discardableResult
    func startCall(path: String, message: [UInt8] = [], body: [UInt8]? = nil, metadata: [(String, String)] = []) throws -> Int32 {
        guard let session else { throw HTTP2TestError("client is closed") }
        let headers = [(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", "127.0.0.1:\(port)"),
                       ("content-type", "application/grpc"), ("te", "trailers")] + metadata
        var provider = nghttp2_data_provider()
        provider.read_callback = Self.readBody
        let id = Self.withHeaders(headers) { nva, count in nghttp2_submit_request(session, nil, nva, count, &provider, nil) }
        guard id > 0 else { throw HTTP2TestError("nghttp2_submit_request: \(String(cString: nghttp2_strerror(id)))") }
        bodies[id] = (body ?? GRPCMessageWriter.frame(message), 0)
        responses[id] = Response()
        return id
    }

    /// One call, start to finish.
    func call(path: String, message: [UInt8] = [], body: [UInt8]? = nil, metadata: [(String, String)] = [], timeout: Double = 5) throws -> Response {
        let id = try startCall(path: path, message: message, body: body, metadata: metadata)
        try pump(timeout: timeout) { self.responses[id]?.closed == true }
        return responses[id]!
    }

    // MARK: I/O

    /// Sends and receives until `done` holds; throws at the deadline or when the server
    /// closes the connection first.
    func pump(timeout: Double, until done: () -> Bool) throws {
        let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(timeout * 1e9)
        while true {
            try send()
            if done() { return }
            if peerClosed { throw HTTP2TestError("the server closed the connection") }
            let now = DispatchTime.now().uptimeNanoseconds
            guard now < deadline else { throw HTTP2TestError("timed out after \(timeout) s") }
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&p, 1, Int32(min(50, (deadline - now) / 1_000_000 + 1)))
            if ready > 0 { try receive() }
        }
    }

    /// Reads until the server closes the connection (after a GOAWAY), bounded.
    func waitForClose(timeout: Double) throws {
        do { try pump(timeout: timeout) { self.peerClosed } } catch let error as HTTP2TestError where peerClosed { _ = error }
    }

    private func send() throws {
        guard let session else { throw HTTP2TestError("client is closed") }
        while true {
            var chunk: UnsafePointer<UInt8>?
            let n = nghttp2_session_mem_send(session, &chunk)
            if n < 0 { throw HTTP2TestError("nghttp2_session_mem_send: \(String(cString: nghttp2_strerror(Int32(n))))") }
            if n == 0 { return }
            var sent = 0
            while sent < n {
                let w = Glibc.send(fd, chunk! + sent, n - sent, Int32(MSG_NOSIGNAL))
                if w < 0 {
                    if errno == EINTR { continue }
                    if errno == EPIPE || errno == ECONNRESET { peerClosed = true; return }
                    throw HTTP2TestError("send: \(String(cString: strerror(errno)))")
                }
                sent += w
            }
        }
    }

    private func receive() throws {
        guard let session else { throw HTTP2TestError("client is closed") }
        let n = recv(fd, buffer, 64 * 1024, 0)
        if n == 0 || (n < 0 && errno == ECONNRESET) { peerClosed = true; return }
        if n < 0 {
            if errno == EINTR || errno == EAGAIN { return }
            throw HTTP2TestError("recv: \(String(cString: strerror(errno)))")
        }
        let consumed = nghttp2_session_mem_recv(session, buffer.assumingMemoryBound(to: UInt8.self), n)
        if consumed < 0 { throw HTTP2TestError("nghttp2_session_mem_recv: \(String(cString: nghttp2_strerror(Int32(consumed))))") }
    }

    // MARK: nghttp2 callbacks

    private static func client(_ userData: UnsafeMutableRawPointer?) -> HTTP2TestClient {
        Unmanaged<HTTP2TestClient>.fromOpaque(userData!).takeUnretainedValue()
    }

    private static let beginHeaders: nghttp2_on_begin_headers_callback = { _, frame, userData in
        guard let frame, frame.pointee.hd.type == UInt8(NGHTTP2_HEADERS.rawValue) else { return 0 }
        client(userData).responses[frame.pointee.hd.stream_id]?.headerBlocks.append([])
        return 0
    }

    private static let header: nghttp2_on_header_callback = { _, frame, name, nameLength, value, valueLength, _, userData in
        guard let frame, let name, let value, frame.pointee.hd.type == UInt8(NGHTTP2_HEADERS.rawValue) else { return 0 }
        let c = client(userData)
        let id = frame.pointee.hd.stream_id
        guard c.responses[id] != nil, !(c.responses[id]!.headerBlocks.isEmpty) else { return 0 }
        let pair = (String(decoding: UnsafeBufferPointer(start: name, count: nameLength), as: UTF8.self),
                    String(decoding: UnsafeBufferPointer(start: value, count: valueLength), as: UTF8.self))
        let last = c.responses[id]!.headerBlocks.count - 1
        c.responses[id]!.headerBlocks[last].append(pair)
        return 0
    }

    private static let dataChunk: nghttp2_on_data_chunk_recv_callback = { _, _, streamID, data, length, userData in
        guard let data else { return 0 }
        client(userData).responses[streamID]?.data.append(contentsOf: UnsafeBufferPointer(start: data, count: length))
        return 0
    }

    private static let frameReceived: nghttp2_on_frame_recv_callback = { _, frame, userData in
        if let frame, frame.pointee.hd.type == UInt8(NGHTTP2_GOAWAY.rawValue) { client(userData).goAwayReceived = true }
        return 0
    }

    private static let streamClosed: nghttp2_on_stream_close_callback = { _, streamID, errorCode, userData in
        let c = client(userData)
        c.responses[streamID]?.closed = true
        c.responses[streamID]?.errorCode = errorCode
        c.bodies[streamID] = nil
        return 0
    }

    private static let readBody: nghttp2_data_source_read_callback = { _, streamID, buffer, length, flags, _, userData in
        let c = client(userData)
        guard let buffer, let flags, var body = c.bodies[streamID] else { return Int(NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE.rawValue) }
        let n = min(length, body.bytes.count - body.offset)
        if n > 0 {
            body.bytes.withUnsafeBufferPointer { buffer.update(from: $0.baseAddress! + body.offset, count: n) }
            body.offset += n
        }
        if body.offset == body.bytes.count { flags.pointee |= NGHTTP2_DATA_FLAG_EOF.rawValue }
        c.bodies[streamID] = body
        return n
    }

    private static func withHeaders<R>(_ headers: [(String, String)], _ body: (UnsafePointer<nghttp2_nv>, Int) -> R) -> R {
        var storage: [UInt8] = []
        var spans: [(Int, Int, Int, Int)] = []
        for (name, value) in headers {
            let n = storage.count
            storage.append(contentsOf: name.utf8)
            let v = storage.count
            storage.append(contentsOf: value.utf8)
            spans.append((n, name.utf8.count, v, value.utf8.count))
        }
        return storage.withUnsafeMutableBufferPointer { raw in
            let base = raw.baseAddress!
            let nva = spans.map {
                nghttp2_nv(name: base + $0.0, value: base + $0.2, namelen: $0.1, valuelen: $0.3, flags: UInt8(NGHTTP2_NV_FLAG_NONE.rawValue))
            }
            return nva.withUnsafeBufferPointer { body($0.baseAddress!, $0.count) }
        }
    }
}
