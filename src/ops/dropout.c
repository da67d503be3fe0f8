/* clattn_dropout: Philox-keyed dropout, shared by the attention modules. */
#include "attention.h"
#include <math.h>
#include <string.h>

clattn_status clattn__check_dropout(clattn_context *ctx, const clattn_dropout_params *p,
                                    const char *name)
{
    clattn_status st = CLATTN_SUCCESS;
    if (p) {
        CHECK(ctx, p->p >= 0.0f && p->p <= 1.0f, CLATTN_ERROR_INVALID_ARGUMENT,
              "%s.p = %g is outside [0, 1]", name, (double)p->p);
        CHECK(ctx, p->training == 0 || p->training == 1, CLATTN_ERROR_INVALID_ARGUMENT,
              "%s.training = %d: must be 0 (no-op) or 1", name, p->training);
    }
fail:
    return st;
}

unsigned clattn__dropout_threshold(float p)
{
    return (unsigned)lrint((double)p * 16777216.0);
}

int clattn__dropout_active(const clattn_dropout_params *p)
{
    return p && p->training && p->p > 0.0f;
}

clattn_status clattn__enqueue_dropout(clattn_context *ctx, cl_mem x, size_t x_off, cl_mem y,
                                      size_t y_off, size_t n, unsigned long long first,
                                      const clattn_dropout_params *p)
{
    return clattn__enqueue_dropout_typed(ctx, x, CLATTN_FLOAT32, x_off, y, CLATTN_FLOAT32, y_off, n,
                                         first, p);
}

clattn_status clattn__enqueue_dropout_typed(clattn_context *ctx, cl_mem x, clattn_dtype xt,
                                            size_t x_off, cl_mem y, clattn_dtype yt, size_t y_off,
                                            size_t n, unsigned long long first,
                                            const clattn_dropout_params *p)
{
    clattn_status st = CLATTN_SUCCESS;
    cl_kernel k;
    char defs[32] = "";
    int xo = (int)x_off, yo = (int)y_off, nn = (int)n;
    cl_ulong f = first;
    cl_uint2 seed = {{(cl_uint)p->seed, (cl_uint)(p->seed >> 32)}};
    cl_uint2 off = {{(cl_uint)p->offset, (cl_uint)(p->offset >> 32)}};
    /* keep when 24 random bits >= threshold: P(keep) = 1 - threshold / 2^24 = 1 - p */
    cl_uint threshold = clattn__dropout_threshold(p->p);
    float scale = p->p < 1.0f ? 1.0f / (1.0f - p->p) : 0.0f;
    clattn__dtype_define(defs, sizeof defs, "XT", xt);
    clattn__dtype_define(defs, sizeof defs, "YT", yt);
    CHECK_ST(clattn__get_kernel(ctx, "dropout.cl", defs, "dropout", &k));
    CHECK_ST(clattn__set_args(ctx, k, "dropout", ARG(x), ARG(xo), ARG(y), ARG(yo), ARG(nn), ARG(f),
                              ARG(seed), ARG(off), ARG(threshold), ARG(scale), ARGS_END));
    size_t gws = n;
    CHECK_ST(clattn__launch(ctx, k, 1, &gws, NULL, "dropout"));
fail:
    return st;
}

/* y = dropout(x) with x and y named in messages as the caller's arguments. */
static clattn_status dropout_checked(clattn_context *ctx, const clattn_tensor *x, const char *xn,
                                     const clattn_dropout_params *p, const clattn_tensor *y,
                                     const char *yn)
{
    clattn_status st = CLATTN_SUCCESS;
    char s1[96], s2[96];
    CHECK(NULL, ctx, CLATTN_ERROR_INVALID_ARGUMENT, "ctx: NULL context");
    CHECK_ST(clattn__check_float_tensor(ctx, x, xn, 1, 4));
    CHECK_ST(clattn__check_float_tensor(ctx, y, yn, 1, 4));
    CHECK(ctx, p, CLATTN_ERROR_INVALID_ARGUMENT, "p: NULL dropout parameters");
    CHECK_ST(clattn__check_dropout(ctx, p, "p"));
    CHECK(ctx, x->ndim == y->ndim && memcmp(x->dims, y->dims, sizeof(size_t) * x->ndim) == 0,
          CLATTN_ERROR_SHAPE_MISMATCH, "%s: shape %s, expected %s's shape %s", yn,
          clattn__shape_str(y, s1, sizeof s1), xn, clattn__shape_str(x, s2, sizeof s2));
    CHECK(ctx, clattn__same_view(x, y) || !clattn__overlaps(x, y), CLATTN_ERROR_INVALID_ARGUMENT,
          "%s: overlaps %s without being the same view (in place: the same buf, offset and dtype)",
          yn, xn);
    size_t n = clattn_tensor_numel(x);
    if (clattn__dropout_active(p))
        CHECK_ST(clattn__enqueue_dropout_typed(ctx, x->buf, x->dtype, x->offset, y->buf, y->dtype,
                                               y->offset, n, 0, p));
    else if (!clattn__same_view(x, y)) /* the identity: a copy, or a conversion */
        CHECK_ST(clattn__enqueue_convert(ctx, x, y));
fail:
    return st;
}

clattn_status clattn_dropout(clattn_context *ctx, const clattn_tensor *x,
                             const clattn_dropout_params *p, const clattn_tensor *y)
{
    clattn_status st = CLATTN_SUCCESS;
    CHECK_DRY_RUN(ctx, clattn_dropout(ctx, x, p, y));
    st = dropout_checked(ctx, x, "x", p, y, "y");
fail:
    return st;
}

/* dropout is linear in x with the same keep mask for every x: its backward is itself. */
clattn_status clattn_dropout_backward(clattn_context *ctx, const clattn_tensor *dy,
                                      const clattn_dropout_params *p, const clattn_tensor *dx)
{
    clattn_status st = CLATTN_SUCCESS;
    CHECK_DRY_RUN(ctx, clattn_dropout_backward(ctx, dy, p, dx));
    st = dropout_checked(ctx, dy, "dy", p, dx, "dx");
fail:
    return st;
}
