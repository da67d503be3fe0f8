/* clattn masked softmax over the last axis.
 *
 * Layout: x and y are row-major (D0, D1, Q, K) starting at element offsets x_off, y_off, of the
 * dtypes XT and YT (dtype.cl's codes: float32, float16 or bfloat16); nrows = D0 * D1 * Q. y may
 * alias x (then XT == YT). lse: NULL, or row r's log-sum-exp at lse[lse_off + r]. A bias
 * and ALiBi (common.cl) are added to each score before the mask; y aliasing x reads each score
 * once before it writes it.
 * Mask arguments as described in common.cl.
 * A row whose maximum is -inf (every score -inf) subtracts 0 instead: its exponentials are 0, so
 * its log-sum-exp is log(0) = -inf and its outputs 0 * (1 / 0) = NaN, as PyTorch's softmax.
 * Variants: masked_softmax_rows (CPU shape: one work-item per row, VW-wide vectors, three passes
 * over a row that stays in L1) and masked_softmax_wg (GPU shape: one work-group of WG items per row,
 * strided coalesced loads and tree reductions in local memory).
 * A float32 y holds each row's exponentials between the sum and the scaling pass; a 16-bit y
 * could not hold them unrounded, so the row kernel keeps them in a private buffer of EB floats
 * for rows of up to EB keys (the host launches it in groups of one item then: with PoCL's own
 * group size the buffers of a group overflowed its stack), and past that (and in the group
 * kernel) the last pass computes them again from x (KEEP_E and E_AGAIN): one rounding per
 * output either way; the buffer made bfloat16 1.7-2x and float16 1.45x faster on PoCL. */
#include "common.cl"
#include "dtype.cl"

#ifndef XT
#define XT 0
#endif
#ifndef YT
#define YT 0
#endif
#define XTYPE CLATTN_T(XT)
#define YTYPE CLATTN_T(YT)
#define LDX(p) CLATTN_LOAD(XT, p)
#define STY(v, p) CLATTN_STORE(YT, v, p)

#ifndef VW
#define VW 8
#endif
#ifndef WG
#define WG 128
#endif
#ifndef EB
#define EB 4096 /* the row kernel's private exponentials for a 16-bit y (16 KiB) */
#endif
/* The row kernel has float8 and float16 paths; the tree reductions halve the group. tuning.c
 * refuses other values when it parses them. */
#if VW != 8 && VW != 16
#error "VW must be 8 or 16"
#endif
#if WG < 1 || (WG & (WG - 1)) != 0
#error "WG must be a power of two"
#endif

#define MASK_PARAMS                                                                              \
    int Q, int D1, __global const int *lens, int lens_off, int lens_mode,                        \
        __global const int *mask, int mask_off, int4 ms, int4 win, float fill,                   \
        __global const float *bias, int bias_off, int4 bs, __global const float *slopes,         \
        int slopes_off, int2 ss

#if VW == 16
#define floatV float16
#define intV int16
#define LDXV(p) CLATTN_LOAD16(XT, p)
#define STYV(v, p) CLATTN_STORE16(YT, v, p)
#define convert_floatV convert_float16
#define expnegV clattn_exp_neg16 /* common.cl */
#define LANES (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
#else
#define floatV float8
#define intV int8
#define LDXV(p) CLATTN_LOAD8(XT, p)
#define STYV(v, p) CLATTN_STORE8(YT, v, p)
#define convert_floatV convert_float8
#define expnegV clattn_exp_neg8
#define LANES (int8)(0, 1, 2, 3, 4, 5, 6, 7)
#endif
#if VW == 16
#define vloadV vload16 /* for the float32 mask and bias rows */
#else
#define vloadV vload8
#endif

/* ALIGNV (set by the host when K, x_off and y_off are multiples of VW and both buffers start on
 * 64 bytes) makes every vector of x and y in the row kernel an aligned one: PoCL 3.1 splits
 * vload16 / vstore16 on global pointers into narrow moves, and its vstore_half8 / 16 (which
 * fault on unaligned addresses) are F16C conversions (one per 8 floats; with half=clang the row
 * kernel converts 16 at once through clang's __fp16 instead). Its vload_half8 is not
 * used: it converts with F16C, then checks every lane for NaN in scalar code, slower than
 * dtype.cl's integer conversion. On PoCL (AVX-512 EPYC, 4096 x 1024 and 16384 x 4096) this made
 * float16 1.6-1.9x and bfloat16 1.3-1.65x faster, float32 unchanged. */
#ifndef ALIGNV
#define ALIGNV 0
#endif
#if ALIGNV
#if VW == 16
#define ushortV ushort16
#define vstore_halfV vstore_half16
#define bf16_to_f32V clattn_bf16_to_f3216
#define f16_to_f32V clattn_f16_to_f3216
#define f32_to_f16V clattn_f32_to_f1616
#define f32_to_bf16V clattn_f32_to_bf1616
#else
#define ushortV ushort8
#define vstore_halfV vstore_half8
#define bf16_to_f32V clattn_bf16_to_f328
#define f16_to_f32V clattn_f16_to_f328
#define f32_to_f16V clattn_f32_to_f168
#define f32_to_bf16V clattn_f32_to_bf168
#endif
#define ALOADV_0(p) (*(__global const floatV *)(p))
#define ALOADV_2(p) f16_to_f32V(*(__global const ushortV *)(p))
#define ALOADV_3(p) bf16_to_f32V(*(__global const ushortV *)(p))
#define ASTOREV_0(v, p) (*(__global floatV *)(p) = (v))
#if CLATTN_FP16 == 2 /* half=clang: one conversion of 16 floats, where vstore_half16 takes two */
#define ASTOREV_2(v, p) (*(__global ushortV *)(p) = f32_to_f16V(v))
#else
#define ASTOREV_2(v, p) vstore_halfV((v), 0, (__global half *)(p))
#endif
#define ASTOREV_3(v, p) (*(__global ushortV *)(p) = f32_to_bf16V(v))
#undef LDXV
#undef STYV
#define LDXV(p) CLATTN_CAT(ALOADV_, XT)(p)
#define STYV(v, p) CLATTN_CAT(ASTOREV_, YT)(v, p)
#endif

/* STY_UNITV(v, p): STYV for weights known to lie in [0, 1] (a row whose sum is finite and >= 1),
 * whose bfloat16 rounding needs no NaN test (dtype.cl's clattn_f32_to_bf16_nonneg): 5 integer
 * operations per vector before the pack, where the general one takes 12 AVX2 instructions per 8
 * values. The same bits. */
#if ALIGNV && YT == 3
#define STY_UNITV(v, p) (*(__global ushortV *)(p) = CLATTN_CAT(clattn_f32_to_bf16_nonneg, VW)(v))
#else
#define STY_UNITV(v, p) STYV(v, p)
#endif

/* KEEP_E stores exponential e of key k for the scaling pass: in y's row yr when y is float32,
 * else in the private buffer eb when the row has one (NULL: none). E_AGAIN(k, expr) is then that
 * exponential again: read back, or expr computed anew. */
#if YT == 0
#define KEEP_EV(e, k) STYV(e, yr + (k))
#define KEEP_E(e, k) (yr[k] = (e))
#if ALIGNV
#define E_AGAINV(k, expr) ALOADV_0(yr + (k))
#else
#define E_AGAINV(k, expr) vloadV(0, yr + (k))
#endif
#define E_AGAIN(k, expr) (yr[k])
#else
/* eb is 64-byte aligned and k a multiple of VW: one vector move each way (PoCL 3.1 splits
 * vstore16 into three stores even on a private pointer) */
#define KEEP_EV(e, k)                                                                            \
    do {                                                                                         \
        if (eb)                                                                                  \
            *(floatV *)(eb + (k)) = (e);                                                         \
    } while (0)
#define KEEP_E(e, k)                                                                             \
    do {                                                                                         \
        if (eb)                                                                                  \
            eb[k] = (e);                                                                         \
    } while (0)
#define E_AGAINV(k, expr) (eb ? *(const floatV *)(eb + (k)) : (expr))
#define E_AGAIN(k, expr) (eb ? eb[k] : (expr))
#endif
#if VW == 16
#define vstoreV_f(e, p) vstore16(e, 0, p)
#else
#define vstoreV_f(e, p) vstore8(e, 0, p)
#endif
#define vloadV_f(p) vloadV(0, p)

/* A row's sums (the exponentials, the backward's y . dy) in blocks of SUM_BLOCK terms per lane
 * (per work-item in the group kernels), each block added into a compensated (Kahan) total: a
 * float32 lane sum of like terms stops growing at 2^24 of them and drifts long before (a row of
 * 2^29 equal scores summed to 2, its weights twice 1 / K), while blocks keep a row of any length
 * (up to INT_MAX keys) as exact as one of SUM_BLOCK * VW keys. */
#define SUM_BLOCK 256
/* common.cl's clattn_kahan for floatV lanes (8 or 16), without the rescale */
static inline void kahan_addV(floatV *tot, floatV *comp, floatV x)
{
    floatV y = x - *comp, t = *tot + y;
    /* no correction once the total is not finite: inf - inf would make an infinite sum NaN */
    *comp = fabs(t) < (floatV)(INFINITY) ? (t - *tot) - y : (floatV)(0.0f);
    *tot = t;
}
/* the end of the block of vectors from key k, at most lim (no k + n past INT_MAX) */
static inline int block_end(int k, int lim)
{
    return lim - k > SUM_BLOCK * VW ? k + SUM_BLOCK * VW : lim;
}

/* exp(x) for x <= 0 (a score minus its row's maximum; -inf gives 0, NaN stays NaN): common.cl's
 * polynomial (expnegV, clattn_exp_neg), half the vector instructions of PoCL's builtin exp, the
 * same code for a floatV and for one float (row tails), so tied scores get tied weights. */

/* What a row adds to its scores before the mask: the bias row (NULL: none; key stride bsk, 1 or
 * 0 where it broadcasts), then ALiBi (when alibi) with this slope and the key on the row's
 * bottom-right diagonal. */
typedef struct {
    __global const float *brow;
    int bsk, alibi, diag;
    float slope;
} addend;

static inline addend row_addend(__global const float *bias, int bias_off, int4 bs,
                                __global const float *slopes, int slopes_off, int2 ss, int d0,
                                int d1, int q, int Q, int K)
{
    addend a;
    a.brow = clattn_bias_row(bias, bias_off, bs, d0, d1, q);
    a.bsk = bs.w;
    a.alibi = slopes != 0;
    a.slope = clattn_slope(slopes, slopes_off, ss, d0, d1);
    a.diag = (q - Q) + K; /* (q - Q) first: q + K can pass INT_MAX */
    return a;
}

/* Which of the VW keys from k (all < K) are open (lanes -1) or blocked (0), as clattn_open. */
static inline intV open_vec(int k, int lo, int limit, __global const int *mrow, int msk)
{
    intV idx = (intV)(k) + LANES;
    intV ok = idx >= (intV)(lo) & idx < (intV)(limit);
    if (mrow) {
        intV m = msk == 1 ? vloadV(0, mrow + k) : (intV)(mrow[msk * k]);
        if (msk != 1)
            for (int i = 1; i < VW; i++) /* broadcast masks along K are rare: keep it simple */
                m = select(m, (intV)(mrow[msk * (k + i)]), LANES == (intV)(i));
        ok = ok & (m != (intV)(0));
    }
    return ok;
}

/* VW masked scores starting at key k (all < K). */
static inline floatV masked_vec(__global const XTYPE *x, int k, int lo, int limit,
                                __global const int *mrow, int msk, float fill, addend ad)
{
    floatV v = LDXV(x + k);
    if (ad.brow)
        v += ad.bsk ? vloadV(0, ad.brow + k) : (floatV)(ad.brow[0]);
    if (ad.alibi)
        v += CLATTN_ALIBI(ad.slope, convert_floatV((intV)(ad.diag - k) - LANES));
    return select((floatV)(fill), v, open_vec(k, lo, limit, mrow, msk));
}

/* Score k of row xr plus its addend. */
static inline float biased(__global const XTYPE *xr, int k, addend ad)
{
    float x = LDX(xr + k);
    if (ad.brow)
        x += ad.brow[ad.bsk * k];
    if (ad.alibi)
        x += CLATTN_ALIBI(ad.slope, (float)(ad.diag - k));
    return x;
}

/* fmax(m, v) for a running maximum m (a floatV or a float) that is never NaN (it starts at -inf
 * or at the fill, which the host holds to non-NaN, and takes only ordered scores): a NaN score is
 * passed over as fmax passes it. Not fmax itself: with half=clang LLVM folds fmax's NaN test of a
 * converted float16 into a float16 compare, which x86 has not, and tests every lane in scalar
 * code (float16 rows became 2x slower than with the integer conversion). Functions, so that each
 * score expression is written once. */
static inline floatV maxv(floatV m, floatV v) { return v > m ? v : m; }
static inline float max1(float m, float v) { return v > m ? v : m; }

/* Horizontal reductions of a floatV. The upper half is gathered by components rather than .hi:
 * Oclgrind 21.10 takes shuffle lane 11 for undefined and reports it as uninitialized (compilers
 * fold both spellings into the same shuffle). */
#if VW == 16
#define UPPER8(v) ((float8)((v).s8, (v).s9, (v).sa, (v).sb, (v).sc, (v).sd, (v).se, (v).sf))
#endif
static inline float hmax(floatV v)
{
#if VW == 16
    float8 h = fmax(v.lo, UPPER8(v));
#else
    float8 h = v;
#endif
    return fmax(fmax(fmax(h.s0, h.s1), fmax(h.s2, h.s3)), fmax(fmax(h.s4, h.s5), fmax(h.s6, h.s7)));
}
static inline float hsum(floatV v)
{
#if VW == 16
    float8 h = v.lo + UPPER8(v);
#else
    float8 h = v;
#endif
    return ((h.s0 + h.s1) + (h.s2 + h.s3)) + ((h.s4 + h.s5) + (h.s6 + h.s7));
}

/* The maximum of a prefix row's scores (see softmax_prefix): the live ones, and the fill when
 * keys are blocked; 0 in place of -inf (see the top of the file). */
static inline float prefix_max(__global const XTYPE *xr, int K, int limit, int lv, int vtail,
                               intV tail_open, float fill)
{
    floatV mv = (floatV)(-INFINITY);
    float m = limit < K ? fill : -INFINITY;
    int k;
    {
        /* four running maxima: one chains every vector on the max's latency (the four made
         * float16 rows 1.06x faster, AVX-512 EPYC) */
        floatV m1 = mv, m2 = mv, m3 = mv;
        for (k = 0; lv - k >= 4 * VW; k += 4 * VW) {
            mv = maxv(mv, LDXV(xr + k));
            m1 = maxv(m1, LDXV(xr + k + VW));
            m2 = maxv(m2, LDXV(xr + k + 2 * VW));
            m3 = maxv(m3, LDXV(xr + k + 3 * VW));
        }
        for (; k < lv; k += VW)
            mv = maxv(mv, LDXV(xr + k));
        mv = maxv(maxv(mv, m1), maxv(m2, m3));
    }
    if (vtail)
        mv = maxv(mv, select((floatV)(-INFINITY), LDXV(xr + lv), tail_open));
    else
        for (; k < limit; k++)
            m = max1(m, LDX(xr + k));
    m = fmax(m, hmax(mv));
    return m == -INFINITY ? 0.0f : m;
}

/* The live scores' exponentials exp(x - m), kept (KEEP_E) for the scaling pass; returns their
 * sum plus the blocked keys' share, blocked = (K - limit) exp(fill - m). */
static inline float prefix_exp(__global const XTYPE *xr, __global YTYPE *yr, float *eb, int limit,
                               int lv, int vtail, intV tail_open, float m, float blocked)
{
    floatV tot = (floatV)(0.0f), comp = (floatV)(0.0f), sv = (floatV)(0.0f);
    float s = 0.0f;
    int k;
    for (k = 0; k < lv;) {
        floatV sb = (floatV)(0.0f);
        for (int end = block_end(k, lv); k < end; k += VW) {
            floatV e = expnegV(LDXV(xr + k) - (floatV)(m));
            sb += e;
            KEEP_EV(e, k);
        }
        kahan_addV(&tot, &comp, sb);
    }
    if (vtail) {
        floatV e = select((floatV)(0.0f), expnegV(LDXV(xr + lv) - (floatV)(m)), tail_open);
        sv += e;
        KEEP_EV(e, lv);
    } else {
        for (; k < limit; k++) {
            float e = clattn_exp_neg(LDX(xr + k) - m);
            s += e;
            KEEP_E(e, k);
        }
    }
    return s + (hsum(sv + (tot - comp)) + blocked);
}

/* The live keys' weights, e * inv (the kept exponentials, or computed again); the vector tail's
 * blocked lanes get y_fill. Returns the first key not written: limit, or the vector tail's end. */
static inline int prefix_scale(__global const XTYPE *xr, __global YTYPE *yr, float *eb, int limit,
                               int lv, int vtail, intV tail_open, float m, float s, float inv,
                               float y_fill)
{
    int k;
#define SCALE_PASS(STORE)                                                                        \
    for (k = 0; k < lv; k += VW)                                                                 \
        STORE(E_AGAINV(k, expnegV(LDXV(xr + k) - (floatV)(m))) * (floatV)(inv), yr + k)
    if (s >= 1.0f && s < INFINITY)
        SCALE_PASS(STY_UNITV);
    else
        SCALE_PASS(STYV);
#undef SCALE_PASS
    if (vtail) {
        floatV e = E_AGAINV(lv, expnegV(LDXV(xr + lv) - (floatV)(m)));
        STYV(select((floatV)(y_fill), e * (floatV)(inv), tail_open), yr + lv);
        k = lv + VW;
    }
    for (; k < limit; k++)
        STY(E_AGAIN(k, clattn_exp_neg(LDX(xr + k) - m)) * inv, yr + k);
    return k;
}

/* The blocked outputs from key k on, all y_fill. (Here and in the other row loops the tests are
 * K - k >= n, not k + n <= K: a row may hold up to INT_MAX keys.) */
static inline void prefix_fill(__global YTYPE *yr, int k, int K, float y_fill)
{
    for (; k < K && k % VW; k++)
        STY(y_fill, yr + k);
    /* often most of a row: as whole aligned vectors four at a time. k is a multiple of VW here,
     * and with ALIGNV so is the row's start (PoCL 3.1 splits a vstore16 on a global pointer into
     * 16-byte moves) */
#if ALIGNV
    {
#if YT == 0
        floatV f = (floatV)(y_fill);
        __global floatV *yv = (__global floatV *)(yr + k);
#else
        ushortV f = (ushortV)(YT == 2 ? clattn_f32_to_f16(y_fill) : clattn_f32_to_bf16(y_fill));
        __global ushortV *yv = (__global ushortV *)(yr + k);
#endif
        for (; K - k >= 4 * VW; k += 4 * VW, yv += 4) {
            yv[0] = f;
            yv[1] = f;
            yv[2] = f;
            yv[3] = f;
        }
    }
#elif YT == 0
    for (; K - k >= 16; k += 16)
        vstore16((float16)(y_fill), 0, yr + k);
#endif
    for (; K - k >= VW; k += VW)
        STYV((floatV)(y_fill), yr + k);
    for (; k < K; k++)
        STY(y_fill, yr + k);
}

/* A row blocked only by lengths, causality or a window's right side: keys [0, limit) are live
 * and every key past them holds the same fill value, so its exponential is computed once, the
 * blocked scores are never read, and the blocked outputs are one constant. Same result as
 * masking every element first. Returns the row's log-sum-exp. */
static inline float softmax_prefix(__global const XTYPE *xr, __global YTYPE *yr, float *eb, int K,
                                   int limit, float fill)
{
    int lv = limit - limit % VW;
    /* a row whose live scores end inside a vector that lies within the row takes that vector
     * whole, its blocked lanes masked off, rather than scalar tails in every pass */
    int vtail = lv < limit && K - lv >= VW;
    intV tail_open = (intV)(lv) + LANES < (intV)(limit);
    float m = prefix_max(xr, K, limit, lv, vtail, tail_open, fill);
    float e_fill = limit < K ? clattn_exp_neg(fill - m) : 0.0f;
    float s = prefix_exp(xr, yr, eb, limit, lv, vtail, tail_open, m, (float)(K - limit) * e_fill);
    float inv = 1.0f / s, y_fill = e_fill * inv;
    int k = prefix_scale(xr, yr, eb, limit, lv, vtail, tail_open, m, s, inv, y_fill);
    prefix_fill(yr, k, K, y_fill);
    return m + log(s);
}

#if CLATTN_CPU_SHAPE
__kernel void masked_softmax_rows(__global const XTYPE *x, int x_off, __global YTYPE *y, int y_off,
                                  __global float *lse, int lse_off, int nrows, int K, MASK_PARAMS)
{
    int r = get_global_id(0);
    if (r >= nrows)
        return;
    int q = r % Q, d01 = r / Q, d0 = d01 / D1, d1 = d01 % D1;
    int limit = clattn_row_limit(d0, q, K, lens, lens_off, lens_mode, Q, win);
    int lo = clattn_row_lo(q, K, win);
    __global const int *mrow = clattn_mask_row(mask, mask_off, ms, d0, d1, q);
    addend ad = row_addend(bias, bias_off, bs, slopes, slopes_off, ss, d0, d1, q, Q, K);
    __global const XTYPE *xr = x + x_off + (size_t)r * K;
    __global YTYPE *yr = y + y_off + (size_t)r * K;
#if YT == 0
    float *eb = 0; /* y itself holds them */
#else
    float ebuf[EB] __attribute__((aligned(64))), *eb = K <= EB ? ebuf : 0;
#endif
    if (!mrow && !ad.brow && !ad.alibi && lo == 0) {
        /* the next row's live scores, which this thread most likely takes next (PoCL hands its
         * threads runs of consecutive groups): its first read, the max pass's, was a quarter of
         * the float16 kernel's time (perf, AVX2 EPYC, 4096 x 1024, random lengths), and this
         * made float16 and float32 rows 1.2-1.3x faster there (BENCHMARKS.md) */
        if (r + 1 < nrows) {
            int q1 = (r + 1) % Q, next = clattn_row_limit((r + 1) / Q / D1, q1, K, lens, lens_off,
                                                          lens_mode, Q, win);
            CLATTN_PREFETCH(xr + K, next, 64 / (int)sizeof(XTYPE));
        }
        float l = softmax_prefix(xr, yr, eb, K, limit, fill);
        if (lse)
            lse[lse_off + r] = l;
        return;
    }
    int kv = K - K % VW, k;

    floatV mv = (floatV)(-INFINITY);
    float m = -INFINITY;
    for (k = 0; k < kv; k += VW)
        mv = maxv(mv, masked_vec(xr, k, lo, limit, mrow, ms.w, fill, ad));
    for (; k < K; k++)
        m = max1(m, clattn_masked(biased(xr, k, ad), k, lo, limit, mrow, ms.w, fill));
    m = fmax(m, hmax(mv));
    m = m == -INFINITY ? 0.0f : m;

    floatV tot = (floatV)(0.0f), comp = (floatV)(0.0f);
    float s = 0.0f;
    for (k = 0; k < kv;) {
        floatV sb = (floatV)(0.0f);
        for (int end = block_end(k, kv); k < end; k += VW) {
            floatV e = expnegV(masked_vec(xr, k, lo, limit, mrow, ms.w, fill, ad) - (floatV)(m));
            sb += e;
            KEEP_EV(e, k);
        }
        kahan_addV(&tot, &comp, sb);
    }
    for (; k < K; k++) {
        float v = clattn_masked(biased(xr, k, ad), k, lo, limit, mrow, ms.w, fill);
        float e = clattn_exp_neg(v - m);
        s += e;
        KEEP_E(e, k);
    }
    s += hsum(tot - comp);
    if (lse)
        lse[lse_off + r] = m + log(s);

    float inv = 1.0f / s;
    for (k = 0; k < kv; k += VW) {
        floatV e = E_AGAINV(k, expnegV(masked_vec(xr, k, lo, limit, mrow, ms.w, fill, ad) -
                                       (floatV)(m)));
        STYV(e * (floatV)(inv), yr + k);
    }
    for (; k < K; k++) {
        float e = E_AGAIN(k, clattn_exp_neg(clattn_masked(biased(xr, k, ad), k, lo, limit, mrow,
                                                          ms.w, fill) - m));
        STY(e * inv, yr + k);
    }
}
#endif

#if CLATTN_GPU_SHAPE
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void masked_softmax_wg(__global const XTYPE *x, int x_off, __global YTYPE *y, int y_off,
                       __global float *lse, int lse_off, int nrows, int K, MASK_PARAMS)
{
    __local float red[WG];
    int r = get_group_id(0), t = get_local_id(0);
    int q = r % Q, d01 = r / Q, d0 = d01 / D1, d1 = d01 % D1;
    int limit = clattn_row_limit(d0, q, K, lens, lens_off, lens_mode, Q, win);
    int lo = clattn_row_lo(q, K, win);
    __global const int *mrow = clattn_mask_row(mask, mask_off, ms, d0, d1, q);
    addend ad = row_addend(bias, bias_off, bs, slopes, slopes_off, ss, d0, d1, q, Q, K);
    __global const XTYPE *xr = x + x_off + (size_t)r * K;
    __global YTYPE *yr = y + y_off + (size_t)r * K;
#if YT != 0
    float *eb = 0; /* a 16-bit y: the scaling pass computes the exponentials again */
#endif

    float m = -INFINITY;
    for (int k = t; k < K; k += WG)
        m = max1(m, clattn_masked(biased(xr, k, ad), k, lo, limit, mrow, ms.w, fill));
    red[t] = m;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int w = WG / 2; w > 0; w >>= 1) {
        if (t < w)
            red[t] = fmax(red[t], red[t + w]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    m = red[0] == -INFINITY ? 0.0f : red[0];
    barrier(CLK_LOCAL_MEM_FENCE);

    float tot = 0.0f, comp = 0.0f;
    for (int k = t; k < K;) {
        float sb = 0.0f;
        for (int n = 0; n < SUM_BLOCK && k < K; n++, k += WG) {
            float e = exp(clattn_masked(biased(xr, k, ad), k, lo, limit, mrow, ms.w, fill) - m);
            sb += e;
            KEEP_E(e, k);
        }
        clattn_kahan(&tot, &comp, 1.0f, sb);
    }
    red[t] = tot - comp;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int w = WG / 2; w > 0; w >>= 1) {
        if (t < w)
            red[t] += red[t + w];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lse && t == 0)
        lse[lse_off + r] = m + log(red[0]);
    float inv = 1.0f / red[0];
    for (int k = t; k < K; k += WG) {
        float e = E_AGAIN(k, exp(clattn_masked(biased(xr, k, ad), k, lo, limit, mrow, ms.w, fill) -
                                 m));
        STY(e * inv, yr + k);
    }
}
#endif

/* ---- backward ----
 * The gradient with respect to the scores x given the forward's output y and the gradient dy of
 * its output, rows as the forward's (float32 y, dy and dx, at element offsets; dx may be dy):
 * dx_k = y_k (dy_k - sum_j y_j dy_j) for an open key, exactly 0 for a blocked one (masked_fill
 * passes no gradient to what it replaced). The sum runs over every key, blocked ones included
 * (their weights are part of the softmax), so a NaN there reaches the whole row, as in PyTorch.
 * The forward's bias and ALiBi leave this unchanged; its fill does not enter. */
#if CLATTN_CPU_SHAPE
__kernel void masked_softmax_backward_rows(__global const float *y, int y_off,
                                           __global const float *dy, int dy_off,
                                           __global float *dx, int dx_off, int nrows, int K,
                                           MASK_PARAMS)
{
    int r = get_global_id(0);
    if (r >= nrows)
        return;
    int q = r % Q, d01 = r / Q, d0 = d01 / D1, d1 = d01 % D1;
    int limit = clattn_row_limit(d0, q, K, lens, lens_off, lens_mode, Q, win);
    int lo = clattn_row_lo(q, K, win), kv = K - K % VW, k;
    __global const int *mrow = clattn_mask_row(mask, mask_off, ms, d0, d1, q);
    __global const float *yr = y + y_off + (size_t)r * K, *dyr = dy + dy_off + (size_t)r * K;
    __global float *dxr = dx + dx_off + (size_t)r * K;
    floatV tot = (floatV)(0.0f), comp = (floatV)(0.0f);
    float s = 0.0f;
    for (k = 0; k < kv;) {
        floatV sb = (floatV)(0.0f);
        for (int end = block_end(k, kv); k < end; k += VW)
            sb = fma(vloadV_f(yr + k), vloadV_f(dyr + k), sb);
        kahan_addV(&tot, &comp, sb);
    }
    for (; k < K; k++)
        s = fma(yr[k], dyr[k], s);
    s += hsum(tot - comp);
    for (k = 0; k < kv; k += VW) {
        floatV g = vloadV_f(yr + k) * (vloadV_f(dyr + k) - (floatV)(s));
        vstoreV_f(select((floatV)(0.0f), g, open_vec(k, lo, limit, mrow, ms.w)), dxr + k);
    }
    for (; k < K; k++) {
        float g = yr[k] * (dyr[k] - s);
        dxr[k] = clattn_open(k, lo, limit, mrow, ms.w) ? g : 0.0f;
    }
}
#endif

#if CLATTN_GPU_SHAPE
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void masked_softmax_backward_wg(__global const float *y, int y_off, __global const float *dy,
                                int dy_off, __global float *dx, int dx_off, int nrows, int K,
                                MASK_PARAMS)
{
    __local float red[WG];
    int r = get_group_id(0), t = get_local_id(0);
    int q = r % Q, d01 = r / Q, d0 = d01 / D1, d1 = d01 % D1;
    int limit = clattn_row_limit(d0, q, K, lens, lens_off, lens_mode, Q, win);
    int lo = clattn_row_lo(q, K, win);
    __global const int *mrow = clattn_mask_row(mask, mask_off, ms, d0, d1, q);
    __global const float *yr = y + y_off + (size_t)r * K, *dyr = dy + dy_off + (size_t)r * K;
    __global float *dxr = dx + dx_off + (size_t)r * K;
    float tot = 0.0f, comp = 0.0f;
    for (int k = t; k < K;) {
        float sb = 0.0f;
        for (int n = 0; n < SUM_BLOCK && k < K; n++, k += WG)
            sb = fma(yr[k], dyr[k], sb);
        clattn_kahan(&tot, &comp, 1.0f, sb);
    }
    red[t] = tot - comp;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int w = WG / 2; w > 0; w >>= 1) {
        if (t < w)
            red[t] += red[t + w];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float s = red[0];
    for (int k = t; k < K; k += WG) {
        float g = yr[k] * (dyr[k] - s);
        dxr[k] = clattn_open(k, lo, limit, mrow, ms.w) ? g : 0.0f;
    }
}
#endif

/* The bias gradient: db[i] = the sum of dx (float32 (D0, D1, Q, K), contiguous at dx_off) over
 * every score element the bias element i reaches, the bias laid out contiguously by its strides
 * bs over (D0, D1, Q, K) (0 where it broadcasts, as in the forward). r in [r_lo, r_hi) runs over
 * the broadcast dims row-major, in order (the host splits long sums over launches under a loop
 * budget), added to db's old value when acc, compensated (clattn_kahan: a bias broadcast over
 * millions of scores sums that many). One work-item per bias element. */
__kernel void bias_grad(__global const float *dx, int dx_off, int4 D, int4 bs, __global float *db,
                        int db_off, int nb, int r_lo, int r_hi, int acc)
{
    int i = get_global_id(0);
    if (i >= nb)
        return;
    int4 ext = select(D, (int4)(1), bs == (int4)(0)); /* the bias's own extents */
    int4 e = select((int4)(1), D, bs == (int4)(0));   /* the extents it broadcasts along */
    int4 at = (int4)(i / (ext.w * ext.z * ext.y), (i / (ext.w * ext.z)) % ext.y,
                     (i / ext.w) % ext.z, i % ext.w);
    float s = acc ? db[db_off + i] : 0.0f, c = 0.0f;
    for (int r = r_lo; r < r_hi; r++) {
        int4 j = at + (int4)(r / (e.w * e.z * e.y), (r / (e.w * e.z)) % e.y, (r / e.w) % e.z,
                             r % e.w);
        size_t e = (((size_t)j.x * D.y + j.y) * D.z + j.z) * D.w + j.w;
        clattn_kahan(&s, &c, 1.0f, dx[dx_off + e]);
    }
    db[db_off + i] = s;
}
