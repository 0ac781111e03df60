// Cortado's packed, cache-blocked SGEMM (see include/cortado_gemm.h).
//
// Loop order (Goto's): column blocks of CG_NC → k blocks of up to CG_KC (B's block packed,
// kept in L2) → row blocks of CG_MC (A's block packed; a row-major A's full row panels are
// read in place instead) → row panels of CG_MR (the A micro-panel, CG_MR × CG_KC floats,
// stays in L1) → column panels of CG_NR (B micro-panels stream from
// L2) → the micro-kernel, a CG_MR × CG_NR tile of C held in 24 zmm accumulators.
#include "cortado_gemm.h"

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "cg_simd.h"

#define CG_NC 1024
#define CG_MC 144

int cg_available(void) {
    static int known = -1;
    if (known < 0) {
        __builtin_cpu_init();
        known = __builtin_cpu_supports("avx512f") ? 1 : 0;
    }
    return known;
}

static inline long cg_round_up(long v, long r) { return (v + r - 1) / r * r; }
static inline long cg_min(long a, long b) { return a < b ? a : b; }

size_t cg_packed_a_count(long m, long k) { return (size_t)(cg_round_up(m, CG_MR) * k); }
size_t cg_packed_b_count(long k, long n) { return (size_t)(k * cg_round_up(n, CG_NR)); }
size_t cg_workspace_count(void) { return (size_t)(CG_MC * CG_KC + CG_KC * CG_NC + 16); }

// The k blocks: ceil(k / CG_KC) of them, block b covering [cg_block_start(b), cg_block_start(b + 1)).
static inline long cg_blocks(long k) { return (k + CG_KC - 1) / CG_KC; }
static inline long cg_block_start(long b, long k) { return b * k / cg_blocks(k); }

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
// out of registers and spilled accumulators, at half the speed. As it is, 256×512×784 runs
// 1–2 % faster than with A packed first, and 256×10×512 in 40 µs instead of 50–56 µs.
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
CG_TARGET static inline void cg_tile(long kc, const float *a, const float *b, float *c, long ldc, int add, long mr, long nr,
                                     const cg_epilogue *e, long row, long col) {
    CG_TILE_CALL(, (kc, a, b, c, ldc, add, mr, nr, e, row, col))
}

// The same with B's rows read in place.
CG_TARGET static inline void cg_tile_in_place(long kc, const float *a, const float *base, const long *off, float *c, long ldc,
                                              int add, long mr, long nr, const cg_epilogue *e, long row, long col) {
    CG_TILE_CALL(_in_place, (kc, a, base, off, c, ldc, add, mr, nr, e, row, col))
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

// Rows [0, m) × k values [p0, p0+kcb) of A into row panels (zero rows past m).
CG_TARGET static void cg_pack_a_block(cg_operand a, long m, long p0, long kcb, float *dst) {
    for (long i0 = 0; i0 < m; i0 += CG_MR) {
        long mr = cg_min(CG_MR, m - i0);
        if (a.form == CG_ROW_MAJOR) {
            const float *src = a.data + i0 * a.ld + p0;
            if (mr == CG_MR) {
                cg_pack_a_panel(src, a.ld, kcb, dst);
            } else {
                for (long p = 0; p < kcb; p++) {
                    for (long i = 0; i < CG_MR; i++) dst[p * CG_MR + i] = i < mr ? src[i * a.ld + p] : 0.0f;
                }
            }
        } else {
            const float *src = a.data + p0 * a.ld + i0;
            for (long p = 0; p < kcb; p++) {
                for (long i = 0; i < CG_MR; i++) dst[p * CG_MR + i] = i < mr ? src[p * a.ld + i] : 0.0f;
            }
        }
        dst += kcb * CG_MR;
    }
}

void cg_pack_a(cg_operand a, long m, long k, float *dst) {
    long width = cg_round_up(m, CG_MR);
    for (long kb = 0; kb < cg_blocks(k); kb++) {
        long p0 = cg_block_start(kb, k), kcb = cg_block_start(kb + 1, k) - p0;
        cg_pack_a_block(a, m, p0, kcb, dst + p0 * width);
    }
}

// Columns [n0, n0+n) × k values [p0, p0+kcb) of B into column panels of a block.
CG_TARGET static void cg_pack_b_block(cg_operand b, long n0, long n, long p0, long kcb, float *dst) {
    for (long j0 = 0; j0 < n; j0 += CG_NR) {
        long nr = cg_min(CG_NR, n - j0);
        if (b.form == CG_ROW_MAJOR) {
            __mmask16 m0 = cg_lanes(nr), m1 = cg_lanes(nr - 16);
            const float *src = b.data + p0 * b.ld + n0 + j0;
            for (long p = 0; p < kcb; p++) {
                _mm512_storeu_ps(dst + p * CG_NR, _mm512_maskz_loadu_ps(m0, src + p * b.ld));
                _mm512_storeu_ps(dst + p * CG_NR + 16, _mm512_maskz_loadu_ps(m1, src + p * b.ld + 16));
            }
        } else {
            const float *src = b.data + (n0 + j0) * b.ld + p0;
            for (long j = 0; j < CG_NR; j++) {
                if (j < nr) {
                    for (long p = 0; p < kcb; p++) dst[p * CG_NR + j] = src[j * b.ld + p];
                } else {
                    for (long p = 0; p < kcb; p++) dst[p * CG_NR + j] = 0.0f;
                }
            }
        }
        dst += kcb * CG_NR;
    }
}

void cg_pack_b(cg_operand b, long k, long n0, long n, float *dst, long dst_width, long dst_panel) {
    for (long kb = 0; kb < cg_blocks(k); kb++) {
        long p0 = cg_block_start(kb, k), kcb = cg_block_start(kb + 1, k) - p0;
        cg_pack_b_block(b, n0, n, p0, kcb, dst + p0 * dst_width + dst_panel * kcb * CG_NR);
    }
}

// One stretch of a column panel that lies in one output row: panel columns [d, d+len) are
// output (oh, ow0 ...).
typedef struct { long d, oh, ow0, len; } cg_segment;

// Panels packed together: their segments are found once, then each row of the im2col matrix
// (one input channel and kernel offset) is copied into all of them.
#define CG_CONV_GROUP 16

CG_TARGET void cg_pack_conv(const cg_conv *g, const float *x, long n0, long n, float *dst, long dst_width, long dst_panel) {
    long k = g->channels * g->kh * g->kw, khw = g->kh * g->kw;
    cg_segment seg[CG_CONV_GROUP * (CG_NR + 1)];
    long first_seg[CG_CONV_GROUP + 1];
    for (long q0 = 0; q0 < n; q0 += CG_CONV_GROUP * CG_NR) {
        long panels = cg_min(CG_CONV_GROUP, (n - q0 + CG_NR - 1) / CG_NR);
        long count = 0;
        for (long q = 0; q < panels; q++) {
            first_seg[q] = count;
            long j0 = q0 + q * CG_NR, nr = cg_min(CG_NR, n - j0);
            for (long d = 0; d < nr;) {
                long col = n0 + j0 + d, oh = col / g->out_w, ow = col % g->out_w;
                long len = cg_min(nr - d, g->out_w - ow);
                seg[count++] = (cg_segment){d, oh, ow, len};
                d += len;
            }
        }
        first_seg[panels] = count;
        long panel0 = dst_panel + q0 / CG_NR;
        for (long kb = 0; kb < cg_blocks(k); kb++) {
            long p0 = cg_block_start(kb, k), kcb = cg_block_start(kb + 1, k) - p0;
            float *block = dst + p0 * dst_width + panel0 * kcb * CG_NR;
            for (long p = p0; p < p0 + kcb; p++) {
                long c = p / khw, i = p % khw / g->kw, j = p % g->kw;
                const float *plane = x + c * g->h * g->w;
                long dy = i * g->dh - g->pad_h, dx = j * g->dw - g->pad_w;
                // Output columns whose input column ow·sw + dx lies in [0, w).
                long first = dx < 0 ? (-dx + g->sw - 1) / g->sw : 0;
                long last = (g->w - 1 - dx) >= 0 ? (g->w - 1 - dx) / g->sw + 1 : 0;
                for (long q = 0; q < panels; q++) {
                    float *out = block + q * kcb * CG_NR + (p - p0) * CG_NR;
                    long s = first_seg[q], s1 = first_seg[q + 1];
                    if (s1 - s == 1 && seg[s].len == CG_NR && g->sw == 1) {
                        // A whole panel inside one output row.
                        long ih = seg[s].oh * g->sh + dy, lo = seg[s].ow0;
                        if (ih >= 0 && ih < g->h && lo >= first && lo + CG_NR <= last) {
                            const float *src = plane + ih * g->w + lo + dx;
                            _mm512_storeu_ps(out, _mm512_loadu_ps(src));
                            _mm512_storeu_ps(out + 16, _mm512_loadu_ps(src + 16));
                            continue;
                        }
                    }
                    _mm512_storeu_ps(out, _mm512_setzero_ps());
                    _mm512_storeu_ps(out + 16, _mm512_setzero_ps());
                    for (; s < s1; s++) {
                        long ih = seg[s].oh * g->sh + dy;
                        if (ih < 0 || ih >= g->h) continue;
                        const float *row = plane + ih * g->w;
                        long lo = seg[s].ow0 > first ? seg[s].ow0 : first;
                        long hi = cg_min(seg[s].ow0 + seg[s].len, last);
                        float *o = out + seg[s].d - seg[s].ow0;
                        if (g->sw == 1) {
                            for (long ow = lo; ow < hi; ow += 16) {
                                __mmask16 m = cg_lanes(hi - ow);
                                _mm512_mask_storeu_ps(o + ow, m, _mm512_maskz_loadu_ps(m, row + ow + dx));
                            }
                        } else {
                            for (long ow = lo; ow < hi; ow++) o[ow] = row[ow * g->sw + dx];
                        }
                    }
                }
            }
        }
    }
}

// MARK: The GEMM

// Whether twelve rows lda floats apart, read side by side, leave room in a 32 KB 8-way L1 (64
// sets, as on Zen 4 and recent Intel cores): no more than six of them in one set, two ways
// left for B and C. Rows a multiple of 4 KB apart (lda 1024, 2048, ...) all land in one set
// and evict each other: 2048³ ran at 98 GFLOP/s read in place against 107 packed. At lda 512
// (six rows in each of two sets) 256×512×512 still gains (1159 against 1188 µs); 784 floats
// (an MLP's input) spreads the twelve rows over twelve sets.
static int cg_rows_spread(long lda) {
    int count[64] = {0}, most = 0;
    for (long i = 0; i < CG_MR; i++) {
        int set = (int)(((unsigned long)(i * lda) * sizeof(float) >> 6) & 63);
        if (++count[set] > most) most = count[set];
    }
    return most <= 6;
}

// The epilogue on an m × n C that no product touched (k = 0).
CG_TARGET static void cg_finish(float *c, long ldc, long m, long n, const cg_epilogue *e) {
    for (long i = 0; i < m; i++) {
        for (long j = 0; j < n; j += 16) {
            __mmask16 lanes = cg_lanes(n - j);
            float s = 1.0f, t = 0.0f;
            if (!e->per_column) { s = e->scale ? e->scale[i] : 1.0f; t = e->shift ? e->shift[i] : 0.0f; }
            __m512 sv = e->per_column && e->scale ? _mm512_maskz_loadu_ps(lanes, e->scale + j) : _mm512_set1_ps(s);
            __m512 tv = e->per_column && e->shift ? _mm512_maskz_loadu_ps(lanes, e->shift + j) : _mm512_set1_ps(t);
            _mm512_mask_storeu_ps(c + i * ldc + j, lanes, cg_epi(_mm512_maskz_loadu_ps(lanes, c + i * ldc + j), sv, tv, e));
        }
    }
}

// Rows [0, m) × k values [p0, p0+kcb) of an A given as row pointers into one row panel
// (a last, partial one: zero rows past m).
static void cg_pack_a_ptrs(const float *const *rows, long m, long p0, long kcb, float *dst) {
    for (long p = 0; p < kcb; p++) {
        for (long i = 0; i < CG_MR; i++) dst[p * CG_MR + i] = i < m ? rows[i][p0 + p] : 0.0f;
    }
}

// cg_gemm and cg_gemm_rows: A is `a`, or (a_rows not NULL) the rows a_rows[i].
CG_TARGET static void cg_gemm_any(long m, long n, long k, cg_operand a, const float *const *a_rows, cg_operand b, float *c, long ldc,
                                  int accumulate, float *workspace, const cg_epilogue *epilogue) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {
        if (!accumulate) for (long i = 0; i < m; i++) memset(c + i * ldc, 0, (size_t)n * sizeof(float));
        if (epilogue) cg_finish(c, ldc, m, n, epilogue);
        return;
    }
    float *ws = (float *)(((uintptr_t)workspace + 63) & ~(uintptr_t)63);
    int a_rows_spread = !a_rows && a.form == CG_ROW_MAJOR && cg_rows_spread(a.ld);
    float *wa = ws, *wb = ws + CG_MC * CG_KC;
    long nc_step = CG_NC;
    long mc_step = !a_rows && a.form == CG_PACKED ? cg_round_up(m, CG_MR) : CG_MC;
    for (long jc = 0; jc < n; jc += nc_step) {
        long nc = cg_min(nc_step, n - jc);
        for (long kb = 0; kb < cg_blocks(k); kb++) {
            long p0 = cg_block_start(kb, k), kcb = cg_block_start(kb + 1, k) - p0;
            int add = accumulate || p0 > 0;
            const cg_epilogue *finish = p0 + kcb == k ? epilogue : NULL;
            const float *bblk;
            if (b.form == CG_PACKED) {
                bblk = b.data + p0 * b.width + (b.panel + jc / CG_NR) * kcb * CG_NR;
            } else {
                cg_pack_b_block(b, jc, nc, p0, kcb, wb);
                bblk = wb;
            }
            for (long ic = 0; ic < m; ic += mc_step) {
                long mc = cg_min(mc_step, m - ic);
                // A row-major A's full row panels are read in place (when its rows fall in
                // different L1 sets); only a last, partial panel is packed (its kernel reads 12
                // rows).
                long in_place = a_rows || (a.form == CG_ROW_MAJOR && a_rows_spread) ? mc / CG_MR * CG_MR : 0;
                // Packed panels: from ablk, the first for row ir = first_packed.
                const float *ablk;
                long first_packed = in_place;
                if (a_rows) {
                    if (mc > in_place) cg_pack_a_ptrs(a_rows + ic + in_place, mc - in_place, p0, kcb, wa);
                    ablk = wa;
                } else if (a.form == CG_PACKED) {
                    ablk = a.data + p0 * a.width + (a.panel + ic / CG_MR) * kcb * CG_MR;
                } else {
                    cg_operand view = a;
                    view.data = a.form == CG_ROW_MAJOR ? a.data + (ic + in_place) * a.ld : a.data + ic;
                    if (mc > in_place) cg_pack_a_block(view, mc - in_place, p0, kcb, wa);
                    ablk = wa;
                }
                for (long ir = 0; ir < mc; ir += CG_MR) {
                    long mr = cg_min(CG_MR, mc - ir);
                    const float *arow = ir < in_place && !a_rows ? a.data + (ic + ir) * a.ld + p0 : NULL;
                    const float *const *aptrs = ir < in_place && a_rows ? a_rows + ic + ir : NULL;
                    const float *ap = arow || aptrs ? NULL : ablk + ((ir - first_packed) / CG_MR) * kcb * CG_MR;
                    float *crow = c + (ic + ir) * ldc + jc;
                    for (long jr = 0; jr < nc; jr += CG_NR) {
                        long nr = cg_min(CG_NR, nc - jr);
                        const float *bp = bblk + (jr / CG_NR) * kcb * CG_NR;
                        if (aptrs) {
                            if (nr > 16) cg_kernel_12x32_a_ptrs(kcb, aptrs, p0, bp, crow + jr, ldc, add, mr, nr, finish, ic + ir, jc + jr);
                            else cg_kernel_12x16_a_ptrs(kcb, aptrs, p0, bp, crow + jr, ldc, add, mr, nr, finish, ic + ir, jc + jr);
                        } else if (arow) {
                            if (nr > 16) cg_kernel_12x32_a_rows(kcb, arow, a.ld, bp, crow + jr, ldc, add, mr, nr, finish, ic + ir, jc + jr);
                            else cg_kernel_12x16_a_rows(kcb, arow, a.ld, bp, crow + jr, ldc, add, mr, nr, finish, ic + ir, jc + jr);
                        } else {
                            cg_tile(kcb, ap, bp, crow + jr, ldc, add, mr, nr, finish, ic + ir, jc + jr);
                        }
                    }
                }
            }
        }
    }
}

void cg_gemm(long m, long n, long k, cg_operand a, cg_operand b, float *c, long ldc, int accumulate, float *workspace,
             const cg_epilogue *epilogue) {
    cg_gemm_any(m, n, k, a, NULL, b, c, ldc, accumulate, workspace, epilogue);
}

void cg_gemm_rows(long m, long n, long k, const float *const *a_rows, cg_operand b, float *c, long ldc, int accumulate,
                  float *workspace, const cg_epilogue *epilogue) {
    cg_operand none = {0};
    cg_gemm_any(m, n, k, none, a_rows, b, c, ldc, accumulate, workspace, epilogue);
}

CG_TARGET void cg_gemv(long n, long k, const float *x, cg_operand b, float *y) {
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

// MARK: Convolution rows read in place

void cg_conv_padded_size(const cg_conv *g, long *hp, long *wp) {
    long need_h = (g->out_h - 1) * g->sh + (g->kh - 1) * g->dh + 1, need_w = (g->out_w - 1) * g->sw + (g->kw - 1) * g->dw + 1;
    *hp = need_h > g->h + g->pad_h ? need_h : g->h + g->pad_h;
    *wp = need_w > g->w + g->pad_w ? need_w : g->w + g->pad_w;
}

size_t cg_conv_padded_count(const cg_conv *g) {
    long hp, wp;
    cg_conv_padded_size(g, &hp, &wp);
    return (size_t)(g->channels * hp * wp + CG_NR + (g->kw - 1) * g->dw + 16);
}

void cg_conv_pad(const cg_conv *g, const float *x, long c0, long c1, float *xp) {
    long hp, wp;
    cg_conv_padded_size(g, &hp, &wp);
    for (long c = c0; c < c1; c++) {
        float *plane = xp + c * hp * wp;
        for (long r = 0; r < hp; r++) {
            float *row = plane + r * wp;
            long ih = r - g->pad_h;
            if (ih < 0 || ih >= g->h) { memset(row, 0, (size_t)wp * sizeof(float)); continue; }
            long right = wp - g->pad_w - g->w; // columns after the input's (≥ 0 or cut)
            long copy = right >= 0 ? g->w : g->w + right;
            memset(row, 0, (size_t)g->pad_w * sizeof(float));
            if (copy > 0) memcpy(row + g->pad_w, x + (c * g->h + ih) * g->w, (size_t)copy * sizeof(float));
            if (right > 0) memset(row + g->pad_w + g->w, 0, (size_t)right * sizeof(float));
        }
    }
    if (c1 == g->channels) {
        // The slack past the last plane, which the lanes of a row's last panel past out_w read.
        memset(xp + g->channels * hp * wp, 0, (size_t)(CG_NR + (g->kw - 1) * g->dw + 16) * sizeof(float));
    }
}

void cg_conv_offsets(const cg_conv *g, long *off) {
    long hp, wp;
    cg_conv_padded_size(g, &hp, &wp);
    long khw = g->kh * g->kw, k = g->channels * khw;
    for (long p = 0; p < k; p++) {
        long c = p / khw, i = p % khw / g->kw, j = p % g->kw;
        off[p] = c * hp * wp + i * g->dh * wp + j * g->dw;
    }
}

CG_TARGET void cg_conv_rows(const cg_conv *g, const float *xp, const long *off, cg_operand a, long m, long oh0, long oh1,
                            float *c, long ldc, const cg_epilogue *epilogue) {
    long hp, wp;
    cg_conv_padded_size(g, &hp, &wp);
    (void)hp;
    long k = g->channels * g->kh * g->kw;
    for (long kb = 0; kb < cg_blocks(k); kb++) {
        long p0 = cg_block_start(kb, k), kcb = cg_block_start(kb + 1, k) - p0;
        int add = p0 > 0;
        const cg_epilogue *finish = p0 + kcb == k ? epilogue : NULL;
        const float *ablk = a.data + p0 * a.width + a.panel * kcb * CG_MR;
        for (long oh = oh0; oh < oh1; oh++) {
            const float *row = xp + oh * g->sh * wp;
            float *crow = c + (oh - oh0) * g->out_w;
            for (long ow0 = 0; ow0 < g->out_w; ow0 += CG_NR) {
                long nr = cg_min(CG_NR, g->out_w - ow0);
                // Every row panel of the weights against this stretch of the row (its input
                // lines stay in L1 across them).
                for (long ir = 0; ir < m; ir += CG_MR) {
                    cg_tile_in_place(kcb, ablk + (ir / CG_MR) * kcb * CG_MR, row + ow0, off + p0, crow + ir * ldc + ow0, ldc, add,
                                     cg_min(CG_MR, m - ir), nr, finish, ir, (oh - oh0) * g->out_w + ow0);
                }
            }
        }
    }
}
