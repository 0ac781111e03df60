import CortadoCore
import CortadoSpec

/// Variants of a network (an update's result served beside its base): the layers an update
/// changed are built again, every other layer object — with its decoded and packed weights —
/// is the base's. A variant that fine-tuned a 512×10 head over a 40 MB body costs the head,
/// in memory and, as a stored head (`variantHead`), on disk.
extension NNCompiledNetwork: MLVariantCompiling {
    /// Marks a head that holds only the changed layers (`userDefined` metadata of the head
    /// spec); a head without it is a whole spec.
    static let headFormKey = "cortado.variant.head"
    static let changedLayersForm = "changed-layers"

    func compileVariant(_ specification: CoreML_Specification_Model, base: CoreML_Specification_Model,
                        context: MLCompileContext) throws -> (any MLCompiledModel)? {
        guard let (layers, replaced) = Self.changedLayers(specification, base: base) else { return nil }
        guard let graph = try graph.replacing(replaced, layers: layers) else { return nil }
        return try NNCompiledNetwork(variantOf: self, graph: graph)
    }

    /// The layers that differ from the base's, in a spec of the same network type holding
    /// nothing else; the whole spec when the variant differs elsewhere too (its description,
    /// its update parameters, its layer list).
    func variantHead(of specification: CoreML_Specification_Model, base: CoreML_Specification_Model) -> CoreML_Specification_Model {
        guard let (layers, replaced) = Self.changedLayers(specification, base: base) else { return specification }
        var head = CoreML_Specification_Model()
        head.specificationVersion = specification.specificationVersion
        head.description_p.metadata.userDefined[Self.headFormKey] = Self.changedLayersForm
        // In the network's order, so a head always serializes the same way.
        Self.setLayers(&head, like: specification, layers.filter { replaced[$0.name] != nil })
        return head
    }

    /// The base's spec with the head's layers put in place of the base's layers of the same
    /// names. Each must exist in the base, be unique and read and write the same blobs.
    func variantSpecification(head: CoreML_Specification_Model, base: CoreML_Specification_Model) throws -> CoreML_Specification_Model {
        guard head.description_p.metadata.userDefined[Self.headFormKey] == Self.changedLayersForm else { return head }
        guard let changed = Self.layers(head), var layers = Self.layers(base), Self.sameNetworkType(head, base) else {
            throw MLModelError.invalidModel("the variant head is not a network of the base's type (neuralNetwork, classifier or regressor)")
        }
        var index: [String: Int] = [:]
        for (i, layer) in layers.enumerated() { index[layer.name] = i }
        var seen: Set<String> = []
        for layer in changed {
            guard let i = index[layer.name] else {
                throw MLModelError.invalidModel("the variant head's layer '\(layer.name)' is not a layer of the base")
            }
            guard seen.insert(layer.name).inserted else {
                throw MLModelError.invalidModel("the variant head holds layer '\(layer.name)' twice")
            }
            guard layer.input == layers[i].input, layer.output == layers[i].output else {
                throw MLModelError.invalidModel("the variant head's layer '\(layer.name)' reads or writes other blobs than the base's")
            }
            layers[i] = layer
        }
        var spec = base
        Self.setLayers(&spec, like: base, layers)
        return spec
    }

    /// The variant's layers and, by name, those that differ from the base's; nil when the
    /// variant differs from the base in anything but layer values (then it shares nothing).
    private static func changedLayers(_ specification: CoreML_Specification_Model, base: CoreML_Specification_Model)
        -> ([CoreML_Specification_NeuralNetworkLayer], [String: CoreML_Specification_NeuralNetworkLayer])? {
        guard let layers = Self.layers(specification), let baseLayers = Self.layers(base),
              layers.count == baseLayers.count else { return nil }
        // Everything but the layers must be the base's (description, labels, update parameters).
        var rest = specification, baseRest = base
        Self.setLayers(&rest, like: specification, [])
        Self.setLayers(&baseRest, like: base, [])
        guard rest == baseRest else { return nil }
        var replaced: [String: CoreML_Specification_NeuralNetworkLayer] = [:]
        for (layer, old) in zip(layers, baseLayers) {
            guard layer.name == old.name, !layer.name.isEmpty else { return nil }
            // Unchanged layers share their storage with the base's, so this is a pointer test
            // for them (protobuf values are copied on write).
            if layer != old {
                guard replaced.updateValue(layer, forKey: layer.name) == nil else { return nil }
            }
        }
        return (layers, replaced)
    }

    private static func layers(_ spec: CoreML_Specification_Model) -> [CoreML_Specification_NeuralNetworkLayer]? {
        switch spec.type {
        case .neuralNetwork(let nn)?: return nn.layers
        case .neuralNetworkClassifier(let nn)?: return nn.layers
        case .neuralNetworkRegressor(let nn)?: return nn.layers
        default: return nil
        }
    }

    private static func sameNetworkType(_ a: CoreML_Specification_Model, _ b: CoreML_Specification_Model) -> Bool {
        switch (a.type, b.type) {
        case (.neuralNetwork?, .neuralNetwork?), (.neuralNetworkClassifier?, .neuralNetworkClassifier?),
             (.neuralNetworkRegressor?, .neuralNetworkRegressor?): return true
        default: return false
        }
    }

    /// Sets the layers of `spec`'s network, making it a network of `like`'s type when it is
    /// not one (a new head holds nothing else).
    private static func setLayers(_ spec: inout CoreML_Specification_Model, like: CoreML_Specification_Model,
                                  _ layers: [CoreML_Specification_NeuralNetworkLayer]) {
        switch (spec.type, like.type) {
        case (.neuralNetwork(var nn)?, _): nn.layers = layers; spec.neuralNetwork = nn
        case (.neuralNetworkClassifier(var nn)?, _): nn.layers = layers; spec.neuralNetworkClassifier = nn
        case (.neuralNetworkRegressor(var nn)?, _): nn.layers = layers; spec.neuralNetworkRegressor = nn
        case (_, .neuralNetwork?): spec.neuralNetwork.layers = layers
        case (_, .neuralNetworkClassifier?): spec.neuralNetworkClassifier.layers = layers
        case (_, .neuralNetworkRegressor?): spec.neuralNetworkRegressor.layers = layers
        default: break
        }
    }
}
