import CLibUV
import CNGHTTP2
import CortadoGRPCCore
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A unary call as the client holds it before and between attempts: what to send, when it
/// started, when it gives up, and whether it was already sent again once.
struct HTTP2ClientCall {
    var token: Int
    var startNanos: UInt64
    var deadline: UInt64
    var template: HTTP2RequestTemplate
    var collect: Bool
    /// Waits (until its deadline) through failed connects instead of failing with the first.
    var waitForReady: Bool
    /// Already refused once (REFUSED_STREAM) and sent again; a second refusal fails it.
    var retried = false
}

/// One TCP connection and its nghttp2 client session (h2c, prior knowledge). Calls share it
/// as concurrent streams; calls beyond the server's MAX_CONCURRENT_STREAMS wait inside
/// nghttp2. Its `HTTP2ClientConnection` decides what happens when it fails, ends or goes away.
final class HTTP2ClientSession {
    unowned let channel: HTTP2ClientConnection

    /// Idle until the channel's next flush connects it (never from inside a callback).
    enum State { case idle, connecting, connected, closed }
    private(set) var state: State = .idle
    /// The server's SETTINGS arrived: an HTTP/2 server answered. A session that ends before
    /// that counts as a failed connect, and its calls were never read by a server.
    private(set) var ready = false
    /// A GOAWAY arrived: no new streams; the ones at or below its last stream id finish here.
    private(set) var goingAway = false
    private var tcp: UnsafeMutablePointer<uv_tcp_t>?
    private var session: OpaquePointer?
    private var outgoing: [UInt8] = []
    /// Calls started here and not yet delivered.
    private(set) var open = 0

    /// Per-call state, indexed by slot; the slot number + 1 is the stream's user data.
    struct Slot {
        var inUse = false
        var delivered = false
        var call: HTTP2ClientCall?
        var offset = 0
        var streamID: Int32 = 0
        var httpStatus = 0
        var grpcStatus: Int32 = -1
        var grpcMessage: String?
        var body: [UInt8] = []
        var metadata: [(name: String, value: String)] = []
    }
    private var slots: [Slot] = []
    private var free: [Int] = []

    init(channel: HTTP2ClientConnection) {
        self.channel = channel
        makeSession()
    }

    deinit {
        if let session { nghttp2_session_del(session) }
    }

    var acceptsCalls: Bool { state != .closed && !goingAway }

    // MARK: calls

    /// Submits one call as a new stream (sent once connected). Its outcome goes to the channel.
    func submit(_ call: HTTP2ClientCall) {
        let slotIndex: Int
        if let i = free.popLast() { slotIndex = i } else { slots.append(Slot()); slotIndex = slots.count - 1 }
        slots[slotIndex] = Slot(inUse: true, delivered: false, call: call)
        open += 1
        var provider = nghttp2_data_provider()
        provider.read_callback = Self.readBody
        let id = nghttp2_submit_request(session, nil, call.template.nva, call.template.nvaCount, &provider,
                                        UnsafeMutableRawPointer(bitPattern: slotIndex + 1))
        if id < 0 {
            deliver(slotIndex, status: GRPCStatus.Code.internal.number,
                    message: "nghttp2_submit_request: \(String(cString: nghttp2_strerror(id)))", deferred: true)
            release(slotIndex)
            return
        }
        slots[slotIndex].streamID = id
        channel.markDirty()
    }

    private func deliver(_ i: Int, status: Int32, message: String?, deferred: Bool = false) {
        guard slots[i].inUse, !slots[i].delivered, let call = slots[i].call else { return }
        slots[i].delivered = true
        open -= 1
        channel.deliver(call, status: status, message: message, body: call.collect ? slots[i].body : [],
                        metadata: slots[i].metadata, deferred: deferred)
    }

    private func release(_ i: Int) {
        guard slots[i].inUse else { return }
        slots[i] = Slot()
        free.append(i)
    }

    /// Fails (and resets) calls past their deadline.
    func expire(now: UInt64) {
        guard open > 0 else { return }
        for i in slots.indices where slots[i].inUse && !slots[i].delivered && slots[i].call!.deadline <= now {
            deliver(i, status: GRPCStatus.Code.deadlineExceeded.number, message: "client deadline passed")
            if let session, slots[i].streamID > 0 {
                // On a stream not sent yet this cancels its queued HEADERS instead.
                nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), slots[i].streamID, UInt32(NGHTTP2_CANCEL.rawValue))
                channel.markDirty()
            }
        }
    }

    /// Fails the calls that must not wait for another connect (`waitForReady` false), and
    /// hands back the rest, undelivered: they were never read by a server.
    func takeUnsentCalls(failing reason: String) -> [HTTP2ClientCall] {
        var kept: [HTTP2ClientCall] = []
        for i in slots.indices where slots[i].inUse && !slots[i].delivered {
            if slots[i].call!.waitForReady {
                kept.append(slots[i].call!)
                slots[i].delivered = true
                open -= 1
            } else {
                deliver(i, status: GRPCStatus.Code.unavailable.number, message: reason, deferred: true)
            }
        }
        return kept
    }

    /// Fails every call still open with UNAVAILABLE (delivered later, from the loop's prepare
    /// step, so a caller that starts its next call at once lands in another session).
    func failOpenCalls(_ reason: String) {
        for i in slots.indices where slots[i].inUse && !slots[i].delivered {
            deliver(i, status: GRPCStatus.Code.unavailable.number, message: reason, deferred: true)
        }
    }

    // MARK: connection

    private func makeSession() {
        var callbacks: OpaquePointer?
        nghttp2_session_callbacks_new(&callbacks)
        defer { nghttp2_session_callbacks_del(callbacks) }
        nghttp2_session_callbacks_set_on_header_callback(callbacks, Self.header)
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, Self.dataChunk)
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, Self.streamClosed)
        nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, Self.frameReceived)
        var option: OpaquePointer?
        nghttp2_option_new(&option)
        defer { nghttp2_option_del(option) }
        // Calls beyond the server's stream limit wait in nghttp2 (default cap 100 before SETTINGS).
        nghttp2_option_set_peer_max_concurrent_streams(option, 100)
        var s: OpaquePointer?
        nghttp2_session_client_new2(&s, callbacks, Unmanaged.passUnretained(self).toOpaque(), option)
        session = s
        var settings = [
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_ENABLE_PUSH.rawValue), value: 0),
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE.rawValue), value: 1 << 24),
        ]
        nghttp2_submit_settings(s, UInt8(NGHTTP2_FLAG_NONE.rawValue), &settings, settings.count)
        nghttp2_session_set_local_window_size(s, UInt8(NGHTTP2_FLAG_NONE.rawValue), 0, 1 << 28)
    }

    /// Holds the session until libuv reports the connect (also when it is cancelled by a close).
    private final class ConnectRequest {
        let session: HTTP2ClientSession
        let tcp: UnsafeMutablePointer<uv_tcp_t>
        init(_ s: HTTP2ClientSession, _ tcp: UnsafeMutablePointer<uv_tcp_t>) { session = s; self.tcp = tcp }
    }

    private func connect() {
        let owner = channel.owner
        let tcp = UnsafeMutablePointer<uv_tcp_t>.allocate(capacity: 1)
        uv_tcp_init(owner.loop, tcp)
        uv_tcp_nodelay(tcp, 1)
        self.tcp = tcp
        tcp.pointee.data = Unmanaged.passUnretained(self).toOpaque()
        let request = UnsafeMutablePointer<uv_connect_t>.allocate(capacity: 1)
        request.pointee.data = Unmanaged.passRetained(ConnectRequest(self, tcp)).toOpaque()
        var address = owner.address
        let rc = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { addr in
                uv_tcp_connect(request, tcp, addr) { req, status in
                    let r = Unmanaged<ConnectRequest>.fromOpaque(req!.pointee.data).takeRetainedValue()
                    req!.deallocate()
                    r.session.connected(tcp: r.tcp, status: status)
                }
            }
        }
        if rc != 0 {
            Unmanaged<ConnectRequest>.fromOpaque(request.pointee.data).release()
            request.deallocate()
            connected(tcp: tcp, status: rc)
        }
    }

    private func connected(tcp: UnsafeMutablePointer<uv_tcp_t>, status: Int32) {
        guard tcp == self.tcp, state == .connecting else { return }
        if status != 0 {
            lost("connect to \(channel.owner.authority): \(String(cString: uv_strerror(status)))")
            return
        }
        state = .connected
        let stream = UnsafeMutableRawPointer(tcp).assumingMemoryBound(to: uv_stream_t.self)
        uv_read_start(stream, { handle, _, buf in
            let me = Unmanaged<HTTP2ClientSession>.fromOpaque(handle!.pointee.data).takeUnretainedValue()
            let buffer = me.channel.owner.readBuffer
            buf!.pointee = uv_buf_init(buffer.baseAddress!.assumingMemoryBound(to: CChar.self), UInt32(buffer.count))
        }, { stream, nread, _ in
            let me = Unmanaged<HTTP2ClientSession>.fromOpaque(stream!.pointee.data).takeUnretainedValue()
            me.didRead(nread)
        })
        channel.markDirty()
    }

    private func didRead(_ nread: Int) {
        if nread < 0 {
            lost(nread == Int(UV_EOF.rawValue) ? "server closed the connection" : "read: \(String(cString: uv_strerror(Int32(nread))))")
            return
        }
        guard nread > 0, let session else { return }
        channel.bytesReceived += UInt64(nread)
        let consumed = nghttp2_session_mem_recv(session, channel.owner.readBuffer.baseAddress!.assumingMemoryBound(to: UInt8.self), nread)
        if consumed < 0 {
            lost("HTTP/2: \(String(cString: nghttp2_strerror(Int32(consumed))))")
            return
        }
        channel.markDirty()
    }

    /// Sends every frame nghttp2 has ready; closes the session once neither side has more to
    /// say (after a GOAWAY, when its last streams are answered).
    func flush() {
        if state == .idle {
            state = .connecting
            connect()
            return
        }
        guard state == .connected, let session, let tcp else { return }
        outgoing.removeAll(keepingCapacity: true)
        while true {
            var chunk: UnsafePointer<UInt8>?
            let n = nghttp2_session_mem_send(session, &chunk)
            if n < 0 { lost("HTTP/2: \(String(cString: nghttp2_strerror(Int32(n))))"); return }
            if n == 0 { break }
            outgoing.append(contentsOf: UnsafeBufferPointer(start: chunk, count: n))
        }
        if nghttp2_session_want_read(session) == 0 && nghttp2_session_want_write(session) == 0 && outgoing.isEmpty {
            lost("the server ended the connection (GOAWAY)")
            return
        }
        guard !outgoing.isEmpty else { return }
        channel.bytesSent += UInt64(outgoing.count)
        let stream = UnsafeMutableRawPointer(tcp).assumingMemoryBound(to: uv_stream_t.self)
        var written = 0
        outgoing.withUnsafeMutableBytes { raw in
            var buf = uv_buf_init(raw.baseAddress!.assumingMemoryBound(to: CChar.self), UInt32(raw.count))
            let w = uv_try_write(stream, &buf, 1)
            if w > 0 { written = Int(w) }
        }
        if written == outgoing.count { return }
        let remaining = outgoing.count - written
        let copy = UnsafeMutableRawPointer.allocate(byteCount: remaining, alignment: 16)
        outgoing.withUnsafeBytes { copy.copyMemory(from: $0.baseAddress! + written, byteCount: remaining) }
        let request = UnsafeMutablePointer<uv_write_t>.allocate(capacity: 1)
        request.pointee.data = copy
        var buf = uv_buf_init(copy.assumingMemoryBound(to: CChar.self), UInt32(remaining))
        let rc = uv_write(request, stream, &buf, 1) { req, _ in
            req!.pointee.data.deallocate()
            req!.deallocate()
        }
        if rc != 0 {
            copy.deallocate(); request.deallocate()
            lost("write: \(String(cString: uv_strerror(rc)))")
        }
    }

    /// The connection is gone: close it and let the channel decide about its calls.
    private func lost(_ reason: String) {
        guard state != .closed else { return }
        channel.sessionEnded(self, reason: reason)
    }

    /// Drops the nghttp2 session and closes the socket. Calls still open are forgotten: the
    /// channel failed or took them first. Never called from inside an nghttp2 callback.
    func close() {
        state = .closed
        slots.removeAll()
        free.removeAll()
        open = 0
        if let session { self.session = nil; nghttp2_session_del(session) }
        if let tcp {
            self.tcp = nil
            uv_close(UnsafeMutableRawPointer(tcp).assumingMemoryBound(to: uv_handle_t.self)) { h in
                UnsafeMutableRawPointer(h!).assumingMemoryBound(to: uv_tcp_t.self).deallocate()
            }
        }
    }

    // MARK: nghttp2 callbacks

    @inline(__always) private static func me(_ userData: UnsafeMutableRawPointer?) -> HTTP2ClientSession {
        Unmanaged<HTTP2ClientSession>.fromOpaque(userData!).takeUnretainedValue()
    }

    @inline(__always) private static func slotIndex(_ session: OpaquePointer?, _ streamID: Int32) -> Int? {
        guard let p = nghttp2_session_get_stream_user_data(session, streamID) else { return nil }
        return Int(bitPattern: p) - 1
    }

    /// SETTINGS: a server answered. GOAWAY: the channel sends new calls elsewhere. nghttp2
    /// reports the GOAWAY here before it closes the streams past its last stream id (with
    /// REFUSED_STREAM), so those retries already find the channel's next session.
    private static let frameReceived: nghttp2_on_frame_recv_callback = { _, frame, userData in
        guard let frame else { return 0 }
        let s = me(userData)
        switch UInt32(frame.pointee.hd.type) {
        case NGHTTP2_SETTINGS.rawValue where !s.ready:
            s.ready = true
            s.channel.sessionReady(s)
        case NGHTTP2_GOAWAY.rawValue where !s.goingAway:
            s.goingAway = true
            s.channel.sessionGoingAway(s)
        default: break
        }
        return 0
    }

    private static let header: nghttp2_on_header_callback = { session, frame, name, nameLength, value, valueLength, _, userData in
        guard let frame, let name, let value, frame.pointee.hd.type == UInt8(NGHTTP2_HEADERS.rawValue),
              let i = slotIndex(session, frame.pointee.hd.stream_id) else { return 0 }
        let c = me(userData)
        guard c.slots[i].inUse else { return 0 }
        if nameLength == 7, memcmp(name, ":status", 7) == 0 {
            var v = 0
            for k in 0..<valueLength { v = v * 10 + Int(value[k]) - 48 }
            c.slots[i].httpStatus = v
        } else if nameLength == 11, memcmp(name, "grpc-status", 11) == 0 {
            var v: Int32 = 0
            for k in 0..<valueLength { v = v * 10 + Int32(value[k]) - 48 }
            c.slots[i].grpcStatus = v
        } else if nameLength == 12, memcmp(name, "grpc-message", 12) == 0 {
            c.slots[i].grpcMessage = GRPCStatus.percentDecode(
                String(decoding: UnsafeBufferPointer(start: value, count: valueLength), as: UTF8.self))
        } else if c.slots[i].call?.collect == true, name[0] != UInt8(ascii: ":") {
            // Headers and trailers the caller may read (only for calls that collect their answer).
            c.slots[i].metadata.append((String(decoding: UnsafeBufferPointer(start: name, count: nameLength), as: UTF8.self),
                                        String(decoding: UnsafeBufferPointer(start: value, count: valueLength), as: UTF8.self)))
        }
        return 0
    }

    private static let dataChunk: nghttp2_on_data_chunk_recv_callback = { session, _, streamID, data, length, userData in
        guard let data, let i = slotIndex(session, streamID) else { return 0 }
        let c = me(userData)
        if c.slots[i].call?.collect == true { c.slots[i].body.append(contentsOf: UnsafeBufferPointer(start: data, count: length)) }
        return 0
    }

    private static let streamClosed: nghttp2_on_stream_close_callback = { session, streamID, errorCode, userData in
        guard let i = slotIndex(session, streamID) else { return 0 }
        let c = me(userData)
        guard c.slots[i].inUse else { return 0 }
        let slot = c.slots[i]
        if !slot.delivered, errorCode == NGHTTP2_REFUSED_STREAM.rawValue, slot.httpStatus == 0, var call = slot.call, !call.retried {
            // Refused before any answer (past a GOAWAY's last stream id, or by the server's
            // budgets): no server worked on it, so it is sent again, once.
            call.retried = true
            c.slots[i].delivered = true
            c.open -= 1
            c.release(i)
            c.channel.retry(call)
            return 0
        }
        var status: Int32
        var message = slot.grpcMessage
        if slot.grpcStatus >= 0 {
            status = slot.grpcStatus
        } else if errorCode != 0 {
            status = GRPCResponseStatus.code(forReset: errorCode).number
            message = message ?? "stream reset: \(String(cString: nghttp2_http2_strerror(errorCode)))"
                + (errorCode == NGHTTP2_REFUSED_STREAM.rawValue ? " (refused again after one retry)" : "")
        } else if slot.httpStatus != 200 {
            status = GRPCResponseStatus.code(forHTTPStatus: slot.httpStatus).number
            message = message ?? "HTTP status \(slot.httpStatus)"
        } else {
            status = GRPCStatus.Code.internal.number
            message = message ?? "response ended without grpc-status"
        }
        c.deliver(i, status: status, message: message)
        c.release(i)
        return 0
    }

    private static let readBody: nghttp2_data_source_read_callback = { session, streamID, buffer, length, flags, _, userData in
        guard let buffer, let flags, let i = slotIndex(session, streamID) else {
            return Int(NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE.rawValue)
        }
        let c = me(userData)
        guard let template = c.slots[i].call?.template else { return Int(NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE.rawValue) }
        let offset = c.slots[i].offset
        let n = min(length, template.body.count - offset)
        if n > 0 { buffer.update(from: template.body.baseAddress!.assumingMemoryBound(to: UInt8.self) + offset, count: n) }
        c.slots[i].offset = offset + n
        if offset + n == template.body.count { flags.pointee |= NGHTTP2_DATA_FLAG_EOF.rawValue }
        return n
    }
}
