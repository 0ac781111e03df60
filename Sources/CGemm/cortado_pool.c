// 2×2 max pooling (see include/cortado_pool.h): the path in use's row kernel.
#include "cortado_pool.h"

#include "cg_kernels.h"

void cg_max_pool_2x2_row(const float *r0, const float *r1, float *out, long count, long stride) {
    cg_kernels_now()->max_pool_row(r0, r1, out, count, stride);
}
