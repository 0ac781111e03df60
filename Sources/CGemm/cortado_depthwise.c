// Depthwise 3×3 convolution (see include/cortado_depthwise.h): the channel loop and the padded
// copy in plain C; the rows come from the path in use (cg_kernels_now()->depthwise_plane).
#include "cortado_depthwise.h"

#include "cg_kernels.h"

int cg_depthwise_supported(const cg_conv *g) {
    return g->kh == 3 && g->kw == 3 && g->dh == 1 && g->dw == 1 && (g->sh == 1 || g->sh == 2) && (g->sw == 1 || g->sw == 2);
}

size_t cg_depthwise_workspace_count(const cg_conv *g) {
    long hp, wp;
    cg_conv_padded_size(g, &hp, &wp);
    return (size_t)(hp * wp + 64);
}

void cg_depthwise3x3(const cg_conv *g, const float *x, const float *w, long c0, long c1, float *y, const cg_epilogue *epilogue,
                     float *workspace) {
    long hp, wp;
    cg_conv_padded_size(g, &hp, &wp);
    // One channel's padded plane: cg_conv_pad on a one-channel view of the input.
    cg_conv one = *g;
    one.channels = 1;
    const cg_kernels *kern = cg_kernels_now();
    long plane = g->h * g->w, out_plane = g->out_h * g->out_w;
    for (long c = c0; c < c1; c++) {
        const float *xp = x + c * plane;
        if (g->pad_h != 0 || g->pad_w != 0 || hp != g->h || wp != g->w) {
            cg_conv_pad(&one, x + c * plane, 0, 1, workspace);
            xp = workspace;
        }
        float s = 1.0f, t = 0.0f;
        if (epilogue) { s = cg_epi_scale(epilogue, c); t = cg_epi_shift(epilogue, c); }
        kern->depthwise_plane(xp, wp, g->sh, g->sw, w + 9 * c, g->out_h, g->out_w, y + c * out_plane, s, t, epilogue);
    }
}
