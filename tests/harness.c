#include "harness.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

clattn_context *h_ctx;
static unsigned long long seed_base, state;
static size_t guard_len; /* h_tensor's guard: H_GUARD elements, 0 on Oclgrind */

unsigned long long h_seed(void)
{
    return seed_base;
}

void h_reseed(unsigned long long salt)
{
    state = seed_base * 0x9E3779B97F4A7C15ull + salt * 0xD1B54A32D192ED03ull + 1;
}

static unsigned long long next(void)
{
    unsigned long long z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double h_uniform(double lo, double hi)
{
    return lo + (hi - lo) * ((next() >> 11) * (1.0 / 9007199254740992.0));
}

int h_randint(int lo, int hi)
{
    return lo + (int)(next() % (unsigned long long)(hi - lo + 1));
}

void h_fill(float *x, size_t n, double lo, double hi)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)h_uniform(lo, hi);
}

void h_long_rows(int nk, int dv, float q[2], float **k, float **v, double *ref, double *lse,
                 double *mag)
{
    q[0] = (float)h_uniform(-1, 1);
    q[1] = 0.0f;
    *k = malloc((size_t)nk * sizeof **k);
    *v = malloc((size_t)nk * dv * sizeof **v);
    assert_non_null(*k);
    assert_non_null(*v);
    h_fill(*k, (size_t)nk, -1, 1);
    h_fill(*v, (size_t)nk * dv, 0.5, 1.5);
    ref_attention_d1(2, nk, dv, q, *k, *v, ref, lse, mag);
}

int h_small(void)
{
    const char *s = getenv("CLATTN_TEST_SMALL");
    return s && *s && strcmp(s, "0") != 0;
}

int h_huge(void)
{
    const char *s = getenv("CLATTN_TEST_HUGE");
    return s && strcmp(s, "1") == 0;
}

int h_forced_variant(void)
{
    const char *s = getenv("CLATTN_TUNE");
    return s && *s;
}

clattn_context *h_ctx_tuned(const char *tuning)
{
    clattn_params p;
    memset(&p, 0, sizeof p);
    p.tuning = tuning;
    clattn_context *ctx = NULL;
    if (clattn_context_wrap(&ctx, clattn_context_cl(h_ctx), clattn_context_device(h_ctx),
                            clattn_context_queue(h_ctx), &p) != CLATTN_SUCCESS)
        fail_msg("%s: %s", tuning, clattn_last_error(NULL));
    return ctx;
}

int h_setup(void **st)
{
    (void)st;
    const char *s = getenv("CLATTN_TEST_SEED");
    seed_base = s ? strtoull(s, NULL, 0) : 12345;
    h_reseed(0);
    clattn_status rc = clattn_context_create(&h_ctx, NULL);
    if (rc != CLATTN_SUCCESS) {
        const char *ci = getenv("CI");
        fprintf(stderr, "no usable OpenCL device: %s\n", clattn_last_error(NULL));
        if (ci && strcmp(ci, "true") == 0)
            return -1; /* CI must have a device: fail */
        fprintf(stderr, "skipping (CI is not true)\n");
        exit(77); /* meson's skip code */
    }
    /* Oclgrind checks every access against its buffer's bounds: exact buffers there */
    guard_len = strstr(clattn_context_description(h_ctx), "Oclgrind") ? 0 : H_GUARD;
    const char *tune = getenv("CLATTN_TUNE");
    printf("# device: %s\n# tuning override: %s\n# seed: %llu (set CLATTN_TEST_SEED to change)\n",
           clattn_context_description(h_ctx), tune && *tune ? tune : "(none)", seed_base);
    return 0;
}

int h_teardown(void **st)
{
    (void)st;
    clattn_context_destroy(&h_ctx);
    return 0;
}

clattn_tensor h_tensor_exact(clattn_dtype dt, int ndim, const size_t *dims, const void *host)
{
    clattn_tensor t;
    clattn_status rc = clattn_tensor_create(h_ctx, dt, ndim, dims, host, &t);
    if (rc != CLATTN_SUCCESS)
        fail_msg("tensor_create: %s", clattn_last_error(h_ctx));
    return t;
}

clattn_tensor h_filled(clattn_context *ctx, clattn_dtype dt, int ndim, const size_t *dims,
                       float value)
{
    clattn_tensor t;
    if (clattn_tensor_create(ctx, dt, ndim, dims, NULL, &t) != CLATTN_SUCCESS ||
        clattn_tensor_fill(ctx, &t, value) != CLATTN_SUCCESS)
        fail_msg("tensor_create / fill: %s", clattn_last_error(ctx));
    return t;
}

static size_t numel_of(int ndim, const size_t *dims)
{
    size_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= dims[i];
    return n;
}

/* The guard's element for a buffer: a NaN (float dtypes) whose payload comes from the buffer's
 * handle, so that an op copying one tensor's guard into another's changes the latter. */

static void guard_fill(void *g, size_t len, clattn_dtype dt, cl_mem buf)
{
    unsigned long long k = (unsigned long long)(uintptr_t)buf * 0x9E3779B97F4A7C15ull;
    k ^= k >> 29;
    for (size_t i = 0; i < len; i++) {
        if (clattn_dtype_size(dt) == 4)
            ((unsigned int *)g)[i] = 0x7fc00000u | (unsigned int)(k & 0x3fffff);
        else
            ((unsigned short *)g)[i] = dt == CLATTN_FLOAT16 ? 0x7e00 | (k & 0x1ff) : 0x7fc0 | (k & 0x3f);
    }
}

/* The host data, if any, and the guard in one write; without host data the tensor's elements stay
 * unwritten, so that Oclgrind would report a kernel reading them. */
clattn_tensor h_tensor(clattn_dtype dt, int ndim, const size_t *dims, const void *host)
{
    size_t n = numel_of(ndim, dims), es = clattn_dtype_size(dt), all = n + guard_len;
    if (!guard_len)
        return h_tensor_exact(dt, ndim, dims, host);
    clattn_tensor whole = h_tensor_exact(dt, 1, &all, NULL);
    size_t from = host ? 0 : n, len = all - from;
    unsigned char *init = malloc(len * es);
    assert_non_null(init);
    if (host)
        memcpy(init, host, n * es);
    guard_fill(init + (n - from) * es, guard_len, dt, whole.buf);
    clattn_tensor part = clattn_view(whole.buf, dt, from, 1, &len);
    if (clattn_tensor_write_blocking(h_ctx, &part, init) != CLATTN_SUCCESS)
        fail_msg("write (guard): %s", clattn_last_error(h_ctx));
    free(init);
    return clattn_view(whole.buf, dt, 0, ndim, dims);
}

/* The guard of a tensor h_tensor made (offset 0, its buffer guard_len elements longer) holds what
 * guard_fill wrote. Other tensors and views have none to check. */
static void check_guard(const clattn_tensor *t)
{
    size_t n = clattn_tensor_numel(t), es = clattn_dtype_size(t->dtype), size = 0, g = guard_len;
    if (!g || t->offset != 0 || !t->buf
        || clGetMemObjectInfo(t->buf, CL_MEM_SIZE, sizeof size, &size, NULL) != CL_SUCCESS
        || size != (n + g) * es)
        return;
    clattn_tensor guard = clattn_view(t->buf, t->dtype, n, 1, &g);
    unsigned char *got = malloc(g * es), *want = malloc(g * es);
    assert_non_null(got);
    assert_non_null(want);
    guard_fill(want, g, t->dtype, t->buf);
    if (clattn_tensor_read_blocking(h_ctx, &guard, got) != CLATTN_SUCCESS)
        fail_msg("read (guard): %s", clattn_last_error(h_ctx));
    size_t i = 0;
    while (i < g * es && got[i] == want[i])
        i++;
    free(got);
    free(want);
    if (i < g * es)
        fail_msg("an op wrote past the end of a tensor of %zu elements (byte %zu after it)", n, i);
}

const clattn_dtype h_float_dtypes[3] = {CLATTN_FLOAT32, CLATTN_FLOAT16, CLATTN_BFLOAT16};

const char *h_dtype_name(clattn_dtype dt)
{
    return dt == CLATTN_FLOAT16 ? "float16" : dt == CLATTN_BFLOAT16 ? "bfloat16" : "float32";
}

static unsigned short to16(float x, clattn_dtype dt)
{
    return dt == CLATTN_FLOAT16 ? clattn_float_to_half(x) : clattn_float_to_bfloat16(x);
}

static float from16(unsigned short b, clattn_dtype dt)
{
    return dt == CLATTN_FLOAT16 ? clattn_half_to_float(b) : clattn_bfloat16_to_float(b);
}

void h_round(float *x, size_t n, clattn_dtype dt)
{
    if (dt != CLATTN_FLOAT32)
        for (size_t i = 0; i < n; i++)
            x[i] = from16(to16(x[i], dt), dt);
}

clattn_tensor h_tensor_as(clattn_dtype dt, int ndim, const size_t *dims, const float *host)
{
    if (dt == CLATTN_FLOAT32 || !host)
        return h_tensor(dt, ndim, dims, host);
    size_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= dims[i];
    unsigned short *b = malloc((n ? n : 1) * sizeof *b);
    assert_non_null(b);
    for (size_t i = 0; i < n; i++)
        b[i] = to16(host[i], dt);
    clattn_tensor t = h_tensor(dt, ndim, dims, b);
    free(b);
    return t;
}

float *h_read_float(const clattn_tensor *t)
{
    float *p = h_read(t); /* 4 bytes per element: room for the floats */
    if (t->dtype != CLATTN_FLOAT32)
        for (size_t i = clattn_tensor_numel(t); i-- > 0;) /* from the end: in place */
            p[i] = from16(((unsigned short *)p)[i], t->dtype);
    return p;
}

void h_write_float(const clattn_tensor *t, const float *x)
{
    size_t n = clattn_tensor_numel(t);
    void *w = (void *)x;
    if (t->dtype != CLATTN_FLOAT32) {
        unsigned short *b = malloc((n ? n : 1) * sizeof *b);
        assert_non_null(b);
        for (size_t i = 0; i < n; i++)
            b[i] = to16(x[i], t->dtype);
        w = b;
    }
    clattn_status rc = clattn_tensor_write_blocking(h_ctx, t, w);
    if (w != (void *)x)
        free(w);
    if (rc != CLATTN_SUCCESS)
        fail_msg("write: %s", clattn_last_error(h_ctx));
}

double h_unit_roundoff(clattn_dtype dt)
{
    return dt == CLATTN_FLOAT16 ? 0x1p-11 : dt == CLATTN_BFLOAT16 ? 0x1p-8 : 0x1p-24;
}

double h_subnormal_step(clattn_dtype dt)
{
    return dt == CLATTN_FLOAT16 ? 0x1p-25 : 0.0;
}

clattn_tensor h_batched(int nlead, const size_t *lead, size_t rows, size_t cols, const float *host)
{
    size_t dims[4];
    memcpy(dims, lead, sizeof(size_t) * nlead);
    dims[nlead] = rows;
    dims[nlead + 1] = cols;
    return h_tensor(CLATTN_FLOAT32, nlead + 2, dims, host);
}

/* A host write rather than clattn_tensor_fill: Oclgrind 21.10 sizes a buffer's shadow memory by
 * the fill pattern (4 bytes), which makes every later read past the first element look
 * uninitialized. clattn_tensor_fill itself is tested in test_badinput.c. */
void h_poison(const clattn_tensor *t)
{
    size_t n = clattn_tensor_numel(t);
    float *nan = malloc(n * sizeof *nan);
    assert_non_null(nan);
    for (size_t i = 0; i < n; i++)
        nan[i] = NAN;
    if (clattn_dtype_size(t->dtype) == 2) /* 16-bit NaNs, one per element */
        for (size_t i = 0; i < n; i++)
            ((unsigned short *)nan)[i] = t->dtype == CLATTN_FLOAT16 ? 0x7e00 : 0x7fc0;
    clattn_status rc = clattn_tensor_write_blocking(h_ctx, t, nan);
    free(nan);
    if (rc != CLATTN_SUCCESS)
        fail_msg("poison: %s", clattn_last_error(h_ctx));
}

void *h_read(const clattn_tensor *t)
{
    void *p = malloc(clattn_tensor_numel(t) * 4);
    assert_non_null(p);
    clattn_status rc = clattn_tensor_read_blocking(h_ctx, t, p);
    if (rc != CLATTN_SUCCESS)
        fail_msg("read: %s", clattn_last_error(h_ctx));
    check_guard(t);
    return p;
}

void h_assert_scaled(const float *got, const double *ref, const double *scale, size_t n, double tol,
                     const char *what)
{
    size_t bad = n, worst_i = 0;
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - ref[i]);
        double lim = tol * scale[i];
        if (!isfinite(ref[i])) /* NaN or an infinity expected: the same */
            err = lim = (isnan(ref[i]) ? isnan(got[i]) : (double)got[i] == ref[i]) ? 0.0 : NAN;
        if (!(err <= lim)) { /* NaN lands here */
            if (bad == n)
                bad = i;
        }
        double rel = lim > 0 ? err / lim : err;
        if (!(rel <= worst) || isnan(rel)) {
            worst = rel;
            worst_i = i;
        }
    }
    if (bad != n)
        fail_msg("%s: element %zu is %.9g, reference %.9g (allowed %.3g); worst at %zu: %.9g vs "
                 "%.9g", what, bad, got[bad], ref[bad], tol * scale[bad], worst_i, got[worst_i],
                 ref[worst_i]);
}

void h_assert_close(const float *got, const double *ref, size_t n, double rtol, double atol,
                    const char *what)
{
    double *scale = malloc(n * sizeof *scale);
    assert_non_null(scale);
    for (size_t i = 0; i < n; i++)
        scale[i] = atol + rtol * fabs(ref[i]);
    h_assert_scaled(got, ref, scale, n, 1.0, what);
    free(scale);
}

void h_assert_lse(const float *got, const double *ref, const double *mag, size_t n,
                  const char *what)
{
    double *scale = malloc(n * sizeof *scale);
    assert_non_null(scale);
    for (size_t i = 0; i < n; i++) {
        float r = (float)fabs(ref[i]);
        double ulp = isfinite(r) ? (double)nextafterf(r, INFINITY) - r : 0.0;
        scale[i] = 2.0 * ulp + H_LSE_TOL * (1.0 + mag[i]);
    }
    h_assert_scaled(got, ref, scale, n, 1.0, what);
    free(scale);
}

void h_assert_bytes(const clattn_tensor *t, const void *expect, const char *what)
{
    void *got = h_read(t);
    if (memcmp(got, expect, clattn_tensor_numel(t) * clattn_dtype_size(t->dtype)) != 0) {
        free(got);
        fail_msg("%s: output buffer was modified", what);
    }
    free(got);
}

void h_assert_error(clattn_status got, clattn_status want, const char *needle)
{
    const char *msg = clattn_last_error(h_ctx);
    if (got != want)
        fail_msg("status %d (%s), expected %d (%s); message: %s", got, clattn_status_string(got),
                 want, clattn_status_string(want), msg);
    if (needle && !strstr(msg, needle))
        fail_msg("message \"%s\" does not name \"%s\"", msg, needle);
}

/* c's ALiBi slopes for scores of this rank into hm (their tensor and the reference's) */
static void make_slopes(h_mask *hm, const h_mask_spec *c, int rank)
{
    size_t n = 1, stride = 1, H = c->alibi_dims[c->alibi_rank - 1];
    for (int i = 0; i < c->alibi_rank; i++)
        n *= c->alibi_dims[i];
    float *sf = malloc(n * sizeof *sf);
    hm->slopes = malloc(n * sizeof *hm->slopes);
    if (c->alibi_mag > 0)
        h_fill(sf, n, 0, c->alibi_mag);
    for (size_t i = 0; i < n; i++) {
        if (c->alibi_mag <= 0)
            sf[i] = (float)pow(2.0, -8.0 * (double)(i % H + 1) / (double)H);
        hm->slopes[i] = sf[i];
    }
    for (int i = c->alibi_rank - 1; i >= 0; i--) {
        int axis = rank - 2 - c->alibi_rank + i; /* a leading dim: (D0, D1) slot 0 or 1 */
        int slot = rank == 4 ? axis : 0;
        hm->r.ss[slot] = c->alibi_dims[i] == 1 ? 0 : (long)stride;
        stride *= c->alibi_dims[i];
    }
    hm->r.slopes = hm->slopes;
    hm->ta = h_tensor(CLATTN_FLOAT32, c->alibi_rank, c->alibi_dims, sf);
    free(sf);
}

void h_mask_make(h_mask *hm, const h_mask_spec *c, int rank, const size_t *sdims)
{
    static const int slot[5][4] = {{0}, {3}, {2, 3}, {0, 2, 3}, {0, 1, 2, 3}};
    size_t d4[4] = {1, 1, 1, 1};
    memset(hm, 0, sizeof *hm);
    for (int i = 0; i < rank; i++)
        d4[slot[rank][i]] = sdims[i];
    size_t D0 = d4[0], Q = d4[2], K = d4[3];
    ref_mask r = {(int)D0, (int)d4[1], (int)Q, (int)K, NULL, 0, NULL, {0, 0, 0, 0}, c->causal,
                  c->fill != 0 ? c->fill : CLATTN_DEFAULT_FILL, 0, 0, 0, 0, NULL, {0, 0, 0, 0},
                  NULL, {0, 0}};
    r.align = c->align;
    r.window = c->window;
    r.window_left = c->window_left;
    r.window_right = c->window_right;
    hm->r = r;
    hm->m.causal = c->causal;
    hm->m.fill = c->fill;
    hm->m.align = c->align;
    hm->m.window = c->window;
    hm->m.window_left = c->window_left;
    hm->m.window_right = c->window_right;
    if (c->lens != H_LENS_NONE) {
        size_t nl = c->lens == H_LENS_1D ? D0 : D0 * Q;
        hm->lens = malloc(nl * sizeof(int));
        for (size_t i = 0; i < nl; i++)
            hm->lens[i] = c->fixed_lens ? c->fixed_lens[i] : h_randint(0, (int)K);
        hm->r.lens = hm->lens;
        hm->r.lens_mode = c->lens;
        if (c->lens_on_device) {
            hm->tl = h_tensor(CLATTN_INT32, c->lens, H_DIMS(D0, Q), hm->lens);
            hm->m.valid_lens = &hm->tl;
        } else {
            hm->m.valid_lens_host = hm->lens;
            hm->m.lens_ndim = c->lens;
            hm->m.lens_dims[0] = D0;
            hm->m.lens_dims[1] = Q;
        }
    }
    if (c->mask_rank) {
        size_t mn = 1, stride = 1;
        for (int i = 0; i < c->mask_rank; i++)
            mn *= c->mask_dims[i];
        hm->mask = malloc(mn * sizeof(int));
        for (size_t i = 0; i < mn; i++)
            hm->mask[i] = c->mask_prefix > 0 ? (int)(i % K) >= c->mask_prefix
                                             : h_uniform(0, 1) < 0.7;
        for (int i = c->mask_rank - 1; i >= 0; i--) {
            int axis = rank - c->mask_rank + i;
            hm->r.ms[slot[rank][axis]] = c->mask_dims[i] == 1 ? 0 : (long)stride;
            stride *= c->mask_dims[i];
        }
        hm->r.mask = hm->mask;
        hm->tm = h_tensor(CLATTN_INT32, c->mask_rank, c->mask_dims, hm->mask);
        hm->m.mask = &hm->tm;
    }
    if (c->bias_rank) {
        size_t bn = 1, stride = 1;
        double mag = c->bias_mag > 0 ? c->bias_mag : 2.0;
        for (int i = 0; i < c->bias_rank; i++)
            bn *= c->bias_dims[i];
        float *bf = malloc(bn * sizeof *bf);
        hm->bias = malloc(bn * sizeof *hm->bias);
        h_fill(bf, bn, -mag, mag);
        for (size_t i = 0; i < bn; i++) {
            if (c->bias_ninf > 0 && i % (size_t)c->bias_ninf == 1)
                bf[i] = -INFINITY;
            if (c->bias_row_fill != 0 && i / c->bias_dims[c->bias_rank - 1] % 3 == 0)
                bf[i] = c->bias_row_fill;
            hm->bias[i] = bf[i];
        }
        for (int i = c->bias_rank - 1; i >= 0; i--) {
            int axis = rank - c->bias_rank + i;
            hm->r.bs[slot[rank][axis]] = c->bias_dims[i] == 1 ? 0 : (long)stride;
            stride *= c->bias_dims[i];
        }
        hm->r.bias = hm->bias;
        hm->tb = h_tensor(CLATTN_FLOAT32, c->bias_rank, c->bias_dims, bf);
        free(bf);
    }
    if (c->alibi_rank)
        make_slopes(hm, c, rank);
}

void h_mask_free(h_mask *hm)
{
    clattn_tensor_release(&hm->tl);
    clattn_tensor_release(&hm->tm);
    clattn_tensor_release(&hm->tb);
    clattn_tensor_release(&hm->ta);
    free(hm->lens);
    free(hm->mask);
    free(hm->bias);
    free(hm->slopes);
}
