/* clattn KV-cache decoding (flash-decoding): attention of a few new query rows per sequence over
 * that sequence's cached keys, split over work-items (or groups) by key ranges, then merged.
 *
 * Layout, contiguous row-major at element offsets: Q (B, Hq, Qn, d), the caches K
 * (B, Hkv, Kmax, d) and V (B, Hkv, Kmax, dv), new keys and values kn (B, Hkv, Qn, d) and vn
 * (B, Hkv, Qn, dv), lens (B) int32, out (B, Hq, Qn, dv), lse (B, Hq, Qn). Dtypes (dtype.cl's
 * codes): Q QT, the caches CT, the new rows NT; the partial states, out and lse float32 (the host
 * stages a 16-bit out). G = Hq / Hkv query heads
 * share K/V head hk, and their G * Qn query rows are consecutive in Q (from row bh * G * Qn on,
 * bh = b * Hkv + hk), so one work-item or group takes them all, RQ at a time, and reads each
 * cached key once for them.
 * Sequence b has L = clamp(lens[b], 0, Kmax - A) + A keys, A = Qn when the new keys were appended
 * (decode_append), else 0. Row rr of a K/V head is new row i = rr % Qn, whose diagonal is key
 * L - Qn + i (bottom-right); win = (left, right) bounds its keys to [diag - left, diag + right],
 * -1 unbounded (causal: right 0). ALiBi (slopes per (b, h) through ss, see common.cl, or NULL)
 * adds CLATTN_ALIBI(slope, diag - k) to the scaled score of key k of a row of head h before the
 * mask. Blocked keys score `fill`; they are computed, not skipped (Qn
 * is small), so 0 * v is NaN where a value is NaN or infinite, as PyTorch's weights @ V.
 * Splits: split s takes keys [s * split, min((s + 1) * split, L)) (split: SK, or less under a loop
 * budget) and writes each row's partial state at
 * part + (row * nsplit + s) * (dv + 2): its output o (dv floats) = sum_k exp(x_k - mz) v_k / l
 * (the unnormalised sum itself when l = 0), then mz (the running maximum, 0 while every score is
 * -inf, so exp never sees -inf - -inf) and l = sum_k exp(x_k - mz). decode_merge combines the
 * splits. A split whose unnormalised sums overflowed (values within a factor of its key count of
 * FLT_MAX) takes its keys once more for the rows concerned, their weights scaled by
 * clattn_overflow_shift (common.cl, exact: a power of two), as the fused kernels do (flash.cl). */
#include "common.cl"
#include "dtype.cl"

#ifndef QT
#define QT 0
#endif
#ifndef CT
#define CT 0
#endif
#ifndef NT
#define NT 0
#endif
#define QTYPE CLATTN_T(QT)
#define CTYPE CLATTN_T(CT)
#define NTYPE CLATTN_T(NT)
/* cache elements per 64-byte line (the prefetch stride) */
#define LINE (CT == 0 ? 16 : 32)
/* keys ahead of use that decode_cpu prefetches: 16 for a float32 cache; 4 for a 16-bit one,
 * which against 16 was 1.15x (float16) and 1.18x (bfloat16) faster at B8 K32768 (Hq32 Hkv8
 * d128; medians of six alternating rounds, AVX2 EPYC, 2026-12-03) and no slower at B1 K4096,
 * B8 K4096 and B1 K32768; a float32 cache took the same time with either */
#ifndef PF
#define PF (CT == 0 ? 16 : 4)
#endif
#define PREFETCH_ROW(p, n) CLATTN_PREFETCH(p, n, LINE) /* common.cl */

#ifndef RQ
#define RQ 4
#endif
#ifndef DP
#define DP 128
#endif
#ifndef DVP
#define DVP 128
#endif
#ifndef WG
#define WG 64
#endif
#ifndef ALIGN16
#define ALIGN16 0
#endif
/* decode_cpu's dot products: JK keys at a time for each of the RQ rows, and P V: CV 16-column
 * chunks at a time, so that RQ * JK (RQ * CV) independent FMA chains hide the FMA's latency
 * (RQ alone, 4, left half of AVX-512's FMA throughput idle) while the tiles stay in registers */
#define JK (RQ <= 4 ? 4 : RQ <= 8 ? 2 : 1)
#define CV (RQ <= 8 ? 2 : 1)
#if DP % 16 != 0 || DVP % 16 != 0 || RQ < 1
#error "DP and DVP must be multiples of 16, RQ at least 1"
#endif
/* 16 values of a cache row from element 16 c. ALIGN16 (set by the host when every cache row
 * starts on a 64-byte boundary: head sizes and offsets multiples of 16) reads them as one float16
 * (ushort16 for bfloat16, then converted): PoCL 3.1 splits vload16 on a global pointer into
 * 2-float loads, 4x slower to stream. A float16 cache goes through vload_half16, which PoCL
 * compiles to the CPU's conversion instruction (F16C): 1.5-2x faster decoding than dtype.cl's
 * integer conversion, which stays for rows that are not aligned. */
#if ALIGN16 && CT == 0
#define ROW16(p, c) (((__global const float16 *)(p))[c])
#elif ALIGN16 && CT == 2 && CLATTN_FP16 != 2
#define ROW16(p, c) vload_half16((c), (__global const half *)(p))
#elif ALIGN16 && CT == 2 /* half=clang: F16C without PoCL's per-lane NaN checks */
#define ROW16(p, c) clattn_f16_to_f3216(((__global const ushort16 *)(p))[c])
#elif ALIGN16
#define ROW16(p, c) clattn_bf16_to_f3216(((__global const ushort16 *)(p))[c])
#else
#define ROW16(p, c) CLATTN_LOAD16(CT, (p) + 16 * (c))
#endif
/* output columns per work-item in decode_gpu */
#define NCOL ((DVP + WG - 1) / WG)
/* key columns decode_gpu stages in local memory at a time (the host passes the tuning's KC; this
 * small default keeps the local memory of decode_gpu low in CPU programs, which hold it too) */
#ifndef KC
#define KC 16
#endif
#define KCP (KC < DP ? KC : DP)

#define DECODE_PARAMS                                                                            \
    __global const QTYPE *Q, int q_off, __global const CTYPE *K, int k_off,                     \
        __global const CTYPE *V, int v_off, __global const int *lens, int lens_off, int Hkv,    \
        int G, int Qn, int Kmax, int A, int d, int dv, int nsplit, int split, float scale,         \
        int2 win, float fill, __global const float *slopes, int slopes_off, int2 ss,             \
        __global float *part

/* The sequence's number of keys (see the top of the file). */
static inline int seq_keys(__global const int *lens, int lens_off, int b, int Kmax, int A)
{
    return clamp(lens[lens_off + b], 0, Kmax - A) + A;
}

/* The ALiBi slope of row rr of K/V head bh (0 without slopes). */
static inline float row_slope(__global const float *slopes, int slopes_off, int2 ss, int bh,
                              int rr, int Hkv, int G, int Qn)
{
    return clattn_slope(slopes, slopes_off, ss, bh / Hkv, (bh % Hkv) * G + rr / Qn);
}

/* Row rr's open keys [lo, hi) among the sequence's L keys. */
static inline int2 row_bounds(int rr, int Qn, int L, int2 win)
{
    int diag = L - Qn + rr % Qn;
    int lo = win.x >= 0 ? clamp(diag - win.x, 0, L) : 0;
    int hi = win.y >= 0 ? clamp(diag + win.y + 1, 0, L) : L;
    return (int2)(lo, hi);
}

/* The first n values from p (all 16 when n >= 16), zeros after: rows are never read past their
 * end, where the next row's values (or the buffer's end) lie. LOAD_ROW16(T, p, n) for dtype T. */
#define LOAD_ROW16_N(T)                                                                          \
    static inline float16 load16_##T(__global const CLATTN_T(T) *p, int n)                       \
    {                                                                                            \
        if (n >= 16)                                                                             \
            return CLATTN_LOAD16(T, p);                                                          \
        float t[16];                                                                             \
        for (int i = 0; i < 16; i++)                                                             \
            t[i] = i < n ? CLATTN_LOAD(T, p + i) : 0.0f;                                         \
        return vload16(0, t);                                                                    \
    }
LOAD_ROW16_N(0)
LOAD_ROW16_N(2)
LOAD_ROW16_N(3)
#define LOAD_ROW16(T, p, n) CLATTN_CAT(load16_, T)(p, n)

/* max without fmax's NaN bookkeeping, as flash.cl's (a NaN score makes its row NaN through the
 * sum instead) */
static inline float hmax16(float16 v)
{
    float8 hi = (float8)(v.s8, v.s9, v.sa, v.sb, v.sc, v.sd, v.se, v.sf); /* see hsum16 */
    float8 a = select(v.lo, hi, hi > v.lo);
    float4 b = select(a.lo, a.hi, a.hi > a.lo);
    float2 c = select(b.lo, b.hi, b.hi > b.lo);
    return c.y > c.x ? c.y : c.x;
}

/* the upper half by components: Oclgrind 21.10 takes lane 11 of .hi for undefined */
#define HI8(v) ((float8)((v).s8, (v).s9, (v).sa, (v).sb, (v).sc, (v).sd, (v).se, (v).sf))

static inline float hsum16(float16 v)
{
    float8 a = v.lo + HI8(v);
    float4 b = a.lo + a.hi;
    return (b.x + b.y) + (b.z + b.w);
}

/* Two vectors' lane sums halved into one: lanes 0-7 add up to x's sum, 8-15 to y's. (Shuffles
 * throughout, not vector literals of two vectors' halves nor .even / .odd: Oclgrind 21.10's
 * uninitialized-value checker crashes on the first and takes lanes of the second for undefined.) */
static inline float16 hsum_pair(float16 x, float16 y)
{
    return shuffle2(x, y, (uint16)(0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23)) +
           shuffle2(x, y, (uint16)(8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31));
}

/* The lane sums of JK vectors (JK = 1, 2 or 4) at once, stored to p[0 .. JK): the halving steps
 * are shared between the vectors, 15 vector operations for four sums where four hsum16 take 32,
 * and a shorter dependency chain. */
static inline void store_key_sums(const float16 *a, float *p)
{
#if JK == 4
    float16 b0 = hsum_pair(a[0], a[1]), b1 = hsum_pair(a[2], a[3]);
    float16 c = /* 4 lanes per vector */
        shuffle2(b0, b1, (uint16)(0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27)) +
        shuffle2(b0, b1, (uint16)(4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31));
    float8 e = shuffle(c, (uint8)(0, 2, 4, 6, 8, 10, 12, 14)) +
               shuffle(c, (uint8)(1, 3, 5, 7, 9, 11, 13, 15));
    vstore4(shuffle(e, (uint4)(0, 2, 4, 6)) + shuffle(e, (uint4)(1, 3, 5, 7)), 0, p);
#elif JK == 2
    float16 b = hsum_pair(a[0], a[1]);
    float8 c = shuffle(b, (uint8)(0, 1, 2, 3, 8, 9, 10, 11)) +
               shuffle(b, (uint8)(4, 5, 6, 7, 12, 13, 14, 15));
    float4 e = shuffle(c, (uint4)(0, 2, 4, 6)) + shuffle(c, (uint4)(1, 3, 5, 7));
    vstore2(shuffle(e, (uint2)(0, 2)) + shuffle(e, (uint2)(1, 3)), 0, p);
#else
    p[0] = hsum16(a[0]);
#endif
}

/* The state's maximum and sum; l: the sum with the weight factor sh, stored without it (exact). */
static inline void store_state(__global float *part, size_t row, int nsplit, int s, int dv,
                               float m, float l, float sh)
{
    __global float *p = part + (row * nsplit + s) * (dv + 2);
    p[dv] = m == -INFINITY ? 0.0f : m;
    p[dv + 1] = l / sh;
}

/* What the outputs are divided by to normalise them: l, or 1 when l = 0 (see the top). */
static inline float norm_of(float l)
{
    return l != 0.0f ? l : 1.0f;
}

/* The split's keys [k_lo, k_hi) for decode_cpu's RQ rows (see there): their running maxima m,
 * sums l and unnormalised outputs acc from the start, the weights times sh when shifted (a
 * constant where it is inlined: the first pass has no multiply). Inlined, so that the register
 * tiles stay registers. */
static inline __attribute__((always_inline)) void
dcpu_keys(float16 acc[RQ][DVP / 16], float *m, float *l, float16 qv[RQ][DP / 16],
          const float *sh, int shifted, __global const CTYPE *kb, __global const CTYPE *vb,
          int k_lo, int k_hi, int d, int dv, float scale, int alibi, const float *slope,
          const int *diag, const int *lo, const int *hi, float fill)
{
    int nd = d / 16, ndv = dv / 16; /* whole 16-float chunks of a row; then one partial one */
    #pragma unroll
    for (int r = 0; r < RQ; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
        #pragma unroll
        for (int c = 0; c < DVP / 16; c++)
            acc[r][c] = (float16)(0.0f);
    }
    /* the scores of a block's keys, then their weights; lanes past a short last block's keys
     * are masked, not computed: set once here, so that no lane is ever read uninitialised */
    float st[RQ][16];
    #pragma unroll
    for (int r = 0; r < RQ; r++)
        vstore16((float16)(0.0f), 0, st[r]);
    for (int k0 = k_lo; k0 < k_hi; k0 += 16) {
        int nk = min(16, k_hi - k0);
        float corr[RQ];
        for (int j = 0; j < nk; j += JK) {
            __global const CTYPE *kr[JK];
            #pragma unroll
            for (int t = 0; t < JK; t++) {
                /* keys past the block's nk repeat its last (their scores are masked below) */
                kr[t] = kb + (size_t)(k0 + min(j + t, nk - 1)) * d;
                /* the K and V rows PF keys on, so that they are on their way from memory well
                 * before use: the hardware's prefetchers did not keep up (EPYC, cache in L3:
                 * 40 GB/s without, 52 with; demand loads of one value per line in their place:
                 * 34) */
                if (j + t < nk && k0 + PF + j + t < k_hi) {
                    PREFETCH_ROW(kr[t] + (size_t)PF * d, d);
                    PREFETCH_ROW(vb + (size_t)(k0 + PF + j + t) * dv, dv);
                }
            }
            float16 a[RQ][JK];
            #pragma unroll
            for (int r = 0; r < RQ; r++)
                #pragma unroll
                for (int t = 0; t < JK; t++)
                    a[r][t] = (float16)(0.0f);
            #pragma unroll 1
            for (int c = 0; c < nd; c++) {
                #pragma unroll
                for (int t = 0; t < JK; t++) {
                    float16 kv = ROW16(kr[t], c);
                    #pragma unroll
                    for (int r = 0; r < RQ; r++)
                        a[r][t] = fma(qv[r][c], kv, a[r][t]);
                }
            }
            if (16 * nd < d) {
                #pragma unroll
                for (int t = 0; t < JK; t++) {
                    float16 kv = LOAD_ROW16(CT, kr[t] + 16 * nd, d - 16 * nd);
                    #pragma unroll
                    for (int r = 0; r < RQ; r++)
                        a[r][t] = fma(qv[r][nd], kv, a[r][t]);
                }
            }
            /* j + JK <= 16: j is a multiple of JK, which divides 16 */
            #pragma unroll
            for (int r = 0; r < RQ; r++)
                store_key_sums(a[r], st[r] + j);
        }
        int16 idx = (int16)(k0) + (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        #pragma unroll
        for (int r = 0; r < RQ; r++) {
            float16 x = idx < (int16)(k_hi) ? vload16(0, st[r]) * (float16)(scale)
                                             : (float16)(0.0f); /* lanes past the keys: unset */
            if (alibi)
                x += CLATTN_ALIBI(slope[r], convert_float16((int16)(diag[r]) - idx));
            x = select((float16)(fill), x, idx >= (int16)(lo[r]) & idx < (int16)(hi[r]));
            x = select((float16)(-INFINITY), x, idx < (int16)(k_hi));
            float bm = hmax16(x), mn = bm > m[r] ? bm : m[r];
            float mz = mn == -INFINITY ? 0.0f : mn;
            corr[r] = clattn_exp_neg(m[r] - mz); /* 0 from m = -inf */
            x = clattn_exp_neg16(x - (float16)(mz)); /* common.cl: half the builtin's work */
            if (shifted)
                x *= (float16)(sh[r]);
            l[r] = l[r] * corr[r] + hsum16(x);
            m[r] = mn;
            vstore16(x, 0, st[r]);
        }
        /* P V CV 16-column chunks at a time over the block's keys, RQ * CV accumulators: the
         * block's sums from 0, then acc = acc * corr + them (a sum kept key by key drifts over a
         * long split; the rescale's multiply becomes the fma, so this costs nothing) */
        int c = 0;
        #pragma unroll 1
        for (; c + CV <= ndv; c += CV) {
            float16 a[RQ][CV];
            #pragma unroll
            for (int r = 0; r < RQ; r++)
                #pragma unroll
                for (int u = 0; u < CV; u++)
                    a[r][u] = (float16)(0.0f);
            #pragma unroll 1
            for (int j = 0; j < nk; j++) {
                __global const CTYPE *vr = vb + (size_t)(k0 + j) * dv;
                #pragma unroll
                for (int u = 0; u < CV; u++) {
                    float16 vv = ROW16(vr, c + u);
                    #pragma unroll
                    for (int r = 0; r < RQ; r++)
                        a[r][u] = fma((float16)(st[r][j]), vv, a[r][u]);
                }
            }
            #pragma unroll
            for (int r = 0; r < RQ; r++)
                #pragma unroll
                for (int u = 0; u < CV; u++)
                    acc[r][c + u] = fma(acc[r][c + u], (float16)(corr[r]), a[r][u]);
        }
        /* the chunks left: one at a time, the last one partial when dv is not a multiple of 16 */
        #pragma unroll 1
        for (; c < (dv + 15) / 16; c++) {
            float16 a[RQ];
            #pragma unroll
            for (int r = 0; r < RQ; r++)
                a[r] = (float16)(0.0f);
            if (c < ndv) {
                #pragma unroll 1
                for (int j = 0; j < nk; j++) {
                    float16 vv = ROW16(vb + (size_t)(k0 + j) * dv, c);
                    #pragma unroll
                    for (int r = 0; r < RQ; r++)
                        a[r] = fma((float16)(st[r][j]), vv, a[r]);
                }
            } else {
                for (int j = 0; j < nk; j++) {
                    float16 vv =
                        LOAD_ROW16(CT, vb + (size_t)(k0 + j) * dv + 16 * c, dv - 16 * c);
                    #pragma unroll
                    for (int r = 0; r < RQ; r++)
                        a[r] = fma((float16)(st[r][j]), vv, a[r]);
                }
            }
            #pragma unroll
            for (int r = 0; r < RQ; r++)
                acc[r][c] = fma(acc[r][c], (float16)(corr[r]), a[r]);
        }
    }
}

/* CPU shape: one work-item per (split, RQ rows, K/V head), keys 16 at a time: each key's dot
 * products with every row (16-wide vectors over the head, one horizontal sum per row), the 16
 * scores of a row as one vector for the mask and the softmax, then the outputs 16 columns at a
 * time over the 16 keys (RQ accumulators), so that the K and V rows are read once. The unroll
 * pragmas keep the RQ-row tiles in registers (PoCL leaves them on the stack otherwise). */
#if CLATTN_CPU_SHAPE
__kernel void decode_cpu(DECODE_PARAMS)
{
    int s = get_global_id(0), rg = get_global_id(1), bh = get_global_id(2);
    int R = G * Qn, r0 = rg * RQ;
    if (r0 >= R)
        return;
    int nr = min(RQ, R - r0), L = seq_keys(lens, lens_off, bh / Hkv, Kmax, A);
    /* (not min(k_lo + split, L): the sum can pass INT_MAX for the last split of a cache near it) */
    int k_lo = s * split, k_hi = L - k_lo > split ? k_lo + split : L;
    size_t base = (size_t)bh * R + r0; /* the first query row */
    __global const CTYPE *kb = K + k_off + (size_t)bh * Kmax * d;
    __global const CTYPE *vb = V + v_off + (size_t)bh * Kmax * dv;
    float16 qv[RQ][DP / 16], acc[RQ][DVP / 16];
    float m[RQ], l[RQ], slope[RQ], sh[RQ]; /* sh: the rows' weight factors */
    int lo[RQ], hi[RQ], diag[RQ], shifted = 0;
    #pragma unroll
    for (int r = 0; r < RQ; r++) {
        int rr = r0 + min(r, nr - 1); /* rows past R recompute the last one */
        slope[r] = row_slope(slopes, slopes_off, ss, bh, rr, Hkv, G, Qn);
        diag[r] = L - Qn + rr % Qn;
        __global const QTYPE *qr = Q + q_off + (base + (rr - r0)) * d;
        #pragma unroll
        for (int c = 0; c < DP / 16; c++)
            qv[r][c] = LOAD_ROW16(QT, qr + 16 * c, d - 16 * c);
        int2 bo = row_bounds(rr, Qn, L, win);
        lo[r] = bo.x;
        hi[r] = bo.y;
        sh[r] = 1.0f;
    }
    dcpu_keys(acc, m, l, qv, sh, 0, kb, vb, k_lo, k_hi, d, dv, scale, slopes != 0, slope, diag,
              lo, hi, fill);
    float shift = clattn_overflow_shift(k_hi - k_lo, 1.0f);
    #pragma unroll
    for (int r = 0; r < RQ; r++) { /* constant indices: acc stays in registers */
        int bad = clattn_nonfinite(l[r]);
        #pragma unroll
        for (int c = 0; c < DVP / 16; c++)
            bad |= clattn_nonfinite16(acc[r][c]);
        sh[r] = bad ? shift : 1.0f;
        shifted |= bad;
    }
    if (shifted) /* rows whose sums overflowed: once more with their weights scaled */
        dcpu_keys(acc, m, l, qv, sh, 1, kb, vb, k_lo, k_hi, d, dv, scale, slopes != 0, slope,
                  diag, lo, hi, fill);
    for (int r = 0; r < nr; r++) {
        __global float *p = part + ((base + r) * nsplit + s) * (dv + 2);
        float f = norm_of(l[r]);
        for (int c = 0; c < dv; c++)
            p[c] = ((const float *)acc[r])[c] / f;
        store_state(part, base + r, nsplit, s, dv, m[r], l[r], sh[r]);
    }
}
#endif

/* ---- GPU shape: decode_gpu's steps ---- */

/* The group's RQ query rows from q into qs (rows past nr repeat the last), zero past d. */
static inline void dgpu_stage_q(__local float (*qs)[DP], __global const QTYPE *q, int nr, int d,
                                int t)
{
    for (int i = t; i < RQ * DP; i += WG) {
        int r = i / DP, e = i % DP;
        qs[r][e] = e < d ? CLATTN_LOAD(QT, q + (size_t)min(r, nr - 1) * d + e) : 0.0f;
    }
}

/* Columns [c0, c0 + KCP) of the tile's nk keys (from kt) into Ks, zero past nk and d: item t
 * stages every WG-th element (coalesced). */
static inline void dgpu_stage_k(__local float (*Ks)[KCP + 1], __global const CTYPE *kt, int nk,
                                int c0, int d, int t)
{
    for (int j = 0; j < KCP; j++) {
        int i = t + j * WG, k = i / KCP, e = i % KCP;
        Ks[k][e] = k < nk && c0 + e < d ? CLATTN_LOAD(CT, kt + (size_t)k * d + c0 + e) : 0.0f;
    }
}

/* a[r] += row r's products with item t's key over the staged columns from c0. */
static inline void dgpu_dot(float *a, __local float (*qs)[DP], __local float (*Ks)[KCP + 1],
                            int c0, int d, int t)
{
    for (int e = 0; e < min(KCP, d - c0); e++) {
        float kv = Ks[t][e];
        #pragma unroll
        for (int r = 0; r < RQ; r++)
            a[r] = mad(qs[r][c0 + e], kv, a[r]);
    }
}

/* S[r][t]: row r's score of key kk (scaled, ALiBi, the fill outside [lo, hi)), -inf past the
 * split's keys. */
static inline void dgpu_scores(__local float (*S)[WG], const float *a, int kk, int k_hi,
                               float scale, int alibi, const float *slope, const int *diag,
                               const int *lo, const int *hi, float fill, int t)
{
    for (int r = 0; r < RQ; r++) {
        float x = -INFINITY; /* not a key */
        if (kk < k_hi) {
            x = a[r] * scale;
            if (alibi)
                x += CLATTN_ALIBI(slope[r], (float)(diag[r] - kk));
            x = kk >= lo[r] && kk < hi[r] ? x : fill;
        }
        S[r][t] = x;
    }
}

/* Item t < RQ: row t's running maximum raised to the tile's, with its correction exp(m_old - m)
 * and the maximum to subtract (0 while every score is -inf). */
static inline void dgpu_max(__local float (*S)[WG], __local float *m_l, __local float *mz_l,
                            __local float *corr_l, int t)
{
    float bm = S[t][0];
    for (int j = 1; j < WG; j++)
        bm = S[t][j] > bm ? S[t][j] : bm;
    float mn = bm > m_l[t] ? bm : m_l[t], mz = mn == -INFINITY ? 0.0f : mn;
    corr_l[t] = exp(m_l[t] - mz);
    mz_l[t] = mz;
    m_l[t] = mn;
}

/* acc = acc * corr + P V for item t's output columns t, t + WG, ... over the tile's nk keys
 * (value rows from vt), the tile's sums from 0 (see dcpu_keys). */
static inline void dgpu_pv(float (*acc)[NCOL], __local float (*S)[WG], __local float *corr_l,
                           __global const CTYPE *vt, int nk, int dv, int t)
{
    float a[RQ];
    for (int ci = 0; ci < NCOL; ci++) {
        int c = t + WG * ci;
        if (c >= dv)
            break;
        #pragma unroll
        for (int r = 0; r < RQ; r++)
            a[r] = 0.0f;
        for (int j = 0; j < nk; j++) {
            float v = CLATTN_LOAD(CT, vt + (size_t)j * dv + c);
            #pragma unroll
            for (int r = 0; r < RQ; r++)
                a[r] = mad(S[r][j], v, a[r]);
        }
        #pragma unroll
        for (int r = 0; r < RQ; r++)
            acc[r][ci] = mad(acc[r][ci], corr_l[r], a[r]);
    }
}

/* Item t's bits r of *ovf for the rows r < nr whose sum or item t's outputs are not finite. */
static inline void dgpu_overflow(__local int *ovf, float (*acc)[NCOL], __local float *l_l,
                                 int nr, int dv, int t)
{
    for (int r = 0; r < nr; r++) {
        int bad = clattn_nonfinite(l_l[r]);
        for (int ci = 0; ci < NCOL; ci++)
            bad |= t + WG * ci < dv && clattn_nonfinite(acc[r][ci]);
        if (bad)
            atomic_or(ovf, 1 << r);
    }
}

/* GPU shape: a work-group of WG items per (split, RQ rows, K/V head) walks the split's keys WG
 * at a time: the group stages the tile's keys in local memory, KC columns at a time (read
 * coalesced: the tile's rows lie one after another), item t scores key t of the tile for every
 * row (the rows of q in local memory), the first RQ items take one row's maximum and sum each,
 * and every item accumulates its NCOL output columns (t, t + WG, ...) over the tile's keys, so V
 * is read coalesced. */
#if CLATTN_GPU_SHAPE
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void decode_gpu(DECODE_PARAMS)
{
    __local float qs[RQ][DP], S[RQ][WG], mz_l[RQ], corr_l[RQ], m_l[RQ], l_l[RQ];
    __local float Ks[WG][KCP + 1]; /* +1: item t reads row t, rows in different banks */
    __local int ovf[1]; /* an array: see flash_gpu */
    int t = get_local_id(0), s = get_group_id(0), rg = get_group_id(1), bh = get_group_id(2);
    int R = G * Qn, r0 = rg * RQ;
    if (r0 >= R)
        return; /* the whole group */
    int nr = min(RQ, R - r0), L = seq_keys(lens, lens_off, bh / Hkv, Kmax, A);
    /* (not min(k_lo + split, L): the sum can pass INT_MAX for the last split of a cache near it) */
    int k_lo = s * split, k_hi = L - k_lo > split ? k_lo + split : L;
    size_t base = (size_t)bh * R + r0;
    __global const CTYPE *kb = K + k_off + (size_t)bh * Kmax * d;
    __global const CTYPE *vb = V + v_off + (size_t)bh * Kmax * dv;
    int lo[RQ], hi[RQ], diag[RQ];
    float acc[RQ][NCOL], slope[RQ], sh[RQ]; /* sh: the rows' weight factors */
    dgpu_stage_q(qs, Q + q_off + base * d, nr, d, t);
    for (int r = 0; r < RQ; r++) {
        int rr = r0 + min(r, nr - 1);
        int2 bo = row_bounds(rr, Qn, L, win);
        lo[r] = bo.x;
        hi[r] = bo.y;
        slope[r] = row_slope(slopes, slopes_off, ss, bh, rr, Hkv, G, Qn);
        diag[r] = L - Qn + rr % Qn;
        sh[r] = 1.0f;
    }
    if (t == 0)
        ovf[0] = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int r = 0; r < RQ; r++)
            for (int ci = 0; ci < NCOL; ci++)
                acc[r][ci] = 0.0f;
        if (t < RQ) {
            m_l[t] = -INFINITY;
            l_l[t] = 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int k0 = k_lo; k0 < k_hi; k0 += WG) {
            int kk = k0 + t, nk = min(WG, k_hi - k0);
            float a[RQ];
            #pragma unroll
            for (int r = 0; r < RQ; r++)
                a[r] = 0.0f;
            for (int c0 = 0; c0 < d; c0 += KCP) {
                dgpu_stage_k(Ks, kb + (size_t)k0 * d, nk, c0, d, t);
                barrier(CLK_LOCAL_MEM_FENCE);
                dgpu_dot(a, qs, Ks, c0, d, t);
                barrier(CLK_LOCAL_MEM_FENCE);
            }
            dgpu_scores(S, a, kk, k_hi, scale, slopes != 0, slope, diag, lo, hi, fill, t);
            barrier(CLK_LOCAL_MEM_FENCE);
            if (t < RQ)
                dgpu_max(S, m_l, mz_l, corr_l, t);
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int r = 0; r < RQ; r++)
                S[r][t] = exp(S[r][t] - mz_l[r]) * sh[r];
            barrier(CLK_LOCAL_MEM_FENCE);
            if (t < RQ) {
                float sum = 0.0f;
                for (int j = 0; j < WG; j++)
                    sum += S[t][j];
                l_l[t] = l_l[t] * corr_l[t] + sum;
            }
            dgpu_pv(acc, S, corr_l, vb + (size_t)k0 * dv, nk, dv, t);
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        if (pass)
            break;
        /* rows whose sums overflowed: once more with their weights scaled (see the top) */
        dgpu_overflow(ovf, acc, l_l, nr, dv, t);
        barrier(CLK_LOCAL_MEM_FENCE);
        if (!ovf[0])
            break;
        for (int r = 0; r < RQ; r++)
            sh[r] = ovf[0] >> r & 1 ? clattn_overflow_shift(k_hi - k_lo, 1.0f) : 1.0f;
    }
    for (int r = 0; r < nr; r++) {
        __global float *p = part + ((base + r) * nsplit + s) * (dv + 2);
        float f = norm_of(l_l[r]);
        for (int ci = 0; ci < NCOL; ci++)
            if (t + WG * ci < dv)
                p[t + WG * ci] = acc[r][ci] / f;
    }
    if (t < nr)
        store_state(part, base + t, nsplit, s, dv, m_l[t], l_l[t], sh[t]);
}
#endif

/* out and lse of each query row from its splits' states: weights l_s exp(mz_s - M) / sum over the
 * splits that saw a key with a weight (l > 0), M their largest mz, sum the weights' (normalised
 * first, so that the sum of the splits' outputs stays within their largest). A split whose
 * scores were all -inf weighs 0 (its output, 0 or NaN from 0 * v, passes through 0 *); none left
 * gives NaN and an LSE of -inf, as one attention op over blocked keys; a sequence with no keys
 * (L = 0) gives 0 and -inf, as PyTorch's softmax over no keys times an empty V. One work-item
 * per cpi output columns of a row (all of them on CPUs; one on GPUs), 16 columns' compensated
 * sums at a time in registers. */
__kernel void decode_merge(__global const float *part, int nsplit, int dv, int cpi,
                           int rows_per_seq, __global const int *lens, int lens_off, int Kmax,
                           int A, __global float *out, int out_off, __global float *lse,
                           int lse_off, int nrows)
{
    int ci = get_global_id(0), row = get_global_id(1);
    if (row >= nrows || ci * cpi >= dv)
        return;
    int c_lo = ci * cpi, c_hi = min(c_lo + cpi, dv), st = dv + 2;
    int L = seq_keys(lens, lens_off, row / rows_per_seq, Kmax, A);
    __global const float *p = part + (size_t)row * nsplit * st;
    __global float *o = out + out_off + (size_t)row * dv;
    float M = -INFINITY, sum = 0.0f, sc = 0.0f;
    for (int s = 0; s < nsplit; s++) {
        float mz = p[s * st + dv], l = p[s * st + dv + 1];
        if (l != 0.0f && mz > M)
            M = mz;
    }
    /* compensated sums (clattn_kahan): a long cache has thousands of splits */
    for (int s = 0; s < nsplit; s++) {
        float l = p[s * st + dv + 1];
        clattn_kahan(&sum, &sc, 1.0f, l != 0.0f ? l * exp(p[s * st + dv] - M) : 0.0f);
    }
    for (int c0 = c_lo; c0 < c_hi; c0 += 16) { /* 16 columns' sums at a time in registers */
        int n = min(16, c_hi - c0);
        float t[16], tc[16];
        for (int i = 0; i < 16; i++)
            t[i] = tc[i] = 0.0f;
        for (int s = 0; s < nsplit; s++) { /* divided: one split weighs exactly 1 */
            float l = p[s * st + dv + 1];
            float w = l != 0.0f ? l * exp(p[s * st + dv] - M) / sum : 0.0f;
            for (int i = 0; i < n; i++)
                clattn_kahan(&t[i], &tc[i], 1.0f, p[s * st + c0 + i] * w);
        }
        for (int i = 0; i < n; i++)
            o[c0 + i] = L == 0 ? 0.0f : sum == 0.0f ? NAN : t[i];
    }
    if (lse && ci == 0)
        lse[lse_off + row] = L == 0 ? -INFINITY : M + log(sum);
}

/* The new keys and values into the caches at each sequence's length, converted from NT to CT.
 * One work-item per element (column e of new row i of K/V head bh). */
__kernel void decode_append(__global const NTYPE *kn, int kn_off, __global const NTYPE *vn,
                            int vn_off, __global CTYPE *K, int k_off, __global CTYPE *V, int v_off,
                            __global const int *lens, int lens_off, int Hkv, int Qn, int Kmax,
                            int d, int dv)
{
    int e = get_global_id(0), i = get_global_id(1), bh = get_global_id(2);
    size_t pos = (size_t)bh * Kmax + seq_keys(lens, lens_off, bh / Hkv, Kmax, Qn) - Qn + i;
    size_t src = (size_t)bh * Qn + i;
    if (e < d)
        CLATTN_STORE(CT, CLATTN_LOAD(NT, kn + kn_off + src * d + e), K + k_off + pos * d + e);
    if (e < dv)
        CLATTN_STORE(CT, CLATTN_LOAD(NT, vn + vn_off + src * dv + e), V + v_off + pos * dv + e);
}

/* lens[b] += Qn after an append (clamped as everywhere above). One work-item per sequence. */
__kernel void decode_advance(__global int *lens, int lens_off, int Kmax, int Qn, int B)
{
    int b = get_global_id(0);
    if (b < B)
        lens[lens_off + b] = seq_keys(lens, lens_off, b, Kmax, Qn);
}
