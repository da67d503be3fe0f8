/* clattn_varlen_attention: packed variable-length batches, one attention launch per sequence on
 * views of the packed tensors (the fused kernels read them in place), so no padding exists to
 * compute. */
#include "attention.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* What every sequence shares: the shapes, the options, and where the optional outputs go. */
typedef struct {
    int B, Hq, Hkv, d, dv;
    const int *cq, *ck;
    float scale;
    clattn_mask mask;                  /* opts.mask (no tensors) */
    const clattn_dropout_params *drop; /* NULL: none */
    const clattn_tensor *lse, *slopes;
    cl_int2 ss; /* the slopes' strides over (B, Hq) */
    clattn_tuning att;
} varlen_plan;

/* cu (B + 1): 0 first, nondecreasing, the rows of `of` last */
static clattn_status check_cu(clattn_context *ctx, const int *cu, int B, size_t total,
                              const char *name, const char *of)
{
    clattn_status st = CLATTN_SUCCESS;
    CHECK(ctx, cu, CLATTN_ERROR_INVALID_ARGUMENT, "%s: NULL", name);
    CHECK(ctx, cu[0] == 0, CLATTN_ERROR_INVALID_ARGUMENT, "%s[0] = %d, expected 0", name, cu[0]);
    for (int b = 0; b < B; b++)
        CHECK(ctx, cu[b + 1] >= cu[b], CLATTN_ERROR_INVALID_ARGUMENT,
              "%s[%d] = %d is below %s[%d] = %d: lengths must be >= 0", name, b + 1, cu[b + 1],
              name, b, cu[b]);
    CHECK(ctx, (size_t)cu[B] == total, CLATTN_ERROR_SHAPE_MISMATCH,
          "%s[%d] = %d, expected %s's %zu rows", name, B, cu[B], of, total);
fail:
    return st;
}

/* t (rows, heads, cols) float32, float16 or bfloat16 */
static clattn_status check_packed(clattn_context *ctx, const clattn_tensor *t, const char *name,
                                  size_t rows, size_t heads, size_t cols, const char *what)
{
    clattn_status st = CLATTN_SUCCESS;
    char s1[96];
    CHECK_ST(clattn__check_float_tensor(ctx, t, name, 3, 3));
    CHECK(ctx, t->dims[0] == rows && t->dims[1] == heads && t->dims[2] == cols,
          CLATTN_ERROR_SHAPE_MISMATCH, "%s: shape %s, expected (%zu, %zu, %zu) (%s)", name,
          clattn__shape_str(t, s1, sizeof s1), rows, heads, cols, what);
fail:
    return st;
}

static clattn_status check_tensors(clattn_context *ctx, const clattn_tensor *Q,
                                   const clattn_tensor *K, const clattn_tensor *V,
                                   const clattn_tensor *out)
{
    clattn_status st = CLATTN_SUCCESS;
    CHECK_ST(clattn__check_float_tensor(ctx, Q, "Q", 3, 3));
    CHECK_ST(clattn__check_float_tensor(ctx, K, "K", 3, 3));
    CHECK_ST(clattn__check_float_tensor(ctx, V, "V", 3, 3)); /* before V->dims is read below */
    CHECK_ST(clattn__check_float_tensor(ctx, out, "out", 3, 3));
    size_t Hq = Q->dims[1], Hkv = K->dims[1];
    CHECK(ctx, Hq % Hkv == 0, CLATTN_ERROR_SHAPE_MISMATCH,
          "K: %zu heads do not divide Q's %zu", Hkv, Hq);
    CHECK_ST(check_packed(ctx, K, "K", K->dims[0], Hkv, Q->dims[2], "Q's head size"));
    CHECK_ST(check_packed(ctx, V, "V", K->dims[0], Hkv, V->dims[2], "K's rows and heads"));
    CHECK_ST(check_packed(ctx, out, "out", Q->dims[0], Hq, V->dims[2],
                          "Q's rows and heads, V's head size"));
    const clattn_tensor *all[4] = {Q, K, V, out};
    for (int i = 0; i < 4; i++) /* the kernels index elements with 32-bit ints */
        CHECK(ctx, all[i]->offset + clattn_tensor_numel(all[i]) <= (size_t)INT32_MAX,
              CLATTN_ERROR_UNSUPPORTED, "%s: %zu elements from offset %zu exceed 32-bit "
              "indexing", i == 3 ? "out" : i == 2 ? "V" : i == 1 ? "K" : "Q",
              clattn_tensor_numel(all[i]), all[i]->offset);
    const clattn_arg outs[1] = {{out, "out"}};
    const clattn_arg ins[3] = {{Q, "Q"}, {K, "K"}, {V, "V"}};
    CHECK_ST(clattn__check_no_overlap(ctx, outs, 1, ins, 3));
fail:
    return st;
}

/* opts: no tensors in the mask, valid mask scalars, no bias, nothing saved; the lse (total_q, Hq)
 * and the slopes ((Hq) or (B, Hq)) overlap no output. */
static clattn_status check_opts(clattn_context *ctx, const clattn_attention_opts *opts,
                                const clattn_tensor *Q, const clattn_tensor *K,
                                const clattn_tensor *V, const clattn_tensor *out, varlen_plan *p)
{
    clattn_status st = CLATTN_SUCCESS;
    char s1[96];
    clattn_mask_args m = {0};
    if (!opts)
        return CLATTN_SUCCESS;
    const clattn_mask *mk = &opts->mask;
    CHECK(ctx, !mk->valid_lens && !mk->valid_lens_host && !mk->mask && !opts->bias,
          CLATTN_ERROR_INVALID_ARGUMENT, "opts: varlen attention takes no valid lengths, mask "
          "tensor or bias (each sequence's keys are its own)");
    CHECK(ctx, !opts->saved, CLATTN_ERROR_INVALID_ARGUMENT,
          "opts.saved: only multi-head attention and its backward take it (NULL here)");
    CHECK_ST(clattn__check_dropout(ctx, &opts->dropout, "opts.dropout"));
    /* the mask's scalars (fill, align, window), checked per sequence again in seq_mask, once
     * here: a batch where no sequence has both rows and keys runs none of those checks */
    size_t one[4] = {1, Q->dims[1], 1, 1};
    CHECK_ST(clattn__resolve_mask_dims(ctx, mk, 4, one, "opts.mask", NULL, 0, &m));
    clattn__mask_release(&m);
    p->mask = *mk;
    p->drop = clattn__dropout_active(&opts->dropout) ? &opts->dropout : NULL;
    p->lse = opts->lse;
    p->slopes = opts->alibi_slopes;
    if (p->lse) {
        CHECK_ST(clattn__check_tensor(ctx, p->lse, "opts.lse", CLATTN_FLOAT32, 2, 2));
        CHECK(ctx, p->lse->dims[0] == Q->dims[0] && p->lse->dims[1] == Q->dims[1],
              CLATTN_ERROR_SHAPE_MISMATCH, "opts.lse: shape %s, expected (%zu, %zu) (Q's rows "
              "and heads)", clattn__shape_str(p->lse, s1, sizeof s1), Q->dims[0], Q->dims[1]);
    }
    if (p->slopes) {
        size_t sd[4] = {(size_t)p->B, Q->dims[1], 1, 1};
        CHECK_ST(clattn__resolve_slopes(ctx, p->slopes, 4, sd, "opts.alibi_slopes", &m));
        p->ss = m.ss;
    }
    const clattn_arg outs[2] = {{out, "out"}, {p->lse, "opts.lse"}};
    const clattn_arg ins[4] = {{Q, "Q"}, {K, "K"}, {V, "V"}, {p->slopes, "opts.alibi_slopes"}};
    CHECK_ST(clattn__check_no_overlap(ctx, outs, 2, ins, 4));
fail:
    return st;
}

/* Sequence b's mask (its own Q_b, K_b), ALiBi slopes and dropout stream. */
static clattn_status seq_mask(clattn_context *ctx, const varlen_plan *p, int b, int nq, int nk,
                              clattn_mask_args *m, clattn_dropout_params *drop)
{
    clattn_status st = CLATTN_SUCCESS;
    size_t sd[4] = {1, (size_t)p->Hq, (size_t)nq, (size_t)nk};
    CHECK_ST(clattn__resolve_mask_dims(ctx, &p->mask, 4, sd, "opts.mask", NULL, 0, m));
    if (p->slopes) {
        m->slopes = p->slopes->buf;
        m->slopes_off = (int)p->slopes->offset + b * p->ss.s[0];
        m->ss.s[0] = 0;
        m->ss.s[1] = p->ss.s[1];
    }
    if (p->drop) {
        *drop = *p->drop;
        drop->offset += (unsigned long long)b;
    }
fail:
    return st;
}

/* The fused kernels on views: row i of head h of sequence b at (cu[b] + i) H + h. */
static clattn_status seq_fused(clattn_context *ctx, const varlen_plan *p, int b,
                               const clattn_tensor *Q, const clattn_tensor *K,
                               const clattn_tensor *V, const clattn_tensor *out,
                               const clattn_mask_args *m, const clattn_dropout_params *drop)
{
    size_t q0 = (size_t)p->cq[b], k0 = (size_t)p->ck[b], Hq = (size_t)p->Hq, Hkv = (size_t)p->Hkv;
    clattn_flash_operand fq = clattn__flash_strided(Q->buf, Q->dtype, Q->offset + q0 * Hq * p->d,
                                                    0, (size_t)p->d, Hq * p->d);
    clattn_flash_operand fk = clattn__flash_strided(K->buf, K->dtype, K->offset + k0 * Hkv * p->d,
                                                    0, (size_t)p->d, Hkv * p->d);
    clattn_flash_operand fv = clattn__flash_strided(V->buf, V->dtype,
                                                    V->offset + k0 * Hkv * p->dv, 0,
                                                    (size_t)p->dv, Hkv * p->dv);
    clattn_flash_operand fo = clattn__flash_strided(out->buf, out->dtype,
                                                    out->offset + q0 * Hq * p->dv, 0,
                                                    (size_t)p->dv, Hq * p->dv);
    clattn_flash_lse fl = {p->lse ? p->lse->buf : NULL,
                           p->lse ? (int)(p->lse->offset + q0 * Hq) : 0, p->Hq};
    return clattn__enqueue_flash(ctx, &p->att, &fq, &fk, &fv, &fo, p->Hq / p->Hkv, p->d, p->dv,
                                 m, drop, p->scale, p->lse ? &fl : NULL);
}

/* The unfused chain (head sizes past the fused kernels', or attention=unfused): the sequence's
 * heads transposed into scratch (1, H, T, .), attention there, the output and LSE back. */
static clattn_status seq_unfused(clattn_context *ctx, const varlen_plan *p, int b, int nq, int nk,
                                 const clattn_tensor *Q, const clattn_tensor *K,
                                 const clattn_tensor *V, const clattn_tensor *out,
                                 const clattn_mask_args *m, const clattn_dropout_params *drop)
{
    clattn_status st = CLATTN_SUCCESS;
    cl_mem buf;
    size_t q0 = (size_t)p->cq[b], k0 = (size_t)p->ck[b], Hq = (size_t)p->Hq, Hkv = (size_t)p->Hkv;
    size_t nqh = Hq * nq, nkh = Hkv * nk;
    size_t oq = 0, ok = oq + nqh * p->d, ov = ok + nkh * p->d, oo = ov + nkh * p->dv;
    size_t ol = oo + nqh * p->dv, total = ol + (p->lse ? nqh : 0);
    /* the transposes and views below take element offsets into the scratch as int */
    CHECK(ctx, total <= (size_t)INT32_MAX, CLATTN_ERROR_UNSUPPORTED,
          "the unfused path's %zu float32 elements of scratch (head sizes %d, %d) exceed "
          "32-bit indexing", total, p->d, p->dv);
    CHECK_ST(clattn__scratch(ctx, CLATTN_SCRATCH_MODULE, total * 4, &buf));
    const clattn_dtype f32 = CLATTN_FLOAT32; /* the scratch: 16-bit operands converted */
    CHECK_ST(clattn__enqueue_heads_typed(ctx, Q->dtype, Q->buf, Q->offset + q0 * Hq * p->d, f32,
                                         buf, oq, 1, nq, p->Hq, p->d, 1));
    CHECK_ST(clattn__enqueue_heads_typed(ctx, K->dtype, K->buf, K->offset + k0 * Hkv * p->d, f32,
                                         buf, ok, 1, nk, p->Hkv, p->d, 1));
    CHECK_ST(clattn__enqueue_heads_typed(ctx, V->dtype, V->buf, V->offset + k0 * Hkv * p->dv,
                                         f32, buf, ov, 1, nk, p->Hkv, p->dv, 1));
    clattn_tensor tq = clattn_view(buf, CLATTN_FLOAT32, oq, 4, (size_t[]){1, Hq, nq, p->d});
    clattn_tensor tk = clattn_view(buf, CLATTN_FLOAT32, ok, 4, (size_t[]){1, Hkv, nk, p->d});
    clattn_tensor tv = clattn_view(buf, CLATTN_FLOAT32, ov, 4, (size_t[]){1, Hkv, nk, p->dv});
    clattn_tensor to = clattn_view(buf, CLATTN_FLOAT32, oo, 4, (size_t[]){1, Hq, nq, p->dv});
    clattn_tensor tl = clattn_view(buf, CLATTN_FLOAT32, ol, 3, (size_t[]){1, Hq, nq});
    CHECK_ST(clattn__attention_core(ctx, &tq, &tk, &tv, m, drop, p->scale, &to, NULL,
                                    p->lse ? &tl : NULL));
    CHECK_ST(clattn__enqueue_heads_typed(ctx, f32, buf, oo, out->dtype, out->buf,
                                         out->offset + q0 * Hq * p->dv, 1, nq, p->Hq, p->dv, 0));
    if (p->lse)
        CHECK_ST(clattn__enqueue_heads(ctx, buf, ol, p->lse->buf, p->lse->offset + q0 * Hq, 1,
                                       nq, p->Hq, 1, 0));
fail:
    return st;
}

/* Sequence b: nothing without queries; zeros and LSE -inf without keys; else attention. */
static clattn_status run_seq(clattn_context *ctx, const varlen_plan *p, int b,
                             const clattn_tensor *Q, const clattn_tensor *K,
                             const clattn_tensor *V, const clattn_tensor *out)
{
    clattn_status st = CLATTN_SUCCESS;
    clattn_mask_args m = {0};
    clattn_dropout_params drop;
    int nq = p->cq[b + 1] - p->cq[b], nk = p->ck[b + 1] - p->ck[b];
    size_t rows = (size_t)nq * (size_t)p->Hq, q0 = (size_t)p->cq[b] * (size_t)p->Hq;
    if (nq == 0)
        return CLATTN_SUCCESS;
    if (nk == 0) { /* the sequence's output rows and LSEs, contiguous */
        size_t no = rows * (size_t)p->dv;
        clattn_tensor o = clattn_view(out->buf, out->dtype, out->offset + q0 * p->dv, 1, &no);
        CHECK_ST(clattn__fill(ctx, &o, 0.0f, "varlen: a sequence without keys"));
        if (p->lse) {
            clattn_tensor l = clattn_view(p->lse->buf, CLATTN_FLOAT32, p->lse->offset + q0, 1,
                                          &rows);
            CHECK_ST(clattn__fill(ctx, &l, -INFINITY, "varlen: a sequence without keys"));
        }
        return CLATTN_SUCCESS;
    }
    CHECK_ST(seq_mask(ctx, p, b, nq, nk, &m, &drop));
    if (clattn__flash_supports(&p->att, (size_t)p->d, (size_t)p->dv))
        CHECK_ST(seq_fused(ctx, p, b, Q, K, V, out, &m, p->drop ? &drop : NULL));
    else
        CHECK_ST(seq_unfused(ctx, p, b, nq, nk, Q, K, V, out, &m, p->drop ? &drop : NULL));
fail:
    if (st != CLATTN_SUCCESS) /* the shared checks below do not know the sequence */
        clattn__prefix_error(ctx, "varlen_attention: sequence %d (%d queries, %d keys): ", b, nq,
                             nk);
    clattn__mask_release(&m);
    return st;
}

clattn_status clattn_varlen_attention(clattn_context *ctx, const clattn_tensor *Q,
                                      const clattn_tensor *K, const clattn_tensor *V,
                                      const clattn_varlen *seqs,
                                      const clattn_attention_opts *opts, const clattn_tensor *out)
{
    clattn_status st = CLATTN_SUCCESS;
    varlen_plan p;
    CHECK_DRY_RUN(ctx, clattn_varlen_attention(ctx, Q, K, V, seqs, opts, out));
    CHECK(NULL, ctx, CLATTN_ERROR_INVALID_ARGUMENT, "ctx: NULL context");
    CHECK(ctx, seqs, CLATTN_ERROR_INVALID_ARGUMENT, "seqs: NULL");
    CHECK(ctx, seqs->batch >= 1, CLATTN_ERROR_INVALID_ARGUMENT, "seqs.batch = %d: must be >= 1",
          seqs->batch);
    CHECK_ST(check_tensors(ctx, Q, K, V, out));
    memset(&p, 0, sizeof p);
    p.B = seqs->batch;
    p.Hq = (int)Q->dims[1];
    p.Hkv = (int)K->dims[1];
    p.d = (int)Q->dims[2];
    p.dv = (int)V->dims[2];
    p.cq = seqs->cu_seqlens_q;
    p.ck = seqs->cu_seqlens_k;
    CHECK_ST(check_cu(ctx, p.cq, p.B, Q->dims[0], "seqs.cu_seqlens_q", "Q"));
    CHECK_ST(check_cu(ctx, p.ck, p.B, K->dims[0], "seqs.cu_seqlens_k", "K"));
    CHECK_ST(check_opts(ctx, opts, Q, K, V, out, &p));
    CHECK_ST(clattn__resolve_scale(ctx, opts, (size_t)p.d, &p.scale));
    CHECK_ST(clattn__tune_bucket(ctx, "attention",
                                 clattn__head_bucket((size_t)p.d, (size_t)p.dv), &p.att));
    for (int b = 0; b < p.B; b++)
        CHECK_ST(run_seq(ctx, &p, b, Q, K, V, out));
fail:
    return st;
}
