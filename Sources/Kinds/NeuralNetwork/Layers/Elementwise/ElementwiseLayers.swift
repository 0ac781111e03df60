/// Activations, batch norm and the element-wise, normalization and reduction layers.
enum ElementwiseLayers {
    static let builders: [String: NNLayerBuilder] = [
        "activation": { spec, _ in try ActivationLayer(spec.activation) },
        "bias": { spec, _ in try BiasLayer(spec.bias) },
        "scale": { spec, _ in try ScaleLayer(spec.scale) },
    ]
}
