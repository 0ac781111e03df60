import CortadoFuzz
import Foundation
import XCTest

/// Every fuzz target runs over its seed corpus and its regression inputs (fuzz/corpus/<target>,
/// fuzz/regressions/<target>) in the ordinary test build, without libFuzzer: the harness code
/// cannot rot, and every crash the fuzzer once found stays fixed. A failed property stops the
/// test process (`fatalError`), naming it.
final class FuzzSeedTests: XCTestCase {
    static let fuzzFolder = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("fuzz")

    func inputs(_ target: CortadoFuzzTarget) -> [URL] {
        ["corpus", "regressions"].flatMap { kind -> [URL] in
            let folder = Self.fuzzFolder.appendingPathComponent(kind).appendingPathComponent(target.rawValue)
            return ((try? FileManager.default.contentsOfDirectory(at: folder, includingPropertiesForKeys: nil)) ?? [])
                .sorted { $0.lastPathComponent < $1.lastPathComponent }
        }
    }

    func runSeeds(_ target: CortadoFuzzTarget, atLeast minimum: Int) throws {
        try XCTSkipUnless(CortadoFuzzTarget.isAvailable, "fuzz targets are compiled in debug builds only")
        let files = inputs(target)
        XCTAssertGreaterThanOrEqual(files.count, minimum, "seed corpus of \(target.rawValue)")
        for file in files {
            target.run(try Data(contentsOf: file))
        }
    }

    func testModelLoaderSeeds() throws { try runSeeds(.modelLoader, atLeast: 5) }
    func testInferDecoderSeeds() throws { try runSeeds(.inferDecoder, atLeast: 3) }
    func testHTTP2Seeds() throws { try runSeeds(.http2, atLeast: 3) }
    func testFeatureJSONSeeds() throws { try runSeeds(.featureJSON, atLeast: 5) }
    func testRESTInferSeeds() throws { try runSeeds(.restInfer, atLeast: 5) }
}
