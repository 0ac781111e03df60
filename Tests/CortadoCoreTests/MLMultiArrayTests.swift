import XCTest
@testable import CortadoCore

final class MLMultiArrayTests: XCTestCase {
    func testRowMajorStridesAndZeroFill() throws {
        let a = try MLMultiArray(shape: [2, 3, 4], dataType: .float32)
        XCTAssertEqual(a.strides, [12, 4, 1])
        XCTAssertEqual(a.count, 24)
        XCTAssertTrue(a.doubleValues().allSatisfy { $0 == 0 })
    }

    func testEveryDataTypeRoundTrips() throws {
        for type in MLMultiArrayDataType.allCases {
            let a = try MLMultiArray([1, -2.5, 3, 0.25], shape: [2, 2], dataType: type)
            let expected: [Double] = type == .int32 ? [1, -2, 3, 0] : [1, -2.5, 3, 0.25]
            XCTAssertEqual(a.doubleValues(), expected, "\(type)")
            XCTAssertEqual(a.floatValues(), expected.map(Float.init), "\(type)")
            XCTAssertEqual(a[[1, 0]].doubleValue, expected[2], "\(type)")
        }
    }

    func testFloat16IsStoredAsTwoBytes() throws {
        let a = try MLMultiArray([1.0, 0.5, 65504], shape: [3], dataType: .float16)
        let halves = a.dataPointer.assumingMemoryBound(to: UInt16.self)
        XCTAssertEqual(halves[0], Float16(1.0).bitPattern)
        XCTAssertEqual(halves[1], Float16(0.5).bitPattern)
        XCTAssertEqual(halves[2], Float16(65504).bitPattern)
    }

    func testWrapsCallerMemoryWithoutCopyAndHonoursStrides() throws {
        // A 2×3 view onto a 2×4 buffer (row stride 4): the last column is padding.
        var storage: [Double] = [1, 2, 3, 99, 4, 5, 6, 99]
        try storage.withUnsafeMutableBytes { raw in
            let a = try MLMultiArray(dataPointer: raw.baseAddress!, shape: [2, 3], dataType: .double, strides: [4, 1])
            XCTAssertFalse(a.isContiguous)
            XCTAssertEqual(a.doubleValues(), [1, 2, 3, 4, 5, 6])
            a.setDouble(7, at: 4)  // row 1, column 1
        }
        XCTAssertEqual(storage[5], 7, "writes land in the caller's memory")
    }

    func testDeallocatorRunsOnRelease() throws {
        var released = false
        let p = UnsafeMutableRawPointer.allocate(byteCount: 16, alignment: 8)
        do {
            _ = try MLMultiArray(dataPointer: p, shape: [4], dataType: .float32) { ptr in
                released = true
                ptr.deallocate()
            }
        }
        XCTAssertTrue(released)
    }

    func testRejectsMismatchedValueCountAndStrides() {
        XCTAssertThrowsError(try MLMultiArray([1, 2, 3], shape: [2, 2]))
        var x = 0.0
        XCTAssertThrowsError(try MLMultiArray(dataPointer: &x, shape: [1], dataType: .double, strides: [1, 1]))
    }
}
