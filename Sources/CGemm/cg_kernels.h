// The kernels of one instruction-set path, as a table the ISA-neutral drivers
// (cortado_gemm.c, cortado_direct.c, cortado_pool.c) call through. Not a public header.
//
// Each path lives in its own file: cg_avx512.c and cg_avx2.c (x86-64 only, every function
// compiled with __attribute__((target(...))), so nothing depends on global compiler flags),
// cg_neon.c (aarch64 only; Advanced SIMD is baseline there, no attribute needed) and
// cg_portable.c (plain C, any CPU). cg_isa.c picks the table once.
#ifndef CG_KERNELS_H
#define CG_KERNELS_H

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
} cg_kernels;

// The table of the path in use (cg_isa()).
const cg_kernels *cg_kernels_now(void);

extern const cg_kernels cg_kernels_portable;
// Plain C pieces of the portable path that other paths share where speed does not matter.
void cg_plain_pack_a_panel(const float *src, long lda, long kcb, float *dst);
void cg_plain_direct_finish(const float *acc, long pixels, long lanes, long channel, const cg_epilogue *e, float *dst, long ld);
void cg_plain_max_pool_row(const float *r0, const float *r1, float *out, long count, long stride);
#if defined(__x86_64__)
extern const cg_kernels cg_kernels_avx2;
extern const cg_kernels cg_kernels_avx512;
#endif
#if defined(__aarch64__)
extern const cg_kernels cg_kernels_neon;
#endif

static inline long cg_round_up(long v, long r) { return (v + r - 1) / r * r; }
static inline long cg_min(long a, long b) { return a < b ? a : b; }
static inline long cg_max(long a, long b) { return a > b ? a : b; }

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

#endif
