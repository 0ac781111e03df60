/// Activations, batch norm and the element-wise, normalization and reduction layers.
enum ElementwiseLayers {
    static let builders: [String: NNLayerBuilder] = [
        "activation": { spec, _ in try ActivationLayer(spec.activation) },
    ]
}
