import CLibUV
import CNGHTTP2
import Foundation

/// One accepted TCP connection speaking HTTP/2: with prior knowledge (gRPC's h2c), or inside
/// TLS (`tls`, ALPN h2). Bytes from libuv go into nghttp2 (decrypted first), frames come back
/// out through `flush()` (encrypted last). Loop thread only.
final class HTTP2Connection {
    unowned let core: GRPCServerCore
    let tcp: UnsafeMutablePointer<uv_tcp_t>
    private(set) var session: OpaquePointer?
    /// TLS between the socket and nghttp2; nil: plaintext. Set before `start()`.
    var tls: TLSSession?
    var streams: [Int32: HTTP2Stream] = [:]
    let readBuffer: UnsafeMutableRawPointer
    static let readBufferSize = 64 * 1024
    private(set) var closing = false
    var goingAway = false
    let peer: String
    /// The peer's address without its port (connections per peer are counted by it).
    let peerHost: String
    /// Request bytes this connection's streams hold; its parent is the process's budget.
    let buffers: GRPCBufferBudget
    /// Since when the client owes the end of a header block, or (from the accept) its first
    /// frame; nil when it owes nothing (`GRPCServerCore` closes connections late too long).
    var waitingSince: UInt64? = DispatchTime.now().uptimeNanoseconds
    /// Bytes produced by nghttp2 in this flush, written with one uv_write.
    private var outgoing: [UInt8] = []
    private var filter = HTTP2FrameFilter()
    /// Header values seen lately on this connection (paths, content types): every call of a
    /// client repeats them, and reusing the string spares an allocation per call.
    private var recentValues: [String] = []
    private var nextRecent = 0

    /// A header value as a string, reused from `recentValues` when the bytes match.
    func headerValue(_ bytes: UnsafeBufferPointer<UInt8>) -> String {
        for s in recentValues {
            let same = s.utf8.withContiguousStorageIfAvailable { $0.count == bytes.count && (bytes.count == 0 || memcmp($0.baseAddress!, bytes.baseAddress!, bytes.count) == 0) }
            if same == true { return s }
        }
        let s = String(decoding: bytes, as: UTF8.self)
        if recentValues.count < 8 { recentValues.append(s) } else { recentValues[nextRecent] = s; nextRecent = (nextRecent + 1) % 8 }
        return s
    }

    init(core: GRPCServerCore, tcp: UnsafeMutablePointer<uv_tcp_t>) {
        self.core = core
        self.tcp = tcp
        self.readBuffer = UnsafeMutableRawPointer.allocate(byteCount: Self.readBufferSize, alignment: 16)
        let peer = Self.peerName(tcp)
        self.peer = peer
        self.peerHost = peer.lastIndex(of: ":").map { String(peer[..<$0]) } ?? peer
        self.buffers = GRPCBufferBudget(limit: core.configuration.maxConnectionBuffer, parent: core.buffers)
    }

    deinit {
        readBuffer.deallocate()
        if let session { nghttp2_session_del(session) }
        tcp.deallocate()
    }

    var stream: UnsafeMutablePointer<uv_stream_t> { UnsafeMutableRawPointer(tcp).assumingMemoryBound(to: uv_stream_t.self) }

    /// Creates the nghttp2 session and queues our SETTINGS (clients wait for them).
    func start() -> Bool {
        var callbacks: OpaquePointer?
        guard nghttp2_session_callbacks_new(&callbacks) == 0, let callbacks else { return false }
        defer { nghttp2_session_callbacks_del(callbacks) }
        NGHTTP2Callbacks.install(callbacks)
        var option: OpaquePointer?
        guard nghttp2_option_new(&option) == 0, let option else { return false }
        defer { nghttp2_option_del(option) }
        nghttp2_option_set_max_send_header_block_length(option, 64 * 1024)
        // gRPC uses no stream priorities: keep no closed streams for RFC 7540's priority tree
        // (with SETTINGS_NO_RFC7540_PRIORITIES below, nghttp2 schedules streams without it).
        nghttp2_option_set_no_closed_streams(option, 1)
        // Request headers are checked where they are read (`HTTP2Stream.header`): nghttp2's
        // own HTTP messaging pass would scan each of them a second time.
        nghttp2_option_set_no_http_messaging(option, 1)
        // Window goes back to the client only for bytes admitted into a message (or dropped):
        // what a client may send is what the buffer budgets can hold (`dataReceived`).
        nghttp2_option_set_no_auto_window_update(option, 1)
        var session: OpaquePointer?
        let me = Unmanaged.passUnretained(self).toOpaque()
        guard nghttp2_session_server_new2(&session, callbacks, me, option) == 0, let session else { return false }
        self.session = session
        let config = core.configuration
        var settings = [
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS.rawValue), value: UInt32(config.maxConcurrentStreams)),
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE.rawValue), value: UInt32(config.streamWindow)),
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE.rawValue), value: 64 * 1024),
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES.rawValue), value: 1),
        ]
        guard nghttp2_submit_settings(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), &settings, settings.count) == 0 else { return false }
        // The connection-level window starts at 64 KiB whatever SETTINGS say; set it.
        nghttp2_session_set_local_window_size(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), 0, Int32(config.connectionWindow))
        return true
    }

    // MARK: bytes in

    /// Bytes read from the socket: decrypted first with TLS (`TLSSession`), then fed to
    /// nghttp2; then what it produced is sent.
    func received(_ bytes: UnsafeRawBufferPointer) {
        guard session != nil, !closing else { return }
        guard let tls else {
            if deliver(bytes) { flush() }
            return
        }
        // The read buffer is free once the ciphertext is in the BIO: decrypt into it.
        switch tls.receive(bytes, scratch: readBuffer, capacity: Self.readBufferSize, { deliver($0) }) {
        case .ok:
            flush()
        case .closed:
            flush()
            closeAfterWrites()
        case .failed(let reason):
            core.event(.protocolError(peer: peer, message: "TLS: \(reason)"))
            // The alert OpenSSL queued tells the client why (a missing certificate, no h2).
            writeCiphertext()
            close()
        }
    }

    /// Feeds plaintext to nghttp2 (less the frames `HTTP2FrameFilter` drops). False when the
    /// connection failed and is closing.
    private func deliver(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard let session, !closing else { return false }
        // The filter hands over spans of the read buffer itself (nghttp2 keeps partial frames
        // between calls), so the bytes are not copied on their way in.
        var failure: Int = 0
        filter.filter(bytes) { span in
            guard span.count > 0 else { return true }
            let consumed = nghttp2_session_mem_recv(session, span.baseAddress!.assumingMemoryBound(to: UInt8.self), span.count)
            if consumed < 0 { failure = consumed; return false }
            return !closing
        }
        if failure < 0 {
            core.event(.protocolError(peer: peer, message: String(cString: nghttp2_strerror(Int32(failure)))))
            // nghttp2 queued a GOAWAY for most protocol errors: send it, then close.
            flush()
            close()
            return false
        }
        return !closing
    }

    // MARK: bytes out

    /// Serializes every pending frame and writes them in one uv_write (through TLS when on).
    /// Closes the connection when nghttp2 wants neither to read nor to write any more.
    func flush() {
        guard let session, !closing else { return }
        if let tls, !tls.isEstablished {
            // Handshake messages only: nghttp2's SETTINGS wait in the session until it is done.
            writeCiphertext()
            return
        }
        while true {
            var chunk: UnsafePointer<UInt8>?
            let n = nghttp2_session_mem_send(session, &chunk)
            if n < 0 {
                core.event(.protocolError(peer: peer, message: String(cString: nghttp2_strerror(Int32(n)))))
                close()
                return
            }
            if n == 0 { break }
            // The chunk is valid only until the next mem_send call.
            outgoing.append(contentsOf: UnsafeBufferPointer(start: chunk, count: n))
        }
        if let tls {
            if !outgoing.isEmpty, let problem = outgoing.withUnsafeBytes({ tls.send($0) }) {
                core.event(.protocolError(peer: peer, message: "TLS: \(problem)"))
                close()
                return
            }
            outgoing.removeAll(keepingCapacity: true)
            writeCiphertext()
        } else if !outgoing.isEmpty {
            write(outgoing)
            outgoing.removeAll(keepingCapacity: true)
        }
        if !closing && nghttp2_session_want_read(session) == 0 && nghttp2_session_want_write(session) == 0 {
            close()
        }
    }

    /// Ciphertext OpenSSL produced, reused between flushes.
    private var ciphertext: [UInt8] = []

    /// Sends what TLS has for the socket (records, handshake messages, alerts).
    private func writeCiphertext() {
        guard let tls, !closing, tls.takeOutput(into: &ciphertext) else { return }
        write(ciphertext)
    }

    private func write(_ bytes: [UInt8]) {
        if !UVWrite.send(bytes, on: stream) { close() }
    }

    // MARK: streams

    func beginStream(_ id: Int32) {
        let stream = HTTP2Stream(id: id, maxMessageSize: core.configuration.maxReceiveMessageSize)
        streams[id] = stream
        recent = (id, Unmanaged.passUnretained(stream))
        // With too little left of this connection's budget or the server's to take even one
        // stream window, refuse at once: REFUSED_STREAM tells the client nothing was processed
        // and it may try again.
        if let session, buffers.isSpent(below: core.configuration.streamWindow) {
            stream.answered = true
            nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), id, UInt32(NGHTTP2_REFUSED_STREAM.rawValue))
        }
    }

    /// Reserves a request message's bytes (or, with `message` false, its metadata's) for
    /// `stream` in every budget, or throws RESOURCE_EXHAUSTED naming the one that is short.
    private func reserve(_ bytes: Int, for stream: HTTP2Stream, message: Bool = true) throws(GRPCStatus) {
        let config = core.configuration
        let what = message ? "request message of \(bytes) bytes" : "request metadata of \(bytes) bytes"
        if stream.reserved + bytes > config.maxStreamBuffer {
            throw GRPCStatus(.resourceExhausted, "\(what) does not fit in what one call may hold (\(config.maxStreamBuffer) bytes, --max-stream-buffer)")
        }
        if let short = buffers.reserve(bytes) {
            throw short === buffers
                ? GRPCStatus(.resourceExhausted, "\(what) does not fit: this connection's calls hold \(short.used) of \(short.limit) bytes (--max-connection-buffer); try again when some finish")
                : GRPCStatus(.resourceExhausted, "\(what) does not fit: the server's calls hold \(short.used) of \(short.limit) bytes (--max-process-buffer); try again later")
        }
        stream.reserved += bytes
    }

    /// Gives back what `stream` reserved and drops the bytes it still holds.
    private func releaseBuffers(_ stream: HTTP2Stream) {
        guard stream.reserved > 0 else { return }
        buffers.release(stream.reserved)
        stream.reserved = 0
        stream.reader = GRPCMessageReader(maxMessageSize: core.configuration.maxReceiveMessageSize)
    }

    /// The stream most recently begun or looked up: a request's HEADERS, DATA and callbacks
    /// arrive one stream after another, so most lookups skip the dictionary. Unretained:
    /// `streams` holds the stream until `streamClosed`, which clears this.
    private var recent: (id: Int32, stream: Unmanaged<HTTP2Stream>)?

    /// An open stream by id.
    func stream(_ id: Int32) -> HTTP2Stream? {
        if let recent, recent.id == id { return recent.stream.takeUnretainedValue() }
        guard let found = streams[id] else { return nil }
        recent = (id, Unmanaged.passUnretained(found))
        return found
    }

    /// Runs `body` with the open stream `id` borrowed, not retained (the header callback's
    /// way: a retain and release per header was a measurable part of it); nil when it is
    /// not open.
    @inline(__always)
    func withStream<R>(_ id: Int32, _ body: (HTTP2Stream) -> R) -> R? {
        if let recent, recent.id == id { return recent.stream._withUnsafeGuaranteedRef(body) }
        guard let found = stream(id) else { return nil }
        return body(found)
    }

    /// A malformed request (RFC 9113 §8.1.1): the stream is reset with PROTOCOL_ERROR, the
    /// connection goes on.
    func malformed(_ stream: HTTP2Stream, _ reason: String) {
        guard let session, !stream.answered else { return }
        stream.answered = true
        waitingSince = nil  // nghttp2 skips the rest of a rejected header block itself
        releaseBuffers(stream)
        nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), stream.id, UInt32(NGHTTP2_PROTOCOL_ERROR.rawValue))
        core.event(.protocolError(peer: peer, message: "stream \(stream.id): malformed request: \(reason)"))
    }

    /// The request headers are complete: reject what cannot be served before reading a body.
    func headersComplete(_ stream: HTTP2Stream) {
        guard !stream.answered else { return }
        if let (httpStatus, status) = stream.headerProblem() {
            answer(stream, status: status, httpStatus: httpStatus)
            return
        }
        if stream.metadataBytes > 0 {
            do { try reserve(stream.metadataBytes, for: stream, message: false) } catch {
                answer(stream, status: error)
                return
            }
        }
        stream.handler = handler(for: stream.path)
        if stream.handler == nil, let method = core.router.messageStream(for: stream.path) {
            stream.messageStream = method
            stream.streamDeadline = stream.timeoutNanos.map { DispatchTime.now().uptimeNanoseconds &+ $0 }
        }
        if stream.handler == nil && stream.messageStream == nil {
            answer(stream, status: GRPCStatus(.unimplemented, core.router.missReason(for: stream.path)))
            return
        }
        // Before a byte of the message is admitted: a refused call's body is dropped unread.
        if let admission = core.router.admission, let refused = admission(stream.path, stream.metadata) {
            answer(stream, status: refused)
        }
    }

    /// The handler last routed on this connection: a client calls the same method again and
    /// again, and its path string is the same one (`headerValue`), so comparing it costs less
    /// than hashing it for the router's dictionary.
    private var lastRoute: (path: String, handler: GRPCUnaryHandler)?

    private func handler(for path: String) -> GRPCUnaryHandler? {
        if let lastRoute, lastRoute.path == path { return lastRoute.handler }
        guard let found = core.router.handler(for: path) else { return nil }
        lastRoute = (path, found)
        return found
    }

    /// A chunk of a DATA frame. The bytes are admitted into their stream's message, and their
    /// window goes back to the stream and the connection; or they are dropped (the stream is
    /// answered, reset or unknown), and their window goes back to the connection only, so a
    /// stream answered early cannot go on sending.
    func dataReceived(_ id: Int32, _ bytes: UnsafeRawBufferPointer) {
        guard let session else { return }
        var admitted = false
        if let stream = stream(id) {
            if let problem = stream.bodyProblem(adding: bytes.count, ended: false) {
                malformed(stream, problem)
            } else if !stream.answered {
                dataChunk(stream, bytes)
                admitted = !stream.answered
            }
        }
        if admitted {
            nghttp2_session_consume(session, id, bytes.count)
        } else {
            nghttp2_session_consume_connection(session, bytes.count)
        }
    }

    private func dataChunk(_ stream: HTTP2Stream, _ bytes: UnsafeRawBufferPointer) {
        do {
            try stream.reader.append(bytes, admit: { length throws(GRPCStatus) in try reserve(length, for: stream) })
            if stream.messageStream != nil { dispatchStreamMessages(stream) }
        } catch let status as GRPCStatus {
            answer(stream, status: status)
        } catch GRPCMessageReader.ReadError.compressed {
            answer(stream, status: GRPCStatus(.unimplemented, "compressed messages are not supported (grpc-encoding \(stream.encoding.isEmpty ? "unset" : stream.encoding)); send them uncompressed"))
        } catch GRPCMessageReader.ReadError.tooLarge(let declared, let limit) {
            answer(stream, status: GRPCStatus(.resourceExhausted, "request message of \(declared) bytes is larger than the server's limit of \(limit) bytes (--max-message-size)"))
        } catch {
            answer(stream, status: GRPCStatus(.internal, "\(error)"))
        }
    }

    /// The client finished sending: hand the call to its handler.
    func requestComplete(_ stream: HTTP2Stream) {
        guard !stream.answered, stream.call == nil else { return }
        if stream.messageStream != nil {
            if stream.reader.hasPartialMessage {
                endMessageStream(stream, status: GRPCStatus(.internal, "the request stream ended inside a message"))
                return
            }
            dispatchStreamMessages(stream)
            stream.inputEnded = true
            finishMessageStreamIfDone(stream)
            return
        }
        guard let handler = stream.handler ?? handler(for: stream.path) else {
            answer(stream, status: GRPCStatus(.unimplemented, core.router.missReason(for: stream.path)))
            return
        }
        let messages = stream.reader.messages
        if stream.reader.hasPartialMessage {
            answer(stream, status: GRPCStatus(.internal, "the request ended inside a message"))
            return
        }
        guard messages.count == 1 else {
            answer(stream, status: GRPCStatus(messages.isEmpty ? .internal : .unimplemented,
                                              messages.isEmpty ? "the request carried no message" : "\(stream.path) is unary: it takes one request message, got \(messages.count)"))
            return
        }
        let deadline = stream.timeoutNanos.map { DispatchTime.now().uptimeNanoseconds &+ $0 }
        let call = GRPCServerCall(path: stream.path, request: messages[0], metadata: stream.metadata, deadline: deadline, completion: core)
        stream.call = call
        core.callStarted(call, on: self, stream: stream.id)
        handler(call)
    }

    // MARK: message streams

    /// Hands each complete request message of a message stream to the method as a call.
    private func dispatchStreamMessages(_ stream: HTTP2Stream) {
        guard let method = stream.messageStream, !stream.answered else { return }
        for message in stream.reader.takeMessages() {
            // A message stream's calls run on their own; the stream keeps only what it is reading.
            buffers.release(message.count)
            stream.reserved -= message.count
            let call = GRPCServerCall(path: stream.path, request: message, metadata: stream.metadata, deadline: stream.streamDeadline, completion: core)
            stream.streamCalls.append(call)
            core.callStarted(call, on: self, stream: stream.id)
            method.handler(call)
        }
    }

    /// One message-stream call answered: its message (or its failure's message) goes out;
    /// a failure without a message ends the stream.
    private func deliverStreamMessage(_ stream: HTTP2Stream, _ call: GRPCServerCall, _ result: GRPCCallResult) {
        guard let method = stream.messageStream, let index = stream.streamCalls.firstIndex(where: { $0 === call }) else { return }
        stream.streamCalls.remove(at: index)
        switch result {
        case .message(let framed), .streamed(let framed):
            sendStreamed(stream, framed)
        case .status(let status):
            guard let message = method.failure(status) else {
                endMessageStream(stream, status: status)
                return
            }
            sendStreamed(stream, GRPCMessageWriter.frame(message))
        }
        finishMessageStreamIfDone(stream)
    }

    private func finishMessageStreamIfDone(_ stream: HTTP2Stream) {
        if stream.inputEnded && stream.streamCalls.isEmpty { endMessageStream(stream, status: GRPCStatus(.ok, "")) }
    }

    /// Ends a message stream with `status` (after the messages already sent); calls still
    /// running are cancelled.
    private func endMessageStream(_ stream: HTTP2Stream, status: GRPCStatus) {
        guard !stream.answered else { return }
        for call in stream.streamCalls { call.cancel() }
        stream.streamCalls.removeAll()
        if stream.streaming {
            stream.answered = true
            stream.trailers = status
            if let session { nghttp2_session_resume_data(session, stream.id) }
        } else {
            answer(stream, status: status)
        }
    }

    /// Queues one framed message on a streaming response (starting the response if needed).
    private func sendStreamed(_ stream: HTTP2Stream, _ framed: [UInt8]) {
        if stream.responseOffset == stream.response.count {
            stream.response = framed
            stream.responseOffset = 0
        } else {
            stream.response.append(contentsOf: framed)
        }
        if stream.streaming {
            if let session { nghttp2_session_resume_data(session, stream.id) }
        } else {
            stream.streaming = true
            submitResponse(stream)
        }
    }

    // MARK: answers

    /// Sends the call's result if its stream is still open.
    func deliver(_ call: GRPCServerCall, streamID: Int32, _ result: GRPCCallResult) {
        guard let stream = stream(streamID), !stream.answered else { return }
        if stream.messageStream != nil {
            deliverStreamMessage(stream, call, result)
            return
        }
        guard stream.call === call else { return }
        switch result {
        case .message(let framed):
            stream.answered = true
            stream.response = framed
            stream.trailers = GRPCStatus(.ok, "")
            submitResponse(stream)
        case .status(let status) where stream.streaming:
            // Ends a stream that already sent messages: trailers after the last byte.
            stream.answered = true
            stream.trailers = status
            if let session { nghttp2_session_resume_data(session, stream.id) }
        case .status(let status):
            answer(stream, status: status)
        case .streamed(let framed):
            sendStreamed(stream, framed)
        }
    }

    /// A trailers-only answer: one HEADERS frame that ends the stream.
    func answer(_ stream: HTTP2Stream, status: GRPCStatus, httpStatus: Int = 200) {
        guard let session, !stream.answered else { return }
        stream.answered = true
        // Nothing will read what the stream holds unless a handler has its request.
        if stream.call == nil && stream.streamCalls.isEmpty { releaseBuffers(stream) }
        // No RST_STREAM(NO_ERROR) to stop a client still sending (RFC 9113 §8.1 allows one):
        // grpcio reports a call that got its trailers and then such a reset as INTERNAL. Its
        // further bytes are dropped and the stream's window is not given back (`dataReceived`).
        var headers: [(String, String)] = [(":status", String(httpStatus)), ("content-type", "application/grpc"),
                                          ("grpc-status", String(status.code.rawValue))]
        if !status.message.isEmpty { headers.append(("grpc-message", GRPCStatus.percentEncode(status.message))) }
        NGHTTP2Headers.with(headers) { nva, count in
            _ = nghttp2_submit_response(session, stream.id, nva, count, nil)
        }
    }

    private func submitResponse(_ stream: HTTP2Stream) {
        guard let session else { return }
        var provider = nghttp2_data_provider()
        provider.read_callback = NGHTTP2Callbacks.readResponse
        let headers = NGHTTP2StaticHeaders.okResponse
        _ = nghttp2_submit_response(session, stream.id, headers.nva, headers.count, &provider)
    }

    /// Copies the next piece of a response body; submits the OK trailers after the last.
    func readResponse(streamID: Int32, into buffer: UnsafeMutablePointer<UInt8>, length: Int, flags: UnsafeMutablePointer<UInt32>) -> Int {
        guard let session, let stream = stream(streamID) else { return Int(NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE.rawValue) }
        let n = min(length, stream.response.count - stream.responseOffset)
        if n > 0 {
            stream.response.withUnsafeBytes { raw in
                buffer.update(from: raw.baseAddress!.advanced(by: stream.responseOffset).assumingMemoryBound(to: UInt8.self), count: n)
            }
            stream.responseOffset += n
        }
        if stream.responseOffset == stream.response.count {
            guard let status = stream.trailers else {
                // A streaming call with nothing more to send yet: wait for resume_data.
                return n > 0 ? n : Int(NGHTTP2_ERR_DEFERRED.rawValue)
            }
            flags.pointee |= NGHTTP2_DATA_FLAG_EOF.rawValue | NGHTTP2_DATA_FLAG_NO_END_STREAM.rawValue
            if status.code == .ok && status.message.isEmpty {
                let ok = NGHTTP2StaticHeaders.okTrailers
                _ = nghttp2_submit_trailer(session, streamID, ok.nva, ok.count)
            } else {
                var headers = [("grpc-status", String(status.code.rawValue))]
                if !status.message.isEmpty { headers.append(("grpc-message", GRPCStatus.percentEncode(status.message))) }
                NGHTTP2Headers.with(headers) { nva, count in
                    _ = nghttp2_submit_trailer(session, streamID, nva, count)
                }
            }
            stream.response = []
            stream.responseOffset = 0
        }
        return n
    }

    /// The stream ended (both sides done, or reset): a call still running is cancelled.
    func streamClosed(_ id: Int32) {
        if recent?.id == id { recent = nil }
        guard let stream = streams.removeValue(forKey: id) else { return }
        releaseBuffers(stream)
        if let call = stream.call, !stream.answered {
            call.cancel()
        }
        for call in stream.streamCalls { call.cancel() }
        stream.streamCalls.removeAll()
    }

    // MARK: shutdown

    /// Graceful: tells the client no new streams will be taken, lets open ones finish.
    func sendGoAway() {
        guard let session, !goingAway, !closing else { return }
        goingAway = true
        let last = nghttp2_session_get_last_proc_stream_id(session)
        nghttp2_submit_goaway(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), last, UInt32(NGHTTP2_NO_ERROR.rawValue), nil, 0)
        flush()
        if streams.isEmpty { closeAfterWrites() }
    }

    /// Closes once queued writes are out (uv_shutdown waits for them).
    func closeAfterWrites() {
        guard !closing else { return }
        if let tls {
            // close_notify: the client can tell the end from a cut connection.
            tls.shutdown()
            writeCiphertext()
        }
        let request = UnsafeMutablePointer<uv_shutdown_t>.allocate(capacity: 1)
        request.pointee.data = Unmanaged.passUnretained(self).toOpaque()
        if uv_shutdown(request, stream, { request, _ in
            guard let request else { return }
            let connection = Unmanaged<HTTP2Connection>.fromOpaque(request.pointee.data!).takeUnretainedValue()
            request.deallocate()
            connection.close()
        }) != 0 {
            request.deallocate()
            close()
        }
    }

    /// Stops reading, cancels open calls and closes the socket; the core releases the
    /// connection when libuv reports the handle closed.
    func close() {
        guard !closing else { return }
        closing = true
        for id in Array(streams.keys) { streamClosed(id) }
        uv_read_stop(stream)
        core.connectionClosing(self)
        uv_close(UnsafeMutableRawPointer(tcp).assumingMemoryBound(to: uv_handle_t.self)) { handle in
            guard let handle, let data = handle.pointee.data else { return }
            let connection = Unmanaged<HTTP2Connection>.fromOpaque(data).takeRetainedValue()
            connection.core.connectionClosed(connection)
        }
    }

    static func peerName(_ tcp: UnsafeMutablePointer<uv_tcp_t>) -> String {
        var storage = sockaddr_storage()
        var length = Int32(MemoryLayout<sockaddr_storage>.size)
        let ok = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { uv_tcp_getpeername(tcp, $0, &length) }
        }
        guard ok == 0 else { return "?" }
        var host = [CChar](repeating: 0, count: 64)
        var port: UInt16 = 0
        let family = storage.ss_family
        let capacity = host.count
        withUnsafePointer(to: &storage) { raw in
            if family == sa_family_t(AF_INET) {
                raw.withMemoryRebound(to: sockaddr_in.self, capacity: 1) {
                    _ = uv_ip4_name($0, &host, capacity)
                    port = UInt16(bigEndian: $0.pointee.sin_port)
                }
            } else {
                raw.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) {
                    _ = uv_ip6_name($0, &host, capacity)
                    port = UInt16(bigEndian: $0.pointee.sin6_port)
                }
            }
        }
        return "\(String(cString: host)):\(port)"
    }
}
