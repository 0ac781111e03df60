/// Convolution, deconvolution and inner product: the GEMM-backed layers.
enum DenseLayers {
    static let builders: [String: NNLayerBuilder] = [:]
}
