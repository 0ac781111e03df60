import CNGHTTP2
import Foundation

/// nghttp2's C callbacks, forwarding to the `HTTP2Connection` passed as user data.
enum NGHTTP2Callbacks {
    static func install(_ callbacks: OpaquePointer) {
        nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, beginHeaders)
        nghttp2_session_callbacks_set_on_header_callback(callbacks, header)
        nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, frameReceived)
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, dataChunk)
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, streamClosed)
    }

    @inline(__always)
    static func connection(_ userData: UnsafeMutableRawPointer?) -> HTTP2Connection {
        Unmanaged<HTTP2Connection>.fromOpaque(userData!).takeUnretainedValue()
    }

    /// Runs `body` with the connection borrowed, not retained: the connection owns the
    /// session that calls back, so it outlives the call. (Header callbacks come eight or so
    /// times a request; a retain and release each was a measurable part of them.)
    @inline(__always)
    static func withConnection<R>(_ userData: UnsafeMutableRawPointer?, _ body: (HTTP2Connection) -> R) -> R {
        Unmanaged<HTTP2Connection>.fromOpaque(userData!)._withUnsafeGuaranteedRef(body)
    }

    static let beginHeaders: nghttp2_on_begin_headers_callback = { _, frame, userData in
        guard let frame else { return 0 }
        // The block must be finished within the header timeout (`frameReceived` clears this).
        connection(userData).waitingSince = DispatchTime.now().uptimeNanoseconds
        if frame.pointee.hd.type == UInt8(NGHTTP2_HEADERS.rawValue), frame.pointee.headers.cat == NGHTTP2_HCAT_REQUEST {
            connection(userData).beginStream(frame.pointee.hd.stream_id)
        }
        return 0
    }

    static let header: nghttp2_on_header_callback = { _, frame, name, nameLength, value, valueLength, _, userData in
        guard let frame, let name, let value else { return 0 }
        // Request headers only; trailers from a client are ignored.
        guard frame.pointee.hd.type == UInt8(NGHTTP2_HEADERS.rawValue), frame.pointee.headers.cat == NGHTTP2_HCAT_REQUEST else { return 0 }
        return withConnection(userData) { conn in
            conn.withStream(frame.pointee.hd.stream_id) { stream in
                guard !stream.answered else { return 0 }
                if let problem = stream.header(name: UnsafeBufferPointer(start: name, count: nameLength),
                                               value: UnsafeBufferPointer(start: value, count: valueLength), on: conn) {
                    conn.malformed(stream, problem)
                    // nghttp2 stops the header block; the RST_STREAM (PROTOCOL_ERROR) is queued already.
                    return Int32(NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE.rawValue)
                }
                return 0
            } ?? 0
        }
    }

    static let frameReceived: nghttp2_on_frame_recv_callback = { _, frame, userData in
        guard let frame else { return 0 }
        let conn = connection(userData)
        if conn.waitingSince != nil { conn.waitingSince = nil }
        let type = frame.pointee.hd.type
        guard type == UInt8(NGHTTP2_HEADERS.rawValue) || type == UInt8(NGHTTP2_DATA.rawValue),
              let stream = conn.stream(frame.pointee.hd.stream_id) else { return 0 }
        let ended = frame.pointee.hd.flags & UInt8(NGHTTP2_FLAG_END_STREAM.rawValue) != 0
        if type == UInt8(NGHTTP2_HEADERS.rawValue), frame.pointee.headers.cat == NGHTTP2_HCAT_REQUEST {
            if let problem = stream.headersEndProblem() {
                conn.malformed(stream, problem)
                return 0
            }
            conn.headersComplete(stream)
        }
        if ended {
            if let problem = stream.bodyProblem(adding: 0, ended: true) {
                conn.malformed(stream, problem)
                return 0
            }
            conn.requestComplete(stream)
        }
        return 0
    }

    static let dataChunk: nghttp2_on_data_chunk_recv_callback = { _, _, streamID, data, length, userData in
        guard let data else { return 0 }
        connection(userData).dataReceived(streamID, UnsafeRawBufferPointer(start: data, count: length))
        return 0
    }

    static let streamClosed: nghttp2_on_stream_close_callback = { _, streamID, _, userData in
        connection(userData).streamClosed(streamID)
        return 0
    }

    static let readResponse: nghttp2_data_source_read_callback = { _, streamID, buffer, length, flags, _, userData in
        guard let buffer, let flags else { return Int(NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE.rawValue) }
        return connection(userData).readResponse(streamID: streamID, into: buffer, length: length, flags: flags)
    }
}

/// A header list built once and kept for the process's life: the fixed headers of every OK
/// response, so answering a call allocates nothing for them and nghttp2 copies no bytes.
final class NGHTTP2StaticHeaders: @unchecked Sendable {
    let nva: UnsafeMutablePointer<nghttp2_nv>
    let count: Int

    init(_ headers: [(String, String)]) {
        count = headers.count
        nva = .allocate(capacity: headers.count)
        for (i, (name, value)) in headers.enumerated() {
            let n = Array(name.utf8), v = Array(value.utf8)
            let bytes = UnsafeMutablePointer<UInt8>.allocate(capacity: n.count + v.count)
            bytes.initialize(from: n + v, count: n.count + v.count)
            // Kept for the process's life: nghttp2 need not copy the bytes.
            nva[i] = nghttp2_nv(name: bytes, value: bytes + n.count, namelen: n.count, valuelen: v.count,
                                flags: UInt8(NGHTTP2_NV_FLAG_NO_COPY_NAME.rawValue | NGHTTP2_NV_FLAG_NO_COPY_VALUE.rawValue))
        }
    }

    static let okResponse = NGHTTP2StaticHeaders([(":status", "200"), ("content-type", "application/grpc"), ("grpc-accept-encoding", "identity")])
    static let okTrailers = NGHTTP2StaticHeaders([("grpc-status", "0")])
}

/// Builds an `nghttp2_nv` array for a submit call. nghttp2 copies names and values, so the
/// storage only has to live for the call.
enum NGHTTP2Headers {
    static func with<R>(_ headers: [(String, String)], _ body: (UnsafePointer<nghttp2_nv>, Int) -> R) -> R {
        var bytes: [UInt8] = []
        var spans: [(Int, Int, Int, Int)] = []
        for (name, value) in headers {
            let n = bytes.count
            bytes.append(contentsOf: name.utf8)
            let v = bytes.count
            bytes.append(contentsOf: value.utf8)
            spans.append((n, name.utf8.count, v, value.utf8.count))
        }
        return bytes.withUnsafeMutableBufferPointer { storage in
            let base = storage.baseAddress ?? UnsafeMutablePointer<UInt8>.allocate(capacity: 0)
            let nva = spans.map { span in
                nghttp2_nv(name: base + span.0, value: base + span.2, namelen: span.1, valuelen: span.3, flags: UInt8(NGHTTP2_NV_FLAG_NONE.rawValue))
            }
            return nva.withUnsafeBufferPointer { body($0.baseAddress!, $0.count) }
        }
    }
}
