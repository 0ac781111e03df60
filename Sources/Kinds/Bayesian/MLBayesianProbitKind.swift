import CortadoCore
import CortadoSpec

/// Bayesian probit regressors (`bayesianProbitRegressor`, BayesianProbitRegressor.proto):
/// Microsoft's AdPredictor model (Graepel et al., 2010), P(y = +1 | x, w) = Φ(⟨w, x⟩ / β)
/// with Gaussian weights, one per (categorical feature, value) pair.
///
/// The format documents the inputs and outputs but not the arithmetic; Cortado follows
/// Core ML's own implementation where it is known and chooses where it is not:
/// - Input: the regression input (named by `regressionInputFeatureName`, else the first
///   multiArray input) holds one integer value per feature, element i being feature i's
///   value, as Core ML reads it (it needs exactly `numberOfFeatures` elements). The proto
///   also describes an n×2 (feature id, value) form; Core ML rejects it ("sparse features
///   not yet supported"), Cortado accepts it and sums only the listed pairs.
/// - Each active pair selects the weight `features[featureId = i].weights[featureValue = x_i]`.
///   A pair the model has no weight for contributes the prior N(0, 1) (an assumption:
///   see `MLBayesianProbitWeights`).
/// - β² = numberOfFeatures (Core ML adds the feature count to the summed variance; the
///   format has no β field). The "variance" output excludes β².
/// - Outputs: the mean, variance, pessimistic and sampled outputs are those the
///   `...OutputFeatureName` fields name. The probability Φ(μ/σ) goes to the model's
///   predicted feature when that is not one of them, else to the first declared output
///   no field names (Core ML returns it as the regressor's value). Each output may be
///   declared double or multiArray (one element).
/// - The optimism, samplingScale and samplingTruncation inputs are optional numbers;
///   absent ones count as 0. The sampled probability is random (not reproducible), as in Core ML.
/// Formulas: see `MLCompiledBayesianProbit`.
public enum MLBayesianProbitKind: MLModelKind {
    public static let specTypes = ["bayesianProbitRegressor"]

    public static func compile(_ spec: CoreML_Specification_Model, context: MLCompileContext) throws -> any MLCompiledModel {
        guard case .bayesianProbitRegressor(let bp)? = spec.type else {
            throw MLModelError(.invalidModel, "not a bayesianProbitRegressor model")
        }
        guard bp.numberOfFeatures > 0 else {
            throw MLModelError(.invalidModel, "bayesianProbitRegressor.numberOfFeatures is 0; it must be positive")
        }
        let description = context.description
        let weights = try MLBayesianProbitWeights(bp)

        let regression: MLFeatureDescription
        if bp.regressionInputFeatureName.isEmpty {
            guard let first = description.inputs.first(where: { $0.type == .multiArray }) else {
                throw MLModelError(.invalidModel, "bayesianProbitRegressor has no multiArray input of feature values")
            }
            regression = first
        } else {
            guard let named = description.input(named: bp.regressionInputFeatureName) else {
                throw MLModelError(.invalidModel, feature: bp.regressionInputFeatureName,
                                   "regressionInputFeatureName names an input the model does not declare")
            }
            regression = named
        }
        guard regression.type == .multiArray else {
            throw MLModelError(.invalidModel, feature: regression.name,
                               "the regression input must be a multiArray of feature values, not \(regression.typeSummary)")
        }
        if let shape = regression.multiArrayConstraint?.shape, !shape.isEmpty,
           regression.multiArrayConstraint?.shapeConstraint.type == .unspecified {
            let count = shape.reduce(1, *)
            let pairs = shape.count == 2 && shape[1] == 2
            guard count == Int(bp.numberOfFeatures) || pairs else {
                throw MLModelError(.invalidModel, feature: regression.name,
                                   "the regression input has shape \(shape) (\(count) values) but the model has \(bp.numberOfFeatures) features")
            }
        }

        func scalarInput(_ name: String, _ field: String) throws -> String? {
            if name.isEmpty { return nil }
            guard let f = description.input(named: name) else {
                throw MLModelError(.invalidModel, feature: name, "\(field) names an input the model does not declare")
            }
            guard f.type == .double || f.type == .int64 else {
                throw MLModelError(.invalidModel, feature: name, "\(field) must name a double input, not \(f.typeSummary)")
            }
            return name
        }
        let named: [(String, String)] = [
            (bp.meanOutputFeatureName, "meanOutputFeatureName"),
            (bp.varianceOutputFeatureName, "varianceOutputFeatureName"),
            (bp.pessimisticProbabilityOutputFeatureName, "pessimisticProbabilityOutputFeatureName"),
            (bp.sampledProbabilityOutputFeatureName, "sampledProbabilityOutputFeatureName"),
        ]
        var outputs: [MLCompiledBayesianProbit.Output?] = []
        for (name, field) in named {
            if name.isEmpty { outputs.append(nil); continue }
            guard let f = description.output(named: name) else {
                throw MLModelError(.invalidModel, feature: name, "\(field) names an output the model does not declare")
            }
            outputs.append(try output(f, field: field))
        }
        let claimed = Set(named.map(\.0).filter { !$0.isEmpty })
        var probability: MLCompiledBayesianProbit.Output?
        if let p = description.predictedFeatureName, !claimed.contains(p), let f = description.output(named: p) {
            probability = try output(f, field: "the predicted feature")
        } else if let f = description.outputs.first(where: { !claimed.contains($0.name) }) {
            probability = try output(f, field: "the probability output")
        }

        return MLCompiledBayesianProbit(
            weights: weights, numberOfFeatures: Int(bp.numberOfFeatures), regressionInput: regression.name,
            optimismInput: try scalarInput(bp.optimismInputFeatureName, "optimismInputFeatureName"),
            samplingScaleInput: try scalarInput(bp.samplingScaleInputFeatureName, "samplingScaleInputFeatureName"),
            samplingTruncationInput: try scalarInput(bp.samplingTruncationInputFeatureName, "samplingTruncationInputFeatureName"),
            probabilityOutput: probability, meanOutput: outputs[0], varianceOutput: outputs[1],
            pessimisticOutput: outputs[2], sampledOutput: outputs[3])
    }

    static func output(_ f: MLFeatureDescription, field: String) throws -> MLCompiledBayesianProbit.Output {
        switch f.type {
        case .double:
            return .init(name: f.name, asArray: nil)
        case .multiArray:
            if let shape = f.multiArrayConstraint?.shape, shape.reduce(1, *) != 1, !shape.isEmpty {
                throw MLModelError(.invalidModel, feature: f.name, "\(field) is one number, but the output is declared \(f.typeSummary)")
            }
            return .init(name: f.name, asArray: f.multiArrayConstraint?.dataType ?? .double)
        default:
            throw MLModelError(.invalidModel, feature: f.name, "\(field) is a number, but the output is declared \(f.typeSummary) (expected double or multiArray)")
        }
    }
}
