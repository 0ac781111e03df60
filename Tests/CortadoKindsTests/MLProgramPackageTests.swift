import CortadoModels
import Foundation
import XCTest

/// ML Program packages written here, byte by byte, without coremltools: the manifest, the
/// weight file's header and blob records (fp16, fp32 and 4-bit values), a program that reads
/// them, and the Swift API (MLModel(contentsOf:), compile, MLState).
final class MLProgramPackageTests: XCTestCase {
    typealias MIL = CoreML_Specification_MILSpec_Operation

    override func setUp() {
        CortadoModels.registerBuiltinKinds()
    }

    // MARK: writing a package

    /// A weight file: the 64-byte header, then per blob a 64-byte record and its data at a
    /// 64-byte boundary. Returns the file and each blob's record offset.
    func weightFile(_ blobs: [(code: UInt32, bytes: [UInt8])]) -> (Data, [UInt64]) {
        var file = Data(count: 64)
        file.replaceSubrange(0..<4, with: withUnsafeBytes(of: UInt32(blobs.count).littleEndian) { Data($0) })
        file.replaceSubrange(4..<8, with: withUnsafeBytes(of: UInt32(2).littleEndian) { Data($0) })
        var offsets: [UInt64] = []
        for blob in blobs {
            let record = file.count
            offsets.append(UInt64(record))
            var meta = Data(count: 64)
            func put<T: FixedWidthInteger>(_ v: T, _ at: Int) {
                meta.replaceSubrange(at..<(at + MemoryLayout<T>.size), with: withUnsafeBytes(of: v.littleEndian) { Data($0) })
            }
            put(UInt32(0xDEAD_BEEF), 0)
            put(blob.code, 4)
            put(UInt64(blob.bytes.count), 8)
            put(UInt64(record + 64), 16)
            file.append(meta)
            file.append(contentsOf: blob.bytes)
            while file.count % 64 != 0 { file.append(0) }
        }
        return (file, offsets)
    }

    func tensorType(_ t: CoreML_Specification_MILSpec_DataType, _ shape: [Int]) -> CoreML_Specification_MILSpec_ValueType {
        var v = CoreML_Specification_MILSpec_ValueType()
        v.tensorType.dataType = t
        v.tensorType.rank = Int64(shape.count)
        v.tensorType.dimensions = shape.map { d in
            var dim = CoreML_Specification_MILSpec_Dimension()
            dim.constant.size = UInt64(d)
            return dim
        }
        return v
    }

    func blobConst(_ name: String, _ t: CoreML_Specification_MILSpec_DataType, _ shape: [Int], offset: UInt64) -> MIL {
        var op = MIL()
        op.type = "const"
        var out = CoreML_Specification_MILSpec_NamedValueType()
        out.name = name
        out.type = tensorType(t, shape)
        op.outputs = [out]
        var val = CoreML_Specification_MILSpec_Value()
        val.type = out.type
        val.blobFileValue.fileName = "@model_path/weights/weight.bin"
        val.blobFileValue.offset = offset
        op.attributes["val"] = val
        return op
    }

    func op(_ type: String, _ inputs: [String: String], out: String, _ t: CoreML_Specification_MILSpec_DataType, _ shape: [Int]) -> MIL {
        var op = MIL()
        op.type = type
        for (k, v) in inputs {
            var arg = CoreML_Specification_MILSpec_Argument()
            var binding = CoreML_Specification_MILSpec_Argument.Binding()
            binding.name = v
            arg.arguments = [binding]
            op.inputs[k] = arg
        }
        var o = CoreML_Specification_MILSpec_NamedValueType()
        o.name = out
        o.type = tensorType(t, shape)
        op.outputs = [o]
        return op
    }

    /// x[1,3] → linear(W fp32 [2,3], b fp16 [2]) → add(q: 4-bit codes as fp32 via cast) → y[1,2].
    func writePackage(to folder: URL, sentinel: UInt32? = nil) throws -> URL {
        let w: [Float] = [1, 2, 3, -1, 0.5, 0.25]
        let b: [Float16] = [0.5, -2]
        let codes: [UInt8] = [0x3A]  // two uint4 values, low bits first: 10, 3
        let (weights, offsets) = weightFile([
            (2, w.withUnsafeBytes { Array($0) }),
            (1, b.withUnsafeBytes { Array($0) }),
            (11, codes),
        ])
        var block = CoreML_Specification_MILSpec_Block()
        var dtypeOp = MIL()
        dtypeOp.type = "const"
        var dtOut = CoreML_Specification_MILSpec_NamedValueType()
        dtOut.name = "fp32_name"
        dtOut.type.tensorType.dataType = .string
        dtypeOp.outputs = [dtOut]
        var dtVal = CoreML_Specification_MILSpec_Value()
        dtVal.type = dtOut.type
        dtVal.immediateValue.tensor.strings.values = ["fp32"]
        dtypeOp.attributes["val"] = dtVal
        block.operations = [
            blobConst("W", .float32, [2, 3], offset: offsets[0]),
            blobConst("b", .float16, [2], offset: offsets[1]),
            blobConst("q", .uint4, [2], offset: offsets[2]),
            dtypeOp,
            op("cast", ["x": "b", "dtype": "fp32_name"], out: "b32", .float32, [2]),
            op("cast", ["x": "q", "dtype": "fp32_name"], out: "q32", .float32, [2]),
            op("linear", ["x": "x", "weight": "W", "bias": "b32"], out: "lin", .float32, [1, 2]),
            op("add", ["x": "lin", "y": "q32"], out: "y", .float32, [1, 2]),
        ]
        block.outputs = ["y"]
        var function = CoreML_Specification_MILSpec_Function()
        var input = CoreML_Specification_MILSpec_NamedValueType()
        input.name = "x"
        input.type = tensorType(.float32, [1, 3])
        function.inputs = [input]
        function.opset = "CoreML6"
        function.blockSpecializations["CoreML6"] = block
        var spec = CoreML_Specification_Model()
        spec.specificationVersion = 7
        spec.mlProgram.version = 1
        spec.mlProgram.functions["main"] = function
        for (list, name, shape) in [(\CoreML_Specification_ModelDescription.input, "x", [1, 3]), (\.output, "y", [1, 2])] {
            var f = CoreML_Specification_FeatureDescription()
            f.name = name
            f.type.multiArrayType.dataType = .float32
            f.type.multiArrayType.shape = shape.map(Int64.init)
            spec.description_p[keyPath: list].append(f)
        }
        let package = folder.appendingPathComponent("hand.mlpackage")
        let data = package.appendingPathComponent("Data/com.apple.CoreML")
        try FileManager.default.createDirectory(at: data.appendingPathComponent("weights"), withIntermediateDirectories: true)
        try spec.serializedData().write(to: data.appendingPathComponent("model.mlmodel"))
        var file = weights
        if let sentinel {
            file.replaceSubrange(Int(offsets[1])..<Int(offsets[1] + 4), with: withUnsafeBytes(of: sentinel.littleEndian) { Data($0) })
        }
        try file.write(to: data.appendingPathComponent("weights/weight.bin"))
        let manifest = """
            {"fileFormatVersion": "1.0.0", "rootModelIdentifier": "R",
             "itemInfoEntries": {"R": {"author": "com.apple.CoreML", "name": "model.mlmodel", "path": "com.apple.CoreML/model.mlmodel"},
                                 "W": {"author": "com.apple.CoreML", "name": "weights", "path": "com.apple.CoreML/weights"}}}
            """
        try Data(manifest.utf8).write(to: package.appendingPathComponent("Manifest.json"))
        return package
    }

    func temporaryFolder() throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("mlprogram-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        addTeardownBlock { try? FileManager.default.removeItem(at: url) }
        return url
    }

    func predictY(_ model: MLModel, _ x: [Float]) throws -> [Float] {
        let input = try MLMultiArray(shape: [1, 3], dataType: .float32)
        input.write(contiguous: x.withUnsafeBufferPointer { $0 })
        let out = try model.prediction(from: MLDictionaryFeatureProvider(dictionary: ["x": MLFeatureValue(multiArray: input)]))
        return try XCTUnwrap(out.featureValue(for: "y")?.multiArrayValue).floatValues()
    }

    // MARK: tests

    func testHandWrittenPackagePredicts() throws {
        let package = try writePackage(to: temporaryFolder())
        let model = try MLModel(contentsOf: package)
        // W·x + b + q with x = (1, 1, 2): (1+2+6+0.5+10, -1+0.5+0.5-2+3)
        XCTAssertEqual(try predictY(model, [1, 1, 2]), [19.5, 1])
        XCTAssertTrue(model.compiled.summary.contains("precision: fp32"), "\(model.compiled.summary)")
        XCTAssertTrue(model.compiled.summary.contains { $0.contains("2 computed at load") }, "\(model.compiled.summary)")
    }

    func testCompiledFormCarriesTheWeights() throws {
        let folder = try temporaryFolder()
        let package = try writePackage(to: folder)
        let compiled = try MLModelCompiler.compiledContainer(try MLModelFile.open(contentsOf: package))
        try FileManager.default.removeItem(at: package)  // the compiled form stands alone
        let model = try MLModel(data: compiled, name: "hand")
        XCTAssertEqual(try predictY(model, [0, 0, 0]), [10.5, 1])
    }

    func testWrongSentinelNamesFileAndOp() throws {
        let package = try writePackage(to: temporaryFolder(), sentinel: 0x0BAD_F00D)
        XCTAssertThrowsError(try MLModel(contentsOf: package)) { error in
            let text = "\(error)"
            XCTAssertTrue(text.contains("sentinel") && text.contains("weight.bin") && text.contains("const"), text)
        }
    }

    func testStatelessModelHasNoState() throws {
        let model = try MLModel(contentsOf: try writePackage(to: temporaryFolder()))
        XCTAssertFalse(model.isStateful)
        XCTAssertThrowsError(try model.makeState())
    }
}
