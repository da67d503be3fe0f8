/* clattn_multihead_attention: d2l's MultiHeadAttention as one chain of enqueued kernels. */
#include "attention.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* W (rows, x's last dim) and its optional bias (rows); *rows == 0 takes W's rows. */
static clattn_status check_linear(clattn_context *ctx, const clattn_tensor *W, const char *wname,
                                  const clattn_tensor *b, const char *bname, size_t in,
                                  const char *xname, size_t *rows)
{
    clattn_status st = CLATTN_SUCCESS;
    char s1[96];
    CHECK_ST(clattn__check_float_tensor(ctx, W, wname, 2, 2));
    char want[32] = "out";
    if (*rows)
        snprintf(want, sizeof want, "%zu", *rows);
    CHECK(ctx, W->dims[1] == in && (*rows == 0 || W->dims[0] == *rows), CLATTN_ERROR_SHAPE_MISMATCH,
          "%s: shape %s, expected (%s, %zu) for %s", wname, clattn__shape_str(W, s1, sizeof s1),
          want, in, xname);
    *rows = W->dims[0];
    if (b) {
        CHECK_ST(clattn__check_float_tensor(ctx, b, bname, 1, 1));
        CHECK(ctx, b->dims[0] == *rows, CLATTN_ERROR_SHAPE_MISMATCH,
              "%s: %zu elements, expected %zu", bname, b->dims[0], *rows);
    }
fail:
    return st;
}

/* The number of K/V heads: w->num_kv_heads, 0 meaning num_heads. */
static int kv_heads(const clattn_mha_weights *w)
{
    return w->num_kv_heads ? w->num_kv_heads : w->num_heads;
}

#define MHA_NINS 11
/* Every input of the op, for the overlap checks. */
static void mha_inputs(const clattn_tensor *q, const clattn_tensor *k, const clattn_tensor *v,
                       const clattn_mha_weights *w, clattn_arg ins[MHA_NINS])
{
    const clattn_arg all[MHA_NINS] = {{q, "queries"}, {k, "keys"},   {v, "values"},
                                      {w->W_q, "w.W_q"}, {w->W_k, "w.W_k"}, {w->W_v, "w.W_v"},
                                      {w->W_o, "w.W_o"}, {w->b_q, "w.b_q"}, {w->b_k, "w.b_k"},
                                      {w->b_v, "w.b_v"}, {w->b_o, "w.b_o"}};
    memcpy(ins, all, sizeof all);
}

/* hid: W_q's rows (num_heads x dh); kvhid: W_k's and W_v's (num_kv_heads x dh). */
static clattn_status check_mha(clattn_context *ctx, const clattn_tensor *q, const clattn_tensor *k,
                               const clattn_tensor *v, const clattn_mha_weights *w,
                               const clattn_tensor *out, const clattn_tensor *weights, size_t *hid,
                               size_t *kvhid)
{
    clattn_status st = CLATTN_SUCCESS;
    char s1[96];
    size_t os = 0;
    CHECK_ST(clattn__check_module_inputs(ctx, q, k, v, out));
    size_t B = q->dims[0], nq = q->dims[1], nk = k->dims[1];
    CHECK(ctx, w, CLATTN_ERROR_INVALID_ARGUMENT, "w: NULL weights");
    *hid = 0;
    CHECK_ST(check_linear(ctx, w->W_q, "w.W_q", w->b_q, "w.b_q", q->dims[2], "queries", hid));
    CHECK(ctx, w->num_heads > 0 && *hid % (size_t)w->num_heads == 0, CLATTN_ERROR_INVALID_ARGUMENT,
          "w.num_heads: %d does not divide num_hiddens %zu", w->num_heads, *hid);
    CHECK(ctx, w->num_kv_heads >= 0 && w->num_kv_heads <= w->num_heads &&
                   w->num_heads % kv_heads(w) == 0,
          CLATTN_ERROR_INVALID_ARGUMENT,
          "w.num_kv_heads: %d does not divide num_heads %d (0 means num_heads)", w->num_kv_heads,
          w->num_heads);
    *kvhid = *hid / (size_t)w->num_heads * (size_t)kv_heads(w);
    CHECK_ST(check_linear(ctx, w->W_k, "w.W_k", w->b_k, "w.b_k", k->dims[2], "keys", kvhid));
    CHECK_ST(check_linear(ctx, w->W_v, "w.W_v", w->b_v, "w.b_v", v->dims[2], "values", kvhid));
    CHECK_ST(check_linear(ctx, w->W_o, "w.W_o", w->b_o, "w.b_o", *hid, "the heads", &os));
    CHECK(ctx, out->dims[0] == B && out->dims[1] == nq && out->dims[2] == os,
          CLATTN_ERROR_SHAPE_MISMATCH, "out: shape %s, expected (%zu, %zu, %zu)",
          clattn__shape_str(out, s1, sizeof s1), B, nq, os);
    if (weights) {
        size_t H = (size_t)w->num_heads;
        CHECK_ST(clattn__check_float_tensor(ctx, weights, "weights", 4, 4));
        CHECK(ctx, weights->dims[0] == B && weights->dims[1] == H && weights->dims[2] == nq &&
                       weights->dims[3] == nk,
              CLATTN_ERROR_SHAPE_MISMATCH, "weights: shape %s, expected (%zu, %zu, %zu, %zu)",
              clattn__shape_str(weights, s1, sizeof s1), B, H, nq, nk);
    }
    const clattn_arg outs[2] = {{out, "out"}, {weights, "weights"}};
    clattn_arg ins[MHA_NINS];
    mha_inputs(q, k, v, w, ins);
    CHECK_ST(clattn__check_no_overlap(ctx, outs, 2, ins, MHA_NINS));
fail:
    return st;
}

/* Scratch layout, in elements: projections (B, T, hid), keys and values (B, T, kvhid); for the
 * unfused path also the heads (B, H, T, dh) and (B, Hkv, T, dh), whose concatenated output reuses
 * the projected queries' space once they have been split. The fused path reads the projections
 * in place and writes the concatenation after them. */
typedef struct {
    size_t qp, kp, vp, qh, kh, vh, oh, total;
} mha_layout;

static mha_layout layout(size_t B, size_t nq, size_t nk, size_t hid, size_t kvhid, int fused)
{
    mha_layout l;
    size_t q = B * nq * hid, k = B * nk * kvhid;
    l.qp = 0;
    l.kp = l.qp + q;
    l.vp = l.kp + k;
    l.qh = l.vp + k; /* fused: the concatenated heads */
    l.kh = l.qh + q;
    l.vh = l.kh + k;
    l.oh = l.vh + k;
    l.total = fused ? l.kh : l.oh + q;
    return l;
}

/* The heads as views into the projections, no transposes, no copies: head h of a (B, T, hid)
 * projection is the fused kernel's batch (b, h) of (T, dh) rows hid apart; K/V head h / G of the
 * (B, T, kvhid) ones serves query head h. */
static clattn_status heads_fused(clattn_context *ctx, const clattn_tuning *att, cl_mem buf,
                                 const mha_layout *l, size_t nq, size_t nk, size_t hid,
                                 size_t kvhid, size_t dh, const clattn_mask_args *m,
                                 const clattn_dropout_params *drop, float scale,
                                 const clattn_tensor *lse)
{
    const clattn_dtype f32 = CLATTN_FLOAT32; /* the projections */
    clattn_flash_operand q = clattn__flash_strided(buf, f32, l->qp, nq * hid, dh, hid);
    clattn_flash_operand k = clattn__flash_strided(buf, f32, l->kp, nk * kvhid, dh, kvhid);
    clattn_flash_operand v = clattn__flash_strided(buf, f32, l->vp, nk * kvhid, dh, kvhid);
    clattn_flash_operand o = clattn__flash_strided(buf, f32, l->qh, nq * hid, dh, hid);
    clattn_flash_lse fl;
    return clattn__enqueue_flash(ctx, att, &q, &k, &v, &o, (int)(hid / kvhid), (int)dh, (int)dh,
                                 m, drop, scale, clattn__flash_lse(lse, &fl));
}

/* d2l's transpose_qkv, attention and transpose_output through scratch; the concatenation lands
 * in the projected queries' space. */
static clattn_status heads_unfused(clattn_context *ctx, cl_mem buf, const mha_layout *l, size_t B,
                                   size_t H, size_t Hkv, size_t nq, size_t nk, size_t dh,
                                   const clattn_mask_args *m, const clattn_dropout_params *drop,
                                   float scale, const clattn_tensor *weights,
                                   const clattn_tensor *lse)
{
    clattn_status st = CLATTN_SUCCESS;
    clattn_tensor qh = clattn_view(buf, CLATTN_FLOAT32, l->qh, 4, (size_t[]){B, H, nq, dh});
    clattn_tensor kh = clattn_view(buf, CLATTN_FLOAT32, l->kh, 4, (size_t[]){B, Hkv, nk, dh});
    clattn_tensor vh = clattn_view(buf, CLATTN_FLOAT32, l->vh, 4, (size_t[]){B, Hkv, nk, dh});
    clattn_tensor oh = clattn_view(buf, CLATTN_FLOAT32, l->oh, 4, (size_t[]){B, H, nq, dh});
    int b = (int)B, h = (int)H, hkv = (int)Hkv, d = (int)dh;
    CHECK_ST(clattn__enqueue_heads(ctx, buf, l->qp, buf, l->qh, b, (int)nq, h, d, 1));
    CHECK_ST(clattn__enqueue_heads(ctx, buf, l->kp, buf, l->kh, b, (int)nk, hkv, d, 1));
    CHECK_ST(clattn__enqueue_heads(ctx, buf, l->vp, buf, l->vh, b, (int)nk, hkv, d, 1));
    CHECK_ST(clattn__attention_core(ctx, &qh, &kh, &vh, m, drop, scale, &oh, weights, lse));
    CHECK_ST(clattn__enqueue_heads(ctx, buf, l->oh, buf, l->qp, b, (int)nq, h, d, 0));
fail:
    return st;
}

clattn_status clattn_multihead_attention(clattn_context *ctx, const clattn_tensor *queries,
                                         const clattn_tensor *keys, const clattn_tensor *values,
                                         const clattn_mha_weights *w,
                                         const clattn_attention_opts *opts,
                                         const clattn_tensor *out, const clattn_tensor *weights)
{
    clattn_status st = CLATTN_SUCCESS;
    clattn_mask_args m = {0};
    clattn_tuning att;
    cl_mem buf;
    size_t hid, kvhid;
    CHECK_DRY_RUN(ctx,
                  clattn_multihead_attention(ctx, queries, keys, values, w, opts, out, weights));
    CHECK(NULL, ctx, CLATTN_ERROR_INVALID_ARGUMENT, "ctx: NULL context");
    CHECK_ST(check_mha(ctx, queries, keys, values, w, out, weights, &hid, &kvhid));
    size_t B = queries->dims[0], nq = queries->dims[1], nk = keys->dims[1];
    size_t H = (size_t)w->num_heads, dh = hid / H, Hkv = (size_t)kv_heads(w);
    float scale = (float)(1.0 / sqrt((double)dh));
    size_t sdims[4] = {B, H, nq, nk};
    const clattn_dropout_params *drop;
    const clattn_tensor *lse;
    const clattn_arg outs[2] = {{out, "out"}, {weights, "weights"}};
    clattn_arg ins[MHA_NINS];
    mha_inputs(queries, keys, values, w, ins);
    CHECK_ST(clattn__resolve_opts(ctx, opts, 4, sdims, ins, MHA_NINS, outs, 2, &m, &drop, &lse));
    CHECK_ST(clattn__tune(ctx, "attention", &att));
    int fused = !weights && clattn__flash_supports(&att, dh, dh);
    mha_layout l = layout(B, nq, nk, hid, kvhid, fused);
    CHECK(ctx, l.total <= (size_t)INT32_MAX, CLATTN_ERROR_UNSUPPORTED,
          "multihead_attention: %zu elements of projections and heads exceed 32-bit indexing",
          l.total);
    CHECK_ST(clattn__scratch(ctx, CLATTN_SCRATCH_MODULE, l.total * 4, &buf));
    clattn_tensor qp = clattn_view(buf, CLATTN_FLOAT32, l.qp, 3, (size_t[]){B, nq, hid});
    clattn_tensor kp = clattn_view(buf, CLATTN_FLOAT32, l.kp, 3, (size_t[]){B, nk, kvhid});
    clattn_tensor vp = clattn_view(buf, CLATTN_FLOAT32, l.vp, 3, (size_t[]){B, nk, kvhid});
    CHECK_ST(clattn__enqueue_matmul(ctx, queries, 0, w->W_q, 1, 1.0f, 0.0f, w->b_q, &qp));
    CHECK_ST(clattn__enqueue_matmul(ctx, keys, 0, w->W_k, 1, 1.0f, 0.0f, w->b_k, &kp));
    CHECK_ST(clattn__enqueue_matmul(ctx, values, 0, w->W_v, 1, 1.0f, 0.0f, w->b_v, &vp));
    if (fused)
        CHECK_ST(heads_fused(ctx, &att, buf, &l, nq, nk, hid, kvhid, dh, &m, drop, scale, lse));
    else
        CHECK_ST(heads_unfused(ctx, buf, &l, B, H, Hkv, nq, nk, dh, &m, drop, scale, weights,
                               lse));
    clattn_tensor concat = clattn_view(buf, CLATTN_FLOAT32, fused ? l.qh : l.qp, 3,
                                       (size_t[]){B, nq, hid});
    CHECK_ST(clattn__enqueue_matmul(ctx, &concat, 0, w->W_o, 1, 1.0f, 0.0f, w->b_o, out));
fail:
    clattn__mask_release(&m);
    return st;
}
