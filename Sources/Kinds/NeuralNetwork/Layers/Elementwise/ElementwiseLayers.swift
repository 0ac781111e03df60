/// Activations, batch norm and the element-wise, normalization and reduction layers.
enum ElementwiseLayers {
    static let builders: [String: NNLayerBuilder] = [
        "activation": { spec, _ in try ActivationLayer(spec.activation) },
        "bias": { spec, _ in try BiasLayer(spec.bias) },
        "scale": { spec, _ in try ScaleLayer(spec.scale) },
        "add": { spec, _ in CombineLayer(.add, alpha: spec.add.alpha, inputCount: spec.input.count) },
        "multiply": { spec, _ in CombineLayer(.multiply, alpha: spec.multiply.alpha, inputCount: spec.input.count) },
        "average": { spec, _ in CombineLayer(.average, inputCount: spec.input.count) },
        "max": { spec, _ in CombineLayer(.max, inputCount: spec.input.count) },
        "min": { spec, _ in CombineLayer(.min, inputCount: spec.input.count) },
        "unary": { spec, _ in try UnaryLayer(spec.unary) },
        "softmax": { _, _ in SoftmaxLayer() },
        "lrn": { spec, _ in try LRNLayer(spec.lrn) },
        "mvn": { spec, _ in MVNLayer(spec.mvn) },
        "l2Normalize": { spec, _ in L2NormalizeLayer(spec.l2Normalize) },
        "dot": { spec, _ in DotLayer(spec.dot) },
        "reduce": { spec, _ in try ReduceLayer(spec.reduce) },
        "embedding": { spec, _ in try EmbeddingLayer(spec.embedding) },
        "loadConstant": { spec, _ in try LoadConstantLayer(spec.loadConstant) },
    ]
}
