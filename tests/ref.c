#include "ref.h"
#include <math.h>
#include <stdlib.h>

void ref_matmul(int batch, int M, int N, int K, const float *A, size_t a_bs, int ta, const float *B,
                size_t b_bs, int tb, double alpha, double beta, const float *C0, double *C,
                double *mag)
{
    for (int b = 0; b < batch; b++)
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double s = 0, m = 0;
                for (int k = 0; k < K; k++) {
                    double a = ta ? A[b * a_bs + (size_t)k * M + i] : A[b * a_bs + (size_t)i * K + k];
                    double v = tb ? B[b * b_bs + (size_t)j * K + k] : B[b * b_bs + (size_t)k * N + j];
                    s += a * v;
                    m += fabs(a * v);
                }
                size_t o = ((size_t)b * M + i) * N + j;
                C[o] = alpha * s + (beta != 0 ? beta * C0[o] : 0.0);
                if (mag)
                    mag[o] = fabs(alpha) * m + fabs(beta * (beta != 0 ? C0[o] : 0.0));
            }
}

int ref_blocked(const ref_mask *m, int d0, int d1, int q, int k)
{
    if (m->lens) {
        int len = m->lens_mode == 1 ? m->lens[d0] : m->lens[d0 * m->Q + q];
        if (k >= len)
            return 1;
    }
    if (m->causal && k > q)
        return 1;
    if (m->mask && m->mask[m->ms[0] * d0 + m->ms[1] * d1 + m->ms[2] * q + m->ms[3] * k] == 0)
        return 1;
    return 0;
}

void ref_masked_softmax(const ref_mask *m, const float *x, double *out)
{
    double *v = malloc(sizeof(double) * (size_t)m->K);
    for (int d0 = 0; d0 < m->D0; d0++)
        for (int d1 = 0; d1 < m->D1; d1++)
            for (int q = 0; q < m->Q; q++) {
                size_t row = (((size_t)d0 * m->D1 + d1) * m->Q + q) * (size_t)m->K;
                double mx = -INFINITY, sum = 0;
                for (int k = 0; k < m->K; k++) {
                    v[k] = ref_blocked(m, d0, d1, q, k) ? m->fill : x[row + k];
                    mx = fmax(mx, v[k]);
                }
                for (int k = 0; k < m->K; k++)
                    sum += (v[k] = exp(v[k] - mx));
                for (int k = 0; k < m->K; k++)
                    out[row + k] = v[k] / sum;
            }
    free(v);
}
