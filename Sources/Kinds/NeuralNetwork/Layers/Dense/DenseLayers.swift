/// Convolution, deconvolution, inner product, batch norm and pooling: the GEMM-backed layers
/// and the ones that usually sit between them.
enum DenseLayers {
    static let builders: [String: NNLayerBuilder] = [
        "convolution": { spec, _ in try ConvolutionLayer(spec.convolution, inputCount: spec.input.count) },
        "innerProduct": { spec, _ in try InnerProductLayer(spec.innerProduct) },
        "batchnorm": { spec, _ in try BatchnormLayer(spec.batchnorm) },
        "pooling": { spec, _ in try PoolingLayer(spec.pooling) },
    ]
}
