/// Weight decompression computed once at load (`constexpr_*`), and `quantize`/`dequantize`.
enum MILConstexprOps {
    nonisolated(unsafe) static let kernels: [String: MILKernel] = [:]
}
