import CortadoSpec
import Foundation
import SwiftProtobuf

/// A variant as a store keeps it: the head of its spec over its base (`MLModel.variantHead`:
/// for a network, the layers an update changed), plus the base version it descends from and
/// how many updates made it. On disk it is one Core ML `Model` message whose
/// `description.metadata.userDefined` carries the two numbers under `baseVersionKey` and
/// `updatesKey`; it is not a loadable model on its own (a network's head holds no
/// description and only some layers), so a store names it `.head`, not `.mlmodel`.
public struct MLVariantHead: Sendable {
    public static let baseVersionKey = "cortado.variant.base-version"
    public static let updatesKey = "cortado.variant.updates"

    /// The kind's part: what `MLModel.variantSpecification(head:)` reads, without the keys
    /// above.
    public var specification: CoreML_Specification_Model
    /// The version of the model the variant was trained from (its base).
    public var baseVersion: String
    /// Updates that made the variant.
    public var updates: Int

    public init(specification: CoreML_Specification_Model, baseVersion: String, updates: Int) {
        self.specification = specification
        self.baseVersion = baseVersion
        self.updates = updates
    }

    /// Reads a stored head; `invalidModel` when the bytes are not a `Model` message or carry
    /// no base version.
    public init(serializedBytes bytes: Data) throws(MLModelError) {
        var spec: CoreML_Specification_Model
        do {
            spec = try CoreML_Specification_Model(serializedBytes: bytes)
        } catch {
            throw MLModelError(.invalidModel, "not a variant head (a Core ML Model message): \(error)")
        }
        var user = spec.description_p.metadata.userDefined
        guard let base = user.removeValue(forKey: Self.baseVersionKey), !base.isEmpty else {
            throw MLModelError(.invalidModel, "not a variant head: its metadata names no base version (\(Self.baseVersionKey))")
        }
        let updates = user.removeValue(forKey: Self.updatesKey).flatMap { Int($0) } ?? 1
        spec.description_p.metadata.userDefined = user
        self.init(specification: spec, baseVersion: base, updates: updates)
    }

    /// The stored form: the kind's part with the base version and update count in its
    /// metadata (deterministic, so one head always writes the same bytes).
    public func serializedData() throws -> Data {
        var spec = specification
        spec.description_p.metadata.userDefined[Self.baseVersionKey] = baseVersion
        spec.description_p.metadata.userDefined[Self.updatesKey] = String(updates)
        var options = BinaryEncodingOptions()
        options.useDeterministicOrdering = true
        return try spec.serializedData(options: options)
    }
}
