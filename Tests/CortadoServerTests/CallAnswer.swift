@testable import CortadoGRPC
@testable import CortadoServer
import CortadoServerProtos
import Foundation
import XCTest

/// Collects the one answer of a call the tests hand to a service (its completion).
final class CallAnswer: GRPCCallCompletion, @unchecked Sendable {
    let done = DispatchSemaphore(value: 0)
    var result: GRPCCallResult?
    func complete(_ call: GRPCServerCall, _ result: GRPCCallResult) {
        self.result = result
        done.signal()
    }
}

/// One ModelInfer call through the real service path (`InferenceService.infer`: peek,
/// scheduler, worker, encoder): the response, or the status the call failed with (thrown).
func modelInfer(_ request: Inference_ModelInferRequest, on context: ServerContext) throws -> Inference_ModelInferResponse {
    let answer = CallAnswer()
    let call = GRPCServerCall(path: "/inference.GRPCInferenceService/ModelInfer", request: try request.serializedBytes(),
                              metadata: [], deadline: nil, completion: answer)
    InferenceService.infer(call, context)
    waitOrFail(answer.done, "the ModelInfer answer")
    switch answer.result {
    case .message(let framed)?: return try Inference_ModelInferResponse(serializedBytes: Array(framed.dropFirst(GRPCMessageWriter.prefixLength)))
    case .status(let status)?: throw status
    default: throw GRPCStatus(.unknown, "no answer: \(String(describing: answer.result))")
    }
}
