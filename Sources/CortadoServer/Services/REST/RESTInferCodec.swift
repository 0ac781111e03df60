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

    /// Reads a request body (`RESTInferReader`). `headerLength`: the JSON part's length, when
    /// binary data follows.
    static func decode(_ body: [UInt8], headerLength: Int?, model: String, version: String) throws -> Request {
        let jsonEnd = headerLength ?? body.count
        guard jsonEnd >= 0, jsonEnd <= body.count else {
            throw bad("Inference-Header-Content-Length \(jsonEnd) is larger than the body of \(body.count) bytes")
        }
        var read = try RESTInferReader.read(body, jsonEnd: jsonEnd, hasBinaryHeader: headerLength != nil)
        read.view.modelName = model
        read.view.modelVersion = version
        return Request(view: read.view, binaryOutput: read.binaryOutput)
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
