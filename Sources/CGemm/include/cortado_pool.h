#ifndef CORTADO_POOL_H
#define CORTADO_POOL_H

/*
 * Max pooling for the neural-network kernels, on the kernel path in use (cg_isa() in
 * cortado_gemm.h): vectorised on AVX-512, a plain loop elsewhere.
 */

#ifdef __cplusplus
extern "C" {
#endif

/* One output row of a 2×2 max pool whose windows lie inside the input: for i in [0, count),
 * out[i] = max(max(r0[s·i], r0[s·i + 1]), max(r1[s·i], r1[s·i + 1])) for stride s of 1 or 2,
 * where max(x, y) is (y >= x ? y : x), bit for bit (so NaN and signed zeros come out as
 * the scalar loop's). Reads r0 and r1 up to index s·(count − 1) + 1. */
void cg_max_pool_2x2_row(const float *r0, const float *r1, float *out, long count, long stride);

#ifdef __cplusplus
}
#endif
#endif
