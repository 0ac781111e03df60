import CortadoCore
import CortadoSpec

/// Support vectors laid out for kernel evaluation: dense vectors in one contiguous
/// row-major block of Doubles, sparse vectors in compressed rows (CSR) with 0-based
/// indices, and every vector's squared norm precomputed for the RBF kernel.
///
/// Sparse nodes carry LIBSVM's 1-based feature indices: node index `i` reads element
/// `i - 1` of the input vector (what coremltools' LIBSVM converter writes and how it lays
/// out the dense input).
struct SVMSupportVectors: Sendable {
    enum Layout: Sendable {
        /// `count × dimension`, row-major.
        case dense(values: [Double])
        /// Row `r` holds nodes `rowStart[r] ..< rowStart[r + 1]`; indices are 0-based.
        case sparse(rowStart: [Int], indices: [Int], values: [Double])
    }

    let layout: Layout
    /// Number of support vectors.
    let count: Int
    /// Values of the input vector the support vectors read: the dense length, or the largest
    /// sparse index (nil for dense vectors when there are none).
    let dimension: Int?
    /// Squared Euclidean norm of each support vector.
    let norms: [Double]

    var isSparse: Bool {
        if case .sparse = layout { return true }
        return false
    }

    /// Stored values (dense elements or sparse nodes): the cost of one pass over the vectors.
    var storedValues: Int {
        switch layout {
        case .dense(let v): return v.count
        case .sparse(_, _, let v): return v.count
        }
    }

    /// Reads the format's dense vectors. `kind` names the model type in messages.
    init(dense: CoreML_Specification_DenseSupportVectors, kind: String) throws {
        let vectors = dense.vectors
        let dim = vectors.first?.values.count
        var values: [Double] = []
        values.reserveCapacity(vectors.count * (dim ?? 0))
        var norms: [Double] = []
        norms.reserveCapacity(vectors.count)
        for (r, v) in vectors.enumerated() {
            guard v.values.count == dim else {
                throw MLModelError(.invalidModel, "\(kind) dense support vector \(r) has \(v.values.count) values but vector 0 has \(dim ?? 0) (all must have one value per input value)")
            }
            if let i = v.values.firstIndex(where: { !$0.isFinite }) {
                throw MLModelError(.invalidModel, "\(kind) dense support vector \(r) value \(i) is \(v.values[i]) (values must be finite)")
            }
            values.append(contentsOf: v.values)
            norms.append(v.values.reduce(0) { $0 + $1 * $1 })
        }
        if dim == 0 {
            throw MLModelError(.invalidModel, "\(kind) dense support vectors are empty (expected one value per input value)")
        }
        layout = .dense(values: values)
        count = vectors.count
        dimension = dim
        self.norms = norms
    }

    /// Reads the format's sparse vectors; nodes are sorted by index, and an index below 1 or a
    /// repeated index within a vector is an error.
    init(sparse: CoreML_Specification_SparseSupportVectors, kind: String) throws {
        var rowStart = [0]
        var indices: [Int] = []
        var values: [Double] = []
        var norms: [Double] = []
        var largest = 0
        for (r, v) in sparse.vectors.enumerated() {
            let nodes = v.nodes.sorted { $0.index < $1.index }
            var previous: Int32 = 0
            var norm = 0.0
            for node in nodes {
                guard node.index >= 1 else {
                    throw MLModelError(.invalidModel, "\(kind) sparse support vector \(r) has feature index \(node.index) (LIBSVM indices start at 1)")
                }
                guard node.index != previous else {
                    throw MLModelError(.invalidModel, "\(kind) sparse support vector \(r) has feature index \(node.index) twice")
                }
                guard node.value.isFinite else {
                    throw MLModelError(.invalidModel, "\(kind) sparse support vector \(r) value at index \(node.index) is \(node.value) (values must be finite)")
                }
                previous = node.index
                indices.append(Int(node.index) - 1)
                values.append(node.value)
                norm += node.value * node.value
                largest = max(largest, Int(node.index))
            }
            rowStart.append(indices.count)
            norms.append(norm)
        }
        layout = .sparse(rowStart: rowStart, indices: indices, values: values)
        count = sparse.vectors.count
        dimension = largest
        self.norms = norms
    }

    /// Reads whichever support-vector form a spec holds.
    init(dense: CoreML_Specification_DenseSupportVectors?, sparse: CoreML_Specification_SparseSupportVectors?, kind: String) throws {
        if let dense {
            try self.init(dense: dense, kind: kind)
        } else if let sparse {
            try self.init(sparse: sparse, kind: kind)
        } else {
            throw MLModelError(.invalidModel, "\(kind) has no support vectors (expected denseSupportVectors or sparseSupportVectors)")
        }
    }

    /// `out[r] = sv_r · x` for every support vector. `x` holds at least `dimension` values.
    @inline(__always)
    func dots(_ x: UnsafePointer<Double>, into out: UnsafeMutablePointer<Double>) {
        switch layout {
        case .dense(let values):
            let dim = dimension ?? 0
            values.withUnsafeBufferPointer { v in
                guard var row = v.baseAddress else { return }
                for r in 0..<count {
                    out[r] = Self.dot(row, x, dim)
                    row += dim
                }
            }
        case .sparse(let rowStart, let indices, let values):
            rowStart.withUnsafeBufferPointer { start in
                indices.withUnsafeBufferPointer { idx in
                    values.withUnsafeBufferPointer { v in
                        for r in 0..<count {
                            var sum = 0.0
                            for n in start[r]..<start[r + 1] { sum += v[n] * x[idx[n]] }
                            out[r] = sum
                        }
                    }
                }
            }
        }
    }

    /// `Σ a_i b_i` with eight running sums, so the loop does not wait on one addition chain
    /// (the order of additions differs from a plain loop by rounding only).
    @inline(__always)
    static func dot(_ a: UnsafePointer<Double>, _ b: UnsafePointer<Double>, _ n: Int) -> Double {
        var s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0, s4 = 0.0, s5 = 0.0, s6 = 0.0, s7 = 0.0
        var i = 0
        while i + 8 <= n {
            s0 += a[i] * b[i]; s1 += a[i + 1] * b[i + 1]; s2 += a[i + 2] * b[i + 2]; s3 += a[i + 3] * b[i + 3]
            s4 += a[i + 4] * b[i + 4]; s5 += a[i + 5] * b[i + 5]; s6 += a[i + 6] * b[i + 6]; s7 += a[i + 7] * b[i + 7]
            i += 8
        }
        while i < n {
            s0 += a[i] * b[i]
            i += 1
        }
        return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
    }

    /// `Σ_r coefficient(r) · sv_r` as a dense vector of `dimension` values: the weight vector
    /// a linear kernel folds into. `coefficient` gives 0 for vectors that do not take part.
    func fold(dimension dim: Int, coefficient: (Int) -> Double) -> [Double] {
        var w = [Double](repeating: 0, count: dim)
        switch layout {
        case .dense(let values):
            for r in 0..<count {
                let c = coefficient(r)
                if c == 0 { continue }
                let base = r * dim
                for i in 0..<dim { w[i] += c * values[base + i] }
            }
        case .sparse(let rowStart, let indices, let values):
            for r in 0..<count {
                let c = coefficient(r)
                if c == 0 { continue }
                for n in rowStart[r]..<rowStart[r + 1] { w[indices[n]] += c * values[n] }
            }
        }
        return w
    }
}
