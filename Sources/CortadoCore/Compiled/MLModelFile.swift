import CortadoSpec
import Foundation

/// A model opened from a file or from bytes in memory, whatever its form: a Core ML
/// specification (`.mlmodel`, `.mlpackage`), Cortado's compiled container, or an encrypted
/// model holding either. The form is recognised by the first bytes, not by the file name.
public struct MLModelFile {
    public let name: String
    public let specification: CoreML_Specification_Model
    /// The form as stored.
    public let form: MLModelForm
    /// The form inside an encryption (`form` itself when not encrypted).
    public let innerForm: MLModelForm
    /// A compiled model's sections (nil for a plain specification).
    public let payload: MLCompiledPayload?
    /// Bytes as stored.
    public let byteCount: Int
    /// Files besides the spec (an `.mlpackage`'s weights), nil when the model has none.
    public var resources: MLModelResources? = nil

    /// Opens a file (a mapped read: a compiled model's weights are used in place). `key`
    /// decrypts an encrypted model; when nil, `CORTADO_MODEL_KEY` is used if set.
    public static func open(contentsOf url: URL, name: String? = nil, key: MLModelKey? = nil) throws -> MLModelFile {
        let name = name ?? Self.baseName(url)
        guard MLModelPackage.isPackage(url) else {
            return try open(bytes: MLModelBytes(mapping: url, name: name), name: name, key: key)
        }
        let package = try MLModelPackage(url: url, name: name)
        var opened = try open(bytes: MLModelBytes(mapping: package.specificationURL, name: name), name: name, key: key)
        if opened.resources == nil { opened.resources = MLModelResources(.folder(package.modelPath)) }
        return opened
    }

    /// Opens a model held in memory, in any form.
    public static func open(data: Data, name: String = "model", key: MLModelKey? = nil) throws -> MLModelFile {
        switch MLModelForm.recognise(data.prefix(8)) {
        case .specification:
            return MLModelFile(name: name, specification: try MLModelSpec.parse(data, name: name), form: .specification,
                               innerForm: .specification, payload: nil, byteCount: data.count)
        case .compiled, .encrypted:
            return try open(bytes: MLModelBytes(copying: data), name: name, key: key)
        }
    }

    static func open(bytes: MLModelBytes, name: String, key: MLModelKey?) throws -> MLModelFile {
        switch MLModelForm.recognise(bytes.prefix(8)) {
        case .specification:
            let spec = try MLModelSpec.parse(bytes.data(), name: name)
            return MLModelFile(name: name, specification: spec, form: .specification, innerForm: .specification, payload: nil, byteCount: bytes.count)
        case .compiled:
            let payload = try MLCompiledContainer.read(bytes, name: name)
            let spec = try MLModelSpec.parse(payload.data(MLCompiledContainer.specSection)!, name: name)
            return MLModelFile(name: name, specification: spec, form: .compiled, innerForm: .compiled, payload: payload, byteCount: bytes.count,
                               resources: MLModelResources.inPayload(payload))
        case .encrypted:
            let plain = try decrypt(bytes, name: name, key: key)
            let inner = MLModelBytes(copying: plain)
            guard MLModelForm.recognise(inner.prefix(8)) != .encrypted else {
                throw MLModelError(.invalidModel, model: name, "an encrypted model holds another encrypted model; only one layer of encryption is read")
            }
            let opened = try open(bytes: inner, name: name, key: nil)
            return MLModelFile(name: name, specification: opened.specification, form: .encrypted, innerForm: opened.form,
                               payload: opened.payload, byteCount: bytes.count, resources: opened.resources)
        }
    }

    static func decrypt(_ bytes: MLModelBytes, name: String, key: MLModelKey?) throws -> Data {
        guard let decryptor = MLModelEncryption.decryptor else {
            throw MLModelError(.unsupported, model: name, "the model is encrypted and this program has no decryptor (link CortadoEncryption and call CortadoEncryption.register())")
        }
        guard let key = try key ?? MLModelKey.fromEnvironment() else {
            throw MLModelError(.invalidModel, model: name, "the model is encrypted and no key was given (use --key-file FILE or set \(MLModelKey.environmentVariable))")
        }
        return try decryptor.decrypt(bytes.buffer, key: key, name: name)
    }

    /// A file's name without its extension ("model.cortado-enc" → "model").
    static func baseName(_ url: URL) -> String {
        url.deletingPathExtension().lastPathComponent
    }

    /// A readable description of the form, e.g. "encrypted model (a Cortado compiled model inside)".
    public var formDescription: String {
        var inner = innerForm.label
        // An `.mlpackage` is a specification with a folder of weight files beside it.
        if innerForm == .specification, case .folder? = resources?.source { inner = "Core ML package (.mlpackage: the specification and its weight files)" }
        if payload != nil { inner += ", format version \(MLCompiledContainer.formatVersion)" }
        return form == .encrypted ? "\(form.label) (a \(inner), inside)" : inner
    }
}
