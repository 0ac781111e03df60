#if DEBUG
@testable import CortadoServer
import CortadoServerProtos
import Foundation
import SwiftProtobuf

/// The ModelInferRequest fast path against SwiftProtobuf (a differential target): whatever
/// the hand-written decoder takes, SwiftProtobuf must decode too, to the same request; and
/// the loop thread's peek at the model name must read what SwiftProtobuf reads. What the
/// fast decoder refuses (nil) goes to SwiftProtobuf in the server, so refusing is always
/// allowed.
enum InferDecoderFuzz {
    static func run(_ raw: UnsafeRawBufferPointer) {
        let bytes = [UInt8](raw)
        let reference = try? Inference_ModelInferRequest(serializedBytes: bytes)
        if let fast = ModelInferRequestDecoder.decode(bytes) {
            guard let reference else { fuzzFailure("the fast decoder took bytes SwiftProtobuf refuses") }
            if fast != InferRequestView(reference) { fuzzFailure("the fast decoder read another request than SwiftProtobuf") }
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
