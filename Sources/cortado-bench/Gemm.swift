import CCortadoGemm
import COpenBLAS
import Dispatch
import Foundation

// `cortado-bench gemm N`: Cortado's SGEMM (Sources/CGemm) against OpenBLAS's cblas_sgemm on the
// same N×N×N row-major product, timed alternately in one process (no model, no copies).

let gemmUsage = """
usage: cortado-bench gemm N [--repeat R] [--threads T]

  N          the size: C[N×N] = A[N×N]·B[N×N], row-major float32.
  --repeat   timed runs of each (default 5, alternating); medians are reported.
  --threads  threads for both (default 1): Cortado's GEMM on row bands, one per thread;
             OpenBLAS with openblas_set_num_threads(T).

Prints JSON: n, threads, cortado_gflops, openblas_gflops (medians) and the largest
difference between the two results relative to the largest |C| value.
"""

func runGemm(_ args: [String]) {
    var positional: [String] = []
    var repeats = 5, threads = 1
    var i = 0
    while i < args.count {
        switch args[i] {
        case "--repeat", "--threads":
            guard i + 1 < args.count, let v = Int(args[i + 1]), v >= 1 else { fail("\(args[i]) needs an integer ≥ 1\n\n\(gemmUsage)") }
            if args[i] == "--repeat" { repeats = v } else { threads = v }
            i += 1
        case "-h", "--help": print(gemmUsage); exit(0)
        default: positional.append(args[i])
        }
        i += 1
    }
    guard positional.count == 1, let n = Int(positional[0]), n >= 1 else { fail("expected N\n\n\(gemmUsage)") }
    guard cg_available() != 0 else { fail("the kernel path is portable (no AVX2+FMA or NEON, or CORTADO_ISA=portable): Cortado's GEMM does not run here") }
    var state: UInt64 = 7
    func value() -> Float {
        state = state &* 6364136223846793005 &+ 1442695040888963407
        return Float(state >> 40) / Float(1 << 24) - 0.5
    }
    let a = (0..<n * n).map { _ in value() }, b = (0..<n * n).map { _ in value() }
    var ours = [Float](repeating: 0, count: n * n), theirs = ours
    let workspaceFloats = Int(cg_workspace_count())
    let workspace = UnsafeMutablePointer<Float>.allocate(capacity: threads * workspaceFloats)
    defer { workspace.deallocate() }
    openblas_set_num_threads(Int32(threads))
    let band = (n + threads - 1) / threads
    var cortadoTimes: [Double] = [], openblasTimes: [Double] = []
    a.withUnsafeBufferPointer { ap in
        b.withUnsafeBufferPointer { bp in
            ours.withUnsafeMutableBufferPointer { cp in
                theirs.withUnsafeMutableBufferPointer { tp in
                    let (A, B, C, T) = (ap.baseAddress!, bp.baseAddress!, cp.baseAddress!, tp.baseAddress!)
                    let bOperand = cg_operand(data: B, ld: n, form: CG_ROW_MAJOR, width: 0, panel: 0)
                    let shared = GemmBands(a: A, b: bOperand, c: C, workspace: workspace)
                    func cortado() {
                        DispatchQueue.concurrentPerform(iterations: threads) { t in
                            let r0 = t * band, r1 = min(n, r0 + band)
                            guard r0 < r1 else { return }
                            cg_gemm(r1 - r0, n, n, cg_operand(data: shared.a + r0 * n, ld: n, form: CG_ROW_MAJOR, width: 0, panel: 0), shared.b,
                                    shared.c + r0 * n, n, 0, shared.workspace + t * workspaceFloats, nil)
                        }
                    }
                    func openblas() {
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, blasint(n), blasint(n), blasint(n), 1, A, blasint(n), B, blasint(n), 0, T, blasint(n))
                    }
                    cortado(); openblas()
                    for _ in 0..<repeats {
                        var t0 = now(); cortado(); cortadoTimes.append(now() - t0)
                        t0 = now(); openblas(); openblasTimes.append(now() - t0)
                    }
                }
            }
        }
    }
    let scale = theirs.reduce(Float(0)) { max($0, abs($1)) }
    let diff = zip(ours, theirs).reduce(Float(0)) { max($0, abs($1.0 - $1.1)) }
    let flops = 2 * Double(n) * Double(n) * Double(n)
    print("{\"n\": \(n), \"threads\": \(threads), \"cortado_gflops\": \(jsonNumber(flops / median(cortadoTimes) / 1e9)), "
          + "\"openblas_gflops\": \(jsonNumber(flops / median(openblasTimes) / 1e9)), \"max_relative_difference\": \(jsonNumber(Double(diff / max(scale, 1e-30))))}")
}

/// What the row bands share (each writes its own rows of C and uses its own workspace).
private struct GemmBands: @unchecked Sendable {
    let a: UnsafePointer<Float>
    let b: cg_operand
    let c: UnsafeMutablePointer<Float>
    let workspace: UnsafeMutablePointer<Float>
}
