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

/* t's shape, or a shape mismatch naming t and what it should match. */
static clattn_status check_same_shape(clattn_context *ctx, const clattn_tensor *t,
                                      const char *name, const clattn_tensor *ref,
                                      const char *ref_name)
{
    clattn_status st = CLATTN_SUCCESS;
    char s1[96], s2[96];
    CHECK(ctx, t->ndim == ref->ndim &&
                   memcmp(t->dims, ref->dims, sizeof(size_t) * (size_t)t->ndim) == 0,
          CLATTN_ERROR_SHAPE_MISMATCH, "%s: shape %s, expected %s's shape %s", name,
          clattn__shape_str(t, s1, sizeof s1), ref_name, clattn__shape_str(ref, s2, sizeof s2));
fail:
    return st;
}

clattn_status clattn_masked_softmax_backward(clattn_context *ctx, const clattn_tensor *out,
                                             const clattn_tensor *dout, const clattn_mask *mask,
                                             const clattn_tensor *dscores)
{
    clattn_status st = CLATTN_SUCCESS;
    clattn_mask_args m = {0};
    clattn_tuning tune;
    CHECK_DRY_RUN(ctx, clattn_masked_softmax_backward(ctx, out, dout, mask, dscores));
    CHECK(NULL, ctx, CLATTN_ERROR_INVALID_ARGUMENT, "ctx: NULL context");
    CHECK_ST(clattn__check_tensor(ctx, out, "out", CLATTN_FLOAT32, 1, 4));
    CHECK_ST(clattn__check_tensor(ctx, dout, "dout", CLATTN_FLOAT32, 1, 4));
    CHECK_ST(clattn__check_tensor(ctx, dscores, "dscores", CLATTN_FLOAT32, 1, 4));
    CHECK_ST(check_same_shape(ctx, dout, "dout", out, "out"));
    CHECK_ST(check_same_shape(ctx, dscores, "dscores", out, "out"));
    CHECK(ctx, clattn__same_view(dscores, dout) || !clattn__overlaps(dscores, dout),
          CLATTN_ERROR_INVALID_ARGUMENT,
          "dscores: overlaps dout without being the same view (in place: the same buf and "
          "offset)");
    const clattn_arg outs[1] = {{dscores, "dscores"}}, ins[1] = {{out, "out"}};
    CHECK_ST(clattn__check_no_overlap(ctx, outs, 1, ins, 1));
    CHECK_ST(clattn__resolve_mask(ctx, mask, out, "mask", outs, 1, &m));
    CHECK_ST(clattn__tune(ctx, "softmax", &tune));
    CHECK_ST(clattn__enqueue_softmax_backward(ctx, &tune, out, dout, &m, dscores));
fail:
    clattn__mask_release(&m);
    return st;
}

/* Loop iterations of one masked_softmax_wg work-item (kernels/softmax.cl) for rows of K keys,
 * counted as clattn__loop_budget asks: three strided passes, the sum's in blocks of SUM_BLOCK of
 * the item's keys (an outer iteration and an inner exit each), and two tree reductions. */
#define SUM_BLOCK 256 /* kernels/softmax.cl's */
static long wg_loops(int K, int WG)
{
    long n = ((long)K + WG - 1) / WG; /* K may be near INT_MAX */
    long passes = 3 * (n + 1) + 2 * (n / SUM_BLOCK + 1), steps = 1;
    for (int w = WG; w > 1; w /= 2)
        steps++;
    return passes + 2 * steps + 4;
}

long clattn__softmax_gpu_min_loops(const clattn_tuning *t)
{
    return wg_loops(1, clattn__tune_int(t, "WG", 128));
}

/* The rows are not split over launches: a row whose passes exceed the loop budget is refused, and
 * so is one whose items' strided int indices (k += WG, k < K) could pass INT_MAX. */
static clattn_status check_loops(clattn_context *ctx, const clattn_tuning *t, int K, int WG,
                                 const char *what)
{
    clattn_status st = CLATTN_SUCCESS;
    size_t one;
    CHECK(ctx, K <= INT32_MAX - WG, CLATTN_ERROR_UNSUPPORTED,
          "%s: a row of %d elements with WG=%d items striding over it passes 32-bit indexing; "
          "at most %d (or the cpu variant)", what, K, WG, INT32_MAX - WG);
    st = clattn__loop_units(ctx, clattn__loop_budget(ctx, t), 0, wg_loops(K, WG), 1, &one,
                            "masked_softmax: a row of %d keys (softmax=gpu, WG=%d)", K, WG);
fail:
    return st;
}

clattn_status clattn__rows_kernel(clattn_context *ctx, clattn_tuning *t, const char *file,
                                 const char *name, clattn_dtype xt, clattn_dtype yt, cl_kernel *k,
                                 int *WG)
{
    clattn_status st = CLATTN_SUCCESS;
    char defs[sizeof t->defines + 32], kname[48];
    int gpu = strcmp(t->variant, "gpu") == 0;
    size_t kernel_wg = 0;
    snprintf(kname, sizeof kname, "%s_%s", name, gpu ? "wg" : "rows");
    *WG = clattn__tune_int(t, "WG", 128);
    for (;;) {
        snprintf(defs, sizeof defs, "%s", t->defines);
        clattn__dtype_define(defs, sizeof defs, "XT", xt);
        clattn__dtype_define(defs, sizeof defs, "YT", yt);
        CHECK_ST(clattn__get_kernel(ctx, file, defs, kname, k));
        if (!gpu)
            break;
        /* tuning.c held WG to the device's maximum; the compiled kernel may allow less (llvmpipe:
         * 32), so halve it until it fits, as matmul does its tiles (WG stays a power of two) */
        CHECK_ST(clattn__kernel_group_size(ctx, *k, kname, &kernel_wg));
        if ((size_t)*WG <= kernel_wg || *WG == 1)
            break;
        clattn__tune_set(t, "WG", *WG /= 2);
    }
fail:
    return st;
}

/* Sets the mask arguments, which every softmax kernel takes after its own first 8. */
static clattn_status set_mask_args(clattn_context *ctx, cl_kernel k, const char *what,
                                   const clattn_mask_args *m)
{
    return clattn__set_args_at(ctx, k, what, 8, ARG(m->Q), ARG(m->D1), ARG(m->lens),
                               ARG(m->lens_off), ARG(m->lens_mode), ARG(m->mask),
                               ARG(m->mask_off), ARG(m->ms), ARG(m->win), ARG(m->fill),
                               ARG(m->bias), ARG(m->bias_off), ARG(m->bs), ARG(m->slopes),
                               ARG(m->slopes_off), ARG(m->ss), ARGS_END);
}

clattn_status clattn__launch_rows(clattn_context *ctx, const clattn_tuning *t, cl_kernel k,
                                 int nrows, int K, int WG, size_t lws, const char *what)
{
    clattn_status st = CLATTN_SUCCESS;
    size_t gws = (size_t)nrows;
    if (strcmp(t->variant, "gpu") == 0) {
        CHECK_ST(check_loops(ctx, t, K, WG, what));
        lws = (size_t)WG;
        gws = (size_t)nrows * lws;
    }
    CHECK_ST(clattn__launch(ctx, k, 1, &gws, lws ? &lws : NULL, what));
fail:
    return st;
}

clattn_status clattn__enqueue_softmax(clattn_context *ctx, const clattn_tuning *tune,
                                      const clattn_tensor *x, const clattn_mask_args *m,
                                      const clattn_tensor *y, const clattn_tensor *lse)
{
    clattn_status st = CLATTN_SUCCESS;
    cl_kernel k;
    clattn_tuning t = *tune;
    int nrows = (int)(clattn_tensor_numel(x) / m->K), K = m->K, WG;
    int x_off = (int)x->offset, y_off = (int)y->offset;
    cl_mem lse_buf = lse ? lse->buf : NULL;
    int lse_off = lse ? (int)lse->offset : 0;
    size_t VW = (size_t)clattn__tune_int(&t, "VW", 8);
    /* every row of x and y on a vector of VW (kernels/softmax.cl's ALIGNV) */
    if (strcmp(t.variant, "cpu") == 0 && K % (int)VW == 0 && clattn__vec_aligned(ctx, x, VW) &&
        clattn__vec_aligned(ctx, y, VW))
        clattn__define(t.defines, sizeof t.defines, "ALIGNV", 1);
    CHECK_ST(clattn__rows_kernel(ctx, &t, "softmax.cl", "masked_softmax", x->dtype, y->dtype, &k,
                                 &WG));
    CHECK_ST(clattn__set_args(ctx, k, "masked_softmax", ARG(x->buf), ARG(x_off), ARG(y->buf),
                              ARG(y_off), ARG(lse_buf), ARG(lse_off), ARG(nrows), ARG(K),
                              ARGS_END));
    CHECK_ST(set_mask_args(ctx, k, "masked_softmax", m));
    /* kernels/softmax.cl: a 16-bit output's private buffer (EB floats) per item */
    CHECK_ST(clattn__launch_rows(ctx, &t, k, nrows, K, WG, y->dtype != CLATTN_FLOAT32 ? 1 : 0,
                                 "masked_softmax"));
fail:
    return st;
}

clattn_status clattn__enqueue_softmax_backward(clattn_context *ctx, const clattn_tuning *tune,
                                               const clattn_tensor *y, const clattn_tensor *dy,
                                               const clattn_mask_args *m,
                                               const clattn_tensor *dx)
{
    clattn_status st = CLATTN_SUCCESS;
    cl_kernel k;
    clattn_tuning t = *tune;
    int nrows = (int)(clattn_tensor_numel(y) / m->K), K = m->K, WG;
    int y_off = (int)y->offset, dy_off = (int)dy->offset, dx_off = (int)dx->offset;
    const char *what = "masked_softmax_backward";
    CHECK_ST(clattn__rows_kernel(ctx, &t, "softmax.cl", what, CLATTN_FLOAT32, CLATTN_FLOAT32, &k,
                                 &WG));
    CHECK_ST(clattn__set_args(ctx, k, what, ARG(y->buf), ARG(y_off), ARG(dy->buf), ARG(dy_off),
                              ARG(dx->buf), ARG(dx_off), ARG(nrows), ARG(K), ARGS_END));
    CHECK_ST(set_mask_args(ctx, k, what, m));
    CHECK_ST(clattn__launch_rows(ctx, &t, k, nrows, K, WG, 0, what));
fail:
    return st;
}

clattn_status clattn__enqueue_bias_grad(clattn_context *ctx, const clattn_tuning *tune,
                                        const clattn_tensor *dx, const clattn_mask_args *m,
                                        const clattn_tensor *db)
{
    clattn_status st = CLATTN_SUCCESS;
    cl_kernel k;
    const int D[4] = {m->D0, m->D1, m->Q, m->K};
    size_t R = 1, chunk;
    for (int j = 0; j < 4; j++)
        R *= m->bs.s[j] == 0 ? (size_t)D[j] : 1;
    cl_int4 D4 = {{D[0], D[1], D[2], D[3]}};
    int dx_off = (int)dx->offset, db_off = (int)db->offset, nb = (int)clattn_tensor_numel(db);
    size_t gws = (size_t)nb;
    CHECK_ST(clattn__loop_units(ctx, clattn__loop_budget(ctx, tune), 2, 1, R, &chunk,
                                "the bias gradient's sum over its broadcast dims"));
    CHECK_ST(clattn__get_kernel(ctx, "softmax.cl", tune->defines, "bias_grad", &k));
    for (size_t r0 = 0; r0 < R; r0 += chunk) {
        int lo = (int)r0, hi = (int)(R - r0 < chunk ? R : r0 + chunk), acc = r0 > 0;
        CHECK_ST(clattn__set_args(ctx, k, "bias_grad", ARG(dx->buf), ARG(dx_off), ARG(D4),
                                  ARG(m->bs), ARG(db->buf), ARG(db_off), ARG(nb), ARG(lo), ARG(hi),
                                  ARG(acc), ARGS_END));
        CHECK_ST(clattn__launch(ctx, k, 1, &gws, NULL, "bias_grad"));
    }
fail:
    return st;
}
