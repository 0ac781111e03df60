/// Convolution, deconvolution, inner product, batch norm and pooling: the GEMM-backed layers
/// and the ones that usually sit between them.
enum DenseLayers {
    static let builders: [String: NNLayerBuilder] = [
        "convolution": { spec in try ConvolutionLayer(spec.convolution, inputCount: spec.input.count) },
        "innerProduct": { spec in try InnerProductLayer(spec.innerProduct) },
        "batchnorm": { spec in try BatchnormLayer(spec.batchnorm) },
        "pooling": { spec in try PoolingLayer(spec.pooling) },
    ]
}
