/* clattn fused scaled-dot-product attention (flash-attention style): out = dropout(softmax(mask(
 * Q K^T * scale))) V with an online softmax over key blocks, never materialising the scores.
 *
 * Layout: Q (nb, nq, d), K (nb, nk, d), V (nb, nk, dv), O (nb, nq, dv) of the dtypes QT, KT, VT,
 * OT below (arithmetic float32 throughout, each output rounded once), with unit-stride rows; and
 * lse, row `row` of batch bb at lse_off + bb * lse_s.x + row * lse_s.y ((nb, nq) contiguous:
 * lse_s = (nq, 1)), or NULL: each row's log-sum-exp m + log(l) of its masked scaled scores (-inf
 * when m is, as its l is then 0). Batch bb is (d0, d1) = (bb / D1, bb % D1) for the mask (see
 * common.cl) and for the operands:
 * each operand's int4 layout l = (offset, s0, s1, row stride) puts row `row` of batch bb at element
 * l.x + d0 * l.y + d1 * l.z + row * l.w, so contiguous tensors and multi-head attention's
 * projections (B, T, H * dh), read in place per head, take the same kernels.
 * Grouped-query attention: G query heads share one head of K and V, so K and V hold D0 x (D1 / G)
 * batches and query batch (d0, d1) reads K/V batch (d0, d1 / G), kb = d0 * (D1 / G) + d1 / G in
 * their own layouts and in the packed panels and value sums, which the pack kernels build once
 * per K/V batch (their D1 is D1 / G). G = 1 is ordinary attention.
 *
 * Numerics, the same in both variants and the same as the unfused path:
 * - Each score is rounded exactly as the unfused path's scale * (Q K^T), plus the bias if any (one
 *   more rounding, as the softmax kernel adds it), plus ALiBi's CLATTN_ALIBI if any (one more, as
 *   there), then blocked keys get `fill` (masked_fill),
 *   then max-subtracted: x = t - m <= 0 exactly, so no exponent is ever
 *   positive, whatever the magnitudes (an intermediate in log2 units could overflow for scales or
 *   fills near FLT_MAX).
 * - A running maximum still at -inf (every key so far blocked with fill = -inf) is replaced by 0
 *   when subtracted, so exp(-inf - -inf) never makes NaN; a row whose every key is blocked with
 *   -inf ends as 0/0 = NaN, as PyTorch's softmax gives; a finite fill gives uniform weights.
 * - A key block past the length, causal or window limit of every row of a group (the CPU shape's
 *   row group, the GPU shape's work-group) is skipped once each of those rows' running max
 *   exceeds fill + 120: from then on exp(fill - max) is exactly 0 in float32. Key blocks below
 *   the sliding window of every row of a group are taken last, and skipped the same way. Outputs
 *   stay those of IEEE arithmetic, weights @ V, as in PyTorch: the skipped keys' zero weights
 *   times their value rows are added as one precomputed vector per block suffix (vt, see
 *   flash_vscan) or prefix (vh), 0 for finite values and NaN where a column holds a NaN or an
 *   infinity.
 * - NaN scores (NaN in Q or in an open key's K) make their row NaN, as in PyTorch.
 * Dropout element (bb, q, k) uses stream index (bb * nq + q) * nk + k, as the unfused weights.
 *
 * Variants:
 * - CPU shape (flash_pack_k, flash_pack_v, flash_cpu): K is packed per block of KB keys as
 *   (d, KB) panels and V as zero-padded (KB, DVP) rows, so the inner loops are unit-stride
 *   16-wide vector loads without bounds checks. V is read in place when its rows already lie one
 *   after another and need no padding (rows 2 KiB apart, as in multi-head attention, share so few
 *   L1 sets that copying them together is faster). A work-item owns QG groups of QR <= 16
 *   consecutive query rows; for each key block it takes its groups in turn while the block's K and
 *   V panels stay in L1, keeping one group's scores (QR x KB) in registers, then its outputs VC
 *   columns at a time (QR x VC, for all KB keys of the block: a device with 16 vector registers
 *   spills QR x DVP accumulators, 1.5x slower on AVX2), and the other groups' running max, sums
 *   and outputs in private memory (the unroll pragmas matter: without them PoCL keeps the
 *   register tiles on the stack, twice as slow). The column passes change no rounding. Products
 *   use fma(): PoCL compiles mad() to a separate multiply and add. Probabilities use exp2_neg16
 *   below.
 * - GPU shape (flash_gpu): a work-group of BQ items owns BQ query rows; K and V tiles of BK keys are
 *   staged in local memory by the whole group (coalesced), each item keeps its row of q and of the
 *   output in private memory. vt: flash_vscan's suffix sums with BKS = BK, or NULL when no row
 *   can skip keys. */
#include "common.cl"
#include "dtype.cl"

/* Operand dtypes (dtype.cl's codes): Q, K, V and O float32, float16 or bfloat16 each; VST, the
 * rows the value sums read: V, or the packed float32 rows (the CPU shape packs a 16-bit V). */
#ifndef QT
#define QT 0
#endif
#ifndef KT
#define KT 0
#endif
#ifndef VT
#define VT 0
#endif
#ifndef OT
#define OT 0
#endif
#ifndef VST
#define VST VT
#endif
#define QTYPE CLATTN_T(QT)
#define KTYPE CLATTN_T(KT)
#define VTYPE CLATTN_T(VT)
#define OTYPE CLATTN_T(OT)
#define VSTYPE CLATTN_T(VST)

#ifndef QR
#define QR 5
#endif
#ifndef KB
#define KB 64
#endif
#ifndef QG
#define QG 2
#endif
#ifndef DVP
#define DVP 64
#endif
#ifndef DP
#define DP 64
#endif
#ifndef BQ
#define BQ 64
#endif
#ifndef BK
#define BK 16
#endif
#ifndef VC
#define VC 64
#endif
#if KB % 16 != 0 || DVP % 16 != 0 || VC % 16 != 0 || VC < 16
#error "KB, DVP and VC must be multiples of 16"
#endif
#define NKV (KB / 16)
#define NVD (DVP / 16)
/* 16-column vectors per P V pass in flash_cpu: the most that divides NVD and is at most VC / 16
 * (checked for 1, 2 and VC / 16, which covers the power-of-two VC the host passes) */
#if VC / 16 >= NVD
#define NVC NVD
#elif NVD % (VC / 16) == 0
#define NVC (VC / 16)
#elif NVD % 2 == 0
#define NVC 2
#else
#define NVC 1
#endif
#include "tile16.cl" /* after QR, KB, NKV and NVC: its register tiles */

#define FLASH_MASK_PARAMS                                                                        \
    int D1, int G, __global const int *lens, int lens_off, int lens_mode,                       \
        __global const int *mask, int mask_off, int4 ms, int4 win, float fill,                  \
        __global const float *bias, int bias_off, int4 bs, __global const float *slopes,          \
        int slopes_off, int2 ss
#define FLASH_DROP_PARAMS int drop, uint2 seed, uint2 offset, uint threshold, float dscale

/* element (row, 0) of batch bb in an operand with layout l (see the top of the file) */
static inline size_t flash_at(int4 l, int D1, int bb, int row)
{
    return (size_t)l.x + (size_t)(bb / D1) * (size_t)l.y + (size_t)(bb % D1) * (size_t)l.z +
           (size_t)row * (size_t)l.w;
}

/* The 16 x 16 tile t transposed in place: four rounds of interleaving t[i] with t[i + 8] (each
 * round rotates the tile's 8-bit element index by one bit; four take the row bits and the column
 * bits across). */
static inline void transpose16(float16 *t)
{
    const uint16 lo = (uint16)(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const uint16 hi = lo + (uint16)(8);
    #pragma unroll
    for (int round = 0; round < 4; round++) {
        float16 u[16];
        #pragma unroll
        for (int i = 0; i < 8; i++) {
            u[2 * i] = shuffle2(t[i], t[i + 8], lo);
            u[2 * i + 1] = shuffle2(t[i], t[i + 8], hi);
        }
        #pragma unroll
        for (int i = 0; i < 16; i++)
            t[i] = u[i];
    }
}

/* kt[bb][blk][e][w] = K[bb][blk * KB + w][e], zero for keys >= nk. One work-item per 16 keys
 * (KB is a multiple of 16), 16 x 16 tiles transposed in registers, so that both the reads and
 * the writes are whole vectors: one item per key, reading and writing scalars with the writes
 * KB floats apart, took about 1.2 ms for K 8 x 8192 x 64 with the other passes alone, the tiles
 * 0.9 ms (in a window call both about 2.5 ms: reading a cold K bounds them there). */
__kernel void flash_pack_k(__global const KTYPE *K, int4 kl, int D1, int nk, int d, int nblk,
                           __global float *kt)
{
    int k0 = 16 * get_global_id(0), bb = get_global_id(1);
    __global float *dst = kt + ((size_t)(bb * nblk + k0 / KB) * d) * KB + k0 % KB;
    if (k0 >= nk) { /* a last block's padding keys */
        for (int e = 0; e < d; e++)
            *(__global float16 *)(dst + (size_t)e * KB) = (float16)(0.0f);
        return;
    }
    __global const KTYPE *src = K + flash_at(kl, D1, bb, k0);
    int nr = min(16, nk - k0); /* the keys that exist, at least one */
    int e = 0;
    for (; e + 16 <= d; e += 16) {
        float16 t[16];
        #pragma unroll
        for (int i = 0; i < 16; i++) /* rows past nk read the last one, then are zeroed */
            t[i] = CLATTN_LOAD16(KT, src + (size_t)min(i, nr - 1) * kl.w + e);
        if (nr < 16) {
            #pragma unroll
            for (int i = 0; i < 16; i++)
                t[i] = i < nr ? t[i] : (float16)(0.0f);
        }
        transpose16(t);
        /* 64-byte aligned: whole blocks of KB floats from the buffer's start, k0 % 16 = 0 */
        #pragma unroll
        for (int i = 0; i < 16; i++)
            *(__global float16 *)(dst + (size_t)(e + i) * KB) = t[i];
    }
    for (; e < d; e++) {
        float t[16];
        for (int i = 0; i < 16; i++)
            t[i] = i < nr ? CLATTN_LOAD(KT, src + (size_t)i * kl.w + e) : 0.0f;
        vstore16(vload16(0, t), 0, dst + (size_t)e * KB);
    }
}

/* vp[bb][k][c] = V[bb][k][c] for k < nk and c < dv, else 0. One work-item per key. */
__kernel void flash_pack_v(__global const VTYPE *V, int4 vl, int D1, int nk, int dv, int nblk,
                           __global float *vp, int vp_off)
{
    int k = get_global_id(0), bb = get_global_id(1);
    __global float *dst = vp + vp_off + ((size_t)bb * nblk * KB + k) * DVP;
    __global const VTYPE *src = V + flash_at(vl, D1, bb, min(k, nk - 1));
    for (int c = 0; c < DVP; c++)
        dst[c] = (k < nk && c < dv) ? CLATTN_LOAD(VT, src + c) : 0.0f;
}

/* qp[bb][q][e] = Q[bb][q][e] in float32, for flash_cpu's scalar reads of a 16-bit Q (converting
 * there would cost more than the products it feeds). One work-item per row. */
__kernel void flash_pack_q(__global const QTYPE *Q, int4 ql, int D1, int nq, int d,
                           __global float *qp, int qp_off)
{
    int q = get_global_id(0), bb = get_global_id(1);
    __global float *dst = qp + qp_off + ((size_t)bb * nq + q) * d;
    __global const QTYPE *src = Q + flash_at(ql, D1, bb, q);
    for (int e = 0; e < d; e++)
        dst[e] = CLATTN_LOAD(QT, src + e);
}

/* Lanes -1 where one of the 16 values from src (columns c0.., only those below dv read) is a NaN
 * or an infinity. The test is on the exponent bits, not 0 * v: Mesa's llvmpipe folds a product
 * with a constant 0 to 0, which IEEE arithmetic does not allow. */
static inline int16 nonfinite16(__global const VSTYPE *src, int c0, int dv)
{
    const int16 expo = (int16)(0x7f800000);
    if (c0 + 16 <= dv)
        return (as_int16(CLATTN_LOAD16(VST, src)) & expo) == expo;
    int t[16];
    for (int i = 0; i < 16; i++)
        t[i] = c0 + i < dv ? as_int(CLATTN_LOAD(VST, src + i)) : 0;
    return (vload16(0, t) & expo) == expo;
}

/* The zero-weight sum of flags: NaN in the lanes that saw a NaN or an infinity, else 0. */
static inline float16 flag_sum16(int16 nonfinite)
{
    return select((float16)(0.0f), as_float16((int16)(0x7fc00000)), nonfinite);
}

/* True lanes of a stored flag vector (flag_sum16's: 0, or NaN). */
static inline int16 flagged16(__global const float *p)
{
    return as_int16(vload16(0, p)) != (int16)(0);
}

/* bf[bb][blk][c] = sum over keys k of block blk (BKS keys, fewer in the last) of 0 * V[bb][k][c]:
 * 0 for finite values, NaN once the column holds a NaN or an infinity there; for c < DVP (0 past
 * dv). One work-item per 16 columns of one block, all blocks at once (one item per 16 columns
 * walking every key, for each sum, took 1.3 ms for V 8 x 8192 x 64, these two kernels 0.5).
 * flash_vscan turns the flags into the suffix and prefix sums the attention kernels add for the
 * blocks they skip. */
__kernel void flash_vflags(__global const VSTYPE *V, int4 vl, int D1, int nk, int dv, int BKS,
                           int nblk, __global float *bf, int bf_off)
{
    int c0 = 16 * get_global_id(0), blk = get_global_id(1), bb = get_global_id(2);
    int k_lo = blk * BKS, k_hi = nk - k_lo > BKS ? k_lo + BKS : nk; /* blk < nblk: k_lo < nk */
    int16 nonfinite = (int16)(0);
    for (int k = k_lo; k < k_hi; k++)
        nonfinite |= nonfinite16(V + flash_at(vl, D1, bb, k) + c0, c0, dv);
    vstore16(flag_sum16(nonfinite), 0, bf + bf_off + ((size_t)bb * nblk + blk) * DVP + c0);
}

/* From flash_vflags' block flags at bf_off: vh[blk] = the flags of blocks 0 .. blk (a prefix:
 * a row that skips the blocks below `head` adds vh[head - 1]), and vt[blk] = those of blocks
 * blk .. nblk - 1 (a suffix), each at its offset of buf, < 0: not wanted. Blocks [b_lo, b_hi);
 * one work-item per 16 columns of a batch. vt (or vh when vt is not wanted) may lie on the
 * flags themselves (vt_off or vh_off = bf_off): each block's flags are read before its sum is
 * written, vh's pass before vt's. Under a loop budget the host runs ranges, vh's from the first
 * up (each takes its carry from vh[b_lo - 1]), then vt's from the last down (from vt[b_hi]). */
__kernel void flash_vscan(__global float *buf, int bf_off, int vt_off, int vh_off, int nblk,
                          int b_lo, int b_hi)
{
    int c0 = 16 * get_global_id(0), bb = get_global_id(1);
    size_t base = (size_t)bb * nblk * DVP + c0;
    __global const float *bf = buf + bf_off + base;
    if (vh_off >= 0) {
        __global float *vh = buf + vh_off + base;
        int16 carry = b_lo > 0 ? flagged16(vh + (size_t)(b_lo - 1) * DVP) : (int16)(0);
        for (int b = b_lo; b < b_hi; b++) {
            carry |= flagged16(bf + (size_t)b * DVP);
            vstore16(flag_sum16(carry), 0, vh + (size_t)b * DVP);
        }
    }
    if (vt_off >= 0) {
        __global float *vt = buf + vt_off + base;
        int16 carry = b_hi < nblk ? flagged16(vt + (size_t)b_hi * DVP) : (int16)(0);
        for (int b = b_hi - 1; b >= b_lo; b--) {
            carry |= flagged16(bf + (size_t)b * DVP);
            vstore16(flag_sum16(carry), 0, vt + (size_t)b * DVP);
        }
    }
}

/* the QR running-max corrections exp(m_old - m_new) as one vector (lanes past QR stay 1) */
#define CORR_EXP(t) vstore16(exp2_neg16(vload16(0, t)), 0, t)

/* The 16 columns from c0 of the zero-weight sums of skipped value rows: a suffix from block
 * `tail` (vt, tail >= 0) and a prefix below block `head` (vh, head > 0), each NULL when unused. */
static inline float16 skipped16(__global const float *vt, __global const float *vh, size_t row,
                                int tail, int head, int c0)
{
    float16 z = (float16)(0.0f);
    if (vt && tail >= 0)
        z += vload16(0, vt + (row + tail) * DVP + c0);
    if (vh && head > 0)
        z += vload16(0, vh + (row + head - 1) * DVP + c0);
    return z;
}

/* ---- CPU shape: flash_cpu and its steps ---- */

/* A work-item's row group: its QR rows (rows past nq recompute the last one), each row's open
 * keys [lo, limit), over the group the highest and lowest limit and lo, and the online softmax's
 * state between key blocks: running maxima m, sums l (compensated totals of the blocks' sums, lc
 * what they rounded off) and the unnormalised outputs of the last `pending` blocks, acc (each
 * block rescaled to the maximum; cdp: the corrections since they began), which cpu_flush adds
 * into the group's totals; done once the group has skipped the rest of the keys. sh: each
 * row's weight factor (1, or its overflow shift when the item redoes it, see flash_cpu),
 * shifted: whether some row's is not 1. */
typedef struct {
    float16 acc[QR][NVD], l[QR], lc[QR];
    float m[QR], cdp[QR], sh[QR];
    int row[QR], limit[QR], lo[QR];
    int max_limit, min_limit, max_lo, min_lo, done, shifted, pending;
} cpu_group;

/* A row group's unnormalised outputs up to its last flush (cpu_flush), apart from the group's
 * state that every block touches. */
typedef struct {
    float16 tot[QR][NVD];
} cpu_total;

TILE_INLINE void cpu_group_init(cpu_group *g, cpu_total *t, int row0, int nq, int nk, int d0,
                                  __global const int *lens, int lens_off, int lens_mode, int4 win,
                                  const float *sh)
{
    g->max_limit = 0;
    g->min_limit = nk;
    g->max_lo = 0;
    g->min_lo = nk;
    g->done = 0;
    g->shifted = 0;
    g->pending = 0;
    #pragma unroll
    for (int r = 0; r < QR; r++) {
        int q = min(row0 + r, nq - 1);
        g->sh[r] = sh[r];
        g->shifted |= sh[r] != 1.0f;
        g->m[r] = -INFINITY;
        g->l[r] = (float16)(0.0f);
        g->lc[r] = (float16)(0.0f);
        g->cdp[r] = 1.0f;
        #pragma unroll
        for (int c = 0; c < NVD; c++) {
            g->acc[r][c] = (float16)(0.0f);
            t->tot[r][c] = (float16)(0.0f);
        }
        g->row[r] = q;
        g->limit[r] = clattn_row_limit(d0, q, nk, lens, lens_off, lens_mode, nq, win);
        g->lo[r] = clattn_row_lo(q, nk, win);
        g->max_limit = max(g->max_limit, g->limit[r]);
        g->min_limit = min(g->min_limit, g->limit[r]);
        g->max_lo = max(g->max_lo, g->lo[r]);
        g->min_lo = min(g->min_lo, g->lo[r]);
    }
}

/* The group skips every key left: they are blocked and weigh exactly 0 (see flash_cpu). Its
 * outputs take those keys' zero-weight sums: vt's from block `tail` on (-1: none) and vh's below
 * block `head` (vt, vh: the K/V batch's, or NULL). */
TILE_INLINE void cpu_skip_rest(cpu_group *g, __global const float *vt, __global const float *vh,
                               size_t row, int tail, int head)
{
    g->done = 1;
    #pragma unroll
    for (int c = 0; c < NVD; c++) {
        float16 z = skipped16(vt, vh, row, tail, head, 16 * c);
        #pragma unroll
        for (int r = 0; r < QR; r++)
            g->acc[r][c] += z;
    }
}

/* s = scale * (Q K^T) for the group's QR rows (qr: their rows of Q) and the block's KB keys
 * (ktb: its packed panel), in registers; only the 16-key parts [jlo, jhi) of the block, the
 * others left 0: their keys are blocked for every row of the group, and get the fill. A window's
 * edge blocks: of a 64-key block, 1.5 parts on average lie outside the group's keys. */
TILE_INLINE void cpu_scores(float16 s[QR][NKV], __global const float *qr[QR],
                            __global const float *ktb, int d, float scale, int jlo, int jhi)
{
    if (jlo == 0 && jhi == NKV) {
        tile_panel(s, qr, ktb, d);
    } else {
        #pragma unroll
        for (int j = 0; j < NKV; j++) { /* constant indices: the tile stays in registers */
            #pragma unroll
            for (int r = 0; r < QR; r++)
                s[r][j] = (float16)(0.0f);
            if (j < jlo || j >= jhi)
                continue;
            for (int e = 0; e < d; e++) {
                float16 kv = vload16(j, ktb + e * KB);
                #pragma unroll
                for (int r = 0; r < QR; r++)
                    s[r][j] = fma((float16)(qr[r][e]), kv, s[r][j]);
            }
        }
    }
    #pragma unroll
    for (int r = 0; r < QR; r++)
        #pragma unroll
        for (int j = 0; j < NKV; j++)
            s[r][j] *= (float16)(scale);
}

/* The bias (NULL: none) and ALiBi (slopes NULL: none) of the group's rows, added to their scores
 * of the block's keys from kbase. */
TILE_INLINE void cpu_addends(float16 s[QR][NKV], const cpu_group *g, int kbase, int nq, int nk,
                               int d0, int d1, __global const float *bias, int bias_off, int4 bs,
                               __global const float *slopes, float slope)
{
    if (bias) {
        #pragma unroll
        for (int r = 0; r < QR; r++) {
            __global const float *brow = clattn_bias_row(bias, bias_off, bs, d0, d1, g->row[r]);
            #pragma unroll
            for (int j = 0; j < NKV; j++)
                s[r][j] += bias16(brow, kbase + 16 * j, nk, bs.w);
        }
    }
    if (slopes) {
        #pragma unroll
        for (int r = 0; r < QR; r++) {
            int diag = (g->row[r] - nq) + (nk - kbase); /* relative to the block; no int overflow */
            #pragma unroll
            for (int j = 0; j < NKV; j++)
                s[r][j] += CLATTN_ALIBI(slope, convert_float16((int16)(diag - 16 * j) - LANES16));
        }
    }
}

/* The fill for the blocked keys among the block's, -inf for its padding keys. */
TILE_INLINE void cpu_mask(float16 s[QR][NKV], const cpu_group *g, int kbase, int nk, int d0,
                            int d1, __global const int *mask, int mask_off, int4 ms, float fill)
{
    #pragma unroll
    for (int r = 0; r < QR; r++) {
        __global const int *mrow = clattn_mask_row(mask, mask_off, ms, d0, d1, g->row[r]);
        #pragma unroll
        for (int j = 0; j < NKV; j++)
            s[r][j] = mask16(s[r][j], kbase + 16 * j, nk, g->lo[r], g->limit[r], mrow, ms.w,
                             fill);
    }
}

/* The online softmax's step for the block: each row's running maximum m raised to the block's,
 * its probabilities pb = exp(s - m) and their sums ps, and cd[r] its correction exp(m_old - m)
 * in log2 units (lanes past QR 0). Returns whether some maximum went up (the corrections need
 * their exponentials); *zero_blocked: whether every new maximum is past `negligible`, so that
 * every blocked key weighs exactly 0 from here on. */
TILE_INLINE int cpu_probs(float16 s[QR][NKV], float *m, float16 pb[QR][NKV], float16 *ps,
                            float cd[16], float negligible, int *zero_blocked)
{
    int grew = 0;
    *zero_blocked = 1;
    #pragma unroll
    for (int r = 0; r < 16; r++)
        cd[r] = 0.0f;
    #pragma unroll
    for (int r = 0; r < QR; r++) {
        float16 vm = s[r][0];
        #pragma unroll
        for (int j = 1; j < NKV; j++)
            vm = max16(vm, s[r][j]);
        float bm = hmax16(vm), mn = bm > m[r] ? bm : m[r];
        float mz = mn == -INFINITY ? 0.0f : mn; /* see the top of the file */
        grew |= mn != m[r];
        *zero_blocked &= mn > negligible;
        cd[r] = (m[r] - mz) * M_LOG2E_F;
        m[r] = mn;
        ps[r] = (float16)(0.0f);
        #pragma unroll
        for (int j = 0; j < NKV; j++) {
            pb[r][j] = exp2_neg16((s[r][j] - (float16)(mz)) * (float16)(M_LOG2E_F));
            ps[r] += pb[r][j];
        }
    }
    return grew;
}

/* The probabilities and their sums times the rows' weight factors (exact: powers of two). */
TILE_INLINE void cpu_shift(float16 pb[QR][NKV], float16 *ps, const float *sh)
{
    #pragma unroll
    for (int r = 0; r < QR; r++) {
        ps[r] *= (float16)(sh[r]);
        #pragma unroll
        for (int j = 0; j < NKV; j++)
            pb[r][j] *= (float16)(sh[r]);
    }
}

/* The rows' sums l (compensations lc) rescaled by their corrections and raised by the block's
 * ps; cd becomes the corrections themselves (1 when no maximum grew: no exponentials then). */
TILE_INLINE void cpu_sums(float16 *l, float16 *lc, const float16 *ps, float cd[16], int grew)
{
    if (grew)
        CORR_EXP(cd);
    #pragma unroll
    for (int r = 0; r < QR; r++) {
        if (!grew)
            cd[r] = 1.0f;
        clattn_kahan16(&l[r], &lc[r], cd[r], ps[r]);
    }
}

/* acc = acc * cd + P V over the block's keys [klo, khi) (vb: the block's first value row, rows
 * vstride apart), the block's sum from 0 (the rescale's multiply becomes the fma). NVC output
 * vectors of the QR rows at a time stay in registers over the keys. */
TILE_INLINE void cpu_pv(float16 acc_mem[QR][NVD], float16 pb[QR][NKV], const float cd[16],
                        __global const float *vb, int vstride, int klo, int khi)
{
    #pragma unroll 1
    for (int c0 = 0; c0 < NVD; c0 += NVC) {
        float16 acc[QR][NVC];
        #pragma unroll
        for (int r = 0; r < QR; r++)
            #pragma unroll
            for (int c = 0; c < NVC; c++)
                acc[r][c] = (float16)(0.0f);
        tile_rows_fma(acc, pb, vb + 16 * c0, vstride, klo, khi);
        #pragma unroll
        for (int r = 0; r < QR; r++)
            #pragma unroll
            for (int c = 0; c < NVC; c++)
                acc_mem[r][c0 + c] = fma(acc_mem[r][c0 + c], (float16)(cd[r]), acc[r][c]);
    }
}

/* The group's last blocks' outputs acc added into its totals t, the totals first rescaled by
 * the corrections since those blocks began; acc keeps what the addition rounded off (Knuth's
 * TwoSum, exact), so that the next blocks carry it on, rescaled with them: the totals are
 * compensated with no array of compensations (flash_cpu's private memory is the stack's, and a
 * GPU compiler's stack frame limit is near). Every FLUSH blocks: a sum kept block by block drifts
 * over millions of keys, and compensating every block cost 6-7% at N 2048 (BENCHMARKS.md). No
 * remainder once the total is not finite: it would be NaN. */
#ifndef FLUSH
#define FLUSH 16
#endif
TILE_INLINE void cpu_flush(cpu_group *g, cpu_total *t)
{
    #pragma unroll
    for (int r = 0; r < QR; r++) {
        #pragma unroll
        for (int c = 0; c < NVD; c++) {
            float16 err, a = t->tot[r][c] * (float16)(g->cdp[r]);
            t->tot[r][c] = clattn_two_sum16(a, g->acc[r][c], &err);
            g->acc[r][c] = err;
        }
        g->cdp[r] = 1.0f;
    }
    g->pending = 0;
}

/* Gives each row of the item's groups (from row0) whose sum or outputs are not finite the factor
 * `shift`; returns whether there was one. */
TILE_INLINE int cpu_mark_overflow(const cpu_group *grp, const cpu_total *tt, float sh[QG][QR],
                                  float shift, int row0, int nq)
{
    int any = 0;
    for (int gi = 0; gi < QG && row0 + gi * QR < nq; gi++) {
        for (int r = 0; r < QR; r++) {
            int bad = clattn_nonfinite16(grp[gi].l[r]);
            for (int c = 0; c < NVD; c++)
                bad |= clattn_nonfinite16(tt[gi].tot[r][c]);
            if (bad)
                sh[gi][r] = shift;
            any |= bad;
        }
    }
    return any;
}

/* The group's normalised outputs (totals tt; and log-sum-exps when lse) for its rows below nq;
 * the padding columns past dv stay unwritten. */
TILE_INLINE void cpu_store(const cpu_group *g, const cpu_total *tt, int row0, int nq, int dv,
                           __global OTYPE *O, int4 ol, int D1, int bb, __global float *lse,
                           int lse_off, int2 lse_s)
{
    #pragma unroll
    for (int r = 0; r < QR; r++) {
        if (row0 + r >= nq)
            break;
        float sum = hsum16(g->l[r]), inv = 1.0f / sum;
        if (lse) /* the sum without the weight factor: exact */
            lse[lse_off + (size_t)bb * lse_s.x + (size_t)g->row[r] * lse_s.y] =
                g->m[r] + log(sum / g->sh[r]);
        __global OTYPE *o = O + flash_at(ol, D1, bb, g->row[r]);
        #pragma unroll
        for (int c = 0; c < NVD; c++) {
            float16 x = tt->tot[r][c] * (float16)(inv);
            if (16 * c + 16 <= dv) {
                CLATTN_STORE16(OT, x, o + 16 * c);
            } else {
                float t[16];
                vstore16(x, 0, t);
                for (int i = 0; 16 * c + i < dv; i++)
                    CLATTN_STORE(OT, t[i], o + 16 * c + i);
            }
        }
    }
}

/* Q: float32 (flash_pack_q's copy of a 16-bit Q); kt: packed K; V rows (zero-padded to DVP
 * columns and to nblk * KB keys) with layout vl, packed by flash_pack_v or, when they need no
 * padding (and are float32), the caller's V itself; vt: flash_vscan's suffix sums
 * with BKS = KB, or NULL when no row can skip trailing keys (no lengths, causality or window
 * right side); vh: its prefix sums, or NULL when no window has a left side; all per K/V batch.
 * Each group takes key blocks from its own first block (the lowest of its rows' windows) on, then
 * the blocks below it (its lead blocks): those are blocked for every row of the group, and are
 * skipped outright (their zero-weight sums from vh) unless some row's maximum is still within
 * NEGLIGIBLE of the fill when they come (every key so far blocked, or a fill near the scores).
 * The item walks its blocks from its groups' lowest first block on, wraps around, and then takes
 * once more the blocks between that and its groups' highest first block, for the groups whose
 * lead blocks they are: so a group spends nothing on the blocks below its own window that lie
 * above another group's, and more groups per item (QG) cost a window no blocks.
 * Values within a factor nk of FLT_MAX can overflow the unnormalised outputs where the average
 * is finite: the item then computes the rows that ended with a sum or an output not finite once
 * more, their weights scaled by clattn_overflow_shift (common.cl), and the other rows bit for bit
 * as before. Rows that are not finite for another reason (a NaN or an infinity among the inputs)
 * are computed twice too: their non-finite outputs stay so, the finite ones change only where a
 * scaled weight falls below FLT_MIN (flushed here: 2^(J-126) of the row's largest). */
#if CLATTN_CPU_SHAPE
__kernel void flash_cpu(__global const float *Q, int4 ql, __global const float *kt,
                        __global const float *V, int4 vl, __global const float *vt,
                        int vt_off, __global const float *vh, int vh_off, __global OTYPE *O,
                        int4 ol, __global float *lse, int lse_off, int2 lse_s, int nq, int nk,
                        int d, int dv, int nblk, float scale, FLASH_MASK_PARAMS,
                        FLASH_DROP_PARAMS)
{
    int item = get_global_id(0), bb = get_global_id(1);
    if (item * QG * QR >= nq)
        return; /* padding of the global size: every row is past nq */
    int d0 = bb / D1, d1 = bb % D1, kb = d0 * (D1 / G) + d1 / G; /* kb: the K/V batch */
    const float negligible = fill + NEGLIGIBLE;
    const float slope = clattn_slope(slopes, slopes_off, ss, d0, d1);
    cpu_group grp[QG]; /* in memory; one group's scores and outputs at a time in registers */
    cpu_total tt[QG];
    float sh[QG][QR];  /* the rows' weight factors */
    for (int gi = 0; gi < QG; gi++)
        for (int r = 0; r < QR; r++)
            sh[gi][r] = 1.0f;
    #pragma unroll 1
    for (int pass = 0; pass < 2; pass++) {
        int first = nblk - 1, last_first = 0; /* the lowest and highest of the groups' firsts */
        int gfirst[QG];
        for (int gi = 0; gi < QG; gi++) {
            cpu_group_init(&grp[gi], &tt[gi], (item * QG + gi) * QR, nq, nk, d0, lens, lens_off,
                           lens_mode, win, sh[gi]);
            gfirst[gi] = min(grp[gi].min_lo / KB, nblk - 1);
            first = min(first, gfirst[gi]);
            last_first = max(last_first, gfirst[gi]);
        }
        for (int it = 0; it < nblk + last_first - first; it++) {
            /* from the first on, then the blocks below it, then the deferred ones again */
            int blk = it < nblk ? (it + first) % nblk : it - nblk + first;
            int kbase = blk * KB, any = 0;
            __global const float *ktb = kt + (size_t)(kb * nblk + blk) * d * KB;
            __global const float *vb = V + flash_at(vl, D1 / G, kb, kbase);
            /* every value row from this block on finite (its zero-weight sums are 0) */
            int vfinite = vt != 0;
            for (int c = 0; vfinite && c < NVD; c++)
                vfinite = all(vload16(c, vt + vt_off + (size_t)(kb * nblk + blk) * DVP) ==
                              (float16)(0.0f));
            #pragma unroll 1
            for (int gi = 0; gi < QG; gi++) {
                if ((item * QG + gi) * QR >= nq)
                    break; /* this and later groups lie past nq */
                cpu_group *g = &grp[gi];
                if (g->done)
                    continue;
                /* lead: blocked for every row of the group. Its turn for the block: its own
                 * blocks in the first sweep, its lead blocks after the wrap (the ones above the
                 * item's first in the last sweep), so that it meets them in order */
                int lead = blk < gfirst[gi];
                if (it < nblk && lead && blk >= first) {
                    /* deferred to the last sweep (some other group computes this block as long
                     * as the groups' first blocks run without gaps, as consecutive rows' do; the
                     * walk must not end here if they ever did not) */
                    any = 1;
                    continue;
                }
                if (it >= nblk && !lead)
                    continue;
                int all_negligible = 1;
                #pragma unroll
                for (int r = 0; r < QR; r++)
                    all_negligible &= g->m[r] > negligible;
                if (all_negligible && (lead || kbase >= g->max_limit)) {
                    /* every key left for this group is blocked and weighs exactly 0: from this
                     * block to the end unless it is a lead block, and the lead blocks (all of
                     * them: a row that was not negligible when they began stays so through
                     * blocked keys) */
                    cpu_skip_rest(g, vt ? vt + vt_off : 0, vh ? vh + vh_off : 0, (size_t)kb * nblk,
                                  lead ? -1 : blk, gfirst[gi]);
                    continue;
                }
                any = 1;
                __global const float *qr[QR];
                #pragma unroll
                for (int r = 0; r < QR; r++)
                    qr[r] = Q + flash_at(ql, D1, bb, g->row[r]);
                /* pb: read back one key at a time in P V */
                float16 s[QR][NKV], pb[QR][NKV], ps[QR];
                float cd[16];
                /* the parts of the block with keys open for some row */
                int jlo = clamp(g->min_lo - kbase, 0, KB) / 16;
                int jhi = (clamp(g->max_limit - kbase, 0, KB) + 15) / 16;
                cpu_scores(s, qr, ktb, d, scale, jlo, jhi);
                cpu_addends(s, g, kbase, nq, nk, d0, d1, bias, bias_off, bs, slopes, slope);
                if (mask || kbase + KB > g->min_limit || kbase < g->max_lo) /* blocked or padding */
                    cpu_mask(s, g, kbase, nk, d0, d1, mask, mask_off, ms, fill);
                int zero_blocked, grew = cpu_probs(s, g->m, pb, ps, cd, negligible, &zero_blocked);
                if (g->shifted)
                    cpu_shift(pb, ps, g->sh);
                if (drop) {
                    for (int r = 0; r < QR; r++)
                        for (int j = 0; j < NKV; j++)
                            pb[r][j] = drop16(pb[r][j], ((ulong)bb * nq + g->row[r]) * nk + kbase +
                                              16 * j, seed, offset, threshold, dscale);
                }
                cpu_sums(g->l, g->lc, ps, cd, grew);
                /* P V over the keys some row of the group sees, when the others (below every row's
                 * window, past every row's limit) weigh exactly 0 and their value rows are finite:
                 * then their products are all 0 and skipping them changes nothing. The window's
                 * edge blocks and the causal diagonal's: 1.02-1.05x on a window of 512
                 * (BENCHMARKS.md). */
                int klo = 0, khi = KB;
                if (zero_blocked && vfinite) {
                    klo = clamp(g->min_lo - kbase, 0, KB);
                    khi = clamp(g->max_limit - kbase, klo, KB);
                }
                cpu_pv(g->acc, pb, cd, vb, vl.w, klo, khi);
                for (int r = 0; r < QR; r++)
                    g->cdp[r] *= cd[r];
                if (++g->pending == FLUSH)
                    cpu_flush(g, &tt[gi]);
            }
            if (!any)
                break;
        }
        for (int gi = 0; gi < QG; gi++)
            cpu_flush(&grp[gi], &tt[gi]);
        if (pass || !cpu_mark_overflow(grp, tt, sh, clattn_overflow_shift(nk, drop ? dscale : 1.0f),
                                       item * QG * QR, nq))
            break;
    }
    for (int gi = 0; gi < QG; gi++)
        cpu_store(&grp[gi], &tt[gi], (item * QG + gi) * QR, nq, dv, O, ol, D1, bb, lse, lse_off,
                  lse_s);
}
#endif

/* ---- GPU shape: flash_gpu and its steps ---- */

#ifdef cl_nv_pragma_unroll
#define GPU_UNROLL _Pragma("unroll")
#else
#define GPU_UNROLL
#endif

/* What a row adds to and blocks among its scores: open keys [lo, limit), the mask row (NULL:
 * none, key stride msk), the bias row (NULL: none, key stride bsk), ALiBi's slope (when alibi)
 * and the row's distance to the bottom-right diagonal, diag = row + nk - nq. */
typedef struct {
    __global const int *mrow;
    __global const float *brow;
    int lo, limit, msk, bsk, alibi, diag;
    float slope, fill;
} gpu_keys;

/* The row's query, zero past d. Private rows (q here, the outputs acc) are indexed by constants
 * only (loops to DP and DVP), so that a GPU keeps them in registers; unrolled where NVIDIA's
 * compiler announces the pragma (PoCL gains nothing and took 2.5x longer to build the kernel
 * with it). */
static inline void gpu_load_q(float4 *q, __global const QTYPE *qrow, int d)
{
    GPU_UNROLL
    for (int e = 0; e < DP; e++)
        ((float *)q)[e] = e < d ? CLATTN_LOAD(QT, qrow + e) : 0.0f;
}

/* The online softmax's state (sum l, outputs acc, their compensations lc and comp): empty, or
 * (resume) as the launch before left it (see flash_gpu). *sh: the row's weight factor, `shift`
 * when the saved sum's sign says the launch before used it or when `redo` asks for it (the saved
 * state then scaled to it), else 1. */
static inline void gpu_resume(float4 *acc, float4 *comp, float *m, float *l, float *lc, float *sh,
                              float shift, int redo, int resume, __global const float *st,
                              __global const float *arow, __global const float *crow, int dv)
{
    int saved = resume && signbit(st[1]);
    float f = redo && !saved ? shift : 1.0f; /* the saved state's scale */
    *sh = redo || saved ? shift : 1.0f;
    *m = -INFINITY;
    *l = 0.0f;
    *lc = 0.0f;
    GPU_UNROLL
    for (int c = 0; c < DVP / 4; c++) {
        acc[c] = (float4)(0.0f);
        comp[c] = (float4)(0.0f);
    }
    if (resume) {
        *m = st[0];
        *l = fabs(st[1]) * f;
        *lc = st[3] * f;
        GPU_UNROLL
        for (int c = 0; c < DVP; c++) {
            if (c < dv) {
                ((float *)acc)[c] = arow[c] * f;
                ((float *)comp)[c] = crow[c] * f;
            }
        }
    }
}

/* The tile's BK keys from kbase into local memory, zero past nk, d and dv, the group's items
 * taking every BQ-th element (coalesced). kr, vr: the K/V batch's first rows. */
static inline void gpu_stage(__local float4 (*Ks)[DP / 4], __local float4 (*Vs)[DVP / 4],
                             __global const KTYPE *kr, int kstride, __global const VTYPE *vr,
                             int vstride, int kbase, int nk, int d, int dv, int t)
{
    for (int i = t; i < BK * DP; i += BQ) {
        int k = i / DP, e = i % DP;
        ((__local float *)Ks)[i] =
            (kbase + k < nk && e < d) ? CLATTN_LOAD(KT, kr + (size_t)(kbase + k) * kstride + e)
                                      : 0.0f;
    }
    for (int i = t; i < BK * DVP; i += BQ) {
        int k = i / DVP, c = i % DVP;
        ((__local float *)Vs)[i] =
            (kbase + k < nk && c < dv) ? CLATTN_LOAD(VT, vr + (size_t)(kbase + k) * vstride + c)
                                       : 0.0f;
    }
}

/* s = the row's scores of the tile's keys from kbase: scaled, plus bias and ALiBi, blocked keys
 * the fill and keys past nk -inf. Returns their maximum. */
static inline float gpu_scores(float *s, const float4 *q, __local float4 (*Ks)[DP / 4],
                               int kbase, int nk, float scale, gpu_keys r)
{
    float bm = -INFINITY;
    for (int k = 0; k < BK; k++) {
        float a = 0.0f;
        GPU_UNROLL
        for (int e = 0; e < DP / 4; e++) { /* the order of the scalar sum, unchanged */
            float4 kv = Ks[k][e];
            a = mad(q[e].x, kv.x, a);
            a = mad(q[e].y, kv.y, a);
            a = mad(q[e].z, kv.z, a);
            a = mad(q[e].w, kv.w, a);
        }
        int kk = kbase + k;
        a *= scale;
        if (r.brow && kk < nk)
            a += r.brow[r.bsk * kk];
        if (r.alibi)
            a += CLATTN_ALIBI(r.slope, (float)(r.diag - kk));
        a = clattn_masked(a, kk, r.lo, r.limit, r.mrow, r.msk, r.fill);
        s[k] = kk < nk ? a : -INFINITY;
        bm = fmax(bm, s[k]);
    }
    return bm;
}

/* The online softmax's step over the tile (scores s, their maximum bm, values Vs): the keys'
 * probabilities (times the weight factor sh; s becomes them) summed from 0 and, after dropout
 * (stream elements e0 + k), their value rows too; each sum compensated into m's rescaled l and
 * acc (lc, comp: clattn_kahan). */
static inline void gpu_step(float4 *acc, float4 *comp, float *m, float *l, float *lc, float *s,
                            float bm, float sh, __local float4 (*Vs)[DVP / 4], int drop, ulong e0,
                            uint2 seed, uint2 offset, uint threshold, float dscale)
{
    float mn = fmax(*m, bm), mz = mn == -INFINITY ? 0.0f : mn; /* see the top of the file */
    float corr = exp(*m - mz), ps = 0.0f;
    for (int k = 0; k < BK; k++) {
        float p = exp(s[k] - mz) * sh;
        ps += p;
        if (drop)
            p *= clattn_dropout_keep(e0 + k, seed, offset, threshold) ? dscale : 0.0f;
        s[k] = p;
    }
    clattn_kahan(l, lc, corr, ps);
    GPU_UNROLL
    for (int c = 0; c < DVP / 4; c++) {
        float4 t = (float4)(0.0f);
        for (int k = 0; k < BK; k++)
            t = mad((float4)(s[k]), Vs[k][c], t);
        clattn_kahan4(&acc[c], &comp[c], corr, t);
    }
    *m = mn;
}

/* A launch that ends before nk leaves the row's state for the next (see flash_gpu): the sum's
 * sign bit set when its weight factor sh is not 1. */
static inline void gpu_save(__global float *st, __global float *arow, __global float *crow,
                            float m, float l, float lc, float sh, int stop, const float4 *acc,
                            const float4 *comp, int dv)
{
    st[0] = m;
    st[1] = copysign(l, sh != 1.0f ? -1.0f : 1.0f);
    st[2] = as_float(stop);
    st[3] = lc;
    GPU_UNROLL
    for (int c = 0; c < DVP; c++) {
        if (c < dv) {
            arow[c] = ((const float *)acc)[c];
            crow[c] = ((const float *)comp)[c];
        }
    }
}

/* Whether the row's sum or an output is not finite. */
static inline int gpu_nonfinite(const float4 *acc, float l)
{
    int bad = clattn_nonfinite(l);
    GPU_UNROLL
    for (int c = 0; c < DVP; c++)
        bad |= clattn_nonfinite(((const float *)acc)[c]);
    return bad;
}

/* The row's outputs acc / l, plus the skipped keys' zero-weight sums z and zh (NULL: none). */
static inline void gpu_store(__global OTYPE *orow, const float4 *acc, float l,
                             __global const float *z, __global const float *zh, int dv)
{
    float inv = 1.0f / l;
    GPU_UNROLL
    for (int c = 0; c < DVP; c++) {
        if (c >= dv)
            break;
        float a = ((const float *)acc)[c];
        if (z)
            a += z[c];
        if (zh)
            a += zh[c];
        CLATTN_STORE(OT, a * inv, orow + c);
    }
}

/* Keys [k_lo, k_hi) of every row (k_lo a multiple of BK). A launch that does not start at key 0
 * resumes the rows where the launch before left them, and one that does not end at nk leaves
 * them for the next: the unnormalised outputs in O, and in part from part_off the rows' (max,
 * sum, the block where the group's vote stopped or -1, the sum's compensation), (nb, nq, 4)
 * floats, then the outputs' compensations, (nb, nq, dv) (a 16-bit O: then the outputs too, in
 * float32, (nb, nq, dv)). The host splits the keys so only on a device that bounds a work-item's
 * loop iterations (flash.c); one launch of all keys takes no part, and a split computes bit for
 * bit what one launch does (but for rows redone after an overflow that have weights, or outputs'
 * compensations, below 2^(J-126) of their largest: one launch scales those from the first key, a
 * split only from the launch that overflowed).
 * vt, vh: flash_vscan's suffix and prefix sums (BKS = BK) or NULL, as for flash_cpu. The tiles
 * are taken from the group's first (the lowest of its rows' windows) on, then the tiles below it,
 * skipped outright unless some row is not yet negligible (see flash_cpu); a split divides that
 * sequence, [k_lo, k_hi) counting tiles from the group's first. The stop is the tile where the
 * group's vote stopped in the first part (it skips the rest and the lead tiles), nblk where it
 * stopped at the lead tiles, or -1. */
#if CLATTN_GPU_SHAPE
__kernel __attribute__((reqd_work_group_size(BQ, 1, 1)))
void flash_gpu(__global const QTYPE *Q, int4 ql, __global const KTYPE *K, int4 kl,
               __global const VTYPE *V, int4 vl, __global const float *vt, int vt_off,
               __global const float *vh, int vh_off, int nblk, __global OTYPE *O, int4 ol,
               __global float *lse, int lse_off, int2 lse_s, int nq, int nk, int d, int dv,
               float scale, int k_lo, int k_hi, __global float *part, int part_off,
               FLASH_MASK_PARAMS, FLASH_DROP_PARAMS)
{
    /* float4 rows: every item reads the same key (a broadcast), 4 values per local load */
    __local float4 Ks[BK][DP / 4], Vs[BK][DVP / 4];
    __local int need, lo_min;
    __local int resumed_stop[1], overflow[1]; /* arrays: clang takes a __local scalar that one
                                    item writes for a private one and warns that the others read
                                    it unset */
    int t = get_local_id(0), bb = get_group_id(1);
    int row = get_group_id(0) * BQ + t, rowc = min(row, nq - 1);
    int d0 = bb / D1, d1 = bb % D1, kb = d0 * (D1 / G) + d1 / G; /* kb: the K/V batch */
    gpu_keys keys;
    keys.limit = clattn_row_limit(d0, rowc, nk, lens, lens_off, lens_mode, nq, win);
    keys.lo = clattn_row_lo(rowc, nk, win);
    keys.mrow = clattn_mask_row(mask, mask_off, ms, d0, d1, rowc);
    keys.msk = ms.w;
    keys.brow = clattn_bias_row(bias, bias_off, bs, d0, d1, rowc);
    keys.bsk = bs.w;
    keys.alibi = slopes != 0;
    keys.slope = clattn_slope(slopes, slopes_off, ss, d0, d1);
    keys.diag = (rowc - nq) + nk; /* (row - nq) first: row + nk can pass INT_MAX */
    keys.fill = fill;
    __global OTYPE *orow = O + flash_at(ol, D1, bb, rowc);
    size_t nrows = (size_t)get_num_groups(1) * nq, prow = (size_t)bb * nq + rowc;
    __global float *st = part ? part + part_off + prow * 4 : 0;
    __global float *crow = part ? part + part_off + nrows * 4 + prow * dv : 0;
#if OT == 0
    __global float *arow = orow; /* a split keeps the unnormalised outputs in O itself */
#else /* ... or, for a 16-bit O, in float32 after the compensations */
    __global float *arow = part ? crow + nrows * dv : 0;
#endif
    float4 q[DP / 4], acc[DVP / 4], comp[DVP / 4];
    float m, l, lc, sh, shift = clattn_overflow_shift(nk, drop ? dscale : 1.0f);
    gpu_load_q(q, Q + flash_at(ql, D1, bb, rowc), d);
    if (t == 0) {
        resumed_stop[0] = k_lo > 0 ? as_int(st[2]) : -1;
        overflow[0] = 0;
        lo_min = nk;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    /* the group's first tile; the barrier is unconditional: behind `if (vh)` (uniform, legal),
     * PoCL 6.0's loop-vectorizing work-group method replicated the whole tile loop once per
     * incoming barrier and took over 12 minutes to build the kernel */
    int first = 0, stop = -1, redo = 0;
    if (vh && row < nq)
        atomic_min(&lo_min, keys.lo);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (vh)
        first = min(lo_min / BK, nblk - 1);
    /* Rows whose sum or outputs overflowed (values within a factor nk of FLT_MAX) take the
     * launch's keys once more with their weights scaled by `shift` (see flash_cpu); the rows of
     * a group go round together, as its barriers need. */
    for (int pass = 0; pass < 2; pass++) {
        /* Each row resumes its own state only: padding items (row >= nq) vote in nothing and
         * store nothing, and the stop, the same for every row of the group, comes from item 0's
         * row (a real one) through local memory, so no item reads what another writes in this
         * launch. */
        gpu_resume(acc, comp, &m, &l, &lc, &sh, shift, redo, k_lo > 0 && row < nq, st, arow, crow,
                   dv);
        stop = resumed_stop[0];
        for (int it = k_lo / BK; stop < 0 && it * BK < k_hi; it++) {
            int tile = it + first < nblk ? it + first : it + first - nblk;
            int kbase = tile * BK, lead = tile < first; /* lead: blocked for every row */
            if (t == 0)
                need = 0;
            barrier(CLK_LOCAL_MEM_FENCE);
            if (row < nq && ((!lead && kbase < keys.limit) || !(m > fill + NEGLIGIBLE)))
                atomic_or(&need, 1);
            barrier(CLK_LOCAL_MEM_FENCE);
            if (!need) {
                /* uniform: every row's remaining keys are blocked and negligible (the lead
                 * tiles too: a row not negligible when they begin stays so through blocked
                 * keys) */
                stop = lead ? nblk : tile;
                break;
            }
            gpu_stage(Ks, Vs, K + flash_at(kl, D1 / G, kb, 0), kl.w,
                      V + flash_at(vl, D1 / G, kb, 0), vl.w, kbase, nk, d, dv, t);
            barrier(CLK_LOCAL_MEM_FENCE);
            float s[BK];
            float bm = gpu_scores(s, q, Ks, kbase, nk, scale, keys);
            gpu_step(acc, comp, &m, &l, &lc, s, bm, sh, Vs, drop,
                     ((ulong)bb * nq + rowc) * nk + kbase, seed, offset, threshold, dscale);
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        if (pass)
            break;
        redo = row < nq && sh == 1.0f && gpu_nonfinite(acc, l);
        if (redo)
            atomic_or(&overflow[0], 1);
        barrier(CLK_LOCAL_MEM_FENCE);
        if (!overflow[0])
            break;
    }
    if (row >= nq)
        return;
    if (k_hi < nk) {
        gpu_save(st, arow, crow, m, l, lc, sh, stop, acc, comp, dv);
        return;
    }
    if (lse)
        lse[lse_off + (size_t)bb * lse_s.x + (size_t)row * lse_s.y] = m + log(l / sh);
    __global const float *z =
        vt && stop >= 0 && stop < nblk ? vt + vt_off + ((size_t)kb * nblk + stop) * DVP : 0;
    __global const float *zh =
        vh && first > 0 && stop >= 0 ? vh + vh_off + ((size_t)kb * nblk + first - 1) * DVP : 0;
    gpu_store(orow, acc, l, z, zh, dv);
}
#endif
