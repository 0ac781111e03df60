import CortadoCore
import CortadoSpec

/// Variants of a network (an update's result served beside its base): the layers an update
/// changed are built again, every other layer object — with its decoded and packed weights —
/// is the base's. A variant that fine-tuned a 512×10 head over a 40 MB body costs the head.
extension NNCompiledNetwork: MLVariantCompiling {
    func compileVariant(_ specification: CoreML_Specification_Model, base: CoreML_Specification_Model,
                        context: MLCompileContext) throws -> (any MLCompiledModel)? {
        guard let layers = Self.layers(specification), let baseLayers = Self.layers(base),
              layers.count == baseLayers.count else { return nil }
        // Everything but the layers must be the base's (description, labels, update parameters).
        var rest = specification, baseRest = base
        Self.clearLayers(&rest)
        Self.clearLayers(&baseRest)
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
        guard let graph = try graph.replacing(replaced, layers: layers) else { return nil }
        return try NNCompiledNetwork(variantOf: self, graph: graph)
    }

    private static func layers(_ spec: CoreML_Specification_Model) -> [CoreML_Specification_NeuralNetworkLayer]? {
        switch spec.type {
        case .neuralNetwork(let nn)?: return nn.layers
        case .neuralNetworkClassifier(let nn)?: return nn.layers
        case .neuralNetworkRegressor(let nn)?: return nn.layers
        default: return nil
        }
    }

    private static func clearLayers(_ spec: inout CoreML_Specification_Model) {
        switch spec.type {
        case .neuralNetwork(var nn)?: nn.layers = []; spec.neuralNetwork = nn
        case .neuralNetworkClassifier(var nn)?: nn.layers = []; spec.neuralNetworkClassifier = nn
        case .neuralNetworkRegressor(var nn)?: nn.layers = []; spec.neuralNetworkRegressor = nn
        default: break
        }
    }
}
