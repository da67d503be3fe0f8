/* clattn_additive_scores and clattn_additive_attention (d2l's AdditiveAttention). */
#include "attention.h"
#include <stdio.h>
#include <string.h>

static clattn_status enqueue_scores(clattn_context *ctx, const clattn_tensor *qp,
                                    const clattn_tensor *kp, const clattn_tensor *wv,
                                    const clattn_tensor *s)
{
    clattn_status st = CLATTN_SUCCESS;
    cl_kernel k;
    int B = (int)qp->dims[0], Q = (int)qp->dims[1], K = (int)kp->dims[1], H = (int)qp->dims[2];
    int qo = (int)qp->offset, ko = (int)kp->offset, wo = (int)wv->offset, so = (int)s->offset;
    size_t one;
    /* a work-item's loops over the hidden size (kernels/additive.cl, VW = 8), counted as
     * clattn__loop_budget asks; not split over launches */
    CHECK_ST(clattn__loop_units(ctx, ctx->loop_limit, 0, (H / 8 + 1) + (8 + 1) + 1, 1, &one,
                                "additive attention: a hidden size of %d", H));
    char defs[48] = "";
    clattn__dtype_define(defs, sizeof defs, "QT", qp->dtype);
    clattn__dtype_define(defs, sizeof defs, "KT", kp->dtype);
    clattn__dtype_define(defs, sizeof defs, "WT", wv->dtype);
    clattn__dtype_define(defs, sizeof defs, "ST", s->dtype);
    CHECK_ST(clattn__get_kernel(ctx, "additive.cl", defs, "additive_scores", &k));
    CHECK_ST(clattn__set_args(ctx, k, "additive_scores", ARG(qp->buf), ARG(qo), ARG(kp->buf),
                              ARG(ko), ARG(wv->buf), ARG(wo), ARG(s->buf), ARG(so), ARG(Q), ARG(K),
                              ARG(H), ARGS_END));
    size_t gws[3] = {(size_t)K, (size_t)Q, (size_t)B};
    CHECK_ST(clattn__launch(ctx, k, 3, gws, NULL, "additive_scores"));
fail:
    return st;
}

static clattn_status check_wv(clattn_context *ctx, const clattn_tensor *wv, size_t h,
                              const char *name)
{
    clattn_status st = CLATTN_SUCCESS;
    char s1[96];
    CHECK_ST(clattn__check_float_tensor(ctx, wv, name, 1, 2));
    CHECK(ctx, clattn_tensor_numel(wv) == h && (wv->ndim == 1 || wv->dims[0] == 1),
          CLATTN_ERROR_SHAPE_MISMATCH, "%s: shape %s, expected (1, %zu) or (%zu)", name,
          clattn__shape_str(wv, s1, sizeof s1), h, h);
fail:
    return st;
}

clattn_status clattn_additive_scores(clattn_context *ctx, const clattn_tensor *qp,
                                     const clattn_tensor *kp, const clattn_tensor *w_v,
                                     const clattn_tensor *scores)
{
    clattn_status st = CLATTN_SUCCESS;
    char s1[96], s2[96];
    CHECK_DRY_RUN(ctx, clattn_additive_scores(ctx, qp, kp, w_v, scores));
    CHECK(NULL, ctx, CLATTN_ERROR_INVALID_ARGUMENT, "ctx: NULL context");
    CHECK_ST(clattn__check_float_tensor(ctx, qp, "qp", 3, 3));
    CHECK_ST(clattn__check_float_tensor(ctx, kp, "kp", 3, 3));
    CHECK_ST(clattn__check_float_tensor(ctx, scores, "scores", 3, 3));
    CHECK(ctx, kp->dims[0] == qp->dims[0] && kp->dims[2] == qp->dims[2],
          CLATTN_ERROR_SHAPE_MISMATCH, "kp: shape %s, expected (%zu, K, %zu) to match qp %s",
          clattn__shape_str(kp, s1, sizeof s1), qp->dims[0], qp->dims[2],
          clattn__shape_str(qp, s2, sizeof s2));
    CHECK_ST(check_wv(ctx, w_v, qp->dims[2], "w_v"));
    CHECK(ctx, scores->dims[0] == qp->dims[0] && scores->dims[1] == qp->dims[1] &&
                   scores->dims[2] == kp->dims[1],
          CLATTN_ERROR_SHAPE_MISMATCH, "scores: shape %s, expected (%zu, %zu, %zu)",
          clattn__shape_str(scores, s1, sizeof s1), qp->dims[0], qp->dims[1], kp->dims[1]);
    const clattn_arg outs[1] = {{scores, "scores"}};
    const clattn_arg ins[3] = {{qp, "qp"}, {kp, "kp"}, {w_v, "w_v"}};
    CHECK_ST(clattn__check_no_overlap(ctx, outs, 1, ins, 3));
    CHECK_ST(enqueue_scores(ctx, qp, kp, w_v, scores));
fail:
    return st;
}

/* W (h, in) must match x's last dim; returns h through *h (the first call sets it). */
static clattn_status check_proj(clattn_context *ctx, const clattn_tensor *W, const char *name,
                                const clattn_tensor *x, const char *xname, size_t *h)
{
    clattn_status st = CLATTN_SUCCESS;
    char s1[96], s2[96];
    CHECK_ST(clattn__check_float_tensor(ctx, W, name, 2, 2));
    CHECK(ctx, W->dims[1] == x->dims[x->ndim - 1] && (*h == 0 || W->dims[0] == *h),
          CLATTN_ERROR_SHAPE_MISMATCH, "%s: shape %s does not fit %s %s%s", name,
          clattn__shape_str(W, s1, sizeof s1), xname, clattn__shape_str(x, s2, sizeof s2),
          *h ? " or the hidden size of W_q" : "");
    *h = W->dims[0];
fail:
    return st;
}

/* why opts.scale must be 0 here (clattn__check_no_scale) */
#define ADD_SCALE "additive attention's scores are not scaled"
#define ADD_NINS 6
/* Every input of additive attention, for the overlap checks (w already checked non-NULL). */
static void additive_inputs(const clattn_tensor *q, const clattn_tensor *k,
                            const clattn_tensor *v, const clattn_additive_weights *w,
                            clattn_arg ins[ADD_NINS])
{
    const clattn_arg all[ADD_NINS] = {{q, "queries"},   {k, "keys"},       {v, "values"},
                                      {w->W_q, "w.W_q"}, {w->W_k, "w.W_k"}, {w->w_v, "w.w_v"}};
    memcpy(ins, all, sizeof all);
}

static clattn_status check_additive(clattn_context *ctx, const clattn_tensor *q,
                                    const clattn_tensor *k, const clattn_tensor *v,
                                    const clattn_additive_weights *w, const clattn_tensor *out,
                                    const clattn_tensor *weights, size_t *h)
{
    clattn_status st = CLATTN_SUCCESS;
    char s1[96];
    CHECK_ST(clattn__check_module_inputs(ctx, q, k, v, out, "out"));
    size_t B = q->dims[0], nq = q->dims[1], nk = k->dims[1];
    CHECK(ctx, out->dims[0] == B && out->dims[1] == nq && out->dims[2] == v->dims[2],
          CLATTN_ERROR_SHAPE_MISMATCH, "out: shape %s, expected (%zu, %zu, %zu)",
          clattn__shape_str(out, s1, sizeof s1), B, nq, v->dims[2]);
    if (weights) {
        CHECK_ST(clattn__check_float_tensor(ctx, weights, "weights", 3, 3));
        CHECK(ctx, weights->dims[0] == B && weights->dims[1] == nq && weights->dims[2] == nk,
              CLATTN_ERROR_SHAPE_MISMATCH, "weights: shape %s, expected (%zu, %zu, %zu)",
              clattn__shape_str(weights, s1, sizeof s1), B, nq, nk);
    }
    CHECK(ctx, w, CLATTN_ERROR_INVALID_ARGUMENT, "w: NULL weights");
    *h = 0;
    CHECK_ST(check_proj(ctx, w->W_q, "w.W_q", q, "queries", h));
    CHECK_ST(check_proj(ctx, w->W_k, "w.W_k", k, "keys", h));
    CHECK_ST(check_wv(ctx, w->w_v, *h, "w.w_v"));
    const clattn_arg outs[2] = {{out, "out"}, {weights, "weights"}};
    clattn_arg ins[ADD_NINS];
    additive_inputs(q, k, v, w, ins);
    CHECK_ST(clattn__check_no_overlap(ctx, outs, 2, ins, ADD_NINS));
fail:
    return st;
}

clattn_status clattn_additive_attention(clattn_context *ctx, const clattn_tensor *queries,
                                        const clattn_tensor *keys, const clattn_tensor *values,
                                        const clattn_additive_weights *w,
                                        const clattn_attention_opts *opts,
                                        const clattn_tensor *out, const clattn_tensor *weights)
{
    clattn_status st = CLATTN_SUCCESS;
    clattn_mask_args m = {0};
    clattn_tuning tune;
    cl_mem buf;
    size_t h;
    CHECK_DRY_RUN(ctx,
                  clattn_additive_attention(ctx, queries, keys, values, w, opts, out, weights));
    CHECK(NULL, ctx, CLATTN_ERROR_INVALID_ARGUMENT, "ctx: NULL context");
    CHECK_ST(check_additive(ctx, queries, keys, values, w, out, weights, &h));
    size_t B = queries->dims[0], nq = queries->dims[1], nk = keys->dims[1];
    size_t sdims[3] = {B, nq, nk};
    const clattn_dropout_params *drop;
    const clattn_tensor *lse;
    const clattn_arg outs[2] = {{out, "out"}, {weights, "weights"}};
    clattn_arg ins[ADD_NINS];
    additive_inputs(queries, keys, values, w, ins);
    CHECK_ST(clattn__check_no_scale(ctx, opts, ADD_SCALE));
    CHECK_ST(clattn__resolve_opts(ctx, opts, 3, sdims, ins, ADD_NINS, outs, 2, &m, &drop, &lse));
    /* scratch: projected queries and keys, then scores (unless returned in float32: 16-bit
     * weights are the float32 ones rounded once, while P V takes them unrounded) and dropped
     * weights */
    size_t nqp = B * nq * h, nkp = B * nk * h, ns = B * nq * nk;
    int dropping = clattn__dropout_active(drop);
    int own_s = !weights || weights->dtype != CLATTN_FLOAT32;
    size_t need = nqp + nkp + (own_s ? ns : 0) + (dropping ? ns : 0);
    CHECK(ctx, need <= (size_t)INT32_MAX, CLATTN_ERROR_UNSUPPORTED, "additive_attention: %zu "
          "float32 intermediates (projections and scores) exceed the kernels' 32-bit indexing",
          need);
    CHECK_ST(clattn__scratch(ctx, CLATTN_SCRATCH_MODULE, need * 4, &buf));
    clattn_tensor qp = clattn_view(buf, CLATTN_FLOAT32, 0, 3, (size_t[]){B, nq, h});
    clattn_tensor kp = clattn_view(buf, CLATTN_FLOAT32, nqp, 3, (size_t[]){B, nk, h});
    clattn_tensor S = own_s ? clattn_view(buf, CLATTN_FLOAT32, nqp + nkp, 3, sdims) : *weights;
    clattn_tensor P = dropping ? clattn_view(buf, CLATTN_FLOAT32, need - ns, 3, sdims) : S;
    CHECK_ST(clattn__tune(ctx, "softmax", &tune));
    CHECK_ST(clattn__enqueue_matmul(ctx, queries, 0, w->W_q, 1, 1.0f, 0.0f, NULL, &qp));
    CHECK_ST(clattn__enqueue_matmul(ctx, keys, 0, w->W_k, 1, 1.0f, 0.0f, NULL, &kp));
    CHECK_ST(enqueue_scores(ctx, &qp, &kp, w->w_v, &S));
    CHECK_ST(clattn__enqueue_softmax(ctx, &tune, &S, &m, &S, lse));
    if (weights && own_s)
        CHECK_ST(clattn__enqueue_convert(ctx, &S, weights));
    if (dropping)
        CHECK_ST(clattn__enqueue_dropout(ctx, S.buf, S.offset, P.buf, P.offset, ns, 0, drop));
    CHECK_ST(clattn__enqueue_matmul(ctx, &P, 0, values, 0, 1.0f, 0.0f, NULL, out));
fail:
    clattn__mask_release(&m);
    return st;
}

/* ---- backward ---- */

/* dqp, dkp (and dw_v when dwv is not NULL, through dwp: (B Q, h) partial sums) from the scores'
 * gradient ds (kernels/additive.cl). */
static clattn_status enqueue_scores_backward(clattn_context *ctx, const clattn_tensor *qp,
                                             const clattn_tensor *kp, const clattn_tensor *wv,
                                             const clattn_tensor *ds, const clattn_tensor *dqp,
                                             const clattn_tensor *dkp, const clattn_tensor *dwp,
                                             const clattn_tensor *dwv)
{
    clattn_status st = CLATTN_SUCCESS;
    cl_kernel k;
    int B = (int)qp->dims[0], Q = (int)qp->dims[1], K = (int)kp->dims[1], H = (int)qp->dims[2];
    int qo = (int)qp->offset, ko = (int)kp->offset, wo = (int)wv->offset, so = (int)ds->offset;
    int dqo = (int)dqp->offset, dko = (int)dkp->offset, dwo = (int)dwp->offset;
    size_t one, chunks = clattn__div_up((size_t)H, 8);
    /* each work-item's loops over the other side's rows (8 hidden units each), counted as
     * clattn__loop_budget asks; not split over launches */
    CHECK_ST(clattn__loop_units(ctx, ctx->loop_limit, 20, 9L * (Q > K ? Q : K) + 1, 1, &one,
                                "additive attention backward: %d queries and %d keys", Q, K));
    CHECK_ST(clattn__get_kernel(ctx, "additive.cl", "", "additive_backward_q", &k));
    CHECK_ST(clattn__set_args(ctx, k, "additive_backward_q", ARG(qp->buf), ARG(qo), ARG(kp->buf),
                              ARG(ko), ARG(wv->buf), ARG(wo), ARG(ds->buf), ARG(so),
                              ARG(dqp->buf), ARG(dqo), ARG(dwp->buf), ARG(dwo), ARG(Q), ARG(K),
                              ARG(H), ARGS_END));
    size_t gq[3] = {chunks, (size_t)Q, (size_t)B}, gk[3] = {chunks, (size_t)K, (size_t)B};
    CHECK_ST(clattn__launch(ctx, k, 3, gq, NULL, "additive_backward_q"));
    CHECK_ST(clattn__get_kernel(ctx, "additive.cl", "", "additive_backward_k", &k));
    CHECK_ST(clattn__set_args(ctx, k, "additive_backward_k", ARG(qp->buf), ARG(qo), ARG(kp->buf),
                              ARG(ko), ARG(wv->buf), ARG(wo), ARG(ds->buf), ARG(so),
                              ARG(dkp->buf), ARG(dko), ARG(Q), ARG(K), ARG(H), ARGS_END));
    CHECK_ST(clattn__launch(ctx, k, 3, gk, NULL, "additive_backward_k"));
    if (dwv) {
        clattn_tensor w1 = clattn_view(dwv->buf, dwv->dtype, dwv->offset, 1, (size_t[]){H});
        clattn_tensor p2 = clattn_view(dwp->buf, CLATTN_FLOAT32, dwp->offset, 2,
                                       (size_t[]){(size_t)B * Q, (size_t)H});
        CHECK_ST(clattn__enqueue_column_sums(ctx, &p2, &w1));
    }
fail:
    return st;
}

clattn_status clattn_additive_scores_backward(clattn_context *ctx, const clattn_tensor *qp,
                                              const clattn_tensor *kp, const clattn_tensor *w_v,
                                              const clattn_tensor *dscores,
                                              const clattn_tensor *dqp, const clattn_tensor *dkp,
                                              const clattn_tensor *dw_v)
{
    clattn_status st = CLATTN_SUCCESS;
    char s1[96];
    cl_mem buf;
    CHECK_DRY_RUN(ctx, clattn_additive_scores_backward(ctx, qp, kp, w_v, dscores, dqp, dkp,
                                                       dw_v));
    CHECK(NULL, ctx, CLATTN_ERROR_INVALID_ARGUMENT, "ctx: NULL context");
    const clattn_arg ins[4] = {{qp, "qp"}, {kp, "kp"}, {w_v, "w_v"}, {dscores, "dscores"}};
    const clattn_arg outs[3] = {{dqp, "dqp"}, {dkp, "dkp"}, {dw_v, "dw_v"}};
    for (int i = 0; i < 4; i++)
        CHECK_ST(clattn__check_tensor(ctx, ins[i].t, ins[i].name, CLATTN_FLOAT32, 1, 3));
    CHECK(ctx, qp->ndim == 3 && kp->ndim == 3 && kp->dims[0] == qp->dims[0] &&
                   kp->dims[2] == qp->dims[2],
          CLATTN_ERROR_SHAPE_MISMATCH, "qp, kp: expected (B, Q, h) and (B, K, h) (kp: %s)",
          clattn__shape_str(kp, s1, sizeof s1));
    size_t B = qp->dims[0], nq = qp->dims[1], nk = kp->dims[1], h = qp->dims[2];
    CHECK_ST(check_wv(ctx, w_v, h, "w_v"));
    CHECK(ctx, dscores->ndim == 3 && dscores->dims[0] == B && dscores->dims[1] == nq &&
                   dscores->dims[2] == nk,
          CLATTN_ERROR_SHAPE_MISMATCH, "dscores: shape %s, expected (%zu, %zu, %zu)",
          clattn__shape_str(dscores, s1, sizeof s1), B, nq, nk);
    for (int i = 0; i < 3; i++) /* outs[i] is the gradient of ins[i] */
        CHECK_ST(clattn__check_grad(ctx, outs[i].t, outs[i].name, ins[i].t, ins[i].name));
    CHECK_ST(clattn__check_no_overlap(ctx, outs, 3, ins, 4));
    /* scratch: stand-ins for dqp and dkp not asked for (the kernels write both), w's partials */
    size_t nq_ = B * nq * h, nk_ = B * nk * h;
    /* each fits 32-bit indexing (checked tensors), but not always together: dwp lies past both */
    CHECK(ctx, 2 * nq_ + nk_ <= (size_t)INT32_MAX, CLATTN_ERROR_UNSUPPORTED,
          "additive scores backward: %zu float32 intermediates exceed the kernels' 32-bit "
          "indexing", 2 * nq_ + nk_);
    CHECK_ST(clattn__scratch(ctx, CLATTN_SCRATCH_MODULE, (2 * nq_ + nk_) * 4, &buf));
    clattn_tensor sq = clattn_view(buf, CLATTN_FLOAT32, 0, 3, (size_t[]){B, nq, h});
    clattn_tensor sk = clattn_view(buf, CLATTN_FLOAT32, nq_, 3, (size_t[]){B, nk, h});
    clattn_tensor dwp = clattn_view(buf, CLATTN_FLOAT32, nq_ + nk_, 3, (size_t[]){B, nq, h});
    CHECK_ST(enqueue_scores_backward(ctx, qp, kp, w_v, dscores, dqp ? dqp : &sq,
                                     dkp ? dkp : &sk, &dwp, dw_v));
fail:
    return st;
}

/* The backward's arguments: the forward's, dout (B, Q, v) and float32 gradients of the right
 * shapes overlapping no input (dW_k and dw_v, written last, not the mask's tensors either); *h
 * the projection size, m and *drop the resolved mask and dropout. */
static clattn_status check_additive_backward(clattn_context *ctx, const clattn_tensor *queries,
                                             const clattn_tensor *keys,
                                             const clattn_tensor *values,
                                             const clattn_additive_weights *w,
                                             const clattn_attention_opts *opts,
                                             const clattn_tensor *dout,
                                             const clattn_additive_grads *g, size_t *h,
                                             clattn_mask_args *m,
                                             const clattn_dropout_params **drop)
{
    clattn_status st = CLATTN_SUCCESS;
    const clattn_tensor *lse;
    CHECK(ctx, g, CLATTN_ERROR_INVALID_ARGUMENT, "grads: NULL");
    CHECK_ST(clattn__check_module_inputs(ctx, queries, keys, values, dout, "dout"));
    size_t B = queries->dims[0], nq = queries->dims[1], nk = keys->dims[1];
    CHECK(ctx, dout->dims[0] == B && dout->dims[1] == nq && dout->dims[2] == values->dims[2],
          CLATTN_ERROR_SHAPE_MISMATCH, "dout: shape (%zu, %zu, %zu), expected (%zu, %zu, %zu)",
          dout->dims[0], dout->dims[1], dout->dims[2], B, nq, values->dims[2]);
    CHECK(ctx, w, CLATTN_ERROR_INVALID_ARGUMENT, "w: NULL weights");
    *h = 0;
    CHECK_ST(check_proj(ctx, w->W_q, "w.W_q", queries, "queries", h));
    CHECK_ST(check_proj(ctx, w->W_k, "w.W_k", keys, "keys", h));
    CHECK_ST(check_wv(ctx, w->w_v, *h, "w.w_v"));
    clattn_arg ins[ADD_NINS + 1];
    additive_inputs(queries, keys, values, w, ins);
    ins[ADD_NINS] = (clattn_arg){dout, "dout"};
    for (int i = 0; i <= ADD_NINS; i++)
        CHECK_ST(clattn__check_tensor(ctx, ins[i].t, ins[i].name, CLATTN_FLOAT32, 1, 4));
    const clattn_arg outs[6] = {{g->dqueries, "grads.dqueries"}, {g->dkeys, "grads.dkeys"},
                                {g->dvalues, "grads.dvalues"}, {g->dW_q, "grads.dW_q"},
                                {g->dW_k, "grads.dW_k"}, {g->dw_v, "grads.dw_v"}};
    for (int i = 0; i < 6; i++) /* outs[i] is the gradient of ins[i] */
        CHECK_ST(clattn__check_grad(ctx, outs[i].t, outs[i].name, ins[i].t, ins[i].name));
    CHECK_ST(clattn__check_no_overlap(ctx, outs, 6, ins, ADD_NINS + 1));
    size_t sdims[3] = {B, nq, nk};
    CHECK_ST(clattn__check_no_scale(ctx, opts, ADD_SCALE));
    CHECK_ST(clattn__resolve_opts(ctx, opts, 3, sdims, ins, ADD_NINS + 1, outs, 4, m, drop,
                                  &lse));
    if (opts) { /* the last gradients against the mask's tensors too */
        const clattn_arg mins[4] = {{opts->mask.valid_lens, "opts.mask.valid_lens"},
                                    {opts->mask.mask, "opts.mask.mask"},
                                    {opts->bias, "opts.bias"},
                                    {opts->alibi_slopes, "opts.alibi_slopes"}};
        CHECK_ST(clattn__check_no_overlap(ctx, outs + 4, 2, mins, 4));
    }
fail:
    return st;
}

clattn_status clattn_additive_attention_backward(clattn_context *ctx,
                                                 const clattn_tensor *queries,
                                                 const clattn_tensor *keys,
                                                 const clattn_tensor *values,
                                                 const clattn_additive_weights *w,
                                                 const clattn_attention_opts *opts,
                                                 const clattn_tensor *dout,
                                                 const clattn_additive_grads *g)
{
    clattn_status st = CLATTN_SUCCESS;
    clattn_mask_args m = {0};
    const clattn_dropout_params *drop;
    clattn_tuning tune;
    cl_mem buf;
    size_t h;
    CHECK_DRY_RUN(ctx, clattn_additive_attention_backward(ctx, queries, keys, values, w, opts,
                                                          dout, g));
    CHECK(NULL, ctx, CLATTN_ERROR_INVALID_ARGUMENT, "ctx: NULL context");
    CHECK_ST(check_additive_backward(ctx, queries, keys, values, w, opts, dout, g, &h, &m, &drop));
    size_t B = queries->dims[0], nq = queries->dims[1], nk = keys->dims[1];
    size_t sdims[3] = {B, nq, nk};
    /* scratch: qp, kp, P, X (dropout(P), then the scores' gradient), dqp, dkp, w's partials */
    size_t nqp = B * nq * h, nkp = B * nk * h, ns = B * nq * nk, need = 3 * nqp + 2 * nkp + 2 * ns;
    int dropping = clattn__dropout_active(drop);
    CHECK(ctx, need <= (size_t)INT32_MAX, CLATTN_ERROR_UNSUPPORTED, "additive_attention_backward: "
          "%zu float32 intermediates exceed the kernels' 32-bit indexing", need);
    CHECK_ST(clattn__scratch(ctx, CLATTN_SCRATCH_MODULE, need * 4, &buf));
    clattn_tensor qp = clattn_view(buf, CLATTN_FLOAT32, 0, 3, (size_t[]){B, nq, h});
    clattn_tensor kp = clattn_view(buf, CLATTN_FLOAT32, nqp, 3, (size_t[]){B, nk, h});
    clattn_tensor P = clattn_view(buf, CLATTN_FLOAT32, nqp + nkp, 3, sdims);
    clattn_tensor X = clattn_view(buf, CLATTN_FLOAT32, nqp + nkp + ns, 3, sdims);
    clattn_tensor dqp = clattn_view(buf, CLATTN_FLOAT32, nqp + nkp + 2 * ns, 3,
                                    (size_t[]){B, nq, h});
    clattn_tensor dkp = clattn_view(buf, CLATTN_FLOAT32, 2 * nqp + nkp + 2 * ns, 3,
                                    (size_t[]){B, nk, h});
    clattn_tensor dwp = clattn_view(buf, CLATTN_FLOAT32, 2 * nqp + 2 * nkp + 2 * ns, 3,
                                    (size_t[]){B, nq, h});
    CHECK_ST(clattn__tune(ctx, "softmax", &tune));
    CHECK_ST(clattn__enqueue_matmul(ctx, queries, 0, w->W_q, 1, 1.0f, 0.0f, NULL, &qp));
    CHECK_ST(clattn__enqueue_matmul(ctx, keys, 0, w->W_k, 1, 1.0f, 0.0f, NULL, &kp));
    CHECK_ST(enqueue_scores(ctx, &qp, &kp, w->w_v, &P));
    CHECK_ST(clattn__enqueue_softmax(ctx, &tune, &P, &m, &P, NULL));
    if (g->dvalues) { /* dV = dropout(P)^T dout */
        const clattn_tensor *pd = &P;
        if (dropping) {
            CHECK_ST(clattn__enqueue_dropout(ctx, P.buf, P.offset, X.buf, X.offset, ns, 0, drop));
            pd = &X;
        }
        CHECK_ST(clattn__enqueue_matmul(ctx, pd, 1, dout, 0, 1.0f, 0.0f, NULL, g->dvalues));
    }
    if (!g->dqueries && !g->dkeys && !g->dW_q && !g->dW_k && !g->dw_v)
        goto fail; /* done: st is CLATTN_SUCCESS */
    CHECK_ST(clattn__enqueue_matmul(ctx, dout, 0, values, 1, 1.0f, 0.0f, NULL, &X));
    if (dropping)
        CHECK_ST(clattn__enqueue_dropout(ctx, X.buf, X.offset, X.buf, X.offset, ns, 0, drop));
    CHECK_ST(clattn__enqueue_softmax_backward(ctx, &tune, &P, &X, &m, &X));
    CHECK_ST(enqueue_scores_backward(ctx, &qp, &kp, w->w_v, &X, &dqp, &dkp, &dwp, g->dw_v));
    CHECK_ST(clattn__enqueue_linear_backward(ctx, queries, w->W_q, &dqp, g->dqueries, g->dW_q,
                                             NULL));
    CHECK_ST(clattn__enqueue_linear_backward(ctx, keys, w->W_k, &dkp, g->dkeys, g->dW_k, NULL));
fail:
    clattn__mask_release(&m);
    return st;
}
