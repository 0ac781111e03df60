import CHTTPParser
import CLibUV
import Foundation

/// The loop's state: listeners, connections, the queue of answered calls and the drain.
/// Everything but `complete`, `requestShutdown` and the counters runs on the loop thread.
final class GRPCServerCore: GRPCCallCompletion, HTTPRequestCompletion, @unchecked Sendable {
    let configuration: GRPCServerConfiguration
    let router: GRPCRouter
    let httpHandler: HTTPGetHandler?
    let rest: HTTPService?
    private let events: @Sendable (GRPCServerEvent) -> Void

    let loop: UnsafeMutablePointer<uv_loop_t>
    private let listener: UnsafeMutablePointer<uv_tcp_t>
    private var httpListener: UnsafeMutablePointer<uv_tcp_t>?
    private var restListener: UnsafeMutablePointer<uv_tcp_t>?
    private let wake: UnsafeMutablePointer<uv_async_t>
    private let drainTimer: UnsafeMutablePointer<uv_timer_t>
    /// Looks for clients late with a header block (`headerTimeout`).
    private let sweepTimer: UnsafeMutablePointer<uv_timer_t>

    private var connections: [ObjectIdentifier: HTTP2Connection] = [:]
    /// Open connections by peer address (`maxConnectionsPerPeer`).
    private var connectionsByPeer: [String: Int] = [:]
    /// The REST port's connections, and those by peer address (limited apart from gRPC's).
    private var restConnections: [ObjectIdentifier: HTTP1Connection] = [:]
    private var restConnectionsByPeer: [String: Int] = [:]
    /// Request bytes every connection's streams hold, against `maxProcessBuffer`.
    let buffers: GRPCBufferBudget
    var plainConnections = 0
    /// Where TLS sessions come from (`configuration.tls`), made by `bind()`; nil: plaintext.
    private(set) var tls: TLSContext?

    // Shared with other threads, under the lock.
    private let lock = NSLock()
    private var answered: [(GRPCServerCall, GRPCCallResult)] = []
    /// The loop's side of `answered` while it delivers, and the connections it wrote to.
    private var delivering: [(GRPCServerCall, GRPCCallResult)] = []
    /// The same for HTTP/1.1 answers.
    private var answeredHTTP: [(HTTPServerRequest, HTTPServerResponse)] = []
    private var deliveringHTTP: [(HTTPServerRequest, HTTPServerResponse)] = []
    private var restConnectionTotal = 0
    private var touched: [HTTP2Connection] = []
    private var shutdownRequested = false
    private var inFlight = 0
    private var connectionTotal = 0
    /// Set by `stop()`: the wake-up handle is closing and must not be signalled again.
    private var wakeClosed = false

    private(set) var isDraining = false
    private var stopped = false

    init(configuration: GRPCServerConfiguration, router: GRPCRouter, httpHandler: HTTPGetHandler?, rest: HTTPService?,
         events: @escaping @Sendable (GRPCServerEvent) -> Void) {
        self.configuration = configuration
        self.router = router
        self.httpHandler = httpHandler
        self.rest = rest
        self.events = events
        loop = .allocate(capacity: 1)
        listener = .allocate(capacity: 1)
        wake = .allocate(capacity: 1)
        drainTimer = .allocate(capacity: 1)
        sweepTimer = .allocate(capacity: 1)
        buffers = GRPCBufferBudget(limit: configuration.maxProcessBuffer)
    }

    func event(_ event: GRPCServerEvent) { events(event) }

    var inFlightCount: Int { lock.withLock { inFlight } }
    var connectionCountValue: Int { lock.withLock { connectionTotal } }
    var restConnectionCountValue: Int { lock.withLock { restConnectionTotal } }

    // MARK: start

    func bind() throws -> (grpcPort: Int, httpPort: Int?, restPort: Int?) {
        // Unusable TLS files stop the start here, before a port is bound.
        if let settings = configuration.tls { tls = try TLSContext(settings) }
        guard uv_loop_init(loop) == 0 else { throw GRPCServerError.loop("uv_loop_init failed") }
        let me = Unmanaged.passUnretained(self).toOpaque()
        uv_async_init(loop, wake) { handle in
            guard let data = handle?.pointee.data else { return }
            Unmanaged<GRPCServerCore>.fromOpaque(data).takeUnretainedValue().wakeUp()
        }
        wake.pointee.data = me
        uv_timer_init(loop, drainTimer)
        drainTimer.pointee.data = me
        uv_timer_init(loop, sweepTimer)
        sweepTimer.pointee.data = me
        if configuration.headerTimeout > 0 {
            let period = UInt64(min(1000, max(50, configuration.headerTimeout * 250)))
            uv_timer_start(sweepTimer, { timer in
                guard let data = timer?.pointee.data else { return }
                Unmanaged<GRPCServerCore>.fromOpaque(data).takeUnretainedValue().closeLateConnections()
            }, period, period)
            // The sweep alone must not keep the loop alive once everything else has closed.
            uv_unref(UnsafeMutableRawPointer(sweepTimer).assumingMemoryBound(to: uv_handle_t.self))
        }
        let grpcPort = try listen(listener, port: configuration.port) { server, status in
            guard let server, status == 0, let data = server.pointee.data else { return }
            Unmanaged<GRPCServerCore>.fromOpaque(data).takeUnretainedValue().accept(server)
        }
        var httpPort: Int?
        if let port = configuration.httpPort {
            let http = UnsafeMutablePointer<uv_tcp_t>.allocate(capacity: 1)
            httpListener = http
            httpPort = try listen(http, port: port) { server, status in
                guard let server, status == 0, let data = server.pointee.data else { return }
                Unmanaged<GRPCServerCore>.fromOpaque(data).takeUnretainedValue().acceptPlain(server)
            }
        }
        var restPort: Int?
        if let port = configuration.restPort, rest != nil {
            let listener = UnsafeMutablePointer<uv_tcp_t>.allocate(capacity: 1)
            restListener = listener
            restPort = try listen(listener, port: port) { server, status in
                guard let server, status == 0, let data = server.pointee.data else { return }
                Unmanaged<GRPCServerCore>.fromOpaque(data).takeUnretainedValue().acceptREST(server)
            }
            // The whole process shares one parser limit; the connection also counts head bytes itself.
            http_parser_set_max_header_size(UInt32(clamping: configuration.maxRequestHeaderSize + 1024))
        }
        return (grpcPort, httpPort, restPort)
    }

    private func listen(_ tcp: UnsafeMutablePointer<uv_tcp_t>, port: Int, _ onConnection: uv_connection_cb) throws -> Int {
        let host = configuration.host
        uv_tcp_init(loop, tcp)
        tcp.pointee.data = Unmanaged.passUnretained(self).toOpaque()
        var storage = sockaddr_storage()
        let parsed = withUnsafeMutablePointer(to: &storage) { raw -> Int32 in
            if host.contains(":") {
                return raw.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { uv_ip6_addr(host, Int32(port), $0) }
            }
            return raw.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { uv_ip4_addr(host, Int32(port), $0) }
        }
        guard parsed == 0 else { throw GRPCServerError.bind(host: host, port: port, message: "not an IP address") }
        let bound = withUnsafePointer(to: &storage) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { uv_tcp_bind(tcp, $0, 0) } }
        guard bound == 0 else { throw GRPCServerError.bind(host: host, port: port, message: String(cString: uv_strerror(bound))) }
        let stream = UnsafeMutableRawPointer(tcp).assumingMemoryBound(to: uv_stream_t.self)
        let listening = uv_listen(stream, 511, onConnection)
        guard listening == 0 else { throw GRPCServerError.bind(host: host, port: port, message: String(cString: uv_strerror(listening))) }
        var name = sockaddr_storage()
        var length = Int32(MemoryLayout<sockaddr_storage>.size)
        _ = withUnsafeMutablePointer(to: &name) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { uv_tcp_getsockname(tcp, $0, &length) } }
        let family = name.ss_family
        return withUnsafePointer(to: &name) { raw in
            family == sa_family_t(AF_INET6)
                ? raw.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { Int(UInt16(bigEndian: $0.pointee.sin6_port)) }
                : raw.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { Int(UInt16(bigEndian: $0.pointee.sin_port)) }
        }
    }

    func run() {
        uv_run(loop, UV_RUN_DEFAULT)
        uv_loop_close(loop)
        event(.stopped)
    }

    // MARK: connections

    private func accept(_ server: UnsafeMutablePointer<uv_stream_t>) {
        let tcp = UnsafeMutablePointer<uv_tcp_t>.allocate(capacity: 1)
        uv_tcp_init(loop, tcp)
        let clientStream = UnsafeMutableRawPointer(tcp).assumingMemoryBound(to: uv_stream_t.self)
        guard uv_accept(server, clientStream) == 0, !isDraining else {
            uv_close(UnsafeMutableRawPointer(tcp).assumingMemoryBound(to: uv_handle_t.self)) { $0?.deallocate() }
            return
        }
        uv_tcp_nodelay(tcp, 1)
        let connection = HTTP2Connection(core: self, tcp: tcp)
        // The handle owns one reference, released in the close callback.
        tcp.pointee.data = Unmanaged.passRetained(connection).toOpaque()
        connections[ObjectIdentifier(connection)] = connection
        connectionsByPeer[connection.peerHost, default: 0] += 1
        lock.withLock { connectionTotal += 1 }
        event(.connectionOpened(peer: connection.peer))
        if let reason = limitReached(connection) {
            // Closed before a byte is read: a client past a limit costs no session and no buffer.
            event(.connectionRefused(peer: connection.peer, reason: reason))
            connection.close()
            return
        }
        if let tls {
            guard let session = tls.session(for: .http2) else {
                event(.protocolError(peer: connection.peer, message: "TLS: cannot create a session: \(TLSSession.errors())"))
                connection.close()
                return
            }
            connection.tls = session
        }
        guard connection.start() else {
            connection.close()
            return
        }
        uv_read_start(clientStream, { handle, _, buffer in
            guard let handle, let buffer, let data = handle.pointee.data else { return }
            let connection = Unmanaged<HTTP2Connection>.fromOpaque(data).takeUnretainedValue()
            buffer.pointee = uv_buf_init(connection.readBuffer.assumingMemoryBound(to: CChar.self), UInt32(HTTP2Connection.readBufferSize))
        }, { stream, count, buffer in
            guard let stream, let data = stream.pointee.data else { return }
            let connection = Unmanaged<HTTP2Connection>.fromOpaque(data).takeUnretainedValue()
            if count < 0 {
                connection.close()  // EOF or a socket error: the client is gone.
            } else if count > 0 {
                connection.received(UnsafeRawBufferPointer(start: connection.readBuffer, count: count))
            }
        })
        connection.flush()
    }

    private func acceptPlain(_ server: UnsafeMutablePointer<uv_stream_t>) {
        guard let handler = httpHandler else { return }
        HTTPPlainConnection.accept(server, loop: loop, core: self, handler: handler, tls: tls)
    }

    private func acceptREST(_ server: UnsafeMutablePointer<uv_stream_t>) {
        guard let rest else { return }
        let tcp = UnsafeMutablePointer<uv_tcp_t>.allocate(capacity: 1)
        uv_tcp_init(loop, tcp)
        let clientStream = UnsafeMutableRawPointer(tcp).assumingMemoryBound(to: uv_stream_t.self)
        guard uv_accept(server, clientStream) == 0, !isDraining else {
            uv_close(UnsafeMutableRawPointer(tcp).assumingMemoryBound(to: uv_handle_t.self)) { $0?.deallocate() }
            return
        }
        uv_tcp_nodelay(tcp, 1)
        let connection = HTTP1Connection(core: self, tcp: tcp, service: rest)
        // The handle owns one reference, released in the close callback.
        tcp.pointee.data = Unmanaged.passRetained(connection).toOpaque()
        restConnections[ObjectIdentifier(connection)] = connection
        restConnectionsByPeer[connection.peerHost, default: 0] += 1
        lock.withLock { restConnectionTotal += 1 }
        event(.connectionOpened(peer: connection.peer))
        let fromPeer = restConnectionsByPeer[connection.peerHost] ?? 0
        if restConnections.count > configuration.maxConnections {
            event(.connectionRefused(peer: connection.peer, reason: "\(configuration.maxConnections) HTTP/1.1 connections are open (--max-connections)"))
            connection.close()
            return
        }
        if configuration.maxConnectionsPerPeer > 0 && fromPeer > configuration.maxConnectionsPerPeer {
            event(.connectionRefused(peer: connection.peer, reason: "\(configuration.maxConnectionsPerPeer) HTTP/1.1 connections from \(connection.peerHost) are open (--max-connections-per-peer)"))
            connection.close()
            return
        }
        connection.startReading()
    }

    func httpConnectionClosing(_ connection: HTTP1Connection) {
        guard restConnections.removeValue(forKey: ObjectIdentifier(connection)) != nil else { return }
        if let n = restConnectionsByPeer[connection.peerHost], n > 1 {
            restConnectionsByPeer[connection.peerHost] = n - 1
        } else {
            restConnectionsByPeer[connection.peerHost] = nil
        }
    }

    func httpConnectionClosed(_ connection: HTTP1Connection) {
        lock.withLock { restConnectionTotal -= 1 }
        event(.connectionClosed(peer: connection.peer))
        checkDrained()
    }

    /// A request was handed to the REST handler.
    func httpRequestStarted() {
        lock.withLock { inFlight += 1 }
    }

    /// From any thread: queue an HTTP answer and wake the loop (as `complete` for calls).
    func complete(_ request: HTTPServerRequest, _ response: HTTPServerResponse) {
        lock.withLock {
            inFlight -= 1
            guard !wakeClosed else { return }
            answeredHTTP.append((request, response))
            uv_async_send(wake)
        }
    }

    /// Why a just-accepted connection is one too many, or nil.
    private func limitReached(_ connection: HTTP2Connection) -> String? {
        if connections.count > configuration.maxConnections {
            return "\(configuration.maxConnections) connections are open (--max-connections)"
        }
        let fromPeer = connectionsByPeer[connection.peerHost] ?? 0
        if configuration.maxConnectionsPerPeer > 0 && fromPeer > configuration.maxConnectionsPerPeer {
            return "\(configuration.maxConnectionsPerPeer) connections from \(connection.peerHost) are open (--max-connections-per-peer)"
        }
        return nil
    }

    func connectionClosing(_ connection: HTTP2Connection) {
        guard connections.removeValue(forKey: ObjectIdentifier(connection)) != nil else { return }
        if let n = connectionsByPeer[connection.peerHost], n > 1 {
            connectionsByPeer[connection.peerHost] = n - 1
        } else {
            connectionsByPeer[connection.peerHost] = nil
        }
    }

    /// Closes connections that owe the end of a header block, or their first frame, for longer
    /// than the header timeout: such a client holds a connection (and nghttp2 cannot read
    /// anything else from it) while sending nothing that can be served.
    private func closeLateConnections() {
        let now = DispatchTime.now().uptimeNanoseconds
        let limit = UInt64(configuration.headerTimeout * 1e9)
        for connection in Array(connections.values) {
            guard let since = connection.waitingSince, now &- since > limit else { continue }
            event(.connectionRefused(peer: connection.peer, reason: "no complete header block within \(configuration.headerTimeout) s (--header-timeout)"))
            connection.close()
        }
        for connection in Array(restConnections.values) {
            if let since = connection.lingeringSince {
                // Its last answer went out that long ago: a client still sending is not listening.
                if now &- since > limit { connection.close() }
            } else if let since = connection.waitingSince, now &- since > limit {
                event(.connectionRefused(peer: connection.peer, reason: "no complete HTTP/1.1 request head within \(configuration.headerTimeout) s (--header-timeout)"))
                connection.close()
            }
        }
    }

    func connectionClosed(_ connection: HTTP2Connection) {
        lock.withLock { connectionTotal -= 1 }
        event(.connectionClosed(peer: connection.peer))
        checkDrained()
    }

    // MARK: calls

    func callStarted(_ call: GRPCServerCall, on connection: HTTP2Connection, stream: Int32) {
        call.connection = connection
        call.streamID = stream
        lock.withLock { inFlight += 1 }
    }

    /// From any thread: queue the answer and wake the loop. Once the loop has stopped (a call
    /// that outlived the drain timeout) the answer is dropped: libuv aborts the process on a
    /// `uv_async_send` to a closed loop, so the send happens under the lock `stop()` takes.
    func complete(_ call: GRPCServerCall, _ result: GRPCCallResult) {
        lock.withLock {
            guard !wakeClosed else { if result.isFinal { inFlight -= 1 }; return }
            answered.append((call, result))
            uv_async_send(wake)
        }
    }

    /// From any thread, any number of times, also after the loop has stopped.
    func requestShutdown() {
        lock.withLock {
            shutdownRequested = true
            if !wakeClosed { uv_async_send(wake) }
        }
    }

    private func wakeUp() {
        // Swap the queue with the loop's spare array, so neither reallocates.
        let shutdown = lock.withLock { () -> Bool in
            swap(&answered, &delivering)
            swap(&answeredHTTP, &deliveringHTTP)
            inFlight -= delivering.reduce(0) { $0 + ($1.1.isFinal ? 1 : 0) }
            return shutdownRequested
        }
        for (request, response) in deliveringHTTP {
            guard let connection = request.connection, !connection.closing else { continue }
            connection.answered(request, response)
        }
        deliveringHTTP.removeAll(keepingCapacity: true)
        touched.removeAll(keepingCapacity: true)
        for (call, result) in delivering {
            guard let connection = call.connection else { continue }
            if result.isFinal { call.connection = nil }
            guard !connection.closing else { continue }
            connection.deliver(call, streamID: call.streamID, result)
            if !touched.contains(where: { $0 === connection }) { touched.append(connection) }
        }
        delivering.removeAll(keepingCapacity: true)
        for connection in touched {
            connection.flush()
            if connection.goingAway && connection.streams.isEmpty { connection.closeAfterWrites() }
        }
        touched.removeAll(keepingCapacity: true)
        if shutdown && !isDraining { beginDrain() }
        if isDraining { checkDrained() }
    }

    // MARK: drain

    private func beginDrain() {
        isDraining = true
        event(.draining(calls: inFlightCount, connections: connections.count))
        close(handle: listener)
        if let httpListener { close(handle: httpListener) }
        if let restListener { close(handle: restListener) }
        for connection in Array(connections.values) { connection.sendGoAway() }
        for connection in Array(restConnections.values) { connection.drain() }
        uv_timer_start(drainTimer, { timer in
            guard let data = timer?.pointee.data else { return }
            Unmanaged<GRPCServerCore>.fromOpaque(data).takeUnretainedValue().forceStop()
        }, UInt64(max(0, configuration.drainTimeout) * 1000), 0)
        checkDrained()
    }

    private func checkDrained() {
        guard isDraining, !stopped else { return }
        for connection in Array(connections.values) where connection.streams.isEmpty {
            connection.closeAfterWrites()
        }
        if inFlightCount == 0 && connections.isEmpty && restConnections.isEmpty && plainConnections == 0 { stop() }
    }

    private func forceStop() {
        for connection in Array(connections.values) { connection.close() }
        for connection in Array(restConnections.values) { connection.close() }
        stop()
    }

    private func stop() {
        guard !stopped else { return }
        stopped = true
        lock.withLock { wakeClosed = true }
        uv_timer_stop(drainTimer)
        close(handle: drainTimer)
        uv_timer_stop(sweepTimer)
        close(handle: sweepTimer)
        close(handle: wake)
    }

    private func close<T>(handle: UnsafeMutablePointer<T>) {
        let h = UnsafeMutableRawPointer(handle).assumingMemoryBound(to: uv_handle_t.self)
        if uv_is_closing(h) == 0 { uv_close(h, nil) }
    }
}
