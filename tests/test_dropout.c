/* clattn_dropout: Philox mask against the host reference, statistics, scaling, edge values. */
#include "harness.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* >= 1e5 entries, odd so the last Philox block is partial; fewer under Oclgrind
 * (CLATTN_TEST_SMALL), which interprets Philox's rounds one instruction at a time (a minute per
 * 1e5 elements) */
#define N (h_small() ? (size_t)5003 : (size_t)200003)

static float *run(const float *x, float p, int training, unsigned long long seed,
                  unsigned long long offset, int inplace)
{
    clattn_tensor tx = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(1, N), x);
    clattn_tensor ty = inplace ? tx : h_tensor(CLATTN_FLOAT32, 2, H_DIMS(1, N), NULL);
    if (!inplace)
        h_poison(&ty);
    clattn_dropout_params dp = {p, training, seed, offset};
    if (clattn_dropout(h_ctx, &tx, &dp, &ty) != CLATTN_SUCCESS)
        fail_msg("dropout: %s", clattn_last_error(h_ctx));
    float *y = h_read(&ty);
    if (!inplace)
        clattn_tensor_release(&ty);
    clattn_tensor_release(&tx);
    return y;
}

static float *input(void)
{
    float *x = malloc(N * 4);
    h_fill(x, N, 0.5, 2.0); /* never 0, so a zero output means dropped */
    return x;
}

static void test_matches_reference_and_statistics(void **s)
{
    (void)s;
    float *x = input();
    const float ps[3] = {0.1f, 0.5f, 0.9f};
    for (int t = 0; t < 3; t++) {
        float p = ps[t];
        float *y = run(x, p, 1, 1234 + t, 77, 0);
        size_t kept = 0;
        float scale = 1.0f / (1.0f - p);
        for (size_t i = 0; i < N; i++) {
            int keep = ref_dropout_keep(i, 1234 + t, 77, p);
            if (keep) {
                kept++;
                if (y[i] != x[i] * scale)
                    fail_msg("p=%g element %zu: %.9g, expected x/(1-p) = %.9g", p, i, y[i], x[i] * scale);
            } else if (y[i] != 0.0f) {
                fail_msg("p=%g element %zu: %.9g, expected dropped (0)", p, i, y[i]);
            }
        }
        double mean = N * (1.0 - p), sd = sqrt(N * p * (1.0 - p));
        if (!(fabs(kept - mean) <= 4 * sd))
            fail_msg("p=%g kept %zu of %zu, expected %.0f +- 4 * %.1f", p, kept, N, mean, sd);
        free(y);
    }
    free(x);
}

static void test_seeds_and_offsets(void **s)
{
    (void)s;
    float *x = input();
    float *a = run(x, 0.5f, 1, 42, 0, 0), *b = run(x, 0.5f, 1, 42, 0, 0);
    float *c = run(x, 0.5f, 1, 43, 0, 0), *d = run(x, 0.5f, 1, 42, 1, 0);
    float *e = run(x, 0.5f, 1, 42ull << 32, 0, 0); /* the seed's high word counts too */
    assert_memory_equal(a, b, N * 4);
    assert_memory_not_equal(a, c, N * 4);
    assert_memory_not_equal(a, d, N * 4);
    assert_memory_not_equal(a, e, N * 4);
    free(a); free(b); free(c); free(d); free(e); free(x);
}

static void test_no_ops_and_p_one(void **s)
{
    (void)s;
    float *x = input();
    float *a = run(x, 0.0f, 1, 1, 0, 0);  /* p = 0: exact copy */
    float *b = run(x, 0.7f, 0, 1, 0, 0);  /* inference: exact copy */
    float *c = run(x, 0.7f, 0, 1, 0, 1);  /* inference in place: untouched */
    float *d = run(x, 1.0f, 1, 1, 0, 1);  /* p = 1: zeros, no division by zero */
    assert_memory_equal(a, x, N * 4);
    assert_memory_equal(b, x, N * 4);
    assert_memory_equal(c, x, N * 4);
    for (size_t i = 0; i < N; i++)
        if (d[i] != 0.0f)
            fail_msg("p=1 element %zu is %g", i, d[i]);
    free(a); free(b); free(c); free(d); free(x);
}

/* A product, as PyTorch's x * mask / (1 - p): dropped NaN and infinities give NaN (p = 1
 * included), dropped finite values give a zero of their sign; without training an exact copy. */
static void test_non_finite(void **s)
{
    (void)s;
    float *x = input();
    const float special[6] = {NAN, INFINITY, -INFINITY, -1.0f, -0.0f, 3e38f};
    for (size_t i = 0; i < N; i++)
        if (i % 7 == 0)
            x[i] = special[(i / 7) % 6];
    const float ps[3] = {0.5f, 1.0f, 0.3f};
    for (int t = 0; t < 3; t++) {
        float p = ps[t], scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
        float *y = run(x, p, t < 2, 9 + t, 3, 0);
        for (size_t i = 0; i < N; i++) {
            float want = t < 2 ? x[i] * (ref_dropout_keep(i, 9 + t, 3, p) ? scale : 0.0f) : x[i];
            if (isnan(want) ? !isnan(y[i]) : memcmp(&want, &y[i], 4) != 0)
                fail_msg("p=%g training=%d element %zu (x = %g): %g, expected %g", p, t < 2, i, x[i],
                         y[i], want);
        }
        free(y);
    }
    free(x);
}

static void test_bad_p(void **s)
{
    (void)s;
    float x[4] = {1, 2, 3, 4}, y0[4] = {9, 9, 9, 9};
    clattn_tensor tx = h_tensor(CLATTN_FLOAT32, 1, H_DIMS(4), x);
    clattn_tensor ty = h_tensor(CLATTN_FLOAT32, 1, H_DIMS(4), y0);
    const float bad[3] = {-0.1f, 1.5f, NAN};
    for (int i = 0; i < 3; i++) {
        clattn_dropout_params dp = {bad[i], 1, 0, 0};
        h_assert_error(clattn_dropout(h_ctx, &tx, &dp, &ty), CLATTN_ERROR_INVALID_ARGUMENT, "p.p");
        h_assert_bytes(&ty, y0, "y");
    }
    h_assert_error(clattn_dropout(h_ctx, &tx, NULL, &ty), CLATTN_ERROR_INVALID_ARGUMENT, "p: NULL");
    clattn_tensor_release(&tx);
    clattn_tensor_release(&ty);
}

/* x and y of 16-bit dtypes in every combination, in place when they match: each output is the
 * float32 product x * (keep ? 1 / (1 - p) : 0) rounded once to y's dtype, bit for bit as the host
 * rounds it (NaN: any NaN), from the stored x; p = 0 converts. Infinities and NaN among x. */
static void test_16bit(void **s)
{
    (void)s;
    size_t n = h_small() ? 2003 : 40009;
    float *x = malloc(n * 4);
    for (int xi = 0; xi < 3; xi++)
        for (int yi = 0; yi < 3; yi++) {
            clattn_dtype xt = h_float_dtypes[xi], yt = h_float_dtypes[yi];
            if (xi == 0 && yi == 0)
                continue;
            for (int c = 0; c < 3; c++) {
                float p = c == 2 ? 0.0f : 0.3f;
                int inplace = c == 1 && xt == yt;
                h_fill(x, n, -3, 3);
                x[1] = INFINITY;
                x[2] = -INFINITY;
                x[3] = NAN;
                x[4] = 6e4f; /* float16's largest finite values: * 1 / 0.7 overflows to inf */
                h_round(x, n, xt);
                clattn_tensor tx = h_tensor_as(xt, 1, H_DIMS(n), x);
                clattn_tensor ty = inplace ? tx : h_tensor(yt, 1, H_DIMS(n), NULL);
                if (!inplace)
                    h_poison(&ty);
                clattn_dropout_params dp = {p, 1, 99, 5};
                if (clattn_dropout(h_ctx, &tx, &dp, &ty) != CLATTN_SUCCESS)
                    fail_msg("dropout: %s", clattn_last_error(h_ctx));
                float *y = h_read_float(&ty), scale = p > 0 ? 1.0f / (1.0f - p) : 1.0f;
                for (size_t i = 0; i < n; i++) {
                    float want = x[i] * (p == 0 || ref_dropout_keep(i, 99, 5, p) ? scale : 0.0f);
                    h_round(&want, 1, yt);
                    if (!(y[i] == want || (isnan(y[i]) && isnan(want))))
                        fail_msg("dropout %s -> %s p=%g%s element %zu of %.9g: %.9g, expected "
                                 "%.9g", h_dtype_name(xt), h_dtype_name(yt), p,
                                 inplace ? " in place" : "", i, x[i], y[i], want);
                }
                free(y);
                if (!inplace)
                    clattn_tensor_release(&ty);
                clattn_tensor_release(&tx);
            }
        }
    free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_reference_and_statistics),
        cmocka_unit_test(test_seeds_and_offsets), cmocka_unit_test(test_no_ops_and_p_one),
        cmocka_unit_test(test_non_finite), cmocka_unit_test(test_bad_p),
        cmocka_unit_test(test_16bit),
    };
    return cmocka_run_group_tests(tests, h_setup, h_teardown);
}
