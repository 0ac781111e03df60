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
            // The inputs counted first (keys and lengths only), so their array is made once:
            // a model with many scalar inputs otherwise regrows it several times per call.
            var counter = ProtobufReader(raw)
            var inputCount = 0, rawCount = 0
            while !counter.atEnd {
                guard let (field, wire) = counter.key(), counter.skip(wire: wire) else { break }
                if field == 5 { inputCount += 1 } else if field == 7 { rawCount += 1 }
            }
            request.inputs.reserveCapacity(inputCount)
            request.raw.reserveCapacity(rawCount)
            // Consecutive inputs mostly share one shape ([1, 1] for scalars): one array for them.
            var lastShape: [Int] = []
            var r = ProtobufReader(raw)
            while !r.atEnd {
                guard let (field, wire) = r.key(), wire == 2 else { return false }
                switch field {
                case 1: guard let s = r.string() else { return false }; request.modelName = s
                case 2: guard let s = r.string() else { return false }; request.modelVersion = s
                case 3: guard let s = r.string() else { return false }; request.id = s
                case 5:
                    guard let body = r.lengthDelimited(), let tensor = input(body, lastShape: &lastShape) else { return false }
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

    /// One input tensor's description. `lastShape`: the previous input's shape, shared when
    /// this one's is the same (no array made); set to this one's.
    private static func input(_ bytes: UnsafeRawBufferPointer, lastShape: inout [Int]) -> InferRequestView.Input? {
        var r = ProtobufReader(bytes)
        var tensor = InferRequestView.Input()
        var packedShape: UnsafeRawBufferPointer?
        var unpacked: [Int] = []
        while !r.atEnd {
            guard let (field, wire) = r.key() else { return nil }
            switch (field, wire) {
            case (1, 2): guard let s = r.string() else { return nil }; tensor.name = s
            case (2, 2): guard let s = r.string() else { return nil }; tensor.datatype = s
            case (3, 2):
                // Packed (proto3's default); read once the message is done.
                guard let packed = r.lengthDelimited() else { return nil }
                if let earlier = packedShape {
                    // Two packed runs of one field concatenate (rare).
                    guard let values = shapeValues(earlier) else { return nil }
                    unpacked += values
                }
                packedShape = packed
            case (3, 0):
                guard let v = r.varint() else { return nil }
                if let earlier = packedShape {
                    guard let values = shapeValues(earlier) else { return nil }
                    unpacked += values
                    packedShape = nil
                }
                unpacked.append(Int(truncatingIfNeeded: v))
            default:
                return nil
            }
        }
        if let packedShape, unpacked.isEmpty {
            if !sameShape(packedShape, lastShape) {
                guard let values = shapeValues(packedShape) else { return nil }
                lastShape = values
            }
            tensor.shape = lastShape
        } else {
            if let packedShape {
                guard let values = shapeValues(packedShape) else { return nil }
                unpacked += values
            }
            tensor.shape = unpacked
            lastShape = unpacked
        }
        return tensor
    }

    /// A packed run of varints as Ints; nil when one is cut short.
    private static func shapeValues(_ packed: UnsafeRawBufferPointer) -> [Int]? {
        var p = ProtobufReader(packed)
        var values: [Int] = []
        while !p.atEnd {
            guard let v = p.varint() else { return nil }
            values.append(Int(truncatingIfNeeded: v))
        }
        return values
    }

    /// Whether a packed run of varints holds exactly `shape` (a cut-short run never does).
    private static func sameShape(_ packed: UnsafeRawBufferPointer, _ shape: [Int]) -> Bool {
        var p = ProtobufReader(packed)
        var i = 0
        while !p.atEnd {
            guard let v = p.varint(), i < shape.count, Int(truncatingIfNeeded: v) == shape[i] else { return false }
            i += 1
        }
        return i == shape.count
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
