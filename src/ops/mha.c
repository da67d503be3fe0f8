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

/* opts.saved's layout, in elements from its offset: the projections (B, Q, hid), (B, K, kvhid)
 * twice, one after another as the forward's scratch holds them, the heads' concatenated output
 * (B, Q, hid) and the rows' LSE (B, H, Q). */
typedef struct {
    size_t qp, kp, vp, cat, lse, total;
} mha_saved_layout;

static mha_saved_layout saved_layout(size_t B, size_t nq, size_t nk, size_t H, size_t hid,
                                     size_t kvhid)
{
    mha_saved_layout l;
    l.qp = 0;
    l.kp = B * nq * hid;
    l.vp = l.kp + B * nk * kvhid;
    l.cat = l.vp + B * nk * kvhid;
    l.lse = l.cat + B * nq * hid;
    l.total = l.lse + B * H * nq;
    return l;
}

size_t clattn_mha_saved_numel(const clattn_tensor *queries, const clattn_tensor *keys,
                              const clattn_mha_weights *w)
{
    if (!queries || !keys || !w || !w->W_q || !w->W_k || queries->ndim != 3 || keys->ndim != 3 ||
        w->W_q->ndim != 2 || w->W_k->ndim != 2 || w->num_heads <= 0)
        return 0;
    return saved_layout(queries->dims[0], queries->dims[1], keys->dims[1],
                        (size_t)w->num_heads, w->W_q->dims[0], w->W_k->dims[0])
        .total;
}

/* opts.saved, when given: float32 of exactly the layout's elements, overlapping none of args */
static clattn_status check_saved(clattn_context *ctx, const clattn_tensor *saved,
                                 const mha_saved_layout *l, const clattn_arg *args, int nargs)
{
    clattn_status st = CLATTN_SUCCESS;
    CHECK_ST(clattn__check_tensor(ctx, saved, "opts.saved", CLATTN_FLOAT32, 1, 4));
    CHECK(ctx, clattn_tensor_numel(saved) == l->total, CLATTN_ERROR_SHAPE_MISMATCH,
          "opts.saved: %zu elements, expected %zu (clattn_mha_saved_numel)",
          clattn_tensor_numel(saved), l->total);
    const clattn_arg me[1] = {{saved, "opts.saved"}};
    CHECK_ST(clattn__check_no_overlap(ctx, me, 1, args, nargs));
fail:
    return st;
}

/* clattn__resolve_opts for multi-head attention and its backward, the only ops that take
 * opts.saved (*saved: it, or NULL): the shared resolution sees *o, a copy of opts without it,
 * which must outlive the call's use of *drop (it points into *o). */
static clattn_status resolve_mha_opts(clattn_context *ctx, const clattn_attention_opts *opts,
                                      clattn_attention_opts *o, const size_t *sdims,
                                      const clattn_arg *ins, int nins, const clattn_arg *outs,
                                      int nouts, clattn_mask_args *m,
                                      const clattn_dropout_params **drop,
                                      const clattn_tensor **lse, const clattn_tensor **saved)
{
    clattn_status st = CLATTN_SUCCESS;
    *saved = opts ? opts->saved : NULL;
    if (opts) {
        *o = *opts;
        o->saved = NULL;
    }
    CHECK_ST(clattn__check_no_scale(ctx, opts, "multi-head attention scales by 1/sqrt(head "
                                              "size), as d2l's"));
    CHECK_ST(clattn__resolve_opts(ctx, opts ? o : NULL, 4, sdims, ins, nins, outs, nouts, m, drop,
                                  lse));
fail:
    return st;
}

/* hid: W_q's rows (num_heads x dh); kvhid: W_k's and W_v's (num_kv_heads x dh). */
static clattn_status check_mha(clattn_context *ctx, const clattn_tensor *q, const clattn_tensor *k,
                               const clattn_tensor *v, const clattn_mha_weights *w,
                               const clattn_tensor *out, const char *out_name,
                               const clattn_tensor *weights, size_t *hid, size_t *kvhid)
{
    clattn_status st = CLATTN_SUCCESS;
    char s1[96];
    size_t os = 0;
    CHECK_ST(clattn__check_module_inputs(ctx, q, k, v, out, out_name));
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
          CLATTN_ERROR_SHAPE_MISMATCH, "%s: shape %s, expected (%zu, %zu, %zu)", out_name,
          clattn__shape_str(out, s1, sizeof s1), B, nq, os);
    if (weights) {
        size_t H = (size_t)w->num_heads;
        CHECK_ST(clattn__check_float_tensor(ctx, weights, "weights", 4, 4));
        CHECK(ctx, weights->dims[0] == B && weights->dims[1] == H && weights->dims[2] == nq &&
                       weights->dims[3] == nk,
              CLATTN_ERROR_SHAPE_MISMATCH, "weights: shape %s, expected (%zu, %zu, %zu, %zu)",
              clattn__shape_str(weights, s1, sizeof s1), B, H, nq, nk);
    }
fail:
    return st;
}

/* Scratch layout, in elements: projections (B, T, hid), keys and values (B, T, kvhid); for the
 * unfused path also the heads (B, H, T, dh) and (B, Hkv, T, dh), whose concatenated output reuses
 * the projected queries' space once they have been split. The fused path reads the projections
 * in place and writes the concatenation after them. saved: the projections and the
 * concatenation live in opts.saved, so the scratch holds the unfused path's heads only. */
typedef struct {
    size_t qp, kp, vp, qh, kh, vh, oh, total;
} mha_layout;

static mha_layout layout(size_t B, size_t nq, size_t nk, size_t hid, size_t kvhid, int fused,
                         int saved)
{
    mha_layout l;
    size_t q = B * nq * hid, k = B * nk * kvhid, pq = saved ? 0 : q, pk = saved ? 0 : k;
    l.qp = 0;
    l.kp = l.qp + pq;
    l.vp = l.kp + pk;
    l.qh = l.vp + pk; /* fused: the concatenated heads */
    l.kh = l.qh + q;
    l.vh = l.kh + k;
    l.oh = l.vh + k;
    l.total = fused ? (saved ? 0 : l.kh) : l.oh + q;
    return l;
}

/* Where the forward keeps the projections (B, T, hid), (B, T, kvhid) and the heads' concatenated
 * output (B, Q, hid), in elements of buf: the scratch, or opts.saved (then the backward finds
 * them there; written by the kernels themselves, no copies). */
typedef struct {
    cl_mem buf;
    size_t qp, kp, vp, cat;
} mha_place;

/* The heads as views into the projections, no transposes, no copies: head h of a (B, T, hid)
 * projection is the fused kernel's batch (b, h) of (T, dh) rows hid apart; K/V head h / G of the
 * (B, T, kvhid) ones serves query head h. */
static clattn_status heads_fused(clattn_context *ctx, const clattn_tuning *att, const mha_place *p,
                                 size_t nq, size_t nk, size_t hid, size_t kvhid, size_t dh,
                                 const clattn_mask_args *m, const clattn_dropout_params *drop,
                                 float scale, const clattn_tensor *lse)
{
    const clattn_dtype f32 = CLATTN_FLOAT32; /* the projections */
    clattn_flash_operand q = clattn__flash_strided(p->buf, f32, p->qp, nq * hid, dh, hid);
    clattn_flash_operand k = clattn__flash_strided(p->buf, f32, p->kp, nk * kvhid, dh, kvhid);
    clattn_flash_operand v = clattn__flash_strided(p->buf, f32, p->vp, nk * kvhid, dh, kvhid);
    clattn_flash_operand o = clattn__flash_strided(p->buf, f32, p->cat, nq * hid, dh, hid);
    clattn_flash_lse fl;
    return clattn__enqueue_flash(ctx, att, &q, &k, &v, &o, (int)(hid / kvhid), (int)dh, (int)dh,
                                 m, drop, scale, clattn__flash_lse(lse, &fl));
}

/* d2l's transpose_qkv, attention and transpose_output through the heads in scratch (buf, l),
 * from and to p. */
static clattn_status heads_unfused(clattn_context *ctx, cl_mem buf, const mha_layout *l,
                                   const mha_place *p, size_t B, size_t H, size_t Hkv, size_t nq,
                                   size_t nk, size_t dh, const clattn_mask_args *m,
                                   const clattn_dropout_params *drop, float scale,
                                   const clattn_tensor *weights, const clattn_tensor *lse)
{
    clattn_status st = CLATTN_SUCCESS;
    clattn_tensor qh = clattn_view(buf, CLATTN_FLOAT32, l->qh, 4, (size_t[]){B, H, nq, dh});
    clattn_tensor kh = clattn_view(buf, CLATTN_FLOAT32, l->kh, 4, (size_t[]){B, Hkv, nk, dh});
    clattn_tensor vh = clattn_view(buf, CLATTN_FLOAT32, l->vh, 4, (size_t[]){B, Hkv, nk, dh});
    clattn_tensor oh = clattn_view(buf, CLATTN_FLOAT32, l->oh, 4, (size_t[]){B, H, nq, dh});
    int b = (int)B, h = (int)H, hkv = (int)Hkv, d = (int)dh;
    CHECK_ST(clattn__enqueue_heads(ctx, p->buf, p->qp, buf, l->qh, b, (int)nq, h, d, 1));
    CHECK_ST(clattn__enqueue_heads(ctx, p->buf, p->kp, buf, l->kh, b, (int)nk, hkv, d, 1));
    CHECK_ST(clattn__enqueue_heads(ctx, p->buf, p->vp, buf, l->vh, b, (int)nk, hkv, d, 1));
    CHECK_ST(clattn__attention_core(ctx, &qh, &kh, &vh, m, drop, scale, &oh, weights, lse));
    CHECK_ST(clattn__enqueue_heads(ctx, buf, l->oh, p->buf, p->cat, b, (int)nq, h, d, 0));
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
    cl_mem buf = NULL;
    size_t hid, kvhid;
    CHECK_DRY_RUN(ctx,
                  clattn_multihead_attention(ctx, queries, keys, values, w, opts, out, weights));
    CHECK(NULL, ctx, CLATTN_ERROR_INVALID_ARGUMENT, "ctx: NULL context");
    CHECK_ST(check_mha(ctx, queries, keys, values, w, out, "out", weights, &hid, &kvhid));
    const clattn_arg outs[2] = {{out, "out"}, {weights, "weights"}};
    clattn_arg ins[MHA_NINS];
    mha_inputs(queries, keys, values, w, ins);
    CHECK_ST(clattn__check_no_overlap(ctx, outs, 2, ins, MHA_NINS));
    size_t B = queries->dims[0], nq = queries->dims[1], nk = keys->dims[1];
    size_t H = (size_t)w->num_heads, dh = hid / H, Hkv = (size_t)kv_heads(w);
    float scale = (float)(1.0 / sqrt((double)dh));
    size_t sdims[4] = {B, H, nq, nk};
    const clattn_dropout_params *drop;
    const clattn_tensor *lse, *saved;
    clattn_attention_opts o;
    CHECK_ST(resolve_mha_opts(ctx, opts, &o, sdims, ins, MHA_NINS, outs, 2, &m, &drop, &lse,
                              &saved));
    mha_saved_layout sl = saved_layout(B, nq, nk, H, hid, kvhid);
    clattn_tensor slse; /* with saved, the attention's LSE goes there (and then to opts.lse) */
    if (saved) { /* written while every other argument is read, or before out is written */
        clattn_arg all[MHA_NINS + 7];
        memcpy(all, ins, sizeof ins);
        all[MHA_NINS] = outs[0];
        all[MHA_NINS + 1] = outs[1];
        all[MHA_NINS + 2] = (clattn_arg){lse, "opts.lse"};
        all[MHA_NINS + 3] = (clattn_arg){opts->mask.valid_lens, "opts.mask.valid_lens"};
        all[MHA_NINS + 4] = (clattn_arg){opts->mask.mask, "opts.mask.mask"};
        all[MHA_NINS + 5] = (clattn_arg){opts->bias, "opts.bias"};
        all[MHA_NINS + 6] = (clattn_arg){opts->alibi_slopes, "opts.alibi_slopes"};
        CHECK_ST(check_saved(ctx, saved, &sl, all, MHA_NINS + 7));
        slse = clattn_view(saved->buf, CLATTN_FLOAT32, saved->offset + sl.lse, 3,
                           (size_t[]){B, H, nq});
    }
    const clattn_tensor *lse_to = saved ? &slse : lse;
    CHECK_ST(clattn__tune_bucket(ctx, "attention", clattn__head_bucket((size_t)dh, (size_t)dh), &att));
    int fused = !weights && clattn__flash_supports(&att, dh, dh);
    mha_layout l = layout(B, nq, nk, hid, kvhid, fused, saved != NULL);
    CHECK(ctx, l.total <= (size_t)INT32_MAX, CLATTN_ERROR_UNSUPPORTED,
          "multihead_attention: %zu elements of projections and heads exceed 32-bit indexing",
          l.total);
    if (l.total)
        CHECK_ST(clattn__scratch(ctx, CLATTN_SCRATCH_MODULE, l.total * 4, &buf));
    /* the projections and the concatenation in scratch (the unfused path's over the projected
     * queries once they have been split), or in opts.saved */
    mha_place p = {buf, l.qp, l.kp, l.vp, fused ? l.qh : l.qp};
    if (saved) {
        size_t o0 = saved->offset;
        p = (mha_place){saved->buf, o0 + sl.qp, o0 + sl.kp, o0 + sl.vp, o0 + sl.cat};
    }
    clattn_tensor qp = clattn_view(p.buf, CLATTN_FLOAT32, p.qp, 3, (size_t[]){B, nq, hid});
    clattn_tensor kp = clattn_view(p.buf, CLATTN_FLOAT32, p.kp, 3, (size_t[]){B, nk, kvhid});
    clattn_tensor vp = clattn_view(p.buf, CLATTN_FLOAT32, p.vp, 3, (size_t[]){B, nk, kvhid});
    CHECK_ST(clattn__enqueue_matmul(ctx, queries, 0, w->W_q, 1, 1.0f, 0.0f, w->b_q, &qp));
    CHECK_ST(clattn__enqueue_matmul(ctx, keys, 0, w->W_k, 1, 1.0f, 0.0f, w->b_k, &kp));
    CHECK_ST(clattn__enqueue_matmul(ctx, values, 0, w->W_v, 1, 1.0f, 0.0f, w->b_v, &vp));
    if (fused)
        CHECK_ST(heads_fused(ctx, &att, &p, nq, nk, hid, kvhid, dh, &m, drop, scale, lse_to));
    else
        CHECK_ST(heads_unfused(ctx, buf, &l, &p, B, H, Hkv, nq, nk, dh, &m, drop, scale, weights,
                               lse_to));
    clattn_tensor concat = clattn_view(p.buf, CLATTN_FLOAT32, p.cat, 3, (size_t[]){B, nq, hid});
    if (saved && lse) /* the caller's LSE too */
        CHECK_ST(clattn__copy(ctx, saved->buf, (saved->offset + sl.lse) * 4, lse->buf,
                              lse->offset * 4, (sl.total - sl.lse) * 4, "opts.lse"));
    CHECK_ST(clattn__enqueue_matmul(ctx, &concat, 0, w->W_o, 1, 1.0f, 0.0f, w->b_o, out));
fail:
    clattn__mask_release(&m);
    return st;
}

/* ---- backward ---- */

/* Every gradient, its input and names, for the checks. */
#define MHA_NGRADS 12
static void mha_grad_list(const clattn_tensor *q, const clattn_tensor *k, const clattn_tensor *v,
                          const clattn_mha_weights *w, const clattn_attention_opts *opts,
                          const clattn_mha_grads *g, const clattn_tensor *x[MHA_NGRADS],
                          clattn_arg d[MHA_NGRADS], const char *xn[MHA_NGRADS])
{
    const clattn_tensor *xs[MHA_NGRADS] = {q, k, v, w->W_q, w->W_k, w->W_v, w->W_o, w->b_q,
                                           w->b_k, w->b_v, w->b_o, opts ? opts->bias : NULL};
    const clattn_arg ds[MHA_NGRADS] = {
        {g->dqueries, "grads.dqueries"}, {g->dkeys, "grads.dkeys"}, {g->dvalues, "grads.dvalues"},
        {g->dW_q, "grads.dW_q"}, {g->dW_k, "grads.dW_k"}, {g->dW_v, "grads.dW_v"},
        {g->dW_o, "grads.dW_o"}, {g->db_q, "grads.db_q"}, {g->db_k, "grads.db_k"},
        {g->db_v, "grads.db_v"}, {g->db_o, "grads.db_o"}, {g->dbias, "grads.dbias"}};
    static const char *const names[MHA_NGRADS] = {"queries", "keys", "values", "w.W_q", "w.W_k",
                                                  "w.W_v", "w.W_o", "w.b_q", "w.b_k", "w.b_v",
                                                  "w.b_o", "opts.bias"};
    memcpy(x, xs, sizeof xs);
    memcpy(d, ds, sizeof ds);
    memcpy(xn, names, sizeof names);
}

/* Each gradient given: float32, its input's shape, and an input to be the gradient of. */
static clattn_status check_mha_grads(clattn_context *ctx, const clattn_tensor *const *x,
                                     const clattn_arg *d, const char *const *xn)
{
    clattn_status st = CLATTN_SUCCESS;
    for (int i = 0; i < MHA_NGRADS; i++)
        CHECK_ST(clattn__check_grad(ctx, d[i].t, d[i].name, x[i], xn[i]));
fail:
    return st;
}

/* Scratch layout of the backward, in elements: the projections' heads (B, H, T, dh) and
 * (B, Hkv, T, dh), the attention's output heads and their concatenation (B, nq, hid), then the
 * gradients of the concatenation, of the output heads, of the q/k/v heads and of the
 * projections, and the attention's row log-sum-exps (B, H, nq) for the fused backward. The
 * projections themselves go to the space of their gradients' heads first. */
typedef struct {
    size_t qh, kh, vh, oh, cat, dcat, doh, dqh, dkh, dvh, dqp, dkp, dvp, lse, total;
} mha_bwd_layout;

static mha_bwd_layout bwd_layout(size_t B, size_t nq, size_t nk, size_t H, size_t hid,
                                 size_t kvhid)
{
    mha_bwd_layout l;
    size_t q = B * nq * hid, k = B * nk * kvhid;
    l.qh = 0;
    l.kh = l.qh + q;
    l.vh = l.kh + k;
    l.oh = l.vh + k;
    l.cat = l.oh + q;
    l.dcat = l.cat + q;
    l.doh = l.dcat + q;
    l.dqh = l.doh + q;
    l.dkh = l.dqh + q;
    l.dvh = l.dkh + k;
    l.dqp = l.dvh + k;
    l.dkp = l.dqp + q;
    l.dvp = l.dkp + k;
    l.lse = l.dvp + k;
    l.total = l.lse + B * H * nq;
    return l;
}

/* The forward again, keeping what the backward needs: the heads of the projections (through the
 * space of the projections' gradients) and the concatenated attention output. */
static clattn_status mha_recompute(clattn_context *ctx, const clattn_tensor *q,
                                   const clattn_tensor *k, const clattn_tensor *v,
                                   const clattn_mha_weights *w, cl_mem buf,
                                   const mha_bwd_layout *l, size_t H, size_t Hkv, size_t dh,
                                   const clattn_mask_args *m, const clattn_dropout_params *drop,
                                   float scale)
{
    clattn_status st = CLATTN_SUCCESS;
    size_t B = q->dims[0], nq = q->dims[1], nk = k->dims[1], hid = H * dh, kvhid = Hkv * dh;
    clattn_tensor qp = clattn_view(buf, CLATTN_FLOAT32, l->dqp, 3, (size_t[]){B, nq, hid});
    clattn_tensor kp = clattn_view(buf, CLATTN_FLOAT32, l->dkp, 3, (size_t[]){B, nk, kvhid});
    clattn_tensor vp = clattn_view(buf, CLATTN_FLOAT32, l->dvp, 3, (size_t[]){B, nk, kvhid});
    clattn_tensor qh = clattn_view(buf, CLATTN_FLOAT32, l->qh, 4, (size_t[]){B, H, nq, dh});
    clattn_tensor kh = clattn_view(buf, CLATTN_FLOAT32, l->kh, 4, (size_t[]){B, Hkv, nk, dh});
    clattn_tensor vh = clattn_view(buf, CLATTN_FLOAT32, l->vh, 4, (size_t[]){B, Hkv, nk, dh});
    clattn_tensor oh = clattn_view(buf, CLATTN_FLOAT32, l->oh, 4, (size_t[]){B, H, nq, dh});
    clattn_tensor lse = clattn_view(buf, CLATTN_FLOAT32, l->lse, 3, (size_t[]){B, H, nq});
    int b = (int)B, h = (int)H, hkv = (int)Hkv, d = (int)dh;
    CHECK_ST(clattn__enqueue_matmul(ctx, q, 0, w->W_q, 1, 1.0f, 0.0f, w->b_q, &qp));
    CHECK_ST(clattn__enqueue_matmul(ctx, k, 0, w->W_k, 1, 1.0f, 0.0f, w->b_k, &kp));
    CHECK_ST(clattn__enqueue_matmul(ctx, v, 0, w->W_v, 1, 1.0f, 0.0f, w->b_v, &vp));
    CHECK_ST(clattn__enqueue_heads(ctx, buf, l->dqp, buf, l->qh, b, (int)nq, h, d, 1));
    CHECK_ST(clattn__enqueue_heads(ctx, buf, l->dkp, buf, l->kh, b, (int)nk, hkv, d, 1));
    CHECK_ST(clattn__enqueue_heads(ctx, buf, l->dvp, buf, l->vh, b, (int)nk, hkv, d, 1));
    CHECK_ST(clattn__attention_core(ctx, &qh, &kh, &vh, m, drop, scale, &oh, NULL, &lse));
    CHECK_ST(clattn__enqueue_heads(ctx, buf, l->oh, buf, l->cat, b, (int)nq, h, d, 0));
fail:
    return st;
}

/* The heads of the forward's saved projections and attention output, where mha_recompute leaves
 * them. */
static clattn_status saved_heads(clattn_context *ctx, const clattn_tensor *saved,
                                 const mha_saved_layout *sl, cl_mem buf, const mha_bwd_layout *l,
                                 size_t B, size_t nq, size_t nk, size_t H, size_t Hkv, size_t dh)
{
    clattn_status st = CLATTN_SUCCESS;
    int b = (int)B, h = (int)H, hkv = (int)Hkv, d = (int)dh;
    size_t o = saved->offset;
    CHECK_ST(clattn__enqueue_heads(ctx, saved->buf, o + sl->qp, buf, l->qh, b, (int)nq, h, d, 1));
    CHECK_ST(clattn__enqueue_heads(ctx, saved->buf, o + sl->kp, buf, l->kh, b, (int)nk, hkv, d, 1));
    CHECK_ST(clattn__enqueue_heads(ctx, saved->buf, o + sl->vp, buf, l->vh, b, (int)nk, hkv, d, 1));
    CHECK_ST(clattn__enqueue_heads(ctx, saved->buf, o + sl->cat, buf, l->oh, b, (int)nq, h, d, 1));
fail:
    return st;
}

/* out = cat W_o^T + b_o back to the heads, the attention back to its q/k/v heads, the heads back
 * to the projections, and each projection back to its input and weights. */
static clattn_status mha_chain(clattn_context *ctx, const clattn_tensor *q, const clattn_tensor *k,
                               const clattn_tensor *v, const clattn_mha_weights *w,
                               const clattn_tensor *dout, const clattn_mha_grads *g, cl_mem buf,
                               const mha_bwd_layout *l, const clattn_tensor *cat,
                               const clattn_tensor *lse, size_t H, size_t Hkv, size_t dh,
                               const clattn_mask_args *m, const clattn_dropout_params *drop,
                               float scale)
{
    clattn_status st = CLATTN_SUCCESS;
    size_t B = q->dims[0], nq = q->dims[1], nk = k->dims[1], hid = H * dh, kvhid = Hkv * dh;
    int b = (int)B, h = (int)H, hkv = (int)Hkv, d = (int)dh;
    clattn_tensor qh = clattn_view(buf, CLATTN_FLOAT32, l->qh, 4, (size_t[]){B, H, nq, dh});
    clattn_tensor kh = clattn_view(buf, CLATTN_FLOAT32, l->kh, 4, (size_t[]){B, Hkv, nk, dh});
    clattn_tensor vh = clattn_view(buf, CLATTN_FLOAT32, l->vh, 4, (size_t[]){B, Hkv, nk, dh});
    clattn_tensor oh = clattn_view(buf, CLATTN_FLOAT32, l->oh, 4, (size_t[]){B, H, nq, dh});
    clattn_tensor dcat = clattn_view(buf, CLATTN_FLOAT32, l->dcat, 3, (size_t[]){B, nq, hid});
    clattn_tensor doh = clattn_view(buf, CLATTN_FLOAT32, l->doh, 4, (size_t[]){B, H, nq, dh});
    clattn_tensor dqh = clattn_view(buf, CLATTN_FLOAT32, l->dqh, 4, (size_t[]){B, H, nq, dh});
    clattn_tensor dkh = clattn_view(buf, CLATTN_FLOAT32, l->dkh, 4, (size_t[]){B, Hkv, nk, dh});
    clattn_tensor dvh = clattn_view(buf, CLATTN_FLOAT32, l->dvh, 4, (size_t[]){B, Hkv, nk, dh});
    clattn_tensor dqp = clattn_view(buf, CLATTN_FLOAT32, l->dqp, 3, (size_t[]){B, nq, hid});
    clattn_tensor dkp = clattn_view(buf, CLATTN_FLOAT32, l->dkp, 3, (size_t[]){B, nk, kvhid});
    clattn_tensor dvp = clattn_view(buf, CLATTN_FLOAT32, l->dvp, 3, (size_t[]){B, nk, kvhid});
    int need_q = g->dqueries || g->dW_q || g->db_q, need_k = g->dkeys || g->dW_k || g->db_k;
    int need_v = g->dvalues || g->dW_v || g->db_v;
    CHECK_ST(clattn__enqueue_linear_backward(ctx, cat, w->W_o, dout, &dcat, g->dW_o, g->db_o));
    if (!need_q && !need_k && !need_v && !g->dbias)
        return CLATTN_SUCCESS;
    CHECK_ST(clattn__enqueue_heads(ctx, buf, l->dcat, buf, l->doh, b, (int)nq, h, d, 1));
    clattn_attention_grads ag = {need_q ? &dqh : NULL, need_k ? &dkh : NULL,
                                 need_v ? &dvh : NULL, g->dbias};
    CHECK_ST(clattn__attention_backward(ctx, &qh, &kh, &vh, m, drop, scale, &oh, lse, &doh,
                                        &ag));
    if (need_q) {
        CHECK_ST(clattn__enqueue_heads(ctx, buf, l->dqh, buf, l->dqp, b, (int)nq, h, d, 0));
        CHECK_ST(clattn__enqueue_linear_backward(ctx, q, w->W_q, &dqp, g->dqueries, g->dW_q,
                                                 g->db_q));
    }
    if (need_k) {
        CHECK_ST(clattn__enqueue_heads(ctx, buf, l->dkh, buf, l->dkp, b, (int)nk, hkv, d, 0));
        CHECK_ST(clattn__enqueue_linear_backward(ctx, k, w->W_k, &dkp, g->dkeys, g->dW_k,
                                                 g->db_k));
    }
    if (need_v) {
        CHECK_ST(clattn__enqueue_heads(ctx, buf, l->dvh, buf, l->dvp, b, (int)nk, hkv, d, 0));
        CHECK_ST(clattn__enqueue_linear_backward(ctx, v, w->W_v, &dvp, g->dvalues, g->dW_v,
                                                 g->db_v));
    }
fail:
    return st;
}

clattn_status clattn_multihead_attention_backward(clattn_context *ctx,
                                                  const clattn_tensor *queries,
                                                  const clattn_tensor *keys,
                                                  const clattn_tensor *values,
                                                  const clattn_mha_weights *w,
                                                  const clattn_attention_opts *opts,
                                                  const clattn_tensor *dout,
                                                  const clattn_mha_grads *g)
{
    clattn_status st = CLATTN_SUCCESS;
    clattn_mask_args m = {0};
    cl_mem buf;
    size_t hid, kvhid;
    const clattn_tensor *x[MHA_NGRADS];
    clattn_arg d[MHA_NGRADS];
    const char *xn[MHA_NGRADS];
    CHECK_DRY_RUN(ctx, clattn_multihead_attention_backward(ctx, queries, keys, values, w, opts,
                                                           dout, g));
    CHECK(NULL, ctx, CLATTN_ERROR_INVALID_ARGUMENT, "ctx: NULL context");
    CHECK(ctx, g, CLATTN_ERROR_INVALID_ARGUMENT, "grads: NULL");
    CHECK_ST(check_mha(ctx, queries, keys, values, w, dout, "dout", NULL, &hid, &kvhid));
    clattn_arg ins[MHA_NINS + 1];
    mha_inputs(queries, keys, values, w, ins);
    ins[MHA_NINS] = (clattn_arg){dout, "dout"};
    for (int i = 0; i < MHA_NINS + 1; i++)
        if (ins[i].t)
            CHECK_ST(clattn__check_tensor(ctx, ins[i].t, ins[i].name, CLATTN_FLOAT32, 1, 4));
    mha_grad_list(queries, keys, values, w, opts, g, x, d, xn);
    CHECK_ST(check_mha_grads(ctx, x, d, xn));
    CHECK_ST(clattn__check_no_overlap(ctx, d, MHA_NGRADS, ins, MHA_NINS + 1));
    size_t B = queries->dims[0], nq = queries->dims[1], nk = keys->dims[1];
    size_t H = (size_t)w->num_heads, dh = hid / H, Hkv = (size_t)kv_heads(w);
    float scale = (float)(1.0 / sqrt((double)dh));
    size_t sdims[4] = {B, H, nq, nk};
    const clattn_dropout_params *drop;
    const clattn_tensor *lse, *saved;
    clattn_attention_opts o;
    CHECK_ST(resolve_mha_opts(ctx, opts, &o, sdims, ins, MHA_NINS + 1, d + 11, 1, &m, &drop,
                              &lse, &saved));
    mha_saved_layout sl = saved_layout(B, nq, nk, H, hid, kvhid);
    if (saved) { /* an input: no gradient may overlap it */
        const clattn_arg me[1] = {{saved, "opts.saved"}};
        CHECK_ST(check_saved(ctx, saved, &sl, ins, MHA_NINS + 1));
        CHECK_ST(clattn__check_no_overlap(ctx, d, MHA_NGRADS, me, 1));
    }
    if (opts) { /* no gradient may overlap the mask's tensors or the slopes either */
        const clattn_arg mins[4] = {{opts->mask.valid_lens, "opts.mask.valid_lens"},
                                    {opts->mask.mask, "opts.mask.mask"},
                                    {opts->bias, "opts.bias"},
                                    {opts->alibi_slopes, "opts.alibi_slopes"}};
        CHECK_ST(clattn__check_no_overlap(ctx, d, MHA_NGRADS, mins, 4));
    }
    mha_bwd_layout l = bwd_layout(B, nq, nk, H, hid, kvhid);
    CHECK(ctx, l.total <= (size_t)INT32_MAX, CLATTN_ERROR_UNSUPPORTED,
          "multihead_attention_backward: %zu elements of intermediates exceed 32-bit indexing",
          l.total);
    CHECK_ST(clattn__scratch(ctx, CLATTN_SCRATCH_MODULE, l.total * 4, &buf));
    clattn_tensor cat, lse_in;
    if (saved) {
        CHECK_ST(saved_heads(ctx, saved, &sl, buf, &l, B, nq, nk, H, Hkv, dh));
        cat = clattn_view(saved->buf, CLATTN_FLOAT32, saved->offset + sl.cat, 3,
                          (size_t[]){B, nq, hid});
        lse_in = clattn_view(saved->buf, CLATTN_FLOAT32, saved->offset + sl.lse, 3,
                             (size_t[]){B, H, nq});
    } else {
        CHECK_ST(mha_recompute(ctx, queries, keys, values, w, buf, &l, H, Hkv, dh, &m, drop,
                               scale));
        cat = clattn_view(buf, CLATTN_FLOAT32, l.cat, 3, (size_t[]){B, nq, hid});
        lse_in = clattn_view(buf, CLATTN_FLOAT32, l.lse, 3, (size_t[]){B, H, nq});
    }
    CHECK_ST(mha_chain(ctx, queries, keys, values, w, dout, g, buf, &l, &cat, &lse_in, H, Hkv, dh,
                       &m, drop, scale));
fail:
    clattn__mask_release(&m);
    return st;
}
