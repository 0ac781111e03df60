@testable import CortadoGRPC
import XCTest

final class HTTP2FrameFilterTests: XCTestCase {
    static let preface = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)

    func frame(_ type: UInt8, stream: UInt32, payload: [UInt8]) -> [UInt8] {
        let n = payload.count
        return [UInt8(n >> 16 & 0xFF), UInt8(n >> 8 & 0xFF), UInt8(n & 0xFF), type, 0,
                UInt8(stream >> 24), UInt8(stream >> 16 & 0xFF), UInt8(stream >> 8 & 0xFF), UInt8(stream & 0xFF)] + payload
    }

    /// Feeds `input` in chunks of `chunk` bytes and returns what passes.
    func run(_ input: [UInt8], chunk: Int) -> (out: [UInt8], dropped: Int) {
        var filter = HTTP2FrameFilter()
        var out: [UInt8] = []
        var i = 0
        while i < input.count {
            let end = min(i + chunk, input.count)
            input[i..<end].withUnsafeBytes { filter.filter($0, into: &out) }
            i = end
        }
        return (out, filter.dropped)
    }

    func testDropsResetOfNeverOpenedStreamsAtEverySplit() {
        let settings = frame(0x4, stream: 0, payload: [])
        let headers1 = frame(0x1, stream: 1, payload: [1, 2, 3])
        let data1 = frame(0x0, stream: 1, payload: Array(repeating: 7, count: 40))
        let resetIdle = frame(0x3, stream: 3, payload: [0, 0, 0, 8])
        let resetOpen = frame(0x3, stream: 1, payload: [0, 0, 0, 8])
        let headers5 = frame(0x1, stream: 5, payload: [4])
        let input = Self.preface + settings + headers1 + data1 + resetIdle + headers5 + resetOpen
        let want = Self.preface + settings + headers1 + data1 + headers5 + resetOpen
        for chunk in [1, 2, 5, 9, 10, 13, 64, input.count] {
            let (out, dropped) = run(input, chunk: chunk)
            XCTAssertEqual(out, want, "chunk \(chunk)")
            XCTAssertEqual(dropped, 1, "chunk \(chunk)")
        }
    }

    func testEverythingElsePassesUnchanged() {
        let input = Self.preface + frame(0x4, stream: 0, payload: [0, 3, 0, 0, 0, 100]) + frame(0x1, stream: 1, payload: [9])
            + frame(0x3, stream: 1, payload: [0, 0, 0, 8]) + frame(0x6, stream: 0, payload: Array(repeating: 1, count: 8))
        XCTAssertEqual(run(input, chunk: 3).out, input)
        XCTAssertEqual(run(input, chunk: 3).dropped, 0)
    }

    /// Whole frames with nothing to drop pass as one span of the read buffer itself (no copy).
    func testWholeFramesPassAsOneSpanOfTheInput() {
        let input = Self.preface + frame(0x4, stream: 0, payload: []) + frame(0x1, stream: 1, payload: [1, 2, 3])
            + frame(0x0, stream: 1, payload: Array(repeating: 7, count: 40))
        var filter = HTTP2FrameFilter()
        var spans: [UnsafeRawBufferPointer] = []
        input.withUnsafeBytes { raw in
            filter.filter(raw) { spans.append($0); return true }
            XCTAssertEqual(spans.count, 1)
            XCTAssertEqual(spans.first?.baseAddress, raw.baseAddress)
            XCTAssertEqual(spans.first?.count, raw.count)
        }
    }
}
