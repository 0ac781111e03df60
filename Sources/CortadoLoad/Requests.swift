import CortadoCore
import CortadoGRPCClient
import CortadoGRPCCore
import CortadoServerProtos
import Foundation
import SwiftProtobuf

/// Which API the load targets.
public enum LoadAPI: String, CaseIterable, Sendable {
    /// `cortado.v1.Predictor/Predict` (inputs described by `Describe`).
    case native
    /// `inference.GRPCInferenceService/ModelInfer` (inputs described by `ModelMetadata`).
    case oip

    public var path: String {
        switch self {
        case .native: return "/cortado.v1.Predictor/Predict"
        case .oip: return "/inference.GRPCInferenceService/ModelInfer"
        }
    }
}

/// A small deterministic generator (SplitMix64), so `--seed` gives the same inputs on every run.
public struct SeededRandom {
    private var state: UInt64
    public init(seed: UInt64) { state = seed &+ 0x9E37_79B9_7F4A_7C15 }
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    public mutating func unit() -> Double { Double(next() >> 11) * 0x1.0p-53 }
    public mutating func below(_ n: Int) -> Int { Int(next() % UInt64(max(1, n))) }
    public mutating func word() -> String {
        let letters = Array("abcdefghijklmnopqrstuvwxyz")
        return String((0..<(3 + below(6))).map { _ in letters[below(letters.count)] })
    }
}

/// Builds the request messages a run sends (round-robin over them).
public struct RequestSet {
    public var api: LoadAPI
    public var model: String
    public var version: String
    public var messages: [[UInt8]]
    /// What the user should know: where inputs came from, fallbacks taken.
    public var notes: [String]

    /// Reads the model's description from the server, then builds `count` random rows
    /// (or reads the rows of `jsonl`).
    public static func build(loop: HTTP2ClientLoop, api: LoadAPI, model: String, version: String, jsonl: String?,
                             count: Int, seed: UInt64, timeout: Double) throws -> RequestSet {
        var notes: [String] = []
        var rows: [[String: Any]]? = nil
        if let jsonl {
            rows = try readJSONL(jsonl)
            notes.append("inputs: \(rows!.count) row(s) from \(jsonl)")
        }
        var rng = SeededRandom(seed: seed)
        var messages: [[UInt8]] = []
        switch api {
        case .native:
            var request = Cortado_V1_DescribeRequest()
            request.model = model
            request.version = version
            let outcome = loop.unary(HTTP2RequestTemplate(path: "/cortado.v1.Predictor/Describe", authority: loop.authority,
                                                          message: try request.serializedBytes(), timeout: timeout,
                                                          metadata: loop.metadata, userAgent: "cortado-load"), timeout: timeout)
            var inputs: [Cortado_V1_FeatureDescription]? = nil
            if outcome.status == 0 {
                inputs = try Cortado_V1_DescribeResponse(serializedBytes: unframe(outcome.body)).inputs
            } else {
                let why = "Describe(\(model)) failed: \(GRPCStatus.name(ofCode: outcome.status)) \(outcome.message ?? "")"
                guard rows != nil else { throw LoadError("\(why); random inputs need the model's description (or give --input rows.jsonl)") }
                notes.append("\(why); inputs typed from the JSON alone")
            }
            if let rows {
                for row in rows { messages.append(try NativeInputs.request(model: model, version: version, row: row, inputs: inputs)) }
            } else {
                notes.append("inputs: \(count) random row(s) from the model's description, seed \(seed)")
                for _ in 0..<count { messages.append(try NativeInputs.random(model: model, version: version, inputs: inputs!, rng: &rng)) }
            }
        case .oip:
            var request = Inference_ModelMetadataRequest()
            request.name = model
            request.version = version
            let outcome = loop.unary(HTTP2RequestTemplate(path: "/inference.GRPCInferenceService/ModelMetadata", authority: loop.authority,
                                                          message: try request.serializedBytes(), timeout: timeout,
                                                          metadata: loop.metadata, userAgent: "cortado-load"), timeout: timeout)
            var inputs: [Inference_ModelMetadataResponse.TensorMetadata]? = nil
            if outcome.status == 0 {
                inputs = try Inference_ModelMetadataResponse(serializedBytes: unframe(outcome.body)).inputs
            } else {
                let why = "ModelMetadata(\(model)) failed: \(GRPCStatus.name(ofCode: outcome.status)) \(outcome.message ?? "")"
                guard rows != nil else { throw LoadError("\(why); random inputs need the model's metadata (or give --input rows.jsonl)") }
                notes.append("\(why); tensors typed from the JSON alone")
            }
            if let rows {
                for row in rows { messages.append(try OIPInputs.request(model: model, version: version, row: row, inputs: inputs)) }
            } else {
                notes.append("inputs: \(count) random row(s) from ModelMetadata, seed \(seed)")
                for _ in 0..<count { messages.append(try OIPInputs.random(model: model, version: version, inputs: inputs!, rng: &rng)) }
            }
        }
        guard !messages.isEmpty else { throw LoadError("no requests to send (empty input file?)") }
        return RequestSet(api: api, model: model, version: version, messages: messages, notes: notes)
    }

    public func templates(authority: String, timeout: Double?, metadata: [(String, String)] = []) -> [HTTP2RequestTemplate] {
        messages.map { HTTP2RequestTemplate(path: api.path, authority: authority, message: $0, timeout: timeout, metadata: metadata,
                                            userAgent: "cortado-load") }
    }

    static func unframe(_ body: [UInt8]) throws -> [UInt8] {
        switch GRPCResponseStatus.message(inBody: body) {
        case .success(let message): return message
        case .failure(let status): throw LoadError(status.message)
        }
    }

    /// One JSON object per non-empty line, in the CLI's JSON encoding (docs/first-model.md, "Feature values in JSON").
    static func readJSONL(_ path: String) throws -> [[String: Any]] {
        guard let data = FileManager.default.contents(atPath: path) else { throw LoadError("cannot read \(path)") }
        var rows: [[String: Any]] = []
        for (n, line) in data.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).enumerated() {
            if line.allSatisfy({ $0 == 0x20 || $0 == 0x09 || $0 == 0x0d }) { continue }
            let value: Any
            do { value = try MLJSONParser.parse(line) } catch { throw LoadError("\(path):\(n + 1): \(error)") }
            guard let object = value as? [String: Any] else { throw LoadError("\(path):\(n + 1): expected a JSON object of inputs") }
            rows.append(object)
        }
        return rows
    }
}

// MARK: JSON helpers

enum JSONValues {
    static func double(_ json: Any, _ feature: String) throws -> Double {
        switch json {
        case let n as NSNumber: return n.doubleValue
        case is NSNull: return .nan
        case let s as String:
            switch s.lowercased() {
            case "nan": return .nan
            case "infinity", "inf", "+infinity": return .infinity
            case "-infinity", "-inf": return -.infinity
            default: break
            }
        default: break
        }
        throw LoadError("input \(feature): expected a number")
    }

    /// A multi-array's values and shape: `{"shape","dataType","data"}`, a nested array or a number.
    static func array(_ json: Any, _ feature: String) throws -> (values: [Double], shape: [Int], dataType: String?) {
        if let object = json as? [String: Any], let data = object["data"] as? [Any] {
            let values = try data.map { try double($0, feature) }
            let shape = (object["shape"] as? [NSNumber])?.map(\.intValue) ?? [values.count]
            guard shape.reduce(1, *) == values.count else { throw LoadError("input \(feature): \(values.count) values do not fill shape \(shape)") }
            return (values, shape, object["dataType"] as? String)
        }
        if json is [Any] {
            var shape: [Int] = []
            var values: [Double] = []
            try flatten(json, depth: 0, shape: &shape, values: &values, feature)
            return (values, shape, nil)
        }
        return ([try double(json, feature)], [1], nil)
    }

    static func flatten(_ json: Any, depth: Int, shape: inout [Int], values: inout [Double], _ feature: String) throws {
        if let items = json as? [Any] {
            if depth == shape.count { shape.append(items.count) }
            guard shape[depth] == items.count else { throw LoadError("input \(feature): nested arrays are ragged") }
            for item in items { try flatten(item, depth: depth + 1, shape: &shape, values: &values, feature) }
        } else {
            guard depth == shape.count else { throw LoadError("input \(feature): nested arrays are ragged") }
            values.append(try double(json, feature))
        }
    }

    /// Little-endian element bytes.
    static func bytes(_ values: [Double], as type: String) throws -> [UInt8] {
        var out: [UInt8] = []
        func put<T: FixedWidthInteger>(_ v: T) { withUnsafeBytes(of: v.littleEndian) { out.append(contentsOf: $0) } }
        switch type {
        case "FP32", "FLOAT32": out.reserveCapacity(values.count * 4); for v in values { put(Float(v).bitPattern) }
        case "FP64", "DOUBLE": out.reserveCapacity(values.count * 8); for v in values { put(v.bitPattern) }
        case "FP16", "FLOAT16": for v in values { put(Float16(Float(v)).bitPattern) }
        case "INT32": for v in values { put(Int32(clamping: Int64(v.rounded()))) }
        case "INT64": for v in values { put(Int64(v.rounded())) }
        case "INT16": for v in values { put(Int16(clamping: Int64(v.rounded()))) }
        case "INT8": for v in values { put(Int8(clamping: Int64(v.rounded()))) }
        case "UINT8": for v in values { put(UInt8(clamping: Int64(v.rounded()))) }
        case "UINT16": for v in values { put(UInt16(clamping: Int64(v.rounded()))) }
        case "UINT32": for v in values { put(UInt32(clamping: Int64(v.rounded()))) }
        case "UINT64": for v in values { put(UInt64(clamping: Int64(v.rounded()))) }
        case "BOOL": for v in values { out.append(v != 0 ? 1 : 0) }
        default: throw LoadError("datatype \(type) is not supported by cortado-load yet")
        }
        return out
    }
}

// MARK: native (cortado.v1.Predictor)

enum NativeInputs {
    static func request(model: String, version: String, features: [Cortado_V1_Feature]) throws -> [UInt8] {
        var request = Cortado_V1_PredictRequest()
        request.model = model
        request.version = version
        request.inputs = features
        return try request.serializedBytes()
    }

    static func feature(_ name: String, _ value: Cortado_V1_FeatureValue) -> Cortado_V1_Feature {
        var f = Cortado_V1_Feature()
        f.name = name
        f.value = value
        return f
    }

    static func arrayType(_ t: Cortado_V1_ArrayDataType) -> String {
        switch t {
        case .float32: return "FLOAT32"
        case .int32: return "INT32"
        case .float16: return "FLOAT16"
        default: return "DOUBLE"
        }
    }

    static func arrayType(named s: String) -> Cortado_V1_ArrayDataType? {
        switch s.uppercased() {
        case "FLOAT32": return .float32
        case "DOUBLE", "FLOAT64": return .double
        case "INT32": return .int32
        case "FLOAT16": return .float16
        default: return nil
        }
    }

    static func multiArray(_ values: [Double], shape: [Int], type: Cortado_V1_ArrayDataType) throws -> Cortado_V1_FeatureValue {
        var a = Cortado_V1_MultiArray()
        a.dataType = type
        a.shape = shape.map(Int64.init)
        a.data = Data(try JSONValues.bytes(values, as: arrayType(type)))
        var v = Cortado_V1_FeatureValue()
        v.multiArray = a
        return v
    }

    /// One JSONL row, typed by the model's inputs (or by the JSON alone when `inputs` is nil).
    static func request(model: String, version: String, row: [String: Any], inputs: [Cortado_V1_FeatureDescription]?) throws -> [UInt8] {
        var features: [Cortado_V1_Feature] = []
        for name in row.keys.sorted() {
            let json = row[name]!
            let type = inputs?.first { $0.name == name }
            var v = Cortado_V1_FeatureValue()
            switch type?.type ?? guessType(json) {
            case "int64":
                guard let n = json as? NSNumber else { throw LoadError("input \(name): expected an integer") }
                v.int64Value = n.int64Value
            case "double":
                v.doubleValue = try JSONValues.double(json, name)
            case "string":
                guard let s = json as? String else { throw LoadError("input \(name): expected a string") }
                v.stringValue = s
            case "multiArray":
                let (values, shape, named) = try JSONValues.array(json, name)
                let declared = type.map(\.dataType).flatMap { $0 == .unspecified ? nil : $0 } ?? .double
                v = try multiArray(values, shape: shape, type: named.flatMap(arrayType(named:)) ?? declared)
            case "dictionary":
                guard let object = json as? [String: Any] else { throw LoadError("input \(name): expected an object") }
                var d = Cortado_V1_Dictionary()
                let keys = object.keys.sorted()
                if type?.constraint.lowercased().contains("int64 →") == true {
                    d.int64Keys = try keys.map { guard let k = Int64($0) else { throw LoadError("input \(name): key \($0) is not an int64") }; return k }
                } else {
                    d.stringKeys = keys
                }
                d.values = try keys.map { try JSONValues.double(object[$0]!, "\(name)[\($0)]") }
                v.dictionary = d
            case "sequence":
                guard let items = json as? [Any] else { throw LoadError("input \(name): expected an array") }
                var s = Cortado_V1_Sequence()
                if items.allSatisfy({ $0 is String }) && !items.isEmpty {
                    s.stringValues = items.map { $0 as! String }
                } else {
                    s.int64Values = try items.map { guard let n = $0 as? NSNumber else { throw LoadError("input \(name): expected integers") }; return n.int64Value }
                }
                v.sequence = s
            case "image":
                guard let object = json as? [String: Any], let w = object["width"] as? NSNumber, let h = object["height"] as? NSNumber,
                      let f = object["pixelFormat"] as? String, let data = object["data"] as? [Any] else {
                    throw LoadError("input \(name): images need raw pixels {\"width\",\"height\",\"pixelFormat\",\"data\"}")
                }
                var image = Cortado_V1_Image()
                image.width = w.int32Value
                image.height = h.int32Value
                switch f.uppercased() {
                case "RGB8": image.pixelFormat = .rgb8
                case "BGRA8": image.pixelFormat = .bgra8
                case "GRAY8": image.pixelFormat = .gray8
                case "GRAY16F": image.pixelFormat = .gray16F
                default: throw LoadError("input \(name): unknown pixelFormat \(f)")
                }
                let values = try data.map { try JSONValues.double($0, name) }
                image.data = Data(image.pixelFormat == .gray16F ? try JSONValues.bytes(values, as: "FP16") : try JSONValues.bytes(values, as: "UINT8"))
                v.image = image
            default:
                throw LoadError("input \(name): unsupported feature type")
            }
            features.append(feature(name, v))
        }
        return try request(model: model, version: version, features: features)
    }

    static func guessType(_ json: Any) -> String {
        switch json {
        case is String: return "string"
        case is NSNumber, is NSNull: return "double"
        case let object as [String: Any]: return object["data"] != nil ? (object["pixelFormat"] != nil ? "image" : "multiArray") : "dictionary"
        case let items as [Any]: return items.contains { $0 is String } ? "sequence" : "multiArray"
        default: return "double"
        }
    }

    /// One random row from the model's description.
    static func random(model: String, version: String, inputs: [Cortado_V1_FeatureDescription], rng: inout SeededRandom) throws -> [UInt8] {
        var features: [Cortado_V1_Feature] = []
        for input in inputs {
            var v = Cortado_V1_FeatureValue()
            let constraint = input.constraint.lowercased()
            switch input.type {
            case "int64": v.int64Value = Int64(rng.below(10))
            case "double": v.doubleValue = rng.unit() * 10
            case "string": v.stringValue = rng.word()
            case "multiArray":
                let shape = input.shape.isEmpty ? [1] : input.shape.map { max(1, Int($0)) }
                let count = shape.reduce(1, *)
                v = try multiArray((0..<count).map { _ in rng.unit() }, shape: shape,
                                   type: input.dataType == .unspecified ? .double : input.dataType)
            case "dictionary":
                var d = Cortado_V1_Dictionary()
                if constraint.contains("int64 →") { d.int64Keys = (0..<3).map { Int64($0) } } else { d.stringKeys = (0..<3).map { _ in rng.word() } }
                d.values = (0..<3).map { _ in rng.unit() }
                v.dictionary = d
            case "sequence":
                var s = Cortado_V1_Sequence()
                if constraint.contains("string") { s.stringValues = (0..<3).map { _ in rng.word() } } else { s.int64Values = (0..<3).map { _ in Int64(rng.below(10)) } }
                v.sequence = s
            case "image":
                // The constraint reads like "Image (RGB, 224 × 224)": take the two numbers.
                let numbers = input.constraint.split { !$0.isNumber }.compactMap { Int($0) }.filter { $0 > 0 }
                guard numbers.count >= 2 else { throw LoadError("input \(input.name): cannot read the image size from \"\(input.constraint)\"; give --input rows.jsonl") }
                var image = Cortado_V1_Image()
                image.width = Int32(numbers[0])
                image.height = Int32(numbers[1])
                let gray = constraint.contains("gray")
                image.pixelFormat = gray ? .gray8 : .rgb8
                image.data = Data((0..<(numbers[0] * numbers[1] * (gray ? 1 : 3))).map { _ in UInt8(truncatingIfNeeded: rng.next()) })
                v.image = image
            default:
                throw LoadError("input \(input.name): cannot generate a \(input.type) at random; give --input rows.jsonl")
            }
            features.append(feature(input.name, v))
        }
        return try request(model: model, version: version, features: features)
    }
}

// MARK: Open Inference Protocol

enum OIPInputs {
    static func request(model: String, version: String, tensors: [(Inference_ModelInferRequest.InferInputTensor, [UInt8])]) throws -> [UInt8] {
        var request = Inference_ModelInferRequest()
        request.modelName = model
        request.modelVersion = version
        request.inputs = tensors.map(\.0)
        request.rawInputContents = tensors.map { Data($0.1) }
        return try request.serializedBytes()
    }

    static func tensor(_ name: String, _ datatype: String, _ shape: [Int]) -> Inference_ModelInferRequest.InferInputTensor {
        var t = Inference_ModelInferRequest.InferInputTensor()
        t.name = name
        t.datatype = datatype
        t.shape = shape.map(Int64.init)
        return t
    }

    /// BYTES elements in raw form: a 4-byte little-endian length before each.
    static func bytesContents(_ strings: [[UInt8]]) -> [UInt8] {
        var out: [UInt8] = []
        for s in strings {
            withUnsafeBytes(of: UInt32(s.count).littleEndian) { out.append(contentsOf: $0) }
            out.append(contentsOf: s)
        }
        return out
    }

    /// The metadata shape with the batch dimension set to 1 and any other -1 sized to fit `count` (if given).
    static func concreteShape(_ meta: [Int64], count: Int?) -> [Int] {
        var shape = meta.enumerated().map { $0.offset == 0 && $0.element < 0 ? 1 : Int($0.element) }
        if let count, shape.contains(where: { $0 < 0 }) {
            let known = shape.filter { $0 >= 0 }.reduce(1, *)
            let i = shape.firstIndex { $0 < 0 }!
            shape[i] = known > 0 ? count / known : 0
        }
        return shape.map { $0 < 0 ? 1 : $0 }
    }

    static func request(model: String, version: String, row: [String: Any], inputs: [Inference_ModelMetadataResponse.TensorMetadata]?) throws -> [UInt8] {
        var tensors: [(Inference_ModelInferRequest.InferInputTensor, [UInt8])] = []
        for name in row.keys.sorted() {
            let json = row[name]!
            let meta = inputs?.first { $0.name == name }
            let datatype = meta?.datatype ?? (json is String ? "BYTES" : "FP64")
            if datatype == "BYTES" {
                let strings: [[UInt8]]
                switch json {
                case let s as String: strings = [Array(s.utf8)]
                case let items as [Any] where items.allSatisfy({ $0 is String }): strings = items.map { Array(($0 as! String).utf8) }
                default:
                    // Other values (dictionaries, sequences) travel as their JSON encoding.
                    let data = try JSONSerialization.data(withJSONObject: json, options: [.sortedKeys, .fragmentsAllowed])
                    strings = [Array(data)]
                }
                let shape = meta.map { concreteShape($0.shape, count: strings.count) } ?? [1, strings.count]
                tensors.append((tensor(name, "BYTES", shape), bytesContents(strings)))
                continue
            }
            let (values, jsonShape, _) = try JSONValues.array(json, name)
            var shape: [Int]
            if let meta {
                if meta.shape.count == jsonShape.count + 1 { shape = [1] + jsonShape }
                else if meta.shape.count == jsonShape.count { shape = jsonShape }
                else { shape = concreteShape(meta.shape, count: values.count) }
                if shape.reduce(1, *) != values.count { shape = concreteShape(meta.shape, count: values.count) }
            } else {
                shape = [1] + jsonShape
            }
            tensors.append((tensor(name, datatype, shape), try JSONValues.bytes(values, as: datatype)))
        }
        return try request(model: model, version: version, tensors: tensors)
    }

    static func random(model: String, version: String, inputs: [Inference_ModelMetadataResponse.TensorMetadata], rng: inout SeededRandom) throws -> [UInt8] {
        var tensors: [(Inference_ModelInferRequest.InferInputTensor, [UInt8])] = []
        for input in inputs {
            let shape = concreteShape(input.shape, count: nil)
            let count = shape.reduce(1, *)
            if input.datatype == "BYTES" {
                tensors.append((tensor(input.name, "BYTES", shape), bytesContents((0..<count).map { _ in Array(rng.word().utf8) })))
                continue
            }
            let integer = input.datatype.hasPrefix("INT") || input.datatype.hasPrefix("UINT") || input.datatype == "BOOL"
            let values = (0..<count).map { _ in integer ? Double(rng.below(input.datatype == "BOOL" ? 2 : 10)) : rng.unit() * 10 }
            do {
                tensors.append((tensor(input.name, input.datatype, shape), try JSONValues.bytes(values, as: input.datatype)))
            } catch {
                throw LoadError("input \(input.name): \(error)")
            }
        }
        return try request(model: model, version: version, tensors: tensors)
    }
}
