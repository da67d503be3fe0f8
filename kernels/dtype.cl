/* clattn storage types: loads to float32 and stores from float32 for every tensor dtype.
 *
 * A kernel names the dtype of each operand by a type code define (0 float32, 2 float16, 3
 * bfloat16: clattn_dtype's values), declares it `__global CLATTN_T(code) *`, and moves it with
 * CLATTN_LOAD / CLATTN_STORE (one element at p) or their 4-, 8- and 16-wide forms (consecutive
 * elements from p, any alignment of the element). Offsets and strides stay in elements of the
 * operand's own dtype. Arithmetic is float32 throughout.
 * The conversions are integer bit manipulations on the 16-bit patterns, bit for bit the host's
 * (src/ops/convert.c): round to nearest even, overflow to infinity, subnormals both ways, NaN kept NaN
 * with its payload's top bits and the quiet bit set. OpenCL 1.2's vload_half / vstore_half (no
 * cl_khr_fp16 needed) are not used here: PoCL 3.1's 8-wide forms fault on addresses that are not
 * a multiple of 16 bytes, and its scalar ones are ~10x slower than these (kernels that know their
 * rows are aligned use them directly: softmax.cl, decode.cl). With CLATTN_FP16 (the half tuning)
 * float16 converts through cl_khr_fp16 (1) or clang's __fp16 type (2) instead, to the same bits. */
#ifndef CLATTN_DTYPE_CL
#define CLATTN_DTYPE_CL

#ifndef CLATTN_FP16
#define CLATTN_FP16 0
#endif

#define CLATTN_CAT_(a, b) a##b
#define CLATTN_CAT(a, b) CLATTN_CAT_(a, b)
#define CLATTN_T_0 float
#define CLATTN_T_2 ushort
#define CLATTN_T_3 ushort
#define CLATTN_T(code) CLATTN_CAT(CLATTN_T_, code)
#define CLATTN_LOAD(code, p) CLATTN_CAT(clattn_load_, code)(p)
#define CLATTN_LOAD4(code, p) CLATTN_CAT(clattn_load4_, code)(p)
#define CLATTN_LOAD8(code, p) CLATTN_CAT(clattn_load8_, code)(p)
#define CLATTN_LOAD16(code, p) CLATTN_CAT(clattn_load16_, code)(p)
#define CLATTN_STORE(code, v, p) CLATTN_CAT(clattn_store_, code)(v, p)
#define CLATTN_STORE4(code, v, p) CLATTN_CAT(clattn_store4_, code)(v, p)
#define CLATTN_STORE8(code, v, p) CLATTN_CAT(clattn_store8_, code)(v, p)
#define CLATTN_STORE16(code, v, p) CLATTN_CAT(clattn_store16_, code)(v, p)

/* The conversions at width N (empty: scalar), branch-free so that vector lanes and scalar tails
 * give the same bits, in signed integers (x86 has no unsigned vector compares), blending with
 * ?: (a vector condition selects per lane, as select() does; PoCL's select() is a library call). float16 ->
 * float32 is exact; its subnormals are m * 2^-24, a normal float32 product. float32 -> float16:
 * the normal range rebiases the exponent and rounds the low 13 bits to nearest even by adding
 * 0xfff plus the kept lowest bit; below 2^-14, x + 0.5 has an ulp of 2^-24, so the float
 * addition itself rounds x to float16's subnormal grid (a device that flushes float32 subnormal
 * inputs to 0 gives 0 for them, as rounding does: they are below 2^-25). bfloat16: float32's top
 * half rounded the same way. */
#if CLATTN_FP16 == 2
/* clang's __fp16 storage type (the half tuning's `clang`, taken by default on PoCL's x86 CPU
 * devices, whose CPUs have F16C): converted by the target's own instructions (F16C's vcvtph2ps /
 * vcvtps2ph, one per 8 or 16 values), with no cl_khr_fp16 and no library call, to the same bits
 * as the integer path (round to nearest even, NaN payloads quieted, subnormals both ways). Only a
 * clang-based compiler has the type. LLVM may fold a NaN test of a converted value into a float16
 * compare, which x86 lacks and checks lane by lane in scalar code: softmax.cl's maxv. */
#ifndef __clang__
#error "half=clang needs a clang-based OpenCL C compiler (__fp16)"
#endif
typedef __fp16 clattn_h2 __attribute__((ext_vector_type(2)));
typedef __fp16 clattn_h4 __attribute__((ext_vector_type(4)));
typedef __fp16 clattn_h8 __attribute__((ext_vector_type(8)));
typedef __fp16 clattn_h16 __attribute__((ext_vector_type(16)));
static inline float clattn_f16_to_f32(ushort b) { return (float)__builtin_astype(b, __fp16); }
static inline ushort clattn_f32_to_f16(float f) /* OpenCL C refuses a cast to a scalar half */
{
    return __builtin_astype(__builtin_convertvector((float2)(f), clattn_h2), ushort2).s0;
}
#define CLATTN_F16_VEC(N)                                                                          \
    static inline float##N clattn_f16_to_f32##N(ushort##N b)                                     \
    {                                                                                            \
        return __builtin_convertvector(__builtin_astype(b, clattn_h##N), float##N);              \
    }                                                                                            \
    static inline ushort##N clattn_f32_to_f16##N(float##N f)                                     \
    {                                                                                            \
        return __builtin_astype(__builtin_convertvector(f, clattn_h##N), ushort##N);             \
    }
#define CLATTN_F16_V /* the scalars: above */
#define CLATTN_F16_V4 CLATTN_F16_VEC(4)
#define CLATTN_F16_V8 CLATTN_F16_VEC(8)
#define CLATTN_F16_V16 CLATTN_F16_VEC(16)
#define CLATTN_F16_N(N) CLATTN_F16_V##N
#elif CLATTN_FP16
/* cl_khr_fp16's conversions (host: the half tuning picks them where the device has the
 * extension): the same bits as the integer ones below, in one instruction where the hardware has
 * it; only conversions, the arithmetic stays float32. */
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
#define CLATTN_F16_N(N)                                                                            \
    static inline float##N clattn_f16_to_f32##N(ushort##N b)                                     \
    {                                                                                            \
        return convert_float##N(as_half##N(b));                                                  \
    }                                                                                            \
    static inline ushort##N clattn_f32_to_f16##N(float##N f)                                     \
    {                                                                                            \
        return as_ushort##N(convert_half##N##_rte(f));                                           \
    }
#else
#define CLATTN_F16_N(N)                                                                            \
    static inline float##N clattn_f16_to_f32##N(ushort##N b)                                     \
    {                                                                                            \
        int##N h = convert_int##N(b), e = h & (int##N)(0x7c00), m = h & (int##N)(0x3ff);         \
        int##N r = ((h & (int##N)(0x7fff)) << 13) + (int##N)(0x38000000); /* rebias 15 -> 127 */ \
        r = e == (int##N)(0) ? as_int##N(convert_float##N(m) * (float##N)(0x1p-24f)) : r;        \
        int##N nan = m != (int##N)(0) ? (int##N)(0x7fc00000) : (int##N)(0x7f800000);            \
        r = e == (int##N)(0x7c00) ? nan | (m << 13) : r;                                         \
        return as_float##N(r | ((h & (int##N)(0x8000)) << 16));                                  \
    }                                                                                            \
    static inline ushort##N clattn_f32_to_f16##N(float##N f)                                     \
    {                                                                                            \
        int##N x = as_int##N(f), a = x & (int##N)(0x7fffffff);                                   \
        int##N q = (a - (int##N)(0x38000000) + (int##N)(0xfff) + ((a >> 13) & (int##N)(1))) >> 13; \
        int##N sub = as_int##N(as_float##N(a) + (float##N)(0.5f)) - (int##N)(0x3f000000);       \
        q = a < (int##N)(0x38800000) ? sub : q;                                                  \
        q = a >= (int##N)(0x477ff000) ? (int##N)(0x7c00) : q; /* 65520 and up */                 \
        q = a > (int##N)(0x7f800000) ? (int##N)(0x7e00) | ((a >> 13) & (int##N)(0x3ff)) : q;     \
        return convert_ushort##N(q | ((x >> 16) & (int##N)(0x8000)));                            \
    }
#endif
/* clattn_f32_to_bf16_nonneg: the same bits for values known to be >= 0 and not NaN (the NaN test
 * and the sign's mask left out: softmax.cl's weights). */
#define CLATTN_BF16_N(N)                                                                         \
    static inline uint##N clattn_bf16_rne##N(uint##N x) /* unsigned: NaNs' sums wrap, defined */ \
    {                                                                                            \
        return (x + (uint##N)(0x7fff) + ((x >> 16) & (uint##N)(1))) >> 16;                       \
    }                                                                                            \
    static inline ushort##N clattn_f32_to_bf16_nonneg##N(float##N f)                             \
    {                                                                                            \
        return convert_ushort##N(clattn_bf16_rne##N(as_uint##N(f)));                             \
    }                                                                                            \
    static inline ushort##N clattn_f32_to_bf16##N(float##N f)                                    \
    {                                                                                            \
        int##N x = as_int##N(f);                                                                 \
        int##N r = as_int##N(clattn_bf16_rne##N(as_uint##N(f)));                                 \
        r = (x & (int##N)(0x7fffffff)) > (int##N)(0x7f800000)                                   \
                ? ((x >> 16) & (int##N)(0xffff)) | (int##N)(0x40)                                \
                : r;                                                                             \
        return convert_ushort##N(r);                                                             \
    }                                                                                            \
    static inline float##N clattn_bf16_to_f32##N(ushort##N b)                                    \
    {                                                                                            \
        return as_float##N(convert_int##N(b) << 16);                                             \
    }
#define CLATTN_CONVERT_N(N) CLATTN_F16_N(N) CLATTN_BF16_N(N)
CLATTN_CONVERT_N()
CLATTN_CONVERT_N(4)
CLATTN_CONVERT_N(8)
CLATTN_CONVERT_N(16)

static inline float clattn_load_0(__global const float *p) { return *p; }
static inline float clattn_load_2(__global const ushort *p) { return clattn_f16_to_f32(*p); }
static inline float clattn_load_3(__global const ushort *p) { return clattn_bf16_to_f32(*p); }
static inline void clattn_store_0(float v, __global float *p) { *p = v; }
static inline void clattn_store_2(float v, __global ushort *p) { *p = clattn_f32_to_f16(v); }
static inline void clattn_store_3(float v, __global ushort *p) { *p = clattn_f32_to_bf16(v); }

#define CLATTN_DTYPE_N(N)                                                                        \
    static inline float##N clattn_load##N##_0(__global const float *p)                           \
    {                                                                                            \
        return vload##N(0, p);                                                                   \
    }                                                                                            \
    static inline float##N clattn_load##N##_2(__global const ushort *p)                          \
    {                                                                                            \
        return clattn_f16_to_f32##N(vload##N(0, p));                                            \
    }                                                                                            \
    static inline float##N clattn_load##N##_3(__global const ushort *p)                          \
    {                                                                                            \
        return clattn_bf16_to_f32##N(vload##N(0, p));                                            \
    }                                                                                            \
    static inline void clattn_store##N##_0(float##N v, __global float *p)                        \
    {                                                                                            \
        vstore##N(v, 0, p);                                                                      \
    }                                                                                            \
    static inline void clattn_store##N##_2(float##N v, __global ushort *p)                       \
    {                                                                                            \
        vstore##N(clattn_f32_to_f16##N(v), 0, p);                                                \
    }                                                                                            \
    static inline void clattn_store##N##_3(float##N v, __global ushort *p)                       \
    {                                                                                            \
        vstore##N(clattn_f32_to_bf16##N(v), 0, p);                                               \
    }
CLATTN_DTYPE_N(4)
CLATTN_DTYPE_N(8)
CLATTN_DTYPE_N(16)

#endif
