import CortadoCore

/// How an SVM turns its input features into the dense vector its kernels read.
///
/// - `vector`: the numeric inputs (int64, double, multi-array) concatenated in declared order
///   by `MLInputVectorizer`, as Core ML feeds SVMs. Element `i` is LIBSVM feature `i + 1`.
/// - `openArray`: one multi-array input without a declared shape, with sparse support vectors:
///   any length is accepted; features past its end are zero (LIBSVM's sparse semantics).
/// - `dictionary`: one dictionary input with int64 keys, read as LIBSVM's sparse rows: key `k`
///   is feature index `k` (1-based), absent keys are zero. Core ML's own validator admits only
///   numeric inputs for SVMs; Cortado accepts this form too, as the natural input of a model
///   trained on sparse LIBSVM data.
struct SVMInput: Sendable {
    enum Form: Sendable {
        case vector(MLInputVectorizer)
        case openArray(name: String)
        case dictionary(name: String)
    }

    let form: Form
    /// Length of the vector handed to the kernels: at least the support vectors' dimension.
    let width: Int

    init(inputs: [MLFeatureDescription], vectors: SVMSupportVectors, kind: String) throws {
        guard !inputs.isEmpty else {
            throw MLModelError(.invalidModel, "\(kind) has no inputs (expected int64, double or multiArray features)")
        }
        if let dict = inputs.first(where: { $0.type == .dictionary }) {
            guard inputs.count == 1 else {
                throw MLModelError(.invalidModel, feature: dict.name, "\(kind) dictionary input must be the model's only input (it holds the whole sparse vector)")
            }
            guard dict.dictionaryConstraint?.keyType == .int64 else {
                throw MLModelError(.invalidModel, feature: dict.name, "\(kind) dictionary input has \(dict.dictionaryConstraint?.keyType ?? .invalid) keys (expected int64 keys: LIBSVM feature indices starting at 1)")
            }
            form = .dictionary(name: dict.name)
            width = vectors.dimension ?? 0
            return
        }
        let listed = inputs.map { "\($0.name): \($0.typeSummary)" }.joined(separator: ", ")
        func wrap<T>(_ make: () throws -> T) throws -> T {
            do { return try make() } catch let error as MLModelError {
                throw MLModelError(.invalidModel, feature: error.feature, "\(kind) inputs do not fit its support vectors: \(error.message) [inputs: \(listed)]")
            }
        }
        if vectors.isSparse {
            let largest = vectors.dimension ?? 0
            if inputs.count == 1, inputs[0].type == .multiArray, inputs[0].multiArrayConstraint?.shape.isEmpty ?? true {
                form = .openArray(name: inputs[0].name)
                width = largest
                return
            }
            let vectorizer = try wrap { try MLInputVectorizer(inputs: inputs) }
            guard vectorizer.length >= largest else {
                throw MLModelError(.invalidModel, "\(kind) sparse support vectors use feature index \(largest) but the inputs give only \(vectorizer.length) values [inputs: \(listed)]")
            }
            form = .vector(vectorizer)
            width = vectorizer.length
        } else {
            let vectorizer: MLInputVectorizer
            if let dim = vectors.dimension {
                vectorizer = try wrap { try MLInputVectorizer(inputs: inputs, expectedLength: dim) }
            } else {
                vectorizer = try wrap { try MLInputVectorizer(inputs: inputs) }
            }
            form = .vector(vectorizer)
            width = vectorizer.length
        }
    }

    var summary: String {
        switch form {
        case .vector(let v): return "\(v.length) input values"
        case .openArray(let name): return "'\(name)' read as a dense vector of any length (sparse features up to \(width))"
        case .dictionary(let name): return "'\(name)' read as LIBSVM sparse features (1-based int64 keys)"
        }
    }

    /// Reads the input into a dense vector of at least `width` values and calls `body` with it
    /// and its squared norm (over every value given, including keys past `width`).
    @inline(__always)
    func withVector<R>(_ input: MLFeatureProvider, _ body: (UnsafePointer<Double>, Double) throws -> R) throws -> R {
        switch form {
        case .vector(let vectorizer):
            return try withUnsafeTemporaryAllocation(of: Double.self, capacity: max(width, 1)) { buffer in
                let x = buffer.baseAddress!
                try vectorizer.gather(input, into: x)
                return try body(x, Self.squaredNorm(x, count: width))
            }
        case .openArray(let name):
            guard let array = input.featureValue(for: name)?.multiArrayValue else {
                throw MLModelError.featureType(name, "expected a multiArray")
            }
            let n = array.count
            return try withUnsafeTemporaryAllocation(of: Double.self, capacity: max(n, width, 1)) { buffer in
                let x = buffer.baseAddress!
                array.copyDoubles(into: x)
                let norm = Self.squaredNorm(x, count: n)
                if n < width { (x + n).initialize(repeating: 0, count: width - n) }
                return try body(x, norm)
            }
        case .dictionary(let name):
            guard let dictionary = input.featureValue(for: name)?.dictionary else {
                throw MLModelError.featureType(name, "expected a dictionary of int64 feature indices to numbers")
            }
            return try withUnsafeTemporaryAllocation(of: Double.self, capacity: max(width, 1)) { buffer in
                let x = buffer.baseAddress!
                x.initialize(repeating: 0, count: width)
                var norm = 0.0
                switch dictionary {
                case .int64Keyed(let d):
                    for (key, value) in d {
                        guard key >= 1 else {
                            throw MLModelError.featureType(name, "key \(key) is not a feature index (LIBSVM indices start at 1)")
                        }
                        if key <= Int64(width) { x[Int(key) - 1] = value }
                        norm += value * value
                    }
                case .stringKeyed(let d):
                    guard d.isEmpty else {
                        throw MLModelError.featureType(name, "dictionary has string keys (expected int64 feature indices)")
                    }
                }
                return try body(x, norm)
            }
        }
    }

    @inline(__always)
    static func squaredNorm(_ x: UnsafePointer<Double>, count: Int) -> Double {
        var s = 0.0
        for i in 0..<count { s += x[i] * x[i] }
        return s
    }
}
