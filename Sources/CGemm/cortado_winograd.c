// Winograd F(4×4, 3×3) convolution (see include/cortado_winograd.h): the transforms as plain
// loops instantiated per path with its target attribute (the compiler vectorises them), the 36
// products on the direct convolution's tiles of the path in use (cg_kernels_now()).
#include "cortado_winograd.h"

#include <stdint.h>
#include <string.h>

#include "cg_kernels.h"

// Tiles a band aims at: its blocked sums, 36 positions × 2 blocks × 16 lanes × 48 tiles
// (221 KB), stay in L2 between the products and the output transform.
#define CW_BAND_TILES 48

int cg_winograd_supported(const cg_conv *g) {
    return g->kh == 3 && g->kw == 3 && g->sh == 1 && g->sw == 1 && g->dh == 1 && g->dw == 1;
}

static inline long cw_tiles_w(const cg_conv *g) { return (g->out_w + 3) / 4; }
static inline long cw_tiles_h(const cg_conv *g) { return (g->out_h + 3) / 4; }
static inline long cw_tiles(const cg_conv *g) { return cw_tiles_w(g) * cw_tiles_h(g); }
static inline long cw_band_tiles(const cg_conv *g) {
    long t = cw_tiles(g), bands = (t + CW_BAND_TILES - 1) / CW_BAND_TILES;
    return (t + bands - 1) / bands;
}
static inline long cw_bands(const cg_conv *g) {
    long b = cw_band_tiles(g);
    return (cw_tiles(g) + b - 1) / b;
}

// MARK: Weights

size_t cg_winograd_weights_count(long m, long c) { return (size_t)(36 * ((m + 15) / 16 * 16) * c); }

// G (6 × 3): rows of the filter transform.
static const double cw_g[6][3] = {
    {1.0 / 4, 0, 0},
    {-1.0 / 6, -1.0 / 6, -1.0 / 6},
    {-1.0 / 6, 1.0 / 6, -1.0 / 6},
    {1.0 / 24, 1.0 / 12, 1.0 / 6},
    {1.0 / 24, -1.0 / 12, 1.0 / 6},
    {0, 0, 1},
};

void cg_winograd_pack_g(const float *w, long m, long c, const double *g, int alpha, float *dst) {
    long mp = (m + 15) / 16 * 16, per_xi = mp * c;
    memset(dst, 0, (size_t)(alpha * alpha * mp * c) * sizeof(float));
    for (long o = 0; o < m; o++) {
        for (long ci = 0; ci < c; ci++) {
            const float *f = w + (o * c + ci) * 9;
            double gf[6][3]; // G·g (alpha ≤ 6 rows)
            for (int i = 0; i < alpha; i++) {
                const double *gi = g + 3 * i;
                for (int j = 0; j < 3; j++) gf[i][j] = gi[0] * f[j] + gi[1] * f[3 + j] + gi[2] * f[6 + j];
            }
            long block = o / 16, lane = o % 16;
            for (int i = 0; i < alpha; i++) {
                for (int j = 0; j < alpha; j++) {
                    const double *gj = g + 3 * j;
                    double u = gf[i][0] * gj[0] + gf[i][1] * gj[1] + gf[i][2] * gj[2];
                    dst[(i * alpha + j) * per_xi + (block * c + ci) * 16 + lane] = (float)u;
                }
            }
        }
    }
}

void cg_winograd_pack(const float *w, long m, long c, float *dst) { cg_winograd_pack_g(w, m, c, &cw_g[0][0], 6, dst); }

// MARK: The transforms, per path

// Bᵀ applied to d0..d5 (one column or row of a patch), into v0..v5.
#define CW_BT(d0, d1, d2, d3, d4, d5, v0, v1, v2, v3, v4, v5) \
    do { \
        v0 = 4.0f * d0 - 5.0f * d2 + d4; \
        v1 = -4.0f * (d1 + d2) + d3 + d4; \
        v2 = 4.0f * (d1 - d2) - d3 + d4; \
        v3 = 2.0f * (d3 - d1) - d2 + d4; \
        v4 = 2.0f * (d1 - d3) - d2 + d4; \
        v5 = 4.0f * d1 - 5.0f * d3 + d5; \
    } while (0)

// Aᵀ applied to m0..m5, into o0..o3.
#define CW_AT(m0, m1, m2, m3, m4, m5, o0, o1, o2, o3) \
    do { \
        float s12 = m1 + m2, d12 = m1 - m2, s34 = m3 + m4, d34 = m3 - m4; \
        o0 = m0 + s12 + s34; \
        o1 = d12 + 2.0f * d34; \
        o2 = s12 + 4.0f * s34; \
        o3 = d12 + 8.0f * d34 + m5; \
    } while (0)

// One row of tiles of one channel: rows holds the six input rows the tiles read, each bw =
// 4·tw + 2 floats (zeros outside the input); the 36 transformed values of tile tx go to
// v[ξ·xi_stride + tx]. mid is 36·tw floats of workspace.
#define CW_INPUT_ROW(NAME, TARGET) \
    TARGET static void NAME(const float *rows, long bw, long tw, float *mid, float *v, long xi_stride) { \
        for (int r = 0; r < 6; r++) { \
            const float *restrict in = rows + r * bw; \
            float *restrict m0 = mid + (r * 6) * tw, *restrict m1 = m0 + tw, *restrict m2 = m1 + tw, *restrict m3 = m2 + tw, \
                            *restrict m4 = m3 + tw, *restrict m5 = m4 + tw; \
            for (long t = 0; t < tw; t++) { \
                const float *d = in + 4 * t; \
                float a0 = d[0], a1 = d[1], a2 = d[2], a3 = d[3], a4 = d[4], a5 = d[5]; \
                float b0, b1, b2, b3, b4, b5; \
                CW_BT(a0, a1, a2, a3, a4, a5, b0, b1, b2, b3, b4, b5); \
                m0[t] = b0; m1[t] = b1; m2[t] = b2; m3[t] = b3; m4[t] = b4; m5[t] = b5; \
            } \
        } \
        for (int j = 0; j < 6; j++) { \
            const float *restrict c0 = mid + j * tw, *restrict c1 = c0 + 6 * tw, *restrict c2 = c1 + 6 * tw, \
                                  *restrict c3 = c2 + 6 * tw, *restrict c4 = c3 + 6 * tw, *restrict c5 = c4 + 6 * tw; \
            float *restrict v0 = v + j * xi_stride, *restrict v1 = v0 + 6 * xi_stride, *restrict v2 = v1 + 6 * xi_stride, \
                            *restrict v3 = v2 + 6 * xi_stride, *restrict v4 = v3 + 6 * xi_stride, *restrict v5 = v4 + 6 * xi_stride; \
            for (long t = 0; t < tw; t++) { \
                float a0 = c0[t], a1 = c1[t], a2 = c2[t], a3 = c3[t], a4 = c4[t], a5 = c5[t]; \
                float b0, b1, b2, b3, b4, b5; \
                CW_BT(a0, a1, a2, a3, a4, a5, b0, b1, b2, b3, b4, b5); \
                v0[t] = b0; v1[t] = b1; v2[t] = b2; v3[t] = b3; v4[t] = b4; v5[t] = b5; \
            } \
        } \
    }

// One tile × one block of 16 channels: m holds the 36 positions' sums (position ξ's 16 lanes at
// m + ξ·xi_stride), out gets the 16 pixels' 16 lanes (pixel 4i + k at out + 16·(4i + k)), then
// y·scale + shift per lane (sc, sh: 16 lanes each).
#define CW_OUTPUT_TILE(NAME, TARGET) \
    TARGET static void NAME(const float *m, long xi_stride, const float *sc, const float *sh, float *out) { \
        float mid[4][6][16]; \
        for (int j = 0; j < 6; j++) { \
            const float *restrict r0 = m + j * xi_stride, *restrict r1 = r0 + 6 * xi_stride, *restrict r2 = r1 + 6 * xi_stride, \
                                  *restrict r3 = r2 + 6 * xi_stride, *restrict r4 = r3 + 6 * xi_stride, *restrict r5 = r4 + 6 * xi_stride; \
            for (int l = 0; l < 16; l++) { \
                float o0, o1, o2, o3; \
                CW_AT(r0[l], r1[l], r2[l], r3[l], r4[l], r5[l], o0, o1, o2, o3); \
                mid[0][j][l] = o0; mid[1][j][l] = o1; mid[2][j][l] = o2; mid[3][j][l] = o3; \
            } \
        } \
        for (int i = 0; i < 4; i++) { \
            float *restrict p = out + 64 * i; \
            for (int l = 0; l < 16; l++) { \
                float o0, o1, o2, o3; \
                CW_AT(mid[i][0][l], mid[i][1][l], mid[i][2][l], mid[i][3][l], mid[i][4][l], mid[i][5][l], o0, o1, o2, o3); \
                p[l] = o0 * sc[l] + sh[l]; \
                p[16 + l] = o1 * sc[l] + sh[l]; \
                p[32 + l] = o2 * sc[l] + sh[l]; \
                p[48 + l] = o3 * sc[l] + sh[l]; \
            } \
        } \
    }

typedef void (*cw_input_row_fn)(const float *rows, long bw, long tw, float *mid, float *v, long xi_stride);
typedef void (*cw_output_tile_fn)(const float *m, long xi_stride, const float *sc, const float *sh, float *out);

CW_INPUT_ROW(cw_input_row_plain, )
CW_OUTPUT_TILE(cw_output_tile_plain, )
#if defined(__x86_64__)
#define CW_AVX2 __attribute__((target("avx2,fma")))
#define CW_AVX512 __attribute__((target("avx512f,avx512vl,fma")))
CW_INPUT_ROW(cw_input_row_avx2, CW_AVX2)
CW_OUTPUT_TILE(cw_output_tile_avx2, CW_AVX2)
CW_INPUT_ROW(cw_input_row_avx512, CW_AVX512)
CW_OUTPUT_TILE(cw_output_tile_avx512, CW_AVX512)
#endif

static cw_input_row_fn cw_input_row_now(void) {
    switch (cg_isa()) {
#if defined(__x86_64__)
    case CG_ISA_AVX512: return cw_input_row_avx512;
    case CG_ISA_AVX2: return cw_input_row_avx2;
#endif
    default: return cw_input_row_plain;
    }
}

static cw_output_tile_fn cw_output_tile_now(void) {
    switch (cg_isa()) {
#if defined(__x86_64__)
    case CG_ISA_AVX512: return cw_output_tile_avx512;
    case CG_ISA_AVX2: return cw_output_tile_avx2;
#endif
    default: return cw_output_tile_plain;
    }
}

// MARK: The input

size_t cg_winograd_input_count(const cg_conv *g) { return (size_t)(36 * g->channels * cw_tiles(g)); }

size_t cg_winograd_workspace_count(const cg_conv *g) {
    long tw = cw_tiles_w(g);
    size_t input = (size_t)(6 * (4 * tw + 2) + 36 * tw + 32);
    size_t unit = (size_t)(36 * 2 * cw_band_tiles(g) * 16 + 16 * 16 + 64);
    return (input > unit ? input : unit) + 16;
}

void cg_winograd_input(const cg_conv *g, const float *x, long c0, long c1, float *v, float *workspace) {
    long tw = cw_tiles_w(g), th = cw_tiles_h(g), t = tw * th, bw = 4 * tw + 2;
    long xi_stride = g->channels * t;
    float *rows = cg_align64(workspace), *mid = rows + cg_round_up(6 * bw, 16);
    cw_input_row_fn row_fn = cw_input_row_now();
    // Input columns [lo, hi) of the row buffer hold input columns lo − pad_w...; the rest zeros.
    long lo = cg_min(bw, cg_max(0, g->pad_w)), hi = cg_max(lo, cg_min(bw, g->w + g->pad_w));
    for (long c = c0; c < c1; c++) {
        const float *plane = x + c * g->h * g->w;
        for (long ty = 0; ty < th; ty++) {
            for (int r = 0; r < 6; r++) {
                float *row = rows + r * bw;
                long ih = 4 * ty - g->pad_h + r;
                if (ih < 0 || ih >= g->h || hi == lo) {
                    memset(row, 0, (size_t)bw * sizeof(float));
                    continue;
                }
                if (lo > 0) memset(row, 0, (size_t)lo * sizeof(float));
                memcpy(row + lo, plane + ih * g->w + (lo - g->pad_w), (size_t)(hi - lo) * sizeof(float));
                if (hi < bw) memset(row + hi, 0, (size_t)(bw - hi) * sizeof(float));
            }
            row_fn(rows, bw, tw, mid, v + c * t + ty * tw, xi_stride);
        }
    }
}

// MARK: The units

long cg_winograd_units(const cg_conv *g, long m) {
    long blocks = (m + 15) / 16;
    return (blocks + 1) / 2 * cw_bands(g);
}

// (cg_kernels.h; F(2×2, 3×3) in cortado_winograd2.c stores its tiles here too.)
void cg_winograd_store_tile(const float *out, long side, long lanes, long rows, long cols, float *y, const float *res, long n,
                            long ld, const cg_epilogue *e) {
    cg_activation act = e ? e->activation : CG_ACT_NONE;
    float alpha = e ? e->alpha : 0.0f;
    for (long l = 0; l < lanes; l++) {
        for (long i = 0; i < rows; i++) {
            float *dst = y + l * n + i * ld;
            const float *r = res ? res + l * n + i * ld : NULL;
            for (long k = 0; k < cols; k++) {
                float v = out[16 * (side * i + k) + l];
                if (r) v += r[k];
                if (act == CG_ACT_RELU) v = v < 0.0f ? 0.0f : v;
                else if (act == CG_ACT_LEAKY_RELU) v = v < 0.0f ? v * alpha : v;
                dst[k] = v;
            }
        }
    }
}

void cg_winograd_conv(const cg_conv *g, const float *v, const float *w, long m, long u0, long u1, float *y,
                      const cg_epilogue *epilogue, float *workspace) {
    long tw = cw_tiles_w(g), t = cw_tiles(g), band_tiles = cw_band_tiles(g), bands = cw_bands(g);
    long c = g->channels, blocks = (m + 15) / 16, n = g->out_h * g->out_w;
    long per_xi_w = blocks * 16 * c, per_xi_v = c * t;
    const cg_kernels *kern = cg_kernels_now();
    cw_output_tile_fn out_fn = cw_output_tile_now();
    long np_max = kern->direct_np;
    float *acc = cg_align64(workspace);
    long bstride = band_tiles * 16, xi_acc = 2 * bstride;
    float *out = acc + 36 * xi_acc;
    const cd_tile_fn *tiles_one = kern->direct_tiles[0][0];
    const cd_tile_fn *tiles_two = kern->direct_blocks == 2 ? kern->direct_tiles[1][0] : NULL;
    for (long u = u0; u < u1; u++) {
        long pair = u / bands, band = u % bands;
        long b0 = 2 * pair, ob = cg_min(2, blocks - b0);
        long t0 = band * band_tiles, t1 = cg_min(t, t0 + band_tiles), count = t1 - t0;
        const cd_tile_fn *tiles = ob == 2 && tiles_two ? tiles_two : tiles_one;
        long passes = ob == 2 && !tiles_two ? 2 : 1;
        long pieces = (count + np_max - 1) / np_max;
        for (long xi = 0; xi < 36; xi++) {
            const float *wx = w + xi * per_xi_w + b0 * c * 16;
            const float *vx = v + xi * per_xi_v + t0;
            for (long pass = 0; pass < passes; pass++) {
                long q = 0;
                for (long piece = 0; piece < pieces; piece++) {
                    long np = count / pieces + (piece < count % pieces ? 1 : 0);
                    tiles[np - 1](c, 1, 1, 0, 1, t, vx + q, wx + pass * c * 16, c * 16, acc + xi * xi_acc + pass * bstride + q * 16,
                                  bstride, 1);
                    q += np;
                }
            }
        }
        for (long b = 0; b < ob; b++) {
            long channel = (b0 + b) * 16, lanes = cg_min(16, m - channel);
            float sc[16], sh[16];
            for (long l = 0; l < 16; l++) {
                sc[l] = epilogue && epilogue->scale && l < lanes ? epilogue->scale[channel + l] : 1.0f;
                sh[l] = epilogue && epilogue->shift && l < lanes ? epilogue->shift[channel + l] : 0.0f;
            }
            for (long q = t0; q < t1; q++) {
                long ty = q / tw, tx = q % tw, oh = 4 * ty, ow = 4 * tx;
                out_fn(acc + b * bstride + (q - t0) * 16, xi_acc, sc, sh, out);
                long off = channel * n + oh * g->out_w + ow;
                cg_winograd_store_tile(out, 4, lanes, cg_min(4, g->out_h - oh), cg_min(4, g->out_w - ow), y + off,
                              epilogue && epilogue->residual ? epilogue->residual + off : NULL, n, g->out_w, epilogue);
            }
        }
    }
}
