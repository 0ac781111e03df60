import CortadoServerProtos
import Foundation

/// What a worker reads of a ModelInferRequest: the id, the input tensors' descriptions, the
/// requested outputs, and where each raw input's bytes lie.
///
/// The common request (names, datatypes, shapes, raw contents) is read straight from the
/// call's bytes (`ModelInferRequestDecoder`): its raw inputs stay where they arrived, as
/// ranges of `storage`, the request's own byte array, shared rather than copied. Anything
/// else is decoded by SwiftProtobuf and converted (`init(_:)`), its raw contents then
/// gathered into one storage array. Either way the rest of the run reads one form.
struct InferRequestView: Equatable {
    struct Input: Equatable {
        var name = ""
        var datatype = ""
        /// Dimensions as sent (checked later: a negative one is an error).
        var shape: [Int] = []
        /// The input's position among the model's inputs when the decoder already matched its
        /// name against them (`ModelInferRequestDecoder.decode(_:inputs:)`); -1 when not.
        var declared = -1
        /// Parameters and typed contents, rare on the hot path: held in a box, absent when
        /// neither is set, so copying and checking an input costs nothing for them.
        private var rare: Rare?

        private final class Rare {
            var parameters: [String: Inference_InferParameter] = [:]
            var contents: Inference_InferTensorContents?
            init(_ parameters: [String: Inference_InferParameter], _ contents: Inference_InferTensorContents?) {
                self.parameters = parameters
                self.contents = contents
            }
        }

        init(name: String = "", datatype: String = "", shape: [Int] = [], parameters: [String: Inference_InferParameter] = [:],
             contents: Inference_InferTensorContents? = nil) {
            self.name = name
            self.datatype = datatype
            self.shape = shape
            if !parameters.isEmpty || contents != nil { rare = Rare(parameters, contents) }
        }

        /// An input without parameters or typed contents, its name matched at `declared`.
        init(name: String, datatype: String, shape: [Int], declared: Int) {
            self.name = name
            self.datatype = datatype
            self.shape = shape
            self.declared = declared
        }

        /// Neither parameters nor typed contents (the common request).
        var isPlain: Bool { rare == nil }

        /// Shared-memory placement (rare: only requests SwiftProtobuf decoded carry any).
        var parameters: [String: Inference_InferParameter] {
            get { rare?.parameters ?? [:] }
            set { setRare(newValue, rare?.contents) }
        }

        /// Typed contents (`fp32_contents`, …), when the client sent them instead of raw bytes.
        var contents: Inference_InferTensorContents? {
            get { rare?.contents }
            set { setRare(rare?.parameters ?? [:], newValue) }
        }

        /// A new box (boxes are shared between copies), or none when both are empty.
        private mutating func setRare(_ parameters: [String: Inference_InferParameter], _ contents: Inference_InferTensorContents?) {
            rare = parameters.isEmpty && contents == nil ? nil : Rare(parameters, contents)
        }

        /// The request's content (`declared` is how it was read, not what it says).
        static func == (a: Input, b: Input) -> Bool {
            a.name == b.name && a.datatype == b.datatype && a.shape == b.shape && a.parameters == b.parameters && a.contents == b.contents
        }
    }

    struct Output: Equatable {
        var name = ""
        var parameters: [String: Inference_InferParameter] = [:]
    }

    var modelName = ""
    var modelVersion = ""
    var id = ""
    var inputs: [Input] = []
    var outputs: [Output] = []
    /// Each raw input's bytes (`raw_input_contents`, in order) as a range of `storage`.
    var raw: [Range<Int>] = []
    var storage: [UInt8] = []

    init() {}

    /// The request as SwiftProtobuf decoded it.
    init(_ message: Inference_ModelInferRequest) {
        modelName = message.modelName
        modelVersion = message.modelVersion
        id = message.id
        inputs = message.inputs.map { t in
            Input(name: t.name, datatype: t.datatype, shape: t.shape.map { Int(truncatingIfNeeded: $0) }, parameters: t.parameters, contents: t.hasContents ? t.contents : nil)
        }
        outputs = message.outputs.map { Output(name: $0.name, parameters: $0.parameters) }
        storage.reserveCapacity(message.rawInputContents.reduce(0) { $0 + $1.count })
        for data in message.rawInputContents {
            let start = storage.count
            storage.append(contentsOf: data)
            raw.append(start..<storage.count)
        }
    }

    static func == (a: InferRequestView, b: InferRequestView) -> Bool {
        a.modelName == b.modelName && a.modelVersion == b.modelVersion && a.id == b.id && a.inputs == b.inputs
            && a.outputs == b.outputs && a.raw.count == b.raw.count
            && zip(a.raw, b.raw).allSatisfy { a.storage[$0] == b.storage[$1] }
    }
}
