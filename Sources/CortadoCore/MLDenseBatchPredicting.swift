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
    /// The output columns of `count` rows from the `count × outputWidth` Doubles `predict`
    /// wrote, array outputs into `options.outputBackings` ([rows] + shape) when given. The
    /// default stacks `outputFeatures(dense:)` row by row; kinds write their columns directly.
    func outputColumns(dense rows: UnsafePointer<Double>, count: Int, options: MLPredictionOptions) throws -> MLFeatureColumns
}

extension MLDenseFeaturePredicting {
    public func outputColumns(dense rows: UnsafePointer<Double>, count: Int, options: MLPredictionOptions) throws -> MLFeatureColumns {
        let features = try (0..<count).map { try outputFeatures(dense: rows + $0 * outputWidth) }
        return try MLFeatureColumns(stacking: features, names: features.first?.featureNames.sorted() ?? [], backings: options.outputBackings)
    }
}

/// The columnar path of a dense model: the matrix is filled straight from the input columns
/// (`.doubles`, `.int64s`, `.arrays` read as they lie; no feature value per input, no lookup by
/// name per row), run in one call, and its results written as columns. A batch the matrix
/// cannot take as it is (an input left out, values of another kind) runs row by row, which
/// answers it or explains what is wrong.
extension MLColumnarPredicting where Self: MLDenseFeaturePredicting {
    public func predictions(columns: MLFeatureColumns, options: MLPredictionOptions) throws -> MLFeatureColumns {
        let n = columns.count
        guard n > 0, let layout = denseInput, layout.length == inputWidth else {
            return try rowPredictions(columns: columns, options: options)
        }
        // One block for the matrix and the results (on the stack when small).
        let inputs = n * layout.length
        let filled = try withUnsafeTemporaryAllocation(of: Double.self, capacity: Swift.max(1, inputs + n * outputWidth)) { buffer in
            let x = buffer.baseAddress!, y = x + inputs
            guard layout.fill(x, from: columns) else { return nil as MLFeatureColumns? }
            predict(rows: x, count: n, into: y)
            return try outputColumns(dense: y, count: n, options: options)
        }
        return try filled ?? rowPredictions(columns: columns, options: options)
    }
}

extension MLInputVectorizer {
    /// Writes the rows of `columns` (row-major, `length` Doubles a row) into `out`, each input
    /// read from its column as it lies; false when a column is missing or holds something the
    /// rows' `gather` would not read (left for the row path to answer or refuse). Values are
    /// read as `gather` reads them: an int64 as its Double, a double as it is.
    public func fill(_ out: UnsafeMutablePointer<Double>, from columns: MLFeatureColumns) -> Bool {
        let n = columns.count, width = length
        for (index, field) in fields.enumerated() {
            // The fields are the inputs in declared order: a batch decoded in that order has each
            // column at the field's position.
            guard let column = columns.column(field.name, hint: index) else { return false }
            var at = out + field.offset
            switch column {
            case .doubles(let v):
                guard !field.isArray, v.count == n else { return false }
                for r in 0..<n { at[0] = v[r]; at += width }
            case .int64s(let v):
                guard !field.isArray, v.count == n else { return false }
                for r in 0..<n { at[0] = Double(v[r]); at += width }
            case .arrays(let a):
                // A field of `width` values a row (a scalar field: one); the rows' arrays each hold
                // as many (the shape was checked against the description).
                guard a.shape.first == n, a.count == n * field.width else { return false }
                Self.copy(a, rows: n, rowWidth: field.width, into: at, stride: width)
            case .values(let values):
                guard values.count == n else { return false }
                for value in values {
                    switch value.storage {
                    case .double(let d) where !field.isArray: at[0] = d
                    case .int64(let i) where !field.isArray: at[0] = Double(i)
                    case .multiArray(let a) where field.isArray && a.count == field.width: a.copyDoubles(into: at)
                    default: return false
                    }
                    at += width
                }
            }
        }
        return true
    }

    /// Copies `rows` rows of `rowWidth` elements of `array` (converted to Double) to `out`, a
    /// row every `stride` Doubles.
    static func copy(_ array: MLMultiArray, rows: Int, rowWidth: Int, into out: UnsafeMutablePointer<Double>, stride: Int) {
        guard array.isContiguous else {
            for r in 0..<rows {
                for i in 0..<rowWidth { out[r * stride + i] = array.double(at: r * rowWidth + i) }
            }
            return
        }
        func copyRows<T>(_ type: T.Type, _ convert: (T) -> Double) {
            let source = array.dataPointer.assumingMemoryBound(to: T.self)
            for r in 0..<rows {
                let from = source + r * rowWidth, to = out + r * stride
                for i in 0..<rowWidth { to[i] = convert(from[i]) }
            }
        }
        switch array.dataType {
        case .double:
            if rowWidth == stride {
                out.update(from: array.dataPointer.assumingMemoryBound(to: Double.self), count: rows * rowWidth)
            } else {
                copyRows(Double.self) { $0 }
            }
        case .float32: copyRows(Float.self) { Double($0) }
        case .float16: copyRows(Float16.self) { Double(Float($0)) }
        case .int32: copyRows(Int32.self) { Double($0) }
        }
    }
}

extension MLClassifierOutputNames {
    /// A classifier's output columns for `count` rows of per-class scores, in a batch of their
    /// own (see `setColumns`).
    public func columns(labels: MLClassLabels, scores: UnsafePointer<Double>, count: Int) -> MLFeatureColumns {
        let columns = MLFeatureColumns(count: count, capacity: distinctNames ? 2 : 1)
        setColumns(labels: labels, scores: scores, count: count, in: columns)
        return columns
    }

    /// A classifier's output columns for `count` rows of per-class scores (`labels.count` a row,
    /// in label order), set into `columns`: the winning label (`.int64s` for int64 labels,
    /// `.values` for strings) and the label → score dictionaries (`.values`), as `provider` gives
    /// them row by row (ties to the first class).
    public func setColumns(labels: MLClassLabels, scores: UnsafePointer<Double>, count: Int, in columns: MLFeatureColumns) {
        let k = labels.count
        if let probabilities = probabilitiesName {
            var dictionaries: [MLFeatureValue] = []
            dictionaries.reserveCapacity(count)
            for r in 0..<count { dictionaries.append(labels.dictionary(scores: UnsafeBufferPointer(start: scores + r * k, count: k))) }
            // One name for both: the probabilities win, as in `provider`.
            if distinctNames { setLabels(labels, scores: scores, count: count, in: columns) }
            columns.set(probabilities, .values(dictionaries))
        } else {
            setLabels(labels, scores: scores, count: count, in: columns)
        }
    }

    /// The winning label of each row (ties to the first class), built as the rows are read
    /// (no list of winners: each list is an allocation, and one-row calls are the common case).
    private func setLabels(_ labels: MLClassLabels, scores: UnsafePointer<Double>, count: Int, in columns: MLFeatureColumns) {
        let k = labels.count
        func winner(_ r: Int) -> Int {
            let p = scores + r * k
            var w = 0
            for c in 1..<k where p[c] > p[w] { w = c }
            return w
        }
        switch labels {
        case .int64s(let l):
            var out: [Int64] = []
            out.reserveCapacity(count)
            for r in 0..<count { out.append(l[winner(r)]) }
            columns.set(labelName, .int64s(out))
        case .strings:
            var out: [MLFeatureValue] = []
            out.reserveCapacity(count)
            for r in 0..<count { out.append(label(winner(r), labels)) }
            columns.set(labelName, .values(out))
        }
    }
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

extension MLFeatureColumns {
    /// A regressor's dense results (`width` Doubles a row) as its one output column: `.doubles`
    /// when `array` is nil (one double a row), else one [rows] + `array.shape` array of
    /// `array.dataType`, written into the caller's backing when `options` holds one.
    public static func regression(_ rows: UnsafePointer<Double>, count: Int, width: Int, name: String,
                                  array: (shape: [Int], dataType: MLMultiArrayDataType)?,
                                  options: MLPredictionOptions) throws -> MLFeatureColumns {
        let columns = MLFeatureColumns(count: count, capacity: 1)
        if let array {
            let out = try options.outputColumn(named: name, rows: count, shape: array.shape, dataType: array.dataType)
            out.write(contiguous: UnsafeBufferPointer(start: rows, count: count * width))
            columns.set(name, .arrays(out))
        } else {
            columns.set(name, .doubles(Array(UnsafeBufferPointer(start: rows, count: count))))
        }
        return columns
    }
}
