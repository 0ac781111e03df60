#if DEBUG
@testable import CortadoServer
import CortadoCore
import CortadoServerProtos
import Foundation

/// The REST infer request reader (`RESTInferReader`, one pass, typed) against the reading it
/// replaced, kept here as the reference: `MLJSONParser`'s `[String: Any]` tree walked into
/// the same `InferRequestView`. Input: a JSON body; or byte 0, a two-byte little-endian
/// `Inference-Header-Content-Length`, then a body whose binary inputs follow the JSON.
/// Properties:
/// - what is not JSON to `MLJSONParser` the reader refuses, and what the reader takes is JSON;
/// - when both take a body, they read the same request (floating-point data compared as
///   values: the reader keeps the sign of `-0`, the tree lost it);
/// - when only the tree takes it, the reader refused an integer out of its datatype's range,
///   or a boolean where an integer belongs (the tree took `true` as 1), and nothing else.
enum RESTInferFuzz {
    static func run(_ raw: UnsafeRawBufferPointer) {
        var bytes = [UInt8](raw)
        var headerLength: Int?
        if bytes.first == 0 {
            guard bytes.count >= 3 else { return }
            headerLength = Int(bytes[1]) | Int(bytes[2]) << 8
            bytes.removeFirst(3)
        }
        let jsonEnd = min(headerLength ?? bytes.count, bytes.count)
        let isJSON = (try? MLJSONParser.parse(bytes[0..<jsonEnd])) != nil
        let new: Result<RESTInferCodec.Request, Error> = Result { try RESTInferCodec.decode(bytes, headerLength: headerLength, model: "m", version: "1") }
        let old: Result<RESTInferCodec.Request, Error> = Result { try RESTTreeDecoder.decode(bytes, headerLength: headerLength, model: "m", version: "1") }
        switch (new, old) {
        case (.success(let a), .success(let b)):
            guard isJSON else { fuzzFailure("the reader took a body that is not JSON") }
            if let difference = difference(a, b) { fuzzFailure("the reader and the tree read different requests: \(difference)") }
        case (.success, .failure(let e)):
            guard isJSON else { fuzzFailure("the reader took a body that is not JSON") }
            _ = e  // the tree refused what the reader takes: integers it could not hold (UINT64 past Int64)
        case (.failure(let e), .success):
            let message = (e as? ServeStatus)?.message ?? "\(e)"
            let allowed = ["out of range", "not an integer", "binary_data_size must be", "must be integers"]
            guard allowed.contains(where: { message.contains($0) }) else { fuzzFailure("the reader refused what the tree takes: \(message)") }
        case (.failure, .failure):
            break
        }
    }

    /// What differs between two readings, or nil.
    static func difference(_ a: RESTInferCodec.Request, _ b: RESTInferCodec.Request) -> String? {
        let x = a.view, y = b.view
        if a.binaryOutput != b.binaryOutput { return "binary_data_output" }
        if x.id != y.id { return "id" }
        if x.outputs.count != y.outputs.count { return "output count" }
        for (o, p) in zip(x.outputs, y.outputs) where o.name != p.name || !same(o.parameters, p.parameters) { return "output \(o.name)" }
        if x.inputs.count != y.inputs.count || x.raw.count != y.raw.count { return "input count" }
        for k in x.inputs.indices {
            let i = x.inputs[k], j = y.inputs[k]
            if i.name != j.name || i.datatype != j.datatype || i.shape != j.shape || !same(i.parameters, j.parameters) { return "input \(i.name)" }
            let u = Array(x.storage[x.raw[k]]), v = Array(y.storage[y.raw[k]])
            if u == v { continue }
            guard u.count == v.count else { return "input \(i.name): \(u.count) bytes against \(v.count)" }
            if i.datatype == "INT64" || i.datatype == "UINT64" {
                // The tree read integers through a Double: past 2^53 it kept the nearest one.
                for e in stride(from: 0, to: u.count, by: 8) {
                    let (s, t) = u.withUnsafeBytes { ub in v.withUnsafeBytes { vb in
                        (ub.loadUnaligned(fromByteOffset: e, as: UInt64.self), vb.loadUnaligned(fromByteOffset: e, as: UInt64.self)) } }
                    let signed = i.datatype == "INT64"
                    let (a, b) = signed ? (Double(Int64(bitPattern: s)), Double(Int64(bitPattern: t))) : (Double(s), Double(t))
                    if s != t && (a != b || a.magnitude < 0x1p53) { return "input \(i.name): element \(e / 8) is \(s) against \(t)" }
                }
                continue
            }
            // Floating-point data: equal as values (-0 == 0).
            let size: Int
            switch i.datatype {
            case "FP64": size = 8
            case "FP32": size = 4
            case "FP16": size = 2
            default: return "input \(i.name): other bytes"
            }
            for e in stride(from: 0, to: u.count, by: size) {
                let (s, t): (Double, Double) = u.withUnsafeBytes { ub in
                    v.withUnsafeBytes { vb in
                        switch size {
                        case 8: return (ub.loadUnaligned(fromByteOffset: e, as: Double.self), vb.loadUnaligned(fromByteOffset: e, as: Double.self))
                        case 4: return (Double(ub.loadUnaligned(fromByteOffset: e, as: Float.self)), Double(vb.loadUnaligned(fromByteOffset: e, as: Float.self)))
                        default: return (Double(ub.loadUnaligned(fromByteOffset: e, as: Float16.self)), Double(vb.loadUnaligned(fromByteOffset: e, as: Float16.self)))
                        }
                    }
                }
                if s != t { return "input \(i.name): element \(e / size) is \(s) against \(t)" }
            }
        }
        return nil
    }

    /// Parameters alike: an integer the tree kept as a double (past 2^53) is the same number.
    static func same(_ a: [String: Inference_InferParameter], _ b: [String: Inference_InferParameter]) -> Bool {
        guard a.keys.sorted() == b.keys.sorted() else { return false }
        for (key, p) in a {
            let q = b[key]!
            if p == q { continue }
            switch (p.parameterChoice, q.parameterChoice) {
            case (.int64Param(let i)?, .doubleParam(let d)?): if Double(i) != d { return false }
            default: return false
            }
        }
        return true
    }
}

/// The reading `RESTInferReader` replaced (the reference of the `rest-infer` target).
enum RESTTreeDecoder {
    static func bad(_ message: String) -> ServeStatus { ServeStatus(.invalidArgument, message) }
    /// Reads a request body. `headerLength`: the JSON part's length, when binary data follows.
    static func decode(_ body: [UInt8], headerLength: Int?, model: String, version: String) throws -> RESTInferCodec.Request {
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
        return RESTInferCodec.Request(view: view, binaryOutput: binaryOutput)
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
}
#endif
