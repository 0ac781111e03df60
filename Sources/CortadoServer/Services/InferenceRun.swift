import CortadoCore
import CortadoGRPC
import CortadoNativeCoding
import CortadoServerProtos
import Foundation

/// One ModelInfer request on a worker: tensors in (raw, typed or shared memory), rows
/// through the model, tensors out (raw, or written into the client's shared memory).
/// A class: a job keeps it from `rows` to `encode`, and copying a struct this size (the
/// request message, the model, the registry) on every use cost a retain per field.
final class InferenceRun {
    let request: InferRequestView
    let served: ServedModel
    let sharedMemory: SharedMemoryRegistry

    init(request: InferRequestView, served: ServedModel, sharedMemory: SharedMemoryRegistry) {
        self.request = request
        self.served = served
        self.sharedMemory = sharedMemory
    }

    convenience init(request: Inference_ModelInferRequest, served: ServedModel, sharedMemory: SharedMemoryRegistry) {
        self.init(request: InferRequestView(request), served: served, sharedMemory: sharedMemory)
    }

    func bad(_ message: String) -> ServeStatus { ServeStatus(.invalidArgument, message) }

    /// One input tensor's elements, the model input they feed and each row's shape.
    struct Column {
        let mapping: TensorMapping
        let elements: TensorElements
        let rowShape: [Int]
    }

    /// Reads and checks the input tensors into a columnar batch: one column per input, rows
    /// along the first axis. A raw FP32, FP64, INT32 or FP16 tensor for a multi-array input
    /// becomes an array over the request's own bytes (no copy: the run, which holds the
    /// request, is among the batch's owners); scalars become `.doubles` / `.int64s`; strings,
    /// JSON features, sequences and images one value per row.
    func columns() throws -> MLFeatureColumns {
        // The request's storage is a `let` of this object and never changes, so the address
        // its bytes have here holds as long as the run lives (the batch keeps it alive).
        try request.storage.withUnsafeBytes { storage in try columns(storage) }
    }

    private func columns(_ storage: UnsafeRawBufferPointer) throws -> MLFeatureColumns {
        let model = served.model
        let mappings = served.tensorInputs
        let useRaw = !request.raw.isEmpty
        if useRaw && request.raw.count != request.inputs.count {
            throw bad("raw_input_contents has \(request.raw.count) entries for \(request.inputs.count) inputs")
        }
        // Made at the first input, which sets the batch's rows.
        var out: MLFeatureColumns?
        // Which model inputs the request gave, by position in `mappings`.
        var given = GivenInputs()
        // Each tensor borrowed where it lies (through the list's buffer: a copy would retain each
        // of its fields, per input); each becomes its column as soon as it is read and checked.
        try request.inputs.withUnsafeBufferPointer { inputs in
            for index in inputs.indices {
                let raw = useRaw ? UnsafeRawBufferPointer(rebasing: storage[request.raw[index]]) : nil
                if let raw, try scalar(inputs.baseAddress! + index, raw: raw, mappings: mappings, given: &given, into: &out) { continue }
                let (column, rows) = try column(inputs[index], raw: raw, mappings: mappings, hint: index, given: &given)
                if let out {
                    guard rows == out.count else { throw bad("input '\(column.mapping.name)' has \(rows) rows but an earlier input has \(out.count)") }
                } else {
                    try checkBatch(rows)
                    out = MLFeatureColumns(count: rows, owner: self, capacity: request.inputs.count)
                }
                // Each model input is given once (`given`), so its name is new to the batch.
                out!.add(column.mapping.name, try self.column(column, rows: rows))
            }
        }
        for (m, mapping) in mappings.enumerated() where !given.contains(m) && !mapping.feature.isOptional {
            throw bad("model '\(model.name)': required input '\(mapping.name)' is missing (expected \(mapping.datatype) \([-1] + mapping.dims))")
        }
        return out ?? MLFeatureColumns(count: 1, owner: self)
    }

    /// Adds a scalar input sent the common way as its column to `out` (made at the first
    /// input): a raw FP64, FP32, INT64 or INT32 tensor of shape [rows, 1] (or [1]) for a
    /// double or int64 input whose name the decoder matched (`Input.declared`), 1 up to
    /// max_batch_size rows. False for anything else, which takes the general path (`column`)
    /// and its checks and errors; the values are read as that path reads them
    /// (`TensorElements`), and the checks this path makes word their errors as it does.
    private func scalar(_ tensor: UnsafePointer<InferRequestView.Input>, raw: UnsafeRawBufferPointer, mappings: [TensorMapping],
                        given: inout GivenInputs, into out: inout MLFeatureColumns?) throws -> Bool {
        guard let (m, rows, column) = scalar(tensor, raw: raw, mappings: mappings) else { return false }
        let mapping = mappings[m]
        guard given.insert(m) else { throw bad("input '\(tensor.pointee.name)' is given twice") }
        if let out {
            guard rows == out.count else { throw bad("input '\(mapping.name)' has \(rows) rows but an earlier input has \(out.count)") }
        } else {
            out = MLFeatureColumns(count: rows, owner: self, capacity: request.inputs.count)
        }
        out!.add(mapping.name, column)
        return true
    }

    /// The model input's position, the rows and the column of a scalar `scalar(_:raw:mappings:given:into:)` takes.
    private func scalar(_ tensor: UnsafePointer<InferRequestView.Input>, raw: UnsafeRawBufferPointer,
                        mappings: [TensorMapping]) -> (Int, Int, MLFeatureColumn)? {
        let m = tensor.pointee.declared
        guard m >= 0, m < mappings.count, tensor.pointee.isPlain else { return nil }
        let integer: Bool
        switch mappings[m].kind {
        case .double: integer = false
        case .int64: integer = true
        default: return nil
        }
        let shape = tensor.pointee.shape
        let rows: Int
        if shape.count == 2 && shape[1] == 1 {
            rows = shape[0]
        } else if shape.count == 1 && shape[0] == 1 {
            rows = 1
        } else {
            return nil
        }
        guard rows >= 1, rows <= Int(InferenceService.maxBatchSize) else { return nil }
        let datatype = tensor.pointee.datatype
        let size: Int
        // FP64 first: the datatype a double input takes.
        if datatype == "FP64" || datatype == "INT64" { size = 8 } else if datatype == "FP32" || datatype == "INT32" { size = 4 } else { return nil }
        guard raw.count == rows * size else { return nil }
        if !integer && size == 8 && datatype == "FP64" {
            // Doubles for a double input: the bytes as they are.
            if rows == 1 { return (m, 1, .doubles([raw.loadUnaligned(as: Double.self)])) }
            return (m, rows, .doubles((0..<rows).map { raw.loadUnaligned(fromByteOffset: $0 * 8, as: Double.self) }))
        }
        let elements = TensorElements(datatype: datatype, shape: shape, raw: raw, strings: [], owner: nil)
        if integer {
            return (m, rows, .int64s(rows == 1 ? [elements.int64(at: 0)] : (0..<rows).map { elements.int64(at: $0) }))
        }
        return (m, rows, .doubles(rows == 1 ? [elements.double(at: 0)] : (0..<rows).map { elements.double(at: $0) }))
    }

    private func checkBatch(_ rows: Int) throws {
        guard rows >= 1 else { throw bad("the batch is empty") }
        guard rows <= Int(InferenceService.maxBatchSize) else { throw bad("batch of \(rows) rows is larger than max_batch_size \(InferenceService.maxBatchSize)") }
    }

    /// Checks one input tensor against the model's inputs and reads its elements; with the
    /// rows it holds. `hint`: where the input is looked for first (clients mostly send the
    /// inputs in the model's order); `given` marks the model inputs seen so far.
    private func column(_ tensor: borrowing InferRequestView.Input, raw: UnsafeRawBufferPointer?, mappings: [TensorMapping],
                        hint: Int, given: inout GivenInputs) throws -> (column: Column, rows: Int) {
        let model = served.model
        let name = tensor.name
        let declared = tensor.declared
        guard let m = declared >= 0 && declared < mappings.count ? declared
                : hint < mappings.count && mappings[hint].name == name ? hint : mappings.firstIndex(where: { $0.name == name }) else {
            throw bad("model '\(model.name)' has no input named '\(name)' (inputs: \(mappings.map(\.name).joined(separator: ", ")))")
        }
        let mapping = mappings[m]
        guard given.insert(m) else { throw bad("input '\(name)' is given twice") }
        let shape = tensor.shape
        guard shape.allSatisfy({ $0 >= 0 }) else { throw bad("input '\(tensor.name)': negative dimension in shape \(shape)") }
        // A leading batch dimension, or none (one row).
        let rows: Int
        let rowShape: [Int]
        // An image also comes encoded: BYTES [1] holding PNG or JPEG bytes.
        let rank = mapping.isImage && tensor.datatype == "BYTES" ? 1 : mapping.dims.count
        if shape.count == rank + 1 {
            rows = shape[0]
            // The model's own row shape when it is that (shared, not built again).
            rowShape = mapping.fixedRowShape.elementsEqual(shape.dropFirst()) ? mapping.fixedRowShape : Array(shape.dropFirst())
        } else if shape.count == rank {
            rows = 1
            rowShape = shape
        } else {
            throw bad("input '\(tensor.name)': shape \(shape) has rank \(shape.count); expected [batch] + \(rank == 1 ? [1] : mapping.dims) (rank \(rank + 1))")
        }
        let elements = try read(tensor, raw: raw, shape: shape, mapping: mapping)
        return (Column(mapping: mapping, elements: elements, rowShape: rowShape), rows)
    }

    // MARK: inputs

    private func parameterString(_ p: [String: Inference_InferParameter], _ key: String) -> String? {
        if case .stringParam(let s)? = p[key]?.parameterChoice { return s }
        return nil
    }

    private func parameterInt(_ p: [String: Inference_InferParameter], _ key: String) -> Int? {
        switch p[key]?.parameterChoice {
        case .int64Param(let v)?: return Int(v)
        case .uint64Param(let v)?: return Int(clamping: v)
        default: return nil
        }
    }

    /// Reads a tensor's elements from shared memory, raw bytes or typed contents.
    private func read(_ tensor: borrowing InferRequestView.Input, raw: UnsafeRawBufferPointer?, shape: [Int], mapping: TensorMapping) throws -> TensorElements {
        let name = tensor.name
        guard let count = MLMultiArray.byteCount(shape, elementSize: 1) else {
            throw bad("input '\(name)': shape \(shape) has too many elements")
        }
        let datatype = tensor.datatype
        if datatype == "BYTES" {
            let strings: [Data]
            if !tensor.isPlain, let region = parameterString(tensor.parameters, "shared_memory_region") {
                let size = parameterInt(tensor.parameters, "shared_memory_byte_size") ?? 0
                let span = try sharedMemory.span(region: region, offset: parameterInt(tensor.parameters, "shared_memory_offset") ?? 0, byteSize: size)
                strings = try TensorBytes.split(UnsafeRawBufferPointer(span), name: name)
            } else if let raw {
                strings = try TensorBytes.split(raw, name: name)
            } else {
                strings = tensor.contents?.bytesContents ?? []
            }
            guard strings.count == count else { throw bad("input '\(name)': shape \(shape) needs \(count) BYTES elements, got \(strings.count)") }
            return TensorElements(datatype: datatype, shape: shape, raw: UnsafeRawBufferPointer(start: nil, count: 0), strings: strings, owner: nil)
        }
        guard let size = TensorMapping.elementSize(datatype) else {
            throw bad("input '\(name)': unknown datatype '\(datatype)'")
        }
        guard let bytes = MLMultiArray.byteCount(shape, elementSize: size) else {
            throw bad("input '\(name)': shape \(shape) of \(datatype) has too many bytes")
        }
        if !tensor.isPlain, let region = parameterString(tensor.parameters, "shared_memory_region") {
            let declared = parameterInt(tensor.parameters, "shared_memory_byte_size") ?? bytes
            guard declared >= bytes else { throw bad("input '\(name)': shared_memory_byte_size \(declared) is smaller than the \(bytes) bytes of shape \(shape) \(datatype)") }
            let span = try sharedMemory.span(region: region, offset: parameterInt(tensor.parameters, "shared_memory_offset") ?? 0, byteSize: bytes)
            return TensorElements(datatype: datatype, shape: shape, raw: UnsafeRawBufferPointer(span), strings: [], owner: nil)
        }
        if let raw {
            guard raw.count == bytes else { throw bad("input '\(name)': shape \(shape) of \(datatype) needs \(bytes) bytes, raw_input_contents has \(raw.count)") }
            return TensorElements(datatype: datatype, shape: shape, raw: raw, strings: [], owner: self)
        }
        let box = DataBox(try typedBytes(tensor.contents ?? Inference_InferTensorContents(), datatype: datatype, count: count, name: name))
        return TensorElements(datatype: datatype, shape: shape, raw: box.buffer, strings: [], owner: box)
    }

    /// Typed contents (`fp32_contents`, …) as little-endian bytes of the tensor's datatype.
    private func typedBytes(_ c: Inference_InferTensorContents, datatype: String, count: Int, name: String) throws -> Data {
        func pack<T>(_ values: [T]) throws -> Data {
            guard values.count == count else { throw bad("input '\(name)': shape needs \(count) values of \(datatype), the typed contents hold \(values.count)") }
            return values.withUnsafeBytes { Data($0) }
        }
        switch datatype {
        case "FP32": return try pack(c.fp32Contents)
        case "FP64": return try pack(c.fp64Contents)
        case "INT64": return try pack(c.int64Contents)
        case "INT32": return try pack(c.intContents)
        case "INT16": return try pack(c.intContents.map { Int16(truncatingIfNeeded: $0) })
        case "INT8": return try pack(c.intContents.map { Int8(truncatingIfNeeded: $0) })
        case "UINT64": return try pack(c.uint64Contents)
        case "UINT32": return try pack(c.uintContents)
        case "UINT16": return try pack(c.uintContents.map { UInt16(truncatingIfNeeded: $0) })
        case "UINT8": return try pack(c.uintContents.map { UInt8(truncatingIfNeeded: $0) })
        case "BOOL": return try pack(c.boolContents.map { $0 ? UInt8(1) : 0 })
        default: throw bad("input '\(name)': datatype \(datatype) has no typed contents field; send it in raw_input_contents")
        }
    }

    /// One input's column for `rows` rows (the checks a row's value had, once per column).
    private func column(_ column: borrowing Column, rows: Int) throws -> MLFeatureColumn {
        let mapping = column.mapping, elements = column.elements, rowShape = column.rowShape
        let name = mapping.name
        let perRow = rowShape.reduce(1, *)
        let numeric = elements.datatype != "BYTES"
        switch mapping.kind {
        case .int64, .double:
            guard numeric else { throw bad("input '\(name)': expected a numeric tensor (\(mapping.datatype)), got BYTES") }
            guard perRow == 1 else { throw bad("input '\(name)' is a scalar: each row holds one value, got shape \(rowShape)") }
            if case .int64 = mapping.kind { return .int64s((0..<rows).map { elements.int64(at: $0) }) }
            return .doubles((0..<rows).map { elements.double(at: $0) })
        case .string:
            guard !numeric else { throw bad("input '\(name)': expected BYTES (a string), got \(elements.datatype)") }
            guard perRow == 1 else { throw bad("input '\(name)' is a string: each row holds one element, got shape \(rowShape)") }
            return .values((0..<rows).map { MLFeatureValue(string: String(decoding: elements.strings[$0], as: UTF8.self)) })
        case .json:
            guard !numeric else { throw bad("input '\(name)': expected BYTES holding the feature's JSON, got \(elements.datatype)") }
            return .values(try (0..<rows).map { row in
                let parsed: Any
                do { parsed = try MLJSONParser.parse(elements.strings[row]) } catch { throw bad("input '\(name)': the BYTES element is not JSON: \(error)") }
                return try MLFeatureJSON.decode(parsed, as: mapping.feature)
            })
        case .int64Sequence:
            guard numeric else { throw bad("input '\(name)': expected an INT64 tensor, got BYTES") }
            return .values((0..<rows).map { row in
                MLFeatureValue(sequence: MLSequence(int64s: (0..<perRow).map { elements.int64(at: row * perRow + $0) }))
            })
        case .multiArray(let declared):
            guard numeric else { throw bad("input '\(name)': expected a numeric tensor, got BYTES") }
            let (shape, strides) = mapping.arrayLayout(rows: rows, rowShape: rowShape)
            guard let wire = TensorMapping.arrayType(elements.datatype) else {
                // Another wire type (INT64, UINT8, …): converted into the declared type.
                let array = try MLMultiArray(shape: shape, dataType: declared ?? .double)
                for i in 0..<rows * perRow { array.setDouble(elements.double(at: i), at: i) }
                return .arrays(array)
            }
            let size = wire.size
            if let owner = elements.owner, let base = elements.raw.baseAddress, Int(bitPattern: base) % size == 0 {
                // The tensor's bytes where they lie (the request's, or its typed contents'),
                // kept alive by the array.
                return .arrays(try MLMultiArray(dataPointer: UnsafeMutableRawPointer(mutating: base), shape: shape, dataType: wire,
                                                strides: strides, owner: owner))
            }
            // Shared memory (its client may rewrite or unregister it), or bytes not aligned
            // for their type: one copy.
            guard rows * perRow > 0, let base = elements.raw.baseAddress else { return .arrays(try MLMultiArray(shape: shape, dataType: wire)) }
            return .arrays(try MLMultiArray(copying: base, shape: shape, dataType: wire))
        case .probabilities:
            throw bad("input '\(name)' cannot be a class-probability tensor")
        case .image:
            return .values(try (0..<rows).map { row in
                MLFeatureValue(image: try image(row: row, name: name, elements: elements, rowShape: rowShape))
            })
        }
    }

    /// One row's image: BYTES [1] holding PNG or JPEG bytes, or pixels — UINT8 [H, W, 3] RGB,
    /// [H, W, 1] gray, [H, W, 4] BGRA, FP16 [H, W, 1] half-float gray.
    private func image(row: Int, name: String, elements: TensorElements, rowShape: [Int]) throws -> MLImage {
        if elements.datatype == "BYTES" {
            guard rowShape == [1] else { throw bad("input '\(name)': an encoded image is one BYTES element (PNG or JPEG) per row, got shape \(rowShape)") }
            do { return try MLImage(encoded: elements.strings[row]) } catch { throw bad("input '\(name)': \(error)") }
        }
        let format: MLImagePixelFormat?
        switch (elements.datatype, rowShape.last) {
        case ("UINT8", 3): format = .rgb8
        case ("UINT8", 1): format = .gray8
        case ("UINT8", 4): format = .bgra8
        case ("FP16", 1): format = .gray16f
        default: format = nil
        }
        guard let format, rowShape.count == 3 else {
            throw bad("input '\(name)' is an image: send UINT8 [H, W, C] pixels (C = 3 RGB, 1 gray, 4 BGRA), FP16 [H, W, 1] or BYTES [1] holding a PNG or JPEG; got \(elements.datatype) \(rowShape)")
        }
        let size = rowShape[0] * rowShape[1] * format.bytesPerPixel
        let pixels = [UInt8](UnsafeRawBufferPointer(rebasing: elements.raw[row * size..<(row + 1) * size]))
        do {
            return try MLImage(width: rowShape[1], height: rowShape[0], pixelFormat: format, data: pixels)
        } catch { throw bad("input '\(name)': \(error)") }
    }

    // MARK: outputs

    /// One output tensor of a response; its bytes are `bytes` of the response's shared raw
    /// buffer (empty when they went to the client's shared memory).
    struct OutputTensor {
        /// The model output it holds (its name; its datatype unless `datatype` says otherwise).
        let mapping: TensorMapping
        var datatype: String
        var shape: [Int64]
        /// Only set for shared-memory outputs (region and byte size).
        var parameters: [String: Inference_InferParameter] = [:]
        var bytes: Range<Int>
    }

    /// The response for the batch's results, serialized by hand
    /// (`ProtobufWriter`): model name, version and id, then each output's description
    /// (field 5), then each output's bytes (field 6), copied once from the model's (or the
    /// pool's) arrays into the message.
    /// `reservingPrefix`: leave `GRPCMessageWriter.prefixLength` bytes in front for the
    /// transport's frame prefix.
    func serializedResponse(_ results: MLFeatureColumns, reservingPrefix: Bool = false) throws -> [UInt8] {
        let (tensors, raw) = try outputs(results)
        var w = ProtobufWriter(capacity: 64 + raw.count + tensors.count * 48)
        if reservingPrefix { w.bytes.append(contentsOf: repeatElement(0, count: GRPCMessageWriter.prefixLength)) }
        w.bytes.append(contentsOf: served.responseModelFields)
        w.string(3, request.id)
        // By index: the tensors are read in place, not copied (a copy retains each field).
        for i in tensors.indices {
            // Parameters are rare (shared memory only): SwiftProtobuf writes those map entries.
            var extra: [UInt8] = []
            if !tensors[i].parameters.isEmpty {
                var only = Inference_ModelInferResponse.InferOutputTensor()
                only.parameters = tensors[i].parameters
                extra = try only.serializedBytes()
            }
            // Name and datatype as bytes written once per model, unless the datatype is the
            // response's own (classification, a multi-array's actual type).
            let mapping = tensors[i].mapping
            let described = tensors[i].datatype == mapping.datatype
            let head = described ? mapping.descriptionFields.count
                                 : ProtobufWriter.stringFieldSize(1, mapping.name) + ProtobufWriter.stringFieldSize(2, tensors[i].datatype)
            w.lengthDelimited(5, length: head + ProtobufWriter.packedInt64FieldSize(3, tensors[i].shape) + extra.count)
            if described {
                w.bytes.append(contentsOf: mapping.descriptionFields)
            } else {
                w.string(1, mapping.name)
                w.string(2, tensors[i].datatype)
            }
            w.packedInt64(3, tensors[i].shape)
            if !extra.isEmpty { w.bytes.append(contentsOf: extra) }
        }
        raw.withUnsafeBytes { all in
            for i in tensors.indices { w.bytesField(6, UnsafeRawBufferPointer(rebasing: all[tensors[i].bytes])) }
        }
        return w.bytes
    }

    /// The requested outputs (all, when the request names none), their bytes in one buffer;
    /// shared-memory outputs are written to the client's region.
    func outputs(_ results: MLFeatureColumns) throws -> (tensors: [OutputTensor], raw: [UInt8]) {
        let model = served.model
        let mappings = served.tensorOutputs
        // Every output when the request names none (no list is built for that case).
        let named = !request.outputs.isEmpty
        var raw: [UInt8] = []
        raw.reserveCapacity(256)
        var tensors: [OutputTensor] = []
        tensors.reserveCapacity(named ? request.outputs.count : mappings.count)
        for k in 0..<(named ? request.outputs.count : mappings.count) {
            // The output's position among the model's outputs: where the results hold its column
            // (they follow the description's order).
            let position: Int
            let requested: InferRequestView.Output?
            if named {
                requested = request.outputs[k]
                guard let m = mappings.firstIndex(where: { $0.name == requested!.name }) else {
                    throw bad("model '\(model.name)' has no output named '\(requested!.name)' (outputs: \(mappings.map(\.name).joined(separator: ", ")))")
                }
                position = m
            } else {
                position = k
                requested = nil
            }
            let mapping = mappings[position]
            let start = raw.count
            var tensor = try encode(mapping, results, hint: position, classification: requested.flatMap { parameterInt($0.parameters, "classification") },
                                    into: &raw)
            tensor.bytes = start..<raw.count
            if let requested, let region = parameterString(requested.parameters, "shared_memory_region") {
                let count = raw.count - start
                let size = parameterInt(requested.parameters, "shared_memory_byte_size") ?? count
                guard size >= count else {
                    throw bad("output '\(mapping.name)' needs \(count) bytes, its shared-memory slot holds \(size)")
                }
                let span = try sharedMemory.span(region: region, offset: parameterInt(requested.parameters, "shared_memory_offset") ?? 0, byteSize: count)
                raw.withUnsafeBytes { if count > 0 { span.baseAddress!.copyMemory(from: $0.baseAddress! + start, byteCount: count) } }
                raw.removeSubrange(start...)
                var p = Inference_InferParameter()
                p.stringParam = region
                tensor.parameters["shared_memory_region"] = p
                var s = Inference_InferParameter()
                s.int64Param = Int64(count)
                tensor.parameters["shared_memory_byte_size"] = s
                tensor.bytes = start..<start
            }
            tensors.append(consume tensor)
        }
        return (tensors, raw)
    }

    /// Appends one output's bytes for every row to `data`, from its column (an `.arrays`
    /// column in one copy, scalars straight from their lists); returns its description.
    private func encode(_ mapping: TensorMapping, _ results: MLFeatureColumns, hint: Int, classification: Int?,
                        into data: inout [UInt8]) throws -> OutputTensor {
        var tensor = OutputTensor(mapping: mapping, datatype: mapping.datatype, shape: [], bytes: 0..<0)
        let rows = results.count
        guard let column = results.column(mapping.name, hint: hint) else {
            throw ServeStatus(.internal, "the model produced no value for output '\(mapping.name)'")
        }
        func value(_ r: Int) throws -> MLFeatureValue {
            guard let v = results.value(of: column, row: r), !v.isUndefined else {
                throw ServeStatus(.internal, "the model produced no value for output '\(mapping.name)'")
            }
            return v
        }
        func append<T>(_ v: T) { withUnsafeBytes(of: v) { data.append(contentsOf: $0) } }
        if let k = classification {
            // Triton's classification extension: the top k classes as "score:index:label".
            guard case .probabilities(let labels) = mapping.kind else {
                throw bad("output '\(mapping.name)' holds no class probabilities; request classification on the probabilities output")
            }
            let top = max(1, min(k, labels.count))
            for r in 0..<rows {
                let scores = probabilities(try value(r), labels: labels)
                for i in scores.indices.sorted(by: { scores[$0] > scores[$1] || (scores[$0] == scores[$1] && $0 < $1) }).prefix(top) {
                    TensorBytes.append(Array("\(Float(scores[i])):\(i):\(labelText(labels, i))".utf8), to: &data)
                }
            }
            tensor.datatype = "BYTES"
            tensor.shape = [Int64(rows), Int64(top)]
            return tensor
        }
        switch mapping.kind {
        case .int64:
            if case .int64s(let values) = column {
                values.withUnsafeBytes { data.append(contentsOf: $0) }
            } else {
                for r in 0..<rows { append(try value(r).int64Value.littleEndian) }
            }
            tensor.shape = mapping.batchShape(rows)
        case .double:
            if case .doubles(let values) = column {
                values.withUnsafeBytes { data.append(contentsOf: $0) }
            } else {
                for r in 0..<rows { append(try value(r).doubleValue) }
            }
            tensor.shape = mapping.batchShape(rows)
        case .string:
            for r in 0..<rows { TensorBytes.append(try value(r).stringValue.utf8, to: &data) }
            tensor.shape = mapping.batchShape(rows)
        case .json:
            for r in 0..<rows {
                var text = ""
                MLFeatureJSON.encode(try value(r), into: &text)
                TensorBytes.append(text.utf8, to: &data)
            }
            tensor.shape = mapping.batchShape(rows)
        case .probabilities(let labels):
            for r in 0..<rows {
                for p in probabilities(try value(r), labels: labels) { append(p) }
            }
            tensor.shape = mapping.batchShape(rows)
        case .int64Sequence:
            var width = -1
            for r in 0..<rows {
                let values = try value(r).sequenceValue?.int64Values ?? []
                if width < 0 { width = values.count } else if width != values.count {
                    throw ServeStatus(.failedPrecondition, "output '\(mapping.name)': rows have sequences of different lengths; send rows one by one")
                }
                values.withUnsafeBytes { data.append(contentsOf: $0) }
            }
            tensor.shape = [Int64(rows), Int64(max(width, 0))]
        case .multiArray:
            if case .arrays(let array) = column {
                // Every row in one copy.
                if array.isContiguous {
                    data.append(contentsOf: UnsafeRawBufferPointer(start: array.dataPointer, count: array.count * array.dataType.size))
                } else {
                    data.append(contentsOf: MultiArrayBytes.contiguousData(array))
                }
                tensor.datatype = TensorMapping.datatype(array.dataType)
                tensor.shape = array.shape.map { Int64($0) }
                return tensor
            }
            var shape: [Int]?
            var type: MLMultiArrayDataType?
            for r in 0..<rows {
                guard let array = try value(r).multiArrayValue else {
                    throw ServeStatus(.internal, "output '\(mapping.name)' is not a multi-array")
                }
                if shape == nil { shape = array.shape; type = array.dataType } else if shape! != array.shape || type! != array.dataType {
                    throw ServeStatus(.failedPrecondition, "output '\(mapping.name)': rows produced arrays of different shapes; send rows one by one")
                }
                if array.isContiguous {
                    data.append(contentsOf: UnsafeRawBufferPointer(start: array.dataPointer, count: array.count * array.dataType.size))
                } else {
                    data.append(contentsOf: MultiArrayBytes.contiguousData(array))
                }
            }
            tensor.datatype = TensorMapping.datatype(type ?? .double)
            tensor.shape = [Int64(rows)] + (shape ?? []).map { Int64($0) }
        case .image:
            // Pixels as UINT8 [H, W, C] (RGB8: C = 3 in RGB order, GRAY8: 1, BGRA8: 4) or
            // FP16 [H, W, 1] for half-float gray.
            var first: MLImage?
            for r in 0..<rows {
                guard let image = try value(r).imageValue else { throw ServeStatus(.internal, "output '\(mapping.name)' is not an image") }
                if let first {
                    guard first.width == image.width, first.height == image.height, first.pixelFormat == image.pixelFormat else {
                        throw ServeStatus(.failedPrecondition, "output '\(mapping.name)': rows produced images of different sizes; send rows one by one")
                    }
                } else { first = image }
                data.append(contentsOf: image.data)
            }
            let format = first?.pixelFormat ?? .rgb8
            tensor.datatype = format == .gray16f ? "FP16" : "UINT8"
            let channels = format == .gray16f ? 1 : format.bytesPerPixel
            tensor.shape = [Int64(rows), Int64(first?.height ?? 0), Int64(first?.width ?? 0), Int64(channels)]
        }
        return tensor
    }

    private func probabilities(_ value: MLFeatureValue, labels: MLClassLabels) -> [Double] {
        // A classifier's scores in its label order: no dictionary to build or look up.
        if let scores = value.classScores, scores.labels == labels { return scores.scores }
        switch (value.dictionary, labels) {
        case (.stringKeyed(let d)?, .strings(let l)): return l.map { d[$0] ?? 0 }
        case (.int64Keyed(let d)?, .int64s(let l)): return l.map { d[$0] ?? 0 }
        default: return [Double](repeating: 0, count: labels.count)
        }
    }

    private func labelText(_ labels: MLClassLabels, _ i: Int) -> String {
        switch labels {
        case .strings(let l): return l[i]
        case .int64s(let l): return String(l[i])
        }
    }
}

/// The model inputs a request gave, by position: bits of one word for up to 64 inputs (no list
/// to allocate per request), a set beyond.
struct GivenInputs {
    private var bits: UInt64 = 0
    private var more: Set<Int> = []

    /// Marks input `i`; false when it was marked already.
    mutating func insert(_ i: Int) -> Bool {
        if i < 64 {
            let bit = UInt64(1) << UInt64(i)
            if bits & bit != 0 { return false }
            bits |= bit
            return true
        }
        return more.insert(i).inserted
    }

    func contains(_ i: Int) -> Bool { i < 64 ? bits & (UInt64(1) << UInt64(i)) != 0 : more.contains(i) }
}

/// Pins a `Data`'s bytes for the length of a request.
final class DataBox {
    let data: UnsafeMutableRawBufferPointer
    init(_ source: Data) {
        data = .allocate(byteCount: max(source.count, 1), alignment: 16)
        source.withUnsafeBytes { if $0.count > 0 { data.baseAddress!.copyMemory(from: $0.baseAddress!, byteCount: $0.count) } }
    }
    deinit { data.deallocate() }
    var buffer: UnsafeRawBufferPointer { UnsafeRawBufferPointer(data) }
}
