/* clattn_dot_product_attention and the attention core shared with multi-head attention. */
#include "attention.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

clattn_status clattn__check_module_inputs(clattn_context *ctx, const clattn_tensor *q,
                                         const clattn_tensor *k, const clattn_tensor *v,
                                         const clattn_tensor *out, const char *out_name)
{
    clattn_status st = CLATTN_SUCCESS;
    CHECK_ST(clattn__check_float_tensor(ctx, q, "queries", 3, 3));
    CHECK_ST(clattn__check_float_tensor(ctx, k, "keys", 3, 3));
    CHECK_ST(clattn__check_float_tensor(ctx, v, "values", 3, 3));
    CHECK_ST(clattn__check_float_tensor(ctx, out, out_name, 3, 3));
    size_t B = q->dims[0], nk = k->dims[1];
    CHECK(ctx, k->dims[0] == B && v->dims[0] == B, CLATTN_ERROR_SHAPE_MISMATCH,
          "keys/values: batch %zu/%zu differs from the queries' %zu", k->dims[0], v->dims[0], B);
    CHECK(ctx, v->dims[1] == nk, CLATTN_ERROR_SHAPE_MISMATCH,
          "values: %zu rows, expected the keys' %zu", v->dims[1], nk);
fail:
    return st;
}

/* opts.lse, when given: float32 of the score shape without its last dim, overlapping nothing */
static clattn_status check_lse(clattn_context *ctx, const clattn_tensor *lse, int rank,
                               const size_t *sdims, const clattn_arg *ins, int nins,
                               const clattn_arg *outs, int nouts)
{
    clattn_status st = CLATTN_SUCCESS;
    char s1[96], s2[96];
    clattn_tensor want = clattn_view(NULL, CLATTN_FLOAT32, 0, rank - 1, sdims);
    CHECK_ST(clattn__check_tensor(ctx, lse, "opts.lse", CLATTN_FLOAT32, 1, 3));
    CHECK(ctx, lse->ndim == rank - 1 &&
                   memcmp(lse->dims, sdims, sizeof(size_t) * (size_t)(rank - 1)) == 0,
          CLATTN_ERROR_SHAPE_MISMATCH, "opts.lse: shape %s, expected %s (the scores' without the "
          "key dim)", clattn__shape_str(lse, s1, sizeof s1), clattn__shape_str(&want, s2, sizeof s2));
    const clattn_arg me[1] = {{lse, "opts.lse"}};
    CHECK_ST(clattn__check_no_overlap(ctx, me, 1, ins, nins));
    CHECK_ST(clattn__check_no_overlap(ctx, me, 1, outs, nouts));
fail:
    return st;
}

clattn_status clattn__check_no_scale(clattn_context *ctx, const clattn_attention_opts *opts,
                                     const char *fixed)
{
    clattn_status st = CLATTN_SUCCESS;
    CHECK(ctx, !opts || opts->scale == 0.0f, CLATTN_ERROR_INVALID_ARGUMENT,
          "opts.scale = %g: %s (0 here)", opts ? (double)opts->scale : 0.0, fixed);
fail:
    return st;
}

clattn_status clattn__resolve_scale(clattn_context *ctx, const clattn_attention_opts *opts,
                                    size_t d, float *scale)
{
    clattn_status st = CLATTN_SUCCESS;
    *scale = opts && opts->scale != 0.0f ? opts->scale : (float)(1.0 / sqrt((double)d));
    CHECK(ctx, isfinite(*scale), CLATTN_ERROR_INVALID_ARGUMENT, "opts.scale: not finite");
fail:
    return st;
}

clattn_status clattn__resolve_opts(clattn_context *ctx, const clattn_attention_opts *opts,
                                   int rank, const size_t *sdims, const clattn_arg *ins, int nins,
                                   const clattn_arg *outs, int nouts, clattn_mask_args *m,
                                   const clattn_dropout_params **drop, const clattn_tensor **lse)
{
    clattn_status st = CLATTN_SUCCESS;
    clattn_arg all[5]; /* outs (at most four: a backward's gradients) and the lse */
    *drop = opts ? &opts->dropout : NULL;
    *lse = opts ? opts->lse : NULL;
    CHECK(ctx, !opts || !opts->saved, CLATTN_ERROR_INVALID_ARGUMENT,
          "opts.saved: only multi-head attention and its backward take it (NULL here)");
    CHECK_ST(clattn__check_dropout(ctx, *drop, "opts.dropout"));
    if (*lse)
        CHECK_ST(check_lse(ctx, *lse, rank, sdims, ins, nins, outs, nouts));
    if (nouts) /* memcpy takes no NULL even for 0 bytes */
        memcpy(all, outs, sizeof *outs * (size_t)nouts);
    all[nouts].t = *lse;
    all[nouts].name = "opts.lse";
    CHECK_ST(clattn__resolve_mask_dims(ctx, opts ? &opts->mask : NULL, rank, sdims, "opts.mask",
                                       all, nouts + 1, m));
    if (opts && opts->bias) { /* an input: no output may overlap it */
        const clattn_arg b[1] = {{opts->bias, "opts.bias"}};
        CHECK_ST(clattn__resolve_bias(ctx, opts->bias, rank, sdims, "opts.bias", m));
        CHECK_ST(clattn__check_no_overlap(ctx, all, nouts + 1, b, 1));
    }
    if (opts && opts->alibi_slopes) {
        const clattn_arg a[1] = {{opts->alibi_slopes, "opts.alibi_slopes"}};
        CHECK_ST(clattn__resolve_slopes(ctx, opts->alibi_slopes, rank, sdims,
                                        "opts.alibi_slopes", m));
        CHECK_ST(clattn__check_no_overlap(ctx, all, nouts + 1, a, 1));
    }
fail:
    return st;
}

/* A view of n floats at element `off` of buf, shaped like `like` with its last two dims
 * replaced by (rows, cols). */
static clattn_tensor shaped(cl_mem buf, size_t off, const clattn_tensor *like, size_t rows,
                            size_t cols)
{
    clattn_tensor t = clattn_view(buf, CLATTN_FLOAT32, off, like->ndim, like->dims);
    t.dims[t.ndim - 2] = rows;
    t.dims[t.ndim - 1] = cols;
    return t;
}

/* A contiguous 4-D (B, H, rows, cols) tensor seen as (B, H / G, G * rows, cols): the G heads
 * that share one K/V head become one batch of G * rows rows (the same memory). */
static clattn_tensor grouped(const clattn_tensor *t, size_t G)
{
    clattn_tensor g = *t;
    if (G > 1) {
        g.dims[1] /= G;
        g.dims[2] *= G;
    }
    return g;
}

clattn_status clattn__attention_core(clattn_context *ctx, const clattn_tensor *Q,
                                     const clattn_tensor *K, const clattn_tensor *V,
                                     const clattn_mask_args *mask,
                                     const clattn_dropout_params *dropout, float scale,
                                     const clattn_tensor *out, const clattn_tensor *weights,
                                     const clattn_tensor *lse)
{
    clattn_status st = CLATTN_SUCCESS;
    clattn_tuning tune, att;
    cl_mem buf = NULL;
    size_t nq = Q->dims[Q->ndim - 2], nk = K->dims[K->ndim - 2];
    size_t G = Q->ndim == 4 ? Q->dims[1] / K->dims[1] : 1; /* query heads per K/V head */
    int d = (int)Q->dims[Q->ndim - 1], dv = (int)V->dims[V->ndim - 1];
    CHECK_ST(clattn__tune_bucket(ctx, "attention", clattn__head_bucket((size_t)d, (size_t)dv),
                                 &att));
    if (!weights && clattn__flash_supports(&att, (size_t)d, (size_t)dv)) {
        clattn_flash_operand fq = clattn__flash_operand(Q, mask->D1);
        clattn_flash_operand fk = clattn__flash_operand(K, mask->D1 / (int)G);
        clattn_flash_operand fv = clattn__flash_operand(V, mask->D1 / (int)G);
        clattn_flash_operand fo = clattn__flash_operand(out, mask->D1);
        clattn_flash_lse fl;
        return clattn__enqueue_flash(ctx, &att, &fq, &fk, &fv, &fo, (int)G, d, dv, mask, dropout,
                                     scale, clattn__flash_lse(lse, &fl));
    }
    size_t n = clattn__batch_count(Q, 2) * nq * nk;
    int drop = clattn__dropout_active(dropout);
    /* Scores go straight into the caller's float32 weights when asked for, else into float32
     * scratch (16-bit weights are the probabilities rounded once, while P V takes them unrounded,
     * as the fused path does); dropout writes a second copy so the returned weights stay those
     * before dropout, as d2l keeps them. */
    int own_s = !weights || weights->dtype != CLATTN_FLOAT32;
    size_t need = (own_s ? n : 0) + (drop ? n : 0);
    CHECK(ctx, need <= (size_t)INT32_MAX, CLATTN_ERROR_UNSUPPORTED, "attention: the unfused "
          "path's %zu float32 intermediates (the scores%s) exceed the kernels' 32-bit indexing; "
          "the fused path (no weights returned, head sizes up to 256) keeps none", need,
          drop ? " and the dropped weights" : "");
    if (need)
        CHECK_ST(clattn__scratch(ctx, CLATTN_SCRATCH_ATTN, need * 4, &buf));
    clattn_tensor S = own_s ? shaped(buf, 0, Q, nq, nk) : *weights;
    clattn_tensor P = drop ? shaped(buf, own_s ? n : 0, Q, nq, nk) : S;
    /* grouped query heads: each K/V head's G query heads are one batch of G * nq rows, so
     * Q K^T and P V are plain batched GEMMs over the K/V heads, no copy of K or V */
    clattn_tensor Qg = grouped(Q, G), Sg = grouped(&S, G), Pg = grouped(&P, G);
    clattn_tensor Og = grouped(out, G);
    CHECK_ST(clattn__tune(ctx, "softmax", &tune));
    CHECK_ST(clattn__enqueue_matmul(ctx, &Qg, 0, K, 1, scale, 0.0f, NULL, &Sg));
    CHECK_ST(clattn__enqueue_softmax(ctx, &tune, &S, mask, &S, lse));
    if (weights && own_s)
        CHECK_ST(clattn__enqueue_convert(ctx, &S, weights));
    if (drop)
        CHECK_ST(clattn__enqueue_dropout(ctx, S.buf, S.offset, P.buf, P.offset, n, 0, dropout));
    CHECK_ST(clattn__enqueue_matmul(ctx, &Pg, 0, V, 0, 1.0f, 0.0f, NULL, &Og));
fail:
    return st;
}

/* 1 when t has Q's leading dims, or (K and V of 4-D Q) Q's batch and a head count dividing Q's */
static int leading_ok(const clattn_tensor *t, const clattn_tensor *Q, int kv)
{
    if (t->ndim != Q->ndim)
        return 0;
    if (kv && Q->ndim == 4)
        return t->dims[0] == Q->dims[0] && t->dims[1] > 0 && Q->dims[1] % t->dims[1] == 0;
    return memcmp(t->dims, Q->dims, sizeof(size_t) * (size_t)(Q->ndim - 2)) == 0;
}

/* Q (.., Q, d), K (.., K, d), V (.., K, dv), out (.., Q, dv), weights (.., Q, K): same leading
 * dims, except that 4-D K and V (B, Hkv, K, .) may have fewer heads than Q (B, Hq, Q, d) when
 * Hkv divides Hq (grouped-query attention). */
static clattn_status check_qkv(clattn_context *ctx, const clattn_tensor *Q, const clattn_tensor *K,
                               const clattn_tensor *V, const clattn_tensor *out,
                               const clattn_tensor *weights, const char *out_name)
{
    clattn_status st = CLATTN_SUCCESS;
    char s1[96], s2[96];
    const clattn_tensor *all[4] = {K, V, out, weights};
    const char *names[4] = {"K", "V", out_name, "weights"};
    CHECK_ST(clattn__check_float_tensor(ctx, Q, "Q", 2, 4));
    for (int i = 0; i < 4; i++) {
        if (i == 3 && !weights)
            break;
        CHECK_ST(clattn__check_float_tensor(ctx, all[i], names[i], 2, 4));
        CHECK(ctx, leading_ok(all[i], Q, i < 2), CLATTN_ERROR_SHAPE_MISMATCH,
              "%s: shape %s, expected Q's leading dims %s%s", names[i],
              clattn__shape_str(all[i], s1, sizeof s1), clattn__shape_str(Q, s2, sizeof s2),
              i < 2 && Q->ndim == 4 ? " (or Q's batch and a number of heads dividing Q's)" : "");
    }
    int r = Q->ndim;
    CHECK(ctx, r < 4 || V->dims[1] == K->dims[1], CLATTN_ERROR_SHAPE_MISMATCH,
          "V: %zu heads, expected K's %zu", V->dims[1], K->dims[1]);
    size_t nq = Q->dims[r - 2], d = Q->dims[r - 1], nk = K->dims[r - 2], dv = V->dims[r - 1];
    CHECK(ctx, K->dims[r - 1] == d, CLATTN_ERROR_SHAPE_MISMATCH,
          "K: feature size %zu differs from Q's %zu", K->dims[r - 1], d);
    CHECK(ctx, V->dims[r - 2] == nk, CLATTN_ERROR_SHAPE_MISMATCH,
          "V: %zu rows, expected K's %zu (one value per key)", V->dims[r - 2], nk);
    CHECK(ctx, out->dims[r - 2] == nq && out->dims[r - 1] == dv, CLATTN_ERROR_SHAPE_MISMATCH,
          "%s: shape %s, expected (..., %zu, %zu)", out_name,
          clattn__shape_str(out, s1, sizeof s1), nq, dv);
    CHECK(ctx, !weights || (weights->dims[r - 2] == nq && weights->dims[r - 1] == nk),
          CLATTN_ERROR_SHAPE_MISMATCH, "weights: shape %s, expected (..., %zu, %zu)",
          clattn__shape_str(weights, s1, sizeof s1), nq, nk);
fail:
    return st;
}

clattn_status clattn_dot_product_attention(clattn_context *ctx, const clattn_tensor *Q,
                                           const clattn_tensor *K, const clattn_tensor *V,
                                           const clattn_attention_opts *opts,
                                           const clattn_tensor *out, const clattn_tensor *weights)
{
    clattn_status st = CLATTN_SUCCESS;
    clattn_mask_args m = {0};
    const clattn_dropout_params *drop;
    const clattn_tensor *lse;
    CHECK_DRY_RUN(ctx, clattn_dot_product_attention(ctx, Q, K, V, opts, out, weights));
    CHECK(NULL, ctx, CLATTN_ERROR_INVALID_ARGUMENT, "ctx: NULL context");
    CHECK_ST(check_qkv(ctx, Q, K, V, out, weights, "out"));
    const clattn_arg outs[2] = {{out, "out"}, {weights, "weights"}};
    const clattn_arg ins[3] = {{Q, "Q"}, {K, "K"}, {V, "V"}};
    CHECK_ST(clattn__check_no_overlap(ctx, outs, 2, ins, 3));
    float scale;
    CHECK_ST(clattn__resolve_scale(ctx, opts, Q->dims[Q->ndim - 1], &scale));
    size_t sdims[4];
    memcpy(sdims, Q->dims, sizeof sdims);
    sdims[Q->ndim - 1] = K->dims[K->ndim - 2];
    CHECK_ST(clattn__resolve_opts(ctx, opts, Q->ndim, sdims, ins, 3, outs, 2, &m, &drop, &lse));
    CHECK_ST(clattn__attention_core(ctx, Q, K, V, &m, drop, scale, out, weights, lse));
fail:
    clattn__mask_release(&m);
    return st;
}

/* ---- backward ---- */

/* The unfused backward chain, every intermediate float32 in the ATTN scratch (P and X, each
 * of the scores' size): P = softmax(mask(scale Q K^T + bias)) again; dV = dropout(P)^T dout;
 * X = dropout'(dout V^T), then dS = softmax'(P, X) in place; dbias = dS summed over the bias's
 * broadcast dims; dQ = scale dS K, dK = scale dS^T Q. Grouped query heads are one batch of
 * G * nq rows per K/V head, as in the forward, so dK and dV sum over a K/V head's query heads
 * inside their GEMMs. */
static clattn_status chain_backward(clattn_context *ctx, const clattn_tensor *Q,
                                    const clattn_tensor *K, const clattn_tensor *V,
                                    const clattn_mask_args *m,
                                    const clattn_dropout_params *dropout, float scale,
                                    const clattn_tensor *dout, const clattn_attention_grads *g)
{
    clattn_status st = CLATTN_SUCCESS;
    clattn_tuning tune;
    cl_mem buf;
    size_t nq = Q->dims[Q->ndim - 2], nk = K->dims[K->ndim - 2];
    size_t G = Q->ndim == 4 ? Q->dims[1] / K->dims[1] : 1, n = clattn__batch_count(Q, 2) * nq * nk;
    int drop = clattn__dropout_active(dropout);
    CHECK(ctx, 2 * n <= (size_t)INT32_MAX, CLATTN_ERROR_UNSUPPORTED, "attention backward: the "
          "unfused path's %zu float32 intermediates (probabilities and their gradient) exceed "
          "the kernels' 32-bit indexing", 2 * n);
    CHECK_ST(clattn__scratch(ctx, CLATTN_SCRATCH_ATTN, 2 * n * 4, &buf));
    clattn_tensor P = shaped(buf, 0, Q, nq, nk), X = shaped(buf, n, Q, nq, nk);
    clattn_tensor Qg = grouped(Q, G), Pg = grouped(&P, G), Xg = grouped(&X, G);
    clattn_tensor dOg = grouped(dout, G);
    CHECK_ST(clattn__tune(ctx, "softmax", &tune));
    CHECK_ST(clattn__enqueue_matmul(ctx, &Qg, 0, K, 1, scale, 0.0f, NULL, &Pg));
    CHECK_ST(clattn__enqueue_softmax(ctx, &tune, &P, m, &P, NULL));
    if (g->dV && drop) {
        CHECK_ST(clattn__enqueue_dropout(ctx, P.buf, P.offset, X.buf, X.offset, n, 0, dropout));
        CHECK_ST(clattn__enqueue_matmul(ctx, &Xg, 1, &dOg, 0, 1.0f, 0.0f, NULL, g->dV));
    } else if (g->dV) {
        CHECK_ST(clattn__enqueue_matmul(ctx, &Pg, 1, &dOg, 0, 1.0f, 0.0f, NULL, g->dV));
    }
    if (!g->dQ && !g->dK && !g->dbias)
        return CLATTN_SUCCESS;
    CHECK_ST(clattn__enqueue_matmul(ctx, &dOg, 0, V, 1, 1.0f, 0.0f, NULL, &Xg));
    if (drop)
        CHECK_ST(clattn__enqueue_dropout(ctx, X.buf, X.offset, X.buf, X.offset, n, 0, dropout));
    CHECK_ST(clattn__enqueue_softmax_backward(ctx, &tune, &P, &X, m, &X));
    if (g->dbias)
        CHECK_ST(clattn__enqueue_bias_grad(ctx, &tune, &X, m, g->dbias));
    if (g->dQ) {
        clattn_tensor dQg = grouped(g->dQ, G);
        CHECK_ST(clattn__enqueue_matmul(ctx, &Xg, 0, K, 0, scale, 0.0f, NULL, &dQg));
    }
    if (g->dK)
        CHECK_ST(clattn__enqueue_matmul(ctx, &Xg, 1, &Qg, 0, scale, 0.0f, NULL, g->dK));
fail:
    return st;
}

clattn_status clattn__attention_backward(clattn_context *ctx, const clattn_tensor *Q,
                                         const clattn_tensor *K, const clattn_tensor *V,
                                         const clattn_mask_args *m,
                                         const clattn_dropout_params *dropout, float scale,
                                         const clattn_tensor *out, const clattn_tensor *lse,
                                         const clattn_tensor *dout,
                                         const clattn_attention_grads *g)
{
    clattn_status st = CLATTN_SUCCESS;
    clattn_tuning tune;
    size_t d = Q->dims[Q->ndim - 1], dv = V->dims[V->ndim - 1];
    int G = Q->ndim == 4 ? (int)(Q->dims[1] / K->dims[1]) : 1;
    CHECK_ST(clattn__tune_bucket(ctx, "backward", clattn__head_bucket(d, dv), &tune));
    if (!out || !lse || g->dbias || !clattn__flash_backward_supports(&tune, d, dv))
        return chain_backward(ctx, Q, K, V, m, dropout, scale, dout, g);
    clattn_flash_bwd_ops o;
    memset(&o, 0, sizeof o);
    o.Q = clattn__flash_operand(Q, m->D1);
    o.K = clattn__flash_operand(K, m->D1 / G);
    o.V = clattn__flash_operand(V, m->D1 / G);
    o.out = clattn__flash_operand(out, m->D1);
    o.dout = clattn__flash_operand(dout, m->D1);
    if (g->dQ)
        o.dQ = clattn__flash_operand(g->dQ, m->D1);
    if (g->dK)
        o.dK = clattn__flash_operand(g->dK, m->D1 / G);
    if (g->dV)
        o.dV = clattn__flash_operand(g->dV, m->D1 / G);
    clattn__flash_lse(lse, &o.lse);
    CHECK_ST(clattn__enqueue_flash_backward(ctx, &tune, &o, G, (int)d, (int)dv, m, dropout,
                                            scale));
fail:
    return st;
}

clattn_status clattn_dot_product_attention_backward(clattn_context *ctx, const clattn_tensor *Q,
                                                    const clattn_tensor *K,
                                                    const clattn_tensor *V,
                                                    const clattn_attention_opts *opts,
                                                    const clattn_tensor *out,
                                                    const clattn_tensor *dout,
                                                    const clattn_attention_grads *g)
{
    clattn_status st = CLATTN_SUCCESS;
    clattn_mask_args m = {0};
    const clattn_dropout_params *drop;
    const clattn_tensor *lse;
    CHECK_DRY_RUN(ctx, clattn_dot_product_attention_backward(ctx, Q, K, V, opts, out, dout, g));
    CHECK(NULL, ctx, CLATTN_ERROR_INVALID_ARGUMENT, "ctx: NULL context");
    CHECK(ctx, g, CLATTN_ERROR_INVALID_ARGUMENT, "grads: NULL");
    CHECK_ST(check_qkv(ctx, Q, K, V, dout, NULL, "dout"));
    if (out)
        CHECK_ST(check_qkv(ctx, Q, K, V, out, NULL, "out"));
    const clattn_tensor *f32[5] = {Q, K, V, dout, out};
    const char *f32n[5] = {"Q", "K", "V", "dout", "out"};
    for (int i = 0; i < 5 && f32[i]; i++)
        CHECK_ST(clattn__check_tensor(ctx, f32[i], f32n[i], CLATTN_FLOAT32, 2, 4));
    CHECK_ST(clattn__check_grad(ctx, g->dQ, "grads.dQ", Q, "Q"));
    CHECK_ST(clattn__check_grad(ctx, g->dK, "grads.dK", K, "K"));
    CHECK_ST(clattn__check_grad(ctx, g->dV, "grads.dV", V, "V"));
    CHECK_ST(clattn__check_grad(ctx, g->dbias, "grads.dbias", opts ? opts->bias : NULL,
                                "opts.bias"));
    float scale;
    CHECK_ST(clattn__resolve_scale(ctx, opts, Q->dims[Q->ndim - 1], &scale));
    size_t sdims[4];
    memcpy(sdims, Q->dims, sizeof sdims);
    sdims[Q->ndim - 1] = K->dims[K->ndim - 2];
    const clattn_arg outs[4] = {{g->dQ, "grads.dQ"}, {g->dK, "grads.dK"}, {g->dV, "grads.dV"},
                                {g->dbias, "grads.dbias"}};
    const clattn_arg ins[5] = {{Q, "Q"}, {K, "K"}, {V, "V"}, {out, "out"}, {dout, "dout"}};
    CHECK_ST(clattn__check_no_overlap(ctx, outs, 4, ins, 5));
    CHECK_ST(clattn__resolve_opts(ctx, opts, Q->ndim, sdims, ins, 5, outs, 4, &m, &drop, &lse));
    CHECK_ST(clattn__attention_backward(ctx, Q, K, V, &m, drop, scale, out, lse, dout, g));
fail:
    clattn__mask_release(&m);
    return st;
}
