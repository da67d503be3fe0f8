/* clattn 16-key tile helpers shared by the fused attention kernels (flash.cl, flash_backward.cl):
 * one row's scores for 16 keys at a time as a float16 (mask, bias, dropout, exponentials and
 * reductions), the same code in the forward and the backward so both round alike. */
#ifndef CLATTN_TILE16_CL
#define CLATTN_TILE16_CL
#include "common.cl"

#define LANES16 (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
/* exp(fill - m) is exactly 0 in float32 once m - fill exceeds this */
#define NEGLIGIBLE 120.0f

/* Lanes -1 for the open keys among the 16 from kidx: inside [lo, limit) and not blocked by the
 * mask tensor's row (limit <= nk, so keys past nk are never open). */
static inline int16 open16(int kidx, int nk, int lo, int limit, __global const int *mrow, int msk)
{
    int16 idx = (int16)(kidx) + LANES16;
    int16 ok = idx >= (int16)(lo) & idx < (int16)(limit);
    if (mrow) {
        int16 m;
        if (msk == 1 && nk - kidx >= 16) {
            m = vload16(0, mrow + kidx);
        } else {
            int t[16];
            for (int i = 0; i < 16; i++)
                t[i] = kidx + i < nk ? mrow[msk * (kidx + i)] : 0;
            m = vload16(0, t);
        }
        ok = ok & (m != (int16)(0));
    }
    return ok;
}

/* Scores of one row for 16 keys from kidx: masked (fill) or padding (-inf). */
static inline float16 mask16(float16 s, int kidx, int nk, int lo, int limit,
                             __global const int *mrow, int msk, float fill)
{
    s = select((float16)(fill), s, open16(kidx, nk, lo, limit, mrow, msk));
    return select((float16)(-INFINITY), s, (int16)(kidx) + LANES16 < (int16)(nk));
}

/* The bias of one row for 16 keys from kidx (stride bsk: 1, or 0 broadcast; keys past nk 0). */
static inline float16 bias16(__global const float *brow, int kidx, int nk, int bsk)
{
    if (bsk == 1 && nk - kidx >= 16)
        return vload16(0, brow + kidx);
    float t[16];
    for (int i = 0; i < 16; i++)
        t[i] = kidx + i < nk ? brow[bsk * (kidx + i)] : 0.0f;
    return vload16(0, t);
}

/* max without fmax's NaN bookkeeping (scores are never NaN unless the inputs are) */
static inline float16 max16(float16 a, float16 b)
{
    return select(a, b, b > a);
}

static inline float hmax16(float16 v)
{
    /* the upper half by components: Oclgrind 21.10 takes lane 11 of .hi for undefined */
    float8 hi = (float8)(v.s8, v.s9, v.sa, v.sb, v.sc, v.sd, v.se, v.sf);
    float8 a = select(v.lo, hi, hi > v.lo);
    float4 b = select(a.lo, a.hi, a.hi > a.lo);
    float2 c = select(b.lo, b.hi, b.hi > b.lo);
    return c.y > c.x ? c.y : c.x;
}

static inline float hsum16(float16 v)
{
    float8 a = v.lo + (float8)(v.s8, v.s9, v.sa, v.sb, v.sc, v.sd, v.se, v.sf); /* see hmax16 */
    float4 b = a.lo + a.hi;
    return (b.x + b.y) + (b.z + b.w);
}

/* p * dscale where element e of the dropout stream is kept, else p * 0 (NaN stays NaN, as in
 * dropout.cl). */
static inline float16 drop16(float16 p, ulong e, uint2 seed, uint2 offset, uint threshold, float dscale)
{
    float t[16];
    vstore16(p, 0, t);
    for (int i = 0; i < 16; i++)
        t[i] *= clattn_dropout_keep(e + (ulong)i, seed, offset, threshold) ? dscale : 0.0f;
    return vload16(0, t);
}

/* 2^x for x <= 0 (the scores minus their running max, in log2 units; -inf for padding keys), as
 * common.cl's CLATTN_EXP2_NEG. */
static inline float16 exp2_neg16(float16 x)
{
    CLATTN_EXP2_NEG(float16, int16)
}

/* ---- register tiles of QR rows x KB keys, for a kernel that defines QR, KB, NKV (KB / 16) and
 * NVC (16-column vectors of a row per pass) before it includes this file ---- */
#if defined(QR) && defined(KB) && defined(NKV) && defined(NVC)
/* The tile helpers take register arrays: not inlined (PoCL 3.1 left one a call), those live in
 * memory and every use is a load. */
#define TILE_INLINE static inline __attribute__((always_inline))

/* t[r] = the QR rows rp[r] (n floats each) times a (n, KB) panel: the QR x KB tile of products
 * in registers, each row broadcast one element at a time. */
TILE_INLINE void tile_panel(float16 t[QR][NKV], __global const float *rp[QR],
                            __global const float *panel, int n)
{
    #pragma unroll
    for (int r = 0; r < QR; r++)
        #pragma unroll
        for (int j = 0; j < NKV; j++)
            t[r][j] = (float16)(0.0f);
    for (int e = 0; e < n; e++) {
        float16 pv[NKV];
        #pragma unroll
        for (int j = 0; j < NKV; j++)
            pv[j] = vload16(j, panel + e * KB);
        #pragma unroll
        for (int r = 0; r < QR; r++) {
            float16 xv = (float16)(rp[r][e]);
            #pragma unroll
            for (int j = 0; j < NKV; j++)
                t[r][j] = fma(xv, pv[j], t[r][j]);
        }
    }
}

/* a[r] += w[r][k] x (row k's NVC vectors) for the keys k in [k_lo, k_hi): rows from `rows`,
 * `stride` floats apart, each row's vectors in registers once for all QR rows. */
TILE_INLINE void tile_rows_fma(float16 a[QR][NVC], float16 w[QR][NKV], __global const float *rows,
                               int stride, int k_lo, int k_hi)
{
    for (int k = k_lo; k < k_hi; k++) {
        float16 v[NVC];
        #pragma unroll
        for (int c = 0; c < NVC; c++)
            v[c] = vload16(c, rows + (size_t)k * stride);
        #pragma unroll
        for (int r = 0; r < QR; r++) {
            float16 wv = (float16)(((const float *)w[r])[k]);
            #pragma unroll
            for (int c = 0; c < NVC; c++)
                a[r][c] = fma(wv, v[c], a[r][c]);
        }
    }
}
#endif

#endif
