/* clattn additive (Bahdanau) scores: scores[b, i, j] = sum_h wv[h] * tanh(qp[b, i, h] + kp[b, j, h]).
 *
 * Layout: qp (B, Q, H), kp (B, K, H), scores (B, Q, K), row-major float32 at element offsets; wv is
 * H floats. The d2l code broadcasts to a (B, Q, K, H) feature tensor; here each work-item owns one
 * score and streams both rows, so memory stays O(B*Q*K). VW-wide vectors over h, because PoCL does
 * not vectorize across work-items once the kernel has a loop. */

#ifndef VW
#define VW 8
#endif
#if VW == 8
#define floatV float8
#define vloadV vload8
#elif VW == 4
#define floatV float4
#define vloadV vload4
#else
#error "VW must be 4 or 8"
#endif

__kernel void additive_scores(__global const float *qp, int q_off, __global const float *kp,
                              int k_off, __global const float *wv, int wv_off,
                              __global float *scores, int s_off, int Q, int K, int H)
{
    int j = get_global_id(0), i = get_global_id(1), b = get_global_id(2);
    if (j >= K)
        return;
    __global const float *q = qp + q_off + (size_t)(b * Q + i) * H;
    __global const float *k = kp + k_off + (size_t)(b * K + j) * H;
    __global const float *w = wv + wv_off;
    floatV acc = (floatV)(0.0f);
    int h = 0;
    for (; h + VW <= H; h += VW)
        acc = mad(vloadV(0, w + h), tanh(vloadV(0, q + h) + vloadV(0, k + h)), acc);
    float s = 0.0f;
    for (; h < H; h++)
        s = mad(w[h], tanh(q[h] + k[h]), s);
#if VW == 8
    acc.lo += acc.hi;
#endif
    s += (acc.s0 + acc.s1) + (acc.s2 + acc.s3);
    scores[s_off + (size_t)(b * Q + i) * K + j] = s;
}
