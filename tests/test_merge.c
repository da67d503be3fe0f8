/* clattn_attention_merge against a double-precision merge of the same partial results, and
 * dot-product attention over split key ranges, merged, against one op over all the keys and the
 * reference. */
#include "harness.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The merge rounds each weight exp(l_i - m) (a few ulp, l_i - m exact when they are close) and
 * each running output once per range: 1e-5 of the magnitude sum_i w_i |o_i| / sum_i w_i is over
 * 10x that for the 7 ranges here, and a range weighed wrongly moves it far more. */
#define MERGE_TOL 1e-5
/* as test_attention.c's: 1e-4 of sum_k w_k |v_k| */
#define OUT_TOL 1e-4

/* The merge of n partials (o[i] rows x dv, l[i] rows) in double, as clattn.h states it; scale:
 * the magnitude sum_i w_i |o_i| / sum_i w_i per output element (1 where the output is NaN). */
static void ref_merge(int n, size_t rows, int dv, float *const *o, float *const *l, double *ro,
                      double *rl, double *scale)
{
    for (size_t r = 0; r < rows; r++) {
        double m = -INFINITY, s = 0;
        int nan = 0;
        for (int i = 0; i < n; i++) {
            nan |= isnan(l[i][r]);
            m = fmax(m, l[i][r]);
        }
        for (int i = 0; i < n && m > -INFINITY; i++)
            s += exp((double)l[i][r] - m);
        rl[r] = nan ? NAN : m == -INFINITY ? -INFINITY : m + log(s);
        for (int c = 0; c < dv; c++) {
            double acc = 0, mag = 0;
            for (int i = 0; i < n && m > -INFINITY; i++) {
                if (l[i][r] == -INFINITY)
                    continue; /* an empty range adds nothing, not 0 * NaN */
                double w = exp((double)l[i][r] - m) / s;
                acc += w * o[i][r * dv + c];
                mag += w * fabs(o[i][r * dv + c]);
            }
            if (m == -INFINITY) /* every range empty: 0 x each output (clattn.h) */
                for (int i = 0; i < n; i++)
                    acc += 0.0 * o[i][r * dv + c];
            ro[r * dv + c] = nan ? NAN : acc;
            scale[r * dv + c] = isfinite(mag) && mag > 0 ? mag : 1.0;
        }
    }
}

/* LSEs of one row's n ranges, by kind: mixed, some empty, all empty, one NaN, near 1e4, ties and
 * gaps beyond float32's exp range, the first empty, the first two empty (the running merge's
 * first step with an empty range a, and an empty state met by an open range), a NaN after an
 * empty range and one after every other range empty (an empty state met by a NaN), the first NaN
 * and the first +inf (its weight exp(inf - inf) is NaN), so that one range alone meets each. */
static float draw_lse(size_t row, int i)
{
    switch (row % 12) {
    case 8: return i == 0 ? -INFINITY : i == 1 ? NAN : (float)h_uniform(-5, 5);
    case 9: return i == 2 ? NAN : -INFINITY;
    case 10: return i == 0 ? NAN : (float)h_uniform(-5, 5);
    case 11: return i == 0 ? INFINITY : (float)h_uniform(-5, 5);
    case 6: return i == 0 ? -INFINITY : (float)h_uniform(-5, 5);
    case 7: return i < 2 ? -INFINITY : (float)h_uniform(-5, 5);
    case 0: return (float)h_uniform(-30, 30);
    case 1: return i % 2 ? -INFINITY : (float)h_uniform(-5, 5);
    case 2: return -INFINITY;
    case 3: return i == 1 ? NAN : (float)h_uniform(-5, 5);
    case 4: return (float)(1e4 + h_uniform(-5, 5));
    default: return i % 3 == 0 ? 2.5f : i % 3 == 1 ? -200.0f : 2.5f;
    }
}

static void merge_case(int n, int rank, const size_t *dims)
{
    size_t rows = 1;
    for (int i = 0; i < rank - 1; i++)
        rows *= dims[i];
    int dv = (int)dims[rank - 1];
    clattn_tensor *to = calloc((size_t)n, sizeof *to), *tl = calloc((size_t)n, sizeof *tl);
    float **o = calloc((size_t)n, sizeof *o), **l = calloc((size_t)n, sizeof *l);
    for (int i = 0; i < n; i++) {
        o[i] = malloc(rows * dv * 4);
        l[i] = malloc(rows * 4);
        h_fill(o[i], rows * dv, -2, 2);
        for (size_t r = 0; r < rows; r++) {
            l[i][r] = draw_lse(r, i);
            /* what attention returns for a range whose keys are all blocked with fill -inf (NaN),
             * and decoding or varlen for one without keys (0), mixed over rows and ranges; and
             * every fourth such row left as drawn (an output never written: weighs nothing) */
            for (int c = 0; l[i][r] == -INFINITY && (r / 8 + i) % 4 != 3 && c < dv; c++)
                o[i][r * dv + c] = (r / 8 + i) % 4 == 0 ? NAN : 0.0f;
        }
        to[i] = h_tensor(CLATTN_FLOAT32, rank, dims, o[i]);
        tl[i] = h_tensor(CLATTN_FLOAT32, rank - 1, dims, l[i]);
    }
    clattn_tensor out = h_tensor(CLATTN_FLOAT32, rank, dims, NULL);
    clattn_tensor lse = h_tensor(CLATTN_FLOAT32, rank - 1, dims, NULL);
    h_poison(&out);
    h_poison(&lse);
    if (clattn_attention_merge(h_ctx, n, to, tl, &out, &lse) != CLATTN_SUCCESS)
        fail_msg("attention_merge: %s", clattn_last_error(h_ctx));
    double *ro = malloc(rows * dv * 8), *rl = malloc(rows * 8), *sc = malloc(rows * dv * 8);
    double *zero = calloc(rows, 8);
    ref_merge(n, rows, dv, o, l, ro, rl, sc);
    char what[96];
    snprintf(what, sizeof what, "merge of %d, rows %zu, dv %d", n, rows, dv);
    float *go = h_read(&out), *gl = h_read(&lse);
    h_assert_scaled(go, ro, sc, rows * dv, MERGE_TOL, what);
    strncat(what, " (lse)", sizeof what - strlen(what) - 1);
    h_assert_lse(gl, rl, zero, rows, what);
    /* without the LSE output: the same output, bit for bit */
    h_poison(&out);
    if (clattn_attention_merge(h_ctx, n, to, tl, &out, NULL) != CLATTN_SUCCESS)
        fail_msg("attention_merge (no lse): %s", clattn_last_error(h_ctx));
    float *go2 = h_read(&out);
    if (memcmp(go, go2, rows * dv * 4) != 0)
        fail_msg("%s: the output differs without the LSE output", what);
    for (int i = 0; i < n; i++) {
        clattn_tensor_release(&to[i]);
        clattn_tensor_release(&tl[i]);
        free(o[i]);
        free(l[i]);
    }
    clattn_tensor_release(&out);
    clattn_tensor_release(&lse);
    free(to); free(tl); free(o); free(l); free(ro); free(rl); free(sc); free(zero);
    free(go); free(gl); free(go2);
}

static void test_formula(void **s)
{
    (void)s;
    static const int ns[] = {1, 2, 3, 4, 7};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        merge_case(ns[i], 2, H_DIMS(1, 1));
        merge_case(ns[i], 2, H_DIMS(12, 1));
        merge_case(ns[i], 3, H_DIMS(2, 7, 17));
        merge_case(ns[i], 4, H_DIMS(1, 3, 5, 33));
    }
}

/* ---- attention over split key ranges ---- */

typedef struct {
    int nlead;
    size_t lead[2];
    int hkv; /* nlead 2: K/V heads (grouped-query); 0: Q's */
    int nq, nk, d, dv;
    h_mask_spec mask;
    double qscale;
    int nsplit;
    int split[6]; /* key range boundaries: split[0] = 0 < ... < split[nsplit] = nk */
} split_case;

static void run_split(const split_case *c)
{
    size_t lead_kv[2] = {c->lead[0], c->nlead == 2 && c->hkv ? (size_t)c->hkv : c->lead[1]};
    size_t nb = 1, nkb = 1;
    for (int i = 0; i < c->nlead; i++) {
        nb *= c->lead[i];
        nkb *= lead_kv[i];
    }
    size_t G = nb / nkb, nq = c->nq, nk = c->nk, rows = nb * nq;
    float *q = malloc(nb * nq * c->d * 4), *k = malloc(nkb * nk * c->d * 4);
    float *v = malloc(nkb * nk * c->dv * 4);
    double qs = c->qscale > 0 ? c->qscale : 1;
    h_fill(q, nb * nq * c->d, -qs, qs);
    h_fill(k, nkb * nk * c->d, -1, 1);
    h_fill(v, nkb * nk * c->dv, -1, 1);
    size_t sdims[4];
    memcpy(sdims, c->lead, sizeof(size_t) * c->nlead);
    sdims[c->nlead] = nq;
    sdims[c->nlead + 1] = nk;
    h_mask hm;
    h_mask_make(&hm, &c->mask, c->nlead + 2, sdims);
    int D1 = hm.r.D1;
    clattn_tensor tq = h_batched(c->nlead, c->lead, nq, c->d, q);
    clattn_tensor *po = calloc(c->nsplit, sizeof *po), *pl = calloc(c->nsplit, sizeof *pl);
    /* each range: its keys and values, and every mask part as one explicit 0/1 tensor */
    for (int i = 0; i < c->nsplit; i++) {
        int lo = c->split[i], n = c->split[i + 1] - lo;
        float *ki = malloc(nkb * n * c->d * 4), *vi = malloc(nkb * n * c->dv * 4);
        int *mi = malloc(rows * n * sizeof *mi);
        for (size_t b = 0; b < nkb; b++) {
            memcpy(ki + b * n * c->d, k + (b * nk + lo) * c->d, n * c->d * 4);
            memcpy(vi + b * n * c->dv, v + (b * nk + lo) * c->dv, n * c->dv * 4);
        }
        for (size_t r = 0; r < rows; r++)
            for (int j = 0; j < n; j++)
                mi[r * n + j] = !ref_blocked(&hm.r, (int)(r / nq / D1), (int)(r / nq % D1),
                                             (int)(r % nq), lo + j);
        clattn_tensor tk = h_batched(c->nlead, lead_kv, n, c->d, ki);
        clattn_tensor tv = h_batched(c->nlead, lead_kv, n, c->dv, vi);
        size_t mdims[4];
        memcpy(mdims, sdims, sizeof mdims);
        mdims[c->nlead + 1] = (size_t)n;
        clattn_tensor tm = h_tensor(CLATTN_INT32, c->nlead + 2, mdims, mi);
        clattn_tensor tw = h_batched(c->nlead, c->lead, nq, n, NULL);
        po[i] = h_batched(c->nlead, c->lead, nq, c->dv, NULL);
        pl[i] = h_tensor(CLATTN_FLOAT32, c->nlead + 1, mdims, NULL);
        clattn_attention_opts opts;
        memset(&opts, 0, sizeof opts);
        opts.mask.mask = &tm;
        opts.mask.fill = c->mask.fill;
        opts.lse = &pl[i];
        /* odd ranges through the unfused chain (weights asked for), even ones fused */
        if (clattn_dot_product_attention(h_ctx, &tq, &tk, &tv, &opts, &po[i],
                                         i % 2 ? &tw : NULL) != CLATTN_SUCCESS)
            fail_msg("range %d: %s", i, clattn_last_error(h_ctx));
        assert_int_equal(clattn_finish(h_ctx), CLATTN_SUCCESS);
        clattn_tensor_release(&tk); clattn_tensor_release(&tv); clattn_tensor_release(&tm);
        clattn_tensor_release(&tw);
        free(ki); free(vi); free(mi);
    }
    clattn_tensor out = h_batched(c->nlead, c->lead, nq, c->dv, NULL);
    clattn_tensor lse = h_tensor(CLATTN_FLOAT32, c->nlead + 1, sdims, NULL);
    h_poison(&out);
    h_poison(&lse);
    if (clattn_attention_merge(h_ctx, c->nsplit, po, pl, &out, &lse) != CLATTN_SUCCESS)
        fail_msg("merge: %s", clattn_last_error(h_ctx));
    /* the reference over all keys, K and V repeated per query head */
    double *qd = ref_to_double(q, nb * nq * c->d);
    double *kd = malloc(nb * nk * c->d * 8), *vd = malloc(nb * nk * c->dv * 8);
    for (size_t b = 0; b < nb; b++)
        for (size_t j = 0; j < nk * c->d || j < nk * c->dv; j++) {
            size_t kb = b / G;
            if (j < nk * c->d)
                kd[b * nk * c->d + j] = k[kb * nk * c->d + j];
            if (j < nk * c->dv)
                vd[b * nk * c->dv + j] = v[kb * nk * c->dv + j];
        }
    double *rw = malloc(rows * nk * 8), *ro = malloc(rows * c->dv * 8), *sc = malloc(rows * c->dv * 8);
    double *rl = malloc(rows * 8), *mag = malloc(rows * 8);
    double scale = 1.0 / sqrt((double)c->d);
    ref_attention(&hm.r, c->d, c->dv, qd, kd, vd, scale, NULL, rw, ro);
    ref_attention_lse(&hm.r, c->d, qd, kd, scale, rl, mag);
    ref_attention_scale(nb, c->nq, c->nk, c->dv, rw, vd, ro, sc);
    /* a fully blocked range's LSE is fill + log(n) rounded to float32 (1/16 at 1e6): it weighs
     * against the others to within exp(ulp) of that magnitude */
    for (size_t r = 0; r < rows; r++) {
        float big = (float)(fabs(rl[r]) + log((double)nk) + 1);
        double ulp = isfinite(big) ? (double)nextafterf(big, INFINITY) - big : 0;
        for (int j = 0; j < c->dv; j++)
            sc[r * c->dv + j] *= 1.0 + 2.0 * ulp / OUT_TOL;
    }
    char what[160];
    snprintf(what, sizeof what, "merged attention: batch %zu (kv %zu) Q=%d K=%d d=%d dv=%d, %d "
             "ranges, lens %d causal %d window %d fill %g", nb, nkb, c->nq, c->nk, c->d, c->dv,
             c->nsplit, c->mask.lens, c->mask.causal, c->mask.window, c->mask.fill);
    float *go = h_read(&out), *gl = h_read(&lse);
    h_assert_scaled(go, ro, sc, rows * c->dv, OUT_TOL, what);
    strncat(what, " (lse)", sizeof what - strlen(what) - 1);
    h_assert_lse(gl, rl, mag, rows, what);
    for (int i = 0; i < c->nsplit; i++) {
        clattn_tensor_release(&po[i]);
        clattn_tensor_release(&pl[i]);
    }
    clattn_tensor_release(&tq); clattn_tensor_release(&out); clattn_tensor_release(&lse);
    h_mask_free(&hm);
    free(po); free(pl); free(q); free(k); free(v); free(qd); free(kd); free(vd); free(rw);
    free(ro); free(sc); free(rl); free(mag); free(go); free(gl);
}

/* Every mask kind, ranges of one key and of a block size +- 1, empty ranges (fill -inf: NaN
 * partials that must weigh nothing), grouped-query heads, large logits. */
static void test_split_keys(void **s)
{
    (void)s;
    static const int l2[] = {0, 37};
    const split_case cases[] = {
        {1, {2}, 0, 9, 37, 8, 5, {H_LENS_1D, 0, l2}, 0, 3, {0, 16, 17, 37}},
        {1, {2}, 0, 9, 37, 8, 5, {H_LENS_1D, 0, l2, .fill = -INFINITY}, 0, 3, {0, 16, 17, 37}},
        {2, {2, 4}, 2, 5, 50, 16, 16, {.causal = 1, .align = 1, .fill = -INFINITY}, 0, 2,
         {0, 25, 50}},
        {0, {0}, 0, 7, 100, 8, 8, {.window = 1, .window_left = 10, .window_right = 3}, 0, 4,
         {0, 30, 64, 65, 100}},
        {1, {3}, 0, 4, 40, 12, 7, {.mask_rank = 3, .mask_dims = {3, 4, 40}, .fill = -1.0f}, 0, 2,
         {0, 13, 40}},
        {1, {2}, 0, 6, 30, 8, 9, {H_LENS_2D, .causal = 1}, 0, 3, {0, 10, 20, 30}},
        {1, {2}, 0, 8, 41, 32, 8, {.causal = 1}, 300, 2, {0, 15, 41}},
        {0, {0}, 0, 3, 130, 16, 16, {0}, 0, 5, {0, 1, 63, 64, 129, 130}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_split(&cases[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_formula),
        cmocka_unit_test(test_split_keys),
    };
    return cmocka_run_group_tests(tests, h_setup, h_teardown);
}
