/*
 * clattn-tune: measures kernel parameters on one device and writes its tune file (README, Tuning
 * a device), which every later context on that device reads.
 *
 *   clattn-tune [--device SPEC] [--budget SECONDS] [--ops LIST] [--out FILE] [--quick]
 *   LIST: matmul,matmul@small,softmax,attention,decode,backward (the default: all)
 *
 * For each op (matmul n = 1024; matmul@small 8 x 256x256x64; softmax 4096 x 1024; attention: the fused kernel, 8 heads, N 1024,
 * head size 64; decode: one new row per head over a 4096-key cache, 8 heads, head size 128;
 * backward: the fused backward of that attention, given its out and LSE) it starts from the
 * table's choice (plus a few seeds) and walks the variant's parameters one at a time over a grid
 * of legal values
 * (coordinate descent: a change is kept when it is 3% faster, in its first timing and again
 * when both are timed once more, alternately), within the op's share of the time
 * budget. Every candidate is built through CLATTN_TUNE's parser (the device's limits refuse what
 * cannot run), checked against the test suite's double-precision reference before it is timed,
 * and timed as the median of up to 5 runs. At the end the best is timed against the table's
 * choice once more, alternately, best of three medians each; only a choice at least 3% faster is
 * written. Ops are tuned in the order matmul, softmax, attention, each with the entries kept
 * before it (the unfused attention chain runs through the matmul and softmax variants); an op's
 * table figure is the table's choice for every op. --quick: small shapes and a few candidates (a
 * smoke test, seconds).
 */
#include "../tests/ref.h"
#include "setting_error.h"
#include <clattn.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* In tuning order (later ops run with the entries kept before them). matmul@small: the GEMMs of
 * up to 2^24 products per batch (multi-head projections of short sequences, per-head GEMMs). */
enum { MATMUL, MATMUL_SMALL, SOFTMAX, ATTENTION, DECODE, BACKWARD, NOPS };
static const char *const op_names[NOPS] = {"matmul", "matmul@small", "softmax", "attention",
                                           "decode", "backward"};

#define OUT_TOL 1e-4  /* as tests/test_attention.c and clattn-check: relative to the error scale */
#define GRAD_TOL 1e-5 /* as tests/test_backward.c: relative to ref_attention_backward's scales */
#define KEEP 0.97    /* a candidate is kept when it takes at most 97% of the current best */

/* One parameter's grid of values to try. */
typedef struct {
    const char *name;
    int n, values[8];
} grid_param;
typedef struct {
    const char *op, *variant;
    int nparams;
    grid_param p[6];
    /* Starting points besides the table's: parameters that only pay off together (a smaller
     * tile with fewer outputs per work-item), which one-at-a-time steps cannot reach. */
    const char *seeds[6];
} grid;
static const grid grids[] = {
    {"matmul", "cpu", 5, {{"TM", 5, {4, 5, 6, 8, 12}}, {"TN", 5, {16, 32, 48, 64, 128}},
                          {"VN", 2, {8, 16}}, {"KC", 3, {256, 1024, 4096}},
                          {"RB", 4, {8, 16, 32, 64}}},
     {"TM=6:TN=16:VN=8", "TM=8:TN=32:VN=16", "TM=4:TN=64:VN=16"}},
    {"matmul", "gpu", 5, {{"WPTM", 4, {1, 2, 4, 8}}, {"WPTN", 4, {1, 2, 4, 8}},
                          {"TSM", 4, {16, 32, 64, 128}}, {"TSN", 4, {16, 32, 64, 128}},
                          {"TSK", 3, {8, 16, 32}}},
     {"TSM=32:TSN=32:TSK=16:WPTM=4:WPTN=4", "TSM=64:TSN=64:TSK=8:WPTM=4:WPTN=4",
      "TSM=64:TSN=64:TSK=16:WPTM=8:WPTN=8", "TSM=32:TSN=64:TSK=16:WPTM=4:WPTN=8",
      "TSM=16:TSN=16:TSK=16:WPTM=2:WPTN=2"}},
    {"softmax", "cpu", 1, {{"VW", 2, {8, 16}}}, {NULL}},
    {"softmax", "gpu", 1, {{"WG", 7, {16, 32, 64, 128, 256, 512, 1024}}}, {NULL}},
    {"attention", "cpu", 5, {{"QR", 5, {3, 4, 5, 6, 8}}, {"KB", 4, {16, 32, 64, 128}},
                             {"VC", 4, {16, 32, 64, 128}}, {"WG", 4, {1, 2, 4, 8}},
                             {"QG", 4, {1, 2, 4, 8}}},
     {"QR=6:KB=16:VC=16", "QR=4:KB=32:VC=32", "QR=3:KB=128:VC=128"}},
    {"attention", "gpu", 2, {{"BQ", 6, {8, 16, 32, 64, 128, 256}},
                             {"BK", 5, {4, 8, 16, 32, 64}}},
     {"BQ=16:BK=16", "BQ=32:BK=16", "BQ=128:BK=16", "BQ=32:BK=4"}},
    {"decode", "cpu", 2, {{"RQ", 4, {1, 2, 4, 8}}, {"SK", 6, {128, 256, 512, 1024, 2048, 4096}}},
     {NULL}},
    {"decode", "gpu", 4, {{"WG", 5, {16, 32, 64, 128, 256}}, {"SK", 5, {64, 128, 256, 512, 1024}},
                          {"RQ", 3, {1, 2, 4}}, {"KC", 4, {16, 32, 64, 128}}},
     {"WG=32:SK=128", "WG=128:SK=512"}},
    {"backward", "cpu", 4, {{"QR", 5, {3, 4, 5, 6, 8}}, {"KB", 4, {16, 32, 64, 128}},
                            {"VC", 4, {16, 32, 64, 128}}, {"CH", 4, {0, 2, 4, 8}}},
     {"QR=4:KB=32:VC=32"}},
};

/* One tensor of a work: an input (host data, float32 or int32), or an output (host NULL,
 * poisoned with NaN), checked against ref within tol x scale when ref is set. */
typedef struct {
    int ndim;
    size_t dims[4];
    clattn_dtype dt;
    void *host;
    double *ref, *scale, tol;
} tspec;

/* One op's tensors, its tune-file key (with the bucket of its head size) and timing shape. */
typedef struct {
    int op, nt;
    tspec t[9];
    char key[32], shape[64];
    double flops;
} work;

typedef struct {
    const char *device;
    double budget, start;
    int quick;
    /* The entries kept for the ops tuned before (comma-separated): later candidates run with
     * them, since the unfused attention chain runs through the matmul and softmax variants. */
    char kept[2048];
} settings;

static unsigned long long rng = 12345;
static double uniform(double lo, double hi)
{
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return lo + (hi - lo) * (double)(rng >> 11) / 9007199254740992.0;
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "clattn-tune: out of host memory\n");
        exit(2);
    }
    return p;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static size_t numel(const size_t *d, int ndim)
{
    size_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= d[i];
    return n;
}

static double *to_double(const float *x, size_t n)
{
    double *d = xmalloc(n * sizeof *d);
    for (size_t i = 0; i < n; i++)
        d[i] = x[i];
    return d;
}

static tspec *spec(work *w, int ndim, size_t a, size_t b, size_t c, size_t d)
{
    tspec *t = &w->t[w->nt++];
    size_t dims[4] = {a, b, c, d};
    t->ndim = ndim;
    t->dt = CLATTN_FLOAT32;
    memcpy(t->dims, dims, sizeof dims);
    return t;
}

static size_t numel_of(const tspec *t)
{
    return numel(t->dims, t->ndim);
}

/* Fills an input spec with uniform values in [-1, 1]; returns them. */
static float *random_input(tspec *t)
{
    size_t n = numel_of(t);
    float *x = xmalloc(n * 4);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)uniform(-1, 1);
    t->host = x;
    return x;
}

static void checked(tspec *t, double tol)
{
    t->ref = xmalloc(numel_of(t) * 8);
    t->scale = xmalloc(numel_of(t) * 8);
    t->tol = tol;
}

static ref_mask plain_mask(int D0, int Q, int K)
{
    ref_mask m = {D0, 1, Q, K, NULL, 0, NULL, {0, 0, 0, 0}, 0, CLATTN_DEFAULT_FILL, 0, 0, 0, 0,
                  NULL, {0, 0, 0, 0}, NULL, {0, 0}};
    return m;
}

/* C (nb, m, n) = A (nb, m, k) B (nb, k, n); the small bucket's shape: 8 batches of
 * 256 x 256 x 64 (a projection's or a head's GEMM). */
static void make_matmul(work *w, int quick, int small)
{
    int nb = small ? 8 : 1, m = quick ? 48 : small ? 256 : 1024, k = small && !quick ? 64 : m;
    float *A = random_input(spec(w, 3, nb, m, k, 0)), *B = random_input(spec(w, 3, nb, k, m, 0));
    tspec *C = spec(w, 3, nb, m, m, 0);
    checked(C, OUT_TOL);
    ref_matmul(nb, m, m, k, A, (size_t)m * k, 0, B, (size_t)k * m, 0, 1, 0, NULL, C->ref,
               C->scale);
    for (size_t i = 0; i < numel_of(C); i++) /* as clattn-check's matmul */
        C->scale[i] = fmax(fabs(C->ref[i]), C->scale[i] / sqrt((double)k)) + 1e-30;
    w->flops = 2.0 * nb * m * m * k;
    snprintf(w->shape, sizeof w->shape, "%d x %dx%dx%d", nb, m, m, k);
}

static void make_softmax(work *w, int quick)
{
    size_t rows = quick ? 8 : 4096, k = quick ? 67 : 1024;
    float *x = random_input(spec(w, 3, 4, rows / 4, k, 0));
    tspec *y = spec(w, 3, 4, rows / 4, k, 0);
    checked(y, OUT_TOL);
    ref_mask m = plain_mask(4, (int)(rows / 4), (int)k);
    ref_masked_softmax(&m, x, y->ref);
    for (size_t i = 0; i < numel_of(y); i++) /* a few ulp of each weight (test_softmax.c) */
        y->scale[i] = fabs(y->ref[i]) * 0.1 + 1e-5;
    w->flops = (double)rows * k; /* elements per second, as a rate */
    snprintf(w->shape, sizeof w->shape, "%zu rows x %zu", rows, k);
}

/* Attention (h, n, d) and, with backward, its gradients from a random dout: Q, K, V, then O
 * (attention), or dout, out, lse, dQ, dK, dV (backward; out and lse by the forward). */
static void make_attention(work *w, int quick, int backward)
{
    size_t h = quick ? 2 : 8, n = quick ? 40 : 1024, d = quick ? 16 : 64, an = h * n * d;
    float *qf = random_input(spec(w, 3, h, n, d, 0)), *kf = random_input(spec(w, 3, h, n, d, 0));
    float *vf = random_input(spec(w, 3, h, n, d, 0));
    double *q = to_double(qf, an), *k = to_double(kf, an), *v = to_double(vf, an);
    ref_mask m = plain_mask((int)h, (int)n, (int)n);
    double scale = 1.0 / sqrt((double)d), *wt = xmalloc(h * n * n * 8);
    if (!backward) {
        tspec *o = spec(w, 3, h, n, d, 0);
        checked(o, OUT_TOL);
        ref_attention(&m, (int)d, (int)d, q, k, v, scale, NULL, wt, o->ref);
        ref_attention_scale(h, (int)n, (int)n, (int)d, wt, v, o->ref, o->scale);
        w->flops = 4.0 * h * n * n * d;
    } else {
        double *dout = to_double(random_input(spec(w, 3, h, n, d, 0)), an);
        spec(w, 3, h, n, d, 0);    /* out */
        spec(w, 2, h, n, 0, 0);    /* lse */
        tspec *g[3];
        for (int i = 0; i < 3; i++) {
            g[i] = spec(w, 3, h, n, d, 0);
            checked(g[i], GRAD_TOL);
        }
        double *ds = xmalloc(h * n * n * 8), *sds = xmalloc(h * n * n * 8);
        ref_attention_backward(&m, (int)d, (int)d, q, k, v, scale, NULL, dout, g[0]->ref,
                               g[1]->ref, g[2]->ref, ds, g[0]->scale, g[1]->scale, g[2]->scale,
                               sds);
        for (int i = 0; i < 3; i++)
            for (size_t e = 0; e < an; e++)
                g[i]->scale[e] += 1e-30;
        free(dout); free(ds); free(sds);
        w->flops = 10.0 * h * n * n * d; /* FlashAttention-2's count of the backward */
    }
    snprintf(w->shape, sizeof w->shape, "H%zu N%zu d%zu", h, n, d);
    snprintf(w->key, sizeof w->key, "%s@d%d", backward ? "backward" : "attention",
             d <= 64 ? 64 : d <= 128 ? 128 : 256);
    free(q); free(k); free(v); free(wt);
}

/* Decoding one new row per head over a full cache: Q (1, H, 1, d), caches (1, H, L, d), lens
 * (1) = L, then out (1, H, 1, d). */
static void make_decode(work *w, int quick)
{
    size_t h = quick ? 2 : 8, L = quick ? 64 : 4096, d = quick ? 16 : 128;
    float *qf = random_input(spec(w, 4, 1, h, 1, d)), *kf = random_input(spec(w, 4, 1, h, L, d));
    float *vf = random_input(spec(w, 4, 1, h, L, d));
    tspec *lens = spec(w, 1, 1, 0, 0, 0);
    int *len = xmalloc(sizeof *len);
    *len = (int)L;
    lens->dt = CLATTN_INT32;
    lens->host = len;
    tspec *o = spec(w, 4, 1, h, 1, d);
    checked(o, OUT_TOL);
    double *q = to_double(qf, h * d), *k = to_double(kf, h * L * d), *v = to_double(vf, h * L * d);
    double *wt = xmalloc(h * L * 8);
    ref_mask m = plain_mask((int)h, 1, (int)L);
    ref_attention(&m, (int)d, (int)d, q, k, v, 1.0 / sqrt((double)d), NULL, wt, o->ref);
    ref_attention_scale(h, 1, (int)L, (int)d, wt, v, o->ref, o->scale);
    free(q); free(k); free(v); free(wt);
    w->flops = 8.0 * h * L * d; /* bytes of K and V streamed, as a rate (GB/s) */
    snprintf(w->shape, sizeof w->shape, "H%zu cache %zu d%zu", h, L, d);
    snprintf(w->key, sizeof w->key, "decode@d%d", d <= 64 ? 64 : d <= 128 ? 128 : 256);
}

/* The tensors and reference of op at the tuning shapes (or the --quick ones). */
static void make_work(work *w, int op, int quick)
{
    memset(w, 0, sizeof *w);
    w->op = op;
    snprintf(w->key, sizeof w->key, "%s", op_names[op]);
    if (op == MATMUL || op == MATMUL_SMALL)
        make_matmul(w, quick, op == MATMUL_SMALL);
    else if (op == SOFTMAX)
        make_softmax(w, quick);
    else if (op == ATTENTION || op == BACKWARD)
        make_attention(w, quick, op == BACKWARD);
    else
        make_decode(w, quick);
}

static void free_work(work *w)
{
    for (int i = 0; i < w->nt; i++) {
        free(w->t[i].host);
        free(w->t[i].ref);
        free(w->t[i].scale);
    }
}

/* The backward's forward: out and lse for its Q, K, V (once per context). */
static int prepare(clattn_context *ctx, const work *w, clattn_tensor *t)
{
    clattn_attention_opts o;
    if (w->op != BACKWARD)
        return 1;
    memset(&o, 0, sizeof o);
    o.lse = &t[5];
    return clattn_dot_product_attention(ctx, &t[0], &t[1], &t[2], &o, &t[4], NULL) ==
           CLATTN_SUCCESS;
}

static int run_op(clattn_context *ctx, const work *w, clattn_tensor *t)
{
    clattn_status st = CLATTN_ERROR_INVALID_ARGUMENT;
    if (w->op == MATMUL || w->op == MATMUL_SMALL) {
        st = clattn_matmul(ctx, &t[0], 0, &t[1], 0, 1.0f, 0.0f, &t[2]);
    } else if (w->op == SOFTMAX) {
        st = clattn_masked_softmax(ctx, &t[0], NULL, &t[1]);
    } else if (w->op == ATTENTION) {
        st = clattn_dot_product_attention(ctx, &t[0], &t[1], &t[2], NULL, &t[3], NULL);
    } else if (w->op == DECODE) {
        clattn_kv_cache c = {&t[1], &t[2], &t[3], NULL, NULL, 0};
        st = clattn_decode_attention(ctx, &t[0], &c, NULL, &t[4]);
    } else {
        clattn_attention_opts o;
        clattn_attention_grads g = {&t[6], &t[7], &t[8], NULL};
        memset(&o, 0, sizeof o);
        o.lse = &t[5];
        st = clattn_dot_product_attention_backward(ctx, &t[0], &t[1], &t[2], &o, &t[4], &t[3],
                                                   &g);
    }
    return st == CLATTN_SUCCESS;
}

/* Median seconds of up to 5 runs (at most about 2 s of them; the caller's checked run was the
 * warm-up); < 0 on failure. */
static double median_time(clattn_context *ctx, const work *w, clattn_tensor *t)
{
    double s[5];
    int n = 0;
    for (double start = now(); n < 5 && (n < 1 || now() - start < 2);) {
        double t0 = now();
        if (!run_op(ctx, w, t) || clattn_finish(ctx) != CLATTN_SUCCESS)
            return -1;
        s[n++] = now() - t0;
    }
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && s[j] < s[j - 1]; j--) {
            double x = s[j];
            s[j] = s[j - 1];
            s[j - 1] = x;
        }
    return s[n / 2];
}

/* Seconds per run of w with tuning entry `entry` ("op=variant:..."), with the entries kept so far
 * unless alone, checked against the reference first; < 0 when the device refuses it (why: the
 * reason) or it computes wrong. */
static double measure(const settings *s, const work *w, const char *entry, int alone, char *why,
                      size_t n)
{
    char tuning[3000];
    snprintf(tuning, sizeof tuning, "%s%s%s", alone ? "" : s->kept,
             !alone && s->kept[0] ? "," : "", entry);
    clattn_params p;
    clattn_context *ctx = NULL;
    clattn_tensor t[9];
    double secs = -1, worst = 0;
    int made = 0;
    memset(&p, 0, sizeof p);
    memset(t, 0, sizeof t);
    p.device = s->device;
    p.tuning = tuning;
    p.tune_file = "off";
    why[0] = '\0';
    if (clattn_context_create(&ctx, &p) != CLATTN_SUCCESS) {
        snprintf(why, n, "refused: %.900s", clattn_last_error(NULL));
        return -1;
    }
    for (made = 0; made < w->nt; made++) {
        const tspec *ts = &w->t[made];
        if (clattn_tensor_create(ctx, ts->dt, ts->ndim, ts->dims, ts->host, &t[made]) !=
                CLATTN_SUCCESS ||
            (!ts->host && clattn_tensor_fill(ctx, &t[made], NAN) != CLATTN_SUCCESS))
            break;
    }
    if (made < w->nt || !prepare(ctx, w, t) || !run_op(ctx, w, t)) {
        snprintf(why, n, "failed: %.900s", clattn_last_error(ctx));
    } else {
        for (int i = 0; i < w->nt && worst <= 1; i++) {
            const tspec *ts = &w->t[i];
            size_t cnt = numel_of(ts);
            if (!ts->ref)
                continue;
            float *got = xmalloc(cnt * 4);
            if (clattn_tensor_read_blocking(ctx, &t[i], got) != CLATTN_SUCCESS)
                worst = INFINITY;
            for (size_t e = 0; e < cnt; e++) {
                double x = isfinite(got[e]) ? fabs(got[e] - ts->ref[e]) / ts->scale[e] / ts->tol
                                            : INFINITY;
                worst = x > worst ? x : worst;
            }
            free(got);
        }
        if (worst > 1)
            snprintf(why, n, "WRONG: error %.3g x the tolerance: please report", worst);
        else if ((secs = median_time(ctx, w, t)) < 0)
            snprintf(why, n, "failed: %.900s", clattn_last_error(ctx));
    }
    for (int i = 0; i < made && i < w->nt; i++)
        clattn_tensor_release(&t[i]);
    clattn_context_destroy(&ctx);
    return secs;
}

/* src into dst (n bytes), cut to fit. */
static void copy(char *dst, size_t n, const char *src)
{
    size_t len = strlen(src);
    len = len < n ? len : n - 1;
    memcpy(dst, src, len);
    dst[len] = '\0';
}

/* "op=variant:A=1:B=2" from op and the "variant:A=1:B=2" of clattn_context_tuning. */
static void entry_of(char *out, size_t n, const char *op, const char *choice)
{
    copy(out, n, op);
    size_t used = strlen(out);
    if (used + 1 < n) {
        out[used] = '=';
        copy(out + used + 1, n - used - 1, choice);
    }
}

/* The value of NAME in a choice string, or -1. */
static int param_of(const char *choice, const char *name)
{
    char key[32];
    snprintf(key, sizeof key, ":%.24s=", name); /* names are a few letters */
    const char *at = strstr(choice, key);
    return at ? atoi(at + strlen(key)) : -1;
}

/* choice with NAME set to value (NAME must be in it). */
static void with_param(char *out, size_t n, const char *choice, const char *name, int value)
{
    char key[32];
    snprintf(key, sizeof key, ":%.24s=", name); /* names are a few letters */
    const char *at = strstr(choice, key), *end = at ? strchr(at + 1, ':') : NULL;
    if (!at) {
        copy(out, n, choice);
        return;
    }
    snprintf(out, n, "%.*s%s%d%s", (int)(at - choice), choice, key, value, end ? end : "");
}

static int over_budget(const settings *s, double share_end)
{
    return now() > share_end || now() - s->start > s->budget;
}

typedef struct {
    char table[512], best[512];
    double table_s, best_s;
} outcome;

/* One candidate's line: its time and rate (GFLOP/s; softmax: G elements/s), or why it has none. */
static void report(const work *w, const char *entry, double t, double best, const char *why)
{
    if (t > 0)
        printf("  %-64s %9.3f ms %8.2f G/s%s\n", entry, 1e3 * t, 1e-9 * w->flops / t,
               t < KEEP * best ? "  (faster: timing both again)" : "");
    else
        printf("  %-64s %.300s\n", entry, why);
}

/* 1 when candidate cand (measured t) still beats the current best when both are timed again,
 * alternately: a machine's noise must not walk the search. Updates the best's time. */
static int beats(const settings *s, const work *w, const char *cand, double t,
                 outcome *o)
{
    char a[640], b[640], why[1024];
    if (!(t > 0 && t < KEEP * o->best_s))
        return 0;
    entry_of(a, sizeof a, w->key, o->best);
    entry_of(b, sizeof b, w->key, cand);
    double tb = measure(s, w, a, 0, why, sizeof why), tc = measure(s, w, b, 0, why, sizeof why);
    o->best_s = tb > 0 && tb < o->best_s ? tb : o->best_s;
    t = tc > 0 && tc < t ? tc : t;
    if (t >= KEEP * o->best_s)
        return 0;
    copy(o->best, sizeof o->best, cand);
    o->best_s = t;
    return 1;
}

/* Coordinate descent from the table's choice over the variant's grid until share_end. */
static void search(const settings *s, const work *w, int op, double share_end, outcome *o)
{
    char entry[640], cand[512], why[1024];
    const grid *g = NULL;
    copy(o->best, sizeof o->best, o->table);
    o->best_s = o->table_s;
    for (size_t i = 0; i < sizeof grids / sizeof grids[0]; i++)
        if (strncmp(grids[i].op, op_names[op], strlen(grids[i].op)) == 0 &&
            strncmp(grids[i].variant, o->table, strlen(grids[i].variant)) == 0 &&
            o->table[strlen(grids[i].variant)] == ':')
            g = &grids[i];
    if (!g) {
        printf("  no grid for %s (variant of %s)\n", o->table, op_names[op]);
        return;
    }
    for (int i = 0; g->seeds[i] && !over_budget(s, share_end); i++) {
        char seed[512];
        copy(seed, sizeof seed, o->table);
        for (const char *p = g->seeds[i]; *p;) { /* NAME=value:... onto the table's choice */
            char name[32];
            int value = 0;
            if (sscanf(p, "%31[^=]=%d", name, &value) != 2)
                break;
            with_param(cand, sizeof cand, seed, name, value);
            copy(seed, sizeof seed, cand);
            p += strcspn(p, ":");
            p += *p == ':';
        }
        entry_of(entry, sizeof entry, w->key, seed);
        double t = measure(s, w, entry, 0, why, sizeof why);
        report(w, entry, t, o->best_s, why);
        beats(s, w, seed, t, o);
    }
    if (op == ATTENTION || op == BACKWARD) { /* the unfused chain: another algorithm */
        entry_of(entry, sizeof entry, w->key, "unfused");
        double t = measure(s, w, entry, 0, why, sizeof why);
        report(w, entry, t, o->best_s, why);
        beats(s, w, "unfused", t, o);
    }
    for (int changed = 1, pass = 0; changed && pass < 3 && !over_budget(s, share_end); pass++) {
        changed = 0;
        for (int pi = 0; pi < g->nparams && !over_budget(s, share_end); pi++) {
            const grid_param *gp = &g->p[pi];
            char base[512];
            copy(base, sizeof base, strncmp(o->best, g->variant, strlen(g->variant)) == 0
                                                  ? o->best : o->table);
            int cur = param_of(base, gp->name);
            for (int vi = 0; vi < gp->n && !over_budget(s, share_end); vi++) {
                if (gp->values[vi] == cur || cur < 0)
                    continue;
                with_param(cand, sizeof cand, base, gp->name, gp->values[vi]);
                entry_of(entry, sizeof entry, w->key, cand);
                double t = measure(s, w, entry, 0, why, sizeof why);
                report(w, entry, t, o->best_s, why);
                changed |= beats(s, w, cand, t, o);
            }
        }
    }
}

/* The best of three medians of each, alternating, so both see the same machine. */
static void confirm(const settings *s, const work *w, outcome *o)
{
    char a[640], b[640], why[1024];
    double ta = INFINITY, tb = INFINITY;
    entry_of(a, sizeof a, w->key, o->table);
    entry_of(b, sizeof b, w->key, o->best);
    for (int r = 0; r < 3; r++) {
        double x = measure(s, w, a, 1, why, sizeof why), y = measure(s, w, b, 0, why, sizeof why);
        ta = x > 0 && x < ta ? x : ta;
        tb = y > 0 && y < tb ? y : tb;
    }
    o->table_s = ta;
    o->best_s = tb;
}

/* The temporary file write_file renames onto path, into tmp (PATH_MAX bytes); 0 when its name
 * would not fit. */
static int temp_name(const char *path, char *tmp)
{
    return snprintf(tmp, PATH_MAX, "%s.tmp%ld", path, (long)getpid()) < PATH_MAX;
}

/* mkdir -p of path's directory, then the temporary file write_file will write, created and
 * removed (so a name too long for the file system fails here, not after the measuring): 0 with
 * the reason when path cannot be written. */
static int writable(const char *path, char *why, size_t n)
{
    char dir[PATH_MAX], probe[PATH_MAX];
    struct stat st;
    if (!temp_name(path, probe)) {
        snprintf(why, n, "a path of %zu characters: its temporary file's name would pass "
                 "PATH_MAX (%d)", strlen(path), PATH_MAX);
        return 0;
    }
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) { /* rename would fail, or replace it */
        snprintf(why, n, "%s", S_ISDIR(st.st_mode) ? "a directory" : "not a regular file");
        return 0;
    }
    copy(dir, sizeof dir, path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    for (char *p = dir + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(dir, 0777);
            *p = '/';
        }
    mkdir(dir, 0777);
    FILE *f = fopen(probe, "w");
    if (!f) {
        snprintf(why, n, "cannot create %.800s: %s", probe, strerror(errno));
        return 0;
    }
    fclose(f);
    remove(probe);
    return 1;
}

/* The key lines the library compares (tunefile.c), from the device's own strings. */
static void key_lines(clattn_context *ctx, char *out, size_t n)
{
    char pname[256] = "", pver[256] = "", dname[256] = "", vendor[256] = "", driver[128] = "";
    cl_device_id dev = clattn_context_device(ctx);
    cl_platform_id plat = NULL;
    clGetDeviceInfo(dev, CL_DEVICE_PLATFORM, sizeof plat, &plat, NULL);
    clGetPlatformInfo(plat, CL_PLATFORM_NAME, sizeof pname, pname, NULL);
    clGetPlatformInfo(plat, CL_PLATFORM_VERSION, sizeof pver, pver, NULL);
    clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof dname, dname, NULL);
    clGetDeviceInfo(dev, CL_DEVICE_VENDOR, sizeof vendor, vendor, NULL);
    clGetDeviceInfo(dev, CL_DRIVER_VERSION, sizeof driver, driver, NULL);
    snprintf(out, n, "platform %s / %s\ndevice %s / %s\ndriver %s\nclattn %s\n", pname, pver, dname,
             vendor, driver, clattn_version());
}

/* The usage after msg on stderr: 2, the exit status. msg NULL (--help): on stdout, and -1, since
 * parse_args's 0 means "go on" (main exits with 0). */
static int usage(const char *msg)
{
    fprintf(msg ? stderr : stdout, "%s%s%susage: clattn-tune [--device SPEC] "
            "[--budget SECONDS] [--ops matmul,matmul@small,softmax,attention,decode,backward] "
            "[--out FILE] [--quick]\n", msg ? "clattn-tune: " : "", msg ? msg : "",
            msg ? "\n" : "");
    return msg ? 2 : -1;
}

/* The comma-separated op list into want; 0, or 2 with the reason on stderr: an empty list or item
 * would tune less than asked and still replace the file. */
static int parse_ops(const char *ops, int want[NOPS])
{
    for (const char *p = ops;; p++) {
        size_t n = strcspn(p, ",");
        int found = 0;
        for (int o = 0; o < NOPS; o++)
            if (n && strlen(op_names[o]) == n && strncmp(p, op_names[o], n) == 0)
                found = want[o] = 1;
        if (!found) {
            fprintf(stderr, "clattn-tune: --ops '%s': %s%.*s%s (tunable: matmul, softmax, "
                    "attention, decode, backward, matmul@small)\n", ops,
                    n ? "unknown op '" : "an empty op (ops are separated by single commas)",
                    (int)n, p, n ? "'" : "");
            return 2;
        }
        p += n;
        if (!*p)
            return 0;
    }
}

/* The command line into s, *out and want; 0, or the exit status of a usage error. */
static int parse_args(int argc, char **argv, settings *s, const char **out, int want[NOPS])
{
    const char *ops = "matmul,matmul@small,softmax,attention,decode,backward";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (strcmp(a, "--quick") == 0) {
            s->quick = 1;
            continue;
        }
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0)
            return usage(NULL);
        if (!v || strncmp(a, "--", 2) != 0)
            return usage(v ? "unknown argument" : "an option lacks its value");
        i++;
        if (strcmp(a, "--device") == 0) {
            s->device = v;
        } else if (strcmp(a, "--out") == 0) {
            *out = v;
        } else if (strcmp(a, "--ops") == 0) {
            ops = v;
        } else if (strcmp(a, "--budget") == 0) {
            s->budget = strtod(v, &end);
            if (!end || *end || !(s->budget > 0) || !isfinite(s->budget))
                return usage("--budget: a positive number of seconds");
        } else {
            return usage("unknown option");
        }
    }
    return parse_ops(ops, want);
}

/* The tune file's path (out, else where contexts look for it) into path, checked writable, and a
 * context that reads no tune file: the table's choices, where the context that found the path
 * read the file being replaced, whose entries are candidates to measure again. The first context
 * takes every setting from the environment, as the contexts that will read the file do, so that
 * a setting they refuse (CLATTN_TUNE, CLATTN_SYNC) is an error before anything is measured. NULL
 * on error (said on stderr). */
static clattn_context *open_table(const settings *s, const char *out, char *path, size_t n)
{
    clattn_params p;
    clattn_context *ctx = NULL;
    char why[1024];
    memset(&p, 0, sizeof p);
    p.device = s->device;
    if (clattn_context_create(&ctx, &p) != CLATTN_SUCCESS) {
        char why[2048];
        setting_error(why, sizeof why);
        fprintf(stderr, "clattn-tune: %s\n", why);
        return NULL;
    }
    const char *where = out ? out : clattn_context_tune_path(ctx);
    int ok = 0;
    copy(path, n, where);
    if (strlen(where) >= n) /* cut, it would name another file */
        fprintf(stderr, "clattn-tune: %s: a path of %zu characters is too long (PATH_MAX %d)\n",
                out ? "--out" : "the tune file location", strlen(where), PATH_MAX);
    else if (!where[0])
        fprintf(stderr, "clattn-tune: no tune file location (%s): give --out\n",
                clattn_context_tune_note(ctx));
    else if (!(ok = writable(path, why, sizeof why)))
        fprintf(stderr, "clattn-tune: --out %s: %s\n", path, why);
    clattn_context_destroy(&ctx);
    p.tuning = "";
    p.tune_file = "off";
    if (ok && clattn_context_create(&ctx, &p) != CLATTN_SUCCESS)
        fprintf(stderr, "clattn-tune: %s\n", clattn_last_error(NULL));
    return ok ? ctx : NULL;
}

/* Tunes op within its share of the budget left (nwant ops wanted, *done of them tuned) and adds
 * its lines to the file's text (used bytes of n); an entry kept joins s->kept. */
static void tune_op(settings *s, clattn_context *ctx, int op, int nwant, int *done, char *text,
                    size_t n, size_t *used)
{
    work w;
    outcome res, *o = &res;
    char entry[640], why[1024];
    make_work(&w, op, s->quick);
    clattn_context_tuning(ctx, w.key, o->table, sizeof o->table);
    entry_of(entry, sizeof entry, w.key, o->table);
    printf("%s (%s), table: %s\n", op_names[op], w.shape, entry);
    o->table_s = measure(s, &w, entry, 1, why, sizeof why);
    if (o->table_s < 0) {
        printf("  the table's choice: %s\n", why);
        free_work(&w);
        return;
    }
    double left = s->budget - (now() - s->start);
    search(s, &w, op, now() + left / (nwant - *done), o);
    (*done)++;
    if (strcmp(o->best, o->table) != 0)
        confirm(s, &w, o);
    else /* the search timed the table's choice again: the best figure of the same thing */
        o->table_s = o->best_s = fmin(o->table_s, o->best_s);
    double ratio = o->table_s / o->best_s;
    int keep = strcmp(o->best, o->table) != 0 && ratio >= 1 / KEEP;
    printf("  table %.3f ms, best %.3f ms (%.2fx): %s\n", 1e3 * o->table_s, 1e3 * o->best_s,
           ratio, keep ? o->best : "the table's choice stays");
    *used += (size_t)snprintf(text + *used, n - *used,
                              "# %s %s: table %s %.3f ms, tuned %.3f ms (%.2fx)\n", op_names[op],
                              w.shape, o->table, 1e3 * o->table_s, 1e3 * o->best_s, ratio);
    if (keep) {
        *used += (size_t)snprintf(text + *used, n - *used, "%s=%s\n", w.key, o->best);
        size_t k = strlen(s->kept);
        snprintf(s->kept + k, sizeof s->kept - k, "%s%s=%s", k ? "," : "", w.key, o->best);
    }
    free_work(&w);
}

/* A context on s's device with every setting from the environment but the tune file, file: 1
 * when the library takes the whole file; 0, else, with the reason on stderr. note: the library's
 * note, naming shown (the file's final path) instead of file. */
static int library_takes(const settings *s, const char *file, const char *shown, char *note,
                         size_t n)
{
    clattn_params p;
    clattn_context *ctx = NULL;
    memset(&p, 0, sizeof p);
    p.device = s->device;
    p.tune_file = file;
    if (clattn_context_create(&ctx, &p) != CLATTN_SUCCESS) {
        fprintf(stderr, "clattn-tune: the library does not take %s: %s\n", shown,
                clattn_last_error(NULL));
        return 0;
    }
    const char *all = clattn_context_tune_note(ctx), *at = strstr(all, file);
    snprintf(note, n, "%.*s%s%s", at ? (int)(at - all) : 0, all, at ? shown : "",
             at ? at + strlen(file) : all);
    int ok = strstr(all, "in use") != NULL;
    if (!ok)
        fprintf(stderr, "clattn-tune: the library does not take %s: %s\n", shown, note);
    clattn_context_destroy(&ctx);
    return ok;
}

/* Writes text to a temporary file and reads it back as every context will (the library must take
 * the whole file) before renaming it onto path, so a file the library refuses never replaces the
 * one there. 0, or 1 with the reason on stderr. */
static int write_file(const settings *s, const char *path, const char *text)
{
    char tmp[PATH_MAX], note[1200];
    if (!temp_name(path, tmp)) { /* writable() refused such a path before the measuring */
        fprintf(stderr, "clattn-tune: writing %s: %s\n", path, strerror(ENAMETOOLONG));
        return 1;
    }
    FILE *f = fopen(tmp, "w");
    int bad = !f || fputs(text, f) < 0;
    if ((f && fclose(f) != 0) || bad) {
        fprintf(stderr, "clattn-tune: writing %s: %s\n", tmp, strerror(errno));
        remove(tmp);
        return 1;
    }
    if (!library_takes(s, tmp, path, note, sizeof note)) {
        remove(tmp);
        return 1;
    }
    if (rename(tmp, path) != 0) {
        fprintf(stderr, "clattn-tune: writing %s: %s\n", path, strerror(errno));
        remove(tmp);
        return 1;
    }
    printf("wrote %s in %.0f s; %s\n", path, now() - s->start, note);
    return 0;
}

int main(int argc, char **argv)
{
    settings s;
    const char *out = NULL;
    int want[NOPS] = {0}, rc, nwant = 0, done = 0;
    char path[4096], keys[2048], text[8192];
    memset(&s, 0, sizeof s);
    s.budget = 600;
    setvbuf(stdout, NULL, _IOLBF, 0); /* progress, line by line, also into a log file */
    if ((rc = parse_args(argc, argv, &s, &out, want)) != 0)
        return rc < 0 ? 0 : rc; /* < 0: --help */
    clattn_context *ctx = open_table(&s, out, path, sizeof path);
    if (!ctx)
        return 1;
    key_lines(ctx, keys, sizeof keys);
    printf("clattn-tune: %s\ntune file: %s\nbudget: %.0f s%s\n",
           clattn_context_description(ctx), path, s.budget, s.quick ? " (quick)" : "");
    s.start = now();
    size_t used = (size_t)snprintf(text, sizeof text, "clattn-tune 1\n%s", keys);
    for (int op = 0; op < NOPS; op++)
        nwant += want[op];
    for (int op = 0; op < NOPS; op++)
        if (want[op])
            tune_op(&s, ctx, op, nwant, &done, text, sizeof text, &used);
    clattn_context_destroy(&ctx);
    return write_file(&s, path, text);
}
