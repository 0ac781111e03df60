import CortadoCore
import CortadoGRPC
import CortadoServerProtos
import Foundation

/// The REST form of an inference request and its answer (KServe v2 HTTP/REST with Triton's
/// binary tensor data extension), read into and written from the same forms the gRPC codec
/// uses: a request becomes an `InferRequestView` whose every input is raw bytes, so that
/// `InferenceRun` checks and maps it exactly as a ModelInfer call; an answer is written
/// from `InferenceRun.outputs`, the bytes the gRPC answer would carry.
///
/// Binary data: when the request has an `Inference-Header-Content-Length` header, the body
/// is that many bytes of JSON followed by the binary inputs, in input order, each input
/// saying its size in `parameters.binary_data_size` (BYTES elements with 4-byte
/// little-endian length prefixes, as on gRPC). Outputs asked for with
/// `parameters.binary_data` (or every output with the request's `binary_data_output`) are
/// appended likewise to the answer, whose JSON length is its own
/// `Inference-Header-Content-Length`.
enum RESTInferCodec {
    struct Request {
        var view: InferRequestView
        /// The request's `parameters.binary_data_output`: outputs not named, or named without
        /// their own `binary_data`, are sent as binary data.
        var binaryOutput: Bool
    }

    static func bad(_ message: String) -> ServeStatus { ServeStatus(.invalidArgument, message) }

    /// Reads a request body. `headerLength`: the JSON part's length, when binary data follows.
    static func decode(_ body: [UInt8], headerLength: Int?, model: String, version: String) throws -> Request {
        let jsonEnd = headerLength ?? body.count
        guard jsonEnd >= 0, jsonEnd <= body.count else {
            throw bad("Inference-Header-Content-Length \(jsonEnd) is larger than the body of \(body.count) bytes")
        }
        let parsed: Any
        do { parsed = try MLJSONParser.parse(body[0..<jsonEnd]) } catch { throw bad("the request body is not valid JSON: \(error)") }
        guard let object = parsed as? [String: Any] else { throw bad("the request body must be a JSON object with \"inputs\"") }
        var view = InferRequestView()
        view.modelName = model
        view.modelVersion = version
        if let id = object["id"] {
            guard let id = id as? String else { throw bad("\"id\" must be a string") }
            view.id = id
        }
        let parameters = try dictionary(object["parameters"], "parameters")
        let binaryOutput = try flag(parameters["binary_data_output"], "parameters.binary_data_output") ?? false
        guard let inputs = object["inputs"] as? [Any] else { throw bad("the request needs \"inputs\": a list of tensors") }
        // The binary inputs are read where they lie in the body (the view's storage is the
        // body); inputs sent as JSON are converted and appended behind it.
        view.storage = body
        var binaryAt = jsonEnd
        for (index, item) in inputs.enumerated() {
            guard let tensor = item as? [String: Any] else { throw bad("inputs[\(index)] must be a JSON object") }
            guard let name = tensor["name"] as? String else { throw bad("inputs[\(index)] needs a \"name\"") }
            guard let datatype = tensor["datatype"] as? String else { throw bad("input '\(name)' needs a \"datatype\"") }
            guard let dims = tensor["shape"] as? [Any] else { throw bad("input '\(name)' needs a \"shape\": a list of dimensions") }
            var shape: [Int] = []
            for d in dims {
                guard let n = d as? NSNumber, let v = Int(exactly: n.doubleValue) else { throw bad("input '\(name)': the shape holds \(d), not an integer") }
                shape.append(v)
            }
            let tensorParameters = try dictionary(tensor["parameters"], "input '\(name)' parameters")
            var input = InferRequestView.Input(name: name, datatype: datatype, shape: shape)
            input.parameters = try protobufParameters(tensorParameters, except: ["binary_data_size"], what: "input '\(name)'")
            if let size = tensorParameters["binary_data_size"] {
                guard let size = (size as? NSNumber).flatMap({ Int(exactly: $0.doubleValue) }), size >= 0 else {
                    throw bad("input '\(name)': binary_data_size must be a non-negative integer")
                }
                guard headerLength != nil else { throw bad("input '\(name)' has binary_data_size but the request has no Inference-Header-Content-Length header") }
                guard size <= body.count - binaryAt else {
                    throw bad("input '\(name)': binary_data_size \(size) runs past the end of the body (\(body.count - binaryAt) bytes left)")
                }
                view.raw.append(binaryAt..<binaryAt + size)
                binaryAt += size
            } else if input.parameters["shared_memory_region"] != nil {
                view.raw.append(0..<0)  // read from the region (`InferenceRun` looks there first)
            } else {
                guard let data = tensor["data"] else { throw bad("input '\(name)' has neither \"data\" nor binary_data_size") }
                let start = view.storage.count
                try append(data, datatype: datatype, shape: shape, name: name, to: &view.storage)
                view.raw.append(start..<view.storage.count)
            }
            view.inputs.append(input)
        }
        guard binaryAt == body.count else {
            throw bad("the body holds \(body.count - binaryAt) bytes of binary data that no input's binary_data_size accounts for")
        }
        if let outputs = object["outputs"] {
            guard let outputs = outputs as? [Any] else { throw bad("\"outputs\" must be a list") }
            for (index, item) in outputs.enumerated() {
                guard let tensor = item as? [String: Any], let name = tensor["name"] as? String else { throw bad("outputs[\(index)] needs a \"name\"") }
                let p = try dictionary(tensor["parameters"], "output '\(name)' parameters")
                view.outputs.append(InferRequestView.Output(name: name, parameters: try protobufParameters(p, except: [], what: "output '\(name)'")))
            }
        }
        return Request(view: view, binaryOutput: binaryOutput)
    }

    private static func dictionary(_ value: Any?, _ what: String) throws -> [String: Any] {
        guard let value, !(value is NSNull) else { return [:] }
        guard let d = value as? [String: Any] else { throw bad("\(what) must be a JSON object") }
        return d
    }

    private static func flag(_ value: Any?, _ what: String) throws -> Bool? {
        guard let value else { return nil }
        guard let n = value as? NSNumber else { throw bad("\(what) must be true or false") }
        return n.boolValue
    }

    /// JSON parameters as the protobuf parameters `InferenceRun` reads (classification,
    /// shared memory, binary_data): strings, booleans and integers.
    private static func protobufParameters(_ p: [String: Any], except: Set<String>, what: String) throws -> [String: Inference_InferParameter] {
        var out: [String: Inference_InferParameter] = [:]
        for (key, value) in p where !except.contains(key) {
            var parameter = Inference_InferParameter()
            if let s = value as? String {
                parameter.stringParam = s
            } else if let n = value as? NSNumber {
                if String(cString: n.objCType) == "c" || key == "binary_data" {  // how NSNumber(value: Bool) reports itself
                    parameter.boolParam = n.boolValue
                } else if let i = Int64(exactly: n.doubleValue) {
                    parameter.int64Param = i
                } else {
                    parameter.doubleParam = n.doubleValue
                }
            } else {
                throw bad("\(what): parameter '\(key)' must be a string, a number or a boolean")
            }
            out[key] = parameter
        }
        return out
    }

    /// A tensor's JSON `data` (flat, or nested as its shape) as little-endian bytes of its
    /// datatype, or length-prefixed elements for BYTES.
    private static func append(_ data: Any, datatype: String, shape: [Int], name: String, to out: inout [UInt8]) throws {
        var values: [Any] = []
        func flatten(_ v: Any) {
            if let list = v as? [Any] { for e in list { flatten(e) } } else { values.append(v) }
        }
        flatten(data)
        if let count = MLMultiArray.byteCount(shape, elementSize: 1), count >= 0, values.count != count {
            throw bad("input '\(name)': shape \(shape) needs \(count) values, \"data\" holds \(values.count)")
        }
        func number(_ v: Any) throws -> NSNumber {
            guard let n = v as? NSNumber else { throw bad("input '\(name)': \(datatype) data must be numbers, got \(type(of: v))") }
            return n
        }
        func put<T>(_ v: T) { withUnsafeBytes(of: v) { out.append(contentsOf: $0) } }
        out.reserveCapacity(out.count + values.count * (TensorMapping.elementSize(datatype) ?? 8))
        switch datatype {
        case "BYTES":
            for v in values {
                guard let s = v as? String else { throw bad("input '\(name)': BYTES data must be strings, got \(type(of: v))") }
                TensorBytes.append(Array(s.utf8), to: &out)
            }
        case "BOOL": for v in values { put(UInt8(try number(v).boolValue ? 1 : 0)) }
        case "FP64": for v in values { put(try number(v).doubleValue) }
        case "FP32": for v in values { put(Float(try number(v).doubleValue)) }
        case "FP16": for v in values { put(Float16(Float(try number(v).doubleValue))) }
        case "INT64", "INT32", "INT16", "INT8", "UINT64", "UINT32", "UINT16", "UINT8":
            for v in values {
                let n = try number(v)
                guard let i = Int64(exactly: n.doubleValue) ?? (n.doubleValue == Double(n.int64Value) ? n.int64Value : nil) else {
                    throw bad("input '\(name)': \(datatype) data must be integers, got \(n)")
                }
                switch datatype {
                case "INT64": put(i.littleEndian)
                case "INT32": put(Int32(truncatingIfNeeded: i).littleEndian)
                case "INT16": put(Int16(truncatingIfNeeded: i).littleEndian)
                case "INT8": put(Int8(truncatingIfNeeded: i))
                case "UINT64": put(UInt64(truncatingIfNeeded: i).littleEndian)
                case "UINT32": put(UInt32(truncatingIfNeeded: i).littleEndian)
                case "UINT16": put(UInt16(truncatingIfNeeded: i).littleEndian)
                default: put(UInt8(truncatingIfNeeded: i))
                }
            }
        default:
            throw bad("input '\(name)': unknown datatype '\(datatype)'")
        }
    }

    // MARK: answers

    /// The answer's body, and the length of its JSON part when binary outputs follow it.
    static func encode(_ run: InferenceRun, _ results: MLFeatureColumns, binaryOutput: Bool) throws -> (body: [UInt8], headerLength: Int?) {
        let (tensors, raw) = try run.outputs(results)
        let requested = run.request.outputs
        var w = JSONWriter(capacity: 128 + raw.count * 3)
        var binary: [Range<Int>] = []
        w.raw("{\"model_name\":")
        w.string(run.served.name)
        w.raw(",\"model_version\":")
        w.string(run.served.version)
        if !run.request.id.isEmpty {
            w.raw(",\"id\":")
            w.string(run.request.id)
        }
        w.raw(",\"outputs\":[")
        try raw.withUnsafeBytes { all in
            for i in tensors.indices {
                if i > 0 { w.comma() }
                let t = tensors[i]
                w.raw("{\"name\":")
                w.string(t.mapping.name)
                w.raw(",\"datatype\":")
                w.string(t.datatype)
                w.raw(",\"shape\":[")
                for (k, d) in t.shape.enumerated() {
                    if k > 0 { w.comma() }
                    w.int(d)
                }
                w.byte(UInt8(ascii: "]"))
                let bytes = UnsafeRawBufferPointer(rebasing: all[t.bytes])
                var asBinary = binaryOutput
                if !requested.isEmpty, case .boolParam(let b)? = requested[i].parameters["binary_data"]?.parameterChoice { asBinary = b }
                if !t.parameters.isEmpty {
                    // Written to the client's shared memory: where, and how much.
                    w.raw(",\"parameters\":{")
                    for (k, (key, p)) in t.parameters.sorted(by: { $0.key < $1.key }).enumerated() {
                        if k > 0 { w.comma() }
                        w.key(key)
                        switch p.parameterChoice {
                        case .stringParam(let s)?: w.string(s)
                        case .int64Param(let v)?: w.int(v)
                        default: w.raw("null")
                        }
                    }
                    w.byte(UInt8(ascii: "}"))
                } else if asBinary {
                    w.raw(",\"parameters\":{\"binary_data_size\":")
                    w.int(bytes.count)
                    w.byte(UInt8(ascii: "}"))
                    binary.append(t.bytes)
                } else {
                    w.raw(",\"data\":[")
                    try data(bytes, datatype: t.datatype, name: t.mapping.name, into: &w)
                    w.byte(UInt8(ascii: "]"))
                }
                w.byte(UInt8(ascii: "}"))
            }
        }
        w.raw("]}")
        guard !binary.isEmpty else { return (w.bytes, nil) }
        let headerLength = w.bytes.count
        var body = w.bytes
        body.reserveCapacity(headerLength + binary.reduce(0) { $0 + $1.count })
        for range in binary { body.append(contentsOf: raw[range]) }
        return (body, headerLength)
    }

    /// A tensor's bytes as JSON values, comma-separated.
    private static func data(_ bytes: UnsafeRawBufferPointer, datatype: String, name: String, into w: inout JSONWriter) throws {
        if datatype == "BYTES" {
            let elements = try TensorBytes.split(bytes, name: name)
            for (k, e) in elements.enumerated() {
                if k > 0 { w.comma() }
                w.string(String(decoding: e, as: UTF8.self))
            }
            return
        }
        guard let size = TensorMapping.elementSize(datatype) else { throw ServeStatus(.internal, "output '\(name)': no JSON form for datatype \(datatype)") }
        let count = bytes.count / size
        for k in 0..<count {
            if k > 0 { w.comma() }
            let at = k * size
            switch datatype {
            case "FP64": w.double(bytes.loadUnaligned(fromByteOffset: at, as: Double.self))
            case "FP32": w.float(bytes.loadUnaligned(fromByteOffset: at, as: Float.self))
            case "FP16": w.float(Float(bytes.loadUnaligned(fromByteOffset: at, as: Float16.self)))
            case "INT64": w.int(Int64(littleEndian: bytes.loadUnaligned(fromByteOffset: at, as: Int64.self)))
            case "INT32": w.int(Int32(littleEndian: bytes.loadUnaligned(fromByteOffset: at, as: Int32.self)))
            case "INT16": w.int(Int16(littleEndian: bytes.loadUnaligned(fromByteOffset: at, as: Int16.self)))
            case "INT8": w.int(bytes.loadUnaligned(fromByteOffset: at, as: Int8.self))
            case "UINT64": w.int(UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: at, as: UInt64.self)))
            case "UINT32": w.int(UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: at, as: UInt32.self)))
            case "UINT16": w.int(UInt16(littleEndian: bytes.loadUnaligned(fromByteOffset: at, as: UInt16.self)))
            case "BOOL": w.bool(bytes[at] != 0)
            default: w.int(bytes[at])
            }
        }
    }
}
