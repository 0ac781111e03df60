// Cortado's packed, cache-blocked SGEMM (see include/cortado_gemm.h): the drivers and the
// packing, in plain C; the micro-kernels of the path in use come from cg_kernels_now().
//
// Loop order (Goto's): column blocks of CG_NC → k blocks of up to CG_KC (B's block packed,
// kept in L2) → row blocks of CG_MC (A's block packed; a row-major A's full row panels are
// read in place instead, on paths whose table has such kernels) → row panels of CG_MR (the A
// micro-panel, CG_MR × CG_KC floats, stays in L1) → column panels of CG_NR (B micro-panels
// stream from L2) → the micro-kernel on a CG_MR × CG_NR tile of C.
#include "cortado_gemm.h"

#include <stdint.h>
#include <string.h>

#include "cg_kernels.h"

#define CG_NC 1024
#define CG_MC 144

size_t cg_packed_a_count(long m, long k) { return (size_t)(cg_round_up(m, CG_MR) * k); }
size_t cg_packed_b_count(long k, long n) { return (size_t)(k * cg_round_up(n, CG_NR)); }
size_t cg_workspace_count(void) { return (size_t)(CG_MC * CG_KC + CG_KC * CG_NC + 16); }

// MARK: Packing


// Rows [0, m) × k values [p0, p0+kcb) of A into row panels (zero rows past m).
static void cg_pack_a_block(cg_operand a, long m, long p0, long kcb, float *dst) {
    for (long i0 = 0; i0 < m; i0 += CG_MR) {
        long mr = cg_min(CG_MR, m - i0);
        if (a.form == CG_ROW_MAJOR) {
            const float *src = a.data + i0 * a.ld + p0;
            if (mr == CG_MR) {
                cg_kernels_now()->pack_a_panel(src, a.ld, kcb, dst);
            } else {
                for (long p = 0; p < kcb; p++) {
                    for (long i = 0; i < CG_MR; i++) dst[p * CG_MR + i] = i < mr ? src[i * a.ld + p] : 0.0f;
                }
            }
        } else {
            const float *src = a.data + p0 * a.ld + i0;
            for (long p = 0; p < kcb; p++) {
                for (long i = 0; i < CG_MR; i++) dst[p * CG_MR + i] = i < mr ? src[p * a.ld + i] : 0.0f;
            }
        }
        dst += kcb * CG_MR;
    }
}

void cg_pack_a(cg_operand a, long m, long k, float *dst) {
    long width = cg_round_up(m, CG_MR);
    for (long kb = 0; kb < cg_blocks(k); kb++) {
        long p0 = cg_block_start(kb, k), kcb = cg_block_start(kb + 1, k) - p0;
        cg_pack_a_block(a, m, p0, kcb, dst + p0 * width);
    }
}

// Columns [n0, n0+n) × k values [p0, p0+kcb) of B into column panels of a block.
static void cg_pack_b_block(cg_operand b, long n0, long n, long p0, long kcb, float *dst) {
    for (long j0 = 0; j0 < n; j0 += CG_NR) {
        long nr = cg_min(CG_NR, n - j0);
        if (b.form == CG_ROW_MAJOR) {
            const float *src = b.data + p0 * b.ld + n0 + j0;
            for (long p = 0; p < kcb; p++) {
                memcpy(dst + p * CG_NR, src + p * b.ld, (size_t)nr * sizeof(float));
                if (nr < CG_NR) memset(dst + p * CG_NR + nr, 0, (size_t)(CG_NR - nr) * sizeof(float));
            }
        } else {
            const float *src = b.data + (n0 + j0) * b.ld + p0;
            for (long j = 0; j < CG_NR; j++) {
                if (j < nr) {
                    for (long p = 0; p < kcb; p++) dst[p * CG_NR + j] = src[j * b.ld + p];
                } else {
                    for (long p = 0; p < kcb; p++) dst[p * CG_NR + j] = 0.0f;
                }
            }
        }
        dst += kcb * CG_NR;
    }
}

void cg_pack_b(cg_operand b, long k, long n0, long n, float *dst, long dst_width, long dst_panel) {
    for (long kb = 0; kb < cg_blocks(k); kb++) {
        long p0 = cg_block_start(kb, k), kcb = cg_block_start(kb + 1, k) - p0;
        cg_pack_b_block(b, n0, n, p0, kcb, dst + p0 * dst_width + dst_panel * kcb * CG_NR);
    }
}

// One stretch of a column panel that lies in one output row: panel columns [d, d+len) are
// output (oh, ow0 ...).
typedef struct { long d, oh, ow0, len; } cg_segment;

// Panels packed together: their segments are found once, then each row of the im2col matrix
// (one input channel and kernel offset) is copied into all of them.
#define CG_CONV_GROUP 16

void cg_pack_conv(const cg_conv *g, const float *x, long n0, long n, float *dst, long dst_width, long dst_panel) {
    long k = g->channels * g->kh * g->kw, khw = g->kh * g->kw;
    cg_segment seg[CG_CONV_GROUP * (CG_NR + 1)];
    long first_seg[CG_CONV_GROUP + 1];
    for (long q0 = 0; q0 < n; q0 += CG_CONV_GROUP * CG_NR) {
        long panels = cg_min(CG_CONV_GROUP, (n - q0 + CG_NR - 1) / CG_NR);
        long count = 0;
        for (long q = 0; q < panels; q++) {
            first_seg[q] = count;
            long j0 = q0 + q * CG_NR, nr = cg_min(CG_NR, n - j0);
            for (long d = 0; d < nr;) {
                long col = n0 + j0 + d, oh = col / g->out_w, ow = col % g->out_w;
                long len = cg_min(nr - d, g->out_w - ow);
                seg[count++] = (cg_segment){d, oh, ow, len};
                d += len;
            }
        }
        first_seg[panels] = count;
        long panel0 = dst_panel + q0 / CG_NR;
        for (long kb = 0; kb < cg_blocks(k); kb++) {
            long p0 = cg_block_start(kb, k), kcb = cg_block_start(kb + 1, k) - p0;
            float *block = dst + p0 * dst_width + panel0 * kcb * CG_NR;
            for (long p = p0; p < p0 + kcb; p++) {
                long c = p / khw, i = p % khw / g->kw, j = p % g->kw;
                const float *plane = x + c * g->h * g->w;
                long dy = i * g->dh - g->pad_h, dx = j * g->dw - g->pad_w;
                // Output columns whose input column ow·sw + dx lies in [0, w).
                long first = dx < 0 ? (-dx + g->sw - 1) / g->sw : 0;
                long last = (g->w - 1 - dx) >= 0 ? (g->w - 1 - dx) / g->sw + 1 : 0;
                for (long q = 0; q < panels; q++) {
                    float *out = block + q * kcb * CG_NR + (p - p0) * CG_NR;
                    long s = first_seg[q], s1 = first_seg[q + 1];
                    if (s1 - s == 1 && seg[s].len == CG_NR && g->sw == 1) {
                        // A whole panel inside one output row.
                        long ih = seg[s].oh * g->sh + dy, lo = seg[s].ow0;
                        if (ih >= 0 && ih < g->h && lo >= first && lo + CG_NR <= last) {
                            memcpy(out, plane + ih * g->w + lo + dx, CG_NR * sizeof(float));
                            continue;
                        }
                    }
                    memset(out, 0, CG_NR * sizeof(float));
                    for (; s < s1; s++) {
                        long ih = seg[s].oh * g->sh + dy;
                        if (ih < 0 || ih >= g->h) continue;
                        const float *row = plane + ih * g->w;
                        long lo = seg[s].ow0 > first ? seg[s].ow0 : first;
                        long hi = cg_min(seg[s].ow0 + seg[s].len, last);
                        float *o = out + seg[s].d - seg[s].ow0;
                        if (g->sw == 1) {
                            if (hi > lo) memcpy(o + lo, row + lo + dx, (size_t)(hi - lo) * sizeof(float));
                        } else {
                            for (long ow = lo; ow < hi; ow++) o[ow] = row[ow * g->sw + dx];
                        }
                    }
                }
            }
        }
    }
}

// MARK: The GEMM

// Whether twelve rows lda floats apart, read side by side, leave room in a 32 KB 8-way L1 (64
// sets, as on Zen 4 and recent Intel cores): no more than six of them in one set, two ways
// left for B and C. Rows a multiple of 4 KB apart (lda 1024, 2048, ...) all land in one set
// and evict each other: 2048³ ran at 98 GFLOP/s read in place against 107 packed. At lda 512
// (six rows in each of two sets) 256×512×512 still gains (1159 against 1188 µs); 784 floats
// (an MLP's input) spreads the twelve rows over twelve sets.
static int cg_rows_spread(long lda) {
    int count[64] = {0}, most = 0;
    for (long i = 0; i < CG_MR; i++) {
        int set = (int)(((unsigned long)(i * lda) * sizeof(float) >> 6) & 63);
        if (++count[set] > most) most = count[set];
    }
    return most <= 6;
}

// The epilogue on an m × n C that no product touched (k = 0).
static void cg_finish(float *c, long ldc, long m, long n, const cg_epilogue *e) {
    for (long i = 0; i < m; i++) {
        for (long j = 0; j < n; j++) {
            long ch = e->per_column ? j : i;
            c[i * ldc + j] = cg_epi1(c[i * ldc + j], cg_epi_scale(e, ch), cg_epi_shift(e, ch), e);
        }
    }
}

// Rows [0, m) × k values [p0, p0+kcb) of an A given as row pointers into row panels (zero
// rows past m in the last).
static void cg_pack_a_ptrs(const float *const *rows, long m, long p0, long kcb, float *dst) {
    for (long i0 = 0; i0 < m; i0 += CG_MR, dst += kcb * CG_MR) {
        long mr = cg_min(CG_MR, m - i0);
        for (long i = 0; i < CG_MR; i++) {
            if (i < mr) {
                const float *src = rows[i0 + i] + p0;
                for (long p = 0; p < kcb; p++) dst[p * CG_MR + i] = src[p];
            } else {
                for (long p = 0; p < kcb; p++) dst[p * CG_MR + i] = 0.0f;
            }
        }
    }
}

// cg_gemm and cg_gemm_rows: A is `a`, or (a_rows not NULL) the rows a_rows[i].
static void cg_gemm_any(long m, long n, long k, cg_operand a, const float *const *a_rows, cg_operand b, float *c, long ldc,
                                  int accumulate, float *workspace, const cg_epilogue *epilogue) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {
        if (!accumulate) for (long i = 0; i < m; i++) memset(c + i * ldc, 0, (size_t)n * sizeof(float));
        if (epilogue) cg_finish(c, ldc, m, n, epilogue);
        return;
    }
    const cg_kernels *kern = cg_kernels_now();
    float *ws = cg_align64(workspace);
    int a_rows_spread = !a_rows && a.form == CG_ROW_MAJOR && kern->tile_a_rows && cg_rows_spread(a.ld);
    int a_ptrs_in_place = a_rows && kern->tile_a_ptrs;
    float *wa = ws, *wb = ws + CG_MC * CG_KC;
    long nc_step = CG_NC;
    long mc_step = !a_rows && a.form == CG_PACKED ? cg_round_up(m, CG_MR) : CG_MC;
    for (long jc = 0; jc < n; jc += nc_step) {
        long nc = cg_min(nc_step, n - jc);
        for (long kb = 0; kb < cg_blocks(k); kb++) {
            long p0 = cg_block_start(kb, k), kcb = cg_block_start(kb + 1, k) - p0;
            int add = accumulate || p0 > 0;
            const cg_epilogue *finish = p0 + kcb == k ? epilogue : NULL;
            const float *bblk;
            if (b.form == CG_PACKED) {
                bblk = b.data + p0 * b.width + (b.panel + jc / CG_NR) * kcb * CG_NR;
            } else {
                cg_pack_b_block(b, jc, nc, p0, kcb, wb);
                bblk = wb;
            }
            for (long ic = 0; ic < m; ic += mc_step) {
                long mc = cg_min(mc_step, m - ic);
                // A row-major A's full row panels are read in place (when its rows fall in
                // different L1 sets); only a last, partial panel is packed (its kernel reads 12
                // rows).
                long in_place = a_ptrs_in_place || (a.form == CG_ROW_MAJOR && a_rows_spread) ? mc / CG_MR * CG_MR : 0;
                // Packed panels: from ablk, the first for row ir = first_packed.
                const float *ablk;
                long first_packed = in_place;
                if (a_rows) {
                    if (mc > in_place) cg_pack_a_ptrs(a_rows + ic + in_place, mc - in_place, p0, kcb, wa);
                    ablk = wa;
                } else if (a.form == CG_PACKED) {
                    ablk = a.data + p0 * a.width + (a.panel + ic / CG_MR) * kcb * CG_MR;
                } else {
                    cg_operand view = a;
                    view.data = a.form == CG_ROW_MAJOR ? a.data + (ic + in_place) * a.ld : a.data + ic;
                    if (mc > in_place) cg_pack_a_block(view, mc - in_place, p0, kcb, wa);
                    ablk = wa;
                }
                for (long ir = 0; ir < mc; ir += CG_MR) {
                    long mr = cg_min(CG_MR, mc - ir);
                    const float *arow = ir < in_place && !a_rows ? a.data + (ic + ir) * a.ld + p0 : NULL;
                    const float *const *aptrs = ir < in_place && a_rows ? a_rows + ic + ir : NULL;
                    const float *ap = arow || aptrs ? NULL : ablk + ((ir - first_packed) / CG_MR) * kcb * CG_MR;
                    float *crow = c + (ic + ir) * ldc + jc;
                    for (long jr = 0; jr < nc; jr += CG_NR) {
                        long nr = cg_min(CG_NR, nc - jr);
                        const float *bp = bblk + (jr / CG_NR) * kcb * CG_NR;
                        if (aptrs) {
                            kern->tile_a_ptrs(kcb, aptrs, p0, bp, crow + jr, ldc, add, mr, nr, finish, ic + ir, jc + jr);
                        } else if (arow) {
                            kern->tile_a_rows(kcb, arow, a.ld, bp, crow + jr, ldc, add, mr, nr, finish, ic + ir, jc + jr);
                        } else {
                            kern->tile(kcb, ap, bp, crow + jr, ldc, add, mr, nr, finish, ic + ir, jc + jr);
                        }
                    }
                }
            }
        }
    }
}

void cg_gemm(long m, long n, long k, cg_operand a, cg_operand b, float *c, long ldc, int accumulate, float *workspace,
             const cg_epilogue *epilogue) {
    cg_gemm_any(m, n, k, a, NULL, b, c, ldc, accumulate, workspace, epilogue);
}

void cg_gemm_rows(long m, long n, long k, const float *const *a_rows, cg_operand b, float *c, long ldc, int accumulate,
                  float *workspace, const cg_epilogue *epilogue) {
    cg_operand none = {0};
    cg_gemm_any(m, n, k, none, a_rows, b, c, ldc, accumulate, workspace, epilogue);
}

void cg_gemv(long n, long k, const float *x, cg_operand b, float *y) { cg_kernels_now()->gemv(n, k, x, b, y); }

// MARK: Convolution rows read in place

void cg_conv_padded_size(const cg_conv *g, long *hp, long *wp) {
    long need_h = (g->out_h - 1) * g->sh + (g->kh - 1) * g->dh + 1, need_w = (g->out_w - 1) * g->sw + (g->kw - 1) * g->dw + 1;
    *hp = need_h > g->h + g->pad_h ? need_h : g->h + g->pad_h;
    *wp = need_w > g->w + g->pad_w ? need_w : g->w + g->pad_w;
}

size_t cg_conv_padded_count(const cg_conv *g) {
    long hp, wp;
    cg_conv_padded_size(g, &hp, &wp);
    return (size_t)(g->channels * hp * wp + CG_NR + (g->kw - 1) * g->dw + 16);
}

void cg_conv_pad(const cg_conv *g, const float *x, long c0, long c1, float *xp) {
    long hp, wp;
    cg_conv_padded_size(g, &hp, &wp);
    for (long c = c0; c < c1; c++) {
        float *plane = xp + c * hp * wp;
        for (long r = 0; r < hp; r++) {
            float *row = plane + r * wp;
            long ih = r - g->pad_h;
            if (ih < 0 || ih >= g->h) { memset(row, 0, (size_t)wp * sizeof(float)); continue; }
            long right = wp - g->pad_w - g->w; // columns after the input's (≥ 0 or cut)
            long copy = right >= 0 ? g->w : g->w + right;
            memset(row, 0, (size_t)g->pad_w * sizeof(float));
            if (copy > 0) memcpy(row + g->pad_w, x + (c * g->h + ih) * g->w, (size_t)copy * sizeof(float));
            if (right > 0) memset(row + g->pad_w + g->w, 0, (size_t)right * sizeof(float));
        }
    }
    if (c1 == g->channels) {
        // The slack past the last plane, which the lanes of a row's last panel past out_w read.
        memset(xp + g->channels * hp * wp, 0, (size_t)(CG_NR + (g->kw - 1) * g->dw + 16) * sizeof(float));
    }
}

void cg_conv_offsets(const cg_conv *g, long *off) {
    long hp, wp;
    cg_conv_padded_size(g, &hp, &wp);
    long khw = g->kh * g->kw, k = g->channels * khw;
    for (long p = 0; p < k; p++) {
        long c = p / khw, i = p % khw / g->kw, j = p % g->kw;
        off[p] = c * hp * wp + i * g->dh * wp + j * g->dw;
    }
}

void cg_conv_rows(const cg_conv *g, const float *xp, const long *off, cg_operand a, long m, long oh0, long oh1,
                            float *c, long ldc, const cg_epilogue *epilogue) {
    long hp, wp;
    cg_conv_padded_size(g, &hp, &wp);
    (void)hp;
    long k = g->channels * g->kh * g->kw;
    const cg_kernels *kern = cg_kernels_now();
    for (long kb = 0; kb < cg_blocks(k); kb++) {
        long p0 = cg_block_start(kb, k), kcb = cg_block_start(kb + 1, k) - p0;
        int add = p0 > 0;
        const cg_epilogue *finish = p0 + kcb == k ? epilogue : NULL;
        const float *ablk = a.data + p0 * a.width + a.panel * kcb * CG_MR;
        for (long oh = oh0; oh < oh1; oh++) {
            const float *row = xp + oh * g->sh * wp;
            float *crow = c + (oh - oh0) * g->out_w;
            for (long ow0 = 0; ow0 < g->out_w; ow0 += CG_NR) {
                long nr = cg_min(CG_NR, g->out_w - ow0);
                // Every row panel of the weights against this stretch of the row (its input
                // lines stay in L1 across them).
                for (long ir = 0; ir < m; ir += CG_MR) {
                    kern->tile_in_place(kcb, ablk + (ir / CG_MR) * kcb * CG_MR, row + ow0, off + p0, crow + ir * ldc + ow0, ldc, add,
                                     cg_min(CG_MR, m - ir), nr, finish, ir, (oh - oh0) * g->out_w + ow0);
                }
            }
        }
    }
}

