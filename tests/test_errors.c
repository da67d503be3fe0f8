/* Bad input: each case checks the status, a message naming the argument, and an untouched output. */
#include "harness.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static clattn_tensor A, B, C, S, Y;
static float c_init[6 * 7], y_init[2 * 3 * 5];

static int setup(void **st)
{
    if (h_setup(st))
        return -1;
    float a[6 * 4], b[4 * 7], s[2 * 3 * 5];
    h_fill(a, 24, -1, 1);
    h_fill(b, 28, -1, 1);
    h_fill(c_init, 42, -1, 1);
    h_fill(s, 30, -1, 1);
    h_fill(y_init, 30, -1, 1);
    A = h_tensor_exact(CLATTN_FLOAT32, 2, H_DIMS(6, 4), a);
    B = h_tensor_exact(CLATTN_FLOAT32, 2, H_DIMS(4, 7), b);
    C = h_tensor_exact(CLATTN_FLOAT32, 2, H_DIMS(6, 7), c_init);
    S = h_tensor_exact(CLATTN_FLOAT32, 3, H_DIMS(2, 3, 5), s);
    Y = h_tensor_exact(CLATTN_FLOAT32, 3, H_DIMS(2, 3, 5), y_init);
    return 0;
}

static int teardown(void **st)
{
    clattn_tensor_release(&A);
    clattn_tensor_release(&B);
    clattn_tensor_release(&C);
    clattn_tensor_release(&S);
    clattn_tensor_release(&Y);
    return h_teardown(st);
}

#define EXPECT_MM(a, ta, b, tb, c, status, needle)                                   \
    do {                                                                             \
        h_assert_error(clattn_matmul(h_ctx, a, ta, b, tb, 1.0f, 0.0f, c), status, needle); \
        h_assert_bytes(&C, c_init, "C");                                             \
    } while (0)

static void test_matmul_bad(void **s)
{
    (void)s;
    clattn_tensor r1 = clattn_view(A.buf, CLATTN_FLOAT32, 0, 1, H_DIMS(24));
    clattn_tensor a3 = clattn_view(A.buf, CLATTN_FLOAT32, 0, 3, H_DIMS(2, 3, 4));
    clattn_tensor b3 = clattn_view(B.buf, CLATTN_FLOAT32, 0, 3, H_DIMS(2, 2, 7));
    clattn_tensor c3 = clattn_view(C.buf, CLATTN_FLOAT32, 0, 3, H_DIMS(3, 2, 7));
    clattn_tensor past = clattn_view(A.buf, CLATTN_FLOAT32, 1, 2, H_DIMS(6, 4));
    clattn_tensor zero = clattn_view(A.buf, CLATTN_FLOAT32, 0, 2, H_DIMS(0, 4));
    clattn_tensor ints = A;
    ints.dtype = CLATTN_INT32;
    clattn_tensor nobuf = A;
    nobuf.buf = NULL;
    h_assert_error(clattn_matmul(NULL, &A, 0, &B, 0, 1, 0, &C), CLATTN_ERROR_INVALID_ARGUMENT, NULL);
    assert_non_null(strstr(clattn_last_error(NULL), "ctx"));
    EXPECT_MM(NULL, 0, &B, 0, &C, CLATTN_ERROR_INVALID_ARGUMENT, "A: NULL");
    EXPECT_MM(&A, 0, NULL, 0, &C, CLATTN_ERROR_INVALID_ARGUMENT, "B: NULL");
    EXPECT_MM(&A, 0, &B, 0, NULL, CLATTN_ERROR_INVALID_ARGUMENT, "C: NULL");
    EXPECT_MM(&r1, 0, &B, 0, &C, CLATTN_ERROR_SHAPE_MISMATCH, "A: rank 1");
    EXPECT_MM(&A, 1, &B, 0, &C, CLATTN_ERROR_SHAPE_MISMATCH, "inner dims");
    EXPECT_MM(&A, 0, &B, 1, &C, CLATTN_ERROR_SHAPE_MISMATCH, "inner dims");
    EXPECT_MM(&a3, 0, &B, 0, &c3, CLATTN_ERROR_SHAPE_MISMATCH, "C: shape");
    EXPECT_MM(&a3, 0, &b3, 0, &c3, CLATTN_ERROR_SHAPE_MISMATCH, "inner dims");
    EXPECT_MM(&past, 0, &B, 0, &C, CLATTN_ERROR_INVALID_TENSOR, "A: view");
    EXPECT_MM(&zero, 0, &B, 0, &C, CLATTN_ERROR_SHAPE_MISMATCH, "zero-size");
    EXPECT_MM(&ints, 0, &B, 0, &C, CLATTN_ERROR_INVALID_TENSOR, "A: dtype");
    EXPECT_MM(&nobuf, 0, &B, 0, &C, CLATTN_ERROR_INVALID_ARGUMENT, "A: tensor has no buffer");
}

static void test_matmul_batch_mismatch(void **s)
{
    (void)s;
    clattn_tensor a3 = clattn_view(C.buf, CLATTN_FLOAT32, 0, 3, H_DIMS(2, 3, 4));
    clattn_tensor b3 = clattn_view(B.buf, CLATTN_FLOAT32, 0, 3, H_DIMS(1, 4, 7));
    clattn_tensor c3 = clattn_view(S.buf, CLATTN_FLOAT32, 0, 3, H_DIMS(2, 3, 5));
    clattn_tensor b5 = clattn_view(B.buf, CLATTN_FLOAT32, 0, 3, H_DIMS(1, 4, 5));
    (void)b3;
    h_assert_error(clattn_matmul(h_ctx, &a3, 0, &b5, 0, 1, 0, &c3), CLATTN_ERROR_SHAPE_MISMATCH,
                   "B: batch dims");
}

static void test_linear_bad(void **s)
{
    (void)s;
    clattn_tensor W = clattn_view(B.buf, CLATTN_FLOAT32, 0, 2, H_DIMS(7, 4));
    clattn_tensor Wbad = clattn_view(B.buf, CLATTN_FLOAT32, 0, 2, H_DIMS(4, 7));
    clattn_tensor bias_bad = clattn_view(B.buf, CLATTN_FLOAT32, 0, 1, H_DIMS(6));
    h_assert_error(clattn_linear(h_ctx, &A, &Wbad, NULL, &C), CLATTN_ERROR_SHAPE_MISMATCH, "W: shape");
    h_assert_bytes(&C, c_init, "C");
    h_assert_error(clattn_linear(h_ctx, &A, &W, &bias_bad, &C), CLATTN_ERROR_SHAPE_MISMATCH, "bias");
    h_assert_bytes(&C, c_init, "C");
    h_assert_error(clattn_linear(h_ctx, &A, &W, NULL, &S), CLATTN_ERROR_SHAPE_MISMATCH, "y: shape");
    h_assert_error(clattn_linear(h_ctx, &A, &A, NULL, &C), CLATTN_ERROR_SHAPE_MISMATCH, "y: shape");
}

#define EXPECT_SM(x, m, y, status, needle)                                        \
    do {                                                                          \
        h_assert_error(clattn_masked_softmax(h_ctx, x, m, y), status, needle);    \
        h_assert_bytes(&Y, y_init, "out");                                        \
    } while (0)

static void test_softmax_bad(void **s)
{
    (void)s;
    clattn_tensor wrong = clattn_view(C.buf, CLATTN_FLOAT32, 0, 3, H_DIMS(2, 5, 3));
    int lens_neg[2] = {-1, 2}, lens_big[2] = {6, 2}, lens_ok[3] = {1, 5, 2};
    int mvals[4] = {1, 0, 1, 1};
    clattn_tensor mt = h_tensor_exact(CLATTN_INT32, 2, H_DIMS(2, 2), mvals);
    clattn_tensor mfloat = clattn_view(mt.buf, CLATTN_FLOAT32, 0, 1, H_DIMS(4));
    clattn_tensor dlens = h_tensor_exact(CLATTN_INT32, 1, H_DIMS(3), lens_ok);
    clattn_mask m = {0};
    EXPECT_SM(NULL, NULL, &Y, CLATTN_ERROR_INVALID_ARGUMENT, "scores: NULL");
    EXPECT_SM(&S, NULL, &wrong, CLATTN_ERROR_SHAPE_MISMATCH, "out: shape");
    m.valid_lens_host = lens_neg; m.lens_ndim = 1; m.lens_dims[0] = 2;
    EXPECT_SM(&S, &m, &Y, CLATTN_ERROR_INVALID_ARGUMENT, "valid_lens[0] = -1");
    m.valid_lens_host = lens_big;
    EXPECT_SM(&S, &m, &Y, CLATTN_ERROR_INVALID_ARGUMENT, "valid_lens[0] = 6");
    m.valid_lens_host = lens_ok; m.lens_dims[0] = 3;
    EXPECT_SM(&S, &m, &Y, CLATTN_ERROR_SHAPE_MISMATCH, "valid_lens: shape");
    m.lens_ndim = 2; m.lens_dims[0] = 2; m.lens_dims[1] = 2;
    EXPECT_SM(&S, &m, &Y, CLATTN_ERROR_SHAPE_MISMATCH, "valid_lens: shape");
    m.lens_ndim = 3;
    EXPECT_SM(&S, &m, &Y, CLATTN_ERROR_SHAPE_MISMATCH, "valid_lens: rank 3");
    memset(&m, 0, sizeof m);
    m.valid_lens = &dlens;
    EXPECT_SM(&S, &m, &Y, CLATTN_ERROR_SHAPE_MISMATCH, "valid_lens: shape");
    memset(&m, 0, sizeof m);
    m.mask = &mt;
    EXPECT_SM(&S, &m, &Y, CLATTN_ERROR_SHAPE_MISMATCH, "does not broadcast");
    m.mask = &mfloat;
    EXPECT_SM(&S, &m, &Y, CLATTN_ERROR_INVALID_TENSOR, "mask.mask: dtype");
    clattn_tensor_release(&mt);
    clattn_tensor_release(&dlens);
}

/* fill = -INFINITY (PyTorch's usual masked_fill) is accepted: blocked keys get weight 0 exactly
 * and the others the softmax over the open ones. NaN and +inf are refused (badinput). */
static void test_fill_minus_infinity(void **s)
{
    (void)s;
    enum { R = 4, K = 6 };
    float x[R * K], y[R * K];
    int lens[2] = {2, 6};
    double ref[R * K];
    h_fill(x, R * K, -3, 3);
    clattn_tensor tx = h_tensor_exact(CLATTN_FLOAT32, 3, H_DIMS(2, 2, K), x);
    clattn_tensor ty = h_tensor_exact(CLATTN_FLOAT32, 3, H_DIMS(2, 2, K), NULL);
    clattn_mask m = {0};
    m.valid_lens_host = lens;
    m.lens_ndim = 1;
    m.lens_dims[0] = 2;
    m.fill = -INFINITY;
    for (int r = 0; r < R; r++) {
        int len = lens[r / 2];
        double sum = 0;
        for (int k = 0; k < len; k++)
            sum += exp((double)x[r * K + k]);
        for (int k = 0; k < K; k++)
            ref[r * K + k] = k < len ? exp((double)x[r * K + k]) / sum : 0.0;
    }
    if (clattn_masked_softmax(h_ctx, &tx, &m, &ty) != CLATTN_SUCCESS)
        fail_msg("%s", clattn_last_error(h_ctx));
    assert_int_equal(clattn_tensor_read_blocking(h_ctx, &ty, y), CLATTN_SUCCESS);
    h_assert_close(y, ref, R * K, 1e-5, 1e-7, "softmax with fill -inf");
    clattn_tensor_release(&tx);
    clattn_tensor_release(&ty);
}

static void test_bad_device_and_tuning(void **s)
{
    (void)s;
    clattn_context *c = NULL;
    clattn_params p = {0};
    p.device = "nosuchdevice";
    assert_int_equal(clattn_context_create(&c, &p), CLATTN_ERROR_DEVICE_NOT_FOUND);
    assert_null(c);
    assert_non_null(strstr(clattn_last_error(NULL), "nosuchdevice"));
    assert_non_null(strstr(clattn_last_error(NULL), "0:0")); /* lists the devices */
    p.device = NULL;
    p.tuning = "matmul=warp";
    assert_int_equal(clattn_context_create(&c, &p), CLATTN_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(clattn_last_error(NULL), "no variant 'warp'"));
    p.tuning = "matmul=gpu:XX=3";
    assert_int_equal(clattn_context_create(&c, &p), CLATTN_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(clattn_last_error(NULL), "no parameter XX"));
    assert_int_equal(clattn_context_create(NULL, NULL), CLATTN_ERROR_INVALID_ARGUMENT);
}

/* A broken kernel file fails the build with the file, options and log in the message, and the
 * context stays usable. */
static void test_build_failure(void **s)
{
    (void)s;
    char dir[] = "/tmp/clattn-broken-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/softmax.cl", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("__kernel void masked_softmax_rows(__global float *x) { x[0] = undefined_name; }\n", f);
    fclose(f);
    clattn_context *c = NULL;
    clattn_params p = {0};
    p.kernel_dir = dir;
    /* wrapping h_ctx's OpenCL context lets c use the fixture tensors (a tensor of another
     * context is refused) */
    assert_int_equal(clattn_context_wrap(&c, clattn_context_cl(h_ctx), clattn_context_device(h_ctx),
                                         clattn_context_queue(h_ctx), &p),
                     CLATTN_SUCCESS);
    clattn_status st = clattn_masked_softmax(c, &S, NULL, &Y);
    assert_int_equal(st, CLATTN_ERROR_BUILD_FAILED);
    const char *msg = clattn_last_error(c);
    assert_non_null(strstr(msg, "softmax.cl"));
    assert_non_null(strstr(msg, "undefined_name"));
    assert_non_null(strstr(msg, "-cl-std=CL1.2"));
    h_assert_bytes(&Y, y_init, "out");
    /* a missing file is an I/O error naming it */
    assert_int_equal(clattn_matmul(c, &A, 0, &B, 0, 1, 0, &C), CLATTN_ERROR_IO);
    assert_non_null(strstr(clattn_last_error(c), "matmul.cl"));
    clattn_context_destroy(&c);
    assert_null(c);
    remove(path);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul_bad),   cmocka_unit_test(test_matmul_batch_mismatch),
        cmocka_unit_test(test_linear_bad),   cmocka_unit_test(test_softmax_bad),
        cmocka_unit_test(test_bad_device_and_tuning), cmocka_unit_test(test_build_failure),
        cmocka_unit_test(test_fill_minus_infinity),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
