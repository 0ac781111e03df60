import CortadoCore
import Foundation

/// The straight route for models that run vectorized rows (`MLDenseFeaturePredicting`):
/// a batch's columns are written into one matrix of Doubles, the model runs it in one call,
/// and each row's results become its output columns. No feature value is made per input and
/// no input is looked up per row, which is most of a call's cost when a model takes many
/// scalar inputs (coremltools' XGBoost and scikit-learn converters give each feature its own
/// input). Any batch the route cannot take as it is (a missing optional input, a column of
/// another form or shape) goes the general way (`MLModel.predictions(fromColumns:)`), which
/// answers it or explains what is wrong.
final class DenseRoute: @unchecked Sendable {
    let model: any MLDenseFeaturePredicting
    let layout: MLInputVectorizer
    /// Whether each field is an int64 input (read from an `.int64s` column).
    let integer: [Bool]
    /// The model's outputs, in its description's order.
    let outputNames: [String]

    /// Nil unless the model runs dense rows and every input it declares is a field of them.
    init?(model: MLModel, inputs: [TensorMapping]) {
        guard let dense = model.compiled as? any MLDenseFeaturePredicting, let layout = dense.denseInput,
              layout.fields.count == model.modelDescription.inputs.count else { return nil }
        var integer = Array(repeating: false, count: layout.fields.count)
        for (f, field) in layout.fields.enumerated() {
            guard let mapping = inputs.first(where: { $0.name == field.name }) else { return nil }
            switch mapping.kind {
            case .double where !field.isArray: break
            case .int64 where !field.isArray: integer[f] = true
            case .multiArray where field.isArray && mapping.fixedRowShape == field.shape: break
            default: return nil
            }
        }
        self.model = dense
        self.layout = layout
        self.integer = integer
        outputNames = model.modelDescription.outputs.map(\.name)
    }

    /// The outputs of a batch whose every column fits the route as it is (a double field's
    /// `.doubles`, an int64 field's `.int64s`, an array field's `.arrays` of its shape); nil
    /// when one does not.
    func predict(_ columns: MLFeatureColumns, modelName: String) throws -> MLFeatureColumns? {
        let n = columns.count, width = layout.length, d = model.outputWidth
        guard n > 0, columns.names.count == layout.fields.count else { return nil }
        let rows: [MLFeatureProvider]? = try withUnsafeTemporaryAllocation(of: Double.self, capacity: n * (width + d)) { buffer in
            let x = buffer.baseAddress!, y = x + n * width
            for (f, field) in layout.fields.enumerated() {
                guard let column = columns.column(field.name) else { return nil }
                var at = x + field.offset
                switch column {
                case .doubles(let values) where !field.isArray && !integer[f]:
                    for r in 0..<n { at[0] = values[r]; at += width }
                case .int64s(let values) where !field.isArray && integer[f]:
                    for r in 0..<n { at[0] = Double(values[r]); at += width }
                case .arrays(let array) where field.isArray && array.shape.count == field.shape.count + 1
                    && array.shape.first == n && array.shape.dropFirst().elementsEqual(field.shape):
                    let k = field.width
                    if array.isContiguous && array.dataType == .float32 {
                        let p = array.dataPointer.assumingMemoryBound(to: Float.self)
                        for r in 0..<n { for i in 0..<k { at[i] = Double(p[r * k + i]) }; at += width }
                    } else if array.isContiguous && array.dataType == .double {
                        let p = array.dataPointer.assumingMemoryBound(to: Double.self)
                        for r in 0..<n { at.update(from: p + r * k, count: k); at += width }
                    } else {
                        for r in 0..<n { for i in 0..<k { at[i] = array.double(at: r * k + i) }; at += width }
                    }
                default:
                    return nil
                }
            }
            model.predict(rows: x, count: n, into: y)
            do {
                return try (0..<n).map { try model.outputFeatures(dense: y + $0 * d) }
            } catch let error as MLModelError {
                throw error.inModel(modelName)
            }
        }
        guard let rows else { return nil }
        return try MLFeatureColumns(stacking: rows, names: outputNames)
    }
}
