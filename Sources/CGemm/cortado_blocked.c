// The channel-blocked layout (see include/cortado_blocked.h): the units, bands and chunks in
// plain C; the tiles, the finishing of blocks and the depthwise rows come from the path in use
// (cg_kernels_now(): blocked_tiles, blocked_finish, blocked_depthwise).
#include "cortado_blocked.h"

#include <stdint.h>

#include "cg_kernels.h"

// Output pixels a direct unit's band aims at (its sums, 2 × 448 × 16 floats, stay in L2), k
// values per chunk of a planar input (as cortado_direct.c), and output pixels a depthwise
// unit aims at (enough units for every worker on a 32×32 map).
#define CB_BAND_PIXELS 448
#define CB_CHUNK 1152
#define CB_DEPTHWISE_PIXELS 1024

int cg_blocked_available(void) {
    const cg_kernels *k = cg_kernels_now();
    return k->blocked_tiles && k->blocked_finish && k->blocked_depthwise;
}

size_t cg_blocked_count(long c, long plane) { return (size_t)((c + 15) / 16 * 16 * plane); }

// The epilogue's scale and shift for the 16 lanes of the block at `channel` (1 and 0 past the
// lanes and where it has none), and its activation.
static void cb_lanes(const cg_epilogue *e, long channel, long lanes, float *s, float *t, int *act, float *alpha) {
    for (long l = 0; l < 16; l++) {
        s[l] = e && l < lanes ? cg_epi_scale(e, channel + l) : 1.0f;
        t[l] = e && l < lanes ? cg_epi_shift(e, channel + l) : 0.0f;
    }
    *act = e ? (int)e->activation : CG_ACT_NONE;
    *alpha = e ? e->alpha : 0.0f;
}

// MARK: Direct convolution

int cg_blocked_direct_reads(const cg_conv *g) {
    long hp, wp;
    cg_conv_padded_size(g, &hp, &wp);
    return (g->sw == 1 || g->sw == 2) && g->pad_h == 0 && g->pad_w == 0 && hp == g->h && wp == g->w;
}

static long cb_band_rows(const cg_conv *g) {
    long r = cg_max(1, CB_BAND_PIXELS / g->out_w);
    long bands = (g->out_h + r - 1) / r;
    return (g->out_h + bands - 1) / bands;
}
static long cb_bands(const cg_conv *g) {
    long r = cb_band_rows(g);
    return (g->out_h + r - 1) / r;
}

long cg_blocked_direct_units(const cg_conv *g, long m) { return ((m + 15) / 16 + 1) / 2 * cb_bands(g); }

size_t cg_blocked_direct_workspace_count(const cg_conv *g) { return (size_t)(2 * cb_band_rows(g) * g->out_w * 16 + 16); }

// The sums of output blocks [b0, b0 + ob) over output rows [oh0, oh1) into acc (block b's
// pixel q at acc + b·bstride + 16q): x is the blocked input, or the padded planar copy, with
// rows wp pixels long and planes hp rows high.
static void cb_direct_sums(const cg_kernels *kern, const cg_conv *g, const float *x, int x_blocked, long hp, long wp,
                           const float *w, long b0, long ob, long oh0, long oh1, float *acc, long bstride) {
    const long khw = g->kh * g->kw, k = g->channels * khw;
    // A 1×1 stride-1 layer reading rows as long as its output's: the band's rows are one run of
    // pixels, cut into tiles of the widest kind (a 32-pixel row would be 11 + 11 + 10).
    const int flat = g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && wp == g->out_w;
    const long ow = flat ? (oh1 - oh0) * g->out_w : g->out_w;
    if (flat) { oh1 = oh0 + 1; }
    const long np_max = kern->direct_np, pieces = (ow + np_max - 1) / np_max;
    const cd_tile_fn (*table)[2][CD_NP_MAX] = x_blocked ? kern->blocked_tiles : kern->direct_tiles;
    const cd_tile_fn *tiles_one = table[0][g->sw - 1];
    const cd_tile_fn *tiles_two = kern->direct_blocks == 2 ? table[1][g->sw - 1] : NULL;
    const cd_tile_fn *tiles = ob == 2 && tiles_two ? tiles_two : tiles_one;
    const long passes = ob == 2 && !tiles_two ? 2 : 1;
    // A blocked input: chunks of one block of channels, a channel 1 float from the next, a
    // pixel 16 (block c0/16 starts at c0·hp·wp either way); a planar one: chunks as
    // cortado_direct.c, pixels 1 float apart.
    const long chunk = x_blocked ? 16 : cg_max(1, CB_CHUNK / khw);
    const long lane = x_blocked ? 16 : 1, plane = x_blocked ? 1 : hp * wp;
    for (long c0 = 0; c0 < g->channels; c0 += chunk) {
        long ccn = cg_min(chunk, g->channels - c0);
        const float *wc = w + (b0 * k + c0 * khw) * 16;
        const float *xc = x + c0 * hp * wp;
        for (long oh = oh0; oh < oh1; oh++) {
            const float *xrow = xc + oh * g->sh * wp * lane; // (flat: row oh0's first pixel, the run's)
            float *arow = acc + (oh - oh0) * ow * 16;
            for (long pass = 0; pass < passes; pass++) {
                long col = 0;
                for (long piece = 0; piece < pieces; piece++) {
                    long np = ow / pieces + (piece < ow % pieces ? 1 : 0);
                    tiles[np - 1](ccn, g->kh, g->kw, g->dh * wp * lane, g->dw * lane, plane, xrow + col * g->sw * lane,
                                  wc + pass * k * 16, k * 16, arow + pass * bstride + col * 16, bstride, c0 == 0);
                    col += np;
                }
            }
        }
    }
}

// The residual added to a finished block whose layout differs from the residual's: y's and
// res's value of channel `channel + l`, pixel p0 + q, then the activation.
static void cb_add_residual_across(float *y, int y_blocked, const float *res, long n, long channel, long lanes, long p0,
                                   long pixels, const cg_epilogue *e) {
    const long block = channel / 16;
    for (long l = 0; l < lanes; l++) {
        for (long q = 0; q < pixels; q++) {
            long planar = (channel + l) * n + p0 + q, blocked = (block * n + p0 + q) * 16 + l;
            float *out = y + (y_blocked ? blocked : planar);
            float v = *out + res[y_blocked ? planar : blocked];
            *out = e->activation == CG_ACT_RELU ? (v < 0.0f ? 0.0f : v) : e->activation == CG_ACT_LEAKY_RELU && v < 0.0f ? v * e->alpha : v;
        }
    }
}

// Blocks [b0, b0 + ob)'s sums for output pixels [p0, p0 + pixels) finished into y ([m][n]
// planar or blocked) with the epilogue and its residual (blocked when res_blocked).
static void cb_direct_finish(const cg_kernels *kern, const float *acc, long bstride, long b0, long ob, long m, long n, long p0,
                             long pixels, float *y, int y_blocked, const cg_epilogue *epilogue, int res_blocked) {
    const float *res = epilogue ? epilogue->residual : NULL;
    for (long b = 0; b < ob; b++) {
        long channel = (b0 + b) * 16, lanes = cg_min(16, m - channel);
        const float *sums = acc + b * bstride;
        if (res && res_blocked != y_blocked) {
            // The steps before the add in the output's layout, then the add and the activation.
            cg_epilogue head = *epilogue;
            head.activation = CG_ACT_NONE;
            head.residual = NULL;
            cb_direct_finish(kern, sums, bstride, b0 + b, 1, m, n, p0, pixels, y, y_blocked, &head, y_blocked);
            cb_add_residual_across(y, y_blocked, res, n, channel, lanes, p0, pixels, epilogue);
            continue;
        }
        if (y_blocked) {
            float s[16], t[16], alpha;
            int act;
            cb_lanes(epilogue, channel, lanes, s, t, &act, &alpha);
            long at = ((b0 + b) * n + p0) * 16;
            kern->blocked_finish(sums, pixels, s, t, act, alpha, res ? res + at : NULL, y + at);
        } else if (res) {
            cg_direct_finish_residual(kern, sums, pixels, lanes, channel, epilogue, y + channel * n + p0, res + channel * n + p0, n);
        } else {
            kern->direct_finish(sums, pixels, lanes, channel, epilogue, y + channel * n + p0, n);
        }
    }
}

// Whether the path's pointwise tiles run a 1×1 stride-1 layer whose band is one run of pixels
// (flat): a blocked input, the residual (if any) blocked, the output blocked or planar.
static int cb_pointwise_takes(const cg_kernels *kern, int flat, int x_blocked, int y_blocked, const cg_epilogue *e,
                              int res_blocked) {
    return (y_blocked ? kern->blocked_pointwise != NULL : kern->blocked_pointwise_planar != NULL) && flat && x_blocked &&
           (!e || !e->residual || res_blocked);
}

// Blocks [b0, b0 + ob) of a 1×1 layer for output pixels [p0, p0 + pixels) on the pointwise
// tiles: x the input at the first of them (blocks xstride floats apart), w the packed weights
// of k channels, y the output ([m][n], blocked when y_blocked), the epilogue's residual blocked.
static void cb_pointwise(const cg_kernels *kern, long k, const float *x, long xstride, const float *w, long b0, long ob, long m,
                         long n, long p0, long pixels, float *y, int y_blocked, const cg_epilogue *e) {
    // A pair of blocks in one tile where the path has such tiles, else block by block.
    const long per = kern->direct_blocks == 2 ? ob : 1, np_max = kern->direct_np, pieces = (pixels + np_max - 1) / np_max;
    const cg_blocked_pointwise_fn *tiles = (y_blocked ? kern->blocked_pointwise : kern->blocked_pointwise_planar)[per - 1];
    const float *res = e ? e->residual : NULL;
    const long step = y_blocked ? 16 : 1, ystride = y_blocked ? n * 16 : n;
    for (long b = b0; b < b0 + ob; b += per) {
        cg_blocked_out o;
        for (long j = 0; j < per; j++) {
            o.lanes[j] = cg_min(16, m - (b + j) * 16);
            cb_lanes(e, (b + j) * 16, o.lanes[j], o.s + 16 * j, o.t + 16 * j, &o.act, &o.alpha);
        }
        float *yb = y + (y_blocked ? (b * n + p0) * 16 : b * 16 * n + p0);
        const float *rb = res ? res + (b * n + p0) * 16 : NULL;
        long col = 0;
        for (long piece = 0; piece < pieces; piece++) {
            long np = pixels / pieces + (piece < pixels % pieces ? 1 : 0);
            tiles[np - 1](k, x + col * 16, xstride, w + b * k * 16, k * 16, &o, rb ? rb + col * 16 : NULL, n * 16, yb + col * step,
                          ystride);
            col += np;
        }
    }
}

void cg_blocked_direct_conv(const cg_conv *g, const float *x, int x_blocked, const float *w, long m, long u0, long u1, float *y,
                            int y_blocked, const cg_epilogue *epilogue, int res_blocked, float *workspace) {
    long hp, wp;
    cg_conv_padded_size(g, &hp, &wp);
    if (x_blocked) { hp = g->h; wp = g->w; }
    const long blocks = (m + 15) / 16, band_rows = cb_band_rows(g), bands = cb_bands(g);
    const long ow = g->out_w, n = g->out_h * ow;
    const cg_kernels *kern = cg_kernels_now();
    float *acc = cg_align64(workspace);
    const long bstride = band_rows * ow * 16;
    const int flat = g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && wp == ow && hp == g->out_h;
    const int pointwise = cb_pointwise_takes(kern, flat, x_blocked, y_blocked, epilogue, res_blocked);
    for (long u = u0; u < u1; u++) {
        long pair = u / bands, band = u % bands;
        long b0 = 2 * pair, ob = cg_min(2, blocks - b0);
        long oh0 = band * band_rows, oh1 = cg_min(g->out_h, oh0 + band_rows);
        if (pointwise) {
            cb_pointwise(kern, g->channels, x + oh0 * ow * 16, n * 16, w, b0, ob, m, n, oh0 * ow, (oh1 - oh0) * ow, y, y_blocked,
                         epilogue);
            continue;
        }
        cb_direct_sums(kern, g, x, x_blocked, hp, wp, w, b0, ob, oh0, oh1, acc, bstride);
        cb_direct_finish(kern, acc, bstride, b0, ob, m, n, oh0 * ow, (oh1 - oh0) * ow, y, y_blocked, epilogue, res_blocked);
    }
}

// MARK: A depthwise 3×3 and the 1×1 convolution after it

// The depthwise kernel for a block holding `lanes` channels: the path's half-width one when
// they fit it.
static inline cg_blocked_depthwise_fn cb_depthwise_of(const cg_kernels *kern, long lanes) {
    return lanes <= 8 && kern->blocked_depthwise8 ? kern->blocked_depthwise8 : kern->blocked_depthwise;
}

// Output rows per unit: about CB_SEPARABLE_PIXELS pixels (the band's depthwise output for 96
// channels, 96 KB, and two blocks' sums stay in L2), fewer on small maps so that there are at
// least CB_SEPARABLE_UNITS units (32²: 8 units of 4 rows, not 4 of 8) for threads to share out.
#define CB_SEPARABLE_PIXELS 256
#define CB_SEPARABLE_UNITS 8
static long cb_separable_rows(const cg_conv *gd) {
    return cg_max(1, cg_min(CB_SEPARABLE_PIXELS / gd->out_w, gd->out_h / CB_SEPARABLE_UNITS));
}

long cg_blocked_separable_units(const cg_conv *gd) {
    long r = cb_separable_rows(gd);
    return (gd->out_h + r - 1) / r;
}

size_t cg_blocked_separable_workspace_count(const cg_conv *gd) {
    long pixels = cb_separable_rows(gd) * gd->out_w;
    return (size_t)(((gd->channels + 15) / 16 + 2) * pixels * 16 + 32);
}

void cg_blocked_separable(const cg_conv *gd, const float *x, const float *wd, const cg_epilogue *ed, const cg_conv *gp,
                          const float *wp, long m, long u0, long u1, float *y, int y_blocked, const cg_epilogue *ep,
                          int res_blocked, float *workspace) {
    const cg_kernels *kern = cg_kernels_now();
    const long rows = cb_separable_rows(gd), ow = gd->out_w, n = gd->out_h * ow;
    const long mid_blocks = (gd->channels + 15) / 16, blocks = (m + 15) / 16;
    const long in_plane = gd->h * gd->w * 16, band = rows * ow * 16;
    float *mid = cg_align64(workspace);
    float *acc = mid + mid_blocks * band;
    for (long u = u0; u < u1; u++) {
        long oh0 = u * rows, oh1 = cg_min(gd->out_h, oh0 + rows), count = oh1 - oh0;
        // The depthwise rows of the band, block by block, as a blocked image of `count` rows.
        // (The kernel writes row oh at y + oh·out_w·16: y is moved back by oh0 rows.)
        for (long b = 0; b < mid_blocks; b++) {
            float s[16], t[16], alpha;
            int act;
            cb_lanes(ed, b * 16, cg_min(16, gd->channels - b * 16), s, t, &act, &alpha);
            cb_depthwise_of(kern, gd->channels - b * 16)(gd, x + b * in_plane, wd + b * 144, s, t, act, alpha, oh0, oh1,
                                                         mid + b * count * ow * 16 - oh0 * ow * 16);
        }
        // The 1×1 layer over that image, pair of output blocks by pair.
        cg_conv g1 = *gp;
        g1.h = g1.out_h = count;
        for (long b0 = 0; b0 < blocks; b0 += 2) {
            long ob = cg_min(2, blocks - b0);
            if (cb_pointwise_takes(kern, 1, 1, y_blocked, ep, res_blocked)) {
                cb_pointwise(kern, gp->channels, mid, count * ow * 16, wp, b0, ob, m, n, oh0 * ow, count * ow, y, y_blocked, ep);
                continue;
            }
            cb_direct_sums(kern, &g1, mid, 1, count, ow, wp, b0, ob, 0, count, acc, band);
            cb_direct_finish(kern, acc, band, b0, ob, m, n, oh0 * ow, count * ow, y, y_blocked, ep, res_blocked);
        }
    }
}

// MARK: Depthwise 3×3

size_t cg_blocked_depthwise_weights_count(long channels) { return (size_t)((channels + 15) / 16 * 9 * 16); }

void cg_blocked_depthwise_pack(const float *w, long channels, float *dst) {
    for (long b = 0; b < (channels + 15) / 16; b++) {
        for (long tap = 0; tap < 9; tap++) {
            for (long l = 0; l < 16; l++) {
                long c = b * 16 + l;
                dst[(b * 9 + tap) * 16 + l] = c < channels ? w[c * 9 + tap] : 0.0f;
            }
        }
    }
}

static long cb_depthwise_band_rows(const cg_conv *g) { return cg_max(1, CB_DEPTHWISE_PIXELS / g->out_w); }
static long cb_depthwise_bands(const cg_conv *g) {
    long r = cb_depthwise_band_rows(g);
    return (g->out_h + r - 1) / r;
}

long cg_blocked_depthwise_units(const cg_conv *g) { return (g->channels + 15) / 16 * cb_depthwise_bands(g); }

void cg_blocked_depthwise3x3(const cg_conv *g, const float *x, const float *w, long u0, long u1, float *y,
                             const cg_epilogue *epilogue) {
    const cg_kernels *kern = cg_kernels_now();
    const long bands = cb_depthwise_bands(g), rows = cb_depthwise_band_rows(g);
    const long in_plane = g->h * g->w * 16, out_plane = g->out_h * g->out_w * 16;
    for (long u = u0; u < u1; u++) {
        long b = u / bands, band = u % bands;
        long oh0 = band * rows, oh1 = cg_min(g->out_h, oh0 + rows);
        float s[16], t[16], alpha;
        int act;
        cb_lanes(epilogue, b * 16, cg_min(16, g->channels - b * 16), s, t, &act, &alpha);
        cb_depthwise_of(kern, g->channels - b * 16)(g, x + b * in_plane, w + b * 144, s, t, act, alpha, oh0, oh1, y + b * out_plane);
    }
}

// MARK: A stem of few input channels

int cg_blocked_stem_takes(const cg_conv *g) {
    return cg_kernels_now()->blocked_stem && g->kh == 3 && g->kw == 3 && g->sh == 2 && g->sw == 2 && g->dh == 1 && g->dw == 1 &&
           g->channels <= CG_STEM_CHANNELS;
}

long cg_blocked_stem_units(const cg_conv *g) { return g->out_h; }

void cg_blocked_stem(const cg_conv *g, const float *x, const float *w, long m, long u0, long u1, float *y,
                     const cg_epilogue *epilogue) {
    const cg_kernels *kern = cg_kernels_now();
    for (long oh = u0; oh < u1; oh++) {
        // Passes of at most 24 channels (1.5 blocks: the kernel's accumulators), else of one block.
        for (long c0 = 0; c0 < m; ) {
            long nch = m - c0 <= 24 ? m - c0 : 16;
            kern->blocked_stem(g, x, w, m, c0, nch, epilogue, oh, y);
            c0 += nch;
        }
    }
}

// MARK: Reorders

void cg_blocked_to_planar(const float *x, long channels, long plane, long c0, long c1, float *y) {
    (void)channels;
    for (long c = c0; c < c1; c++) {
        const float *restrict src = x + (c / 16) * plane * 16 + c % 16;
        float *restrict dst = y + c * plane;
        for (long p = 0; p < plane; p++) dst[p] = src[16 * p];
    }
}

void cg_planar_to_blocked(const float *x, long channels, long plane, long c0, long c1, float *y) {
    (void)channels;
    for (long c = c0; c < c1; c++) {
        const float *restrict src = x + c * plane;
        float *restrict dst = y + (c / 16) * plane * 16 + c % 16;
        for (long p = 0; p < plane; p++) dst[16 * p] = src[p];
    }
}
