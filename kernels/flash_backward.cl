/* clattn fused attention backward (FlashAttention-2's algorithm, CPU shape): the gradients of
 * out = dropout(softmax(mask(Q K^T * scale + bias))) V with respect to Q, K and V, from dout, the
 * forward's out and its row log-sum-exps (lse), never materialising a (Q, K) tensor:
 *   P = exp(S - lse) recomputed per tile;  dV += dropout(P)^T dout;
 *   dP = dropout'(dout V^T);  dS = P * (dP - D) * scale, D = rowsum(dout * out);
 *   dQ += dS K;  dK += dS^T Q.
 * dS is exactly 0 where the mask blocks a key (masked_fill passes no gradient), as in the unfused
 * chain (softmax.cl's backward).
 *
 * Layout: float32 throughout. Q, dout, out, dQ: the mask's D0 x D1 batches of (nq, d or dv)
 * rows; K, V, dK, dV: D0 x (D1 / G) batches of (nk, d or dv) rows (grouped-query attention: query
 * batch (d0, d1) reads K/V batch kb = d0 (D1 / G) + d1 / G). Each operand's int4 layout l puts
 * row `row` of batch bb at element l.x + d0 l.y + d1 l.z + row l.w (see flash.cl), rows unit
 * stride. lse, D and the row flags: (nb, nq) contiguous. The mask arguments are flash.cl's
 * (common.cl describes them); dropout element (bb, q, k) is stream index (bb nq + q) nk + k.
 *
 * Work: one work-item per (chunk of key blocks, K/V batch). It owns the dK and dV rows of its
 * blocks, so they are written without atomics, and walks, per block of KB keys, every query row
 * of the G query heads sharing its K/V head, QR rows at a time. dQ sums over every key block:
 * with one chunk per K/V batch the item owns its rows of dQ too; with several, each chunk writes
 * its own partial dQ and flash_bwd_reduce adds them in chunk order. Sums run in a fixed order, so
 * repeated runs give the same bits.
 *
 * Skipping: a tile (QR rows x one block) whose keys are all blocked for every row by lengths,
 * causality or the window (not by the mask tensor) contributes exactly 0 when every row's
 * probability there is 0 (lse > fill + NEGLIGIBLE) and no operand it would multiply by that 0
 * holds a NaN or an infinity (the rows' Q and dout, the block's K): then it is skipped, which is
 * where causal and windowed attention save their work. Otherwise it is computed like any other,
 * so NaN and infinity spread exactly as through the unfused chain's products (a row with a NaN
 * or an infinity in Q or dout takes D as the chain sums it, flash_bwd_rows). */
#include "common.cl"

#ifndef QR
#define QR 6
#endif
#ifndef KB
#define KB 64
#endif
#ifndef VC
#define VC 64
#endif
#if KB % 16 != 0 || VC % 16 != 0 || VC < 16
#error "KB and VC must be multiples of 16"
#endif
#define NKV (KB / 16)
#define NVC (VC / 16) /* 16-column vectors per pass over a row */
/* computed tiles of QR rows a block's dK and dV sums take before bwd_flush adds them into the
 * block's totals */
#define FLUSH 16
#include "tile16.cl" /* after QR, KB, NKV and NVC: its register tiles */

#define FLASH_MASK_PARAMS                                                                        \
    int D1, int G, __global const int *lens, int lens_off, int lens_mode,                       \
        __global const int *mask, int mask_off, int4 ms, int4 win, float fill,                  \
        __global const float *bias, int bias_off, int4 bs, __global const float *slopes,          \
        int slopes_off, int2 ss
#define FLASH_DROP_PARAMS int drop, uint2 seed, uint2 offset, uint threshold, float dscale

/* element (row, 0) of batch bb in an operand with layout l */
static inline size_t bwd_at(int4 l, int D1, int bb, int row)
{
    return (size_t)l.x + (size_t)(bb / D1) * (size_t)l.y + (size_t)(bb % D1) * (size_t)l.z +
           (size_t)row * (size_t)l.w;
}

/* 16 floats of a row from column c0, zero past n */
static inline float16 bwd_load(__global const float *row, int c0, int n)
{
    if (c0 + 16 <= n)
        return vload16(0, row + c0);
    float t[16];
    for (int i = 0; i < 16; i++)
        t[i] = c0 + i < n ? row[c0 + i] : 0.0f;
    return vload16(0, t);
}

/* stores the lanes of v below n - c0 at row + c0 */
static inline void bwd_store(float16 v, __global float *row, int c0, int n)
{
    if (c0 + 16 <= n) {
        vstore16(v, 0, row + c0);
        return;
    }
    float t[16];
    vstore16(v, 0, t);
    for (int i = 0; c0 + i < n; i++)
        row[c0 + i] = t[i];
}

/* pk[kb][blk]: the block's K as a (d, KB) panel, its V as a (dv, KB) panel, then its K as (KB,
 * dp) rows (dp: d rounded up to VC), zero for keys >= nk and columns >= d; kbad[kb][k]: 1 when
 * K's row k holds a NaN or an infinity. One work-item per key. */
__kernel void flash_bwd_pack(__global const float *K, int4 kl, __global const float *V, int4 vl,
                             int D1kv, int nk, int d, int dv, int dp, int nblk,
                             __global float *pk, __global int *kbad, int kbad_off)
{
    int k = get_global_id(0), kb = get_global_id(1);
    __global float *dst = pk + (size_t)(kb * nblk + k / KB) * (d + dv + dp) * KB + k % KB;
    __global float *row = dst - k % KB + (size_t)(d + dv) * KB + (size_t)(k % KB) * dp;
    __global const float *ks = K + bwd_at(kl, D1kv, kb, min(k, nk - 1));
    __global const float *vs = V + bwd_at(vl, D1kv, kb, min(k, nk - 1));
    int bad = 0;
    for (int e = 0; e < dp; e++) {
        float x = k < nk && e < d ? ks[e] : 0.0f;
        bad |= clattn_nonfinite(x);
        row[e] = x;
        if (e < d)
            dst[e * KB] = x;
    }
    for (int c = 0; c < dv; c++)
        dst[(d + c) * KB] = k < nk ? vs[c] : 0.0f;
    kbad[kbad_off + (size_t)kb * nblk * KB + k] = bad;
}

/* The score of open key k of a row (qr) as bwd_probs computes it: tile_panel's sum order, the
 * scale, the bias row's (brow, key stride bsk), ALiBi's at distance dist from the diagonal. */
static inline float bwd_score(__global const float *qr, __global const float *kr, int d,
                              float scale, __global const float *brow, int bsk, int k, int alibi,
                              float slope, int dist)
{
    float t = 0.0f;
    for (int e = 0; e < d; e++)
        t = fma(qr[e], kr[e], t);
    float s = t * scale;
    if (brow)
        s += brow[bsk * k];
    if (alibi)
        s += CLATTN_ALIBI(slope, (float)(dist));
    return s;
}

/* Per query row: D = dout . out, or for a row with a NaN or an infinity in Q or dout the chain's
 * sum over every key of P dP (rows[d_off + bb nq + q]), flags (an int at rows[bad_off +
 * bb nq + q]) and what its probabilities are recomputed from, P = exp((S - off) - ext) (rows at
 * off_off and ext_off): off = lse and ext = 0, or, where lse is too coarse (clattn_lse_coarse),
 * the row's own maximum score and the log of its sum, from one pass over its keys. Flags:
 * ROW_NONFINITE when the row of Q or of dout holds a NaN or an infinity, ROW_BLOCKED when the
 * mask blocks every key of the row. Such a row's weights are uniform (finite fill) and its lse
 * is fill + log(nk) rounded at the fill's magnitude (0.06 at d2l's -1e6): flash_bwd_cpu gives
 * them 1 / nk, as the softmax does. One work-item per row. */
#define ROW_NONFINITE 1
#define ROW_BLOCKED 2
__kernel void flash_bwd_rows(__global const float *Q, int4 ql, __global const float *dO, int4 dol,
                             __global const float *O, int4 ol, __global const float *K, int4 kl,
                             __global const float *V, int4 vl,
                             __global const float *lse, int lse_off, int nq, int nk, int d, int dv,
                             __global float *rows, int d_off, int bad_off, int off_off,
                             int ext_off, float scale, FLASH_MASK_PARAMS, FLASH_DROP_PARAMS)
{
    int q = get_global_id(0), bb = get_global_id(1), d0 = bb / D1, d1 = bb % D1;
    int limit = clattn_row_limit(d0, q, nk, lens, lens_off, lens_mode, nq, win);
    int lo = clattn_row_lo(q, nk, win), open = 0;
    __global const int *mrow = clattn_mask_row(mask, mask_off, ms, d0, d1, q);
    for (int k = lo; k < limit && !open; k++)
        open = clattn_open(k, lo, limit, mrow, ms.w);
    __global const float *qr = Q + bwd_at(ql, D1, bb, q);
    __global const float *gr = dO + bwd_at(dol, D1, bb, q);
    __global const float *orow = O + bwd_at(ol, D1, bb, q);
    float s = 0.0f;
    int bad = 0;
    for (int c = 0; c < dv; c++) {
        s = fma(gr[c], orow[c], s);
        bad |= clattn_nonfinite(gr[c]);
    }
    for (int e = 0; e < d; e++)
        bad |= clattn_nonfinite(qr[e]);
    size_t i = (size_t)bb * nq + q;
    ((__global int *)rows)[bad_off + i] = (bad ? ROW_NONFINITE : 0) | (open ? 0 : ROW_BLOCKED);
    float lz = lse[lse_off + i], m = lz, l = 1.0f;
    int kb = d0 * (D1 / G) + d1 / G, diag = (q - nq) + nk; /* no int overflow */
    __global const float *brow = clattn_bias_row(bias, bias_off, bs, d0, d1, q);
    float slope = clattn_slope(slopes, slopes_off, ss, d0, d1);
/* key k's masked score, as bwd_probs computes it */
#define ROW_SCORE(k)                                                                             \
    (clattn_open(k, lo, limit, mrow, ms.w)                                                       \
         ? bwd_score(qr, K + bwd_at(kl, D1 / G, kb, k), d, scale, brow, bs.w, k, slopes != 0,   \
                     slope, diag - (k))                                                          \
         : fill)
    if (clattn_lse_coarse(lz) && open) {
        m = -INFINITY;
        l = 0.0f;
        for (int pass = 0; pass < 2; pass++) /* the maximum, then the sum */
            for (int k = 0; k < nk; k++) {
                float sk = ROW_SCORE(k);
                if (pass == 0)
                    m = fmax(m, sk);
                else
                    l += clattn_exp_neg(sk - m);
            }
    }
    float ext = log(l); /* 0 for l = 1 */
    rows[off_off + i] = m;
    rows[ext_off + i] = ext;
    /* A row with a NaN or an infinity in Q or dout: D as the chain sums it, over every key of
     * P dP (its non-finite terms decide NaN against +-inf: infinities of both signs, 0 x inf at a
     * blocked key), each P as bwd_probs computes it. */
    if (bad) {
        s = 0.0f;
        for (int k = 0; k < nk; k++) {
            float p = !open && fill != -INFINITY ? 1.0f / nk
                                                 : clattn_exp_neg((ROW_SCORE(k) - m) - ext);
            __global const float *vr = V + bwd_at(vl, D1 / G, kb, k);
            float dp = 0.0f;
            for (int c = 0; c < dv; c++)
                dp = fma(gr[c], vr[c], dp);
            if (drop)
                dp *= clattn_dropout_keep(((ulong)bb * nq + q) * nk + k, seed, offset, threshold)
                          ? dscale
                          : 0.0f;
            s = fma(p, dp, s);
        }
    }
#undef ROW_SCORE
    rows[d_off + i] = s;
}

/* dQ row (bb, q) = the sum over chunks c of part[c][bb][q] ((nchunk, nb, nq, d) contiguous), in
 * chunk order. One work-item per row. */
__kernel void flash_bwd_reduce(__global const float *part, int part_off, int nchunk, int nb,
                               __global float *dQ, int4 dql, int D1, int nq, int d)
{
    int q = get_global_id(0), bb = get_global_id(1);
    __global float *dst = dQ + bwd_at(dql, D1, bb, q);
    size_t stride = (size_t)nb * nq * d;
    __global const float *src = part + part_off + ((size_t)bb * nq + q) * d;
    for (int e = 0; e < d; e++) {
        float s = src[e];
        for (int c = 1; c < nchunk; c++)
            s += src[c * stride + e];
        dst[e] = s;
    }
}

/* acc (kn rows dp apart, from column c0) += sum over rows r of w[r][k] x[r] for each key k < kn:
 * a rank-QR update with the rows' NVC vectors x in registers. acc + c0 and dp: multiples of 16
 * floats from a 64-byte boundary (float16's alignment). */
TILE_INLINE void bwd_rank_update(__global float *acc, int dp, int kn, int c0,
                                 float16 w[QR][NKV], float16 x[QR][NVC])
{
    for (int k = 0; k < kn; k++) {
        /* float16 pointers, not vstore16: PoCL 3.1 splits vstore16 into four 128-bit stores */
        __global float16 *dst = (__global float16 *)(acc + (size_t)k * dp + c0);
        float16 a[NVC];
        #pragma unroll
        for (int c = 0; c < NVC; c++)
            a[c] = dst[c];
        #pragma unroll
        for (int r = 0; r < QR; r++) {
            float16 wv = (float16)(((const float *)w[r])[k]);
            #pragma unroll
            for (int c = 0; c < NVC; c++)
                a[c] = fma(wv, x[r][c], a[c]);
        }
        #pragma unroll
        for (int c = 0; c < NVC; c++)
            dst[c] = a[c];
    }
}

/* x[r] = the NVC vectors from column c0 of the QR rows (zero past n and in rows r >= nr) */
TILE_INLINE void bwd_rows(float16 x[QR][NVC], __global const float *rp[QR], int nr, int c0,
                          int n)
{
    #pragma unroll
    for (int r = 0; r < QR; r++)
        #pragma unroll
        for (int c = 0; c < NVC; c++)
            x[r][c] = r < nr ? bwd_load(rp[r], c0 + 16 * c, n) : (float16)(0.0f);
}

/* A tile's QR query rows of batch bb from i0 (nr of them below nq; the rows past nq repeat the
 * last, with weight 0): each row's open keys [lo, limit), log-sum-exp, D and flags. */
typedef struct {
    int row[QR], limit[QR], lo[QR], flags[QR], nr;
    float lse[QR], dsum[QR], off[QR], ext[QR]; /* P = exp((S - off) - ext): flash_bwd_rows */
} bwd_tile;

/* Fills t. Returns 1 when the tile adds exactly 0 for the block of keys [kbase, kbase + kn) and
 * is skipped (see the top of the file; kfinite: the block's K rows are finite). */
TILE_INLINE int bwd_tile_init(bwd_tile *t, int bb, int i0, int nq, int nk, int d0, int kbase,
                              int kn, int kfinite, float negligible, __global const float *lse,
                              __global const float *rows, __global const int *bad_rows,
                              __global const float *offs, __global const float *exts,
                              __global const int *lens, int lens_off, int lens_mode, int4 win)
{
    int skip = kfinite;
    t->nr = min(QR, nq - i0);
    #pragma unroll
    for (int r = 0; r < QR; r++) {
        int q = i0 + min(r, t->nr - 1);
        size_t i = (size_t)bb * nq + q;
        t->row[r] = q;
        t->limit[r] = clattn_row_limit(d0, q, nk, lens, lens_off, lens_mode, nq, win);
        t->lo[r] = clattn_row_lo(q, nk, win);
        t->lse[r] = lse[i];
        t->off[r] = offs[i];
        t->ext[r] = exts[i];
        t->dsum[r] = rows[i];
        t->flags[r] = bad_rows[i];
        skip &= !(t->flags[r] & ROW_NONFINITE) &&
                (kbase >= t->limit[r] || kbase + kn <= t->lo[r]) && t->lse[r] > negligible;
    }
    return skip;
}

/* P = exp(S - lse) for the tile's rows and the block's keys from kbase, S masked as the forward
 * (scale, bias, ALiBi, fill): p holds Q K^T on entry; rows past nq get 0. */
TILE_INLINE void bwd_probs(float16 p[QR][NKV], const bwd_tile *t, int kbase, int nq, int nk,
                           int d0, int d1, float scale, __global const float *bias, int bias_off,
                           int4 bs, __global const float *slopes, float slope,
                           __global const int *mask, int mask_off, int4 ms, float fill)
{
    #pragma unroll
    for (int r = 0; r < QR; r++) {
        __global const float *brow = clattn_bias_row(bias, bias_off, bs, d0, d1, t->row[r]);
        __global const int *mrow = clattn_mask_row(mask, mask_off, ms, d0, d1, t->row[r]);
        #pragma unroll
        for (int j = 0; j < NKV; j++) {
            int kidx = kbase + 16 * j;
            float16 s = p[r][j] * (float16)(scale);
            if (bias)
                s += bias16(brow, kidx, nk, bs.w);
            if (slopes)
                s += CLATTN_ALIBI(slope, convert_float16((int16)((t->row[r] - nq) + (nk - kidx)) -
                                                         LANES16));
            s = mask16(s, kidx, nk, t->lo[r], t->limit[r], mrow, ms.w, fill);
            s = exp2_neg16(((s - (float16)(t->off[r])) - (float16)(t->ext[r])) *
                           (float16)(M_LOG2E_F));
            if ((t->flags[r] & ROW_BLOCKED) && fill != -INFINITY) /* see flash_bwd_rows */
                s = select((float16)(0.0f), (float16)(1.0f / nk),
                           (int16)(kidx) + LANES16 < (int16)(nk));
            p[r][j] = r < t->nr ? s : (float16)(0.0f);
        }
    }
}

/* dS = P (dropout'(dP) - D) scale for the tile's rows and the block's keys from kbase, 0 where
 * the mask blocks a key and in rows past nq: ds holds dP = dout V^T on entry. */
TILE_INLINE void bwd_dscores(float16 ds[QR][NKV], float16 p[QR][NKV], const bwd_tile *t, int bb,
                             int kbase, int nq, int nk, int d0, int d1, float scale,
                             __global const int *mask, int mask_off, int4 ms, FLASH_DROP_PARAMS)
{
    #pragma unroll
    for (int r = 0; r < QR; r++) {
        __global const int *mrow = clattn_mask_row(mask, mask_off, ms, d0, d1, t->row[r]);
        #pragma unroll
        for (int j = 0; j < NKV; j++) {
            int kidx = kbase + 16 * j;
            float16 y = ds[r][j];
            if (drop)
                y = drop16(y, ((ulong)bb * nq + t->row[r]) * nk + kidx, seed, offset, threshold,
                           dscale);
            y = p[r][j] * (y - (float16)(t->dsum[r])) * (float16)(scale);
            int16 ok = open16(kidx, nk, t->lo[r], t->limit[r], mrow, ms.w);
            ds[r][j] = select((float16)(0.0f), y, ok & (int16)(r < t->nr ? -1 : 0));
        }
    }
}

/* The tile's dQ rows (dq: layout dql) += dS K over the block's kn keys, from its padded K rows
 * (krows: (KB, dp)), VC columns at a time: the block's sums from 0, then added to the rows (one
 * rounding per block on the long sum over every key, not one per key). */
TILE_INLINE void bwd_dq(__global float *dq, int4 dql, int D1, int bb, const bwd_tile *t,
                        float16 ds[QR][NKV], __global const float *krows, int kn, int dp, int d)
{
    #pragma unroll 1
    for (int c0 = 0; c0 < dp; c0 += VC) {
        float16 a[QR][NVC];
        #pragma unroll
        for (int r = 0; r < QR; r++)
            #pragma unroll
            for (int c = 0; c < NVC; c++)
                a[r][c] = (float16)(0.0f);
        tile_rows_fma(a, ds, krows + c0, dp, 0, kn);
        #pragma unroll
        for (int r = 0; r < QR; r++) {
            if (r >= t->nr)
                break;
            __global float *row = dq + bwd_at(dql, D1, bb, t->row[r]);
            #pragma unroll
            for (int c = 0; c < NVC; c++)
                bwd_store(bwd_load(row, c0 + 16 * c, d) + a[r][c], row, c0 + 16 * c, d);
        }
    }
}

/* tot += acc for the kn rows of ap floats of a block's sums (both 64-byte aligned), with TwoSum:
 * acc keeps what the addition rounded off, so the next tiles' sums carry it into the next flush
 * (0 once tot is not finite: then it stays inf or NaN, as a plain sum would). Over many query
 * rows a sum kept tile by tile drifts (dV over 2^22 rows: 3.6e-4 off), each tile's terms falling
 * under the running total's rounding step; the tiles' sums between flushes start from about 0. */
static inline void bwd_flush(__global float *acc, __global float *tot, int kn, int ap)
{
    __global float16 *a16 = (__global float16 *)acc, *t16 = (__global float16 *)tot;
    for (int i = 0; i < kn * (ap / 16); i++) {
        float16 err;
        t16[i] = clattn_two_sum16(t16[i], a16[i], &err);
        a16[i] = err;
    }
}

/* The n floats of the kn rows of acc (stride ap) to the rows from kbase of batch kb of dst. */
static inline void bwd_copy_rows(__global float *dst, int4 l, int D1kv, int kb, int kbase,
                                 int kn, __global const float *acc, int ap, int n)
{
    for (int k = 0; k < kn; k++) {
        __global float *r = dst + bwd_at(l, D1kv, kb, kbase + k);
        for (int e = 0; e < n; e++)
            r[e] = acc[(size_t)k * ap + e];
    }
}

/* The gradients, one work-item per (chunk, K/V batch) (see the top of the file). pk, kbad:
 * flash_bwd_pack's; rows: flash_bwd_rows'; lse at lse_off + bb nq + q. acc: the item's dK and
 * dV rows of one block, (KB, dp) then (KB, dvp) floats at acc_off + item 2 (dp + dvp) KB (dp,
 * dvp: d and dv rounded up to VC; acc_off a multiple of 16): the sums of the tiles since the last
 * flush, then the same for the block's totals (bwd_flush), copied to dK and dV once the block is
 * done. dQ: layout dql, chunk
 * c's rows dq_cs elements after chunk c - 1's (the partials, or dQ itself for one chunk). want:
 * 1 dQ, 2 dK, 4 dV (the others' pointers are not used).
 * vec_type_hint: the item's work is already float16 vectors; without the hint Intel's CPU runtime
 * also vectorizes across work-items, which took 262 s to build the default variant there (8 s
 * with it, 2.9 MB of code against 0.27 MB) and ran no faster. */
__kernel __attribute__((vec_type_hint(float16)))
void flash_bwd_cpu(__global const float *Q, int4 ql, __global const float *pk,
                   __global const int *kbad, int kbad_off, __global const float *dO, int4 dol,
                   __global const float *lse, int lse_off, __global const float *rows, int d_off,
                   int bad_off, int off_off, int ext_off, __global float *acc, int acc_off,
                   __global float *dQ, int4 dql, int dq_cs, __global float *dK, int4 dkl,
                   __global float *dV, int4 dvl, int want, int nq, int nk, int d, int dv, int dp,
                   int dvp, int nblk, int nchunk,
                   float scale, FLASH_MASK_PARAMS, FLASH_DROP_PARAMS)
{
    int ch = get_global_id(0), kb = get_global_id(1);
    int D1kv = D1 / G, d0 = kb / D1kv, kvh = kb % D1kv;
    int b_lo = (int)((long)ch * nblk / nchunk), b_hi = (int)((long)(ch + 1) * nblk / nchunk);
    const float negligible = fill + NEGLIGIBLE;
    __global const int *bad_rows = (__global const int *)rows + bad_off;
    __global float *dq = dQ + (size_t)ch * dq_cs;
    __global float *ak =
        acc + acc_off + (size_t)(ch * get_global_size(1) + kb) * 2 * (dp + dvp) * KB;
    __global float *av = ak + (size_t)dp * KB, *tk = av + (size_t)dvp * KB;
    __global float *tv = tk + (size_t)dp * KB;
    for (int g = 0; g < G && (want & 1); g++) /* this chunk's dQ rows start at 0 */
        for (int q = 0; q < nq; q++) {
            __global float *r = dq + bwd_at(dql, D1, d0 * D1 + kvh * G + g, q);
            for (int e = 0; e < d; e++)
                r[e] = 0.0f;
        }
    for (int blk = b_lo; blk < b_hi; blk++) {
        int kbase = blk * KB, kn = min(KB, nk - kbase);
        __global const float *kt = pk + (size_t)(kb * nblk + blk) * (d + dv + dp) * KB;
        __global const float *vt = kt + (size_t)d * KB, *krows = vt + (size_t)dv * KB;
        int kfinite = 1;
        for (int k = 0; k < kn; k++)
            kfinite &= !kbad[kbad_off + (size_t)(kb * nblk + blk) * KB + k];
        for (int i = 0; i < (want & 2 ? dp : 0) * KB; i++) /* sums and totals start at 0 */
            ak[i] = tk[i] = 0.0f;
        for (int i = 0; i < (want & 4 ? dvp : 0) * KB; i++)
            av[i] = tv[i] = 0.0f;
        int pending = 0; /* tiles summed since the last flush */
        for (int g = 0; g < G; g++) {
            int d1 = kvh * G + g, bb = d0 * D1 + d1;
            float slope = clattn_slope(slopes, slopes_off, ss, d0, d1);
            #pragma unroll 1
            for (int i0 = 0; i0 < nq; i0 += QR) {
                bwd_tile t;
                if (bwd_tile_init(&t, bb, i0, nq, nk, d0, kbase, kn, kfinite, negligible,
                                  lse + lse_off, rows + d_off, bad_rows, rows + off_off,
                                  rows + ext_off, lens, lens_off, lens_mode, win))
                    continue;
                __global const float *qr[QR], *gr[QR];
                #pragma unroll
                for (int r = 0; r < QR; r++) {
                    qr[r] = Q + bwd_at(ql, D1, bb, t.row[r]);
                    gr[r] = dO + bwd_at(dol, D1, bb, t.row[r]);
                }
                float16 p[QR][NKV], ds[QR][NKV], x[QR][NVC];
                tile_panel(p, qr, kt, d);
                bwd_probs(p, &t, kbase, nq, nk, d0, d1, scale, bias, bias_off, bs, slopes, slope,
                          mask, mask_off, ms, fill);
                if (want & 3) {
                    tile_panel(ds, gr, vt, dv); /* dP = dout V^T */
                    bwd_dscores(ds, p, &t, bb, kbase, nq, nk, d0, d1, scale, mask, mask_off, ms,
                                drop, seed, offset, threshold, dscale);
                }
                if (drop) /* dV takes the probabilities after dropout */
                    for (int r = 0; r < QR; r++)
                        for (int j = 0; j < NKV; j++)
                            p[r][j] = drop16(p[r][j], ((ulong)bb * nq + t.row[r]) * nk + kbase +
                                             16 * j, seed, offset, threshold, dscale);
                /* dV rows += P^T dout, dK rows += dS^T Q */
                #pragma unroll 1
                for (int c0 = 0; c0 < dvp && (want & 4); c0 += VC) {
                    bwd_rows(x, gr, t.nr, c0, dv);
                    bwd_rank_update(av, dvp, kn, c0, p, x);
                }
                #pragma unroll 1
                for (int c0 = 0; c0 < dp && (want & 2); c0 += VC) {
                    bwd_rows(x, qr, t.nr, c0, d);
                    bwd_rank_update(ak, dp, kn, c0, ds, x);
                }
                if (want & 1)
                    bwd_dq(dq, dql, D1, bb, &t, ds, krows, kn, dp, d);
                if (++pending == FLUSH) {
                    bwd_flush(ak, tk, kn, (want & 2) ? dp : 0);
                    bwd_flush(av, tv, kn, (want & 4) ? dvp : 0);
                    pending = 0;
                }
            }
        }
        bwd_flush(ak, tk, kn, (want & 2) ? dp : 0);
        bwd_flush(av, tv, kn, (want & 4) ? dvp : 0);
        if (want & 2)
            bwd_copy_rows(dK, dkl, D1kv, kb, kbase, kn, tk, dp, d);
        if (want & 4)
            bwd_copy_rows(dV, dvl, D1kv, kb, kbase, kn, tv, dvp, dv);
    }
}
