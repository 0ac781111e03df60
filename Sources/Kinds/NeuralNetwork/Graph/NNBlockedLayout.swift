import CCortadoGemm
import Foundation

/// A layer that can read or write blobs in the channel-blocked layout (`cortado_blocked.h`:
/// `[images][ceil(C/16)][H][W][16]`), so a run of such layers passes blobs without a transpose.
protocol NNBlockedLayoutLayer: NNLayer {
    /// Whether input `index` could be read blocked (asked before the layer's own decision, to
    /// tell a writer whether a blocked output has a taker).
    func mayReadBlocked(_ index: Int, _ inputs: [NNShape]) -> Bool
    /// The layouts the layer runs with, given which inputs are blocked and whether a blocked
    /// output is wanted: the blocked inputs it reads blocked (the others are given a planar
    /// copy) and whether it writes output 0 blocked.
    func blockedLayout(_ inputs: [NNShape], blocked: [Bool], outputWanted: Bool) -> (inputs: [Bool], output: Bool)
}

/// A layer that can run together with the next one when the blob between them is blocked and
/// read by nothing else (a depthwise 3×3 and the 1×1 convolution after it): the intermediate
/// blob is then never written.
protocol NNBlockedFusing: NNLayer {
    /// The two layers as one (its inputs: this layer's, then the reader's after its first), or
    /// nil when they cannot run so.
    func fusedBlocked(with reader: any NNLayer, _ inputs: [NNShape], _ readerInputs: [NNShape]) -> (any NNLayer)?
}

/// Which blobs of a plan are channel-blocked, decided once per plan, layer by layer in order:
/// a layer writes its output blocked when it can, the output is not a model output, and some
/// reader can read it blocked; a reader that cannot reads a planar copy made by a reorder step
/// placed before it (`NNBlockedReorder`, one per blob). Then a blocked layer whose output only
/// the next layer reads, blocked, may run fused with it (`NNBlockedFusing`). `CORTADO_BLOCKED=0`
/// turns the layout off, `CORTADO_BLOCKED=unfused` keeps it without the fusions.
struct NNBlockedLayout {
    /// One step of the plan: a graph node, or a reorder.
    struct Item {
        let layer: any NNLayer
        let inputs: [String]
        let outputs: [String]
        let name: String
        let type: String
        let blockedInputs: [Bool]
        let blockedOutputs: [Bool]
    }

    let items: [Item]
    let blocked: Set<String>

    /// `CORTADO_BLOCKED`: `0`, `off` or `false` keeps every blob planar.
    static let enabled: Bool = {
        switch ProcessInfo.processInfo.environment["CORTADO_BLOCKED"]?.lowercased() {
        case "0"?, "off"?, "false"?, "no"?: return false
        default: return true
        }
    }()
    static let fuses = ProcessInfo.processInfo.environment["CORTADO_BLOCKED"]?.lowercased() != "unfused"

    /// The layout of `nodes` (a whole network), or nil when no blob is blocked.
    init?(nodes: ArraySlice<NNGraph.Node>, shapes: [String: NNShape], kept: Set<String>) {
        guard Self.enabled, cg_blocked_available() != 0 else { return nil }
        // Every read: (node, input index).
        var readers: [String: [(node: NNGraph.Node, input: Int)]] = [:]
        for node in nodes {
            for (k, name) in node.inputs.enumerated() { readers[name, default: []].append((node, k)) }
        }
        var blocked = Set<String>()
        var planar: [String: String] = [:] // a blocked blob's planar copy
        var items: [Item] = []
        for node in nodes {
            let ins = node.inputs.map { shapes[$0]! }
            let layer = node.layer as? any NNBlockedLayoutLayer
            let available = node.inputs.map { blocked.contains($0) }
            var wanted = false
            if let layer, node.outputs.count == 1, let out = node.outputs.first, !kept.contains(out), let shape = shapes[out],
               shape.rank <= 5 {
                wanted = readers[out, default: []].contains { read in
                    guard let reader = read.node.layer as? any NNBlockedLayoutLayer else { return false }
                    return reader.mayReadBlocked(read.input, read.node.inputs.map { shapes[$0]! })
                }
            }
            let decided = layer?.blockedLayout(ins, blocked: available, outputWanted: wanted)
                ?? (inputs: ins.map { _ in false }, output: false)
            var names = node.inputs
            var readsBlocked = [Bool](repeating: false, count: ins.count)
            for (k, name) in node.inputs.enumerated() where available[k] {
                if decided.inputs[k] {
                    readsBlocked[k] = true
                    continue
                }
                if let copy = planar[name] {
                    names[k] = copy
                    continue
                }
                let copy = name + "#planar"
                planar[name] = copy
                names[k] = copy
                items.append(Item(layer: NNBlockedReorder(), inputs: [name], outputs: [copy], name: name + " → planar",
                                  type: "reorder (blocked → planar)", blockedInputs: [true], blockedOutputs: [false]))
            }
            let writes = decided.output && wanted
            if writes { blocked.insert(node.outputs[0]) }
            items.append(Item(layer: node.layer, inputs: names, outputs: node.outputs, name: node.name, type: node.type,
                              blockedInputs: readsBlocked, blockedOutputs: node.outputs.map { _ in writes }))
        }
        guard !blocked.isEmpty else { return nil }
        if Self.fuses {
            var i = 0
            while i + 1 < items.count {
                let a = items[i], b = items[i + 1]
                if a.outputs.count == 1, a.blockedOutputs == [true], b.inputs.first == a.outputs[0], b.blockedInputs.first == true,
                   !kept.contains(a.outputs[0]), items.filter({ $0.inputs.contains(a.outputs[0]) }).count == 1,
                   !b.inputs.dropFirst().contains(a.outputs[0]), let first = a.layer as? any NNBlockedFusing,
                   let fused = first.fusedBlocked(with: b.layer, a.inputs.map { Self.shape($0, shapes) },
                                                  b.inputs.map { Self.shape($0, shapes) }) {
                    items[i] = Item(layer: fused, inputs: a.inputs + b.inputs.dropFirst(), outputs: b.outputs, name: "\(a.name) + \(b.name)",
                                    type: "\(a.type) + \(b.type)", blockedInputs: a.blockedInputs + b.blockedInputs.dropFirst(),
                                    blockedOutputs: b.blockedOutputs)
                    items.remove(at: i + 1)
                }
                i += 1
            }
        }
        self.items = items
        self.blocked = blocked
    }

    /// A blob's shape (a planar copy's is its original's).
    private static func shape(_ name: String, _ shapes: [String: NNShape]) -> NNShape {
        shapes[name] ?? shapes[String(name.dropLast("#planar".count))]!
    }

    /// Each blob's last reader (a position in `items`); kept outputs never die.
    func lastUse(keeping kept: Set<String>) -> [String: Int] {
        var last: [String: Int] = [:]
        for (position, item) in items.enumerated() {
            for name in item.inputs { last[name] = position }
        }
        for name in kept { last[name] = Int.max }
        return last
    }

    /// The type `cortado report --layers` shows for an item: which sides run blocked.
    static func type(_ base: String, note: String, item: Item) -> String {
        let inB = item.blockedInputs.contains(true), outB = item.blockedOutputs.contains(true)
        let layout = inB && outB ? "blocked" : inB ? "blocked in" : outB ? "blocked out" : ""
        let words = [note, layout].filter { !$0.isEmpty }
        return words.isEmpty || item.layer is NNBlockedReorder ? base : "\(base) (\(words.joined(separator: ", ")))"
    }
}

/// A blocked blob copied to the planar layout, for a reader that does not take the blocked one
/// (the edges of a run of blocked layers).
final class NNBlockedReorder: NNLayer, @unchecked Sendable {
    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] { inputs }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let s = inputs[0].shape, x = context.pointer(inputs[0]), y = context.pointer(outputs[0])
        let plane = s.hw, perImage = inputs[0].floats / Swift.max(1, s.images)
        let blocks = (s.c + 15) / 16
        for image in 0..<s.images {
            let xi = x + image * perImage, yi = y + image * s.chw
            context.parallelFor(blocks, costPerItem: 16 * plane) { range in
                cg_blocked_to_planar(xi, s.c, plane, range.lowerBound * 16, Swift.min(s.c, range.upperBound * 16), yi)
            }
        }
    }
}
