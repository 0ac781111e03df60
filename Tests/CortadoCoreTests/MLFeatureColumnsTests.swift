import CortadoSpec
import Foundation
import XCTest
@testable import CortadoCore

/// A test-only kind that runs row by row (no columnar path): from a [2, 3] array `a`, a double
/// `d`, an int64 `i` and a string `s` it makes `y` = a's column sums · d + i (a [3] array),
/// `z` = 2·d (a double), `n` = i + 1 (an int64) and `t` = s + "!" (a string). It registers
/// under a Model.Type case no Cortado kind implements.
private enum RowsOnlyKind: MLModelKind {
    static let specTypes = ["gazetteer"]
    static func compile(_ spec: CoreML_Specification_Model, context: MLCompileContext) throws -> any MLCompiledModel { Rows() }

    final class Rows: MLCompiledModel {
        func prediction(from input: MLFeatureProvider, options: MLPredictionOptions) throws -> MLFeatureProvider {
            let a = input.featureValue(for: "a")!.multiArrayValue!
            let d = input.featureValue(for: "d")!.doubleValue
            let i = input.featureValue(for: "i")!.int64Value
            let y = try options.outputArray(named: "y", shape: [3], dataType: .double)
            for c in 0..<3 { y.setDouble((a.double(at: c) + a.double(at: 3 + c)) * d + Double(i), at: c) }
            return MLDictionaryFeatureProvider(dictionary: [
                "y": MLFeatureValue(multiArray: y), "z": MLFeatureValue(double: 2 * d), "n": MLFeatureValue(int64: i + 1),
                "t": MLFeatureValue(string: (input.featureValue(for: "s")?.stringValue ?? "") + "!"),
            ])
        }
    }
}

final class MLFeatureColumnsTests: XCTestCase {
    /// A small deterministic generator, so failures reproduce.
    struct Numbers {
        var state: UInt64
        mutating func next() -> Double {
            state = state &* 6364136223846793005 &+ 1442695040888963407
            return Double(Int64(state >> 40) - (1 << 23)) / Double(1 << 20)
        }
    }

    func model() throws -> MLModel {
        MLModelKindRegistry.shared.register(RowsOnlyKind.self)
        var s = CoreML_Specification_Model()
        s.specificationVersion = 4
        func feature(_ name: String, _ set: (inout CoreML_Specification_FeatureType) -> Void) -> CoreML_Specification_FeatureDescription {
            var f = CoreML_Specification_FeatureDescription()
            f.name = name
            set(&f.type)
            return f
        }
        func array(_ shape: [Int64]) -> CoreML_Specification_ArrayFeatureType {
            var a = CoreML_Specification_ArrayFeatureType()
            a.shape = shape
            a.dataType = .float32
            return a
        }
        s.description_p.input = [
            feature("a") { $0.multiArrayType = array([2, 3]) }, feature("d") { $0.doubleType = .init() },
            feature("i") { $0.int64Type = .init() }, feature("s") { $0.stringType = .init(); $0.isOptional = true },
        ]
        s.description_p.output = [
            feature("z") { $0.doubleType = .init() }, feature("y") { $0.multiArrayType = array([3]) },
            feature("n") { $0.int64Type = .init() }, feature("t") { $0.stringType = .init() },
        ]
        s.type = .gazetteer(.init())
        return try MLModel(data: try s.serializedData(), name: "rows")
    }

    /// `rows` rows of inputs for `model()`: `a` as one float32 array, the rest as their columns.
    func inputs(_ rows: Int, seed: UInt64 = 1) throws -> MLFeatureColumns {
        var numbers = Numbers(state: seed)
        let a = try MLMultiArray(shape: [rows, 2, 3], dataType: .float32)
        for k in 0..<a.count { a.setDouble(numbers.next(), at: k) }
        let columns = MLFeatureColumns(count: rows)
        columns.set("a", .arrays(a))
        columns.set("d", .doubles((0..<rows).map { _ in numbers.next() }))
        columns.set("i", .int64s((0..<rows).map { _ in Int64(numbers.next() * 100) }))
        columns.set("s", .values((0..<rows).map { MLFeatureValue(string: "row \($0)") }))
        return columns
    }

    /// Asserts two values are the same (arrays: shape and every element exactly).
    func assertSame(_ a: MLFeatureValue?, _ b: MLFeatureValue?, _ context: String, file: StaticString = #filePath, line: UInt = #line) {
        guard let a, let b else { return XCTFail("\(context): missing value", file: file, line: line) }
        XCTAssertEqual(a.type, b.type, context, file: file, line: line)
        switch (a.storage, b.storage) {
        case (.multiArray(let x), .multiArray(let y)):
            XCTAssertEqual(x.shape, y.shape, context, file: file, line: line)
            XCTAssertEqual(x.doubleValues(), y.doubleValues(), context, file: file, line: line)
        case (.double(let x), .double(let y)): XCTAssertEqual(x, y, context, file: file, line: line)
        case (.int64(let x), .int64(let y)): XCTAssertEqual(x, y, context, file: file, line: line)
        case (.string(let x), .string(let y)): XCTAssertEqual(x, y, context, file: file, line: line)
        default: XCTFail("\(context): \(a) vs \(b)", file: file, line: line)
        }
    }

    // MARK: Views

    func testRowValuesAreViewsThatOutliveTheColumns() throws {
        var columns: MLFeatureColumns? = try inputs(4)
        let a = { if case .arrays(let a) = columns!.column("a")! { return a }; fatalError() }()
        let row2 = columns!.value("a", row: 2)!.multiArrayValue!
        XCTAssertEqual(row2.shape, [2, 3])
        XCTAssertEqual(row2.dataPointer, a.dataPointer + 2 * 6 * 4, "a row is a view into the column, not a copy")
        XCTAssertEqual(row2.doubleValues(), Array(a.doubleValues()[12..<18]))
        let expected = row2.doubleValues()
        XCTAssertEqual(columns!.value("d", row: 2)?.type, .double)
        XCTAssertEqual(columns!.value("i", row: 3)?.type, .int64)
        XCTAssertNil(columns!.value("a", row: 4))
        XCTAssertNil(columns!.value("nope", row: 0))
        columns = nil
        XCTAssertEqual(row2.doubleValues(), expected, "the view keeps the batch alive")
    }

    func testRowsOfABatchAreViewsWithTheSameValues() throws {
        let columns = try inputs(10)
        let part = columns.rows(3..<7)
        XCTAssertEqual(part.count, 4)
        XCTAssertEqual(part.names, columns.names)
        guard case .arrays(let whole) = columns.column("a")!, case .arrays(let slice) = part.column("a")! else { return XCTFail() }
        XCTAssertEqual(slice.shape, [4, 2, 3])
        XCTAssertEqual(slice.dataPointer, whole.dataPointer + 3 * 6 * 4)
        for r in 0..<4 {
            for name in columns.names {
                assertSame(part.value(name, row: r), columns.value(name, row: 3 + r), "\(name) row \(r)")
            }
        }
        XCTAssertEqual(columns.rows(5..<5).count, 0)
    }

    func testACopyTakesNewColumnsAndLeavesTheOriginal() throws {
        let columns = try inputs(3)
        let copy = MLFeatureColumns(copying: columns)
        XCTAssertEqual(copy.names, columns.names)
        copy.set("d", .doubles([7, 8, 9]))
        copy.set("extra", .int64s([1, 2, 3]))
        XCTAssertEqual(copy.value("d", row: 1)?.doubleValue, 8)
        XCTAssertNotEqual(columns.value("d", row: 1)?.doubleValue, 8)
        XCTAssertNil(columns.column("extra"))
        XCTAssertEqual(copy.names, ["a", "d", "i", "s", "extra"])
        guard case .doubles? = columns.column("d", hint: 1), case .arrays? = columns.column("a", hint: 3) else {
            return XCTFail("a column is found at its hinted place or elsewhere")
        }
        XCTAssertNil(columns.column("nope", hint: 0))
    }

    func testConcatenatingGivesBackTheWhole() throws {
        let columns = try inputs(9)
        let joined = try MLFeatureColumns.concatenating([columns.rows(0..<2), columns.rows(2..<7), columns.rows(7..<9)])
        XCTAssertEqual(joined.count, 9)
        XCTAssertEqual(joined.names, columns.names)
        guard case .arrays = joined.column("a")!, case .doubles = joined.column("d")!, case .int64s = joined.column("i")! else {
            return XCTFail("each column keeps its form")
        }
        for r in 0..<9 {
            for name in columns.names { assertSame(joined.value(name, row: r), columns.value(name, row: r), "\(name) row \(r)") }
        }
    }

    func testConcatenatingRejectsRowsOfAnotherShapeOrType() throws {
        let columns = try inputs(2)
        let other = try inputs(2)
        other.set("a", .arrays(try MLMultiArray(shape: [2, 3, 2], dataType: .float32)))
        XCTAssertThrowsError(try MLFeatureColumns.concatenating([columns, other])) { error in
            XCTAssertEqual((error as? MLModelError)?.feature, "a")
        }
        other.set("a", .arrays(try MLMultiArray(shape: [2, 2, 3], dataType: .double)))
        XCTAssertThrowsError(try MLFeatureColumns.concatenating([columns, other]))
        // Scalars held in different forms: every row's own value.
        let mixed = try inputs(2)
        mixed.set("d", .values([MLFeatureValue(double: 1), MLFeatureValue(double: 2)]))
        let joined = try MLFeatureColumns.concatenating([columns, mixed])
        guard case .values(let d) = joined.column("d")! else { return XCTFail() }
        XCTAssertEqual(d.map(\.doubleValue)[2...], [1, 2])
    }

    // MARK: Stacking

    func testStackingMakesEachFeaturesNaturalColumn() throws {
        let rows: [MLFeatureProvider] = (0..<3).map { r in
            let a = try! MLMultiArray([Double(r), Double(r) + 0.5], dataType: .float32)
            return MLDictionaryFeatureProvider(dictionary: [
                "a": MLFeatureValue(multiArray: a), "d": MLFeatureValue(double: Double(r)), "i": MLFeatureValue(int64: Int64(r)),
                "s": MLFeatureValue(string: "\(r)"),
            ])
        }
        let columns = try MLFeatureColumns(stacking: rows, names: ["a", "d", "i", "s"])
        guard case .arrays(let a) = columns.column("a")!, case .doubles(let d) = columns.column("d")!,
              case .int64s(let i) = columns.column("i")!, case .values(let s) = columns.column("s")! else { return XCTFail() }
        XCTAssertEqual(a.shape, [3, 2])
        XCTAssertEqual(a.dataType, .float32)
        XCTAssertEqual(a.doubleValues(), [0, 0.5, 1, 1.5, 2, 2.5])
        XCTAssertEqual(d, [0, 1, 2])
        XCTAssertEqual(i, [0, 1, 2])
        XCTAssertEqual(s.map(\.stringValue), ["0", "1", "2"])

        let backing = try MLMultiArray(shape: [3, 2], dataType: .double)
        let backed = try MLFeatureColumns(stacking: rows, names: ["a"], backings: ["a": backing])
        guard case .arrays(let b) = backed.column("a")! else { return XCTFail() }
        XCTAssertTrue(b === backing, "written into the caller's array")
        XCTAssertEqual(backing.doubleValues(), [0, 0.5, 1, 1.5, 2, 2.5])
        XCTAssertThrowsError(try MLFeatureColumns(stacking: rows, names: ["a"], backings: ["a": try MLMultiArray(shape: [5], dataType: .double)]))

        // Arrays of different shapes stay values.
        let ragged: [MLFeatureProvider] = [
            MLSingleFeatureProvider(name: "a", value: MLFeatureValue(multiArray: try MLMultiArray(shape: [2], dataType: .double))),
            MLSingleFeatureProvider(name: "a", value: MLFeatureValue(multiArray: try MLMultiArray(shape: [3], dataType: .double))),
        ]
        guard case .values = try MLFeatureColumns(stacking: ragged, names: ["a"]).column("a")! else { return XCTFail() }
    }

    // MARK: Dense rows

    func testDenseRowsFillFromColumnsAsGatherReadsRows() throws {
        func described(_ name: String, _ set: (inout CoreML_Specification_FeatureType) -> Void) throws -> MLFeatureDescription {
            var f = CoreML_Specification_FeatureDescription()
            f.name = name
            set(&f.type)
            return try MLFeatureDescription(f)
        }
        let layout = try MLInputVectorizer(inputs: [
            described("d") { $0.doubleType = .init() }, described("a") { $0.multiArrayType.shape = [2, 3]; $0.multiArrayType.dataType = .float32 },
            described("i") { $0.int64Type = .init() }, described("v") { $0.doubleType = .init() },
        ])
        let n = 4
        let columns = try inputs(n, seed: 3)
        columns.set("v", .values((0..<n).map { $0 % 2 == 0 ? MLFeatureValue(double: Double($0) / 3) : MLFeatureValue(int64: Int64($0)) }))
        var matrix = [Double](repeating: .nan, count: n * layout.length)
        XCTAssertTrue(matrix.withUnsafeMutableBufferPointer { layout.fill($0.baseAddress!, from: columns) })
        for r in 0..<n {
            XCTAssertEqual(Array(matrix[(r * layout.length)..<((r + 1) * layout.length)]), try layout.vector(columns.features(at: r)), "row \(r)")
        }
        // What the rows would read otherwise is left to them.
        for (name, column) in [("i", MLFeatureColumn.values(Array(repeating: MLFeatureValue(undefined: .int64), count: n))),
                               ("d", .values(Array(repeating: MLFeatureValue(string: "1"), count: n))),
                               ("a", .doubles(Array(repeating: 1, count: n)))] {
            let odd = try inputs(n, seed: 3)
            odd.set("v", .doubles(Array(repeating: 0, count: n)))
            odd.set(name, column)
            XCTAssertFalse(matrix.withUnsafeMutableBufferPointer { layout.fill($0.baseAddress!, from: odd) }, name)
        }
        XCTAssertFalse(matrix.withUnsafeMutableBufferPointer { layout.fill($0.baseAddress!, from: MLFeatureColumns(count: n)) })
    }

    // MARK: Predicting (the row-by-row path)

    func testColumnsPredictAsEachRowDoes() throws {
        let model = try model()
        for rows in [1, 3, 300] {
            let columns = try inputs(rows, seed: UInt64(rows))
            for backed in [false, true] {
                var options = MLPredictionOptions()
                let backing = try MLMultiArray(shape: [rows, 3], dataType: .float32)
                if backed { options.outputBackings = ["y": backing] }
                let out = try model.predictions(fromColumns: columns, options: options)
                XCTAssertEqual(out.count, rows)
                XCTAssertEqual(out.names, ["z", "y", "n", "t"], "outputs in the description's order")
                guard case .arrays(let y) = out.column("y")!, case .doubles = out.column("z")!, case .int64s = out.column("n")!,
                      case .values = out.column("t")! else { return XCTFail("natural forms") }
                XCTAssertEqual(y.shape, [rows, 3])
                if backed { XCTAssertTrue(y === backing) }
                for r in 0..<rows {
                    let one = try model.prediction(from: columns.features(at: r))
                    for name in ["y", "z", "n", "t"] {
                        var expected = one.featureValue(for: name)
                        // A float32 backing holds y as float32.
                        if backed, name == "y", let e = expected?.multiArrayValue {
                            expected = MLFeatureValue(multiArray: try MLMultiArray(e.doubleValues().map { Double(Float($0)) }, shape: e.shape))
                        }
                        assertSame(out.value(name, row: r), expected, "\(rows) rows, backed \(backed), \(name) row \(r)")
                    }
                }
            }
        }
    }

    /// The error `prediction(from:)` gives for the first row, and the one the columns give.
    func errors(_ model: MLModel, _ columns: MLFeatureColumns) -> (row: MLModelError?, columns: MLModelError?) {
        var row: MLModelError?, batch: MLModelError?
        XCTAssertThrowsError(try model.prediction(from: columns.features(at: 0))) { row = $0 as? MLModelError }
        XCTAssertThrowsError(try model.predictions(fromColumns: columns)) { batch = $0 as? MLModelError }
        return (row, batch)
    }

    func testBadColumnsFailAsTheirRowsDo() throws {
        let model = try model()
        let shape = try inputs(3)
        shape.set("a", .arrays(try MLMultiArray(shape: [3, 3, 2], dataType: .float32)))
        let type = try inputs(3)
        type.set("d", .values((0..<3).map { MLFeatureValue(string: "\($0)") }))
        let arrayForDouble = try inputs(3)
        arrayForDouble.set("d", .arrays(try MLMultiArray(shape: [3, 1], dataType: .double)))
        let doubleForArray = try inputs(3)
        doubleForArray.set("a", .doubles([1, 2, 3]))
        let missing = MLFeatureColumns(count: 3)
        let full = try inputs(3)
        for name in ["a", "d", "s"] { missing.set(name, full.column(name)!) }
        for (what, columns) in [("shape", shape), ("type", type), ("array for a double", arrayForDouble),
                                ("double for an array", doubleForArray), ("missing", missing)] {
            let (row, batch) = errors(model, columns)
            XCTAssertNotNil(row, what)
            XCTAssertEqual(row, batch, what)
            XCTAssertEqual(batch?.model, "rows", what)
        }
        // An optional input left out, as a column of undefined values or no column at all, is fine.
        let optional = try inputs(3)
        optional.set("s", .values(Array(repeating: MLFeatureValue(undefined: .string), count: 3)))
        XCTAssertEqual(try model.predictions(fromColumns: optional).value("t", row: 1)?.stringValue, "!")
        // A column of another length than the batch is named.
        let short = try inputs(3)
        short.set("d", .doubles([1]))
        XCTAssertThrowsError(try model.predictions(fromColumns: short)) { XCTAssertEqual(($0 as? MLModelError)?.feature, "d") }
    }
}
