// The kernels of one instruction-set path, as a table the ISA-neutral drivers
// (cortado_gemm.c, cortado_direct.c, cortado_pool.c) call through. Not a public header.
//
// Each path lives in its own file: cg_avx512.c and cg_avx2.c (x86-64 only, every function
// compiled with __attribute__((target(...))), so nothing depends on global compiler flags),
// cg_neon.c (aarch64 only; Advanced SIMD is baseline there, no attribute needed) and
// cg_portable.c (plain C, any CPU). cg_isa.c picks the table once.
#ifndef CG_KERNELS_H
#define CG_KERNELS_H

#include <stdint.h>
#include <string.h>

#include "cortado_gemm.h"

// An mr × nr tile (mr ≤ CG_MR, nr ≤ CG_NR) of C (=|+=) A-panel · B-panel over kc, then the
// epilogue e (when not NULL) for the tile at row `row`, column `col` of the whole C.
typedef void (*cg_tile_fn)(long kc, const float *a, const float *b, float *c, long ldc, int add, long mr, long nr,
                           const cg_epilogue *e, long row, long col);
// The same with B's row q read in place at base + off[q] (cg_conv_rows).
typedef void (*cg_tile_in_place_fn)(long kc, const float *a, const float *base, const long *off, float *c, long ldc, int add,
                                    long mr, long nr, const cg_epilogue *e, long row, long col);
// A full row panel (CG_MR rows) of A read in place: rows lda floats apart, from a.
typedef void (*cg_tile_a_rows_fn)(long kc, const float *a, long lda, const float *b, float *c, long ldc, int add, long mr,
                                  long nr, const cg_epilogue *e, long row, long col);
// A full row panel of A given as CG_MR row pointers, read from index p0.
typedef void (*cg_tile_a_ptrs_fn)(long kc, const float *const *a, long p0, const float *b, float *c, long ldc, int add,
                                  long mr, long nr, const cg_epilogue *e, long row, long col);
// The direct convolution's tile (cortado_direct.c): sums over cc input channels for the
// table's blocks of 16 output channels × np pixels of one output row.
typedef void (*cd_tile_fn)(long cc, long kh, long kw, long row_step, long dw, long plane, const float *x, const float *w,
                           long wstride, float *acc, long bstride, int first);

// One block's blocked sums (pixel q's 16 channels at acc + 16q) into a blocked output: v·s + t
// (s, t: 16 lanes), plus the residual's pixel q when res is not NULL, then the activation act
// (a cg_activation; leaky ReLU's slope alpha), to dst + 16q.
typedef void (*cg_blocked_finish_fn)(const float *acc, long pixels, const float *s, const float *t, int act, float alpha,
                                     const float *res, float *dst);
// Output rows [oh0, oh1) of one block of 16 channels of a depthwise 3×3 in the blocked layout:
// x the block's input [h][w][16], w its weights [9][16], y its output [out_h][out_w][16], then
// v·s + t and the activation as cg_blocked_finish_fn. Any padding; strides 1 and 2.
typedef void (*cg_blocked_depthwise_fn)(const cg_conv *g, const float *x, const float *w, const float *s, const float *t, int act,
                                        float alpha, long oh0, long oh1, float *y);
// Output row oh of a 3×3 stride-2 convolution of a planar input of few channels (a network's
// stem, cg_blocked_stem) for the nch ≤ 24 output channels from c0 (a multiple of 16) of m, into
// the blocked output y: x the unpadded input, w cg_direct_pack's weights, e the epilogue (may be
// NULL; no residual). Lanes past m are written 0.
typedef void (*cg_blocked_stem_fn)(const cg_conv *g, const float *x, const float *w, long m, long c0, long nch,
                                   const cg_epilogue *e, long oh, float *y);
// The finish of a pointwise tile, per lane of its (up to) two blocks of 16 output channels: v·s +
// t, then the activation act (a cg_activation; leaky ReLU's slope alpha); a planar output gets
// the first lanes[b] channels of block b.
typedef struct {
    float s[32], t[32];
    int act;
    float alpha;
    long lanes[2];
} cg_blocked_out;
// A 1×1 stride-1 layer from a blocked input, for the table's blocks of 16 output channels × np
// consecutive pixels: x the input at the first pixel (input block b at x + b·xstride), w the
// first output block's weights ([k][16], cg_direct_pack's; the second block's wstride floats
// further). The sums over all k channels stay in registers, then o's finish, plus the residual's
// pixel (res, blocked, may be NULL; block b at res + b·rstride), to y: blocked (block b at y +
// b·ystride), or planar (channel l of block b at y + (16b + l)·ystride, pixels 1 float apart).
typedef void (*cg_blocked_pointwise_fn)(long k, const float *x, long xstride, const float *w, long wstride,
                                        const cg_blocked_out *o, const float *res, long rstride, float *y, long ystride);

// The widest direct tile in pixels any path has.
#define CD_NP_MAX 14

typedef struct {
    cg_tile_fn tile;
    cg_tile_in_place_fn tile_in_place;
    cg_tile_a_rows_fn tile_a_rows; // NULL: a row-major A is packed first
    cg_tile_a_ptrs_fn tile_a_ptrs; // NULL: rows given as pointers are packed first
    // A full row panel of a row-major A, k values [0, kcb), into dst ([kcb][CG_MR]).
    void (*pack_a_panel)(const float *src, long lda, long kcb, float *dst);
    void (*gemv)(long n, long k, const float *x, cg_operand b, float *y);
    // Direct convolution: tiles of direct_blocks (1 or 2) blocks of 16 channels, indexed
    // [blocks − 1][stride − 1][pixels − 1] for pixels up to direct_np.
    int direct_blocks;
    long direct_np;
    const cd_tile_fn (*direct_tiles)[2][CD_NP_MAX];
    // One block's blocked sums (pixel q's 16 channels at acc + 16q): the epilogue, then
    // channel l < lanes of the pixels to dst + l·ld.
    void (*direct_finish)(const float *acc, long pixels, long lanes, long channel, const cg_epilogue *e, float *dst, long ld);
    void (*max_pool_row)(const float *r0, const float *r1, float *out, long count, long stride);
    // A depthwise 3×3 plane (cortado_depthwise.c): xp the padded input plane (rows wp floats
    // apart), w its 9 weights, y the out_h × out_w output, then y·s + t and e's activation
    // (when e is not NULL).
    void (*depthwise_plane)(const float *xp, long wp, long sh, long sw, const float *w, long out_h, long out_w, float *y,
                            float s, float t, const cg_epilogue *e);
    // The channel-blocked layout (cortado_blocked.c; NULL where a path has none): direct tiles
    // that read a blocked input (pixels 16·stride floats apart), indexed as direct_tiles; one
    // block's sums finished into a blocked output; a blocked depthwise 3×3 (cg_blocked_*_fn).
    const cd_tile_fn (*blocked_tiles)[2][CD_NP_MAX];
    cg_blocked_finish_fn blocked_finish;
    cg_blocked_depthwise_fn blocked_depthwise;
    // The same for a block of at most 8 channels, on half the registers (NULL where a block is
    // one register: the whole-block kernel runs it).
    cg_blocked_depthwise_fn blocked_depthwise8;
    // The stem of few input channels into the blocked layout (NULL: the direct kernel runs it).
    cg_blocked_stem_fn blocked_stem;
    // Pointwise tiles, [blocks − 1][pixels − 1] up to direct_np pixels (NULL: the blocked tiles
    // and blocked_finish run those layers).
    const cg_blocked_pointwise_fn (*blocked_pointwise)[CD_NP_MAX];
    // The same writing a planar output (NULL: the blocked tiles and direct_finish run those).
    const cg_blocked_pointwise_fn (*blocked_pointwise_planar)[CD_NP_MAX];
} cg_kernels;

// The table of the path in use (cg_isa()).
const cg_kernels *cg_kernels_now(void);

extern const cg_kernels cg_kernels_portable;
// Plain C pieces of the portable path that other paths share where speed does not matter.
void cg_plain_pack_a_panel(const float *src, long lda, long kcb, float *dst);
void cg_plain_direct_finish(const float *acc, long pixels, long lanes, long channel, const cg_epilogue *e, float *dst, long ld);
void cg_plain_max_pool_row(const float *r0, const float *r1, float *out, long count, long stride);
// A block of the direct kernel finished into planar rows with a residual (cortado_direct.c):
// scale and shift, then the residual added and the activation, per channel row of ld floats.
void cg_direct_finish_residual(const cg_kernels *kern, const float *sums, long pixels, long lanes, long channel,
                               const cg_epilogue *e, float *dst, const float *res, long ld);
// A 3×3 convolution's [m][c][3][3] weights transformed by G (alpha × 3, row-major; alpha 6 for
// F(4×4, 3×3), 4 for F(2×2, 3×3)) into alpha² matrices of c × m in blocks of 16 output channels
// (cortado_winograd.c).
void cg_winograd_pack_g(const float *w, long m, long c, const double *g, int alpha, float *dst);
// One Winograd output tile of side×side pixels (cortado_winograd.c; lanes channels of one block
// after scale and shift at out, 16 floats a pixel) stored rows × cols into the planar output,
// with the residual and the activation.
void cg_winograd_store_tile(const float *out, long side, long lanes, long rows, long cols, float *y, const float *res, long n,
                            long ld, const cg_epilogue *e);
// Conv rows [r0, r0 + rows) of one Winograd block finished into planar rows (channel l's at
// planar + l·ld, `width` floats a row), max-pooled 2×2 into y at pooled column pc0, count columns
// (cortado_winograd.c; y the block's first pooled channel, pooled_plane floats a channel, pw a row).
void cg_winograd_pool_rows(const float *planar, long ld, long width, long r0, long rows, long lanes, long pooled_plane, long pw,
                           long pc0, long count, float *y);
#if defined(__x86_64__)
#include <immintrin.h>
// Lanes [0, n) of an 8-lane mask for the AVX2 masked loads and stores (n may be ≤ 0 or ≥ 8).
__attribute__((target("avx2"))) static inline __m256i cg_lanes8(long n) {
    int k = n <= 0 ? 0 : n >= 8 ? 8 : (int)n;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
extern const cg_kernels cg_kernels_avx2;
extern const cg_kernels cg_kernels_avx512;
#endif
#if defined(__aarch64__)
extern const cg_kernels cg_kernels_neon;
#endif

static inline long cg_round_up(long v, long r) { return (v + r - 1) / r * r; }
static inline long cg_min(long a, long b) { return a < b ? a : b; }
static inline long cg_max(long a, long b) { return a > b ? a : b; }

// The n rows of a patch of a plane (h × w floats) from input row ih0 and column col0, patch
// columns [0, cols), as pointers rows[0..n): into the plane itself when the whole patch lies in
// it (`inside`); else each row's columns inside the input copied into a zeroed row of `block`
// (rows `stride` ≥ cols floats apart), or `zeros` (cols zero floats) for a row outside. The
// AVX2 Winograd input transforms read their tiles' patches this way.
static inline void cg_patch_rows(const float *plane, long h, long w, long ih0, long col0, int n, long cols, int inside,
                                 float *block, long stride, const float *zeros, const float **rows) {
    long lo = cg_max(0, -col0), hi = cg_min(cols, w - col0);
    for (int r = 0; r < n; r++) {
        long ih = ih0 + r;
        if (inside) {
            rows[r] = plane + ih * w + col0;
        } else if (ih < 0 || ih >= h || hi <= lo) {
            rows[r] = zeros;
        } else {
            float *row = block + r * stride;
            memset(row, 0, (size_t)stride * sizeof(float));
            memcpy(row + lo, plane + ih * w + col0 + lo, (size_t)(hi - lo) * sizeof(float));
            rows[r] = row;
        }
    }
}
// p rounded up to the next 64-byte boundary (workspaces are handed over with 64 floats of slack).
static inline float *cg_align64(float *p) { return (float *)(((uintptr_t)p + 63) & ~(uintptr_t)63); }

// The k blocks: ceil(k / CG_KC) of them, block b covering [cg_block_start(b), cg_block_start(b + 1)).
static inline long cg_blocks(long k) { return (k + CG_KC - 1) / CG_KC; }
static inline long cg_block_start(long b, long k) { return b * k / cg_blocks(k); }

// The epilogue on one finished value: v·s + t, then the activation. ReLU keeps NaN and −0 as
// the vector kernels' max(0, v) does; leaky ReLU scales v < 0 only.
static inline float cg_epi1(float v, float s, float t, const cg_epilogue *e) {
    v = v * s + t;
    if (e->activation == CG_ACT_RELU) return v < 0.0f ? 0.0f : v;
    if (e->activation == CG_ACT_LEAKY_RELU) return v < 0.0f ? v * e->alpha : v;
    return v;
}

// An epilogue's scale and shift for channel ch (1 and 0 where it has none).
static inline float cg_epi_scale(const cg_epilogue *e, long ch) { return e->scale ? e->scale[ch] : 1.0f; }
static inline float cg_epi_shift(const cg_epilogue *e, long ch) { return e->shift ? e->shift[ch] : 0.0f; }

// The depthwise plane of one path, named NAME and compiled with TARGET (a target attribute or
// nothing): plain loops along the output row that the compiler vectorises for the target, the
// nine products of an output contracted into FMAs. Every path instantiates it.
#define CG_DEPTHWISE_PLANE(NAME, TARGET) \
    TARGET static void NAME(const float *xp, long wp, long sh, long sw, const float *w, long out_h, long out_w, float *y, float s, \
                            float t, const cg_epilogue *e) { \
        const float w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3], w4 = w[4], w5 = w[5], w6 = w[6], w7 = w[7], w8 = w[8]; \
        int act = e ? (int)e->activation : CG_ACT_NONE; \
        float alpha = e ? e->alpha : 0.0f; \
        for (long oh = 0; oh < out_h; oh++) { \
            const float *restrict r0 = xp + oh * sh * wp, *restrict r1 = r0 + wp, *restrict r2 = r1 + wp; \
            float *restrict out = y + oh * out_w; \
            if (sw == 1) { \
                for (long i = 0; i < out_w; i++) { \
                    out[i] = w0 * r0[i] + w1 * r0[i + 1] + w2 * r0[i + 2] + w3 * r1[i] + w4 * r1[i + 1] + w5 * r1[i + 2] + \
                             w6 * r2[i] + w7 * r2[i + 1] + w8 * r2[i + 2]; \
                } \
            } else { \
                for (long i = 0; i < out_w; i++) { \
                    long j = 2 * i; \
                    out[i] = w0 * r0[j] + w1 * r0[j + 1] + w2 * r0[j + 2] + w3 * r1[j] + w4 * r1[j + 1] + w5 * r1[j + 2] + \
                             w6 * r2[j] + w7 * r2[j + 1] + w8 * r2[j + 2]; \
                } \
            } \
            if (!e) continue; \
            if (act == CG_ACT_RELU) { \
                for (long i = 0; i < out_w; i++) { float v = out[i] * s + t; out[i] = v < 0.0f ? 0.0f : v; } \
            } else if (act == CG_ACT_LEAKY_RELU) { \
                for (long i = 0; i < out_w; i++) { float v = out[i] * s + t; out[i] = v < 0.0f ? v * alpha : v; } \
            } else { \
                for (long i = 0; i < out_w; i++) out[i] = out[i] * s + t; \
            } \
        } \
    }

typedef float cg_v16 __attribute__((vector_size(64), aligned(4)));
typedef int cg_v16i __attribute__((vector_size(64), aligned(4)));
// Eight lanes (one ymm): the depthwise kernel of a block's first half, on paths where a block of
// 16 lanes is two registers and the channels past the eighth are padding (24 channels: the second
// block holds 8).
typedef float cg_v8 __attribute__((vector_size(32), aligned(4)));
typedef int cg_v8i __attribute__((vector_size(32), aligned(4)));
#define CG_V16(p) (*(const cg_v16 *)(p))
// The activation on v (of vector type V, integer twin VI): ReLU keeps NaN and −0 (v < 0 only is
// replaced), as cg_epi1.
#define CG_V_ACT(V, VI, v, act, alpha) do { \
        if ((act) == CG_ACT_RELU) { VI neg_ = (v) < (V){0}; (v) = (V)((VI)(v) & ~neg_); } \
        else if ((act) == CG_ACT_LEAKY_RELU) { VI neg_ = (v) < (V){0}; \
            (v) = (V)(((VI)(v) & ~neg_) | ((VI)((v) * (alpha)) & neg_)); } \
    } while (0)
#define CG_V16_ACT(v, act, alpha) CG_V_ACT(cg_v16, cg_v16i, v, act, alpha)
// One output pixel's vector v of type V stored at p (16 floats a pixel); with 8-lane vectors the
// block's other 8 lanes are written 0, as lanes past a layer's channels are everywhere.
#define CG_DW_STORE(V, p, v) do { \
        *(V *)(p) = (v); \
        if (sizeof(V) < 64) *(V *)((p) + 8) = (V){0}; \
    } while (0)
// Four outputs of a blocked depthwise 3×3 at stride S (a constant) from ow, on vectors of type V,
// inside a CG_BLOCKED_DEPTHWISE kernel (its r0, r1, r2, k0 … k8, tv, pw, act, alpha, out and
// ahead): output j reads columns S·j, S·j + 1 and S·j + 2 of each row from (S·ow − pw); at stride
// 1 the four share six columns a row, which the compiler loads once.
#define CG_DEPTHWISE4(V, VI, S) do { \
        const long c_ = ((S) * ow - pw) * 16; \
        __builtin_prefetch(ahead + c_ + 64); __builtin_prefetch(ahead + c_ + 80); \
        __builtin_prefetch(ahead + c_ + 96); __builtin_prefetch(ahead + c_ + 112); \
        V v_[4]; \
        for (int j_ = 0; j_ < 4; j_++) { \
            const float *q_ = r0 + c_ + 16 * (S) * j_; \
            v_[j_] = tv + k0 * *(const V *)q_ + k1 * *(const V *)(q_ + 16) + k2 * *(const V *)(q_ + 32); \
        } \
        for (int j_ = 0; j_ < 4; j_++) { \
            const float *q_ = r1 + c_ + 16 * (S) * j_; \
            v_[j_] = v_[j_] + k3 * *(const V *)q_ + k4 * *(const V *)(q_ + 16) + k5 * *(const V *)(q_ + 32); \
        } \
        for (int j_ = 0; j_ < 4; j_++) { \
            const float *q_ = r2 + c_ + 16 * (S) * j_; \
            v_[j_] += k6 * *(const V *)q_ + k7 * *(const V *)(q_ + 16) + k8 * *(const V *)(q_ + 32); \
        } \
        /* (Stored after every load: a store may alias the input for all the compiler knows.) */ \
        for (int j_ = 0; j_ < 4; j_++) { \
            CG_V_ACT(V, VI, v_[j_], act, alpha); \
            CG_DW_STORE(V, out + (ow + j_) * 16, v_[j_]); \
        } \
    } while (0)
// A blocked depthwise 3×3 (cg_blocked_depthwise_fn) named NAME, compiled with TARGET, on vectors
// of type V (integer twin VI): cg_v16 for whole blocks, cg_v8 for a block of at most 8 channels.
#define CG_BLOCKED_DEPTHWISE(NAME, TARGET, V, VI) \
    TARGET static void NAME(const cg_conv *g, const float *x, const float *w, const float *s, const float *t, int act, float alpha, \
                            long oh0, long oh1, float *y) { \
        const long H = g->h, W = g->w, OW = g->out_w, sh = g->sh, sw = g->sw, ph = g->pad_h, pw = g->pad_w; \
        /* The scale folded into the weights: an output is the shift and nine FMAs. */ \
        const V sv = *(const V *)s, tv = *(const V *)t; \
        const V k0 = *(const V *)w * sv, k1 = *(const V *)(w + 16) * sv, k2 = *(const V *)(w + 32) * sv; \
        const V k3 = *(const V *)(w + 48) * sv, k4 = *(const V *)(w + 64) * sv, k5 = *(const V *)(w + 80) * sv; \
        const V k6 = *(const V *)(w + 96) * sv, k7 = *(const V *)(w + 112) * sv, k8 = *(const V *)(w + 128) * sv; \
        /* Output columns [lo, hi) read only columns inside the input. */ \
        long lo = cg_min(OW, (pw + sw - 1) / sw), hi = W - 3 + pw >= 0 ? cg_min(OW, (W - 3 + pw) / sw + 1) : 0; \
        if (hi < lo) hi = lo; \
        for (long oh = oh0; oh < oh1; oh++) { \
            const long ih = oh * sh - ph; \
            float *out = y + oh * OW * 16; \
            const int inner = ih >= 0 && ih + 2 < H; \
            if (inner) { \
                const float *r0 = x + ih * W * 16, *r1 = r0 + W * 16, *r2 = r1 + W * 16; \
                long ow = lo; \
                /* Four outputs at a time, each summed as two chains (the first two kernel rows \
                 * from the shift, the third row apart) and the chains added at the end: eight \
                 * independent chains of at most six FMAs keep both FMA pipes fed where one chain \
                 * of nine per output waited on its own latency (CG_DEPTHWISE4). The row two \
                 * below r2 (the one the output row after next reads first) is fetched while \
                 * this row computes: the next band's rows come from beyond L2. */ \
                const float *ahead = ih + 4 < H ? r2 + 2 * W * 16 : r2; \
                for (; sw == 1 && ow + 3 < hi; ow += 4) CG_DEPTHWISE4(V, VI, 1); \
                for (; sw == 2 && ow + 3 < hi; ow += 4) CG_DEPTHWISE4(V, VI, 2); \
                /* Stride 1: two outputs at a time, from the four input columns they share (two \
                 * chains of FMAs in flight, a third fewer loads). */ \
                for (; sw == 1 && ow + 1 < hi; ow += 2) { \
                    const long c = (ow - pw) * 16; \
                    const V a0 = *(const V *)(r0 + c), a1 = *(const V *)(r0 + c + 16), a2 = *(const V *)(r0 + c + 32), \
                            a3 = *(const V *)(r0 + c + 48); \
                    const V b0 = *(const V *)(r1 + c), b1 = *(const V *)(r1 + c + 16), b2 = *(const V *)(r1 + c + 32), \
                            b3 = *(const V *)(r1 + c + 48); \
                    const V d0 = *(const V *)(r2 + c), d1 = *(const V *)(r2 + c + 16), d2 = *(const V *)(r2 + c + 32), \
                            d3 = *(const V *)(r2 + c + 48); \
                    V v = tv + k0 * a0 + k1 * a1 + k2 * a2 + k3 * b0 + k4 * b1 + k5 * b2 + k6 * d0 + k7 * d1 + k8 * d2; \
                    V u = tv + k0 * a1 + k1 * a2 + k2 * a3 + k3 * b1 + k4 * b2 + k5 * b3 + k6 * d1 + k7 * d2 + k8 * d3; \
                    CG_V_ACT(V, VI, v, act, alpha); \
                    CG_V_ACT(V, VI, u, act, alpha); \
                    CG_DW_STORE(V, out + ow * 16, v); \
                    CG_DW_STORE(V, out + ow * 16 + 16, u); \
                } \
                for (; ow < hi; ow++) { \
                    const long c = (ow * sw - pw) * 16; \
                    V v = tv + k0 * *(const V *)(r0 + c) + k1 * *(const V *)(r0 + c + 16) + k2 * *(const V *)(r0 + c + 32) + \
                          k3 * *(const V *)(r1 + c) + k4 * *(const V *)(r1 + c + 16) + k5 * *(const V *)(r1 + c + 32) + \
                          k6 * *(const V *)(r2 + c) + k7 * *(const V *)(r2 + c + 16) + k8 * *(const V *)(r2 + c + 32); \
                    CG_V_ACT(V, VI, v, act, alpha); \
                    CG_DW_STORE(V, out + ow * 16, v); \
                } \
            } \
            /* Pixels whose window crosses the border: the taps inside the input only. */ \
            const V k[9] = {k0, k1, k2, k3, k4, k5, k6, k7, k8}; \
            for (long ow = 0; ow < OW; ow++) { \
                if (inner && ow == lo && hi > lo) { ow = hi - 1; continue; } \
                V v = tv; \
                const long iw0 = ow * sw - pw; \
                for (long i = 0; i < 3; i++) { \
                    if (ih + i < 0 || ih + i >= H) continue; \
                    const float *row = x + (ih + i) * W * 16; \
                    for (long j = 0; j < 3; j++) { \
                        if (iw0 + j < 0 || iw0 + j >= W) continue; \
                        v += k[3 * i + j] * *(const V *)(row + (iw0 + j) * 16); \
                    } \
                } \
                CG_V_ACT(V, VI, v, act, alpha); \
                CG_DW_STORE(V, out + ow * 16, v); \
            } \
        } \
    }
// The blocked layout's finish and depthwise kernels of one path (cg_blocked_finish_fn,
// cg_blocked_depthwise_fn), named PREFIX_blocked_finish / PREFIX_blocked_depthwise and compiled
// with TARGET: written once on a 16-lane vector type, which each target lowers to its own
// registers (one zmm, two ymm, four xmm or NEON q registers).
#define CG_BLOCKED_KERNELS(PREFIX, TARGET) \
    TARGET static void PREFIX##_blocked_finish(const float *acc, long pixels, const float *s, const float *t, int act, float alpha, \
                                               const float *res, float *dst) { \
        const cg_v16 sv = CG_V16(s), tv = CG_V16(t); \
        for (long q = 0; q < pixels; q++) { \
            cg_v16 v = CG_V16(acc + 16 * q) * sv + tv; \
            if (res) v += CG_V16(res + 16 * q); \
            CG_V16_ACT(v, act, alpha); \
            *(cg_v16 *)(dst + 16 * q) = v; \
        } \
    } \
    CG_BLOCKED_DEPTHWISE(PREFIX##_blocked_depthwise, TARGET, cg_v16, cg_v16i)

#endif
