import CortadoCore
import CortadoSpec

/// `featureVectorizer` (FeatureVectorizer.proto): concatenates the inputs named in
/// `inputList`, in that order, into one multi-array.
///
/// Each column contributes `inputDimensions` values:
/// - an int64 or double input: its value (`inputDimensions` must be 1);
/// - a multi-array: its elements in row-major order (as many as `inputDimensions`;
///   checked at load time when the input's shape is fixed, else per prediction);
/// - an int64-keyed dictionary (a sparse vector, such as a sparse `oneHotEncoder` or a
///   `dictVectorizer` writes): key k sets slot k of `inputDimensions` slots, absent keys
///   give 0, a key outside 0..<inputDimensions is a prediction error.
///
/// Every column must be a declared input; declared inputs the list does not name are not
/// read. A column may be listed more than once.
public enum MLFeatureVectorizerKind: MLModelKind {
    public static let specTypes = ["featureVectorizer"]

    public static func compile(_ spec: CoreML_Specification_Model, context: MLCompileContext) throws -> any MLCompiledModel {
        try MLCompiledFeatureVectorizer(spec.featureVectorizer, description: context.description)
    }
}

final class MLCompiledFeatureVectorizer: MLCompiledModel {
    enum Source: Sendable {
        case scalar
        case array
        case sparse
    }

    struct Column: Sendable {
        let name: String
        let source: Source
        let offset: Int
        let width: Int
    }

    static let kind = "featureVectorizer"

    let columns: [Column]
    let length: Int
    let output: FeatureEngineeringArrayOutput

    init(_ spec: CoreML_Specification_FeatureVectorizer, description: MLModelDescription) throws {
        let kind = Self.kind
        guard !spec.inputList.isEmpty else {
            throw MLModelError(.invalidModel, "\(kind) has an empty inputList")
        }
        var columns: [Column] = []
        var offset = 0
        for (i, entry) in spec.inputList.enumerated() {
            let name = entry.inputColumn
            guard let input = description.input(named: name) else {
                throw MLModelError(.invalidModel, feature: name,
                                   "\(kind) inputList[\(i)] names '\(name)', which is not an input of the model (inputs: \(description.inputs.map(\.name).joined(separator: ", ")))")
            }
            guard entry.inputDimensions > 0, entry.inputDimensions <= UInt64(Int32.max) else {
                throw MLModelError(.invalidModel, feature: name,
                                   "\(kind) inputList[\(i)] has inputDimensions \(entry.inputDimensions) (expected 1 to \(Int32.max))")
            }
            let width = Int(entry.inputDimensions)
            let source: Source
            switch input.type {
            case .int64, .double:
                guard width == 1 else {
                    throw MLModelError(.invalidModel, feature: name,
                                       "\(kind) inputList[\(i)] gives the \(input.type) input \(width) dimensions (a scalar has 1)")
                }
                source = .scalar
            case .multiArray:
                if let n = FeatureEngineeringInterface.fixedCount(input), n != width {
                    throw MLModelError(.invalidModel, feature: name,
                                       "\(kind) inputList[\(i)] gives the input \(width) dimensions but it is declared with \(n) elements")
                }
                source = .array
            case .dictionary:
                guard input.dictionaryConstraint?.keyType != .string else {
                    throw MLModelError(.invalidModel, feature: name,
                                       "\(kind) cannot place a dictionary with string keys (expected int64 keys: positions 0..<\(width))")
                }
                source = .sparse
            default:
                throw MLModelError(.invalidModel, feature: name,
                                   "\(kind) input is \(input.typeSummary) (expected int64, double, multiArray or an int64-keyed dictionary)")
            }
            columns.append(Column(name: name, source: source, offset: offset, width: width))
            offset += width
        }
        self.columns = columns
        length = offset
        let out = try FeatureEngineeringInterface.singleOutput(description, kind: kind, allowed: [.multiArray])
        output = FeatureEngineeringArrayOutput(out)
        try output.check(count: length, kind: kind, what: "the sum of inputDimensions")
    }

    var summary: [String] {
        ["Feature vectorizer: \(columns.count) column\(columns.count == 1 ? "" : "s") → \(length) values"]
    }

    /// Writes one column's values at `y`.
    @inline(__always)
    func gather(_ column: Column, from input: MLFeatureProvider, into y: UnsafeMutablePointer<Double>) throws {
        let value = try FeatureEngineeringInterface.value(input, column.name)
        switch (column.source, value.storage) {
        case (.scalar, .double(let d)):
            y[0] = d
        case (.scalar, .int64(let i)):
            y[0] = Double(i)
        case (.array, .multiArray(let a)):
            guard a.count == column.width else {
                throw MLModelError.featureType(column.name, "expected \(column.width) elements, got \(a.count) (shape \(a.shape))")
            }
            a.copyDoubles(into: y)
        case (.sparse, .dictionary(.int64Keyed(let d))):
            y.initialize(repeating: 0, count: column.width)
            for (k, v) in d {
                guard k >= 0 && k < Int64(column.width) else {
                    throw MLModelError.featureType(column.name, "dictionary key \(k) is outside 0..<\(column.width), the column's inputDimensions")
                }
                y[Int(k)] = v
            }
        case (.sparse, .dictionary(.stringKeyed(let d))) where d.isEmpty:
            y.initialize(repeating: 0, count: column.width)
        case (.sparse, .dictionary(.stringKeyed)):
            throw MLModelError.featureType(column.name, "dictionary keys are string, expected int64 positions 0..<\(column.width)")
        default:
            let want: String
            switch column.source {
            case .scalar: want = "a number"
            case .array: want = "a multiArray of \(column.width)"
            case .sparse: want = "a dictionary with int64 keys"
            }
            throw MLModelError.featureType(column.name, "expected \(want), got \(value.type)")
        }
    }

    func prediction(from input: MLFeatureProvider, options: MLPredictionOptions) throws -> MLFeatureProvider {
        let result = try output.withValues(count: length, options: options) { y in
            for column in columns { try gather(column, from: input, into: y + column.offset) }
        }
        return MLDictionaryFeatureProvider(dictionary: [output.name: result])
    }
}

/// Columns: every row's vector is written into one [rows] + shape output (the caller's backing
/// when given), scalar and array inputs read from their `.doubles`, `.int64s` and `.arrays`
/// columns as they lie; other columns (values, dictionaries) row by row as `gather` reads them.
/// So a converted scikit-learn model (this vectorizer before a GLM or a tree ensemble) runs a
/// batch of scalar inputs without a feature value per input and row.
extension MLCompiledFeatureVectorizer: MLColumnarPredicting {
    func predictions(columns batch: MLFeatureColumns, options: MLPredictionOptions) throws -> MLFeatureColumns {
        let n = batch.count
        guard n > 0 else { return MLFeatureColumns(count: 0) }
        let rowShape = output.shape(count: length, like: nil)
        let result = try withUnsafeTemporaryAllocation(of: Double.self, capacity: n * length) { buffer in
            let y = buffer.baseAddress!
            for (index, column) in columns.enumerated() {
                var at = y + column.offset
                // Listed in the inputs' order, mostly: each column where the batch has that input.
                switch (column.source, batch.column(column.name, hint: index)) {
                case (.scalar, .doubles(let v)?):
                    for r in 0..<n { at[0] = v[r]; at += length }
                case (.scalar, .int64s(let v)?):
                    for r in 0..<n { at[0] = Double(v[r]); at += length }
                case (.array, .arrays(let a)?) where a.count == n * column.width:
                    if a.isContiguous && a.dataType == .double {
                        let source = a.dataPointer.assumingMemoryBound(to: Double.self)
                        for r in 0..<n { at.update(from: source + r * column.width, count: column.width); at += length }
                    } else {
                        for r in 0..<n {
                            for k in 0..<column.width { at[k] = a.double(at: r * column.width + k) }
                            at += length
                        }
                    }
                default:
                    for r in 0..<n { try gather(column, from: batch.features(at: r), into: at); at += length }
                }
            }
            if output.dataType == .int32, let i = (0..<(n * length)).first(where: { !FeatureEngineeringArrayOutput.fitsInt32(y[$0]) }) {
                throw MLModelError.featureType(output.name, "element \(i % length) is \(y[i]), which an INT32 output cannot hold")
            }
            let array = try options.outputColumn(named: output.name, rows: n, shape: rowShape, dataType: output.dataType)
            array.write(contiguous: UnsafeBufferPointer(start: y, count: n * length))
            return array
        }
        let out = MLFeatureColumns(count: n, owner: batch)
        out.set(output.name, .arrays(result))
        return out
    }
}
