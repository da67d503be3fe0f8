/* clattn masked softmax cross-entropy (d2l's MaskedSoftmaxCELoss) and its gradient.
 *
 * Layout: logits x (B, T, V) float32 row-major at x_off, one row per position r = b * T + t;
 * labels (B, T) int32 at lab_off; lens (B) int32 at lens_off, or NULL (every position weighs 1),
 * clamped to [0, T]; lse (B, T) float32 at lse_off, or NULL; the per-position values ce (B, T)
 * float32 (scratch); loss and dloss (B) float32; dx (B, T, V) float32 at dx_off (may be x: each
 * row is read before it is written).
 * Position r weighs w = 1 when t < lens[b], else 0, and its cross-entropy is ce = lse - x[label]
 * with lse = m + ls, ls = log(sum_v exp(x_v - m)), m the row's maximum (0 in its place when every
 * logit is -inf, so the sum is 0 and lse -inf, as PyTorch's log_softmax gives NaN for such a row:
 * ce = -inf - -inf), computed as (m - x[label]) + ls: m + ls rounds at |m|'s ulp (0.06 for
 * logits near 1e6), which would be ce's error; a label of IGNORE (PyTorch's ignore_index -100)
 * gives ce = 0 without reading the row's label; any other label outside [0, V) gives NaN.
 * loss[b] = sum_t w ce / T, the positions in order; w multiplies ce, so 0 * NaN stays NaN as in
 * d2l's code.
 * Gradient: dx_v = c (exp((x_v - m) - ls) - [v == label]), c = dloss[b] w / T, 0 at an ignored
 * label (NaN at a bad one); with the forward's lse given, (m, ls) = (lse, 0) unless it is too
 * coarse (common.cl's clattn_lse_coarse), where the row is read for its own m and ls.
 * Variants (softmax's tuning): *_rows (CPU shape: one work-item per row, VW-wide vectors, two
 * passes for the log-sum-exp while the row stays in L2) and *_wg (GPU shape: a work-group of WG
 * items per row, strided coalesced loads, tree reductions in local memory). */
#include "common.cl"

#ifndef VW
#define VW 16
#endif
#ifndef WG
#define WG 128
#endif
#if VW != 8 && VW != 16
#error "VW must be 8 or 16"
#endif
#if WG < 1 || (WG & (WG - 1)) != 0
#error "WG must be a power of two"
#endif
#define IGNORE (-100)

#if VW == 16
#define floatV float16
#define vloadV vload16
#define vstoreV vstore16
#define expnegV clattn_exp_neg16
#define LANES (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
#define intV int16
#else
#define floatV float8
#define vloadV vload8
#define vstoreV vstore8
#define expnegV clattn_exp_neg8
#define LANES (int8)(0, 1, 2, 3, 4, 5, 6, 7)
#define intV int8
#endif

/* fmax, not max (undefined on infinities): a NaN logit is passed over here and reaches lse
 * through the sum instead */
static inline float hmaxV(floatV v)
{
#if VW == 16
    float8 h = fmax(v.lo, (float8)(v.s8, v.s9, v.sa, v.sb, v.sc, v.sd, v.se, v.sf));
#else
    float8 h = v;
#endif
    return fmax(fmax(fmax(h.s0, h.s1), fmax(h.s2, h.s3)),
                fmax(fmax(h.s4, h.s5), fmax(h.s6, h.s7)));
}

static inline float hsumV(floatV v)
{
#if VW == 16
    /* the upper half by components: Oclgrind 21.10 takes lane 11 of .hi for undefined */
    float8 h = v.lo + (float8)(v.s8, v.s9, v.sa, v.sb, v.sc, v.sd, v.se, v.sf);
#else
    float8 h = v;
#endif
    return ((h.s0 + h.s1) + (h.s2 + h.s3)) + ((h.s4 + h.s5) + (h.s6 + h.s7));
}

/* The weight of position r: 1 when t < its sequence's clamped length (or without lengths). */
static inline float pos_weight(__global const int *lens, int lens_off, int r, int T)
{
    return !lens || r % T < clamp(lens[lens_off + r / T], 0, T) ? 1.0f : 0.0f;
}

/* ce from the row's (m, ls) and its label (see the top of the file). */
static inline float pos_ce(__global const float *xr, int label, int V, float2 ml)
{
    if (label == IGNORE)
        return 0.0f;
    return label >= 0 && label < V ? (ml.x - xr[label]) + ml.y : NAN;
}

/* (m, ls) of one row: its maximum in one pass, the log of its sum of exponentials in a second. */
static inline float2 row_ml(__global const float *xr, int V)
{
    int vv = V - V % VW, v;
    floatV mv = (floatV)(-INFINITY);
    float m = -INFINITY;
    for (v = 0; v < vv; v += VW)
        mv = fmax(mv, vloadV(0, xr + v));
    for (; v < V; v++)
        m = fmax(m, xr[v]);
    m = fmax(m, hmaxV(mv));
    m = m == -INFINITY ? 0.0f : m;
    floatV sv = (floatV)(0.0f);
    float s = 0.0f;
    for (v = 0; v < vv; v += VW)
        sv += expnegV(vloadV(0, xr + v) - (floatV)(m));
    for (; v < V; v++)
        s += clattn_exp_neg(xr[v] - m);
    return (float2)(m, log(s + hsumV(sv)));
}

/* Whether the gradient of row r takes (m, ls) = (lse, 0) from the forward's lse: given and not
 * too coarse. Otherwise the row is read for its own. */
static inline int lse_usable(__global const float *lse, int lse_off, int r)
{
    return lse && !clattn_lse_coarse(lse[lse_off + r]);
}

#if CLATTN_CPU_SHAPE
__kernel void ce_loss_rows(__global const float *x, int x_off, __global const int *labels,
                           int lab_off, __global const int *lens, int lens_off, int nrows, int T,
                           int V, __global float *lse, int lse_off, __global float *ce)
{
    int r = get_global_id(0);
    if (r >= nrows)
        return;
    __global const float *xr = x + x_off + (size_t)r * V;
    float2 ml = row_ml(xr, V);
    if (lse)
        lse[lse_off + r] = ml.x + ml.y;
    ce[r] = pos_weight(lens, lens_off, r, T) * pos_ce(xr, labels[lab_off + r], V, ml);
}
#endif

/* loss[b] = sum_t ce[b * T + t] / T, one work-item per sequence, t in order, compensated
 * (clattn_kahan: a plain float32 sum drifts over a long sequence). */
__kernel void ce_loss_mean(__global const float *ce, int B, int T, __global float *loss,
                           int loss_off)
{
    int b = get_global_id(0);
    if (b >= B)
        return;
    float s = 0.0f, c = 0.0f;
    for (int t = 0; t < T; t++)
        clattn_kahan(&s, &c, 1.0f, ce[(size_t)b * T + t]);
    loss[loss_off + b] = s / (float)T;
}

/* The gradient's factor c of position r (see the top of the file). */
static inline float pos_coef(__global const int *labels, int lab_off, __global const int *lens,
                             int lens_off, __global const float *dloss, int dloss_off, int r,
                             int T, int V)
{
    int label = labels[lab_off + r];
    if (label != IGNORE && (label < 0 || label >= V))
        return NAN;
    float c = dloss[dloss_off + r / T] * pos_weight(lens, lens_off, r, T) / (float)T;
    return label == IGNORE ? 0.0f * c : c;
}

#if CLATTN_CPU_SHAPE
__kernel void ce_loss_backward_rows(__global const float *x, int x_off,
                                    __global const int *labels, int lab_off,
                                    __global const int *lens, int lens_off, int nrows, int T,
                                    int V, __global const float *lse, int lse_off,
                                    __global const float *dloss, int dloss_off, __global float *dx,
                                    int dx_off)
{
    int r = get_global_id(0);
    if (r >= nrows)
        return;
    __global const float *xr = x + x_off + (size_t)r * V;
    __global float *dr = dx + dx_off + (size_t)r * V;
    float2 ml = lse_usable(lse, lse_off, r) ? (float2)(lse[lse_off + r], 0.0f) : row_ml(xr, V);
    float c = pos_coef(labels, lab_off, lens, lens_off, dloss, dloss_off, r, T, V);
    int label = labels[lab_off + r], vv = V - V % VW, v;
    for (v = 0; v < vv; v += VW) {
        floatV p = expnegV((vloadV(0, xr + v) - (floatV)(ml.x)) - (floatV)(ml.y));
        p -= select((floatV)(0.0f), (floatV)(1.0f), (intV)(v) + LANES == (intV)(label));
        vstoreV((floatV)(c) * p, 0, dr + v);
    }
    for (; v < V; v++)
        dr[v] = c * (clattn_exp_neg((xr[v] - ml.x) - ml.y) - (v == label ? 1.0f : 0.0f));
}
#endif

/* ---- GPU shape ---- */

/* The group's reduction of each item's value (op: 0 max, 1 sum), then a barrier, so that red
 * may be reused. */
static inline float group_reduce(__local float *red, int t, float x, int op)
{
    red[t] = x;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int w = WG / 2; w > 0; w >>= 1) {
        if (t < w)
            red[t] = op ? red[t] + red[t + w] : fmax(red[t], red[t + w]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float r = red[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

static inline float2 row_ml_wg(__local float *red, int t, __global const float *xr, int V)
{
    float m = -INFINITY;
    for (int v = t; v < V; v += WG)
        m = fmax(m, xr[v]);
    m = group_reduce(red, t, m, 0);
    m = m == -INFINITY ? 0.0f : m;
    float s = 0.0f;
    for (int v = t; v < V; v += WG)
        s += clattn_exp_neg(xr[v] - m);
    return (float2)(m, log(group_reduce(red, t, s, 1)));
}

#if CLATTN_GPU_SHAPE
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void ce_loss_wg(__global const float *x, int x_off, __global const int *labels, int lab_off,
                __global const int *lens, int lens_off, int nrows, int T, int V,
                __global float *lse, int lse_off, __global float *ce)
{
    __local float red[WG];
    int r = get_group_id(0), t = get_local_id(0);
    __global const float *xr = x + x_off + (size_t)r * V;
    float2 ml = row_ml_wg(red, t, xr, V);
    if (t == 0) {
        if (lse)
            lse[lse_off + r] = ml.x + ml.y;
        ce[r] = pos_weight(lens, lens_off, r, T) * pos_ce(xr, labels[lab_off + r], V, ml);
    }
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void ce_loss_backward_wg(__global const float *x, int x_off, __global const int *labels,
                         int lab_off, __global const int *lens, int lens_off, int nrows, int T,
                         int V, __global const float *lse, int lse_off,
                         __global const float *dloss, int dloss_off, __global float *dx,
                         int dx_off)
{
    __local float red[WG];
    int r = get_group_id(0), t = get_local_id(0);
    __global const float *xr = x + x_off + (size_t)r * V;
    __global float *dr = dx + dx_off + (size_t)r * V;
    /* the same for every item of the group: no divergent barrier in row_ml_wg */
    float2 ml = lse_usable(lse, lse_off, r) ? (float2)(lse[lse_off + r], 0.0f)
                                            : row_ml_wg(red, t, xr, V);
    float c = pos_coef(labels, lab_off, lens, lens_off, dloss, dloss_off, r, T, V);
    int label = labels[lab_off + r];
    for (int v = t; v < V; v += WG)
        dr[v] = c * (clattn_exp_neg((xr[v] - ml.x) - ml.y) - (v == label ? 1.0f : 0.0f));
}
#endif
