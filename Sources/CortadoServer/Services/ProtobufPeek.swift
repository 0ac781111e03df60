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

    @inline(__always)
    mutating func varint() -> UInt64? {
        // One byte (field keys, short lengths) is the common case.
        if offset < buffer.count, buffer[offset] < 0x80 {
            offset += 1
            return UInt64(buffer[offset - 1])
        }
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
///
/// Given the model's inputs, each tensor's name is matched against them as it is read, by
/// its UTF-8 bytes, at the tensor's own position first (clients mostly send the inputs in
/// the declared order): a name that matches takes the model's own String and position
/// (`Input.declared`), so a request of many small inputs makes no String per input and the
/// run looks nothing up. The match is the one `==` on Strings would make, found in the same
/// order (a non-ASCII name is also compared as a String: canonically equivalent spellings
/// differ in their bytes).
enum ModelInferRequestDecoder {
    static func decode(_ bytes: [UInt8], inputs model: [TensorMapping] = []) -> InferRequestView? {
        // Filled in place and moved out (returning it from the closure copied it).
        var request = InferRequestView()
        let ok = bytes.withUnsafeBytes { raw -> Bool in
            // Room for the inputs made once: a model with many scalar inputs otherwise regrows
            // the lists several times per call. As many as the model has (a request that
            // sends more fails anyway), else counted first (keys and lengths only).
            var inputCount = model.count, rawCount = model.count
            if model.isEmpty {
                var counter = ProtobufReader(raw)
                while !counter.atEnd {
                    guard let (field, wire) = counter.key(), counter.skip(wire: wire) else { break }
                    if field == 5 { inputCount += 1 } else if field == 7 { rawCount += 1 }
                }
            }
            request.inputs.reserveCapacity(inputCount)
            request.raw.reserveCapacity(rawCount)
            // Consecutive inputs mostly share one shape ([1, 1] for scalars) and datatype: one
            // array and String for them.
            var recent = Recent()
            var r = ProtobufReader(raw)
            while !r.atEnd {
                guard let (field, wire) = r.key(), wire == 2 else { return false }
                switch field {
                case 1: guard let s = r.string() else { return false }; request.modelName = s
                case 2: guard let s = r.string() else { return false }; request.modelVersion = s
                case 3: guard let s = r.string() else { return false }; request.id = s
                case 5:
                    guard let body = r.lengthDelimited(),
                          let tensor = input(body, recent: &recent, position: request.inputs.count, model: model) else { return false }
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

    /// What consecutive input tensors mostly share ([1, 1] and FP64 for scalars), kept from
    /// one to the next with the bytes each was read from: a tensor whose bytes are the same
    /// takes the same array and String, none made again.
    private struct Recent {
        var shape: [Int] = []
        /// The packed shape bytes `shape` was read from; nil when it was not read from one.
        var packedShape: UnsafeRawBufferPointer?
        var datatype = ""
        var datatypeBytes: UnsafeRawBufferPointer?
    }

    private static func sameBytes(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Bool {
        a.count == b.count && (a.count == 0 || memcmp(a.baseAddress!, b.baseAddress!, a.count) == 0)
    }

    /// One input tensor's description. `recent`: what the previous tensor had, shared when
    /// this one has the same (no array or String made); set to this one's. `position`: the
    /// tensor's place in the request, where its name is looked for first among `model`'s inputs.
    private static func input(_ bytes: UnsafeRawBufferPointer, recent: inout Recent, position: Int,
                              model: [TensorMapping]) -> InferRequestView.Input? {
        if let input = usualInput(bytes, recent: &recent, position: position, model: model) { return input }
        var r = ProtobufReader(bytes)
        var name = ""
        var declared = -1
        var datatype = ""
        var packedShape: UnsafeRawBufferPointer?
        var unpacked: [Int] = []
        while !r.atEnd {
            guard let (field, wire) = r.key() else { return nil }
            switch (field, wire) {
            case (1, 2):
                guard let text = r.lengthDelimited(), let found = inputName(text, position: position, model: model) else { return nil }
                (name, declared) = found
            case (2, 2):
                guard let text = r.lengthDelimited() else { return nil }
                if let earlier = recent.datatypeBytes, sameBytes(earlier, text) {
                    datatype = recent.datatype
                } else {
                    guard let s = Self.datatype(text) else { return nil }
                    datatype = s
                    recent.datatype = s
                    recent.datatypeBytes = text
                }
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
            let same = recent.packedShape.map { sameBytes($0, packedShape) } ?? false
            if !same {
                if !sameShape(packedShape, recent.shape) {
                    guard let values = shapeValues(packedShape) else { return nil }
                    recent.shape = values
                }
                recent.packedShape = packedShape
            }
            return InferRequestView.Input(name: name, datatype: datatype, shape: recent.shape, declared: declared)
        }
        if let packedShape {
            guard let values = shapeValues(packedShape) else { return nil }
            unpacked += values
        }
        recent.shape = unpacked
        recent.packedShape = nil
        return InferRequestView.Input(name: name, datatype: datatype, shape: unpacked, declared: declared)
    }

    /// `input` for the layout clients write, read straight: name, datatype and packed shape,
    /// once each and in that order, each shorter than 128 bytes, the name at `position` of
    /// `model` and the datatype and shape those of the tensor before (a request of many
    /// scalars: every tensor but the first). nil for anything else (`input` reads it).
    @inline(__always)
    private static func usualInput(_ bytes: UnsafeRawBufferPointer, recent: inout Recent, position: Int,
                                   model: [TensorMapping]) -> InferRequestView.Input? {
        guard position < model.count, let datatypeBytes = recent.datatypeBytes, let packedShape = recent.packedShape,
              bytes.count >= 6, let p = bytes.baseAddress?.assumingMemoryBound(to: UInt8.self) else { return nil }
        let end = bytes.count
        // Field 1 (name), 2 (datatype), 3 (shape), each a key byte and a one-byte length.
        guard p[0] == 0x0a, p[1] < 0x80 else { return nil }
        let name = UnsafeRawBufferPointer(start: p + 2, count: Int(p[1]))
        var i = 2 + name.count
        guard i + 2 <= end, p[i] == 0x12, p[i + 1] < 0x80 else { return nil }
        let datatype = UnsafeRawBufferPointer(start: p + i + 2, count: Int(p[i + 1]))
        i += 2 + datatype.count
        guard i + 2 <= end, p[i] == 0x1a, p[i + 1] < 0x80, i + 2 + Int(p[i + 1]) == end else { return nil }
        let shape = UnsafeRawBufferPointer(start: p + i + 2, count: Int(p[i + 1]))
        let mapping = model[position]
        guard sameBytes(shape, packedShape), sameBytes(datatype, datatypeBytes),
              mapping.nameUTF8.withUnsafeBytes({ sameBytes($0, name) }) else { return nil }
        recent.packedShape = shape
        recent.datatypeBytes = datatype
        return InferRequestView.Input(name: mapping.name, datatype: recent.datatype, shape: recent.shape, declared: position)
    }

    /// A tensor's name and its position among `model`'s inputs (-1: none of them), the
    /// model's String when one matches; nil when the bytes are not UTF-8. Looked for at
    /// `position` first, then in declared order, as `==` on Strings would find it.
    static func inputName(_ bytes: UnsafeRawBufferPointer, position: Int, model: [TensorMapping]) -> (String, Int)? {
        func sameBytes(_ k: Int) -> Bool {
            model[k].nameUTF8.withUnsafeBytes { $0.count == bytes.count && (bytes.count == 0 || memcmp($0.baseAddress!, bytes.baseAddress!, bytes.count) == 0) }
        }
        // The common case: the model's input at this position, byte for byte.
        if position < model.count && sameBytes(position) { return (model[position].name, position) }
        let utf8 = bytes.bindMemory(to: UInt8.self)
        let ascii = utf8.allSatisfy { $0 < 0x80 }
        var text: String?
        if !ascii {
            guard let valid = String(validating: utf8, as: UTF8.self) else { return nil }
            text = valid
        }
        // Equal as Strings: the same bytes, or (a non-ASCII name on either side) canonically equivalent.
        func same(_ k: Int) -> Bool {
            if sameBytes(k) { return true }
            if ascii && model[k].nameIsASCII { return false }
            if text == nil { text = String(decoding: utf8, as: UTF8.self) }
            return text! == model[k].name
        }
        if position < model.count && same(position) { return (model[position].name, position) }
        for k in model.indices where k != position && same(k) { return (model[k].name, k) }
        return (text ?? String(decoding: utf8, as: UTF8.self), -1)
    }

    /// The datatypes of the protocol, each keyed by its bytes and length (at most 7 bytes).
    private static let datatypes: [(key: UInt64, name: String)] =
        ["FP64", "FP32", "INT64", "INT32", "BYTES", "FP16", "BOOL", "UINT8", "INT8", "INT16", "UINT16", "UINT32", "UINT64", "BF16"]
        .map { name in (Array(name.utf8).withUnsafeBytes { datatypeKey($0)! }, name) }

    private static func datatypeKey(_ bytes: UnsafeRawBufferPointer) -> UInt64? {
        guard bytes.count <= 7 else { return nil }
        var key = UInt64(bytes.count) << 56
        for (i, b) in bytes.enumerated() { key |= UInt64(b) << (8 * UInt64(i)) }
        return key
    }

    /// A datatype field's text: one of the protocol's names without making a String of the
    /// bytes, or the bytes as a String (an unknown datatype, refused later by its name); nil
    /// when not UTF-8.
    private static func datatype(_ bytes: UnsafeRawBufferPointer) -> String? {
        if let key = datatypeKey(bytes) {
            for entry in datatypes where entry.key == key { return entry.name }
        }
        let utf8 = bytes.bindMemory(to: UInt8.self)
        if utf8.allSatisfy({ $0 < 0x80 }) { return String(decoding: utf8, as: UTF8.self) }
        return String(validating: utf8, as: UTF8.self)
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
