/// Simple recurrent, LSTM (one and both directions) and GRU layers.
enum RecurrentLayers {
    static let builders: [String: NNLayerBuilder] = [:]
}
