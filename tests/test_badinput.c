/* Bad input matrix: every public function with bad arguments. Each case asserts the status, a
 * message naming the argument, that nothing was enqueued and that every output is bitwise
 * untouched.
 *
 * Nothing enqueued: this program defines the clEnqueue* functions the library calls, so the
 * library (linked statically) calls these, which count and forward to the driver's. A driver's own
 * bookkeeping (reference counts of pending commands) is not exact enough: PoCL drops references
 * of finished commands late.
 *
 * Add a case: one line in CASES (or CASES_NO_CTX for calls without a context). */
#define _GNU_SOURCE /* RTLD_NEXT */
#include "harness.h"
#include <ctype.h>
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- fixtures: inputs and outputs of every op, small and valid ---- */

static clattn_tensor A, B, C, bias7, S, Y, Q, Kk, V, O, Wt, W4, Hd, X8, wv8, Wq, Wk, wv4, Wlin, Mq,
    Mk, Mv, Mo, lens3, mask_f, mask_i, small_buf, junk;
/* Par: a parent buffer whose sub-buffer (sub, from element al on) holds outputs; hp_A and hp_C:
 * two buffers over one host array (CL_MEM_USE_HOST_PTR), overlapping. */
static clattn_tensor Par, hp_A, hp_C;
static cl_mem sub, foreign;
static size_t al;
static float hp_host[64] __attribute__((aligned(128)));
static clattn_tensor *outputs[] = {&C, &Y, &O, &Wt, &W4, &Hd, &X8, &Par, &hp_C};
#define NOUT (sizeof outputs / sizeof outputs[0])
static float *initial[NOUT];
static cl_context other_cl;
static cl_command_queue other_queue;

/* Tensors with one thing wrong, built in setup from the valid ones. */
static clattn_tensor a_rank1, a_rank5, a_past, a_zero, a_int, a_nobuf, a_huge, a_offset_huge,
    b_small, b44, c_wrong, c_over_a, a3, b3_bad, c3, w_shape, w_rank3, bias_bad, y66, s_wrong,
    s_in_x8, y_overlap, s_scores_int, lens_dev_bad, mask_bad, heads_bad, x8_bad, wt_bad, w4_bad,
    o_bad, q_rank5, k_bad_d, v_bad_rows, wv_bad, wq_bad, mo_bad, ws_bad;
/* Issue 9: overlaps through sub-buffers and masks, other contexts, unknown dtypes, full names. */
static clattn_tensor p_a, sub_c, p_lens, sub_y, y_lens, y_mask, p_mask6, sub_o, sub_w4, p_lens100,
    p_x, sub_y1, p_x8, sub_hd, sub_y66, p_bias6, sub_wt, p_wv8, foreign_a, foreign_i2, foreign_m5,
    a_dtype7, c_dtype7, lens_float2, lens_rank3;
/* Issue 11: grouped-query shapes (4-D Q with 4 heads over K/V views). */
static clattn_tensor q4, k4_h3, v4_h3, k4_h2, v4_h1, k4_b2, v4_b2, o4, q3_h4, k3_h2, v3_h2, o3_h4;
/* Issue 11: LSE outputs (in Y) and merge partials (in S, Kk and A). */
static clattn_tensor lse_y, lse_y8, lse_bad, lse_int, lse_in_o, lse_in_q, y_mask6, merge_out_r1;
static clattn_tensor mparts[2], mlses[2], mparts_bad[2], mlses_bad[2], mlses_in_o[2], mparts_int[2];
/* Issue 11: decoding (Q (2, 2, 1, 8) over caches (2, 1, 6, .), out (2, 2, 1, 3) in O). */
/* the loss: logits (2, 5, 4) and (2, 5, 3) over Q, labels (2, 5), dloss (2); outputs partly
 * over the logits, over dloss, and the loss over its own lse */
static clattn_tensor lg4, lg4_shifted, lg3, lab25, dl2_y, dx_over_dl, loss_y, lse_over_loss;
/* head size 257 (decode takes up to 256): Q and K over big257, one sequence of one key */
static clattn_tensor big257, dq257, dk257, dv257, dlens1, dout257;
static clattn_kv_cache dc257;
static clattn_tensor dq, dq3, dq_65, dk, dv, dk_h3, dlens, dlens3, dlens_f, dout, dkn, dvn, dkn_bad,
    dout_in_k;
static clattn_kv_cache dc, dc_k_only, dc_advance, dc_lens3, dc_lens_f, dc_h3, dc_kn_bad, dc_app;
static clattn_attention_opts dopts_lens, dopts_causal_tl, dopts_drop, dopts_sl_out, dopts_sl_k,
    dopts_lse_out;
static clattn_tensor dsl_out, dsl_k, dlse_out;
/* Issue 11: float biases. */
static clattn_tensor bias_bad, bias_int, bias_in_out, bias_ok;
static clattn_attention_opts opts_bias_bad, opts_bias_int, opts_bias_in_out, opts_bias_ok;
/* Varlen: Q (2 rows, 2 heads, 8) packed from Q's first 32 floats, two sequences. */
static clattn_tensor vq, vk, vk3, vv, vout, vout_in_q, vlse, vlse_bad;
/* Issue 12: 16-bit views (of Y's bytes) for clattn_convert and the float32 ops. */
static clattn_tensor h16, h16_bad, h16_over, b16, i32v, q253;
/* heads, dropout and convert: int32 and 16-bit views, outputs over inputs, a view past its end */
static clattn_tensor x8_i32, hd16, hd_in_x8, y16_over_y, y_past;
static const int cu_ok[3] = {0, 1, 2}, cu_first[3] = {1, 1, 2}, cu_down[3] = {0, 2, 1},
                 cu_short[3] = {0, 1, 1}, cu_rows_first[3] = {0, 2, 2}, cu_keys_last[3] = {0, 0, 2};
static clattn_varlen vs_ok = {2, cu_ok, cu_ok}, vs_first = {2, cu_first, cu_ok},
                     vs_down = {2, cu_ok, cu_down}, vs_short = {2, cu_short, cu_ok},
                     vs_zero = {0, cu_ok, cu_ok}, vs_null = {2, NULL, cu_ok},
                     vs_unpaired = {2, cu_rows_first, cu_keys_last}; /* no rows with keys */
static clattn_attention_opts vopts_lse_bad, vopts_lens, vopts_lse_ok, vopts_saved, vopts_fill_nan,
    vopts_window_bad;
/* ALiBi slopes. */
static clattn_tensor sl_bad, sl_int, sl_rank, sl_in_out, sl_ok, q2, k2, v2, o2;
static clattn_attention_opts opts_sl_bad, opts_sl_int, opts_sl_rank, opts_sl_in_out, opts_sl_ok;

static clattn_tensor mk(int ndim, const size_t *dims, float lo)
{
    size_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= dims[i];
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    h_fill(x, n, lo, lo + 2);
    clattn_tensor t = h_tensor_exact(CLATTN_FLOAT32, ndim, dims, x);
    free(x);
    return t;
}

static clattn_tensor view(const clattn_tensor *t, size_t offset, int ndim, const size_t *dims)
{
    return clattn_view(t->buf, t->dtype, offset, ndim, dims);
}

static clattn_tensor in(cl_mem buf, clattn_dtype dt, size_t offset, int ndim, const size_t *dims)
{
    return clattn_view(buf, dt, offset, ndim, dims);
}

#define F32 CLATTN_FLOAT32
#define I32 CLATTN_INT32

/* Views over Par from element al on overlap views over sub (whose origin is al elements). */
static void make_issue9_views(void)
{
    p_a = in(Par.buf, F32, al, 2, H_DIMS(6, 4));
    sub_c = in(sub, F32, 0, 2, H_DIMS(6, 7));
    p_lens = in(Par.buf, I32, al, 1, H_DIMS(2));
    sub_y = in(sub, F32, 0, 3, H_DIMS(2, 3, 5));
    y_lens = in(Y.buf, I32, 3, 1, H_DIMS(2));
    y_mask = in(Y.buf, I32, 10, 1, H_DIMS(5));
    p_mask6 = in(Par.buf, I32, al + 10, 1, H_DIMS(6));
    sub_o = in(sub, F32, 0, 3, H_DIMS(2, 5, 3));
    sub_w4 = in(sub, F32, 0, 4, H_DIMS(2, 2, 5, 6));
    p_lens100 = in(Par.buf, I32, al + 100, 1, H_DIMS(2));
    p_x = in(Par.buf, F32, al, 3, H_DIMS(2, 3, 5));
    sub_y1 = in(sub, F32, 1, 3, H_DIMS(2, 3, 5));
    p_x8 = in(Par.buf, F32, al, 3, H_DIMS(2, 5, 8));
    sub_hd = in(sub, F32, 0, 3, H_DIMS(4, 5, 4));
    sub_y66 = in(sub, F32, 0, 2, H_DIMS(6, 6));
    p_bias6 = in(Par.buf, F32, al + 30, 1, H_DIMS(6));
    sub_wt = in(sub, F32, 0, 3, H_DIMS(2, 5, 6));
    p_wv8 = in(Par.buf, F32, al + 50, 1, H_DIMS(8));
    foreign_a = in(foreign, F32, 0, 2, H_DIMS(6, 4));
    foreign_i2 = in(foreign, I32, 0, 1, H_DIMS(2));
    foreign_m5 = in(foreign, I32, 0, 1, H_DIMS(5));
    a_dtype7 = A;
    a_dtype7.dtype = (clattn_dtype)7;
    c_dtype7 = C;
    c_dtype7.dtype = (clattn_dtype)7;
    lens_float2 = in(mask_f.buf, F32, 0, 1, H_DIMS(2));
    lens_rank3 = in(lens3.buf, I32, 0, 3, H_DIMS(1, 1, 3));
}

static void make_decode_views(void)
{
    static const int l2[2] = {3, 4};
    dq = view(&Q, 0, 4, H_DIMS(2, 2, 1, 8));
    dq3 = view(&Q, 0, 3, H_DIMS(2, 2, 8));
    dq_65 = view(&Q, 0, 4, H_DIMS(1, 1, 65, 1)); /* 65 new rows: one over the limit */
    dk = view(&Kk, 0, 4, H_DIMS(2, 1, 6, 8));
    dk_h3 = view(&Kk, 0, 4, H_DIMS(2, 3, 2, 8)); /* 3 K/V heads do not divide 2 */
    dv = view(&V, 0, 4, H_DIMS(2, 1, 6, 3));
    dlens = h_tensor_exact(CLATTN_INT32, 1, H_DIMS(2), l2);
    dlens3 = view(&lens3, 0, 1, H_DIMS(3));
    dlens_f = view(&mask_f, 0, 1, H_DIMS(2));
    dlens_f.dtype = CLATTN_FLOAT32;
    dout = view(&O, 0, 4, H_DIMS(2, 2, 1, 3));
    dout_in_k = view(&Kk, 0, 4, H_DIMS(2, 2, 1, 3));
    dkn = view(&A, 0, 4, H_DIMS(2, 1, 1, 8));
    dvn = view(&A, 16, 4, H_DIMS(2, 1, 1, 3));
    dkn_bad = view(&Kk, 0, 4, H_DIMS(2, 1, 2, 8)); /* 2 new rows for Q's 1 */
    static const int lab10[10] = {0, 1, 2, 3, 0, 1, 2, 3, 0, 1};
    lg4 = view(&Q, 0, 3, H_DIMS(2, 5, 4));
    lg4_shifted = view(&Q, 8, 3, H_DIMS(2, 5, 4));
    lg3 = view(&Q, 0, 3, H_DIMS(2, 5, 3));
    lab25 = h_tensor_exact(CLATTN_INT32, 2, H_DIMS(2, 5), lab10);
    dl2_y = view(&Y, 0, 1, H_DIMS(2));
    dx_over_dl = view(&Y, 0, 3, H_DIMS(2, 5, 3));
    loss_y = view(&Y, 0, 1, H_DIMS(2));
    lse_over_loss = view(&Y, 1, 2, H_DIMS(2, 5));
    big257 = mk(1, H_DIMS(257), -1);
    dq257 = view(&big257, 0, 4, H_DIMS(1, 1, 1, 257));
    dk257 = view(&big257, 0, 4, H_DIMS(1, 1, 1, 257));
    dv257 = view(&V, 0, 4, H_DIMS(1, 1, 1, 3));
    dlens1 = view(&dlens, 0, 1, H_DIMS(1));
    dout257 = view(&O, 0, 4, H_DIMS(1, 1, 1, 3));
    clattn_kv_cache c257 = {&dk257, &dv257, &dlens1, NULL, NULL, 0};
    dc257 = c257;
    clattn_kv_cache base = {&dk, &dv, &dlens, NULL, NULL, 0};
    dc = base;
    dc_k_only = base;
    dc_k_only.k_new = &dkn;
    dc_advance = base;
    dc_advance.advance = 1;
    dc_lens3 = base;
    dc_lens3.lens = &dlens3;
    dc_lens_f = base;
    dc_lens_f.lens = &dlens_f;
    dc_h3 = base;
    dc_h3.k_cache = &dk_h3;
    dc_kn_bad = base;
    dc_kn_bad.k_new = &dkn_bad;
    dc_kn_bad.v_new = &dvn;
    dc_app = base;
    dc_app.k_new = &dkn;
    dc_app.v_new = &dvn;
    dopts_lens.mask.valid_lens_host = l2;
    dopts_lens.mask.lens_ndim = 1;
    dopts_lens.mask.lens_dims[0] = 2;
    dopts_causal_tl.mask.causal = 1; /* align left at top-left */
    dsl_out = view(&O, 0, 1, H_DIMS(2)); /* slopes (Hq) over out */
    dopts_sl_out.alibi_slopes = &dsl_out;
    dsl_k = view(&Kk, 0, 1, H_DIMS(2)); /* ... over the cache an append writes */
    dopts_sl_k.alibi_slopes = &dsl_k;
    dlse_out = view(&O, 2, 3, H_DIMS(2, 2, 1)); /* the LSE (B, Hq, Qn) over out */
    dopts_lse_out.lse = &dlse_out;
    dopts_drop.dropout.p = 0.5f;
    dopts_drop.dropout.training = 1;
    bias_bad = view(&S, 0, 2, H_DIMS(5, 5)); /* scores (2, 5, 6) */
    bias_int = view(&S, 0, 1, H_DIMS(6));
    bias_int.dtype = CLATTN_INT32;
    bias_in_out = view(&O, 0, 1, H_DIMS(6));
    bias_ok = view(&S, 0, 1, H_DIMS(6));
    opts_bias_bad.bias = &bias_bad;
    opts_bias_int.bias = &bias_int;
    opts_bias_in_out.bias = &bias_in_out;
    opts_bias_ok.bias = &bias_ok;
    sl_bad = view(&S, 0, 1, H_DIMS(3)); /* scores (2, 5, 6): one leading dim of 2 */
    sl_int = view(&S, 0, 1, H_DIMS(2));
    sl_int.dtype = CLATTN_INT32;
    sl_rank = view(&S, 0, 2, H_DIMS(1, 2));
    sl_in_out = view(&O, 0, 1, H_DIMS(2));
    sl_ok = view(&S, 0, 1, H_DIMS(2));
    opts_sl_bad.alibi_slopes = &sl_bad;
    opts_sl_int.alibi_slopes = &sl_int;
    opts_sl_rank.alibi_slopes = &sl_rank;
    opts_sl_in_out.alibi_slopes = &sl_in_out;
    opts_sl_ok.alibi_slopes = &sl_ok;
    vq = view(&Q, 0, 3, H_DIMS(2, 2, 8));
    vk = view(&Kk, 0, 3, H_DIMS(2, 2, 8));
    vk3 = view(&Kk, 0, 3, H_DIMS(2, 3, 8));
    vv = view(&V, 0, 3, H_DIMS(2, 2, 3));
    vout = view(&O, 0, 3, H_DIMS(2, 2, 3));
    vout_in_q = view(&Q, 0, 3, H_DIMS(2, 2, 3));
    vlse = view(&Y, 0, 2, H_DIMS(2, 2));
    vlse_bad = view(&Y, 0, 2, H_DIMS(2, 1));
    h16 = clattn_view(Y.buf, CLATTN_FLOAT16, 0, 3, H_DIMS(2, 5, 3)); /* Y's first 60 bytes */
    h16_bad = clattn_view(Y.buf, CLATTN_FLOAT16, 0, 3, H_DIMS(2, 3, 5));
    h16_over = clattn_view(Q.buf, CLATTN_FLOAT16, 2, 3, H_DIMS(2, 5, 3)); /* inside Q */
    b16 = clattn_view(Y.buf, CLATTN_BFLOAT16, 0, 3, H_DIMS(2, 5, 3));
    i32v = view(&Y, 0, 3, H_DIMS(2, 5, 3));
    i32v.dtype = CLATTN_INT32;
    q253 = view(&Q, 0, 3, H_DIMS(2, 5, 3));
    x8_i32 = view(&Q, 0, 3, H_DIMS(2, 5, 8));
    x8_i32.dtype = CLATTN_INT32;
    hd16 = clattn_view(Hd.buf, CLATTN_FLOAT16, 0, 3, H_DIMS(4, 5, 4));
    hd_in_x8 = view(&X8, 0, 3, H_DIMS(4, 5, 4));
    y16_over_y = clattn_view(Y.buf, CLATTN_FLOAT16, 0, 3, H_DIMS(2, 3, 5));
    y_past = view(&Y, 20, 3, H_DIMS(2, 3, 5)); /* Y holds 30 floats */
    vopts_lse_bad.lse = &vlse_bad;
    vopts_lse_ok.lse = &vlse;
    vopts_saved.saved = &vlse; /* multi-head attention's only */
    vopts_fill_nan.mask.fill = NAN;
    vopts_window_bad.mask.window = 1;
    vopts_window_bad.mask.window_left = -5;
    vopts_lens.mask.valid_lens_host = cu_ok;
    vopts_lens.mask.lens_ndim = 1;
    vopts_lens.mask.lens_dims[0] = 2;
    q2 = view(&Q, 0, 2, H_DIMS(5, 8));
    k2 = view(&Kk, 0, 2, H_DIMS(6, 8));
    v2 = view(&V, 0, 2, H_DIMS(6, 3));
    o2 = view(&O, 0, 2, H_DIMS(5, 3));
}

static void make_lse_views(void)
{
    lse_y = view(&Y, 0, 2, H_DIMS(2, 5));
    lse_y8 = view(&Y, 8, 2, H_DIMS(2, 5));
    lse_bad = view(&Y, 0, 2, H_DIMS(2, 4));
    lse_int = lse_y;
    lse_int.dtype = CLATTN_INT32;
    lse_in_o = view(&O, 0, 2, H_DIMS(2, 5));
    lse_in_q = view(&Q, 0, 2, H_DIMS(2, 5));
    y_mask6 = in(Y.buf, I32, 12, 1, H_DIMS(6)); /* Y's elements 12..17: under lse_y8 */
    merge_out_r1 = view(&O, 0, 1, H_DIMS(30));
    mparts[0] = view(&S, 0, 3, H_DIMS(2, 5, 3));
    mparts[1] = view(&Kk, 0, 3, H_DIMS(2, 5, 3));
    mlses[0] = view(&A, 0, 2, H_DIMS(2, 5));
    mlses[1] = view(&A, 10, 2, H_DIMS(2, 5));
    mparts_bad[0] = mparts[0];
    mparts_bad[1] = view(&Kk, 0, 3, H_DIMS(2, 5, 2));
    mlses_bad[0] = mlses[0];
    mlses_bad[1] = view(&A, 10, 2, H_DIMS(2, 4));
    mlses_in_o[0] = mlses[0];
    mlses_in_o[1] = view(&O, 20, 2, H_DIMS(2, 5));
    mparts_int[0] = mparts[0];
    mparts_int[0].dtype = CLATTN_INT32;
    mparts_int[1] = mparts[1];
    make_decode_views();
}

static void make_bad_views(void)
{
    a_rank1 = view(&A, 0, 1, H_DIMS(24));
    a_rank5 = A;
    a_rank5.ndim = 5;
    a_past = view(&A, 1, 2, H_DIMS(6, 4));
    a_zero = view(&A, 0, 2, H_DIMS(0, 4));
    a_int = A;
    a_int.dtype = CLATTN_INT32;
    a_nobuf = A;
    a_nobuf.buf = NULL;
    a_huge = view(&A, 0, 2, H_DIMS((size_t)1 << 31, (size_t)1 << 31)); /* overflows int32 and more */
    a_offset_huge = view(&A, SIZE_MAX - 3, 2, H_DIMS(6, 4));          /* offset + n overflows */
    b_small = view(&small_buf, 0, 2, H_DIMS(4, 7)); /* a cl_mem of 20 floats under 28 */
    c_wrong = view(&C, 0, 2, H_DIMS(7, 6));
    b44 = view(&B, 0, 2, H_DIMS(4, 4));
    c_over_a = view(&A, 0, 2, H_DIMS(6, 4)); /* C in A's buffer */
    a3 = view(&C, 0, 3, H_DIMS(2, 3, 4));
    b3_bad = view(&B, 0, 3, H_DIMS(1, 4, 5));
    c3 = view(&S, 0, 3, H_DIMS(2, 3, 5));
    w_shape = view(&B, 0, 2, H_DIMS(4, 7)); /* linear W (out, in) needs in = 4 */
    w_rank3 = view(&B, 0, 3, H_DIMS(1, 7, 4));
    bias_bad = view(&bias7, 0, 1, H_DIMS(6));
    y66 = view(&C, 0, 2, H_DIMS(6, 6));
    s_wrong = view(&C, 0, 3, H_DIMS(2, 5, 3));
    s_in_x8 = view(&X8, 0, 3, H_DIMS(2, 3, 5));
    y_overlap = view(&X8, 1, 3, H_DIMS(2, 3, 5));
    s_scores_int = S;
    s_scores_int.dtype = CLATTN_INT32;
    lens_dev_bad = view(&lens3, 0, 1, H_DIMS(3));
    mask_bad = view(&mask_i, 0, 2, H_DIMS(2, 2)); /* (2, 2) against scores (2, 3, 5) */
    heads_bad = view(&Hd, 0, 3, H_DIMS(4, 5, 3));
    x8_bad = view(&X8, 0, 3, H_DIMS(2, 5, 6)); /* 2 heads of 3, not of 4 */
    wt_bad = view(&Wt, 0, 3, H_DIMS(2, 6, 5));
    w4_bad = view(&W4, 0, 4, H_DIMS(2, 1, 5, 6));
    o_bad = view(&O, 0, 3, H_DIMS(2, 5, 2));
    q_rank5 = Q;
    q_rank5.ndim = 5;
    k_bad_d = view(&Kk, 0, 3, H_DIMS(2, 6, 7));
    v_bad_rows = view(&V, 0, 3, H_DIMS(2, 5, 3));
    wv_bad = view(&wv8, 0, 1, H_DIMS(7));
    wq_bad = view(&Wq, 0, 2, H_DIMS(4, 7));
    mo_bad = view(&Mo, 0, 2, H_DIMS(3, 7));
    ws_bad = view(&Wt, 0, 3, H_DIMS(2, 5, 5));
    q4 = view(&Q, 0, 4, H_DIMS(1, 4, 5, 4));
    k4_h3 = view(&Kk, 0, 4, H_DIMS(1, 3, 6, 4)); /* 3 K/V heads do not divide 4 */
    v4_h3 = view(&V, 0, 4, H_DIMS(1, 3, 6, 2));
    k4_h2 = view(&Kk, 0, 4, H_DIMS(1, 2, 6, 4));
    v4_h1 = view(&V, 0, 4, H_DIMS(1, 1, 6, 2)); /* V's heads differ from K's */
    k4_b2 = view(&Kk, 0, 4, H_DIMS(2, 2, 6, 4)); /* batch 2 against Q's 1 */
    v4_b2 = view(&V, 0, 4, H_DIMS(2, 2, 6, 2));
    o4 = view(&W4, 0, 4, H_DIMS(1, 4, 5, 2));
    q3_h4 = view(&Q, 0, 3, H_DIMS(4, 5, 4)); /* 3-D: leading dims must be equal */
    k3_h2 = view(&Kk, 0, 3, H_DIMS(2, 6, 4));
    v3_h2 = view(&V, 0, 3, H_DIMS(2, 6, 2));
    o3_h4 = view(&W4, 0, 3, H_DIMS(4, 5, 2));
    make_issue9_views();
    make_lse_views();
}

/* ---- argument bundles the cases point at ---- */

static int lens_neg[2] = {-1, 2}, lens_big[2] = {6, 2}, lens_big7[2] = {7, 2}, lens_ok[2] = {1, 5};
static clattn_mask m_neg, m_big, m_shape, m_rank3, m_dev_shape, m_not_broadcast, m_mask_float,
    m_both;
static clattn_dropout_params drop_neg, drop_big, drop_nan, drop_ok;
static clattn_attention_opts opts_drop_bad, opts_lens_big;
static clattn_additive_weights aw, aw_wq_bad, aw_wv_bad;
static clattn_mha_weights mw, mw_heads, mw_wo_bad, mw_bias_bad, mw_zero_heads, mw_kv3, mw_kv1;
static clattn_mask m_lens_p, m_lens_y, m_mask_y, m_fill_nan, m_fill_inf, m_foreign_mask;
/* Issue 11: alignment and sliding-window fields out of range. */
static clattn_mask m_align2, m_window2, m_wleft2, m_wright5;
static clattn_attention_opts opts_align_neg, opts_wleft2, opts_wright_neg;
/* Flags that take 0 or 1 only; a scale where none applies; host-length dims without lengths. */
static clattn_mask m_causal2, m_lens_ndim_only;
static clattn_dropout_params drop_training2;
static clattn_attention_opts opts_scale2;
static clattn_attention_opts opts_lse_bad, opts_lse_int, opts_lse_in_o, opts_lse_in_q,
    opts_lse_mask, opts_lse_y;
static clattn_attention_opts opts_mask_p, opts_lens_p, opts_lens_p100, opts_lens_float,
    opts_mask_float, opts_lens_rank3, opts_fill_nan, opts_fill_inf, opts_foreign_lens;
static clattn_params p_cache_long, p_kernel_long, p_sync2, p_sync_neg2;
static char long_dir[5001];

static clattn_mask host_lens(int *v, int ndim, size_t d0, size_t d1)
{
    clattn_mask m = {0};
    m.valid_lens_host = v;
    m.lens_ndim = ndim;
    m.lens_dims[0] = d0;
    m.lens_dims[1] = d1;
    return m;
}

static void make_issue9_bundles(void)
{
    m_lens_p.valid_lens = &p_lens;
    m_lens_y.valid_lens = &y_lens;
    m_mask_y.mask = &y_mask;
    m_fill_nan.fill = NAN;
    m_align2.align = 2;
    m_window2.window = 2;
    m_causal2.causal = 2;
    m_lens_ndim_only.lens_ndim = 1;
    m_lens_ndim_only.lens_dims[0] = 2;
    drop_training2.p = 0.5f;
    drop_training2.training = 2;
    opts_scale2.scale = 2.0f;
    m_wleft2.window = 1;
    m_wleft2.window_left = -2;
    m_wright5.window = 1;
    m_wright5.window_right = -5;
    opts_align_neg.mask.align = -1;
    opts_wleft2.mask.window = 1;
    opts_wleft2.mask.window_left = -2;
    opts_wright_neg.mask.window = 1;
    opts_wright_neg.mask.window_right = -100;
    m_fill_inf.fill = INFINITY;
    m_foreign_mask.mask = &foreign_m5;
    opts_mask_p.mask.mask = &p_mask6;
    opts_lens_p.mask.valid_lens = &p_lens;
    opts_lens_p100.mask.valid_lens = &p_lens100;
    opts_lens_float.mask.valid_lens = &lens_float2;
    opts_mask_float.mask.mask = &mask_f;
    opts_lens_rank3.mask.valid_lens = &lens_rank3;
    opts_fill_nan.mask.fill = NAN;
    opts_fill_inf.mask.fill = INFINITY;
    opts_foreign_lens.mask.valid_lens = &foreign_i2;
    /* past PATH_MAX (test_settings checks the exact limits) */
    memset(long_dir, 'd', sizeof long_dir - 1);
    memcpy(long_dir, "/tmp/", 5);
    p_cache_long.cache_dir = long_dir;
    p_kernel_long.kernel_dir = long_dir;
    p_sync2.sync = 2;
    p_sync_neg2.sync = -2;
}

static void make_bundles(void)
{
    m_neg = host_lens(lens_neg, 1, 2, 0);
    m_big = host_lens(lens_big, 1, 2, 0);
    m_shape = host_lens(lens_ok, 1, 3, 0);
    m_rank3 = host_lens(lens_ok, 3, 2, 0);
    m_dev_shape.valid_lens = &lens_dev_bad;
    m_not_broadcast.mask = &mask_bad;
    m_mask_float.mask = &mask_f;
    m_both = host_lens(lens_ok, 1, 2, 0);
    m_both.valid_lens = &lens3;
    drop_neg.p = -0.1f;
    drop_neg.training = 1;
    drop_big.p = 1.5f;
    drop_big.training = 1;
    drop_nan.p = NAN;
    drop_nan.training = 1;
    drop_ok.p = 0.5f;
    drop_ok.training = 1;
    opts_drop_bad.dropout = drop_big;
    opts_lens_big.mask = host_lens(lens_big7, 1, 2, 0); /* K = 6 */
    aw.W_q = &Wq;
    aw.W_k = &Wk;
    aw.w_v = &wv4;
    aw_wq_bad = aw;
    aw_wq_bad.W_q = &wq_bad;
    aw_wv_bad = aw;
    aw_wv_bad.w_v = &wv_bad;
    mw.num_heads = 2;
    mw.W_q = &Mq;
    mw.W_k = &Mk;
    mw.W_v = &Mv;
    mw.W_o = &Mo;
    mw_heads = mw;
    mw_heads.num_heads = 3;
    mw_zero_heads = mw;
    mw_zero_heads.num_heads = 0;
    mw_wo_bad = mw;
    mw_wo_bad.W_o = &mo_bad;
    mw_bias_bad = mw;
    mw_bias_bad.b_o = &bias_bad;
    mw_kv3 = mw; /* 3 K/V heads for 2 query heads */
    mw_kv3.num_kv_heads = 3;
    opts_lse_bad.lse = &lse_bad;
    opts_lse_int.lse = &lse_int;
    opts_lse_in_o.lse = &lse_in_o;
    opts_lse_in_q.lse = &lse_in_q;
    opts_lse_mask.lse = &lse_y8;
    opts_lse_mask.mask.mask = &y_mask6;
    opts_lse_y.lse = &lse_y; /* (2, 5): multi-head attention's LSE is (B, H, Q) */
    mw_kv1 = mw; /* 1 K/V head: W_k must have 4 rows, not 8 */
    mw_kv1.num_kv_heads = 1;
    make_issue9_bundles();
}

/* ---- the cases ---- */

static clattn_context *ctx_out;
static float host[64];
static char small_listing[8];

static clattn_status create_with(const char *device, const char *tuning)
{
    clattn_params p = {0};
    p.device = device;
    p.tuning = tuning;
    clattn_status st = clattn_context_create(&ctx_out, &p);
    clattn_context_destroy(&ctx_out);
    return st;
}

static clattn_status create_params(const clattn_params *p)
{
    clattn_status st = clattn_context_create(&ctx_out, p);
    clattn_context_destroy(&ctx_out);
    return st;
}

/* Context creation with one environment variable set. */
static clattn_status create_env(const char *name, const char *value)
{
    setenv(name, value, 1);
    clattn_status st = create_params(NULL);
    unsetenv(name);
    return st;
}

static clattn_status wrap_params(const clattn_params *p)
{
    clattn_status st = clattn_context_wrap(&ctx_out, clattn_context_cl(h_ctx),
                                           clattn_context_device(h_ctx),
                                           clattn_context_queue(h_ctx), p);
    clattn_context_destroy(&ctx_out);
    return st;
}

static clattn_status wrap_with(cl_context c, cl_device_id d, cl_command_queue q)
{
    clattn_status st = clattn_context_wrap(&ctx_out, c, d, q, NULL);
    clattn_context_destroy(&ctx_out);
    return st;
}

#define CTX h_ctx
#define DEV clattn_context_device(h_ctx)
#define CLCTX clattn_context_cl(h_ctx)
#define QUEUE clattn_context_queue(h_ctx)

/* X(name, expected status, text the message must contain, call) */
#define CASES_NO_CTX(X)                                                                          \
    X(varlen_null_ctx, INVALID_ARGUMENT, "ctx", clattn_varlen_attention(NULL, &vq, &vk, &vv,   \
      &vs_ok, NULL, &vout))                                                                    \
    X(merge_null_ctx, INVALID_ARGUMENT, "ctx", clattn_attention_merge(NULL, 2, mparts, mlses,  \
      &O, &lse_y))                                                                             \
    X(create_null_out, INVALID_ARGUMENT, "ctx", clattn_context_create(NULL, NULL))             \
    X(create_no_such_device, DEVICE_NOT_FOUND, "params.device 'nosuchdevice' matches no",     \
      create_with("nosuchdevice", 0))                                                          \
    X(create_bare_number, DEVICE_NOT_FOUND, "params.device '100' is a bare number",            \
      create_with("100", 0))                                                                   \
    X(create_bad_variant, INVALID_ARGUMENT, "warp", create_with(NULL, "matmul=warp"))          \
    X(create_bad_op, INVALID_ARGUMENT, "nosuchop", create_with(NULL, "nosuchop=cpu"))          \
    X(create_bad_param, INVALID_ARGUMENT, "XX", create_with(NULL, "matmul=gpu:XX=3"))          \
    X(create_bad_param_value, INVALID_ARGUMENT, "TSM", create_with(NULL, "matmul=gpu:TSM=-4")) \
    X(wrap_null_out, INVALID_ARGUMENT, "ctx", clattn_context_wrap(NULL, CLCTX, DEV, QUEUE, 0)) \
    X(wrap_null_queue, INVALID_ARGUMENT, "queue", wrap_with(CLCTX, DEV, NULL))                 \
    X(wrap_foreign_queue, INVALID_ARGUMENT, "queue", wrap_with(CLCTX, DEV, other_queue))       \
    X(finish_null, INVALID_ARGUMENT, "ctx", clattn_finish(NULL))                               \
    X(list_no_such_device, DEVICE_NOT_FOUND, "spec 'nosuchdevice' matches no device",         \
      clattn_list_devices("nosuchdevice", small_listing, sizeof small_listing))                \
    X(create_tensor_null_ctx, INVALID_ARGUMENT, "ctx",                                         \
      clattn_tensor_create(NULL, CLATTN_FLOAT32, 1, H_DIMS(4), NULL, &junk))                   \
    X(write_null_ctx, INVALID_ARGUMENT, "ctx", clattn_tensor_write_blocking(NULL, &C, host))   \
    X(matmul_null_ctx, INVALID_ARGUMENT, "ctx", clattn_matmul(NULL, &A, 0, &B, 0, 1, 0, &C))   \
    X(softmax_null_ctx, INVALID_ARGUMENT, "ctx", clattn_masked_softmax(NULL, &S, NULL, &Y))    \
    X(attention_null_ctx, INVALID_ARGUMENT, "ctx",                                             \
      clattn_dot_product_attention(NULL, &Q, &Kk, &V, NULL, &O, NULL))

/* Issue 9: settings cut or misread. */
#define CASES_SETTINGS(X)                                                                        \
    X(create_cache_dir_too_long, INVALID_ARGUMENT, "params.cache_dir", create_params(&p_cache_long)) \
    X(create_kernel_dir_too_long, INVALID_ARGUMENT, "params.kernel_dir",                         \
      create_params(&p_kernel_long))                                                             \
    X(create_env_cache_dir_too_long, INVALID_ARGUMENT, "CLATTN_CACHE_DIR: a directory of",       \
      create_env("CLATTN_CACHE_DIR", long_dir))                                                  \
    X(create_env_kernel_dir_too_long, INVALID_ARGUMENT, "CLATTN_KERNEL_DIR: a directory of",     \
      create_env("CLATTN_KERNEL_DIR", long_dir))                                                 \
    X(create_sync_2, INVALID_ARGUMENT, "params.sync = 2", create_params(&p_sync2))               \
    X(wrap_sync_minus_2, INVALID_ARGUMENT, "params.sync = -2", wrap_params(&p_sync_neg2))        \
    X(create_env_sync_bad, INVALID_ARGUMENT, "CLATTN_SYNC=sometimes",                            \
      create_env("CLATTN_SYNC", "sometimes"))                                                    \
    X(create_device_index_overflow, DEVICE_NOT_FOUND, "'4294967296:0' matches no device",        \
      create_with("4294967296:0", NULL))

/* Issue 9: overlaps through sub-buffers, host pointers and mask tensors; buffers of another
 * context; unknown dtypes; mask fields named by their full path; fills. */
#define CASES_ISSUE9(X)                                                                          \
    X(matmul_c_subbuffer_of_a, INVALID_ARGUMENT, "C: overlaps A", clattn_matmul(CTX, &p_a, 0,   \
      &B, 0, 1, 0, &sub_c))                                                                      \
    X(matmul_c_host_alias_of_a, INVALID_ARGUMENT, "C: overlaps A", clattn_matmul(CTX, &hp_A, 0, \
      &B, 0, 1, 0, &hp_C))                                                                       \
    X(linear_y_subbuffer_over_bias, INVALID_ARGUMENT, "y: overlaps bias", clattn_linear(CTX,     \
      &A, &Wlin, &p_bias6, &sub_y66))                                                            \
    X(softmax_out_subbuffer_over_lens, INVALID_ARGUMENT, "out: overlaps mask.valid_lens",        \
      clattn_masked_softmax(CTX, &S, &m_lens_p, &sub_y))                                         \
    X(softmax_out_over_lens, INVALID_ARGUMENT, "out: overlaps mask.valid_lens",                  \
      clattn_masked_softmax(CTX, &S, &m_lens_y, &Y))                                             \
    X(softmax_out_over_mask, INVALID_ARGUMENT, "out: overlaps mask.mask",                        \
      clattn_masked_softmax(CTX, &S, &m_mask_y, &Y))                                             \
    X(softmax_out_subbuffer_aliases_scores, INVALID_ARGUMENT, "out: overlaps scores",            \
      clattn_masked_softmax(CTX, &p_x, NULL, &sub_y))                                            \
    X(dropout_y_subbuffer_over_x, INVALID_ARGUMENT, "y: overlaps x", clattn_dropout(CTX, &p_x,  \
      &drop_ok, &sub_y1))                                                                        \
    X(dropout_y_subbuffer_aliases_x, INVALID_ARGUMENT, "y: overlaps x", clattn_dropout(CTX,      \
      &p_x, &drop_ok, &sub_y))                                                                   \
    X(heads_out_subbuffer_over_x, INVALID_ARGUMENT, "out: overlaps x", clattn_transpose_qkv(CTX, \
      &p_x8, 2, &sub_hd))                                                                        \
    X(additive_scores_subbuffer_over_wv, INVALID_ARGUMENT, "scores: overlaps w_v",               \
      clattn_additive_scores(CTX, &Q, &Kk, &p_wv8, &sub_wt))                                     \
    X(attention_out_over_mask, INVALID_ARGUMENT, "out: overlaps opts.mask.mask",                 \
      clattn_dot_product_attention(CTX, &Q, &Kk, &V, &opts_mask_p, &sub_o, NULL))                \
    X(additive_out_over_lens, INVALID_ARGUMENT, "out: overlaps opts.mask.valid_lens",            \
      clattn_additive_attention(CTX, &Q, &Kk, &V, &aw, &opts_lens_p, &sub_o, NULL))              \
    X(mha_weights_over_lens, INVALID_ARGUMENT, "weights: overlaps opts.mask.valid_lens",         \
      clattn_multihead_attention(CTX, &Q, &Kk, &V, &mw, &opts_lens_p100, &O, &sub_w4))           \
    X(matmul_foreign_a, INVALID_TENSOR, "A: buffer belongs to another OpenCL context",           \
      clattn_matmul(CTX, &foreign_a, 0, &B, 0, 1, 0, &C))                                        \
    X(read_foreign, INVALID_TENSOR, "tensor: buffer belongs to another",                         \
      clattn_tensor_read_blocking(CTX, &foreign_a, host))                                        \
    X(softmax_foreign_mask, INVALID_TENSOR, "mask.mask: buffer belongs to another",              \
      clattn_masked_softmax(CTX, &S, &m_foreign_mask, &Y))                                       \
    X(attention_foreign_lens, INVALID_TENSOR, "opts.mask.valid_lens: buffer belongs to another", \
      clattn_dot_product_attention(CTX, &Q, &Kk, &V, &opts_foreign_lens, &O, &Wt))              \
    X(read_dtype7, INVALID_TENSOR, "tensor: dtype 7", clattn_tensor_read_blocking(CTX,           \
      &c_dtype7, host))                                                                          \
    X(write_dtype7, INVALID_TENSOR, "tensor: dtype 7", clattn_tensor_write_blocking(CTX,         \
      &c_dtype7, host))                                                                          \
    X(fill_dtype7, INVALID_TENSOR, "tensor: dtype 7", clattn_tensor_fill(CTX, &c_dtype7, 0.0f))  \
    X(matmul_dtype7, INVALID_TENSOR, "A: dtype 7", clattn_matmul(CTX, &a_dtype7, 0, &B, 0, 1, 0, \
      &C))                                                                                       \
    X(attention_lens_dtype_name, INVALID_TENSOR, "opts.mask.valid_lens: dtype",                  \
      clattn_dot_product_attention(CTX, &Q, &Kk, &V, &opts_lens_float, &O, &Wt))                 \
    X(mha_mask_dtype_name, INVALID_TENSOR, "opts.mask.mask: dtype",                              \
      clattn_multihead_attention(CTX, &Q, &Kk, &V, &mw, &opts_mask_float, &O, &W4))              \
    X(additive_lens_rank_name, SHAPE_MISMATCH, "opts.mask.valid_lens: rank 3",                   \
      clattn_additive_attention(CTX, &Q, &Kk, &V, &aw, &opts_lens_rank3, &O, &Wt))               \
    X(softmax_fill_nan, INVALID_ARGUMENT, "mask.fill = nan", clattn_masked_softmax(CTX, &S,      \
      &m_fill_nan, &Y))                                                                          \
    X(softmax_fill_inf, INVALID_ARGUMENT, "mask.fill = inf", clattn_masked_softmax(CTX, &S,      \
      &m_fill_inf, &Y))                                                                          \
    X(attention_fill_nan, INVALID_ARGUMENT, "opts.mask.fill = nan",                              \
      clattn_dot_product_attention(CTX, &Q, &Kk, &V, &opts_fill_nan, &O, NULL))                  \
    X(mha_fill_inf, INVALID_ARGUMENT, "opts.mask.fill = inf", clattn_multihead_attention(CTX,    \
      &Q, &Kk, &V, &mw, &opts_fill_inf, &O, NULL))                                               \
    X(softmax_align2, INVALID_ARGUMENT, "mask.align = 2", clattn_masked_softmax(CTX, &S,         \
      &m_align2, &Y))                                                                            \
    X(softmax_window2, INVALID_ARGUMENT, "mask.window = 2", clattn_masked_softmax(CTX, &S,       \
      &m_window2, &Y))                                                                           \
    X(softmax_window_left_neg, INVALID_ARGUMENT, "mask.window_left = -2",                        \
      clattn_masked_softmax(CTX, &S, &m_wleft2, &Y))                                             \
    X(softmax_window_right_neg, INVALID_ARGUMENT, "window_right = -5",                           \
      clattn_masked_softmax(CTX, &S, &m_wright5, &Y))                                            \
    X(attention_align_neg, INVALID_ARGUMENT, "opts.mask.align = -1",                             \
      clattn_dot_product_attention(CTX, &Q, &Kk, &V, &opts_align_neg, &O, NULL))                 \
    X(attention_window_left_neg, INVALID_ARGUMENT, "opts.mask.window_left = -2",                 \
      clattn_dot_product_attention(CTX, &Q, &Kk, &V, &opts_wleft2, &O, NULL))                    \
    X(mha_window_right_neg, INVALID_ARGUMENT, "window_right = -100",                             \
      clattn_multihead_attention(CTX, &Q, &Kk, &V, &mw, &opts_wright_neg, &O, NULL))             \
    X(additive_window_left_neg, INVALID_ARGUMENT, "opts.mask.window_left = -2",                  \
      clattn_additive_attention(CTX, &Q, &Kk, &V, &aw, &opts_wleft2, &O, &Wt))

#define CASES(X)                                                                                 \
    /* tensor helpers */                                                                         \
    X(create_tensor_null_out, INVALID_ARGUMENT, "out",                                         \
      clattn_tensor_create(CTX, CLATTN_FLOAT32, 1, H_DIMS(4), NULL, NULL))                     \
    X(create_tensor_rank0, SHAPE_MISMATCH, "dims", clattn_tensor_create(CTX, CLATTN_FLOAT32,   \
      0, H_DIMS(4), NULL, &junk))                                                              \
    X(create_tensor_rank5, SHAPE_MISMATCH, "dims", clattn_tensor_create(CTX, CLATTN_FLOAT32,   \
      5, H_DIMS(1, 1, 1, 1, 1), NULL, &junk))                                                  \
    X(create_tensor_null_dims, INVALID_ARGUMENT, "dims: NULL",                                 \
      clattn_tensor_create(CTX, CLATTN_FLOAT32, 2, NULL, NULL, &junk))                         \
    X(create_tensor_dtype, INVALID_ARGUMENT, "dtype",                                          \
      clattn_tensor_create(CTX, (clattn_dtype)7, 1, H_DIMS(4), NULL, &junk))                   \
    X(create_tensor_zero_dim, INVALID_TENSOR, "dims[1]",                                       \
      clattn_tensor_create(CTX, CLATTN_FLOAT32, 2, H_DIMS(4, 0), NULL, &junk))                 \
    X(create_tensor_overflow, INVALID_TENSOR, "dims[", clattn_tensor_create(CTX,               \
      CLATTN_FLOAT32, 3, H_DIMS(1 << 20, 1 << 20, 1 << 20), NULL, &junk))                      \
    X(create_tensor_size_max, INVALID_TENSOR, "dims[0]",                                       \
      clattn_tensor_create(CTX, CLATTN_FLOAT32, 1, H_DIMS(SIZE_MAX), NULL, &junk))             \
    X(write_null_host, INVALID_ARGUMENT, "host", clattn_tensor_write_blocking(CTX, &C, NULL))  \
    X(write_past_end, INVALID_TENSOR, "tensor: view", clattn_tensor_write_blocking(CTX,        \
      &a_past, host))                                                                          \
    X(read_null_tensor, INVALID_ARGUMENT, "tensor", clattn_tensor_read_blocking(CTX, NULL,     \
      host))                                                                                   \
    X(read_small_buffer, INVALID_TENSOR, "tensor: view", clattn_tensor_read_blocking(CTX,      \
      &b_small, host))                                                                         \
    X(fill_int32, INVALID_TENSOR, "dtype", clattn_tensor_fill(CTX, &a_int, 0.0f))              \
    X(fill_no_buffer, INVALID_ARGUMENT, "no buffer", clattn_tensor_fill(CTX, &a_nobuf, 0.0f))  \
    /* matmul */                                                                                 \
    X(matmul_null_a, INVALID_ARGUMENT, "A: NULL", clattn_matmul(CTX, NULL, 0, &B, 0, 1, 0, &C)) \
    X(matmul_null_c, INVALID_ARGUMENT, "C: NULL", clattn_matmul(CTX, &A, 0, &B, 0, 1, 0, NULL)) \
    X(matmul_rank1, SHAPE_MISMATCH, "A: rank 1", clattn_matmul(CTX, &a_rank1, 0, &B, 0, 1, 0, \
      &C))                                                                                     \
    X(matmul_rank5, SHAPE_MISMATCH, "A: rank 5", clattn_matmul(CTX, &a_rank5, 0, &B, 0, 1, 0, \
      &C))                                                                                     \
    X(matmul_inner, SHAPE_MISMATCH, "inner dims", clattn_matmul(CTX, &A, 1, &B, 0, 1, 0, &C))  \
    X(matmul_c_shape, SHAPE_MISMATCH, "C: shape", clattn_matmul(CTX, &A, 0, &B, 0, 1, 0,       \
      &c_wrong))                                                                               \
    X(matmul_batch, SHAPE_MISMATCH, "B: batch dims", clattn_matmul(CTX, &a3, 0, &b3_bad, 0, 1, \
      0, &c3))                                                                                 \
    X(matmul_past_end, INVALID_TENSOR, "A: view", clattn_matmul(CTX, &a_past, 0, &B, 0, 1, 0,  \
      &C))                                                                                     \
    X(matmul_small_buffer, INVALID_TENSOR, "B: view", clattn_matmul(CTX, &A, 0, &b_small, 0,   \
      1, 0, &C))                                                                               \
    X(matmul_dtype, INVALID_TENSOR, "A: dtype", clattn_matmul(CTX, &a_int, 0, &B, 0, 1, 0, &C)) \
    X(matmul_zero_dim, SHAPE_MISMATCH, "A: shape", clattn_matmul(CTX, &a_zero, 0, &B, 0, 1, 0, \
      &C))                                                                                     \
    X(matmul_no_buffer, INVALID_ARGUMENT, "A: tensor has no buffer", clattn_matmul(CTX,        \
      &a_nobuf, 0, &B, 0, 1, 0, &C))                                                           \
    X(matmul_overflow, INVALID_TENSOR, "A: shape", clattn_matmul(CTX, &a_huge, 0, &B, 0, 1, 0, \
      &C))                                                                                     \
    X(matmul_offset_overflow, INVALID_TENSOR, "A: offset", clattn_matmul(CTX, &a_offset_huge,  \
      0, &B, 0, 1, 0, &C))                                                                     \
    X(matmul_c_overlaps_a, INVALID_ARGUMENT, "C: overlaps", clattn_matmul(CTX, &A, 0, &b44, 0,  \
      1, 0, &c_over_a))                                                                        \
    /* linear */                                                                                 \
    X(linear_null_x, INVALID_ARGUMENT, "x: NULL", clattn_linear(CTX, NULL, &B, NULL, &C))      \
    X(linear_w_shape, SHAPE_MISMATCH, "W: shape", clattn_linear(CTX, &A, &w_shape, NULL, &C))  \
    X(linear_w_rank3, SHAPE_MISMATCH, "W: rank 3", clattn_linear(CTX, &A, &w_rank3, NULL, &C)) \
    X(linear_bias, SHAPE_MISMATCH, "bias", clattn_linear(CTX, &A, &Wlin, &bias7, &y66))        \
    X(linear_y_shape, SHAPE_MISMATCH, "y: shape", clattn_linear(CTX, &A, &Wlin, NULL, &C))     \
    /* masked softmax */                                                                         \
    X(softmax_null_scores, INVALID_ARGUMENT, "scores: NULL", clattn_masked_softmax(CTX, NULL,  \
      NULL, &Y))                                                                               \
    X(softmax_scores_dtype, INVALID_TENSOR, "scores: dtype", clattn_masked_softmax(CTX,        \
      &s_scores_int, NULL, &Y))                                                                \
    X(softmax_out_shape, SHAPE_MISMATCH, "out: shape", clattn_masked_softmax(CTX, &S, NULL,    \
      &s_wrong))                                                                               \
    X(softmax_out_overlap, INVALID_ARGUMENT, "out: overlaps", clattn_masked_softmax(CTX,       \
      &s_in_x8, NULL, &y_overlap))                                                             \
    X(softmax_lens_negative, INVALID_ARGUMENT, "valid_lens[0] = -1",                           \
      clattn_masked_softmax(CTX, &S, &m_neg, &Y))                                              \
    X(softmax_lens_above_k, INVALID_ARGUMENT, "valid_lens[0] = 6",                             \
      clattn_masked_softmax(CTX, &S, &m_big, &Y))                                              \
    X(softmax_lens_shape, SHAPE_MISMATCH, "valid_lens: shape",                                 \
      clattn_masked_softmax(CTX, &S, &m_shape, &Y))                                            \
    X(softmax_lens_rank3, SHAPE_MISMATCH, "valid_lens: rank 3",                                \
      clattn_masked_softmax(CTX, &S, &m_rank3, &Y))                                            \
    X(softmax_device_lens_shape, SHAPE_MISMATCH, "valid_lens: shape",                          \
      clattn_masked_softmax(CTX, &S, &m_dev_shape, &Y))                                        \
    X(softmax_mask_broadcast, SHAPE_MISMATCH, "does not broadcast",                            \
      clattn_masked_softmax(CTX, &S, &m_not_broadcast, &Y))                                    \
    X(softmax_mask_dtype, INVALID_TENSOR, "mask.mask: dtype",                                  \
      clattn_masked_softmax(CTX, &S, &m_mask_float, &Y))                                       \
    X(softmax_lens_twice, INVALID_ARGUMENT, "not both", clattn_masked_softmax(CTX, &S,         \
      &m_both, &Y))                                                                            \
    /* heads */                                                                                  \
    X(heads_not_dividing, INVALID_ARGUMENT, "num_heads", clattn_transpose_qkv(CTX, &X8, 3,     \
      &Hd))                                                                                    \
    X(heads_zero, INVALID_ARGUMENT, "num_heads", clattn_transpose_qkv(CTX, &X8, 0, &Hd))       \
    X(heads_out_shape, SHAPE_MISMATCH, "out", clattn_transpose_qkv(CTX, &X8, 2, &heads_bad))   \
    X(heads_back_shape, SHAPE_MISMATCH, "out", clattn_transpose_output(CTX, &Hd, 2, &x8_bad))  \
    X(heads_back_not_dividing, INVALID_ARGUMENT, "num_heads", clattn_transpose_output(CTX,     \
      &Hd, 3, &X8))                                                                            \
    /* dropout */                                                                                \
    X(dropout_null_params, INVALID_ARGUMENT, "p", clattn_dropout(CTX, &S, NULL, &Y))           \
    X(dropout_p_negative, INVALID_ARGUMENT, "p = -0.1", clattn_dropout(CTX, &S, &drop_neg, &Y)) \
    X(dropout_p_above_one, INVALID_ARGUMENT, "p = 1.5", clattn_dropout(CTX, &S, &drop_big, &Y)) \
    X(dropout_p_nan, INVALID_ARGUMENT, "p = nan", clattn_dropout(CTX, &S, &drop_nan, &Y))      \
    X(dropout_training2, INVALID_ARGUMENT, "p.training = 2", clattn_dropout(CTX, &S,           \
      &drop_training2, &Y))                                                                    \
    X(softmax_causal2, INVALID_ARGUMENT, "mask.causal = 2", clattn_masked_softmax(CTX, &S,     \
      &m_causal2, &Y))                                                                         \
    X(softmax_lens_ndim_only, INVALID_ARGUMENT, "mask.lens_ndim = 1 without valid_lens_host",  \
      clattn_masked_softmax(CTX, &S, &m_lens_ndim_only, &Y))                                   \
    X(matmul_trans_a2, INVALID_ARGUMENT, "trans_a = 2", clattn_matmul(CTX, &A, 2, &B, 0, 1, 0, \
      &C))                                                                                     \
    X(matmul_trans_b_neg, INVALID_ARGUMENT, "trans_b = -1", clattn_matmul(CTX, &A, 0, &B, -1,  \
      1, 0, &C))                                                                               \
    X(mha_scale, INVALID_ARGUMENT, "opts.scale = 2: multi-head", clattn_multihead_attention(   \
      CTX, &Q, &Kk, &V, &mw, &opts_scale2, &O, NULL))                                          \
    X(additive_scale, INVALID_ARGUMENT, "opts.scale = 2: additive", clattn_additive_attention( \
      CTX, &Q, &Kk, &V, &aw, &opts_scale2, &O, &Wt))                                           \
    X(dropout_y_shape, SHAPE_MISMATCH, "y", clattn_dropout(CTX, &S, &drop_ok, &s_wrong))       \
    /* additive scores */                                                                        \
    X(additive_wv_size, SHAPE_MISMATCH, "w_v", clattn_additive_scores(CTX, &Q, &Kk, &wv_bad,   \
      &Wt))                                                                                    \
    X(additive_hidden, SHAPE_MISMATCH, "kp", clattn_additive_scores(CTX, &Q, &k_bad_d, &wv8,   \
      &Wt))                                                                                    \
    X(additive_scores_shape, SHAPE_MISMATCH, "scores", clattn_additive_scores(CTX, &Q, &Kk,    \
      &wv8, &wt_bad))                                                                          \
    /* dot-product attention */                                                                  \
    X(attention_d, SHAPE_MISMATCH, "K", clattn_dot_product_attention(CTX, &Q, &k_bad_d, &V,    \
      NULL, &O, NULL))                                                                         \
    X(attention_v_rows, SHAPE_MISMATCH, "V", clattn_dot_product_attention(CTX, &Q, &Kk,        \
      &v_bad_rows, NULL, &O, NULL))                                                            \
    X(attention_out_shape, SHAPE_MISMATCH, "out", clattn_dot_product_attention(CTX, &Q, &Kk,   \
      &V, NULL, &o_bad, NULL))                                                                 \
    X(attention_weights_shape, SHAPE_MISMATCH, "weights", clattn_dot_product_attention(CTX,    \
      &Q, &Kk, &V, NULL, &O, &ws_bad))                                                         \
    X(attention_rank5, SHAPE_MISMATCH, "Q: rank 5", clattn_dot_product_attention(CTX,          \
      &q_rank5, &Kk, &V, NULL, &O, NULL))                                                      \
    X(attention_dropout_p, INVALID_ARGUMENT, "p = 1.5", clattn_dot_product_attention(CTX, &Q,  \
      &Kk, &V, &opts_drop_bad, &O, &Wt))                                                       \
    X(attention_lens_above_k, INVALID_ARGUMENT, "valid_lens[0] = 7",                           \
      clattn_dot_product_attention(CTX, &Q, &Kk, &V, &opts_lens_big, &O, &Wt))                 \
    X(attention_gqa_not_dividing, SHAPE_MISMATCH, "K: shape (1, 3, 6, 4)",                     \
      clattn_dot_product_attention(CTX, &q4, &k4_h3, &v4_h3, NULL, &o4, NULL))                 \
    X(attention_gqa_v_heads, SHAPE_MISMATCH, "V: 1 heads, expected K's 2",                     \
      clattn_dot_product_attention(CTX, &q4, &k4_h2, &v4_h1, NULL, &o4, NULL))                 \
    X(attention_gqa_batch, SHAPE_MISMATCH, "K: shape (2, 2, 6, 4)",                            \
      clattn_dot_product_attention(CTX, &q4, &k4_b2, &v4_b2, NULL, &o4, NULL))                 \
    X(attention_gqa_rank3, SHAPE_MISMATCH, "K: shape (2, 6, 4), expected Q's leading dims",    \
      clattn_dot_product_attention(CTX, &q3_h4, &k3_h2, &v3_h2, NULL, &o3_h4, NULL))           \
    /* additive attention */                                                                     \
    X(additive_att_null_w, INVALID_ARGUMENT, "w", clattn_additive_attention(CTX, &Q, &Kk, &V,  \
      NULL, NULL, &O, &Wt))                                                                    \
    X(additive_att_wq, SHAPE_MISMATCH, "W_q", clattn_additive_attention(CTX, &Q, &Kk, &V,      \
      &aw_wq_bad, NULL, &O, &Wt))                                                              \
    X(additive_att_wv, SHAPE_MISMATCH, "w_v", clattn_additive_attention(CTX, &Q, &Kk, &V,      \
      &aw_wv_bad, NULL, &O, &Wt))                                                              \
    /* multi-head attention */                                                                   \
    X(mha_heads_not_dividing, INVALID_ARGUMENT, "num_heads", clattn_multihead_attention(CTX,   \
      &Q, &Kk, &V, &mw_heads, NULL, &O, &W4))                                                  \
    X(mha_zero_heads, INVALID_ARGUMENT, "num_heads", clattn_multihead_attention(CTX, &Q, &Kk,  \
      &V, &mw_zero_heads, NULL, &O, &W4))                                                      \
    X(mha_wo_shape, SHAPE_MISMATCH, "W_o", clattn_multihead_attention(CTX, &Q, &Kk, &V,        \
      &mw_wo_bad, NULL, &O, &W4))                                                              \
    X(mha_bias_shape, SHAPE_MISMATCH, "b_o", clattn_multihead_attention(CTX, &Q, &Kk, &V,      \
      &mw_bias_bad, NULL, &O, &W4))                                                            \
    X(mha_weights_shape, SHAPE_MISMATCH, "weights", clattn_multihead_attention(CTX, &Q, &Kk,   \
      &V, &mw, NULL, &O, &w4_bad))                                                             \
    X(mha_lens_above_k, INVALID_ARGUMENT, "valid_lens[0] = 7", clattn_multihead_attention(CTX, \
      &Q, &Kk, &V, &mw, &opts_lens_big, &O, &W4))                                              \
    X(mha_kv_heads_not_dividing, INVALID_ARGUMENT, "w.num_kv_heads: 3",                        \
      clattn_multihead_attention(CTX, &Q, &Kk, &V, &mw_kv3, NULL, &O, &W4))                    \
    X(mha_kv_weights_rows, SHAPE_MISMATCH, "w.W_k: shape (8, 8), expected (4, 8)",             \
      clattn_multihead_attention(CTX, &Q, &Kk, &V, &mw_kv1, NULL, &O, &W4))

/* Issue 11, item 4: LSE outputs and clattn_attention_merge. */
#define CASES_LSE(X)                                                                             \
    X(attention_lse_shape, SHAPE_MISMATCH, "opts.lse: shape (2, 4)",                           \
      clattn_dot_product_attention(CTX, &Q, &Kk, &V, &opts_lse_bad, &O, NULL))                 \
    X(attention_lse_int, INVALID_TENSOR, "opts.lse", clattn_dot_product_attention(CTX, &Q,     \
      &Kk, &V, &opts_lse_int, &O, NULL))                                                       \
    X(attention_lse_over_out, INVALID_ARGUMENT, "opts.lse: overlaps out",                      \
      clattn_dot_product_attention(CTX, &Q, &Kk, &V, &opts_lse_in_o, &O, NULL))                \
    X(attention_lse_over_q, INVALID_ARGUMENT, "opts.lse: overlaps Q",                          \
      clattn_dot_product_attention(CTX, &Q, &Kk, &V, &opts_lse_in_q, &O, &Wt))                 \
    X(attention_lse_over_mask, INVALID_ARGUMENT, "opts.lse",                                   \
      clattn_dot_product_attention(CTX, &Q, &Kk, &V, &opts_lse_mask, &O, NULL))                \
    X(additive_lse_over_q, INVALID_ARGUMENT, "opts.lse: overlaps queries",                     \
      clattn_additive_attention(CTX, &Q, &Kk, &V, &aw, &opts_lse_in_q, &O, NULL))              \
    X(mha_lse_shape, SHAPE_MISMATCH, "opts.lse: shape (2, 5)", clattn_multihead_attention(CTX, \
      &Q, &Kk, &V, &mw, &opts_lse_y, &O, NULL))                                                \
    X(merge_n0, INVALID_ARGUMENT, "n: 0", clattn_attention_merge(CTX, 0, mparts, mlses, &O,    \
      &lse_y))                                                                                 \
    X(merge_null_outs, INVALID_ARGUMENT, "outs: NULL", clattn_attention_merge(CTX, 2, NULL,    \
      mlses, &O, &lse_y))                                                                      \
    X(merge_part_shape, SHAPE_MISMATCH, "outs[1]: shape (2, 5, 2)",                            \
      clattn_attention_merge(CTX, 2, mparts_bad, mlses, &O, &lse_y))                           \
    X(merge_part_lse_shape, SHAPE_MISMATCH, "lses[1]: shape (2, 4)",                           \
      clattn_attention_merge(CTX, 2, mparts, mlses_bad, &O, &lse_y))                           \
    X(merge_part_int, INVALID_TENSOR, "outs[0]", clattn_attention_merge(CTX, 2, mparts_int,    \
      mlses, &O, &lse_y))                                                                      \
    X(merge_lse_shape, SHAPE_MISMATCH, "lse: shape (2, 4)", clattn_attention_merge(CTX, 2,     \
      mparts, mlses, &O, &lse_bad))                                                            \
    X(merge_out_rank1, SHAPE_MISMATCH, "out", clattn_attention_merge(CTX, 1, mparts, mlses,    \
      &merge_out_r1, NULL))                                                                    \
    X(merge_out_over_part, INVALID_ARGUMENT, "out: overlaps lses[1]",                          \
      clattn_attention_merge(CTX, 2, mparts, mlses_in_o, &O, &lse_y))                          \
    X(merge_lse_over_out, INVALID_ARGUMENT, "out: overlaps lse", clattn_attention_merge(CTX,   \
      2, mparts, mlses, &O, &lse_in_o))                                                        \
    X(decode_head_257, UNSUPPORTED, "Q, cache.v_cache: head sizes 257, 3, at most 256",        \
      clattn_decode_attention(CTX, &dq257, &dc257, NULL, &dout257))                           \
    X(decode_q_rank3, SHAPE_MISMATCH, "Q: rank 3", clattn_decode_attention(CTX, &dq3, &dc,     \
      NULL, &dout))                                                                            \
    X(decode_null_cache, INVALID_ARGUMENT, "cache: NULL", clattn_decode_attention(CTX, &dq,    \
      NULL, NULL, &dout))                                                                      \
    X(decode_kv_heads, SHAPE_MISMATCH, "3 K/V heads do not divide", clattn_decode_attention(   \
      CTX, &dq, &dc_h3, NULL, &dout))                                                          \
    X(decode_lens_shape, SHAPE_MISMATCH, "cache.lens: shape (3)", clattn_decode_attention(CTX, \
      &dq, &dc_lens3, NULL, &dout))                                                            \
    X(decode_lens_float, INVALID_TENSOR, "cache.lens", clattn_decode_attention(CTX, &dq,       \
      &dc_lens_f, NULL, &dout))                                                                \
    X(decode_k_new_only, INVALID_ARGUMENT, "both or neither", clattn_decode_attention(CTX,     \
      &dq, &dc_k_only, NULL, &dout))                                                           \
    X(decode_advance_alone, INVALID_ARGUMENT, "cache.advance = 1", clattn_decode_attention(    \
      CTX, &dq, &dc_advance, NULL, &dout))                                                     \
    X(decode_new_rows, SHAPE_MISMATCH, "cache.k_new: shape (2, 1, 2, 8)",                      \
      clattn_decode_attention(CTX, &dq, &dc_kn_bad, NULL, &dout))                              \
    X(decode_too_many_rows, UNSUPPORTED, "at most 64", clattn_decode_attention(CTX, &dq_65,    \
      &dc, NULL, &dout))                                                                       \
    X(decode_mask_lens, INVALID_ARGUMENT, "no valid lengths", clattn_decode_attention(CTX,     \
      &dq, &dc, &dopts_lens, &dout))                                                           \
    X(decode_causal_top_left, INVALID_ARGUMENT, "CLATTN_ALIGN_BOTTOM_RIGHT",                   \
      clattn_decode_attention(CTX, &dq, &dc, &dopts_causal_tl, &dout))                         \
    X(decode_dropout, INVALID_ARGUMENT, "opts.dropout", clattn_decode_attention(CTX, &dq, &dc, \
      &dopts_drop, &dout))                                                                     \
    X(decode_out_over_cache, INVALID_ARGUMENT, "out: overlaps cache.k_cache",                  \
      clattn_decode_attention(CTX, &dq, &dc_app, NULL, &dout_in_k))                            \
    X(decode_lse_shape, SHAPE_MISMATCH, "opts.lse", clattn_decode_attention(CTX, &dq, &dc,     \
      &opts_lse_bad, &dout))                                                                   \
    X(attention_bias_shape, SHAPE_MISMATCH, "opts.bias: shape (5, 5) does not broadcast",      \
      clattn_dot_product_attention(CTX, &Q, &Kk, &V, &opts_bias_bad, &O, NULL))                \
    X(attention_bias_int, INVALID_TENSOR, "opts.bias", clattn_dot_product_attention(CTX, &Q,   \
      &Kk, &V, &opts_bias_int, &O, &Wt))                                                       \
    X(attention_bias_in_out, INVALID_ARGUMENT, "out: overlaps opts.bias",                      \
      clattn_dot_product_attention(CTX, &Q, &Kk, &V, &opts_bias_in_out, &O, NULL))             \
    X(decode_bias, INVALID_ARGUMENT, "opts.bias: decoding", clattn_decode_attention(CTX, &dq,  \
      &dc, &opts_bias_ok, &dout))                                                              \
    X(attention_alibi_shape, SHAPE_MISMATCH, "opts.alibi_slopes: shape (3) does not broadcast", \
      clattn_dot_product_attention(CTX, &Q, &Kk, &V, &opts_sl_bad, &O, NULL))                  \
    X(attention_alibi_int, INVALID_TENSOR, "opts.alibi_slopes", clattn_dot_product_attention(   \
      CTX, &Q, &Kk, &V, &opts_sl_int, &O, &Wt))                                                \
    X(attention_alibi_rank, SHAPE_MISMATCH, "opts.alibi_slopes: shape (1, 2) has more dims",   \
      clattn_dot_product_attention(CTX, &Q, &Kk, &V, &opts_sl_rank, &O, NULL))                 \
    X(attention_alibi_in_out, INVALID_ARGUMENT, "out: overlaps opts.alibi_slopes",             \
      clattn_dot_product_attention(CTX, &Q, &Kk, &V, &opts_sl_in_out, &O, NULL))               \
    X(attention_alibi_no_heads, SHAPE_MISMATCH, "opts.alibi_slopes: scores of rank 2",         \
      clattn_dot_product_attention(CTX, &q2, &k2, &v2, &opts_sl_ok, &o2, NULL))                \
    X(decode_alibi_shape, SHAPE_MISMATCH, "opts.alibi_slopes", clattn_decode_attention(CTX,    \
      &dq, &dc, &opts_sl_bad, &dout))                                                          \
    X(decode_alibi_in_out, INVALID_ARGUMENT, "out: overlaps opts.alibi_slopes",                \
      clattn_decode_attention(CTX, &dq, &dc, &dopts_sl_out, &dout))                            \
    X(decode_alibi_in_cache, INVALID_ARGUMENT, "cache.k_cache: overlaps opts.alibi_slopes",    \
      clattn_decode_attention(CTX, &dq, &dc_app, &dopts_sl_k, &dout))                          \
    X(decode_lse_in_out, INVALID_ARGUMENT, "opts.lse: overlaps out",                           \
      clattn_decode_attention(CTX, &dq, &dc, &dopts_lse_out, &dout))                           \
    X(varlen_cu_first, INVALID_ARGUMENT, "seqs.cu_seqlens_q[0] = 1", clattn_varlen_attention(  \
      CTX, &vq, &vk, &vv, &vs_first, NULL, &vout))                                             \
    X(varlen_cu_down, INVALID_ARGUMENT, "seqs.cu_seqlens_k[2] = 1 is below",                   \
      clattn_varlen_attention(CTX, &vq, &vk, &vv, &vs_down, NULL, &vout))                      \
    X(varlen_cu_short, SHAPE_MISMATCH, "seqs.cu_seqlens_q[2] = 1, expected Q's 2 rows",        \
      clattn_varlen_attention(CTX, &vq, &vk, &vv, &vs_short, NULL, &vout))                     \
    X(varlen_batch, INVALID_ARGUMENT, "seqs.batch = 0", clattn_varlen_attention(CTX, &vq, &vk, \
      &vv, &vs_zero, NULL, &vout))                                                             \
    X(varlen_cu_null, INVALID_ARGUMENT, "seqs.cu_seqlens_q: NULL", clattn_varlen_attention(    \
      CTX, &vq, &vk, &vv, &vs_null, NULL, &vout))                                              \
    X(varlen_heads, SHAPE_MISMATCH, "K: 3 heads do not divide Q's 2", clattn_varlen_attention( \
      CTX, &vq, &vk3, &vv, &vs_ok, NULL, &vout))                                               \
    X(varlen_out_in_q, INVALID_ARGUMENT, "out: overlaps Q", clattn_varlen_attention(CTX, &vq,  \
      &vk, &vv, &vs_ok, NULL, &vout_in_q))                                                     \
    X(varlen_lse_shape, SHAPE_MISMATCH, "opts.lse: shape (2, 1), expected (2, 2)",             \
      clattn_varlen_attention(CTX, &vq, &vk, &vv, &vs_ok, &vopts_lse_bad, &vout))              \
    X(varlen_lens, INVALID_ARGUMENT, "no valid lengths", clattn_varlen_attention(CTX, &vq,     \
      &vk, &vv, &vs_ok, &vopts_lens, &vout))                                                   \
    X(varlen_bias, INVALID_ARGUMENT, "or bias", clattn_varlen_attention(CTX, &vq, &vk, &vv,    \
      &vs_ok, &opts_bias_ok, &vout))                                                           \
    X(varlen_alibi, SHAPE_MISMATCH, "opts.alibi_slopes", clattn_varlen_attention(CTX, &vq,     \
      &vk, &vv, &vs_ok, &opts_sl_bad, &vout))                                                  \
    X(varlen_null_v, INVALID_ARGUMENT, "V: NULL", clattn_varlen_attention(CTX, &vq, &vk, NULL, \
      &vs_ok, NULL, &vout))                                                                    \
    X(varlen_null_out, INVALID_ARGUMENT, "out: NULL", clattn_varlen_attention(CTX, &vq, &vk,   \
      &vv, &vs_ok, NULL, NULL))                                                                \
    X(varlen_fill_unpaired, INVALID_ARGUMENT, "opts.mask.fill = nan",                          \
      clattn_varlen_attention(CTX, &vq, &vk, &vv, &vs_unpaired, &vopts_fill_nan, &vout))       \
    X(varlen_window_unpaired, INVALID_ARGUMENT, "opts.mask.window_left = -5",                  \
      clattn_varlen_attention(CTX, &vq, &vk, &vv, &vs_unpaired, &vopts_window_bad, &vout))     \
    X(varlen_saved, INVALID_ARGUMENT, "opts.saved: only multi-head attention",                 \
      clattn_varlen_attention(CTX, &vq, &vk, &vv, &vs_ok, &vopts_saved, &vout))                \
    X(convert_int32, INVALID_TENSOR, "x: dtype int32, expected float32, float16 or bfloat16",  \
      clattn_convert(CTX, &i32v, &h16))                                                        \
    X(convert_shape, SHAPE_MISMATCH, "y: shape (2, 3, 5), expected x's (2, 5, 3)",             \
      clattn_convert(CTX, &O, &h16_bad))                                                       \
    X(convert_overlap, INVALID_ARGUMENT, "y: overlaps x", clattn_convert(CTX, &q253, &h16_over)) \
    X(convert_y_int32, INVALID_TENSOR, "y: dtype int32", clattn_convert(CTX, &b16, &i32v))     \
    X(convert_null_x, INVALID_ARGUMENT, "x: NULL", clattn_convert(CTX, NULL, &h16))             \
    X(convert_null_y, INVALID_ARGUMENT, "y: NULL", clattn_convert(CTX, &b16, NULL))             \
    X(convert_y_past_end, INVALID_TENSOR, "y: view of 30 elements at offset 20",               \
      clattn_convert(CTX, &S, &y_past))                                                        \
    X(heads_null_x, INVALID_ARGUMENT, "x: NULL", clattn_transpose_qkv(CTX, NULL, 2, &Hd))       \
    X(heads_null_out, INVALID_ARGUMENT, "out: NULL", clattn_transpose_qkv(CTX, &X8, 2, NULL))   \
    X(heads_int32, INVALID_TENSOR, "x: dtype int32", clattn_transpose_qkv(CTX, &x8_i32, 2,     \
      &Hd))                                                                                    \
    X(heads_dtype_mix, INVALID_TENSOR, "out: dtype float16, expected float32",                 \
      clattn_transpose_qkv(CTX, &X8, 2, &hd16))                                                \
    X(heads_out_over_x, INVALID_ARGUMENT, "out: overlaps x", clattn_transpose_qkv(CTX, &X8, 2, \
      &hd_in_x8))                                                                              \
    X(dropout_null_x, INVALID_ARGUMENT, "x: NULL", clattn_dropout(CTX, NULL, &drop_ok, &Y))    \
    X(dropout_null_y, INVALID_ARGUMENT, "y: NULL", clattn_dropout(CTX, &S, &drop_ok, NULL))    \
    X(dropout_int32, INVALID_TENSOR, "x: dtype int32", clattn_dropout(CTX, &i32v, &drop_ok,    \
      &Y))                                                                                     \
    X(dropout_in_place_dtype, INVALID_ARGUMENT, "y: overlaps x", clattn_dropout(CTX, &Y,       \
      &drop_ok, &y16_over_y))                                                                  \
    X(attention_q_int32, INVALID_TENSOR, "Q: dtype int32, expected float32, float16 or "        \
      "bfloat16", clattn_dot_product_attention(CTX, &i32v, &Kk, &V, NULL, &O, NULL))            \
    /* training: backward passes, the loss, the SGD update */                                 \
    X(softmax_bwd_shape, SHAPE_MISMATCH, "dscores: shape (6, 7), expected out's shape",        \
      clattn_masked_softmax_backward(CTX, &S, &S, NULL, &C))                                   \
    X(softmax_bwd_int, INVALID_TENSOR, "out", clattn_masked_softmax_backward(CTX, &a_int, &S,  \
      NULL, &Y))                                                                               \
    X(dropout_bwd_p, INVALID_ARGUMENT, "p.p = 1.5", clattn_dropout_backward(CTX, &S,           \
      &(clattn_dropout_params){1.5f, 1, 0, 0}, &Y))                                            \
    X(matmul_bwd_da, SHAPE_MISMATCH, "dA: shape (6, 7), expected the shape of A, (6, 4)",     \
      clattn_matmul_backward(CTX, &A, 0, &B, 0, 1, &C, &C, NULL))                              \
    X(matmul_bwd_dc, SHAPE_MISMATCH, "dC: shape (2, 3, 5)", clattn_matmul_backward(CTX, &A, 0, \
      &B, 0, 1, &Y, NULL, &C))                                                                 \
    X(linear_bwd_dy, SHAPE_MISMATCH, "dy: shape (6, 7), expected x's leading dims and 6",      \
      clattn_linear_backward(CTX, &A, &Wlin, &C, &C, NULL, NULL))                              \
    X(linear_bwd_dx, SHAPE_MISMATCH, "W: shape (6, 4), expected (out_features, 8)",           \
      clattn_linear_backward(CTX, &Q, &Wlin, &O, &X8, NULL, NULL))                             \
    X(attention_bwd_null, INVALID_ARGUMENT, "grads: NULL",                                     \
      clattn_dot_product_attention_backward(CTX, &Q, &Kk, &V, NULL, NULL, &O, NULL))           \
    X(attention_bwd_dq, SHAPE_MISMATCH, "grads.dQ: shape (2, 3, 5), expected the shape of Q",  \
      clattn_dot_product_attention_backward(CTX, &Q, &Kk, &V, NULL, NULL, &O,                  \
      &(clattn_attention_grads){&Y, NULL, NULL, NULL}))                                        \
    X(attention_bwd_dout, SHAPE_MISMATCH, "dout", clattn_dot_product_attention_backward(CTX,   \
      &Q, &Kk, &V, NULL, NULL, &Y, &(clattn_attention_grads){&X8, NULL, NULL, NULL}))          \
    X(mha_bwd_dq, SHAPE_MISMATCH, "grads.dqueries: shape (2, 3, 5), expected the shape of "   \
      "queries",                                                                               \
      clattn_multihead_attention_backward(CTX, &Q, &Kk, &V, &mw, NULL, &O,                     \
      &(clattn_mha_grads){&Y, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,      \
      NULL}))                                                                                  \
    X(additive_bwd_dv, SHAPE_MISMATCH, "grads.dvalues: shape (2, 3, 5), expected the shape "  \
      "of values",                                                                             \
      clattn_additive_attention_backward(CTX, &Q, &Kk, &V, &aw, NULL, &O,                      \
      &(clattn_additive_grads){NULL, NULL, &Y, NULL, NULL, NULL}))                             \
    X(additive_scores_bwd_ds, SHAPE_MISMATCH, "dscores", clattn_additive_scores_backward(CTX,  \
      &Q, &Kk, &wv8, &wt_bad, &X8, NULL, NULL))                                                \
    X(additive_scores_bwd_dkp, SHAPE_MISMATCH, "dkp: shape (2, 5, 8), expected the shape of " \
      "kp", clattn_additive_scores_backward(CTX, &Q, &Kk, &wv8, &Wt, NULL, &X8, NULL))          \
    X(additive_scores_bwd_over, INVALID_ARGUMENT, "dqp", clattn_additive_scores_backward(CTX, \
      &Q, &Kk, &wv8, &Wt, &Q, NULL, NULL))                                                     \
    X(loss_labels, SHAPE_MISMATCH, "labels: shape (2, 2), expected (B, T) of logits",          \
      clattn_masked_softmax_ce_loss(CTX, &Q, &mask_i, NULL, &Y, NULL))                         \
    X(loss_bwd_dlogits, SHAPE_MISMATCH, "labels", clattn_masked_softmax_ce_loss_backward(CTX, \
      &Q, &mask_i, NULL, NULL, &Y, &X8))                                                       \
    X(loss_bwd_dlogits_part_over, INVALID_ARGUMENT, "dlogits: overlaps logits without being",  \
      clattn_masked_softmax_ce_loss_backward(CTX, &lg4, &lab25, NULL, NULL, &dl2_y,            \
                                             &lg4_shifted))                                    \
    X(loss_bwd_dlogits_over_dloss, INVALID_ARGUMENT, "dlogits: overlaps dloss",                \
      clattn_masked_softmax_ce_loss_backward(CTX, &lg3, &lab25, NULL, NULL, &dl2_y,            \
                                             &dx_over_dl))                                     \
    X(loss_over_lse, INVALID_ARGUMENT, "overlaps", clattn_masked_softmax_ce_loss(CTX, &lg4,    \
      &lab25, NULL, &loss_y, &lse_over_loss))                                                  \
    X(axpy_shape, SHAPE_MISMATCH, "y: shape (6, 7), expected x's shape (2, 3, 5)",             \
      clattn_axpy(CTX, 1, &S, &C))                                                             \
    X(merge_out_float16, INVALID_TENSOR, "out: dtype float16, expected float32",               \
      clattn_attention_merge(CTX, 2, mparts, mlses, &h16, &lse_y))

typedef struct {
    const char *name;
    clattn_status want;
    const char *needle;
    int has_ctx; /* 0: the message is the thread's (clattn_last_error(NULL)) */
    clattn_status (*call)(void);
} bad_case;

#define DEFINE(id, st, needle, ...) \
    static clattn_status id(void) { return __VA_ARGS__; }
CASES_NO_CTX(DEFINE)
CASES_SETTINGS(DEFINE)
CASES(DEFINE)
CASES_ISSUE9(DEFINE)
CASES_LSE(DEFINE)
#define ENTRY_NO_CTX(id, st, needle, ...) {#id, CLATTN_ERROR_##st, needle, 0, id},
#define ENTRY(id, st, needle, ...) {#id, CLATTN_ERROR_##st, needle, 1, id},
static const bad_case cases[] = {CASES_NO_CTX(ENTRY_NO_CTX) CASES_SETTINGS(ENTRY_NO_CTX)
                                     CASES(ENTRY) CASES_ISSUE9(ENTRY) CASES_LSE(ENTRY)};
#define NCASES (sizeof cases / sizeof cases[0])
#define CLATTN_ERR_SIZE_FOR_TEST 16384

/* ---- the checks ---- */

/* ---- counting enqueues ---- */

static int enqueues;

#define FORWARD(fn, ...)                                           \
    static __typeof__(&fn) real;                                   \
    enqueues++;                                                    \
    if (!real)                                                     \
        *(void **)&real = dlsym(RTLD_NEXT, #fn);                   \
    return real ? real(__VA_ARGS__) : CL_INVALID_OPERATION

CL_API_ENTRY cl_int CL_API_CALL clEnqueueNDRangeKernel(cl_command_queue q, cl_kernel k,
                                                       cl_uint dims, const size_t *off,
                                                       const size_t *gws, const size_t *lws,
                                                       cl_uint n, const cl_event *wait,
                                                       cl_event *ev)
{
    FORWARD(clEnqueueNDRangeKernel, q, k, dims, off, gws, lws, n, wait, ev);
}

CL_API_ENTRY cl_int CL_API_CALL clEnqueueReadBuffer(cl_command_queue q, cl_mem b, cl_bool block,
                                                    size_t off, size_t size, void *p, cl_uint n,
                                                    const cl_event *wait, cl_event *ev)
{
    FORWARD(clEnqueueReadBuffer, q, b, block, off, size, p, n, wait, ev);
}

CL_API_ENTRY cl_int CL_API_CALL clEnqueueWriteBuffer(cl_command_queue q, cl_mem b, cl_bool block,
                                                     size_t off, size_t size, const void *p,
                                                     cl_uint n, const cl_event *wait,
                                                     cl_event *ev)
{
    FORWARD(clEnqueueWriteBuffer, q, b, block, off, size, p, n, wait, ev);
}

CL_API_ENTRY cl_int CL_API_CALL clEnqueueFillBuffer(cl_command_queue q, cl_mem b, const void *pat,
                                                    size_t psize, size_t off, size_t size,
                                                    cl_uint n, const cl_event *wait, cl_event *ev)
{
    FORWARD(clEnqueueFillBuffer, q, b, pat, psize, off, size, n, wait, ev);
}

CL_API_ENTRY cl_int CL_API_CALL clEnqueueCopyBuffer(cl_command_queue q, cl_mem src, cl_mem dst,
                                                    size_t soff, size_t doff, size_t size,
                                                    cl_uint n, const cl_event *wait, cl_event *ev)
{
    FORWARD(clEnqueueCopyBuffer, q, src, dst, soff, doff, size, n, wait, ev);
}

CL_API_ENTRY cl_int CL_API_CALL clEnqueueTask(cl_command_queue q, cl_kernel k, cl_uint n,
                                              const cl_event *wait, cl_event *ev)
{
    FORWARD(clEnqueueTask, q, k, n, wait, ev);
}

static char first_line[CLATTN_ERR_SIZE_FOR_TEST];

static void run_case(const bad_case *c)
{
    enqueues = 0;
    clattn_status got = c->call();
    int enqueued = enqueues;
    assert_int_equal(clFinish(QUEUE), CL_SUCCESS); /* anything wrongly enqueued lands now */
    const char *msg = clattn_last_error(c->has_ctx ? h_ctx : NULL);
    if (got != c->want)
        fail_msg("%s: status %d (%s), expected %s; message: %s", c->name, got,
                 clattn_status_string(got), clattn_status_string(c->want), msg);
    if (!strstr(msg, c->needle))
        fail_msg("%s: message \"%s\" does not name \"%s\"", c->name, msg, c->needle);
    if (enqueued)
        fail_msg("%s: %d command(s) enqueued", c->name, enqueued);
    for (const char *p = msg; *p; p++)
        if (!isprint((unsigned char)*p) && *p != '\n' && *p != '\t')
            fail_msg("%s: the message has a non-text byte 0x%02x at %d", c->name,
                     (unsigned)(unsigned char)*p, (int)(p - msg));
    printf("# %-28s %s\n", c->name, strtok(strcpy(first_line, msg), "\n"));
    for (size_t i = 0; i < NOUT; i++) {
        char what[96];
        snprintf(what, sizeof what, "%s: output %zu", c->name, i);
        h_assert_bytes(outputs[i], initial[i], what);
    }
}

/* Cases that show a bug in the library, not run until it is fixed (each is a real finding). None
 * now: matmul_c_shape (the C shape message printed A and B shape strings that only the preceding
 * check filled) was fixed in src/ops/matmul.c. */
static const char *const known_bugs[] = {NULL};

static int is_known_bug(const char *name)
{
    for (size_t i = 0; i < sizeof known_bugs / sizeof known_bugs[0]; i++)
        if (known_bugs[i] && strcmp(known_bugs[i], name) == 0)
            return 1;
    return 0;
}

static void test_bad_inputs(void **s)
{
    (void)s;
    printf("# %zu bad inputs\n", NCASES);
    for (size_t i = 0; i < NCASES; i++)
        if (is_known_bug(cases[i].name))
            printf("# %-28s NOT RUN: known library bug (see known_bugs)\n", cases[i].name);
        else
            run_case(&cases[i]);
    assert_true(NCASES >= 40);
}

/* The enqueue count sees the library's enqueues (a fill, a matmul's kernels). */
static void test_count_sees_enqueues(void **s)
{
    (void)s;
    enqueues = 0;
    assert_int_equal(clattn_tensor_fill(h_ctx, &Y, 1.0f), CLATTN_SUCCESS);
    assert_int_equal(enqueues, 1);
    assert_int_equal(clattn_matmul(h_ctx, &A, 0, &B, 0, 1.0f, 0.0f, &C), CLATTN_SUCCESS);
    assert_true(enqueues >= 2);
    assert_int_equal(clattn_tensor_write_blocking(h_ctx, &Y, initial[1]), CLATTN_SUCCESS);
    assert_int_equal(clattn_tensor_write_blocking(h_ctx, &C, initial[0]), CLATTN_SUCCESS);
}

/* The unfused attention paths (and additive attention, always) keep every score in float32
 * scratch indexed with 32-bit ints: past INT32_MAX elements they refuse, before allocating
 * anything (a device with allocations over 8 GiB would otherwise run them with wrapped
 * offsets). 46341^2 scores, head size 1. */
static void test_unfused_past_int32(void **s)
{
    (void)s;
    clattn_params p;
    clattn_context *c = NULL;
    memset(&p, 0, sizeof p);
    p.tuning = "attention=unfused";
    assert_int_equal(clattn_context_wrap(&c, clattn_context_cl(h_ctx), clattn_context_device(h_ctx),
                                         clattn_context_queue(h_ctx), &p),
                     CLATTN_SUCCESS);
    clattn_tensor q = h_tensor_exact(CLATTN_FLOAT32, 3, H_DIMS(1, 46341, 1), NULL);
    clattn_tensor o = h_tensor_exact(CLATTN_FLOAT32, 3, H_DIMS(1, 46341, 1), NULL);
    assert_int_equal(clattn_tensor_fill(h_ctx, &o, 7.0f), CLATTN_SUCCESS);
    void *before = h_read(&o);
    clattn_status st = clattn_dot_product_attention(c, &q, &q, &q, NULL, &o, NULL);
    if (st != CLATTN_ERROR_UNSUPPORTED || !strstr(clattn_last_error(c), "32-bit indexing"))
        fail_msg("status %d: %s", (int)st, clattn_last_error(c));
    h_assert_bytes(&o, before, "out of a refused unfused attention");
    clattn_tensor w1 = h_tensor_exact(CLATTN_FLOAT32, 2, H_DIMS(1, 1), NULL); /* h = 1 */
    clattn_additive_weights aw1 = {&w1, &w1, &w1};
    st = clattn_additive_attention(h_ctx, &q, &q, &q, &aw1, NULL, &o, NULL);
    if (st != CLATTN_ERROR_UNSUPPORTED || !strstr(clattn_last_error(h_ctx), "32-bit indexing"))
        fail_msg("additive: status %d: %s", (int)st, clattn_last_error(h_ctx));
    h_assert_bytes(&o, before, "out of a refused additive attention");
    clattn_tensor_release(&w1);
    free(before);
    clattn_tensor_release(&q);
    clattn_tensor_release(&o);
    clattn_context_destroy(&c);
}

/* Views that share a root buffer but no bytes are accepted: the sub-buffer's origin counts. C
 * (sub, bytes [al*4, al*4 + 168) of Par) against A at Par's elements [0, 24): a check that ignored
 * the origin would see both at offset 0. In-place through one cl_mem stays allowed. */
static void test_disjoint_subbuffer_accepted(void **s)
{
    (void)s;
    clattn_tensor a0 = clattn_view(Par.buf, CLATTN_FLOAT32, 0, 2, H_DIMS(6, 4));
    clattn_tensor sy = clattn_view(sub, CLATTN_FLOAT32, 0, 3, H_DIMS(2, 3, 5));
    if (clattn_matmul(h_ctx, &a0, 0, &B, 0, 1, 0, &sub_c) != CLATTN_SUCCESS)
        fail_msg("%s", clattn_last_error(h_ctx));
    if (clattn_masked_softmax(h_ctx, &sy, NULL, &sy) != CLATTN_SUCCESS)
        fail_msg("%s", clattn_last_error(h_ctx));
    assert_int_equal(clattn_tensor_write_blocking(h_ctx, &Par, initial[7]), CLATTN_SUCCESS);
}

/* An image is a cl_mem too, but no tensor: as an input or an output it is refused before
 * anything is enqueued (kernels would take it for a pointer). Skipped where the device has no
 * images. */
static clattn_tensor img_s;

static clattn_status softmax_from_image(void)
{
    return clattn_masked_softmax(h_ctx, &img_s, NULL, &Y);
}
static clattn_status softmax_to_image(void)
{
    return clattn_masked_softmax(h_ctx, &S, NULL, &img_s);
}
static clattn_status fill_image(void) { return clattn_tensor_fill(h_ctx, &img_s, 1.0f); }

static void test_image_refused(void **s)
{
    (void)s;
    cl_int err;
    cl_image_format fmt = {CL_RGBA, CL_FLOAT};
    cl_image_desc desc;
    memset(&desc, 0, sizeof desc);
    desc.image_type = CL_MEM_OBJECT_IMAGE2D;
    desc.image_width = 8; /* 8 x 1 texels of 4 floats: (2, 3, 5) fits */
    desc.image_height = 1;
    cl_mem img = clCreateImage(CLCTX, CL_MEM_READ_WRITE, &fmt, &desc, NULL, &err);
    if (err != CL_SUCCESS)
        skip();
    img_s = clattn_view(img, CLATTN_FLOAT32, 0, 3, H_DIMS(2, 3, 5));
    const bad_case cs[] = {
        {"softmax_from_image", CLATTN_ERROR_INVALID_TENSOR, "scores: cl_mem is an image", 1,
         softmax_from_image},
        {"softmax_to_image", CLATTN_ERROR_INVALID_TENSOR, "out: cl_mem is an image", 1,
         softmax_to_image},
        {"fill_image", CLATTN_ERROR_INVALID_TENSOR, "tensor: cl_mem is an image", 1, fill_image},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
        run_case(&cs[i]);
    clReleaseMemObject(img);
}

/* ---- setup ---- */

/* Par with a sub-buffer at the device's base address alignment, two buffers over one host array,
 * a buffer of another OpenCL context. */
static void make_issue9_buffers(void)
{
    cl_int err;
    cl_uint align_bits = 0;
    assert_int_equal(clGetDeviceInfo(DEV, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof align_bits,
                                     &align_bits, NULL), CL_SUCCESS);
    al = align_bits / 32; /* in floats */
    Par = mk(1, H_DIMS(al + 160), 10);
    cl_buffer_region r = {al * 4, 160 * 4};
    sub = clCreateSubBuffer(Par.buf, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &r, &err);
    assert_int_equal(err, CL_SUCCESS);
    h_fill(hp_host, 64, 10, 12);
    cl_mem a = clCreateBuffer(CLCTX, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, 24 * 4, hp_host, &err);
    assert_int_equal(err, CL_SUCCESS);
    cl_mem c = clCreateBuffer(CLCTX, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, 42 * 4, hp_host + 16,
                              &err);
    assert_int_equal(err, CL_SUCCESS);
    hp_A = clattn_view(a, CLATTN_FLOAT32, 0, 2, H_DIMS(6, 4));
    hp_C = clattn_view(c, CLATTN_FLOAT32, 0, 2, H_DIMS(6, 7));
    foreign = clCreateBuffer(other_cl, CL_MEM_READ_WRITE, 24 * 4, NULL, &err);
    assert_int_equal(err, CL_SUCCESS);
}

static int setup(void **st)
{
    cl_int err;
    if (h_setup(st))
        return -1;
    A = mk(2, H_DIMS(6, 4), -1);
    B = mk(2, H_DIMS(4, 7), -1);
    C = mk(2, H_DIMS(6, 7), 10);
    bias7 = mk(1, H_DIMS(7), -1);
    S = mk(3, H_DIMS(2, 3, 5), -1);
    Y = mk(3, H_DIMS(2, 3, 5), 10);
    Q = mk(3, H_DIMS(2, 5, 8), -1);
    Kk = mk(3, H_DIMS(2, 6, 8), -1);
    V = mk(3, H_DIMS(2, 6, 3), -1);
    O = mk(3, H_DIMS(2, 5, 3), 10);
    Wt = mk(3, H_DIMS(2, 5, 6), 10);
    W4 = mk(4, H_DIMS(2, 2, 5, 6), 10);
    Hd = mk(3, H_DIMS(4, 5, 4), 10);
    X8 = mk(3, H_DIMS(2, 5, 8), 10);
    wv8 = mk(1, H_DIMS(8), -1);
    Wq = mk(2, H_DIMS(4, 8), -1);
    Wk = mk(2, H_DIMS(4, 8), -1);
    Wlin = mk(2, H_DIMS(6, 4), -1); /* linear: out 6, in 4 */
    wv4 = mk(2, H_DIMS(1, 4), -1);
    Mq = mk(2, H_DIMS(8, 8), -1);
    Mk = mk(2, H_DIMS(8, 8), -1);
    Mv = mk(2, H_DIMS(8, 3), -1);
    Mo = mk(2, H_DIMS(3, 8), -1);
    mask_f = mk(2, H_DIMS(2, 2), 0);
    int l3[3] = {1, 2, 3};
    lens3 = h_tensor_exact(CLATTN_INT32, 1, H_DIMS(3), l3);
    int m4[4] = {1, 0, 1, 1};
    mask_i = h_tensor_exact(CLATTN_INT32, 2, H_DIMS(2, 2), m4);
    small_buf = mk(1, H_DIMS(20), -1);
    other_cl = clCreateContext(NULL, 1, (cl_device_id[]){DEV}, NULL, NULL, &err);
    assert_int_equal(err, CL_SUCCESS);
    other_queue = clCreateCommandQueue(other_cl, DEV, 0, &err);
    assert_int_equal(err, CL_SUCCESS);
    make_issue9_buffers();
    for (size_t i = 0; i < NOUT; i++)
        initial[i] = h_read(outputs[i]);
    make_bad_views();
    make_bundles();
    return 0;
}

static int teardown(void **st)
{
    clattn_tensor *all[] = {&A, &B, &C, &bias7, &S, &Y, &Q, &Kk, &V, &O, &Wt, &W4, &Hd, &X8,
                            &wv8, &Wq, &Wk, &wv4, &Wlin, &Mq, &Mk, &Mv, &Mo, &lens3, &mask_f, &mask_i,
                            &small_buf, &junk, &Par, &hp_A, &hp_C, &dlens, &big257, &lab25};
    clReleaseMemObject(sub);
    clReleaseMemObject(foreign);
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        clattn_tensor_release(all[i]);
    for (size_t i = 0; i < NOUT; i++)
        free(initial[i]);
    clReleaseCommandQueue(other_queue);
    clReleaseContext(other_cl);
    return h_teardown(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_count_sees_enqueues),
        cmocka_unit_test(test_disjoint_subbuffer_accepted),
        cmocka_unit_test(test_unfused_past_int32),
        cmocka_unit_test(test_image_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
