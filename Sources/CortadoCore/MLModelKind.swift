import CCortadoKindsHook
import CortadoSpec
import Foundation

/// A compiled, ready-to-run model of one kind: what a `MLModelKind` turns a spec into.
/// It receives inputs already validated against the model description.
public protocol MLCompiledModel: AnyObject, Sendable {
    /// Runs one prediction.
    func prediction(from input: MLFeatureProvider, options: MLPredictionOptions) throws -> MLFeatureProvider
    /// Runs a batch. The default runs the rows one by one.
    func predictions(from batch: MLBatchProvider, options: MLPredictionOptions) throws -> [MLFeatureProvider]
    /// True when `predictions(from:)` runs a batch as one computation (one pass along a
    /// batch axis, one matrix) rather than row by row: gathering requests into batches pays
    /// only then. The default is false.
    var runsBatchesAsOne: Bool { get }
    /// Class labels, for classifiers.
    var classLabels: MLClassLabels? { get }
    /// Lines describing the compiled form for `cortado inspect` (e.g. tree and node counts).
    var summary: [String] { get }
}

extension MLCompiledModel {
    public func predictions(from batch: MLBatchProvider, options: MLPredictionOptions) throws -> [MLFeatureProvider] {
        try (0..<batch.count).map { try prediction(from: batch.features(at: $0), options: options) }
    }
    public var classLabels: MLClassLabels? { nil }
    public var summary: [String] { [] }
    public var runsBatchesAsOne: Bool { false }
}

/// A model kind: turns the specs of one or more `Model.Type` cases into compiled models.
/// Each kind lives in its own module and registers itself with `MLModelKindRegistry`.
public protocol MLModelKind: SendableMetatype {
    /// The `Model.Type` cases this kind compiles, by their field names (e.g. "glmRegressor").
    static var specTypes: [String] { get }
    /// Compiles a spec. `context` gives the model's description and name, and compiles
    /// sub-models for kinds that contain others.
    static func compile(_ spec: CoreML_Specification_Model, context: MLCompileContext) throws -> any MLCompiledModel
    /// What of its format the kind runs, for `cortado inspect --layers-supported` (the
    /// neural-network layer types); nil (the default) when it has nothing to list.
    static var coverage: MLKindCoverage? { get }
}

extension MLModelKind {
    public static var coverage: MLKindCoverage? { nil }
}

/// The parts of a format a kind runs (e.g. every layer type of the neural-network `oneof`),
/// each with whether it runs and, when it does not, why.
public struct MLKindCoverage: Sendable {
    public struct Item: Sendable {
        public let name: String
        public let runs: Bool
        /// Why it does not run (empty when it does, or when it simply is not written yet).
        public let note: String
        public init(name: String, runs: Bool, note: String = "") {
            self.name = name; self.runs = runs; self.note = note
        }
    }

    /// What is listed, e.g. "neural-network layer types".
    public let title: String
    public let items: [Item]
    /// What the parts are called, which names the CLI flag listing them ("layers" for
    /// `--layers-supported`, "ops" for `--ops-supported`).
    public let partName: String
    public init(title: String, items: [Item], partName: String = "layers") {
        self.title = title; self.items = items; self.partName = partName
    }
    public var runCount: Int { items.filter(\.runs).count }
}

/// What a kind sees while compiling.
public struct MLCompileContext: Sendable {
    /// The model's name, for messages.
    public let modelName: String
    public let description: MLModelDescription
    public let configuration: MLModelConfiguration
    /// Nesting depth (pipelines inside pipelines), to stop runaway recursion.
    public let depth: Int
    /// Files besides the spec (an `.mlpackage`'s weight blobs), when the model has them.
    public var resources: MLModelResources? = nil

    public init(modelName: String, description: MLModelDescription, configuration: MLModelConfiguration, depth: Int,
                resources: MLModelResources? = nil) {
        self.modelName = modelName; self.description = description; self.configuration = configuration
        self.depth = depth; self.resources = resources
    }

    /// Compiles a nested model (a pipeline stage). Errors name the stage.
    public func compileSubmodel(_ spec: CoreML_Specification_Model, name: String) throws -> MLModel {
        guard depth < 32 else {
            throw MLModelError(.invalidModel, model: modelName, "models nest more than 32 deep")
        }
        return try MLModel(specification: spec, configuration: configuration, name: "\(modelName)/\(name)", depth: depth + 1,
                           resources: resources)
    }
}

/// The table of model kinds, keyed by `Model.Type` case name. The server, the CLI and
/// pipelines look kinds up here; nothing else names a kind.
public final class MLModelKindRegistry: @unchecked Sendable {
    public static let shared = MLModelKindRegistry()
    private let lock = NSLock()
    private var kinds: [String: any MLModelKind.Type] = [:]

    public init() {}

    /// Loading the built-in kinds: not begun, begun by the thread `builtinsLoader`, or done.
    private let builtinsCondition = NSCondition()
    private var builtinsLoader: pthread_t?
    private var builtinsDone = false

    /// Registers the built-in kinds into the shared registry, once, before its first use, when
    /// the program links a module that installs the hook (`import Cortado`); nothing otherwise.
    /// Runs before a registration too, so that a kind registered by the program replaces a
    /// built-in one rather than the other way round. The loader's own registrations pass
    /// through; other threads wait until it is done.
    private func loadBuiltinKinds() {
        guard self === Self.shared else { return }
        builtinsCondition.lock()
        if builtinsDone { builtinsCondition.unlock(); return }
        if let loader = builtinsLoader {
            if pthread_equal(loader, pthread_self()) == 0 {
                while !builtinsDone { builtinsCondition.wait() }
            }
            builtinsCondition.unlock()
            return
        }
        builtinsLoader = pthread_self()
        builtinsCondition.unlock()
        if let load = cortado_builtin_kinds_loader() { load() }
        builtinsCondition.lock()
        builtinsDone = true
        builtinsCondition.broadcast()
        builtinsCondition.unlock()
    }

    /// Registers a kind for every case it declares; a later registration replaces an earlier one.
    public func register(_ kind: any MLModelKind.Type) {
        loadBuiltinKinds()
        lock.lock(); defer { lock.unlock() }
        for name in kind.specTypes { kinds[name] = kind }
    }

    public func kind(for specType: String) -> (any MLModelKind.Type)? {
        loadBuiltinKinds()
        lock.lock(); defer { lock.unlock() }
        return kinds[specType]
    }

    /// The coverage lists of the registered kinds (each kind once).
    public var coverages: [MLKindCoverage] {
        loadBuiltinKinds()
        lock.lock(); defer { lock.unlock() }
        var seen = Set<ObjectIdentifier>()
        return kinds.keys.sorted().compactMap { name in
            let kind = kinds[name]!
            guard seen.insert(ObjectIdentifier(kind)).inserted else { return nil }
            return kind.coverage
        }
    }

    /// Case names with a registered kind, sorted.
    public var supportedSpecTypes: [String] {
        loadBuiltinKinds()
        lock.lock(); defer { lock.unlock() }
        return kinds.keys.sorted()
    }
}
