/// Activations and the element-wise, normalization and reduction layers.
enum ElementwiseLayers {
    static let builders: [String: NNLayerBuilder] = [
        "activation": { spec in try ActivationLayer(spec.activation) },
        "bias": { spec in try BiasLayer(spec.bias) },
        "scale": { spec in try ScaleLayer(spec.scale) },
        "add": { spec in CombineLayer(.add, alpha: spec.add.alpha, inputCount: spec.input.count) },
        "multiply": { spec in CombineLayer(.multiply, alpha: spec.multiply.alpha, inputCount: spec.input.count) },
        "average": { spec in CombineLayer(.average, inputCount: spec.input.count) },
        "max": { spec in CombineLayer(.max, inputCount: spec.input.count) },
        "min": { spec in CombineLayer(.min, inputCount: spec.input.count) },
        "unary": { spec in try UnaryLayer(spec.unary) },
        "softmax": { _ in SoftmaxLayer() },
        "lrn": { spec in try LRNLayer(spec.lrn) },
        "mvn": { spec in MVNLayer(spec.mvn) },
        "l2Normalize": { spec in L2NormalizeLayer(spec.l2Normalize) },
        "dot": { spec in DotLayer(spec.dot) },
        "reduce": { spec in try ReduceLayer(spec.reduce) },
        "embedding": { spec in try EmbeddingLayer(spec.embedding) },
        "loadConstant": { spec in try LoadConstantLayer(spec.loadConstant) },
    ]
}
