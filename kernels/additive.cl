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
    for (; h + VW <= H; h += VW)
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
