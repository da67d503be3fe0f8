/* clattn_multihead_attention against d2l's MultiHeadAttention composed from the references. */
#include "harness.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The output goes through two more float32 GEMMs than dot-product attention: 1e-4 of the
 * magnitude sum_j |concat_j W_o[:, j]| (plus the bias) still leaves a 10x margin over rounding. */
#define OUT_TOL 1e-4
#define W_RTOL 1e-4
#define W_ATOL 1e-7

typedef struct {
    int B, nq, nk, qs, ks, vs, hid, H, os;
    int bias;
    h_mask_spec mask;
    float p;
    unsigned long long seed;
    int no_weights;
    double xscale; /* inputs uniform in [-xscale, xscale]; 0 means 1 */
    int hkv;       /* num_kv_heads (W_k, W_v have hkv * hid / H rows); 0 means H */
    clattn_dtype xt, wt, ot; /* the inputs', the weights' and biases', and out's dtypes */
    clattn_dtype awt;         /* the attention weights' */
} mha_case;

typedef struct {
    float *data;
    clattn_tensor t;
} param;

/* rows == 0: a 1-D vector (a bias) of cols elements; stored as dt, data holds what is stored */
static param make_param(size_t rows, size_t cols, double bound, clattn_dtype dt)
{
    param p;
    size_t n = (rows ? rows : 1) * cols;
    p.data = malloc(n * 4);
    h_fill(p.data, n, -bound, bound);
    h_round(p.data, n, dt);
    p.t = rows == 0 ? h_tensor_as(dt, 1, H_DIMS(cols), p.data)
                    : h_tensor_as(dt, 2, H_DIMS(rows, cols), p.data);
    return p;
}

static void free_param(param *p)
{
    free(p->data);
    clattn_tensor_release(&p->t);
}

/* (B, Hkv, T, dh) -> (B, H, T, dh): head h gets K/V head h / (H / Hkv), as enable_gqa. */
static double *repeat_heads(double *x, int B, int T, int Hkv, int H, int dh)
{
    size_t per = (size_t)T * dh;
    double *y = malloc((size_t)B * H * per * sizeof *y);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            memcpy(y + ((size_t)b * H + h) * per, x + ((size_t)b * Hkv + h / (H / Hkv)) * per,
                   per * sizeof *y);
    free(x);
    return y;
}

/* (B, T, H*dh) -> (B, H, T, dh) */
static double *split_heads(const double *x, int B, int T, int H, int dh)
{
    double *y = malloc((size_t)B * T * H * dh * sizeof *y);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++)
                for (int e = 0; e < dh; e++)
                    y[(((size_t)b * H + h) * T + t) * dh + e] = x[(((size_t)b * T + t) * H + h) * dh + e];
    return y;
}

static void run_mode(const mha_case *c)
{
    int B = c->B, nq = c->nq, nk = c->nk, hid = c->hid, H = c->H, dh = hid / H;
    int Hkv = c->hkv ? c->hkv : H, kvhid = Hkv * dh;
    double bq = 1 / sqrt(c->qs), bk = 1 / sqrt(c->ks), bv = 1 / sqrt(c->vs), bo = 1 / sqrt(hid);
    double xs = c->xscale > 0 ? c->xscale : 1;
    clattn_dtype xt = c->xt, wt = c->wt;
    param q = make_param((size_t)B * nq, c->qs, xs, xt);
    param k = make_param((size_t)B * nk, c->ks, xs, xt), v = make_param((size_t)B * nk, c->vs, xs, xt);
    param Wq = make_param(hid, c->qs, bq, wt), Wk = make_param(kvhid, c->ks, bk, wt);
    param Wv = make_param(kvhid, c->vs, bv, wt), Wo = make_param(c->os, hid, bo, wt);
    param b_q = make_param(0, hid, bq, wt), b_k = make_param(0, kvhid, bk, wt);
    param b_v = make_param(0, kvhid, bv, wt);
    param b_o = make_param(0, c->os, bo, wt);
    /* views with the batch dim for the inputs */
    clattn_tensor tq = clattn_view(q.t.buf, xt, 0, 3, H_DIMS(B, nq, c->qs));
    clattn_tensor tk = clattn_view(k.t.buf, xt, 0, 3, H_DIMS(B, nk, c->ks));
    clattn_tensor tv = clattn_view(v.t.buf, xt, 0, 3, H_DIMS(B, nk, c->vs));
    clattn_tensor to = h_tensor(c->ot, 3, H_DIMS(B, nq, c->os), NULL);
    clattn_tensor tw = h_tensor(c->awt, 4, H_DIMS(B, H, nq, nk), NULL);
    clattn_tensor tl = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(B, H, nq), NULL);
    h_poison(&to);
    h_poison(&tw);
    h_poison(&tl);
    h_mask hm;
    h_mask_make(&hm, &c->mask, 4, H_DIMS(B, H, nq, nk));
    clattn_mha_weights w = {H, &Wq.t, &Wk.t, &Wv.t, &Wo.t, NULL, NULL, NULL, NULL, c->hkv};
    if (c->bias) {
        w.b_q = &b_q.t; w.b_k = &b_k.t; w.b_v = &b_v.t; w.b_o = &b_o.t;
    }
    clattn_attention_opts o = {0};
    o.mask = hm.m;
    o.dropout.p = c->p;
    o.dropout.training = c->p > 0;
    o.dropout.seed = c->seed;
    o.lse = &tl;
    o.bias = hm.tb.buf ? &hm.tb : NULL;
    o.alibi_slopes = hm.ta.buf ? &hm.ta : NULL;
    if (clattn_multihead_attention(h_ctx, &tq, &tk, &tv, &w, &o, &to, c->no_weights ? NULL : &tw) !=
        CLATTN_SUCCESS)
        fail_msg("multihead_attention: %s", clattn_last_error(h_ctx));

    /* reference: project, split heads, attend per (b, h), concatenate, project */
    double *Qp = malloc((size_t)B * nq * hid * 8), *Kp = malloc((size_t)B * nk * kvhid * 8);
    double *Vp = malloc((size_t)B * nk * kvhid * 8);
    ref_linear(B * nq, c->qs, hid, q.data, Wq.data, c->bias ? b_q.data : NULL, Qp);
    ref_linear(B * nk, c->ks, kvhid, k.data, Wk.data, c->bias ? b_k.data : NULL, Kp);
    ref_linear(B * nk, c->vs, kvhid, v.data, Wv.data, c->bias ? b_v.data : NULL, Vp);
    double *Qh = split_heads(Qp, B, nq, H, dh);
    double *Kh = repeat_heads(split_heads(Kp, B, nk, Hkv, dh), B, nk, Hkv, H, dh);
    double *Vh = repeat_heads(split_heads(Vp, B, nk, Hkv, dh), B, nk, Hkv, H, dh);
    size_t wn = (size_t)B * H * nq * nk, on = (size_t)B * nq * c->os;
    double *rw = malloc(wn * 8), *Oh = malloc((size_t)B * H * nq * dh * 8);
    ref_dropout_params dp = {c->p, c->seed, 0};
    ref_attention(&hm.r, dh, dh, Qh, Kh, Vh, 1 / sqrt(dh), &dp, rw, Oh);
    double *concat = malloc((size_t)B * nq * hid * 8), *ro = malloc(on * 8), *mag = malloc(on * 8);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < nq; t++)
                for (int e = 0; e < dh; e++)
                    concat[(((size_t)b * nq + t) * H + h) * dh + e] = Oh[(((size_t)b * H + h) * nq + t) * dh + e];
    double *Wod = ref_to_double(Wo.data, (size_t)c->os * hid);
    ref_gemm(B * nq, c->os, hid, concat, 0, Wod, 1, ro);
    for (size_t i = 0; i < (size_t)B * nq * hid; i++)
        concat[i] = fabs(concat[i]);
    for (size_t i = 0; i < (size_t)c->os * hid; i++)
        Wod[i] = fabs(Wod[i]);
    ref_gemm(B * nq, c->os, hid, concat, 0, Wod, 1, mag);
    for (size_t i = 0; i < on; i++) {
        double bias = c->bias ? b_o.data[i % c->os] : 0;
        ro[i] += bias;
        mag[i] = fmax(fabs(ro[i]), mag[i] + fabs(bias)) + 1e-30;
    }
    /* a 16-bit out is each float32 result rounded once: the tolerance grows by its unit
     * roundoff (mag bounds |out|), and by float16's subnormal step */
    double tol = OUT_TOL + (c->ot ? h_unit_roundoff(c->ot) : 0) * (1 + OUT_TOL);
    for (size_t i = 0; i < on; i++)
        mag[i] += h_subnormal_step(c->ot) / tol;
    char what[240];
    snprintf(what, sizeof what, "mha B=%d Q=%d K=%d qs=%d ks=%d vs=%d hid=%d H=%d Hkv=%d os=%d "
             "bias=%d lens %d mask %d causal %d p=%g, inputs %s weights %s out %s", B, nq, nk,
             c->qs, c->ks, c->vs, hid, H, Hkv, c->os, c->bias, c->mask.lens, c->mask.mask_rank,
             c->mask.causal, c->p, h_dtype_name(xt), h_dtype_name(wt), h_dtype_name(c->ot));
    float *go = h_read_float(&to);
    h_assert_scaled(go, ro, mag, on, tol, what);
    if (!c->no_weights) { /* 16-bit weights: rounded once (as out above) */
        double u = c->awt ? h_unit_roundoff(c->awt) : 0;
        float *gw = h_read_float(&tw);
        h_assert_close(gw, rw, wn, W_RTOL + u * (1 + W_RTOL),
                       W_ATOL * (1 + u) + h_subnormal_step(c->awt), what);
        free(gw);
    }
    /* the LSEs of each head's scores (the projections' float32 rounding adds well under
     * H_LSE_TOL of the scores' magnitude) */
    size_t ln = (size_t)B * H * nq;
    double *rl = malloc(ln * 8), *lmag = malloc(ln * 8);
    ref_attention_lse(&hm.r, dh, Qh, Kh, 1 / sqrt(dh), rl, lmag);
    float *gl = h_read(&tl);
    strncat(what, " (lse)", sizeof what - strlen(what) - 1);
    h_assert_lse(gl, rl, lmag, ln, what);
    free(gl); free(rl); free(lmag);
    free(go);
    param *ps[] = {&q, &k, &v, &Wq, &Wk, &Wv, &Wo, &b_q, &b_k, &b_v, &b_o};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
        free_param(ps[i]);
    clattn_tensor_release(&to);
    clattn_tensor_release(&tw);
    clattn_tensor_release(&tl);
    h_mask_free(&hm);
    free(Qp); free(Kp); free(Vp); free(Qh); free(Kh); free(Vh); free(rw); free(Oh);
    free(concat); free(ro); free(mag); free(Wod);
}

/* With the per-head weights requested (unfused) and without (fused attention core). */
static void run(const mha_case *c)
{
    /* Under Oclgrind (CLATTN_TEST_SMALL) cases whose projections or attention pass this much
     * work are skipped: -gpu-small's matmul tiles cost it seconds per launch, 80 s for d2l's
     * example of hidden size 100 */
    size_t proj = (size_t)c->B * (c->nq + c->nk) * c->hid * (c->qs + c->ks + c->vs) / 3;
    if (h_small() && (proj > 50000 || (size_t)c->B * c->nq * c->nk * c->hid > 200000))
        return;
    mha_case fused = *c;
    fused.no_weights = 1;
    if (!c->no_weights)
        run_mode(c);
    run_mode(&fused);
}

/* Under Oclgrind (CLATTN_TEST_SMALL) every third case of a list: multi-head attention adds no
 * kernel of its own (the op suites run those under Oclgrind), so there it checks the layouts it
 * passes them, the same for every case, at about ten launches a case. */
#define CASES(...)                                                 \
    do {                                                           \
        const mha_case cs_[] = {__VA_ARGS__};                      \
        for (size_t i_ = 0; i_ < sizeof cs_ / sizeof cs_[0]; i_++) \
            if (!h_small() || i_ % 3 == 0)                         \
                run(&cs_[i_]);                                     \
    } while (0)

static void test_d2l_example(void **s)
{
    (void)s;
    static const int lens[] = {3, 2};
    /* num_hiddens 100, 5 heads, batch 2, 4 queries, 6 key-value pairs, valid_lens [3, 2] */
    CASES({2, 4, 6, 100, 100, 100, 100, 5, 100, 0, {H_LENS_1D, 0, lens}});
}

static void test_heads_and_sizes(void **s)
{
    (void)s;
    CASES({1, 1, 1, 1, 1, 1, 1, 1, 1}, {2, 7, 11, 5, 9, 13, 16, 1, 16},
          {2, 9, 13, 12, 7, 5, 64, 8, 24, 1}, {3, 5, 97, 3, 4, 6, 8, 8, 5, 1},
          {2, 31, 17, 16, 16, 16, 32, 4, 32, 1, .no_weights = 1},
          /* whole key blocks and 16-multiple head sizes: the fused kernel's unpadded paths */
          {2, 70, 128, 32, 24, 40, 64, 2, 48, 1, {H_LENS_1D}}, {1, 65, 64, 16, 16, 16, 128, 2, 128, 1});
}

static void test_masks(void **s)
{
    (void)s;
    CASES({3, 6, 9, 8, 10, 12, 16, 4, 16, 1, {H_LENS_1D}},
          {3, 6, 9, 8, 10, 12, 16, 4, 16, 1, {H_LENS_2D}},
          {2, 9, 9, 8, 8, 8, 16, 2, 16, 0, {.causal = 1}},
          {2, 9, 9, 8, 8, 8, 16, 2, 16, 0, {H_LENS_1D, .causal = 1}},
          {2, 5, 7, 8, 8, 8, 16, 4, 16, 0, {.mask_rank = 4, .mask_dims = {2, 1, 5, 7}}},
          {2, 5, 7, 8, 8, 8, 16, 4, 16, 0, {.mask_rank = 2, .mask_dims = {5, 7}, .fill = -1e9f}},
          {2, 9, 40, 8, 8, 8, 16, 2, 16, 1, {.causal = 1, .align = 1, .window = 1,
                                             .window_left = 5}},
          {2, 30, 70, 8, 8, 8, 16, 2, 16, 0, {H_LENS_1D, .window = 1, .window_left = 17,
                                              .window_right = 3}},
          /* float biases (B, H, Q, K) and per head (1, H, 1, K), with -inf entries */
          {2, 5, 7, 8, 8, 8, 16, 4, 16, 1, {.bias_rank = 4, .bias_dims = {2, 4, 5, 7}}},
          {2, 9, 17, 8, 8, 8, 16, 2, 16, 0, {H_LENS_1D, .bias_rank = 4,
                                             .bias_dims = {1, 2, 1, 17}, .bias_ninf = 4}},
          /* ALiBi slopes per head (H) and per batch and head (B, H), Q != K */
          {2, 9, 17, 8, 8, 8, 16, 4, 16, 1, {.causal = 1, .alibi_rank = 1, .alibi_dims = {4}}},
          {2, 5, 7, 8, 8, 8, 16, 2, 16, 0, {H_LENS_1D, .alibi_rank = 2, .alibi_dims = {2, 2},
                                            .alibi_mag = 3}});
}

/* fill -inf with the first 70 keys blocked (whole key blocks of -inf scores), and inputs 1e5 times
 * larger (scores near 1e10: one-hot weights, no NaN). */
static void test_extremes(void **s)
{
    (void)s;
    CASES({2, 6, 100, 8, 8, 8, 16, 2, 16, 1, {.mask_rank = 1, .mask_dims = {100}, .mask_prefix = 70,
                                              .fill = -INFINITY}},
          {2, 10, 20, 16, 16, 16, 16, 4, 16, 0, .xscale = 1e5},
          {2, 10, 80, 16, 16, 16, 32, 2, 16, 1, {H_LENS_2D, .causal = 1}, .xscale = 1e5});
}

static void test_dropout(void **s)
{
    (void)s;
    CASES({2, 6, 9, 8, 10, 12, 16, 4, 16, 1, {H_LENS_1D}, 0.3f, 17});
}

/* num_kv_heads: grouped-query (H / Hkv = 2, 4) and multi-query (Hkv = 1) heads, with biases,
 * masks, dropout and the fused kernel's whole-block paths. */
static void test_grouped_query(void **s)
{
    (void)s;
    static const int lens[] = {3, 2};
    CASES({2, 4, 6, 100, 100, 100, 100, 4, 100, 1, {H_LENS_1D, 0, lens}, .hkv = 2},
          {2, 9, 13, 12, 7, 5, 64, 8, 24, 1, .hkv = 1},
          {2, 9, 9, 8, 8, 8, 32, 4, 16, 0, {H_LENS_2D, .causal = 1}, .hkv = 1},
          {2, 5, 7, 8, 8, 8, 32, 8, 16, 1, {.mask_rank = 4, .mask_dims = {2, 8, 5, 7}}, .hkv = 2},
          {2, 6, 9, 8, 10, 12, 16, 4, 16, 1, {H_LENS_1D}, 0.3f, 17, .hkv = 2},
          {2, 70, 128, 32, 24, 40, 128, 4, 48, 1, {H_LENS_1D}, .hkv = 2, .no_weights = 1});
}

/* 16-bit inputs, weights and biases, out and attention weights (out's dtype), in combinations
 * that put each dtype in each place, with masks, GQA and dropout, both attention paths (run:
 * with and without the weights). */
static void test_16bit(void **s)
{
    (void)s;
    static const int lens[] = {3, 2};
    static const clattn_dtype combos[4][3] = {
        {CLATTN_FLOAT16, CLATTN_FLOAT16, CLATTN_FLOAT32},
        {CLATTN_FLOAT32, CLATTN_BFLOAT16, CLATTN_BFLOAT16},
        {CLATTN_BFLOAT16, CLATTN_FLOAT16, CLATTN_FLOAT16},
        {CLATTN_FLOAT16, CLATTN_BFLOAT16, CLATTN_FLOAT32}};
    for (int i = 0; i < 4; i++) {
        clattn_dtype xt = combos[i][0], wt = combos[i][1], ot = combos[i][2];
        if (h_small()) { /* Oclgrind: one small case (mha adds no kernel; matmul's run covers
                          * linear's 16-bit loads), the suite's slowest there */
            if (i == 0)
                CASES({2, 9, 9, 8, 8, 8, 32, 4, 16, 1, {H_LENS_2D, .causal = 1}, .hkv = 1,
                       .xt = xt, .wt = wt, .ot = ot, .awt = ot});
            continue;
        }
        CASES({2, 4, 6, 100, 100, 100, 100, 5, 100, 1, {H_LENS_1D, 0, lens}, .xt = xt, .wt = wt,
               .ot = ot, .awt = ot},
              {2, 9, 9, 8, 8, 8, 32, 4, 16, 0, {H_LENS_2D, .causal = 1}, .hkv = 1, .xt = xt,
               .wt = wt, .ot = ot, .awt = ot},
              {2, 6, 9, 8, 10, 12, 16, 4, 16, 1, {H_LENS_1D}, 0.3f, 17, .hkv = 2, .xt = xt,
               .wt = wt, .ot = ot, .awt = ot});
    }
}

static void test_bad(void **s)
{
    (void)s;
    param q = make_param(2 * 3, 8, 1, CLATTN_FLOAT32), W = make_param(8, 8, 1, CLATTN_FLOAT32),
          W6 = make_param(6, 8, 1, CLATTN_FLOAT32);
    clattn_tensor tq = clattn_view(q.t.buf, CLATTN_FLOAT32, 0, 3, H_DIMS(2, 3, 8));
    clattn_tensor tk2 = clattn_view(q.t.buf, CLATTN_FLOAT32, 0, 3, H_DIMS(2, 2, 8));
    float o0[2 * 3 * 8];
    h_fill(o0, 48, -1, 1);
    clattn_tensor to = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(2, 3, 8), o0);
    clattn_mha_weights w = {3, &W.t, &W.t, &W.t, &W.t, NULL, NULL, NULL, NULL};
    h_assert_error(clattn_multihead_attention(h_ctx, &tq, &tq, &tq, &w, NULL, &to, NULL),
                   CLATTN_ERROR_INVALID_ARGUMENT, "num_heads: 3 does not divide num_hiddens 8");
    w.num_heads = 2;
    w.W_k = &W6.t;
    h_assert_error(clattn_multihead_attention(h_ctx, &tq, &tq, &tq, &w, NULL, &to, NULL),
                   CLATTN_ERROR_SHAPE_MISMATCH, "w.W_k");
    w.W_k = &W.t;
    h_assert_error(clattn_multihead_attention(h_ctx, &tq, &tq, &tk2, &w, NULL, &to, NULL),
                   CLATTN_ERROR_SHAPE_MISMATCH, "values: 2 rows");
    /* num_kv_heads that does not divide num_heads, negative, or over it; K/V weights that do not
     * have num_kv_heads x dh rows */
    const int bad_kv[] = {3, -1, 4};
    for (int i = 0; i < 3; i++) {
        w.num_kv_heads = bad_kv[i];
        h_assert_error(clattn_multihead_attention(h_ctx, &tq, &tq, &tq, &w, NULL, &to, NULL),
                       CLATTN_ERROR_INVALID_ARGUMENT, "w.num_kv_heads");
    }
    w.num_kv_heads = 1; /* W_k, W_v must then have 4 rows */
    h_assert_error(clattn_multihead_attention(h_ctx, &tq, &tq, &tq, &w, NULL, &to, NULL),
                   CLATTN_ERROR_SHAPE_MISMATCH, "w.W_k: shape (8, 8), expected (4, 8)");
    w.num_kv_heads = 0;
    clattn_attention_opts o = {0};
    o.dropout.p = 2.0f;
    h_assert_error(clattn_multihead_attention(h_ctx, &tq, &tq, &tq, &w, &o, &to, NULL),
                   CLATTN_ERROR_INVALID_ARGUMENT, "opts.dropout.p");
    h_assert_bytes(&to, o0, "out");
    free_param(&q); free_param(&W); free_param(&W6);
    clattn_tensor_release(&to);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_d2l_example), cmocka_unit_test(test_heads_and_sizes),
        cmocka_unit_test(test_masks), cmocka_unit_test(test_extremes),
        cmocka_unit_test(test_dropout), cmocka_unit_test(test_grouped_query),
        cmocka_unit_test(test_bad), cmocka_unit_test(test_16bit),
    };
    return cmocka_run_group_tests(tests, h_setup, h_teardown);
}
