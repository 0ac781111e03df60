import Foundation

/// When and how long each part of a prediction ran, for a trace (`cortado serve
/// --trace-file`): a pipeline records each of its models, and with `layers` on, kinds that time
/// their layers (neural networks, ML Programs) record each layer too. Times are `DispatchTime`
/// nanoseconds. Set it in `MLPredictionOptions.computeSpans`; one prediction (or batch) at a
/// time writes it, under a lock, and the caller reads `spans` afterwards.
public final class MLComputeSpans: @unchecked Sendable {
    public struct Span: Sendable {
        public let name: String
        /// "model" (a pipeline's stage) or the layer's type.
        public let kind: String
        public let start: UInt64
        public let end: UInt64
    }

    /// Whether layers are recorded too (through `MLPredictionOptions.layerTimes`, which
    /// `layerTimes` makes).
    public let layers: Bool
    private let lock = NSLock()
    private var recorded: [Span] = []

    public init(layers: Bool = false) { self.layers = layers }

    public func add(_ name: String, kind: String, start: UInt64, end: UInt64) {
        lock.withLock { recorded.append(Span(name: name, kind: kind, start: start, end: end)) }
    }

    public var spans: [Span] { lock.withLock { recorded } }

    /// Layer times that also record each layer here, ending when it is added.
    public func layerTimes() -> MLLayerTimes {
        let times = MLLayerTimes()
        times.onLayer = { [weak self] name, type, nanoseconds in
            let end = DispatchTime.now().uptimeNanoseconds
            self?.add(name, kind: type, start: end - Swift.min(end, nanoseconds), end: end)
        }
        return times
    }
}
