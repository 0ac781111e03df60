#if DEBUG
import CortadoCore
@testable import CortadoServer
import CortadoServerProtos
import Foundation
import SwiftProtobuf

/// The ModelInferRequest fast path against SwiftProtobuf (a differential target): whatever
/// the hand-written decoder takes, SwiftProtobuf must decode too, to the same request; and
/// the loop thread's peek at the model name must read what SwiftProtobuf reads. What the
/// fast decoder refuses (nil) goes to SwiftProtobuf in the server, so refusing is always
/// allowed. Decoded against a model's inputs (names matched by their bytes as they are read),
/// it must read the same request, each tensor's position among the inputs the one a lookup
/// by String gives.
enum InferDecoderFuzz {
    /// Inputs to match names against: prefixes of one another, non-ASCII (é precomposed).
    static let model: [TensorMapping] = ["x", "f1", "f10", "f", "\u{e9}", "input"].map {
        TensorMapping(MLFeatureDescription(name: $0, type: .double), classLabels: nil, isProbabilities: false)
    }

    static func run(_ raw: UnsafeRawBufferPointer) {
        let bytes = [UInt8](raw)
        let reference = try? Inference_ModelInferRequest(serializedBytes: bytes)
        if let fast = ModelInferRequestDecoder.decode(bytes) {
            guard let reference else { fuzzFailure("the fast decoder took bytes SwiftProtobuf refuses") }
            if fast != InferRequestView(reference) { fuzzFailure("the fast decoder read another request than SwiftProtobuf") }
        }
        if let matched = ModelInferRequestDecoder.decode(bytes, inputs: model) {
            guard let reference else { fuzzFailure("the fast decoder (with the model's inputs) took bytes SwiftProtobuf refuses") }
            if matched != InferRequestView(reference) { fuzzFailure("the fast decoder (with the model's inputs) read another request than SwiftProtobuf") }
            let names = model.map(\.name)
            for (i, input) in matched.inputs.enumerated() {
                let expected = i < names.count && names[i] == input.name ? i : names.firstIndex(of: input.name) ?? -1
                if input.declared != expected { fuzzFailure("tensor \(i) '\(input.name)' matched input \(input.declared), a String lookup finds \(expected)") }
            }
        }
        if let reference {
            // The peek may refuse what SwiftProtobuf keeps as unknown fields (groups), but
            // what it reads must agree.
            if let ref = try? ProtobufPeek.modelRef(bytes, message: "ModelInferRequest"),
               ref != .init(name: reference.modelName, version: reference.modelVersion) {
                fuzzFailure("the peek read model \(ref) but the message names \(reference.modelName) \(reference.modelVersion)")
            }
        }
        _ = ProtobufPeek.hasNonEmpty(bytes, fields: [4, 5])
    }
}
#endif
