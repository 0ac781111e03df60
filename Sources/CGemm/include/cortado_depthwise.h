#ifndef CORTADO_DEPTHWISE_H
#define CORTADO_DEPTHWISE_H

/*
 * A depthwise 3×3 convolution (each output channel reads its own input channel: groups equal
 * to the channels, one filter per channel) on the NCHW layout, stride 1 or 2 each way,
 * dilation 1, any padding, on the kernel path in use (cg_isa() in cortado_gemm.h). Channel by
 * channel, the plane is copied with its zero border into the workspace (it stays in L2), then
 * each output row is a vector loop along the row (nine FMAs per vector of outputs) followed by
 * the epilogue while the row is in L1: the bias or folded batch norm and ReLU / leaky ReLU of
 * the layers that follow cost no pass of their own. No im2col is written.
 */

#include <stddef.h>

#include "cortado_gemm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when the kernel takes this geometry: 3×3, dilation 1, strides 1 or 2. */
int cg_depthwise_supported(const cg_conv *g);
/* Floats of workspace one worker needs (one padded plane). */
size_t cg_depthwise_workspace_count(const cg_conv *g);
/* Channels [c0, c1) of one image: x is [channels][h][w], w the filters [channels][3][3] (as a
 * grouped convolution's [Cout][1][3][3] weights), y [channels][out_h][out_w]. The epilogue
 * (may be NULL) is per channel, indexed by the absolute channel (per_column is ignored). */
void cg_depthwise3x3(const cg_conv *g, const float *x, const float *w, long c0, long c1, float *y, const cg_epilogue *epilogue,
                     float *workspace);

#ifdef __cplusplus
}
#endif
#endif
