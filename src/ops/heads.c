/* clattn_transpose_qkv / clattn_transpose_output: split hidden features into heads and back. */
#include "attention.h"
#include <stdio.h>

/* A move of 4- or 2-byte elements when the dtypes match, else each element converted. */
clattn_status clattn__enqueue_heads_typed(clattn_context *ctx, clattn_dtype xt, cl_mem src,
                                          size_t s_off, clattn_dtype yt, cl_mem dst, size_t d_off,
                                          int B, int T, int H, int dh, int to_heads)
{
    clattn_status st = CLATTN_SUCCESS;
    cl_kernel k;
    char defs[32] = "";
    int so = (int)s_off, dof = (int)d_off;
    if (xt != yt) { /* both, float32 too: XT being defined selects the converting move */
        clattn__define(defs, sizeof defs, "XT", (int)xt);
        clattn__define(defs, sizeof defs, "YT", (int)yt);
    } else if (clattn_dtype_size(xt) == 2) {
        snprintf(defs, sizeof defs, "-D ELEM=ushort ");
    }
    CHECK_ST(clattn__get_kernel(ctx, "heads.cl", defs, "transpose_heads", &k));
    CHECK_ST(clattn__set_args(ctx, k, "transpose_heads", ARG(src), ARG(so), ARG(dst), ARG(dof),
                              ARG(T), ARG(H), ARG(dh), ARG(to_heads), ARGS_END));
    size_t gws[3] = {(size_t)dh, (size_t)H, (size_t)B * T};
    CHECK_ST(clattn__launch(ctx, k, 3, gws, NULL, "transpose_heads"));
fail:
    return st;
}

clattn_status clattn__enqueue_heads(clattn_context *ctx, cl_mem src, size_t s_off, cl_mem dst,
                                    size_t d_off, int B, int T, int H, int dh, int to_heads)
{
    return clattn__enqueue_heads_typed(ctx, CLATTN_FLOAT32, src, s_off, CLATTN_FLOAT32, dst, d_off,
                                       B, T, H, dh, to_heads);
}

/* seq is (B, T, H*dh); heads is (B*H, T, dh) or (B, H, T, dh). */
static clattn_status check_pair(clattn_context *ctx, const clattn_tensor *seq, const char *seq_name,
                                const clattn_tensor *heads, const char *heads_name, int H)
{
    clattn_status st = CLATTN_SUCCESS;
    char s1[96], s2[96];
    CHECK(NULL, ctx, CLATTN_ERROR_INVALID_ARGUMENT, "ctx: NULL context");
    CHECK_ST(clattn__check_float_tensor(ctx, seq, seq_name, 3, 3));
    CHECK_ST(clattn__check_tensor(ctx, heads, heads_name, seq->dtype, 3, 4));
    size_t B = seq->dims[0], T = seq->dims[1], hid = seq->dims[2];
    CHECK(ctx, H > 0 && hid % (size_t)H == 0, CLATTN_ERROR_INVALID_ARGUMENT,
          "num_heads: %d does not divide the hidden size %zu of %s", H, hid, seq_name);
    size_t dh = hid / H;
    int ok = heads->ndim == 3 ? heads->dims[0] == B * H && heads->dims[1] == T && heads->dims[2] == dh
                              : heads->dims[0] == B && heads->dims[1] == (size_t)H &&
                                    heads->dims[2] == T && heads->dims[3] == dh;
    CHECK(ctx, ok, CLATTN_ERROR_SHAPE_MISMATCH,
          "%s: shape %s, expected (%zu, %zu, %zu) or (%zu, %d, %zu, %zu) for %s %s", heads_name,
          clattn__shape_str(heads, s1, sizeof s1), B * H, T, dh, B, H, T, dh, seq_name,
          clattn__shape_str(seq, s2, sizeof s2));
    CHECK(ctx, !clattn__overlaps(seq, heads), CLATTN_ERROR_INVALID_ARGUMENT,
          "out: overlaps x (a transpose cannot run in place)");
fail:
    return st;
}

/* Checks the pair and moves seq -> heads (to_heads) or heads -> seq. */
static clattn_status transpose(clattn_context *ctx, const clattn_tensor *seq, const char *seq_name,
                               const clattn_tensor *heads, const char *heads_name, int H,
                               int to_heads)
{
    clattn_status st = CLATTN_SUCCESS;
    CHECK_DRY_RUN(ctx, transpose(ctx, seq, seq_name, heads, heads_name, H, to_heads));
    CHECK_ST(check_pair(ctx, seq, seq_name, heads, heads_name, H));
    const clattn_tensor *src = to_heads ? seq : heads, *dst = to_heads ? heads : seq;
    CHECK_ST(clattn__enqueue_heads_typed(ctx, src->dtype, src->buf, src->offset, dst->dtype,
                                         dst->buf, dst->offset, (int)seq->dims[0],
                                         (int)seq->dims[1], H, (int)(seq->dims[2] / (size_t)H),
                                         to_heads));
fail:
    return st;
}

clattn_status clattn_transpose_qkv(clattn_context *ctx, const clattn_tensor *x, int num_heads,
                                   const clattn_tensor *out)
{
    return transpose(ctx, x, "x", out, "out", num_heads, 1);
}

clattn_status clattn_transpose_output(clattn_context *ctx, const clattn_tensor *x, int num_heads,
                                      const clattn_tensor *out)
{
    return transpose(ctx, out, "out", x, "x", num_heads, 0);
}
