/* clattn_masked_softmax_ce_loss and its backward: checks, CLATTN_SYNC's reads of device values,
 * and launches of kernels/loss.cl in the softmax variant's shape. */
#include "internal.h"
#include "mask.h"
#include <stdlib.h>
#include <string.h>

#define IGNORE_INDEX (-100) /* PyTorch's CrossEntropyLoss default, as kernels/loss.cl */

/* The shapes every loss call shares: logits (B, T, V), labels (B, T), valid_len (B) or NULL. */
static clattn_status check_inputs(clattn_context *ctx, const clattn_tensor *logits,
                                  const clattn_tensor *labels, const clattn_tensor *valid_len)
{
    clattn_status st = CLATTN_SUCCESS;
    char s1[96], s2[96];
    CHECK_ST(clattn__check_tensor(ctx, logits, "logits", CLATTN_FLOAT32, 3, 3));
    CHECK_ST(clattn__check_tensor(ctx, labels, "labels", CLATTN_INT32, 2, 2));
    CHECK(ctx, labels->dims[0] == logits->dims[0] && labels->dims[1] == logits->dims[1],
          CLATTN_ERROR_SHAPE_MISMATCH, "labels: shape %s, expected (B, T) of logits %s",
          clattn__shape_str(labels, s1, sizeof s1), clattn__shape_str(logits, s2, sizeof s2));
    if (valid_len) {
        CHECK_ST(clattn__check_tensor(ctx, valid_len, "valid_len", CLATTN_INT32, 1, 1));
        CHECK(ctx, valid_len->dims[0] == logits->dims[0], CLATTN_ERROR_SHAPE_MISMATCH,
              "valid_len: %zu elements, expected B = %zu", valid_len->dims[0], logits->dims[0]);
    }
fail:
    return st;
}

/* A float32 tensor of exactly the given shape, named in messages. */
static clattn_status check_shaped(clattn_context *ctx, const clattn_tensor *t, const char *name,
                                  int ndim, const size_t *dims, const char *expected)
{
    clattn_status st = CLATTN_SUCCESS;
    char s1[96];
    CHECK_ST(clattn__check_tensor(ctx, t, name, CLATTN_FLOAT32, ndim, ndim));
    CHECK(ctx, memcmp(t->dims, dims, sizeof(size_t) * (size_t)ndim) == 0,
          CLATTN_ERROR_SHAPE_MISMATCH, "%s: shape %s, expected %s", name,
          clattn__shape_str(t, s1, sizeof s1), expected);
fail:
    return st;
}

/* CLATTN_SYNC: the device values read back and checked, valid_len in [0, T] and every label -100
 * or in [0, V). */
static clattn_status check_device_values(clattn_context *ctx, const clattn_tensor *labels,
                                         const clattn_tensor *valid_len, int V)
{
    clattn_status st = CLATTN_SUCCESS;
    size_t n = clattn_tensor_numel(labels);
    int *host = NULL;
    if (valid_len)
        CHECK_ST(clattn__check_device_lens(ctx, valid_len, "valid_len", (int)labels->dims[1]));
    host = malloc(n * sizeof *host);
    CHECK(ctx, host, CLATTN_ERROR_OUT_OF_MEMORY, "out of host memory");
    CHECK_CL(ctx, clEnqueueReadBuffer(ctx->queue, labels->buf, CL_TRUE, labels->offset * 4, n * 4,
                                      host, 0, NULL, NULL), "reading labels (CLATTN_SYNC)");
    for (size_t i = 0; i < n; i++)
        CHECK(ctx, host[i] == IGNORE_INDEX || (host[i] >= 0 && host[i] < V),
              CLATTN_ERROR_INVALID_ARGUMENT,
              "labels[%zu] = %d is outside [0, %d) and not the ignore index -100", i, host[i], V);
fail:
    free(host);
    return st;
}

clattn_status clattn_masked_softmax_ce_loss(clattn_context *ctx, const clattn_tensor *logits,
                                            const clattn_tensor *labels,
                                            const clattn_tensor *valid_len,
                                            const clattn_tensor *loss, const clattn_tensor *lse)
{
    clattn_status st = CLATTN_SUCCESS;
    clattn_tuning t;
    cl_kernel k;
    cl_mem ce;
    int WG;
    CHECK_DRY_RUN(ctx, clattn_masked_softmax_ce_loss(ctx, logits, labels, valid_len, loss, lse));
    CHECK(NULL, ctx, CLATTN_ERROR_INVALID_ARGUMENT, "ctx: NULL context");
    CHECK_ST(check_inputs(ctx, logits, labels, valid_len));
    CHECK_ST(check_shaped(ctx, loss, "loss", 1, logits->dims, "(B) of the logits"));
    if (lse)
        CHECK_ST(check_shaped(ctx, lse, "lse", 2, logits->dims, "(B, T) of the logits"));
    const clattn_arg outs[2] = {{loss, "loss"}, {lse, "lse"}};
    const clattn_arg ins[3] = {{logits, "logits"}, {labels, "labels"}, {valid_len, "valid_len"}};
    CHECK_ST(clattn__check_no_overlap(ctx, outs, 2, ins, 3));
    int B = (int)logits->dims[0], T = (int)logits->dims[1], V = (int)logits->dims[2];
    int nrows = B * T, x_off = (int)logits->offset, lab_off = (int)labels->offset;
    int lens_off = valid_len ? (int)valid_len->offset : 0, lse_off = lse ? (int)lse->offset : 0;
    int loss_off = (int)loss->offset;
    cl_mem lens_buf = valid_len ? valid_len->buf : NULL, lse_buf = lse ? lse->buf : NULL;
    if (ctx->sync)
        CHECK_ST(check_device_values(ctx, labels, valid_len, V));
    CHECK_ST(clattn__scratch(ctx, CLATTN_SCRATCH_OP, (size_t)nrows * sizeof(float), &ce));
    CHECK_ST(clattn__tune(ctx, "softmax", &t));
    CHECK_ST(clattn__rows_kernel(ctx, &t, "loss.cl", "ce_loss", CLATTN_FLOAT32, CLATTN_FLOAT32,
                                 &k, &WG));
    CHECK_ST(clattn__set_args(ctx, k, "ce_loss", ARG(logits->buf), ARG(x_off), ARG(labels->buf),
                              ARG(lab_off), ARG(lens_buf), ARG(lens_off), ARG(nrows), ARG(T),
                              ARG(V), ARG(lse_buf), ARG(lse_off), ARG(ce), ARGS_END));
    CHECK_ST(clattn__launch_rows(ctx, &t, k, nrows, V, WG, 0, "ce_loss"));
    size_t one;
    CHECK_ST(clattn__loop_units(ctx, clattn__loop_budget(ctx, &t), 1, (long)T + 1, 1, &one,
                                "ce_loss: the mean over T = %d positions", T));
    CHECK_ST(clattn__get_kernel(ctx, "loss.cl", t.defines, "ce_loss_mean", &k));
    CHECK_ST(clattn__set_args(ctx, k, "ce_loss_mean", ARG(ce), ARG(B), ARG(T), ARG(loss->buf),
                              ARG(loss_off), ARGS_END));
    size_t gws = (size_t)B;
    CHECK_ST(clattn__launch(ctx, k, 1, &gws, NULL, "ce_loss_mean"));
fail:
    return st;
}

clattn_status clattn_masked_softmax_ce_loss_backward(clattn_context *ctx,
                                                     const clattn_tensor *logits,
                                                     const clattn_tensor *labels,
                                                     const clattn_tensor *valid_len,
                                                     const clattn_tensor *lse,
                                                     const clattn_tensor *dloss,
                                                     const clattn_tensor *dlogits)
{
    clattn_status st = CLATTN_SUCCESS;
    clattn_tuning t;
    cl_kernel k;
    int WG;
    CHECK_DRY_RUN(ctx, clattn_masked_softmax_ce_loss_backward(ctx, logits, labels, valid_len, lse,
                                                              dloss, dlogits));
    CHECK(NULL, ctx, CLATTN_ERROR_INVALID_ARGUMENT, "ctx: NULL context");
    CHECK_ST(check_inputs(ctx, logits, labels, valid_len));
    if (lse)
        CHECK_ST(check_shaped(ctx, lse, "lse", 2, logits->dims, "(B, T) of the logits"));
    CHECK_ST(check_shaped(ctx, dloss, "dloss", 1, logits->dims, "(B) of the logits"));
    CHECK_ST(check_shaped(ctx, dlogits, "dlogits", 3, logits->dims, "the logits' shape"));
    CHECK(ctx, clattn__same_view(dlogits, logits) || !clattn__overlaps(dlogits, logits),
          CLATTN_ERROR_INVALID_ARGUMENT,
          "dlogits: overlaps logits without being the same view (in place: the same buf and "
          "offset)");
    const clattn_arg outs[1] = {{dlogits, "dlogits"}};
    const clattn_arg ins[4] = {{labels, "labels"}, {valid_len, "valid_len"}, {lse, "lse"},
                               {dloss, "dloss"}};
    CHECK_ST(clattn__check_no_overlap(ctx, outs, 1, ins, 4));
    int T = (int)logits->dims[1], V = (int)logits->dims[2], nrows = (int)logits->dims[0] * T;
    int x_off = (int)logits->offset, lab_off = (int)labels->offset;
    int lens_off = valid_len ? (int)valid_len->offset : 0, lse_off = lse ? (int)lse->offset : 0;
    int dl_off = (int)dloss->offset, dx_off = (int)dlogits->offset;
    cl_mem lens_buf = valid_len ? valid_len->buf : NULL, lse_buf = lse ? lse->buf : NULL;
    if (ctx->sync)
        CHECK_ST(check_device_values(ctx, labels, valid_len, V));
    CHECK_ST(clattn__tune(ctx, "softmax", &t));
    CHECK_ST(clattn__rows_kernel(ctx, &t, "loss.cl", "ce_loss_backward", CLATTN_FLOAT32,
                                 CLATTN_FLOAT32, &k, &WG));
    CHECK_ST(clattn__set_args(ctx, k, "ce_loss_backward", ARG(logits->buf), ARG(x_off),
                              ARG(labels->buf), ARG(lab_off), ARG(lens_buf), ARG(lens_off),
                              ARG(nrows), ARG(T), ARG(V), ARG(lse_buf), ARG(lse_off),
                              ARG(dloss->buf), ARG(dl_off), ARG(dlogits->buf), ARG(dx_off),
                              ARGS_END));
    CHECK_ST(clattn__launch_rows(ctx, &t, k, nrows, V, WG, 0, "ce_loss_backward"));
fail:
    return st;
}
