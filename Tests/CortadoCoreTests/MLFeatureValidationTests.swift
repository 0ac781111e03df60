import CortadoSpec
import XCTest
@testable import CortadoCore

final class MLFeatureValidationTests: XCTestCase {
    func arrayFeature(_ name: String, shape: [Int64], flex: CoreML_Specification_ArrayFeatureType.OneOf_ShapeFlexibility? = nil, optional: Bool = false) throws -> MLFeatureDescription {
        var f = CoreML_Specification_FeatureDescription()
        f.name = name
        var a = CoreML_Specification_ArrayFeatureType()
        a.shape = shape
        a.dataType = .float32
        a.shapeFlexibility = flex
        f.type.multiArrayType = a
        f.type.isOptional = optional
        return try MLFeatureDescription(f)
    }

    func testFixedShapeAcceptsLeadingOnesOnly() throws {
        let f = try arrayFeature("x", shape: [3, 2])
        XCTAssertNoThrow(try f.validate(MLFeatureValue(multiArray: MLMultiArray(shape: [3, 2], dataType: .double))))
        XCTAssertNoThrow(try f.validate(MLFeatureValue(multiArray: MLMultiArray(shape: [1, 3, 2], dataType: .double))))
        XCTAssertThrowsError(try f.validate(MLFeatureValue(multiArray: MLMultiArray(shape: [2, 3], dataType: .double)))) { error in
            let e = error as! MLModelError
            XCTAssertEqual(e.feature, "x")
            XCTAssertTrue(e.message.contains("[2, 3]") && e.message.contains("[3, 2]"), e.message)
        }
    }

    func testEnumeratedAndRangeShapes() throws {
        var e = CoreML_Specification_ArrayFeatureType.EnumeratedShapes()
        for s in [[1, 4], [2, 4]] as [[Int64]] {
            var shape = CoreML_Specification_ArrayFeatureType.Shape()
            shape.shape = s
            e.shapes.append(shape)
        }
        let enumerated = try arrayFeature("e", shape: [1, 4], flex: .enumeratedShapes(e))
        XCTAssertNoThrow(try enumerated.validateShape([2, 4]))
        XCTAssertThrowsError(try enumerated.validateShape([3, 4]))

        var r = CoreML_Specification_ArrayFeatureType.ShapeRange()
        var d0 = CoreML_Specification_SizeRange(); d0.lowerBound = 1; d0.upperBound = -1
        var d1 = CoreML_Specification_SizeRange(); d1.lowerBound = 2; d1.upperBound = 8
        r.sizeRanges = [d0, d1]
        let ranged = try arrayFeature("r", shape: [1, 2], flex: .shapeRange(r))
        XCTAssertNoThrow(try ranged.validateShape([1000, 8]))
        XCTAssertThrowsError(try ranged.validateShape([1, 9]))
        XCTAssertThrowsError(try ranged.validateShape([1, 2, 3]))
    }

    func testTypesOptionalAndNumericCoercion() throws {
        var f = CoreML_Specification_FeatureDescription()
        f.name = "n"
        f.type.doubleType = CoreML_Specification_DoubleFeatureType()
        let d = try MLFeatureDescription(f)
        XCTAssertNoThrow(try d.validate(MLFeatureValue(int64: 3)), "int64 converts to double as in Core ML")
        XCTAssertThrowsError(try d.validate(MLFeatureValue(string: "3")))
        XCTAssertThrowsError(try d.validate(MLFeatureValue(undefined: .double)))
        let optional = try arrayFeature("o", shape: [2], optional: true)
        XCTAssertNoThrow(try optional.validate(MLFeatureValue(undefined: .multiArray)))
    }

    func testMissingRequiredInputNamesIt() throws {
        var spec = CoreML_Specification_ModelDescription()
        var f = CoreML_Specification_FeatureDescription()
        f.name = "age"
        f.type.int64Type = CoreML_Specification_Int64FeatureType()
        spec.input = [f]
        let description = try MLModelDescription(spec)
        XCTAssertThrowsError(try description.validateInputs(MLDictionaryFeatureProvider(dictionary: [String: MLFeatureValue]()))) { error in
            XCTAssertEqual((error as! MLModelError).feature, "age")
        }
    }

    /// A batch checks each shape once per input (rows of a shape already passed are skipped),
    /// yet a bad shape, a wrong type or a missing value in any row still fails it.
    func testBatchValidationChecksEveryRowsShapeAndType() throws {
        var spec = CoreML_Specification_ModelDescription()
        var f = CoreML_Specification_FeatureDescription()
        f.name = "x"
        var a = CoreML_Specification_ArrayFeatureType()
        a.shape = [4]
        a.dataType = .float32
        f.type.multiArrayType = a
        spec.input = [f]
        let description = try MLModelDescription(spec)
        func row(_ value: MLFeatureValue?) -> MLFeatureProvider {
            MLDictionaryFeatureProvider(dictionary: value.map { ["x": $0] } ?? [:])
        }
        func array(_ shape: [Int]) throws -> MLFeatureValue { MLFeatureValue(multiArray: try MLMultiArray(shape: shape, dataType: .float32)) }
        var good = try (0..<6).map { _ in row(try array([4])) }
        good.append(row(try array([1, 4])))  // another allowed shape
        XCTAssertNoThrow(try description.validateInputs(MLArrayBatchProvider(array: good)))
        for bad in [try array([5]), MLFeatureValue(string: "4"), nil] as [MLFeatureValue?] {
            var rows = good
            rows.insert(row(bad), at: 4)
            XCTAssertThrowsError(try description.validateInputs(MLArrayBatchProvider(array: rows)), "\(String(describing: bad))") { error in
                XCTAssertEqual((error as! MLModelError).feature, "x")
            }
        }
    }

    func testDuplicateInputsAreAnInvalidModel() {
        var spec = CoreML_Specification_ModelDescription()
        var f = CoreML_Specification_FeatureDescription()
        f.name = "a"
        f.type.int64Type = CoreML_Specification_Int64FeatureType()
        spec.input = [f, f]
        XCTAssertThrowsError(try MLModelDescription(spec))
    }

    func testInputVectorizerConcatenatesInDeclaredOrder() throws {
        var spec = CoreML_Specification_ModelDescription()
        var a = CoreML_Specification_FeatureDescription(); a.name = "a"; a.type.doubleType = .init()
        var b = CoreML_Specification_FeatureDescription(); b.name = "b"
        var arr = CoreML_Specification_ArrayFeatureType(); arr.shape = [2]; arr.dataType = .double
        b.type.multiArrayType = arr
        var c = CoreML_Specification_FeatureDescription(); c.name = "c"; c.type.int64Type = .init()
        spec.input = [a, b, c]
        let v = try MLInputVectorizer(inputs: MLModelDescription(spec).inputs)
        XCTAssertEqual(v.length, 4)
        let input = MLDictionaryFeatureProvider(dictionary: [
            "c": MLFeatureValue(int64: 9), "a": MLFeatureValue(double: 0.5),
            "b": MLFeatureValue(multiArray: try MLMultiArray([1, 2], dataType: .float32)),
        ])
        XCTAssertEqual(try v.vector(input), [0.5, 1, 2, 9])
        XCTAssertThrowsError(try MLInputVectorizer(inputs: MLModelDescription(spec).inputs, expectedLength: 5))
    }
}
