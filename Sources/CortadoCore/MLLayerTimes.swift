import Foundation

/// Time spent per layer, for `cortado report --layers`: a kind that runs layers (neural
/// networks) adds each layer's wall time when `MLPredictionOptions.layerTimes` is set. An entry
/// may sit inside another (`parent`: the layers of a network an ML Program step runs), its time
/// part of its parent's. Collect from one prediction at a time (it is not locked).
public final class MLLayerTimes: @unchecked Sendable {
    public struct Entry: Sendable {
        public let name: String
        public let type: String
        public var nanoseconds: UInt64 = 0
        public var runs = 0
        /// The entry whose time includes this one's, nil for a top-level entry.
        public var parent: String? = nil
    }

    /// Layers in the order they first ran.
    public private(set) var entries: [Entry] = []
    private var index: [String: Int] = [:]

    /// Told of every layer as it is added (a trace's layer spans: `MLComputeSpans`).
    public var onLayer: ((_ name: String, _ type: String, _ nanoseconds: UInt64) -> Void)?

    public init() {}

    public func add(name: String, type: String, nanoseconds: UInt64, parent: String? = nil) {
        onLayer?(name, type, nanoseconds)
        let key = parent.map { "\($0)\u{0}\(name)" } ?? name
        let i: Int
        if let found = index[key] { i = found } else {
            i = entries.count
            index[key] = i
            entries.append(Entry(name: name, type: type, parent: parent))
        }
        entries[i].nanoseconds += nanoseconds
        entries[i].runs += 1
    }

    /// The top-level entries' time (a nested entry's is part of its parent's).
    public var totalNanoseconds: UInt64 { entries.reduce(0) { $0 + ($1.parent == nil ? $1.nanoseconds : 0) } }
}
