/* clattn_decode_attention against the double reference of dot-product attention over each
 * sequence's cached keys (bottom-right masks), and the cache and lengths it updates. */
#include "harness.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* dtype shorthands of the 16-bit combination tables */
#define F32 CLATTN_FLOAT32
#define F16 CLATTN_FLOAT16
#define BF16 CLATTN_BFLOAT16

/* as test_attention.c's: 1e-4 of sum_k w_k |v_k| */
#define OUT_TOL 1e-4
#define MAX_B 4

typedef struct {
    int B, Hq, Hkv, Qn, Kmax, d, dv;
    int lens[MAX_B]; /* -2: random in [0, Kmax - Qn]; other values as given (clamped) */
    int append, advance;
    int causal, window, left, right;
    float fill;
    double qscale;
    double vscale; /* > 0: values (cached and new) in [-vscale, vscale], e.g. float16 subnormals */
    int nan_v; /* > 0: value row L_b - nan_v of every sequence is NaN (a key inside the prefix) */
    int negative; /* every score negative: Q in [-qscale, 0], K in [0, 1] */
    int alibi;    /* ALiBi slopes: 0 none, 1 per head (Hq), 2 per sequence and head (B, Hq) */
    double alibi_mag; /* slopes uniform in [0, alibi_mag]; 0: Press et al.'s 2^(-8 h / Hq) */
    clattn_dtype qt, ct, nt, ot; /* Q's, the caches', the new rows' and out's dtypes (0: float32) */
} dec_case;

static int clamp_len(int v, int hi)
{
    return v < 0 ? 0 : v > hi ? hi : v;
}

/* The reference for sequence b: attention of its Hq x Qn rows over its L keys, the cache's first
 * L rows of each K/V head repeated per query head (ref_attention's layout), masks bottom-right. */
static void reference(const dec_case *c, int b, int L, const float *q, const float *kc,
                      const float *vc, const double *slopes, double *ro, double *rl, double *sc,
                      double *mag)
{
    int G = c->Hq / c->Hkv, Qn = c->Qn;
    size_t nr = (size_t)c->Hq * Qn;
    if (L == 0) { /* no keys: zeros, LSE -inf */
        for (size_t i = 0; i < nr * c->dv; i++) {
            ro[i] = 0;
            sc[i] = 1;
        }
        for (size_t i = 0; i < nr; i++) {
            rl[i] = -INFINITY;
            mag[i] = 0;
        }
        return;
    }
    double *qd = malloc(nr * c->d * 8), *kd = malloc((size_t)c->Hq * L * c->d * 8);
    double *vd = malloc((size_t)c->Hq * L * c->dv * 8), *w = malloc(nr * L * 8);
    for (size_t i = 0; i < nr * c->d; i++)
        qd[i] = q[(size_t)b * nr * c->d + i];
    for (int h = 0; h < c->Hq; h++) {
        size_t bh = (size_t)b * c->Hkv + h / G;
        for (int j = 0; j < L; j++) {
            for (int e = 0; e < c->d; e++)
                kd[((size_t)h * L + j) * c->d + e] = kc[(bh * c->Kmax + j) * c->d + e];
            for (int e = 0; e < c->dv; e++)
                vd[((size_t)h * L + j) * c->dv + e] = vc[(bh * c->Kmax + j) * c->dv + e];
        }
    }
    ref_mask m = {1, c->Hq, Qn, L, NULL, 0, NULL, {0, 0, 0, 0}, c->causal,
                  c->fill != 0 ? c->fill : CLATTN_DEFAULT_FILL, 1, c->window, c->left, c->right,
                  NULL, {0, 0, 0, 0}, NULL, {0, 1}};
    if (c->alibi) /* sequence b's slopes, one per query head */
        m.slopes = slopes + (c->alibi == 2 ? (size_t)b * c->Hq : 0);
    double scale = 1.0 / sqrt((double)c->d);
    ref_attention(&m, c->d, c->dv, qd, kd, vd, scale, NULL, w, ro);
    ref_attention_lse(&m, c->d, qd, kd, scale, rl, mag);
    ref_attention_scale((size_t)c->Hq, Qn, L, c->dv, w, vd, ro, sc);
    free(qd); free(kd); free(vd); free(w);
}

/* The n rows (of w values, rows_per rows per K/V head) read back from a cache equal the expected
 * ones bit for bit, NaN matching NaN (a 16-bit cache gives its own NaN's bits back). */
static void same_rows(const float *got, const float *want, size_t n, int w, int rows_per,
                      const char *name)
{
    for (size_t r = 0; r < n; r++)
        for (int e = 0; e < w; e++) {
            float g = got[r * w + e], x = want[r * w + e];
            if (!(isnan(g) && isnan(x)) && memcmp(&g, &x, 4) != 0)
                fail_msg("%s: K/V head %zu row %zu element %d is %g, expected %g", name,
                         r / rows_per, r % rows_per, e, g, x);
        }
}

static void run(const dec_case *c)
{
    int B = c->B, Hq = c->Hq, Hkv = c->Hkv, Qn = c->Qn, Kmax = c->Kmax, A = c->append ? Qn : 0;
    size_t nq = (size_t)B * Hq * Qn, nkc = (size_t)B * Hkv * Kmax, nkn = (size_t)B * Hkv * Qn;
    if (h_small() && nkc * (c->d + c->dv) * (size_t)Hq / Hkv * (size_t)Qn > 400000)
        return; /* the biggest cases (work: cache x rows) are skipped under Oclgrind */
    float *q = malloc(nq * c->d * 4), *kc = malloc(nkc * c->d * 4), *vc = malloc(nkc * c->dv * 4);
    float *kn = malloc(nkn * c->d * 4), *vn = malloc(nkn * c->dv * 4);
    int lens[MAX_B], L[MAX_B];
    double qs = c->qscale > 0 ? c->qscale : 1;
    h_fill(q, nq * c->d, -qs, c->negative ? 0 : qs);
    h_fill(kc, nkc * c->d, c->negative ? 0 : -1, 1);
    double vs = c->vscale > 0 ? c->vscale : 1;
    h_fill(vc, nkc * c->dv, -vs, vs);
    h_fill(kn, nkn * c->d, c->negative ? 0 : -1, 1);
    h_fill(vn, nkn * c->dv, -vs, vs);
    h_round(q, nq * c->d, c->qt); /* the reference sees the stored values */
    h_round(kn, nkn * c->d, c->nt);
    h_round(vn, nkn * c->dv, c->nt);
    h_round(kc, nkc * c->d, c->ct);
    h_round(vc, nkc * c->dv, c->ct);
    for (int b = 0; b < B; b++) {
        lens[b] = c->lens[b] == -2 ? h_randint(0, Kmax - Qn) : c->lens[b];
        L[b] = clamp_len(lens[b], Kmax - A) + A;
        /* rows past the keys (and those the append overwrites) are NaN: never read */
        for (int h = 0; h < Hkv; h++)
            for (int j = L[b] - A; j < Kmax; j++) {
                size_t r = ((size_t)b * Hkv + h) * Kmax + j;
                for (int e = 0; e < c->d; e++)
                    kc[r * c->d + e] = NAN;
                for (int e = 0; e < c->dv; e++)
                    vc[r * c->dv + e] = NAN;
            }
    }
    size_t qd[4] = {B, Hq, Qn, c->d}, od[4] = {B, Hq, Qn, c->dv};
    size_t kd[4] = {B, Hkv, Kmax, c->d}, vd[4] = {B, Hkv, Kmax, c->dv};
    size_t knd[4] = {B, Hkv, Qn, c->d}, vnd[4] = {B, Hkv, Qn, c->dv};
    clattn_tensor tq = h_tensor_as(c->qt, 4, qd, q), tkc = h_tensor_as(c->ct, 4, kd, kc);
    clattn_tensor tvc = h_tensor_as(c->ct, 4, vd, vc);
    clattn_tensor tkn = h_tensor_as(c->nt, 4, knd, kn), tvn = h_tensor_as(c->nt, 4, vnd, vn);
    clattn_tensor tl = h_tensor(CLATTN_INT32, 1, H_DIMS(B), lens);
    clattn_tensor to = h_tensor(c->ot, 4, od, NULL), tlse = h_tensor(CLATTN_FLOAT32, 3, od, NULL);
    h_poison(&to);
    h_poison(&tlse);
    /* what the caches hold after the append */
    for (int b = 0; c->append && b < B; b++)
        for (int h = 0; h < Hkv; h++)
            for (int i = 0; i < Qn; i++) {
                size_t dst = ((size_t)b * Hkv + h) * Kmax + L[b] - Qn + i;
                size_t src = ((size_t)b * Hkv + h) * Qn + i;
                memcpy(kc + dst * c->d, kn + src * c->d, c->d * 4);
                memcpy(vc + dst * c->dv, vn + src * c->dv, c->dv * 4);
            }
    h_round(kc, nkc * c->d, c->ct); /* the appended rows as the cache stores them */
    h_round(vc, nkc * c->dv, c->ct);
    for (int b = 0; c->nan_v && b < B; b++)
        for (int h = 0; L[b] >= c->nan_v && h < Hkv; h++) {
            size_t r = ((size_t)b * Hkv + h) * Kmax + L[b] - c->nan_v;
            float *dst = c->append && L[b] - c->nan_v >= L[b] - Qn
                             ? vn + (((size_t)b * Hkv + h) * Qn + (L[b] - c->nan_v - (L[b] - Qn))) * c->dv
                             : NULL;
            for (int e = 0; e < c->dv; e++) {
                vc[r * c->dv + e] = NAN;
                if (dst)
                    dst[e] = NAN;
            }
        }
    size_t ns = c->alibi == 2 ? (size_t)B * Hq : (size_t)Hq;
    float *sf = malloc(ns * 4);
    double *sd = malloc(ns * 8);
    if (c->alibi_mag > 0)
        h_fill(sf, ns, 0, c->alibi_mag);
    for (size_t i = 0; i < ns; i++) {
        if (c->alibi_mag <= 0)
            sf[i] = (float)pow(2.0, -8.0 * (double)(i % Hq + 1) / Hq);
        sd[i] = sf[i];
    }
    clattn_tensor tsl = c->alibi == 2 ? h_tensor(CLATTN_FLOAT32, 2, H_DIMS(B, Hq), sf)
                                      : h_tensor(CLATTN_FLOAT32, 1, H_DIMS(Hq), sf);
    /* the NaN rows go to the device too: through v_new, or the cache itself */
    h_write_float(&tvn, vn);
    if (!c->append)
        h_write_float(&tvc, vc);
    else { /* keep the rows past the prefix NaN on the device */
        float *dev = h_read_float(&tvc);
        for (int b = 0; b < B; b++)
            for (int h = 0; h < Hkv; h++)
                for (int j = 0; j < L[b] - Qn; j++) {
                    size_t r = ((size_t)b * Hkv + h) * Kmax + j;
                    memcpy(dev + r * c->dv, vc + r * c->dv, c->dv * 4);
                }
        h_write_float(&tvc, dev);
        free(dev);
    }
    clattn_kv_cache cache = {&tkc, &tvc, &tl, c->append ? &tkn : NULL, c->append ? &tvn : NULL,
                             c->advance};
    clattn_attention_opts opts;
    memset(&opts, 0, sizeof opts);
    opts.mask.causal = c->causal;
    opts.mask.window = c->window;
    opts.mask.window_left = c->left;
    opts.mask.window_right = c->right;
    opts.mask.fill = c->fill;
    opts.mask.align = CLATTN_ALIGN_BOTTOM_RIGHT;
    opts.lse = &tlse;
    opts.alibi_slopes = c->alibi ? &tsl : NULL;
    if (clattn_decode_attention(h_ctx, &tq, &cache, &opts, &to) != CLATTN_SUCCESS)
        fail_msg("decode_attention: %s", clattn_last_error(h_ctx));
    char what[200];
    size_t per = (size_t)Hq * Qn;
    float *go = h_read_float(&to), *gl = h_read(&tlse);
    /* a 16-bit out is each float32 result rounded once: the tolerance grows by its unit
     * roundoff (the scale sum_k w_k |v_k| bounds |out|), and float16's subnormal step */
    double u = c->ot == CLATTN_FLOAT32 ? 0 : h_unit_roundoff(c->ot), tol = OUT_TOL + u * (1 + OUT_TOL);
    double *ro = malloc(per * c->dv * 8), *rl = malloc(per * 8), *sc = malloc(per * c->dv * 8);
    double *mag = malloc(per * 8);
    for (int b = 0; b < B; b++) {
        reference(c, b, L[b], q, kc, vc, sd, ro, rl, sc, mag);
        for (size_t i = 0; i < per * c->dv; i++)
            sc[i] += h_subnormal_step(c->ot) / tol;
        snprintf(what, sizeof what, "decode B=%d Hq=%d Hkv=%d Qn=%d Kmax=%d d=%d dv=%d: sequence "
                 "%d, lens %d (L %d), append %d causal %d window %d (%d, %d) fill %g nan_v %d "
                 "alibi %d (%g), Q %s cache %s new %s out %s", B, Hq, Hkv, Qn, Kmax, c->d, c->dv,
                 b, lens[b], L[b], c->append, c->causal, c->window, c->left, c->right, c->fill,
                 c->nan_v, c->alibi, c->alibi_mag, h_dtype_name(c->qt), h_dtype_name(c->ct),
                 h_dtype_name(c->nt), h_dtype_name(c->ot));
        h_assert_scaled(go + b * per * c->dv, ro, sc, per * c->dv, tol, what);
        strncat(what, " (lse)", sizeof what - strlen(what) - 1);
        h_assert_lse(gl + b * per, rl, mag, per, what);
    }
    /* without the LSE output: the same output, bit for bit (calls that append would append
     * again) */
    if (!c->append) {
        clattn_tensor to2 = h_tensor(c->ot, 4, od, NULL);
        h_poison(&to2);
        opts.lse = NULL;
        if (clattn_decode_attention(h_ctx, &tq, &cache, &opts, &to2) != CLATTN_SUCCESS)
            fail_msg("decode_attention (no lse): %s", clattn_last_error(h_ctx));
        void *g1 = h_read(&to), *g2 = h_read(&to2);
        if (memcmp(g1, g2, per * B * c->dv * clattn_dtype_size(c->ot)) != 0)
            fail_msg("%s: the output differs without the LSE output", what);
        free(g1);
        free(g2);
        clattn_tensor_release(&to2);
    }
    /* the caches: the new rows at each sequence's length, every other row as it was (the rows
     * past the keys NaN, as written) */
    float *gk = h_read_float(&tkc), *gv = h_read_float(&tvc);
    same_rows(gk, kc, (size_t)B * Hkv * Kmax, c->d, Kmax, "k_cache");
    same_rows(gv, vc, (size_t)B * Hkv * Kmax, c->dv, Kmax, "v_cache");
    free(gv);
    int *gl2 = h_read(&tl);
    for (int b = 0; b < B; b++) {
        int want = c->advance ? L[b] : lens[b];
        if (gl2[b] != want)
            fail_msg("lens[%d] = %d after the call, expected %d", b, gl2[b], want);
    }
    free(gk); free(gl2); free(go); free(gl); free(ro); free(rl); free(sc); free(mag);
    clattn_tensor *ts[] = {&tq, &tkc, &tvc, &tkn, &tvn, &tl, &to, &tlse, &tsl};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        clattn_tensor_release(ts[i]);
    free(q); free(kc); free(vc); free(kn); free(vn); free(sf); free(sd);
}

#define CASES(...)                                                 \
    do {                                                           \
        const dec_case cs_[] = {__VA_ARGS__};                      \
        for (size_t i_ = 0; i_ < sizeof cs_ / sizeof cs_[0]; i_++) \
            run(&cs_[i_]);                                         \
    } while (0)

/* One new row: multi-query, grouped and plain heads; empty, full and split-boundary lengths
 * (splits of 256 keys, or 32/48 in the forced variants), head sizes 1, primes, 16 +- 1, 128. */
static void test_single_row(void **s)
{
    (void)s;
    CASES({1, 4, 1, 1, 100, 16, 16, {37}}, {3, 8, 2, 1, 300, 64, 48, {0, 300, 257}},
          {2, 2, 2, 1, 97, 1, 1, {1, 96}}, {2, 3, 3, 1, 49, 15, 17, {48, 16}},
          {4, 8, 8, 1, 65, 13, 7, {-2, -2, -2, -2}}, {1, 32, 8, 1, 1000, 128, 128, {999}},
          {2, 6, 2, 1, 513, 24, 40, {512, 511}});
}

/* Several new rows, appended to the caches, bottom-right causal among them, lengths advanced. */
static void test_append_causal(void **s)
{
    (void)s;
    CASES({2, 2, 2, 5, 64, 8, 24, {10, 59}, 1, 1, 1},
          {2, 6, 3, 3, 40, 5, 7, {0, 30}, 1, 0, 1},
          {1, 4, 2, 16, 300, 32, 16, {270}, 1, 1, 1},
          {2, 4, 1, 64, 200, 16, 16, {0, 136}, 1, 1, 1},
          {3, 2, 1, 7, 90, 9, 9, {-2, -2, -2}, 1, 1, 0},
          /* no append: new rows at the prefix's end, rows before the first key see none */
          {2, 6, 3, 3, 40, 5, 7, {2, 30}, 0, 0, 1, .fill = -INFINITY},
          {2, 6, 3, 3, 40, 5, 7, {2, 30}, 0, 0, 1});
}

/* Sliding windows (bottom-right), fills, large logits, NaN values inside the prefix (a blocked
 * one still makes its rows NaN, 0 * NaN), lengths outside [0, Kmax - Qn] (clamped). */
static void test_masks_and_values(void **s)
{
    (void)s;
    CASES({1, 4, 2, 2, 600, 32, 32, {500}, 1, 0, 1, 1, 100, 0},
          {2, 4, 2, 3, 300, 16, 8, {290, 40}, 1, 0, 0, 1, 20, 5, .fill = -1.0f},
          {2, 4, 2, 3, 300, 16, 8, {290, 40}, 1, 0, 0, 1, 20, -1, .fill = -INFINITY},
          {2, 8, 2, 1, 400, 64, 64, {399, 200}, .qscale = 100},
          {2, 4, 1, 3, 50, 8, 8, {20, 49}, 1, 0, 1, .nan_v = 1},
          {2, 4, 1, 1, 50, 8, 8, {20, 49}, .nan_v = 7},
          {2, 2, 1, 2, 50, 8, 8, {-5, 1000}, 1, 1, 1},
          /* more new rows than cached keys, no append: causal rows before the first key see
           * none (fill -inf: NaN; a finite fill: uniform over the blocked keys) */
          {1, 2, 1, 5, 3, 8, 8, {3}, 0, 0, 1, .fill = -INFINITY},
          {2, 2, 2, 7, 4, 5, 3, {4, 2}, 0, 0, 1});
}

/* Rows whose scores are all far below 0 (about -400, past exp's range from 0) beside splits that
 * saw no weighed key: empty ones past the sequence's end, and with fill -inf ones below the
 * window. Their zero states must not set the merge's maximum. */
static void test_negative_scores(void **s)
{
    (void)s;
    CASES({1, 4, 2, 1, 600, 16, 16, {100}, .qscale = 400, .negative = 1},
          {1, 4, 2, 1, 600, 16, 16, {300}, 0, 0, 0, 1, 10, -1, -INFINITY, 400, .negative = 1},
          {2, 4, 2, 2, 600, 16, 16, {300, 599}, 0, 0, 1, 1, 10, -1, -1e6f, 400, .negative = 1});
}

/* Values near FLT_MAX with near-uniform weights: a split's unnormalised sums pass FLT_MAX while
 * the average is finite, so its rows are redone with scaled weights, and the merge weighs the
 * splits' normalised outputs with normalised weights. One split and many, appends with causal
 * rows, a window with -inf fills. */
static void test_huge_values(void **s)
{
    (void)s;
    CASES({1, 2, 1, 1, 40, 8, 8, {39}, .qscale = 1e-3, .vscale = 3e38},
          {1, 4, 2, 1, 1000, 16, 16, {999}, .qscale = 1e-3, .vscale = 3e38},
          {2, 8, 2, 3, 600, 32, 24, {500, 7}, 1, 1, 1, .qscale = 1e-3, .vscale = 3e38},
          {1, 4, 2, 2, 600, 16, 16, {550}, 0, 0, 1, 1, 400, -1, -INFINITY, 1e-3, 3e38});
}

/* A long cache: many splits to merge. */
static void test_long(void **s)
{
    (void)s;
    CASES({2, 8, 2, 1, 4097, 128, 128, {4097, 3001}}, {1, 4, 4, 2, 5000, 64, 32, {4900}, 1, 1, 1});
}

/* decode_cpu's tiles for every RQ the tuning takes: JK keys' dot products at once (4 up to RQ 4,
 * 2 up to 8, else 1) and CV value chunks (2 up to RQ 8), with their tails: blocks of keys not a
 * multiple of JK, head sizes not multiples of 16 and odd counts of 16-column chunks. The host
 * spreads a K/V head's G * Qn rows evenly, so those are chosen to land on each RQ. */
static void test_row_tiles(void **s)
{
    (void)s;
    if (h_forced_variant()) /* its own tunings only (harness.h) */
        skip();
    if (strstr(clattn_context_description(h_ctx), "llvmpipe")) { /* CPU shapes refused there */
        print_message("skipped on llvmpipe: the CPU-shaped kernel's tiles\n");
        return;
    }
    static const char *const tunes[] = {"decode=cpu:RQ=1:SK=64", "decode=cpu:RQ=5:SK=48",
                                        "decode=cpu:RQ=8:SK=1024", "decode=cpu:RQ=9:SK=32",
                                        "decode=cpu:RQ=16:SK=80"};
    clattn_context *saved = h_ctx; /* run() takes h_ctx (on a failure the later tests fail too) */
    for (size_t t = 0; t < sizeof tunes / sizeof tunes[0]; t++) {
        h_ctx = saved;
        h_ctx = h_ctx_tuned(tunes[t]);
        CASES({2, 8, 2, 1, 301, 64, 48, {0, 299}}, {1, 16, 1, 1, 97, 17, 33, {97}},
              {2, 9, 1, 1, 130, 128, 128, {129, 61}}, {1, 5, 1, 1, 45, 31, 16, {43}},
              {2, 8, 2, 3, 200, 16, 40, {150, 7}, 1, 1, 1, 1, 30, -1, -1e3f},
              {1, 4, 1, 4, 90, 32, 16, {70}, 1, 0, 1, .alibi = 1},
              {1, 6, 1, 1, 70, 16, 16, {69}, .qscale = 1e-3, .vscale = 3e38},
              {1, 4, 2, 1, 60, 8, 8, {55}, .nan_v = 3});
        clattn_context_destroy(&h_ctx);
    }
    h_ctx = saved;
}

/* decode_gpu at the edges of what its tuning takes (README's range table): the fewest items per
 * group (3: one and two aborted PoCL 3.1's compiler at value head sizes past 16) with as many
 * rows as items and with one, a key column per stage and 256, head sizes 256 (the most output
 * columns per item) and 17, 16 rows per group (within 32 KiB of local memory, as Oclgrind
 * has); values near FLT_MAX take the overflow redo. */
static void test_gpu_tiles(void **s)
{
    (void)s;
    if (h_forced_variant()) /* its own tunings only (harness.h) */
        skip();
    static const char *const tunes[] = {"decode=gpu:WG=3:RQ=3:KC=1:SK=48",
                                        "decode=gpu:WG=3:RQ=1:KC=256:SK=16",
                                        "decode=gpu:WG=5:RQ=2:KC=7:SK=32",
                                        "decode=gpu:WG=16:RQ=16:KC=64:SK=128"};
    clattn_context *saved = h_ctx; /* run() takes h_ctx (on a failure the later tests fail too) */
    for (size_t t = 0; t < sizeof tunes / sizeof tunes[0]; t++) {
        h_ctx = saved;
        h_ctx = h_ctx_tuned(tunes[t]);
        CASES({1, 4, 2, 1, 61, 256, 256, {61}}, {2, 16, 1, 1, 50, 17, 17, {0, 49}},
              {1, 6, 2, 2, 40, 33, 256, {35}, 1, 0, 1},
              {1, 3, 1, 1, 37, 16, 48, {37}, .qscale = 1e-3, .vscale = 3e38},
              {1, 4, 1, 1, 29, 40, 24, {29}, .nan_v = 2});
        clattn_context_destroy(&h_ctx);
    }
    h_ctx = saved;
}

/* ALiBi slopes per head and per sequence and head, counted from each sequence's own last key:
 * GQA and MQA, appends with causal rows, windows, lengths 0 and full, large slopes (logits to
 * -1e4), long caches over many splits. */
static void test_alibi(void **s)
{
    (void)s;
    CASES({2, 8, 2, 1, 300, 64, 48, {0, 300}, .alibi = 1},
          {3, 4, 1, 1, 97, 16, 16, {-2, -2, -2}, .alibi = 2, .alibi_mag = 1},
          {2, 6, 3, 3, 40, 5, 7, {0, 30}, 1, 0, 1, .alibi = 2, .alibi_mag = 2},
          {2, 4, 2, 3, 300, 16, 8, {290, 40}, 1, 0, 0, 1, 20, 5, .fill = -1.0f, .alibi = 1},
          {1, 4, 4, 2, 5000, 64, 32, {4900}, 1, 1, 1, .alibi = 1},
          {2, 8, 2, 1, 4097, 32, 32, {4097, 3001}, .alibi = 2, .alibi_mag = 3});
}

/* With CLATTN_SYNC (params.sync) lengths outside [0, Kmax - Qn] are read back and refused,
 * nothing is enqueued and the output stays as it was; without it they are clamped (above). */
static void test_sync_rejects_lens(void **s)
{
    (void)s;
    clattn_params p;
    memset(&p, 0, sizeof p);
    p.sync = 1;
    clattn_context *ctx = NULL;
    if (clattn_context_wrap(&ctx, clattn_context_cl(h_ctx), clattn_context_device(h_ctx),
                            clattn_context_queue(h_ctx), &p) != CLATTN_SUCCESS)
        fail_msg("%s", clattn_last_error(NULL));
    float q[2 * 8], k[2 * 10 * 8], o[2 * 8], before[2 * 8];
    int lens[2] = {3, 10}; /* 10 > Kmax - Qn = 9 with an append */
    h_fill(q, 16, -1, 1);
    h_fill(k, 160, -1, 1);
    h_fill(o, 16, 5, 6);
    clattn_tensor tq = h_tensor(CLATTN_FLOAT32, 4, H_DIMS(2, 1, 1, 8), q);
    clattn_tensor tk = h_tensor(CLATTN_FLOAT32, 4, H_DIMS(2, 1, 10, 8), k);
    clattn_tensor tv = h_tensor(CLATTN_FLOAT32, 4, H_DIMS(2, 1, 10, 8), k);
    clattn_tensor tkn = h_tensor(CLATTN_FLOAT32, 4, H_DIMS(2, 1, 1, 8), q);
    clattn_tensor tvn = h_tensor(CLATTN_FLOAT32, 4, H_DIMS(2, 1, 1, 8), q);
    clattn_tensor tl = h_tensor(CLATTN_INT32, 1, H_DIMS(2), lens);
    clattn_tensor to = h_tensor(CLATTN_FLOAT32, 4, H_DIMS(2, 1, 1, 8), o);
    clattn_kv_cache c = {&tk, &tv, &tl, &tkn, &tvn, 1};
    /* one length above the bound, then one below 0 */
    for (int round = 0; round < 2; round++) {
        const char *want = round ? "cache.lens[0] = -1" : "cache.lens[1] = 10";
        clattn_status st = clattn_decode_attention(ctx, &tq, &c, NULL, &to);
        if (st != CLATTN_ERROR_INVALID_ARGUMENT || !strstr(clattn_last_error(ctx), want))
            fail_msg("status %d: %s (expected \"%s\")", st, clattn_last_error(ctx), want);
        assert_int_equal(clattn_tensor_read_blocking(ctx, &to, before), CLATTN_SUCCESS);
        assert_memory_equal(before, o, sizeof o);
        int *gl = h_read(&tl);
        assert_memory_equal(gl, lens, sizeof lens); /* not advanced */
        free(gl);
        float *gk = h_read(&tk), *gv = h_read(&tv); /* nothing appended */
        assert_memory_equal(gk, k, sizeof k);
        assert_memory_equal(gv, k, sizeof k);
        free(gk);
        free(gv);
        lens[0] = -1;
        lens[1] = 3;
        assert_int_equal(clattn_tensor_write_blocking(h_ctx, &tl, lens), CLATTN_SUCCESS);
    }
    clattn_tensor *ts[] = {&tq, &tk, &tv, &tkn, &tvn, &tl, &to};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        clattn_tensor_release(ts[i]);
    clattn_context_destroy(&ctx);
}

/* The largest cache decoding takes (2^31 - 1105 rows per K/V head: the kernels count keys in int)
 * and one row more, with the longest splits a tuning allows (SK = 2^20), whose last one ends past
 * INT_MAX: its keys must count. float16, d = dv = 1, one sequence: K and V 0 but for the last 943
 * rows, where K is 20 and V 1, so that with q = 1 and scale 1 the output is exactly
 * w = 943 e^20 / (L - 943 + 943 e^20) and the LSE log(L - 943 + 943 e^20). Two caches of 4 GiB:
 * only with CLATTN_TEST_HUGE=1 (meson's decode-huge, suite fuzz: CI's long checks). Tolerance:
 * the merge of 2048 float32 partial results, each exact (sums of ones and of 943 equal terms),
 * costs a few ulps of the LSE (~27) and of the output (~1); 1e-5 is 100 ulps of the output. */
static void test_huge_cache(void **s)
{
    (void)s;
    if (!h_huge())
        skip();
    const size_t max_rows = 2147483647u - 64 - 1024 - 16, hot = 943;
    clattn_context *ctx = h_ctx_tuned("decode=cpu:SK=1048576");
    float one = 1.0f, out = NAN, lse = NAN;
    int len = (int)max_rows;
    unsigned short kv[943 * 2];
    for (size_t i = 0; i < hot; i++) {
        kv[i] = clattn_float_to_half(20.0f);
        kv[hot + i] = clattn_float_to_half(1.0f);
    }
    clattn_tensor tq = h_tensor(CLATTN_FLOAT32, 4, H_DIMS(1, 1, 1, 1), &one);
    clattn_tensor to = h_tensor(CLATTN_FLOAT32, 4, H_DIMS(1, 1, 1, 1), &out);
    clattn_tensor tlse = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(1, 1, 1), &lse);
    clattn_tensor tl = h_tensor(CLATTN_INT32, 1, H_DIMS(1), &len);
    clattn_tensor tk, tv;
    size_t dims[4] = {1, 1, max_rows + 1, 1};
    clattn_attention_opts opts;
    memset(&opts, 0, sizeof opts);
    opts.mask.align = CLATTN_ALIGN_BOTTOM_RIGHT;
    opts.scale = 1.0f;
    opts.lse = &tlse;
    /* one row past the bound: refused, nothing enqueued */
    assert_int_equal(clattn_tensor_create(ctx, CLATTN_FLOAT16, 4, dims, NULL, &tk), CLATTN_SUCCESS);
    assert_int_equal(clattn_tensor_create(ctx, CLATTN_FLOAT16, 4, dims, NULL, &tv), CLATTN_SUCCESS);
    clattn_kv_cache c = {&tk, &tv, &tl, NULL, NULL, 0};
    clattn_status st = clattn_decode_attention(ctx, &tq, &c, &opts, &to);
    const char *want = "cache.k_cache: 2147482544 rows per K/V head, at most 2147482543";
    if (st != CLATTN_ERROR_UNSUPPORTED || !strstr(clattn_last_error(ctx), want))
        fail_msg("status %d: %s (expected \"%s\")", st, clattn_last_error(ctx), want);
    clattn_tensor_release(&tk);
    clattn_tensor_release(&tv);
    dims[2] = max_rows;
    tk = h_filled(ctx, CLATTN_FLOAT16, 4, dims, 0.0f);
    tv = h_filled(ctx, CLATTN_FLOAT16, 4, dims, 0.0f);
    size_t tail = max_rows - hot, hot_dims[1] = {hot}; /* (in elements) */
    clattn_tensor vk = clattn_view(tk.buf, CLATTN_FLOAT16, tail, 1, hot_dims);
    clattn_tensor vv = clattn_view(tv.buf, CLATTN_FLOAT16, tail, 1, hot_dims);
    assert_int_equal(clattn_tensor_write_blocking(ctx, &vk, kv), CLATTN_SUCCESS);
    assert_int_equal(clattn_tensor_write_blocking(ctx, &vv, kv + hot), CLATTN_SUCCESS);
    if (clattn_decode_attention(ctx, &tq, &c, &opts, &to) != CLATTN_SUCCESS)
        fail_msg("decode: %s", clattn_last_error(ctx));
    assert_int_equal(clattn_tensor_read_blocking(ctx, &to, &out), CLATTN_SUCCESS);
    assert_int_equal(clattn_tensor_read_blocking(ctx, &tlse, &lse), CLATTN_SUCCESS);
    double big = (double)hot * exp(20.0), sum = (double)(max_rows - hot) + big;
    if (!(fabs(out - big / sum) <= 1e-5) || !(fabs(lse - log(sum)) <= 1e-5 * log(sum)))
        fail_msg("out %.9g, expected %.9g; LSE %.9g, expected %.9g", out, big / sum, lse,
                 log(sum));
    clattn_tensor *ts[] = {&tq, &to, &tlse, &tl, &tk, &tv};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        clattn_tensor_release(ts[i]);
    clattn_context_destroy(&ctx);
}

/* Long caches: each split sums its keys a tile at a time from 0 (decode_cpu's 16 keys, decode_gpu's
 * WG), adds the tiles into its running sums, and the merge adds the splits up compensated
 * (common.cl's clattn_kahan); a merge kept split by split drifted 1.2e-5 over 2^22 keys in
 * splits of 16. Two rows (q random; q = 0: every weight 1 / L, the output V's mean) over a cache
 * of 2^22 + 3 keys (d 1, dv 16, values in [0.5, 1.5]), each shape with its default splits and
 * with the shortest (SK=16: the most splits to merge), against the double reference, relative to
 * each output. Tolerance (u = 2^-24), for tiles of T keys in splits of S: a tile's sum of
 * positive terms rounds within T u and a split's S / T tiles add uncompensated (S / T u), the
 * merge's compensated sums and weights within 6 u; each weight's score (d 1, |score| <= 1) and
 * exponential within 5 u, which moves an average of values in [0.5, 1.5] by 2 x 5 u of itself:
 * twice (T + S / T + 16) u. The LSE: h_assert_lse. Only with CLATTN_TEST_HUGE=1 (meson's
 * decode-huge). */
static void test_long_cache_sums(void **s)
{
    (void)s;
    if (!h_huge())
        skip();
    static const struct {
        const char *tuning;
        int tile, split;
    } cases[] = {
        {"decode=cpu:RQ=4:SK=1024", 16, 1024}, {"decode=cpu:RQ=2:SK=16", 16, 16},
        {"decode=gpu:RQ=4:WG=128:SK=256:KC=64", 128, 256}, {"decode=gpu:RQ=2:WG=16:SK=16", 16, 16},
    };
    const int qn = 2, dv = 16, len = (1 << 22) + 3;
    float q[2], *k, *v;
    double ref[2 * 16], lse[2], mag[2];
    h_long_rows(len, dv, q, &k, &v, ref, lse, mag);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        clattn_context *ctx = h_ctx_tuned(cases[i].tuning);
        clattn_tensor tq = h_tensor(CLATTN_FLOAT32, 4, H_DIMS(1, 1, (size_t)qn, 1), q);
        clattn_tensor tk = h_tensor(CLATTN_FLOAT32, 4, H_DIMS(1, 1, (size_t)len, 1), k);
        clattn_tensor tv = h_tensor(CLATTN_FLOAT32, 4, H_DIMS(1, 1, (size_t)len, (size_t)dv), v);
        clattn_tensor to = h_tensor(CLATTN_FLOAT32, 4, H_DIMS(1, 1, (size_t)qn, (size_t)dv), NULL);
        clattn_tensor tl = h_tensor(CLATTN_INT32, 1, H_DIMS(1), &len);
        clattn_tensor tlse = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(1, 1, (size_t)qn), NULL);
        h_poison(&to);
        h_poison(&tlse);
        clattn_kv_cache c = {&tk, &tv, &tl, NULL, NULL, 0};
        clattn_attention_opts opts;
        memset(&opts, 0, sizeof opts);
        opts.lse = &tlse;
        if (clattn_decode_attention(ctx, &tq, &c, &opts, &to) != CLATTN_SUCCESS)
            fail_msg("%s: %s", cases[i].tuning, clattn_last_error(ctx));
        float *go = h_read_float(&to), *gl = h_read_float(&tlse);
        char what[96];
        snprintf(what, sizeof what, "CLATTN_TUNE=%s: %d keys", cases[i].tuning, len);
        double tol = 2.0 * ldexp(cases[i].tile + cases[i].split / cases[i].tile + 16, -24);
        h_assert_close(go, ref, (size_t)qn * dv, tol, 0.0, what);
        h_assert_lse(gl, lse, mag, (size_t)qn, what);
        free(go);
        free(gl);
        clattn_tensor *ts[] = {&tq, &tk, &tv, &to, &tl, &tlse};
        for (size_t j = 0; j < sizeof ts / sizeof ts[0]; j++)
            clattn_tensor_release(ts[j]);
        clattn_context_destroy(&ctx);
    }
    free(k);
    free(v);
}

/* 16-bit caches (the bytes decoding streams), Q, new rows and out in combinations that put each
 * dtype in each place: aligned rows (head sizes multiples of 16: the aligned-row loads) and
 * others, appends converting the new rows to the cache's dtype, masks, NaN values, ALiBi, long
 * caches. The reference takes every input as stored. */
static void test_16bit(void **s)
{
    (void)s;
    static const clattn_dtype combos[5][4] = {{F32, F16, F32, F32}, {F32, BF16, BF16, F32},
                                              {F16, F16, F16, F16}, {BF16, BF16, F32, BF16},
                                              {BF16, F16, BF16, F32}};
    for (int i = 0; i < 5; i++) {
        clattn_dtype qt = combos[i][0], ct = combos[i][1], nt = combos[i][2], ot = combos[i][3];
        if (h_small()) { /* Oclgrind: two combinations (every dtype once), the small cases */
            if (i == 2 || i == 3)
                CASES({2, 3, 3, 1, 49, 15, 17, {48, 16}, .qt = qt, .ct = ct, .nt = nt, .ot = ot},
                      {2, 4, 1, 3, 50, 8, 8, {20, 49}, 1, 0, 1, .nan_v = 1, .qt = qt, .ct = ct,
                       .nt = nt, .ot = ot},
                      {1, 4, 2, 1, 64, 32, 16, {60}, .qt = qt, .ct = ct, .nt = nt, .ot = ot});
            continue;
        }
        CASES({3, 8, 2, 1, 300, 64, 48, {0, 300, 257}, .qt = qt, .ct = ct, .nt = nt, .ot = ot},
              {2, 3, 3, 1, 49, 15, 17, {48, 16}, .qt = qt, .ct = ct, .nt = nt, .ot = ot},
              {1, 32, 8, 1, 1000, 128, 128, {999}, .qt = qt, .ct = ct, .nt = nt, .ot = ot},
              {2, 2, 2, 5, 64, 8, 24, {10, 59}, 1, 1, 1, .qt = qt, .ct = ct, .nt = nt, .ot = ot},
              {1, 4, 2, 16, 300, 32, 16, {270}, 1, 1, 1, .qt = qt, .ct = ct, .nt = nt, .ot = ot},
              {2, 4, 2, 3, 300, 16, 8, {290, 40}, 1, 0, 0, 1, 20, 5, .fill = -1.0f, .qt = qt,
               .ct = ct, .nt = nt, .ot = ot},
              {2, 4, 1, 3, 50, 8, 8, {20, 49}, 1, 0, 1, .nan_v = 1, .qt = qt, .ct = ct,
               .nt = nt, .ot = ot},
              {2, 8, 2, 1, 400, 64, 64, {399, 200}, .qscale = 100, .qt = qt, .ct = ct,
               .nt = nt, .ot = ot},
              {3, 4, 1, 1, 97, 16, 16, {-2, -2, -2}, .alibi = 2, .alibi_mag = 1, .qt = qt,
               .ct = ct, .nt = nt, .ot = ot},
              {2, 8, 2, 1, 4097, 128, 128, {4097, 3001}, .qt = qt, .ct = ct, .nt = nt,
               .ot = ot},
              /* values below float16's smallest normal (6.1e-5), aligned rows: subnormals
               * through every load path */
              {1, 8, 2, 2, 300, 64, 32, {297}, 1, 1, 1, .vscale = 5e-5, .qt = qt, .ct = ct,
               .nt = nt, .ot = ot});
    }
}

/* The cache is one dtype, the new rows too; int32 is no float. Nothing is written. */
static void test_16bit_bad_input(void **s)
{
    (void)s;
    float z[2 * 10 * 8] = {0}, o[16];
    int lens[2] = {3, 4};
    h_fill(o, 16, 5, 6);
    clattn_tensor tq = h_tensor(CLATTN_FLOAT32, 4, H_DIMS(2, 1, 1, 8), z);
    clattn_tensor tk = h_tensor_as(CLATTN_FLOAT16, 4, H_DIMS(2, 1, 10, 8), z);
    clattn_tensor tv = h_tensor_as(CLATTN_BFLOAT16, 4, H_DIMS(2, 1, 10, 8), z);
    clattn_tensor tv16 = h_tensor_as(CLATTN_FLOAT16, 4, H_DIMS(2, 1, 10, 8), z);
    clattn_tensor tkn = h_tensor_as(CLATTN_FLOAT16, 4, H_DIMS(2, 1, 1, 8), z);
    clattn_tensor tvn = h_tensor(CLATTN_FLOAT32, 4, H_DIMS(2, 1, 1, 8), z);
    clattn_tensor ti = h_tensor(CLATTN_INT32, 4, H_DIMS(2, 1, 1, 8), NULL);
    clattn_tensor tl = h_tensor(CLATTN_INT32, 1, H_DIMS(2), lens);
    clattn_tensor to = h_tensor(CLATTN_FLOAT32, 4, H_DIMS(2, 1, 1, 8), o);
    clattn_kv_cache c1 = {&tk, &tv, &tl, NULL, NULL, 0};
    h_assert_error(clattn_decode_attention(h_ctx, &tq, &c1, NULL, &to),
                   CLATTN_ERROR_INVALID_TENSOR,
                   "cache.v_cache: dtype bfloat16, expected k_cache's float16");
    clattn_kv_cache c2 = {&tk, &tv16, &tl, &tkn, &tvn, 1};
    h_assert_error(clattn_decode_attention(h_ctx, &tq, &c2, NULL, &to),
                   CLATTN_ERROR_INVALID_TENSOR, "cache.v_new: dtype float32, expected k_new's float16");
    clattn_kv_cache c3 = {&tk, &tv16, &tl, NULL, NULL, 0};
    h_assert_error(clattn_decode_attention(h_ctx, &ti, &c3, NULL, &to),
                   CLATTN_ERROR_INVALID_TENSOR, "Q: dtype int32");
    h_assert_bytes(&to, o, "out of a refused decode");
    int *gl = h_read(&tl);
    assert_memory_equal(gl, lens, sizeof lens);
    free(gl);
    clattn_tensor *ts[] = {&tq, &tk, &tv, &tv16, &tkn, &tvn, &ti, &tl, &to};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        clattn_tensor_release(ts[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_row),
        cmocka_unit_test(test_append_causal),
        cmocka_unit_test(test_masks_and_values),
        cmocka_unit_test(test_negative_scores),
        cmocka_unit_test(test_long),
        cmocka_unit_test(test_huge_values),
        cmocka_unit_test(test_alibi),
        cmocka_unit_test(test_row_tiles),
        cmocka_unit_test(test_gpu_tiles),
        cmocka_unit_test(test_sync_rejects_lens),
        cmocka_unit_test(test_16bit),
        cmocka_unit_test(test_16bit_bad_input),
        cmocka_unit_test(test_huge_cache),
        cmocka_unit_test(test_long_cache_sums),
    };
    return cmocka_run_group_tests(tests, h_setup, h_teardown);
}
