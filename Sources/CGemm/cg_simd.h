// Small AVX-512F helpers of the AVX-512 path (cg_avx512.c; not part of the public headers).
#ifndef CG_SIMD_H
#define CG_SIMD_H
#if defined(__x86_64__)

#include <immintrin.h>

#include "cortado_gemm.h"

#define CG_TARGET __attribute__((target("avx512f,avx512vl,fma")))

// Lanes [0, n) of a 16-lane mask (n may be ≤ 0 or ≥ 16).
static inline __mmask16 cg_lanes(long n) {
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

// The epilogue on one vector of finished values: v·s + t, then the activation.
CG_TARGET static inline __m512 cg_epi(__m512 v, __m512 s, __m512 t, const cg_epilogue *e) {
    v = _mm512_fmadd_ps(v, s, t);
    if (e->activation == CG_ACT_RELU) return _mm512_max_ps(_mm512_setzero_ps(), v); // NaN stays NaN, as in NNActivation
    if (e->activation == CG_ACT_LEAKY_RELU) {
        return _mm512_mask_mul_ps(v, _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ), v, _mm512_set1_ps(e->alpha));
    }
    return v;
}

#endif // __x86_64__
#endif
