/* clattn-check: what to run on a new machine to see whether clattn works there and how fast. On
 * every OpenCL device present (or the one --device names), under each kernel variant set (the
 * tuning table's choice, the CPU shapes, the GPU shapes, small GPU tiles with small loop budgets,
 * the unfused attention path), it checks matmul, masked softmax, dot-product attention (fused
 * and unfused) and KV-cache decoding against the double-precision references of the test suite (tests/ref.c) on awkward
 * shapes with lengths 0 and K, causal masks and -inf fills, then times a short GEMM and fused
 * attention; one summary table at the end. A variant set the device refuses (the CPU shapes on
 * Mesa's llvmpipe) is reported as refused, not failed. Exit status 0 when every check that ran
 * passed, 1 when one failed or a device ran none (the environment's settings refused, or every
 * variant set), 2 on bad usage or no OpenCL device.
 *
 *     clattn-check [--device SPEC] [--quick]
 *
 * --device: only the device SPEC (as CLATTN_DEVICE) selects; default CLATTN_DEVICE when it is set,
 * else every device. --quick: the checks only, no timing. */
#define _POSIX_C_SOURCE 200809L
#include "../tests/ref.h"
#include "setting_error.h"
#include <clattn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const struct {
    const char *name, *tuning;
} variant_sets[] = {
    {"table", ""},
    {"cpu", "matmul=cpu,softmax=cpu,attention=cpu,decode=cpu"},
    {"gpu", "matmul=gpu,softmax=gpu,attention=gpu,decode=gpu"},
    {"gpu-small", "matmul=gpu:TSM=16:TSN=8:TSK=4:WPTM=2:WPTN=2:LOOPS=600,softmax=gpu:WG=32,"
                  "attention=gpu:BQ=16:BK=8:LOOPS=20000,decode=gpu:WG=8:RQ=3:SK=48:KC=24:LOOPS=8000"},
    {"unfused", "attention=unfused"},
};
#define NSETS (sizeof variant_sets / sizeof variant_sets[0])

/* The tolerances of the test suite (reasons in tests/test_matmul.c, test_softmax.c,
 * test_attention.c): scaled errors, so a wrong element fails while float32 rounding passes. */
#define MATMUL_TOL 1e-4
#define SM_RTOL 1e-5
#define SM_ATOL 1e-9
#define OUT_TOL 1e-4

enum { MATMUL, SOFTMAX, FUSED, UNFUSED, DECODE, VARLEN, NCHECKS };
static const char *const check_names[NCHECKS] = {"matmul", "softmax", "fused attn", "unfused attn",
                                                 "decode", "varlen"};

typedef struct {
    char device[160], set[16], refused[200];
    int unusable; /* refused holds why no context could be made with the environment's settings */
    double err[NCHECKS]; /* worst scaled error; < 0: the op failed (message in fail) */
    int ok[NCHECKS];
    char fail[NCHECKS][160];
    double gemm_gflops, attn_gflops;
} result;

static unsigned long long rng = 12345;
static double uniform(double lo, double hi)
{
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return lo + (hi - lo) * (double)(rng >> 11) / 9007199254740992.0;
}
static void fill(float *x, size_t n, double lo, double hi)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)uniform(lo, hi);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "clattn-check: out of host memory\n");
        exit(2);
    }
    return p;
}

static clattn_tensor tensor(clattn_context *ctx, clattn_dtype dt, int ndim, const size_t *dims,
                            const void *host, int *bad)
{
    clattn_tensor t;
    memset(&t, 0, sizeof t);
    if (clattn_tensor_create(ctx, dt, ndim, dims, host, &t) != CLATTN_SUCCESS)
        *bad = 1;
    else if (!host && dt == CLATTN_FLOAT32 && clattn_tensor_fill(ctx, &t, NAN) != CLATTN_SUCCESS)
        *bad = 1; /* outputs start as NaN: an element never written fails its check */
    return t;
}

static int op_failed(result *r, int c, clattn_context *ctx, const char *what)
{
    r->err[c] = -1;
    snprintf(r->fail[c], sizeof r->fail[c], "%s: %s", what, clattn_last_error(ctx));
    return 1;
}

/* Worst |got - ref| / scale over n elements: where the reference is NaN (a row whose every key
 * is blocked with -inf) got must be NaN too; a non-finite got elsewhere counts as inf. */
static double scaled_error(const float *got, const double *ref, const double *scale, size_t n)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double e = isnan(ref[i]) ? (isnan(got[i]) ? 0 : INFINITY)
                   : isfinite(got[i]) ? fabs(got[i] - ref[i]) / scale[i] : INFINITY;
        worst = e > worst ? e : worst;
    }
    return worst;
}

/* C = alpha op(A) op(B) + beta C for one batched shape, worst scaled error (as test_matmul). */
static double matmul_case(clattn_context *ctx, result *r, int nb, int M, int N, int K, int ta,
                          int tb, float alpha, float beta)
{
    size_t an = (size_t)M * K, bn = (size_t)K * N, cn = (size_t)M * N * nb;
    float *A = xmalloc(an * nb * 4), *B = xmalloc(bn * nb * 4), *C0 = xmalloc(cn * 4);
    float *got = xmalloc(cn * 4);
    double *ref = xmalloc(cn * 8), *mag = xmalloc(cn * 8), err = -1;
    int bad = 0;
    fill(A, an * nb, -1, 1);
    fill(B, bn * nb, -1, 1);
    fill(C0, cn, -1, 1);
    size_t ad[3] = {(size_t)nb, (size_t)(ta ? K : M), (size_t)(ta ? M : K)};
    size_t bd[3] = {(size_t)nb, (size_t)(tb ? N : K), (size_t)(tb ? K : N)};
    size_t cd[3] = {(size_t)nb, (size_t)M, (size_t)N};
    clattn_tensor tA = tensor(ctx, CLATTN_FLOAT32, 3, ad, A, &bad);
    clattn_tensor tB = tensor(ctx, CLATTN_FLOAT32, 3, bd, B, &bad);
    clattn_tensor tC = tensor(ctx, CLATTN_FLOAT32, 3, cd, beta != 0.0f ? C0 : NULL, &bad);
    if (bad || clattn_matmul(ctx, &tA, ta, &tB, tb, alpha, beta, &tC) != CLATTN_SUCCESS ||
        clattn_tensor_read_blocking(ctx, &tC, got) != CLATTN_SUCCESS) {
        op_failed(r, MATMUL, ctx, "matmul");
    } else {
        ref_matmul(nb, M, N, K, A, an, ta, B, bn, tb, alpha, beta, C0, ref, mag);
        for (size_t i = 0; i < cn; i++)
            mag[i] = fmax(fabs(ref[i]), mag[i] / sqrt((double)K)) + 1e-30;
        err = scaled_error(got, ref, mag, cn);
    }
    clattn_tensor_release(&tA); clattn_tensor_release(&tB); clattn_tensor_release(&tC);
    free(A); free(B); free(C0); free(got); free(ref); free(mag);
    return err;
}

static void check_matmul(clattn_context *ctx, result *r)
{
    static const int shapes[][4] = {{1, 1, 1, 1}, {2, 37, 41, 29}, {1, 130, 17, 257}, {1, 9, 11, 3001}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++) {
            const int *sh = shapes[s];
            double e = matmul_case(ctx, r, sh[0], sh[1], sh[2], sh[3], t & 1, t >> 1,
                                   t == 3 ? -0.5f : 1.0f, t == 3 ? 0.75f : 0.0f);
            if (e < 0)
                return;
            r->err[MATMUL] = fmax(r->err[MATMUL], e);
        }
    r->ok[MATMUL] = r->err[MATMUL] <= MATMUL_TOL;
}

/* Lengths of (nb, nq) rows in [0, nk], the first 0 and the second nk. */
static int *lengths(int nb, int nq, int nk)
{
    int *l = xmalloc((size_t)nb * nq * sizeof *l);
    for (int i = 0; i < nb * nq; i++)
        l[i] = i == 0 ? 0 : i == 1 ? nk : (int)uniform(0, nk + 1);
    return l;
}

static void check_softmax(clattn_context *ctx, result *r)
{
    enum { D0 = 3, Q = 37, K = 131 };
    size_t n = (size_t)D0 * Q * K, dims[3] = {D0, Q, K};
    float *x = xmalloc(n * 4), *got = xmalloc(n * 4);
    double *ref = xmalloc(n * 8), *scale = xmalloc(n * 8);
    int *lens = lengths(D0, Q, K);
    fill(x, n, -8, 8);
    for (int causal = 0; causal < 2; causal++) {
        int bad = 0;
        clattn_tensor tx = tensor(ctx, CLATTN_FLOAT32, 3, dims, x, &bad);
        clattn_tensor ty = tensor(ctx, CLATTN_FLOAT32, 3, dims, NULL, &bad);
        clattn_mask m;
        memset(&m, 0, sizeof m);
        m.valid_lens_host = lens;
        m.lens_ndim = 2;
        m.lens_dims[0] = D0;
        m.lens_dims[1] = Q;
        m.causal = causal;
        m.fill = causal ? -INFINITY : 0.0f;
        int failed = bad || clattn_masked_softmax(ctx, &tx, &m, &ty) != CLATTN_SUCCESS ||
                     clattn_tensor_read_blocking(ctx, &ty, got) != CLATTN_SUCCESS;
        clattn_tensor_release(&tx);
        clattn_tensor_release(&ty);
        if (failed) {
            op_failed(r, SOFTMAX, ctx, "masked_softmax");
            break;
        }
        ref_mask rm = {D0, 1, Q, K, lens, 2, NULL, {0, 0, 0, 0}, causal,
                       causal ? -INFINITY : (double)CLATTN_DEFAULT_FILL, 0, 0, 0, 0, NULL,
                       {0, 0, 0, 0}, NULL, {0, 0}};
        ref_masked_softmax(&rm, x, ref);
        for (size_t i = 0; i < n; i++) /* |got - ref| <= SM_RTOL |ref| + SM_ATOL */
            scale[i] = fabs(ref[i]) + SM_ATOL / SM_RTOL;
        r->err[SOFTMAX] = fmax(r->err[SOFTMAX], scaled_error(got, ref, scale, n));
    }
    if (r->err[SOFTMAX] >= 0)
        r->ok[SOFTMAX] = r->err[SOFTMAX] <= SM_RTOL;
    free(x); free(got); free(ref); free(scale); free(lens);
}

/* Dot-product attention (fused without weights, unfused with), as test_attention: lengths
 * including 0 and K, then causal with -inf fill and grouped-query heads (two query heads over one
 * K/V head); |out - ref| <= OUT_TOL max(|ref|, sum w |v|). */
static void check_attention(clattn_context *ctx, result *r, int with_weights)
{
    enum { NB = 2, Q = 37, K = 131, D = 24, DV = 40 };
    int c = with_weights ? UNFUSED : FUSED;
    size_t qn = NB * Q * D, kn = NB * K * D, vn = NB * K * DV, on = NB * Q * DV, wn = NB * Q * K;
    float *q = xmalloc(qn * 4), *k = xmalloc(kn * 4), *v = xmalloc(vn * 4), *got = xmalloc(on * 4);
    double *w = xmalloc(wn * 8), *ref = xmalloc(on * 8), *scale = xmalloc(on * 8);
    int *lens = lengths(NB, Q, K);
    fill(q, qn, -2, 2);
    fill(k, kn, -1, 1);
    fill(v, vn, -1, 1);
    double *qd = ref_to_double(q, qn), *kd = NULL, *vd = NULL;
    for (int causal = 0; causal < 2; causal++) {
        int bad = 0;
        /* causal: Q (1, NB, Q, D) over K, V (1, 1, K, .), so the reference's K and V are batch
         * 0's in both batches */
        if (causal) {
            memcpy(k + K * D, k, K * D * 4);
            memcpy(v + K * DV, v, K * DV * 4);
            free(kd);
            free(vd);
        }
        kd = ref_to_double(k, kn);
        vd = ref_to_double(v, vn);
        size_t hkv = causal ? 1 : NB, rank = causal ? 4 : 3, o = 4 - rank; /* 3-D: dims from 1 */
        size_t qdim[4] = {1, NB, Q, D}, kdim[4] = {1, hkv, K, D}, vdim[4] = {1, hkv, K, DV};
        size_t odim[4] = {1, NB, Q, DV}, wdim[4] = {1, NB, Q, K};
        clattn_tensor tq = tensor(ctx, CLATTN_FLOAT32, (int)rank, qdim + o, q, &bad);
        clattn_tensor tk = tensor(ctx, CLATTN_FLOAT32, (int)rank, kdim + o, k, &bad);
        clattn_tensor tv = tensor(ctx, CLATTN_FLOAT32, (int)rank, vdim + o, v, &bad);
        clattn_tensor to = tensor(ctx, CLATTN_FLOAT32, (int)rank, odim + o, NULL, &bad);
        clattn_tensor tw = tensor(ctx, CLATTN_FLOAT32, (int)rank, wdim + o, NULL, &bad);
        clattn_attention_opts opts;
        memset(&opts, 0, sizeof opts);
        if (causal) {
            opts.mask.causal = 1;
            opts.mask.fill = -INFINITY;
        } else {
            opts.mask.valid_lens_host = lens;
            opts.mask.lens_ndim = 2;
            opts.mask.lens_dims[0] = NB;
            opts.mask.lens_dims[1] = Q;
        }
        int failed = bad || clattn_dot_product_attention(ctx, &tq, &tk, &tv, &opts, &to,
                                                         with_weights ? &tw : NULL) != CLATTN_SUCCESS ||
                     clattn_tensor_read_blocking(ctx, &to, got) != CLATTN_SUCCESS;
        clattn_tensor *ts[] = {&tq, &tk, &tv, &to, &tw};
        for (int i = 0; i < 5; i++)
            clattn_tensor_release(ts[i]);
        if (failed) {
            op_failed(r, c, ctx, "dot_product_attention");
            break;
        }
        ref_mask rm = {NB, 1, Q, K, causal ? NULL : lens, causal ? 0 : 2, NULL, {0, 0, 0, 0},
                       causal, causal ? -INFINITY : (double)CLATTN_DEFAULT_FILL, 0, 0, 0, 0,
                       NULL, {0, 0, 0, 0}, NULL, {0, 0}};
        ref_attention(&rm, D, DV, qd, kd, vd, 1.0 / sqrt((double)D), NULL, w, ref);
        ref_attention_scale(NB, Q, K, DV, w, vd, ref, scale);
        r->err[c] = fmax(r->err[c], scaled_error(got, ref, scale, on));
    }
    if (r->err[c] >= 0)
        r->ok[c] = r->err[c] <= OUT_TOL;
    free(q); free(k); free(v); free(got); free(w); free(ref); free(scale); free(lens);
    free(qd); free(kd); free(vd);
}

/* KV-cache decoding: 2 sequences (lengths 37 and 98 before an append of 2 rows), 4 query heads
 * over 2 K/V heads, causal among the new rows, against dot-product attention's reference over
 * each sequence's keys (bottom-right). The cache rows past each prefix are NaN: never read. */
static void check_decode(clattn_context *ctx, result *r)
{
    enum { B = 2, HQ = 4, HKV = 2, QN = 2, KMAX = 100, D = 24, DV = 40 };
    size_t qn = B * HQ * QN * D, kc = B * HKV * KMAX, on = B * HQ * QN * DV;
    float *q = xmalloc(qn * 4), *k = xmalloc(kc * D * 4), *v = xmalloc(kc * DV * 4);
    float *kn = xmalloc(B * HKV * QN * D * 4), *vn = xmalloc(B * HKV * QN * DV * 4);
    float *got = xmalloc(on * 4);
    int lens[B] = {37, 98}, bad = 0;
    fill(q, qn, -2, 2);
    fill(kn, B * HKV * QN * D, -1, 1);
    fill(vn, B * HKV * QN * DV, -1, 1);
    for (size_t i = 0; i < kc * D; i++)
        k[i] = (i / D) % KMAX < (size_t)lens[i / D / KMAX / HKV] ? (float)uniform(-1, 1) : NAN;
    for (size_t i = 0; i < kc * DV; i++)
        v[i] = (i / DV) % KMAX < (size_t)lens[i / DV / KMAX / HKV] ? (float)uniform(-1, 1) : NAN;
    size_t qd[4] = {B, HQ, QN, D}, kd[4] = {B, HKV, KMAX, D}, vd[4] = {B, HKV, KMAX, DV};
    size_t knd[4] = {B, HKV, QN, D}, vnd[4] = {B, HKV, QN, DV}, od[4] = {B, HQ, QN, DV};
    size_t ld[1] = {B};
    clattn_tensor tq = tensor(ctx, CLATTN_FLOAT32, 4, qd, q, &bad);
    clattn_tensor tk = tensor(ctx, CLATTN_FLOAT32, 4, kd, k, &bad);
    clattn_tensor tv = tensor(ctx, CLATTN_FLOAT32, 4, vd, v, &bad);
    clattn_tensor tkn = tensor(ctx, CLATTN_FLOAT32, 4, knd, kn, &bad);
    clattn_tensor tvn = tensor(ctx, CLATTN_FLOAT32, 4, vnd, vn, &bad);
    clattn_tensor tl = tensor(ctx, CLATTN_INT32, 1, ld, lens, &bad);
    clattn_tensor to = tensor(ctx, CLATTN_FLOAT32, 4, od, NULL, &bad);
    clattn_kv_cache cache = {&tk, &tv, &tl, &tkn, &tvn, 0};
    clattn_attention_opts opts;
    memset(&opts, 0, sizeof opts);
    opts.mask.causal = 1;
    opts.mask.align = CLATTN_ALIGN_BOTTOM_RIGHT;
    int failed = bad || clattn_decode_attention(ctx, &tq, &cache, &opts, &to) != CLATTN_SUCCESS ||
                 clattn_tensor_read_blocking(ctx, &to, got) != CLATTN_SUCCESS;
    clattn_tensor *ts[] = {&tq, &tk, &tv, &tkn, &tvn, &tl, &to};
    for (int i = 0; i < 7; i++)
        clattn_tensor_release(ts[i]);
    if (failed)
        op_failed(r, DECODE, ctx, "decode_attention");
    for (int b = 0; !failed && b < B; b++) {
        int L = lens[b] + QN, G = HQ / HKV;
        double *qd2 = xmalloc(HQ * QN * D * 8), *kd2 = xmalloc(HQ * L * D * 8);
        double *vd2 = xmalloc(HQ * L * DV * 8), *w = xmalloc(HQ * QN * L * 8);
        double *ref = xmalloc(HQ * QN * DV * 8), *scale = xmalloc(HQ * QN * DV * 8);
        for (int i = 0; i < HQ * QN * D; i++)
            qd2[i] = q[b * HQ * QN * D + i];
        for (int h = 0; h < HQ; h++)
            for (int j = 0; j < L; j++) {
                int hk = b * HKV + h / G, nj = j - lens[b]; /* nj >= 0: an appended row */
                for (int e = 0; e < D; e++)
                    kd2[(h * L + j) * D + e] = nj < 0 ? k[(hk * KMAX + j) * D + e]
                                                      : kn[(hk * QN + nj) * D + e];
                for (int e = 0; e < DV; e++)
                    vd2[(h * L + j) * DV + e] = nj < 0 ? v[(hk * KMAX + j) * DV + e]
                                                       : vn[(hk * QN + nj) * DV + e];
            }
        ref_mask rm = {1, HQ, QN, L, NULL, 0, NULL, {0, 0, 0, 0}, 1, CLATTN_DEFAULT_FILL, 1,
                       0, 0, 0, NULL, {0, 0, 0, 0}, NULL, {0, 0}};
        ref_attention(&rm, D, DV, qd2, kd2, vd2, 1.0 / sqrt((double)D), NULL, w, ref);
        ref_attention_scale(HQ, QN, L, DV, w, vd2, ref, scale);
        r->err[DECODE] = fmax(r->err[DECODE],
                              scaled_error(got + b * HQ * QN * DV, ref, scale, HQ * QN * DV));
        free(qd2); free(kd2); free(vd2); free(w); free(ref); free(scale);
    }
    if (r->err[DECODE] >= 0)
        r->ok[DECODE] = r->err[DECODE] <= OUT_TOL;
    free(q); free(k); free(v); free(kn); free(vn); free(got);
}

/* Packed variable-length attention: 3 sequences (queries 5, 70, 1; keys 9, 70, 33), 4 query
 * heads over 2 K/V heads, bottom-right causal, ALiBi slopes per head, against dot-product
 * attention's reference on each sequence alone. */
static void check_varlen(clattn_context *ctx, result *r)
{
    enum { B = 3, HQ = 4, HKV = 2, D = 24, DV = 40, TQ = 76, TK = 112 };
    static const int cq[B + 1] = {0, 5, 75, 76}, ck[B + 1] = {0, 9, 79, 112};
    static const float slopes[HQ] = {0.5f, 0.25f, 0.125f, 0.0625f};
    const double sd[HQ] = {0.5, 0.25, 0.125, 0.0625};
    float *q = xmalloc(TQ * HQ * D * 4), *k = xmalloc(TK * HKV * D * 4);
    float *v = xmalloc(TK * HKV * DV * 4), *got = xmalloc(TQ * HQ * DV * 4);
    int bad = 0;
    fill(q, TQ * HQ * D, -2, 2);
    fill(k, TK * HKV * D, -1, 1);
    fill(v, TK * HKV * DV, -1, 1);
    size_t qd[3] = {TQ, HQ, D}, kd[3] = {TK, HKV, D}, vd[3] = {TK, HKV, DV}, od[3] = {TQ, HQ, DV};
    size_t sdims[1] = {HQ};
    clattn_tensor tq = tensor(ctx, CLATTN_FLOAT32, 3, qd, q, &bad);
    clattn_tensor tk = tensor(ctx, CLATTN_FLOAT32, 3, kd, k, &bad);
    clattn_tensor tv = tensor(ctx, CLATTN_FLOAT32, 3, vd, v, &bad);
    clattn_tensor to = tensor(ctx, CLATTN_FLOAT32, 3, od, NULL, &bad);
    clattn_tensor ts = tensor(ctx, CLATTN_FLOAT32, 1, sdims, slopes, &bad);
    clattn_varlen seqs = {B, cq, ck};
    clattn_attention_opts opts;
    memset(&opts, 0, sizeof opts);
    opts.mask.causal = 1;
    opts.mask.align = CLATTN_ALIGN_BOTTOM_RIGHT;
    opts.alibi_slopes = &ts;
    int failed = bad || clattn_varlen_attention(ctx, &tq, &tk, &tv, &seqs, &opts, &to) !=
                            CLATTN_SUCCESS ||
                 clattn_tensor_read_blocking(ctx, &to, got) != CLATTN_SUCCESS;
    clattn_tensor *all[] = {&tq, &tk, &tv, &to, &ts};
    for (int i = 0; i < 5; i++)
        clattn_tensor_release(all[i]);
    if (failed)
        op_failed(r, VARLEN, ctx, "varlen_attention");
    for (int b = 0; !failed && b < B; b++) {
        int nq = cq[b + 1] - cq[b], nk = ck[b + 1] - ck[b], G = HQ / HKV;
        double *qb = xmalloc(HQ * nq * D * 8), *kb = xmalloc(HQ * nk * D * 8);
        double *vb = xmalloc(HQ * nk * DV * 8), *w = xmalloc(HQ * nq * nk * 8);
        double *ref = xmalloc(HQ * nq * DV * 8), *scale = xmalloc(HQ * nq * DV * 8);
        float *gb = xmalloc(HQ * nq * DV * 4);
        for (int h = 0; h < HQ; h++) {
            for (int i = 0; i < nq; i++) {
                for (int e = 0; e < D; e++)
                    qb[(h * nq + i) * D + e] = q[((cq[b] + i) * HQ + h) * D + e];
                for (int e = 0; e < DV; e++) /* the packed output, in the reference's order */
                    gb[(h * nq + i) * DV + e] = got[((cq[b] + i) * HQ + h) * DV + e];
            }
            for (int j = 0; j < nk; j++) {
                for (int e = 0; e < D; e++)
                    kb[(h * nk + j) * D + e] = k[((ck[b] + j) * HKV + h / G) * D + e];
                for (int e = 0; e < DV; e++)
                    vb[(h * nk + j) * DV + e] = v[((ck[b] + j) * HKV + h / G) * DV + e];
            }
        }
        ref_mask rm = {1, HQ, nq, nk, NULL, 0, NULL, {0, 0, 0, 0}, 1, CLATTN_DEFAULT_FILL, 1,
                       0, 0, 0, NULL, {0, 0, 0, 0}, sd, {0, 1}};
        ref_attention(&rm, D, DV, qb, kb, vb, 1.0 / sqrt((double)D), NULL, w, ref);
        ref_attention_scale(HQ, nq, nk, DV, w, vb, ref, scale);
        r->err[VARLEN] = fmax(r->err[VARLEN], scaled_error(gb, ref, scale, HQ * nq * DV));
        free(qb); free(kb); free(vb); free(w); free(ref); free(scale); free(gb);
    }
    if (r->err[VARLEN] >= 0)
        r->ok[VARLEN] = r->err[VARLEN] <= OUT_TOL;
    free(q); free(k); free(v); free(got);
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef int (*run_fn)(clattn_context *ctx, clattn_tensor *t);

/* Median seconds of up to 5 runs after one warm-up, at most about 3 s of runs; < 0 on failure. */
static double median_time(clattn_context *ctx, run_fn fn, clattn_tensor *t)
{
    double s[5];
    int n = 0;
    if (fn(ctx, t) || clattn_finish(ctx) != CLATTN_SUCCESS)
        return -1;
    for (double start = now(); n < 5 && (n < 1 || now() - start < 3);) {
        double t0 = now();
        if (fn(ctx, t) || clattn_finish(ctx) != CLATTN_SUCCESS)
            return -1;
        s[n++] = now() - t0;
    }
    for (int i = 1; i < n; i++) /* insertion sort */
        for (int j = i; j > 0 && s[j] < s[j - 1]; j--) {
            double x = s[j];
            s[j] = s[j - 1];
            s[j - 1] = x;
        }
    return s[n / 2];
}

#define GEMM_N 512
#define ATT_H 8
#define ATT_N 512
#define ATT_D 64

static int run_gemm(clattn_context *ctx, clattn_tensor *t)
{
    return clattn_matmul(ctx, &t[0], 0, &t[1], 0, 1.0f, 0.0f, &t[2]) != CLATTN_SUCCESS;
}

static int run_attention(clattn_context *ctx, clattn_tensor *t)
{
    return clattn_dot_product_attention(ctx, &t[0], &t[1], &t[2], NULL, &t[3], NULL) !=
           CLATTN_SUCCESS;
}

/* GEMM n = 512 and fused attention (8 heads, N 512, d 64) GFLOP/s; 0 when a run fails. */
static void bench(clattn_context *ctx, result *r)
{
    size_t gd[2] = {GEMM_N, GEMM_N}, ad[3] = {ATT_H, ATT_N, ATT_D};
    size_t gn = (size_t)GEMM_N * GEMM_N, an = (size_t)ATT_H * ATT_N * ATT_D;
    float *h = xmalloc((gn > an ? gn : an) * 4);
    fill(h, gn > an ? gn : an, -1, 1);
    int bad = 0;
    clattn_tensor g[3] = {tensor(ctx, CLATTN_FLOAT32, 2, gd, h, &bad),
                          tensor(ctx, CLATTN_FLOAT32, 2, gd, h, &bad),
                          tensor(ctx, CLATTN_FLOAT32, 2, gd, NULL, &bad)};
    double t = bad ? -1 : median_time(ctx, run_gemm, g);
    r->gemm_gflops = t > 0 ? 2e-9 * GEMM_N * (double)GEMM_N * GEMM_N / t : 0;
    clattn_tensor a[4] = {tensor(ctx, CLATTN_FLOAT32, 3, ad, h, &bad),
                          tensor(ctx, CLATTN_FLOAT32, 3, ad, h, &bad),
                          tensor(ctx, CLATTN_FLOAT32, 3, ad, h, &bad),
                          tensor(ctx, CLATTN_FLOAT32, 3, ad, NULL, &bad)};
    t = bad ? -1 : median_time(ctx, run_attention, a);
    r->attn_gflops = t > 0 ? 4e-9 * ATT_H * (double)ATT_N * ATT_N * ATT_D / t : 0;
    for (int i = 0; i < 4; i++)
        clattn_tensor_release(&a[i]);
    for (int i = 0; i < 3; i++)
        clattn_tensor_release(&g[i]);
    free(h);
}

static int check_one(const char *spec, const char *device, size_t set, int quick, result *r)
{
    clattn_params p;
    clattn_context *ctx = NULL;
    memset(r, 0, sizeof *r);
    snprintf(r->device, sizeof r->device, "%s %s", spec, device);
    snprintf(r->set, sizeof r->set, "%s", variant_sets[set].name);
    memset(&p, 0, sizeof p);
    p.device = spec;
    p.tuning = variant_sets[set].tuning;
    p.tune_file = "off"; /* the sets are the table's choices and forced variants, not a tune file */
    if (clattn_context_create(&ctx, &p) != CLATTN_SUCCESS) {
        snprintf(r->refused, sizeof r->refused, "%s", clattn_last_error(NULL));
        return 0;
    }
    check_matmul(ctx, r);
    check_softmax(ctx, r);
    check_attention(ctx, r, 0);
    check_attention(ctx, r, 1);
    check_decode(ctx, r);
    check_varlen(ctx, r);
    if (!quick)
        bench(ctx, r);
    clattn_context_destroy(&ctx);
    int failed = 0;
    for (int c = 0; c < NCHECKS; c++)
        failed |= !r->ok[c];
    return failed;
}

/* A context on the device with the environment's settings (CLATTN_TUNE, CLATTN_SYNC,
 * CLATTN_CACHE_DIR, CLATTN_KERNEL_DIR), as any application there makes: when it cannot be made,
 * every variant set would be refused for the setting's sake, not the device's, and the run must
 * fail naming it rather than pass having checked nothing. 1 when it was made. */
static int settings_usable(const char *spec, const char *device, result *r)
{
    clattn_params p;
    clattn_context *ctx = NULL;
    memset(r, 0, sizeof *r);
    memset(&p, 0, sizeof p);
    p.device = spec;
    p.tune_file = "off";
    if (clattn_context_create(&ctx, &p) == CLATTN_SUCCESS) {
        clattn_context_destroy(&ctx);
        return 1;
    }
    snprintf(r->device, sizeof r->device, "%s %s", spec, device);
    snprintf(r->set, sizeof r->set, "(all)");
    setting_error(r->refused, sizeof r->refused);
    r->unusable = 1;
    return 0;
}

/* The device that spec selects, by a context with no setting from the environment, so that a bad
 * setting is reported as itself (settings_usable) and never as a device that does not match;
 * NULL with the library's reason on stderr. */
static cl_device_id selected_device(const char *spec)
{
    clattn_params p;
    clattn_context *ctx = NULL;
    memset(&p, 0, sizeof p);
    p.device = spec;
    p.tuning = p.kernel_dir = p.cache_dir = "";
    p.tune_file = "off";
    p.sync = -1;
    if (clattn_context_create(&ctx, &p) != CLATTN_SUCCESS) {
        fprintf(stderr, "clattn-check: %s\n", clattn_last_error(NULL));
        return NULL;
    }
    cl_device_id dev = clattn_context_device(ctx); /* a root device: outlives the context */
    clattn_context_destroy(&ctx);
    return dev;
}

static void print_row(const result *r, int quick)
{
    printf("| %s | %s |", r->device, r->set);
    if (r->unusable) {
        printf(" ERROR, nothing checked: %.200s |\n", r->refused);
        return;
    }
    if (r->refused[0]) {
        printf(" refused: %.200s |\n", r->refused);
        return;
    }
    for (int c = 0; c < NCHECKS; c++) {
        if (r->err[c] < 0)
            printf(" FAIL (error) |");
        else
            printf(" %s %.1e |", r->ok[c] ? "pass" : "FAIL", r->err[c]);
    }
    if (!quick)
        printf(" %.1f | %.1f |", r->gemm_gflops, r->attn_gflops);
    printf("\n");
}

/* Every variant set on one device into res (from *nres on); 0, or FAILED when a check failed,
 * | NONE_RAN when none ran (why on stderr). */
enum { FAILED = 1, NONE_RAN = 2 };
static int check_device(const char *spec, const char *name, int quick, result *res, int *nres)
{
    int failed = 0, ran = 0;
    if (!settings_usable(spec, name, &res[*nres])) {
        fprintf(stderr, "clattn-check: %s %s: %s\n", spec, name, res[*nres].refused);
        print_row(&res[(*nres)++], quick);
        return NONE_RAN;
    }
    for (size_t s = 0; s < NSETS; s++) {
        fprintf(stderr, "clattn-check: %s %s, variants %s ...\n", spec, name,
                variant_sets[s].name);
        failed |= check_one(spec, name, s, quick, &res[*nres]);
        ran |= !res[*nres].refused[0];
        print_row(&res[(*nres)++], quick);
        fflush(stdout);
    }
    if (!ran)
        fprintf(stderr, "clattn-check: %s %s: every variant set refused: nothing checked\n",
                spec, name);
    return (failed ? FAILED : 0) | (ran ? 0 : NONE_RAN);
}

int main(int argc, char **argv)
{
    const char *only = NULL;
    int quick = 0, failed = 0, nres = 0;
    cl_device_id selected = NULL;
    for (int i = 1; i < argc; i++) {
        int help = !strcmp(argv[i], "-h") || !strcmp(argv[i], "--help");
        if (!strcmp(argv[i], "--quick")) {
            quick = 1;
        } else if (!strcmp(argv[i], "--device") && i + 1 < argc) {
            only = argv[++i];
        } else {
            fprintf(help ? stdout : stderr, "usage: clattn-check [--device SPEC] [--quick]\n");
            return help ? 0 : 2;
        }
    }
    if (!only && getenv("CLATTN_DEVICE") && *getenv("CLATTN_DEVICE"))
        only = getenv("CLATTN_DEVICE");
    if (only && !(selected = selected_device(only)))
        return 2;
    cl_platform_id plats[16];
    cl_uint np = 0;
    if (clGetPlatformIDs(16, plats, &np) != CL_SUCCESS || np == 0) {
        fprintf(stderr, "clattn-check: no OpenCL platform\n");
        return 2;
    }
    static result res[16 * 16 * NSETS];
    for (cl_uint p = 0; p < np && p < 16; p++) {
        cl_device_id devs[16];
        cl_uint nd = 0;
        if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 16, devs, &nd) != CL_SUCCESS)
            continue;
        for (cl_uint d = 0; d < nd && d < 16; d++) {
            char spec[32], name[128] = "";
            snprintf(spec, sizeof spec, "%u:%u", p, d);
            if (only && strcmp(only, spec) != 0 && devs[d] != selected)
                continue;
            clGetDeviceInfo(devs[d], CL_DEVICE_NAME, sizeof name, name, NULL);
            failed |= check_device(spec, name, quick, res, &nres);
        }
    }
    if (!nres) {
        fprintf(stderr, "clattn-check: no OpenCL device%s%s\n", only ? " matches " : "",
                only ? only : "");
        return 2;
    }
    printf("\n| device | variants |");
    for (int c = 0; c < NCHECKS; c++)
        printf(" %s |", check_names[c]);
    if (!quick)
        printf(" GEMM %d GFLOP/s | fused attention H%d N%d d%d GFLOP/s |", GEMM_N, ATT_H, ATT_N,
               ATT_D);
    printf("\n|---|---|"); /* one column per check, then the figures */
    for (int c = 0; c < NCHECKS; c++)
        printf("---|");
    printf(quick ? "\n" : "---:|---:|\n");
    for (int i = 0; i < nres; i++)
        print_row(&res[i], quick);
    printf("\nChecks: worst scaled error against the double references (pass: within the test "
           "suite's tolerances).\n%s%s%s\n", failed & FAILED ? "SOME CHECKS FAILED" : "",
           failed == (FAILED | NONE_RAN) ? "; " : "",
           failed & NONE_RAN ? "NOTHING CHECKED on a device (the reason is above)"
           : failed ? "" : "every check that ran passed");
    return failed ? 1 : 0;
}
