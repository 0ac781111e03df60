import CortadoGRPC
import CortadoServerProtos
import Foundation

/// A cursor over protobuf wire-format bytes: the few steps the hand-written readers below
/// need. Every step returns nil on malformed input instead of throwing, so a caller can fall
/// back to SwiftProtobuf for the error message.
struct ProtobufReader {
    let buffer: UnsafeRawBufferPointer
    var offset = 0

    init(_ buffer: UnsafeRawBufferPointer) { self.buffer = buffer }

    var atEnd: Bool { offset >= buffer.count }

    mutating func varint() -> UInt64? {
        var value: UInt64 = 0
        var shift: UInt64 = 0
        while offset < buffer.count, shift < 64 {
            let byte = buffer[offset]
            offset += 1
            value |= UInt64(byte & 0x7f) << shift
            if byte < 0x80 { return value }
            shift += 7
        }
        return nil
    }

    /// The next field's number and wire type.
    mutating func key() -> (field: UInt64, wire: UInt64)? {
        guard let key = varint(), key >> 3 > 0 else { return nil }
        return (key >> 3, key & 7)
    }

    /// The payload of a length-delimited field (its key already read).
    mutating func lengthDelimited() -> UnsafeRawBufferPointer? {
        guard let length = varint(), length <= UInt64(buffer.count - offset) else { return nil }
        let start = offset
        offset += Int(length)
        return UnsafeRawBufferPointer(rebasing: buffer[start..<offset])
    }

    /// Skips a field's value by its wire type; false for groups and invalid types.
    mutating func skip(wire: UInt64) -> Bool {
        switch wire {
        case 0: return varint() != nil
        case 1:
            guard buffer.count - offset >= 8 else { return false }
            offset += 8
            return true
        case 5:
            guard buffer.count - offset >= 4 else { return false }
            offset += 4
            return true
        case 2: return lengthDelimited() != nil
        default: return false  // groups (3, 4) appear in no message this server reads; 6, 7 are invalid
        }
    }

    /// A string field's payload as a String; nil when it is not valid UTF-8.
    mutating func string() -> String? {
        guard let bytes = lengthDelimited() else { return nil }
        let utf8 = bytes.bindMemory(to: UInt8.self)
        // Names and ids are nearly always ASCII: that check is cheap, full validation is not.
        if utf8.allSatisfy({ $0 < 0x80 }) { return String(decoding: utf8, as: UTF8.self) }
        return String(validating: utf8, as: UTF8.self)
    }
}

/// Reads the model name and version of a prediction request straight from its protobuf
/// bytes, without decoding the message, so the loop thread can find the model and leave the
/// full decode to a worker. Every prediction request this server takes (ModelInferRequest,
/// PredictRequest, PredictBatchRequest) keeps the name in field 1 and the version in
/// field 2, both strings.
///
/// The scan walks the top-level fields only and skips every other field by its wire type,
/// so it costs a few comparisons per field and allocates only the two strings.
enum ProtobufPeek {
    struct ModelRef: Equatable {
        var name = ""
        var version = ""
    }

    /// The strings in fields 1 and 2 (the last occurrence wins, as protobuf merges them);
    /// INVALID_ARGUMENT when the bytes are not a well-formed message at the top level.
    /// True when any of `fields` is present as a non-empty length-delimited field (e.g. a
    /// PredictRequest's function or session), read without decoding the message.
    static func hasNonEmpty(_ bytes: [UInt8], fields: Set<UInt64>) -> Bool {
        bytes.withUnsafeBytes { raw -> Bool in
            var r = ProtobufReader(raw)
            while !r.atEnd {
                guard let (field, wire) = r.key() else { return false }
                if wire == 2 && fields.contains(field) {
                    guard let value = r.lengthDelimited() else { return false }
                    if value.count > 0 { return true }
                } else if !r.skip(wire: wire) {
                    return false
                }
            }
            return false
        }
    }

    static func modelRef(_ bytes: [UInt8], message: String) throws(GRPCStatus) -> ModelRef {
        var ref = ModelRef()
        let ok = bytes.withUnsafeBytes { raw -> Bool in
            var r = ProtobufReader(raw)
            while !r.atEnd {
                guard let (field, wire) = r.key() else { return false }
                if wire == 2 && (field == 1 || field == 2) {
                    guard let text = r.lengthDelimited() else { return false }
                    let s = String(decoding: text, as: UTF8.self)
                    if field == 1 { ref.name = s } else { ref.version = s }
                } else if !r.skip(wire: wire) {
                    return false
                }
            }
            return true
        }
        guard ok else {
            throw GRPCStatus(.invalidArgument, "the request is not a valid \(message) message: malformed protobuf")
        }
        return ref
    }
}

/// A hand-written decoder for the ModelInferRequest every Open Inference Protocol call
/// carries, for the common shape of one: names, ids, input tensors (name, datatype, shape)
/// with raw contents, requested outputs by name. It yields the `InferRequestView` a worker
/// reads, its raw inputs left in place as ranges of the request's bytes.
///
/// Anything else — request or tensor parameters (shared memory, classification), typed
/// contents, unknown fields, malformed or non-UTF-8 bytes — returns nil, and the caller
/// decodes with SwiftProtobuf (which also words the error for bad bytes).
enum ModelInferRequestDecoder {
    static func decode(_ bytes: [UInt8]) -> InferRequestView? {
        // Filled in place and moved out (returning it from the closure copied it).
        var request = InferRequestView()
        let ok = bytes.withUnsafeBytes { raw -> Bool in
            var r = ProtobufReader(raw)
            while !r.atEnd {
                guard let (field, wire) = r.key(), wire == 2 else { return false }
                switch field {
                case 1: guard let s = r.string() else { return false }; request.modelName = s
                case 2: guard let s = r.string() else { return false }; request.modelVersion = s
                case 3: guard let s = r.string() else { return false }; request.id = s
                case 5:
                    guard let body = r.lengthDelimited(), let tensor = input(body) else { return false }
                    request.inputs.append(tensor)
                case 6:
                    guard let body = r.lengthDelimited(), let tensor = output(body) else { return false }
                    request.outputs.append(tensor)
                case 7:
                    guard let body = r.lengthDelimited() else { return false }
                    let start = body.baseAddress.map { $0 - raw.baseAddress! } ?? r.offset
                    request.raw.append(start..<start + body.count)
                default:
                    return false
                }
            }
            return true
        }
        guard ok else { return nil }
        request.storage = bytes
        return request
    }

    private static func input(_ bytes: UnsafeRawBufferPointer) -> InferRequestView.Input? {
        var r = ProtobufReader(bytes)
        var tensor = InferRequestView.Input()
        while !r.atEnd {
            guard let (field, wire) = r.key() else { return nil }
            switch (field, wire) {
            case (1, 2): guard let s = r.string() else { return nil }; tensor.name = s
            case (2, 2): guard let s = r.string() else { return nil }; tensor.datatype = s
            case (3, 2):
                // Packed (proto3's default).
                guard let packed = r.lengthDelimited() else { return nil }
                var p = ProtobufReader(packed)
                while !p.atEnd {
                    guard let v = p.varint() else { return nil }
                    tensor.shape.append(Int(truncatingIfNeeded: v))
                }
            case (3, 0):
                guard let v = r.varint() else { return nil }
                tensor.shape.append(Int(truncatingIfNeeded: v))
            default:
                return nil
            }
        }
        return tensor
    }

    private static func output(_ bytes: UnsafeRawBufferPointer) -> InferRequestView.Output? {
        var r = ProtobufReader(bytes)
        var tensor = InferRequestView.Output()
        while !r.atEnd {
            guard let (field, wire) = r.key(), field == 1, wire == 2, let s = r.string() else { return nil }
            tensor.name = s
        }
        return tensor
    }
}
