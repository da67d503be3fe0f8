/* clattn_masked_softmax: argument checks, mask resolution, variant choice and launch. */
#include "internal.h"
#include "mask.h"
#include <stdio.h>
#include <string.h>

clattn_status clattn_masked_softmax(clattn_context *ctx, const clattn_tensor *scores,
                                    const clattn_mask *mask, const clattn_tensor *out)
{
    clattn_status st = CLATTN_SUCCESS;
    clattn_mask_args m = {0};
    clattn_tuning tune;
    char s1[96], s2[96];
    CHECK_DRY_RUN(ctx, clattn_masked_softmax(ctx, scores, mask, out));
    CHECK(NULL, ctx, CLATTN_ERROR_INVALID_ARGUMENT, "ctx: NULL context");
    CHECK_ST(clattn__check_float_tensor(ctx, scores, "scores", 1, 4));
    CHECK_ST(clattn__check_float_tensor(ctx, out, "out", 1, 4));
    CHECK(ctx, scores->ndim == out->ndim &&
                   memcmp(scores->dims, out->dims, sizeof(size_t) * (size_t)out->ndim) == 0,
          CLATTN_ERROR_SHAPE_MISMATCH, "out: shape %s, expected the scores' shape %s",
          clattn__shape_str(out, s1, sizeof s1), clattn__shape_str(scores, s2, sizeof s2));
    CHECK(ctx, clattn__same_view(out, scores) || !clattn__overlaps(out, scores),
          CLATTN_ERROR_INVALID_ARGUMENT,
          "out: overlaps scores without being the same view (in place: the same buf, offset and "
          "dtype)");
    const clattn_arg outs[1] = {{out, "out"}};
    CHECK_ST(clattn__resolve_mask(ctx, mask, scores, "mask", outs, 1, &m));
    CHECK_ST(clattn__tune(ctx, "softmax", &tune));
    CHECK_ST(clattn__enqueue_softmax(ctx, &tune, scores, &m, out, NULL));
fail:
    clattn__mask_release(&m);
    return st;
}

/* Loop iterations of one masked_softmax_wg work-item (kernels/softmax.cl) for rows of K keys,
 * counted as clattn__loop_budget asks: three strided passes and two tree reductions. */
static long wg_loops(int K, int WG)
{
    long passes = 3 * ((K + WG - 1) / WG + 1), steps = 1;
    for (int w = WG; w > 1; w /= 2)
        steps++;
    return passes + 2 * steps + 4;
}

long clattn__softmax_gpu_min_loops(const clattn_tuning *t)
{
    return wg_loops(1, clattn__tune_int(t, "WG", 128));
}

/* The rows are not split over launches: a row whose passes exceed the loop budget is refused. */
static clattn_status check_loops(clattn_context *ctx, const clattn_tuning *t, int K, int WG)
{
    size_t one;
    return clattn__loop_units(ctx, clattn__loop_budget(ctx, t), 0, wg_loops(K, WG), 1, &one,
                              "masked_softmax: a row of %d keys (softmax=gpu, WG=%d)", K, WG);
}

clattn_status clattn__enqueue_softmax(clattn_context *ctx, const clattn_tuning *tune,
                                      const clattn_tensor *x, const clattn_mask_args *m,
                                      const clattn_tensor *y, const clattn_tensor *lse)
{
    clattn_status st = CLATTN_SUCCESS;
    cl_kernel k;
    clattn_tuning t = *tune;
    char defs[sizeof t.defines + 32];
    int gpu = strcmp(t.variant, "gpu") == 0;
    int nrows = (int)(clattn_tensor_numel(x) / m->K), K = m->K;
    int x_off = (int)x->offset, y_off = (int)y->offset, WG = clattn__tune_int(&t, "WG", 128);
    cl_mem lse_buf = lse ? lse->buf : NULL;
    int lse_off = lse ? (int)lse->offset : 0;
    size_t gws = (size_t)nrows, lws = 0, kernel_wg = 0;
    for (;;) {
        snprintf(defs, sizeof defs, "%s", t.defines);
        clattn__dtype_define(defs, sizeof defs, "XT", x->dtype);
        clattn__dtype_define(defs, sizeof defs, "YT", y->dtype);
        CHECK_ST(clattn__get_kernel(ctx, "softmax.cl", defs,
                                    gpu ? "masked_softmax_wg" : "masked_softmax_rows", &k));
        if (!gpu)
            break;
        /* tuning.c held WG to the device's maximum; the compiled kernel may allow less (llvmpipe:
         * 32), so halve it until it fits, as matmul does its tiles (WG stays a power of two) */
        CHECK_ST(clattn__kernel_group_size(ctx, k, "masked_softmax_wg", &kernel_wg));
        if ((size_t)WG <= kernel_wg || WG == 1)
            break;
        clattn__tune_set(&t, "WG", WG /= 2);
    }
    if (!gpu && y->dtype != CLATTN_FLOAT32)
        lws = 1; /* kernels/softmax.cl: the row kernel's private buffer (EB floats) per item */
    if (gpu) {
        lws = (size_t)WG;
        gws = (size_t)nrows * lws;
        CHECK_ST(check_loops(ctx, &t, K, WG));
    }
    CHECK_ST(clattn__set_args(ctx, k, "masked_softmax", ARG(x->buf), ARG(x_off), ARG(y->buf),
                              ARG(y_off), ARG(lse_buf), ARG(lse_off), ARG(nrows), ARG(K),
                              ARG(m->Q), ARG(m->D1), ARG(m->lens), ARG(m->lens_off),
                              ARG(m->lens_mode), ARG(m->mask), ARG(m->mask_off), ARG(m->ms),
                              ARG(m->win), ARG(m->fill), ARG(m->bias), ARG(m->bias_off),
                              ARG(m->bs), ARG(m->slopes), ARG(m->slopes_off), ARG(m->ss),
                              ARGS_END));
    CHECK_ST(clattn__launch(ctx, k, 1, &gws, lws ? &lws : NULL, "masked_softmax"));
fail:
    return st;
}
