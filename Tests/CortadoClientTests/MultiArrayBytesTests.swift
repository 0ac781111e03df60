import CortadoModels
import CortadoNativeCoding
import Foundation
import XCTest

/// `MultiArrayBytes.contiguousData`: any strides in, row-major element bytes out.
final class MultiArrayBytesTests: XCTestCase {
    private func doubles(_ d: Data) -> [Double] { d.withUnsafeBytes { Array($0.bindMemory(to: Double.self)) } }

    func testContiguousArrayIsCopiedAsIs() throws {
        let a = try MLMultiArray([1, 2, 3, 4, 5, 6], shape: [2, 3])
        XCTAssertEqual(doubles(MultiArrayBytes.contiguousData(a)), [1, 2, 3, 4, 5, 6])
    }

    /// A transposed (column-major) view.
    func testTransposedStrides() throws {
        var storage: [Double] = [1, 4, 2, 5, 3, 6]
        let data = try storage.withUnsafeMutableBytes { raw in
            try MultiArrayBytes.contiguousData(MLMultiArray(dataPointer: raw.baseAddress!, shape: [2, 3], dataType: .double, strides: [1, 2]))
        }
        XCTAssertEqual(doubles(data), [1, 2, 3, 4, 5, 6])
    }

    /// Rows with padding: a 2×2 window of a 2×4 block.
    func testPaddedRows() throws {
        var storage: [Double] = [1, 2, -1, -1, 3, 4, -1, -1]
        let data = try storage.withUnsafeMutableBytes { raw in
            try MultiArrayBytes.contiguousData(MLMultiArray(dataPointer: raw.baseAddress!, shape: [2, 2], dataType: .double, strides: [4, 1]))
        }
        XCTAssertEqual(doubles(data), [1, 2, 3, 4])
    }

    /// Three dimensions, every other element along the last axis, Float16 (2-byte elements).
    func testThreeDimensionsOfFloat16() throws {
        // shape [2, 2, 2], strides [8, 4, 2] over 16 halfs holding their own index.
        var storage = (0..<16).map { Float16(Float($0)) }
        let data = try storage.withUnsafeMutableBytes { raw in
            try MultiArrayBytes.contiguousData(MLMultiArray(dataPointer: raw.baseAddress!, shape: [2, 2, 2], dataType: .float16, strides: [8, 4, 2]))
        }
        let values = data.withUnsafeBytes { Array($0.bindMemory(to: Float16.self)) }
        XCTAssertEqual(values, [0, 2, 4, 6, 8, 10, 12, 14])
    }

    /// A broadcast dimension (stride 0) repeats the row.
    func testZeroStrideRepeats() throws {
        var storage: [Int32] = [7, 8, 9]
        let data = try storage.withUnsafeMutableBytes { raw in
            try MultiArrayBytes.contiguousData(MLMultiArray(dataPointer: raw.baseAddress!, shape: [2, 3], dataType: .int32, strides: [0, 1]))
        }
        XCTAssertEqual(data.withUnsafeBytes { Array($0.bindMemory(to: Int32.self)) }, [7, 8, 9, 7, 8, 9])
    }

    func testEmptyNonContiguousArray() throws {
        var storage: [Double] = [0]
        let data = try storage.withUnsafeMutableBytes { raw in
            try MultiArrayBytes.contiguousData(MLMultiArray(dataPointer: raw.baseAddress!, shape: [0, 3], dataType: .double, strides: [1, 5]))
        }
        XCTAssertEqual(data.count, 0)
    }
}
