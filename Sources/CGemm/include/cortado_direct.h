#ifndef CORTADO_DIRECT_H
#define CORTADO_DIRECT_H

/*
 * A direct convolution with the output channels along the vector lanes, on the kernel path in
 * use (cg_isa() in cortado_gemm.h; callers check cg_available()).
 *
 * The weights are packed once as [ceil(m/16)][K][16] (K = channels·kh·kw, row (c·kh + i)·kw + j
 * as in cg_conv; channels past m are zero). A tile of up to 2 blocks of 16 output channels by
 * up to 14 output pixels of one output row is held in zmm registers (AVX-512; the AVX2 path
 * holds one block by up to 6 pixels in ymm registers): for every k it loads one
 * vector of weights per block and broadcasts one input value per pixel, read from the
 * zero-padded planar copy of the input (cg_conv_pad). No im2col is written, and a row of 13
 * pixels fills 13 accumulators (the GEMM's lanes run along the pixels and pad a 13×13 image's
 * 169 pixels to 176). Horizontal strides 1 and 2.
 *
 * Work comes in units: a pair of channel blocks (the last may be one block) × a band of output
 * rows. A unit accumulates into a blocked buffer over chunks of input channels (the chunk's
 * weights stay in L2 across the band's rows), then applies the epilogue per lane, transposes
 * the blocks to the planar [m][out_h][out_w] output in registers and, when asked, max-pools
 * 2×2 with stride 2 (output [m][out_h/2][out_w/2], cg_max_pool_2x2_row's maximum).
 */

#include <stddef.h>

#include "cortado_gemm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Floats of the packed weights for m output channels of K values each. */
size_t cg_direct_weights_count(long m, long k);
/* Packs w (m×k, row-major: a convolution's [Cout][Cin][kh][kw]) into dst. */
void cg_direct_pack(const float *w, long m, long k, float *dst);

/* 1 when the kernel takes this geometry (horizontal stride 1 or 2). */
int cg_direct_supported(const cg_conv *g);
/* Units of work for m output channels (with pool: only the rows the pooling reads). */
long cg_direct_units(const cg_conv *g, long m, int pool);
/* Floats of workspace one worker needs (64-byte alignment is done inside). */
size_t cg_direct_workspace_count(const cg_conv *g, int pool);

/* Units [u0, u1) of one image: xp is the padded copy of its input (cg_conv_pad), w the packed
 * weights, y its output (planar; pooled when pool is non-zero). The epilogue (may be NULL) is
 * per channel (per_column is ignored). */
void cg_direct_conv(const cg_conv *g, const float *xp, const float *w, long m, long u0, long u1, float *y,
                    const cg_epilogue *epilogue, int pool, float *workspace);

#ifdef __cplusplus
}
#endif
#endif
