/* 16-bit storage: clattn_convert and the host conversions against references computed another
 * way (double arithmetic: frexp and round-to-nearest-even nearbyint, no bit tricks), and the
 * tensor operations on float16 and bfloat16 tensors. */
#include "harness.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

static float from_bits(uint32_t u)
{
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* A float rounded to a format with `mbits` stored mantissa bits, exponent bias `bias`, largest
 * finite exponent `emax`, as bits: sign, exponent, mantissa. NaN: the quiet pattern with x's top
 * payload bits (clattn's documented rule). */
static unsigned ref_round(float f, int mbits, int bias, int emax)
{
    unsigned s = signbit(f) ? 1u << (mbits + (bias == 15 ? 5 : 8)) : 0;
    unsigned inf = ((1u << (bias == 15 ? 5 : 8)) - 1) << mbits;
    if (isnan(f))
        return s | inf | (1u << (mbits - 1)) | ((bits(f) & 0x7fffffu) >> (23 - mbits));
    double a = fabs((double)f), top = ldexp(2.0 - ldexp(1.0, -mbits - 1), emax);
    if (a >= top) /* at or past the halfway point above the largest finite value */
        return s | inf;
    if (a < ldexp(1.0, 1 - bias)) /* subnormal: in units of 2^(1 - bias - mbits) */
        return s | (unsigned)nearbyint(ldexp(a, bias - 1 + mbits));
    int e;
    frexp(a, &e);
    int E = e - 1;
    double mant = nearbyint((ldexp(a, -E) - 1.0) * ldexp(1.0, mbits));
    if (mant == ldexp(1.0, mbits)) {
        E++;
        mant = 0;
    }
    return s | ((unsigned)(E + bias) << mbits) | (unsigned)mant;
}

static unsigned ref_half(float f)
{
    return ref_round(f, 10, 15, 15);
}

static unsigned ref_bf16(float f)
{
    return ref_round(f, 7, 127, 127);
}

/* The value of a half's bits, in double (NaN for NaNs). */
static double ref_half_value(unsigned h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    double s = (h & 0x8000) ? -1.0 : 1.0;
    if (e == 31)
        return m ? NAN : s * INFINITY;
    return e == 0 ? s * ldexp(m, -24) : s * ldexp(1024 + m, e - 25);
}

/* Values at every edge: zeros, the largest finite halves and what rounds past them, infinities,
 * NaNs with payloads, the smallest subnormals and the ties around them, ties to even at 1, the
 * smallest normals, bfloat16's largest finite and its overflow, float32's subnormals. */
static const float edge_bits_f[] = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.996f, 65520.0f,
                                    -65520.0f, 1e10f, 5.9604645e-08f, 2.9802322e-08f,
                                    2.9802326e-08f, 4.4703484e-08f, 6.1035156e-05f,
                                    6.0975552e-05f, 1.00048828125f, 1.00146484375f, 0.1f, 3.14159f,
                                    3.3895314e38f, 3.3961775e38f, 1e-39f, 1.4e-45f, 9.1835e-41f};
static const uint32_t edge_bits_u[] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u,
                                       0x7f800001u, 0x7fa5a5a5u, 0x7f7fffffu, 0x7f7f8000u,
                                       0x00000001u, 0x807fffffu, 0x3f808000u, 0x3f818000u,
                                       0x3f80ffffu};

/* n test floats: the edges, then random bit patterns and random values of every magnitude */
static float *test_floats(size_t n)
{
    float *x = malloc(n * sizeof *x);
    size_t ne = sizeof edge_bits_f / sizeof edge_bits_f[0], nu = sizeof edge_bits_u / 4, i = 0;
    for (; i < ne; i++)
        x[i] = edge_bits_f[i];
    for (size_t j = 0; j < nu; j++, i++)
        x[i] = from_bits(edge_bits_u[j]);
    for (; i < n; i++) {
        uint32_t u = ((uint32_t)h_randint(0, 0xffff) << 16) | (uint32_t)h_randint(0, 0xffff);
        x[i] = i % 2 ? from_bits(u) : (float)ldexp(h_uniform(-1, 1), h_randint(-30, 20));
    }
    return x;
}

static void assert_rounded(unsigned got, unsigned want, float f, const char *what)
{
    if (got != want)
        fail_msg("%s of %a (bits 0x%08x): 0x%04x, expected 0x%04x", what, (double)f, bits(f), got,
                 want);
}

/* The host conversions against the references, on the edges and 200000 other floats. */
static void test_host_float_to_16(void **s)
{
    (void)s;
    size_t n = 200000;
    float *x = test_floats(n);
    for (size_t i = 0; i < n; i++) {
        assert_rounded(clattn_float_to_half(x[i]), ref_half(x[i]), x[i], "clattn_float_to_half");
        assert_rounded(clattn_float_to_bfloat16(x[i]), ref_bf16(x[i]), x[i],
                       "clattn_float_to_bfloat16");
    }
    free(x);
}

/* Every 16-bit pattern back to float32: exact values, NaN stays NaN (quiet, payload kept). */
static void test_host_16_to_float(void **s)
{
    (void)s;
    for (unsigned h = 0; h < 65536; h++) {
        float f = clattn_half_to_float((unsigned short)h);
        double want = ref_half_value(h);
        if (isnan(want) ? !isnan(f) || !(bits(f) & 0x400000u) ||
                              ((bits(f) >> 13) & 0x3ffu) != ((h & 0x3ffu) | 0x200u)
                        : (double)f != want || !signbit(f) != !signbit(want))
            fail_msg("clattn_half_to_float(0x%04x) = %a, expected %a", h, (double)f, want);
        float b = clattn_bfloat16_to_float((unsigned short)h);
        if (bits(b) != (uint32_t)h << 16)
            fail_msg("clattn_bfloat16_to_float(0x%04x) = bits 0x%08x", h, bits(b));
    }
}

/* x (n elements of dtype xt from host hx) converted on the device into a poisoned y of dtype yt */
static void *device_convert(const void *hx, clattn_dtype xt, clattn_dtype yt, size_t n)
{
    clattn_tensor tx = h_tensor(xt, 1, H_DIMS(n), hx), ty = h_tensor(yt, 1, H_DIMS(n), NULL);
    size_t es = clattn_dtype_size(yt);
    unsigned char *poison = malloc(n * es), *out = malloc(n * es);
    memset(poison, 0x5a, n * es);
    assert_int_equal(clattn_tensor_write_blocking(h_ctx, &ty, poison), CLATTN_SUCCESS);
    if (clattn_convert(h_ctx, &tx, &ty) != CLATTN_SUCCESS)
        fail_msg("clattn_convert: %s", clattn_last_error(h_ctx));
    assert_int_equal(clattn_tensor_read_blocking(h_ctx, &ty, out), CLATTN_SUCCESS);
    clattn_tensor_release(&tx);
    clattn_tensor_release(&ty);
    free(poison);
    return out;
}

/* float32 -> float16 and bfloat16 on the device: the references' bits, the host's bits. */
static void test_device_from_float(void **s)
{
    (void)s;
    size_t n = h_small() ? 5003 : 100003; /* fewer under Oclgrind (CLATTN_TEST_SMALL) */
    float *x = test_floats(n);
    unsigned short *h = device_convert(x, CLATTN_FLOAT32, CLATTN_FLOAT16, n);
    unsigned short *b = device_convert(x, CLATTN_FLOAT32, CLATTN_BFLOAT16, n);
    for (size_t i = 0; i < n; i++) {
        assert_rounded(h[i], ref_half(x[i]), x[i], "convert float32 -> float16");
        assert_rounded(b[i], ref_bf16(x[i]), x[i], "convert float32 -> bfloat16");
    }
    free(x);
    free(h);
    free(b);
}

/* Every float16 and bfloat16 pattern to float32 and to the other 16-bit format on the device, as
 * the host conversions (checked above) give; the same dtype copies. */
static void test_device_from_16(void **s)
{
    (void)s;
    size_t n = 65536;
    unsigned short *all = malloc(n * 2);
    for (size_t i = 0; i < n; i++)
        all[i] = (unsigned short)i;
    float *hf = device_convert(all, CLATTN_FLOAT16, CLATTN_FLOAT32, n);
    float *bf = device_convert(all, CLATTN_BFLOAT16, CLATTN_FLOAT32, n);
    unsigned short *hb = device_convert(all, CLATTN_FLOAT16, CLATTN_BFLOAT16, n);
    unsigned short *bh = device_convert(all, CLATTN_BFLOAT16, CLATTN_FLOAT16, n);
    unsigned short *hh = device_convert(all, CLATTN_FLOAT16, CLATTN_FLOAT16, n);
    for (size_t i = 0; i < n; i++) {
        unsigned short u = (unsigned short)i;
        float f16 = clattn_half_to_float(u), b16 = clattn_bfloat16_to_float(u);
        if (bits(hf[i]) != bits(f16) || bits(bf[i]) != bits(b16))
            fail_msg("convert 0x%04x to float32: 0x%08x / 0x%08x, expected 0x%08x / 0x%08x", u,
                     bits(hf[i]), bits(bf[i]), bits(f16), bits(b16));
        assert_rounded(hb[i], clattn_float_to_bfloat16(f16), f16, "convert float16 -> bfloat16");
        assert_rounded(bh[i], clattn_float_to_half(b16), b16, "convert bfloat16 -> float16");
        assert_rounded(hh[i], u, f16, "convert float16 -> float16");
    }
    free(all); free(hf); free(bf); free(hb); free(bh); free(hh);
}

/* x (n elements of dtype xt) converted into y (dtype yt) in views of 7 elements: fewer than the
 * kernel's 8 per work-item, so every element takes its scalar path (the lanes above take the
 * 8-wide one). */
static void *device_convert_scalar(const void *hx, clattn_dtype xt, clattn_dtype yt, size_t n)
{
    clattn_tensor tx = h_tensor(xt, 1, H_DIMS(n), hx), ty = h_tensor(yt, 1, H_DIMS(n), NULL);
    void *out = malloc(n * clattn_dtype_size(yt));
    for (size_t i = 0; i < n; i += 7) {
        size_t len = n - i < 7 ? n - i : 7;
        clattn_tensor vx = clattn_view(tx.buf, xt, i, 1, H_DIMS(len));
        clattn_tensor vy = clattn_view(ty.buf, yt, i, 1, H_DIMS(len));
        if (clattn_convert(h_ctx, &vx, &vy) != CLATTN_SUCCESS)
            fail_msg("clattn_convert: %s", clattn_last_error(h_ctx));
    }
    assert_int_equal(clattn_tensor_read_blocking(h_ctx, &ty, out), CLATTN_SUCCESS);
    clattn_tensor_release(&tx);
    clattn_tensor_release(&ty);
    return out;
}

/* The scalar paths: every float16 pattern (every 31st under Oclgrind) to float32, and the edge
 * floats with others to both 16-bit formats, as the host converts them. */
static void test_device_scalar(void **s)
{
    (void)s;
    size_t n = 65536, step = h_small() ? 31 : 1, m = 0, nf = 7 * 300;
    unsigned short *pat = malloc(n * 2);
    for (size_t i = 0; i < n; i += step)
        pat[m++] = (unsigned short)i;
    float *hf = device_convert_scalar(pat, CLATTN_FLOAT16, CLATTN_FLOAT32, m);
    for (size_t i = 0; i < m; i++)
        if (bits(hf[i]) != bits(clattn_half_to_float(pat[i])))
            fail_msg("scalar convert 0x%04x to float32: 0x%08x, expected 0x%08x", pat[i],
                     bits(hf[i]), bits(clattn_half_to_float(pat[i])));
    float *x = test_floats(nf);
    unsigned short *h = device_convert_scalar(x, CLATTN_FLOAT32, CLATTN_FLOAT16, nf);
    unsigned short *b = device_convert_scalar(x, CLATTN_FLOAT32, CLATTN_BFLOAT16, nf);
    for (size_t i = 0; i < nf; i++) {
        assert_rounded(h[i], ref_half(x[i]), x[i], "scalar convert float32 -> float16");
        assert_rounded(b[i], ref_bf16(x[i]), x[i], "scalar convert float32 -> bfloat16");
    }
    free(pat); free(hf); free(x); free(h); free(b);
}

/* 16-bit tensors: created from host bits, filled (the value rounded), read and written as 2-byte
 * elements, views at element offsets of their own dtype. */
static void test_tensors(void **s)
{
    (void)s;
    unsigned short init[6] = {1, 2, 3, 4, 5, 6}, got[6];
    static const clattn_dtype dts[2] = {CLATTN_FLOAT16, CLATTN_BFLOAT16};
    for (int d = 0; d < 2; d++) {
        clattn_tensor t = h_tensor(dts[d], 2, H_DIMS(2, 3), init);
        assert_int_equal(clattn_dtype_size(dts[d]), 2);
        clattn_tensor mid = clattn_view(t.buf, dts[d], 2, 1, H_DIMS(3)); /* elements 2..4 */
        assert_int_equal(clattn_tensor_fill(h_ctx, &mid, 1e-7f), CLATTN_SUCCESS);
        assert_int_equal(clattn_tensor_read_blocking(h_ctx, &t, got), CLATTN_SUCCESS);
        unsigned want = d == 0 ? ref_half(1e-7f) : ref_bf16(1e-7f);
        for (int i = 0; i < 6; i++)
            if (got[i] != (i >= 2 && i < 5 ? want : init[i]))
                fail_msg("%s fill of elements 2..4: element %d is 0x%04x", d ? "bfloat16" :
                         "float16", i, got[i]);
        clattn_tensor_release(&t);
    }
    assert_int_equal(clattn_dtype_size(CLATTN_FLOAT32), 4);
    assert_int_equal(clattn_dtype_size((clattn_dtype)7), 0);
}

/* Views of different dtypes in one buffer overlap by bytes: float16 elements 2..3 are float32
 * element 1. */
static void test_mixed_overlap(void **s)
{
    (void)s;
    static const float init[4] = {1, 2, 3, 4};
    clattn_tensor t = h_tensor(CLATTN_FLOAT32, 1, H_DIMS(4), init);
    clattn_tensor f32 = clattn_view(t.buf, CLATTN_FLOAT32, 1, 1, H_DIMS(1));
    clattn_tensor h_in = clattn_view(t.buf, CLATTN_FLOAT16, 3, 1, H_DIMS(1));
    clattn_tensor h_out = clattn_view(t.buf, CLATTN_FLOAT16, 4, 1, H_DIMS(1));
    h_assert_error(clattn_convert(h_ctx, &f32, &h_in), CLATTN_ERROR_INVALID_ARGUMENT,
                   "y: overlaps x");
    assert_int_equal(clattn_convert(h_ctx, &f32, &h_out), CLATTN_SUCCESS);
    unsigned short got[8];
    assert_int_equal(clattn_tensor_read_blocking(h_ctx, &t, got), CLATTN_SUCCESS);
    assert_int_equal(got[4], 0x4000); /* float32 element 1 (2.0) as float16, over element 2 */
    assert_int_equal(got[5], 0x4040); /* untouched: the upper half of element 2 (3.0) */
    assert_int_equal(got[3], 0x4000); /* and of element 1 */
    clattn_tensor_release(&t);
}

/* Bad input: int32, shapes that differ, an unknown dtype. */
static void test_bad_input(void **s)
{
    (void)s;
    clattn_tensor f = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(2, 3), NULL);
    clattn_tensor i = h_tensor(CLATTN_INT32, 2, H_DIMS(2, 3), NULL);
    clattn_tensor h = h_tensor(CLATTN_FLOAT16, 2, H_DIMS(3, 2), NULL);
    clattn_tensor h6 = h_tensor(CLATTN_FLOAT16, 2, H_DIMS(2, 3), NULL);
    h_assert_error(clattn_convert(h_ctx, &i, &h6), CLATTN_ERROR_INVALID_TENSOR,
                   "x: dtype int32, expected float32, float16 or bfloat16");
    h_assert_error(clattn_convert(h_ctx, &f, &h), CLATTN_ERROR_SHAPE_MISMATCH,
                   "y: shape (3, 2), expected x's (2, 3)");
    h_assert_error(clattn_tensor_fill(h_ctx, &i, 1.0f), CLATTN_ERROR_INVALID_TENSOR, "int32");
    clattn_tensor bad = f;
    bad.dtype = (clattn_dtype)9;
    h_assert_error(clattn_convert(h_ctx, &bad, &h6), CLATTN_ERROR_INVALID_TENSOR, "unknown");
    clattn_tensor_release(&f);
    clattn_tensor_release(&i);
    clattn_tensor_release(&h);
    clattn_tensor_release(&h6);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_host_float_to_16), cmocka_unit_test(test_host_16_to_float),
        cmocka_unit_test(test_device_from_float), cmocka_unit_test(test_device_from_16),
        cmocka_unit_test(test_device_scalar),
        cmocka_unit_test(test_tensors),           cmocka_unit_test(test_mixed_overlap),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, h_setup, h_teardown);
}
