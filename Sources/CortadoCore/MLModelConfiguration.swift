import Foundation

/// Which processors a model may use (CoreML.framework's `MLComputeUnits`). Cortado runs
/// on the CPU; the other values are accepted so code written for Apple platforms compiles.
public enum MLComputeUnits: Int, Sendable {
    case cpuOnly = 0
    case cpuAndGPU = 1
    case all = 2
    case cpuAndNeuralEngine = 3
}

/// Settings for loading a model (CoreML.framework's `MLModelConfiguration`).
public struct MLModelConfiguration: Sendable {
    public var computeUnits: MLComputeUnits = .all
    /// Threads a single prediction may use (kernels that parallelize); 0 means all cores.
    public var threadCount: Int = 0
    /// Base folder for resolving linked models; defaults to the model file's folder.
    public var modelDirectory: URL?
    /// Free-form parameters for custom layers and models (CoreML's `parameters`).
    public var parameters: [String: String] = [:]
    /// Folders searched for linked models after the model's own folder, and what a link's
    /// `$BUNDLE_MAIN` search path means here (the server puts its repository here).
    public var linkedModelSearchDirectories: [URL] = []
    /// Linked files being loaded around this load, outermost first: `MLModelCache` refuses
    /// a file that links itself, directly or through others.
    var linkChain: [String] = []
    /// The key for encrypted models; nil: `CORTADO_MODEL_KEY` when set.
    public var modelKey: MLModelKey?
    /// The function of a multi-function ML Program to run (nil: the model's default function).
    public var functionName: String?
    /// Hyperparameters an update uses instead of the model's defaults (CoreML.framework's
    /// `parameters` with `MLParameterKey` keys; Cortado keeps `parameters` for custom layers).
    /// Each must lie within the values the model allows.
    public var updateParameters: [MLParameterKey: MLParameterValue] = [:]

    public init() {}
}

/// Settings for one prediction (CoreML.framework's `MLPredictionOptions`).
public struct MLPredictionOptions: @unchecked Sendable {
    /// Caller-owned multi-arrays that outputs are written into, by output name.
    public var outputBackings: [String: MLMultiArray] = [:]
    /// When set, kinds that run layers add each layer's time here (`cortado report --layers`).
    public var layerTimes: MLLayerTimes?
    /// When set, a pipeline records when each of its models ran (a trace's spans).
    public var computeSpans: MLComputeSpans?

    public init() {}

    /// The backing for an output if one was given with the right element count,
    /// else a new array of `shape` and `dataType`.
    public func outputArray(named name: String, shape: [Int], dataType: MLMultiArrayDataType) throws -> MLMultiArray {
        if !outputBackings.isEmpty, let backing = outputBackings[name] {
            let count = shape.reduce(1, *)
            guard backing.count == count else {
                throw MLModelError.featureType(name, "output backing has \(backing.count) elements, the output needs \(count) (shape \(shape))")
            }
            return backing
        }
        return try MLMultiArray(shape: shape, dataType: dataType)
    }
}
