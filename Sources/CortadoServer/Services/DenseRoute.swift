import CortadoCore
import Foundation

/// The straight route for models that run vectorized rows (`MLDenseFeaturePredicting`):
/// a request's tensors are written column by column into one matrix of Doubles, the model
/// runs it in one call, and each row's results become its output features. No feature value
/// is made per input and no input is looked up by name, which is most of a call's cost when a
/// model takes many scalar inputs (coremltools' XGBoost and scikit-learn converters give
/// each feature its own input). Any request the route cannot take as it is (a missing
/// optional input, a shape other than the declared one, BYTES) goes the general way, which
/// answers it or explains what is wrong.
final class DenseRoute: @unchecked Sendable {
    let model: any MLDenseFeaturePredicting
    let layout: MLInputVectorizer
    /// Whether each field is an int64 input (its values read as integers first, as the
    /// general route does).
    let integer: [Bool]

    /// Nil unless the model runs dense rows and every input it declares is a field of them.
    init?(model: MLModel, inputs: [TensorMapping]) {
        guard let dense = model.compiled as? any MLDenseFeaturePredicting, let layout = dense.denseInput,
              layout.fields.count == model.modelDescription.inputs.count else { return nil }
        var fields: [(TensorMapping, Int)] = []
        var integer = Array(repeating: false, count: layout.fields.count)
        for (f, field) in layout.fields.enumerated() {
            guard let mapping = inputs.first(where: { $0.name == field.name }) else { return nil }
            switch mapping.kind {
            case .double where !field.isArray: break
            case .int64 where !field.isArray: integer[f] = true
            case .multiArray where field.isArray && mapping.fixedRowShape == field.shape: break
            default: return nil
            }
            fields.append((mapping, f))
        }
        self.model = dense
        self.layout = layout
        self.integer = integer
        for (mapping, f) in fields { mapping.denseField = f }
    }

    /// The rows of a request whose columns were read and checked (`InferenceRun`), or nil
    /// when one of them does not fit the route as it is.
    func rows(_ columns: [InferenceRun.Column], count: Int) -> [MLFeatureProvider]? {
        guard columns.count == layout.fields.count else { return nil }
        let rows = MLDenseRows(layout: layout, count: count, integer: integer)
        let width = layout.length
        // By index: each column read in place (a copy retains each of its fields).
        for c in columns.indices {
            let f = columns[c].mapping.denseField
            guard f >= 0, columns[c].elements.datatype != "BYTES" else { return nil }
            let field = layout.fields[f]
            let elements = columns[c].elements
            var at = rows.values + field.offset
            if !field.isArray {
                guard columns[c].rowShape.count <= 1, columns[c].rowShape.first ?? 1 == 1 else { return nil }
                if integer[f] {
                    for r in 0..<count { at[0] = Double(elements.int64(at: r)); at += width }
                } else {
                    for r in 0..<count { at[0] = elements.double(at: r); at += width }
                }
            } else {
                guard columns[c].rowShape == field.shape else { return nil }
                let n = field.width
                for r in 0..<count {
                    for i in 0..<n { at[i] = elements.double(at: r * n + i) }
                    at += width
                }
            }
        }
        return (0..<count).map { rows.row($0) }
    }

    /// Runs rows this route made; nil when any row is of another kind.
    func predict(_ rows: [MLFeatureProvider], modelName: String) throws -> [MLFeatureProvider]? {
        guard let first = rows.first as? MLDenseRow, first.rows.layout.length == layout.length else { return nil }
        let width = layout.length, d = model.outputWidth, n = rows.count
        var contiguous = true
        for (i, row) in rows.enumerated() {
            guard let row = row as? MLDenseRow else { return nil }
            if row.rows !== first.rows || row.index != first.index + i { contiguous = false }
        }
        return try withUnsafeTemporaryAllocation(of: Double.self, capacity: n * d + (contiguous ? 0 : n * width)) { buffer in
            let y = buffer.baseAddress!
            var x = first.values
            if !contiguous {
                // Rows of several requests (the dynamic batcher): gathered into one matrix.
                let gathered = y + n * d
                for (i, row) in rows.enumerated() {
                    (gathered + i * width).update(from: (row as! MLDenseRow).values, count: width)
                }
                x = UnsafePointer(gathered)
            }
            model.predict(rows: x, count: n, into: y)
            do {
                return try (0..<n).map { try model.outputFeatures(dense: y + $0 * d) }
            } catch let error as MLModelError {
                throw error.inModel(modelName)
            }
        }
    }
}
