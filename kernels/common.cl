/* clattn common helpers: mask evaluation shared by the softmax and attention kernels.
 *
 * Score layout: row-major (D0, D1, Q, K); a row r = (d0 * D1 + d1) * Q + q holds K keys.
 * Mask description (all optional, combined: a key is blocked when any part blocks it):
 *   lens, lens_off, lens_mode: 0 none; 1 one length per d0 (repeated over d1 and q); 2 one per (d0, q).
 *   win = (shift, left, right, 0): row q's diagonal is key q + shift (shift 0: top-left, K - Q:
 *                    bottom-right); keys k < q + shift - left and k > q + shift + right are
 *                    blocked, -1 meaning unbounded on that side (causal is right = 0). The host
 *                    takes a side that blocks no key as -1; a bounded one is below Q + K, and
 *                    the row bounds are summed in 64 bits (Q + K itself can pass INT_MAX).
 *   mask, mask_off, ms: int 0/1, element (d0, d1, q, k) at mask[mask_off + ms.x*d0 + ms.y*d1 + ms.z*q + ms.w*k]
 *                    (strides 0 where the mask broadcasts); NULL = no mask tensor; 0 = blocked.
 * Bias (float, optional): bias, bias_off, bs as mask and ms, added to every score before the mask
 *   (SDPA's float attn_mask); NULL = none.
 * ALiBi (float, optional): slopes, slopes_off, ss: the slope of batch (d0, d1) at
 *   slopes[slopes_off + ss.x * d0 + ss.y * d1]; key k of row q then gets CLATTN_ALIBI(slope,
 *   q + K - Q - k) added after the bias, before the mask (FlashAttention-2's form, from the
 *   bottom-right diagonal whatever win says); NULL = none.
 * Blocked scores take the value `fill` before the softmax, exactly as masked_fill does. */
#ifndef CLATTN_COMMON_CL
#define CLATTN_COMMON_CL

/* The kernel shapes a program holds: bit 1 the CPU shape's main kernels, bit 2 the GPU shape's,
 * 3 (a file built on its own) both, 0 neither (a program of kernels both shapes use: decoding's
 * merge, append and advance, linear's column sums). The host builds a variant's programs with
 * its own shape alone (tuning.c), because a GPU driver or Intel's CPU runtime compiles every
 * kernel of a program at clBuildProgram, and the other shape's cost most of it: flash.cl for
 * gfx906 (clang 15) 9.2 s with flash_cpu's unrolled register tiles, 0.6 s without; on Intel's
 * CPU runtime a GPU-shape program 16 s with them, 0.6 s without. The shapes' main kernels are
 * guarded; their small helpers are not. */
#ifndef CLATTN_SHAPES
#define CLATTN_SHAPES 3
#endif
#define CLATTN_CPU_SHAPE (CLATTN_SHAPES & 1)
#define CLATTN_GPU_SHAPE (CLATTN_SHAPES & 2)

/* Helpers are `static inline`: a plain C99 `inline` function has no definition of its own, so a
 * compiler that declines to inline it (or -cl-opt-disable) leaves an unresolved symbol. */

/* Asks for elements [0, n) from p, `line` of them per 64-byte cache line, to be brought into the
 * cache. PoCL's prefetch() is empty, so where clang compiles for x86-64 (PoCL, Intel's CPU
 * runtime) it is one __builtin_prefetch per line; the integer cast to a generic pointer is sound
 * there, where every address space is the one flat memory. */
#if defined(__clang__) && defined(__x86_64__)
#define CLATTN_PREFETCH(p, n, line)                                                              \
    for (int c_ = 0; c_ < (n); c_ += (line))                                                     \
        __builtin_prefetch((const void *)(size_t)((p) + c_), 0, 3)
#else
#define CLATTN_PREFETCH(p, n, line) prefetch((p), (size_t)(n))
#endif

/* Keys k >= the returned limit are blocked by lengths, the window's right side or causality. */
static inline int clattn_row_limit(int d0, int q, int K, __global const int *lens, int lens_off,
                                   int lens_mode, int Q, int4 win)
{
    int limit = K;
    if (lens_mode == 1)
        limit = lens[lens_off + d0];
    else if (lens_mode == 2)
        limit = lens[lens_off + d0 * Q + q];
    limit = clamp(limit, 0, K); /* device lengths cannot be checked on the host without a sync */
    if (win.z >= 0)
        limit = (int)clamp((long)q + win.x + win.z + 1, 0L, (long)limit);
    return limit;
}

/* Keys k < the returned bound are blocked by the window's left side (0 when it has none). */
static inline int clattn_row_lo(int q, int K, int4 win)
{
    return win.y >= 0 ? (int)clamp((long)q + win.x - win.y, 0L, (long)K) : 0;
}

/* Start of this row's mask entries, or NULL when there is no mask tensor. */
static inline __global const int *clattn_mask_row(__global const int *mask, int mask_off,
                                                  int4 ms, int d0, int d1, int q)
{
    return mask ? mask + mask_off + ms.x * d0 + ms.y * d1 + ms.z * q : 0;
}

/* Start of this row's bias entries, or NULL when there is no bias. */
static inline __global const float *clattn_bias_row(__global const float *bias, int bias_off,
                                                    int4 bs, int d0, int d1, int q)
{
    return bias ? bias + bias_off + bs.x * d0 + bs.y * d1 + bs.z * q : 0;
}

/* The slope of batch (d0, d1) (0 when there are none). */
static inline float clattn_slope(__global const float *slopes, int slopes_off, int2 ss, int d0,
                                 int d1)
{
    return slopes ? slopes[slopes_off + ss.x * d0 + ss.y * d1] : 0.0f;
}

/* ALiBi's bias at a key `dist` keys before the diagonal (a float or floatn of whole numbers, exact
 * below 2^24): one rounding, the product's, whatever the vector width, so that every kernel adds
 * the same value. */
#define CLATTN_ALIBI(slope, dist) (-((slope) * fabs(dist)))

/* The body of a function of a float type T (int type IT of its width) returning 2^x for x <= 0:
 * x = n + r with n = round(x) taken from the low bits of x + magic, and a degree-6 minimax
 * polynomial for 2^r on [-1/2, 1/2] (about 1.3 ulp), times 2^n built in the exponent bits. x is
 * clamped at -127 first, where 2^n's exponent field becomes 0: results below 2^-126.5 (under
 * 1.3e-38, far below one ulp of a softmax's sum, which is >= 1) are exactly 0, as is 2^-inf. NaN
 * stays NaN (the clamp keeps x when the comparison is false). PoCL's builtin exp handles the
 * whole range and costs about twice the vector instructions. The same code at every width, so
 * equal inputs give equal results in vector lanes and scalar tails. */
#define CLATTN_EXP2_NEG(T, IT)                                                                   \
    const T magic = (T)(12582912.0f + 127.0f); /* 1.5 * 2^23 + exponent bias */                  \
    x = select(x, (T)(-127.0f), x < (T)(-127.0f));                                               \
    T t = x + magic; /* rounds x to an integer n; the low mantissa bits hold n + 127 */          \
    T r = x - (t - magic); /* exact, in [-1/2, 1/2] */                                           \
    T two_n = as_##T(as_##IT(t) << 23);                                                          \
    T p = fma(r, (T)(1.534581243e-4f), (T)(1.339993090e-3f));                                    \
    p = fma(p, r, (T)(9.618489072e-3f));                                                         \
    p = fma(p, r, (T)(5.550328642e-2f));                                                         \
    p = fma(p, r, (T)(2.402264625e-1f));                                                         \
    p = fma(p, r, (T)(6.931471825e-1f));                                                         \
    p = fma(p, r, (T)(1.0f));                                                                    \
    return p * two_n;

/* exp(x) = 2^(x log2 e) for x <= 0 (a score minus its running maximum) by CLATTN_EXP2_NEG, about
 * 2 ulp with the product's rounding, at the widths the kernels use. */
static inline float clattn_exp_neg(float x)
{
    x *= M_LOG2E_F;
    CLATTN_EXP2_NEG(float, int)
}

static inline float8 clattn_exp_neg8(float8 x)
{
    x *= (float8)(M_LOG2E_F);
    CLATTN_EXP2_NEG(float8, int8)
}

static inline float16 clattn_exp_neg16(float16 x)
{
    x *= (float16)(M_LOG2E_F);
    CLATTN_EXP2_NEG(float16, int16)
}

/* 1 when key k of a row is open: inside [lo, limit) and not blocked by the mask tensor's row. */
static inline int clattn_open(int k, int lo, int limit, __global const int *mrow, int msk)
{
    return k >= lo && k < limit && (!mrow || mrow[msk * k] != 0);
}

static inline float clattn_masked(float x, int k, int lo, int limit, __global const int *mrow,
                                  int msk, float fill)
{
    return clattn_open(k, lo, limit, mrow, msk) ? x : fill;
}

/* 1 for a NaN or an infinity, on the exponent bits: not 0 * x, which Mesa's llvmpipe folds to 0 */
static inline int clattn_nonfinite(float x)
{
    return (as_uint(x) & 0x7f800000u) == 0x7f800000u;
}

static inline int clattn_nonfinite16(float16 x)
{
    return any((as_uint16(x) & (uint16)(0x7f800000u)) == (uint16)(0x7f800000u));
}

/* A compensated (Kahan) running total: tot = tot * f + x, with comp carrying what the additions
 * rounded off (scaled with the total by f, the online softmax's correction). A fused kernel sums
 * each block of keys from 0 and adds the block here: an uncompensated total of a long row drifts
 * (32M keys of like terms summed 15% low), a compensated one stays as exact as one block. No
 * correction once the total is not finite: inf - inf would make an infinite total NaN. */
static inline void clattn_kahan(float *tot, float *comp, float f, float x)
{
    float t0 = *tot * f, y = x - *comp * f, t = t0 + y;
    *comp = fabs(t) < INFINITY ? (t - t0) - y : 0.0f;
    *tot = t;
}

static inline void clattn_kahan4(float4 *tot, float4 *comp, float f, float4 x)
{
    float4 t0 = *tot * f, y = x - *comp * f, t = t0 + y;
    *comp = fabs(t) < (float4)(INFINITY) ? (t - t0) - y : (float4)(0.0f);
    *tot = t;
}

static inline void clattn_kahan16(float16 *tot, float16 *comp, float f, float16 x)
{
    float16 t0 = *tot * f, y = x - *comp * f, t = t0 + y;
    *comp = fabs(t) < (float16)(INFINITY) ? (t - t0) - y : (float16)(0.0f);
    *tot = t;
}

/* TwoSum: a + b rounded, and in *err exactly what that rounding lost (0 once the sum is not
 * finite, as above), for the caller to carry into its next partial sum: totals that take a
 * partial sum now and then (every 16 blocks or tiles), the partial keeping the error. */
static inline float16 clattn_two_sum16(float16 a, float16 b, float16 *err)
{
    float16 s = a + b, bv = s - a;
    *err = fabs(s) < (float16)(INFINITY) ? (a - (s - bv)) + (b - bv) : (float16)(0.0f);
    return s;
}

/* The factor 2^-J by which a fused kernel's row scales its weights when its unnormalised sums
 * overflowed (values within a factor n of FLT_MAX): each of the row's n weights is at most wmax
 * (1, or dropout's 1 / (1 - p)), so the scaled ones sum to at most 1/4 and the sums stay below
 * a quarter of the largest |value|. A power of two scales every rounding exactly (down to
 * FLT_MIN): the output, the sums' ratio, is the one the unscaled arithmetic would give without
 * overflowing, and the log-sum-exp takes the sum divided by the factor (exact too). */
static inline float clattn_overflow_shift(int n, float wmax)
{
    return ldexp(1.0f, -(ilogb(fmax((float)n * fmax(wmax, 1.0f), 1.0f)) + 3));
}

/* A log-sum-exp at least this large in size is too coarse to recompute probabilities from:
 * its float32 rounding, up to 2^-17 of it, would be their relative error (a row whose every
 * score a bias pushes to -1e9 has lse = -1e9 exactly, and exp(s - lse) = 1 for each of its K
 * keys instead of 1 / K). The backward kernels then read the row for its own maximum and sum. */
static inline int clattn_lse_coarse(float lse)
{
    return isfinite(lse) && fabs(lse) >= 256.0f;
}

/* Philox4x32-10 (Salmon et al., SC'11): a counter-based generator, so dropout masks are a pure
 * function of (seed, offset, element index) on every device and in the host reference. */
static inline uint4 clattn_philox(uint4 c, uint2 k)
{
    for (int r = 0; r < 10; r++) {
        uint lo0 = 0xD2511F53u * c.x, hi0 = mul_hi(0xD2511F53u, c.x);
        uint lo1 = 0xCD9E8D57u * c.z, hi1 = mul_hi(0xCD9E8D57u, c.z);
        c = (uint4)(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
        k += (uint2)(0x9E3779B9u, 0xBB67AE85u);
    }
    return c;
}

/* Element e of a dropout stream is kept when the top 24 bits of word e % 4 of
 * philox((e / 4, offset), seed) are >= threshold = round(p * 2^24). */
static inline int clattn_dropout_keep(ulong e, uint2 seed, uint2 offset, uint threshold)
{
    ulong blk = e >> 2;
    uint4 r = clattn_philox((uint4)((uint)blk, (uint)(blk >> 32), offset.x, offset.y), seed);
    uint w = e & 3;
    uint u = w == 0 ? r.x : w == 1 ? r.y : w == 2 ? r.z : r.w;
    return (u >> 8) >= threshold;
}

#endif
