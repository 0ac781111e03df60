/// Pooling and the layers that move data: padding, crop, resize, reshape, permute, concat, split, slice.
enum SpatialLayers {
    static let builders: [String: NNLayerBuilder] = [:]
}
