// The AVX-512F path (x86-64): every function is compiled for AVX-512F+VL and FMA by its own
// target attribute, and runs only when cg_isa() chose this path.
#include "cg_kernels.h"

#if defined(__x86_64__)

#include <immintrin.h>

#include "cg_simd.h"

// MARK: Micro-kernels

#define CG_ROWS12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define CG_ROWS8(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define CG_ROWS4(X) X(0) X(1) X(2) X(3)

// C[mr × nr] (=|+=) A-panel · B-panel over kc, then the epilogue e (when not NULL) for the
// tile at row `row`, column `col` of the whole C: `name` computes the rows ROWS lists (mr ≤
// their count; A's panel stride stays CG_MR) and nr ≤ 32 columns, two zmm accumulators a row.
#define CG_DECL(i) __m512 c##i##0 = _mm512_setzero_ps(), c##i##1 = _mm512_setzero_ps();
#define CG_FMA(i) { __m512 ai = _mm512_set1_ps(CG_A(i)); c##i##0 = _mm512_fmadd_ps(ai, b0, c##i##0); c##i##1 = _mm512_fmadd_ps(ai, b1, c##i##1); }
#define CG_STORE_FULL(i) { float *ci = c + i * ldc; \
    if (add) { c##i##0 = _mm512_add_ps(c##i##0, _mm512_loadu_ps(ci)); c##i##1 = _mm512_add_ps(c##i##1, _mm512_loadu_ps(ci + 16)); } \
    if (e) { CG_EPI_ROW(i) c##i##0 = cg_epi(c##i##0, s0, t0, e); c##i##1 = cg_epi(c##i##1, s1, t1, e); } \
    _mm512_storeu_ps(ci, c##i##0); _mm512_storeu_ps(ci + 16, c##i##1); }
#define CG_STORE_PART(i) if (i < mr) { float *ci = c + i * ldc; \
    if (add) { c##i##0 = _mm512_add_ps(c##i##0, _mm512_maskz_loadu_ps(m0, ci)); c##i##1 = _mm512_add_ps(c##i##1, _mm512_maskz_loadu_ps(m1, ci + 16)); } \
    if (e) { CG_EPI_ROW(i) c##i##0 = cg_epi(c##i##0, s0, t0, e); c##i##1 = cg_epi(c##i##1, s1, t1, e); } \
    _mm512_mask_storeu_ps(ci, m0, c##i##0); _mm512_mask_storeu_ps(ci + 16, m1, c##i##1); }
// Per-row scale and shift of row i (when the channels run along the rows).
#define CG_EPI_ROW(i) if (!e->per_column) { \
    s0 = s1 = e->scale ? _mm512_set1_ps(e->scale[row + i]) : _mm512_set1_ps(1.0f); \
    t0 = t1 = e->shift ? _mm512_set1_ps(e->shift[row + i]) : _mm512_setzero_ps(); }
// Per-column scale and shift of the tile's columns (when the channels run along the columns).
#define CG_EPI_COLUMNS(m0, m1) __m512 s0 = _mm512_set1_ps(1.0f), s1 = s0, t0 = _mm512_setzero_ps(), t1 = t0; \
    if (e && e->per_column) { \
        if (e->scale) { s0 = _mm512_maskz_loadu_ps(m0, e->scale + col); s1 = _mm512_maskz_loadu_ps(m1, e->scale + col + 16); } \
        if (e->shift) { t0 = _mm512_maskz_loadu_ps(m0, e->shift + col); t1 = _mm512_maskz_loadu_ps(m1, e->shift + col + 16); } \
    }
// The body of a kernel over 32 columns: BROW is the k-th row of the B panel, BNEXT moves to
// the next (a packed panel: the next CG_NR floats; a panel read in place: the next offset).
#define CG_KERNEL_32_BODY(ROWS, rows, BROW, BNEXT) \
    ROWS(CG_DECL) \
    for (long i = 0; i < mr; i++) { \
        _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0); \
        _mm_prefetch((const char *)(c + i * ldc + 16), _MM_HINT_T0); \
    } \
    long p = 0; \
    for (; p + 4 <= kc; p += 4) { \
        for (int u = 0; u < 4; u++) { \
            const float *bk = BROW; \
            __m512 b0 = _mm512_loadu_ps(bk), b1 = _mm512_loadu_ps(bk + 16); \
            ROWS(CG_FMA) \
            CG_A_NEXT; BNEXT; \
        } \
    } \
    for (; p < kc; p++) { \
        const float *bk = BROW; \
        __m512 b0 = _mm512_loadu_ps(bk), b1 = _mm512_loadu_ps(bk + 16); \
        ROWS(CG_FMA) \
        CG_A_NEXT; BNEXT; \
    } \
    __mmask16 m0 = cg_lanes(nr), m1 = cg_lanes(nr - 16); \
    CG_EPI_COLUMNS(m0, m1) \
    if (mr == rows && nr == CG_NR) { ROWS(CG_STORE_FULL) return; } \
    ROWS(CG_STORE_PART)
#define CG_KERNEL_32(name, ROWS, rows) \
CG_TARGET static void name(long kc, const float *restrict a, const float *restrict b, float *restrict c, long ldc, \
                           int add, long mr, long nr, const cg_epilogue *e, long row, long col) { \
    CG_KERNEL_32_BODY(ROWS, rows, b, b += CG_NR) \
}
// B's row k read in place at base + off[k] (a convolution's input, see cg_conv_rows).
#define CG_KERNEL_32_IN_PLACE(name, ROWS, rows) \
CG_TARGET static void name(long kc, const float *restrict a, const float *restrict base, const long *restrict off, \
                           float *restrict c, long ldc, int add, long mr, long nr, const cg_epilogue *e, long row, long col) { \
    long q = 0; \
    CG_KERNEL_32_BODY(ROWS, rows, base + off[q], q++) \
}

// The same for a panel with at most 16 valid columns (one zmm a row).
#define CG_DECL1(i) __m512 c##i##0 = _mm512_setzero_ps();
#define CG_FMA1(i) c##i##0 = _mm512_fmadd_ps(_mm512_set1_ps(CG_A(i)), b0, c##i##0);
#define CG_STORE1(i) if (i < mr) { float *ci = c + i * ldc; \
    if (add) c##i##0 = _mm512_add_ps(c##i##0, _mm512_maskz_loadu_ps(m0, ci)); \
    if (e) { CG_EPI_ROW(i) c##i##0 = cg_epi(c##i##0, s0, t0, e); } \
    _mm512_mask_storeu_ps(ci, m0, c##i##0); }
#define CG_KERNEL_16_BODY(ROWS, BROW, BNEXT) \
    ROWS(CG_DECL1) \
    for (long p = 0; p < kc; p++) { \
        __m512 b0 = _mm512_loadu_ps(BROW); \
        ROWS(CG_FMA1) \
        CG_A_NEXT; BNEXT; \
    } \
    __mmask16 m0 = cg_lanes(nr); \
    CG_EPI_COLUMNS(m0, 0) \
    (void)s1; (void)t1; \
    ROWS(CG_STORE1)
#define CG_KERNEL_16(name, ROWS) \
CG_TARGET static void name(long kc, const float *restrict a, const float *restrict b, float *restrict c, long ldc, \
                           int add, long mr, long nr, const cg_epilogue *e, long row, long col) { \
    CG_KERNEL_16_BODY(ROWS, b, b += CG_NR) \
}
#define CG_KERNEL_16_IN_PLACE(name, ROWS) \
CG_TARGET static void name(long kc, const float *restrict a, const float *restrict base, const long *restrict off, \
                           float *restrict c, long ldc, int add, long mr, long nr, const cg_epilogue *e, long row, long col) { \
    long q = 0; \
    CG_KERNEL_16_BODY(ROWS, base + off[q], q++) \
}

// The six tile shapes of one kind of kernel (names suffixed S), and the call of the narrowest
// that covers an mr × nr tile.
#define CG_KERNEL_SET(K32, K16, S) \
    K32(cg_kernel_12x32##S, CG_ROWS12, 12) K32(cg_kernel_8x32##S, CG_ROWS8, 8) K32(cg_kernel_4x32##S, CG_ROWS4, 4) \
    K16(cg_kernel_12x16##S, CG_ROWS12) K16(cg_kernel_8x16##S, CG_ROWS8) K16(cg_kernel_4x16##S, CG_ROWS4)
#define CG_TILE_CALL(S, ARGS) \
    if (nr > 16) { \
        if (mr > 8) cg_kernel_12x32##S ARGS; else if (mr > 4) cg_kernel_8x32##S ARGS; else cg_kernel_4x32##S ARGS; \
    } else { \
        if (mr > 8) cg_kernel_12x16##S ARGS; else if (mr > 4) cg_kernel_8x16##S ARGS; else cg_kernel_4x16##S ARGS; \
    }

// A's value for row i at the current k, and the step to the next k: a packed row panel.
#define CG_A(i) a[i]
#define CG_A_NEXT a += CG_MR
CG_KERNEL_SET(CG_KERNEL_32, CG_KERNEL_16, )
CG_KERNEL_SET(CG_KERNEL_32_IN_PLACE, CG_KERNEL_16_IN_PLACE, _in_place)
#undef CG_A
#undef CG_A_NEXT

// Twelve rows of a row-major A read in place, lda floats apart: a full row panel of an
// unpacked A is not packed (the broadcasts read each row's floats in turn, as the packed
// panel's would be read). Rows are addressed from three bases (rows 0, 4 and 8) plus 0, 1, 2
// or 3 row strides. The 32-column kernel has its own k loop, not unrolled: unrolled four
// times like the packed kernels, clang (with the frame pointer kept, as SwiftPM builds) ran
// out of registers and spilled accumulators. Reading A in place beats packing it first for the
// inner products' shapes (measured in cortado-bench gemm; figures in bench/README.md).
#define CG_A(i) CG_A_##i
#define CG_A_0 a0[0]
#define CG_A_1 a0[l1]
#define CG_A_2 a0[l2]
#define CG_A_3 a0[l3]
#define CG_A_4 a4[0]
#define CG_A_5 a4[l1]
#define CG_A_6 a4[l2]
#define CG_A_7 a4[l3]
#define CG_A_8 a8[0]
#define CG_A_9 a8[l1]
#define CG_A_10 a8[l2]
#define CG_A_11 a8[l3]
#define CG_A_NEXT (a0++, a4++, a8++)
#define CG_A_ROWS_SETUP const float *a0 = a, *a4 = a + 4 * lda, *a8 = a + 8 * lda; const long l1 = lda, l2 = 2 * lda, l3 = 3 * lda;
#if defined(__clang__)
#define CG_NO_UNROLL _Pragma("clang loop unroll(disable)")
#else
#define CG_NO_UNROLL
#endif
// The body of a 12×32 kernel whose k loop is not unrolled (A in place: the rows' addressing
// as CG_A and CG_A_NEXT say, with k at p).
#define CG_KERNEL_12X32_ROLLED_BODY \
    CG_ROWS12(CG_DECL) \
    for (long i = 0; i < mr; i++) { \
        _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0); \
        _mm_prefetch((const char *)(c + i * ldc + 16), _MM_HINT_T0); \
    } \
    CG_NO_UNROLL \
    for (long p = 0; p < kc; p++) { \
        __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16); \
        CG_ROWS12(CG_FMA) \
        CG_A_NEXT; b += CG_NR; \
    } \
    __mmask16 m0 = cg_lanes(nr), m1 = cg_lanes(nr - 16); \
    CG_EPI_COLUMNS(m0, m1) \
    if (mr == 12 && nr == CG_NR) { CG_ROWS12(CG_STORE_FULL) return; } \
    CG_ROWS12(CG_STORE_PART)
CG_TARGET __attribute__((noinline)) static void cg_kernel_12x32_a_rows(long kc, const float *restrict a, long lda, const float *restrict b,
                                                                      float *restrict c, long ldc, int add, long mr, long nr,
                                                                      const cg_epilogue *e, long row, long col) {
    CG_A_ROWS_SETUP
    CG_KERNEL_12X32_ROLLED_BODY
}
CG_TARGET __attribute__((noinline)) static void cg_kernel_12x16_a_rows(long kc, const float *restrict a, long lda, const float *restrict b,
                                                                      float *restrict c, long ldc, int add, long mr, long nr,
                                                                      const cg_epilogue *e, long row, long col) {
    CG_A_ROWS_SETUP
    CG_KERNEL_16_BODY(CG_ROWS12, b, b += CG_NR)
}
#undef CG_A
#undef CG_A_NEXT
#undef CG_A_ROWS_SETUP

// Twelve rows of A given as twelve pointers (rows of separate arrays: a batch's requests),
// read in place at index p. Twelve bases, the index and B's pointer need more general
// registers than x86-64 leaves with the frame pointer kept, so a base may live on the stack
// and be reloaded each step: a load beside 24 FMAs, which the core has ports to spare for.
#define CG_A(i) r##i[p]
#define CG_A_NEXT ((void)0)
#define CG_A_PTRS_SETUP const float *restrict r0 = a[0] + p0, *restrict r1 = a[1] + p0, *restrict r2 = a[2] + p0, \
    *restrict r3 = a[3] + p0, *restrict r4 = a[4] + p0, *restrict r5 = a[5] + p0, *restrict r6 = a[6] + p0, \
    *restrict r7 = a[7] + p0, *restrict r8 = a[8] + p0, *restrict r9 = a[9] + p0, *restrict r10 = a[10] + p0, \
    *restrict r11 = a[11] + p0;
CG_TARGET __attribute__((noinline)) static void cg_kernel_12x32_a_ptrs(long kc, const float *const *a, long p0, const float *restrict b,
                                                                      float *restrict c, long ldc, int add, long mr, long nr,
                                                                      const cg_epilogue *e, long row, long col) {
    CG_A_PTRS_SETUP
    CG_KERNEL_12X32_ROLLED_BODY
}
CG_TARGET __attribute__((noinline)) static void cg_kernel_12x16_a_ptrs(long kc, const float *const *a, long p0, const float *restrict b,
                                                                      float *restrict c, long ldc, int add, long mr, long nr,
                                                                      const cg_epilogue *e, long row, long col) {
    CG_A_PTRS_SETUP
    CG_KERNEL_16_BODY(CG_ROWS12, b, b += CG_NR)
}
#undef CG_A
#undef CG_A_NEXT
#undef CG_A_PTRS_SETUP

// The kernel for an mr × nr tile: the narrowest that covers it.
CG_TARGET static void cg_tile(long kc, const float *a, const float *b, float *c, long ldc, int add, long mr, long nr,
                                     const cg_epilogue *e, long row, long col) {
    CG_TILE_CALL(, (kc, a, b, c, ldc, add, mr, nr, e, row, col))
}

// The same with B's rows read in place.
CG_TARGET static void cg_tile_in_place(long kc, const float *a, const float *base, const long *off, float *c, long ldc,
                                              int add, long mr, long nr, const cg_epilogue *e, long row, long col) {
    CG_TILE_CALL(_in_place, (kc, a, base, off, c, ldc, add, mr, nr, e, row, col))
}

// A full row panel of A read in place (rows lda apart, or row pointers): 32 or 16 columns.
static void cg_tile_a_rows(long kc, const float *a, long lda, const float *b, float *c, long ldc, int add, long mr, long nr,
                           const cg_epilogue *e, long row, long col) {
    if (nr > 16) cg_kernel_12x32_a_rows(kc, a, lda, b, c, ldc, add, mr, nr, e, row, col);
    else cg_kernel_12x16_a_rows(kc, a, lda, b, c, ldc, add, mr, nr, e, row, col);
}
static void cg_tile_a_ptrs(long kc, const float *const *a, long p0, const float *b, float *c, long ldc, int add, long mr, long nr,
                           const cg_epilogue *e, long row, long col) {
    if (nr > 16) cg_kernel_12x32_a_ptrs(kc, a, p0, b, c, ldc, add, mr, nr, e, row, col);
    else cg_kernel_12x16_a_ptrs(kc, a, p0, b, c, ldc, add, mr, nr, e, row, col);
}

// MARK: Packing


// A full row panel of row-major A, k values [0, kcb): 12 rows × 16 k at a time are transposed
// in registers (pairs of floats, then of float pairs, then 128-bit lanes) into 16 rows of 12.
CG_TARGET static void cg_pack_a_panel(const float *src, long lda, long kcb, float *dst) {
    long p = 0;
    for (; p + 16 <= kcb; p += 16) {
        __m512 r[CG_MR], t[CG_MR], u[CG_MR];
        for (int i = 0; i < CG_MR; i++) r[i] = _mm512_loadu_ps(src + i * lda + p);
        for (int i = 0; i < CG_MR; i += 2) {
            t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
            t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
        }
        // u[4g + c], lane L: column 4L + c of rows 4g ... 4g+3.
        for (int g = 0; g < CG_MR; g += 4) {
            u[g] = _mm512_shuffle_ps(t[g], t[g + 2], 0x44);
            u[g + 1] = _mm512_shuffle_ps(t[g], t[g + 2], 0xEE);
            u[g + 2] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0x44);
            u[g + 3] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0xEE);
        }
        float *out = dst + p * CG_MR;
        for (int c = 0; c < 4; c++) {
            __m512 v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x44), v1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xEE);
            __m512 w0 = _mm512_shuffle_f32x4(u[8 + c], u[8 + c], 0x44), w1 = _mm512_shuffle_f32x4(u[8 + c], u[8 + c], 0xEE);
            // Column 4L + c: 12 values (the 4 lanes past them are not stored).
            _mm512_mask_storeu_ps(out + (0 + c) * CG_MR, 0x0FFF, _mm512_shuffle_f32x4(v0, w0, 0x88));
            _mm512_mask_storeu_ps(out + (4 + c) * CG_MR, 0x0FFF, _mm512_shuffle_f32x4(v0, w0, 0xDD));
            _mm512_mask_storeu_ps(out + (8 + c) * CG_MR, 0x0FFF, _mm512_shuffle_f32x4(v1, w1, 0x88));
            _mm512_mask_storeu_ps(out + (12 + c) * CG_MR, 0x0FFF, _mm512_shuffle_f32x4(v1, w1, 0xDD));
        }
    }
    for (; p < kcb; p++) {
        for (long i = 0; i < CG_MR; i++) dst[p * CG_MR + i] = src[i * lda + p];
    }
}

// MARK: One row times packed columns

CG_TARGET static void cg_avx512_gemv(long n, long k, const float *x, cg_operand b, float *y) {
    for (long j0 = 0; j0 < n; j0 += CG_NR) {
        long panel = b.panel + j0 / CG_NR;
        __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps(), t0 = _mm512_setzero_ps(), t1 = _mm512_setzero_ps();
        __m512 u0 = _mm512_setzero_ps(), u1 = _mm512_setzero_ps(), v0 = _mm512_setzero_ps(), v1 = _mm512_setzero_ps();
        for (long kb = 0; kb < cg_blocks(k); kb++) {
            long p0 = cg_block_start(kb, k), kcb = cg_block_start(kb + 1, k) - p0;
            const float *bp = b.data + p0 * b.width + panel * kcb * CG_NR;
            const float *xp = x + p0;
            long p = 0;
            for (; p + 4 <= kcb; p += 4, bp += 4 * CG_NR) {
                __m512 x0 = _mm512_set1_ps(xp[p]), x1 = _mm512_set1_ps(xp[p + 1]);
                __m512 x2 = _mm512_set1_ps(xp[p + 2]), x3 = _mm512_set1_ps(xp[p + 3]);
                s0 = _mm512_fmadd_ps(x0, _mm512_loadu_ps(bp), s0);
                s1 = _mm512_fmadd_ps(x0, _mm512_loadu_ps(bp + 16), s1);
                t0 = _mm512_fmadd_ps(x1, _mm512_loadu_ps(bp + 32), t0);
                t1 = _mm512_fmadd_ps(x1, _mm512_loadu_ps(bp + 48), t1);
                u0 = _mm512_fmadd_ps(x2, _mm512_loadu_ps(bp + 64), u0);
                u1 = _mm512_fmadd_ps(x2, _mm512_loadu_ps(bp + 80), u1);
                v0 = _mm512_fmadd_ps(x3, _mm512_loadu_ps(bp + 96), v0);
                v1 = _mm512_fmadd_ps(x3, _mm512_loadu_ps(bp + 112), v1);
            }
            for (; p < kcb; p++, bp += CG_NR) {
                __m512 x0 = _mm512_set1_ps(xp[p]);
                s0 = _mm512_fmadd_ps(x0, _mm512_loadu_ps(bp), s0);
                s1 = _mm512_fmadd_ps(x0, _mm512_loadu_ps(bp + 16), s1);
            }
        }
        s0 = _mm512_add_ps(_mm512_add_ps(s0, t0), _mm512_add_ps(u0, v0));
        s1 = _mm512_add_ps(_mm512_add_ps(s1, t1), _mm512_add_ps(u1, v1));
        long nr = cg_min(CG_NR, n - j0);
        _mm512_mask_storeu_ps(y + j0, cg_lanes(nr), s0);
        _mm512_mask_storeu_ps(y + j0 + 16, cg_lanes(nr - 16), s1);
    }
}

// MARK: The direct convolution

// Pixels of a tile: 2 blocks × 14 accumulators + 2 weight vectors fit the 32 zmm registers.
#define CD_NP 14

// MARK: The tile

// Sums over cc input channels for OB blocks × NP pixels of one output row, SW apart in the
// input: x is the padded input at the tile's first pixel (channel c0, window corner), w the
// first block's weights at k = c0·kh·kw (the second block's wstride floats further), acc the
// blocked sums (pixel p of block b at acc + b·bstride + 16p), zeroed first when `first`.
#define CD_UNROLL _Pragma("clang loop unroll(full)")
#define CD_UNROLL_2 _Pragma("clang loop unroll_count(2)")
#define CD_PREFETCH 64
CG_TARGET static inline __attribute__((always_inline)) void cd_tile(const int OB, const int NP, const int SW, long cc, long kh, long kw,
                                                                    long row_step, long dw, long plane, const float *x,
                                                                    const float *w, long wstride, float *acc, long bstride,
                                                                    int first) {
    __m512 a0[CD_NP], a1[CD_NP];
    CD_UNROLL for (int p = 0; p < NP; p++) {
        a0[p] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + 16 * p);
        if (OB == 2) a1[p] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + bstride + 16 * p);
    }
    const float *wa = w, *wb = w + wstride;
    if (kh == 1 && kw == 1) {
        // A 1×1 window (a 1×1 convolution, or Winograd's products over tiles): one loop over
        // the channels, without the window loops' bookkeeping around every 2 × NP FMAs.
        const float *xc = x;
        CD_UNROLL_2 for (long c = 0; c < cc; c++, xc += plane) {
            // The weights stream through once per use (from memory the first time): ask for
            // them CD_PREFETCH channels ahead, further than the hardware's stream prefetch.
            _mm_prefetch((const char *)(wa + 16 * (c + CD_PREFETCH)), _MM_HINT_T0);
            if (OB == 2) _mm_prefetch((const char *)(wb + 16 * (c + CD_PREFETCH)), _MM_HINT_T0);
            __m512 v0 = _mm512_loadu_ps(wa + 16 * c), v1 = _mm512_setzero_ps();
            if (OB == 2) v1 = _mm512_loadu_ps(wb + 16 * c);
            CD_UNROLL for (int p = 0; p < NP; p++) {
                __m512 b = _mm512_set1_ps(xc[p * SW]);
                a0[p] = _mm512_fmadd_ps(v0, b, a0[p]);
                if (OB == 2) a1[p] = _mm512_fmadd_ps(v1, b, a1[p]);
            }
        }
        cc = 0;
    }
    for (long c = 0; c < cc; c++) {
        const float *xc = x + c * plane;
        for (long i = 0; i < kh; i++) {
            const float *xr = xc + i * row_step;
            for (long j = 0; j < kw; j++) {
                const float *xj = xr + j * dw;
                __m512 v0 = _mm512_loadu_ps(wa), v1 = _mm512_setzero_ps();
                wa += 16;
                if (OB == 2) { v1 = _mm512_loadu_ps(wb); wb += 16; }
                CD_UNROLL for (int p = 0; p < NP; p++) {
                    __m512 b = _mm512_set1_ps(xj[p * SW]);
                    a0[p] = _mm512_fmadd_ps(v0, b, a0[p]);
                    if (OB == 2) a1[p] = _mm512_fmadd_ps(v1, b, a1[p]);
                }
            }
        }
    }
    CD_UNROLL for (int p = 0; p < NP; p++) {
        _mm512_storeu_ps(acc + 16 * p, a0[p]);
        if (OB == 2) _mm512_storeu_ps(acc + bstride + 16 * p, a1[p]);
    }
}

#define CD_DEFINE(OB, NP, SW) \
    CG_TARGET static void cd_tile_##OB##_##NP##_##SW(long cc, long kh, long kw, long row_step, long dw, long plane, const float *x, \
                                                     const float *w, long wstride, float *acc, long bstride, int first) { \
        cd_tile(OB, NP, SW, cc, kh, kw, row_step, dw, plane, x, w, wstride, acc, bstride, first); \
    }
#define CD_WIDTHS(X, OB, SW) X(OB, 1, SW) X(OB, 2, SW) X(OB, 3, SW) X(OB, 4, SW) X(OB, 5, SW) X(OB, 6, SW) X(OB, 7, SW) \
    X(OB, 8, SW) X(OB, 9, SW) X(OB, 10, SW) X(OB, 11, SW) X(OB, 12, SW) X(OB, 13, SW) X(OB, 14, SW)
CD_WIDTHS(CD_DEFINE, 1, 1) CD_WIDTHS(CD_DEFINE, 2, 1) CD_WIDTHS(CD_DEFINE, 1, 2) CD_WIDTHS(CD_DEFINE, 2, 2)
#define CD_NAME(OB, NP, SW) cd_tile_##OB##_##NP##_##SW,
// [blocks − 1][stride − 1][pixels − 1]
static const cd_tile_fn cd_tiles[2][2][CD_NP_MAX] = {
    {{CD_WIDTHS(CD_NAME, 1, 1)}, {CD_WIDTHS(CD_NAME, 1, 2)}},
    {{CD_WIDTHS(CD_NAME, 2, 1)}, {CD_WIDTHS(CD_NAME, 2, 2)}},
};
// The same tiles on a channel-blocked input (cortado_blocked.c): pixels 16 · stride floats apart.
CD_WIDTHS(CD_DEFINE, 1, 16) CD_WIDTHS(CD_DEFINE, 2, 16) CD_WIDTHS(CD_DEFINE, 1, 32) CD_WIDTHS(CD_DEFINE, 2, 32)
static const cd_tile_fn cd_blocked_tiles[2][2][CD_NP_MAX] = {
    {{CD_WIDTHS(CD_NAME, 1, 16)}, {CD_WIDTHS(CD_NAME, 1, 32)}},
    {{CD_WIDTHS(CD_NAME, 2, 16)}, {CD_WIDTHS(CD_NAME, 2, 32)}},
};

// MARK: Finishing a unit

// r[i] = pixel i (16 channels) → r[l] = channel l of the 16 pixels.
CG_TARGET static inline void cd_transpose16(__m512 r[16]) {
    __m512 t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    // u[4g + j], 128-bit lane L: channel 4L + j of pixels 4g … 4g+3.
    for (int g = 0; g < 16; g += 4) {
        u[g] = _mm512_shuffle_ps(t[g], t[g + 2], 0x44);
        u[g + 1] = _mm512_shuffle_ps(t[g], t[g + 2], 0xEE);
        u[g + 2] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0x44);
        u[g + 3] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0xEE);
    }
    for (int j = 0; j < 4; j++) {
        __m512 v0 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x88), v1 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xDD);
        __m512 w0 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x88), w1 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xDD);
        r[j] = _mm512_shuffle_f32x4(v0, w0, 0x88);
        r[8 + j] = _mm512_shuffle_f32x4(v0, w0, 0xDD);
        r[4 + j] = _mm512_shuffle_f32x4(v1, w1, 0x88);
        r[12 + j] = _mm512_shuffle_f32x4(v1, w1, 0xDD);
    }
}

// One block's `pixels` blocked sums: the epilogue on each vector, then channel l (l < lanes) of
// the pixels to dst + l·ld.
CG_TARGET static void cd_finish_block(const float *acc, long pixels, long lanes, long channel, const cg_epilogue *e, float *dst,
                                      long ld) {
    __mmask16 lm = cg_lanes(lanes);
    __m512 s = _mm512_set1_ps(1.0f), t = _mm512_setzero_ps();
    if (e && e->scale) s = _mm512_maskz_loadu_ps(lm, e->scale + channel);
    if (e && e->shift) t = _mm512_maskz_loadu_ps(lm, e->shift + channel);
    for (long q0 = 0; q0 < pixels; q0 += 16) {
        long n = cg_min(16, pixels - q0);
        __m512 r[16];
        for (int i = 0; i < 16; i++) {
            r[i] = i < n ? _mm512_loadu_ps(acc + (q0 + i) * 16) : _mm512_setzero_ps();
            if (e) r[i] = cg_epi(r[i], s, t, e);
        }
        cd_transpose16(r);
        __mmask16 pm = cg_lanes(n);
        for (long l = 0; l < lanes; l++) _mm512_mask_storeu_ps(dst + l * ld + q0, pm, r[l]);
    }
}

// A 1×1 stride-1 layer from a blocked input (cg_blocked_pointwise_fn): OB blocks × NP pixels
// as cd_tile reads a blocked input, but over all k channels (the input's blocks in turn) with
// the sums in registers, finished there and stored (PLANAR: transposed into the channels'
// rows): no sums buffer is written and read back.
CG_TARGET static inline __attribute__((always_inline)) void cd_pointwise(const int OB, const int NP, const int PLANAR, long k,
                                                                         const float *x, long xstride, const float *w,
                                                                         long wstride, const cg_blocked_out *o, const float *res,
                                                                         long rstride, float *y, long ystride) {
    __m512 a0[CD_NP], a1[CD_NP];
    CD_UNROLL for (int p = 0; p < NP; p++) {
        a0[p] = _mm512_setzero_ps();
        a1[p] = _mm512_setzero_ps();
    }
    const float *wa = w, *wb = w + wstride;
    for (long c0 = 0; c0 < k; c0 += 16, x += xstride) {
        const long cn = cg_min(16, k - c0);
        CD_UNROLL_2 for (long c = 0; c < cn; c++) {
            __m512 v0 = _mm512_loadu_ps(wa + 16 * (c0 + c)), v1 = _mm512_setzero_ps();
            if (OB == 2) v1 = _mm512_loadu_ps(wb + 16 * (c0 + c));
            CD_UNROLL for (int p = 0; p < NP; p++) {
                __m512 b = _mm512_set1_ps(x[c + 16 * p]);
                a0[p] = _mm512_fmadd_ps(v0, b, a0[p]);
                if (OB == 2) a1[p] = _mm512_fmadd_ps(v1, b, a1[p]);
            }
        }
    }
    const __m512 zero = _mm512_setzero_ps(), alpha = _mm512_set1_ps(o->alpha);
    CD_UNROLL for (int j = 0; j < OB; j++) {
        const __m512 s = _mm512_loadu_ps(o->s + 16 * j), t = _mm512_loadu_ps(o->t + 16 * j);
        __m512 r[16];
        CD_UNROLL for (int p = 0; p < 16; p++) {
            if (p >= NP) { r[p] = zero; continue; }
            __m512 v = _mm512_fmadd_ps(j ? a1[p] : a0[p], s, t);
            if (res) v = _mm512_add_ps(v, _mm512_loadu_ps(res + j * rstride + 16 * p));
            if (o->act == CG_ACT_RELU) v = _mm512_max_ps(zero, v); // NaN stays NaN, as in cg_epi
            else if (o->act == CG_ACT_LEAKY_RELU) v = _mm512_mask_mul_ps(v, _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), v, alpha);
            if (PLANAR) r[p] = v;
            else _mm512_storeu_ps(y + j * ystride + 16 * p, v);
        }
        if (PLANAR) {
            cd_transpose16(r);
            for (long l = 0; l < o->lanes[j]; l++) _mm512_mask_storeu_ps(y + (16 * j + l) * ystride, cg_lanes(NP), r[l]);
        }
    }
}
#define CD_POINTWISE_DEFINE(OB, NP, PLANAR) \
    CG_TARGET static void cd_pointwise_##OB##_##NP##_##PLANAR(long k, const float *x, long xstride, const float *w, long wstride, \
                                                              const cg_blocked_out *o, const float *res, long rstride, float *y, \
                                                              long ystride) { \
        cd_pointwise(OB, NP, PLANAR, k, x, xstride, w, wstride, o, res, rstride, y, ystride); \
    }
CD_WIDTHS(CD_POINTWISE_DEFINE, 1, 0) CD_WIDTHS(CD_POINTWISE_DEFINE, 2, 0)
CD_WIDTHS(CD_POINTWISE_DEFINE, 1, 1) CD_WIDTHS(CD_POINTWISE_DEFINE, 2, 1)
#define CD_POINTWISE_NAME(OB, NP, PLANAR) cd_pointwise_##OB##_##NP##_##PLANAR,
static const cg_blocked_pointwise_fn cd_pointwise_tiles[2][CD_NP_MAX] = {
    {CD_WIDTHS(CD_POINTWISE_NAME, 1, 0)},
    {CD_WIDTHS(CD_POINTWISE_NAME, 2, 0)},
};
static const cg_blocked_pointwise_fn cd_pointwise_planar_tiles[2][CD_NP_MAX] = {
    {CD_WIDTHS(CD_POINTWISE_NAME, 1, 1)},
    {CD_WIDTHS(CD_POINTWISE_NAME, 2, 1)},
};

// MARK: 2×2 max pooling

// max(x, y) as the scalar code takes it: y when y >= x, else x.
CG_TARGET static inline __m512 cp_max(__m512 x, __m512 y) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(y, x, _CMP_GE_OQ), x, y);
}

CG_TARGET static void cp_max_pool_2x2_row(const float *r0, const float *r1, float *out, long count, long stride) {
    long i = 0;
    if (stride == 2) {
        const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
        for (; i < count; i += 16) {
            // Inputs [2i, 2i + 2n) for the n = min(16, count − i) outputs of this step.
            long n = count - i < 16 ? count - i : 16;
            __mmask16 lo = cg_lanes(2 * n), hi = cg_lanes(2 * n - 16);
            const float *a = r0 + 2 * i, *b = r1 + 2 * i;
            __m512 a0 = _mm512_maskz_loadu_ps(lo, a), a1 = _mm512_maskz_loadu_ps(hi, a + 16);
            __m512 b0 = _mm512_maskz_loadu_ps(lo, b), b1 = _mm512_maskz_loadu_ps(hi, b + 16);
            __m512 top = cp_max(_mm512_permutex2var_ps(a0, even, a1), _mm512_permutex2var_ps(a0, odd, a1));
            __m512 bottom = cp_max(_mm512_permutex2var_ps(b0, even, b1), _mm512_permutex2var_ps(b0, odd, b1));
            _mm512_mask_storeu_ps(out + i, cg_lanes(n), cp_max(top, bottom));
        }
    } else if (stride == 1) {
        for (; i < count; i += 16) {
            long n = count - i < 16 ? count - i : 16;
            __mmask16 m = cg_lanes(n);
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

// MARK: Depthwise 3×3

CG_DEPTHWISE_PLANE(cp_depthwise_plane, CG_TARGET)

// MARK: The channel-blocked layout

CG_BLOCKED_KERNELS(cp, CG_TARGET)

// MARK: A stem of few input channels (3×3, stride 2)

// Lanes [lo, hi) of a 16-lane load of row elements [start, start + 16) that lie inside [0, w).
static inline __mmask16 cs_inside(long start, long w) {
    long lo = start < 0 ? -start : 0, hi = w - start;
    return (__mmask16)(cg_lanes(hi) & ~cg_lanes(lo));
}

// Output row oh for NCH output channels (16 or 24; nch of them real) from c0: 16 output
// pixels along the lanes and one accumulator per output channel, so no FMA is spent on the
// lanes past m that a tile with the channels along the lanes computes (24 channels fill 1.5
// blocks), and the taps read the input in place: a row's 33 values around 16 stride-2 pixels
// are loaded masked (columns outside the input are zeros: no padded copy) and split into the
// three taps' vectors by permutes; rows outside the input are skipped. The weights are
// broadcast from cg_direct_pack's blocks. Then the epilogue per channel, and the channels
// transposed into the output's blocks of 16.
CG_TARGET static inline __attribute__((always_inline)) void cs_stem(const int NCH, const cg_conv *g, const float *x, const float *w,
                                                                    long m, long c0, long nch, const cg_epilogue *e, long oh,
                                                                    float *y) {
    const long H = g->h, W = g->w, OW = g->out_w, plane = g->out_h * OW, k = g->channels * 9;
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    // Channel o's weight for tap p: block (c0 + o)/16, lane o % 16 (c0 is a block's first).
    const float *w0 = w + c0 * k, *w1 = w0 + 16 * k;
    float s[24], t[24];
    for (int o = 0; o < NCH; o++) {
        int real = e && o < nch && c0 + o < m;
        s[o] = real ? cg_epi_scale(e, c0 + o) : 1.0f;
        t[o] = real ? cg_epi_shift(e, c0 + o) : 0.0f;
    }
    for (long ow0 = 0; ow0 < OW; ow0 += 16) {
        const long base = 2 * ow0 - g->pad_w, pixels = cg_min(16, OW - ow0);
        const __mmask16 ma = cs_inside(base, W), mb = cs_inside(base + 16, W);
        const __mmask16 mc = cs_inside(base + 2, W), md = cs_inside(base + 18, W);
        __m512 acc[24];
        CD_UNROLL for (int o = 0; o < NCH; o++) acc[o] = _mm512_setzero_ps();
        for (long c = 0; c < g->channels; c++) {
            for (long i = 0; i < 3; i++) {
                const long ih = 2 * oh - g->pad_h + i;
                if (ih < 0 || ih >= H) continue;
                const float *row = x + (c * H + ih) * W + base;
                const float *wa = w0 + (c * 9 + i * 3) * 16, *wb = w1 + (c * 9 + i * 3) * 16;
                __m512 a = _mm512_maskz_loadu_ps(ma, row), b = _mm512_maskz_loadu_ps(mb, row + 16);
                // Taps j = 0, 1, 2 of pixel q: columns base + 2q + j.
                __m512 v = _mm512_permutex2var_ps(a, even, b);
                CD_UNROLL for (int o = 0; o < NCH; o++) acc[o] = _mm512_fmadd_ps(v, _mm512_set1_ps(o < 16 ? wa[o] : wb[o - 16]), acc[o]);
                v = _mm512_permutex2var_ps(a, odd, b);
                CD_UNROLL for (int o = 0; o < NCH; o++) acc[o] = _mm512_fmadd_ps(v, _mm512_set1_ps(o < 16 ? wa[16 + o] : wb[o]), acc[o]);
                a = _mm512_maskz_loadu_ps(mc, row + 2);
                b = _mm512_maskz_loadu_ps(md, row + 18);
                v = _mm512_permutex2var_ps(a, even, b);
                CD_UNROLL for (int o = 0; o < NCH; o++) {
                    acc[o] = _mm512_fmadd_ps(v, _mm512_set1_ps(o < 16 ? wa[32 + o] : wb[16 + o]), acc[o]);
                }
            }
        }
        CD_UNROLL for (int o = 0; o < NCH; o++) {
            if (e) acc[o] = cg_epi(acc[o], _mm512_set1_ps(s[o]), _mm512_set1_ps(t[o]), e);
            if (o >= nch || c0 + o >= m) acc[o] = _mm512_setzero_ps();
        }
        CD_UNROLL for (int blk = 0; blk < (NCH + 15) / 16; blk++) {
            __m512 r[16];
            CD_UNROLL for (int l = 0; l < 16; l++) r[l] = 16 * blk + l < NCH ? acc[16 * blk + l] : _mm512_setzero_ps();
            cd_transpose16(r);
            float *out = y + ((c0 / 16 + blk) * plane + oh * OW + ow0) * 16;
            for (long q = 0; q < pixels; q++) _mm512_storeu_ps(out + 16 * q, r[q]);
        }
    }
}

CG_TARGET static void cs_blocked_stem(const cg_conv *g, const float *x, const float *w, long m, long c0, long nch,
                                      const cg_epilogue *e, long oh, float *y) {
    if (nch <= 16) cs_stem(16, g, x, w, m, c0, nch, e, oh, y);
    else cs_stem(24, g, x, w, m, c0, nch, e, oh, y);
}

const cg_kernels cg_kernels_avx512 = {
    .tile = cg_tile,
    .tile_in_place = cg_tile_in_place,
    .tile_a_rows = cg_tile_a_rows,
    .tile_a_ptrs = cg_tile_a_ptrs,
    .pack_a_panel = cg_pack_a_panel,
    .gemv = cg_avx512_gemv,
    .direct_blocks = 2,
    .direct_np = CD_NP,
    .direct_tiles = cd_tiles,
    .direct_finish = cd_finish_block,
    .depthwise_plane = cp_depthwise_plane,
    .max_pool_row = cp_max_pool_2x2_row,
    .blocked_tiles = cd_blocked_tiles,
    .blocked_finish = cp_blocked_finish,
    .blocked_depthwise = cp_blocked_depthwise,
    .blocked_stem = cs_blocked_stem,
    .blocked_pointwise = cd_pointwise_tiles,
    .blocked_pointwise_planar = cd_pointwise_planar_tiles,
};

#endif
