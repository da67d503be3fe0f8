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
    long diag = (long)q + (m->align ? (long)m->K - m->Q : 0);
    if (m->causal && k > diag)
        return 1;
    if (m->window && m->window_left >= 0 && k < diag - m->window_left)
        return 1;
    if (m->window && m->window_right >= 0 && k > diag + m->window_right)
        return 1;
    if (m->mask && m->mask[m->ms[0] * d0 + m->ms[1] * d1 + m->ms[2] * q + m->ms[3] * k] == 0)
        return 1;
    return 0;
}

double ref_masked_score(const ref_mask *m, int d0, int d1, int q, int k, double x)
{
    if (ref_blocked(m, d0, d1, q, k))
        return m->fill;
    if (m->bias)
        x += m->bias[m->bs[0] * d0 + m->bs[1] * d1 + m->bs[2] * q + m->bs[3] * k];
    if (m->slopes)
        x -= m->slopes[m->ss[0] * d0 + m->ss[1] * d1] * fabs((double)q + m->K - m->Q - k);
    return x;
}

void ref_masked_softmax(const ref_mask *m, const float *x, double *out)
{
    size_t n = (size_t)m->D0 * m->D1 * m->Q * m->K;
    double *xd = ref_to_double(x, n);
    ref_masked_softmax_d(m, xd, out);
    free(xd);
}

void ref_attention_scale(size_t nb, int nq, int nk, int dv, const double *w, const double *v,
                         const double *out, double *scale)
{
    for (size_t b = 0; b < nb; b++)
        for (int i = 0; i < nq; i++)
            for (int j = 0; j < dv; j++) {
                double m = 0;
                for (int k = 0; k < nk; k++)
                    m += fabs(w[(b * nq + i) * nk + k] * v[(b * nk + k) * dv + j]);
                size_t o = (b * nq + i) * dv + j;
                scale[o] = fmax(fabs(out[o]), m) + 1e-30;
            }
}

double *ref_to_double(const float *x, size_t n)
{
    double *d = malloc(n * sizeof *d);
    for (size_t i = 0; i < n; i++)
        d[i] = x[i];
    return d;
}

void ref_masked_softmax_d(const ref_mask *m, const double *x, double *out)
{
    double *v = malloc(sizeof(double) * (size_t)m->K);
    for (int d0 = 0; d0 < m->D0; d0++)
        for (int d1 = 0; d1 < m->D1; d1++)
            for (int q = 0; q < m->Q; q++) {
                size_t row = (((size_t)d0 * m->D1 + d1) * m->Q + q) * (size_t)m->K;
                double mx = -INFINITY, sum = 0;
                for (int k = 0; k < m->K; k++) {
                    v[k] = ref_masked_score(m, d0, d1, q, k, x[row + k]);
                    mx = fmax(mx, v[k]);
                }
                for (int k = 0; k < m->K; k++)
                    sum += (v[k] = exp(v[k] - mx));
                for (int k = 0; k < m->K; k++)
                    out[row + k] = v[k] / sum;
            }
    free(v);
}

void ref_gemm(int M, int N, int K, const double *A, int ta, const double *B, int tb, double *C)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++)
                s += (ta ? A[(size_t)k * M + i] : A[(size_t)i * K + k]) *
                     (tb ? B[(size_t)j * K + k] : B[(size_t)k * N + j]);
            C[(size_t)i * N + j] = s;
        }
}

void ref_linear(int rows, int in, int out, const float *x, const float *W, const float *b, double *y)
{
    for (int r = 0; r < rows; r++)
        for (int o = 0; o < out; o++) {
            double s = b ? b[o] : 0.0;
            for (int i = 0; i < in; i++)
                s += (double)x[(size_t)r * in + i] * W[(size_t)o * in + i];
            y[(size_t)r * out + o] = s;
        }
}

static unsigned mulhi32(unsigned a, unsigned b)
{
    return (unsigned)(((unsigned long long)a * b) >> 32);
}

int ref_dropout_keep(unsigned long long e, unsigned long long seed, unsigned long long offset,
                     double p)
{
    unsigned long long blk = e >> 2;
    unsigned c[4] = {(unsigned)blk, (unsigned)(blk >> 32), (unsigned)offset, (unsigned)(offset >> 32)};
    unsigned k[2] = {(unsigned)seed, (unsigned)(seed >> 32)};
    for (int r = 0; r < 10; r++) {
        unsigned lo0 = 0xD2511F53u * c[0], hi0 = mulhi32(0xD2511F53u, c[0]);
        unsigned lo1 = 0xCD9E8D57u * c[2], hi1 = mulhi32(0xCD9E8D57u, c[2]);
        unsigned n0 = hi1 ^ c[1] ^ k[0], n2 = hi0 ^ c[3] ^ k[1];
        c[0] = n0;
        c[1] = lo1;
        c[2] = n2;
        c[3] = lo0;
        k[0] += 0x9E3779B9u;
        k[1] += 0xBB67AE85u;
    }
    unsigned threshold = (unsigned)lrint(p * 16777216.0);
    return (c[e & 3] >> 8) >= threshold;
}

void ref_dropout(double *x, size_t n, unsigned long long first, unsigned long long seed,
                 unsigned long long offset, double p)
{
    double scale = p < 1.0 ? 1.0 / (1.0 - (float)p) : 0.0;
    for (size_t i = 0; i < n; i++)
        x[i] *= ref_dropout_keep(first + i, seed, offset, p) ? scale : 0.0; /* NaN * 0 is NaN */
}

void ref_attention(const ref_mask *m, int d, int dv, const double *q, const double *k,
                   const double *v, double scale, const ref_dropout_params *drop, double *weights,
                   double *out)
{
    int nb = m->D0 * m->D1, Q = m->Q, K = m->K;
    size_t ns = (size_t)nb * Q * K;
    double *s = malloc(ns * sizeof *s);
    for (int b = 0; b < nb; b++)
        ref_gemm(Q, K, d, q + (size_t)b * Q * d, 0, k + (size_t)b * K * d, 1, s + (size_t)b * Q * K);
    for (size_t i = 0; i < ns; i++)
        s[i] *= scale;
    ref_masked_softmax_d(m, s, weights);
    for (size_t i = 0; i < ns; i++)
        s[i] = weights[i];
    if (drop && drop->p > 0)
        ref_dropout(s, ns, 0, drop->seed, drop->offset, drop->p);
    for (int b = 0; b < nb; b++)
        ref_gemm(Q, dv, K, s + (size_t)b * Q * K, 0, v + (size_t)b * K * dv, 0,
                 out + (size_t)b * Q * dv);
    free(s);
}

void ref_masked_lse_d(const ref_mask *m, const double *x, double *lse)
{
    size_t rows = (size_t)m->D0 * m->D1 * m->Q;
    for (size_t r = 0; r < rows; r++) {
        int q = (int)(r % m->Q), d1 = (int)(r / m->Q % m->D1), d0 = (int)(r / m->Q / m->D1);
        double mx = -INFINITY, sum = 0;
        int nan = 0;
        for (int k = 0; k < m->K; k++) {
            double v = ref_masked_score(m, d0, d1, q, k, x[r * m->K + k]);
            nan |= isnan(v);
            mx = fmax(mx, v);
        }
        for (int k = 0; mx > -INFINITY && k < m->K; k++)
            sum += exp(ref_masked_score(m, d0, d1, q, k, x[r * m->K + k]) - mx);
        lse[r] = nan ? NAN : mx == -INFINITY ? -INFINITY : mx + log(sum);
    }
}

void ref_attention_lse(const ref_mask *m, int d, const double *q, const double *k, double scale,
                       double *lse, double *mag)
{
    int nb = m->D0 * m->D1, Q = m->Q, K = m->K;
    double *s = malloc((size_t)nb * Q * K * sizeof *s);
    for (int b = 0; b < nb; b++)
        for (int i = 0; i < Q; i++) {
            double mg = 0;
            for (int j = 0; j < K; j++) {
                const double *qi = q + ((size_t)b * Q + i) * d, *kj = k + ((size_t)b * K + j) * d;
                double acc = 0, a = 0;
                for (int e = 0; e < d; e++) {
                    acc += qi[e] * kj[e];
                    a += fabs(qi[e] * kj[e]);
                }
                s[((size_t)b * Q + i) * K + j] = scale * acc;
                mg = fmax(mg, fabs(scale) * a);
            }
            if (mag)
                mag[(size_t)b * Q + i] = mg;
        }
    if (lse)
        ref_masked_lse_d(m, s, lse);
    free(s);
}

void ref_masked_softmax_backward(const ref_mask *m, const double *y, const double *dy, double *dx,
                                 double *scale)
{
    for (int d0 = 0; d0 < m->D0; d0++)
        for (int d1 = 0; d1 < m->D1; d1++)
            for (int q = 0; q < m->Q; q++) {
                size_t row = (((size_t)d0 * m->D1 + d1) * m->Q + q) * (size_t)m->K;
                double s = 0, sa = 0;
                for (int k = 0; k < m->K; k++) {
                    s += y[row + k] * dy[row + k];
                    sa += fabs(y[row + k] * dy[row + k]);
                }
                for (int k = 0; k < m->K; k++) {
                    size_t i = row + k;
                    int open = !ref_blocked(m, d0, d1, q, k);
                    dx[i] = open ? y[i] * (dy[i] - s) : 0.0;
                    if (scale)
                        scale[i] = open ? fabs(y[i]) * (fabs(dy[i]) + sa) + 1e-30 : 1e-30;
                }
            }
}

/* The row's log-sum-exp in double; -inf for a row of -inf, NaN with a NaN or +inf logit. */
static double row_lse_d(const double *x, int V)
{
    double mx = -INFINITY, s = 0;
    for (int v = 0; v < V; v++)
        mx = x[v] > mx || isnan(x[v]) ? x[v] : mx;
    if (isnan(mx) || mx == INFINITY)
        return NAN;
    if (mx == -INFINITY)
        return -INFINITY;
    for (int v = 0; v < V; v++)
        s += exp(x[v] - mx);
    return mx + log(s);
}

static double ce_weight(const int *lens, int b, int t, int T)
{
    int l = lens ? (lens[b] < 0 ? 0 : lens[b] > T ? T : lens[b]) : T;
    return t < l ? 1.0 : 0.0;
}

void ref_ce_loss(int B, int T, int V, const double *x, const int *labels, const int *lens,
                 double *loss, double *lse)
{
    for (int b = 0; b < B; b++) {
        double s = 0;
        for (int t = 0; t < T; t++) {
            size_t r = (size_t)b * T + t;
            double l = row_lse_d(x + r * V, V), ce;
            int lab = labels[r];
            if (lse)
                lse[r] = l;
            ce = lab == -100 ? 0.0 : lab >= 0 && lab < V ? l - x[r * V + lab] : NAN;
            s += ce_weight(lens, b, t, T) * ce;
        }
        loss[b] = s / T;
    }
}

void ref_ce_loss_backward(int B, int T, int V, const double *x, const int *labels,
                          const int *lens, const double *dloss, double *dx)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            size_t r = (size_t)b * T + t;
            double l = row_lse_d(x + r * V, V), c = dloss[b] * ce_weight(lens, b, t, T) / T;
            int lab = labels[r];
            if (lab == -100)
                c *= 0.0;
            else if (lab < 0 || lab >= V)
                c = NAN;
            for (int v = 0; v < V; v++)
                dx[r * V + v] = c * (exp(x[r * V + v] - l) - (v == lab ? 1.0 : 0.0));
        }
}

void ref_attention_backward(const ref_mask *m, int d, int dv, const double *q, const double *k,
                            const double *v, double scale, const ref_dropout_params *drop,
                            const double *dout, double *dq, double *dk, double *dvv,
                            double *ds, double *sq, double *sk, double *sv, double *sds)
{
    int nb = m->D0 * m->D1, Q = m->Q, K = m->K;
    size_t ns = (size_t)nb * Q * K;
    double *p = malloc(ns * 8), *pd = malloc(ns * 8), *o = malloc((size_t)nb * Q * dv * 8);
    double *keep = malloc(ns * 8), *mag = malloc(ns * 8);
    ref_attention(m, d, dv, q, k, v, scale, drop, p, o);
    for (size_t i = 0; i < ns; i++)
        keep[i] = 1;
    if (drop && drop->p > 0)
        ref_dropout(keep, ns, 0, drop->seed, drop->offset, drop->p);
    for (int b = 0; b < nb; b++)
        for (int i = 0; i < Q; i++)
            for (int j = 0; j < K; j++) {
                size_t e = ((size_t)b * Q + i) * K + j;
                double dp = 0, sdp = 0, sm = 0;
                for (int c = 0; c < dv; c++) {
                    dp += dout[((size_t)b * Q + i) * dv + c] * v[((size_t)b * K + j) * dv + c];
                    sdp += fabs(dout[((size_t)b * Q + i) * dv + c] * v[((size_t)b * K + j) * dv + c]);
                }
                for (int c = 0; c < d; c++)
                    sm += fabs(q[((size_t)b * Q + i) * d + c] * k[((size_t)b * K + j) * d + c]);
                pd[e] = p[e] * keep[e];
                ds[e] = dp * keep[e]; /* dP for now */
                sds[e] = sdp * fabs(keep[e]);
                mag[e] = 1 + fabs(scale) * sm; /* the score's rounding, relative in P */
            }
    for (int b = 0; b < nb; b++) /* dV = P_d^T dout, and dS = P (dP - sum P dP), 0 if blocked */
        for (int i = 0; i < Q; i++) {
            size_t row = ((size_t)b * Q + i) * K;
            double s = 0, sa = 0;
            for (int j = 0; j < K; j++) {
                s += p[row + j] * ds[row + j];
                sa += p[row + j] * sds[row + j];
            }
            for (int j = 0; j < K; j++) {
                int open = !ref_blocked(m, b / m->D1, b % m->D1, i, j);
                sds[row + j] = open ? p[row + j] * (sds[row + j] + sa) * mag[row + j] : 0;
                ds[row + j] = open ? p[row + j] * (ds[row + j] - s) : 0;
            }
        }
    for (int b = 0; b < nb; b++) {
        for (int j = 0; j < K; j++) {
            for (int c = 0; c < dv; c++) {
                double a = 0, sa = 0;
                for (int i = 0; i < Q; i++) {
                    double t = pd[((size_t)b * Q + i) * K + j] * dout[((size_t)b * Q + i) * dv + c];
                    a += t;
                    sa += fabs(t) * mag[((size_t)b * Q + i) * K + j];
                }
                dvv[((size_t)b * K + j) * dv + c] = a;
                sv[((size_t)b * K + j) * dv + c] = sa + 1e-30;
            }
            for (int c = 0; c < d; c++) {
                double a = 0, sa = 0;
                for (int i = 0; i < Q; i++) {
                    size_t e = ((size_t)b * Q + i) * K + j;
                    a += ds[e] * q[((size_t)b * Q + i) * d + c];
                    sa += sds[e] * fabs(q[((size_t)b * Q + i) * d + c]);
                }
                dk[((size_t)b * K + j) * d + c] = scale * a;
                sk[((size_t)b * K + j) * d + c] = fabs(scale) * sa + 1e-30;
            }
        }
        for (int i = 0; i < Q; i++)
            for (int c = 0; c < d; c++) {
                double a = 0, sa = 0;
                for (int j = 0; j < K; j++) {
                    size_t e = ((size_t)b * Q + i) * K + j;
                    a += ds[e] * k[((size_t)b * K + j) * d + c];
                    sa += sds[e] * fabs(k[((size_t)b * K + j) * d + c]);
                }
                dq[((size_t)b * Q + i) * d + c] = scale * a;
                sq[((size_t)b * Q + i) * d + c] = fabs(scale) * sa + 1e-30;
            }
    }
    free(p);
    free(pd);
    free(o);
    free(keep);
    free(mag);
}

void ref_attention_d1(int nq, int nk, int dv, const float *q, const float *k, const float *v,
                      double *out, double *lse, double *mag)
{
    for (int r = 0; r < nq; r++) {
        double m = -INFINITY, big = 0, sum = 0, *o = out + (size_t)r * dv;
        for (int j = 0; j < nk; j++) {
            m = fmax(m, (double)q[r] * k[j]);
            big = fmax(big, fabs((double)q[r] * k[j]));
        }
        for (int c = 0; c < dv; c++)
            o[c] = 0;
        for (int j = 0; j < nk; j++) {
            double w = exp((double)q[r] * k[j] - m);
            sum += w;
            for (int c = 0; c < dv; c++)
                o[c] += w * v[(size_t)j * dv + c];
        }
        for (int c = 0; c < dv; c++)
            o[c] /= sum;
        lse[r] = m + log(sum);
        if (mag)
            mag[r] = big;
    }
}
