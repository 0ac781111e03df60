// Direct convolution, output channels along the lanes (see include/cortado_direct.h).
#include "cortado_direct.h"

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "cg_simd.h"
#include "cortado_pool.h"

// Output pixels a band aims at (its blocked sums, 2 × 448 × 16 floats, stay in L2) and k
// values per chunk of input channels (a chunk's weights for two blocks, 2 × 1152 × 64 bytes,
// stay in L2 while the band's rows go by).
#define CD_BAND_PIXELS 448
#define CD_CHUNK 1152
// Pixels of a tile: 2 blocks × 14 accumulators + 2 weight vectors fit the 32 zmm registers.
#define CD_NP 14

static inline long cd_min(long a, long b) { return a < b ? a : b; }
static inline long cd_max(long a, long b) { return a > b ? a : b; }

size_t cg_direct_weights_count(long m, long k) { return (size_t)((m + 15) / 16 * 16 * k); }

void cg_direct_pack(const float *w, long m, long k, float *dst) {
    for (long b = 0; b < (m + 15) / 16; b++) {
        float *out = dst + b * k * 16;
        for (long p = 0; p < k; p++) {
            for (long l = 0; l < 16; l++) {
                long r = b * 16 + l;
                out[p * 16 + l] = r < m ? w[r * k + p] : 0.0f;
            }
        }
    }
}

int cg_direct_supported(const cg_conv *g) { return g->sw == 1 || g->sw == 2; }

// Output rows the units cover (with a pooling: only the rows it reads), rows per band and bands.
static inline long cd_rows(const cg_conv *g, int pool) { return pool ? g->out_h / 2 * 2 : g->out_h; }
static long cd_band_rows(const cg_conv *g, int pool) {
    long rows = cd_rows(g, pool);
    long r = cd_max(1, CD_BAND_PIXELS / g->out_w);
    if (pool) r = cd_max(2, r / 2 * 2);
    long bands = (rows + r - 1) / r;
    r = (rows + bands - 1) / bands;
    return pool ? (r + 1) / 2 * 2 : r;
}
static inline long cd_bands(const cg_conv *g, int pool) {
    long r = cd_band_rows(g, pool);
    return (cd_rows(g, pool) + r - 1) / r;
}

long cg_direct_units(const cg_conv *g, long m, int pool) {
    long blocks = (m + 15) / 16;
    return (blocks + 1) / 2 * cd_bands(g, pool);
}

size_t cg_direct_workspace_count(const cg_conv *g, int pool) {
    long pixels = cd_band_rows(g, pool) * g->out_w;
    return (size_t)(2 * pixels * 16 + (pool ? 16 * pixels : 0) + 16);
}

// MARK: The tile

// Sums over cc input channels for OB blocks × NP pixels of one output row, SW apart in the
// input: x is the padded input at the tile's first pixel (channel c0, window corner), w the
// first block's weights at k = c0·kh·kw (the second block's wstride floats further), acc the
// blocked sums (pixel p of block b at acc + b·bstride + 16p), zeroed first when `first`.
#define CD_UNROLL _Pragma("clang loop unroll(full)")
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

typedef void (*cd_tile_fn)(long cc, long kh, long kw, long row_step, long dw, long plane, const float *x, const float *w,
                           long wstride, float *acc, long bstride, int first);
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
static const cd_tile_fn cd_tiles[2][2][CD_NP] = {
    {{CD_WIDTHS(CD_NAME, 1, 1)}, {CD_WIDTHS(CD_NAME, 1, 2)}},
    {{CD_WIDTHS(CD_NAME, 2, 1)}, {CD_WIDTHS(CD_NAME, 2, 2)}},
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
        long n = cd_min(16, pixels - q0);
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

// MARK: The units

CG_TARGET void cg_direct_conv(const cg_conv *g, const float *xp, const float *w, long m, long u0, long u1, float *y,
                              const cg_epilogue *epilogue, int pool, float *workspace) {
    long hp, wp;
    cg_conv_padded_size(g, &hp, &wp);
    long khw = g->kh * g->kw, k = g->channels * khw, blocks = (m + 15) / 16;
    long rows = cd_rows(g, pool), band_rows = cd_band_rows(g, pool), bands = cd_bands(g, pool);
    long cc = cd_max(1, CD_CHUNK / khw);
    long ow = g->out_w, n = g->out_h * ow, pw = ow / 2, pooled_plane = (g->out_h / 2) * pw;
    long pieces = (ow + CD_NP - 1) / CD_NP;
    float *acc = (float *)(((uintptr_t)workspace + 63) & ~(uintptr_t)63);
    long bstride = band_rows * ow * 16;
    float *planar = acc + 2 * bstride;
    const cd_tile_fn *tiles_one = cd_tiles[0][g->sw - 1], *tiles_two = cd_tiles[1][g->sw - 1];
    for (long u = u0; u < u1; u++) {
        long pair = u / bands, band = u % bands;
        long b0 = 2 * pair, ob = cd_min(2, blocks - b0);
        long oh0 = band * band_rows, oh1 = cd_min(rows, oh0 + band_rows), pixels = (oh1 - oh0) * ow;
        const cd_tile_fn *tiles = ob == 2 ? tiles_two : tiles_one;
        for (long c0 = 0; c0 < g->channels; c0 += cc) {
            long ccn = cd_min(cc, g->channels - c0);
            const float *wc = w + (b0 * k + c0 * khw) * 16;
            for (long oh = oh0; oh < oh1; oh++) {
                const float *xrow = xp + c0 * hp * wp + oh * g->sh * wp;
                float *arow = acc + (oh - oh0) * ow * 16;
                // The row in `pieces` tiles of near-equal width (at most CD_NP).
                long col = 0;
                for (long piece = 0; piece < pieces; piece++) {
                    long np = ow / pieces + (piece < ow % pieces ? 1 : 0);
                    tiles[np - 1](ccn, g->kh, g->kw, g->dh * wp, g->dw, hp * wp, xrow + col * g->sw, wc, k * 16, arow + col * 16,
                                  bstride, c0 == 0);
                    col += np;
                }
            }
        }
        for (long b = 0; b < ob; b++) {
            long channel = (b0 + b) * 16, lanes = cd_min(16, m - channel);
            const float *sums = acc + b * bstride;
            if (!pool) {
                cd_finish_block(sums, pixels, lanes, channel, epilogue, y + channel * n + oh0 * ow, n);
                continue;
            }
            cd_finish_block(sums, pixels, lanes, channel, epilogue, planar, pixels);
            for (long l = 0; l < lanes; l++) {
                for (long r = 0; r < (oh1 - oh0) / 2; r++) {
                    const float *top = planar + l * pixels + 2 * r * ow;
                    cg_max_pool_2x2_row(top, top + ow, y + (channel + l) * pooled_plane + (oh0 / 2 + r) * pw, pw, 2);
                }
            }
        }
    }
}
