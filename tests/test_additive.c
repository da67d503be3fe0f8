/* clattn_additive_scores and clattn_additive_attention against the double reference. */
#include "harness.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Each tanh term errs by a few ulp plus the float32 rounding of the projections (tanh' <= 1), so a
 * score is within about 5e-7 * sum_h |w_v[h]|: 1e-5 of (|score| + sum |w_v|) is a 20x margin. */
#define SCORE_TOL 1e-5
#define W_RTOL 1e-4
#define W_ATOL 1e-7
#define OUT_TOL 1e-4

typedef struct {
    int B, nq, nk, qs, ks, vs, h;
    h_mask_spec mask;
    float p;
    unsigned long long seed;
    int no_weights;
    clattn_dtype xt, wt, ot; /* the inputs', W_q's, W_k's and w_v's, and out's dtypes */
    clattn_dtype awt;         /* the attention weights' */
    int wv_1d;                /* w_v given as (h), not (1, h) */
} add_case;

static void ref_scores(const add_case *c, const double *qp, const double *kp, const float *wv,
                       double *s)
{
    for (int b = 0; b < c->B; b++)
        for (int i = 0; i < c->nq; i++)
            for (int j = 0; j < c->nk; j++) {
                double acc = 0;
                for (int t = 0; t < c->h; t++)
                    acc += wv[t] * tanh(qp[((size_t)b * c->nq + i) * c->h + t] +
                                        kp[((size_t)b * c->nk + j) * c->h + t]);
                s[((size_t)b * c->nq + i) * c->nk + j] = acc;
            }
}

static double *scale_of(const double *ref, size_t n, double extra)
{
    double *sc = malloc(n * sizeof *sc);
    for (size_t i = 0; i < n; i++)
        sc[i] = fabs(ref[i]) + extra;
    return sc;
}

static void run(const add_case *c)
{
    size_t B = c->B, nq = c->nq, nk = c->nk, h = c->h;
    size_t qn = B * nq * c->qs, kn = B * nk * c->ks, vn = B * nk * c->vs, sn = B * nq * nk;
    float *q = malloc(qn * 4), *k = malloc(kn * 4), *v = malloc(vn * 4);
    float *Wq = malloc(h * c->qs * 4), *Wk = malloc(h * c->ks * 4), *wv = malloc(h * 4);
    h_fill(q, qn, -1, 1); h_fill(k, kn, -1, 1); h_fill(v, vn, -1, 1);
    h_fill(Wq, h * c->qs, -1, 1); h_fill(Wk, h * c->ks, -1, 1); h_fill(wv, h, -1, 1);
    h_round(q, qn, c->xt); /* the reference sees the stored values */
    h_round(k, kn, c->xt);
    h_round(v, vn, c->xt);
    h_round(Wq, h * c->qs, c->wt);
    h_round(Wk, h * c->ks, c->wt);
    h_round(wv, h, c->wt);
    h_mask hm;
    h_mask_make(&hm, &c->mask, 3, H_DIMS(B, nq, nk));
    clattn_tensor tq = h_tensor_as(c->xt, 3, H_DIMS(B, nq, c->qs), q);
    clattn_tensor tk = h_tensor_as(c->xt, 3, H_DIMS(B, nk, c->ks), k);
    clattn_tensor tv = h_tensor_as(c->xt, 3, H_DIMS(B, nk, c->vs), v);
    clattn_tensor tWq = h_tensor_as(c->wt, 2, H_DIMS(h, c->qs), Wq);
    clattn_tensor tWk = h_tensor_as(c->wt, 2, H_DIMS(h, c->ks), Wk);
    clattn_tensor twv = c->wv_1d ? h_tensor_as(c->wt, 1, H_DIMS(h), wv)
                                 : h_tensor_as(c->wt, 2, H_DIMS(1, h), wv);
    clattn_tensor to = h_tensor(c->ot, 3, H_DIMS(B, nq, c->vs), NULL);
    clattn_tensor tw = h_tensor(c->awt, 3, H_DIMS(B, nq, nk), NULL);
    clattn_tensor tl = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(B, nq), NULL);
    h_poison(&to);
    h_poison(&tw);
    h_poison(&tl);
    clattn_additive_weights w = {&tWq, &tWk, &twv};
    clattn_attention_opts o = {0};
    o.mask = hm.m;
    o.dropout.p = c->p;
    o.dropout.training = c->p > 0;
    o.dropout.seed = c->seed;
    o.lse = &tl;
    o.bias = hm.tb.buf ? &hm.tb : NULL;
    o.alibi_slopes = hm.ta.buf ? &hm.ta : NULL;
    if (clattn_additive_attention(h_ctx, &tq, &tk, &tv, &w, &o, &to, c->no_weights ? NULL : &tw) !=
        CLATTN_SUCCESS)
        fail_msg("additive_attention: %s", clattn_last_error(h_ctx));
    double *qp = malloc(B * nq * h * 8), *kp = malloc(B * nk * h * 8), *s = malloc(sn * 8);
    double *rw = malloc(sn * 8), *ro = malloc(B * nq * c->vs * 8), *vd = ref_to_double(v, vn);
    ref_linear((int)(B * nq), c->qs, (int)h, q, Wq, NULL, qp);
    ref_linear((int)(B * nk), c->ks, (int)h, k, Wk, NULL, kp);
    ref_scores(c, qp, kp, wv, s);
    ref_masked_softmax_d(&hm.r, s, rw);
    /* the LSEs: a score's rounding is within SCORE_TOL of sum_t |w_v[t]|, its magnitude bound */
    double *rl = malloc(B * nq * 8), *lmag = malloc(B * nq * 8), wsum = 0;
    ref_masked_lse_d(&hm.r, s, rl);
    for (size_t t = 0; t < h; t++)
        wsum += fabs(wv[t]);
    for (size_t i = 0; i < B * nq; i++)
        lmag[i] = wsum * SCORE_TOL / H_LSE_TOL;
    memcpy(s, rw, sn * 8);
    if (c->p > 0)
        ref_dropout(s, sn, 0, c->seed, 0, c->p);
    double vmax = 0;
    for (size_t i = 0; i < vn; i++)
        vmax = fmax(vmax, fabs(vd[i]));
    for (size_t b = 0; b < B; b++)
        ref_gemm((int)nq, c->vs, (int)nk, s + b * nq * nk, 0, vd + b * nk * c->vs, 0,
                 ro + b * nq * c->vs);
    char what[220];
    snprintf(what, sizeof what, "additive B=%d Q=%d K=%d qs=%d ks=%d vs=%d h=%d lens %d p=%g, "
             "inputs %s W %s out %s", c->B, c->nq, c->nk, c->qs, c->ks, c->vs, c->h, c->mask.lens,
             c->p, h_dtype_name(c->xt), h_dtype_name(c->wt), h_dtype_name(c->ot));
    float *go = h_read_float(&to);
    /* sum_k w_k |v_k| <= max|v| * sum_k w_k (<= 1/(1-p) after dropout); a 16-bit out adds its
     * rounding, u of |out| <= that scale, and float16's subnormal step */
    double tol = OUT_TOL + (c->ot ? h_unit_roundoff(c->ot) : 0) * (1 + OUT_TOL);
    double *osc = scale_of(ro, B * nq * c->vs, vmax * (c->p > 0 && c->p < 1 ? 1 / (1 - c->p) : 1) +
                                                   h_subnormal_step(c->ot) / tol);
    h_assert_scaled(go, ro, osc, B * nq * c->vs, tol, what);
    if (!c->no_weights) { /* 16-bit weights: rounded once (as out above) */
        double u = c->awt ? h_unit_roundoff(c->awt) : 0;
        float *gw = h_read_float(&tw);
        h_assert_close(gw, rw, sn, W_RTOL + u * (1 + W_RTOL),
                       W_ATOL * (1 + u) + h_subnormal_step(c->awt), what);
        free(gw);
    }
    float *gl = h_read(&tl);
    strncat(what, " (lse)", sizeof what - strlen(what) - 1);
    h_assert_lse(gl, rl, lmag, B * nq, what);
    free(gl); free(rl); free(lmag);
    free(go); free(osc);
    clattn_tensor *ts[] = {&tq, &tk, &tv, &tWq, &tWk, &twv, &to, &tw, &tl};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        clattn_tensor_release(ts[i]);
    h_mask_free(&hm);
    free(q); free(k); free(v); free(Wq); free(Wk); free(wv);
    free(qp); free(kp); free(s); free(rw); free(ro); free(vd);
}

#define CASES(...)                                                 \
    do {                                                           \
        const add_case cs_[] = {__VA_ARGS__};                      \
        for (size_t i_ = 0; i_ < sizeof cs_ / sizeof cs_[0]; i_++) \
            run(&cs_[i_]);                                         \
    } while (0)

static void test_shapes(void **s)
{
    (void)s;
    CASES({1, 1, 1, 1, 1, 1, 1}, {2, 1, 10, 20, 2, 4, 8}, {3, 13, 17, 7, 11, 5, 9},
          {2, 31, 29, 16, 24, 8, 64, .no_weights = 1}, {1, 5, 97, 3, 5, 2, 17});
}

static void test_masks(void **s)
{
    (void)s;
    static const int l[] = {0, 17, 5};
    CASES({3, 6, 17, 5, 7, 3, 8, {H_LENS_1D, 0, l}}, {2, 6, 11, 5, 7, 3, 8, {H_LENS_2D}},
          {2, 8, 8, 5, 5, 3, 8, {H_LENS_1D, .causal = 1}},
          {2, 6, 11, 5, 7, 3, 8, {.mask_rank = 2, .mask_dims = {6, 11}}},
          {2, 6, 11, 5, 7, 3, 8, {H_LENS_1D, .bias_rank = 3, .bias_dims = {2, 6, 11},
                                  .bias_ninf = 7}},
          {2, 6, 11, 5, 7, 3, 8, {.causal = 1, .alibi_rank = 1, .alibi_dims = {2},
                                  .alibi_mag = 2}},
          /* fill -inf (rows without keys NaN), bottom-right causal with Q > K, a window */
          {3, 6, 17, 5, 7, 3, 8, {H_LENS_1D, 0, l, .fill = -INFINITY}},
          {2, 9, 5, 5, 7, 3, 8, {.causal = 1, .align = 1, .fill = -INFINITY}},
          {2, 6, 11, 5, 7, 3, 8, {.window = 1, .window_left = 2, .window_right = 1, .align = 1}},
          {2, 6, 11, 5, 7, 3, 8, {H_LENS_2D}, .wv_1d = 1});
}

static void test_dropout(void **s)
{
    (void)s;
    CASES({2, 6, 11, 5, 7, 3, 8, {H_LENS_1D}, 0.25f, 3}, {2, 6, 11, 5, 7, 3, 8, .p = 0.6f, .seed = 11});
}

/* d2l 11.3.2: keys of ones make every valid key's score equal: uniform weights over the valid
 * prefix, output = mean of the valid values of arange(40) reshaped (1, 10, 4). */
/* 16-bit queries, keys, values, W_q, W_k and w_v, out and the weights (out's dtype), in
 * combinations that put each dtype in each place, with lengths and dropout, with and without the
 * weights. */
static void test_16bit(void **s)
{
    (void)s;
    static const clattn_dtype combos[3][3] = {
        {CLATTN_FLOAT16, CLATTN_FLOAT16, CLATTN_FLOAT32},
        {CLATTN_BFLOAT16, CLATTN_FLOAT32, CLATTN_FLOAT16},
        {CLATTN_FLOAT32, CLATTN_BFLOAT16, CLATTN_BFLOAT16}};
    for (int i = 0; i < 3; i++) {
        clattn_dtype xt = combos[i][0], wt = combos[i][1], ot = combos[i][2];
        if (h_small() && i == 0) /* Oclgrind: two combinations (every dtype once) */
            continue;
        CASES({2, 5, 7, 6, 9, 11, 8, {H_LENS_1D}, .xt = xt, .wt = wt, .ot = ot, .awt = ot},
              {2, 5, 7, 6, 9, 11, 8, {H_LENS_2D}, 0.3f, 5, .xt = xt, .wt = wt, .ot = ot,
               .awt = ot},
              {1, 3, 13, 4, 4, 17, 16, .no_weights = 1, .xt = xt, .wt = wt, .ot = ot});
    }
}

static void test_toy_example(void **s)
{
    (void)s;
    float q[2 * 20], k[2 * 10 * 2], v[2 * 40], Wq[8 * 20], Wk[8 * 2], wv[8];
    h_fill(q, 40, -1, 1);
    h_fill(Wq, 160, -0.2, 0.2);
    h_fill(Wk, 16, -0.7, 0.7);
    h_fill(wv, 8, -0.35, 0.35);
    for (int i = 0; i < 40; i++) {
        k[i] = 1.0f;
        v[i] = v[40 + i] = (float)i;
    }
    int lens[2] = {2, 6};
    clattn_tensor tq = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(2, 1, 20), q);
    clattn_tensor tk = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(2, 10, 2), k);
    clattn_tensor tv = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(2, 10, 4), v);
    clattn_tensor tWq = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(8, 20), Wq);
    clattn_tensor tWk = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(8, 2), Wk);
    clattn_tensor twv = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(1, 8), wv);
    clattn_tensor to = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(2, 1, 4), NULL);
    clattn_tensor tw = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(2, 1, 10), NULL);
    clattn_additive_weights w = {&tWq, &tWk, &twv};
    clattn_attention_opts o = {0};
    o.mask.valid_lens_host = lens;
    o.mask.lens_ndim = 1;
    o.mask.lens_dims[0] = 2;
    o.dropout.p = 0.1f; /* eval mode */
    assert_int_equal(clattn_additive_attention(h_ctx, &tq, &tk, &tv, &w, &o, &to, &tw), CLATTN_SUCCESS);
    float *out = h_read(&to), *wt = h_read(&tw);
    const float want[8] = {2, 3, 4, 5, 10, 11, 12, 13};
    for (int i = 0; i < 8; i++)
        assert_true(fabs(out[i] - want[i]) < 1e-5 * 13);
    for (int b = 0; b < 2; b++)
        for (int j = 0; j < 10; j++)
            assert_true(fabs(wt[b * 10 + j] - (j < lens[b] ? 1.0 / lens[b] : 0.0)) < 1e-6);
    free(out); free(wt);
    clattn_tensor *ts[] = {&tq, &tk, &tv, &tWq, &tWk, &twv, &to, &tw};
    for (size_t i = 0; i < 8; i++)
        clattn_tensor_release(ts[i]);
}

/* The scores op alone: qp, kp, w_v and scores of every dtype (float32 throughout, then each in
 * 16 bits in turn), hidden sizes past the vector width with a tail and without. */
static void scores_op(int H, clattn_dtype qt, clattn_dtype kt, clattn_dtype wt, clattn_dtype st)
{
    add_case c = {2, 7, 9, 0, 0, 0, H};
    size_t qn = 2 * 7 * (size_t)H, kn = 2 * 9 * (size_t)H, sn = 2 * 7 * 9;
    float *qp = malloc(qn * 4), *kp = malloc(kn * 4), *wv = malloc((size_t)H * 4);
    h_fill(qp, qn, -2, 2); h_fill(kp, kn, -2, 2); h_fill(wv, (size_t)H, -1, 1);
    h_round(qp, qn, qt); h_round(kp, kn, kt); h_round(wv, (size_t)H, wt);
    clattn_tensor tq = h_tensor_as(qt, 3, H_DIMS(2, 7, H), qp);
    clattn_tensor tk = h_tensor_as(kt, 3, H_DIMS(2, 9, H), kp);
    clattn_tensor tw = h_tensor_as(wt, 1, H_DIMS(H), wv);
    clattn_tensor ts = h_tensor(st, 3, H_DIMS(2, 7, 9), NULL);
    h_poison(&ts);
    assert_int_equal(clattn_additive_scores(h_ctx, &tq, &tk, &tw, &ts), CLATTN_SUCCESS);
    double *qd = ref_to_double(qp, qn), *kd = ref_to_double(kp, kn), *ref = malloc(sn * 8);
    ref_scores(&c, qd, kd, wv, ref);
    /* a 16-bit score: rounded once (u of at most the scale; float16's subnormal step) */
    double swv = 0, tol = SCORE_TOL + (st ? h_unit_roundoff(st) : 0) * (1 + SCORE_TOL);
    for (int i = 0; i < H; i++)
        swv += fabs(wv[i]);
    double *sc = scale_of(ref, sn, swv + h_subnormal_step(st) / tol);
    char what[120];
    snprintf(what, sizeof what, "additive_scores H=%d qp/kp/w_v/scores %s/%s/%s/%s", H,
             h_dtype_name(qt), h_dtype_name(kt), h_dtype_name(wt), h_dtype_name(st));
    float *got = h_read_float(&ts);
    h_assert_scaled(got, ref, sc, sn, tol, what);
    free(got); free(sc); free(qd); free(kd); free(ref); free(qp); free(kp); free(wv);
    clattn_tensor_release(&tq); clattn_tensor_release(&tk);
    clattn_tensor_release(&tw); clattn_tensor_release(&ts);
}

static void test_scores_op(void **s)
{
    (void)s;
    const clattn_dtype f32 = CLATTN_FLOAT32, f16 = CLATTN_FLOAT16, bf16 = CLATTN_BFLOAT16;
    scores_op(13, f32, f32, f32, f32);
    scores_op(13, f16, bf16, f16, bf16);
    scores_op(16, bf16, f16, bf16, f16);
    scores_op(5, f32, f16, bf16, f32);
}

/* int32 where a float is needed; nothing is written. */
static void test_16bit_bad_input(void **s)
{
    (void)s;
    float z[2 * 7 * 8] = {0}, o[2 * 7 * 7];
    h_fill(o, 98, 5, 6);
    clattn_tensor tq = h_tensor_as(CLATTN_FLOAT16, 3, H_DIMS(2, 7, 8), z);
    clattn_tensor ti = h_tensor(CLATTN_INT32, 3, H_DIMS(2, 7, 8), NULL);
    clattn_tensor tw = h_tensor_as(CLATTN_BFLOAT16, 1, H_DIMS(8), z);
    clattn_tensor twi = h_tensor(CLATTN_INT32, 1, H_DIMS(8), NULL);
    clattn_tensor ts = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(2, 7, 7), o);
    h_assert_error(clattn_additive_scores(h_ctx, &ti, &tq, &tw, &ts), CLATTN_ERROR_INVALID_TENSOR,
                   "qp: dtype int32");
    h_assert_error(clattn_additive_scores(h_ctx, &tq, &tq, &twi, &ts),
                   CLATTN_ERROR_INVALID_TENSOR, "w_v: dtype int32");
    h_assert_bytes(&ts, o, "scores of a refused additive_scores");
    clattn_tensor *ts_[] = {&tq, &ti, &tw, &twi, &ts};
    for (size_t i = 0; i < 5; i++)
        clattn_tensor_release(ts_[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shapes), cmocka_unit_test(test_masks), cmocka_unit_test(test_dropout),
        cmocka_unit_test(test_toy_example), cmocka_unit_test(test_16bit),
        cmocka_unit_test(test_scores_op), cmocka_unit_test(test_16bit_bad_input),
    };
    return cmocka_run_group_tests(tests, h_setup, h_teardown);
}
