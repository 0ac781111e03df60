// Vectorised 2×2 max pooling (see include/cortado_pool.h).
#include "cortado_pool.h"

#include <immintrin.h>

#define CP_TARGET __attribute__((target("avx512f,avx512vl")))

// Lanes [0, n) of a 16-lane mask (n may be ≤ 0 or ≥ 16).
static inline __mmask16 cp_lanes(long n) {
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

// max(x, y) as the scalar code takes it: y when y >= x, else x.
CP_TARGET static inline __m512 cp_max(__m512 x, __m512 y) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(y, x, _CMP_GE_OQ), x, y);
}

CP_TARGET void cg_max_pool_2x2_row(const float *r0, const float *r1, float *out, long count, long stride) {
    long i = 0;
    if (stride == 2) {
        const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
        for (; i < count; i += 16) {
            // Inputs [2i, 2i + 2n) for the n = min(16, count − i) outputs of this step.
            long n = count - i < 16 ? count - i : 16;
            __mmask16 lo = cp_lanes(2 * n), hi = cp_lanes(2 * n - 16);
            const float *a = r0 + 2 * i, *b = r1 + 2 * i;
            __m512 a0 = _mm512_maskz_loadu_ps(lo, a), a1 = _mm512_maskz_loadu_ps(hi, a + 16);
            __m512 b0 = _mm512_maskz_loadu_ps(lo, b), b1 = _mm512_maskz_loadu_ps(hi, b + 16);
            __m512 top = cp_max(_mm512_permutex2var_ps(a0, even, a1), _mm512_permutex2var_ps(a0, odd, a1));
            __m512 bottom = cp_max(_mm512_permutex2var_ps(b0, even, b1), _mm512_permutex2var_ps(b0, odd, b1));
            _mm512_mask_storeu_ps(out + i, cp_lanes(n), cp_max(top, bottom));
        }
    } else if (stride == 1) {
        for (; i < count; i += 16) {
            long n = count - i < 16 ? count - i : 16;
            __mmask16 m = cp_lanes(n);
            __m512 top = cp_max(_mm512_maskz_loadu_ps(m, r0 + i), _mm512_maskz_loadu_ps(m, r0 + i + 1));
            __m512 bottom = cp_max(_mm512_maskz_loadu_ps(m, r1 + i), _mm512_maskz_loadu_ps(m, r1 + i + 1));
            _mm512_mask_storeu_ps(out + i, m, cp_max(top, bottom));
        }
    } else {
        for (; i < count; i++) {
            const float *a = r0 + stride * i, *b = r1 + stride * i;
            float t = a[1] >= a[0] ? a[1] : a[0], u = b[1] >= b[0] ? b[1] : b[0];
            out[i] = u >= t ? u : t;
        }
    }
}
