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
    /* clattn_mask's: the diagonal of row q is key q (align 0) or q + K - Q (align 1); with window,
     * keys outside [diag - left, diag + right] are blocked, -1 = unbounded */
    int align, window, window_left, window_right;
    /* NULL, or a bias added to every score before the mask, element (d0, d1, q, k) at
     * bs[0] d0 + bs[1] d1 + bs[2] q + bs[3] k */
    const double *bias;
    long bs[4];
    /* NULL, or ALiBi slopes: batch (d0, d1)'s at ss[0] d0 + ss[1] d1; key k of row q gets
     * -slope |q + K - Q - k| after the bias */
    const double *slopes;
    long ss[2];
} ref_mask;

/* Score x of row (d0, d1, q), key k after the bias, ALiBi and the mask. */
double ref_masked_score(const ref_mask *m, int d0, int d1, int q, int k, double x);

/* 1 when key k of row (d0, d1, q) is blocked. */
int ref_blocked(const ref_mask *m, int d0, int d1, int q, int k);
/* out = softmax(masked_fill(x, blocked, fill)) over K, rows (D0, D1, Q). */
void ref_masked_softmax(const ref_mask *m, const float *x, double *out);
/* Same on double input. */
void ref_masked_softmax_d(const ref_mask *m, const double *x, double *out);

/* lse[row] = log(sum_k exp(masked_fill(x, blocked, fill))) over K, rows (D0, D1, Q), double
 * input; -inf when every masked score is -inf, NaN when one is NaN. */
void ref_masked_lse_d(const ref_mask *m, const double *x, double *lse);

/* C (M, N) = op(A) op(B) in double, A (M, K) or (K, M) when ta, B (K, N) or (N, K) when tb. */
void ref_gemm(int M, int N, int K, const double *A, int ta, const double *B, int tb, double *C);
/* y (rows, out) = x (rows, in) W^T + b, float inputs, b may be NULL. */
void ref_linear(int rows, int in, int out, const float *x, const float *W, const float *b, double *y);

/* Philox4x32-10 dropout decision for element e, as kernels/common.cl. */
int ref_dropout_keep(unsigned long long e, unsigned long long seed, unsigned long long offset,
                     double p);
/* x[i] *= keep(first + i) / (1 - p) (0 when p == 1), in double. */
void ref_dropout(double *x, size_t n, unsigned long long first, unsigned long long seed,
                 unsigned long long offset, double p);

/* Dot-product attention over (D0 * D1) batches: q (Q, d), k (K, d), v (K, dv) per batch (double);
 * weights (before dropout) and out. drop_p < 0 or 0 means no dropout. */
typedef struct {
    double p;
    unsigned long long seed, offset;
} ref_dropout_params;
void ref_attention(const ref_mask *m, int d, int dv, const double *q, const double *k,
                   const double *v, double scale, const ref_dropout_params *drop, double *weights,
                   double *out);
/* The error scale of attention outputs: scale = max(|out|, sum_k |w v|) (+1e-30) per element of
 * out (nb, nq, dv), from the weights w (nb, nq, nk) that multiplied v (nb, nk, dv). An output
 * within a small multiple of float32 rounding of this is right; one wrong weight or value is not. */
void ref_attention_scale(size_t nb, int nq, int nk, int dv, const double *w, const double *v,
                         const double *out, double *scale);
/* The LSE of dot-product attention's scores (scale q k^T, masked) per row, q (Q, d) and k (K, d)
 * per batch, and mag[row] = max_k |scale| sum_e |q_e k_e|, the scale of the scores' float32
 * rounding (either may be NULL). */
void ref_attention_lse(const ref_mask *m, int d, const double *q, const double *k, double scale,
                       double *lse, double *mag);
/* Unmasked attention of nq rows of head size 1 (q[r], keys k[nk], scale 1) over values v (nk, dv):
 * out (nq, dv), lse (nq) and mag (nq, the largest |score|; NULL: none), streaming the keys
 * (rows of millions of keys). */
void ref_attention_d1(int nq, int nk, int dv, const float *q, const float *k, const float *v,
                      double *out, double *lse, double *mag);
/* The gradient of masked softmax with respect to its scores from its output y and dy, rows as
 * ref_masked_softmax's: y (dy - sum_k y_k dy_k), 0 at blocked keys; scale (or NULL) the error
 * scale |y| (|dy| + sum_k |y_k dy_k|) of each element. */
void ref_masked_softmax_backward(const ref_mask *m, const double *y, const double *dy, double *dx,
                                 double *scale);
/* d2l's MaskedSoftmaxCELoss on logits x (B, T, V), labels (B, T) (-100 ignored), lens (B) or NULL:
 * loss (B) and each position's log-sum-exp lse (B, T) (or NULL); and its gradient with respect
 * to x given dloss (B). */
void ref_ce_loss(int B, int T, int V, const double *x, const int *labels, const int *lens,
                 double *loss, double *lse);
void ref_ce_loss_backward(int B, int T, int V, const double *x, const int *labels,
                          const int *lens, const double *dloss, double *dx);
/* The gradients of ref_attention (the same layout: K and V per batch) given dout (nb, Q, dv):
 * dq, dk, dvv, and the scores' gradient ds (nb, Q, K) (what a bias gets, before its broadcast
 * sums); sq, sk, sv, sds: their error scales, each the same sums over magnitudes with every
 * probability weighted by 1 + |scale| sum_e |q_e k_e| (its score's float32 rounding, relative
 * in the probability). */
void ref_attention_backward(const ref_mask *m, int d, int dv, const double *q, const double *k,
                            const double *v, double scale, const ref_dropout_params *drop,
                            const double *dout, double *dq, double *dk, double *dvv,
                            double *ds, double *sq, double *sk, double *sv, double *sds);
/* Converts n floats to doubles (malloc'd). */
double *ref_to_double(const float *x, size_t n);
#endif
