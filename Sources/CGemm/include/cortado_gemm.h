#ifndef CORTADO_GEMM_H
#define CORTADO_GEMM_H

/*
 * Cortado's single-precision GEMM for the neural-network kernels: row-major
 * C[m×n] = A[m×k]·B[k×n] (+ C), cache-blocked, with micro-kernels per instruction set
 * (AVX-512F, AVX2+FMA, NEON, plain C) chosen once at run time (cg_isa below).
 *
 * Operands are packed into panels: A into row panels of CG_MR rows, B into column panels
 * of CG_NR columns, both cut along k into ceil(k / CG_KC) blocks of near-equal size (block b
 * covers k values [b·k/blocks, (b+1)·k/blocks)). A packed matrix is laid out block by block
 * along k; inside a block, panel after panel; inside a panel, k after k:
 *   packed A: [k block][row panel][k in block][CG_MR]
 *   packed B: [k block][column panel][k in block][CG_NR]
 * Padding rows or columns hold zeros. Constant operands (weights) are packed once;
 * activations are packed by the GEMM itself, per block, into caller-supplied workspace.
 * The layout is the same on every path (a narrower kernel covers a panel's tile in several
 * pieces), so weights packed under one path run under any other.
 *
 * Every path computes the same function; only the portable one is slow, and callers keep
 * another path (OpenBLAS) for it: cg_available() says whether to use these kernels.
 */

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { CG_MR = 12, CG_NR = 32, CG_KC = 256 };

/* The kernel paths. On x86-64 narrowest first (portable, avx2, avx512); on aarch64 the
 * paths are portable and neon (numbered after the x86 ones, so their values never change). */
typedef enum { CG_ISA_PORTABLE = 0, CG_ISA_AVX2 = 1, CG_ISA_AVX512 = 2, CG_ISA_NEON = 3 } cg_isa_path;

/* The path in use: the widest this CPU runs (x86-64: AVX-512F+VL, else AVX2+FMA, else plain C;
 * aarch64: NEON), or a narrower one that the environment variable CORTADO_ISA (avx512, avx2,
 * neon or portable) asks for, read once; never a wider one than the CPU has, and never one of
 * another architecture (such a request gets the widest path, said once on stderr). */
cg_isa_path cg_isa(void);
/* The widest path this CPU runs. */
cg_isa_path cg_isa_best(void);
/* "avx512", "avx2", "neon" or "portable" (the names CORTADO_ISA takes). */
const char *cg_isa_name(cg_isa_path isa);
/* Switches the path for calls made from now on (tests run each path this way): a path this
 * CPU runs is taken as asked, any other gives cg_isa_best() (one below portable gives
 * portable); returns the path now in use. Not for use while kernels run on other threads. */
cg_isa_path cg_set_isa(cg_isa_path isa);

/* 1 when the path in use has vector kernels (not portable): callers then prefer these kernels
 * to their fallback. */
int cg_available(void);

/* One operand of cg_gemm. */
typedef enum {
    CG_ROW_MAJOR = 0,  /* element (r, c) of the operand at data[r*ld + c] */
    CG_TRANSPOSED = 1, /* element (r, c) at data[c*ld + r] */
    CG_PACKED = 2,     /* a packed matrix (layout above): rows (A) or columns (B) from panel `panel` on */
} cg_form;

typedef struct {
    const float *data;
    long ld;       /* CG_ROW_MAJOR / CG_TRANSPOSED: leading dimension */
    cg_form form;
    long width;    /* CG_PACKED: padded width of the whole packed matrix (a multiple of CG_MR or CG_NR) */
    long panel;    /* CG_PACKED: first panel of this view */
} cg_operand;

/* Floats a packed A (m×k) or B (k×n) takes. */
size_t cg_packed_a_count(long m, long k);
size_t cg_packed_b_count(long k, long n);

/* Packs all of a (m×k, element (i,p) as `a` describes, not CG_PACKED) into dst. */
void cg_pack_a(cg_operand a, long m, long k, float *dst);
/* Packs columns [n0, n0+n) of b (k×ntotal, element (p,j) as `b` describes) into panels
 * dst_panel... of a packed matrix of padded width dst_width (n0 and dst_panel on panel
 * boundaries: n0 a multiple of CG_NR). */
void cg_pack_b(cg_operand b, long k, long n0, long n, float *dst, long dst_width, long dst_panel);

/* The im2col matrix of one convolution, packed straight from the [C, H, W] input:
 * row (c·kh + i)·kw + j, column oh·outW + ow holds
 * x[c, oh·sh − padH + i·dh, ow·sw − padW + j·dw] (0 outside the input). */
typedef struct {
    long channels, h, w;
    long kh, kw, sh, sw, dh, dw;
    long pad_h, pad_w;
    long out_h, out_w;
} cg_conv;

/* Packs columns [n0, n0+n) of the im2col matrix of x (K = channels·kh·kw rows) into
 * panels dst_panel... of a packed B of padded width dst_width (n0 a multiple of CG_NR). */
void cg_pack_conv(const cg_conv *g, const float *x, long n0, long n, float *dst, long dst_width, long dst_panel);

/* Floats of workspace cg_gemm needs (at most; 64-byte alignment is done inside). */
size_t cg_workspace_count(void);

/* Steps applied to each finished tile of C while it is in L1: y = x·scale[ch] + shift[ch]
 * (a NULL scale means 1, a NULL shift 0), then the activation. The channel ch is the row of
 * C (per_column 0: a convolution's output channels) or its column (per_column 1: an inner
 * product's); scale and shift are indexed from the first row or column of this C. */
typedef enum { CG_ACT_NONE = 0, CG_ACT_RELU = 1, CG_ACT_LEAKY_RELU = 2 } cg_activation;

typedef struct {
    const float *scale;
    const float *shift;
    int per_column;
    cg_activation activation;
    float alpha; /* leaky ReLU: y = alpha·x for x < 0 */
    /* A residual added after scale and shift, before the activation: a tensor laid out as the
     * output (channel ch's plane at residual + ch·plane). Only cg_direct_conv without pooling
     * reads it; every other entry point takes NULL here. */
    const float *residual;
} cg_epilogue;

/* C[m×n] = A·B, or C += A·B when accumulate is non-zero; then the epilogue, when not NULL.
 * A packed A view starts on a row panel, a packed B view on a column panel. The workspace
 * (cg_workspace_count() floats) may be NULL when both operands are packed. */
void cg_gemm(long m, long n, long k, cg_operand a, cg_operand b, float *c, long ldc, int accumulate, float *workspace,
             const cg_epilogue *epilogue);

/* The same with A given as m row pointers: row i is a_rows[i][0..k) (rows of separate
 * arrays, e.g. the requests of a batch, read in place with no copy into one matrix). */
void cg_gemm_rows(long m, long n, long k, const float *const *a_rows, cg_operand b, float *c, long ldc, int accumulate,
                  float *workspace, const cg_epilogue *epilogue);

/* A stride-1 convolution (sw = 1) with its B panels read in place instead of packed: row k =
 * (c, i, j) of a panel of 32 output pixels in one output row is 32 consecutive floats of a
 * zero-padded copy of the input, at offset off[k] = c·Hp·Wp + i·dh·Wp + j·dw from the panel's
 * first pixel. No im2col is written, which matters when the output has few channels (the
 * packed im2col is reused by few rows of weights). Each output row is cut into panels of 32
 * (the last one narrower), so rows whose width is not near a multiple of 32 waste lanes. */

/* Padded input size: Hp × Wp per channel, covering every window (and at least the input
 * with its top/left padding). */
void cg_conv_padded_size(const cg_conv *g, long *hp, long *wp);
/* Floats of the padded copy: channels·Hp·Wp plus slack read by the lanes past a row's end. */
size_t cg_conv_padded_count(const cg_conv *g);
/* Writes channels [c0, c1) of the padded copy of x (the slack too, with the last channel). */
void cg_conv_pad(const cg_conv *g, const float *x, long c0, long c1, float *xp);
/* The offsets off[K] (K = channels·kh·kw longs). */
void cg_conv_offsets(const cg_conv *g, long *off);
/* Output rows [oh0, oh1) of C[m × …] = A·im2col (A a packed view of the weights from a row
 * panel, m rows): element (r, (oh − oh0)·out_w + ow) at c[r·ldc + …], then the epilogue (per
 * row) when the last k block is done. g->sw must be 1. */
void cg_conv_rows(const cg_conv *g, const float *xp, const long *off, cg_operand a, long m, long oh0, long oh1, float *c,
                  long ldc, const cg_epilogue *epilogue);

/* y[n] = x[k]·B for one row x against columns [0, n) of a packed B view (y overwritten). */
void cg_gemv(long n, long k, const float *x, cg_operand b, float *y);

/* Asks for `bytes` from p into the caches (x86 `prefetcht0`, one per 64-byte line): for data
 * the hardware prefetcher would find late, e.g. the next of many separately allocated rows. */
static inline void cg_prefetch(const void *p, size_t bytes) {
#if defined(__x86_64__) || defined(__i386__)
    for (size_t i = 0; i < bytes; i += 64) __builtin_prefetch((const char *)p + i, 0, 3);
#endif
}

/* A spin-wait hint (x86 `pause`) for threads that poll a flag. */
static inline void cg_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

#ifdef __cplusplus
}
#endif
#endif
