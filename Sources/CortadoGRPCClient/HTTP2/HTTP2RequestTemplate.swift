import CNGHTTP2
import CortadoGRPCCore

/// A unary call's request, ready to send many times: the HTTP/2 header block (built once,
/// kept alive for the run) and the length-prefixed gRPC message.
public final class HTTP2RequestTemplate {
    public let path: String
    public let body: UnsafeMutableRawBufferPointer
    let headerStorage: UnsafeMutableRawBufferPointer
    let nva: UnsafeMutablePointer<nghttp2_nv>
    let nvaCount: Int

    /// `message`: the serialized protobuf; `timeout`: sent as `grpc-timeout` (nil: none);
    /// `metadata`: more headers for every call (e.g. `authorization`); `userAgent`: who calls.
    public init(path: String, authority: String, message: [UInt8], timeout: Double?, metadata: [(String, String)] = [],
                userAgent: String = "cortado-grpc-client") {
        self.path = path
        let framed = GRPCMessageWriter.frame(message)
        let body = UnsafeMutableRawBufferPointer.allocate(byteCount: max(framed.count, 1), alignment: 16)
        framed.withUnsafeBytes { body.copyMemory(from: $0) }
        self.body = body
        var headers = [(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", authority),
                       ("content-type", "application/grpc"), ("te", "trailers"), ("user-agent", userAgent)]
        if let timeout {
            let nanos = timeout >= Double(UInt64.max) / 1e9 ? UInt64.max : UInt64(max(0, timeout * 1e9).rounded(.up))
            headers.append(("grpc-timeout", GRPCTimeout.encode(nanoseconds: nanos)))
        }
        headers += metadata
        let total = headers.reduce(0) { $0 + $1.0.utf8.count + $1.1.utf8.count }
        headerStorage = UnsafeMutableRawBufferPointer.allocate(byteCount: total, alignment: 1)
        nva = UnsafeMutablePointer<nghttp2_nv>.allocate(capacity: headers.count)
        nvaCount = headers.count
        var offset = 0
        let base = headerStorage.baseAddress!.assumingMemoryBound(to: UInt8.self)
        for (i, (name, value)) in headers.enumerated() {
            let nameAt = base + offset
            for b in name.utf8 { base[offset] = b; offset += 1 }
            let valueAt = base + offset
            for b in value.utf8 { base[offset] = b; offset += 1 }
            nva[i] = nghttp2_nv(name: nameAt, value: valueAt, namelen: name.utf8.count, valuelen: value.utf8.count,
                                flags: UInt8(NGHTTP2_NV_FLAG_NO_COPY_NAME.rawValue | NGHTTP2_NV_FLAG_NO_COPY_VALUE.rawValue))
        }
    }

    deinit {
        body.deallocate()
        headerStorage.deallocate()
        nva.deallocate()
    }

}
