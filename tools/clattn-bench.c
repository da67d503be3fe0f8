/* clattn-bench: clattn's ops against their peers, timed back to back in one process.
 *
 * Every figure is the median of repeated runs after warm-up; each run is bracketed by clFinish and
 * timed with CLOCK_MONOTONIC. Every implementation's result is checked against a reference before it
 * is timed; a wrong result is reported and makes the tool exit 1. Ratios are clattn / peer, from
 * figures measured in this same run; where an issue sets a target on the ratio (against a device
 * copy, full causal, Hkv = Hq, no bias, a float32 cache), the two are timed in alternation.
 *
 *     clattn-bench [--only gemm,softmax,attention,mha,additive] [--sizes 1024,2048|MxNxK,...] [--reps N] [--json] ...
 *
 * Adding a section (attention, multi-head, ...): write `static void bench_NAME(bench *b)` that, per
 * case, prepares inputs, runs each implementation once and checks it (bench_check_fail on a
 * mismatch), times it with bench_time() and records it with bench_record() (clattn's own row first,
 * then the peers, whose ratio is taken against it), or a pair in alternation with
 * bench_record_pair(); then add a line to `sections` below. The shared
 * options (--sizes, --reps, --max-time) and both output formats come for free. */
#include <clattn.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#ifdef CLATTN_BENCH_CLBLAST
#include <clblast_c.h>
#endif
#if defined(CLATTN_BENCH_OPENBLAS) || defined(CLATTN_BENCH_CBLAS)
#include <cblas.h>
#define HAVE_CBLAS 1
#endif

#define MAX_SIZES 16
#define MAX_DIM 65536 /* a GEMM dimension's bound, as --attn-n's; float_bytes checks products */
#define MAX_ROWS 256

/* One line of the report. */
typedef struct {
    char section[24], name[48], impl[48], unit[16];
    double value;    /* in unit, from the median time */
    double median_s; /* median seconds per run */
    int reps;
    double err;   /* worst scaled error of the check against the reference */
    double ratio; /* clattn's value / this value (peers only, 0 for clattn's own rows) */
} bench_row;

typedef struct {
    size_t m, n, k;
} bench_size;

typedef struct {
    clattn_context *ctx;
    cl_command_queue queue;
    int reps, warmup, json, blas_threads;
    double max_time; /* seconds of timed runs per figure, at least 3 runs */
    bench_size sizes[MAX_SIZES];
    int nsizes;
    int attn_n[MAX_SIZES], nattn; /* attention sequence lengths */
    int attn_d[MAX_SIZES], nattd; /* the attention section's head sizes */
    bench_size softmax[MAX_SIZES]; /* masked softmax shapes: m rows of n keys */
    int nsoftmax;
    int trans[4], ntrans; /* GEMM transposes: bit 0 = A, bit 1 = B */
    const char *only;
    const char *section; /* the one running */
    bench_row rows[MAX_ROWS];
    int nrows;
    double clattn_value; /* clattn's last figure in this case, for the peers' ratios */
    unsigned long long rng;
    int failures;
} bench;

/* ---- shared helpers ---- */

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double uniform(bench *b, double lo, double hi)
{
    unsigned long long z = (b->rng += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return lo + (hi - lo) * (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

static void fill(bench *b, float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)uniform(b, -1, 1);
}

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "clattn-bench: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(2);
}

/* The bytes of a (rows x cols) float matrix; exits rather than let the product wrap into a short
 * allocation. */
static size_t float_bytes(size_t rows, size_t cols)
{
    if (cols && rows > SIZE_MAX / sizeof(float) / cols)
        die("a %zu x %zu float matrix does not fit in memory", rows, cols);
    return rows * cols * sizeof(float);
}

/* Exits on a clattn failure: a benchmark of an op that fails is meaningless. */
static void ok(bench *b, clattn_status st, const char *what)
{
    if (st != CLATTN_SUCCESS)
        die("%s: %s: %s", what, clattn_status_string(st), clattn_last_error(b->ctx));
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, c = *(const double *)y;
    return (a > c) - (a < c);
}

/* A run of one implementation: enqueues (device) or computes (host) once; returns 0 on success. */
typedef int (*bench_run_fn)(bench *b, void *arg);

typedef struct {
    double median_s;
    int reps;
} bench_timing;

/* One run of fn, its seconds; device runs (device = 1) are bracketed by clFinish so that the time
 * covers the whole execution. */
static double bench_run_once(bench *b, bench_run_fn fn, void *arg, int device, const char *what)
{
    if (device)
        clFinish(b->queue);
    double t0 = now_s();
    if (fn(b, arg) != 0)
        die("%s: %s run failed", b->section, what);
    if (device)
        clFinish(b->queue);
    return now_s() - t0;
}

static bench_timing bench_median(double *t, int n)
{
    bench_timing r;
    qsort(t, (size_t)n, sizeof t[0], cmp_double);
    r.median_s = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    r.reps = n;
    return r;
}

/* Median seconds of fn after b->warmup untimed runs. Runs stop after b->reps or once b->max_time
 * is spent, but never below 3. */
static bench_timing bench_time(bench *b, bench_run_fn fn, void *arg, int device)
{
    double t[1024], spent = 0;
    for (int i = 0; i < b->warmup; i++)
        bench_run_once(b, fn, arg, device, "warm-up");
    int n = 0, max = b->reps < 1024 ? b->reps : 1024;
    while (n < max && (n < 3 || spent < b->max_time))
        spent += t[n++] = bench_run_once(b, fn, arg, device, "timed");
    return bench_median(t, n);
}

/* Medians of two device implementations timed in alternation (A, B, A, B, ...) after each one's
 * warm-up, as bench_time stops (b->max_time for each): the shared host's load swings figures up
 * to 2x between calls and within one, and alternating puts both sides of a ratio under the same
 * swings. */
static void bench_time_pair(bench *b, bench_run_fn fa, void *aa, bench_run_fn fb, void *ab,
                            bench_timing *ta, bench_timing *tb)
{
    double t[2][1024], spent = 0;
    for (int i = 0; i < b->warmup; i++) {
        bench_run_once(b, fa, aa, 1, "warm-up");
        bench_run_once(b, fb, ab, 1, "warm-up");
    }
    int n = 0, max = b->reps < 1024 ? b->reps : 1024;
    while (n < max && (n < 3 || spent < 2 * b->max_time)) {
        spent += t[0][n] = bench_run_once(b, fa, aa, 1, "timed");
        spent += t[1][n] = bench_run_once(b, fb, ab, 1, "timed");
        n++;
    }
    *ta = bench_median(t[0], n);
    *tb = bench_median(t[1], n);
}

/* Records a figure: value = work / median seconds (work in the unit's numerator, e.g. GFLOP).
 * The first row of a case (peer = 0) is clattn's; peers get the ratio clattn / peer. */
static void bench_record(bench *b, const char *name, const char *impl, int peer, double work,
                         const char *unit, bench_timing t, double err)
{
    if (b->nrows == MAX_ROWS)
        die("too many results");
    bench_row *r = &b->rows[b->nrows++];
    snprintf(r->section, sizeof r->section, "%s", b->section);
    snprintf(r->name, sizeof r->name, "%s", name);
    snprintf(r->impl, sizeof r->impl, "%s", impl);
    snprintf(r->unit, sizeof r->unit, "%s", unit);
    r->median_s = t.median_s;
    r->reps = t.reps;
    r->value = work / t.median_s;
    r->err = err;
    if (!peer)
        b->clattn_value = r->value;
    r->ratio = peer && r->value > 0 ? b->clattn_value / r->value : 0;
    if (!b->json) {
        fprintf(stderr, "  %-8s %-16s %-24s %10.3f ms %9.1f %s", r->section, r->name, r->impl,
                1e3 * r->median_s, r->value, r->unit);
        if (peer)
            fprintf(stderr, "  (clattn %.2fx)", r->ratio);
        fprintf(stderr, "\n");
    }
}

/* Times clattn's fa and its peer fb in alternation (bench_time_pair) and records both rows. */
static void bench_record_pair(bench *b, const char *name, const char *impl_a, bench_run_fn fa,
                              void *aa, const char *impl_b, bench_run_fn fb, void *ab, double work,
                              const char *unit, double err)
{
    bench_timing ta, tb;
    bench_time_pair(b, fa, aa, fb, ab, &ta, &tb);
    bench_record(b, name, impl_a, 0, work, unit, ta, err);
    bench_record(b, name, impl_b, 1, work, unit, tb, 0);
}

/* Reports a result that failed its check; the figure is not recorded. */
static void bench_check_fail(bench *b, const char *name, const char *impl, double err, double tol)
{
    fprintf(stderr, "clattn-bench: %s %s %s: WRONG RESULT (scaled error %.3g > %.3g), not timed\n",
            b->section, name, impl, err, tol);
    b->failures++;
}

/* Host floats as dtype dt stores them (bits) and the values those bits hold (x, rounded in place). */
static void *to_dtype(float *x, size_t n, clattn_dtype dt)
{
    unsigned short *h = malloc(n * sizeof *h);
    if (!h)
        die("out of memory");
    for (size_t i = 0; i < n; i++) {
        h[i] = dt == CLATTN_FLOAT16 ? clattn_float_to_half(x[i]) : clattn_float_to_bfloat16(x[i]);
        x[i] = dt == CLATTN_FLOAT16 ? clattn_half_to_float(h[i]) : clattn_bfloat16_to_float(h[i]);
    }
    return h;
}

static float from_dtype(const void *y, size_t i, clattn_dtype dt)
{
    const unsigned short *h = y;
    return dt == CLATTN_FLOAT32 ? ((const float *)y)[i]
           : dt == CLATTN_FLOAT16 ? clattn_half_to_float(h[i]) : clattn_bfloat16_to_float(h[i]);
}

/* ---- gemm: C = A B, row-major, float32 (and 16-bit A and B into float32 C) ---- */

#define GEMM_TOL 1e-4 /* as the tests: 1e-4 of max(|c|, sum|a b| / sqrt(K)) */
#define GEMM_SAMPLES 2048

typedef struct {
    size_t m, n, k;
    int ta, tb;                   /* A stored (k, m) / B stored (n, k), op() transposes back */
    size_t lda, ldb;              /* row lengths as stored */
    float *A, *B, *C;             /* host copies; C is the host peers' output */
    clattn_tensor tA, tB, tC;     /* device */
    size_t si[GEMM_SAMPLES], sj[GEMM_SAMPLES];
    double ref[GEMM_SAMPLES], mag[GEMM_SAMPLES];
} gemm_case;

/* A sampled double-precision reference: every corner and edge of the tiles is likely to be hit
 * by some of the random samples, and a full reference at n = 2048 would take minutes. */
static void gemm_reference(bench *b, gemm_case *g)
{
    for (int s = 0; s < GEMM_SAMPLES; s++) {
        size_t i = s < 4 ? (s & 1) * (g->m - 1) : (size_t)uniform(b, 0, (double)g->m);
        size_t j = s < 4 ? (s >> 1) * (g->n - 1) : (size_t)uniform(b, 0, (double)g->n);
        double acc = 0, mag = 0;
        for (size_t k = 0; k < g->k; k++) {
            double p = (double)g->A[g->ta ? k * g->lda + i : i * g->lda + k] *
                       g->B[g->tb ? j * g->ldb + k : k * g->ldb + j];
            acc += p;
            mag += fabs(p);
        }
        g->si[s] = i;
        g->sj[s] = j;
        g->ref[s] = acc;
        g->mag[s] = fmax(fabs(acc), mag / sqrt((double)g->k));
    }
}

/* Worst scaled error of C against the samples; every element must be finite (an unwritten or
 * NaN-poisoned element fails). */
static double gemm_error(const gemm_case *g, const float *C)
{
    double worst = 0;
    for (size_t i = 0; i < g->m * g->n; i++)
        if (!isfinite(C[i]))
            return INFINITY;
    for (int s = 0; s < GEMM_SAMPLES; s++) {
        double e = fabs(C[g->si[s] * g->n + g->sj[s]] - g->ref[s]) / g->mag[s];
        worst = e > worst ? e : worst;
    }
    return worst;
}

static double gemm_device_error(bench *b, gemm_case *g, const clattn_tensor *t)
{
    float *got = malloc(float_bytes(g->m, g->n));
    if (!got)
        die("out of memory");
    ok(b, clattn_tensor_read_blocking(b->ctx, t, got), "read C");
    double e = gemm_error(g, got);
    free(got);
    return e;
}

static int gemm_run_clattn(bench *b, void *arg)
{
    gemm_case *g = arg;
    return clattn_matmul(b->ctx, &g->tA, g->ta, &g->tB, g->tb, 1.0f, 0.0f, &g->tC) !=
           CLATTN_SUCCESS;
}

#ifdef CLATTN_BENCH_CLBLAST
static int gemm_run_clblast(bench *b, void *arg)
{
    gemm_case *g = arg;
    cl_event ev = NULL;
    CLBlastStatusCode s = CLBlastSgemm(
        CLBlastLayoutRowMajor, g->ta ? CLBlastTransposeYes : CLBlastTransposeNo,
        g->tb ? CLBlastTransposeYes : CLBlastTransposeNo, g->m, g->n, g->k, 1.0f, g->tA.buf, 0,
        g->lda, g->tB.buf, 0, g->ldb, 0.0f, g->tC.buf, 0, g->n, &b->queue, &ev);
    if (ev)
        clReleaseEvent(ev);
    if (s != CLBlastSuccess)
        fprintf(stderr, "clattn-bench: CLBlastSgemm failed with status %d\n", (int)s);
    return s != CLBlastSuccess;
}
#endif

#ifdef HAVE_CBLAS
static int gemm_run_cblas(bench *b, void *arg)
{
    (void)b;
    gemm_case *g = arg;
    cblas_sgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans, g->tb ? CblasTrans : CblasNoTrans,
                (int)g->m, (int)g->n, (int)g->k, 1.0f, g->A, (int)g->lda, g->B, (int)g->ldb, 0.0f,
                g->C, (int)g->n);
    return 0;
}
#endif

/* The same case with A and B stored as dtype dt (float32 C): its own sampled reference on the
 * rounded operands, recorded beside the float32 figure. */
static void gemm_16bit(bench *b, gemm_case *g, const char *name, clattn_dtype dt, double gflop)
{
    gemm_case h = *g;
    size_t na = g->m * g->k, nb = g->k * g->n; /* gemm_one checked these products */
    h.A = malloc(float_bytes(g->m, g->k));
    h.B = malloc(float_bytes(g->k, g->n));
    if (!h.A || !h.B)
        die("out of memory");
    memcpy(h.A, g->A, na * sizeof(float));
    memcpy(h.B, g->B, nb * sizeof(float));
    void *ha = to_dtype(h.A, na, dt), *hb = to_dtype(h.B, nb, dt);
    gemm_reference(b, &h);
    ok(b, clattn_tensor_create(b->ctx, dt, 2, g->tA.dims, ha, &h.tA), "create 16-bit A");
    ok(b, clattn_tensor_create(b->ctx, dt, 2, g->tB.dims, hb, &h.tB), "create 16-bit B");
    char impl[48];
    snprintf(impl, sizeof impl, "clattn %s A, B", dt == CLATTN_FLOAT16 ? "float16" : "bfloat16");
    ok(b, clattn_tensor_fill(b->ctx, &h.tC, NAN), "poison C");
    ok(b, clattn_matmul(b->ctx, &h.tA, h.ta, &h.tB, h.tb, 1.0f, 0.0f, &h.tC), "clattn_matmul");
    double e = gemm_device_error(b, &h, &h.tC);
    if (e > GEMM_TOL)
        bench_check_fail(b, name, impl, e, GEMM_TOL);
    else
        bench_record(b, name, impl, 1, gflop, "GFLOP/s", bench_time(b, gemm_run_clattn, &h, 1),
                     e);
    clattn_tensor_release(&h.tA);
    clattn_tensor_release(&h.tB);
    free(h.A);
    free(h.B);
    free(ha);
    free(hb);
}

/* One GEMM case: op(A) (m x k) op(B) (k x n), A stored (k, m) when ta, B stored (n, k) when tb. */
static void gemm_one(bench *b, bench_size z, int ta, int tb)
{
    {
        gemm_case *g = calloc(1, sizeof *g);
        char name[48], tr[8] = "";
        if (!g)
            die("out of memory");
        g->m = z.m;
        g->n = z.n;
        g->k = z.k;
        g->ta = ta;
        g->tb = tb;
        g->lda = ta ? g->m : g->k;
        g->ldb = tb ? g->k : g->n;
        if (b->ntrans > 1 || ta || tb)
            snprintf(tr, sizeof tr, " %c%c", ta ? 'T' : 'N', tb ? 'T' : 'N');
        if (g->m == g->n && g->n == g->k)
            snprintf(name, sizeof name, "n=%zu%s", g->n, tr);
        else
            snprintf(name, sizeof name, "%zux%zux%zu%s", g->m, g->n, g->k, tr);
        double gflop = 2e-9 * (double)g->m * (double)g->n * (double)g->k;
        g->A = malloc(float_bytes(g->m, g->k));
        g->B = malloc(float_bytes(g->k, g->n));
        g->C = malloc(float_bytes(g->m, g->n));
        if (!g->A || !g->B || !g->C)
            die("out of memory");
        fill(b, g->A, g->m * g->k);
        fill(b, g->B, g->k * g->n);
        gemm_reference(b, g);
        size_t da[2] = {ta ? g->k : g->m, ta ? g->m : g->k};
        size_t db[2] = {tb ? g->n : g->k, tb ? g->k : g->n}, dc[2] = {g->m, g->n};
        ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, 2, da, g->A, &g->tA), "create A");
        ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, 2, db, g->B, &g->tB), "create B");
        ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, 2, dc, NULL, &g->tC), "create C");

        /* clattn first: every peer's ratio is taken against it. */
        ok(b, clattn_tensor_fill(b->ctx, &g->tC, NAN), "poison C");
        ok(b, clattn_matmul(b->ctx, &g->tA, ta, &g->tB, tb, 1.0f, 0.0f, &g->tC), "clattn_matmul");
        double e = gemm_device_error(b, g, &g->tC);
        if (e > GEMM_TOL) {
            bench_check_fail(b, name, "clattn", e, GEMM_TOL);
        } else {
            bench_record(b, name, "clattn", 0, gflop, "GFLOP/s",
                         bench_time(b, gemm_run_clattn, g, 1), e);
            gemm_16bit(b, g, name, CLATTN_FLOAT16, gflop);
            gemm_16bit(b, g, name, CLATTN_BFLOAT16, gflop);
#ifdef CLATTN_BENCH_CLBLAST
            ok(b, clattn_tensor_fill(b->ctx, &g->tC, NAN), "poison C");
            if (gemm_run_clblast(b, g) == 0) {
                e = gemm_device_error(b, g, &g->tC);
                if (e > GEMM_TOL)
                    bench_check_fail(b, name, "CLBlast", e, GEMM_TOL);
                else
                    bench_record(b, name, "CLBlast (same device)", 1, gflop, "GFLOP/s",
                                 bench_time(b, gemm_run_clblast, g, 1), e);
            }
#endif
#ifdef HAVE_CBLAS
            char impl[48];
#ifdef CLATTN_BENCH_OPENBLAS
            snprintf(impl, sizeof impl, "OpenBLAS (%d thr)", openblas_get_num_threads());
#else
            snprintf(impl, sizeof impl, "cblas (host)");
#endif
            for (size_t i = 0; i < g->m * g->n; i++)
                g->C[i] = NAN;
            gemm_run_cblas(b, g);
            e = gemm_error(g, g->C);
            if (e > GEMM_TOL)
                bench_check_fail(b, name, impl, e, GEMM_TOL);
            else
                bench_record(b, name, impl, 1, gflop, "GFLOP/s",
                             bench_time(b, gemm_run_cblas, g, 0), e);
            /* OpenBLAS's threads spin for a while after a call and would steal the cores from
             * whatever runs next. */
            nanosleep(&(struct timespec){0, 300000000L}, NULL);
#endif
        }
        clattn_tensor_release(&g->tA);
        clattn_tensor_release(&g->tB);
        clattn_tensor_release(&g->tC);
        free(g->A);
        free(g->B);
        free(g->C);
        free(g);
    }
}

static void bench_gemm(bench *b)
{
    for (int si = 0; si < b->nsizes; si++)
        for (int t = 0; t < b->ntrans; t++)
            gemm_one(b, b->sizes[si], b->trans[t] & 1, b->trans[t] >> 1);
}

/* ---- softmax: masked softmax over rows with random valid lengths ---- */

#define SOFTMAX_TOL 1e-5

typedef struct {
    clattn_tensor x, y, copy;
    clattn_mask mask;
    size_t bytes;
} softmax_case;

static int softmax_run_clattn(bench *b, void *arg)
{
    softmax_case *s = arg;
    return clattn_masked_softmax(b->ctx, &s->x, &s->mask, &s->y) != CLATTN_SUCCESS;
}

/* The memory ceiling as the device sees it: a copy that moves the same bytes. */
static int softmax_run_copy(bench *b, void *arg)
{
    softmax_case *s = arg;
    return clEnqueueCopyBuffer(b->queue, s->x.buf, s->copy.buf, 0, 0, s->bytes / 2, 0, NULL,
                               NULL) != CL_SUCCESS;
}

/* Scores and output of dtype dt: GB/s of its bytes, against a copy of as many. The check allows
 * the output's rounding (its unit roundoff) on top of float32's tolerance. */
static void bench_softmax_dtype(bench *b, clattn_dtype dt, bench_size shape)
{
    /* (B, Q, K) with one random length in [0, K] per row (2-D lengths). */
    const size_t B = 64, Q = shape.m / 64, K = shape.n, n = B * Q * K;
    size_t dims[3] = {B, Q, K}, es = clattn_dtype_size(dt);
    float *x = malloc(n * sizeof *x);
    void *y = malloc(n * es), *hx = NULL;
    int *lens = malloc(B * Q * sizeof *lens);
    softmax_case s;
    char name[48];
    if (!x || !y || !lens)
        die("out of memory");
    memset(&s, 0, sizeof s);
    snprintf(name, sizeof name, "%zux%zu%s", B * Q, K,
             dt == CLATTN_FLOAT16 ? " float16" : dt == CLATTN_BFLOAT16 ? " bfloat16" : "");
    for (size_t i = 0; i < n; i++)
        x[i] = (float)uniform(b, -8, 8);
    if (dt != CLATTN_FLOAT32)
        hx = to_dtype(x, n, dt);
    for (size_t r = 0; r < B * Q; r++)
        lens[r] = (int)uniform(b, 0, (double)K + 1);
    ok(b, clattn_tensor_create(b->ctx, dt, 3, dims, hx ? hx : x, &s.x), "create scores");
    ok(b, clattn_tensor_create(b->ctx, dt, 3, dims, NULL, &s.y), "create out");
    ok(b, clattn_tensor_create(b->ctx, dt, 3, dims, NULL, &s.copy), "create copy");
    s.mask.valid_lens_host = lens;
    s.mask.lens_ndim = 2;
    s.mask.lens_dims[0] = B;
    s.mask.lens_dims[1] = Q;
    s.bytes = 2 * n * es; /* one read, one write */

    ok(b, clattn_tensor_fill(b->ctx, &s.y, NAN), "poison out");
    ok(b, clattn_masked_softmax(b->ctx, &s.x, &s.mask, &s.y), "clattn_masked_softmax");
    ok(b, clattn_tensor_read_blocking(b->ctx, &s.y, y), "read out");
    double worst = 0, tol = SOFTMAX_TOL + (dt == CLATTN_FLOAT16 ? 0x1p-11 : dt ? 0x1p-8 : 0);
    for (size_t r = 0; r < B * Q; r++) {
        const float *xr = x + r * K;
        double m = -INFINITY, sum = 0;
        for (size_t k = 0; k < K; k++)
            m = fmax(m, (int)k < lens[r] ? xr[k] : CLATTN_DEFAULT_FILL);
        for (size_t k = 0; k < K; k++)
            sum += exp(((int)k < lens[r] ? xr[k] : CLATTN_DEFAULT_FILL) - m);
        for (size_t k = 0; k < K; k++) {
            double want = exp(((int)k < lens[r] ? xr[k] : CLATTN_DEFAULT_FILL) - m) / sum;
            double got = from_dtype(y, r * K + k, dt);
            double e = isfinite(got) ? fabs(got - want) / fmax(want, 1.0 / (double)K) : INFINITY;
            worst = e > worst ? e : worst;
        }
    }
    if (worst > tol) {
        bench_check_fail(b, name, "clattn", worst, tol);
    } else {
        bench_record_pair(b, name, "clattn", softmax_run_clattn, &s, "clEnqueueCopyBuffer",
                          softmax_run_copy, &s, 1e-9 * (double)s.bytes, "GB/s", worst);
    }
    clattn_tensor_release(&s.x);
    clattn_tensor_release(&s.y);
    clattn_tensor_release(&s.copy);
    free(x);
    free(y);
    free(hx);
    free(lens);
}

static void bench_softmax(bench *b)
{
    for (int i = 0; i < b->nsoftmax; i++) {
        bench_softmax_dtype(b, CLATTN_FLOAT32, b->softmax[i]);
        bench_softmax_dtype(b, CLATTN_FLOAT16, b->softmax[i]);
        bench_softmax_dtype(b, CLATTN_BFLOAT16, b->softmax[i]);
    }
}

/* ---- attention: fused vs unfused vs the naive chain of public ops; multi-head; additive ---- */

#define ATT_TOL 1e-4 /* as the tests: 1e-4 of max(|out|, sum_k w_k |v_k|) */
#define ATT_SAMPLE_ROWS 32

typedef struct {
    size_t heads, kv_heads, n, d; /* kv_heads: K and V heads (grouped-query when < heads) */
    int causal;
    int window_left; /* > 0: a sliding window of that many keys left of the diagonal */
    clattn_tensor q, k, v, out, scores, weights;
    clattn_attention_opts opts;
    float *hq, *hk, *hv;
} att_case;

static int att_run_fused(bench *b, void *arg)
{
    att_case *a = arg;
    return clattn_dot_product_attention(b->ctx, &a->q, &a->k, &a->v, &a->opts, &a->out, NULL) !=
           CLATTN_SUCCESS;
}

/* The unfused library path: weights requested, so GEMM, masked softmax in place, GEMM. */
static int att_run_unfused(bench *b, void *arg)
{
    att_case *a = arg;
    return clattn_dot_product_attention(b->ctx, &a->q, &a->k, &a->v, &a->opts, &a->out,
                                        &a->weights) != CLATTN_SUCCESS;
}

/* d2l's code as a user would chain clattn's public ops: bmm, masked_softmax, bmm. */
static int att_run_naive(bench *b, void *arg)
{
    att_case *a = arg;
    float scale = (float)(1.0 / sqrt((double)a->d));
    return clattn_matmul(b->ctx, &a->q, 0, &a->k, 1, scale, 0.0f, &a->scores) != CLATTN_SUCCESS ||
           clattn_masked_softmax(b->ctx, &a->scores, &a->opts.mask, &a->weights) !=
               CLATTN_SUCCESS ||
           clattn_matmul(b->ctx, &a->weights, 0, &a->v, 0, 1.0f, 0.0f, &a->out) != CLATTN_SUCCESS;
}

/* Softmaxes the n scores w in place, then returns the worst scaled error of the output row `got`
 * (dv values) against sum_j w_j v[j * dv + e], scaled by max(|ref|, sum_j |w_j v_j|). */
static double softmax_row_error(double *w, size_t n, const float *v, size_t dv, const float *got)
{
    double m = -INFINITY, sum = 0, worst = 0;
    for (size_t j = 0; j < n; j++)
        m = fmax(m, w[j]);
    for (size_t j = 0; j < n; j++)
        sum += (w[j] = exp(w[j] - m));
    for (size_t e = 0; e < dv; e++) {
        double o = 0, mag = 0;
        for (size_t j = 0; j < n; j++) {
            double t = w[j] / sum * v[j * dv + e];
            o += t;
            mag += fabs(t);
        }
        double err = isfinite(got[e]) ? fabs(got[e] - o) / fmax(fabs(o), mag) : INFINITY;
        worst = err > worst ? err : worst;
    }
    return worst;
}

/* Worst scaled error of out over ATT_SAMPLE_ROWS sampled rows per head, in double. */
static double att_error(bench *b, const att_case *a, bench_run_fn fn)
{
    size_t n = a->n, d = a->d, total = a->heads * n * d;
    float *out = malloc(total * sizeof *out);
    double *w = malloc(n * sizeof *w), worst = 0;
    if (!out || !w)
        die("out of memory");
    ok(b, clattn_tensor_fill(b->ctx, &a->out, NAN), "poison out");
    if (fn(b, (void *)a) != 0)
        die("%s: run failed: %s", b->section, clattn_last_error(b->ctx));
    ok(b, clattn_tensor_read_blocking(b->ctx, &a->out, out), "read out");
    for (size_t h = 0; h < a->heads; h++)
        for (int s = 0; s < ATT_SAMPLE_ROWS; s++) {
            size_t i = (size_t)uniform(b, 0, (double)n);
            const float *q = a->hq + (h * n + i) * d;
            size_t limit = a->causal ? i + 1 : n, kh = h / (a->heads / a->kv_heads);
            size_t lo = a->window_left > 0 && i > (size_t)a->window_left ? i - a->window_left : 0;
            for (size_t j = 0; j < n; j++) {
                const float *k = a->hk + (kh * n + j) * d;
                double dot = 0;
                for (size_t e = 0; e < d; e++)
                    dot += (double)q[e] * k[e];
                w[j] = j < limit && j >= lo ? dot / sqrt((double)d) : CLATTN_DEFAULT_FILL;
            }
            double err = softmax_row_error(w, n, a->hv + kh * n * d, d, out + (h * n + i) * d);
            worst = err > worst ? err : worst;
        }
    free(out);
    free(w);
    return worst;
}

/* Q (heads, n, d) and K, V (heads, n, d); with kv_heads != 0 (grouped-query) Q (1, heads, n, d),
 * K and V (1, kv_heads, n, d). The score tensors only for the unfused implementations. */
static void att_make(bench *b, att_case *a, size_t heads, size_t kv_heads, size_t n, size_t d,
                     int causal, int scores)
{
    int r = kv_heads ? 4 : 3;
    size_t qd[4] = {1, heads, n, d}, kd[4] = {1, kv_heads ? kv_heads : heads, n, d};
    size_t sd[4] = {1, heads, n, n};
    size_t total = heads * n * d, kvtotal = kd[1] * n * d;
    memset(a, 0, sizeof *a);
    a->heads = heads;
    a->kv_heads = kd[1];
    a->n = n;
    a->d = d;
    a->causal = causal;
    a->opts.mask.causal = causal;
    a->hq = malloc(total * sizeof(float));
    a->hk = malloc(kvtotal * sizeof(float));
    a->hv = malloc(kvtotal * sizeof(float));
    if (!a->hq || !a->hk || !a->hv)
        die("out of memory");
    fill(b, a->hq, total);
    fill(b, a->hk, kvtotal);
    fill(b, a->hv, kvtotal);
    ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, r, qd + 4 - r, a->hq, &a->q), "create Q");
    ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, r, kd + 4 - r, a->hk, &a->k), "create K");
    ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, r, kd + 4 - r, a->hv, &a->v), "create V");
    ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, r, qd + 4 - r, NULL, &a->out), "create out");
    if (!scores)
        return;
    ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, r, sd + 4 - r, NULL, &a->scores),
       "create scores");
    ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, r, sd + 4 - r, NULL, &a->weights),
       "create weights");
}

static void att_free(att_case *a)
{
    clattn_tensor *ts[] = {&a->q, &a->k, &a->v, &a->out, &a->scores, &a->weights};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        clattn_tensor_release(ts[i]);
    free(a->hq);
    free(a->hk);
    free(a->hv);
}

/* The fused kernel with Q, K and V stored as dtype dt (float32 out), checked on sampled rows
 * against its own rounded inputs, recorded beside the float32 figure. */
static void att_16bit(bench *b, const att_case *a, const char *name, clattn_dtype dt,
                      double gflop)
{
    att_case h = *a;
    size_t nq = a->heads * a->n * a->d, nk = a->kv_heads * a->n * a->d;
    float *hq = malloc(nq * sizeof *hq), *hk = malloc(nk * sizeof *hk);
    float *hv = malloc(nk * sizeof *hv);
    if (!hq || !hk || !hv)
        die("out of memory");
    memcpy(hq, a->hq, nq * sizeof *hq);
    memcpy(hk, a->hk, nk * sizeof *hk);
    memcpy(hv, a->hv, nk * sizeof *hv);
    void *bq = to_dtype(hq, nq, dt), *bk = to_dtype(hk, nk, dt), *bv = to_dtype(hv, nk, dt);
    h.hq = hq;
    h.hk = hk;
    h.hv = hv;
    ok(b, clattn_tensor_create(b->ctx, dt, a->q.ndim, a->q.dims, bq, &h.q), "create 16-bit Q");
    ok(b, clattn_tensor_create(b->ctx, dt, a->k.ndim, a->k.dims, bk, &h.k), "create 16-bit K");
    ok(b, clattn_tensor_create(b->ctx, dt, a->v.ndim, a->v.dims, bv, &h.v), "create 16-bit V");
    char impl[48];
    snprintf(impl, sizeof impl, "clattn fused, %s Q, K, V",
             dt == CLATTN_FLOAT16 ? "float16" : "bfloat16");
    double err = att_error(b, &h, att_run_fused);
    if (err > ATT_TOL)
        bench_check_fail(b, name, impl, err, ATT_TOL);
    else
        bench_record(b, name, impl, 1, gflop, "GFLOP/s", bench_time(b, att_run_fused, &h, 1),
                     err);
    clattn_tensor_release(&h.q);
    clattn_tensor_release(&h.k);
    clattn_tensor_release(&h.v);
    free(hq); free(hk); free(hv); free(bq); free(bk); free(bv);
}

/* One case: each implementation checked on sampled rows, then timed; GFLOP = 4 H N^2 d (dense
 * count, also for causal, so causal's speed-up shows as a higher figure). */
static void att_one(bench *b, size_t heads, size_t n, size_t d, int causal)
{
    static const struct {
        const char *impl;
        bench_run_fn fn;
    } impls[] = {{"clattn fused", att_run_fused},
                 {"clattn unfused (weights)", att_run_unfused},
                 {"naive chain (3 public ops)", att_run_naive}};
    att_case a;
    char name[48];
    att_make(b, &a, heads, 0, n, d, causal, 1);
    snprintf(name, sizeof name, "H%zu N%zu d%zu%s", heads, n, d, causal ? " causal" : "");
    double gflop = 4e-9 * (double)heads * (double)n * (double)n * (double)d;
    for (size_t i = 0; i < sizeof impls / sizeof impls[0]; i++) {
        double err = att_error(b, &a, impls[i].fn);
        if (err > ATT_TOL) {
            bench_check_fail(b, name, impls[i].impl, err, ATT_TOL);
            continue;
        }
        bench_record(b, name, impls[i].impl, i > 0, gflop, "GFLOP/s",
                     bench_time(b, impls[i].fn, &a, 1), err);
    }
    att_16bit(b, &a, name, CLATTN_FLOAT16, gflop);
    att_16bit(b, &a, name, CLATTN_BFLOAT16, gflop);
    att_free(&a);
}

static void bench_attention(bench *b)
{
    for (int j = 0; j < b->nattd; j++) {
        for (int i = 0; i < b->nattn; i++) {
            att_one(b, 16, (size_t)b->attn_n[i], (size_t)b->attn_d[j], 0);
            att_one(b, 16, (size_t)b->attn_n[i], (size_t)b->attn_d[j], 1);
        }
    }
}

/* ---- grouped-query prefill: B 1, 32 query heads over 8 K/V heads, d 128 ---- */

#define GQA_HQ 32
#define GQA_HKV 8
#define GQA_D 128

/* Checks the fused outputs of a[0] (clattn's row) and a[1] (its peer) on sampled rows, then times
 * them in alternation (bench_time_pair); releases both. */
static void fused_pair(bench *b, att_case *a, const char *name, const char *const *impls,
                       double gflop)
{
    double err[2];
    int good = 1;
    for (int i = 0; i < 2; i++) {
        err[i] = att_error(b, &a[i], att_run_fused);
        if (err[i] > ATT_TOL) {
            bench_check_fail(b, name, impls[i], err[i], ATT_TOL);
            good = 0;
        }
    }
    if (good) {
        bench_timing t[2];
        bench_time_pair(b, att_run_fused, &a[0], att_run_fused, &a[1], &t[0], &t[1]);
        for (int i = 0; i < 2; i++)
            bench_record(b, name, impls[i], i, gflop, "GFLOP/s", t[i], err[i]);
    }
    att_free(&a[0]);
    att_free(&a[1]);
}

/* The fused kernel on grouped heads against the same kernel with one K/V head per query head
 * (multi-head attention's shape, 4x the K and V), both checked on sampled rows. */
static void gqa_one(bench *b, size_t n, int causal)
{
    static const size_t kv[2] = {GQA_HKV, GQA_HQ};
    static const char *const impls[2] = {"clattn fused, 8 K/V heads", "clattn fused, 32 K/V heads"};
    char name[64];
    snprintf(name, sizeof name, "B1 Hq%d Hkv%d N%zu d%d%s", GQA_HQ, GQA_HKV, n, GQA_D,
             causal ? " causal" : "");
    double gflop = 4e-9 * GQA_HQ * (double)n * (double)n * GQA_D;
    att_case a[2];
    for (int i = 0; i < 2; i++)
        att_make(b, &a[i], GQA_HQ, kv[i], n, GQA_D, causal, 0);
    fused_pair(b, a, name, impls, gflop);
}

/* ---- sliding window: 8 heads, d 64, N 8192, causal, a window of 512 keys vs none ---- */

#define WIN_H 8
#define WIN_D 64
#define WIN_N 8192
#define WIN_LEFT 512

static void bench_window(bench *b)
{
    static const int lefts[2] = {WIN_LEFT, 0};
    static const char *const impls[2] = {"clattn fused, window 512", "clattn fused, full causal"};
    char name[64];
    snprintf(name, sizeof name, "H%d N%d d%d causal", WIN_H, WIN_N, WIN_D);
    /* the dense count for both: the window's speed-up shows as a higher figure */
    double gflop = 4e-9 * WIN_H * (double)WIN_N * (double)WIN_N * WIN_D;
    att_case a[2];
    for (int i = 0; i < 2; i++) {
        att_make(b, &a[i], WIN_H, 0, WIN_N, WIN_D, 1, 0);
        a[i].window_left = lefts[i];
        a[i].opts.mask.window = lefts[i] > 0;
        a[i].opts.mask.window_left = lefts[i];
        a[i].opts.mask.window_right = -1;
    }
    fused_pair(b, a, name, impls, gflop);
}

static void bench_gqa(bench *b)
{
    for (int i = 0; i < b->nattn; i++) {
        gqa_one(b, (size_t)b->attn_n[i], 1);
        gqa_one(b, (size_t)b->attn_n[i], 0);
    }
}

/* ---- log-sum-exp: its cost in the fused kernel, and merging key ranges ---- */

#define LSE_H 16
#define LSE_N 1024
#define LSE_D 64
#define MERGE_N 2

typedef struct {
    clattn_tensor outs[MERGE_N], lses[MERGE_N], out, lse, copy;
    size_t bytes; /* read + written */
} merge_case;

static int merge_run(bench *b, void *arg)
{
    merge_case *m = arg;
    return clattn_attention_merge(b->ctx, MERGE_N, m->outs, m->lses, &m->out, &m->lse) !=
           CLATTN_SUCCESS;
}

static int merge_run_copy(bench *b, void *arg)
{
    merge_case *m = arg;
    return clEnqueueCopyBuffer(b->queue, m->copy.buf, m->copy.buf, 0, m->bytes / 2, m->bytes / 2,
                               0, NULL, NULL) != CL_SUCCESS; /* one half onto the other */
}

/* The largest error of the merged rows against the double merge, relative to max |out|. */
static double merge_error(bench *b, merge_case *m, float *const *ho, float *const *hl, size_t rows)
{
    float *o = malloc(rows * LSE_D * sizeof *o);
    if (!o)
        die("out of memory");
    ok(b, clattn_tensor_fill(b->ctx, &m->out, NAN), "poison out");
    ok(b, clattn_attention_merge(b->ctx, MERGE_N, m->outs, m->lses, &m->out, &m->lse), "merge");
    ok(b, clattn_tensor_read_blocking(b->ctx, &m->out, o), "read out");
    double worst = 0;
    for (size_t r = 0; r < rows; r++) {
        double mx = fmax(hl[0][r], hl[1][r]), w0 = exp(hl[0][r] - mx), w1 = exp(hl[1][r] - mx);
        for (size_t c = 0; c < LSE_D; c++) {
            double want = (w0 * ho[0][r * LSE_D + c] + w1 * ho[1][r * LSE_D + c]) / (w0 + w1);
            double e = fabs(o[r * LSE_D + c] - want);
            worst = isfinite(e) ? fmax(worst, e) : INFINITY;
        }
    }
    free(o);
    return worst;
}

static void bench_merge(bench *b)
{
    const size_t rows = (size_t)LSE_H * LSE_N, od[3] = {LSE_H, LSE_N, LSE_D}, ld[2] = {LSE_H, LSE_N};
    merge_case m;
    float *ho[MERGE_N], *hl[MERGE_N];
    memset(&m, 0, sizeof m);
    for (int i = 0; i < MERGE_N; i++) {
        ho[i] = malloc(rows * LSE_D * sizeof(float));
        hl[i] = malloc(rows * sizeof(float));
        if (!ho[i] || !hl[i])
            die("out of memory");
        fill(b, ho[i], rows * LSE_D);
        for (size_t r = 0; r < rows; r++)
            hl[i][r] = (float)uniform(b, -5, 5);
        ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, 3, od, ho[i], &m.outs[i]), "create");
        ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, 2, ld, hl[i], &m.lses[i]), "create");
    }
    ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, 3, od, NULL, &m.out), "create out");
    ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, 2, ld, NULL, &m.lse), "create lse");
    m.bytes = (MERGE_N + 1) * rows * (LSE_D + 1) * sizeof(float);
    ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, 1, (size_t[]){m.bytes / 4}, NULL, &m.copy),
       "create copy");
    ok(b, clattn_tensor_fill(b->ctx, &m.copy, 1.0f), "fill copy"); /* see dec_one */
    char name[48];
    snprintf(name, sizeof name, "%d x (%d, %d, %d)", MERGE_N, LSE_H, LSE_N, LSE_D);
    double err = merge_error(b, &m, ho, hl, rows);
    if (err > 1e-5) {
        bench_check_fail(b, name, "clattn_attention_merge", err, 1e-5);
    } else {
        bench_record_pair(b, name, "clattn_attention_merge", merge_run, &m,
                          "clEnqueueCopyBuffer", merge_run_copy, &m, 1e-9 * (double)m.bytes,
                          "GB/s", err);
    }
    for (int i = 0; i < MERGE_N; i++) {
        clattn_tensor_release(&m.outs[i]);
        clattn_tensor_release(&m.lses[i]);
        free(ho[i]);
        free(hl[i]);
    }
    clattn_tensor_release(&m.out);
    clattn_tensor_release(&m.lse);
    clattn_tensor_release(&m.copy);
}

/* The fused kernel with a float bias (N, N) shared by the heads (a relative-position bias, 4 MiB
 * at N 1024), and with ALiBi slopes (H), each against without (timed in alternation with it).
 * Bias and slopes are zeros, so that the unbiased reference checks the output (their values do
 * not change the work; the tests check nonzero ones). */
static void bench_bias(bench *b)
{
    static const char *const impls[2][2] = {{"clattn fused + bias (N, N)", "clattn fused"},
                                            {"clattn fused + ALiBi (H)", "clattn fused"}};
    char name[48];
    size_t n = LSE_N, bd[2] = {LSE_N, LSE_N}, sd[1] = {LSE_H};
    float *hb = calloc(n * n, sizeof *hb); /* zeros: the check against the unbiased reference */
    clattn_tensor bias, slopes;
    if (!hb)
        die("out of memory");
    ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, 2, bd, hb, &bias), "create bias");
    ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, 1, sd, hb, &slopes), "create slopes");
    snprintf(name, sizeof name, "H%d N%d d%d", LSE_H, LSE_N, LSE_D);
    double gflop = 4e-9 * LSE_H * (double)LSE_N * LSE_N * LSE_D;
    for (int j = 0; j < 2; j++) {
        att_case a[2];
        for (int i = 0; i < 2; i++)
            att_make(b, &a[i], LSE_H, 0, LSE_N, LSE_D, 0, 0);
        a[0].opts.bias = j == 0 ? &bias : NULL;
        a[0].opts.alibi_slopes = j == 1 ? &slopes : NULL;
        fused_pair(b, a, name, impls[j], gflop);
    }
    clattn_tensor_release(&bias);
    clattn_tensor_release(&slopes);
    free(hb);
}

/* The fused kernel with the LSE output against without it, then the merge. */
static void bench_lse(bench *b)
{
    static const char *const impls[2] = {"clattn fused + LSE", "clattn fused"};
    char name[48];
    snprintf(name, sizeof name, "H%d N%d d%d", LSE_H, LSE_N, LSE_D);
    double gflop = 4e-9 * LSE_H * (double)LSE_N * LSE_N * LSE_D;
    att_case a[2];
    clattn_tensor lse;
    for (int i = 0; i < 2; i++)
        att_make(b, &a[i], LSE_H, 0, LSE_N, LSE_D, 0, 0);
    ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, 2, (size_t[]){LSE_H, LSE_N}, NULL, &lse),
       "create lse");
    a[0].opts.lse = &lse;
    fused_pair(b, a, name, impls, gflop);
    clattn_tensor_release(&lse);
    bench_merge(b);
}

/* ---- KV-cache decoding: one new row, 32 query heads over 8 K/V heads, d 128 ---- */

#define DEC_HQ 32
#define DEC_HKV 8
#define DEC_D 128
#define DEC_CHECK_HEADS 4

typedef struct {
    clattn_tensor q, kc, vc, lens, out, copy;
    clattn_kv_cache cache;
    size_t bytes; /* the cache's keys and values of every sequence, read once */
    size_t hq;    /* query heads: DEC_HQ (grouped) or DEC_HKV (one per K/V head) */
} dec_case;

static int dec_run(bench *b, void *arg)
{
    dec_case *c = arg;
    return clattn_decode_attention(b->ctx, &c->q, &c->cache, NULL, &c->out) != CLATTN_SUCCESS;
}

/* A device copy of the same bytes (read and write counted, as for the decode's reads). */
static int dec_run_copy(bench *b, void *arg)
{
    dec_case *c = arg;
    return clEnqueueCopyBuffer(b->queue, c->copy.buf, c->copy.buf, 0, c->bytes / 2, c->bytes / 2,
                               0, NULL, NULL) != CL_SUCCESS;
}

/* Random floats, a block of them repeated: the cache is up to 2 GiB. */
static void fill_tiled(bench *b, float *x, size_t n)
{
    size_t blk = n < (1u << 20) ? n : (1u << 20);
    fill(b, x, blk);
    for (size_t i = blk; i < n; i += blk)
        memcpy(x + i, x, (n - i < blk ? n - i : blk) * sizeof *x);
}

/* The largest error of the first DEC_CHECK_HEADS heads of sequence 0 against a double reference,
 * relative to max |v|. */
static double dec_error(bench *b, dec_case *c, const float *q, const float *k, const float *v,
                        size_t K)
{
    size_t hq = c->hq, g = hq / DEC_HKV;
    float *o = malloc(hq * DEC_D * sizeof *o);
    double *w = malloc(K * sizeof *w), worst = 0;
    if (!o || !w)
        die("out of memory");
    ok(b, clattn_tensor_fill(b->ctx, &c->out, NAN), "poison out");
    ok(b, clattn_decode_attention(b->ctx, &c->q, &c->cache, NULL, &c->out), "decode");
    ok(b, clattn_tensor_read_blocking(b->ctx, &(clattn_tensor){c->out.buf, 0, 1,
                                                                {hq * DEC_D}, CLATTN_FLOAT32}, o),
       "read out");
    for (int h = 0; h < DEC_CHECK_HEADS; h++) {
        const float *qr = q + (size_t)h * DEC_D, *kh = k + (size_t)h / g * K * DEC_D;
        const float *vh = v + (size_t)h / g * K * DEC_D;
        double mx = -INFINITY, sum = 0;
        for (size_t j = 0; j < K; j++) {
            double dot = 0;
            for (int e = 0; e < DEC_D; e++)
                dot += (double)qr[e] * kh[j * DEC_D + e];
            w[j] = dot / sqrt((double)DEC_D);
            mx = fmax(mx, w[j]);
        }
        for (size_t j = 0; j < K; j++)
            sum += (w[j] = exp(w[j] - mx));
        for (int e = 0; e < DEC_D; e++) {
            double want = 0;
            for (size_t j = 0; j < K; j++)
                want += w[j] / sum * vh[j * DEC_D + e];
            double err = fabs(o[h * DEC_D + e] - want);
            worst = isfinite(err) ? fmax(worst, err) : INFINITY;
        }
    }
    free(o);
    free(w);
    return worst;
}

/* The same decode over a 16-bit cache (the values rounded to dt), checked against its own
 * reference; GB/s counted over the float32 cache's bytes, so that the figure beside the float32
 * one is the speedup. */
static void dec_16bit(bench *b, dec_case *c, const char *name, const float *q, const float *k,
                      const float *v, size_t kn, size_t K, clattn_dtype dt)
{
    dec_case h = *c;
    float *kr = malloc(kn * sizeof *kr), *vr = malloc(kn * sizeof *vr);
    if (!kr || !vr)
        die("out of memory");
    memcpy(kr, k, kn * sizeof *kr);
    memcpy(vr, v, kn * sizeof *vr);
    void *kb = to_dtype(kr, kn, dt), *vb = to_dtype(vr, kn, dt);
    ok(b, clattn_tensor_create(b->ctx, dt, 4, c->kc.dims, kb, &h.kc), "create 16-bit K cache");
    ok(b, clattn_tensor_create(b->ctx, dt, 4, c->vc.dims, vb, &h.vc), "create 16-bit V cache");
    free(kb);
    free(vb);
    h.cache.k_cache = &h.kc;
    h.cache.v_cache = &h.vc;
    char impl[64];
    snprintf(impl, sizeof impl, "decode, %s cache", dt == CLATTN_FLOAT16 ? "float16" : "bfloat16");
    double err = dec_error(b, &h, q, kr, vr, K);
    if (err > ATT_TOL) {
        bench_check_fail(b, name, impl, err, ATT_TOL);
    } else {
        /* the ratio against the float32 cache timed in alternation with this one (not against
         * the float32 row above, timed apart) */
        bench_timing t32, t16;
        bench_time_pair(b, dec_run, c, dec_run, &h, &t32, &t16);
        b->clattn_value = 1e-9 * (double)c->bytes / t32.median_s;
        bench_record(b, name, impl, 1, 1e-9 * (double)c->bytes, "GB/s", t16, err);
    }
    clattn_tensor_release(&h.kc);
    clattn_tensor_release(&h.vc);
    free(kr);
    free(vr);
}

static void dec_one(bench *b, size_t B, size_t K, size_t hq)
{
    dec_case c;
    size_t qn = B * hq * DEC_D, kn = B * DEC_HKV * K * DEC_D;
    size_t qd[4] = {B, hq, 1, DEC_D}, kd[4] = {B, DEC_HKV, K, DEC_D};
    float *q = malloc(qn * sizeof *q), *k = malloc(kn * sizeof *k), *v = malloc(kn * sizeof *v);
    int *lens = malloc(B * sizeof *lens);
    if (!q || !k || !v || !lens)
        die("out of memory");
    memset(&c, 0, sizeof c);
    c.hq = hq;
    fill(b, q, qn);
    fill_tiled(b, k, kn);
    fill_tiled(b, v, kn);
    for (size_t i = 0; i < B; i++)
        lens[i] = (int)K; /* full caches: every key read */
    ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, 4, qd, q, &c.q), "create Q");
    ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, 4, kd, k, &c.kc), "create K cache");
    ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, 4, kd, v, &c.vc), "create V cache");
    ok(b, clattn_tensor_create(b->ctx, CLATTN_INT32, 1, (size_t[]){B}, lens, &c.lens), "lens");
    ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, 4, qd, NULL, &c.out), "create out");
    c.bytes = 2 * kn * sizeof(float);
    ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, 1, (size_t[]){c.bytes / 4}, NULL, &c.copy),
       "create copy");
    /* written before it is timed: a copy out of never-written pages reads the kernel's shared
     * zero page, which stays in cache (PoCL 3.1: 68 GB/s instead of 23 for 2 GiB) */
    ok(b, clattn_tensor_fill(b->ctx, &c.copy, 1.0f), "fill copy");
    c.cache.k_cache = &c.kc;
    c.cache.v_cache = &c.vc;
    c.cache.lens = &c.lens;
    char name[48];
    snprintf(name, sizeof name, "B%zu K%zu%s", B, K, hq == DEC_HKV ? " Hq8" : "");
    double err = dec_error(b, &c, q, k, v, K);
    if (err > ATT_TOL) {
        bench_check_fail(b, name, "clattn_decode_attention", err, ATT_TOL);
    } else {
        bench_record_pair(b, name, "clattn_decode_attention", dec_run, &c,
                          "clEnqueueCopyBuffer", dec_run_copy, &c, 1e-9 * (double)c.bytes, "GB/s",
                          err);
        dec_16bit(b, &c, name, q, k, v, kn, K, CLATTN_FLOAT16);
        dec_16bit(b, &c, name, q, k, v, kn, K, CLATTN_BFLOAT16);
    }
    clattn_tensor *ts[] = {&c.q, &c.kc, &c.vc, &c.lens, &c.out, &c.copy};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        clattn_tensor_release(ts[i]);
    free(q);
    free(k);
    free(v);
    free(lens);
}

static void bench_decode(bench *b)
{
    static const size_t Bs[2] = {1, 8}, Ks[2] = {4096, 32768};
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            dec_one(b, Bs[i], Ks[j], DEC_HQ);
    dec_one(b, 1, 4096, DEC_HKV); /* one query head per K/V head (multi-head, no grouping) */
}

/* ---- packed variable-length batch: 8 sequences, 16 heads, d 64, causal ---- */
#define VL_B 8
#define VL_H 16
#define VL_D 64
static const int vl_lens[VL_B] = {1024, 97, 512, 2048, 300, 64, 1500, 800};

typedef struct {
    int cu[VL_B + 1], max;
    clattn_varlen seqs;
    clattn_tensor q, k, v, out;       /* packed (total, H, d) */
    clattn_tensor pq, pk, pv, pout;   /* padded (B, H, max, d) */
    clattn_attention_opts opts, popts;
    float *hq, *hk, *hv;              /* packed */
} vl_case;

static int vl_run(bench *b, void *arg)
{
    vl_case *c = arg;
    return clattn_varlen_attention(b->ctx, &c->q, &c->k, &c->v, &c->seqs, &c->opts, &c->out) !=
           CLATTN_SUCCESS;
}

static int vl_run_padded(bench *b, void *arg)
{
    vl_case *c = arg;
    return clattn_dot_product_attention(b->ctx, &c->pq, &c->pk, &c->pv, &c->popts, &c->pout,
                                        NULL) != CLATTN_SUCCESS;
}

/* Worst scaled error over sampled rows of each sequence; padded: out is (B, H, max, d). */
static double vl_error(bench *b, vl_case *c, bench_run_fn fn, const clattn_tensor *t, int padded)
{
    size_t total = (size_t)c->cu[VL_B], n = padded ? (size_t)VL_B * c->max : total;
    float *out = malloc(n * VL_H * VL_D * sizeof *out), *vr = malloc((size_t)c->max * VL_D * 4);
    double *w = malloc((size_t)c->max * sizeof *w), worst = 0;
    if (!out || !w || !vr)
        die("out of memory");
    ok(b, clattn_tensor_fill(b->ctx, t, NAN), "poison out");
    if (fn(b, c) != 0)
        die("%s: run failed: %s", b->section, clattn_last_error(b->ctx));
    ok(b, clattn_tensor_read_blocking(b->ctx, t, out), "read out");
    for (int s = 0; s < VL_B; s++)
        for (int r = 0; r < 8; r++) {
            int L = vl_lens[s], i = (int)uniform(b, 0, L), h = (int)uniform(b, 0, VL_H);
            const float *q = c->hq + ((size_t)(c->cu[s] + i) * VL_H + h) * VL_D;
            for (int j = 0; j < L; j++) {
                const float *k = c->hk + ((size_t)(c->cu[s] + j) * VL_H + h) * VL_D;
                double dot = 0;
                for (int e = 0; e < VL_D; e++)
                    dot += (double)q[e] * k[e];
                w[j] = j <= i ? dot / sqrt((double)VL_D) : CLATTN_DEFAULT_FILL;
                memcpy(vr + (size_t)j * VL_D, c->hv + ((size_t)(c->cu[s] + j) * VL_H + h) * VL_D,
                       VL_D * 4);
            }
            size_t row = padded ? (((size_t)s * VL_H + h) * c->max + i)
                                : ((size_t)(c->cu[s] + i) * VL_H + h);
            double err = softmax_row_error(w, (size_t)L, vr, VL_D, out + row * VL_D);
            worst = err > worst ? err : worst;
        }
    free(out);
    free(w);
    free(vr);
    return worst;
}

/* x packed (total, H, d) -> (B, H, max, d), zeros past each length */
static float *vl_pad(const vl_case *c, const float *x)
{
    size_t per = (size_t)c->max * VL_D;
    float *p = calloc((size_t)VL_B * VL_H * per, sizeof *p);
    if (!p)
        die("out of memory");
    for (int s = 0; s < VL_B; s++)
        for (int i = 0; i < vl_lens[s]; i++)
            for (int h = 0; h < VL_H; h++)
                memcpy(p + ((size_t)s * VL_H + h) * per + (size_t)i * VL_D,
                       x + ((size_t)(c->cu[s] + i) * VL_H + h) * VL_D, VL_D * 4);
    return p;
}

static void vl_make(bench *b, vl_case *c)
{
    memset(c, 0, sizeof *c);
    for (int s = 0; s < VL_B; s++) {
        c->cu[s + 1] = c->cu[s] + vl_lens[s];
        c->max = vl_lens[s] > c->max ? vl_lens[s] : c->max;
    }
    size_t total = (size_t)c->cu[VL_B], n = total * VL_H * VL_D;
    size_t pd[3] = {total, VL_H, VL_D}, qd[4] = {VL_B, VL_H, (size_t)c->max, VL_D};
    float **h[3] = {&c->hq, &c->hk, &c->hv};
    clattn_tensor *t[3] = {&c->q, &c->k, &c->v}, *pt[3] = {&c->pq, &c->pk, &c->pv};
    for (int i = 0; i < 3; i++) {
        if (!(*h[i] = malloc(n * sizeof(float))))
            die("out of memory");
        fill(b, *h[i], n);
        ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, 3, pd, *h[i], t[i]), "create");
        float *p = vl_pad(c, *h[i]);
        ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, 4, qd, p, pt[i]), "create padded");
        free(p);
    }
    ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, 3, pd, NULL, &c->out), "create out");
    ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, 4, qd, NULL, &c->pout), "create out");
    c->seqs = (clattn_varlen){VL_B, c->cu, c->cu};
    c->opts.mask.causal = 1;
    /* the padded op: causal, and each sequence's keys by its length (padding queries still run) */
    c->popts.mask.causal = 1;
    c->popts.mask.valid_lens_host = vl_lens;
    c->popts.mask.lens_ndim = 1;
    c->popts.mask.lens_dims[0] = VL_B;
}

/* Varlen against the padded dense op that computes the same rows (and the padding's); GFLOP =
 * sum_b 4 H L_b^2 d, the work of the real rows, for both. */
static void bench_varlen(bench *b)
{
    vl_case c;
    vl_make(b, &c);
    char name[64];
    snprintf(name, sizeof name, "B%d H%d d%d causal, lengths 64-2048", VL_B, VL_H, VL_D);
    double gflop = 0;
    for (int s = 0; s < VL_B; s++)
        gflop += 4e-9 * VL_H * (double)vl_lens[s] * vl_lens[s] * VL_D;
    const char *impls[2] = {"clattn varlen (packed)", "clattn fused, padded to 2048"};
    bench_run_fn fns[2] = {vl_run, vl_run_padded};
    const clattn_tensor *outs[2] = {&c.out, &c.pout};
    for (int i = 0; i < 2; i++) {
        double err = vl_error(b, &c, fns[i], outs[i], i);
        if (err > ATT_TOL)
            bench_check_fail(b, name, impls[i], err, ATT_TOL);
        else
            bench_record(b, name, impls[i], i > 0, gflop, "GFLOP/s",
                         bench_time(b, fns[i], &c, 1), err);
    }
    clattn_tensor *ts[] = {&c.q, &c.k, &c.v, &c.out, &c.pq, &c.pk, &c.pv, &c.pout};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        clattn_tensor_release(ts[i]);
    free(c.hq);
    free(c.hk);
    free(c.hv);
}

/* ---- multi-head forward: batch 4, 8 heads, 512 x 512, hidden 512, biases (as torch's default) ---- */

#define MHA_B 4
#define MHA_H 8
#define MHA_N 512
#define MHA_E 512

typedef struct {
    clattn_tensor x, out, weights, W[4], bias[4];
    clattn_mha_weights w;
    float *hx, *hW[4], *hb[4];
} mha_case;

static int mha_run_fused(bench *b, void *arg)
{
    mha_case *m = arg;
    return clattn_multihead_attention(b->ctx, &m->x, &m->x, &m->x, &m->w, NULL, &m->out, NULL) !=
           CLATTN_SUCCESS;
}

static int mha_run_unfused(bench *b, void *arg)
{
    mha_case *m = arg;
    return clattn_multihead_attention(b->ctx, &m->x, &m->x, &m->x, &m->w, NULL, &m->out,
                                      &m->weights) != CLATTN_SUCCESS;
}

/* Forward and backward, every gradient (self-attention: queries, keys and values are one x). */
typedef struct {
    mha_case *m;
    clattn_tensor dout, g[11], saved;
    int save; /* the forward saves its projections, output and LSE for the backward */
} mha_train;

static int mha_run_train(bench *b, void *arg)
{
    mha_train *t = arg;
    clattn_mha_grads g = {&t->g[0], &t->g[1], &t->g[2], &t->g[3], &t->g[4], &t->g[5], &t->g[6],
                          &t->g[7], &t->g[8], &t->g[9], &t->g[10], NULL};
    clattn_attention_opts o;
    memset(&o, 0, sizeof o);
    o.saved = t->save ? &t->saved : NULL;
    return clattn_multihead_attention(b->ctx, &t->m->x, &t->m->x, &t->m->x, &t->m->w, &o,
                                      &t->m->out, NULL) != CLATTN_SUCCESS ||
           clattn_multihead_attention_backward(b->ctx, &t->m->x, &t->m->x, &t->m->x, &t->m->w,
                                               &o, &t->dout, &g) != CLATTN_SUCCESS;
}

/* db_o against the double sum of dout over every row, and every gradient finite. */
static double mha_train_error(bench *b, mha_train *t, const float *hdo)
{
    const size_t rows = (size_t)MHA_B * MHA_N, E = MHA_E;
    double worst = 0;
    for (int i = 0; i < 11; i++)
        ok(b, clattn_tensor_fill(b->ctx, &t->g[i], NAN), "poison a gradient");
    ok(b, mha_run_train(b, t) ? CLATTN_ERROR_OPENCL : CLATTN_SUCCESS, "forward + backward");
    for (int i = 0; i < 11; i++) {
        size_t n = clattn_tensor_numel(&t->g[i]);
        float *h = malloc(n * sizeof *h);
        if (!h)
            die("out of memory");
        ok(b, clattn_tensor_read_blocking(b->ctx, &t->g[i], h), "read a gradient");
        for (size_t j = 0; j < n; j++)
            if (!isfinite(h[j]))
                worst = INFINITY;
        for (size_t c = 0; i == 10 && c < E; c++) { /* db_o */
            double sum = 0, mag = 0;
            for (size_t r = 0; r < rows; r++) {
                sum += hdo[r * E + c];
                mag += fabs(hdo[r * E + c]);
            }
            worst = fmax(worst, fabs(h[c] - sum) / mag);
        }
        free(h);
    }
    return worst;
}

static void mha_train_record(bench *b, mha_case *m, double gflop)
{
    size_t xd[3] = {MHA_B, MHA_N, MHA_E}, wd[2] = {MHA_E, MHA_E}, bd[1] = {MHA_E};
    size_t nx = (size_t)MHA_B * MHA_N * MHA_E;
    mha_train t;
    float *hdo = malloc(nx * sizeof *hdo);
    if (!hdo)
        die("out of memory");
    fill(b, hdo, nx);
    t.m = m;
    ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, 3, xd, hdo, &t.dout), "create dout");
    for (int i = 0; i < 11; i++)
        ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, i < 3 ? 3 : i < 7 ? 2 : 1,
                                   i < 3 ? xd : i < 7 ? wd : bd, NULL, &t.g[i]), "create grad");
    size_t ns = clattn_mha_saved_numel(&m->x, &m->x, &m->w);
    ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, 1, &ns, NULL, &t.saved), "create saved");
    const char *name = "B4 H8 N512 E512 fwd+bwd";
    /* the backward's flops: 2x the projections' and the attention's own 2.5x */
    double fb = gflop + 1e-9 * (16.0 * MHA_B * MHA_N * (double)MHA_E * MHA_E +
                                10.0 * MHA_B * (double)MHA_N * MHA_N * MHA_E);
    static const char *const what[2] = {"clattn forward + backward (recomputed)",
                                        "clattn forward + backward (opts.saved)"};
    for (t.save = 1; t.save >= 0; t.save--) {
        double err = mha_train_error(b, &t, hdo);
        if (err > 1e-5)
            bench_check_fail(b, name, what[t.save], err, 1e-5);
        else
            bench_record(b, name, what[t.save], 0, fb, "GFLOP/s",
                         bench_time(b, mha_run_train, &t, 1), err);
    }
    clattn_tensor_release(&t.saved);
    clattn_tensor_release(&t.dout);
    for (int i = 0; i < 11; i++)
        clattn_tensor_release(&t.g[i]);
    free(hdo);
}

/* y (E) = W (E, E) x + bias, in double */
static void mha_linear(const float *W, const float *bias, const double *x, double *y)
{
    for (size_t o = 0; o < MHA_E; o++) {
        double s = bias[o];
        for (size_t i = 0; i < MHA_E; i++)
            s += (double)W[o * MHA_E + i] * x[i];
        y[o] = s;
    }
}

/* Worst scaled error over a few sampled query rows per batch, in double (PyTorch's math). */
static double mha_error(bench *b, mha_case *m, bench_run_fn fn)
{
    const size_t N = MHA_N, E = MHA_E, dh = E / MHA_H;
    float *out = malloc((size_t)MHA_B * N * E * sizeof *out);
    double *kp = malloc(N * E * sizeof *kp), *vp = malloc(N * E * sizeof *vp);
    double x[MHA_E], qp[MHA_E], o[MHA_E], y[MHA_E], w[MHA_N], worst = 0;
    if (!out || !kp || !vp)
        die("out of memory");
    ok(b, clattn_tensor_fill(b->ctx, &m->out, NAN), "poison out");
    if (fn(b, m) != 0)
        die("%s: run failed: %s", b->section, clattn_last_error(b->ctx));
    ok(b, clattn_tensor_read_blocking(b->ctx, &m->out, out), "read out");
    for (size_t bb = 0; bb < MHA_B; bb++) {
        for (size_t t = 0; t < N; t++) {
            for (size_t i = 0; i < E; i++)
                x[i] = m->hx[(bb * N + t) * E + i];
            mha_linear(m->hW[1], m->hb[1], x, kp + t * E);
            mha_linear(m->hW[2], m->hb[2], x, vp + t * E);
        }
        for (int s = 0; s < 4; s++) {
            size_t t = (size_t)uniform(b, 0, (double)N);
            for (size_t i = 0; i < E; i++)
                x[i] = m->hx[(bb * N + t) * E + i];
            mha_linear(m->hW[0], m->hb[0], x, qp);
            for (size_t h = 0; h < MHA_H; h++) {
                double mx = -INFINITY, sum = 0;
                for (size_t j = 0; j < N; j++) {
                    double dot = 0;
                    for (size_t e = 0; e < dh; e++)
                        dot += qp[h * dh + e] * kp[j * E + h * dh + e];
                    w[j] = dot / sqrt((double)dh);
                    mx = fmax(mx, w[j]);
                }
                for (size_t j = 0; j < N; j++)
                    sum += (w[j] = exp(w[j] - mx));
                for (size_t e = 0; e < dh; e++) {
                    o[h * dh + e] = 0;
                    for (size_t j = 0; j < N; j++)
                        o[h * dh + e] += w[j] / sum * vp[j * E + h * dh + e];
                }
            }
            mha_linear(m->hW[3], m->hb[3], o, y);
            for (size_t i = 0; i < E; i++) {
                double mag = fabs(m->hb[3][i]);
                for (size_t j = 0; j < E; j++)
                    mag += fabs((double)m->hW[3][i * E + j] * o[j]);
                double got = out[(bb * N + t) * E + i];
                double err = isfinite(got) ? fabs(got - y[i]) / fmax(fabs(y[i]), mag) : INFINITY;
                worst = err > worst ? err : worst;
            }
        }
    }
    free(out);
    free(kp);
    free(vp);
    return worst;
}

static void bench_mha(bench *b)
{
    /* a fresh context over the same queue, so its scratch shows this forward's own footprint */
    clattn_context *outer = b->ctx, *fresh = NULL;
    ok(b, clattn_context_wrap(&fresh, clattn_context_cl(outer), clattn_context_device(outer),
                              clattn_context_queue(outer), NULL), "wrap a fresh context");
    b->ctx = fresh;
    mha_case m;
    size_t xd[3] = {MHA_B, MHA_N, MHA_E}, wd[2] = {MHA_E, MHA_E}, bd[1] = {MHA_E};
    size_t ad[4] = {MHA_B, MHA_H, MHA_N, MHA_N}, nx = (size_t)MHA_B * MHA_N * MHA_E;
    const char *name = "B4 H8 N512 E512";
    memset(&m, 0, sizeof m);
    m.hx = malloc(nx * sizeof(float));
    if (!m.hx)
        die("out of memory");
    fill(b, m.hx, nx);
    ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, 3, xd, m.hx, &m.x), "create x");
    ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, 3, xd, NULL, &m.out), "create out");
    ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, 4, ad, NULL, &m.weights), "create weights");
    for (int i = 0; i < 4; i++) {
        m.hW[i] = malloc((size_t)MHA_E * MHA_E * sizeof(float));
        m.hb[i] = malloc(MHA_E * sizeof(float));
        if (!m.hW[i] || !m.hb[i])
            die("out of memory");
        fill(b, m.hW[i], (size_t)MHA_E * MHA_E);
        fill(b, m.hb[i], MHA_E);
        for (size_t j = 0; j < (size_t)MHA_E * MHA_E; j++)
            m.hW[i][j] *= (float)(1.0 / sqrt((double)MHA_E)); /* nn.Linear's scale */
        ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, 2, wd, m.hW[i], &m.W[i]), "create W");
        ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, 1, bd, m.hb[i], &m.bias[i]), "create b");
    }
    clattn_mha_weights w = {MHA_H, &m.W[0], &m.W[1], &m.W[2], &m.W[3],
                            &m.bias[0], &m.bias[1], &m.bias[2], &m.bias[3], 0};
    m.w = w;
    /* 4 projections of 2 B N E^2 flops each, attention 4 B N^2 E */
    double gflop = 1e-9 * (8.0 * MHA_B * MHA_N * (double)MHA_E * MHA_E +
                           4.0 * MHA_B * (double)MHA_N * MHA_N * MHA_E);
    double err = mha_error(b, &m, mha_run_fused);
    if (err > ATT_TOL)
        bench_check_fail(b, name, "clattn fused", err, ATT_TOL);
    else
        bench_record(b, name, "clattn fused", 0, gflop, "GFLOP/s", bench_time(b, mha_run_fused, &m, 1), err);
    size_t scratch = clattn_context_scratch_bytes(b->ctx);
    err = mha_error(b, &m, mha_run_unfused);
    if (err > ATT_TOL)
        bench_check_fail(b, name, "clattn unfused (weights)", err, ATT_TOL);
    else
        bench_record(b, name, "clattn unfused (weights)", 1, gflop, "GFLOP/s",
                     bench_time(b, mha_run_unfused, &m, 1), err);
    if (!b->json)
        fprintf(stderr, "  %-8s device memory: inputs, weights and output %.1f MiB; scratch held by "
                        "the context after the fused forward %.1f MiB, after the unfused %.1f MiB\n",
                b->section, (2.0 * nx + 4.0 * (MHA_E * MHA_E + MHA_E)) * 4 / 1048576.0,
                scratch / 1048576.0, clattn_context_scratch_bytes(b->ctx) / 1048576.0);
    mha_train_record(b, &m, gflop);
    clattn_tensor_release(&m.x);
    clattn_tensor_release(&m.out);
    clattn_tensor_release(&m.weights);
    for (int i = 0; i < 4; i++) {
        clattn_tensor_release(&m.W[i]);
        clattn_tensor_release(&m.bias[i]);
        free(m.hW[i]);
        free(m.hb[i]);
    }
    free(m.hx);
    clattn_context_destroy(&fresh);
    b->ctx = outer;
}

/* ---- additive attention: batch 4, 256 queries, 256 keys, hidden 64, sizes 64, valid lengths ---- */

#define ADD_B 4
#define ADD_N 256
#define ADD_H 64

typedef struct {
    clattn_tensor q, k, v, out, Wq, Wk, wv;
    clattn_additive_weights w;
    clattn_attention_opts opts;
    float *hq, *hk, *hv, *hWq, *hWk, *hwv;
    int lens[ADD_B];
} add_case;

static int add_run(bench *b, void *arg)
{
    add_case *a = arg;
    return clattn_additive_attention(b->ctx, &a->q, &a->k, &a->v, &a->w, &a->opts, &a->out, NULL) !=
           CLATTN_SUCCESS;
}

static double add_error(bench *b, add_case *a)
{
    const size_t N = ADD_N, H = ADD_H, n = (size_t)ADD_B * N * H;
    float *out = malloc(n * sizeof *out);
    double *qp = malloc(n * sizeof *qp), *kp = malloc(n * sizeof *kp), w[ADD_N], worst = 0;
    if (!out || !qp || !kp)
        die("out of memory");
    ok(b, clattn_tensor_fill(b->ctx, &a->out, NAN), "poison out");
    ok(b, clattn_additive_attention(b->ctx, &a->q, &a->k, &a->v, &a->w, &a->opts, &a->out, NULL),
       "clattn_additive_attention");
    ok(b, clattn_tensor_read_blocking(b->ctx, &a->out, out), "read out");
    for (size_t r = 0; r < ADD_B * N; r++)
        for (size_t o = 0; o < H; o++) {
            double sq = 0, sk = 0;
            for (size_t i = 0; i < H; i++) {
                sq += (double)a->hWq[o * H + i] * a->hq[r * H + i];
                sk += (double)a->hWk[o * H + i] * a->hk[r * H + i];
            }
            qp[r * H + o] = sq;
            kp[r * H + o] = sk;
        }
    for (size_t bb = 0; bb < ADD_B; bb++)
        for (size_t i = 0; i < N; i++) {
            for (size_t j = 0; j < N; j++) {
                double s = 0;
                for (size_t h = 0; h < H; h++)
                    s += a->hwv[h] * tanh(qp[(bb * N + i) * H + h] + kp[(bb * N + j) * H + h]);
                w[j] = (int)j < a->lens[bb] ? s : CLATTN_DEFAULT_FILL;
            }
            double err = softmax_row_error(w, N, a->hv + bb * N * H, H, out + (bb * N + i) * H);
            worst = err > worst ? err : worst;
        }
    free(out);
    free(qp);
    free(kp);
    return worst;
}

static void bench_additive(bench *b)
{
    add_case a;
    size_t d3[3] = {ADD_B, ADD_N, ADD_H}, w2[2] = {ADD_H, ADD_H}, v2[2] = {1, ADD_H};
    size_t n = (size_t)ADD_B * ADD_N * ADD_H;
    const char *name = "B4 Q256 K256 h64";
    memset(&a, 0, sizeof a);
    float **host[] = {&a.hq, &a.hk, &a.hv, &a.hWq, &a.hWk, &a.hwv};
    size_t sizes[] = {n, n, n, ADD_H * ADD_H, ADD_H * ADD_H, ADD_H};
    for (int i = 0; i < 6; i++) {
        *host[i] = malloc(sizes[i] * sizeof(float));
        if (!*host[i])
            die("out of memory");
        fill(b, *host[i], sizes[i]);
    }
    for (int i = 0; i < ADD_B; i++)
        a.lens[i] = 1 + (int)uniform(b, 0, ADD_N);
    ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, 3, d3, a.hq, &a.q), "create queries");
    ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, 3, d3, a.hk, &a.k), "create keys");
    ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, 3, d3, a.hv, &a.v), "create values");
    ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, 3, d3, NULL, &a.out), "create out");
    ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, 2, w2, a.hWq, &a.Wq), "create W_q");
    ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, 2, w2, a.hWk, &a.Wk), "create W_k");
    ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, 2, v2, a.hwv, &a.wv), "create w_v");
    a.w.W_q = &a.Wq;
    a.w.W_k = &a.Wk;
    a.w.w_v = &a.wv;
    a.opts.mask.valid_lens_host = a.lens;
    a.opts.mask.lens_ndim = 1;
    a.opts.mask.lens_dims[0] = ADD_B;
    /* the work that dominates: B Q K h tanh terms; the figure is in millions of them per second */
    double work = 1e-6 * ADD_B * (double)ADD_N * ADD_N * ADD_H;
    double err = add_error(b, &a);
    if (err > ATT_TOL)
        bench_check_fail(b, name, "clattn", err, ATT_TOL);
    else
        bench_record(b, name, "clattn", 0, work, "Mtanh/s", bench_time(b, add_run, &a, 1), err);
    clattn_tensor *ts[] = {&a.q, &a.k, &a.v, &a.out, &a.Wq, &a.Wk, &a.wv};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        clattn_tensor_release(ts[i]);
    for (int i = 0; i < 6; i++)
        free(*host[i]);
}

/* ---- dot-product attention backward: 16 heads, d 64 ---- */

#define BWD_ROWS 8 /* rows of head 0 whose dQ is checked */
#define BWD_KEYS 4 /* keys of head 0 whose dV is checked */

typedef struct {
    att_case a;
    clattn_tensor dout, dq, dk, dv, lse;
    float *hdo;
    int fused; /* the forward's out and LSE given: the fused backward */
} bwd_case;

static int bwd_run(bench *b, void *arg)
{
    bwd_case *c = arg;
    clattn_attention_grads g = {&c->dq, &c->dk, &c->dv, NULL};
    clattn_attention_opts o = c->a.opts;
    o.lse = c->fused ? &c->lse : NULL;
    return clattn_dot_product_attention_backward(b->ctx, &c->a.q, &c->a.k, &c->a.v, &o,
                                                 c->fused ? &c->a.out : NULL, &c->dout, &g) !=
           CLATTN_SUCCESS;
}

/* Row i of head 0's probabilities (n doubles) into p. */
static void bwd_probs(const bwd_case *c, size_t i, double *p)
{
    size_t n = c->a.n, d = c->a.d, lim = c->a.causal ? i + 1 : n;
    double m = -INFINITY, s = 0;
    for (size_t j = 0; j < n; j++) {
        double dot = 0;
        for (size_t e = 0; e < d; e++)
            dot += (double)c->a.hq[i * d + e] * c->a.hk[j * d + e];
        p[j] = j < lim ? dot / sqrt((double)d) : CLATTN_DEFAULT_FILL;
        m = fmax(m, p[j]);
    }
    for (size_t j = 0; j < n; j++)
        s += (p[j] = exp(p[j] - m));
    for (size_t j = 0; j < n; j++)
        p[j] /= s;
}

/* The worst error of dQ on BWD_ROWS rows and dV on BWD_KEYS keys of head 0, each relative to
 * the sum of its terms' magnitudes, against double references. */
static double bwd_error(bench *b, bwd_case *c)
{
    size_t n = c->a.n, d = c->a.d;
    float *dq = malloc(n * d * sizeof *dq), *dv = malloc(n * d * sizeof *dv);
    double *p = malloc(n * sizeof *p), *dp = malloc(n * sizeof *dp), worst = 0;
    double *acc = calloc(BWD_KEYS * d * 2, sizeof *acc);
    size_t keys[BWD_KEYS], row_step = n > BWD_ROWS ? n / BWD_ROWS : 1; /* every row when fewer */
    if (!dq || !dv || !p || !dp || !acc)
        die("out of memory");
    ok(b, clattn_tensor_fill(b->ctx, &c->dq, NAN), "poison dQ");
    ok(b, clattn_tensor_fill(b->ctx, &c->dv, NAN), "poison dV");
    ok(b, bwd_run(b, c) ? CLATTN_ERROR_OPENCL : CLATTN_SUCCESS, "backward");
    clattn_tensor h0 = {c->dq.buf, 0, 1, {n * d}, CLATTN_FLOAT32};
    ok(b, clattn_tensor_read_blocking(b->ctx, &h0, dq), "read dQ");
    h0.buf = c->dv.buf;
    ok(b, clattn_tensor_read_blocking(b->ctx, &h0, dv), "read dV");
    for (int t = 0; t < BWD_KEYS; t++)
        keys[t] = (size_t)uniform(b, 0, (double)n);
    for (size_t i = 0; i < n; i++) {
        bwd_probs(c, i, p);
        const float *o = c->hdo + i * d;
        for (int t = 0; t < BWD_KEYS; t++) /* dV[j] = sum_i p_ij dout_i */
            for (size_t e = 0; e < d; e++) {
                acc[(t * d + e) * 2] += p[keys[t]] * o[e];
                acc[(t * d + e) * 2 + 1] += fabs(p[keys[t]] * o[e]);
            }
        if (i % row_step != 0)
            continue;
        double D = 0; /* dQ_i = scale sum_j p_j (dout_i . v_j - D) k_j */
        for (size_t j = 0; j < n; j++) {
            dp[j] = 0;
            for (size_t e = 0; e < d; e++)
                dp[j] += (double)o[e] * c->a.hv[j * d + e];
            D += p[j] * dp[j];
        }
        for (size_t e = 0; e < d; e++) {
            double want = 0, mag = 0;
            for (size_t j = 0; j < n; j++) {
                double ds = p[j] * (dp[j] - D) / sqrt((double)d);
                want += ds * c->a.hk[j * d + e];
                mag += fabs(p[j]) * (fabs(dp[j]) + fabs(D)) * fabs(c->a.hk[j * d + e]);
            }
            double err = fabs(dq[i * d + e] - want) / (mag / sqrt((double)d) + 1e-30);
            worst = isfinite(err) ? fmax(worst, err) : INFINITY;
        }
    }
    for (int t = 0; t < BWD_KEYS; t++)
        for (size_t e = 0; e < d; e++) {
            double err = fabs(dv[keys[t] * d + e] - acc[(t * d + e) * 2]) /
                         (acc[(t * d + e) * 2 + 1] + 1e-30);
            worst = isfinite(err) ? fmax(worst, err) : INFINITY;
        }
    free(dq);
    free(dv);
    free(p);
    free(dp);
    free(acc);
    return worst;
}

static void bwd_one(bench *b, size_t heads, size_t n, size_t d, int causal)
{
    bwd_case c;
    char name[48];
    att_make(b, &c.a, heads, 0, n, d, causal, 0);
    size_t total = heads * n * d, dims[3] = {heads, n, d};
    c.hdo = malloc(total * sizeof *c.hdo);
    if (!c.hdo)
        die("out of memory");
    fill(b, c.hdo, total);
    ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, 3, dims, c.hdo, &c.dout), "create dout");
    ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, 3, dims, NULL, &c.dq), "create dQ");
    ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, 3, dims, NULL, &c.dk), "create dK");
    ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, 3, dims, NULL, &c.dv), "create dV");
    ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, 2, dims, NULL, &c.lse), "create lse");
    /* the forward once, saving out and the LSE for the fused backward */
    clattn_attention_opts fo = c.a.opts;
    fo.lse = &c.lse;
    ok(b, clattn_dot_product_attention(b->ctx, &c.a.q, &c.a.k, &c.a.v, &fo, &c.a.out, NULL),
       "forward");
    snprintf(name, sizeof name, "H%zu N%zu d%zu%s", heads, n, d, causal ? " causal" : "");
    /* FlashAttention-2's count: the backward is 2.5x the forward's 4 H N^2 d (dense) */
    double gflop = 10e-9 * (double)heads * (double)n * (double)n * (double)d;
    static const char *const what[2] = {"clattn backward (unfused chain)",
                                        "clattn backward (fused: out and LSE given)"};
    for (c.fused = 1; c.fused >= 0; c.fused--) {
        double err = bwd_error(b, &c);
        if (err > ATT_TOL)
            bench_check_fail(b, name, what[c.fused], err, ATT_TOL);
        else
            bench_record(b, name, what[c.fused], 0, gflop, "GFLOP/s",
                         bench_time(b, bwd_run, &c, 1), err);
    }
    clattn_tensor *ts[] = {&c.dout, &c.dq, &c.dk, &c.dv, &c.lse};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        clattn_tensor_release(ts[i]);
    free(c.hdo);
    att_free(&c.a);
}

static void bench_backward(bench *b)
{
    for (int i = 0; i < b->nattn; i++) {
        bwd_one(b, 16, (size_t)b->attn_n[i], 64, 0);
        bwd_one(b, 16, (size_t)b->attn_n[i], 64, 1);
    }
}

/* ---- the device's FMA peak: a ceiling for the GFLOP/s figures of the same run ---- */

/* PEAK_CHAINS independent float16 FMA chains per work-item, enough to cover the FMA latency times
 * the units of a core (4 cycles x 2 on Zen 4 and Skylake-X); one work-item per group and compute
 * unit, as PoCL runs a group per thread. */
#define PEAK_CHAINS 12
#define PEAK_ITERS 10000000
static const char peak_source[] =
    "__kernel void fma_peak(__global float *out, int iters)\n"
    "{\n"
    "    float16 a[12], b = (float16)(0.9999f), c = (float16)(1e-6f);\n"
    "    for (int j = 0; j < 12; j++)\n"
    "        a[j] = (float16)((float)(get_global_id(0) + j));\n"
    "    for (int i = 0; i < iters; i++) {\n"
    "        #pragma unroll\n"
    "        for (int j = 0; j < 12; j++)\n"
    "            a[j] = fma(a[j], b, c);\n"
    "    }\n"
    "    float16 s = (float16)(0.0f);\n"
    "    for (int j = 0; j < 12; j++)\n"
    "        s += a[j];\n"
    "    out[get_global_id(0)] = s.s0 + s.sf;\n"
    "}\n";

typedef struct {
    cl_kernel k;
    size_t items;
} peak_case;

static int peak_run(bench *b, void *arg)
{
    peak_case *c = arg;
    size_t lws = 1;
    return clEnqueueNDRangeKernel(b->queue, c->k, 1, NULL, &c->items, &lws, 0, NULL, NULL) !=
           CL_SUCCESS;
}

static void bench_peak(bench *b)
{
    cl_int err;
    cl_context cl = clattn_context_cl(b->ctx);
    cl_device_id dev = clattn_context_device(b->ctx);
    const char *src = peak_source;
    cl_uint cu = 1;
    clGetDeviceInfo(dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cu, &cu, NULL);
    cl_program prog = clCreateProgramWithSource(cl, 1, &src, NULL, &err);
    if (err != CL_SUCCESS || clBuildProgram(prog, 1, &dev, "-cl-std=CL1.2", NULL, NULL) !=
                                 CL_SUCCESS)
        die("peak: the FMA kernel does not build");
    peak_case c = {clCreateKernel(prog, "fma_peak", &err), cu};
    cl_mem out = clCreateBuffer(cl, CL_MEM_READ_WRITE, 4 * (size_t)cu, NULL, &err);
    cl_int iters = PEAK_ITERS;
    if (!c.k || !out || clSetKernelArg(c.k, 0, sizeof out, &out) != CL_SUCCESS ||
        clSetKernelArg(c.k, 1, sizeof iters, &iters) != CL_SUCCESS)
        die("peak: cannot set up the FMA kernel");
    char name[48];
    snprintf(name, sizeof name, "%u items x %d chains", cu, PEAK_CHAINS);
    double flop = 2.0 * 16 * PEAK_CHAINS * (double)PEAK_ITERS * cu;
    bench_record(b, name, "float16 FMA loop", 0, 1e-9 * flop, "GFLOP/s",
                 bench_time(b, peak_run, &c, 1), 0);
    clReleaseMemObject(out);
    clReleaseKernel(c.k);
    clReleaseProgram(prog);
}

/* ---- d2l's MaskedSoftmaxCELoss, forward and backward ---- */

#define LOSS_B 64
#define LOSS_T 32
#define LOSS_V 10000
#define LOSS_CHECK_ROWS 64 /* positions checked against the double reference */

typedef struct {
    clattn_tensor x, lab, len, loss, lse, dl, dx;
    size_t bytes; /* the logits read twice, their gradient written once */
} loss_case;

static int loss_run(bench *b, void *arg)
{
    loss_case *c = arg;
    return clattn_masked_softmax_ce_loss(b->ctx, &c->x, &c->lab, &c->len, &c->loss, &c->lse) !=
               CLATTN_SUCCESS ||
           clattn_masked_softmax_ce_loss_backward(b->ctx, &c->x, &c->lab, &c->len, &c->lse,
                                                  &c->dl, &c->dx) != CLATTN_SUCCESS;
}

static int loss_run_copy(bench *b, void *arg)
{
    loss_case *c = arg; /* the logits into the gradient's buffer: one read, one write */
    return clEnqueueCopyBuffer(b->queue, c->x.buf, c->dx.buf, 0, 0, c->bytes / 3, 0, NULL,
                               NULL) != CL_SUCCESS;
}

/* The worst error of the losses and of the first LOSS_CHECK_ROWS positions' gradients against
 * double references, each relative to its magnitude (|lse| + |x_label| per loss term, the row's
 * dloss w / T per gradient element). */
static double loss_error(bench *b, loss_case *c, const float *x, const int *lab, const int *len,
                         const float *dl)
{
    const size_t T = LOSS_T, V = LOSS_V;
    float *loss = malloc(LOSS_B * sizeof *loss), *dx = malloc(LOSS_CHECK_ROWS * V * sizeof *dx);
    double worst = 0;
    if (!loss || !dx)
        die("out of memory");
    ok(b, clattn_tensor_fill(b->ctx, &c->dx, NAN), "poison dlogits");
    ok(b, loss_run(b, c) ? CLATTN_ERROR_OPENCL : CLATTN_SUCCESS, "loss");
    ok(b, clattn_tensor_read_blocking(b->ctx, &c->loss, loss), "read loss");
    ok(b, clattn_tensor_read_blocking(b->ctx, &(clattn_tensor){c->dx.buf, 0, 1,
                                                                {LOSS_CHECK_ROWS * V},
                                                                CLATTN_FLOAT32}, dx),
       "read dlogits");
    for (size_t bb = 0; bb < LOSS_B; bb++) {
        double sum = 0, mag = 0;
        for (size_t t = 0; t < T; t++) {
            const float *xr = x + (bb * T + t) * V;
            double m = -INFINITY, s = 0;
            for (size_t v = 0; v < V; v++)
                m = fmax(m, xr[v]);
            for (size_t v = 0; v < V; v++)
                s += exp(xr[v] - m);
            double lse = m + log(s), w = (int)t < len[bb] ? 1.0 : 0.0;
            int l = lab[bb * T + t];
            sum += w * (lse - xr[l]);
            mag += fabs(lse) + fabs(xr[l]);
            size_t r = bb * T + t;
            for (size_t v = 0; r < LOSS_CHECK_ROWS && v < V; v++) {
                double c0 = dl[bb] * w / T, want = c0 * (exp(xr[v] - lse) - (v == (size_t)l));
                double e = fabs(dx[r * V + v] - want) / (fabs(c0) + 1e-30);
                worst = isfinite(e) ? fmax(worst, e) : INFINITY;
            }
        }
        double e = fabs(loss[bb] - sum / T) / (mag / T);
        worst = isfinite(e) ? fmax(worst, e) : INFINITY;
    }
    free(loss);
    free(dx);
    return worst;
}

static void bench_loss(bench *b)
{
    const size_t B = LOSS_B, T = LOSS_T, V = LOSS_V, n = B * T * V;
    loss_case c;
    float *x = malloc(n * sizeof *x), *dl = malloc(B * sizeof *dl);
    int *lab = malloc(B * T * sizeof *lab), *len = malloc(B * sizeof *len);
    if (!x || !dl || !lab || !len)
        die("out of memory");
    for (size_t i = 0; i < n; i++)
        x[i] = (float)uniform(b, -4, 4);
    for (size_t i = 0; i < B * T; i++)
        lab[i] = (int)uniform(b, 0, (double)V - 1e-9);
    for (size_t i = 0; i < B; i++) {
        len[i] = (int)uniform(b, 1, (double)T + 1 - 1e-9);
        dl[i] = 1.0f / (float)B; /* the gradient of the mean loss over the batch */
    }
    memset(&c, 0, sizeof c);
    ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, 3, (size_t[]){B, T, V}, x, &c.x), "logits");
    ok(b, clattn_tensor_create(b->ctx, CLATTN_INT32, 2, (size_t[]){B, T}, lab, &c.lab), "labels");
    ok(b, clattn_tensor_create(b->ctx, CLATTN_INT32, 1, (size_t[]){B}, len, &c.len), "lens");
    ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, 1, (size_t[]){B}, NULL, &c.loss), "loss");
    ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, 2, (size_t[]){B, T}, NULL, &c.lse), "lse");
    ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, 1, (size_t[]){B}, dl, &c.dl), "dloss");
    ok(b, clattn_tensor_create(b->ctx, CLATTN_FLOAT32, 3, (size_t[]){B, T, V}, NULL, &c.dx),
       "dlogits");
    c.bytes = 3 * n * sizeof(float);
    const char *name = "B64 T32 V10000";
    double err = loss_error(b, &c, x, lab, len, dl);
    if (err > 1e-4) {
        bench_check_fail(b, name, "clattn forward + backward", err, 1e-4);
    } else {
        bench_record_pair(b, name, "clattn forward + backward", loss_run, &c,
                          "clEnqueueCopyBuffer (logits)", loss_run_copy, &c,
                          1e-9 * (double)c.bytes, "GB/s", err);
    }
    clattn_tensor *ts[] = {&c.x, &c.lab, &c.len, &c.loss, &c.lse, &c.dl, &c.dx};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        clattn_tensor_release(ts[i]);
    free(x);
    free(dl);
    free(lab);
    free(len);
}

/* ---- sections, options, output ---- */

typedef struct {
    const char *name, *what;
    void (*run)(bench *b);
} bench_section;

static const bench_section sections[] = {
    {"gemm", "C = A B (float32, row-major; float16 and bfloat16 A and B into float32 C) vs CLBlast on "
             "the same device and cblas on the host",
     bench_gemm},
    {"softmax", "masked softmax, ROWS x KEYS from --softmax, random valid lengths, float32, "
                "float16 and bfloat16 scores and output, GB/s read + written",
     bench_softmax},
    {"attention", "scaled dot-product, 16 heads, d from --attn-d, N from --attn-n, plain and "
                  "causal: fused vs unfused vs the naive chain of public ops, GFLOP/s = "
                  "4 H N^2 d / time",
     bench_attention},
    {"gqa", "grouped-query prefill, batch 1, 32 query heads over 8 K/V heads, d 128, N from "
            "--attn-n, causal and plain: fused vs the same kernel with 32 K/V heads",
     bench_gqa},
    {"window", "sliding window, 8 heads, d 64, N 8192, causal: a window of 512 keys vs full causal "
               "(GFLOP/s of the dense count)",
     bench_window},
    {"lse", "the fused kernel's LSE output (16 heads, N 1024, d 64) vs none, and merging two "
            "(16, 1024, 64) partial results, GB/s read + written vs a device copy",
     bench_lse},
    {"bias", "the fused kernel with a float bias (N, N) shared by 16 heads, and with ALiBi, N 1024, "
     "d 64, vs none",
     bench_bias},
    {"decode", "KV-cache decoding, one new row, 32 query heads over 8 K/V heads, d 128, B 1 and 8, "
               "K 4096 and 32768 (full caches), and B 1 K 4096 with 8 query heads (Hq8, one per "
               "K/V head): GB/s of the cache read once vs a device copy, and over float16 and "
               "bfloat16 caches (GB/s of the float32 bytes: the speedup)",
     bench_decode},
    {"varlen", "packed variable-length batch, 8 sequences of 64-2048 tokens, 16 heads, d 64, "
     "causal: varlen vs the padded fused op", bench_varlen},
    {"mha", "multi-head forward, batch 4, 8 heads, 512 x 512, hidden 512, biases: fused vs unfused; "
            "forward + backward (every gradient)",
     bench_mha},
    {"additive", "additive attention, batch 4, 256 x 256, hidden 64, sizes 64, valid lengths",
     bench_additive},
    {"peak", "the device's FMA peak: independent float16 FMA chains, one work-item per compute "
             "unit (the ceiling for GFLOP/s figures of the same run)",
     bench_peak},
    {"backward", "dot-product attention backward (dQ, dK, dV), 16 heads, d 64, N from --attn-n, "
                 "plain and causal: GFLOP/s = 10 H N^2 d / time (FlashAttention-2's count)",
     bench_backward},
    {"loss", "d2l's MaskedSoftmaxCELoss forward + backward, B 64, T 32, V 10000, random valid "
             "lengths: GB/s of the logits read twice and their gradient written once, vs a copy",
     bench_loss},
};
#define NSECTIONS (sizeof sections / sizeof sections[0])

static int selected(const bench *b, const char *name)
{
    if (!b->only)
        return 1;
    size_t n = strlen(name);
    for (const char *s = b->only; *s;) {
        const char *c = strchr(s, ',');
        size_t len = c ? (size_t)(c - s) : strlen(s);
        if (len == n && strncmp(s, name, n) == 0)
            return 1;
        s += len + (c != NULL);
    }
    return 0;
}

/* One dimension of --sizes at s, its end in *end; 0 unless it is 1-MAX_DIM in decimal digits
 * (strtoul alone would take "-1" as ULONG_MAX). */
static size_t parse_dim(const char *s, char **end)
{
    *end = (char *)s;
    if (!isdigit((unsigned char)*s))
        return 0;
    errno = 0;
    unsigned long v = strtoul(s, end, 10);
    return errno || v > MAX_DIM ? 0 : (size_t)v;
}

static void parse_sizes(bench *b, const char *arg)
{
    b->nsizes = 0;
    if (!*arg)
        die("--sizes: '': expected N or MxNxK (each 1-%d), comma-separated", MAX_DIM);
    for (const char *s = arg; *s;) {
        char *end;
        bench_size z;
        if (b->nsizes == MAX_SIZES)
            die("--sizes: at most %d sizes", MAX_SIZES);
        z.m = z.n = z.k = parse_dim(s, &end);
        if (z.m && *end == 'x') {
            z.n = parse_dim(end + 1, &end);
            z.k = z.n && *end == 'x' ? parse_dim(end + 1, &end) : 0;
        }
        if (!z.m || !z.n || !z.k || (*end && *end != ','))
            die("--sizes: '%s': expected N or MxNxK (each 1-%d), comma-separated", arg, MAX_DIM);
        b->sizes[b->nsizes++] = z;
        s = *end ? end + 1 : end;
    }
}

static void parse_trans(bench *b, const char *arg)
{
    b->ntrans = 0;
    if (!*arg)
        die("--trans: '': expected up to four of NN, NT, TN, TT, comma-separated");
    for (const char *s = arg; *s;) {
        if (b->ntrans == 4 || (s[0] != 'N' && s[0] != 'T') || (s[1] != 'N' && s[1] != 'T') ||
            (s[2] && s[2] != ','))
            die("--trans: '%s': expected up to four of NN, NT, TN, TT, comma-separated", arg);
        b->trans[b->ntrans++] = (s[0] == 'T') | (s[1] == 'T') << 1;
        s += s[2] ? 3 : 2;
    }
}

/* A comma-separated list of integers in [1, hi] for option opt (what: their name) into out. */
static void parse_ints(const char *opt, const char *arg, long hi, const char *what, int *out,
                       int *n)
{
    *n = 0;
    if (!*arg)
        die("%s: '': expected %s 1-%ld, comma-separated", opt, what, hi);
    for (const char *s = arg; *s;) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > hi || (*end && *end != ','))
            die("%s: '%s': expected %s 1-%ld, comma-separated", opt, arg, what, hi);
        if (*n == MAX_SIZES)
            die("%s: at most %d %s", opt, MAX_SIZES, what);
        out[(*n)++] = (int)v;
        s = *end ? end + 1 : end;
    }
}

static void parse_attn_n(bench *b, const char *arg)
{
    parse_ints("--attn-n", arg, 65536, "lengths", b->attn_n, &b->nattn);
}

static void parse_attn_d(bench *b, const char *arg)
{
    parse_ints("--attn-d", arg, 256, "head sizes", b->attn_d, &b->nattd);
}

static void parse_softmax(bench *b, const char *arg)
{
    b->nsoftmax = 0;
    if (!*arg)
        die("--softmax: '': expected ROWSxKEYS (rows a multiple of 64), comma-separated");
    for (const char *s = arg; *s;) {
        char *end, *end2 = NULL;
        long r = strtol(s, &end, 10), k = *end == 'x' ? strtol(end + 1, &end2, 10) : 0;
        if (*end != 'x' || end2 == end + 1 || r < 64 || r % 64 || r > 1 << 20 || k < 1 ||
            k > 1 << 20 || (*end2 && *end2 != ','))
            die("--softmax: '%s': expected ROWSxKEYS (rows a multiple of 64), comma-separated",
                arg);
        if (b->nsoftmax == MAX_SIZES)
            die("--softmax: at most %d shapes", MAX_SIZES);
        b->softmax[b->nsoftmax].m = (size_t)r;
        b->softmax[b->nsoftmax++].n = (size_t)k;
        s = *end2 ? end2 + 1 : end2;
    }
}

static void usage(void)
{
    printf("usage: clattn-bench [options]\n"
           "  --only LIST        sections to run, comma-separated (default: all)\n"
           "  --sizes LIST       GEMM sizes: N (square) or MxNxK, comma-separated (1024,2048)\n"
           "  --attn-n LIST      attention sequence lengths, comma-separated (1024,2048)\n"
           "  --attn-d LIST      the attention section's head sizes, comma-separated (64)\n"
           "  --softmax LIST     masked softmax shapes ROWSxKEYS, comma-separated (4096x1024)\n"
           "  --trans LIST       GEMM transposes of A and B: NN, NT, TN, TT, comma-separated (NN)\n"
           "  --reps N           timed runs per figure, the median is reported (15)\n"
           "  --warmup N         untimed runs before timing (2)\n"
           "  --max-time S       stop timing a figure after S seconds, at least 3 runs (5)\n"
           "  --blas-threads N   host BLAS threads (default: the OpenCL device's compute units\n"
           "                     when it is a CPU, else the online CPUs)\n"
           "  --device SPEC      as CLATTN_DEVICE\n"
           "  --seed N           input seed (1)\n"
           "  --json             machine-readable results on stdout\n"
           "  --list             list the sections\n"
           "sections:\n");
    for (size_t i = 0; i < NSECTIONS; i++)
        printf("  %-10s %s\n", sections[i].name, sections[i].what);
}

static void json_string(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            printf("\\u%04x", *s);
        else
            putchar(*s);
    }
    putchar('"');
}

static void print_json(const bench *b, int argc, char **argv)
{
    struct utsname u;
    uname(&u);
    printf("{\n  \"tool\": \"clattn-bench\",\n  \"clattn_version\": ");
    json_string(clattn_version());
    printf(",\n  \"command\": ");
    {
        char cmd[2048] = "";
        size_t used = 0;
        for (int i = 0; i < argc && used < sizeof cmd; i++)
            used += (size_t)snprintf(cmd + used, sizeof cmd - used, "%s%s", i ? " " : "", argv[i]);
        json_string(cmd);
    }
    printf(",\n  \"device\": ");
    json_string(clattn_context_description(b->ctx));
    printf(",\n  \"host\": ");
    {
        char host[512];
        snprintf(host, sizeof host, "%s %s %s, %ld online CPUs", u.sysname, u.release, u.machine,
                 sysconf(_SC_NPROCESSORS_ONLN));
        json_string(host);
    }
    printf(",\n  \"blas_threads\": %d,\n  \"reps\": %d,\n  \"warmup\": %d,\n  \"results\": [",
           b->blas_threads, b->reps, b->warmup);
    for (int i = 0; i < b->nrows; i++) {
        const bench_row *r = &b->rows[i];
        printf("%s\n    {\"section\": ", i ? "," : "");
        json_string(r->section);
        printf(", \"case\": ");
        json_string(r->name);
        printf(", \"impl\": ");
        json_string(r->impl);
        printf(", \"value\": %.4g, \"unit\": ", r->value);
        json_string(r->unit);
        printf(", \"median_ms\": %.6g, \"reps\": %d, \"check_error\": %.3g", 1e3 * r->median_s,
               r->reps, r->err);
        if (r->ratio > 0)
            printf(", \"clattn_ratio\": %.4g", r->ratio);
        printf("}");
    }
    printf("\n  ],\n  \"failures\": %d\n}\n", b->failures);
}

static void print_table(const bench *b)
{
    printf("| section | case | implementation | median ms | value | unit | clattn / this |\n");
    printf("|---|---|---|---:|---:|---|---:|\n");
    for (int i = 0; i < b->nrows; i++) {
        const bench_row *r = &b->rows[i];
        printf("| %s | %s | %s | %.3f | %.1f | %s | ", r->section, r->name, r->impl,
               1e3 * r->median_s, r->value, r->unit);
        if (r->ratio > 0)
            printf("%.2fx |\n", r->ratio);
        else
            printf("|\n");
    }
}

static int int_arg(const char *opt, const char *v, int lo)
{
    char *end;
    long x = strtol(v, &end, 10);
    if (!isdigit((unsigned char)*v) || *end || x < lo || x > 1000000)
        die("%s: '%s': expected an integer %d-1000000", opt, v, lo);
    return (int)x;
}

int main(int argc, char **argv)
{
    static bench b;
    clattn_params params;
    memset(&params, 0, sizeof params);
    b.reps = 15;
    b.warmup = 2;
    b.max_time = 5;
    b.rng = 1;
    parse_sizes(&b, "1024,2048");
    parse_attn_n(&b, "1024,2048");
    parse_attn_d(&b, "64");
    parse_softmax(&b, "4096x1024");
    parse_trans(&b, "NN");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json")) {
            b.json = 1;
            continue;
        }
        if (!strcmp(a, "--help") || !strcmp(a, "-h") || !strcmp(a, "--list")) {
            usage();
            return 0;
        }
        if (!v)
            die("%s needs a value (see --help)", a);
        i++;
        if (!strcmp(a, "--only")) {
            if (!*v)
                die("--only: '': expected section names, comma-separated (see --list)");
            b.only = v;
            for (const char *s = v; *s;) {
                size_t len = strcspn(s, ",");
                size_t k = 0;
                while (k < NSECTIONS &&
                       (strlen(sections[k].name) != len || strncmp(sections[k].name, s, len)))
                    k++;
                if (k == NSECTIONS)
                    die("--only: unknown section '%.*s' (see --list)", (int)len, s);
                s += len + (s[len] == ',');
            }
        } else if (!strcmp(a, "--sizes")) {
            parse_sizes(&b, v);
        } else if (!strcmp(a, "--trans")) {
            parse_trans(&b, v);
        } else if (!strcmp(a, "--attn-n")) {
            parse_attn_n(&b, v);
        } else if (!strcmp(a, "--attn-d")) {
            parse_attn_d(&b, v);
        } else if (!strcmp(a, "--softmax")) {
            parse_softmax(&b, v);
        } else if (!strcmp(a, "--reps")) {
            b.reps = int_arg(a, v, 3);
        } else if (!strcmp(a, "--warmup")) {
            b.warmup = int_arg(a, v, 0);
        } else if (!strcmp(a, "--max-time")) {
            b.max_time = int_arg(a, v, 0);
        } else if (!strcmp(a, "--blas-threads")) {
            b.blas_threads = int_arg(a, v, 1);
        } else if (!strcmp(a, "--device")) {
            params.device = v;
        } else if (!strcmp(a, "--seed")) {
            b.rng = (unsigned long long)int_arg(a, v, 0);
        } else {
            die("unknown option %s (see --help)", a);
        }
    }
    if (clattn_context_create(&b.ctx, &params) != CLATTN_SUCCESS)
        die("no context: %s", clattn_last_error(NULL));
    b.queue = clattn_context_queue(b.ctx);
    if (!b.blas_threads) {
        cl_device_type type = 0;
        cl_uint cus = 0;
        clGetDeviceInfo(clattn_context_device(b.ctx), CL_DEVICE_TYPE, sizeof type, &type, NULL);
        clGetDeviceInfo(clattn_context_device(b.ctx), CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cus,
                        &cus, NULL);
        b.blas_threads = (type & CL_DEVICE_TYPE_CPU) && cus ? (int)cus
                                                           : (int)sysconf(_SC_NPROCESSORS_ONLN);
    }
#ifdef CLATTN_BENCH_OPENBLAS
    openblas_set_num_threads(b.blas_threads);
#endif
    if (!b.json)
        fprintf(stderr, "clattn-bench %s on %s\n  host BLAS threads %d, median of up to %d runs "
                        "after %d warm-up\n",
                clattn_version(), clattn_context_description(b.ctx), b.blas_threads, b.reps,
                b.warmup);
    for (size_t i = 0; i < NSECTIONS; i++) {
        if (!selected(&b, sections[i].name))
            continue;
        b.section = sections[i].name;
        sections[i].run(&b);
    }
    if (b.json)
        print_json(&b, argc, argv);
    else
        print_table(&b);
    clattn_context_destroy(&b.ctx);
    if (b.failures)
        fprintf(stderr, "clattn-bench: %d result(s) failed their check\n", b.failures);
    return b.failures ? 1 : 0;
}
