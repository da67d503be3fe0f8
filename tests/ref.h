/* Double-precision CPU references of every op, written from the PyTorch semantics (DESIGN.md). */
#ifndef CLATTN_TEST_REF_H
#define CLATTN_TEST_REF_H
#include <stddef.h>

/* C[b] = alpha op(A[b]) op(B[b]) + beta C[b]; A, B with batch strides a_bs, b_bs (0 = shared),
 * stored row-major as (.., M, K) or (.., K, M) when ta. mag[i] = sum_k |a||b| (error scale). */
void ref_matmul(int batch, int M, int N, int K, const float *A, size_t a_bs, int ta, const float *B,
                size_t b_bs, int tb, double alpha, double beta, const float *C0, double *C,
                double *mag);

/* The mask of one softmax: scores (D0, D1, Q, K); lens NULL or lens_mode 1 (D0) / 2 (D0, Q);
 * mask NULL or int (D0?, D1?, Q?, K?) read through strides ms (0 = broadcast); causal. */
typedef struct {
    int D0, D1, Q, K;
    const int *lens;
    int lens_mode;
    const int *mask;
    long ms[4];
    int causal;
    double fill;
} ref_mask;

/* 1 when key k of row (d0, d1, q) is blocked. */
int ref_blocked(const ref_mask *m, int d0, int d1, int q, int k);
/* out = softmax(masked_fill(x, blocked, fill)) over K, rows (D0, D1, Q). */
void ref_masked_softmax(const ref_mask *m, const float *x, double *out);
#endif
