#if DEBUG
@testable import CortadoGRPC
import Foundation

/// The transport's own readers of client bytes, each against a plain reading of the same
/// bytes:
/// - `HTTP2FrameFilter`, fed the bytes in the chunks the input chooses, must pass on what a
///   whole-buffer walk of the frames keeps (every frame but RST_STREAM for a stream never
///   opened; a frame header still incomplete at the end held back);
/// - `GRPCMessageReader`, fed the same chunks, must yield the messages a whole-buffer walk of
///   the length prefixes finds, or fail where that walk fails;
/// - the header checks (`HTTP2FieldCheck`, `GRPCTimeout`) must agree with byte-by-byte
///   readings of RFC 9113 §8.2 and the gRPC timeout grammar for every slice of the input.
///
/// Input: one byte k, then k (up to 7) two-byte split offsets, then the stream.
enum HTTP2Fuzz {
    static func run(_ raw: UnsafeRawBufferPointer) {
        guard let first = raw.first else { return }
        let splitCount = Int(first % 8)
        guard raw.count >= 1 + 2 * splitCount else { return }
        let stream = [UInt8](raw[(1 + 2 * splitCount)...])
        var cuts = (0..<splitCount).map { i -> Int in
            let v = Int(raw[1 + 2 * i]) | Int(raw[2 + 2 * i]) << 8
            return stream.isEmpty ? 0 : v % (stream.count + 1)
        }
        cuts = ([0] + cuts + [stream.count]).sorted()
        let chunks = zip(cuts, cuts.dropFirst()).map { Array(stream[$0..<$1]) }
        frameFilter(stream, chunks: chunks)
        messageReader(stream, chunks: chunks)
        headerChecks(stream)
    }

    // MARK: frame filter

    static func frameFilter(_ stream: [UInt8], chunks: [[UInt8]]) {
        var filter = HTTP2FrameFilter()
        var out: [UInt8] = []
        for chunk in chunks {
            chunk.withUnsafeBytes { filter.filter($0, into: &out) }
        }
        let expected = keptFrames(stream)
        if out != expected {
            fuzzFailure("the frame filter passed \(out.count) bytes, the whole-buffer walk keeps \(expected.count)")
        }
    }

    /// The client preface passes as is; then frames, each kept whole unless it is RST_STREAM
    /// on a client stream id above every stream opened with HEADERS so far.
    static func keptFrames(_ s: [UInt8]) -> [UInt8] {
        var out = Array(s.prefix(24))
        var i = min(24, s.count)
        var highestOpened: UInt32 = 0
        while s.count - i >= 9 {
            let length = Int(s[i]) << 16 | Int(s[i + 1]) << 8 | Int(s[i + 2])
            let type = s[i + 3]
            let id = (UInt32(s[i + 5]) << 24 | UInt32(s[i + 6]) << 16 | UInt32(s[i + 7]) << 8 | UInt32(s[i + 8])) & 0x7FFF_FFFF
            if type == 1 && id > highestOpened { highestOpened = id }
            let end = min(i + 9 + length, s.count)
            let unopenedReset = type == 3 && id != 0 && id % 2 == 1 && id > highestOpened
            if !unopenedReset { out += s[i..<end] }
            i = end
        }
        return out
    }

    // MARK: gRPC messages

    static let maxMessage = 512

    static func messageReader(_ stream: [UInt8], chunks: [[UInt8]]) {
        var reader = GRPCMessageReader(maxMessageSize: maxMessage)
        var failed: GRPCMessageReader.ReadError?
        for chunk in chunks where failed == nil {
            do { try reader.append(chunk) } catch let e as GRPCMessageReader.ReadError { failed = e } catch { fuzzFailure("unexpected error \(error)") }
        }
        let (messages, failure, partial) = plainMessages(stream)
        if failed != failure { fuzzFailure("the message reader failed with \(String(describing: failed)), the plain walk with \(String(describing: failure))") }
        if failure == nil {
            if reader.messages != messages { fuzzFailure("the message reader read \(reader.messages.count) messages, the plain walk \(messages.count)") }
            if reader.hasPartialMessage != partial { fuzzFailure("partial message: reader \(reader.hasPartialMessage), plain walk \(partial)") }
        }
    }

    static func plainMessages(_ s: [UInt8]) -> ([[UInt8]], GRPCMessageReader.ReadError?, Bool) {
        var out: [[UInt8]] = []
        var i = 0
        while i < s.count {
            guard s.count - i >= 5 else { return (out, nil, true) }
            guard s[i] == 0 else { return (out, .compressed, false) }
            let length = Int(s[i + 1]) << 24 | Int(s[i + 2]) << 16 | Int(s[i + 3]) << 8 | Int(s[i + 4])
            guard length <= maxMessage else { return (out, .tooLarge(declared: length, limit: maxMessage), false) }
            guard s.count - i - 5 >= length else { return (out, nil, true) }
            out.append(Array(s[(i + 5)..<(i + 5 + length)]))
            i += 5 + length
        }
        return (out, nil, false)
    }

    // MARK: header checks

    static func headerChecks(_ s: [UInt8]) {
        // Every slice starting at the first two bytes, of every length up to 20 (the value scan
        // reads eight bytes at a time: lengths around 8 and 16 matter); timeouts are short.
        for start in 0..<min(s.count, 2) {
            for end in start...min(s.count, start + 20) {
                let v = Array(s[start..<end])
                v.withUnsafeBufferPointer { p in
                    if HTTP2FieldCheck.isValidValue(p) != validValue(v) { fuzzFailure("value check disagrees on \(v)") }
                    if HTTP2FieldCheck.isValidName(p) != validName(v) { fuzzFailure("name check disagrees on \(v)") }
                    if HTTP2FieldCheck.decimal(p) != decimal(v) { fuzzFailure("content-length reading disagrees on \(v)") }
                }
                if start == 0 && end <= 10, GRPCTimeout.parse(String(decoding: v, as: UTF8.self)) != timeout(v) {
                    fuzzFailure("grpc-timeout reading disagrees on \(v)")
                }
            }
        }
    }

    static func validValue(_ v: [UInt8]) -> Bool {
        if let f = v.first, f == 0x20 || f == 0x09 { return false }
        if let l = v.last, l == 0x20 || l == 0x09 { return false }
        return !v.contains { $0 == 0 || $0 == 0x0a || $0 == 0x0d }
    }

    static let token = Set("abcdefghijklmnopqrstuvwxyz0123456789!#$%&'*+-.^_`|~".utf8)

    static func validName(_ v: [UInt8]) -> Bool {
        !v.isEmpty && v.allSatisfy { token.contains($0) }
    }

    static func decimal(_ v: [UInt8]) -> Int? {
        guard !v.isEmpty, v.count <= 18, v.allSatisfy({ (0x30...0x39).contains($0) }) else { return nil }
        return Int(String(decoding: v, as: UTF8.self))
    }

    /// gRPC's grammar: 1 to 8 ASCII digits and a unit; a product past UInt64 saturates.
    static func timeout(_ v: [UInt8]) -> UInt64? {
        guard v.count >= 2, v.count <= 9, v.dropLast().allSatisfy({ (0x30...0x39).contains($0) }) else { return nil }
        let per: UInt64
        switch v.last! {
        case UInt8(ascii: "H"): per = 3_600_000_000_000
        case UInt8(ascii: "M"): per = 60_000_000_000
        case UInt8(ascii: "S"): per = 1_000_000_000
        case UInt8(ascii: "m"): per = 1_000_000
        case UInt8(ascii: "u"): per = 1_000
        case UInt8(ascii: "n"): per = 1
        default: return nil
        }
        let (product, overflow) = UInt64(String(decoding: v.dropLast(), as: UTF8.self))!.multipliedReportingOverflow(by: per)
        return overflow ? .max : product
    }
}
#endif
