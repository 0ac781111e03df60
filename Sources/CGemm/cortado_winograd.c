// Winograd F(4×4, 3×3) convolution (see include/cortado_winograd.h): the transforms as plain
// loops instantiated per path with its target attribute (the compiler vectorises them), the 36
// products on the direct convolution's tiles of the path in use (cg_kernels_now()).
#include "cortado_winograd.h"

#include <stdint.h>
#include <string.h>

#include "cg_kernels.h"
#include "cortado_pool.h"

// Tiles a band aims at: its blocked sums, 36 positions × 2 blocks × 16 lanes × 48 tiles
// (221 KB), stay in L2 between the products and the output transform.
#define CW_BAND_TILES 48

// Layers of more than CW_CHUNK_ABOVE input channels, whose weights for one position and block
// (64 bytes a channel) do not stay in L1 from one piece of tiles to the next, run the products
// chunk by chunk of CW_CHUNK channels, every piece of the band on one chunk before the next: the
// first piece reads the chunk's weights from memory, the others from L1. Before each piece its
// share of the weights CW_AHEAD chunks on is asked for into L2, so that memory streams the
// weights all the while the pieces run, not only while the first one waits on them (the weights
// of a 13 × 13 layer serve 16 tiles and come from memory at every use). Smaller layers run each
// piece over all the channels (fewer passes over the sums).
#define CW_CHUNK_ABOVE 384
#define CW_CHUNK 48
#define CW_AHEAD 2

// Piece p of `pieces`'s share of the lines of floats [p, p + n), asked for into L2.
static inline void cw_prefetch_share(const float *p, long n, long piece, long pieces) {
    long lines = (n + 15) / 16, per = (lines + pieces - 1) / pieces, end = cg_min(lines, (piece + 1) * per);
    for (long l = piece * per; l < end; l++) __builtin_prefetch((const char *)(p + 16 * l), 0, 2);
}

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
// m + ξ·xi_stride), out gets the 16 pixels' 16 lanes (pixel k of the tile's row i at
// out + i·row_stride + 16·k, so that a row of tiles lands as whole rows of blocked pixels).
#define CW_OUTPUT_TILE(NAME, TARGET) \
    TARGET static void NAME(const float *m, long xi_stride, long row_stride, float *out) { \
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
            float *restrict p = out + row_stride * i; \
            for (int l = 0; l < 16; l++) { \
                float o0, o1, o2, o3; \
                CW_AT(mid[i][0][l], mid[i][1][l], mid[i][2][l], mid[i][3][l], mid[i][4][l], mid[i][5][l], o0, o1, o2, o3); \
                p[l] = o0; \
                p[16 + l] = o1; \
                p[32 + l] = o2; \
                p[48 + l] = o3; \
            } \
        } \
    }

typedef void (*cw_output_tile_fn)(const float *m, long xi_stride, long row_stride, float *out);

CW_INPUT_ROW(cw_input_row_plain, )
CW_OUTPUT_TILE(cw_output_tile_plain, )
#if defined(__x86_64__)
#define CW_AVX2 __attribute__((target("avx2,fma")))
#define CW_AVX512 __attribute__((target("avx512f,avx512vl,fma")))
CW_OUTPUT_TILE(cw_output_tile_avx2, CW_AVX2)
CW_OUTPUT_TILE(cw_output_tile_avx512, CW_AVX512)
#endif

// (The AVX-512 and AVX2 paths have transforms of their own: cw_input_plane_row_avx512 and
// cw_input_plane_row_avx2 below; the other paths run cw_input_row_plain.)

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

#if defined(__x86_64__)
#include <immintrin.h>

// Lanes [lo, hi) of a 16-lane mask (empty when hi ≤ lo).
static inline __mmask16 cw_lane_range(long lo, long hi) {
    lo = cg_max(0, lo);
    hi = cg_min(16, hi);
    return hi <= lo ? (__mmask16)0 : (__mmask16)(((1u << hi) - 1) & ~((1u << lo) - 1));
}

// Row ty of tiles of one channel's plane, AVX-512, 16 tiles to a register: the six input rows a
// tile row reads are loaded straight from the plane with masked loads (the zero border is the
// masked-off lanes, so no padded copy is made), Bᵀ is applied down the rows on whole registers
// of columns, then the columns are split by their place in a tile (4t + j: four-way
// deinterleaves with permutes) and Bᵀ is applied across; each of the 36 values goes to
// v + ξ·xi_stride + tx with one masked store per 16 tiles. The scalar path's per-tile loads at
// a stride of 4 and its row copies cost more than the products the transform feeds.
CW_AVX512 static void cw_input_plane_row_avx512(const cg_conv *g, const float *plane, long ty, long tw, float *v, long xi_stride) {
    // Within a pair of registers (tiles 8q … 8q+7): columns 4t + j for j = 0, 2 in the low and
    // high halves, and for j = 1, 3.
    const __m512i pick02 = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 2, 6, 10, 14, 18, 22, 26, 30);
    const __m512i pick13 = _mm512_setr_epi32(1, 5, 9, 13, 17, 21, 25, 29, 3, 7, 11, 15, 19, 23, 27, 31);
    const __m512i low = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
    const __m512i high = _mm512_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    // Lanes 1 … 15 of a, then lane 0 or 1 of b: column 4t + 4 (or + 5) is column 4(t + 1) (+ 1).
    const __m512i next0 = _mm512_setr_epi32(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16);
    const __m512i next1 = _mm512_setr_epi32(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 17);
    const float *rows[6];
    for (int r = 0; r < 6; r++) {
        long ih = 4 * ty - g->pad_h + r;
        rows[r] = ih >= 0 && ih < g->h ? plane + ih * g->w : NULL;
    }
    for (long x0 = 0; x0 < tw; x0 += 16) {
        // Patch column k of tile x0 is input column col0 + k; five registers hold columns
        // [0, 80) of the 16 tiles' patches (66 are read).
        long col0 = 4 * x0 - g->pad_w;
        __m512 e[6][5];
        for (int q = 0; q < 5; q++) {
            long start = col0 + 16 * q;
            __mmask16 inside = cw_lane_range(-start, g->w - start);
            __m512 d[6];
            for (int r = 0; r < 6; r++) d[r] = rows[r] && inside ? _mm512_maskz_loadu_ps(inside, rows[r] + start) : _mm512_setzero_ps();
            CW_BT(d[0], d[1], d[2], d[3], d[4], d[5], e[0][q], e[1][q], e[2][q], e[3][q], e[4][q], e[5][q]);
        }
        __mmask16 store = cw_lane_range(0, tw - x0);
        for (int i = 0; i < 6; i++) {
            __m512 a = _mm512_permutex2var_ps(e[i][0], pick02, e[i][1]), b = _mm512_permutex2var_ps(e[i][2], pick02, e[i][3]);
            __m512 c = _mm512_permutex2var_ps(e[i][0], pick13, e[i][1]), d = _mm512_permutex2var_ps(e[i][2], pick13, e[i][3]);
            __m512 d0 = _mm512_permutex2var_ps(a, low, b), d2 = _mm512_permutex2var_ps(a, high, b);
            __m512 d1 = _mm512_permutex2var_ps(c, low, d), d3 = _mm512_permutex2var_ps(c, high, d);
            __m512 d4 = _mm512_permutex2var_ps(d0, next0, e[i][4]), d5 = _mm512_permutex2var_ps(d1, next1, e[i][4]);
            __m512 o[6];
            CW_BT(d0, d1, d2, d3, d4, d5, o[0], o[1], o[2], o[3], o[4], o[5]);
            for (int j = 0; j < 6; j++) _mm512_mask_storeu_ps(v + (i * 6 + j) * xi_stride + x0, store, o[j]);
        }
    }
}

// Row ty of tiles of one channel's plane, AVX2, 8 tiles to a register, read straight from the
// plane (as cw_input_plane_row_avx512). Each of the six input rows is loaded as five registers
// whose halves are the columns of tiles t and t + 4 (4t … 4t + 3 for t = 0 … 4), so that a 4 × 4
// transpose within the halves (in-lane shuffles only) leaves the columns 4t + j of the eight
// tiles in natural order; Bᵀ runs down the rows on those registers, then across. A group of
// tiles whose 36 patch columns or six rows reach past the input is first copied into a zeroed
// block (the plane's borders; maps narrower than a group).
CW_AVX2 static void cw_input_plane_row_avx2(const cg_conv *g, const float *plane, long ty, long tw, float *v, long xi_stride) {
    float block[6][40] __attribute__((aligned(32)));
    static const float zeros[40];
    long ih0 = 4 * ty - g->pad_h;
    int rows_inside = ih0 >= 0 && ih0 + 6 <= g->h;
    for (long x0 = 0; x0 < tw; x0 += 8) {
        long col0 = 4 * x0 - g->pad_w;
        const float *rows[6];
        int inside = rows_inside && x0 + 8 <= tw && col0 >= 0 && col0 + 36 <= g->w;
        cg_patch_rows(plane, g->h, g->w, ih0, col0, 6, 36, inside, block[0], 40, zeros, rows);
        __m256 e[6][5];
        for (int q = 0; q < 5; q++) {
            __m256 d[6];
            for (int r = 0; r < 6; r++) d[r] = _mm256_loadu2_m128(rows[r] + 4 * q + 16, rows[r] + 4 * q);
            CW_BT(d[0], d[1], d[2], d[3], d[4], d[5], e[0][q], e[1][q], e[2][q], e[3][q], e[4][q], e[5][q]);
        }
        __m256i store = cg_lanes8(tw - x0);
        for (int i = 0; i < 6; i++) {
            // Columns 4t + j (j < 4) from registers 0–3, 4t + 4 and 4t + 5 from registers 1–4.
            __m256 t0 = _mm256_unpacklo_ps(e[i][0], e[i][1]), t1 = _mm256_unpackhi_ps(e[i][0], e[i][1]);
            __m256 t2 = _mm256_unpacklo_ps(e[i][2], e[i][3]), t3 = _mm256_unpackhi_ps(e[i][2], e[i][3]);
            __m256 u0 = _mm256_unpacklo_ps(e[i][1], e[i][2]), u1 = _mm256_unpacklo_ps(e[i][3], e[i][4]);
            __m256 d0 = _mm256_shuffle_ps(t0, t2, 0x44), d1 = _mm256_shuffle_ps(t0, t2, 0xEE);
            __m256 d2 = _mm256_shuffle_ps(t1, t3, 0x44), d3 = _mm256_shuffle_ps(t1, t3, 0xEE);
            __m256 d4 = _mm256_shuffle_ps(u0, u1, 0x44), d5 = _mm256_shuffle_ps(u0, u1, 0xEE);
            __m256 o[6];
            CW_BT(d0, d1, d2, d3, d4, d5, o[0], o[1], o[2], o[3], o[4], o[5]);
            for (int j = 0; j < 6; j++) _mm256_maskstore_ps(v + (i * 6 + j) * xi_stride + x0, store, o[j]);
        }
    }
}
#endif

size_t cg_winograd_workspace_count(const cg_conv *g) {
    long tw = cw_tiles_w(g);
    size_t input = (size_t)(6 * (4 * tw + 2) + 36 * tw + 32);
    // The sums, then four rows of blocked pixels for a row of tiles and (with a pooling) the
    // same rows finished into planar rows.
    size_t unit = (size_t)(36 * 2 * cw_band_tiles(g) * 16 + 2 * 4 * 4 * tw * 16 + 64);
    return (input > unit ? input : unit) + 16;
}

void cg_winograd_input(const cg_conv *g, const float *x, long c0, long c1, float *v, float *workspace) {
    long tw = cw_tiles_w(g), th = cw_tiles_h(g), t = tw * th, bw = 4 * tw + 2;
    long xi_stride = g->channels * t;
    float *rows = cg_align64(workspace), *mid = rows + cg_round_up(6 * bw, 16);
    // Input columns [lo, hi) of the row buffer hold input columns lo − pad_w...; the rest zeros.
    long lo = cg_min(bw, cg_max(0, g->pad_w)), hi = cg_max(lo, cg_min(bw, g->w + g->pad_w));
    for (long c = c0; c < c1; c++) {
        const float *plane = x + c * g->h * g->w;
#if defined(__x86_64__)
        if (cg_isa() == CG_ISA_AVX512) {
            for (long ty = 0; ty < th; ty++) cw_input_plane_row_avx512(g, plane, ty, tw, v + c * t + ty * tw, xi_stride);
            continue;
        }
        if (cg_isa() == CG_ISA_AVX2) {
            for (long ty = 0; ty < th; ty++) cw_input_plane_row_avx2(g, plane, ty, tw, v + c * t + ty * tw, xi_stride);
            continue;
        }
#endif
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
            cw_input_row_plain(rows, bw, tw, mid, v + c * t + ty * tw, xi_stride);
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

// Conv rows [r0, r0 + rows) of one block, finished into planar rows at `planar` (channel l's
// rows at planar + l·ld, each `width` floats from the run's first pixel), max-pooled 2×2 into y
// (the block's first channel, its pooled rows pooled_plane floats apart, pw floats a row) at
// pooled column pc0, count pooled columns: rows r0 … of a pooling from row 0, so r0 is even.
void cg_winograd_pool_rows(const float *planar, long ld, long width, long r0, long rows, long lanes, long pooled_plane, long pw,
                           long pc0, long count, float *y) {
    for (long l = 0; l < lanes; l++) {
        for (long r = 0; r + 1 < rows; r += 2) {
            const float *top = planar + l * ld + r * width;
            cg_max_pool_2x2_row(top, top + width, y + l * pooled_plane + (r0 + r) / 2 * pw + pc0, count, 2);
        }
    }
}

void cg_winograd_conv(const cg_conv *g, const float *v, const float *w, long m, long u0, long u1, float *y,
                      const cg_epilogue *epilogue, int pool, float *workspace) {
    long tw = cw_tiles_w(g), t = cw_tiles(g), band_tiles = cw_band_tiles(g), bands = cw_bands(g);
    long c = g->channels, blocks = (m + 15) / 16, n = g->out_h * g->out_w;
    long per_xi_w = blocks * 16 * c, per_xi_v = c * t;
    long chunk = c > CW_CHUNK_ABOVE ? CW_CHUNK : c;
    const cg_kernels *kern = cg_kernels_now();
    cw_output_tile_fn out_fn = cw_output_tile_now();
    long np_max = kern->direct_np;
    float *acc = cg_align64(workspace);
    long bstride = band_tiles * 16, xi_acc = 2 * bstride;
    float *out = acc + 36 * xi_acc, *planar = out + 4 * 4 * tw * 16;
    // With a pooling: the conv rows it reads, its width and its plane.
    long pool_rows = g->out_h / 2 * 2, pw = g->out_w / 2, pooled_plane = (g->out_h / 2) * pw;
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
                const float *wp = wx + pass * c * 16;
                for (long k0 = 0; k0 < c; k0 += chunk) {
                    long kn = cg_min(chunk, c - k0), q = 0;
                    // The chunk CW_AHEAD on in the unit's order of weights: this pass's, then
                    // the next pass's or the next position's.
                    long ahead = k0 + CW_AHEAD * chunk;
                    const float *next = ahead < c || pass + 1 < passes ? wp + ahead * 16 : wx + per_xi_w + (ahead - c) * 16;
                    for (long piece = 0; piece < pieces; piece++) {
                        for (long r = 0; chunk < c && r < (tiles == tiles_two ? ob : 1); r++) {
                            cw_prefetch_share(next + r * c * 16, chunk * 16, piece, pieces);
                        }
                        long np = count / pieces + (piece < count % pieces ? 1 : 0);
                        tiles[np - 1](kn, 1, 1, 0, 1, t, vx + q + k0 * t, wp + k0 * 16, c * 16,
                                      acc + xi * xi_acc + pass * bstride + q * 16, bstride, k0 == 0);
                        q += np;
                    }
                }
            }
        }
        // The band's tiles row of tiles by row of tiles: the output transform puts the run's
        // tiles side by side as four rows of blocked pixels, then the path's finishing of
        // direct-kernel blocks (the epilogue per vector, a transpose, whole runs of a row stored
        // at once; with a residual, added while the rows are in cache) writes each pixel row.
        for (long b = 0; b < ob; b++) {
            long channel = (b0 + b) * 16, lanes = cg_min(16, m - channel);
            for (long ty = t0 / tw; ty <= (t1 - 1) / tw; ty++) {
                long tx0 = cg_max(t0, ty * tw) - ty * tw, tx1 = cg_min(t1, (ty + 1) * tw) - ty * tw;
                long row_stride = 4 * (tx1 - tx0) * 16;
                for (long tx = tx0; tx < tx1; tx++) {
                    out_fn(acc + b * bstride + (ty * tw + tx - t0) * 16, xi_acc, row_stride, out + 4 * (tx - tx0) * 16);
                }
                long oh = 4 * ty, ow = 4 * tx0, width = cg_min(g->out_w, 4 * tx1) - ow;
                if (pool) {
                    // The four rows finished at once (the run's pixels past `width` too: whole
                    // rows of the run, row_stride / 16 pixels each), then pooled.
                    long run = row_stride / 16, rows = cg_min(4, pool_rows - oh), count = cg_min(pw, 2 * tx1) - 2 * tx0;
                    if (rows < 2 || count <= 0) continue;
                    kern->direct_finish(out, rows * run, lanes, channel, epilogue, planar, rows * run);
                    cg_winograd_pool_rows(planar, rows * run, run, oh, rows, lanes, pooled_plane, pw, 2 * tx0, count,
                                          y + channel * pooled_plane);
                    continue;
                }
                for (long i = 0; i < cg_min(4, g->out_h - oh); i++) {
                    long off = channel * n + (oh + i) * g->out_w + ow;
                    if (epilogue && epilogue->residual) {
                        cg_direct_finish_residual(kern, out + i * row_stride, width, lanes, channel, epilogue, y + off,
                                                  epilogue->residual + off, n);
                    } else {
                        kern->direct_finish(out + i * row_stride, width, lanes, channel, epilogue, y + off, n);
                    }
                }
            }
        }
    }
}
