/* clattn_transpose_qkv / clattn_transpose_output against d2l's reshape-permute-reshape. */
#include "harness.h"
#include <stdlib.h>

/* out[(b*H + h), t, e] = x[b, t, h*dh + e] */
static void check_case(int B, int T, int H, int dh, int four_d)
{
    size_t n = (size_t)B * T * H * dh;
    float *x = malloc(n * 4);
    h_fill(x, n, -1, 1);
    clattn_tensor tx = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(B, T, H * dh), x);
    clattn_tensor th = four_d ? h_tensor(CLATTN_FLOAT32, 4, H_DIMS(B, H, T, dh), NULL)
                              : h_tensor(CLATTN_FLOAT32, 3, H_DIMS(B * H, T, dh), NULL);
    clattn_tensor tb = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(B, T, H * dh), NULL);
    h_poison(&th);
    h_poison(&tb);
    if (clattn_transpose_qkv(h_ctx, &tx, H, &th) != CLATTN_SUCCESS ||
        clattn_transpose_output(h_ctx, &th, H, &tb) != CLATTN_SUCCESS)
        fail_msg("transpose: %s", clattn_last_error(h_ctx));
    float *h = h_read(&th), *back = h_read(&tb);
    for (int b = 0; b < B; b++)
        for (int hh = 0; hh < H; hh++)
            for (int t = 0; t < T; t++)
                for (int e = 0; e < dh; e++) {
                    float want = x[((size_t)b * T + t) * H * dh + (size_t)hh * dh + e];
                    float got = h[(((size_t)b * H + hh) * T + t) * dh + e];
                    if (got != want)
                        fail_msg("B=%d T=%d H=%d dh=%d: head %d t %d e %d is %g, expected %g", B,
                                 T, H, dh, hh, t, e, got, want);
                }
    assert_memory_equal(back, x, n * 4);
    free(x); free(h); free(back);
    clattn_tensor_release(&tx); clattn_tensor_release(&th); clattn_tensor_release(&tb);
}

static void test_shapes(void **s)
{
    (void)s;
    check_case(1, 1, 1, 1, 0);
    check_case(2, 4, 5, 20, 0);
    check_case(3, 7, 8, 13, 1);
    check_case(2, 97, 1, 59, 0);
    check_case(4, 3, 8, 1, 1);
}

/* 16-bit tensors move as bits (every pattern, NaNs included), both ways, 3-D and 4-D heads. */
static void check_case16(clattn_dtype dt, int B, int T, int H, int dh, int four_d)
{
    size_t n = (size_t)B * T * H * dh;
    unsigned short *x = malloc(n * 2);
    for (size_t i = 0; i < n; i++)
        x[i] = (unsigned short)h_randint(0, 0xffff);
    clattn_tensor tx = h_tensor(dt, 3, H_DIMS(B, T, H * dh), x);
    clattn_tensor th = four_d ? h_tensor(dt, 4, H_DIMS(B, H, T, dh), NULL)
                              : h_tensor(dt, 3, H_DIMS(B * H, T, dh), NULL);
    clattn_tensor tb = h_tensor(dt, 3, H_DIMS(B, T, H * dh), NULL);
    h_poison(&th);
    h_poison(&tb);
    if (clattn_transpose_qkv(h_ctx, &tx, H, &th) != CLATTN_SUCCESS ||
        clattn_transpose_output(h_ctx, &th, H, &tb) != CLATTN_SUCCESS)
        fail_msg("transpose (16-bit): %s", clattn_last_error(h_ctx));
    unsigned short *h = h_read(&th), *back = h_read(&tb);
    for (int b = 0; b < B; b++)
        for (int hh = 0; hh < H; hh++)
            for (int t = 0; t < T; t++)
                for (int e = 0; e < dh; e++) {
                    unsigned short want = x[((size_t)b * T + t) * H * dh + (size_t)hh * dh + e];
                    unsigned short got = h[(((size_t)b * H + hh) * T + t) * dh + e];
                    if (got != want)
                        fail_msg("dtype %d B=%d T=%d H=%d dh=%d: head %d t %d e %d is 0x%04x, "
                                 "expected 0x%04x", (int)dt, B, T, H, dh, hh, t, e, got, want);
                }
    assert_memory_equal(back, x, n * 2);
    free(x); free(h); free(back);
    clattn_tensor_release(&tx); clattn_tensor_release(&th); clattn_tensor_release(&tb);
}

static void test_16bit(void **s)
{
    (void)s;
    check_case16(CLATTN_FLOAT16, 1, 1, 1, 1, 0);
    check_case16(CLATTN_FLOAT16, 3, 7, 8, 13, 1);
    check_case16(CLATTN_BFLOAT16, 2, 97, 1, 59, 0);
    check_case16(CLATTN_BFLOAT16, 4, 3, 8, 1, 1);
}

static void test_bad(void **s)
{
    (void)s;
    float x[2 * 3 * 10] = {0}, y0[8 * 3 * 10];
    for (int i = 0; i < 8 * 3 * 10; i++)
        y0[i] = (float)i;
    clattn_tensor tx = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(2, 3, 10), x);
    clattn_tensor ty = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(8, 3, 10), y0);
    clattn_tensor y4 = clattn_view(ty.buf, CLATTN_FLOAT32, 0, 3, H_DIMS(8, 3, 2));
    h_assert_error(clattn_transpose_qkv(h_ctx, &tx, 3, &y4), CLATTN_ERROR_INVALID_ARGUMENT,
                   "num_heads: 3 does not divide");
    h_assert_error(clattn_transpose_qkv(h_ctx, &tx, 0, &y4), CLATTN_ERROR_INVALID_ARGUMENT, "num_heads");
    h_assert_error(clattn_transpose_qkv(h_ctx, &tx, 5, &y4), CLATTN_ERROR_SHAPE_MISMATCH, "out: shape");
    h_assert_error(clattn_transpose_qkv(h_ctx, &tx, 2, &tx), CLATTN_ERROR_SHAPE_MISMATCH, "out: shape");
    /* dtypes: the heads must be x's; int32 is not moved */
    clattn_tensor y16 = clattn_view(ty.buf, CLATTN_FLOAT16, 0, 3, H_DIMS(4, 3, 5));
    h_assert_error(clattn_transpose_qkv(h_ctx, &tx, 2, &y16), CLATTN_ERROR_INVALID_TENSOR,
                   "out: dtype float16, expected float32");
    clattn_tensor xi = tx;
    xi.dtype = CLATTN_INT32;
    h_assert_error(clattn_transpose_qkv(h_ctx, &xi, 2, &y4), CLATTN_ERROR_INVALID_TENSOR,
                   "x: dtype int32, expected float32, float16 or bfloat16");
    h_assert_bytes(&ty, y0, "out");
    clattn_tensor_release(&tx);
    clattn_tensor_release(&ty);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_shapes), cmocka_unit_test(test_16bit),
                                       cmocka_unit_test(test_bad)};
    return cmocka_run_group_tests(tests, h_setup, h_teardown);
}
