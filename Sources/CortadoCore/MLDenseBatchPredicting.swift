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
