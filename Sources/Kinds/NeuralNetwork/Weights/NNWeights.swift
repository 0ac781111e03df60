import CortadoCore
import CortadoSpec
import Foundation

/// Decodes a `WeightParams` into Float32, whatever form it is stored in:
/// - `floatValue`: Float32 values;
/// - `float16Value`: little-endian IEEE half floats;
/// - `rawValue` with `quantization`: 1–8-bit codes, packed most significant bit first (the
///   order coremltools writes), mapped through a linear quantization (`scale[c] * q + bias[c]`,
///   one scale/bias or one per output channel) or a lookup table (`table[q]`);
/// - `rawValue` without quantization: raw Float32 (or, when half the size, Float16) bytes;
/// - `int8RawValue`: signed bytes, with a linear quantization if one is given.
///
/// Weights are decoded once, when the layer is built (or once by `cortado compile`: see
/// `NNPrecompiledWeights`).
public enum NNWeights {
    /// All values. `expected` (when given) is the element count the layer needs; `channels` is
    /// the number of output channels a per-channel quantization is laid out over (the weights'
    /// outermost dimension).
    public static func floats(_ w: CoreML_Specification_WeightParams, count expected: Int? = nil,
                              channels: Int = 1, name: String) throws -> [Float] {
        if let stored = try NNPrecompiledWeights.current?.values(for: w, count: expected, channels: channels, name: name) {
            return stored.values
        }
        let values: [Float]
        if !w.floatValue.isEmpty {
            values = w.floatValue
        } else if !w.float16Value.isEmpty {
            guard w.float16Value.count % 2 == 0 else { throw NNLayerError("\(name): float16Value has an odd byte count (\(w.float16Value.count))") }
            values = halfFloats(w.float16Value)
        } else if !w.rawValue.isEmpty || !w.int8RawValue.isEmpty {
            values = try raw(w, expected: expected, channels: channels, name: name)
        } else {
            values = []
        }
        if let expected, values.count != expected {
            throw NNLayerError("\(name) has \(values.count) values, expected \(expected)")
        }
        // Non-finite values are kept, as Core ML keeps them; inspect reports them.
        values.withUnsafeBufferPointer { NNWeightAudit.note($0) }
        return values
    }

    /// Like `floats`, but a compiled model's weights stay in place (no copy).
    static func values(_ w: CoreML_Specification_WeightParams, count expected: Int? = nil,
                       channels: Int = 1, name: String) throws -> NNFloats {
        if let stored = try NNPrecompiledWeights.current?.values(for: w, count: expected, channels: channels, name: name) {
            return stored
        }
        return NNFloats(try floats(w, count: expected, channels: channels, name: name))
    }

    /// True when the weights hold no values at all.
    public static func isEmpty(_ w: CoreML_Specification_WeightParams) -> Bool {
        w.floatValue.isEmpty && w.float16Value.isEmpty && w.rawValue.isEmpty && w.int8RawValue.isEmpty
    }

    /// Which storage form the weights use, for `cortado inspect`.
    public static func form(_ w: CoreML_Specification_WeightParams) -> String {
        if let form = NNPrecompiledWeights.current?.form(of: w) { return form }
        if !w.floatValue.isEmpty { return "float32" }
        if !w.float16Value.isEmpty { return "float16" }
        if w.hasQuantization {
            let q = w.quantization
            switch q.quantizationType {
            case .linearQuantization?: return "\(q.numberOfBits)-bit linear"
            case .lookupTableQuantization?: return "\(q.numberOfBits)-bit lookup table"
            case nil: return "raw"
            }
        }
        return w.int8RawValue.isEmpty ? "raw" : "int8"
    }

    /// Little-endian IEEE half floats.
    /// Little-endian float16 values widened to Float32: one tight loop the compiler turns into
    /// `vcvtph2ps` with F16C (a per-value call across modules was most of a float16 model's load).
    static func halfFloats(_ data: Data) -> [Float] {
        let count = data.count / 2
        return [Float](unsafeUninitializedCapacity: count) { out, initialized in
            data.withUnsafeBytes { raw in
                for i in 0..<count {
                    out[i] = Float(Float16(bitPattern: UInt16(littleEndian: raw.loadUnaligned(fromByteOffset: 2 * i, as: UInt16.self))))
                }
            }
            initialized = count
        }
    }

    static func raw(_ w: CoreML_Specification_WeightParams, expected: Int?, channels: Int, name: String) throws -> [Float] {
        if !w.int8RawValue.isEmpty {
            let codes = w.int8RawValue.map { Float(Int8(bitPattern: $0)) }
            if w.hasQuantization, case .linearQuantization(let lq)? = w.quantization.quantizationType {
                return try linear(codes, lq, channels: channels, name: name)
            }
            return codes
        }
        guard w.hasQuantization, w.quantization.quantizationType != nil else {
            // Unquantized raw bytes: Float32, or Float16 when the size says so.
            if let expected, w.rawValue.count == expected * 2 {
                return halfFloats(w.rawValue)
            }
            guard w.rawValue.count % 4 == 0 else { throw NNLayerError("\(name): rawValue holds \(w.rawValue.count) bytes, not a whole number of Float32 values") }
            return w.rawValue.withUnsafeBytes { raw in
                (0..<raw.count / 4).map { Float(bitPattern: raw.loadUnaligned(fromByteOffset: 4 * $0, as: UInt32.self).littleEndian) }
            }
        }
        let q = w.quantization
        let bits = Int(q.numberOfBits)
        guard (1...8).contains(bits) else { throw NNLayerError("\(name): quantization uses \(bits) bits; 1 to 8 are supported") }
        let available = w.rawValue.count * 8 / bits
        let n = expected ?? available
        guard available >= n else {
            throw NNLayerError("\(name): \(w.rawValue.count) bytes of \(bits)-bit codes hold \(available) values, expected \(n)")
        }
        let codes = unpack(w.rawValue, bits: bits, count: n)
        switch q.quantizationType! {
        case .linearQuantization(let lq):
            return try linear(codes.map(Float.init), lq, channels: channels, name: name)
        case .lookupTableQuantization(let lut):
            let table = lut.floatValue
            guard table.count == 1 << bits else {
                throw NNLayerError("\(name): lookup table has \(table.count) entries; \(bits)-bit codes need \(1 << bits)")
            }
            return codes.map { table[Int($0)] }
        }
    }

    /// Unpacks `count` codes of `bits` bits, most significant bit first.
    static func unpack(_ data: Data, bits: Int, count: Int) -> [UInt8] {
        if bits == 8 { return Array(data.prefix(count)) }
        var out = [UInt8](repeating: 0, count: count)
        data.withUnsafeBytes { raw in
            var bit = 0
            for i in 0..<count {
                var v = 0
                for _ in 0..<bits {
                    let byte = Int(raw[bit >> 3])
                    v = (v << 1) | ((byte >> (7 - (bit & 7))) & 1)
                    bit += 1
                }
                out[i] = UInt8(v)
            }
        }
        return out
    }

    static func linear(_ codes: [Float], _ lq: CoreML_Specification_LinearQuantizationParams, channels: Int, name: String) throws -> [Float] {
        let scale = lq.scale, bias = lq.bias
        guard scale.count == 1 || scale.count == channels else {
            throw NNLayerError("\(name): linear quantization has \(scale.count) scales for \(channels) output channels")
        }
        guard bias.isEmpty || bias.count == scale.count else {
            throw NNLayerError("\(name): linear quantization has \(scale.count) scales but \(bias.count) biases")
        }
        let perChannel = scale.count > 1
        let block = perChannel ? max(codes.count / channels, 1) : codes.count
        return codes.enumerated().map { i, q in
            let c = perChannel ? min(i / block, channels - 1) : 0
            return scale[c] * q + (bias.isEmpty ? 0 : bias[c])
        }
    }
}
