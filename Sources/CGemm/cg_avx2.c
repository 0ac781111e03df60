// The AVX2+FMA path (x86-64): every function is compiled for AVX2 and FMA by its own target
// attribute, and runs only when cg_isa() chose this path.
//
// The packed layout is the AVX-512 path's (row panels of CG_MR = 12, column panels of
// CG_NR = 32): 16 ymm registers hold a 6 × 16 tile (12 accumulators, two vectors of B, one
// broadcast of A), so a 12 × 32 tile of the panels is covered by four of them, the two row
// halves of one column half in turn so that its 16 columns of B are reused from L1. As on the
// AVX-512 path, the full row panels of a row-major A (rows in different L1 sets) or of rows
// given as pointers are read in place rather than packed per call.
#include "cg_kernels.h"

#if defined(__x86_64__)

#include <immintrin.h>

#define CV_TARGET __attribute__((target("avx2,fma")))
#if defined(__clang__)
#define CV_UNROLL_K _Pragma("clang loop unroll_count(4)")
#else
#define CV_UNROLL_K
#endif

// The epilogue on one vector of finished values: v·s + t, then the activation (as cg_epi1).
// The activation `act` (CG_ACT_*) on v.
CV_TARGET static inline __m256 cv_act(__m256 v, int act, float alpha) {
    if (act == CG_ACT_RELU) return _mm256_max_ps(_mm256_setzero_ps(), v); // NaN and −0 stay, as max(0, v) keeps them
    if (act == CG_ACT_LEAKY_RELU) {
        __m256 negative = _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_LT_OQ);
        return _mm256_blendv_ps(v, _mm256_mul_ps(v, _mm256_set1_ps(alpha)), negative);
    }
    return v;
}

CV_TARGET static inline __m256 cv_epi(__m256 v, __m256 s, __m256 t, const cg_epilogue *e) {
    return cv_act(_mm256_fmadd_ps(v, s, t), (int)e->activation, e->alpha);
}

// MARK: The 6 × 16 micro-kernel

#define CV_ROWS6(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define CV_DECL(i) __m256 c##i##0 = _mm256_setzero_ps(), c##i##1 = _mm256_setzero_ps();
// CV_A(i) points at row i's value at the current k (each kernel defines it for its form of A).
#define CV_FMA(i) { __m256 ai = _mm256_broadcast_ss(CV_A(i)); \
    c##i##0 = _mm256_fmadd_ps(ai, b0, c##i##0); c##i##1 = _mm256_fmadd_ps(ai, b1, c##i##1); }
// Per-row scale and shift of row i (when the channels run along the rows).
#define CV_EPI_ROW(i) if (!e->per_column) { \
    s0 = s1 = _mm256_set1_ps(cg_epi_scale(e, row + i)); t0 = t1 = _mm256_set1_ps(cg_epi_shift(e, row + i)); }
#define CV_STORE_FULL(i) { float *ci = c + i * ldc; \
    if (add) { c##i##0 = _mm256_add_ps(c##i##0, _mm256_loadu_ps(ci)); c##i##1 = _mm256_add_ps(c##i##1, _mm256_loadu_ps(ci + 8)); } \
    if (e) { CV_EPI_ROW(i) c##i##0 = cv_epi(c##i##0, s0, t0, e); c##i##1 = cv_epi(c##i##1, s1, t1, e); } \
    _mm256_storeu_ps(ci, c##i##0); _mm256_storeu_ps(ci + 8, c##i##1); }
#define CV_STORE_PART(i) if (i < mr) { float *ci = c + i * ldc; \
    if (add) { c##i##0 = _mm256_add_ps(c##i##0, _mm256_maskload_ps(ci, m0)); c##i##1 = _mm256_add_ps(c##i##1, _mm256_maskload_ps(ci + 8, m1)); } \
    if (e) { CV_EPI_ROW(i) c##i##0 = cv_epi(c##i##0, s0, t0, e); c##i##1 = cv_epi(c##i##1, s1, t1, e); } \
    _mm256_maskstore_ps(ci, m0, c##i##0); _mm256_maskstore_ps(ci + 8, m1, c##i##1); }
// The sums of the tile into C (added to it when `add`), the epilogue, masked at the edges.
#define CV_FINISH \
    __m256i m0 = cg_lanes8(nr), m1 = cg_lanes8(nr - 8); \
    __m256 s0 = _mm256_set1_ps(1.0f), s1 = s0, t0 = _mm256_setzero_ps(), t1 = t0; \
    if (e && e->per_column) { \
        if (e->scale) { s0 = _mm256_maskload_ps(e->scale + col, m0); s1 = _mm256_maskload_ps(e->scale + col + 8, m1); } \
        if (e->shift) { t0 = _mm256_maskload_ps(e->shift + col, m0); t1 = _mm256_maskload_ps(e->shift + col + 8, m1); } \
    } \
    if (mr == 6 && nr == 16) { CV_ROWS6(CV_STORE_FULL) return; } \
    CV_ROWS6(CV_STORE_PART)

// mr ≤ 6 rows × nr ≤ 16 columns: A's rows are a[0..5] of each CG_MR-float step of a packed
// panel, B's columns b[0..15] of each CG_NR-float step.
#define CV_A(i) (a + i)
CV_TARGET static void cv_kernel(long kc, const float *restrict a, const float *restrict b, float *restrict c, long ldc, int add,
                                long mr, long nr, const cg_epilogue *e, long row, long col) {
    CV_ROWS6(CV_DECL)
    CV_UNROLL_K
    for (long p = 0; p < kc; p++, a += CG_MR, b += CG_NR) {
        __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
        CV_ROWS6(CV_FMA)
    }
    CV_FINISH
}

// The same with B's row q read in place at base + off[q].
CV_TARGET static void cv_kernel_in_place(long kc, const float *restrict a, const float *restrict base, const long *restrict off,
                                         float *restrict c, long ldc, int add, long mr, long nr, const cg_epilogue *e, long row,
                                         long col) {
    CV_ROWS6(CV_DECL)
    CV_UNROLL_K
    for (long p = 0; p < kc; p++, a += CG_MR) {
        const float *b = base + off[p];
        __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
        CV_ROWS6(CV_FMA)
    }
    CV_FINISH
}
#undef CV_A

// Six rows of a row-major A read in place, lda floats apart (a full row panel of an unpacked A
// is not packed first): rows 0–2 from one base and 3–5 from another, each plus 0, 1 or 2 row
// strides, so one index register and two bases address them all.
#define CV_A(i) (i < 3 ? a0 + (i % 3) * lda : a3 + (i % 3) * lda)
CV_TARGET static void cv_kernel_a_rows(long kc, const float *restrict a, long lda, const float *restrict b, float *restrict c,
                                       long ldc, int add, long mr, long nr, const cg_epilogue *e, long row, long col) {
    CV_ROWS6(CV_DECL)
    const float *a0 = a, *a3 = a + 3 * lda;
    CV_UNROLL_K
    for (long p = 0; p < kc; p++, a0++, a3++, b += CG_NR) {
        __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
        CV_ROWS6(CV_FMA)
    }
    CV_FINISH
}
#undef CV_A

// Six rows of A given as pointers (a batch's separate requests), read in place from index p0.
#define CV_A(i) (r##i + p)
CV_TARGET static void cv_kernel_a_ptrs(long kc, const float *const *a, long p0, const float *restrict b, float *restrict c,
                                       long ldc, int add, long mr, long nr, const cg_epilogue *e, long row, long col) {
    CV_ROWS6(CV_DECL)
    const float *restrict r0 = a[0] + p0, *restrict r1 = a[1] + p0, *restrict r2 = a[2] + p0, *restrict r3 = a[3] + p0,
                          *restrict r4 = a[4] + p0, *restrict r5 = a[5] + p0;
    CV_UNROLL_K
    for (long p = 0; p < kc; p++, b += CG_NR) {
        __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
        CV_ROWS6(CV_FMA)
    }
    CV_FINISH
}
#undef CV_A

static void cv_tile(long kc, const float *a, const float *b, float *c, long ldc, int add, long mr, long nr, const cg_epilogue *e,
                    long row, long col) {
    for (long j = 0; j < nr; j += 16) {
        for (long i = 0; i < mr; i += 6) {
            cv_kernel(kc, a + i, b + j, c + i * ldc + j, ldc, add, cg_min(6, mr - i), cg_min(16, nr - j), e, row + i, col + j);
        }
    }
}

static void cv_tile_in_place(long kc, const float *a, const float *base, const long *off, float *c, long ldc, int add, long mr,
                             long nr, const cg_epilogue *e, long row, long col) {
    for (long j = 0; j < nr; j += 16) {
        for (long i = 0; i < mr; i += 6) {
            cv_kernel_in_place(kc, a + i, base + j, off, c + i * ldc + j, ldc, add, cg_min(6, mr - i), cg_min(16, nr - j), e,
                               row + i, col + j);
        }
    }
}

// A full row panel of A (CG_MR rows) read in place: rows lda floats apart from a, or the row
// pointers a[0 ..< CG_MR] from index p0; the same four 6 × 16 pieces as cv_tile.
static void cv_tile_a_rows(long kc, const float *a, long lda, const float *b, float *c, long ldc, int add, long mr, long nr,
                           const cg_epilogue *e, long row, long col) {
    for (long j = 0; j < nr; j += 16) {
        for (long i = 0; i < mr; i += 6) {
            cv_kernel_a_rows(kc, a + i * lda, lda, b + j, c + i * ldc + j, ldc, add, cg_min(6, mr - i), cg_min(16, nr - j), e, row + i,
                             col + j);
        }
    }
}

static void cv_tile_a_ptrs(long kc, const float *const *a, long p0, const float *b, float *c, long ldc, int add, long mr, long nr,
                           const cg_epilogue *e, long row, long col) {
    for (long j = 0; j < nr; j += 16) {
        for (long i = 0; i < mr; i += 6) {
            cv_kernel_a_ptrs(kc, a + i, p0, b + j, c + i * ldc + j, ldc, add, cg_min(6, mr - i), cg_min(16, nr - j), e, row + i,
                             col + j);
        }
    }
}

// MARK: One row times packed columns

CV_TARGET static void cv_gemv(long n, long k, const float *x, cg_operand b, float *y) {
    for (long j0 = 0; j0 < n; j0 += CG_NR) {
        long panel = b.panel + j0 / CG_NR;
        __m256 s[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        __m256 t[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        for (long kb = 0; kb < cg_blocks(k); kb++) {
            long p0 = cg_block_start(kb, k), kcb = cg_block_start(kb + 1, k) - p0;
            const float *bp = b.data + p0 * b.width + panel * kcb * CG_NR, *xp = x + p0;
            long p = 0;
            for (; p + 2 <= kcb; p += 2, bp += 2 * CG_NR) {
                __m256 x0 = _mm256_broadcast_ss(xp + p), x1 = _mm256_broadcast_ss(xp + p + 1);
                for (int q = 0; q < 4; q++) {
                    s[q] = _mm256_fmadd_ps(x0, _mm256_loadu_ps(bp + 8 * q), s[q]);
                    t[q] = _mm256_fmadd_ps(x1, _mm256_loadu_ps(bp + CG_NR + 8 * q), t[q]);
                }
            }
            for (; p < kcb; p++, bp += CG_NR) {
                __m256 x0 = _mm256_broadcast_ss(xp + p);
                for (int q = 0; q < 4; q++) s[q] = _mm256_fmadd_ps(x0, _mm256_loadu_ps(bp + 8 * q), s[q]);
            }
        }
        long nr = cg_min(CG_NR, n - j0);
        for (int q = 0; q < 4; q++) _mm256_maskstore_ps(y + j0 + 8 * q, cg_lanes8(nr - 8 * q), _mm256_add_ps(s[q], t[q]));
    }
}

// MARK: The direct convolution

// Pixels of a tile: one block of 16 channels (two ymm) × 6 pixels is 12 accumulators, two
// weight vectors and a broadcast: the 16 ymm registers.
#define CV_NP 6
#define CV_UNROLL _Pragma("clang loop unroll(full)")
#define CV_UNROLL_2 _Pragma("clang loop unroll_count(2)")
#define CV_PREFETCH 64

// Sums over cc input channels for one block × NP pixels SW apart (cortado_direct.c's tile).
CV_TARGET static inline __attribute__((always_inline)) void cv_direct_tile(const int NP, const int SW, long cc, long kh, long kw,
                                                                           long row_step, long dw, long plane, const float *x,
                                                                           const float *w, float *acc, int first) {
    __m256 a0[CV_NP], a1[CV_NP];
    CV_UNROLL for (int p = 0; p < NP; p++) {
        a0[p] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(acc + 16 * p);
        a1[p] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(acc + 16 * p + 8);
    }
    if (kh == 1 && kw == 1) {
        // A 1×1 window (Winograd's products over tiles, or a 1×1 convolution): one loop over
        // the channels, without the window loops' bookkeeping around every 2 × NP FMAs, and the
        // weights, which stream through once per use, asked for CV_PREFETCH channels ahead.
        const float *xc = x;
        CV_UNROLL_2 for (long c = 0; c < cc; c++, xc += plane) {
            _mm_prefetch((const char *)(w + 16 * (c + CV_PREFETCH)), _MM_HINT_T0);
            __m256 v0 = _mm256_loadu_ps(w + 16 * c), v1 = _mm256_loadu_ps(w + 16 * c + 8);
            CV_UNROLL for (int p = 0; p < NP; p++) {
                __m256 b = _mm256_broadcast_ss(xc + p * SW);
                a0[p] = _mm256_fmadd_ps(v0, b, a0[p]);
                a1[p] = _mm256_fmadd_ps(v1, b, a1[p]);
            }
        }
        cc = 0;
    }
    for (long c = 0; c < cc; c++) {
        const float *xc = x + c * plane;
        for (long i = 0; i < kh; i++) {
            const float *xr = xc + i * row_step;
            for (long j = 0; j < kw; j++, w += 16) {
                const float *xj = xr + j * dw;
                __m256 v0 = _mm256_loadu_ps(w), v1 = _mm256_loadu_ps(w + 8);
                CV_UNROLL for (int p = 0; p < NP; p++) {
                    __m256 b = _mm256_broadcast_ss(xj + p * SW);
                    a0[p] = _mm256_fmadd_ps(v0, b, a0[p]);
                    a1[p] = _mm256_fmadd_ps(v1, b, a1[p]);
                }
            }
        }
    }
    CV_UNROLL for (int p = 0; p < NP; p++) {
        _mm256_storeu_ps(acc + 16 * p, a0[p]);
        _mm256_storeu_ps(acc + 16 * p + 8, a1[p]);
    }
}

#define CV_DEFINE(NP, SW) \
    CV_TARGET static void cv_direct_##NP##_##SW(long cc, long kh, long kw, long row_step, long dw, long plane, const float *x, \
                                                const float *w, long wstride, float *acc, long bstride, int first) { \
        (void)wstride; (void)bstride; \
        cv_direct_tile(NP, SW, cc, kh, kw, row_step, dw, plane, x, w, acc, first); \
    }
#define CV_WIDTHS(X, SW) X(1, SW) X(2, SW) X(3, SW) X(4, SW) X(5, SW) X(6, SW)
CV_WIDTHS(CV_DEFINE, 1)
CV_WIDTHS(CV_DEFINE, 2)
#define CV_NAME(NP, SW) cv_direct_##NP##_##SW,
static const cd_tile_fn cv_direct_tiles[1][2][CD_NP_MAX] = {{{CV_WIDTHS(CV_NAME, 1)}, {CV_WIDTHS(CV_NAME, 2)}}};
// The same tiles on a channel-blocked input (cortado_blocked.c): pixels 16 · stride floats apart.
CV_WIDTHS(CV_DEFINE, 16)
CV_WIDTHS(CV_DEFINE, 32)
static const cd_tile_fn cv_blocked_tiles[1][2][CD_NP_MAX] = {{{CV_WIDTHS(CV_NAME, 16)}, {CV_WIDTHS(CV_NAME, 32)}}};

// r[i] = pixel i's 8 channels → r[l] = channel l's 8 pixels: pairs of floats, then of float
// pairs, within each 128-bit half, then the halves swapped across.
CV_TARGET static inline void cv_transpose8(__m256 r[8]) {
    __m256 u[8], v[8];
    for (int i = 0; i < 8; i += 2) {
        u[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        u[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int g = 0; g < 8; g += 4) {
        v[g] = _mm256_shuffle_ps(u[g], u[g + 2], 0x44);
        v[g + 1] = _mm256_shuffle_ps(u[g], u[g + 2], 0xEE);
        v[g + 2] = _mm256_shuffle_ps(u[g + 1], u[g + 3], 0x44);
        v[g + 3] = _mm256_shuffle_ps(u[g + 1], u[g + 3], 0xEE);
    }
    for (int j = 0; j < 4; j++) {
        r[j] = _mm256_permute2f128_ps(v[j], v[4 + j], 0x20);
        r[4 + j] = _mm256_permute2f128_ps(v[j], v[4 + j], 0x31);
    }
}

// A 1×1 stride-1 layer from a blocked input (cg_blocked_pointwise_fn, one block): as the
// blocked tiles, but over all k channels (the input's blocks in turn) with the sums in
// registers, finished there and stored: no sums buffer is written and read back. PLANAR: each
// half block's NP pixels are transposed (8 × 8, the pixels past NP zeros) into the rows of its
// channels, ystride floats apart, and only the block's o->lanes[0] channels are stored. HALF: the
// block holds at most 8 channels (24 channels: the second block), so only its first half is
// summed (a 24-channel layer: a quarter fewer FMAs) and a blocked output's other half is written 0.
CV_TARGET static inline __attribute__((always_inline)) void cv_pointwise(const int NP, const int PLANAR, const int HALF, long k,
                                                                         const float *x, long xstride, const float *w,
                                                                         const cg_blocked_out *o, const float *res, float *y,
                                                                         long ystride) {
    __m256 a0[CV_NP], a1[CV_NP];
    CV_UNROLL for (int p = 0; p < NP; p++) {
        a0[p] = _mm256_setzero_ps();
        a1[p] = _mm256_setzero_ps();
    }
    for (long c0 = 0; c0 < k; c0 += 16, x += xstride) {
        const long cn = cg_min(16, k - c0);
        const float *wc = w + 16 * c0;
        for (long c = 0; c < cn; c++) {
            __m256 v0 = _mm256_loadu_ps(wc + 16 * c), v1 = HALF ? v0 : _mm256_loadu_ps(wc + 16 * c + 8);
            CV_UNROLL for (int p = 0; p < NP; p++) {
                __m256 b = _mm256_broadcast_ss(x + c + 16 * p);
                a0[p] = _mm256_fmadd_ps(v0, b, a0[p]);
                if (!HALF) a1[p] = _mm256_fmadd_ps(v1, b, a1[p]);
            }
        }
    }
    const __m256 zero = _mm256_setzero_ps();
    if (HALF && !PLANAR) {
        CV_UNROLL for (int p = 0; p < NP; p++) _mm256_storeu_ps(y + 16 * p + 8, zero);
    }
    CV_UNROLL for (int h = 0; h < (HALF ? 1 : 2); h++) {
        const long lanes = cg_min(8, o->lanes[0] - 8 * h);
        if (PLANAR && lanes <= 0) break;
        const __m256 s = _mm256_loadu_ps(o->s + 8 * h), t = _mm256_loadu_ps(o->t + 8 * h);
        __m256 r[8];
        CV_UNROLL for (int p = 0; p < 8; p++) {
            if (p >= NP) { r[p] = zero; continue; }
            __m256 v = _mm256_fmadd_ps(h ? a1[p] : a0[p], s, t);
            if (res) v = _mm256_add_ps(v, _mm256_loadu_ps(res + 16 * p + 8 * h));
            v = cv_act(v, o->act, o->alpha);
            if (PLANAR) r[p] = v;
            else _mm256_storeu_ps(y + 16 * p + 8 * h, v);
        }
        if (PLANAR) {
            cv_transpose8(r);
            const __m256i pm = cg_lanes8(NP);
            for (long l = 0; l < lanes; l++) _mm256_maskstore_ps(y + (8 * h + l) * ystride, pm, r[l]);
        }
    }
}
#define CV_POINTWISE_DEFINE(NP, PLANAR) \
    CV_TARGET static void cv_pointwise_##NP##_##PLANAR(long k, const float *x, long xstride, const float *w, long wstride, \
                                                       const cg_blocked_out *o, const float *res, long rstride, float *y, \
                                                       long ystride) { \
        (void)wstride; (void)rstride; \
        if (o->lanes[0] <= 8) cv_pointwise(NP, PLANAR, 1, k, x, xstride, w, o, res, y, ystride); \
        else cv_pointwise(NP, PLANAR, 0, k, x, xstride, w, o, res, y, ystride); \
    }
CV_WIDTHS(CV_POINTWISE_DEFINE, 0)
CV_WIDTHS(CV_POINTWISE_DEFINE, 1)
#define CV_POINTWISE_NAME(NP, PLANAR) cv_pointwise_##NP##_##PLANAR,
static const cg_blocked_pointwise_fn cv_pointwise_tiles[1][CD_NP_MAX] = {{CV_WIDTHS(CV_POINTWISE_NAME, 0)}};
static const cg_blocked_pointwise_fn cv_pointwise_planar_tiles[1][CD_NP_MAX] = {{CV_WIDTHS(CV_POINTWISE_NAME, 1)}};

// One block's blocked sums to planar rows: the epilogue on each pixel's 16 channels, then
// 8 × 8 transposes (pixels × channels) into the rows of the block's channels.
CV_TARGET static void cv_direct_finish(const float *acc, long pixels, long lanes, long channel, const cg_epilogue *e, float *dst,
                                       long ld) {
    __m256 s[2] = {_mm256_set1_ps(1.0f), _mm256_set1_ps(1.0f)}, t[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int h = 0; h < 2; h++) {
        __m256i lm = cg_lanes8(lanes - 8 * h);
        if (e && e->scale) s[h] = _mm256_maskload_ps(e->scale + channel + 8 * h, lm);
        if (e && e->shift) t[h] = _mm256_maskload_ps(e->shift + channel + 8 * h, lm);
    }
    for (long q0 = 0; q0 < pixels; q0 += 8) {
        long n = cg_min(8, pixels - q0);
        __m256i pm = cg_lanes8(n);
        for (int h = 0; h < 2 && 8 * h < lanes; h++) {
            __m256 r[8];
            for (int i = 0; i < 8; i++) {
                r[i] = i < n ? _mm256_loadu_ps(acc + (q0 + i) * 16 + 8 * h) : _mm256_setzero_ps();
                if (e) r[i] = cv_epi(r[i], s[h], t[h], e);
            }
            cv_transpose8(r);
            for (long l = 0; l < cg_min(8, lanes - 8 * h); l++) _mm256_maskstore_ps(dst + (8 * h + l) * ld + q0, pm, r[l]);
        }
    }
}

// MARK: Depthwise 3×3

CG_DEPTHWISE_PLANE(cv_depthwise_plane, CV_TARGET)

// MARK: The channel-blocked layout

CG_BLOCKED_KERNELS(cv, CV_TARGET)
CG_BLOCKED_DEPTHWISE(cv_blocked_depthwise8, CV_TARGET, cg_v8, cg_v8i)

// MARK: A stem of few input channels (3×3, stride 2)

// A stem call's epilogue, made once per call: channel o's scale and shift (1 and 0 where the
// epilogue has none or o is past the layer's channels), the activation. Read from this local
// copy, the values are not reloaded through the epilogue's pointers after every store (the
// stores could alias them).
typedef struct {
    float s[24], t[24];
    int act;
    float alpha;
} cv_stem_epi;

// P output pixels from ow0 of row oh for the call's channels as V vectors of 8 (8·V ≤ 24, c0 + 8v
// at wv[v] in cg_direct_pack's blocks, stored at yv[v] + 16·pixel): the channels along the lanes,
// one accumulator per vector and pixel (V·P ≤ 12, beside V weight vectors and the pixel's
// broadcast in the 16 ymm registers), so 24 channels are three vectors and no lane is padding.
// Each tap loads its V weight vectors once and broadcasts each pixel's input value (stride 2
// along the row). EDGE: taps whose column is outside the input are skipped (the border pixels);
// rows outside it are skipped always.
CV_TARGET static inline __attribute__((always_inline)) void cv_stem_pixels(const int V, const int P, const int EDGE, const cg_conv *g,
                                                                           const float *x, const float *const wv[3],
                                                                           const cv_stem_epi *ep, long oh, long ow0,
                                                                           float *const yv[3]) {
    const long H = g->h, W = g->w, col0 = 2 * ow0 - g->pad_w;
    __m256 acc[12];
    CV_UNROLL for (int o = 0; o < V * P; o++) acc[o] = _mm256_setzero_ps();
    for (long c = 0; c < g->channels; c++) {
        for (long i = 0; i < 3; i++) {
            const long ih = 2 * oh - g->pad_h + i;
            if (ih < 0 || ih >= H) continue;
            const float *row = x + (c * H + ih) * W + col0;
            CV_UNROLL for (int j = 0; j < 3; j++) {
                const long tap = (c * 9 + i * 3 + j) * 16;
                __m256 wt[3];
                CV_UNROLL for (int v = 0; v < V; v++) wt[v] = _mm256_loadu_ps(wv[v] + tap);
                CV_UNROLL for (int p = 0; p < P; p++) {
                    if (EDGE && (col0 + 2 * p + j < 0 || col0 + 2 * p + j >= W)) continue;
                    const __m256 b = _mm256_broadcast_ss(row + 2 * p + j);
                    CV_UNROLL for (int v = 0; v < V; v++) acc[v * P + p] = _mm256_fmadd_ps(wt[v], b, acc[v * P + p]);
                }
            }
        }
    }
    const long at = (oh * g->out_w + ow0) * 16;
    CV_UNROLL for (int v = 0; v < V; v++) {
        const __m256 sv = _mm256_loadu_ps(ep->s + 8 * v), tv = _mm256_loadu_ps(ep->t + 8 * v);
        CV_UNROLL for (int p = 0; p < P; p++) {
            _mm256_storeu_ps(yv[v] + at + 16 * p, cv_act(_mm256_fmadd_ps(acc[v * P + p], sv, tv), ep->act, ep->alpha));
        }
    }
}

// Row oh of V vectors of channels: pixels whose three columns lie inside the input in tiles of P,
// the rest (the borders, and a tail shorter than P) one at a time.
CV_TARGET static inline __attribute__((always_inline)) void cv_stem_row(const int V, const int P, const cg_conv *g, const float *x,
                                                                        const float *const wv[3], const cv_stem_epi *ep, long oh,
                                                                        float *const yv[3]) {
    const long OW = g->out_w, pw = g->pad_w;
    // Output columns [lo, hi) read input columns inside [0, W) only.
    const long lo = cg_min(OW, (pw + 1) / 2), hi = g->w - 3 + pw >= 0 ? cg_max(lo, cg_min(OW, (g->w - 3 + pw) / 2 + 1)) : lo;
    long ow = 0;
    for (; ow < lo; ow++) cv_stem_pixels(V, 1, 1, g, x, wv, ep, oh, ow, yv);
    for (; ow + P <= hi; ow += P) cv_stem_pixels(V, P, 0, g, x, wv, ep, oh, ow, yv);
    for (; ow < hi; ow++) cv_stem_pixels(V, 1, 0, g, x, wv, ep, oh, ow, yv);
    for (; ow < OW; ow++) cv_stem_pixels(V, 1, 1, g, x, wv, ep, oh, ow, yv);
}

// cg_blocked_stem_fn: the call's nch channels (≤ 24) as ceil(nch / 8) vectors of 8 (3, 6 or 12
// pixels a tile); the lanes past them, up to the end of the last block, written 0.
CV_TARGET static void cv_blocked_stem(const cg_conv *g, const float *x, const float *w, long m, long c0, long nch,
                                      const cg_epilogue *e, long oh, float *y) {
    const long OW = g->out_w, plane = g->out_h * OW, k = g->channels * 9;
    const long real = cg_min(nch, m - c0), vectors = (nch + 7) / 8, all = (nch + 15) / 16 * 2;
    cv_stem_epi ep = {.act = e ? (int)e->activation : CG_ACT_NONE, .alpha = e ? e->alpha : 0.0f};
    for (long o = 0; o < 24; o++) {
        ep.s[o] = e && o < real ? cg_epi_scale(e, c0 + o) : 1.0f;
        ep.t[o] = e && o < real ? cg_epi_shift(e, c0 + o) : 0.0f;
    }
    const float *wv[3];
    float *yv[3];
    for (long v = 0; v < 3; v++) {
        const long ch = c0 + 8 * cg_min(v, vectors - 1);
        wv[v] = w + ch / 16 * k * 16 + ch % 16;
        yv[v] = y + ch / 16 * plane * 16 + ch % 16;
    }
    if (vectors == 3) cv_stem_row(3, 3, g, x, wv, &ep, oh, yv);
    else if (vectors == 2) cv_stem_row(2, 6, g, x, wv, &ep, oh, yv);
    else cv_stem_row(1, 12, g, x, wv, &ep, oh, yv);
    for (long v = vectors; v < all; v++) {
        const long ch = c0 + 8 * v;
        float *out = y + ch / 16 * plane * 16 + (oh * OW) * 16 + ch % 16;
        for (long p = 0; p < OW; p++) _mm256_storeu_ps(out + 16 * p, _mm256_setzero_ps());
    }
}

const cg_kernels cg_kernels_avx2 = {
    .tile = cv_tile,
    .tile_in_place = cv_tile_in_place,
    .tile_a_rows = cv_tile_a_rows,
    .tile_a_ptrs = cv_tile_a_ptrs,
    .pack_a_panel = cg_plain_pack_a_panel,
    .gemv = cv_gemv,
    .direct_blocks = 1,
    .direct_np = CV_NP,
    .direct_tiles = cv_direct_tiles,
    .direct_finish = cv_direct_finish,
    .depthwise_plane = cv_depthwise_plane,
    .max_pool_row = cg_plain_max_pool_row,
    .blocked_tiles = cv_blocked_tiles,
    .blocked_finish = cv_blocked_finish,
    .blocked_depthwise = cv_blocked_depthwise,
    .blocked_depthwise8 = cv_blocked_depthwise8,
    .blocked_stem = cv_blocked_stem,
    .blocked_pointwise = cv_pointwise_tiles,
    .blocked_pointwise_planar = cv_pointwise_planar_tiles,
};

#endif
