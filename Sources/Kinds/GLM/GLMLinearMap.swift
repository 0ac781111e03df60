import CortadoCore
import Foundation

/// The affine part of a generalized linear model, laid out for evaluation:
/// `score_r = offset_r + Σ_i weight_ri · x_i` for each row `r` (a regression target or a
/// class), with the weights in one contiguous row-major block.
struct GLMLinearMap: Sendable {
    /// Rows: targets (regressor) or class scores (classifier).
    let rows: Int
    /// Values per row: the length of the input vector.
    let width: Int
    /// `rows × width`, row-major.
    let weights: [Double]
    let offsets: [Double]

    /// Reads and checks the format's weight rows and offsets. `kind` names the model type
    /// in messages ("glmRegressor", "glmClassifier").
    init(weights rowsIn: [[Double]], offsets: [Double], kind: String) throws {
        guard let first = rowsIn.first else {
            throw MLModelError(.invalidModel, "\(kind) has no weights (expected one row of weights per \(kind == "glmClassifier" ? "class score" : "target"))")
        }
        guard offsets.count == rowsIn.count else {
            throw MLModelError(.invalidModel, "\(kind) has \(rowsIn.count) weight rows but \(offsets.count) offsets (expected one offset per weight row)")
        }
        guard !first.isEmpty else {
            throw MLModelError(.invalidModel, "\(kind) weight row 0 is empty (expected one weight per input value)")
        }
        for (r, row) in rowsIn.enumerated() where row.count != first.count {
            throw MLModelError(.invalidModel, "\(kind) weight row \(r) has \(row.count) values but row 0 has \(first.count) (all rows must have one weight per input value)")
        }
        for (r, row) in rowsIn.enumerated() {
            if let i = row.firstIndex(where: { !$0.isFinite }) {
                throw MLModelError(.invalidModel, "\(kind) weight row \(r) value \(i) is \(row[i]) (weights must be finite)")
            }
        }
        if let r = offsets.firstIndex(where: { !$0.isFinite }) {
            throw MLModelError(.invalidModel, "\(kind) offset \(r) is \(offsets[r]) (offsets must be finite)")
        }
        rows = rowsIn.count
        width = first.count
        weights = rowsIn.flatMap { $0 }
        self.offsets = offsets
    }

    /// The vectorizer for `inputs`, checked against the weight width. A single multi-array
    /// input without a declared shape takes its length from the weights.
    func vectorizer(for inputs: [MLFeatureDescription], kind: String) throws -> MLInputVectorizer {
        guard !inputs.isEmpty else {
            throw MLModelError(.invalidModel, "\(kind) has no inputs (expected \(width) numeric values: int64, double or multiArray features)")
        }
        do {
            return try MLInputVectorizer(inputs: inputs, expectedLength: width)
        } catch let error as MLModelError {
            let listed = inputs.map { "\($0.name): \($0.typeSummary)" }.joined(separator: ", ")
            throw MLModelError(.invalidModel, feature: error.feature,
                               "\(kind) weight rows have \(width) values (one per input value), but the inputs do not match: \(error.message) [inputs: \(listed)]")
        }
    }

    /// Writes the `rows` scores for the vector `x` (length `width`) into `out`.
    @inline(__always)
    func evaluate(_ x: UnsafePointer<Double>, into out: UnsafeMutablePointer<Double>) {
        weights.withUnsafeBufferPointer { w in
            let w = w.baseAddress!
            for r in 0..<rows {
                out[r] = offsets[r] + Self.dot(w + r * width, x, width)
            }
        }
    }

    /// `Σ a_i b_i` with four running sums, so long rows do not wait on one addition chain.
    @inline(__always)
    static func dot(_ a: UnsafePointer<Double>, _ b: UnsafePointer<Double>, _ n: Int) -> Double {
        var s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0
        var i = 0
        while i + 4 <= n {
            s0 += a[i] * b[i]; s1 += a[i + 1] * b[i + 1]; s2 += a[i + 2] * b[i + 2]; s3 += a[i + 3] * b[i + 3]
            i += 4
        }
        while i < n {
            s0 += a[i] * b[i]
            i += 1
        }
        return (s0 + s1) + (s2 + s3)
    }
}

/// The post-evaluation transforms of the format's GLMs.
enum GLMLink: String, Sendable {
    case identity = "NoTransform"
    /// The logistic sigmoid 1 / (1 + e^-s) (the format calls it Logit).
    case logit = "Logit"
    /// The standard normal CDF Φ(s) (the format calls it Probit).
    case probit = "Probit"

    @inline(__always)
    func apply(_ s: Double) -> Double {
        switch self {
        case .identity: return s
        case .logit: return GLMLink.sigmoid(s)
        case .probit: return GLMLink.normalCDF(s)
        }
    }

    @inline(__always)
    static func sigmoid(_ s: Double) -> Double {
        1 / (1 + exp(-s))
    }

    /// Φ(s) = erfc(-s / √2) / 2, accurate in both tails.
    @inline(__always)
    static func normalCDF(_ s: Double) -> Double {
        0.5 * erfc(-s * 0.7071067811865476)
    }
}
