// The portable path: plain C for any CPU (aarch64 included), the same functions as the vector
// paths compute, tile by tile. Callers prefer OpenBLAS on this path (cg_available() is 0);
// tests run it through cg_set_isa.
#include "cg_kernels.h"

// MARK: GEMM tiles

// The sums of a tile into C: added to C when `add`, then the epilogue.
static void pt_store(const float acc[CG_MR][CG_NR], float *c, long ldc, int add, long mr, long nr, const cg_epilogue *e, long row,
                     long col) {
    for (long i = 0; i < mr; i++) {
        for (long j = 0; j < nr; j++) {
            float v = acc[i][j];
            if (add) v += c[i * ldc + j];
            if (e) {
                long ch = e->per_column ? col + j : row + i;
                v = cg_epi1(v, cg_epi_scale(e, ch), cg_epi_shift(e, ch), e);
            }
            c[i * ldc + j] = v;
        }
    }
}

static void pt_tile(long kc, const float *a, const float *b, float *c, long ldc, int add, long mr, long nr, const cg_epilogue *e,
                    long row, long col) {
    float acc[CG_MR][CG_NR] = {{0}};
    for (long p = 0; p < kc; p++, a += CG_MR, b += CG_NR) {
        for (long i = 0; i < CG_MR; i++) {
            float ai = a[i];
            for (long j = 0; j < CG_NR; j++) acc[i][j] += ai * b[j];
        }
    }
    pt_store(acc, c, ldc, add, mr, nr, e, row, col);
}

static void pt_tile_in_place(long kc, const float *a, const float *base, const long *off, float *c, long ldc, int add, long mr,
                             long nr, const cg_epilogue *e, long row, long col) {
    float acc[CG_MR][CG_NR] = {{0}};
    for (long p = 0; p < kc; p++, a += CG_MR) {
        const float *b = base + off[p];
        for (long i = 0; i < mr; i++) {
            float ai = a[i];
            for (long j = 0; j < nr; j++) acc[i][j] += ai * b[j];
        }
    }
    pt_store(acc, c, ldc, add, mr, nr, e, row, col);
}

void cg_plain_pack_a_panel(const float *src, long lda, long kcb, float *dst) {
    for (long p = 0; p < kcb; p++) {
        for (long i = 0; i < CG_MR; i++) dst[p * CG_MR + i] = src[i * lda + p];
    }
}

static void pt_gemv(long n, long k, const float *x, cg_operand b, float *y) {
    for (long j0 = 0; j0 < n; j0 += CG_NR) {
        long panel = b.panel + j0 / CG_NR;
        float sum[CG_NR] = {0};
        for (long kb = 0; kb < cg_blocks(k); kb++) {
            long p0 = cg_block_start(kb, k), kcb = cg_block_start(kb + 1, k) - p0;
            const float *bp = b.data + p0 * b.width + panel * kcb * CG_NR;
            for (long p = 0; p < kcb; p++, bp += CG_NR) {
                for (long j = 0; j < CG_NR; j++) sum[j] += x[p0 + p] * bp[j];
            }
        }
        for (long j = 0; j < cg_min(CG_NR, n - j0); j++) y[j0 + j] = sum[j];
    }
}

// MARK: Direct convolution

// One block of 16 output channels × NP pixels SW apart (cortado_direct.c's tile contract).
static inline __attribute__((always_inline)) void pt_direct_tile(const int NP, const int SW, long cc, long kh, long kw,
                                                                 long row_step, long dw, long plane, const float *x,
                                                                 const float *w, float *acc, int first) {
    float sum[8][16];
    for (int p = 0; p < NP; p++) {
        for (int l = 0; l < 16; l++) sum[p][l] = first ? 0.0f : acc[16 * p + l];
    }
    for (long c = 0; c < cc; c++) {
        for (long i = 0; i < kh; i++) {
            const float *xr = x + c * plane + i * row_step;
            for (long j = 0; j < kw; j++, w += 16) {
                for (int p = 0; p < NP; p++) {
                    float v = xr[j * dw + p * SW];
                    for (int l = 0; l < 16; l++) sum[p][l] += w[l] * v;
                }
            }
        }
    }
    for (int p = 0; p < NP; p++) {
        for (int l = 0; l < 16; l++) acc[16 * p + l] = sum[p][l];
    }
}

#define PT_DEFINE(NP, SW) \
    static void pt_direct_##NP##_##SW(long cc, long kh, long kw, long row_step, long dw, long plane, const float *x, \
                                      const float *w, long wstride, float *acc, long bstride, int first) { \
        (void)wstride; (void)bstride; \
        pt_direct_tile(NP, SW, cc, kh, kw, row_step, dw, plane, x, w, acc, first); \
    }
#define PT_WIDTHS(X, SW) X(1, SW) X(2, SW) X(3, SW) X(4, SW) X(5, SW) X(6, SW) X(7, SW) X(8, SW)
PT_WIDTHS(PT_DEFINE, 1)
PT_WIDTHS(PT_DEFINE, 2)
#define PT_NAME(NP, SW) pt_direct_##NP##_##SW,
static const cd_tile_fn pt_direct_tiles[1][2][CD_NP_MAX] = {{{PT_WIDTHS(PT_NAME, 1)}, {PT_WIDTHS(PT_NAME, 2)}}};
// The same tiles on a channel-blocked input (cortado_blocked.c): pixels 16 · stride floats apart.
PT_WIDTHS(PT_DEFINE, 16)
PT_WIDTHS(PT_DEFINE, 32)
static const cd_tile_fn pt_blocked_tiles[1][2][CD_NP_MAX] = {{{PT_WIDTHS(PT_NAME, 16)}, {PT_WIDTHS(PT_NAME, 32)}}};

void cg_plain_direct_finish(const float *acc, long pixels, long lanes, long channel, const cg_epilogue *e, float *dst, long ld) {
    for (long l = 0; l < lanes; l++) {
        float s = e ? cg_epi_scale(e, channel + l) : 1.0f, t = e ? cg_epi_shift(e, channel + l) : 0.0f;
        float *out = dst + l * ld;
        for (long q = 0; q < pixels; q++) out[q] = e ? cg_epi1(acc[16 * q + l], s, t, e) : acc[16 * q + l];
    }
}

// MARK: 2×2 max pooling

void cg_plain_max_pool_row(const float *r0, const float *r1, float *out, long count, long stride) {
    for (long i = 0; i < count; i++) {
        const float *a = r0 + stride * i, *b = r1 + stride * i;
        float t = a[1] >= a[0] ? a[1] : a[0], u = b[1] >= b[0] ? b[1] : b[0];
        out[i] = u >= t ? u : t;
    }
}

// MARK: Depthwise 3×3

CG_DEPTHWISE_PLANE(pt_depthwise_plane, )

// MARK: The channel-blocked layout

CG_BLOCKED_KERNELS(pt, )

const cg_kernels cg_kernels_portable = {
    .tile = pt_tile,
    .tile_in_place = pt_tile_in_place,
    .tile_a_rows = 0,
    .tile_a_ptrs = 0,
    .pack_a_panel = cg_plain_pack_a_panel,
    .gemv = pt_gemv,
    .direct_blocks = 1,
    .direct_np = 8,
    .direct_tiles = pt_direct_tiles,
    .direct_finish = cg_plain_direct_finish,
    .depthwise_plane = pt_depthwise_plane,
    .max_pool_row = cg_plain_max_pool_row,
    .blocked_tiles = pt_blocked_tiles,
    .blocked_finish = pt_blocked_finish,
    .blocked_depthwise = pt_blocked_depthwise,
};
