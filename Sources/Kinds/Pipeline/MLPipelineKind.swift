import CortadoCore
import CortadoSpec

/// Pipelines (`pipeline`, `pipelineClassifier`, `pipelineRegressor`): stages run in order,
/// each reading pipeline inputs and earlier stages' outputs.
///
/// Loading checks that the stages connect (see `MLPipelinePlan`) before compiling any
/// stage, then compiles each stage through the kind registry with
/// `MLCompileContext.compileSubmodel`: a pipeline never knows what its stages are.
/// A stage is named by the pipeline's `names` entry when there is one, else by its index
/// and type ("stage 2 (glmClassifier)"), and errors inside it carry that name.
public enum MLPipelineKind: MLModelKind {
    public static let specTypes = ["pipeline", "pipelineClassifier", "pipelineRegressor"]

    public static func compile(_ spec: CoreML_Specification_Model, context: MLCompileContext) throws -> any MLCompiledModel {
        let pipeline: CoreML_Specification_Pipeline
        let isClassifier: Bool
        switch spec.type {
        case .pipeline(let p)?:
            pipeline = p
            isClassifier = false
        case .pipelineClassifier(let p)?:
            pipeline = p.pipeline
            isClassifier = true
        case .pipelineRegressor(let p)?:
            pipeline = p.pipeline
            isClassifier = false
        default:
            throw MLModelError(.invalidModel, "not a pipeline model (\(MLModelSpec.typeName(spec) ?? "no type"))")
        }
        let specs = pipeline.models
        guard !specs.isEmpty else {
            throw MLModelError(.invalidModel, "the pipeline has no stages (it must contain one or more models)")
        }
        let names = try stageNames(pipeline)

        var stages: [MLPipelineStagePlan] = []
        stages.reserveCapacity(specs.count)
        for (i, stageSpec) in specs.enumerated() {
            let type = MLModelSpec.typeName(stageSpec) ?? "no model type"
            let given = names.map { $0[i] }
            let compileName = given ?? "stage \(i) (\(type))"
            let label = MLPipelinePlan.label(index: i, name: given, specType: type)
            let description: MLModelDescription
            do {
                description = try MLModelDescription(stageSpec.description_p)
            } catch let error as MLModelError {
                var e = error.inModel("\(context.modelName)/\(compileName)")
                e.message = "\(label): \(e.message)"
                throw e
            }
            stages.append(MLPipelineStagePlan(index: i, name: compileName, label: label, description: description))
        }

        let plan = try MLPipelinePlan(pipeline: context.description, stages: stages)
        var models: [MLModel] = []
        models.reserveCapacity(specs.count)
        for (stage, stageSpec) in zip(plan.stages, specs) {
            models.append(try context.compileSubmodel(stageSpec, name: stage.name))
        }
        return MLCompiledPipeline(plan: plan, models: models, isClassifier: isClassifier)
    }

    /// The stage names, if the pipeline gives them: one per stage, unique, non-empty.
    static func stageNames(_ pipeline: CoreML_Specification_Pipeline) throws -> [String]? {
        let names = pipeline.names
        if names.isEmpty { return nil }
        guard names.count == pipeline.models.count else {
            throw MLModelError(.invalidModel, "the pipeline names \(names.count) stages but has \(pipeline.models.count)")
        }
        var seen = Set<String>()
        for (i, name) in names.enumerated() {
            guard !name.isEmpty else {
                throw MLModelError(.invalidModel, "pipeline stage \(i) has an empty name")
            }
            guard seen.insert(name).inserted else {
                throw MLModelError(.invalidModel, "pipeline stage name '\(name)' at index \(i) is already used by an earlier stage")
            }
        }
        return names
    }
}
