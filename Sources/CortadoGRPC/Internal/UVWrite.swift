import CLibUV

/// Queues bytes on a libuv stream: they are copied into a block that lives until libuv's
/// write callback frees it. False when libuv refused the write (the stream is closing).
enum UVWrite {
    static func send(_ bytes: [UInt8], on stream: UnsafeMutablePointer<uv_stream_t>) -> Bool {
        let request = UnsafeMutablePointer<uv_write_t>.allocate(capacity: 1)
        let storage = UnsafeMutableRawPointer.allocate(byteCount: max(bytes.count, 1), alignment: 1)
        bytes.withUnsafeBytes { if $0.count > 0 { storage.copyMemory(from: $0.baseAddress!, byteCount: $0.count) } }
        request.pointee.data = storage
        var buffer = uv_buf_init(storage.assumingMemoryBound(to: CChar.self), UInt32(bytes.count))
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
