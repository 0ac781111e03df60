// Winograd F(2×2, 3×3) convolution (see include/cortado_winograd.h): the smaller-tile sibling
// of cortado_winograd.c, for maps where F(4×4, 3×3)'s weights (4× the direct ones) cost more to
// stream than its multiplications save. The transforms are plain loops instantiated per path
// with its target attribute; the 16 products run on the direct convolution's tiles of the path
// in use (cg_kernels_now()).
#include "cortado_winograd.h"

#include <stdint.h>
#include <string.h>

#include "cg_kernels.h"

// Tiles a band aims at and blocks of 16 output channels a unit covers: a unit's blocked sums,
// 16 positions × 8 blocks × 16 lanes × 64 tiles (512 KB), and one position's transformed
// input for a band stay in L2 while the unit's weights stream by once.
#define CW2_BAND_TILES 64
#define CW2_GROUP_BLOCKS 8

static inline long cw2_tiles_w(const cg_conv *g) { return (g->out_w + 1) / 2; }
static inline long cw2_tiles_h(const cg_conv *g) { return (g->out_h + 1) / 2; }
static inline long cw2_tiles(const cg_conv *g) { return cw2_tiles_w(g) * cw2_tiles_h(g); }
// Bands are whole rows of tiles: near-equal counts of rows, about CW2_BAND_TILES tiles each.
static inline long cw2_band_rows(const cg_conv *g) {
    long th = cw2_tiles_h(g), r = cg_max(1, CW2_BAND_TILES / cw2_tiles_w(g)), bands = (th + r - 1) / r;
    return (th + bands - 1) / bands;
}
static inline long cw2_bands(const cg_conv *g) {
    long r = cw2_band_rows(g);
    return (cw2_tiles_h(g) + r - 1) / r;
}
static inline long cw2_band_tiles(const cg_conv *g) { return cw2_band_rows(g) * cw2_tiles_w(g); }

// The pieces the products take: a band's tiles (row-major over the image) cut into near-equal
// runs of consecutive tiles, at most np_max each (the widest direct tile of the path). A piece
// may start and end anywhere in a row, so narrow paths get pieces near their widest tile
// (a 7-tile row of a 13 × 13 map does not become runs of 4 and 3); the input transform writes
// each row's tiles to the pieces the row overlaps.
typedef struct {
    long tw, th, band_rows, bands, np_max;
} cw2_layout;

static cw2_layout cw2_layout_of(const cg_conv *g, long np_max) {
    cw2_layout l = {cw2_tiles_w(g), cw2_tiles_h(g), cw2_band_rows(g), cw2_bands(g), np_max};
    return l;
}

// First tile and tile count of band b.
static void cw2_band(const cw2_layout *l, long b, long *t0, long *count) {
    long ty0 = b * l->band_rows;
    *t0 = ty0 * l->tw;
    *count = (cg_min(l->th, ty0 + l->band_rows) - ty0) * l->tw;
}

// Pieces of band b.
static long cw2_pieces(const cw2_layout *l, long b) {
    long t0, count;
    cw2_band(l, b, &t0, &count);
    return (count + l->np_max - 1) / l->np_max;
}

// Piece p of band b: its first tile (row-major over the image) and its tile count.
static void cw2_piece(const cw2_layout *l, long b, long p, long *q0, long *np) {
    long t0, count, pieces = cw2_pieces(l, b);
    cw2_band(l, b, &t0, &count);
    long base = count / pieces, rem = count % pieces;
    *q0 = t0 + p * base + cg_min(p, rem);
    *np = base + (p < rem ? 1 : 0);
}

// The piece of band b that holds tile q.
static long cw2_piece_of(const cw2_layout *l, long b, long q) {
    long t0, count, pieces = cw2_pieces(l, b);
    cw2_band(l, b, &t0, &count);
    long base = count / pieces, rem = count % pieces, o = q - t0;
    return o < rem * (base + 1) ? o / (base + 1) : rem + (o - rem * (base + 1)) / base;
}

// MARK: Weights

size_t cg_winograd2_weights_count(long m, long c) { return (size_t)(16 * ((m + 15) / 16 * 16) * c); }

// G (4 × 3): rows of the filter transform.
static const double cw2_g[4][3] = {
    {1, 0, 0},
    {0.5, 0.5, 0.5},
    {0.5, -0.5, 0.5},
    {0, 0, 1},
};

void cg_winograd2_pack(const float *w, long m, long c, float *dst) { cg_winograd_pack_g(w, m, c, &cw2_g[0][0], 4, dst); }

// MARK: The transforms, per path

// Bᵀ applied to d0..d3 (one column or row of a 4 × 4 patch), into v0..v3.
#define CW2_BT(d0, d1, d2, d3, v0, v1, v2, v3) \
    do { \
        v0 = d0 - d2; \
        v1 = d1 + d2; \
        v2 = d2 - d1; \
        v3 = d1 - d3; \
    } while (0)

// One row of tiles of one channel: rows holds the four input rows the tiles read, each bw =
// 2·tw + 2 floats (zeros outside the input); the 16 transformed values of tile tx go to
// v[ξ·xi_stride + tx]. mid is 16·tw floats of workspace.
#define CW2_INPUT_ROW(NAME, TARGET) \
    TARGET static void NAME(const float *rows, long bw, long tw, float *mid, float *v, long xi_stride) { \
        for (int r = 0; r < 4; r++) { \
            const float *restrict in = rows + r * bw; \
            float *restrict m0 = mid + (r * 4) * tw, *restrict m1 = m0 + tw, *restrict m2 = m1 + tw, *restrict m3 = m2 + tw; \
            for (long t = 0; t < tw; t++) { \
                const float *d = in + 2 * t; \
                float b0, b1, b2, b3; \
                CW2_BT(d[0], d[1], d[2], d[3], b0, b1, b2, b3); \
                m0[t] = b0; m1[t] = b1; m2[t] = b2; m3[t] = b3; \
            } \
        } \
        for (int j = 0; j < 4; j++) { \
            const float *restrict c0 = mid + j * tw, *restrict c1 = c0 + 4 * tw, *restrict c2 = c1 + 4 * tw, *restrict c3 = c2 + 4 * tw; \
            float *restrict v0 = v + j * xi_stride, *restrict v1 = v0 + 4 * xi_stride, *restrict v2 = v1 + 4 * xi_stride, \
                            *restrict v3 = v2 + 4 * xi_stride; \
            for (long t = 0; t < tw; t++) { \
                float b0, b1, b2, b3; \
                CW2_BT(c0[t], c1[t], c2[t], c3[t], b0, b1, b2, b3); \
                v0[t] = b0; v1[t] = b1; v2[t] = b2; v3[t] = b3; \
            } \
        } \
    }

// One tile × one block of 16 channels: m holds the 16 positions' sums (position ξ's 16 lanes at
// m + ξ·xi_stride); out gets the 4 pixels' 16 lanes (pixel 2i + k at out + 16·(2i + k)) as
// y·scale + shift per lane (sc, sh: 16 lanes each). Aᵀ = [1 1 1 0; 0 1 −1 −1].
#define CW2_OUTPUT_TILE(NAME, TARGET) \
    TARGET static void NAME(const float *m, long xi_stride, const float *sc, const float *sh, float *out) { \
        float mid[2][4][16]; \
        for (int j = 0; j < 4; j++) { \
            const float *restrict r0 = m + j * xi_stride, *restrict r1 = r0 + 4 * xi_stride, *restrict r2 = r1 + 4 * xi_stride, \
                                  *restrict r3 = r2 + 4 * xi_stride; \
            for (int l = 0; l < 16; l++) { \
                mid[0][j][l] = r0[l] + r1[l] + r2[l]; \
                mid[1][j][l] = r1[l] - r2[l] - r3[l]; \
            } \
        } \
        for (int i = 0; i < 2; i++) { \
            float *restrict p = out + 32 * i; \
            for (int l = 0; l < 16; l++) { \
                float o0 = mid[i][0][l] + mid[i][1][l] + mid[i][2][l], o1 = mid[i][1][l] - mid[i][2][l] - mid[i][3][l]; \
                p[l] = o0 * sc[l] + sh[l]; \
                p[16 + l] = o1 * sc[l] + sh[l]; \
            } \
        } \
    }

typedef void (*cw2_input_row_fn)(const float *rows, long bw, long tw, float *mid, float *v, long xi_stride);
typedef void (*cw2_output_tile_fn)(const float *m, long xi_stride, const float *sc, const float *sh, float *out);

CW2_INPUT_ROW(cw2_input_row_plain, )
CW2_OUTPUT_TILE(cw2_output_tile_plain, )
#if defined(__x86_64__)
#define CW2_AVX2 __attribute__((target("avx2,fma")))
#define CW2_AVX512 __attribute__((target("avx512f,avx512vl,fma")))
CW2_INPUT_ROW(cw2_input_row_avx2, CW2_AVX2)
CW2_OUTPUT_TILE(cw2_output_tile_avx2, CW2_AVX2)
CW2_INPUT_ROW(cw2_input_row_avx512, CW2_AVX512)
CW2_OUTPUT_TILE(cw2_output_tile_avx512, CW2_AVX512)
#endif

static cw2_input_row_fn cw2_input_row_now(void) {
    switch (cg_isa()) {
#if defined(__x86_64__)
    case CG_ISA_AVX512: return cw2_input_row_avx512;
    case CG_ISA_AVX2: return cw2_input_row_avx2;
#endif
    default: return cw2_input_row_plain;
    }
}

static cw2_output_tile_fn cw2_output_tile_now(void) {
    switch (cg_isa()) {
#if defined(__x86_64__)
    case CG_ISA_AVX512: return cw2_output_tile_avx512;
    case CG_ISA_AVX2: return cw2_output_tile_avx2;
#endif
    default: return cw2_output_tile_plain;
    }
}

// MARK: The input

// Floats from one position's transformed input to the next: 16 more than it holds, so that the
// 16 positions, written side by side by the input transform, do not all fall in one set of L1
// (C·tiles floats is often a multiple of 4 KB).
static inline long cw2_xi_stride(const cg_conv *g) { return g->channels * cw2_tiles(g) + 16; }

size_t cg_winograd2_input_count(const cg_conv *g) { return (size_t)(16 * cw2_xi_stride(g)); }

size_t cg_winograd2_workspace_count(const cg_conv *g) {
    long tw = cw2_tiles_w(g);
    size_t input = (size_t)(4 * (2 * tw + 2) + 32 * tw + 4 * tw + 64);
    // The sums, one tile's output, a band's pixels in blocks of 16 channels and (with a pooling)
    // the same pixels finished into planar rows.
    size_t unit = (size_t)(16 * CW2_GROUP_BLOCKS * cw2_band_tiles(g) * 16 + 4 * 16 + 2 * 2 * cw2_band_rows(g) * g->out_w * 16 + 64);
    return (input > unit ? input : unit) + 16;
}

// Segment s (from 0, while it returns 1) of row ty of band b: the tiles of the row in one
// piece, that piece (first tile q0, np tiles) and the segment's columns [x0, x0 + w).
static int cw2_row_segment(const cw2_layout *l, long b, long ty, long s, long *q0, long *np, long *x0, long *w) {
    long r0 = ty * l->tw, r1 = r0 + l->tw, p = cw2_piece_of(l, b, r0) + s;
    if (p >= cw2_pieces(l, b)) return 0;
    cw2_piece(l, b, p, q0, np);
    if (*q0 >= r1) return 0;
    long a = cg_max(*q0, r0), e = cg_min(*q0 + *np, r1);
    *x0 = a - r0;
    *w = e - a;
    return 1;
}

#if defined(__x86_64__)
#include <immintrin.h>

// Tiles [x0, x0 + tw) of row ty of channels [c0, c1), AVX-512, tw ≤ 15 (a patch row of 2·tw + 2
// ≤ 32 values is two registers): each of the four input rows is read once with masked loads (the
// zero borders are the masked-off lanes), split into even and odd columns, and Bᵀ is applied
// across and then down, tile by tile in the lanes; the 16 values of the tiles go to
// v + ξ·xi_stride + at + c·np with one masked store each.
CW2_AVX512 static void cw2_input_row_tiles_avx512(const cg_conv *g, const float *x, long c0, long c1, long ty, long x0, long tw,
                                                  float *v, long xi_stride, long at, long np) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    const __m512i even2 = _mm512_setr_epi32(2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 0);
    const __m512i odd2 = _mm512_setr_epi32(3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31, 1);
    long bw = 2 * tw + 2, col0 = 2 * x0 - g->pad_w; // patch column k is input column col0 + k
    // Patch columns [lo, hi) come from the input.
    long lo = cg_max(0, -col0), hi = cg_min(bw, g->w - col0);
    __mmask16 m_lo = 0, m_hi = 0, store = (__mmask16)((1u << tw) - 1);
    for (long k = lo; k < hi; k++) {
        if (k < 16) m_lo |= (__mmask16)(1u << k);
        else m_hi |= (__mmask16)(1u << (k - 16));
    }
    int inside[4];
    long ih[4];
    for (int r = 0; r < 4; r++) {
        ih[r] = 2 * ty - g->pad_h + r;
        inside[r] = ih[r] >= 0 && ih[r] < g->h && hi > lo;
    }
    for (long c = c0; c < c1; c++) {
        const float *plane = x + c * g->h * g->w;
        __m512 h[4][4];
        for (int r = 0; r < 4; r++) {
            __m512 a = _mm512_setzero_ps(), b = _mm512_setzero_ps();
            if (inside[r]) {
                // Lane k of a (k of b + 16) is patch column k: input column k − pad_w of row ih.
                const float *src = plane + ih[r] * g->w + col0;
                a = _mm512_maskz_loadu_ps(m_lo, src);
                b = _mm512_maskz_loadu_ps(m_hi, src + 16);
            }
            __m512 d0 = _mm512_permutex2var_ps(a, even, b), d1 = _mm512_permutex2var_ps(a, odd, b);
            __m512 d2 = _mm512_permutex2var_ps(a, even2, b), d3 = _mm512_permutex2var_ps(a, odd2, b);
            h[r][0] = _mm512_sub_ps(d0, d2);
            h[r][1] = _mm512_add_ps(d1, d2);
            h[r][2] = _mm512_sub_ps(d2, d1);
            h[r][3] = _mm512_sub_ps(d1, d3);
        }
        float *dst = v + at + c * np;
        for (int j = 0; j < 4; j++) {
            _mm512_mask_storeu_ps(dst + (0 * 4 + j) * xi_stride, store, _mm512_sub_ps(h[0][j], h[2][j]));
            _mm512_mask_storeu_ps(dst + (1 * 4 + j) * xi_stride, store, _mm512_add_ps(h[1][j], h[2][j]));
            _mm512_mask_storeu_ps(dst + (2 * 4 + j) * xi_stride, store, _mm512_sub_ps(h[2][j], h[1][j]));
            _mm512_mask_storeu_ps(dst + (3 * 4 + j) * xi_stride, store, _mm512_sub_ps(h[1][j], h[3][j]));
        }
    }
}

// The same on the AVX2 path, tw ≤ 8 (one register of tiles): each input row is loaded as four
// registers whose halves are patch columns [0, 4) and [8, 12), [4, 8) and [12, 16), and the same
// from column 2, so that even and odd columns (2t + j, j < 4) split out in natural order with
// in-lane shuffles. A segment whose columns or rows reach past the input is first copied into a
// zeroed block.
CW2_AVX2 static void cw2_input_row_tiles_avx2(const cg_conv *g, const float *x, long c0, long c1, long ty, long x0, long tw,
                                              float *v, long xi_stride, long at, long np) {
    float block[4][24] __attribute__((aligned(32)));
    static const float zeros[24];
    long col0 = 2 * x0 - g->pad_w, ih0 = 2 * ty - g->pad_h; // patch column k is input column col0 + k
    int inside = ih0 >= 0 && ih0 + 4 <= g->h && col0 >= 0 && col0 + 18 <= g->w;
    __m256i store = cg_lanes8(tw);
    for (long c = c0; c < c1; c++) {
        const float *rows[4];
        cg_patch_rows(x + c * g->h * g->w, g->h, g->w, ih0, col0, 4, 2 * tw + 2, inside, block[0], 24, zeros, rows);
        __m256 h[4][4];
        for (int r = 0; r < 4; r++) {
            const float *p = rows[r];
            __m256 a = _mm256_loadu2_m128(p + 8, p), b = _mm256_loadu2_m128(p + 12, p + 4);
            __m256 a2 = _mm256_loadu2_m128(p + 10, p + 2), b2 = _mm256_loadu2_m128(p + 14, p + 6);
            __m256 d0 = _mm256_shuffle_ps(a, b, 0x88), d1 = _mm256_shuffle_ps(a, b, 0xDD);
            __m256 d2 = _mm256_shuffle_ps(a2, b2, 0x88), d3 = _mm256_shuffle_ps(a2, b2, 0xDD);
            CW2_BT(d0, d1, d2, d3, h[r][0], h[r][1], h[r][2], h[r][3]);
        }
        float *dst = v + at + c * np;
        for (int j = 0; j < 4; j++) {
            __m256 o0, o1, o2, o3;
            CW2_BT(h[0][j], h[1][j], h[2][j], h[3][j], o0, o1, o2, o3);
            _mm256_maskstore_ps(dst + (0 * 4 + j) * xi_stride, store, o0);
            _mm256_maskstore_ps(dst + (1 * 4 + j) * xi_stride, store, o1);
            _mm256_maskstore_ps(dst + (2 * 4 + j) * xi_stride, store, o2);
            _mm256_maskstore_ps(dst + (3 * 4 + j) * xi_stride, store, o3);
        }
    }
}
#endif

// The transformed input of one position: each piece of np tiles starting at tile q0 is stored
// [C][np] from q0·C on, so that the products read each channel's np values side by side.

void cg_winograd2_input(const cg_conv *g, const float *x, long c0, long c1, float *v, float *workspace) {
    long tw = cw2_tiles_w(g), th = cw2_tiles_h(g), bw = 2 * tw + 2, ch = g->channels;
    long xi_stride = cw2_xi_stride(g);
    cw2_layout lay = cw2_layout_of(g, cg_kernels_now()->direct_np);
    float *rows = cg_align64(workspace), *mid = rows + cg_round_up(4 * bw, 16), *row_v = mid + cg_round_up(16 * tw, 16);
    cw2_input_row_fn row_fn = cw2_input_row_now();
    // Columns [lo, hi) of the row buffer hold input columns lo − pad_w...; the rest zeros.
    long lo = cg_min(bw, cg_max(0, g->pad_w)), hi = cg_max(lo, cg_min(bw, g->w + g->pad_w));
    for (long ty = 0; ty < th; ty++) {
        long band = ty / lay.band_rows, q0, np, x0, w;
#if defined(__x86_64__)
        if (cg_isa() == CG_ISA_AVX512 && lay.np_max <= 15) {
            for (long s = 0; cw2_row_segment(&lay, band, ty, s, &q0, &np, &x0, &w); s++) {
                cw2_input_row_tiles_avx512(g, x, c0, c1, ty, x0, w, v, xi_stride, q0 * ch + (ty * tw + x0 - q0), np);
            }
            continue;
        }
        if (cg_isa() == CG_ISA_AVX2 && lay.np_max <= 8) {
            for (long s = 0; cw2_row_segment(&lay, band, ty, s, &q0, &np, &x0, &w); s++) {
                cw2_input_row_tiles_avx2(g, x, c0, c1, ty, x0, w, v, xi_stride, q0 * ch + (ty * tw + x0 - q0), np);
            }
            continue;
        }
#endif
        for (long c = c0; c < c1; c++) {
            const float *plane = x + c * g->h * g->w;
            for (int r = 0; r < 4; r++) {
                float *row = rows + r * bw;
                long ih = 2 * ty - g->pad_h + r;
                if (ih < 0 || ih >= g->h || hi == lo) {
                    memset(row, 0, (size_t)bw * sizeof(float));
                    continue;
                }
                if (lo > 0) memset(row, 0, (size_t)lo * sizeof(float));
                memcpy(row + lo, plane + ih * g->w + (lo - g->pad_w), (size_t)(hi - lo) * sizeof(float));
                if (hi < bw) memset(row + hi, 0, (size_t)(bw - hi) * sizeof(float));
            }
            row_fn(rows, bw, tw, mid, row_v, tw);
            for (long s = 0; cw2_row_segment(&lay, band, ty, s, &q0, &np, &x0, &w); s++) {
                // Tile ty·tw + x0 sits at offset ty·tw + x0 − q0 of its piece.
                long at = q0 * ch + c * np + (ty * tw + x0 - q0);
                for (int xi = 0; xi < 16; xi++) memcpy(v + xi * xi_stride + at, row_v + xi * tw + x0, (size_t)w * sizeof(float));
            }
        }
    }
}

// MARK: The units

long cg_winograd2_units(const cg_conv *g, long m) {
    long blocks = (m + 15) / 16;
    return (blocks + CW2_GROUP_BLOCKS - 1) / CW2_GROUP_BLOCKS * cw2_bands(g);
}

void cg_winograd2_conv(const cg_conv *g, const float *v, const float *w, long m, long u0, long u1, float *y,
                       const cg_epilogue *epilogue, int pool, float *workspace) {
    long tw = cw2_tiles_w(g), t = cw2_tiles(g), band_tiles = cw2_band_tiles(g), bands = cw2_bands(g);
    long c = g->channels, blocks = (m + 15) / 16, n = g->out_h * g->out_w;
    long per_xi_w = blocks * 16 * c, per_xi_v = cw2_xi_stride(g);
    const cg_kernels *kern = cg_kernels_now();
    cw2_output_tile_fn out_fn = cw2_output_tile_now();
    cw2_layout lay = cw2_layout_of(g, kern->direct_np);
    float *acc = cg_align64(workspace);
    // Sums of block b (of the group), position ξ, tile q of the band at acc + (ξ·GROUP + b)·bstride + 16q.
    long bstride = band_tiles * 16, xi_acc = CW2_GROUP_BLOCKS * bstride;
    float *out = acc + 16 * xi_acc, *pixels = out + 64, *planar = pixels + 2 * cw2_band_rows(g) * g->out_w * 16;
    long pw = g->out_w / 2, pooled_plane = (g->out_h / 2) * pw;
    const cd_tile_fn *tiles_one = kern->direct_tiles[0][0];
    const cd_tile_fn *tiles_two = kern->direct_blocks == 2 ? kern->direct_tiles[1][0] : NULL;
    for (long u = u0; u < u1; u++) {
        long group = u / bands, band = u % bands;
        long g0 = group * CW2_GROUP_BLOCKS, gn = cg_min(CW2_GROUP_BLOCKS, blocks - g0);
        long t0 = band * band_tiles, t1 = cg_min(t, t0 + band_tiles);
        long pieces = cw2_pieces(&lay, band);
        // Position by position: its transformed input for the band stays in cache while the
        // group's blocks go by, two at a time where the path has tiles of two blocks.
        for (long xi = 0; xi < 16; xi++) {
            const float *vx = v + xi * per_xi_v + t0 * c;
            for (long b = 0; b < gn;) {
                long ob = tiles_two && b + 1 < gn ? 2 : 1;
                const cd_tile_fn *tiles = ob == 2 ? tiles_two : tiles_one;
                const float *wx = w + xi * per_xi_w + (g0 + b) * c * 16;
                float *ax = acc + (xi * CW2_GROUP_BLOCKS + b) * bstride;
                for (long piece = 0; piece < pieces; piece++) {
                    long q0, np;
                    cw2_piece(&lay, band, piece, &q0, &np);
                    tiles[np - 1](c, 1, 1, 0, 1, np, vx + (q0 - t0) * c, wx, c * 16, ax + (q0 - t0) * 16, bstride, 1);
                }
                b += ob;
            }
        }
        for (long b = 0; b < gn; b++) {
            long channel = (g0 + b) * 16, lanes = cg_min(16, m - channel);
            if (!(epilogue && epilogue->residual)) {
                // The band's pixels in raster order, 16 channels each, then the path's finishing of
                // direct-kernel blocks: the epilogue per vector, a transpose, and whole rows of
                // each channel stored at once.
                long row0 = 2 * (t0 / tw), rows = cg_min(g->out_h, 2 * ((t1 - 1) / tw + 1)) - row0, ow_n = g->out_w;
                static const float ones[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, zeros[16] = {0};
                for (long q = t0; q < t1; q++) {
                    long ty = q / tw, tx = q % tw, oh = 2 * ty - row0, ow = 2 * tx;
                    out_fn(acc + b * bstride + (q - t0) * 16, xi_acc, ones, zeros, out);
                    for (long i = 0; i < 2 && oh + i < rows; i++) {
                        for (long k = 0; k < 2 && ow + k < ow_n; k++) memcpy(pixels + ((oh + i) * ow_n + ow + k) * 16, out + 16 * (2 * i + k), 64);
                    }
                }
                if (pool) {
                    // The band's rows finished into planar rows, then pooled (row0 is even).
                    long pooled_rows = cg_min(rows, g->out_h / 2 * 2 - row0);
                    if (pooled_rows < 2 || pw == 0) continue;
                    kern->direct_finish(pixels, pooled_rows * ow_n, lanes, channel, epilogue, planar, pooled_rows * ow_n);
                    cg_winograd_pool_rows(planar, pooled_rows * ow_n, ow_n, row0, pooled_rows, lanes, pooled_plane, pw, 0, pw,
                                          y + channel * pooled_plane);
                    continue;
                }
                kern->direct_finish(pixels, rows * ow_n, lanes, channel, epilogue, y + channel * n + row0 * ow_n, n);
                continue;
            }
            float sc[16], sh[16];
            for (long l = 0; l < 16; l++) {
                sc[l] = epilogue && epilogue->scale && l < lanes ? epilogue->scale[channel + l] : 1.0f;
                sh[l] = epilogue && epilogue->shift && l < lanes ? epilogue->shift[channel + l] : 0.0f;
            }
            for (long q = t0; q < t1; q++) {
                long ty = q / tw, tx = q % tw, oh = 2 * ty, ow = 2 * tx;
                out_fn(acc + b * bstride + (q - t0) * 16, xi_acc, sc, sh, out);
                long off = channel * n + oh * g->out_w + ow;
                cg_winograd_store_tile(out, 2, lanes, cg_min(2, g->out_h - oh), cg_min(2, g->out_w - ow), y + off,
                               epilogue && epilogue->residual ? epilogue->residual + off : NULL, n, g->out_w, epilogue);
            }
        }
    }
}
