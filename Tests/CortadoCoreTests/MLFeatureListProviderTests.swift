@testable import CortadoCore
import XCTest

/// The list provider and the classifier scores kept in label order: the same answers as the
/// dictionary forms they stand in for.
final class MLFeatureListProviderTests: XCTestCase {
    func testLookupAndNames() {
        let a = MLFeatureValue(double: 1.5), b = MLFeatureValue(string: "x")
        let p = MLFeatureListProvider(entries: [("alpha", a), ("a longer feature name than fits inline", b)])
        XCTAssertTrue(p.featureValue(for: "alpha") === a)
        XCTAssertTrue(p.featureValue(for: "a longer feature name than fits inline") === b)
        XCTAssertNil(p.featureValue(for: "alph"))
        XCTAssertNil(p.featureValue(for: ""))
        XCTAssertEqual(p.featureNames, ["alpha", "a longer feature name than fits inline"])
    }

    func testMakeChoosesByCount() {
        let few = (0..<MLFeatureListProvider.listLimit).map { ("f\($0)", MLFeatureValue(int64: Int64($0))) }
        XCTAssertTrue(MLFeatureListProvider.make(few) is MLFeatureListProvider)
        let many = (0...MLFeatureListProvider.listLimit).map { ("f\($0)", MLFeatureValue(int64: Int64($0))) }
        let provider = MLFeatureListProvider.make(many)
        XCTAssertTrue(provider is MLDictionaryFeatureProvider)
        for (name, value) in many { XCTAssertTrue(provider.featureValue(for: name) === value) }
    }

    func testClassScoresReadAsTheDictionary() {
        for labels in [MLClassLabels.int64s([3, 1, 2]), .strings(["cat", "dog", "a label longer than sixteen bytes"])] {
            let scores = [0.25, 0.5, 0.25]
            let value = labels.dictionary(scores: scores)
            XCTAssertEqual(value.type, .dictionary)
            XCTAssertFalse(value.isUndefined)
            XCTAssertEqual(value.classScores?.scores, scores)
            XCTAssertEqual(value.classScores?.labels, labels)
            XCTAssertEqual(value.description, "dictionary of 3 entries")
            let expected: MLFeatureDictionary
            switch labels {
            case .int64s(let l): expected = .int64Keyed(Dictionary(uniqueKeysWithValues: zip(l, scores)))
            case .strings(let l): expected = .stringKeyed(Dictionary(uniqueKeysWithValues: zip(l, scores)))
            }
            XCTAssertEqual(value.dictionary, expected)
            // Built once, then the same on every read (from any thread).
            DispatchQueue.concurrentPerform(iterations: 8) { _ in XCTAssertEqual(value.dictionary, expected) }
            guard case .dictionary(let d) = value.storage else { return XCTFail("storage is not a dictionary") }
            XCTAssertEqual(d, expected)
            XCTAssertEqual(value.dictionaryValue.count, 3)
        }
        let plain = MLFeatureValue(dictionary: .int64Keyed([1: 0.5]))
        XCTAssertNil(plain.classScores)
    }

    func testSingleFeatureProvider() {
        let value = MLFeatureValue(double: 2.5)
        let p = MLSingleFeatureProvider(name: "y", value: value)
        XCTAssertEqual(p.featureNames, ["y"])
        XCTAssertTrue(p.featureValue(for: "y") === value)
        XCTAssertNil(p.featureValue(for: "x"))
        XCTAssertNil(p.featureValue(for: "y "))
    }
}
