/* clattn_convert (kernels/convert.cl) and the host conversions it matches bit for bit. */
#include "internal.h"
#include <stdint.h>
#include <string.h>

static uint32_t bits_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float float_of(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Rounds m >> shift to nearest even (shift >= 1). */
static uint32_t round_shift(uint32_t m, unsigned shift)
{
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    return q + (rem > half || (rem == half && (q & 1u)));
}

unsigned short clattn_float_to_half(float f)
{
    uint32_t x = bits_of(f), sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN: quiet, the payload's top bits */
        return (unsigned short)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) /* 65520 and up round to infinity */
        return (unsigned short)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* below 2^-14: a subnormal or zero, in units of 2^-24 */
        uint32_t e = a >> 23;
        if (e < 102u)
            return (unsigned short)sign;
        return (unsigned short)(sign | round_shift((a & 0x7fffffu) | 0x800000u, 126u - e));
    }
    return (unsigned short)(sign | round_shift(a - 0x38000000u, 13)); /* exponent 127 -> 15 */
}

float clattn_half_to_float(unsigned short h)
{
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16, e = ((uint32_t)h >> 10) & 0x1fu;
    uint32_t m = (uint32_t)h & 0x3ffu;
    if (e == 31u)
        return float_of(m ? sign | 0x7fc00000u | (m << 13) : sign | 0x7f800000u);
    if (e == 0u) {
        if (m == 0u)
            return float_of(sign);
        unsigned shift = 1; /* normalise the subnormal: bit 10 set */
        while (!((m << shift) & 0x400u))
            shift++;
        return float_of(sign | ((113u - shift) << 23) | (((m << shift) & 0x3ffu) << 13));
    }
    return float_of(sign | ((e + 112u) << 23) | (m << 13));
}

unsigned short clattn_float_to_bfloat16(float f)
{
    uint32_t x = bits_of(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (unsigned short)((x >> 16) | 0x40u);
    return (unsigned short)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

float clattn_bfloat16_to_float(unsigned short b)
{
    return float_of((uint32_t)b << 16);
}

clattn_status clattn__enqueue_convert(clattn_context *ctx, const clattn_tensor *x,
                                      const clattn_tensor *y)
{
    clattn_status st = CLATTN_SUCCESS;
    cl_kernel k;
    int n = (int)clattn_tensor_numel(x), xo = (int)x->offset, yo = (int)y->offset;
    size_t es = clattn_dtype_size(x->dtype);
    if (x->dtype == y->dtype) /* bit for bit, signalling NaNs too */
        return clattn__copy(ctx, x->buf, x->offset * es, y->buf, y->offset * es, n * es,
                            "convert");
    char defs[32] = "";
    clattn__dtype_define(defs, sizeof defs, "XT", x->dtype);
    clattn__dtype_define(defs, sizeof defs, "YT", y->dtype);
    CHECK_ST(clattn__get_kernel(ctx, "convert.cl", defs, "convert", &k));
    CHECK_ST(clattn__set_args(ctx, k, "convert", ARG(x->buf), ARG(xo), ARG(y->buf), ARG(yo),
                              ARG(n), ARGS_END));
    size_t gws = ((size_t)n + 7) / 8;
    CHECK_ST(clattn__launch(ctx, k, 1, &gws, NULL, "convert"));
fail:
    return st;
}

clattn_status clattn__cast_in(clattn_context *ctx, const clattn_tensor *const *ts, const int *load,
                              int n, clattn_tensor *out)
{
    clattn_status st = CLATTN_SUCCESS;
    size_t total = 0, off = 0;
    cl_mem buf = NULL;
    for (int i = 0; i < n; i++)
        if (ts[i] && ts[i]->dtype != CLATTN_FLOAT32)
            total += clattn_tensor_numel(ts[i]);
    /* the stand-ins lie one after another in one buffer, indexed in 32 bits like any view */
    CHECK(ctx, total <= (size_t)INT_MAX, CLATTN_ERROR_UNSUPPORTED,
          "16-bit operands of %zu elements together, staged as float32, exceed 32-bit indexing",
          total);
    if (total)
        CHECK_ST(clattn__scratch(ctx, CLATTN_SCRATCH_CAST, total * 4, &buf));
    for (int i = 0; i < n; i++) {
        if (!ts[i])
            continue;
        out[i] = *ts[i];
        if (ts[i]->dtype == CLATTN_FLOAT32)
            continue;
        out[i] = clattn_view(buf, CLATTN_FLOAT32, off, ts[i]->ndim, ts[i]->dims);
        off += clattn_tensor_numel(ts[i]);
        if (load[i])
            CHECK_ST(clattn__enqueue_convert(ctx, ts[i], &out[i]));
    }
fail:
    return st;
}

clattn_status clattn__cast_out(clattn_context *ctx, const clattn_tensor *t32,
                               const clattn_tensor *t)
{
    return t32->buf == t->buf ? CLATTN_SUCCESS : clattn__enqueue_convert(ctx, t32, t);
}

clattn_status clattn_convert(clattn_context *ctx, const clattn_tensor *x, const clattn_tensor *y)
{
    clattn_status st = CLATTN_SUCCESS;
    char s1[96], s2[96];
    CHECK(NULL, ctx, CLATTN_ERROR_INVALID_ARGUMENT, "ctx: NULL context");
    CHECK_ST(clattn__check_float_tensor(ctx, x, "x", 1, CLATTN_MAX_DIMS));
    CHECK_ST(clattn__check_float_tensor(ctx, y, "y", 1, CLATTN_MAX_DIMS));
    CHECK(ctx, x->ndim == y->ndim && memcmp(x->dims, y->dims, sizeof(size_t) * x->ndim) == 0,
          CLATTN_ERROR_SHAPE_MISMATCH, "y: shape %s, expected x's %s",
          clattn__shape_str(y, s1, sizeof s1), clattn__shape_str(x, s2, sizeof s2));
    const clattn_arg outs[1] = {{y, "y"}}, ins[1] = {{x, "x"}};
    CHECK_ST(clattn__check_no_overlap(ctx, outs, 1, ins, 1));
    CHECK_ST(clattn__enqueue_convert(ctx, x, y));
fail:
    return st;
}
