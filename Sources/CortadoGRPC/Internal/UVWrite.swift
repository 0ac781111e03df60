import CLibUV

/// Queues bytes on a libuv stream: they are copied into a block that lives until libuv's
/// write callback frees it. False when libuv refused the write (the stream is closing).
///
/// The bytes are first offered to `uv_try_write` (libuv refuses it while earlier writes are
/// queued, so order holds): on a loopback or an idle socket the whole chunk usually goes
/// out at once, without a write request, a copy or the poll-set changes a queued write
/// costs. Only what the socket did not take is queued.
enum UVWrite {
    static func send(_ bytes: [UInt8], on stream: UnsafeMutablePointer<uv_stream_t>) -> Bool {
        var sent = 0
        bytes.withUnsafeBytes { raw in
            guard raw.count > 0 else { return }
            var buffer = uv_buf_init(UnsafeMutableRawPointer(mutating: raw.baseAddress!).assumingMemoryBound(to: CChar.self), UInt32(raw.count))
            let n = uv_try_write(stream, &buffer, 1)
            if n > 0 { sent = Int(n) }
        }
        if sent == bytes.count && sent > 0 { return true }
        let rest = bytes.count - sent
        let request = UnsafeMutablePointer<uv_write_t>.allocate(capacity: 1)
        let storage = UnsafeMutableRawPointer.allocate(byteCount: max(rest, 1), alignment: 1)
        bytes.withUnsafeBytes { if rest > 0 { storage.copyMemory(from: $0.baseAddress! + sent, byteCount: rest) } }
        request.pointee.data = storage
        var buffer = uv_buf_init(storage.assumingMemoryBound(to: CChar.self), UInt32(rest))
        let status = uv_write(request, stream, &buffer, 1) { request, _ in
            request?.pointee.data?.deallocate()
            request?.deallocate()
        }
        if status != 0 {
            storage.deallocate()
            request.deallocate()
            return false
        }
        return true
    }
}
