import CortadoCore
import CortadoNativeCoding
import CortadoServerProtos

/// The native API, `cortado.v1.Predictor`: Core ML feature values, lossless both ways.
extension CortadoClient {
    static let predictor = "/cortado.v1.Predictor/"

    /// `Predict`: one row of inputs in, the model's outputs (or `outputs` only) back, as
    /// Core ML feature values. `version` empty: the version the server serves by default.
    public func predict(model: String, version: String = "", inputs: [String: MLFeatureValue], outputs: [String] = [],
                        timeout: Duration? = nil, metadata: [(name: String, value: String)] = []) async throws(CortadoClientError)
        -> [String: MLFeatureValue] {
        var request = Cortado_V1_PredictRequest()
        request.model = model
        request.version = version
        request.outputs = outputs
        request.inputs = inputs.sorted(by: { $0.key < $1.key }).map { name, value in
            var feature = Cortado_V1_Feature()
            feature.name = name
            feature.value = NativeFeatureCoding.encode(value)
            return feature
        }
        let response = try await call(Self.predictor + "Predict", request, as: Cortado_V1_PredictResponse.self,
                                      timeout: timeout, metadata: metadata)
        return try Self.features(response.outputs)
    }

    /// `Predict` with an `MLFeatureProvider`'s features (as `MLModel.prediction(from:)` takes
    /// them); the answer is an `MLDictionaryFeatureProvider`.
    public func prediction(model: String, version: String = "", from input: any MLFeatureProvider,
                           timeout: Duration? = nil, metadata: [(name: String, value: String)] = []) async throws(CortadoClientError)
        -> MLDictionaryFeatureProvider {
        var values: [String: MLFeatureValue] = [:]
        for name in input.featureNames { values[name] = input.featureValue(for: name) }
        return MLDictionaryFeatureProvider(
            dictionary: try await predict(model: model, version: version, inputs: values, timeout: timeout, metadata: metadata))
    }

    /// `Describe`: the model's inputs and outputs as the server reports them.
    public func describe(model: String, version: String = "", timeout: Duration? = nil,
                         metadata: [(name: String, value: String)] = []) async throws(CortadoClientError) -> Cortado_V1_DescribeResponse {
        var request = Cortado_V1_DescribeRequest()
        request.model = model
        request.version = version
        return try await call(Self.predictor + "Describe", request, as: Cortado_V1_DescribeResponse.self,
                              timeout: timeout, metadata: metadata)
    }

    /// `List`: every model version the server knows, with its state.
    public func listModels(timeout: Duration? = nil, metadata: [(name: String, value: String)] = []) async throws(CortadoClientError)
        -> [Cortado_V1_ModelStatus] {
        try await call(Self.predictor + "List", Cortado_V1_ListRequest(), as: Cortado_V1_ListResponse.self,
                       timeout: timeout, metadata: metadata).models
    }

    static func features(_ list: [Cortado_V1_Feature]) throws(CortadoClientError) -> [String: MLFeatureValue] {
        var out: [String: MLFeatureValue] = [:]
        for feature in list {
            do { out[feature.name] = try NativeFeatureCoding.decode(feature.value, name: feature.name, expected: nil) } catch {
                throw CortadoClientError(code: .internal, message: "output '\(feature.name)' cannot be read: \(error.message)")
            }
        }
        return out
    }
}
