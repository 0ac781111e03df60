import CortadoCore
import Foundation

/// The columnar path of a pipeline: each stage gets the batch's columns so far (the inputs,
/// with the kept outputs of earlier stages laid over them) and writes its outputs as columns,
/// so a columnar stage (a network, a tree ensemble, a GLM) runs the whole batch at once and
/// hands its output arrays to the next stage as they are; other stages run row by row over
/// views of the same columns. Output backings ([rows] + shape) go to the stage that finally
/// produces the backed output; when it did not write into one, the pipeline copies in.
extension MLCompiledPipeline: MLColumnarPredicting {
    func predictions(columns: MLFeatureColumns, options: MLPredictionOptions) throws -> MLFeatureColumns {
        let n = columns.count
        guard n > 0 else { return MLFeatureColumns(count: 0) }
        let features = MLFeatureColumns(copying: columns)
        let backed = !options.outputBackings.isEmpty
        let plain = Self.observing(options)
        for (stage, model) in zip(plan.stages, models) {
            let stageOptions = backed ? Self.options(options, for: stage) : plain
            let began = options.computeSpans == nil ? 0 : DispatchTime.now().uptimeNanoseconds
            defer { options.computeSpans?.add(model.name, kind: "model", start: began, end: DispatchTime.now().uptimeNanoseconds) }
            let out: MLFeatureColumns
            if stage.validatesInputs {
                out = try model.predictions(fromColumns: features, options: stageOptions)
            } else {
                do {
                    if let columnar = model.compiled as? any MLColumnarPredicting {
                        out = try columnar.predictions(columns: features, options: stageOptions)
                    } else {
                        out = try model.compiled.rowPredictions(columns: features, options: stageOptions,
                                                                outputs: model.modelDescription.outputs.map(\.name))
                    }
                } catch let error as MLModelError {
                    throw error.inModel(model.name)
                }
            }
            for (name, _) in stage.stores {
                // An output the stage left out reads as the input of that name again, as in a row.
                if let column = out.column(name) ?? columns.column(name) { features.set(name, column) }
            }
            features.owners.append(out)
        }
        let result = MLFeatureColumns(count: n, owner: features)
        for (name, source) in plan.outputs {
            switch source {
            case .input:
                if let column = columns.column(name) { result.set(name, column) }
            case .slot:
                guard let column = features.column(name) else {
                    let producer = plan.stages.last(where: { $0.backedOutputs.contains(name) })?.label ?? "its stage"
                    throw MLModelError(.generic, feature: name, "\(producer) did not produce the pipeline output '\(name)'")
                }
                result.set(name, column)
            }
        }
        if backed { try applyBackings(options, to: result) }
        return result
    }

    /// Makes every backed output column live in its backing, copying when its producer did not
    /// write into it.
    private func applyBackings(_ options: MLPredictionOptions, to result: MLFeatureColumns) throws {
        for (name, backing) in options.outputBackings {
            guard let column = result.column(name) else { continue }
            guard case .arrays(let array) = column else {
                throw MLModelError.featureType(name, "an output backing was given, but the output is not a multiArray")
            }
            if array.dataPointer == backing.dataPointer { continue }
            let target = try options.outputColumn(named: name, rows: result.count, shape: Array(array.shape.dropFirst()), dataType: array.dataType)
            if array.isContiguous && target.isContiguous && array.dataType == target.dataType {
                target.dataPointer.copyMemory(from: array.dataPointer, byteCount: array.count * array.dataType.size)
            } else {
                for i in 0..<array.count { target.setDouble(array.double(at: i), at: i) }
            }
            result.set(name, .arrays(target))
        }
    }
}
