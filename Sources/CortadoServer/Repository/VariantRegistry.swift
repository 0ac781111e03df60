import CortadoCore
import CortadoGRPC
import CortadoSpec
import Foundation

/// Named variants of loaded models, made by `cortado.v1.Predictor` Update and chosen per
/// prediction (`PredictRequest.variant`): per-user models over one shared base.
///
/// What a variant holds: its trained spec, which shares every untouched part with its base's
/// spec (protobuf values copy on write: an update rewrites the updatable layers and nothing
/// else), and the base model it was trained from. Its compiled form loads on first use,
/// through `MLModel.variant(specification:)`, which reuses the base's compiled layers where
/// the model kind can (neural networks: every layer the update did not change); at most
/// `maxLoaded` compiled forms stay in memory, the least recently used are dropped beyond
/// that and compiled again when asked for. Variants live in memory only: they do not
/// survive a restart. A variant keeps the base version it was trained from even when the
/// model is reloaded or updated to a new version.
public final class VariantRegistry: @unchecked Sendable {
    final class Record: @unchecked Sendable {
        let model: String
        let variant: String
        /// The model version the variant descends from, and that model (whose compiled
        /// parts the variant shares).
        let baseVersion: String
        let base: MLModel
        let specification: CoreML_Specification_Model
        let updates: Int
        var loaded: MLModel?
        var lastUse: UInt64 = 0

        init(model: String, variant: String, baseVersion: String, base: MLModel, specification: CoreML_Specification_Model, updates: Int) {
            self.model = model; self.variant = variant; self.baseVersion = baseVersion; self.base = base
            self.specification = specification; self.updates = updates
        }
    }

    public struct Status: Sendable {
        public var model: String
        public var variant: String
        public var baseVersion: String
        public var loaded: Bool
        public var updates: Int
    }

    /// Compiled variants kept in memory at once (`--max-variants`).
    public let maxLoaded: Int
    private let lock = NSLock()
    private var records: [String: [String: Record]] = [:]
    private var loadedCount = 0
    private var clock: UInt64 = 0

    public init(maxLoaded: Int = 1000) { self.maxLoaded = max(1, maxLoaded) }

    /// A variant name: 1 to 128 of `A-Z a-z 0-9 . _ -`.
    static func nameProblem(_ name: String) -> String? {
        let allowed = name.utf8.allSatisfy { c in
            (c >= 48 && c <= 57) || (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || c == 46 || c == 95 || c == 45
        }
        guard !name.isEmpty, name.utf8.count <= 128, allowed, name != ".", name != ".." else {
            return "a variant name is 1 to 128 of A-Z a-z 0-9 . _ - (got '\(name)')"
        }
        return nil
    }

    func record(_ model: String, _ variant: String) -> Record? {
        lock.withLock { records[model]?[variant] }
    }

    /// The compiled variant, loaded (and the least recently used beyond the bound dropped)
    /// when it is not in memory. NOT_FOUND when the model has no such variant.
    public func model(_ model: String, variant: String) throws(GRPCStatus) -> (model: MLModel, baseVersion: String) {
        let found = lock.withLock { () -> (Record, MLModel?)? in
            guard let record = records[model]?[variant] else { return nil }
            clock += 1
            record.lastUse = clock
            return (record, record.loaded)
        }
        guard let (record, loaded) = found else {
            let known = lock.withLock { records[model].map { $0.count } ?? 0 }
            throw GRPCStatus(.notFound, "model '\(model)' has no variant '\(variant)' (\(known) variants; make one with Update)")
        }
        if let loaded { return (loaded, record.baseVersion) }
        let compiled: MLModel
        do {
            compiled = try record.base.variant(specification: record.specification, name: model)
        } catch {
            throw GRPCStatus(.internal, "variant '\(variant)' of model '\(model)' failed to load: \(error)")
        }
        lock.withLock {
            // Another call may have loaded it meanwhile, or it may have been replaced.
            guard records[model]?[variant] === record else { return }
            if record.loaded == nil {
                record.loaded = compiled
                loadedCount += 1
                evict(keeping: record)
            }
        }
        return (record.loaded ?? compiled, record.baseVersion)
    }

    /// Adds or replaces a variant, with its compiled form already made.
    func put(model: String, variant: String, baseVersion: String, base: MLModel, specification: CoreML_Specification_Model,
             compiled: MLModel) {
        lock.withLock {
            let updates = (records[model]?[variant]?.updates ?? 0) + 1
            let record = Record(model: model, variant: variant, baseVersion: baseVersion, base: base,
                                specification: specification, updates: updates)
            if records[model]?[variant]?.loaded != nil { loadedCount -= 1 }
            clock += 1
            record.lastUse = clock
            record.loaded = compiled
            loadedCount += 1
            records[model, default: [:]][variant] = record
            evict(keeping: record)
        }
    }

    /// Forgets a variant; NOT_FOUND when there is none.
    public func delete(model: String, variant: String) throws(GRPCStatus) {
        lock.lock(); defer { lock.unlock() }
        guard let record = records[model]?.removeValue(forKey: variant) else {
            throw GRPCStatus(.notFound, "model '\(model)' has no variant '\(variant)'")
        }
        if record.loaded != nil { loadedCount -= 1 }
        if records[model]?.isEmpty == true { records[model] = nil }
    }

    /// Every variant of `model` (empty: of every model), by model then name.
    public func list(model: String = "") -> [Status] {
        lock.withLock {
            let chosen = model.isEmpty ? Array(records.values) : [records[model] ?? [:]]
            return chosen.flatMap(\.values).map {
                Status(model: $0.model, variant: $0.variant, baseVersion: $0.baseVersion, loaded: $0.loaded != nil, updates: $0.updates)
            }.sorted { ($0.model, $0.variant) < ($1.model, $1.variant) }
        }
    }

    /// Variants whose compiled form is in memory.
    public var loaded: Int { lock.withLock { loadedCount } }

    /// Drops the least recently used compiled forms beyond the bound (under the lock). A
    /// scan of the records, run only when one was loaded: a prediction of a loaded variant
    /// costs a counter.
    private func evict(keeping kept: Record) {
        while loadedCount > maxLoaded {
            var oldest: Record?
            for byName in records.values {
                for record in byName.values where record.loaded != nil && record !== kept {
                    if oldest == nil || record.lastUse < oldest!.lastUse { oldest = record }
                }
            }
            guard let oldest else { return }
            oldest.loaded = nil
            loadedCount -= 1
        }
    }
}
