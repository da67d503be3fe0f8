/* clattn additive (Bahdanau) scores: scores[b, i, j] = sum_h wv[h] * tanh(qp[b, i, h] + kp[b, j, h]).
 *
 * Layout: qp (B, Q, H), kp (B, K, H), scores (B, Q, K), row-major at element offsets; wv is H
 * values; their dtypes QT, KT, WT, ST (dtype.cl's codes: float32, float16 or bfloat16; float32
 * arithmetic, each score rounded once). The d2l code broadcasts to a (B, Q, K, H) feature tensor;
 * here each work-item owns one score and streams both rows, so memory stays O(B*Q*K). VW-wide
 * vectors over h, because PoCL does not vectorize across work-items once the kernel has a loop. */
#include "dtype.cl"

#ifndef QT
#define QT 0
#endif
#ifndef KT
#define KT 0
#endif
#ifndef WT
#define WT 0
#endif
#ifndef ST
#define ST 0
#endif

#ifndef VW
#define VW 8
#endif
#if VW == 8
#define floatV float8
#define LOADV(code, p) CLATTN_LOAD8(code, p)
#elif VW == 4
#define floatV float4
#define LOADV(code, p) CLATTN_LOAD4(code, p)
#else
#error "VW must be 4 or 8"
#endif

__kernel void additive_scores(__global const CLATTN_T(QT) *qp, int q_off,
                              __global const CLATTN_T(KT) *kp, int k_off,
                              __global const CLATTN_T(WT) *wv, int wv_off,
                              __global CLATTN_T(ST) *scores, int s_off, int Q, int K, int H)
{
    int j = get_global_id(0), i = get_global_id(1), b = get_global_id(2);
    if (j >= K)
        return;
    __global const CLATTN_T(QT) *q = qp + q_off + (size_t)(b * Q + i) * H;
    __global const CLATTN_T(KT) *k = kp + k_off + (size_t)(b * K + j) * H;
    __global const CLATTN_T(WT) *w = wv + wv_off;
    floatV acc = (floatV)(0.0f);
    int h = 0;
    for (; H - h >= VW; h += VW)
        acc = mad(LOADV(WT, w + h), tanh(LOADV(QT, q + h) + LOADV(KT, k + h)), acc);
    float s = 0.0f;
    for (; h < H; h++)
        s = mad(CLATTN_LOAD(WT, w + h), tanh(CLATTN_LOAD(QT, q + h) + CLATTN_LOAD(KT, k + h)), s);
#if VW == 8
    acc.lo += acc.hi;
#endif
    s += (acc.s0 + acc.s1) + (acc.s2 + acc.s3);
    CLATTN_STORE(ST, s, scores + s_off + (size_t)(b * Q + i) * K + j);
}

/* ---- backward ----
 * ds (B, Q, K) float32 at ds_off: the scores' gradient; qp, kp, wv float32 here. With t_ijh =
 * tanh(qp_ih + kp_jh) (computed as the forward does), a score's derivatives are w_h (1 - t^2) with
 * respect to qp_ih and kp_jh and t with respect to w_h:
 * additive_backward_q: dqp_ih = w_h sum_j ds_ij (1 - t_ijh^2), and row i's part of w's gradient,
 *   sum_j ds_ij t_ijh, at dwp[dw_off + (b Q + i) H + h] (the host sums the rows, in order);
 * additive_backward_k: dkp_jh = w_h sum_i ds_ij (1 - t_ijh^2).
 * One work-item per 8 hidden units of a row (a query row, or a key row), over the other side's
 * rows in order: the same bits on every run, and O(B Q K) memory, never the (B, Q, K, H)
 * features. */
#define BW 8 /* hidden units per work-item */

__kernel void additive_backward_q(__global const float *qp, int q_off, __global const float *kp,
                                  int k_off, __global const float *wv, int wv_off,
                                  __global const float *ds, int ds_off, __global float *dqp,
                                  int dq_off, __global float *dwp, int dw_off, int Q, int K,
                                  int H)
{
    int c = get_global_id(0) * BW, i = get_global_id(1), b = get_global_id(2);
    if (c >= H)
        return;
    int n = min(BW, H - c);
    size_t row = (size_t)b * Q + i;
    float q[BW], a[BW], aw[BW];
    for (int l = 0; l < BW; l++) {
        q[l] = l < n ? qp[q_off + row * H + c + l] : 0.0f;
        a[l] = aw[l] = 0.0f;
    }
    for (int j = 0; j < K; j++) {
        float d = ds[ds_off + row * K + j];
        __global const float *kr = kp + k_off + ((size_t)b * K + j) * H + c;
        for (int l = 0; l < BW; l++) {
            float t = tanh(q[l] + (l < n ? kr[l] : 0.0f));
            a[l] = mad(d, 1.0f - t * t, a[l]);
            aw[l] = mad(d, t, aw[l]);
        }
    }
    for (int l = 0; l < n; l++) {
        dqp[dq_off + row * H + c + l] = wv[wv_off + c + l] * a[l];
        dwp[dw_off + row * H + c + l] = aw[l];
    }
}

__kernel void additive_backward_k(__global const float *qp, int q_off, __global const float *kp,
                                  int k_off, __global const float *wv, int wv_off,
                                  __global const float *ds, int ds_off, __global float *dkp,
                                  int dk_off, int Q, int K, int H)
{
    int c = get_global_id(0) * BW, j = get_global_id(1), b = get_global_id(2);
    if (c >= H)
        return;
    int n = min(BW, H - c);
    size_t krow = (size_t)b * K + j;
    float k[BW], a[BW];
    for (int l = 0; l < BW; l++) {
        k[l] = l < n ? kp[k_off + krow * H + c + l] : 0.0f;
        a[l] = 0.0f;
    }
    for (int i = 0; i < Q; i++) {
        float d = ds[ds_off + ((size_t)b * Q + i) * K + j];
        __global const float *qr = qp + q_off + ((size_t)b * Q + i) * H + c;
        for (int l = 0; l < BW; l++) {
            float t = tanh((l < n ? qr[l] : 0.0f) + k[l]);
            a[l] = mad(d, 1.0f - t * t, a[l]);
        }
    }
    for (int l = 0; l < n; l++)
        dkp[dk_off + krow * H + c + l] = wv[wv_off + c + l] * a[l];
}
