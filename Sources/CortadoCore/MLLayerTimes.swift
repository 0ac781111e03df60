import Foundation

/// Time spent per layer, for `cortado report --layers`: a kind that runs layers (neural
/// networks) adds each layer's wall time when `MLPredictionOptions.layerTimes` is set.
/// Collect from one prediction at a time (it is not locked).
public final class MLLayerTimes: @unchecked Sendable {
    public struct Entry: Sendable {
        public let name: String
        public let type: String
        public var nanoseconds: UInt64 = 0
        public var runs = 0
    }

    /// Layers in the order they first ran.
    public private(set) var entries: [Entry] = []
    private var index: [String: Int] = [:]

    /// Told of every layer as it is added (a trace's layer spans: `MLComputeSpans`).
    public var onLayer: ((_ name: String, _ type: String, _ nanoseconds: UInt64) -> Void)?

    public init() {}

    public func add(name: String, type: String, nanoseconds: UInt64) {
        onLayer?(name, type, nanoseconds)
        let i: Int
        if let found = index[name] { i = found } else {
            i = entries.count
            index[name] = i
            entries.append(Entry(name: name, type: type))
        }
        entries[i].nanoseconds += nanoseconds
        entries[i].runs += 1
    }

    public var totalNanoseconds: UInt64 { entries.reduce(0) { $0 + $1.nanoseconds } }
}
