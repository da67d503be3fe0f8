/* Threads: 4 threads, each with its own context, run matmul, masked softmax, dot-product and
 * multi-head attention at the same time; every result is bitwise equal to the one computed on the
 * main thread alone. Errors without a context are per thread. */
#include "harness.h"
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NTHREADS = 4, ROUNDS = 3, B = 2, T = 9, KT = 11, D = 16, DV = 8, H = 2 };

typedef struct {
    float mm[T * KT * B], sm[B * T * KT], dp[B * T * DV], mha[B * T * DV], w[B * H * T * KT];
} results;

static float q[B * T * D], k[B * KT * D], v[B * KT * DV], wq[D * D], wk[D * D], wv[D * D],
    wo[DV * D];
static int lens[B] = {KT, 4};
static results single;

static int ok(clattn_context *c, clattn_status st, char *err, size_t size)
{
    if (st != CLATTN_SUCCESS)
        snprintf(err, size, "%s", clattn_last_error(c));
    return st == CLATTN_SUCCESS;
}

/* Runs every op once on a new context; returns 0 and fills r, or fills err. */
static int run_all(results *r, char *err, size_t size)
{
    clattn_context *c = NULL;
    clattn_tensor tq = {0}, tk = {0}, tv = {0}, ts = {0}, tsm = {0}, to = {0}, tm = {0}, tw = {0},
                  wq_ = {0}, wk_ = {0}, wv_ = {0}, wo_ = {0};
    clattn_attention_opts opts = {0};
    clattn_mha_weights mw = {H, &wq_, &wk_, &wv_, &wo_, NULL, NULL, NULL, NULL, 0};
    int good = 0;
    opts.mask.valid_lens_host = lens;
    opts.mask.lens_ndim = 1;
    opts.mask.lens_dims[0] = B;
    if (!ok(NULL, clattn_context_create(&c, NULL), err, size))
        return 1;
#define MAKE(t, nd, host, ...) \
    ok(c, clattn_tensor_create(c, CLATTN_FLOAT32, nd, H_DIMS(__VA_ARGS__), host, &t), err, size)
    if (!MAKE(tq, 3, q, B, T, D) || !MAKE(tk, 3, k, B, KT, D) || !MAKE(tv, 3, v, B, KT, DV) ||
        !MAKE(ts, 3, NULL, B, T, KT) || !MAKE(tsm, 3, NULL, B, T, KT) ||
        !MAKE(to, 3, NULL, B, T, DV) || !MAKE(tm, 3, NULL, B, T, DV) ||
        !MAKE(tw, 4, NULL, B, H, T, KT) || !MAKE(wq_, 2, wq, D, D) || !MAKE(wk_, 2, wk, D, D) ||
        !MAKE(wv_, 2, wv, D, D) || !MAKE(wo_, 2, wo, DV, D))
        goto done;
#undef MAKE
    if (!ok(c, clattn_matmul(c, &tq, 0, &tk, 1, 0.25f, 0.0f, &ts), err, size) ||
        !ok(c, clattn_masked_softmax(c, &ts, &opts.mask, &tsm), err, size) ||
        !ok(c, clattn_dot_product_attention(c, &tq, &tk, &tv, &opts, &to, NULL), err, size) ||
        /* multi-head: the keys serve as values (v_size = D), W_o projects to DV */
        !ok(c, clattn_multihead_attention(c, &tq, &tk, &tk, &mw, &opts, &tm, &tw), err, size))
        goto done;
    if (!ok(c, clattn_tensor_read_blocking(c, &ts, r->mm), err, size) ||
        !ok(c, clattn_tensor_read_blocking(c, &tsm, r->sm), err, size) ||
        !ok(c, clattn_tensor_read_blocking(c, &to, r->dp), err, size) ||
        !ok(c, clattn_tensor_read_blocking(c, &tm, r->mha), err, size) ||
        !ok(c, clattn_tensor_read_blocking(c, &tw, r->w), err, size))
        goto done;
    good = 1;
done:;
    clattn_tensor *all[] = {&tq, &tk, &tv, &ts, &tsm, &to, &tm, &tw, &wq_, &wk_, &wv_, &wo_};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        clattn_tensor_release(all[i]);
    clattn_context_destroy(&c);
    return !good;
}

typedef struct {
    int index, mismatch, failed;
    char err[1024], thread_err[256];
} worker;

static void *work(void *arg)
{
    worker *w = arg;
    results *r = malloc(sizeof *r);
    if (!r) {
        w->failed = 1;
        return NULL;
    }
    for (int round = 0; round < ROUNDS && !w->failed; round++) {
        memset(r, 0xff, sizeof *r);
        w->failed = run_all(r, w->err, sizeof w->err);
        if (!w->failed && memcmp(r, &single, sizeof *r) != 0)
            w->mismatch++;
        /* a failure without a context writes this thread's own message */
        char spec[64];
        clattn_context *c = NULL;
        clattn_params p = {0};
        snprintf(spec, sizeof spec, "no-such-device-%d-%d", w->index, round);
        p.device = spec;
        clattn_context_create(&c, &p);
        if (!strstr(clattn_last_error(NULL), spec))
            snprintf(w->thread_err, sizeof w->thread_err, "round %d: %.200s", round,
                     clattn_last_error(NULL));
    }
    free(r);
    return NULL;
}

static void test_concurrent_contexts(void **s)
{
    (void)s;
    pthread_t th[NTHREADS];
    worker w[NTHREADS];
    memset(w, 0, sizeof w);
    for (int i = 0; i < NTHREADS; i++) {
        w[i].index = i;
        assert_int_equal(pthread_create(&th[i], NULL, work, &w[i]), 0);
    }
    for (int i = 0; i < NTHREADS; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    for (int i = 0; i < NTHREADS; i++) {
        if (w[i].failed)
            fail_msg("thread %d: %s", i, w[i].err);
        if (w[i].mismatch)
            fail_msg("thread %d: %d of %d rounds differ from the single-threaded results", i,
                     w[i].mismatch, ROUNDS);
        if (w[i].thread_err[0])
            fail_msg("thread %d saw another thread's error: %s", i, w[i].thread_err);
    }
}

static int setup(void **st)
{
    char err[1024];
    if (h_setup(st)) /* skips without a device; h_ctx itself is not used by the threads */
        return -1;
    h_fill(q, sizeof q / 4, -1, 1);
    h_fill(k, sizeof k / 4, -1, 1);
    h_fill(v, sizeof v / 4, -1, 1);
    h_fill(wq, sizeof wq / 4, -0.5, 0.5);
    h_fill(wk, sizeof wk / 4, -0.5, 0.5);
    h_fill(wv, sizeof wv / 4, -0.5, 0.5);
    h_fill(wo, sizeof wo / 4, -0.5, 0.5);
    if (run_all(&single, err, sizeof err)) {
        fprintf(stderr, "single-threaded run failed: %s\n", err);
        return -1;
    }
    const float *x = (const float *)&single; /* results that can be told apart: all finite */
    for (size_t i = 0; i < sizeof single / sizeof *x; i++)
        if (!isfinite(x[i])) {
            fprintf(stderr, "single-threaded result %zu is not finite\n", i);
            return -1;
        }
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concurrent_contexts),
    };
    return cmocka_run_group_tests(tests, setup, h_teardown);
}
