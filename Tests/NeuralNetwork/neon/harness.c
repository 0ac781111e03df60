// The NEON kernels against the portable ones and against naive references, through CGemm's
// public entry points. Built for aarch64 with all of Sources/CGemm and run under qemu-aarch64
// by Tests/NeuralNetwork/test_neon_kernels.py (no aarch64 host here).
//
// Every case runs once with cg_set_isa(CG_ISA_PORTABLE) and once with cg_set_isa(CG_ISA_NEON),
// and each result must lie within TOL of the output's scale (its largest |value| in the double
// reference) of the reference, and the two paths within TOL of each other. The 2×2 max pool
// must match the portable path bit for bit (NaN and signed zeros included).
//
//   harness          run every case; exit 0 when all pass, 1 on a failure (each one printed),
//                    2 when the NEON path is not available (not an aarch64 build)
//   harness --isa    print the path cg_isa() picked (CORTADO_ISA applies) and cg_available()
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cortado_depthwise.h"
#include "cortado_direct.h"
#include "cortado_gemm.h"
#include "cortado_pool.h"

#define TOL 1e-5

static long checks, failures;

// MARK: Data

static uint64_t state = 0x9E3779B97F4A7C15ull;

// Uniform in [-1, 1).
static float uniform(void) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(state >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

static float *randoms(long n) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (long i = 0; i < n; i++) p[i] = uniform();
    return p;
}

static float *floats(long n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(float)); }
static double *doubles(long n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(double)); }

// MARK: Checks

// got against want over n values: the largest difference within TOL × max |want|.
static void expect_close(const char *what, const char *path, const float *got, const double *want, long n) {
    double scale = 0.0, worst = 0.0;
    long at = -1;
    for (long i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
    if (scale == 0.0) scale = 1.0;
    for (long i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (!(d <= worst)) { worst = isnan(d) ? INFINITY : d; at = i; }
    }
    checks++;
    if (!(worst <= TOL * scale)) {
        failures++;
        printf("FAIL %s [%s]: |difference| %.3g at %ld (got %.9g, want %.9g) > %.1g × scale %.4g\n", what, path, worst, at,
               (double)got[at], want[at], TOL, scale);
    }
}

static void expect_paths(const char *what, const float *portable, const float *neon, const double *want, long n) {
    double *p = doubles(n);
    for (long i = 0; i < n; i++) p[i] = portable[i];
    expect_close(what, "portable vs reference", portable, want, n);
    expect_close(what, "neon vs reference", neon, want, n);
    // The paths against each other, on the scale of the reference.
    double scale = 0.0;
    for (long i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
    double worst = 0.0;
    for (long i = 0; i < n; i++) {
        double d = fabs((double)neon[i] - p[i]);
        if (!(d <= worst)) worst = isnan(d) ? INFINITY : d;
    }
    checks++;
    if (!(worst <= TOL * (scale == 0.0 ? 1.0 : scale))) {
        failures++;
        printf("FAIL %s [neon vs portable]: |difference| %.3g > %.1g × scale %.4g\n", what, worst, TOL, scale);
    }
    free(p);
}

// MARK: Epilogues

// The epilogue kinds every entry point runs with: none (a NULL epilogue), then bias-like and
// folded-batch-norm-like steps with each activation.
typedef struct {
    int scale, shift, per_column;
    cg_activation activation;
    float alpha;
    const char *name;
} epi_kind;

static const epi_kind EPIS[] = {
    {0, 0, 0, CG_ACT_NONE, 0.0f, "none"},
    {1, 1, 0, CG_ACT_RELU, 0.0f, "row scale+shift relu"},
    {1, 1, 1, CG_ACT_LEAKY_RELU, 0.1f, "column scale+shift leaky"},
    {0, 1, 0, CG_ACT_NONE, 0.0f, "row shift"},
    {1, 0, 1, CG_ACT_RELU, 0.0f, "column scale relu"},
    {1, 1, 0, CG_ACT_LEAKY_RELU, 0.2f, "row scale+shift leaky"},
};
#define EPI_COUNT (long)(sizeof EPIS / sizeof EPIS[0])

// Epilogue kind `kind` over `channels` channels, its arrays from the caller; NULL for "none".
static const cg_epilogue *make_epi(long kind, cg_epilogue *e, const float *scale, const float *shift) {
    if (kind == 0) return NULL;
    const epi_kind *k = &EPIS[kind];
    *e = (cg_epilogue){k->scale ? scale : NULL, k->shift ? shift : NULL, k->per_column, k->activation, k->alpha, NULL};
    return e;
}

static double ref_epi(double v, const cg_epilogue *e, long ch, double residual) {
    if (!e) return v + residual;
    v = v * (e->scale ? e->scale[ch] : 1.0) + (e->shift ? e->shift[ch] : 0.0) + residual;
    if (e->activation == CG_ACT_RELU) return v < 0.0 ? 0.0 : v;
    if (e->activation == CG_ACT_LEAKY_RELU) return v < 0.0 ? v * e->alpha : v;
    return v;
}

// MARK: GEMM

static void use(cg_isa_path isa) {
    if (cg_set_isa(isa) != isa) {
        printf("FAIL the %s path is not available\n", cg_isa_name(isa));
        exit(2);
    }
}

// One cg_gemm case: A (m×k) and B (k×n) in the forms asked for (0 row-major, 1 transposed,
// 2 packed), C with ldc = n + 3 holding random values first.
static void gemm_case(long m, long n, long k, int a_form, int b_form, int accumulate, long kind) {
    float *a = randoms(m * k), *b = randoms(k * n), *at = floats(m * k), *bt = floats(k * n);
    for (long i = 0; i < m; i++) for (long p = 0; p < k; p++) at[p * m + i] = a[i * k + p];
    for (long p = 0; p < k; p++) for (long j = 0; j < n; j++) bt[j * k + p] = b[p * n + j];
    float *scale = randoms(m + n), *shift = randoms(m + n);
    cg_epilogue e;
    const cg_epilogue *epi = make_epi(kind, &e, scale, shift);
    long ldc = n + 3;
    float *c0 = randoms(m * ldc), *ws = floats((long)cg_workspace_count());
    float *pa = floats((long)cg_packed_a_count(m, k)), *pb = floats((long)cg_packed_b_count(k, n));
    cg_pack_a((cg_operand){a, k, CG_ROW_MAJOR, 0, 0}, m, k, pa);
    cg_pack_b((cg_operand){b, n, CG_ROW_MAJOR, 0, 0}, k, 0, n, pb, (n + CG_NR - 1) / CG_NR * CG_NR, 0);
    cg_operand ao[3] = {{a, k, CG_ROW_MAJOR, 0, 0}, {at, m, CG_TRANSPOSED, 0, 0}, {pa, 0, CG_PACKED, (m + CG_MR - 1) / CG_MR * CG_MR, 0}};
    cg_operand bo[3] = {{b, n, CG_ROW_MAJOR, 0, 0}, {bt, k, CG_TRANSPOSED, 0, 0}, {pb, 0, CG_PACKED, (n + CG_NR - 1) / CG_NR * CG_NR, 0}};
    double *want = doubles(m * ldc);
    for (long i = 0; i < m; i++) {
        for (long j = 0; j < ldc; j++) {
            if (j >= n) { want[i * ldc + j] = c0[i * ldc + j]; continue; } // past n: untouched
            double s = accumulate ? c0[i * ldc + j] : 0.0;
            for (long p = 0; p < k; p++) s += (double)a[i * k + p] * b[p * n + j];
            want[i * ldc + j] = ref_epi(s, epi, epi && epi->per_column ? j : i, 0.0);
        }
    }
    float *got[2];
    cg_isa_path paths[2] = {CG_ISA_PORTABLE, CG_ISA_NEON};
    for (int q = 0; q < 2; q++) {
        use(paths[q]);
        got[q] = floats(m * ldc);
        memcpy(got[q], c0, (size_t)(m * ldc) * sizeof(float));
        cg_gemm(m, n, k, ao[a_form], bo[b_form], got[q], ldc, accumulate, ws, epi);
    }
    char what[160];
    snprintf(what, sizeof what, "cg_gemm %ldx%ldx%ld A%d B%d acc %d epilogue %s", m, n, k, a_form, b_form, accumulate, EPIS[kind].name);
    expect_paths(what, got[0], got[1], want, m * ldc);
    free(a); free(b); free(at); free(bt); free(scale); free(shift); free(c0); free(ws); free(pa); free(pb); free(want);
    free(got[0]); free(got[1]);
}

// cg_gemm_rows: A as m separately allocated rows.
static void gemm_rows_case(long m, long n, long k, int accumulate, long kind) {
    float **rows = malloc((size_t)m * sizeof(float *));
    for (long i = 0; i < m; i++) rows[i] = randoms(k);
    float *b = randoms(k * n), *scale = randoms(m + n), *shift = randoms(m + n), *c0 = randoms(m * n);
    float *ws = floats((long)cg_workspace_count());
    cg_epilogue e;
    const cg_epilogue *epi = make_epi(kind, &e, scale, shift);
    double *want = doubles(m * n);
    for (long i = 0; i < m; i++) {
        for (long j = 0; j < n; j++) {
            double s = accumulate ? c0[i * n + j] : 0.0;
            for (long p = 0; p < k; p++) s += (double)rows[i][p] * b[p * n + j];
            want[i * n + j] = ref_epi(s, epi, epi && epi->per_column ? j : i, 0.0);
        }
    }
    float *got[2];
    cg_isa_path paths[2] = {CG_ISA_PORTABLE, CG_ISA_NEON};
    for (int q = 0; q < 2; q++) {
        use(paths[q]);
        got[q] = floats(m * n);
        memcpy(got[q], c0, (size_t)(m * n) * sizeof(float));
        cg_gemm_rows(m, n, k, (const float *const *)rows, (cg_operand){b, n, CG_ROW_MAJOR, 0, 0}, got[q], n, accumulate, ws, epi);
    }
    char what[160];
    snprintf(what, sizeof what, "cg_gemm_rows %ldx%ldx%ld acc %d epilogue %s", m, n, k, accumulate, EPIS[kind].name);
    expect_paths(what, got[0], got[1], want, m * n);
    for (long i = 0; i < m; i++) free(rows[i]);
    free(rows); free(b); free(scale); free(shift); free(c0); free(ws); free(want); free(got[0]); free(got[1]);
}

// ReLU and leaky ReLU on −0 and NaN: the vector epilogue as cg_epi1 (v < 0 ? … : v keeps
// both), bit for bit against the portable path where that is 0 or NaN. Column 1 of B is zero,
// its scale −1 and shift −0, so that column is −0 before the activation; row 1 of A holds a NaN.
static void signed_zero_case(cg_activation act) {
    long m = 3, n = 9, k = 4;
    float *a = randoms(m * k), *b = randoms(k * n), scale[9], shift[9];
    a[1 * k + 2] = NAN;
    for (long p = 0; p < k; p++) b[p * n + 1] = 0.0f;
    for (long j = 0; j < n; j++) { scale[j] = uniform(); shift[j] = uniform(); }
    scale[1] = -1.0f;
    shift[1] = -0.0f;
    cg_epilogue e = {scale, shift, 1, act, 0.1f, NULL};
    float *ws = floats((long)cg_workspace_count()), *got[2];
    cg_isa_path paths[2] = {CG_ISA_PORTABLE, CG_ISA_NEON};
    for (int q = 0; q < 2; q++) {
        use(paths[q]);
        got[q] = floats(m * n);
        cg_gemm(m, n, k, (cg_operand){a, k, CG_ROW_MAJOR, 0, 0}, (cg_operand){b, n, CG_ROW_MAJOR, 0, 0}, got[q], n, 0, ws, &e);
    }
    // Zeros and NaN bit for bit (NaN as NaN), the other values within TOL (the paths sum in
    // different orders).
    checks++;
    int same = signbit(got[0][1]) != 0; // the portable path's −0 is what is checked for
    for (long i = 0; i < m * n; i++) {
        float p = got[0][i], v = got[1][i];
        if (isnan(p) || isnan(v)) same &= isnan(p) && isnan(v);
        else if (p == 0.0f || v == 0.0f) same &= memcmp(&p, &v, sizeof p) == 0;
        else same &= fabs((double)p - v) <= TOL * fmax(1.0, fabs((double)p));
    }
    if (!same) {
        failures++;
        printf("FAIL cg_gemm %s on -0 and NaN: the neon epilogue differs from cg_epi1's\n",
               act == CG_ACT_RELU ? "relu" : "leaky relu");
    }
    free(a); free(b); free(ws); free(got[0]); free(got[1]);
}

// cg_gemv against a packed B, from a panel past the first (a view of a wider matrix).
static void gemv_case(long n, long k) {
    long before = CG_NR, width = (before + n + CG_NR - 1) / CG_NR * CG_NR;
    float *b = randoms(k * (before + n)), *x = randoms(k), *pb = floats(k * width);
    cg_pack_b((cg_operand){b, before + n, CG_ROW_MAJOR, 0, 0}, k, 0, before + n, pb, width, 0);
    double *want = doubles(n);
    for (long j = 0; j < n; j++) {
        double s = 0.0;
        for (long p = 0; p < k; p++) s += (double)x[p] * b[p * (before + n) + before + j];
        want[j] = s;
    }
    float *got[2];
    cg_isa_path paths[2] = {CG_ISA_PORTABLE, CG_ISA_NEON};
    for (int q = 0; q < 2; q++) {
        use(paths[q]);
        got[q] = floats(n + 1);
        got[q][n] = 12345.0f; // must stay
        cg_gemv(n, k, x, (cg_operand){pb, 0, CG_PACKED, width, before / CG_NR}, got[q]);
        checks++;
        if (got[q][n] != 12345.0f) { failures++; printf("FAIL cg_gemv %ldx%ld wrote past n\n", n, k); }
    }
    char what[96];
    snprintf(what, sizeof what, "cg_gemv n %ld k %ld", n, k);
    expect_paths(what, got[0], got[1], want, n);
    free(b); free(x); free(pb); free(want); free(got[0]); free(got[1]);
}

// MARK: Convolutions

static cg_conv conv_geometry(long channels, long h, long w, long kh, long kw, long sh, long sw, long dh, long dw, long ph, long pw) {
    cg_conv g = {channels, h, w, kh, kw, sh, sw, dh, dw, ph, pw, 0, 0};
    g.out_h = (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1;
    g.out_w = (w + 2 * pw - dw * (kw - 1) - 1) / sw + 1;
    return g;
}

// out[m][out_h][out_w] of x [channels][h][w] and weights [m][channels][kh][kw] (groups: 1, or
// depthwise: channel c reads input channel c only), in double.
static void ref_conv(const cg_conv *g, const float *x, const float *w, long m, int depthwise, double *out) {
    long khw = g->kh * g->kw;
    for (long o = 0; o < m; o++) {
        for (long oh = 0; oh < g->out_h; oh++) {
            for (long ow = 0; ow < g->out_w; ow++) {
                double s = 0.0;
                for (long c = depthwise ? o : 0; c < (depthwise ? o + 1 : g->channels); c++) {
                    for (long i = 0; i < g->kh; i++) {
                        long ih = oh * g->sh - g->pad_h + i * g->dh;
                        if (ih < 0 || ih >= g->h) continue;
                        for (long j = 0; j < g->kw; j++) {
                            long iw = ow * g->sw - g->pad_w + j * g->dw;
                            if (iw < 0 || iw >= g->w) continue;
                            long widx = depthwise ? o * khw + i * g->kw + j : ((o * g->channels + c) * g->kh + i) * g->kw + j;
                            s += (double)w[widx] * x[(c * g->h + ih) * g->w + iw];
                        }
                    }
                }
                out[(o * g->out_h + oh) * g->out_w + ow] = s;
            }
        }
    }
}

// cg_conv_rows (B read in place from the padded copy; sw = 1) and cg_pack_conv + cg_gemm
// (the packed im2col) for one geometry, with per-row (channel) epilogues.
static void conv_gemm_case(cg_conv g, long m, long kind) {
    long k = g.channels * g.kh * g.kw, n = g.out_h * g.out_w;
    float *x = randoms(g.channels * g.h * g.w), *w = randoms(m * k), *scale = randoms(m), *shift = randoms(m);
    cg_epilogue e;
    const cg_epilogue *epi = make_epi(kind, &e, scale, shift);
    if (epi) e.per_column = 0; // the channels run along C's rows
    double *conv = doubles(m * n), *want = doubles(m * n);
    ref_conv(&g, x, w, m, 0, conv);
    for (long o = 0; o < m; o++) for (long q = 0; q < n; q++) want[o * n + q] = ref_epi(conv[o * n + q], epi, o, 0.0);
    float *pa = floats((long)cg_packed_a_count(m, k));
    cg_pack_a((cg_operand){w, k, CG_ROW_MAJOR, 0, 0}, m, k, pa);
    cg_operand a = {pa, 0, CG_PACKED, (m + CG_MR - 1) / CG_MR * CG_MR, 0};
    long width = (n + CG_NR - 1) / CG_NR * CG_NR;
    float *pb = floats((long)cg_packed_b_count(k, n)), *ws = floats((long)cg_workspace_count());
    float *xp = floats((long)cg_conv_padded_count(&g));
    long *off = malloc((size_t)k * sizeof(long));
    cg_conv_pad(&g, x, 0, g.channels, xp);
    cg_conv_offsets(&g, off);
    float *packed[2], *in_place[2];
    cg_isa_path paths[2] = {CG_ISA_PORTABLE, CG_ISA_NEON};
    for (int q = 0; q < 2; q++) {
        use(paths[q]);
        packed[q] = floats(m * n);
        cg_pack_conv(&g, x, 0, n, pb, width, 0);
        cg_gemm(m, n, k, a, (cg_operand){pb, 0, CG_PACKED, width, 0}, packed[q], n, 0, ws, epi);
        in_place[q] = NULL;
        if (g.sw == 1) {
            in_place[q] = floats(m * n);
            // Two calls over halves of the output rows, as workers split them.
            long half = g.out_h / 2;
            cg_conv_rows(&g, xp, off, a, m, 0, half, in_place[q], n, epi);
            cg_conv_rows(&g, xp, off, a, m, half, g.out_h, in_place[q] + half * g.out_w, n, epi);
        }
    }
    char what[200];
    snprintf(what, sizeof what, "conv %ldx%ldx%ld k%ldx%ld s%ld,%ld d%ld,%ld p%ld,%ld m %ld epilogue %s", g.channels, g.h, g.w, g.kh,
             g.kw, g.sh, g.sw, g.dh, g.dw, g.pad_h, g.pad_w, m, EPIS[kind].name);
    char which[240];
    snprintf(which, sizeof which, "cg_pack_conv+cg_gemm %s", what);
    expect_paths(which, packed[0], packed[1], want, m * n);
    if (g.sw == 1) {
        snprintf(which, sizeof which, "cg_conv_rows %s", what);
        expect_paths(which, in_place[0], in_place[1], want, m * n);
    }
    free(x); free(w); free(scale); free(shift); free(conv); free(want); free(pa); free(pb); free(ws); free(xp); free(off);
    for (int q = 0; q < 2; q++) { free(packed[q]); free(in_place[q]); }
}

// cg_direct_conv: per-channel epilogue (kind), a residual (no pool) or a 2×2 max pool after.
static void direct_case(cg_conv g, long m, long kind, int residual, int pool) {
    long k = g.channels * g.kh * g.kw, n = g.out_h * g.out_w;
    float *x = randoms(g.channels * g.h * g.w), *w = randoms(m * k), *scale = randoms(m), *shift = randoms(m);
    float *res = residual ? randoms(m * n) : NULL;
    cg_epilogue e;
    const cg_epilogue *epi = make_epi(kind, &e, scale, shift);
    cg_epilogue with_res;
    if (residual) {
        with_res = epi ? *epi : (cg_epilogue){NULL, NULL, 0, CG_ACT_NONE, 0.0f, NULL};
        with_res.residual = res;
        epi = &with_res;
    }
    double *conv = doubles(m * n);
    ref_conv(&g, x, w, m, 0, conv);
    for (long o = 0; o < m; o++) {
        for (long q = 0; q < n; q++) conv[o * n + q] = ref_epi(conv[o * n + q], epi, o, residual ? res[o * n + q] : 0.0);
    }
    long ph = g.out_h / 2, pw = g.out_w / 2, outn = pool ? ph * pw : n;
    double *want = doubles(m * outn);
    if (pool) {
        for (long o = 0; o < m; o++) {
            for (long r = 0; r < ph; r++) {
                for (long c = 0; c < pw; c++) {
                    const double *t = conv + o * n + 2 * r * g.out_w + 2 * c;
                    want[o * outn + r * pw + c] = fmax(fmax(t[0], t[1]), fmax(t[g.out_w], t[g.out_w + 1]));
                }
            }
        }
    } else {
        memcpy(want, conv, (size_t)(m * n) * sizeof(double));
    }
    float *pw_ = floats((long)cg_direct_weights_count(m, k)), *xp = floats((long)cg_conv_padded_count(&g));
    float *ws = floats((long)cg_direct_workspace_count(&g, pool));
    cg_direct_pack(w, m, k, pw_);
    cg_conv_pad(&g, x, 0, g.channels, xp);
    float *got[2];
    cg_isa_path paths[2] = {CG_ISA_PORTABLE, CG_ISA_NEON};
    for (int q = 0; q < 2; q++) {
        use(paths[q]);
        got[q] = floats(m * outn);
        long units = cg_direct_units(&g, m, pool);
        // Units in two calls, as workers take them.
        cg_direct_conv(&g, xp, pw_, m, 0, units / 2, got[q], epi, pool, ws);
        cg_direct_conv(&g, xp, pw_, m, units / 2, units, got[q], epi, pool, ws);
    }
    char what[200];
    snprintf(what, sizeof what, "cg_direct_conv %ldx%ldx%ld k%ldx%ld s%ld,%ld p%ld,%ld m %ld epilogue %s%s%s", g.channels, g.h, g.w,
             g.kh, g.kw, g.sh, g.sw, g.pad_h, g.pad_w, m, EPIS[kind].name, residual ? " +residual" : "", pool ? " +pool" : "");
    expect_paths(what, got[0], got[1], want, m * outn);
    free(x); free(w); free(scale); free(shift); free(res); free(conv); free(want); free(pw_); free(xp); free(ws);
    free(got[0]); free(got[1]);
}

static void depthwise_case(cg_conv g, long kind) {
    long c = g.channels, n = g.out_h * g.out_w;
    float *x = randoms(c * g.h * g.w), *w = randoms(c * 9), *scale = randoms(c), *shift = randoms(c);
    cg_epilogue e;
    const cg_epilogue *epi = make_epi(kind, &e, scale, shift);
    double *want = doubles(c * n);
    ref_conv(&g, x, w, c, 1, want);
    for (long o = 0; o < c; o++) for (long q = 0; q < n; q++) want[o * n + q] = ref_epi(want[o * n + q], epi, o, 0.0);
    float *ws = floats((long)cg_depthwise_workspace_count(&g));
    float *got[2];
    cg_isa_path paths[2] = {CG_ISA_PORTABLE, CG_ISA_NEON};
    for (int q = 0; q < 2; q++) {
        use(paths[q]);
        got[q] = floats(c * n);
        cg_depthwise3x3(&g, x, w, 0, 1, got[q], epi, ws);
        cg_depthwise3x3(&g, x, w, 1, c, got[q], epi, ws);
    }
    char what[160];
    snprintf(what, sizeof what, "cg_depthwise3x3 %ldx%ldx%ld s%ld,%ld p%ld,%ld epilogue %s", c, g.h, g.w, g.sh, g.sw, g.pad_h, g.pad_w,
             EPIS[kind].name);
    expect_paths(what, got[0], got[1], want, c * n);
    free(x); free(w); free(scale); free(shift); free(want); free(ws); free(got[0]); free(got[1]);
}

// MARK: Max pooling

// One row of count outputs at stride s, from rows holding NaN, infinities and signed zeros:
// the NEON path bit for bit as the portable one, both as the header's definition.
static void pool_case(long count, long stride) {
    long len = stride * (count > 0 ? count - 1 : 0) + 2;
    const float specials[] = {0.0f, -0.0f, NAN, INFINITY, -INFINITY, 1.0f, -1.0f};
    float *r0 = randoms(len), *r1 = randoms(len);
    for (long i = 0; i < len; i++) {
        if (i % 3 == 0) r0[i] = specials[(i / 3) % 7];
        if (i % 5 == 1) r1[i] = specials[(i / 5 + 2) % 7];
    }
    float *want = floats(count + 1), *got[2];
    for (long i = 0; i < count; i++) {
        const float *a = r0 + stride * i, *b = r1 + stride * i;
        float t = a[1] >= a[0] ? a[1] : a[0], u = b[1] >= b[0] ? b[1] : b[0];
        want[i] = u >= t ? u : t;
    }
    cg_isa_path paths[2] = {CG_ISA_PORTABLE, CG_ISA_NEON};
    for (int q = 0; q < 2; q++) {
        use(paths[q]);
        got[q] = floats(count + 1);
        got[q][count] = 777.0f;
        cg_max_pool_2x2_row(r0, r1, got[q], count, stride);
        checks++;
        if (memcmp(got[q], want, (size_t)count * sizeof(float)) != 0 || got[q][count] != 777.0f) {
            failures++;
            printf("FAIL cg_max_pool_2x2_row count %ld stride %ld [%s]: not bit for bit the definition\n", count, stride,
                   cg_isa_name(paths[q]));
        }
    }
    free(r0); free(r1); free(want); free(got[0]); free(got[1]);
}

// MARK: Cases

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--isa") == 0) {
        printf("%s %d\n", cg_isa_name(cg_isa()), cg_available());
        return 0;
    }
    if (cg_set_isa(CG_ISA_NEON) != CG_ISA_NEON) {
        printf("the neon path is not available in this build (%s)\n", cg_isa_name(cg_isa_best()));
        return 2;
    }

    // GEMM: edge tiles in both directions, one to three k blocks (CG_KC = 256), every form of
    // A and B, accumulate on and off, every epilogue.
    static const long sizes[][3] = {{1, 1, 1},   {5, 7, 3},    {12, 32, 17}, {13, 33, 40}, {12, 8, 1},
                                    {3, 100, 20}, {25, 70, 300}, {37, 9, 513}, {24, 64, 256}};
    long count = (long)(sizeof sizes / sizeof sizes[0]);
    for (long s = 0; s < count; s++) {
        for (long kind = 0; kind < EPI_COUNT; kind++) {
            int forms = (int)((s + kind) % 9);
            gemm_case(sizes[s][0], sizes[s][1], sizes[s][2], forms / 3, forms % 3, (int)(kind % 2), kind);
        }
        gemm_case(sizes[s][0], sizes[s][1], sizes[s][2], 2, 2, 1, 0);
    }
    signed_zero_case(CG_ACT_RELU);
    signed_zero_case(CG_ACT_LEAKY_RELU);
    gemm_rows_case(7, 45, 30, 0, 2);
    gemm_rows_case(13, 32, 260, 1, 1);
    gemm_rows_case(1, 9, 5, 0, 0);

    static const long gemv[][2] = {{1, 1}, {31, 7}, {33, 300}, {70, 513}, {32, 2}};
    for (long s = 0; s < (long)(sizeof gemv / sizeof gemv[0]); s++) gemv_case(gemv[s][0], gemv[s][1]);

    // Convolutions as GEMMs: padded, strided, dilated, 1×1, two k blocks, rows of 32 + 8.
    conv_gemm_case(conv_geometry(3, 9, 11, 3, 3, 1, 1, 1, 1, 1, 1), 13, 1);
    conv_gemm_case(conv_geometry(5, 7, 40, 3, 3, 1, 1, 1, 1, 1, 1), 24, 5);
    conv_gemm_case(conv_geometry(4, 10, 9, 3, 2, 2, 1, 2, 2, 2, 1), 5, 3);
    conv_gemm_case(conv_geometry(4, 11, 13, 3, 3, 2, 2, 1, 1, 1, 1), 9, 2);
    conv_gemm_case(conv_geometry(20, 6, 6, 1, 1, 1, 1, 1, 1, 0, 0), 12, 0);
    conv_gemm_case(conv_geometry(30, 5, 5, 3, 3, 1, 1, 1, 1, 1, 1), 7, 1);

    // The direct convolution: strides 1 and 2, row widths that split into tiles of 1–6
    // pixels, partial and several pairs of 16-channel blocks, two chunks of input channels
    // (130 × 9 > 1152), two bands (30 × 20 > 448 pixels), residuals and pooling.
    direct_case(conv_geometry(3, 9, 11, 3, 3, 1, 1, 1, 1, 1, 1), 5, 1, 0, 0);
    direct_case(conv_geometry(8, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1), 16, 2, 0, 0);
    direct_case(conv_geometry(6, 13, 13, 3, 3, 1, 1, 1, 1, 1, 1), 33, 5, 0, 0);
    direct_case(conv_geometry(4, 9, 29, 3, 3, 1, 2, 1, 1, 1, 1), 40, 3, 0, 0);
    direct_case(conv_geometry(4, 5, 1, 3, 1, 1, 1, 1, 1, 1, 0), 17, 0, 0, 0);
    direct_case(conv_geometry(130, 4, 5, 3, 3, 1, 1, 1, 1, 1, 1), 20, 1, 0, 0);
    direct_case(conv_geometry(2, 30, 20, 3, 3, 1, 1, 1, 1, 1, 1), 18, 2, 0, 0);
    direct_case(conv_geometry(5, 12, 11, 3, 3, 1, 1, 1, 1, 1, 1), 21, 1, 1, 0);
    direct_case(conv_geometry(5, 10, 14, 3, 3, 1, 1, 1, 1, 1, 1), 16, 0, 1, 0);
    direct_case(conv_geometry(3, 12, 17, 3, 3, 1, 1, 1, 1, 1, 1), 19, 5, 0, 1);
    direct_case(conv_geometry(4, 11, 12, 3, 3, 1, 2, 1, 1, 1, 1), 7, 0, 0, 1);

    // Depthwise 3×3: both strides each way, padded and not, rows shorter and longer than a
    // vector, every epilogue.
    static const long dw[][6] = {{3, 9, 11, 1, 1, 1}, {4, 17, 13, 2, 2, 1}, {2, 9, 30, 1, 1, 0}, {3, 11, 12, 2, 1, 1},
                                 {2, 6, 19, 1, 2, 1}, {2, 5, 3, 1, 1, 1},   {3, 4, 4, 2, 2, 0},  {2, 8, 41, 2, 2, 1}};
    for (long s = 0; s < (long)(sizeof dw / sizeof dw[0]); s++) {
        for (long kind = 0; kind < EPI_COUNT; kind += 2 - s % 2) {
            depthwise_case(conv_geometry(dw[s][0], dw[s][1], dw[s][2], 3, 3, dw[s][3], dw[s][4], 1, 1, dw[s][5], dw[s][5]), kind);
        }
    }

    for (long n = 0; n < 20; n++) {
        pool_case(n, 1);
        pool_case(n, 2);
    }

    printf("neon harness: %ld checks, %ld failures\n", checks, failures);
    return failures ? 1 : 0;
}
