// Direct convolution, output channels along the lanes (see include/cortado_direct.h): the
// units, bands and chunks in plain C; the tiles and the finishing of blocks come from the
// path in use (cg_kernels_now()).
#include "cortado_direct.h"

#include <stdint.h>
#include <string.h>

#include "cg_kernels.h"
#include "cortado_pool.h"

// Output pixels a band aims at (its blocked sums, 2 × 448 × 16 floats, stay in L2) and k
// values per chunk of input channels (a chunk's weights for two blocks, 2 × 1152 × 64 bytes,
// stay in L2 while the band's rows go by).
#define CD_BAND_PIXELS 448
#define CD_CHUNK 1152

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
    long r = cg_max(1, CD_BAND_PIXELS / g->out_w);
    if (pool) r = cg_max(2, r / 2 * 2);
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

// MARK: The units

// A block finished with a residual: scale and shift as usual, then, while the block's rows are
// still in cache, the residual added and the activation (a residual add and the ReLU after it
// folded into the convolution before them, as in a ResNet or MobileNet block).
void cg_direct_finish_residual(const cg_kernels *kern, const float *sums, long pixels, long lanes, long channel,
                               const cg_epilogue *e, float *dst, const float *res, long ld) {
    cg_epilogue head = *e;
    head.activation = CG_ACT_NONE;
    head.residual = NULL;
    kern->direct_finish(sums, pixels, lanes, channel, &head, dst, ld);
    for (long l = 0; l < lanes; l++) {
        float *restrict out = dst + l * ld;
        const float *restrict r = res + l * ld;
        switch (e->activation) {
        case CG_ACT_RELU:
            for (long q = 0; q < pixels; q++) {
                float v = out[q] + r[q];
                out[q] = v < 0.0f ? 0.0f : v;
            }
            break;
        case CG_ACT_LEAKY_RELU:
            for (long q = 0; q < pixels; q++) {
                float v = out[q] + r[q];
                out[q] = v < 0.0f ? v * e->alpha : v;
            }
            break;
        default:
            for (long q = 0; q < pixels; q++) out[q] += r[q];
        }
    }
}

void cg_direct_conv(const cg_conv *g, const float *xp, const float *w, long m, long u0, long u1, float *y,
                              const cg_epilogue *epilogue, int pool, float *workspace) {
    long hp, wp;
    cg_conv_padded_size(g, &hp, &wp);
    long khw = g->kh * g->kw, k = g->channels * khw, blocks = (m + 15) / 16;
    long rows = cd_rows(g, pool), band_rows = cd_band_rows(g, pool), bands = cd_bands(g, pool);
    long cc = cg_max(1, CD_CHUNK / khw);
    long ow = g->out_w, n = g->out_h * ow, pw = ow / 2, pooled_plane = (g->out_h / 2) * pw;
    const cg_kernels *kern = cg_kernels_now();
    long np_max = kern->direct_np, pieces = (ow + np_max - 1) / np_max;
    float *acc = cg_align64(workspace);
    long bstride = band_rows * ow * 16;
    float *planar = acc + 2 * bstride;
    const cd_tile_fn *tiles_one = kern->direct_tiles[0][g->sw - 1];
    const cd_tile_fn *tiles_two = kern->direct_blocks == 2 ? kern->direct_tiles[1][g->sw - 1] : NULL;
    for (long u = u0; u < u1; u++) {
        long pair = u / bands, band = u % bands;
        long b0 = 2 * pair, ob = cg_min(2, blocks - b0);
        long oh0 = band * band_rows, oh1 = cg_min(rows, oh0 + band_rows), pixels = (oh1 - oh0) * ow;
        // A pair of blocks in one tile where the path has such tiles, else block by block.
        const cd_tile_fn *tiles = ob == 2 && tiles_two ? tiles_two : tiles_one;
        long passes = ob == 2 && !tiles_two ? 2 : 1;
        for (long c0 = 0; c0 < g->channels; c0 += cc) {
            long ccn = cg_min(cc, g->channels - c0);
            const float *wc = w + (b0 * k + c0 * khw) * 16;
            for (long oh = oh0; oh < oh1; oh++) {
                const float *xrow = xp + c0 * hp * wp + oh * g->sh * wp;
                float *arow = acc + (oh - oh0) * ow * 16;
                // The row in `pieces` tiles of near-equal width (at most np_max).
                for (long pass = 0; pass < passes; pass++) {
                    long col = 0;
                    for (long piece = 0; piece < pieces; piece++) {
                        long np = ow / pieces + (piece < ow % pieces ? 1 : 0);
                        tiles[np - 1](ccn, g->kh, g->kw, g->dh * wp, g->dw, hp * wp, xrow + col * g->sw, wc + pass * k * 16, k * 16,
                                      arow + pass * bstride + col * 16, bstride, c0 == 0);
                        col += np;
                    }
                }
            }
        }
        for (long b = 0; b < ob; b++) {
            long channel = (b0 + b) * 16, lanes = cg_min(16, m - channel);
            const float *sums = acc + b * bstride;
            if (!pool && epilogue && epilogue->residual) {
                cg_direct_finish_residual(kern, sums, pixels, lanes, channel, epilogue, y + channel * n + oh0 * ow,
                                   epilogue->residual + channel * n + oh0 * ow, n);
                continue;
            }
            if (!pool) {
                kern->direct_finish(sums, pixels, lanes, channel, epilogue, y + channel * n + oh0 * ow, n);
                continue;
            }
            kern->direct_finish(sums, pixels, lanes, channel, epilogue, planar, pixels);
            for (long l = 0; l < lanes; l++) {
                for (long r = 0; r < (oh1 - oh0) / 2; r++) {
                    const float *top = planar + l * pixels + 2 * r * ow;
                    cg_max_pool_2x2_row(top, top + ow, y + (channel + l) * pooled_plane + (oh0 / 2 + r) * pw, pw, 2);
                }
            }
        }
    }
}
