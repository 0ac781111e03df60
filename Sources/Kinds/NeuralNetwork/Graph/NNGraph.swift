import CortadoCore
import CortadoSpec

/// The layer graph of one network: layers in an order that runs every producer before its
/// consumers, checked at load for unknown layer types, dangling inputs, blobs produced twice
/// and cycles (each message names the layer).
///
/// Only `copy` may write a blob that already holds a value (the format allows it for that
/// layer alone). The value it writes becomes a blob of its own, `name#k`: layers listed before
/// the copy read the old blob, layers after it and the model's outputs the new one, so the
/// sort, the buffer planning and the lifetimes see distinct blobs as everywhere else.
final class NNGraph: @unchecked Sendable {
    struct Node {
        let name: String
        /// The layer's `oneof` case name (e.g. "convolution").
        let type: String
        var layer: any NNLayer
        var inputs: [String]
        var outputs: [String]
        /// Layers folded into this one (batch norm, activation after a convolution), by name.
        var fused: [String] = []
        /// The spec names of the layers folded into this one, in the order they were folded.
        var fusedLayers: [String] = []
    }

    private(set) var nodes: [Node]
    /// The blobs the graph reads from outside: the model inputs, or for a nested network the
    /// blobs of the networks around it that it reads.
    let inputs: [String]
    /// The blob holding each name's last value: the name itself, or `name#k` when a loop or
    /// branch (or a nested network's `copy`) wrote a new value of it.
    let finalNames: [String: String]
    /// Names this graph writes (for a nested network: what it hands back), in order.
    let written: [String]

    /// The network of a model. Layers may come in any order, unless it holds control flow
    /// (then they run in file order, as the values of loop state depend on it).
    init(layers: [CoreML_Specification_NeuralNetworkLayer], inputs: [String]) throws {
        if layers.contains(where: { Self.typeName($0).map(NNControlFlowLayer.types.contains) ?? false }) {
            (nodes, self.inputs, finalNames, written) = try Self.sequential(layers, modelInputs: inputs, outer: [], what: nil)
            return
        }
        self.inputs = inputs
        var built: [Node] = []
        var producer: [String: String] = [:]
        for name in inputs { producer[name] = "the model input" }
        // The blob holding each name's value at this point of the file (after a copy rewrote it).
        var current: [String: String] = [:]
        var rewrites = 0
        for (index, spec) in layers.enumerated() {
            let name = spec.name.isEmpty ? "#\(index)" : spec.name
            guard let kind = spec.layer, let type = Mirror(reflecting: kind).children.first?.label else {
                throw MLModelError(.invalidModel, "layer '\(name)' has no layer type")
            }
            guard let builder = NNLayerRegistry.builder(for: type) else {
                throw MLModelError(.unsupported, "layer '\(name)' is of type '\(type)', which Cortado does not run yet")
            }
            guard !spec.output.isEmpty else { throw MLModelError(.invalidModel, "layer '\(name)' (\(type)) has no outputs") }
            // Inputs first: a copy reading the name it rewrites reads the old value.
            let ins = spec.input.map { current[$0] ?? $0 }
            var outs: [String] = []
            for out in spec.output {
                guard let other = producer[out] else {
                    producer[out] = name
                    outs.append(out)
                    continue
                }
                guard type == "copy" else {
                    throw MLModelError(.invalidModel, "layer '\(name)' (\(type)) writes blob '\(out)', which \(other == "the model input" ? "is a model input" : "layer '\(other)' also writes")")
                }
                rewrites += 1
                let blob = "\(out)#\(rewrites)"
                producer[blob] = name
                current[out] = blob
                outs.append(blob)
            }
            let layer: any NNLayer
            do {
                layer = try NNWeightAudit.building(name) { try builder(spec) }
            } catch let e as NNLayerError {
                throw MLModelError(.invalidModel, "layer '\(name)' (\(type)): \(e.message)")
            }
            built.append(Node(name: name, type: type, layer: layer, inputs: ins, outputs: outs))
        }
        for node in built {
            for input in node.inputs where producer[input] == nil {
                throw MLModelError(.invalidModel, "layer '\(node.name)' (\(node.type)) reads blob '\(input)', which no layer writes and which is not a model input")
            }
        }
        nodes = try Self.sorted(built, inputs: Set(inputs))
        let outputs = built.flatMap(\.outputs)
        finalNames = Dictionary(uniqueKeysWithValues: (inputs + outputs).map { ($0, current[$0] ?? $0) })
        written = outputs
    }

    private init(nodes: [Node], inputs: [String], finalNames: [String: String], written: [String]) {
        self.nodes = nodes
        self.inputs = inputs
        self.finalNames = finalNames
        self.written = written
    }

    /// This graph with the layers named in `replaced` built again from their new specs (same
    /// type and blobs, other weights: an update's result) and what this graph folded into
    /// them folded again, in the same order; every other layer object is this graph's own,
    /// shared (layers are immutable once fused, and run concurrently already). Nil when
    /// it cannot share: control flow (nested graphs), or a replaced layer that was folded
    /// into another rather than being a node of its own.
    func replacing(_ replaced: [String: CoreML_Specification_NeuralNetworkLayer],
                   layers: [CoreML_Specification_NeuralNetworkLayer]) throws -> NNGraph? {
        guard !nodes.contains(where: { $0.layer is any NNControlLayer }) else { return nil }
        var remaining = replaced
        var nodes = self.nodes
        for i in nodes.indices {
            guard let spec = remaining.removeValue(forKey: nodes[i].name) else { continue }
            guard Self.typeName(spec) == nodes[i].type, let builder = NNLayerRegistry.builder(for: nodes[i].type) else { return nil }
            let layer: any NNLayer
            do { layer = try builder(spec) } catch let e as NNLayerError {
                throw MLModelError(.invalidModel, "layer '\(nodes[i].name)' (\(nodes[i].type)): \(e.message)")
            }
            for name in nodes[i].fusedLayers {
                guard let folded = layers.first(where: { $0.name == name }), let type = Self.typeName(folded),
                      let build = NNLayerRegistry.builder(for: type), let next = try? build(folded) else { return nil }
                if let producer = layer as? any NNEpilogueAccepting, let op = next.epilogue, producer.accept(op) { continue }
                if let producer = layer as? any NNResidualAccepting, (next as? any NNResidualAdd)?.addsTwoTensors == true,
                   producer.acceptResidual() { continue }
                if let producer = layer as? any NNPoolAccepting, producer.acceptPool(next) { continue }
                return nil
            }
            nodes[i].layer = layer
        }
        guard remaining.isEmpty else { return nil }
        return NNGraph(nodes: nodes, inputs: inputs, finalNames: finalNames, written: written)
    }

    /// A nested network (branch, loop body or condition) that may read the blobs named in
    /// `outer`; `what` names it in messages.
    init(layers: [CoreML_Specification_NeuralNetworkLayer], outer: Set<String>, what: String) throws {
        (nodes, inputs, finalNames, written) = try Self.sequential(layers, modelInputs: [], outer: outer, what: what)
    }

    static func typeName(_ spec: CoreML_Specification_NeuralNetworkLayer) -> String? {
        spec.layer.flatMap { Mirror(reflecting: $0).children.first?.label }
    }

    /// Layers in file order, each value a blob of its own: a layer that writes a name already
    /// holding a value (a control-flow layer, a copy, or any layer of a nested network writing a
    /// blob of the networks around it) writes a new blob `name#k`, and later readers read that one.
    private static func sequential(_ layers: [CoreML_Specification_NeuralNetworkLayer], modelInputs: [String], outer: Set<String>,
                                   what scope: String?) throws -> ([Node], [String], [String: String], [String]) {
        var current: [String: String] = [:]
        var writer: [String: String] = [:]
        for name in modelInputs { current[name] = name; writer[name] = "the model input" }
        var free: [String] = []
        var written: [String] = []
        var nodes: [Node] = []
        var version = 0
        let prefix = scope.map { "\($0): " } ?? ""
        func resolve(_ name: String, for layer: String, _ type: String) throws -> String {
            if let v = current[name] { return v }
            guard outer.contains(name) else {
                throw MLModelError(.invalidModel, "\(prefix)layer '\(layer)' (\(type)) reads blob '\(name)', which no earlier layer writes and which is not \(scope == nil ? "a model input" : "a blob of the networks around it")")
            }
            free.append(name)
            current[name] = name
            writer[name] = "the enclosing network"
            return name
        }
        func define(_ name: String, by layer: String, _ type: String, rewrite: Bool) throws -> String {
            let exists = current[name] != nil || outer.contains(name)
            if !written.contains(name) { written.append(name) }
            guard exists else { current[name] = name; writer[name] = layer; return name }
            let from = writer[name] ?? "the enclosing network"
            guard rewrite || from == "the enclosing network" || (current[name] == nil && outer.contains(name)) else {
                throw MLModelError(.invalidModel, "\(prefix)layer '\(layer)' (\(type)) writes blob '\(name)', which \(from == "the model input" ? "is a model input" : "layer '\(from)' also writes")")
            }
            version += 1
            let blob = "\(name)#\(scope ?? "")\(version)"
            current[name] = blob
            writer[name] = layer
            return blob
        }
        for (index, spec) in layers.enumerated() {
            let name = spec.name.isEmpty ? "#\(index)" : spec.name
            guard let type = typeName(spec) else { throw MLModelError(.invalidModel, "\(prefix)layer '\(name)' has no layer type") }
            let layer: any NNLayer
            let ins: [String], outs: [String]
            do {
                if NNControlFlowLayer.types.contains(type) {
                    let visible = outer.union(current.keys)
                    let control = try NNControlFlowLayer(spec, type: type, visible: visible, name: name)
                    ins = try control.reads.map { try resolve($0, for: name, type) }
                    outs = try control.writes.map { try define($0, by: name, type, rewrite: true) }
                    layer = control
                } else {
                    guard let builder = NNLayerRegistry.builder(for: type) else {
                        throw MLModelError(.unsupported, "\(prefix)layer '\(name)' is of type '\(type)', which Cortado does not run yet")
                    }
                    guard !spec.output.isEmpty else { throw MLModelError(.invalidModel, "\(prefix)layer '\(name)' (\(type)) has no outputs") }
                    layer = try NNWeightAudit.building(name) { try builder(spec) }
                    ins = try spec.input.map { try resolve($0, for: name, type) }
                    outs = try spec.output.map { try define($0, by: name, type, rewrite: type == "copy") }
                }
            } catch let e as NNLayerError {
                throw MLModelError(.invalidModel, "\(prefix)layer '\(name)' (\(type)): \(e.message)")
            }
            nodes.append(Node(name: name, type: type, layer: layer, inputs: ins, outputs: outs))
        }
        return (nodes, modelInputs + free, current, written)
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

    /// Folds element-wise layers (batch norm, bias, scale, activation), a residual add, and
    /// a pooling layer, into the layer before them when that layer can apply them while its
    /// output is still in cache and nothing else reads the intermediate blob.
    func fuseEpilogues(keeping protected: Set<String>) {
        var readers: [String: Int] = [:]
        for node in nodes { for input in node.inputs { readers[input, default: 0] += 1 } }
        var i = 0
        while i + 1 < nodes.count {
            let node = nodes[i], next = nodes[i + 1]
            guard node.outputs.count == 1, next.outputs.count == 1, !protected.contains(node.outputs[0]),
                  readers[node.outputs[0]] == 1 else {
                i += 1
                continue
            }
            // A two-tensor add of this output and another blob, which an earlier layer or the
            // network's input wrote (the nodes run in order, and this one writes only its output).
            let residual = next.inputs.count == 2 && next.inputs.contains(node.outputs[0]) && next.inputs[0] != next.inputs[1]
                ? next.inputs.first { $0 != node.outputs[0] } : nil
            guard next.inputs == node.outputs || residual != nil else {
                i += 1
                continue
            }
            let folded: Bool
            if let residual {
                if let producer = node.layer as? any NNResidualAccepting, (next.layer as? any NNResidualAdd)?.addsTwoTensors == true,
                   producer.acceptResidual() {
                    nodes[i].inputs.append(residual)
                    folded = true
                } else {
                    folded = false
                }
            } else if let producer = node.layer as? any NNEpilogueAccepting, let op = next.layer.epilogue {
                folded = producer.accept(op)
            } else if let producer = node.layer as? any NNPoolAccepting {
                folded = producer.acceptPool(next.layer)
            } else {
                folded = false
            }
            guard folded else {
                i += 1
                continue
            }
            nodes[i].outputs = next.outputs
            nodes[i].fused.append("\(next.name) (\(next.type))")
            nodes[i].fusedLayers.append(next.name)
            nodes.remove(at: i + 1)
        }
    }
}
