/* clattn_dot_product_attention against the reference composed from the single-op references. */
#include "harness.h"
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* out = sum_k w_k v_k: the weights carry the softmax's 1e-5 relative error plus the scores' float32
 * rounding (about sqrt(d) ulp of |q||k| scale, amplified by exp); 1e-4 of the magnitude
 * sum_k w_k |v_k| is 10x that, and far below what one wrong weight or value moves. */
#define OUT_TOL 1e-4
#define W_RTOL 1e-4 /* weights: score rounding at |score| ~ 1e3 (large logits) dominates */
#define W_ATOL 1e-7

typedef struct {
    int nlead;
    size_t lead[2];
    int nq, nk, d, dv;
    h_mask_spec mask;
    double qscale; /* Q entries uniform in [-qscale, qscale]; 0 means 1 */
    double vscale; /* V entries uniform in [-vscale, vscale]; 0 means 1 */
    int vscale_from; /* > 0: only V rows from vscale_from - 1 on take vscale, the others 1 */
    int no_weights;
    float p;
    unsigned long long seed;
    float scale; /* opts.scale; 0 means the default 1/sqrt(d) */
    int nan_k, nan_v; /* > 0: row nan_k - 1 of K (nan_v - 1 of V) is NaN in every batch */
    int hkv; /* nlead 2: K and V have (lead[0], hkv) leading dims (grouped-query); 0: Q's */
    clattn_dtype qt, kt, vt, ot, wt; /* the tensors' dtypes (0: float32) */
} att_case;

static size_t batch_of(const att_case *c)
{
    size_t n = 1;
    for (int i = 0; i < c->nlead; i++)
        n *= c->lead[i];
    return n;
}

/* K's and V's leading dims and batch count */
static void kv_lead(const att_case *c, size_t lead[2])
{
    lead[0] = c->lead[0];
    lead[1] = c->nlead == 2 && c->hkv ? (size_t)c->hkv : c->lead[1];
}

static size_t kv_batch_of(const att_case *c)
{
    size_t l[2];
    kv_lead(c, l);
    return c->nlead == 0 ? 1 : c->nlead == 1 ? l[0] : l[0] * l[1];
}

/* A tensor of dtype dt with Q's leading dims (kv 0) or K's and V's (kv 1), then (rows, cols). */
static clattn_tensor make_as(const att_case *c, clattn_dtype dt, int kv, size_t rows, size_t cols,
                             const float *host)
{
    size_t dims[4];
    kv_lead(c, dims);
    if (!kv)
        memcpy(dims, c->lead, sizeof(size_t) * c->nlead);
    dims[c->nlead] = rows;
    dims[c->nlead + 1] = cols;
    return h_tensor_as(dt, c->nlead + 2, dims, host);
}

/* opts.lse for c: Q's leading dims and its rows */
static clattn_tensor make_lse(const att_case *c)
{
    size_t dims[3];
    memcpy(dims, c->lead, sizeof(size_t) * c->nlead);
    dims[c->nlead] = (size_t)c->nq;
    return h_tensor(CLATTN_FLOAT32, c->nlead + 1, dims, NULL);
}

/* K or V rows (kv batches of rows x cols, double) repeated for each query head that reads them,
 * as PyTorch's repeat_interleave for enable_gqa: query batch (b, h) gets kv batch (b, h / G). */
static double *expand_kv(const att_case *c, const double *x, size_t rows, size_t cols)
{
    size_t nb = batch_of(c), per = rows * cols, l[2];
    kv_lead(c, l);
    size_t G = c->nlead == 2 ? c->lead[1] / l[1] : 1;
    double *out = malloc(nb * per * sizeof *out);
    for (size_t b = 0; b < nb; b++) {
        size_t kb = c->nlead == 2 ? (b / c->lead[1]) * l[1] + (b % c->lead[1]) / G : b;
        memcpy(out + b * per, x + kb * per, per * sizeof *out);
    }
    return out;
}

/* |out - ref| <= OUT_TOL * max(|ref|, sum_k w |v|). A 16-bit out is the float32 result rounded
 * once: a relative error of at most its unit roundoff u on a value within OUT_TOL of the scale
 * (tolerance OUT_TOL + u (1 + OUT_TOL)), or in float16's subnormal range half a step (added to
 * the scale as step / tol). */
static void assert_out(const float *got, const double *ref, const double *w, const double *v,
                       const att_case *c, size_t nb, const char *what)
{
    size_t n = nb * c->nq * c->dv;
    double *scale = malloc(n * sizeof *scale);
    double tol = OUT_TOL + (c->ot ? h_unit_roundoff(c->ot) : 0) * (1 + OUT_TOL);
    ref_attention_scale(nb, c->nq, c->nk, c->dv, w, v, ref, scale);
    for (size_t i = 0; i < n; i++)
        scale[i] += h_subnormal_step(c->ot) / tol;
    h_assert_scaled(got, ref, scale, n, tol, what);
    free(scale);
}

/* Seeded Q, K, V for c (malloc'd), with c's NaN rows, and its mask. */
static void make_inputs(const att_case *c, float **q, float **k, float **v, h_mask *hm)
{
    size_t nb = batch_of(c), nkb = kv_batch_of(c), nq = c->nq, nk = c->nk;
    size_t qn = nb * nq * c->d, kn = nkb * nk * c->d, vn = nkb * nk * c->dv;
    *q = malloc(qn * 4);
    *k = malloc(kn * 4);
    *v = malloc(vn * 4);
    double qs = c->qscale > 0 ? c->qscale : 1.0, vs = c->vscale > 0 ? c->vscale : 1.0;
    h_fill(*q, qn, -qs, qs);
    h_fill(*k, kn, -1, 1);
    h_fill(*v, vn, -vs, vs);
    for (size_t i = 0; c->vscale_from > 0 && i < vn; i++)
        if ((i / c->dv) % nk < (size_t)c->vscale_from - 1)
            (*v)[i] = (float)((*v)[i] / vs);
    for (size_t b = 0; b < nkb; b++) {
        for (int e = 0; c->nan_k && e < c->d; e++)
            (*k)[(b * nk + c->nan_k - 1) * c->d + e] = NAN;
        for (int e = 0; c->nan_v && e < c->dv; e++)
            (*v)[(b * nk + c->nan_v - 1) * c->dv + e] = NAN;
    }
    size_t sdims[4];
    memcpy(sdims, c->lead, sizeof(size_t) * c->nlead);
    sdims[c->nlead] = nq;
    sdims[c->nlead + 1] = nk;
    h_mask_make(hm, &c->mask, c->nlead + 2, sdims);
}

static clattn_attention_opts make_opts(const att_case *c, const h_mask *hm)
{
    clattn_attention_opts opts;
    memset(&opts, 0, sizeof opts);
    opts.mask = hm->m;
    opts.dropout.p = c->p;
    opts.dropout.training = c->p > 0;
    opts.dropout.seed = c->seed;
    opts.scale = c->scale;
    opts.bias = hm->tb.buf ? &hm->tb : NULL;
    opts.alibi_slopes = hm->ta.buf ? &hm->ta : NULL;
    return opts;
}

static void run_mode(const att_case *c)
{
    size_t nb = batch_of(c), nkb = kv_batch_of(c), nq = c->nq, nk = c->nk;
    size_t qn = nb * nq * c->d, kn = nkb * nk * c->d, vn = nkb * nk * c->dv;
    size_t on = nb * nq * c->dv, wn = nb * nq * nk;
    float *q, *k, *v;
    h_mask hm;
    make_inputs(c, &q, &k, &v, &hm);
    h_round(q, qn, c->qt); /* the reference takes the stored values */
    h_round(k, kn, c->kt);
    h_round(v, vn, c->vt);
    clattn_tensor tq = make_as(c, c->qt, 0, nq, c->d, q), tk = make_as(c, c->kt, 1, nk, c->d, k);
    clattn_tensor tv = make_as(c, c->vt, 1, nk, c->dv, v);
    clattn_tensor to = make_as(c, c->ot, 0, nq, c->dv, NULL);
    clattn_tensor tw = make_as(c, c->wt, 0, nq, nk, NULL);
    clattn_tensor tl = make_lse(c);
    h_poison(&to);
    h_poison(&tw);
    h_poison(&tl);
    clattn_attention_opts opts = make_opts(c, &hm);
    opts.lse = &tl;
    if (clattn_dot_product_attention(h_ctx, &tq, &tk, &tv, &opts, &to,
                                     c->no_weights ? NULL : &tw) != CLATTN_SUCCESS)
        fail_msg("dot_product_attention: %s", clattn_last_error(h_ctx));
    double *qd = ref_to_double(q, qn), *kf = ref_to_double(k, kn), *vf = ref_to_double(v, vn);
    double *kd = expand_kv(c, kf, nk, c->d), *vd = expand_kv(c, vf, nk, c->dv);
    double *rw = malloc(wn * 8), *ro = malloc(on * 8);
    ref_dropout_params dp = {c->p, c->seed, 0};
    double scale = c->scale != 0.0f ? (double)c->scale : 1.0 / sqrt((double)c->d);
    ref_attention(&hm.r, c->d, c->dv, qd, kd, vd, scale, &dp, rw, ro);
    char what[200];
    snprintf(what, sizeof what,
             "attention batch %zu (kv %zu) Q=%d K=%d d=%d dv=%d lens %d mask %d/%d causal %d "
             "fill %g p=%g scale %g qscale %g nan k/v %d/%d %s, Q/K/V/out/weights %s/%s/%s/%s/%s",
             nb, nkb, c->nq, c->nk, c->d, c->dv, c->mask.lens, c->mask.mask_rank,
             c->mask.mask_prefix, c->mask.causal, c->mask.fill, c->p, scale, c->qscale, c->nan_k,
             c->nan_v, c->no_weights ? "no weights" : "weights", h_dtype_name(c->qt),
             h_dtype_name(c->kt), h_dtype_name(c->vt), h_dtype_name(c->ot), h_dtype_name(c->wt));
    float *go = h_read_float(&to);
    double *wd = rw;
    if (c->p > 0) { /* the output uses the dropped weights */
        wd = malloc(wn * 8);
        memcpy(wd, rw, wn * 8);
        ref_dropout(wd, wn, 0, c->seed, 0, c->p);
    }
    assert_out(go, ro, wd, vd, c, nb, what);
    if (!c->no_weights) { /* 16-bit weights: rounded once, as a 16-bit out above */
        double u = c->wt ? h_unit_roundoff(c->wt) : 0;
        float *gw = h_read_float(&tw);
        h_assert_close(gw, rw, wn, W_RTOL + u * (1 + W_RTOL),
                       W_ATOL * (1 + u) + h_subnormal_step(c->wt), what);
        free(gw);
    }
    double *rl = malloc(nb * nq * 8), *mag = malloc(nb * nq * 8);
    ref_attention_lse(&hm.r, c->d, qd, kd, scale, rl, mag);
    float *gl = h_read(&tl);
    strncat(what, " (lse)", sizeof what - strlen(what) - 1);
    h_assert_lse(gl, rl, mag, nb * nq, what);
    if (c->no_weights && !h_small()) { /* the fused path without the LSE: the same output */
        clattn_tensor to2 = make_as(c, c->ot, 0, nq, c->dv, NULL);
        h_poison(&to2);
        opts.lse = NULL;
        if (clattn_dot_product_attention(h_ctx, &tq, &tk, &tv, &opts, &to2, NULL) !=
            CLATTN_SUCCESS)
            fail_msg("dot_product_attention (no lse): %s", clattn_last_error(h_ctx));
        void *g1 = h_read(&to), *g2 = h_read(&to2);
        if (memcmp(g1, g2, on * clattn_dtype_size(to.dtype)) != 0)
            fail_msg("%s: the output differs without the LSE output", what);
        free(g1);
        free(g2);
        clattn_tensor_release(&to2);
    }
    free(gl);
    free(rl);
    free(mag);
    if (wd != rw)
        free(wd);
    free(go);
    clattn_tensor_release(&tq); clattn_tensor_release(&tk); clattn_tensor_release(&tv);
    clattn_tensor_release(&to); clattn_tensor_release(&tw); clattn_tensor_release(&tl);
    h_mask_free(&hm);
    free(q); free(k); free(v); free(qd); free(kd); free(vd); free(kf); free(vf); free(rw);
    free(ro);
}

/* Under Oclgrind (CLATTN_TEST_SMALL) cases over this much work (batches x Q x K x (d + dv)) are
 * skipped: the smaller ones take the same kernel paths (every mask kind, partial and whole key
 * blocks, several blocks per row), and Oclgrind's time grows with the work. */
#define SMALL_WORK 50000

static int too_big(const att_case *c)
{
    return h_small() && batch_of(c) * (size_t)c->nq * c->nk * (c->d + c->dv) > SMALL_WORK;
}

/* Each case runs with the weights requested (the unfused chain) and without (the fused kernel,
 * unless CLATTN_TUNE says attention=unfused): both must match the reference. */
static void run(const att_case *c)
{
    if (too_big(c))
        return;
    att_case fused = *c;
    fused.no_weights = 1;
    if (!c->no_weights)
        run_mode(c);
    run_mode(&fused);
}

#define CASES(...)                                                 \
    do {                                                           \
        const att_case cs_[] = {__VA_ARGS__};                      \
        for (size_t i_ = 0; i_ < sizeof cs_ / sizeof cs_[0]; i_++) \
            run(&cs_[i_]);                                         \
    } while (0)

static void test_shapes(void **s)
{
    (void)s;
    CASES({1, {2}, 1, 1, 1, 1}, {1, {3}, 97, 131, 59, 23}, {1, {2}, 131, 97, 111, 7},
          {0, {0}, 13, 17, 8, 9}, {2, {2, 3}, 11, 13, 16, 5}, {1, {1}, 1, 97, 1, 111},
          {1, {2}, 33, 31, 64, 64, .no_weights = 1},
          /* dv a multiple of 16 and K of the key block: the fused kernel reads V in place */
          {1, {3}, 37, 128, 24, 32}, {2, {2, 2}, 5, 64, 7, 16, .no_weights = 1});
}

static void test_valid_lens(void **s)
{
    (void)s;
    static const int l1[] = {0, 13, 1, 7};
    CASES({1, {4}, 5, 13, 8, 6, {H_LENS_1D, 0, l1}},
          {1, {3}, 9, 31, 12, 5, {H_LENS_2D}},
          {2, {2, 3}, 4, 17, 8, 8, {H_LENS_1D}},
          {1, {3}, 9, 31, 12, 5, {H_LENS_2D, 1}},
          {1, {4}, 5, 13, 8, 6, {H_LENS_1D, 0, l1}, .no_weights = 1});
}

static void test_masks_and_causal(void **s)
{
    (void)s;
    CASES({1, {2}, 9, 9, 8, 8, {.causal = 1}}, {1, {2}, 7, 12, 8, 3, {.causal = 1}},
          {1, {2}, 12, 7, 8, 3, {.causal = 1}},
          {1, {3}, 10, 10, 4, 4, {H_LENS_1D, .causal = 1}},
          {1, {2}, 6, 19, 5, 7, {.mask_rank = 2, .mask_dims = {6, 19}}},
          {2, {2, 3}, 6, 19, 5, 7, {.mask_rank = 4, .mask_dims = {2, 1, 1, 19}}},
          {1, {2}, 6, 19, 5, 7, {.mask_rank = 3, .mask_dims = {2, 6, 19}, .fill = -1e9f}},
          {1, {2}, 70, 192, 16, 48, {H_LENS_1D, .causal = 1}},
          {2, {2, 3}, 9, 128, 8, 16, {.mask_rank = 4, .mask_dims = {2, 3, 9, 128}}},
          /* masks broadcast over the keys (key stride 0): whole rows open or blocked */
          {1, {2}, 6, 37, 5, 7, {.mask_rank = 3, .mask_dims = {2, 6, 1}}},
          {2, {2, 3}, 9, 40, 8, 16, {.mask_rank = 4, .mask_dims = {1, 3, 9, 1},
                                     .fill = -INFINITY}});
}

static void test_large_logits(void **s)
{
    (void)s;
    CASES({1, {2}, 8, 40, 32, 8, .qscale = 300}, {1, {2}, 8, 40, 32, 8, {H_LENS_2D, .causal = 1}, .qscale = 300});
}

/* An explicit scale, also negative (which turns the fused kernel's row maxima into minima), with
 * open and partly blocked key blocks. */
static void test_explicit_scale(void **s)
{
    (void)s;
    CASES({1, {2}, 21, 150, 16, 16, .scale = 0.7f}, {1, {2}, 21, 150, 16, 16, .scale = -0.3f},
          {1, {3}, 9, 131, 12, 5, {H_LENS_2D, .causal = 1}, .scale = -2.0f},
          {1, {2}, 8, 200, 32, 8, .qscale = 100, .scale = -1.0f});
}

/* d2l 11.3: keys all ones, so every valid key scores the same: uniform weights over the valid
 * prefix and an output equal to the mean of the valid values (arange(40) as (2, 10, 4)). */
static void test_toy_identical_keys(void **s)
{
    (void)s;
    float q[2 * 2], k[2 * 10 * 2], v[2 * 10 * 4];
    h_fill(q, 4, -2, 2);
    for (int i = 0; i < 40; i++)
        k[i] = 1.0f;
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < 40; i++)
            v[b * 40 + i] = (float)i;
    int lens[2] = {2, 6};
    clattn_tensor tq = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(2, 1, 2), q);
    clattn_tensor tk = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(2, 10, 2), k);
    clattn_tensor tv = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(2, 10, 4), v);
    clattn_tensor to = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(2, 1, 4), NULL);
    clattn_tensor tw = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(2, 1, 10), NULL);
    clattn_attention_opts o = {0};
    o.mask.valid_lens_host = lens;
    o.mask.lens_ndim = 1;
    o.mask.lens_dims[0] = 2;
    o.dropout.p = 0.5f; /* eval mode: training = 0 */
    assert_int_equal(clattn_dot_product_attention(h_ctx, &tq, &tk, &tv, &o, &to, &tw), CLATTN_SUCCESS);
    float *out = h_read(&to), *w = h_read(&tw);
    const float want[8] = {2, 3, 4, 5, 10, 11, 12, 13};
    for (int i = 0; i < 8; i++)
        assert_true(fabs(out[i] - want[i]) < 1e-5 * 13);
    for (int b = 0; b < 2; b++)
        for (int j = 0; j < 10; j++)
            assert_true(fabs(w[b * 10 + j] - (j < lens[b] ? 1.0 / lens[b] : 0.0)) < 1e-6);
    free(out); free(w);
    clattn_tensor_release(&tq); clattn_tensor_release(&tk); clattn_tensor_release(&tv);
    clattn_tensor_release(&to); clattn_tensor_release(&tw);
}

static void test_dropout(void **s)
{
    (void)s;
    /* the reference applies the same Philox mask, so this checks mask and scaling exactly */
    CASES({1, {2}, 16, 24, 8, 8, .p = 0.3f, .seed = 7}, {1, {3}, 5, 9, 4, 6, {H_LENS_1D}, .p = 0.5f, .seed = 99},
          {1, {2}, 16, 24, 8, 8, .p = 1.0f, .seed = 1});
}

/* Dropout is a product, as PyTorch's w * mask / (1 - p): a NaN weight (a row that sees a NaN key)
 * stays NaN when dropped, p = 1 included, on the fused and unfused paths alike. */
static void test_dropout_nan_rows(void **s)
{
    (void)s;
    CASES({1, {2}, 16, 24, 8, 8, {.causal = 1}, .p = 1.0f, .seed = 1, .nan_k = 3},
          {1, {2}, 16, 24, 8, 8, {.causal = 1}, .p = 0.5f, .seed = 5, .nan_k = 9},
          {0, {0}, 3, 2, 4, 5, .p = 0.9f, .seed = 11, .nan_k = 1});
}

/* same seed: identical output; another seed: different; weights unaffected by dropout */
static void test_dropout_reproducible(void **s)
{
    (void)s;
    float q[2 * 8 * 4], k[2 * 8 * 4], v[2 * 8 * 4];
    h_fill(q, 64, -1, 1);
    h_fill(k, 64, -1, 1);
    h_fill(v, 64, -1, 1);
    clattn_tensor tq = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(2, 8, 4), q);
    clattn_tensor tk = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(2, 8, 4), k);
    clattn_tensor tv = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(2, 8, 4), v);
    clattn_tensor to = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(2, 8, 4), NULL);
    clattn_tensor tw = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(2, 8, 8), NULL);
    clattn_attention_opts o = {0};
    float *outs[3], *ws[3];
    unsigned long long seeds[3] = {5, 5, 6};
    for (int r = 0; r < 3; r++) {
        o.dropout.p = 0.4f;
        o.dropout.training = 1;
        o.dropout.seed = seeds[r];
        assert_int_equal(clattn_dot_product_attention(h_ctx, &tq, &tk, &tv, &o, &to, &tw), CLATTN_SUCCESS);
        outs[r] = h_read(&to);
        ws[r] = h_read(&tw);
    }
    o.dropout.training = 0;
    assert_int_equal(clattn_dot_product_attention(h_ctx, &tq, &tk, &tv, &o, &to, &tw), CLATTN_SUCCESS);
    float *w_eval = h_read(&tw);
    assert_memory_equal(outs[0], outs[1], 64 * 4);
    assert_memory_not_equal(outs[0], outs[2], 64 * 4);
    for (int r = 0; r < 3; r++)
        assert_memory_equal(ws[r], w_eval, 128 * 4);
    for (int r = 0; r < 3; r++) {
        free(outs[r]);
        free(ws[r]);
    }
    free(w_eval);
    clattn_tensor_release(&tq); clattn_tensor_release(&tk); clattn_tensor_release(&tv);
    clattn_tensor_release(&to); clattn_tensor_release(&tw);
}

/* fill = -inf (PyTorch's masked_fill(-inf)) with whole key blocks blocked, as left padding does:
 * the running maximum stays -inf across those blocks and must not turn into -inf - -inf = NaN.
 * A row whose every key is blocked is NaN, as in PyTorch (length 0 below). */
static void test_neg_inf_fill(void **s)
{
    (void)s;
    static const int l0[] = {0, 200};
    const float ninf = -INFINITY;
    /* block sizes +-1 (gpu-small 8, gpu 16, cpu 16 or 64); Oclgrind (h_small) takes three */
    for (int p = 15; p <= 199;
         p += h_small() ? (p < 64 ? 64 - p : 16 + 103 * (p > 64)) :
              p < 17 ? 1 : p < 62 ? 46 : p < 66 ? 1 : p < 80 ? 15 : 119) {
        att_case c = {0, {0}, 4, 200, 8, 8, {.mask_rank = 1, .mask_dims = {200}, .mask_prefix = p,
                                              .fill = ninf}};
        run(&c);
    }
    CASES({1, {2}, 3, 200, 8, 8, {H_LENS_1D, 0, l0, .fill = -INFINITY}},
          {1, {2}, 37, 150, 5, 17, {H_LENS_2D, .causal = 1, .fill = -INFINITY}},
          {2, {2, 3}, 9, 128, 8, 16, {.mask_rank = 4, .mask_dims = {2, 3, 9, 128}, .fill = -INFINITY}});
}

/* Huge but finite scores (|Q| up to 1e30, scale up to 1e38 with scores below FLT_MAX): the
 * softmax is one-hot on each row's largest score and must not produce NaN or drift. */
static void test_huge_scores(void **s)
{
    (void)s;
    CASES({0, {0}, 16, 128, 16, 16, .qscale = 1e10}, {0, {0}, 16, 128, 16, 16, .qscale = 1e15},
          {0, {0}, 16, 128, 16, 16, .qscale = 1e30},
          {1, {2}, 16, 150, 16, 16, {H_LENS_2D, .causal = 1}, .qscale = 1e30},
          {1, {2}, 9, 131, 16, 8, .qscale = 1e-3, .scale = 1e38f},
          {1, {2}, 9, 131, 16, 8, {.mask_rank = 2, .mask_dims = {9, 131}}, .qscale = 1e-3,
           .scale = -1e38f});
}

/* Values near FLT_MAX: the average stays finite, though the unnormalised sums of the fused
 * kernels (weights up to 1 each, divided by their sum at the end) pass FLT_MAX for all but a few
 * keys. Those rows are redone with their weights scaled by a power of two: the output is that
 * of the unfused path, which normalises first. Near-uniform weights (small Q) make the sums
 * largest; blocks +-1, a causal diagonal, lengths, grouped-query heads, dropout (its 1 / (1 - p)
 * keeps the unfused sums under FLT_MAX at p = 0.5 and values up to 1e38) and the LSE too. */
static void test_huge_values(void **s)
{
    (void)s;
    static const int l1[] = {0, 1, 63, 150};
    CASES({0, {0}, 5, 200, 16, 16, .qscale = 1e-3, .vscale = 3e38},
          {0, {0}, 16, 65, 16, 24, .vscale = 3e38},
          {1, {2}, 37, 150, 5, 17, {H_LENS_2D, .causal = 1}, .qscale = 1e-3, .vscale = 3e38},
          {1, {4}, 7, 150, 8, 8, {H_LENS_1D, 0, l1}, .qscale = 1e-2, .vscale = 3e38},
          {2, {2, 4}, 9, 129, 16, 16, {.causal = 1}, .hkv = 2, .qscale = 1e-3, .vscale = 3e38},
          {1, {2}, 12, 140, 8, 8, .qscale = 1e-3, .vscale = 1e38, .p = 0.5f, .seed = 7},
          {0, {0}, 33, 300, 16, 16, .qscale = 3, .vscale = 3e38},
          /* -gpu-small's launches take 240 of these keys each, and the values are huge from
           * key 399 on: the sums overflow in the second launch, which scales the state the
           * first left */
          {0, {0}, 20, 600, 16, 16, .qscale = 1e-3, .vscale = 3e38, .vscale_from = 400});
}

/* Identical keys give identical scores, so the weights are exactly uniform over the open keys and
 * the output is their values' mean, however large the scores (here about 6e8, where one ulp is
 * 64): every key block must round its scores and maxima alike, masked or not. Also Q = 0 with a
 * scale near FLT_MAX (scores 0: the mean of every value). */
static void identical_keys(float qval, float scale, int open_from)
{
    enum { NK = 200, D = 4, DV = 4 };
    float q[3 * D], k[NK * D], v[NK * DV];
    int mask[NK];
    for (int i = 0; i < 3 * D; i++)
        q[i] = qval;
    for (int i = 0; i < NK * D; i++)
        k[i] = 1.0f;
    h_fill(v, NK * DV, -1, 1);
    double mean[DV] = {0};
    for (int j = 0; j < NK; j++) {
        mask[j] = j >= open_from && j % 7 != 3;
        for (int c = 0; j >= open_from && j % 7 != 3 && c < DV; c++)
            mean[c] += v[j * DV + c];
    }
    int nopen = 0;
    for (int j = 0; j < NK; j++)
        nopen += mask[j];
    clattn_tensor tq = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(3, D), q);
    clattn_tensor tk = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(NK, D), k);
    clattn_tensor tv = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(NK, DV), v);
    clattn_tensor tm = h_tensor(CLATTN_INT32, 1, H_DIMS(NK), mask);
    clattn_tensor to = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(3, DV), NULL);
    clattn_tensor tw = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(3, NK), NULL);
    clattn_attention_opts o = {0};
    o.mask.mask = &tm;
    o.scale = scale;
    for (int weights = 0; weights < 2; weights++) {
        h_poison(&to);
        assert_int_equal(clattn_dot_product_attention(h_ctx, &tq, &tk, &tv, &o, &to,
                                                      weights ? &tw : NULL), CLATTN_SUCCESS);
        float *out = h_read(&to);
        for (int i = 0; i < 3 * DV; i++)
            if (!(fabs(out[i] - mean[i % DV] / nopen) <= 1e-6))
                fail_msg("identical keys, q = %g, scale %g, %s: out[%d] = %.9g, mean %.9g", qval,
                         scale, weights ? "weights" : "fused", i, out[i], mean[i % DV] / nopen);
        free(out);
    }
    clattn_tensor_release(&tq); clattn_tensor_release(&tk); clattn_tensor_release(&tv);
    clattn_tensor_release(&tm); clattn_tensor_release(&to); clattn_tensor_release(&tw);
}

static void test_identical_keys_huge(void **s)
{
    (void)s;
    identical_keys(3e8f, 0.5f, 70);  /* scores 6e8; the first 70 keys and every 7th blocked */
    identical_keys(2e6f, 0.5f, 0);   /* scores 4e6 */
    identical_keys(0.0f, 3e38f, 0);  /* scores 0 */
}

/* IEEE arithmetic, as PyTorch's weights @ V: a NaN in any value row reaches its batch's outputs in
 * every column, even through weights of exactly 0 (blocked keys, skipped key blocks included); a
 * NaN in a blocked key's K row changes nothing (masked_fill replaces its score). */
static void test_nan_in_blocked_rows(void **s)
{
    (void)s;
    static const int l1[] = {3, 150};
    CASES({1, {2}, 5, 150, 8, 8, {H_LENS_1D, 0, l1}, .nan_v = 140},
          {1, {2}, 70, 150, 8, 8, {.causal = 1}, .nan_v = 150},
          {1, {2}, 5, 150, 8, 8, {H_LENS_1D, 0, l1}, .nan_k = 140},
          {1, {2}, 70, 150, 8, 8, {.causal = 1}, .nan_k = 150},
          {1, {2}, 6, 130, 5, 7, {.mask_rank = 1, .mask_dims = {130}, .mask_prefix = 100},
           .nan_k = 20, .nan_v = 120});
}

/* Seventy distinct (d, dv) pairs in one context: the fused kernels are built per bucket of head
 * sizes, not per size, so the context's programs stay few and every call keeps working. */
static void test_many_head_sizes(void **s)
{
    (void)s;
    for (int i = 0; i < 70; i += h_small() ? 6 : 1) { /* Oclgrind: 12 shapes, still 3 buckets */
        att_case c = {1, {2}, 3, 21, 1 + i, 64 - (i * 37) % 64, .no_weights = 1};
        run(&c);
    }
}

/* Long key ranges: on a device that bounds a work-item's loops (llvmpipe) the kernels split them
 * over launches (matmul's k-slices, the fused kernel's key ranges). The first case came out wrong
 * on llvmpipe in one launch. */
static void test_long_keys(void **s)
{
    (void)s;
    static const int l5[] = {5};
    CASES({0, {0}, 32, 2048, 64, 64}, {1, {2}, 5, 3001, 64, 48},
          {0, {0}, 20, 2500, 16, 70, {H_LENS_1D, 0, l5}, .nan_v = 2400},
          {0, {0}, 33, 2100, 16, 16, {H_LENS_2D, .causal = 1, .fill = -INFINITY}},
          {0, {0}, 4, 2000, 32, 32, .p = 0.3f, .seed = 7});
}

/* Grouped-query and multi-query attention: Hq / Hkv = 1, 2, 3, 8 query heads per K/V head, with
 * every mask kind (lengths per batch and per row, a mask tensor over heads and rows, causal),
 * dropout (the stream index is the query head's), NaN values, one query, one key, key counts of a
 * block size +- 1 (16, 64, 8 in the variants), and d != dv. */
static void test_grouped_query(void **s)
{
    (void)s;
    static const int l3[] = {0, 17, 5};
    CASES({2, {2, 4}, 7, 13, 8, 6, .hkv = 2}, {2, {1, 8}, 5, 33, 16, 16, .hkv = 1},
          {2, {3, 6}, 9, 17, 12, 20, .hkv = 2}, {2, {2, 3}, 1, 65, 64, 64, .hkv = 1},
          {2, {1, 8}, 11, 1, 4, 3, .hkv = 4}, {2, {2, 4}, 3, 63, 24, 32, .hkv = 4},
          {2, {2, 4}, 20, 15, 8, 8, {.causal = 1}, .hkv = 2},
          {2, {3, 4}, 6, 17, 8, 5, {H_LENS_1D, 0, l3}, .hkv = 1},
          {2, {2, 6}, 9, 31, 12, 5, {H_LENS_2D, .causal = 1}, .hkv = 3},
          {2, {2, 4}, 6, 19, 5, 7, {.mask_rank = 4, .mask_dims = {2, 4, 6, 19}}, .hkv = 2},
          {2, {2, 4}, 6, 19, 5, 7, {.mask_rank = 3, .mask_dims = {4, 1, 19}, .fill = -INFINITY},
           .hkv = 1},
          {2, {2, 4}, 16, 24, 8, 8, .p = 0.3f, .seed = 7, .hkv = 2},
          {2, {1, 4}, 5, 150, 8, 8, {H_LENS_1D}, .nan_v = 140, .hkv = 2},
          {2, {1, 8}, 70, 129, 64, 64, {.causal = 1}, .hkv = 2, .no_weights = 1});
}

/* Bottom-right causal and sliding windows (FlashAttention-2's semantics), fused and unfused:
 * Q < K, Q > K (rows that see no key: uniform with a finite fill, NaN with -inf), windows bounded
 * on one side or both, of a block size +- 1 and with causal, under lengths, a mask tensor,
 * dropout and grouped heads; K long enough that whole key blocks lie below every row's window
 * (the fused kernels skip them), with a NaN value there (it must still reach the outputs, as
 * weights @ V), and a fill near the scores, where the blocked keys keep real weights and the
 * skipped blocks must be taken after all. */
static void test_windows(void **s)
{
    (void)s;
    static const int l3[] = {0, 300, 120};
    CASES({1, {2}, 5, 37, 8, 8, {.causal = 1, .align = 1}},
          {1, {2}, 40, 13, 8, 6, {.causal = 1, .align = 1}},
          {1, {2}, 40, 13, 8, 6, {.causal = 1, .align = 1, .fill = -INFINITY}},
          {1, {2}, 17, 17, 16, 16, {.causal = 1, .align = 1}},
          {1, {2}, 30, 300, 16, 24, {.window = 1, .window_left = 20, .window_right = -1}},
          {1, {2}, 30, 300, 16, 24, {.window = 1, .window_left = -1, .window_right = 7}},
          {1, {2}, 70, 300, 8, 8, {.window = 1, .window_left = 15, .window_right = 16,
                                   .align = 1}},
          {1, {2}, 70, 300, 8, 8, {.window = 1, .window_left = 63, .window_right = 64,
                                   .align = 1}},
          {0, {0}, 200, 200, 16, 16, {.causal = 1, .window = 1, .window_left = 17,
                                      .window_right = 5}},
          {1, {3}, 9, 300, 12, 5, {H_LENS_1D, 0, l3, .window = 1, .window_left = 40,
                                   .window_right = 40, .align = 1}},
          {1, {2}, 9, 150, 12, 5, {H_LENS_2D, .causal = 1, .window = 1, .window_left = 3,
                                   .window_right = -1, .align = 1}},
          {1, {2}, 6, 190, 5, 7, {.mask_rank = 2, .mask_dims = {6, 190}, .window = 1,
                                  .window_left = 0, .window_right = 0, .align = 1}},
          {1, {2}, 16, 240, 8, 8, {.window = 1, .window_left = 30, .window_right = 2,
                                   .align = 1}, .p = 0.3f, .seed = 7},
          /* (K = 120: rows see about keys q + 90 to q + 110, so the first 5 key blocks of 16 lie
           * below every window; small enough for Oclgrind) */
          {1, {2}, 20, 120, 8, 8, {.window = 1, .window_left = 10, .window_right = 10,
                                   .align = 1, .fill = -INFINITY}, .nan_v = 5},
          {1, {2}, 20, 120, 8, 8, {.window = 1, .window_left = 10, .window_right = 10,
                                   .align = 1}, .nan_v = 118},
          {1, {2}, 20, 120, 8, 8, {.window = 1, .window_left = 10, .window_right = -1,
                                   .align = 1, .fill = -1.0f}, .qscale = 2},
          {1, {2}, 20, 120, 8, 8, {.window = 1, .window_left = 500, .window_right = 500}},
          /* sides as wide as an int (no row bound may overflow), and each one key short of
           * blocking nothing (the host takes wider sides for unbounded: Q - 1 + shift on the
           * left, K - 1 - shift on the right, shift = K - Q bottom-right) */
          {1, {2}, 20, 120, 8, 8, {.window = 1, .window_left = INT_MAX, .window_right = INT_MAX,
                                   .align = 1}},
          {1, {2}, 40, 13, 8, 6, {.window = 1, .window_left = INT_MAX, .window_right = INT_MAX}},
          {1, {2}, 20, 120, 8, 8, {.window = 1, .window_left = 18, .window_right = 118}},
          {1, {2}, 20, 120, 8, 8, {.window = 1, .window_left = 118, .window_right = 18,
                                   .align = 1}},
          {1, {2}, 40, 13, 8, 6, {.window = 1, .window_left = 11, .window_right = 38,
                                  .align = 1}},
          {2, {2, 4}, 20, 260, 8, 8, {.causal = 1, .window = 1, .window_left = 33,
                                      .align = 1}, .hkv = 2},
          /* a NaN value below every row's window inside the rows' first key block (of 64), and
           * past every row's limit inside the causal diagonal's block; and a fill near the
           * scores there: the fused P V skips the keys no row of a group sees only when their
           * weights are exactly 0 and their values finite */
          {1, {2}, 20, 120, 8, 8, {.window = 1, .window_left = 10, .window_right = 10,
                                   .align = 1}, .nan_v = 70},
          {1, {2}, 20, 120, 8, 8, {.window = 1, .window_left = 10, .window_right = 10,
                                   .align = 1, .fill = -1.0f}, .qscale = 2},
          {0, {0}, 20, 120, 8, 8, {.causal = 1}, .nan_v = 30});
}

/* The fused output of c with tuning (a context wrapping h_ctx's queue), as raw floats; *scratch:
 * the scratch the context held after it. */
static float *fused_with(const char *tuning, const att_case *c, const float *q, const float *k,
                         const float *v, const h_mask *hm, size_t *scratch)
{
    clattn_context *ctx = h_ctx_tuned(tuning);
    clattn_tensor tq = make_as(c, c->qt, 0, c->nq, c->d, q);
    clattn_tensor tk = make_as(c, c->kt, 1, c->nk, c->d, k);
    clattn_tensor tv = make_as(c, c->vt, 1, c->nk, c->dv, v);
    clattn_tensor to = make_as(c, c->ot, 0, c->nq, c->dv, NULL), tl = make_lse(c);
    h_poison(&to);
    h_poison(&tl);
    clattn_attention_opts opts = make_opts(c, hm);
    opts.lse = &tl;
    if (clattn_dot_product_attention(ctx, &tq, &tk, &tv, &opts, &to, NULL) != CLATTN_SUCCESS)
        fail_msg("%s: %s", tuning, clattn_last_error(ctx));
    size_t on = clattn_tensor_numel(&to), ln = clattn_tensor_numel(&tl);
    float *o = h_read_float(&to), *l = h_read(&tl);
    o = realloc(o, (on + ln) * sizeof *o);
    memcpy(o + on, l, ln * sizeof *l); /* the output, then the LSEs */
    *scratch = clattn_context_scratch_bytes(ctx);
    clattn_tensor_release(&tq); clattn_tensor_release(&tk); clattn_tensor_release(&tv);
    clattn_tensor_release(&to); clattn_tensor_release(&tl);
    clattn_context_destroy(&ctx);
    free(l);
    return o;
}

/* A float bias (SDPA's float attn_mask) broadcast from every rank, with -inf entries (every
 * fifth), large values, and with lengths, causal, windows, 0/1 masks, dropout, grouped heads;
 * K of a block size +- 1 and over one key block. */
static void test_bias(void **s)
{
    (void)s;
    static const int l1[] = {0, 37, 5};
    CASES({1, {2}, 9, 37, 8, 6, {.bias_rank = 3, .bias_dims = {2, 9, 37}}},
          {1, {3}, 5, 37, 16, 16, {H_LENS_1D, 0, l1, .bias_rank = 2, .bias_dims = {5, 37}}},
          {2, {2, 3}, 7, 15, 8, 8, {.causal = 1, .bias_rank = 4, .bias_dims = {2, 3, 7, 15}}},
          {2, {2, 3}, 7, 17, 8, 8, {.bias_rank = 2, .bias_dims = {1, 17}, .bias_ninf = 5}},
          {2, {2, 3}, 7, 64, 8, 8, {.bias_rank = 4, .bias_dims = {1, 3, 1, 64},
                                    .fill = -INFINITY}},
          {1, {2}, 11, 65, 12, 5, {.bias_rank = 3, .bias_dims = {2, 11, 1}, .bias_mag = 300}},
          {1, {2}, 6, 33, 8, 8, {.mask_rank = 2, .mask_dims = {6, 33}, .bias_rank = 1,
                                 .bias_dims = {33}, .bias_ninf = 3}},
          {1, {2}, 20, 130, 16, 16, {.window = 1, .window_left = 20, .window_right = 5,
                                     .align = 1, .bias_rank = 3, .bias_dims = {2, 20, 130}}},
          {2, {2, 4}, 5, 40, 16, 16, {.causal = 1, .align = 1, .bias_rank = 4,
                                      .bias_dims = {2, 4, 5, 40}}, .hkv = 2},
          {1, {2}, 16, 24, 8, 8, {.bias_rank = 3, .bias_dims = {2, 16, 24}}, .p = 0.3f,
           .seed = 5});
}

/* ALiBi slopes, (H), (B, H), (B) and broadcast (1), computed in the kernels: Press et al.'s
 * slopes and random ones up to 30 (logits to -3e3 across a row), every mask kind, Q != K (the
 * distance counts from the bottom-right diagonal, also under top-left causal), a float bias
 * beside them, GQA, dropout, one key, key blocks +- 1 and 4097 keys. */
static void test_alibi(void **s)
{
    (void)s;
    static const int l1[] = {0, 40, 3};
    CASES({2, {2, 3}, 37, 37, 16, 16, {.causal = 1, .alibi_rank = 1, .alibi_dims = {3}}},
          {2, {2, 3}, 7, 40, 8, 6, {.causal = 1, .align = 1, .alibi_rank = 2,
                                    .alibi_dims = {2, 3}, .alibi_mag = 1}},
          {1, {3}, 9, 40, 12, 5, {H_LENS_1D, 0, l1, .fill = -INFINITY, .alibi_rank = 1,
                                  .alibi_dims = {3}, .alibi_mag = 30}},
          {2, {2, 3}, 20, 9, 8, 8, {.causal = 1, .alibi_rank = 1, .alibi_dims = {1}}},
          {2, {2, 2}, 6, 33, 8, 8, {.mask_rank = 2, .mask_dims = {6, 33}, .alibi_rank = 2,
                                    .alibi_dims = {2, 1}, .alibi_mag = 2}},
          {1, {2}, 20, 130, 16, 16, {H_LENS_2D, .window = 1, .window_left = 20,
                                     .window_right = 5, .align = 1, .bias_rank = 3,
                                     .bias_dims = {2, 20, 130}, .alibi_rank = 1,
                                     .alibi_dims = {2}, .alibi_mag = 1}},
          {2, {2, 4}, 5, 40, 16, 16, {.causal = 1, .align = 1, .alibi_rank = 1,
                                      .alibi_dims = {4}}, .hkv = 2},
          {2, {1, 8}, 1, 65, 32, 32, {.alibi_rank = 1, .alibi_dims = {8}}, .hkv = 1},
          {2, {1, 2}, 63, 1, 8, 8, {.alibi_rank = 1, .alibi_dims = {2}, .alibi_mag = 30}},
          {1, {2}, 16, 24, 8, 8, {.alibi_rank = 1, .alibi_dims = {2}}, .p = 0.3f, .seed = 5},
          {2, {1, 2}, 3, 4097, 8, 8, {H_LENS_1D, .causal = 1, .align = 1, .alibi_rank = 1,
                                      .alibi_dims = {2}, .alibi_mag = 0.01}});
}

#define F16 CLATTN_FLOAT16
#define BF16 CLATTN_BFLOAT16
#define F32 CLATTN_FLOAT32
/* 16-bit Q, K, V, out and weights in combinations that put each dtype in each place, on the fused
 * and unfused paths, against the reference on the stored (rounded) inputs: awkward and
 * whole-block shapes (a 16-bit V is packed where a float32 one is read in place), lengths with
 * 0, causal, a 0/1 mask, windows, a bias and ALiBi, grouped heads, dropout, large logits, NaN
 * values. Under Oclgrind two combinations (every dtype in every place) and the small cases. */
static void test_16bit(void **s)
{
    (void)s;
    static const int l1[] = {0, 13, 1, 7};
    static const clattn_dtype combos[3][5] = {{F16, F16, F16, F16, F16},
                                              {BF16, BF16, BF16, F32, BF16},
                                              {F32, F16, BF16, BF16, F32}};
    for (int i = 0; i < 3; i++) {
        const clattn_dtype *t = combos[i];
#define T16 .qt = t[0], .kt = t[1], .vt = t[2], .ot = t[3], .wt = t[4]
        if (h_small() && i == 1)
            continue;
        CASES({1, {2}, 37, 67, 59, 23, T16}, {1, {3}, 37, 128, 24, 32, T16},
              {1, {4}, 5, 13, 8, 6, {H_LENS_1D, 0, l1}, T16},
              {1, {2}, 12, 7, 8, 3, {.causal = 1}, T16},
              {2, {2, 3}, 6, 19, 5, 7, {.mask_rank = 4, .mask_dims = {2, 1, 1, 19}}, T16},
              {1, {2}, 20, 120, 8, 8, {.window = 1, .window_left = 10, .window_right = 10,
                                       .align = 1}, .nan_v = 118, T16},
              /* a NaN value row in the key block below every window: the skipped blocks' sums
               * read the packed float32 rows (CPU shape) or V itself (GPU shape) */
              {1, {2}, 20, 120, 8, 8, {.window = 1, .window_left = 10, .window_right = 10,
                                       .align = 1, .fill = -INFINITY}, .nan_v = 50, T16},
              {2, {2, 4}, 5, 40, 16, 16, {.causal = 1, .align = 1, .bias_rank = 4,
                                          .bias_dims = {2, 4, 5, 40}, .alibi_rank = 1,
                                          .alibi_dims = {4}}, .hkv = 2, T16},
              {1, {3}, 5, 9, 4, 6, {H_LENS_1D}, .p = 0.5f, .seed = 99, T16},
              {1, {2}, 8, 40, 32, 8, {H_LENS_2D, .causal = 1}, .qscale = 100, T16});
#undef T16
    }
}

/* int32 where a float is needed, on every tensor argument; nothing is written. */
static void test_16bit_bad_input(void **s)
{
    (void)s;
    float z[2 * 4 * 8] = {0}, o[2 * 4 * 8];
    h_fill(o, 64, 5, 6);
    clattn_tensor tq = h_tensor_as(F16, 3, H_DIMS(2, 4, 8), z);
    clattn_tensor tk = h_tensor_as(BF16, 3, H_DIMS(2, 4, 8), z);
    clattn_tensor tv = h_tensor_as(F16, 3, H_DIMS(2, 4, 8), z);
    clattn_tensor ti = h_tensor(CLATTN_INT32, 3, H_DIMS(2, 4, 8), NULL);
    clattn_tensor to = h_tensor(F32, 3, H_DIMS(2, 4, 8), o);
    clattn_tensor tw = h_tensor(F32, 3, H_DIMS(2, 4, 4), o);
    clattn_tensor tiw = h_tensor(CLATTN_INT32, 3, H_DIMS(2, 4, 4), NULL);
    h_assert_error(clattn_dot_product_attention(h_ctx, &ti, &tk, &tv, NULL, &to, &tw),
                   CLATTN_ERROR_INVALID_TENSOR, "Q: dtype int32");
    h_assert_error(clattn_dot_product_attention(h_ctx, &tq, &ti, &tv, NULL, &to, &tw),
                   CLATTN_ERROR_INVALID_TENSOR, "K: dtype int32");
    h_assert_error(clattn_dot_product_attention(h_ctx, &tq, &tk, &ti, NULL, &to, &tw),
                   CLATTN_ERROR_INVALID_TENSOR, "V: dtype int32");
    h_assert_error(clattn_dot_product_attention(h_ctx, &tq, &tk, &tv, NULL, &ti, &tw),
                   CLATTN_ERROR_INVALID_TENSOR, "out: dtype int32");
    h_assert_error(clattn_dot_product_attention(h_ctx, &tq, &tk, &tv, NULL, &to, &tiw),
                   CLATTN_ERROR_INVALID_TENSOR, "weights: dtype int32");
    h_assert_bytes(&to, o, "out of a refused attention");
    h_assert_bytes(&tw, o, "weights of a refused attention");
    clattn_tensor *ts[] = {&tq, &tk, &tv, &ti, &to, &tw, &tiw};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        clattn_tensor_release(ts[i]);
}

/* Case i's fused outputs then LSEs (fused_with's n floats) computed two ways, a and b, bit for
 * bit the same. */
static void same_bits(const float *x, const float *y, size_t n, size_t i, const att_case *c,
                      const char *a, const char *b)
{
    for (size_t e = 0; e < n; e++)
        if (memcmp(&x[e], &y[e], sizeof *x) != 0)
            fail_msg("case %zu (Q=%d K=%d d=%d dv=%d): output (then LSE) %zu is %.9g %s, %.9g %s",
                     i, c->nq, c->nk, c->d, c->dv, e, x[e], a, y[e], b);
}

/* The fused GPU kernel over its keys in several launches (a loop budget, LOOPS) computes bit for
 * bit what one launch does, outputs and LSEs: rows that stop early (lengths, causal), values past the stop that are
 * NaN, -inf fills, dropout, huge scores, the largest head sizes. The split shows in the scratch:
 * only split launches keep row states there. */
static void test_split_launches(void **s)
{
    (void)s;
    if (h_forced_variant()) /* its own tunings only (harness.h) */
        skip();
    static const int l5[] = {5};
    const att_case cases[] = {
        {1, {3}, 37, 700, 64, 40, {H_LENS_2D}},
        {0, {0}, 20, 900, 16, 70, {H_LENS_1D, 0, l5}, .nan_v = 800},
        {0, {0}, 50, 600, 8, 8, {.causal = 1, .fill = -INFINITY}},
        {0, {0}, 4, 700, 8, 8, {.mask_rank = 1, .mask_dims = {700}, .mask_prefix = 650,
                                .fill = -INFINITY}},
        {1, {2}, 9, 500, 32, 32, .p = 0.25f, .seed = 99},
        {0, {0}, 16, 400, 16, 16, .qscale = 1e30},
        {0, {0}, 3, 300, 200, 256, {H_LENS_2D}},
        /* windows: the tiles below every row's window come last, or not at all */
        {1, {2}, 40, 700, 16, 16, {.window = 1, .window_left = 30, .window_right = 10,
                                   .align = 1}},
        {0, {0}, 20, 400, 8, 8, {.window = 1, .window_left = 10, .window_right = -1, .align = 1,
                                 .fill = -1.0f}, .qscale = 2},
        {0, {0}, 20, 400, 8, 8, {.window = 1, .window_left = 10, .window_right = 10, .align = 1,
                                 .fill = -INFINITY}, .nan_v = 5},
        /* 16-bit operands: a 16-bit out keeps the split's partial outputs in float32 */
        {0, {0}, 4, 500, 16, 8, {.causal = 1, .align = 1}, .qt = CLATTN_FLOAT16,
         .kt = CLATTN_BFLOAT16, .vt = CLATTN_FLOAT16, .ot = CLATTN_FLOAT16},
        {1, {2}, 9, 500, 32, 24, {H_LENS_2D}, .vt = CLATTN_BFLOAT16, .ot = CLATTN_BFLOAT16},
        /* values near FLT_MAX: the rows are redone with scaled weights, in the first launch
         * already or, for values huge from key 399, in a later one, scaling what the earlier
         * left */
        {1, {2}, 9, 500, 16, 16, .qscale = 1e-3, .vscale = 3e38},
        {0, {0}, 20, 600, 16, 16, .qscale = 1e-3, .vscale = 3e38, .vscale_from = 400},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const att_case *c = &cases[i];
        if (too_big(c))
            continue;
        float *q, *k, *v;
        h_mask hm;
        size_t one_bytes, split_bytes, n = batch_of(c) * c->nq * (c->dv + 1); /* out, LSE */
        make_inputs(c, &q, &k, &v, &hm);
        float *one = fused_with("attention=gpu:BQ=16:BK=8", c, q, k, v, &hm, &one_bytes);
        float *split = fused_with("attention=gpu:BQ=16:BK=8:LOOPS=24000", c, q, k, v, &hm,
                                  &split_bytes);
        /* (on llvmpipe the device's own budget splits both) */
        if (split_bytes <= one_bytes && !strstr(clattn_context_description(h_ctx), "llvmpipe"))
            fail_msg("case %zu: LOOPS=24000 took one launch (scratch %zu bytes, %zu without)", i,
                     split_bytes, one_bytes);
        same_bits(one, split, n, i, c, "in one launch", "split");
        free(one); free(split); free(q); free(k); free(v);
        h_mask_free(&hm);
    }
}

/* The zero-weight value sums under a loop budget: with 12500 key blocks (BK=8) under LOOPS=20000
 * the prefix and suffix sums of the block flags take two launches each, and a NaN value that
 * only the carry between them brings to a row's skipped blocks must still reach its outputs
 * (against the reference): one at the last key, past the first rows' windows (top-left), one at
 * the first, below the last rows' windows (bottom-right), each with both sums and with its own
 * alone (the prefix sums in place on the flags: a window with no right side; the suffix sums:
 * causal); and a finite V that the carries keep finite. */
static void test_split_value_sums(void **s)
{
    (void)s;
    if (h_forced_variant()) /* its own tunings only (harness.h) */
        skip();
    clattn_context *suite = h_ctx;
    h_ctx = h_ctx_tuned("attention=gpu:BQ=16:BK=8:LOOPS=20000");
    CASES({0, {0}, 3, 100000, 8, 8, {.window = 1, .window_left = 4, .window_right = 4},
           .nan_v = 100000},
          {0, {0}, 3, 100000, 8, 8, {.causal = 1}, .nan_v = 100000},
          {0, {0}, 3, 100000, 8, 8, {.window = 1, .window_left = 4, .window_right = 4,
                                     .align = 1}, .nan_v = 1},
          {0, {0}, 3, 100000, 8, 8, {.window = 1, .window_left = 4, .window_right = -1,
                                     .align = 1}, .nan_v = 1},
          {1, {2}, 5, 100000, 8, 16, {.window = 1, .window_left = 9, .window_right = 2,
                                      .align = 1}});
    clattn_context_destroy(&h_ctx);
    h_ctx = suite;
}

/* The CPU kernel's row groups each take key blocks from their own first (the lowest of their
 * rows' windows), the blocks below it last, whatever the other groups of their work-item need:
 * so with the same tiles a row's output and LSE are bit for bit the same with one group per item
 * as with several. Windows whose rows' first blocks differ within an item (a fill near the
 * scores, so that the blocks below a group's window are computed after all; a NaN value there;
 * -inf fills), under lengths, causal, a mask, dropout, grouped heads and huge values. */
static void test_group_order(void **s)
{
    (void)s;
    if (h_forced_variant()) /* its own tunings only (harness.h) */
        skip();
    if (strstr(clattn_context_description(h_ctx), "llvmpipe")) { /* CPU shapes refused there */
        print_message("skipped on llvmpipe: the CPU-shaped kernel's tiles\n");
        skip();
    }
    static const int l3[] = {0, 300, 120};
    const att_case cases[] = {
        {1, {2}, 40, 300, 8, 8, {.window = 1, .window_left = 15, .window_right = 3, .align = 1}},
        {1, {2}, 40, 300, 8, 8, {.window = 1, .window_left = 15, .window_right = 3, .align = 1,
                                 .fill = -1.0f}, .qscale = 2},
        {1, {2}, 40, 300, 8, 8, {.window = 1, .window_left = 15, .window_right = 3, .align = 1,
                                 .fill = -INFINITY}, .nan_v = 270},
        {1, {2}, 40, 300, 8, 8, {.window = 1, .window_left = 0, .window_right = 0, .align = 1},
         .nan_v = 265},
        {0, {0}, 90, 90, 16, 16, {.causal = 1, .window = 1, .window_left = 9, .window_right = 5}},
        {1, {3}, 30, 300, 12, 5, {H_LENS_1D, 0, l3, .window = 1, .window_left = 20,
                                  .window_right = 20, .align = 1}},
        {1, {2}, 30, 190, 5, 7, {.mask_rank = 2, .mask_dims = {30, 190}, .window = 1,
                                 .window_left = 6, .window_right = 1, .align = 1}},
        {1, {2}, 40, 240, 8, 8, {.window = 1, .window_left = 30, .window_right = 2, .align = 1},
         .p = 0.3f, .seed = 7},
        {2, {2, 4}, 40, 260, 8, 8, {.causal = 1, .window = 1, .window_left = 33, .align = 1},
         .hkv = 2},
        {1, {2}, 40, 300, 16, 16, {.window = 1, .window_left = 21, .window_right = 4,
                                   .align = 1}, .qscale = 1e-3, .vscale = 3e38},
        /* small enough for Oclgrind: bottom-right, groups starting at different blocks */
        {1, {1}, 24, 80, 8, 8, {.window = 1, .window_left = 14, .window_right = 1, .align = 1,
                                .fill = -1.0f}, .qscale = 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const att_case *c = &cases[i];
        if (too_big(c))
            continue;
        float *q, *k, *v;
        h_mask hm;
        size_t bytes, n = batch_of(c) * c->nq * (c->dv + 1); /* out, LSE */
        make_inputs(c, &q, &k, &v, &hm);
        float *one = fused_with("attention=cpu:QR=2:KB=16:WG=2:QG=1:VC=16", c, q, k, v, &hm,
                                &bytes);
        float *many = fused_with("attention=cpu:QR=2:KB=16:WG=2:QG=7:VC=16", c, q, k, v, &hm,
                                 &bytes);
        same_bits(one, many, n, i, c, "with one group per item", "with 7");
        free(one); free(many); free(q); free(k); free(v);
        h_mask_free(&hm);
    }
}

/* The GPU-shaped fused kernel counts keys in int up to its last tile's end: K past
 * (INT_MAX / BK - 1) x BK keys is refused before anything is enqueued (out untouched). Two
 * float16 tensors of 4 GiB (never touched): only with CLATTN_TEST_HUGE=1 (meson's
 * dot_product-huge, suite fuzz: CI's long checks). */
static void test_huge_keys(void **s)
{
    (void)s;
    if (!h_huge())
        skip();
    clattn_context *ctx = h_ctx_tuned("attention=gpu:BQ=16:BK=16");
    float one = 1.0f, poison = 7.0f, got = 0.0f;
    size_t kd[2] = {(size_t)(INT32_MAX / 16 - 1) * 16 + 1, 1};
    clattn_tensor tq = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(1, 1), &one);
    clattn_tensor to = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(1, 1), &poison);
    clattn_tensor tk, tv;
    assert_int_equal(clattn_tensor_create(ctx, CLATTN_FLOAT16, 2, kd, NULL, &tk), CLATTN_SUCCESS);
    assert_int_equal(clattn_tensor_create(ctx, CLATTN_FLOAT16, 2, kd, NULL, &tv), CLATTN_SUCCESS);
    clattn_status st = clattn_dot_product_attention(ctx, &tq, &tk, &tv, NULL, &to, NULL);
    const char *want = "attention=gpu: K = 2147483617 keys in tiles of BK=16 pass 32-bit key "
                       "indexing; at most 2147483616 keys";
    if (st != CLATTN_ERROR_UNSUPPORTED || !strstr(clattn_last_error(ctx), want))
        fail_msg("status %d: %s (expected \"%s\")", st, clattn_last_error(ctx), want);
    assert_int_equal(clattn_tensor_read_blocking(ctx, &to, &got), CLATTN_SUCCESS);
    assert_memory_equal(&got, &poison, sizeof got);
    clattn_tensor *ts[] = {&tq, &to, &tk, &tv};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        clattn_tensor_release(ts[i]);
    clattn_context_destroy(&ctx);
}

/* The tiles the table takes at head size 256 on PoCL's AVX-512 Xeons (QR=10 rows of 32-key
 * blocks, 16 groups per item), forced here on any CPU: rows not a multiple of 10 or of an item's
 * 160, keys a block +- 1, head sizes 129-256, every mask kind, dropout, NaN values, grouped
 * heads, large logits. */
static void test_wide_head_tiles(void **s)
{
    (void)s;
    if (h_forced_variant()) /* its own tunings only (harness.h) */
        skip();
    if (strstr(clattn_context_description(h_ctx), "llvmpipe")) { /* CPU shapes refused there */
        print_message("skipped on llvmpipe: the CPU-shaped kernel's tiles\n");
        return;
    }
    static const int l3[] = {0, 31, 7};
    clattn_context *saved = h_ctx; /* run() takes h_ctx (on a failure the later tests fail too) */
    h_ctx = h_ctx_tuned("attention=cpu:QR=10:KB=32:VC=32:QG=16:WG=2");
    CASES({1, {2}, 161, 33, 256, 256, .no_weights = 1}, {1, {3}, 9, 31, 200, 129},
          {1, {3}, 21, 65, 256, 256, {H_LENS_1D, 0, l3}, .no_weights = 1},
          {1, {2}, 70, 64, 256, 240, {.causal = 1}, .no_weights = 1},
          {1, {2}, 45, 100, 160, 256, {.window = 1, .window_left = 20, .window_right = 3,
                                       .align = 1}, .no_weights = 1, .nan_v = 50},
          {2, {2, 4}, 11, 40, 256, 256, {.causal = 1, .align = 1}, .hkv = 2, .p = 0.3f,
           .seed = 9, .no_weights = 1},
          {1, {2}, 12, 47, 256, 256, {.mask_rank = 2, .mask_dims = {12, 47}}, .qscale = 30,
           .no_weights = 1});
    clattn_context_destroy(&h_ctx);
    h_ctx = saved;
}

/* Q rows near INT32_MAX (d 1, float16: 4 GiB, never touched): the fused kernels number rows in
 * int, their padding rows too, so both shapes refuse where those would pass INT32_MAX (the CPU
 * shape's 10-row items in groups of 8, a GPU group of 96 rows), nothing enqueued; and the CPU
 * shape takes the same Q where its last row number is exactly INT32_MAX (items of 32 rows). */
static void test_huge_rows(void **s)
{
    (void)s;
    if (!h_huge())
        skip();
    static const struct {
        const char *tuning, *want;
    } cases[] = {
        {"attention=cpu:QR=5:QG=2:WG=8", "attention: Q's 2147483647 rows, padded to work-groups "
                                         "of 8 items of 2 x 5 rows, pass 32-bit row indexing"},
        {"attention=gpu:BQ=96:BK=16", "attention=gpu: Q's 2147483647 rows in groups of BQ=96 "
                                      "pass 32-bit row indexing"},
    };
    size_t qd[2] = {INT32_MAX, 1};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        clattn_context *ctx = h_ctx_tuned(cases[i].tuning);
        float one = 1.0f;
        clattn_tensor tk = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(1, 1), &one);
        clattn_tensor tv = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(1, 1), &one);
        clattn_tensor tq, to;
        assert_int_equal(clattn_tensor_create(ctx, CLATTN_FLOAT16, 2, qd, NULL, &tq),
                         CLATTN_SUCCESS);
        assert_int_equal(clattn_tensor_create(ctx, CLATTN_FLOAT16, 2, qd, NULL, &to),
                         CLATTN_SUCCESS);
        clattn_status st = clattn_dot_product_attention(ctx, &tq, &tk, &tv, NULL, &to, NULL);
        if (st != CLATTN_ERROR_UNSUPPORTED || !strstr(clattn_last_error(ctx), cases[i].want))
            fail_msg("%s: status %d: %s (expected \"%s\")", cases[i].tuning, st,
                     clattn_last_error(ctx), cases[i].want);
        clattn_tensor *ts[] = {&tq, &to, &tk, &tv};
        for (size_t j = 0; j < sizeof ts / sizeof ts[0]; j++)
            clattn_tensor_release(ts[j]);
        clattn_context_destroy(&ctx);
    }
    /* accepted at the bound: one key, value 3, so every output row is 3 (its first and last 16
     * rows read back). Q float32 here (8 GiB): a 16-bit one is packed as float32 with K and V,
     * past 32-bit indexing; out float16 (4 GiB). */
    clattn_context *ctx = h_ctx_tuned("attention=cpu:QR=4:QG=8:WG=8");
    float one = 1.0f, three = 3.0f;
    clattn_tensor tk = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(1, 1), &one);
    clattn_tensor tv = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(1, 1), &three);
    clattn_tensor tq = h_filled(ctx, CLATTN_FLOAT32, 2, qd, 1.0f);
    clattn_tensor to = h_filled(ctx, CLATTN_FLOAT16, 2, qd, NAN);
    if (clattn_dot_product_attention(ctx, &tq, &tk, &tv, NULL, &to, NULL) != CLATTN_SUCCESS)
        fail_msg("the largest Q: %s", clattn_last_error(ctx));
    size_t ends[2] = {0, (size_t)INT32_MAX - 16}, n16 = 16;
    for (int e = 0; e < 2; e++) {
        unsigned short got[16];
        clattn_tensor part = clattn_view(to.buf, CLATTN_FLOAT16, ends[e], 1, &n16);
        assert_int_equal(clattn_tensor_read_blocking(ctx, &part, got), CLATTN_SUCCESS);
        for (int i = 0; i < 16; i++)
            if (got[i] != clattn_float_to_half(3.0f))
                fail_msg("row %zu: 0x%04x, expected 3", ends[e] + i, got[i]);
    }
    clattn_tensor *ts[] = {&tq, &to, &tk, &tv};
    for (size_t j = 0; j < sizeof ts / sizeof ts[0]; j++)
        clattn_tensor_release(ts[j]);
    clattn_context_destroy(&ctx);
}

/* The most keys attention=gpu takes, split over launches by a loop budget whose span does not
 * divide them: the host's loops over the launches (and over the value sums' ranges) stepped past
 * INT32_MAX and never ended. The row sees its last key only (a window of none to its left, so
 * that the launches skip their tiles rather than take minutes); values 2 (float16, 4 GiB each,
 * as the keys): the output is exactly 2. */
static void test_huge_key_launches(void **s)
{
    (void)s;
    if (!h_huge())
        skip();
    /* BK=64: the value sums (a row of 16 floats per tile, both kinds) within 32-bit indexing */
    clattn_context *ctx = h_ctx_tuned("attention=gpu:BQ=16:BK=64:LOOPS=1073741824");
    float one = 1.0f, got = NAN;
    size_t kd[2] = {(size_t)(INT32_MAX / 64 - 1) * 64, 1};
    clattn_tensor tq = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(1, 1), &one);
    clattn_tensor to = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(1, 1), &got);
    clattn_tensor tk = h_filled(ctx, CLATTN_FLOAT16, 2, kd, 0.0f);
    clattn_tensor tv = h_filled(ctx, CLATTN_FLOAT16, 2, kd, 2.0f);
    clattn_attention_opts opts;
    memset(&opts, 0, sizeof opts);
    opts.mask.causal = 1; /* bottom-right, so that both value sums run */
    opts.mask.align = CLATTN_ALIGN_BOTTOM_RIGHT;
    opts.mask.window = 1;
    opts.mask.window_left = 0;
    opts.mask.window_right = -1;
    if (clattn_dot_product_attention(ctx, &tq, &tk, &tv, &opts, &to, NULL) != CLATTN_SUCCESS)
        fail_msg("%s", clattn_last_error(ctx));
    assert_int_equal(clattn_tensor_read_blocking(ctx, &to, &got), CLATTN_SUCCESS);
    if (got != 2.0f)
        fail_msg("out %.9g, expected 2", got);
    clattn_tensor *ts[] = {&tq, &to, &tk, &tv};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        clattn_tensor_release(ts[i]);
    clattn_context_destroy(&ctx);
}

/* Rows over long key ranges: the fused kernels sum each block (tile) of keys from 0 and add the
 * blocks up compensated (flash.cl's cpu_flush, common.cl's clattn_kahan), so an output's error
 * does not grow with K; kept key by key, one row's output drifted 3.7e-4 over 2^22 keys and 0.15
 * over 2^25.
 * Two rows (q random; q = 0, so that every weight is 1 / K and the output is V's mean) over
 * 2^22 + 3 keys (d 1, dv 16, values in [0.5, 1.5]) under each fused shape (the GPU one in one
 * launch and split over launches, whose row states carry the compensations) and the chain,
 * against the double reference, relative to each output. Tolerance (u = 2^-24): a block's sum of
 * at most 256 positive terms rounds within 256 u, the CPU shape's 16 blocks between flushes add
 * 16 u, the compensated total 2 u and the division 1 u; the row's sum of weights, the divisor,
 * within KB / 16 + 6 u (the CPU shape's lanes, 22 u at KB 256; the GPU shape's tiles: BK + 2 u);
 * each weight's score (d 1, |score| <= 1) and exponential round within 5 u, which moves an
 * average of values in [0.5, 1.5] by at most 2 x 5 u of itself. 307 u = 1.83e-5: 2e-5. The LSE:
 * h_assert_lse. Only with CLATTN_TEST_HUGE=1 (a minute on PoCL). */
#define LONG_TOL 2e-5
static void test_long_key_sums(void **s)
{
    (void)s;
    if (!h_huge())
        skip();
    static const char *const tunings[] = {
        "", "attention=cpu:KB=256", "attention=cpu:KB=16:QR=1", "attention=gpu:BQ=16:BK=16",
        "attention=gpu:BQ=16:BK=64:LOOPS=1000000", "attention=unfused",
    };
    const int nq = 2, dv = 16, nk = (1 << 22) + 3;
    float q[2], *k, *v;
    double ref[2 * 16], rl[2], mag[2];
    h_long_rows(nk, dv, q, &k, &v, ref, rl, mag);
    for (size_t i = 0; i < sizeof tunings / sizeof tunings[0]; i++) {
        clattn_context *ctx = h_ctx_tuned(tunings[i]);
        clattn_tensor tq = h_tensor(CLATTN_FLOAT32, 2, H_DIMS((size_t)nq, 1), q);
        clattn_tensor tk = h_tensor(CLATTN_FLOAT32, 2, H_DIMS((size_t)nk, 1), k);
        clattn_tensor tv = h_tensor(CLATTN_FLOAT32, 2, H_DIMS((size_t)nk, (size_t)dv), v);
        clattn_tensor to = h_tensor(CLATTN_FLOAT32, 2, H_DIMS((size_t)nq, (size_t)dv), NULL);
        clattn_tensor tl = h_tensor(CLATTN_FLOAT32, 1, H_DIMS((size_t)nq), NULL);
        h_poison(&to);
        h_poison(&tl);
        clattn_attention_opts opts;
        memset(&opts, 0, sizeof opts);
        opts.lse = &tl;
        if (clattn_dot_product_attention(ctx, &tq, &tk, &tv, &opts, &to, NULL) != CLATTN_SUCCESS)
            fail_msg("%s: %s", tunings[i], clattn_last_error(ctx));
        float *go = h_read_float(&to), *gl = h_read_float(&tl);
        char what[96];
        snprintf(what, sizeof what, "CLATTN_TUNE=%s: %d keys", tunings[i], nk);
        h_assert_close(go, ref, (size_t)nq * dv, LONG_TOL, 0.0, what);
        h_assert_lse(gl, rl, mag, (size_t)nq, what);
        free(go);
        free(gl);
        clattn_tensor *ts[] = {&tq, &tk, &tv, &to, &tl};
        for (size_t j = 0; j < sizeof ts / sizeof ts[0]; j++)
            clattn_tensor_release(ts[j]);
        clattn_context_destroy(&ctx);
    }
    free(k);
    free(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shapes),          cmocka_unit_test(test_valid_lens),
        cmocka_unit_test(test_masks_and_causal), cmocka_unit_test(test_large_logits),
        cmocka_unit_test(test_toy_identical_keys), cmocka_unit_test(test_dropout),
        cmocka_unit_test(test_dropout_nan_rows),
        cmocka_unit_test(test_dropout_reproducible), cmocka_unit_test(test_explicit_scale),
        cmocka_unit_test(test_neg_inf_fill), cmocka_unit_test(test_huge_scores),
        cmocka_unit_test(test_huge_values),
        cmocka_unit_test(test_bias),
        cmocka_unit_test(test_alibi), cmocka_unit_test(test_16bit),
        cmocka_unit_test(test_16bit_bad_input),
        cmocka_unit_test(test_identical_keys_huge), cmocka_unit_test(test_nan_in_blocked_rows),
        cmocka_unit_test(test_many_head_sizes), cmocka_unit_test(test_long_keys),
        cmocka_unit_test(test_split_launches),  cmocka_unit_test(test_split_value_sums),
        cmocka_unit_test(test_grouped_query),
        cmocka_unit_test(test_windows), cmocka_unit_test(test_group_order),
        cmocka_unit_test(test_wide_head_tiles),
        cmocka_unit_test(test_huge_keys),       cmocka_unit_test(test_huge_rows),
        cmocka_unit_test(test_huge_key_launches),
        cmocka_unit_test(test_long_key_sums),
    };
    return cmocka_run_group_tests(tests, h_setup, h_teardown);
}
