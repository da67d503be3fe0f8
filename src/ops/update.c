/* clattn_axpy: the parameter update an SGD step makes (y += alpha x), on the device. */
#include "internal.h"
#include <math.h>
#include <string.h>

clattn_status clattn_axpy(clattn_context *ctx, float alpha, const clattn_tensor *x,
                          const clattn_tensor *y)
{
    clattn_status st = CLATTN_SUCCESS;
    char s1[96], s2[96];
    cl_kernel k;
    CHECK_DRY_RUN(ctx, clattn_axpy(ctx, alpha, x, y));
    CHECK(NULL, ctx, CLATTN_ERROR_INVALID_ARGUMENT, "ctx: NULL context");
    CHECK(ctx, isfinite(alpha), CLATTN_ERROR_INVALID_ARGUMENT, "alpha: not finite");
    CHECK_ST(clattn__check_tensor(ctx, x, "x", CLATTN_FLOAT32, 1, 4));
    CHECK_ST(clattn__check_tensor(ctx, y, "y", CLATTN_FLOAT32, 1, 4));
    CHECK(ctx, x->ndim == y->ndim && memcmp(x->dims, y->dims, sizeof(size_t) * x->ndim) == 0,
          CLATTN_ERROR_SHAPE_MISMATCH, "y: shape %s, expected x's shape %s",
          clattn__shape_str(y, s1, sizeof s1), clattn__shape_str(x, s2, sizeof s2));
    const clattn_arg outs[1] = {{y, "y"}}, ins[1] = {{x, "x"}};
    CHECK_ST(clattn__check_no_overlap(ctx, outs, 1, ins, 1));
    int xo = (int)x->offset, yo = (int)y->offset, n = (int)clattn_tensor_numel(x);
    size_t gws = (size_t)n;
    CHECK_ST(clattn__get_kernel(ctx, "update.cl", "", "axpy", &k));
    CHECK_ST(clattn__set_args(ctx, k, "axpy", ARG(alpha), ARG(x->buf), ARG(xo), ARG(y->buf),
                              ARG(yo), ARG(n), ARGS_END));
    CHECK_ST(clattn__launch(ctx, k, 1, &gws, NULL, "axpy"));
fail:
    return st;
}
