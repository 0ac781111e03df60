#ifndef CORTADO_WINOGRAD_H
#define CORTADO_WINOGRAD_H

/*
 * Winograd F(4×4, 3×3) convolution (Lavin and Gray, "Fast Algorithms for Convolutional Neural
 * Networks", 2016) for 3×3, stride 1, dilation 1, ungrouped convolutions, any padding and any
 * H × W, on the kernel path in use (cg_isa() in cortado_gemm.h).
 *
 * The output is cut into tiles of 4 × 4 pixels (tw = ⌈out_w/4⌉ by th = ⌈out_h/4⌉ of them, the
 * last ones partly outside the image); each reads a 6 × 6 input patch (zeros outside the
 * input). With d a patch, g a 3 × 3 filter, Bᵀ, G and Aᵀ the transforms (6 × 6, 6 × 3, 4 × 6):
 *     Y = Aᵀ [ (G g Gᵀ) ⊙ (Bᵀ d B) ] A
 * summed over input channels. The sum over channels of each of the 36 products is a matrix
 * product: for position ξ of the 6 × 6 grid, M_ξ[tile × m] = V_ξ[tile × C] · U_ξ[C × m]. A 3×3
 * convolution's 9 multiplications per output pixel become 36/16 = 2.25 (plus the transforms,
 * whose cost is per channel, not per channel pair).
 *
 * - Weights (cg_winograd_pack, once at load): U = G g Gᵀ, computed in double, stored per ξ in
 *   the direct kernel's layout [ξ][⌈m/16⌉][C][16], so the direct convolution's register tiles
 *   (cortado_direct.h; 1×1 windows over the tiles instead of pixels) run the 36 products.
 * - Input (cg_winograd_input, per image, workers split the channels): V[ξ][c][tile]. On the
 *   AVX-512 path 16 tiles of a row to a register, read straight from the plane with masked
 *   loads; on the AVX2 path 8 tiles to a register, read straight from the plane (groups at the
 *   borders through a zeroed copy); elsewhere each transform is a plain loop along a row of
 *   tiles that the compiler vectorises for the path.
 * - Units (cg_winograd_conv, workers split them): a pair of blocks of 16 output channels × a
 *   band of tiles. A unit runs the 36 products of its band into blocked sums (they stay in L2),
 *   then the output transform along the 16 channel lanes, each row of tiles of the band laid
 *   out as four rows of blocked pixels, and the path's finishing of direct-kernel blocks (the
 *   epilogue: scale and shift per channel, the residual, the activation; a transpose; whole
 *   runs of a row stored at once) into the planar [m][out_h][out_w] output (only pixels inside
 *   the image), or, with a folded 2×2 max pooling, into a small planar buffer pooled from there
 *   into the [m][out_h/2][out_w/2] output. Layers of many input channels run the products chunk
 *   by chunk of channels with the weights ahead asked for meanwhile (cortado_winograd.c).
 *
 * Error: the transforms multiply by up to 8 and divide by 24, so results differ from the direct
 * sums by a few units of float rounding times the channel count more than direct convolution
 * does (callers compare against the direct result before choosing it).
 */

#include <stddef.h>

#include "cortado_gemm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when this geometry is a Winograd one: 3 × 3 kernel, stride 1 and dilation 1 both ways. */
int cg_winograd_supported(const cg_conv *g);

/* Floats of the transformed weights for m output channels and c input channels. */
size_t cg_winograd_weights_count(long m, long c);
/* Transforms and packs w (a convolution's [m][c][3][3] weights) into dst. */
void cg_winograd_pack(const float *w, long m, long c, float *dst);

/* Floats of the transformed input of one image (36 × channels × tiles). */
size_t cg_winograd_input_count(const cg_conv *g);
/* Floats of workspace one worker needs (for either step; 64-byte alignment is done inside). */
size_t cg_winograd_workspace_count(const cg_conv *g);
/* Transforms channels [c0, c1) of one image x ([C][H][W]) into v. */
void cg_winograd_input(const cg_conv *g, const float *x, long c0, long c1, float *v, float *workspace);

/* Units of work for m output channels. */
long cg_winograd_units(const cg_conv *g, long m);
/* Units [u0, u1) of one image: v its transformed input, w the packed weights, y its output.
 * The epilogue (may be NULL) is per channel (per_column is ignored); its residual, when not
 * NULL, is laid out as y. With pool non-zero (and no residual) the finished rows are max-pooled
 * 2×2 with stride 2 as they are made (cg_max_pool_2x2_row's maximum) and y is the pooled
 * output [m][out_h/2][out_w/2]: the full-size output is never written. */
void cg_winograd_conv(const cg_conv *g, const float *v, const float *w, long m, long u0, long u1, float *y,
                      const cg_epilogue *epilogue, int pool, float *workspace);

/*
 * Winograd F(2×2, 3×3) (cortado_winograd2.c), the same interface with 2 × 2 output tiles, each
 * reading a 4 × 4 patch: Bᵀ (4 × 4), G (4 × 3) and Aᵀ (2 × 4) in place of the 6 × 6 ones,
 * 16 products per tile, so 4 multiplications per output pixel and channel pair instead of 9,
 * weights 16/9 the direct ones (F(4×4): 36/9), and transforms whose coefficients are 0, ±1
 * and ±1/2 (errors near the direct convolution's). It suits small maps with many channels,
 * e.g. 13 × 13 (49 tiles for 169 pixels, against F(4×4)'s 16 tiles of 256 pixels, with four
 * times the weights to stream per use). Units: a group of up to 8 blocks of 16 output
 * channels × a band of tiles; a unit runs the 16 products position by position (that
 * position's transformed input stays in cache across the group's blocks), then the output
 * transform, the epilogue and the stores. The weights are [ξ][⌈m/16⌉][C][16] for 16 ξ.
 */
size_t cg_winograd2_weights_count(long m, long c);
void cg_winograd2_pack(const float *w, long m, long c, float *dst);
size_t cg_winograd2_input_count(const cg_conv *g);
size_t cg_winograd2_workspace_count(const cg_conv *g);
void cg_winograd2_input(const cg_conv *g, const float *x, long c0, long c1, float *v, float *workspace);
long cg_winograd2_units(const cg_conv *g, long m);
void cg_winograd2_conv(const cg_conv *g, const float *v, const float *w, long m, long u0, long u1, float *y,
                       const cg_epilogue *epilogue, int pool, float *workspace);

#ifdef __cplusplus
}
#endif
#endif
