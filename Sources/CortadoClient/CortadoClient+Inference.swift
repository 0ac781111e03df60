import CortadoCore
import CortadoNativeCoding
import CortadoServerProtos
import Foundation

/// The Open Inference Protocol (KServe v2 / Triton gRPC), `inference.GRPCInferenceService`:
/// tensors as `MLMultiArray`s, readiness and metadata.
extension CortadoClient {
    static let inference = "/inference.GRPCInferenceService/"

    /// `ModelInfer`: named tensors in (sent as raw little-endian bytes: FP32, FP64, INT32 or
    /// FP16), the output tensors back (all, or the `outputs` named). Rows run along the
    /// first axis, as the model's metadata shows it.
    public func infer(model: String, version: String = "", inputs: [String: MLMultiArray], outputs: [String] = [],
                      timeout: Duration? = nil, metadata: [(name: String, value: String)] = []) async throws(CortadoClientError)
        -> [String: MLMultiArray] {
        var request = Inference_ModelInferRequest()
        request.modelName = model
        request.modelVersion = version
        for (name, array) in inputs.sorted(by: { $0.key < $1.key }) {
            var tensor = Inference_ModelInferRequest.InferInputTensor()
            tensor.name = name
            tensor.datatype = Self.datatype(array.dataType)
            tensor.shape = array.shape.map { Int64($0) }
            request.inputs.append(tensor)
            request.rawInputContents.append(MultiArrayBytes.contiguousData(array))
        }
        request.outputs = outputs.map { name in
            var output = Inference_ModelInferRequest.InferRequestedOutputTensor()
            output.name = name
            return output
        }
        let response = try await call(Self.inference + "ModelInfer", request, as: Inference_ModelInferResponse.self,
                                      timeout: timeout, metadata: metadata)
        var out: [String: MLMultiArray] = [:]
        for (index, tensor) in response.outputs.enumerated() {
            let raw = index < response.rawOutputContents.count ? response.rawOutputContents[index] : nil
            out[tensor.name] = try Self.array(tensor, raw: raw)
        }
        return out
    }

    /// `ServerLive`.
    public func serverLive(timeout: Duration? = nil, metadata: [(name: String, value: String)] = []) async throws(CortadoClientError) -> Bool {
        try await call(Self.inference + "ServerLive", Inference_ServerLiveRequest(), as: Inference_ServerLiveResponse.self,
                       timeout: timeout, metadata: metadata).live
    }

    /// `ServerReady`.
    public func serverReady(timeout: Duration? = nil, metadata: [(name: String, value: String)] = []) async throws(CortadoClientError) -> Bool {
        try await call(Self.inference + "ServerReady", Inference_ServerReadyRequest(), as: Inference_ServerReadyResponse.self,
                       timeout: timeout, metadata: metadata).ready
    }

    /// `ModelReady`: whether the model (version) is loaded and serving.
    public func modelReady(model: String, version: String = "", timeout: Duration? = nil,
                           metadata: [(name: String, value: String)] = []) async throws(CortadoClientError) -> Bool {
        var request = Inference_ModelReadyRequest()
        request.name = model
        request.version = version
        return try await call(Self.inference + "ModelReady", request, as: Inference_ModelReadyResponse.self,
                              timeout: timeout, metadata: metadata).ready
    }

    /// `ServerMetadata`: the server's name, version and protocol extensions.
    public func serverMetadata(timeout: Duration? = nil, metadata: [(name: String, value: String)] = []) async throws(CortadoClientError)
        -> Inference_ServerMetadataResponse {
        try await call(Self.inference + "ServerMetadata", Inference_ServerMetadataRequest(),
                       as: Inference_ServerMetadataResponse.self, timeout: timeout, metadata: metadata)
    }

    /// `ModelMetadata`: the model's tensors (name, datatype, shape; -1 for a free dimension).
    public func modelMetadata(model: String, version: String = "", timeout: Duration? = nil,
                              metadata: [(name: String, value: String)] = []) async throws(CortadoClientError)
        -> Inference_ModelMetadataResponse {
        var request = Inference_ModelMetadataRequest()
        request.name = model
        request.version = version
        return try await call(Self.inference + "ModelMetadata", request, as: Inference_ModelMetadataResponse.self,
                              timeout: timeout, metadata: metadata)
    }

    static func datatype(_ type: MLMultiArrayDataType) -> String {
        switch type {
        case .float32: return "FP32"
        case .double: return "FP64"
        case .int32: return "INT32"
        case .float16: return "FP16"
        }
    }

    /// An output tensor as a multi-array, from its raw bytes or its typed contents.
    static func array(_ tensor: Inference_ModelInferResponse.InferOutputTensor, raw: Data?) throws(CortadoClientError) -> MLMultiArray {
        func bad(_ message: String) -> CortadoClientError {
            CortadoClientError(code: .internal, message: "output '\(tensor.name)': \(message)")
        }
        let type: MLMultiArrayDataType
        switch tensor.datatype {
        case "FP32": type = .float32
        case "FP64": type = .double
        case "INT32": type = .int32
        case "FP16": type = .float16
        default: throw bad("datatype \(tensor.datatype) has no MLMultiArray counterpart")
        }
        let shape = tensor.shape.map { Int($0) }
        guard shape.allSatisfy({ $0 >= 0 }) else { throw bad("shape \(shape) has a negative dimension") }
        let array: MLMultiArray
        do { array = try MLMultiArray(shape: shape, dataType: type) } catch { throw bad("\(error)") }
        let bytes = array.count * type.size
        func fill<T>(_ values: [T]) throws(CortadoClientError) {
            guard values.count == array.count else { throw bad("shape \(shape) has \(array.count) elements, the contents \(values.count)") }
            values.withUnsafeBytes { array.dataPointer.copyMemory(from: $0.baseAddress!, byteCount: bytes) }
        }
        if let raw {
            guard raw.count == bytes else { throw bad("shape \(shape) of \(tensor.datatype) needs \(bytes) bytes, got \(raw.count)") }
            raw.withUnsafeBytes { if bytes > 0 { array.dataPointer.copyMemory(from: $0.baseAddress!, byteCount: bytes) } }
        } else if array.count > 0 {
            switch type {
            case .float32: try fill(tensor.contents.fp32Contents)
            case .double: try fill(tensor.contents.fp64Contents)
            case .int32: try fill(tensor.contents.intContents)
            case .float16: throw bad("FP16 travels only as raw contents")
            }
        }
        return array
    }
}
