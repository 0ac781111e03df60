import CortadoCore
import CortadoSpec
import Foundation

/// Named variants of loaded models, made by `cortado.v1.Predictor` Update and chosen per
/// prediction (`PredictRequest.variant`): per-user models over one shared base.
///
/// A variant made by Update is stored as a head (`MLVariantHead` in a `VariantStore`: for a
/// network, the layers the update changed, and the base version), so it survives a restart.
/// The registry learns stored variants by listing the store when a model loads, reading no
/// file: 10,000 stored variants cost 10,000 small records. A variant's compiled form loads on
/// first use (a stored one: its head is read and merged with its base, which must be the
/// version it descends from), through `MLModel.variant(specification:)`, which reuses the
/// base's compiled layers where the kind can. At most `maxLoaded` variants stay compiled;
/// beyond that the least recently used are dropped, and a stored one drops its spec and its
/// base too (the file holds them), so memory stays bounded whatever the number stored.
/// A variant the store could not take (a read-only store) lives in memory only: its spec
/// stays, and it is gone after a restart. A loaded variant keeps the base it was trained
/// from even when the model is reloaded or updated to a new version.
public final class VariantRegistry: @unchecked Sendable {
    /// One variant; its fields change under the registry's lock only.
    final class Record: @unchecked Sendable {
        let model: String
        let variant: String
        /// The model version the variant descends from; empty for a stored variant whose head
        /// was not read yet.
        var baseVersion: String
        var updates: Int
        /// A head file holds it (so its spec and base can be dropped and read again).
        var stored: Bool
        /// The base and the spec, kept only for a variant the store does not hold.
        var base: MLModel?
        var specification: CoreML_Specification_Model?
        var loaded: MLModel?
        /// The base of the compiled form (which shares its layers), while loaded.
        var loadedBase: MLModel?
        var lastUse: UInt64 = 0

        init(model: String, variant: String, baseVersion: String, updates: Int, stored: Bool) {
            self.model = model; self.variant = variant; self.baseVersion = baseVersion; self.updates = updates; self.stored = stored
        }
    }

    public struct Status: Sendable {
        public var model: String
        public var variant: String
        public var baseVersion: String
        public var loaded: Bool
        public var stored: Bool
        public var updates: Int
    }

    /// A variant ready to predict with, and what it descends from.
    struct Resolved {
        var model: MLModel
        var base: MLModel
        var baseVersion: String
        var updates: Int
    }

    /// Compiled variants kept in memory at once (`--max-variants`).
    public let maxLoaded: Int
    /// Where heads are kept (nil: nowhere, variants live in memory only).
    public let store: VariantStore?
    /// The served model a stored head names as its base: (model, version), or a status.
    var baseLookup: (@Sendable (String) throws(ServeStatus) -> (MLModel, String))?
    private let lock = NSLock()
    private var records: [String: [String: Record]] = [:]
    /// The records with a compiled form, by identity: eviction scans these, not every record.
    private var loadedRecords: [ObjectIdentifier: Record] = [:]
    private var clock: UInt64 = 0

    public init(maxLoaded: Int = 1000, store: VariantStore? = nil) {
        self.maxLoaded = max(1, maxLoaded)
        self.store = store
    }

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

    /// Learns the variants stored for `model` (a listing, no file is read); returns how many
    /// were new. Known variants stay as they are.
    @discardableResult
    public func learnStored(model: String) -> Int {
        guard let store else { return 0 }
        let names = store.names(model: model)
        return lock.withLock {
            var added = 0
            for name in names where records[model]?[name] == nil {
                records[model, default: [:]][name] = Record(model: model, variant: name, baseVersion: "", updates: 0, stored: true)
                added += 1
            }
            return added
        }
    }

    /// Whether `model` has a variant of that name (in memory, or stored).
    func contains(_ model: String, _ variant: String) -> Bool {
        if lock.withLock({ records[model]?[variant] != nil }) { return true }
        return store?.exists(model: model, variant: variant) ?? false
    }

    /// The compiled variant, loaded (and the least recently used beyond the bound dropped)
    /// when it is not in memory. NOT_FOUND when the model has no such variant;
    /// FAILED_PRECONDITION when its base version is not the one loaded; DATA_LOSS when its
    /// head file is unreadable or does not fit its base.
    public func model(_ model: String, variant: String) throws(ServeStatus) -> (model: MLModel, baseVersion: String) {
        let resolved = try resolve(model, variant)
        return (resolved.model, resolved.baseVersion)
    }

    func resolve(_ model: String, _ variant: String) throws(ServeStatus) -> Resolved {
        var record = lock.withLock { touch(model, variant) }
        if record == nil, let store, store.exists(model: model, variant: variant) {
            // Stored after the last listing (another process wrote it): learn it now.
            learnStored(model: model)
            record = lock.withLock { touch(model, variant) }
        }
        guard let record else {
            let known = lock.withLock { records[model].map { $0.count } ?? 0 }
            throw ServeStatus(.notFound, "model '\(model)' has no variant '\(variant)' (\(known) variants; make one with Update)")
        }
        let state = lock.withLock { (record.loaded, record.loadedBase, record.baseVersion, record.updates, record.base, record.specification, record.stored) }
        if let loaded = state.0, let base = state.1 {
            return Resolved(model: loaded, base: base, baseVersion: state.2, updates: state.3)
        }
        let made: Resolved
        if let base = state.4, let spec = state.5 {
            do {
                made = Resolved(model: try base.variant(specification: spec, name: model), base: base, baseVersion: state.2, updates: state.3)
            } catch {
                throw ServeStatus(.internal, "variant '\(variant)' of model '\(model)' failed to load: \(error)")
            }
        } else if state.6, let store {
            made = try loadStored(model, variant, store: store)
        } else {
            throw ServeStatus(.internal, "variant '\(variant)' of model '\(model)' has neither a spec nor a head file")
        }
        return lock.withLock { () -> Resolved in
            // Another call may have loaded it meanwhile, or it may have been replaced or deleted.
            guard records[model]?[variant] === record else { return made }
            record.baseVersion = made.baseVersion
            record.updates = made.updates
            if let loaded = record.loaded, let base = record.loadedBase {
                return Resolved(model: loaded, base: base, baseVersion: record.baseVersion, updates: record.updates)
            }
            record.loaded = made.model
            record.loadedBase = made.base
            loadedRecords[ObjectIdentifier(record)] = record
            evict(keeping: record)
            return made
        }
    }

    /// Reads a stored head, checks its base is the version loaded, merges and compiles.
    private func loadStored(_ model: String, _ variant: String, store: VariantStore) throws(ServeStatus) -> Resolved {
        let path = store.url(model: model, variant: variant).path
        let data: Data
        do {
            data = try store.read(model: model, variant: variant)
        } catch {
            if !store.exists(model: model, variant: variant) {
                lock.withLock { if records[model]?[variant]?.stored == true { forget(model, variant) } }
                throw ServeStatus(.notFound, "model '\(model)' has no variant '\(variant)' (its head file \(path) is gone)")
            }
            throw ServeStatus(.dataLoss, "variant '\(variant)' of model '\(model)': cannot read its head file \(path): \(error)")
        }
        let head: MLVariantHead
        do {
            head = try MLVariantHead(serializedBytes: data)
        } catch {
            throw ServeStatus(.dataLoss, "variant '\(variant)' of model '\(model)': the head file \(path) is corrupt: \(error.message)")
        }
        guard let baseLookup else { throw ServeStatus(.internal, "the variant registry has no repository to find bases in") }
        let base: MLModel, version: String
        do {
            (base, version) = try baseLookup(model)
        } catch {
            throw ServeStatus(.failedPrecondition, "variant '\(variant)' of model '\(model)' descends from version \(head.baseVersion), which is not loaded (\(error.message)); head file \(path)")
        }
        guard version == head.baseVersion else {
            throw ServeStatus(.failedPrecondition, "variant '\(variant)' of model '\(model)' descends from version \(head.baseVersion), but version \(version) is loaded; head file \(path)")
        }
        let compiled: MLModel
        do {
            let spec = try base.variantSpecification(head: head.specification)
            compiled = try base.variant(specification: spec, name: model)
        } catch {
            throw ServeStatus(.dataLoss, "variant '\(variant)' of model '\(model)': the head file \(path) does not fit version \(version) of the model: \(error)")
        }
        return Resolved(model: compiled, base: base, baseVersion: head.baseVersion, updates: head.updates)
    }

    /// Adds or replaces a variant, with its compiled form already made. `stored`: a head file
    /// now holds it (else its spec and base stay in memory).
    func put(model: String, variant: String, baseVersion: String, base: MLModel, specification: CoreML_Specification_Model,
             compiled: MLModel, updates: Int, stored: Bool) {
        lock.withLock {
            if let old = records[model]?[variant] { loadedRecords[ObjectIdentifier(old)] = nil }
            let record = Record(model: model, variant: variant, baseVersion: baseVersion, updates: updates, stored: stored)
            if !stored {
                record.base = base
                record.specification = specification
            }
            clock += 1
            record.lastUse = clock
            record.loaded = compiled
            record.loadedBase = base
            records[model, default: [:]][variant] = record
            loadedRecords[ObjectIdentifier(record)] = record
            evict(keeping: record)
        }
    }

    /// Writes a variant's head (what differs from `base`, as its kind can say) to the store;
    /// nil when it is stored, else why it is not.
    func storeHead(model: String, variant: String, base: MLModel, baseVersion: String, specification: CoreML_Specification_Model,
                   updates: Int) -> String? {
        guard let store else { return "no variant store (the server has no repository folder and no --variant-store)" }
        let head = MLVariantHead(specification: base.variantHead(of: specification), baseVersion: baseVersion, updates: updates)
        do {
            try store.write(try head.serializedData(), model: model, variant: variant)
            return nil
        } catch {
            return "\(error)"
        }
    }

    /// Forgets a variant and removes its head file; NOT_FOUND when there is neither. A head
    /// file that cannot be removed (a read-only store) fails the call and the variant stays.
    public func delete(model: String, variant: String) throws(ServeStatus) {
        let known = lock.withLock { records[model]?[variant] != nil }
        var removed = false
        if let store {
            do {
                removed = try store.remove(model: model, variant: variant)
            } catch {
                throw ServeStatus(.failedPrecondition, "variant '\(variant)' of model '\(model)' was not deleted: \(error.message)")
            }
        }
        lock.withLock { forget(model, variant) }
        guard known || removed else { throw ServeStatus(.notFound, "model '\(model)' has no variant '\(variant)'") }
    }

    /// Every variant of `model` (empty: of every model), by model then name.
    public func list(model: String = "") -> [Status] {
        lock.withLock {
            let chosen = model.isEmpty ? Array(records.values) : [records[model] ?? [:]]
            return chosen.flatMap(\.values).map {
                Status(model: $0.model, variant: $0.variant, baseVersion: $0.baseVersion, loaded: $0.loaded != nil,
                       stored: $0.stored, updates: $0.updates)
            }.sorted { ($0.model, $0.variant) < ($1.model, $1.variant) }
        }
    }

    /// Variants whose compiled form is in memory.
    public var loaded: Int { lock.withLock { loadedRecords.count } }

    /// The record, marked as just used (under the lock).
    private func touch(_ model: String, _ variant: String) -> Record? {
        guard let record = records[model]?[variant] else { return nil }
        clock += 1
        record.lastUse = clock
        return record
    }

    /// Drops a record (under the lock).
    private func forget(_ model: String, _ variant: String) {
        guard let record = records[model]?.removeValue(forKey: variant) else { return }
        loadedRecords[ObjectIdentifier(record)] = nil
        if records[model]?.isEmpty == true { records[model] = nil }
    }

    /// Drops the least recently used compiled forms beyond the bound (under the lock); a
    /// stored variant drops its base too. A scan of the loaded records, run only when one was
    /// loaded: a prediction of a loaded variant costs a counter.
    private func evict(keeping kept: Record) {
        while loadedRecords.count > maxLoaded {
            var oldest: Record?
            for record in loadedRecords.values where record !== kept {
                if oldest == nil || record.lastUse < oldest!.lastUse { oldest = record }
            }
            guard let oldest else { return }
            oldest.loaded = nil
            oldest.loadedBase = nil
            loadedRecords[ObjectIdentifier(oldest)] = nil
        }
    }
}
