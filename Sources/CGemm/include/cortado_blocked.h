#ifndef CORTADO_BLOCKED_H
#define CORTADO_BLOCKED_H

/*
 * The channel-blocked layout: an image of C channels as [ceil(C/16)][H][W][16] (channel c of
 * pixel (y, x) at ((c/16)·H + y)·W·16 + x·16 + c%16; lanes past C hold anything and are never
 * read). A run of layers that take it passes blobs this way, so a 1×1 convolution is a small
 * GEMM with the channels along the lanes and a depthwise 3×3 is vectorised across channels,
 * whatever the map's width; nothing is transposed between them.
 *
 * - cg_blocked_direct_conv: the direct convolution (cortado_direct.h: the same packed weights
 *   and units of a pair of output-channel blocks × a band of output rows) reading a blocked or
 *   a padded planar input, writing a blocked or a planar output, the epilogue and a residual
 *   laid out as the output folded in.
 * - cg_blocked_depthwise3x3: a depthwise 3×3 (stride 1 or 2, any padding) from blocked to
 *   blocked, the epilogue folded in.
 * - cg_blocked_to_planar / cg_planar_to_blocked: the reorders at the edges of a run.
 *
 * On the kernel path in use (cg_isa()); cg_blocked_available() says whether it has them.
 */

#include <stddef.h>

#include "cortado_gemm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when the path in use has the blocked kernels. */
int cg_blocked_available(void);
/* Floats of one image of c channels × plane pixels in the blocked layout. */
size_t cg_blocked_count(long c, long plane);

/* 1 when the direct kernel can read this convolution's input blocked: no padded copy needed
 * (no padding, no row or column past the input read), horizontal stride 1 or 2. */
int cg_blocked_direct_reads(const cg_conv *g);
/* Units of work for m output channels, and floats of workspace per worker. */
long cg_blocked_direct_units(const cg_conv *g, long m);
size_t cg_blocked_direct_workspace_count(const cg_conv *g);
/* Units [u0, u1) of one image. x: the blocked input (x_blocked) or the padded planar copy
 * (cg_conv_pad, or the input itself when it needs none); w: cg_direct_pack's weights; y: the
 * output, blocked when y_blocked. The epilogue (may be NULL) is per channel; its residual,
 * when not NULL, is blocked when res_blocked (either layout with either output's). */
void cg_blocked_direct_conv(const cg_conv *g, const float *x, int x_blocked, const float *w, long m, long u0, long u1, float *y,
                            int y_blocked, const cg_epilogue *epilogue, int res_blocked, float *workspace);

/* Floats of the depthwise weights in the blocked form, and the packing (w: [channels][3][3]). */
size_t cg_blocked_depthwise_weights_count(long channels);
void cg_blocked_depthwise_pack(const float *w, long channels, float *dst);
/* Units of work (blocks × bands of output rows) and units [u0, u1) of one image, x and y
 * blocked; the epilogue (may be NULL, no residual) per channel. */
long cg_blocked_depthwise_units(const cg_conv *g);
void cg_blocked_depthwise3x3(const cg_conv *g, const float *x, const float *w, long u0, long u1, float *y,
                             const cg_epilogue *epilogue);

/* A depthwise 3×3 (gd: its geometry, wd: cg_blocked_depthwise_pack's weights, ed: its
 * epilogue) and the 1×1 stride-1 convolution that reads it (gp: its geometry, channels gd's,
 * map gd's output; wp: cg_direct_pack's weights for m output channels; ep: its epilogue, with
 * a residual, blocked when res_blocked) in one pass: each unit computes the depthwise output for a band of
 * rows into the workspace, where the 1×1 layer's tiles read it while it is in cache, so the
 * intermediate blob is never written. x blocked; y blocked when y_blocked. */
long cg_blocked_separable_units(const cg_conv *gd);
size_t cg_blocked_separable_workspace_count(const cg_conv *gd);
void cg_blocked_separable(const cg_conv *gd, const float *x, const float *wd, const cg_epilogue *ed, const cg_conv *gp,
                          const float *wp, long m, long u0, long u1, float *y, int y_blocked, const cg_epilogue *ep,
                          int res_blocked, float *workspace);

/* A network's stem: a 3×3 stride-2 convolution (dilation 1, any padding) of a planar input of
 * at most CG_STEM_CHANNELS channels, written blocked, on a kernel that spends no lane on the
 * channels past m and makes no padded copy of the input (avx512: the output pixels along the
 * lanes; avx2: the channels along the lanes in vectors of 8, 24 channels three). 1 when the path
 * in use has it and it takes g; units of work (output rows); units [u0, u1) of one image: x the
 * unpadded planar input, w cg_direct_pack's weights for m output channels, y blocked, the
 * epilogue (may be NULL) without a residual. */
#define CG_STEM_CHANNELS 4
int cg_blocked_stem_takes(const cg_conv *g);
long cg_blocked_stem_units(const cg_conv *g);
void cg_blocked_stem(const cg_conv *g, const float *x, const float *w, long m, long u0, long u1, float *y,
                     const cg_epilogue *epilogue);

/* Channels [c0, c1) of one image (c0 a multiple of 16) between the layouts. */
void cg_blocked_to_planar(const float *x, long channels, long plane, long c0, long c1, float *y);
void cg_planar_to_blocked(const float *x, long channels, long plane, long c0, long c1, float *y);

#ifdef __cplusplus
}
#endif
#endif
