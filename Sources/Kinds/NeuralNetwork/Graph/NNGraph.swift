import CortadoCore
import CortadoSpec

/// The layer graph of one network: layers in an order that runs every producer before its
/// consumers, checked at load for unknown layer types, dangling inputs, blobs produced twice
/// and cycles (each message names the layer).
final class NNGraph: @unchecked Sendable {
    struct Node {
        let name: String
        /// The layer's `oneof` case name (e.g. "convolution").
        let type: String
        var layer: any NNLayer
        let inputs: [String]
        var outputs: [String]
        /// Layers folded into this one (batch norm, activation after a convolution), by name.
        var fused: [String] = []
    }

    private(set) var nodes: [Node]
    let inputs: [String]

    init(layers: [CoreML_Specification_NeuralNetworkLayer], inputs: [String]) throws {
        self.inputs = inputs
        var built: [Node] = []
        var producer: [String: String] = [:]
        for name in inputs { producer[name] = "the model input" }
        for (index, spec) in layers.enumerated() {
            let name = spec.name.isEmpty ? "#\(index)" : spec.name
            guard let kind = spec.layer, let type = Mirror(reflecting: kind).children.first?.label else {
                throw MLModelError(.invalidModel, "layer '\(name)' has no layer type")
            }
            guard let builder = NNLayerRegistry.builder(for: type) else {
                throw MLModelError(.unsupported, "layer '\(name)' is of type '\(type)', which Cortado does not run yet")
            }
            guard !spec.output.isEmpty else { throw MLModelError(.invalidModel, "layer '\(name)' (\(type)) has no outputs") }
            for out in spec.output {
                if let other = producer[out] {
                    throw MLModelError(.invalidModel, "layer '\(name)' (\(type)) writes blob '\(out)', which \(other == "the model input" ? "is a model input" : "layer '\(other)' also writes")")
                }
                producer[out] = name
            }
            let layer: any NNLayer
            do {
                layer = try builder(spec)
            } catch let e as NNLayerError {
                throw MLModelError(.invalidModel, "layer '\(name)' (\(type)): \(e.message)")
            }
            built.append(Node(name: name, type: type, layer: layer, inputs: spec.input, outputs: spec.output))
        }
        for node in built {
            for input in node.inputs where producer[input] == nil {
                throw MLModelError(.invalidModel, "layer '\(node.name)' (\(node.type)) reads blob '\(input)', which no layer writes and which is not a model input")
            }
        }
        nodes = try Self.sorted(built, inputs: Set(inputs))
    }

    /// Kahn's algorithm, keeping the file's order among ready layers.
    private static func sorted(_ nodes: [Node], inputs: Set<String>) throws -> [Node] {
        var available = inputs
        var done = [Bool](repeating: false, count: nodes.count)
        var order: [Node] = []
        var progress = true
        while progress {
            progress = false
            for (i, node) in nodes.enumerated() where !done[i] && node.inputs.allSatisfy(available.contains) {
                done[i] = true
                order.append(node)
                available.formUnion(node.outputs)
                progress = true
            }
        }
        if let stuck = nodes.indices.first(where: { !done[$0] }) {
            let node = nodes[stuck]
            let missing = node.inputs.filter { !available.contains($0) }
            throw MLModelError(.invalidModel, "layer '\(node.name)' (\(node.type)) is part of a cycle: it waits for \(missing.map { "'\($0)'" }.joined(separator: ", ")), which depends on its own output")
        }
        return order
    }

    /// Folds element-wise layers (batch norm, bias, scale, activation) into the layer before
    /// them when that layer can apply them while its output is still in cache and nothing else
    /// reads the intermediate blob.
    func fuseEpilogues(keeping protected: Set<String>) {
        var readers: [String: Int] = [:]
        for node in nodes { for input in node.inputs { readers[input, default: 0] += 1 } }
        var i = 0
        while i + 1 < nodes.count {
            let node = nodes[i], next = nodes[i + 1]
            guard let producer = node.layer as? any NNEpilogueAccepting,
                  node.outputs.count == 1, next.inputs == node.outputs, next.outputs.count == 1,
                  !protected.contains(node.outputs[0]), readers[node.outputs[0]] == 1,
                  let op = next.layer.epilogue, producer.accept(op) else {
                i += 1
                continue
            }
            nodes[i].outputs = next.outputs
            nodes[i].fused.append("\(next.name) (\(next.type))")
            nodes.remove(at: i + 1)
        }
    }
}
