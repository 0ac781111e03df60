// The NEON path (aarch64): Advanced SIMD is part of the aarch64 baseline, so nothing here
// needs a target attribute, and the path runs wherever this file compiles.
//
// The packed layout is every path's (row panels of CG_MR = 12, column panels of CG_NR = 32).
// With 32 q registers the micro-kernel holds a 12 × 8 tile: 24 accumulators, the twelve values
// of A for one k in three registers (each row's value taken by lane, vfmaq_laneq_f32) and two
// registers of B. A 12 × 32 tile of the panels is four of them, left to right, so the A
// micro-panel is read from L1 four times and B's columns once.
//
// Verified under qemu-aarch64 against the portable path and naive references
// (Tests/NeuralNetwork/neon/harness.c); not timed on aarch64 hardware.
#include "cg_kernels.h"

#if defined(__aarch64__)

#include <arm_neon.h>
#include <string.h>

#define CN_UNROLL _Pragma("GCC unroll 16")

// The epilogue on one vector of finished values: v·s + t, then the activation, as cg_epi1
// (a compare and select rather than fmax, so NaN and −0 pass ReLU as they do there).
static inline float32x4_t cn_epi(float32x4_t v, float32x4_t s, float32x4_t t, const cg_epilogue *e) {
    v = vfmaq_f32(t, v, s);
    if (e->activation == CG_ACT_RELU) return vbslq_f32(vcltzq_f32(v), vdupq_n_f32(0.0f), v);
    if (e->activation == CG_ACT_LEAKY_RELU) return vbslq_f32(vcltzq_f32(v), vmulq_n_f32(v, e->alpha), v);
    return v;
}

// Lanes [0, count) of four consecutive values from p, the others `fill` (loads that stop at
// an edge: NEON has no masked load).
static inline float32x4_t cn_load_part(const float *p, long count, float fill) {
    float v[4] = {fill, fill, fill, fill};
    for (long l = 0; l < count && l < 4; l++) v[l] = p[l];
    return vld1q_f32(v);
}

// MARK: The 12 × 8 micro-kernel

#define CN_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define CN_DECL(i) float32x4_t c##i##0 = vdupq_n_f32(0.0f), c##i##1 = vdupq_n_f32(0.0f);
#define CN_FMA(i, A, L) c##i##0 = vfmaq_laneq_f32(c##i##0, b0, A, L); c##i##1 = vfmaq_laneq_f32(c##i##1, b1, A, L);
// One k: rows 0–11 of A (a[0..11], three registers) times columns 0–7 of B (b0, b1).
#define CN_STEP { \
    float32x4_t a0 = vld1q_f32(a), a1 = vld1q_f32(a + 4), a2 = vld1q_f32(a + 8); \
    CN_FMA(0, a0, 0) CN_FMA(1, a0, 1) CN_FMA(2, a0, 2) CN_FMA(3, a0, 3) \
    CN_FMA(4, a1, 0) CN_FMA(5, a1, 1) CN_FMA(6, a1, 2) CN_FMA(7, a1, 3) \
    CN_FMA(8, a2, 0) CN_FMA(9, a2, 1) CN_FMA(10, a2, 2) CN_FMA(11, a2, 3) }
// Row i of the tile into cp (ldp floats a row): added to what is there when `add`, then the
// epilogue (per-row scale and shift when the channels run along the rows).
#define CN_STORE(i) if (i < rows) { float *ci = cp + i * ldp; \
    if (add) { c##i##0 = vaddq_f32(c##i##0, vld1q_f32(ci)); c##i##1 = vaddq_f32(c##i##1, vld1q_f32(ci + 4)); } \
    if (e) { \
        if (!e->per_column) { \
            s0 = s1 = vdupq_n_f32(cg_epi_scale(e, row + i)); t0 = t1 = vdupq_n_f32(cg_epi_shift(e, row + i)); \
        } \
        c##i##0 = cn_epi(c##i##0, s0, t0, e); c##i##1 = cn_epi(c##i##1, s1, t1, e); \
    } \
    vst1q_f32(ci, c##i##0); vst1q_f32(ci + 4, c##i##1); }
// The sums of the tile into C. A whole tile goes straight to C; an edge tile (mr < 12 or
// nr < 8) goes through a 12 × 8 buffer holding C's values, whose mr × nr corner is copied back.
#define CN_FINISH \
    float part[12 * 8]; \
    float *cp = c; \
    long ldp = ldc, rows = 12; \
    if (mr < 12 || nr < 8) { \
        cp = part; ldp = 8; rows = mr; \
        if (add) { \
            for (long i = 0; i < mr; i++) { \
                for (long j = 0; j < 8; j++) part[i * 8 + j] = j < nr ? c[i * ldc + j] : 0.0f; \
            } \
        } \
    } \
    float32x4_t s0 = vdupq_n_f32(1.0f), s1 = s0, t0 = vdupq_n_f32(0.0f), t1 = t0; \
    if (e && e->per_column) { \
        if (e->scale) { s0 = cn_load_part(e->scale + col, nr, 1.0f); s1 = cn_load_part(e->scale + col + 4, nr - 4, 1.0f); } \
        if (e->shift) { t0 = cn_load_part(e->shift + col, nr, 0.0f); t1 = cn_load_part(e->shift + col + 4, nr - 4, 0.0f); } \
    } \
    CN_ROWS(CN_STORE) \
    if (cp == part) { \
        for (long i = 0; i < mr; i++) memcpy(c + i * ldc, part + i * 8, (size_t)nr * sizeof(float)); \
    }

// mr ≤ 12 rows × nr ≤ 8 columns: A's rows are a[0..11] of each CG_MR-float step of a packed
// panel (rows past mr are the panel's zero padding), B's columns b[0..7] of each CG_NR step.
static void cn_kernel(long kc, const float *restrict a, const float *restrict b, float *restrict c, long ldc, int add, long mr,
                      long nr, const cg_epilogue *e, long row, long col) {
    CN_ROWS(CN_DECL)
    for (long p = 0; p < kc; p++, a += CG_MR, b += CG_NR) {
        float32x4_t b0 = vld1q_f32(b), b1 = vld1q_f32(b + 4);
        CN_STEP
    }
    CN_FINISH
}

// The same with B's row q read in place at base + off[q] (eight floats: the padded copy's
// slack covers the lanes past a row's last panel, cg_conv_padded_count).
static void cn_kernel_in_place(long kc, const float *restrict a, const float *restrict base, const long *restrict off,
                               float *restrict c, long ldc, int add, long mr, long nr, const cg_epilogue *e, long row, long col) {
    CN_ROWS(CN_DECL)
    for (long p = 0; p < kc; p++, a += CG_MR) {
        const float *b = base + off[p];
        float32x4_t b0 = vld1q_f32(b), b1 = vld1q_f32(b + 4);
        CN_STEP
    }
    CN_FINISH
}

static void cn_tile(long kc, const float *a, const float *b, float *c, long ldc, int add, long mr, long nr, const cg_epilogue *e,
                    long row, long col) {
    for (long j = 0; j < nr; j += 8) cn_kernel(kc, a, b + j, c + j, ldc, add, mr, cg_min(8, nr - j), e, row, col + j);
}

static void cn_tile_in_place(long kc, const float *a, const float *base, const long *off, float *c, long ldc, int add, long mr,
                             long nr, const cg_epilogue *e, long row, long col) {
    for (long j = 0; j < nr; j += 8) {
        cn_kernel_in_place(kc, a, base + j, off, c + j, ldc, add, mr, cg_min(8, nr - j), e, row, col + j);
    }
}

// MARK: One row times packed columns

static void cn_gemv(long n, long k, const float *x, cg_operand b, float *y) {
    for (long j0 = 0; j0 < n; j0 += CG_NR) {
        long panel = b.panel + j0 / CG_NR;
        // Two sums per column (even and odd k), so that consecutive FMAs do not wait on each other.
        float32x4_t s[8], t[8];
        CN_UNROLL for (int q = 0; q < 8; q++) s[q] = t[q] = vdupq_n_f32(0.0f);
        for (long kb = 0; kb < cg_blocks(k); kb++) {
            long p0 = cg_block_start(kb, k), kcb = cg_block_start(kb + 1, k) - p0;
            const float *bp = b.data + p0 * b.width + panel * kcb * CG_NR, *xp = x + p0;
            long p = 0;
            for (; p + 2 <= kcb; p += 2, bp += 2 * CG_NR) {
                float x0 = xp[p], x1 = xp[p + 1];
                CN_UNROLL for (int q = 0; q < 8; q++) {
                    s[q] = vfmaq_n_f32(s[q], vld1q_f32(bp + 4 * q), x0);
                    t[q] = vfmaq_n_f32(t[q], vld1q_f32(bp + CG_NR + 4 * q), x1);
                }
            }
            for (; p < kcb; p++, bp += CG_NR) {
                float x0 = xp[p];
                CN_UNROLL for (int q = 0; q < 8; q++) s[q] = vfmaq_n_f32(s[q], vld1q_f32(bp + 4 * q), x0);
            }
        }
        long nr = cg_min(CG_NR, n - j0);
        float sum[CG_NR];
        CN_UNROLL for (int q = 0; q < 8; q++) vst1q_f32(sum + 4 * q, vaddq_f32(s[q], t[q]));
        memcpy(y + j0, sum, (size_t)nr * sizeof(float));
    }
}

// MARK: The direct convolution

// Pixels of a tile: one block of 16 channels (four q registers) × 6 pixels is 24
// accumulators and four weight registers; the pixels' input values are scalars.
#define CN_NP 6

// Sums over cc input channels for one block × NP pixels SW apart (cortado_direct.c's tile).
static inline __attribute__((always_inline)) void cn_direct_tile(const int NP, const int SW, long cc, long kh, long kw,
                                                                 long row_step, long dw, long plane, const float *x,
                                                                 const float *w, float *acc, int first) {
    float32x4_t a0[CN_NP], a1[CN_NP], a2[CN_NP], a3[CN_NP];
    CN_UNROLL for (int p = 0; p < NP; p++) {
        float32x4_t z = vdupq_n_f32(0.0f);
        a0[p] = first ? z : vld1q_f32(acc + 16 * p);
        a1[p] = first ? z : vld1q_f32(acc + 16 * p + 4);
        a2[p] = first ? z : vld1q_f32(acc + 16 * p + 8);
        a3[p] = first ? z : vld1q_f32(acc + 16 * p + 12);
    }
    for (long c = 0; c < cc; c++) {
        const float *xc = x + c * plane;
        for (long i = 0; i < kh; i++) {
            const float *xr = xc + i * row_step;
            for (long j = 0; j < kw; j++, w += 16) {
                const float *xj = xr + j * dw;
                float32x4_t v0 = vld1q_f32(w), v1 = vld1q_f32(w + 4), v2 = vld1q_f32(w + 8), v3 = vld1q_f32(w + 12);
                CN_UNROLL for (int p = 0; p < NP; p++) {
                    float xv = xj[p * SW];
                    a0[p] = vfmaq_n_f32(a0[p], v0, xv);
                    a1[p] = vfmaq_n_f32(a1[p], v1, xv);
                    a2[p] = vfmaq_n_f32(a2[p], v2, xv);
                    a3[p] = vfmaq_n_f32(a3[p], v3, xv);
                }
            }
        }
    }
    CN_UNROLL for (int p = 0; p < NP; p++) {
        vst1q_f32(acc + 16 * p, a0[p]);
        vst1q_f32(acc + 16 * p + 4, a1[p]);
        vst1q_f32(acc + 16 * p + 8, a2[p]);
        vst1q_f32(acc + 16 * p + 12, a3[p]);
    }
}

#define CN_DEFINE(NP, SW) \
    static void cn_direct_##NP##_##SW(long cc, long kh, long kw, long row_step, long dw, long plane, const float *x, \
                                      const float *w, long wstride, float *acc, long bstride, int first) { \
        (void)wstride; (void)bstride; \
        cn_direct_tile(NP, SW, cc, kh, kw, row_step, dw, plane, x, w, acc, first); \
    }
#define CN_WIDTHS(X, SW) X(1, SW) X(2, SW) X(3, SW) X(4, SW) X(5, SW) X(6, SW)
CN_WIDTHS(CN_DEFINE, 1)
CN_WIDTHS(CN_DEFINE, 2)
#define CN_NAME(NP, SW) cn_direct_##NP##_##SW,
static const cd_tile_fn cn_direct_tiles[1][2][CD_NP_MAX] = {{{CN_WIDTHS(CN_NAME, 1)}, {CN_WIDTHS(CN_NAME, 2)}}};

// One block's blocked sums to planar rows: the epilogue on each pixel's 16 channels (four
// registers), then 4 × 4 transposes (pixels × channels) into the rows of the block's channels.
static void cn_direct_finish(const float *acc, long pixels, long lanes, long channel, const cg_epilogue *e, float *dst, long ld) {
    float32x4_t s[4], t[4];
    for (int h = 0; h < 4; h++) {
        s[h] = vdupq_n_f32(1.0f);
        t[h] = vdupq_n_f32(0.0f);
        if (e && e->scale) s[h] = cn_load_part(e->scale + channel + 4 * h, lanes - 4 * h, 1.0f);
        if (e && e->shift) t[h] = cn_load_part(e->shift + channel + 4 * h, lanes - 4 * h, 0.0f);
    }
    for (long q0 = 0; q0 < pixels; q0 += 4) {
        long n = cg_min(4, pixels - q0);
        for (int h = 0; h < 4 && 4 * h < lanes; h++) {
            float32x4_t r[4];
            for (int i = 0; i < 4; i++) {
                r[i] = i < n ? vld1q_f32(acc + (q0 + i) * 16 + 4 * h) : vdupq_n_f32(0.0f);
                if (e) r[i] = cn_epi(r[i], s[h], t[h], e);
            }
            // r[i] = pixel i's 4 channels → u[l] = channel l's 4 pixels.
            float32x4x2_t p01 = vtrnq_f32(r[0], r[1]), p23 = vtrnq_f32(r[2], r[3]);
            float32x4_t u[4] = {
                vcombine_f32(vget_low_f32(p01.val[0]), vget_low_f32(p23.val[0])),
                vcombine_f32(vget_low_f32(p01.val[1]), vget_low_f32(p23.val[1])),
                vcombine_f32(vget_high_f32(p01.val[0]), vget_high_f32(p23.val[0])),
                vcombine_f32(vget_high_f32(p01.val[1]), vget_high_f32(p23.val[1])),
            };
            long count = cg_min(4, lanes - 4 * h);
            for (long l = 0; l < count; l++) {
                float *out = dst + (4 * h + l) * ld + q0;
                if (n == 4) {
                    vst1q_f32(out, u[l]);
                } else {
                    float v[4];
                    vst1q_f32(v, u[l]);
                    memcpy(out, v, (size_t)n * sizeof(float));
                }
            }
        }
    }
}

// MARK: 2×2 max pooling

// y >= x ? y : x per lane (cg_max_pool_2x2_row's maximum, bit for bit).
static inline float32x4_t cn_max(float32x4_t x, float32x4_t y) { return vbslq_f32(vcgeq_f32(y, x), y, x); }

static void cn_max_pool_row(const float *r0, const float *r1, float *out, long count, long stride) {
    long i = 0;
    if (stride == 2) {
        // vld2q splits eight values into the windows' left (even) and right (odd) columns.
        for (; i + 4 <= count; i += 4) {
            float32x4x2_t a = vld2q_f32(r0 + 2 * i), b = vld2q_f32(r1 + 2 * i);
            vst1q_f32(out + i, cn_max(cn_max(a.val[0], a.val[1]), cn_max(b.val[0], b.val[1])));
        }
    } else if (stride == 1) {
        for (; i + 4 <= count; i += 4) {
            float32x4_t t = cn_max(vld1q_f32(r0 + i), vld1q_f32(r0 + i + 1));
            float32x4_t u = cn_max(vld1q_f32(r1 + i), vld1q_f32(r1 + i + 1));
            vst1q_f32(out + i, cn_max(t, u));
        }
    }
    if (i < count) cg_plain_max_pool_row(r0 + stride * i, r1 + stride * i, out + i, count - i, stride);
}

// MARK: Depthwise 3×3

// Four outputs of a row at a time (nine FMAs each, the weights by scalar), the epilogue while
// they are in registers; the last outputs of a row (fewer than four, or the few whose
// vector loads would read past the row's last needed value) in plain C.
static void cn_depthwise_plane(const float *xp, long wp, long sh, long sw, const float *w, long out_h, long out_w, float *y,
                               float s, float t, const cg_epilogue *e) {
    const float w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3], w4 = w[4], w5 = w[5], w6 = w[6], w7 = w[7], w8 = w[8];
    const float32x4_t vs = vdupq_n_f32(s), vt = vdupq_n_f32(t);
    for (long oh = 0; oh < out_h; oh++) {
        const float *restrict r0 = xp + oh * sh * wp, *restrict r1 = r0 + wp, *restrict r2 = r1 + wp;
        float *restrict out = y + oh * out_w;
        long i = 0;
        if (sw == 1) {
            // Reads r[i .. i + 5]: within the row's out_w + 2 needed values while i + 4 ≤ out_w.
            for (; i + 4 <= out_w; i += 4) {
                float32x4_t v = vmulq_n_f32(vld1q_f32(r0 + i), w0);
                v = vfmaq_n_f32(v, vld1q_f32(r0 + i + 1), w1);
                v = vfmaq_n_f32(v, vld1q_f32(r0 + i + 2), w2);
                v = vfmaq_n_f32(v, vld1q_f32(r1 + i), w3);
                v = vfmaq_n_f32(v, vld1q_f32(r1 + i + 1), w4);
                v = vfmaq_n_f32(v, vld1q_f32(r1 + i + 2), w5);
                v = vfmaq_n_f32(v, vld1q_f32(r2 + i), w6);
                v = vfmaq_n_f32(v, vld1q_f32(r2 + i + 1), w7);
                v = vfmaq_n_f32(v, vld1q_f32(r2 + i + 2), w8);
                vst1q_f32(out + i, e ? cn_epi(v, vs, vt, e) : v);
            }
        } else {
            // Columns 2i (even), 2i + 1 (odd) and 2i + 2 (the evens one further): reads
            // r[2i .. 2i + 9], within the row's 2·out_w + 1 needed values while i + 5 ≤ out_w.
            for (; i + 5 <= out_w; i += 4) {
                float32x4x2_t a = vld2q_f32(r0 + 2 * i), b = vld2q_f32(r1 + 2 * i), c = vld2q_f32(r2 + 2 * i);
                float32x4_t a2 = vld2q_f32(r0 + 2 * i + 2).val[0], b2 = vld2q_f32(r1 + 2 * i + 2).val[0];
                float32x4_t c2 = vld2q_f32(r2 + 2 * i + 2).val[0];
                float32x4_t v = vmulq_n_f32(a.val[0], w0);
                v = vfmaq_n_f32(v, a.val[1], w1);
                v = vfmaq_n_f32(v, a2, w2);
                v = vfmaq_n_f32(v, b.val[0], w3);
                v = vfmaq_n_f32(v, b.val[1], w4);
                v = vfmaq_n_f32(v, b2, w5);
                v = vfmaq_n_f32(v, c.val[0], w6);
                v = vfmaq_n_f32(v, c.val[1], w7);
                v = vfmaq_n_f32(v, c2, w8);
                vst1q_f32(out + i, e ? cn_epi(v, vs, vt, e) : v);
            }
        }
        for (; i < out_w; i++) {
            long j = i * sw;
            float v = w0 * r0[j] + w1 * r0[j + 1] + w2 * r0[j + 2] + w3 * r1[j] + w4 * r1[j + 1] + w5 * r1[j + 2] + w6 * r2[j] +
                      w7 * r2[j + 1] + w8 * r2[j + 2];
            out[i] = e ? cg_epi1(v, s, t, e) : v;
        }
    }
}

const cg_kernels cg_kernels_neon = {
    .tile = cn_tile,
    .tile_in_place = cn_tile_in_place,
    .tile_a_rows = 0,
    .tile_a_ptrs = 0,
    .pack_a_panel = cg_plain_pack_a_panel,
    .gemv = cn_gemv,
    .direct_blocks = 1,
    .direct_np = CN_NP,
    .direct_tiles = cn_direct_tiles,
    .direct_finish = cn_direct_finish,
    .depthwise_plane = cn_depthwise_plane,
    .max_pool_row = cn_max_pool_row,
};

#endif
