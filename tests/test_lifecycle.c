/* Lifecycle: contexts created, wrapped and destroyed, every op run once (and a few failing), the
 * disk cache on. The checks are on the results' sanity; the point is the run under
 * `valgrind --leak-check=full --errors-for-leak-kinds=definite` (.ci/run, tests/valgrind.supp):
 * clattn must not leak on any of these paths. */
#include "harness.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { B = 2, T = 5, KT = 6, D = 8, DV = 4, H = 2, HID = 8 };

static void ok(clattn_context *c, clattn_status st)
{
    if (st != CLATTN_SUCCESS)
        fail_msg("%s", clattn_last_error(c));
}

static clattn_tensor make(clattn_context *c, clattn_dtype dt, int nd, const size_t *dims,
                          const void *host)
{
    clattn_tensor t;
    ok(c, clattn_tensor_create(c, dt, nd, dims, host, &t));
    return t;
}

static float *random_floats(size_t n)
{
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    h_fill(x, n, -1, 1);
    return x;
}

/* Every op once on c, plus failing calls that must clean up after themselves. */
static void every_op(clattn_context *c)
{
    float *xq = random_floats(B * T * D), *xk = random_floats(B * KT * D),
          *xv = random_floats(B * KT * DV), *xw = random_floats(HID * D),
          *xo = random_floats(DV * HID), *xb = random_floats(HID);
    int lens[B] = {KT, 3}, mask[T * KT];
    for (int i = 0; i < T * KT; i++)
        mask[i] = (i % 3) != 0;
    clattn_tensor q = make(c, CLATTN_FLOAT32, 3, H_DIMS(B, T, D), xq);
    clattn_tensor k = make(c, CLATTN_FLOAT32, 3, H_DIMS(B, KT, D), xk);
    clattn_tensor v = make(c, CLATTN_FLOAT32, 3, H_DIMS(B, KT, DV), xv);
    clattn_tensor w = make(c, CLATTN_FLOAT32, 2, H_DIMS(HID, D), xw);
    clattn_tensor wv = make(c, CLATTN_FLOAT32, 2, H_DIMS(HID, DV), NULL);
    clattn_tensor wo = make(c, CLATTN_FLOAT32, 2, H_DIMS(DV, HID), xo);
    clattn_tensor bias = make(c, CLATTN_FLOAT32, 1, H_DIMS(HID), xb);
    clattn_tensor wva = make(c, CLATTN_FLOAT32, 2, H_DIMS(1, HID), xb);
    clattn_tensor s = make(c, CLATTN_FLOAT32, 3, H_DIMS(B, T, KT), NULL);
    clattn_tensor p = make(c, CLATTN_FLOAT32, 3, H_DIMS(B, T, KT), NULL);
    clattn_tensor o = make(c, CLATTN_FLOAT32, 3, H_DIMS(B, T, DV), NULL);
    clattn_tensor y = make(c, CLATTN_FLOAT32, 3, H_DIMS(B, T, HID), NULL);
    clattn_tensor kp = make(c, CLATTN_FLOAT32, 3, H_DIMS(B, KT, HID), NULL);
    clattn_tensor hd = make(c, CLATTN_FLOAT32, 3, H_DIMS(B * H, T, D / H), NULL);
    clattn_tensor w4 = make(c, CLATTN_FLOAT32, 4, H_DIMS(B, H, T, KT), NULL);
    clattn_tensor tl = make(c, CLATTN_INT32, 1, H_DIMS(B), lens);
    clattn_tensor tm = make(c, CLATTN_INT32, 2, H_DIMS(T, KT), mask);
    clattn_attention_opts opts = {0};
    clattn_dropout_params drop = {0.25f, 1, 42, 0};
    clattn_additive_weights aw = {&w, &w, &wva};
    clattn_mha_weights mw = {H, &w, &w, &w, &wo, &bias, &bias, &bias, NULL, 0};
    clattn_mask m = {0};
    float out[B * H * T * KT];

    ok(c, clattn_tensor_fill(c, &wv, 0.5f));
    ok(c, clattn_tensor_write_blocking(c, &wv, xw));
    ok(c, clattn_matmul(c, &q, 0, &k, 1, 0.5f, 0.0f, &s));
    ok(c, clattn_linear(c, &q, &w, &bias, &y));
    m.valid_lens_host = lens;
    m.lens_ndim = 1;
    m.lens_dims[0] = B;
    ok(c, clattn_masked_softmax(c, &s, &m, &p)); /* uploaded host lengths */
    memset(&m, 0, sizeof m);
    m.valid_lens = &tl;
    m.mask = &tm;
    m.causal = 1;
    ok(c, clattn_masked_softmax(c, &s, &m, &p));
    ok(c, clattn_transpose_qkv(c, &q, H, &hd));
    ok(c, clattn_transpose_output(c, &hd, H, &y));
    ok(c, clattn_dropout(c, &p, &drop, &p));
    ok(c, clattn_linear(c, &k, &w, NULL, &kp));
    ok(c, clattn_additive_scores(c, &y, &kp, &bias, &p));
    opts.mask.valid_lens_host = lens;
    opts.mask.lens_ndim = 1;
    opts.mask.lens_dims[0] = B;
    ok(c, clattn_dot_product_attention(c, &q, &k, &v, &opts, &o, NULL)); /* fused */
    ok(c, clattn_dot_product_attention(c, &q, &k, &v, &opts, &o, &p));   /* with weights */
    opts.dropout = drop;
    ok(c, clattn_additive_attention(c, &q, &k, &v, &aw, &opts, &o, &p));
    ok(c, clattn_multihead_attention(c, &q, &k, &k, &mw, &opts, &o, &w4));
    /* failing calls clean up after themselves */
    int bad[B] = {KT + 1, 0};
    opts.mask.valid_lens_host = bad;
    assert_int_equal(clattn_multihead_attention(c, &q, &k, &k, &mw, &opts, &o, &w4),
                     CLATTN_ERROR_INVALID_ARGUMENT);
    m.valid_lens = NULL;
    m.valid_lens_host = lens;
    m.lens_ndim = 1;
    m.lens_dims[0] = B;
    m.mask = &q; /* float: rejected after the lengths were checked */
    assert_int_equal(clattn_masked_softmax(c, &s, &m, &p), CLATTN_ERROR_INVALID_TENSOR);
    ok(c, clattn_finish(c));
    ok(c, clattn_tensor_read_blocking(c, &w4, out));
    for (size_t i = 0; i < sizeof out / sizeof out[0]; i++)
        assert_true(isfinite(out[i]));
    clattn_tensor *all[] = {&q, &k, &v, &w, &wv, &wo, &bias, &wva, &s, &p, &o, &y, &kp, &hd, &w4,
                            &tl, &tm};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        clattn_tensor_release(all[i]);
    free(xq);
    free(xk);
    free(xv);
    free(xw);
    free(xo);
    free(xb);
}

static void test_created_contexts(void **s)
{
    (void)s;
    char dir[] = "/tmp/clattn-lifecycle-XXXXXX";
    assert_non_null(mkdtemp(dir));
    for (int round = 0; round < 2; round++) { /* a cold, then a warm disk cache */
        clattn_context *c = NULL;
        clattn_params p = {0};
        p.cache_dir = dir;
        ok(NULL, clattn_context_create(&c, &p));
        every_op(c);
        clattn_context_destroy(&c);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static void test_wrapped_context(void **s)
{
    (void)s;
    clattn_context *c = NULL;
    ok(NULL, clattn_context_wrap(&c, clattn_context_cl(h_ctx), clattn_context_device(h_ctx),
                                 clattn_context_queue(h_ctx), NULL));
    every_op(c);
    clattn_context_destroy(&c);
}

static void test_failed_creations(void **s)
{
    (void)s;
    clattn_context *c = NULL;
    clattn_params p = {0};
    p.device = "nosuchdevice";
    assert_int_equal(clattn_context_create(&c, &p), CLATTN_ERROR_DEVICE_NOT_FOUND);
    p.device = NULL;
    p.tuning = "matmul=warp";
    assert_int_equal(clattn_context_create(&c, &p), CLATTN_ERROR_INVALID_ARGUMENT);
    assert_null(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_created_contexts),
        cmocka_unit_test(test_wrapped_context),
        cmocka_unit_test(test_failed_creations),
    };
    return cmocka_run_group_tests(tests, h_setup, h_teardown);
}
