/* Mask checks and resolution to kernel arguments (see clattn_mask in clattn.h). */
#include "mask.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Which of the kernels' (D0, D1, Q, K) slots each axis of a rank-r score tensor lands in. */
static const int slot_of[5][4] = {{0}, {3}, {2, 3}, {0, 2, 3}, {0, 1, 2, 3}};

/* The (D0, D1, Q, K) strides of a tensor broadcast to the first rank - skip axes of scores of rank
 * `rank` (skip 0: the whole shape; 2: the leading dims), 0 where it broadcasts. */
static clattn_status broadcast_strides(clattn_context *ctx, const clattn_tensor *mt,
                                       clattn_dtype dtype, int rank, int skip,
                                       const size_t *sdims, const char *name, cl_int4 *out)
{
    clattn_status st = CLATTN_SUCCESS;
    char shape[96];
    const char *to = skip ? "the scores' leading dims" : "the scores";
    int s[4] = {0, 0, 0, 0}, n = rank - skip;
    CHECK_ST(clattn__check_tensor(ctx, mt, name, dtype, 1, 4));
    CHECK(ctx, mt->ndim <= n, CLATTN_ERROR_SHAPE_MISMATCH,
          "%s: shape %s has more dims than %s (%d)", name,
          clattn__shape_str(mt, shape, sizeof shape), to, n);
    size_t stride = 1;
    for (int i = mt->ndim - 1; i >= 0; i--) {
        int axis = n - mt->ndim + i;
        size_t want = sdims[axis];
        CHECK(ctx, mt->dims[i] == 1 || mt->dims[i] == want, CLATTN_ERROR_SHAPE_MISMATCH,
              "%s: shape %s does not broadcast to %s: dim %d is %zu, expected 1 or %zu", name,
              clattn__shape_str(mt, shape, sizeof shape), to, i, mt->dims[i], want);
        s[slot_of[rank][axis]] = mt->dims[i] == 1 ? 0 : (int)stride;
        stride *= mt->dims[i];
    }
    for (int i = 0; i < 4; i++)
        out->s[i] = s[i];
fail:
    return st;
}

static clattn_status resolve_tensor_mask(clattn_context *ctx, const clattn_tensor *mt, int rank,
                                         const size_t *sdims, const char *name,
                                         clattn_mask_args *out)
{
    clattn_status st = CLATTN_SUCCESS;
    CHECK_ST(broadcast_strides(ctx, mt, CLATTN_INT32, rank, 0, sdims, name, &out->ms));
    out->mask = mt->buf;
    out->mask_off = (int)mt->offset;
fail:
    return st;
}

clattn_status clattn__resolve_bias(clattn_context *ctx, const clattn_tensor *bias, int rank,
                                   const size_t *sdims, const char *name, clattn_mask_args *o)
{
    clattn_status st = CLATTN_SUCCESS;
    CHECK_ST(broadcast_strides(ctx, bias, CLATTN_FLOAT32, rank, 0, sdims, name, &o->bs));
    o->bias = bias->buf;
    o->bias_off = (int)bias->offset;
fail:
    return st;
}

clattn_status clattn__resolve_slopes(clattn_context *ctx, const clattn_tensor *slopes, int rank,
                                     const size_t *sdims, const char *name, clattn_mask_args *o)
{
    clattn_status st = CLATTN_SUCCESS;
    cl_int4 s;
    CHECK(ctx, rank > 2, CLATTN_ERROR_SHAPE_MISMATCH,
          "%s: scores of rank %d have no leading (batch or head) dims to give slopes to", name,
          rank);
    CHECK_ST(broadcast_strides(ctx, slopes, CLATTN_FLOAT32, rank, 2, sdims, name, &s));
    o->slopes = slopes->buf;
    o->slopes_off = (int)slopes->offset;
    o->ss.s[0] = s.s[0];
    o->ss.s[1] = s.s[1];
fail:
    return st;
}

static clattn_status check_lens_shape(clattn_context *ctx, int ndim, const size_t *dims,
                                      const clattn_mask_args *o, const char *name)
{
    clattn_status st = CLATTN_SUCCESS;
    char second[32] = "";
    CHECK(ctx, ndim == 1 || ndim == 2, CLATTN_ERROR_SHAPE_MISMATCH,
          "%s: rank %d, expected 1 (B) or 2 (B, Q)", name, ndim);
    if (ndim == 2)
        snprintf(second, sizeof second, ", %zu", dims[1]);
    CHECK(ctx, dims[0] == (size_t)o->D0 && (ndim == 1 || dims[1] == (size_t)o->Q),
          CLATTN_ERROR_SHAPE_MISMATCH,
          "%s: shape (%zu%s), expected (%d) or (%d, %d) for these scores", name,
          dims[0], ndim == 2 ? second : "", o->D0, o->D0, o->Q);
fail:
    return st;
}

static clattn_status check_lens_values(clattn_context *ctx, const int *v, size_t n, int K,
                                       const char *name)
{
    clattn_status st = CLATTN_SUCCESS;
    for (size_t i = 0; i < n; i++)
        CHECK(ctx, v[i] >= 0 && v[i] <= K, CLATTN_ERROR_INVALID_ARGUMENT,
              "%s[%zu] = %d is outside [0, %d]", name, i, v[i], K); /* K, or a loss's T */
fail:
    return st;
}

static clattn_status resolve_device_lens(clattn_context *ctx, const clattn_tensor *t,
                                         const char *name, clattn_mask_args *o)
{
    clattn_status st = CLATTN_SUCCESS;
    CHECK_ST(clattn__check_tensor(ctx, t, name, CLATTN_INT32, 1, 2));
    CHECK_ST(check_lens_shape(ctx, t->ndim, t->dims, o, name));
    o->lens = t->buf;
    o->lens_off = (int)t->offset;
    o->lens_mode = t->ndim;
fail:
    return st;
}

/* Debug mode may block: reads the values the kernels would clamp and checks them. */
clattn_status clattn__check_device_lens(clattn_context *ctx, const clattn_tensor *t,
                                        const char *name, int K)
{
    clattn_status st = CLATTN_SUCCESS;
    size_t n = clattn_tensor_numel(t);
    int *host = malloc(n * sizeof *host);
    CHECK(ctx, host, CLATTN_ERROR_OUT_OF_MEMORY, "out of host memory");
    CHECK_CL(ctx, clEnqueueReadBuffer(ctx->queue, t->buf, CL_TRUE, t->offset * 4, n * 4, host, 0,
                                      NULL, NULL), "reading valid_lens (CLATTN_SYNC)");
    CHECK_ST(check_lens_values(ctx, host, n, K, name));
fail:
    free(host);
    return st;
}

static clattn_status resolve_host_lens(clattn_context *ctx, const clattn_mask *m, const char *name,
                                       clattn_mask_args *o)
{
    clattn_status st = CLATTN_SUCCESS;
    cl_int err;
    CHECK_ST(check_lens_shape(ctx, m->lens_ndim, m->lens_dims, o, name));
    size_t n = m->lens_dims[0] * (m->lens_ndim == 2 ? m->lens_dims[1] : 1);
    CHECK_ST(check_lens_values(ctx, m->valid_lens_host, n, o->K, name));
    /* A fresh buffer copies the values now, so the caller's array is free on return and the
     * queue is not waited on. */
    o->owned_lens = clCreateBuffer(ctx->cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, n * sizeof(int),
                                   (void *)m->valid_lens_host, &err);
    CHECK_CL(ctx, err, "clCreateBuffer(valid_lens)");
    o->lens = o->owned_lens;
    o->lens_off = 0;
    o->lens_mode = m->lens_ndim;
fail:
    return st;
}

/* Checks the mask's tensors and the fill, and points o at the tensors. */
static clattn_status resolve_parts(clattn_context *ctx, const clattn_mask *m, int rank,
                                   const size_t *sdims, const char *name, const char *lens_name,
                                   const char *mask_name, clattn_mask_args *o)
{
    clattn_status st = CLATTN_SUCCESS;
    /* -inf is PyTorch's usual masked_fill value; NaN or +inf would make every blocked row NaN. */
    CHECK(ctx, !isnan(m->fill) && m->fill != INFINITY, CLATTN_ERROR_INVALID_ARGUMENT,
          "%s.fill = %g: must be finite or -INFINITY", name, (double)m->fill);
    o->fill = m->fill != 0.0f ? m->fill : CLATTN_DEFAULT_FILL;
    CHECK(ctx, m->align == CLATTN_ALIGN_TOP_LEFT || m->align == CLATTN_ALIGN_BOTTOM_RIGHT,
          CLATTN_ERROR_INVALID_ARGUMENT, "%s.align = %d: must be CLATTN_ALIGN_TOP_LEFT (0) or "
          "CLATTN_ALIGN_BOTTOM_RIGHT (1)", name, m->align);
    CHECK(ctx, m->window == 0 || m->window == 1, CLATTN_ERROR_INVALID_ARGUMENT,
          "%s.window = %d: must be 0 (no sliding window) or 1", name, m->window);
    CHECK(ctx, m->causal == 0 || m->causal == 1, CLATTN_ERROR_INVALID_ARGUMENT,
          "%s.causal = %d: must be 0 or 1", name, m->causal);
    CHECK(ctx, m->valid_lens_host || m->lens_ndim == 0, CLATTN_ERROR_INVALID_ARGUMENT,
          "%s.lens_ndim = %d without valid_lens_host (a device valid_lens has its own shape)",
          name, m->lens_ndim);
    CHECK(ctx, !m->window || (m->window_left >= -1 && m->window_right >= -1),
          CLATTN_ERROR_INVALID_ARGUMENT, "%s.window_left = %d, window_right = %d: each must be "
          ">= 0, or -1 for unbounded", name, m->window_left, m->window_right);
    /* A side that blocks no key of any row is unbounded (-1): row q's diagonal is q + shift,
     * so the left side blocks nothing from Q - 1 + shift on, the right from K - 1 - shift on.
     * The kernels' row bounds q + shift - left and q + shift + right + 1 then stay within
     * (-Q, Q + K - 1), so no sum overflows however wide a side is given. */
    int64_t shift = m->align == CLATTN_ALIGN_BOTTOM_RIGHT ? (int64_t)o->K - o->Q : 0;
    int left = m->window ? m->window_left : -1, right = m->window ? m->window_right : -1;
    o->win.s[0] = (int)shift;
    o->win.s[1] = left >= (int64_t)o->Q - 1 + shift ? -1 : left;
    o->win.s[2] = m->causal ? 0 : right >= (int64_t)o->K - 1 - shift ? -1 : right;
    CHECK(ctx, !(m->valid_lens && m->valid_lens_host), CLATTN_ERROR_INVALID_ARGUMENT,
          "%s: give valid_lens or valid_lens_host, not both", name);
    if (m->valid_lens)
        CHECK_ST(resolve_device_lens(ctx, m->valid_lens, lens_name, o));
    if (m->mask)
        CHECK_ST(resolve_tensor_mask(ctx, m->mask, rank, sdims, mask_name, o));
fail:
    return st;
}

clattn_status clattn__resolve_mask_dims(clattn_context *ctx, const clattn_mask *m, int rank,
                                        const size_t *sdims, const char *name,
                                        const clattn_arg *outs, int nouts, clattn_mask_args *o)
{
    clattn_status st = CLATTN_SUCCESS;
    size_t d4[4] = {1, 1, 1, 1};
    char lens_name[96], mask_name[96];
    memset(o, 0, sizeof *o);
    for (int i = 0; i < rank; i++)
        d4[slot_of[rank][i]] = sdims[i];
    o->D0 = (int)d4[0];
    o->D1 = (int)d4[1];
    o->Q = (int)d4[2];
    o->K = (int)d4[3];
    o->fill = CLATTN_DEFAULT_FILL;
    o->win.s[1] = o->win.s[2] = -1; /* no window */
    if (!m)
        return CLATTN_SUCCESS;
    snprintf(lens_name, sizeof lens_name, "%s.valid_lens", name);
    snprintf(mask_name, sizeof mask_name, "%s.mask", name);
    CHECK_ST(resolve_parts(ctx, m, rank, sdims, name, lens_name, mask_name, o));
    const clattn_arg ins[2] = {{m->valid_lens, lens_name}, {m->mask, mask_name}};
    CHECK_ST(clattn__check_no_overlap(ctx, outs, nouts, ins, 2));
    if (m->valid_lens && ctx->sync)
        CHECK_ST(clattn__check_device_lens(ctx, m->valid_lens, lens_name, o->K));
    if (m->valid_lens_host) /* last: nothing to release when an earlier check fails */
        CHECK_ST(resolve_host_lens(ctx, m, lens_name, o));
fail:
    return st;
}

clattn_status clattn__resolve_mask(clattn_context *ctx, const clattn_mask *m,
                                   const clattn_tensor *scores, const char *name,
                                   const clattn_arg *outs, int nouts, clattn_mask_args *o)
{
    return clattn__resolve_mask_dims(ctx, m, scores->ndim, scores->dims, name, outs, nouts, o);
}

int clattn__mask_limits_rows(const clattn_mask_args *m)
{
    return m->lens_mode != 0 || m->win.s[2] >= 0;
}

int clattn__mask_has_left(const clattn_mask_args *m)
{
    return m->win.s[1] >= 0;
}

void clattn__mask_release(clattn_mask_args *m)
{
    if (m->owned_lens)
        clReleaseMemObject(m->owned_lens);
    m->owned_lens = NULL;
}
