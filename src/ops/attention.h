/* Internal entry points shared by the attention modules (arguments already checked). */
#ifndef CLATTN_ATTENTION_H
#define CLATTN_ATTENTION_H
#include "mask.h"

/* dropout.c */
clattn_status clattn__check_dropout(clattn_context *ctx, const clattn_dropout_params *p,
                                    const char *name);
/* 1 when dropout changes anything (training with p > 0). */
int clattn__dropout_active(const clattn_dropout_params *p);
/* y[0..n) = dropout(x[0..n)), stream elements first..first+n. */
clattn_status clattn__enqueue_dropout(clattn_context *ctx, cl_mem x, size_t x_off, cl_mem y,
                                      size_t y_off, size_t n, unsigned long long first,
                                      const clattn_dropout_params *p);
/* The same for x and y of the given dtypes (dtype.cl's codes; float32 arithmetic). */
clattn_status clattn__enqueue_dropout_typed(clattn_context *ctx, cl_mem x, clattn_dtype xt,
                                            size_t x_off, cl_mem y, clattn_dtype yt, size_t y_off,
                                            size_t n, unsigned long long first,
                                            const clattn_dropout_params *p);

/* Philox threshold: an element is kept when 24 random bits are >= round(p * 2^24). */
unsigned clattn__dropout_threshold(float p);

/* flash.c: the fused path for attention with no weights requested. */
int clattn__flash_supports(const clattn_tuning *tune, size_t d, size_t dv);
/* An operand of the fused path: the mask's D0 x D1 batches of (rows, cols) with unit-stride rows;
 * row r of batch (d0, d1) starts at element l = (off, s0, s1, rs): off + d0 s0 + d1 s1 + r rs,
 * in elements of its dtype dt (float32, float16 or bfloat16). */
typedef struct {
    cl_mem buf;
    cl_int4 l;
    clattn_dtype dt;
} clattn_flash_operand;
clattn_flash_operand clattn__flash_strided(cl_mem buf, clattn_dtype dt, size_t off, size_t s0,
                                           size_t s1, size_t rs);
/* A contiguous (..., rows, cols) tensor whose batches split as (D0, D1). */
clattn_flash_operand clattn__flash_operand(const clattn_tensor *t, int D1);
/* Where the fused path writes each row's log-sum-exp: row r of batch (d0, d1) at element off +
 * (d0 D1 + d1) nq + r of buf (rows_apart 0: (.., nq) contiguous), or off + (d0 D1 + d1) + r
 * rows_apart (rows_apart > 0: the heads interleaved, varlen's (total_q, H)). */
typedef struct {
    cl_mem buf;
    int off, rows_apart;
} clattn_flash_lse;
/* The LSE of a contiguous (.., nq) tensor, or NULL for none. */
const clattn_flash_lse *clattn__flash_lse(const clattn_tensor *lse, clattn_flash_lse *out);
/* Everything both variants take after the tensors, in kernel argument order. */
typedef struct {
    int nq, nk, d, dv;
    cl_int G;  /* query heads per K/V head */
    int D1kv;  /* the K/V operands' batches are (D0, D1kv), D1kv = D1 / G */
    size_t nbkv; /* D0 * D1kv */
    float scale;
    cl_int drop;
    cl_uint2 seed, offset;
    cl_uint threshold;
    float dscale;
    cl_mem lse; /* NULL, or the rows' log-sum-exps: row r of batch bb at lse_off + bb s0 + r s1 */
    int lse_off;
    cl_int2 lse_s; /* (s0, s1) */
} clattn_flash_args;

clattn_flash_args clattn__flash_args(const clattn_mask_args *m, int G, int d, int dv, float scale,
                                     const clattn_dropout_params *p, const clattn_flash_lse *lse);
/* Sets the fused kernels' mask and dropout arguments (FLASH_MASK_PARAMS, FLASH_DROP_PARAMS) from
 * index `first` on. */
clattn_status clattn__flash_set_tail(clattn_context *ctx, cl_kernel k, cl_uint first,
                                     const clattn_mask_args *m, const clattn_flash_args *a);
/* out = attention of Q (nq, d), K (nk, d), V (nk, dv) per batch; nq, nk and the batches are m's:
 * Q and out have m's (D0, D1) batches, K and V (D0, D1 / G), G query heads sharing each of their
 * heads (grouped-query attention; G = 1 is plain); lse NULL or where each row's LSE goes. */
clattn_status clattn__enqueue_flash(clattn_context *ctx, const clattn_tuning *tune,
                                    const clattn_flash_operand *Q, const clattn_flash_operand *K,
                                    const clattn_flash_operand *V, const clattn_flash_operand *out,
                                    int G, int d, int dv, const clattn_mask_args *m,
                                    const clattn_dropout_params *dropout, float scale,
                                    const clattn_flash_lse *lse);

/* flash_backward.c: the fused backward (backward=cpu) for head sizes up to 256. */
int clattn__flash_backward_supports(const clattn_tuning *tune, size_t d, size_t dv);
/* Its operands, float32: the forward's Q, K, V, out and lse, dout, and the gradients (dQ, dK, dV
 * each with a NULL buf when not asked for), batches and layouts as clattn__enqueue_flash's. */
typedef struct {
    clattn_flash_operand Q, K, V, out, dout, dQ, dK, dV;
    clattn_flash_lse lse;
} clattn_flash_bwd_ops;
clattn_status clattn__enqueue_flash_backward(clattn_context *ctx, const clattn_tuning *tune,
                                             const clattn_flash_bwd_ops *o, int G, int d, int dv,
                                             const clattn_mask_args *m,
                                             const clattn_dropout_params *dropout, float scale);

/* heads.c: (B, T, H, dh) <-> (B, H, T, dh) between two buffers. */
clattn_status clattn__enqueue_heads(clattn_context *ctx, cl_mem src, size_t s_off, cl_mem dst,
                                    size_t d_off, int B, int T, int H, int dh, int to_heads);
/* The same from src of dtype xt to dst of dtype yt, each element converted when they differ. */
clattn_status clattn__enqueue_heads_typed(clattn_context *ctx, clattn_dtype xt, cl_mem src,
                                          size_t s_off, clattn_dtype yt, cl_mem dst, size_t d_off,
                                          int B, int T, int H, int dh, int to_heads);

/* attention.c: out = dropout(masked_softmax(Q K^T * scale)) V on views with equal leading dims;
 * weights (..., Q, K) or NULL; lse (..., Q) contiguous or NULL. Uses the ATTN scratch slot. */
clattn_status clattn__attention_core(clattn_context *ctx, const clattn_tensor *Q,
                                     const clattn_tensor *K, const clattn_tensor *V,
                                     const clattn_mask_args *mask,
                                     const clattn_dropout_params *dropout, float scale,
                                     const clattn_tensor *out, const clattn_tensor *weights,
                                     const clattn_tensor *lse);
/* attention.c: the gradients of clattn__attention_core's out (no weights) with respect to Q, K,
 * V and the bias (each of g NULL or contiguous float32 of its input's shape) from dout (the ATTN
 * scratch slot). The fused backward when the backward variant is fused, out and lse (contiguous
 * (.., Q)) are the forward's and no dbias is asked for; else the unfused chain (two score-sized
 * buffers). */
clattn_status clattn__attention_backward(clattn_context *ctx, const clattn_tensor *Q,
                                         const clattn_tensor *K, const clattn_tensor *V,
                                         const clattn_mask_args *m,
                                         const clattn_dropout_params *dropout, float scale,
                                         const clattn_tensor *out, const clattn_tensor *lse,
                                         const clattn_tensor *dout,
                                         const clattn_attention_grads *g);
/* queries (B, Q, *), keys (B, K, *), values (B, K, *), out rank 3 (named out_name: "out", or a
 * backward's "dout"): the modules' common checks. */
clattn_status clattn__check_module_inputs(clattn_context *ctx, const clattn_tensor *q,
                                         const clattn_tensor *k, const clattn_tensor *v,
                                         const clattn_tensor *out, const char *out_name);
/* *scale = opts.scale, or 1/sqrt(d) when opts is NULL or its scale 0; fails when not finite. */
clattn_status clattn__resolve_scale(clattn_context *ctx, const clattn_attention_opts *opts,
                                    size_t d, float *scale);
/* For the modules that fix their scale: opts.scale must be 0 (unset); `fixed` says what they use. */
clattn_status clattn__check_no_scale(clattn_context *ctx, const clattn_attention_opts *opts,
                                     const char *fixed);
/* Checks opts' dropout and lse and resolves its mask for scores of the given shape (opts may be
 * NULL); the lse must not overlap ins or outs (at most 4), nor the mask's tensors outs or the lse. *drop is
 * the dropout to apply (NULL for none), *lse opts' lse (NULL for none). Release m with
 * clattn__mask_release. */
clattn_status clattn__resolve_opts(clattn_context *ctx, const clattn_attention_opts *opts,
                                   int score_rank, const size_t *score_dims, const clattn_arg *ins,
                                   int nins, const clattn_arg *outs, int nouts,
                                   clattn_mask_args *m, const clattn_dropout_params **drop,
                                   const clattn_tensor **lse);
#endif
