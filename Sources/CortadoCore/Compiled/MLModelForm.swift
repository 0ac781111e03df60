import Foundation

/// The forms a model file can take, recognised by the first bytes rather than the file name.
///
/// | form | first bytes | usual file name |
/// |---|---|---|
/// | a Core ML specification (protobuf) | no magic | `model.mlmodel` (or an `.mlpackage` folder) |
/// | Cortado's compiled container | `CORTADOC` | `model.cortado` |
/// | an encrypted model (either of the above inside) | `CORTADOE` | `model.cortado-enc` |
public enum MLModelForm: String, Sendable, CaseIterable {
    case specification
    case compiled
    case encrypted

    public static let compiledMagic: [UInt8] = Array("CORTADOC".utf8)
    public static let encryptedMagic: [UInt8] = Array("CORTADOE".utf8)

    /// The file names a model repository looks for in a version folder, in order of preference
    /// (a compiled model loads fastest).
    public static let repositoryFileNames = ["model.cortado", "model.cortado-enc", "model.mlmodel", "model.mlpackage"]
    /// File extensions of the three forms.
    public static let fileExtensions = ["cortado", "cortado-enc", "mlmodel", "mlpackage"]

    /// The form of bytes that start with `head` (at least 8 bytes read, when the file has them).
    public static func recognise<C: Collection>(_ head: C) -> MLModelForm where C.Element == UInt8 {
        let first = Array(head.prefix(8))
        if first == compiledMagic { return .compiled }
        if first == encryptedMagic { return .encrypted }
        return .specification
    }

    /// A short readable name for messages and `cortado inspect`.
    public var label: String {
        switch self {
        case .specification: return "Core ML specification (.mlmodel)"
        case .compiled: return "Cortado compiled model"
        case .encrypted: return "encrypted model"
        }
    }
}
