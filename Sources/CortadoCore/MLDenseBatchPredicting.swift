/// A compiled model whose inputs vectorize to one row of Doubles (see `MLInputVectorizer`)
/// and whose result is a fixed number of Doubles per row (regression values, or per-class
/// scores for a classifier). Such a model can run a whole matrix in one call, which is
/// how batch requests and benchmarks avoid per-row feature dictionaries.
public protocol MLDenseBatchPredicting: AnyObject, Sendable {
    /// Doubles per input row.
    var inputWidth: Int { get }
    /// Doubles per output row.
    var outputWidth: Int { get }
    /// Reads `count` rows of `inputWidth` Doubles (row-major) and writes `count` rows of
    /// `outputWidth` Doubles.
    func predict(rows: UnsafePointer<Double>, count: Int, into output: UnsafeMutablePointer<Double>)
}

/// A dense model that also says how its input features fill a row and turns a row's results
/// back into its output features. With it a caller holding the inputs as columns (a server
/// reading a request's tensors) fills the matrix itself and runs it in one call: no feature
/// value per input, no lookup by name, and the same answers `prediction(from:)` gives.
public protocol MLDenseFeaturePredicting: MLDenseBatchPredicting {
    /// How the inputs fill a row, in order; nil when they do not vectorize (e.g. a
    /// dictionary input).
    var denseInput: MLInputVectorizer? { get }
    /// One row's output features from the `outputWidth` Doubles `predict` wrote for it.
    func outputFeatures(dense row: UnsafePointer<Double>) throws -> MLFeatureProvider
}

/// Rows already vectorized (`MLInputVectorizer`'s layout) in one row-major matrix, as a
/// caller filled them. `row(_:)` gives each as a feature provider, so code that does not know
/// the dense form still reads named values.
public final class MLDenseRows: @unchecked Sendable {
    public let layout: MLInputVectorizer
    public let count: Int
    /// `count × layout.length` Doubles.
    public let values: UnsafeMutablePointer<Double>
    /// Whether each field is an int64 feature (read back as int64 values), by field.
    let integer: [Bool]

    /// Zero-filled rows for the fields of `layout`; `integer` says, by field, which are int64
    /// features (empty: none).
    public init(layout: MLInputVectorizer, count: Int, integer: [Bool] = []) {
        precondition(integer.isEmpty || integer.count == layout.fields.count)
        self.layout = layout
        self.count = count
        values = .allocate(capacity: max(1, count * layout.length))
        values.initialize(repeating: 0, count: max(1, count * layout.length))
        self.integer = integer.isEmpty ? Array(repeating: false, count: layout.fields.count) : integer
    }

    deinit { values.deallocate() }

    public func row(_ index: Int) -> MLDenseRow { MLDenseRow(rows: self, index: index) }
}

/// One row of `MLDenseRows` as a feature provider.
public final class MLDenseRow: MLFeatureProvider, @unchecked Sendable {
    public let rows: MLDenseRows
    public let index: Int

    init(rows: MLDenseRows, index: Int) {
        self.rows = rows
        self.index = index
    }

    /// The row's Doubles (`rows.layout.length` of them).
    public var values: UnsafePointer<Double> { UnsafePointer(rows.values + index * rows.layout.length) }

    public var featureNames: Set<String> { Set(rows.layout.fields.map(\.name)) }

    public func featureValue(for featureName: String) -> MLFeatureValue? {
        guard let f = rows.layout.fields.firstIndex(where: { $0.name == featureName }) else { return nil }
        let field = rows.layout.fields[f]
        let start = values + field.offset
        if !field.isArray {
            return rows.integer[f] ? MLFeatureValue(int64: Int64(start[0])) : MLFeatureValue(double: start[0])
        }
        guard let array = try? MLMultiArray(shape: field.shape, dataType: .double) else { return nil }
        for i in 0..<field.width { array.setDouble(start[i], at: i) }
        return MLFeatureValue(multiArray: array)
    }
}
