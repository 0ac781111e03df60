import Foundation

/// LIBSVM's probability estimates for C-SVC and ν-SVC (`svm_predict_probability`):
/// each class pair's decision value goes through Platt's sigmoid with that pair's `probA`,
/// `probB`, clamped to [1e-7, 1 - 1e-7]; two classes take the pairwise value itself, more
/// classes are coupled by Wu, Lin & Weng's second method (`multiclass_probability`), an
/// iteration that stops at a tolerance. The code follows LIBSVM's step for step so the
/// numbers agree with it (and with scikit-learn, whose libsvm is the same code) to rounding.
enum SVMProbability {
    static let minProbability = 1e-7

    /// LIBSVM's `sigmoid_predict`: `1 / (1 + exp(A f + B))`, written to avoid cancellation.
    @inline(__always)
    static func sigmoid(_ decision: Double, a: Double, b: Double) -> Double {
        let fApB = decision * a + b
        if fApB >= 0 {
            return exp(-fApB) / (1 + exp(-fApB))
        }
        return 1 / (1 + exp(fApB))
    }

    /// Scratch doubles `estimate` needs for `k` classes.
    static func scratchCount(classes k: Int) -> Int { 2 * k * k + k }

    /// Class probabilities from the `k(k-1)/2` decision values (LIBSVM pair order
    /// (0,1), (0,2), …, (1,2), …). `scratch` holds `scratchCount(classes: k)` doubles.
    static func estimate(decisions: UnsafePointer<Double>, probA: UnsafePointer<Double>, probB: UnsafePointer<Double>,
                         classes k: Int, scratch: UnsafeMutablePointer<Double>, into p: UnsafeMutablePointer<Double>) {
        // r[i][j]: probability that class i beats class j, row-major k × k.
        let r = scratch
        var pair = 0
        for i in 0..<k {
            for j in (i + 1)..<k {
                let rij = min(max(sigmoid(decisions[pair], a: probA[pair], b: probB[pair]), minProbability), 1 - minProbability)
                r[i * k + j] = rij
                r[j * k + i] = 1 - rij
                pair += 1
            }
        }
        if k == 2 {
            p[0] = r[1]
            p[1] = r[k]
        } else {
            coupling(k, r: r, q: scratch + k * k, qp: scratch + 2 * k * k, into: p)
        }
    }

    /// LIBSVM's `multiclass_probability`: minimizes `pᵀQp` over the simplex by coordinate
    /// steps, stopping when every `|(Qp)_t - pᵀQp|` is below `0.005 / k` or after
    /// `max(100, k)` sweeps.
    static func coupling(_ k: Int, r: UnsafePointer<Double>, q: UnsafeMutablePointer<Double>,
                         qp: UnsafeMutablePointer<Double>, into p: UnsafeMutablePointer<Double>) {
        let maxIterations = max(100, k)
        let eps = 0.005 / Double(k)
        for t in 0..<k {
            p[t] = 1 / Double(k)
            q[t * k + t] = 0
            for j in 0..<t {
                q[t * k + t] += r[j * k + t] * r[j * k + t]
                q[t * k + j] = q[j * k + t]
            }
            for j in (t + 1)..<k {
                q[t * k + t] += r[j * k + t] * r[j * k + t]
                q[t * k + j] = -r[j * k + t] * r[t * k + j]
            }
        }
        for _ in 0..<maxIterations {
            // Stopping condition; Qp and pQp recomputed for accuracy.
            var pQp = 0.0
            for t in 0..<k {
                qp[t] = 0
                for j in 0..<k { qp[t] += q[t * k + j] * p[j] }
                pQp += p[t] * qp[t]
            }
            var maxError = 0.0
            for t in 0..<k { maxError = max(maxError, abs(qp[t] - pQp)) }
            if maxError < eps { break }

            for t in 0..<k {
                let diff = (-qp[t] + pQp) / q[t * k + t]
                p[t] += diff
                pQp = (pQp + diff * (diff * q[t * k + t] + 2 * qp[t])) / (1 + diff) / (1 + diff)
                for j in 0..<k {
                    qp[j] = (qp[j] + diff * q[t * k + j]) / (1 + diff)
                    p[j] /= (1 + diff)
                }
            }
        }
    }
}
