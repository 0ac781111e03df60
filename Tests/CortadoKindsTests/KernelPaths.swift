import CCortadoGemm
import XCTest

extension XCTestCase {
    /// Runs `body` once on each kernel path this CPU has (`cg_isa_best()` and every narrower
    /// one, forced with `cg_set_isa`; on aarch64 neon and portable), then restores the path that
    /// was in use. A failure is followed by one naming the path it came from.
    func onEachKernelPath(_ body: () throws -> Void, file: StaticString = #filePath, line: UInt = #line) rethrows {
        let before = cg_isa()
        defer { cg_set_isa(before) }
        for raw in 0...cg_isa_best().rawValue {
            let path = cg_set_isa(cg_isa_path(rawValue: raw))
            if path.rawValue != raw { continue } // a path of another architecture (x86's on aarch64)
            let failures = testRun?.totalFailureCount ?? 0
            try body()
            if (testRun?.totalFailureCount ?? 0) > failures {
                XCTFail("the failures above came from the \(String(cString: cg_isa_name(path))) kernel path", file: file, line: line)
            }
        }
    }
}
