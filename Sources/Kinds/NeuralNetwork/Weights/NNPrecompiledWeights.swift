import CortadoCore
import CortadoSpec
import Foundation

/// A layer's weights: decoded into an array, or in place in a compiled model's payload (which
/// stays mapped while the layer lives).
struct NNFloats: @unchecked Sendable {
    private let array: [Float]
    private let mapped: UnsafePointer<Float>?
    let count: Int
    private let owner: AnyObject?

    init(_ array: [Float]) {
        self.array = array
        mapped = nil
        count = array.count
        owner = nil
    }

    init(mapped: UnsafePointer<Float>, count: Int, owner: AnyObject) {
        array = []
        self.mapped = mapped
        self.count = count
        self.owner = owner
    }

    func withUnsafeBufferPointer<R>(_ body: (UnsafeBufferPointer<Float>) throws -> R) rethrows -> R {
        if let mapped { return try body(UnsafeBufferPointer(start: mapped, count: count)) }
        return try array.withUnsafeBufferPointer(body)
    }

    var values: [Float] { mapped.map { Array(UnsafeBufferPointer(start: $0, count: count)) } ?? array }
}

/// The neural network's precompiled payload: every large weight blob of the layers that hold
/// them, decoded to Float32 in the layout the layer uses, in a section of its own.
///
/// `cortado compile` replaces each such `WeightParams` in the stored spec by a reference (a
/// 12-byte `rawValue`: "CORTADOW" and a little-endian index) and compiles the network once with
/// a recorder that decodes the originals as the layers ask for them. Loading the compiled model
/// compiles the stored spec with the payload instead: a reference resolves to the decoded
/// values in place, so nothing is parsed or decoded twice.
///
/// Sections: `nn.index` (u32 version, u32 count, then per weight: u64 byte offset in
/// `nn.weights`, u64 value count, u8 length and the storage form's name as UTF-8) and
/// `nn.weights` (Float32 values, each blob on a 64-byte boundary).
final class NNPrecompiledWeights: @unchecked Sendable {
    /// The payload the network being compiled on this thread reads (or records into).
    @TaskLocal static var current: NNPrecompiledWeights?

    static let indexSection = "nn.index"
    static let weightsSection = "nn.weights"
    /// The convolution algorithms measured while compiling (`Convolution+Algorithm.swift`):
    /// lines of "shape key<TAB>algorithm". Optional: older compiled files lack it.
    static let algorithmsSection = "nn.conv-algorithms"
    static let payloadVersion: UInt32 = 1
    static let marker = Array("CORTADOW".utf8)

    struct Entry {
        var offset: Int
        var count: Int
        var form: String
    }

    // Recording: the original weights by reference index, and what the layers decoded.
    private var originals: [CoreML_Specification_WeightParams] = []
    private(set) var recorded: [Int: [Float]] = [:]
    // Loading: the index and the mapped weights.
    private var entries: [Entry] = []
    private var weights: UnsafeRawBufferPointer?
    private var owner: AnyObject?
    // Convolution algorithms by shape key: noted while recording, read back when loading.
    private let algorithmLock = NSLock()
    private var algorithms: [String: String] = [:]

    init(recording originals: [CoreML_Specification_WeightParams]) {
        self.originals = originals
    }

    init(payload: MLCompiledPayload, index: UnsafeRawBufferPointer, weights: UnsafeRawBufferPointer) throws {
        self.weights = weights
        owner = payload
        entries = try Self.readIndex(index, weightBytes: weights.count)
    }

    /// The reference index a `WeightParams` holds, if it is one.
    static func reference(_ w: CoreML_Specification_WeightParams) -> Int? {
        guard w.rawValue.count == 12, w.floatValue.isEmpty, w.float16Value.isEmpty, !w.hasQuantization,
              Array(w.rawValue.prefix(8)) == marker else { return nil }
        return w.rawValue.suffix(4).withUnsafeBytes { Int(UInt32(littleEndian: $0.loadUnaligned(as: UInt32.self))) }
    }

    static func referenceParams(_ index: Int) -> CoreML_Specification_WeightParams {
        var w = CoreML_Specification_WeightParams()
        var raw = Data(marker)
        withUnsafeBytes(of: UInt32(index).littleEndian) { raw.append(contentsOf: $0) }
        w.rawValue = raw
        return w
    }

    /// The values behind a reference (nil when `w` is not one).
    func values(for w: CoreML_Specification_WeightParams, count expected: Int?, channels: Int, name: String) throws -> NNFloats? {
        guard let i = Self.reference(w) else { return nil }
        if weights == nil {
            guard i < originals.count else { throw NNLayerError("\(name): weight reference \(i) is outside the \(originals.count) weights") }
            let values = try NNWeights.floats(originals[i], count: expected, channels: channels, name: name)
            recorded[i] = values
            return NNFloats(values)
        }
        guard i < entries.count else {
            throw NNLayerError("\(name): the compiled model refers to weights #\(i), its payload holds \(entries.count)")
        }
        let e = entries[i]
        if let expected, e.count != expected {
            throw NNLayerError("\(name): compiled weights #\(i) hold \(e.count) values, the layer needs \(expected)")
        }
        let stored = NNFloats(mapped: (weights!.baseAddress! + e.offset).assumingMemoryBound(to: Float.self), count: e.count, owner: owner!)
        NNWeightAudit.note(stored)
        return stored
    }

    /// The storage form the weights had before compiling (for `cortado inspect`).
    func form(of w: CoreML_Specification_WeightParams) -> String? {
        guard let i = Self.reference(w) else { return nil }
        if weights == nil { return i < originals.count ? NNWeights.form(originals[i]) : nil }
        return i < entries.count ? entries[i].form : nil
    }

    // MARK: Convolution algorithms

    func noteAlgorithm(_ key: String, _ algorithm: String) {
        algorithmLock.lock(); algorithms[key] = algorithm; algorithmLock.unlock()
    }

    func storedAlgorithm(_ key: String) -> String? {
        algorithmLock.lock(); defer { algorithmLock.unlock() }
        return algorithms[key]
    }

    /// Reads the optional algorithms section (unknown or malformed lines are ignored: the
    /// layer then measures again).
    func readAlgorithms(_ raw: UnsafeRawBufferPointer) {
        for line in String(decoding: raw, as: UTF8.self).split(separator: "\n") {
            let parts = line.split(separator: "\t")
            guard parts.count == 2 else { continue }
            algorithms[String(parts[0])] = String(parts[1])
        }
    }

    // MARK: Writing

    /// The sections for what was recorded, in reference order.
    func sections() -> [MLCompiledSection] {
        var index = Data(), blob = Data()
        append(&index, Self.payloadVersion)
        append(&index, UInt32(originals.count))
        for i in originals.indices {
            let values = recorded[i] ?? []
            blob.append(Data(count: (MLModelBytes.alignment - blob.count % MLModelBytes.alignment) % MLModelBytes.alignment))
            append(&index, UInt64(blob.count))
            append(&index, UInt64(values.count))
            let form = Array(NNWeights.form(originals[i]).utf8.prefix(255))
            index.append(UInt8(form.count))
            index.append(contentsOf: form)
            values.withUnsafeBytes { blob.append(contentsOf: $0) } // little-endian machines only, as the loader
        }
        var sections = [MLCompiledSection(name: Self.indexSection, data: index),
                        MLCompiledSection(name: Self.weightsSection, data: blob, checksummed: false)]
        if !algorithms.isEmpty {
            let text = algorithms.keys.sorted().map { "\($0)\t\(algorithms[$0]!)\n" }.joined()
            sections.append(MLCompiledSection(name: Self.algorithmsSection, data: Data(text.utf8)))
        }
        return sections
    }

    private func append<T: FixedWidthInteger>(_ data: inout Data, _ value: T) {
        withUnsafeBytes(of: value.littleEndian) { data.append(contentsOf: $0) }
    }

    static func readIndex(_ raw: UnsafeRawBufferPointer, weightBytes: Int) throws -> [Entry] {
        func bad(_ what: String) -> MLModelError { MLModelError(.invalidModel, "corrupt compiled model: \(indexSection): \(what)") }
        var at = 0
        func read<T: FixedWidthInteger>(_: T.Type) throws -> T {
            guard at + MemoryLayout<T>.size <= raw.count else { throw bad("truncated") }
            defer { at += MemoryLayout<T>.size }
            return T(littleEndian: raw.loadUnaligned(fromByteOffset: at, as: T.self))
        }
        let version = try read(UInt32.self)
        guard version == payloadVersion else {
            throw MLModelError(.unsupported, "the compiled network payload has version \(version); this Cortado reads \(payloadVersion): compile the .mlmodel again")
        }
        let n = Int(try read(UInt32.self))
        guard n <= raw.count else { throw bad("\(n) entries cannot fit") }
        var entries: [Entry] = []
        entries.reserveCapacity(n)
        for i in 0..<n {
            let offset = try read(UInt64.self), count = try read(UInt64.self)
            let length = Int(try read(UInt8.self))
            guard at + length <= raw.count else { throw bad("truncated") }
            let form = String(decoding: UnsafeRawBufferPointer(rebasing: raw[at..<(at + length)]), as: UTF8.self)
            at += length
            guard offset % 4 == 0, count < UInt64(Int.max / 4), offset <= UInt64(weightBytes), count * 4 <= UInt64(weightBytes) - offset else {
                throw bad("weights #\(i) (\(count) values at byte \(offset)) lie outside the \(weightBytes)-byte \(weightsSection) section")
            }
            entries.append(Entry(offset: Int(offset), count: Int(count), form: form))
        }
        return entries
    }

    // MARK: The spec's weights

    /// Calls `body` on every weight blob the payload holds: convolution and inner-product
    /// weights, embedding tables, constants and the recurrent layers' weight and recursion
    /// matrices (the layers with large weights; biases and small vectors stay in the spec).
    static func forEachLargeWeight(_ spec: inout CoreML_Specification_Model, _ body: (inout CoreML_Specification_WeightParams) throws -> Void) rethrows {
        func lstm(_ w: inout CoreML_Specification_LSTMWeightParams) throws {
            try body(&w.inputGateWeightMatrix); try body(&w.forgetGateWeightMatrix)
            try body(&w.blockInputWeightMatrix); try body(&w.outputGateWeightMatrix)
            try body(&w.inputGateRecursionMatrix); try body(&w.forgetGateRecursionMatrix)
            try body(&w.blockInputRecursionMatrix); try body(&w.outputGateRecursionMatrix)
        }
        func walk(_ layers: inout [CoreML_Specification_NeuralNetworkLayer]) throws {
            for i in layers.indices {
                switch layers[i].layer {
                case .convolution(var p)?: try body(&p.weights); layers[i].layer = .convolution(p)
                case .innerProduct(var p)?: try body(&p.weights); layers[i].layer = .innerProduct(p)
                case .embedding(var p)?: try body(&p.weights); layers[i].layer = .embedding(p)
                case .loadConstant(var p)?: try body(&p.data); layers[i].layer = .loadConstant(p)
                case .simpleRecurrent(var p)?:
                    try body(&p.weightMatrix); try body(&p.recursionMatrix)
                    layers[i].layer = .simpleRecurrent(p)
                case .gru(var p)?:
                    try body(&p.updateGateWeightMatrix); try body(&p.resetGateWeightMatrix); try body(&p.outputGateWeightMatrix)
                    try body(&p.updateGateRecursionMatrix); try body(&p.resetGateRecursionMatrix); try body(&p.outputGateRecursionMatrix)
                    layers[i].layer = .gru(p)
                case .uniDirectionalLstm(var p)?: try lstm(&p.weightParams); layers[i].layer = .uniDirectionalLstm(p)
                case .biDirectionalLstm(var p)?:
                    for j in p.weightParams.indices { try lstm(&p.weightParams[j]) }
                    layers[i].layer = .biDirectionalLstm(p)
                default: break
                }
            }
        }
        switch spec.type {
        case .neuralNetwork(var nn)?: try walk(&nn.layers); spec.type = .neuralNetwork(nn)
        case .neuralNetworkClassifier(var nn)?: try walk(&nn.layers); spec.type = .neuralNetworkClassifier(nn)
        case .neuralNetworkRegressor(var nn)?: try walk(&nn.layers); spec.type = .neuralNetworkRegressor(nn)
        default: break
        }
    }
}

extension NeuralNetworkKind: MLPrecompilingModelKind {
    static func precompile(_ spec: CoreML_Specification_Model, context: MLCompileContext) throws -> MLPrecompiledModel {
        var stored = spec
        var originals: [CoreML_Specification_WeightParams] = []
        NNPrecompiledWeights.forEachLargeWeight(&stored) { w in
            guard !NNWeights.isEmpty(w) else { return }
            originals.append(w)
            w = NNPrecompiledWeights.referenceParams(originals.count - 1)
        }
        let recorder = NNPrecompiledWeights(recording: originals)
        _ = try NNPrecompiledWeights.$current.withValue(recorder) { try NNCompiledNetwork(spec: stored, context: context) }
        // A reference no layer read goes back to its original (nothing in the payload for it).
        NNPrecompiledWeights.forEachLargeWeight(&stored) { w in
            if let i = NNPrecompiledWeights.reference(w), recorder.recorded[i] == nil { w = originals[i] }
        }
        return MLPrecompiledModel(specification: stored, sections: recorder.sections())
    }

    static func compile(_ spec: CoreML_Specification_Model, payload: MLCompiledPayload, context: MLCompileContext) throws -> any MLCompiledModel {
        guard let index = payload.section(NNPrecompiledWeights.indexSection),
              let weights = payload.section(NNPrecompiledWeights.weightsSection) else {
            return try compile(spec, context: context)
        }
        let store = try NNPrecompiledWeights(payload: payload, index: index, weights: weights)
        if let algorithms = payload.section(NNPrecompiledWeights.algorithmsSection) { store.readAlgorithms(algorithms) }
        return try NNPrecompiledWeights.$current.withValue(store) { try NNCompiledNetwork(spec: spec, context: context) }
    }
}
