/* Differential fuzzer of dot-product attention: seeded random cases (0-2 leading dims, Q, K, d, dv
 * from 1 to 300, every mask kind and combination, fills down to -INFINITY, scales from 1e-30 to
 * 1e30, huge and tiny magnitudes, exact ties, NaN and infinities, dropout), each run through the
 * fused path (no weights) and the unfused path (weights requested) of the variant CLATTN_TUNE
 * selects, both checked against a double-precision reference, NaN and infinity patterns included.
 *
 * CLATTN_FUZZ_CASES=N runs N cases (default 48; 12 under CLATTN_TEST_SMALL) starting at
 * CLATTN_FUZZ_FIRST (default 0); a failure prints the case number to rerun it alone. */
#include "harness.h"
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define U32 (1.0 / 16777216.0) /* float32 unit roundoff, 2^-24 */
/* The weights' and outputs' own rounding (exp, sums, division; see test_attention.c), on top of
 * what the scores' rounding explains (fz_bound below). */
#define OUT_TOL 1e-4
#define W_RTOL 1e-4
#define W_ATOL 1e-7
/* Exact cases: Q and K entries are small integers times powers of two, so every product and
 * partial sum of Q K^T is exact in float32 whatever the order; scores differ by whole units. */
#define EXACT_MAX_INT 3

typedef struct {
    int nlead;
    size_t lead[2];
    int nq, nk, d, dv;
    h_mask_spec mask;
    int lens_buf[3 * 300];
    float scale; /* opts.scale, 0 = 1/sqrt(d) */
    float p;
    unsigned long long seed;
    int exact;      /* integer Q, K scaled by 2^eq, 2^ek */
    int eq, ek;
    double qmag, kmag, vmag;
    int ties;       /* K rows copied onto other K rows */
    int nonfinite;  /* NaN or infinities written into Q, K or V */
    int hkv;        /* nlead 2: K and V have hkv < lead[1] heads (grouped-query); 0: Q's */
} fz_case;

typedef struct {
    float *q, *k, *v;
    size_t nb, qn, kn, vn, on, wn;
} fz_data;

static int pick(const int *set, int n)
{
    return set[h_randint(0, n - 1)];
}

/* Sizes that are awkward on purpose (1, primes, tile and bucket sizes +-1) or random. */
static int pick_len(void)
{
    static const int odd[] = {1, 2, 3, 5, 7, 13, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128,
                              129, 191, 192, 193, 255, 256, 257};
    double u = h_uniform(0, 1);
    return u < 0.5 ? pick(odd, sizeof odd / sizeof odd[0]) : u < 0.85 ? h_randint(1, 64)
                                                                      : h_randint(1, 300);
}

static size_t work(const fz_case *c, size_t nb)
{
    return nb * (size_t)c->nq * c->nk * (size_t)(c->d + c->dv);
}

static size_t batch_of(const fz_case *c)
{
    size_t n = 1;
    for (int i = 0; i < c->nlead; i++)
        n *= c->lead[i];
    return n;
}

/* Halves the largest size until the case fits the budget. */
static void fit(fz_case *c, size_t budget)
{
    while (work(c, batch_of(c)) > budget) {
        int *big = &c->nq;
        if (c->nk > *big) big = &c->nk;
        if (c->d > *big) big = &c->d;
        if (c->dv > *big) big = &c->dv;
        if (*big > 1) {
            *big = (*big + 1) / 2;
        } else {
            for (int i = 0; i < c->nlead; i++)
                c->lead[i] = 1;
        }
    }
}

static void gen_mask(fz_case *c)
{
    h_mask_spec *m = &c->mask;
    int rank = c->nlead + 2;
    double u = h_uniform(0, 1);
    m->lens = u < 0.4 ? H_LENS_NONE : u < 0.7 ? H_LENS_1D : H_LENS_2D;
    m->lens_on_device = h_randint(0, 1);
    if (m->lens != H_LENS_NONE && h_randint(0, 1)) { /* the extremes 0, 1, K-1, K often */
        size_t D0 = c->nlead ? c->lead[0] : 1;
        size_t nl = m->lens == H_LENS_1D ? D0 : D0 * c->nq;
        const int ends[] = {0, 1, c->nk - 1, c->nk};
        for (size_t i = 0; i < nl; i++)
            c->lens_buf[i] = h_randint(0, 1) ? ends[h_randint(0, 3)] : h_randint(0, c->nk);
        m->fixed_lens = c->lens_buf;
    }
    if (h_uniform(0, 1) < 0.35) {
        size_t full[4] = {c->lead[0], c->lead[1]};
        full[c->nlead] = c->nq;
        full[c->nlead + 1] = c->nk;
        m->mask_rank = h_randint(1, rank);
        for (int i = 0; i < m->mask_rank; i++) /* right-aligned, each dim full or broadcast */
            m->mask_dims[i] = h_randint(0, 2) ? full[rank - m->mask_rank + i] : 1;
        if (m->mask_dims[m->mask_rank - 1] == (size_t)c->nk && h_randint(0, 3) == 0)
            m->mask_prefix = h_randint(1, c->nk); /* left padding, all blocked at K */
    }
    m->causal = h_uniform(0, 1) < 0.3;
    static const float fills[] = {0.0f, 0.0f, -1e9f, -INFINITY, -INFINITY, -1e30f, -FLT_MAX, -1.0f};
    m->fill = fills[h_randint(0, sizeof fills / sizeof fills[0] - 1)];
    m->align = h_uniform(0, 1) < 0.3; /* bottom-right diagonals */
    if (h_uniform(0, 1) < 0.25) {      /* a sliding window, sides unbounded, tight or wide */
        int sides[2];
        for (int i = 0; i < 2; i++) {
            int u = h_randint(0, 5);
            sides[i] = u == 0 ? -1 : u == 1 ? 0 : u == 2 ? 1 : u == 3 ? c->nk : h_randint(0, 40);
        }
        m->window = 1;
        m->window_left = sides[0];
        m->window_right = sides[1];
    }
}

static double scale_of(const fz_case *c)
{
    return c->scale != 0.0f ? (double)c->scale : 1.0 / sqrt((double)c->d);
}

/* Exact case: chooses eq, ek with score units near 10^lg, every intermediate (q, k, q k, q scale,
 * k scale) a normal float32 well inside range. 0 when no such split exists. */
static int gen_exact_exponents(fz_case *c, double lg)
{
    int es = (int)lrint(log2(fabs(scale_of(c))));
    int t = (int)lrint(lg * 3.321928) - es, lim = 100;
    int lo = -lim, hi = lim;
    if (t < -lim || t > lim) /* the products q_i k_i */
        return 0;
    const int lows[] = {t - lim, -lim - es, t + es - lim}, highs[] = {t + lim, lim - es, t + es + lim};
    for (int i = 0; i < 3; i++) {
        lo = lows[i] > lo ? lows[i] : lo;
        hi = highs[i] < hi ? highs[i] : hi;
    }
    if (lo > hi)
        return 0;
    c->eq = h_randint(lo, hi);
    c->ek = t - c->eq;
    return 1;
}

static void gen_magnitudes(fz_case *c)
{
    double u = h_uniform(0, 1);
    if (u < 0.4)
        c->scale = 0.0f;
    else if (u < 0.7)
        c->scale = (float)ldexp(h_randint(0, 1) ? 1.0 : -1.0, h_randint(-100, 100));
    else
        c->scale = (float)((h_randint(0, 3) ? 1 : -1) * pow(10.0, h_uniform(-30, 30)));
    c->exact = 0;
    for (int tries = 0; h_randint(0, 1) && !c->exact && tries < 20; tries++) /* moderate or extreme */
        c->exact = gen_exact_exponents(c, h_randint(0, 1) ? h_uniform(-3, 2) : h_uniform(-30, 30));
    if (!c->exact) { /* |scores| up to about 10^lg, at most 1e3: float rounding stays explained */
        double lg = h_randint(0, 2) ? h_uniform(-1, 3) : h_uniform(-30, 1);
        double qk = pow(10.0, lg) / (fabs(scale_of(c)) * sqrt((double)c->d));
        double split = h_uniform(0.2, 0.8), l = log10(qk);
        c->qmag = pow(10.0, l * split);
        c->kmag = pow(10.0, l * (1 - split));
        if (c->qmag > 1e30 || c->kmag > 1e30 || c->qmag < 1e-30 || c->kmag < 1e-30 ||
            c->qmag * fabs(scale_of(c)) > 1e34)
            c->qmag = c->kmag = 1.0, c->scale = 0.0f;
    }
    /* values up to 1e38, where the fused kernels' unnormalised sums overflow for all but a few
     * keys and their rows are redone with scaled weights (README); gen_case caps them for
     * dropout, whose 1 / (1 - p) would take the average itself past FLT_MAX */
    c->vmag = h_randint(0, 2) ? 1.0 : pow(10.0, h_uniform(-30, 38));
}

static void gen_case(fz_case *c, size_t budget)
{
    memset(c, 0, sizeof *c);
    c->nlead = h_randint(0, 2);
    for (int i = 0; i < c->nlead; i++)
        c->lead[i] = (size_t)h_randint(1, 3);
    if (c->nlead == 2 && h_uniform(0, 1) < 0.3) { /* grouped-query: 2-8 query heads per K/V head */
        static const int heads[][2] = {{2, 1}, {4, 1}, {4, 2}, {6, 2}, {6, 3}, {8, 1}, {8, 4}};
        int pick_h = h_randint(0, 6);
        c->lead[1] = (size_t)heads[pick_h][0];
        c->hkv = heads[pick_h][1];
    }
    c->nq = pick_len();
    c->nk = pick_len();
    c->d = pick_len();
    c->dv = pick_len();
    if (h_randint(0, 9) == 0)
        c->d = 257 + h_randint(0, 43); /* past the fused kernel's head sizes: the unfused path */
    fit(c, budget);
    if (c->hkv && c->lead[1] == 1)
        c->hkv = 0; /* fit() dropped the heads */
    gen_mask(c);
    gen_magnitudes(c);
    if (!c->exact && h_uniform(0, 1) < 0.25) { /* a float bias, broadcast, some entries -inf */
        h_mask_spec *m = &c->mask;
        int rank = c->nlead + 2;
        size_t full[4] = {c->lead[0], c->lead[1]};
        full[c->nlead] = c->nq;
        full[c->nlead + 1] = c->nk;
        m->bias_rank = h_randint(1, rank);
        for (int i = 0; i < m->bias_rank; i++)
            m->bias_dims[i] = h_randint(0, 2) ? full[rank - m->bias_rank + i] : 1;
        m->bias_mag = h_randint(0, 1) ? 2.0 : 100.0;
        m->bias_ninf = h_randint(0, 2) ? 0 : h_randint(2, 7);
    }
    if (!c->exact && c->nlead > 0 && h_uniform(0, 1) < 0.2) { /* ALiBi slopes, broadcast */
        h_mask_spec *m = &c->mask;
        m->alibi_rank = h_randint(1, c->nlead);
        for (int i = 0; i < m->alibi_rank; i++)
            m->alibi_dims[i] = h_randint(0, 2) ? c->lead[c->nlead - m->alibi_rank + i] : 1;
        static const double mags[] = {0.0, 1.0, 30.0}; /* 0: Press et al.'s slopes */
        m->alibi_mag = mags[h_randint(0, 2)];
    }
    c->ties = h_uniform(0, 1) < 0.2;
    c->nonfinite = h_uniform(0, 1) < 0.2 ? h_randint(1, 3) : 0;
    if (h_uniform(0, 1) < 0.25) {
        static const float ps[] = {0.1f, 0.5f, 0.9f, 1.0f};
        c->p = ps[h_randint(0, 3)];
        c->seed = ((unsigned long long)h_randint(0, 0x7fffffff) << 32) | (unsigned)h_randint(0, 0x7fffffff);
        c->vmag = fmin(c->vmag, 1e37); /* p <= 0.9: kept weights up to 10 */
    }
}

static float gen_entry(int exact, int e, double mag)
{
    if (exact)
        return (float)ldexp(h_randint(-EXACT_MAX_INT, EXACT_MAX_INT), e);
    return (float)h_uniform(-mag, mag);
}

static void gen_data(const fz_case *c, fz_data *x)
{
    x->nb = batch_of(c);
    x->qn = x->nb * c->nq * c->d;
    x->kn = x->nb * c->nk * c->d;
    x->vn = x->nb * c->nk * c->dv;
    x->on = x->nb * c->nq * c->dv;
    x->wn = x->nb * c->nq * c->nk;
    x->q = malloc(x->qn * 4);
    x->k = malloc(x->kn * 4);
    x->v = malloc(x->vn * 4);
    for (size_t i = 0; i < x->qn; i++)
        x->q[i] = gen_entry(c->exact, c->eq, c->qmag);
    /* (grouped-query cases: K and V are drawn for every query head, then each group of query
     * heads gets its first head's rows in tie_groups, so the reference sees them per query head) */
    for (size_t i = 0; i < x->kn; i++)
        x->k[i] = gen_entry(c->exact, c->ek, c->kmag);
    h_fill(x->v, x->vn, -c->vmag, c->vmag);
    for (int t = 0; c->ties && t < c->nk; t++) { /* identical keys: exact ties in every row */
        size_t b = (size_t)h_randint(0, (int)x->nb - 1), from = h_randint(0, c->nk - 1);
        size_t to = h_randint(0, c->nk - 1);
        memcpy(x->k + (b * c->nk + to) * c->d, x->k + (b * c->nk + from) * c->d, c->d * 4);
    }
    static const float special[3] = {NAN, INFINITY, -INFINITY};
    for (int t = 0; t < c->nonfinite; t++) {
        int which = h_randint(0, 2);
        float *dst = which == 0 ? x->q : which == 1 ? x->k : x->v;
        size_t n = which == 0 ? x->qn : which == 1 ? x->kn : x->vn;
        dst[h_randint(0, (int)n - 1)] = special[h_randint(0, 2)];
    }
}

/* The double reference of one batch's row and how far float32 may move it. Scores: finite
 * inputs give s = scale * q.k; a float32 score is off by at most a[k] (the dot product's
 * rounding, gamma_d sum |q_i k_i| |scale|, none in exact cases, plus the scale's and the log2
 * conversion's 2u |s|). The softmax uses differences from the row maximum: key k's difference is
 * off by e[k] <= a[k] + a[max] + 4u |difference|; in exact cases, where scores differ by whole
 * units, also by at most rho |difference|, which keeps one-hot and tied rows exact at any
 * magnitude. log-sum-exp moves by at most log sum w e^e; a weight by w (e^(e + lse) - 1).
 * The row's LSE output (mx + log sum) moves by at most max_k a[k] (it is 1-Lipschitz in every
 * score), the sum's rounding ((K + 4) u: serial sums, 2-ulp exponentials, the running max's
 * rescalings) and its own 2 ulp. */
typedef struct {
    const fz_case *c;
    const fz_data *x;
    double *s, *a, *w, *dw, *e;
    int *real;
    double lse, lse_tol;
} fz_row;

static void row_scores(fz_row *r, size_t b, int i, const ref_mask *m)
{
    const fz_case *c = r->c;
    double sc = scale_of(c), gamma = c->exact ? 0.0 : (c->d + 2) * U32 / (1 - (c->d + 2) * U32);
    int d0 = (int)(b / (size_t)m->D1), d1 = (int)(b % (size_t)m->D1);
    for (int k = 0; k < c->nk; k++) {
        const float *q = r->x->q + (b * c->nq + i) * c->d, *kk = r->x->k + (b * c->nk + k) * c->d;
        double dot = 0, mag = 0;
        for (int e = 0; e < c->d; e++) {
            dot += (double)q[e] * kk[e];
            mag += fabs((double)q[e] * kk[e]);
        }
        r->real[k] = !ref_blocked(m, d0, d1, i, k);
        r->s[k] = r->real[k] ? sc * dot : m->fill;
        /* products below FLT_MIN may be flushed to zero (OpenCL allows it for float) */
        r->a[k] = r->real[k] ? (gamma * mag + 2 * c->d * FLT_MIN) * fabs(sc) + 2 * U32 * fabs(r->s[k])
                             : 0.0;
        if (r->real[k] && m->bias) { /* one more rounding; a -inf bias is exact */
            r->s[k] += m->bias[m->bs[0] * d0 + m->bs[1] * d1 + m->bs[2] * i + m->bs[3] * k];
            r->a[k] = isfinite(r->s[k]) ? r->a[k] + U32 * fabs(r->s[k]) : 0.0;
        }
        if (r->real[k] && m->slopes) { /* the product's rounding and the sum's */
            double al = m->slopes[m->ss[0] * d0 + m->ss[1] * d1] *
                        fabs((double)i + c->nk - c->nq - k);
            r->s[k] -= al;
            r->a[k] = isfinite(r->s[k]) ? r->a[k] + U32 * (al + fabs(r->s[k])) : 0.0;
        }
    }
}

static void row_weights(fz_row *r)
{
    const fz_case *c = r->c;
    int K = c->nk, km = 0;
    double mx = -INFINITY, sum = 0, smax = 0;
    for (int k = 0; k < K; k++) {
        if (r->s[k] > mx) /* NaN scores never win, as fmax in ref.c */
            mx = r->s[k], km = k;
        if (r->real[k] && isfinite(r->s[k]))
            smax = fmax(smax, fabs(r->s[k]));
    }
    int nan = 0;
    double amax = 0;
    for (int k = 0; k < K; k++) {
        sum += exp(r->s[k] - mx);
        nan |= isnan(r->s[k]);
        amax = fmax(amax, r->a[k]);
    }
    r->lse = nan ? NAN : mx == -INFINITY ? -INFINITY : mx + log(sum);
    float lf = (float)fabs(r->lse);
    r->lse_tol = amax + (K + 4) * U32 +
                 (isfinite(lf) ? 2.0 * ((double)nextafterf(lf, INFINITY) - lf) : 0.0);
    double unit = ldexp(fabs(scale_of(c)), c->eq + c->ek);
    double rho = 4 * U32 * smax / unit + 4 * U32, lse_arg = 0;
    for (int k = 0; k < K; k++) {
        double diff = mx - r->s[k];
        r->w[k] = exp(r->s[k] - mx) / sum;
        double e = r->a[k] + r->a[km] + 4 * U32 * fabs(diff);
        if (c->exact && r->real[k] && r->real[km])
            e = fmin(e, rho * fabs(diff));
        r->dw[k] = isfinite(diff) ? fmin(e, 50.0) : 0.0; /* an infinite difference is exact */
        if (r->w[k] > 0)
            lse_arg += r->w[k] * exp(r->dw[k]);
    }
    double lse = lse_arg > 0 ? log(lse_arg) : 0.0;
    for (int k = 0; k < K; k++) { /* from here on: the weight's allowed error */
        r->e[k] = r->dw[k] + lse;
        r->dw[k] = r->w[k] > 0 && isfinite(r->w[k]) ? r->w[k] * expm1(r->e[k]) : 0.0;
        /* exp(s - max) below FLT_MIN may come out as 0 (a flushed subnormal: OpenCL does not
         * require float denormals, and flash_cpu's 2^x returns 0 there by design), and the
         * weight with it: whatever a huge value multiplies it by is then missing */
        if (r->w[k] > 0 && r->w[k] * sum * exp(-r->e[k]) < FLT_MIN)
            r->dw[k] = fmax(r->dw[k], r->w[k]);
    }
}

typedef struct {
    double *w, *wtol, *out, *otol, *lse, *ltol;
    char *skip;  /* outputs whose value float32 leaves open (see zero_weight) */
    char *loose; /* NaN from an infinite value times a weight that underflowed to 0 */
} fz_ref;

/* Whether a float32 weight of about w (within a factor e^e) is exactly 0: 1 surely (below
 * 2^-150, which no rounding keeps), 0 surely not (above 2^-100, far from any flush to zero), -1
 * open. It decides whether an infinite value gives an infinity (w v) or NaN (0 v). */
static int zero_weight(double w, double e)
{
    if (w * exp(e) < 0x1p-150)
        return 1;
    return w * exp(-e) > 0x1p-100 ? 0 : -1;
}

static void reference(const fz_case *c, const fz_data *x, const ref_mask *m, fz_ref *f)
{
    int K = c->nk, DV = c->dv;
    fz_row r = {c, x, malloc(K * 8), malloc(K * 8), NULL, malloc(K * 8), malloc(K * 8),
                malloc(K * sizeof(int))};
    double dscale = c->p < 1.0f ? 1.0 / (1.0 - (double)c->p) : 0.0;
    double flushed = 4 * K * FLT_MIN * fmax(1.0, dscale); /* products w v below FLT_MIN */
    for (size_t b = 0; b < x->nb; b++)
        for (int i = 0; i < c->nq; i++) {
            size_t row = b * c->nq + i;
            r.w = f->w + row * K;
            row_scores(&r, b, i, m);
            row_weights(&r);
            f->lse[row] = r.lse;
            f->ltol[row] = r.lse_tol;
            for (int k = 0; k < K; k++)
                f->wtol[row * K + k] = W_RTOL * r.w[k] + W_ATOL + r.dw[k];
            for (int j = 0; j < DV; j++) {
                double o = 0, mag = 0, extra = 0;
                int open = 0, underflow = 0;
                for (int k = 0; k < K; k++) {
                    double keep = 1.0, v = x->v[(b * K + k) * DV + j], w = r.w[k];
                    if (c->p > 0)
                        keep = ref_dropout_keep(row * K + k, c->seed, 0, c->p) ? dscale : 0.0;
                    if (!isfinite(v) && isfinite(w)) {
                        int z = zero_weight(w, r.e[k]);
                        open |= z < 0;
                        underflow |= z > 0 && w > 0 && keep > 0;
                        w = z > 0 ? 0.0 : w;
                    }
                    o += w * keep * v; /* NaN * 0 is NaN, as PyTorch's weights @ V */
                    mag += fabs(w * keep * v);
                    extra += r.dw[k] * keep * fabs(v);
                }
                f->skip[row * DV + j] = open && !isnan(o);
                f->loose[row * DV + j] = underflow && isnan(o);
                f->out[row * DV + j] = f->skip[row * DV + j] ? 0.0 : o;
                f->otol[row * DV + j] = OUT_TOL * fmax(fabs(o), mag) + extra + flushed;
            }
        }
    free(r.s); free(r.a); free(r.dw); free(r.e); free(r.real);
}

static clattn_tensor make(const fz_case *c, size_t rows, size_t cols, const float *host)
{
    return h_batched(c->nlead, c->lead, rows, cols, host);
}

/* Grouped-query cases: x (nb batches of per floats, one per query head) gets each group's first
 * head in every head of the group (what the device computes with K/V head h / G), and *kv
 * (malloc'd) the hkv heads the device is given. */
static void tie_groups(const fz_case *c, float *x, size_t per, float **kv)
{
    size_t H = c->lead[1], G = H / (size_t)c->hkv, nkv = c->lead[0] * (size_t)c->hkv;
    *kv = malloc(nkv * per * 4);
    for (size_t b = 0; b < c->lead[0] * H; b++) {
        size_t first = b / G * G; /* the group's first query head, (b / H) * H + (b % H) / G * G */
        memcpy(x + b * per, x + first * per, per * 4);
        if (b == first)
            memcpy(*kv + b / G * per, x + b * per, per * 4);
    }
}

static clattn_tensor make_kv(const fz_case *c, size_t rows, size_t cols, const float *host)
{
    size_t lead[2] = {c->lead[0], c->hkv ? (size_t)c->hkv : c->lead[1]};
    return h_batched(c->nlead, lead, rows, cols, host);
}

static void describe(const fz_case *c, int index, char *buf, size_t n)
{
    snprintf(buf, n,
             "fuzz case %d (rerun: CLATTN_FUZZ_FIRST=%d CLATTN_FUZZ_CASES=1, seed %llu): lead %d "
             "(%zu, %zu) Q=%d K=%d d=%d dv=%d lens %d%s mask rank %d prefix %d causal %d align %d "
             "window %d (%d, %d) fill %g "
             "scale %g %s eq %d ek %d qmag %g kmag %g vmag %g ties %d nonfinite %d p %g hkv %d "
             "bias rank %d mag %g ninf %d alibi rank %d mag %g",
             index, index, h_seed(), c->nlead, c->lead[0], c->lead[1], c->nq, c->nk, c->d, c->dv,
             c->mask.lens, c->mask.lens_on_device ? " (device)" : "", c->mask.mask_rank,
             c->mask.mask_prefix, c->mask.causal, c->mask.align, c->mask.window,
             c->mask.window_left, c->mask.window_right, c->mask.fill, c->scale,
             c->exact ? "exact" : "float", c->eq, c->ek, c->qmag, c->kmag, c->vmag, c->ties,
             c->nonfinite, c->p, c->hkv, c->mask.bias_rank, c->mask.bias_mag, c->mask.bias_ninf,
             c->mask.alibi_rank, c->mask.alibi_mag);
}

/* One case through both paths: no weights (fused where the variant and head sizes allow) and
 * weights requested (the unfused chain). */
static void run_case(int index, size_t budget)
{
    fz_case c;
    fz_data x;
    h_reseed(0xF022ull + (unsigned long long)index);
    gen_case(&c, budget);
    gen_data(&c, &x);
    float *kc = x.k, *vc = x.v; /* what the device gets as K and V */
    if (c.hkv) {
        tie_groups(&c, x.k, (size_t)c.nk * c.d, &kc);
        tie_groups(&c, x.v, (size_t)c.nk * c.dv, &vc);
    }
    size_t sdims[4];
    memcpy(sdims, c.lead, sizeof(size_t) * c.nlead);
    sdims[c.nlead] = c.nq;
    sdims[c.nlead + 1] = c.nk;
    h_mask hm;
    h_mask_make(&hm, &c.mask, c.nlead + 2, sdims);
    size_t rows = x.nb * c.nq;
    fz_ref f = {malloc(x.wn * 8), malloc(x.wn * 8), malloc(x.on * 8), malloc(x.on * 8),
                malloc(rows * 8), malloc(rows * 8), malloc(x.on), malloc(x.on)};
    reference(&c, &x, &hm.r, &f);
    char what[600];
    describe(&c, index, what, sizeof what);
    clattn_tensor tq = make(&c, c.nq, c.d, x.q), tk = make_kv(&c, c.nk, c.d, kc);
    clattn_tensor tv = make_kv(&c, c.nk, c.dv, vc);
    clattn_tensor to = make(&c, c.nq, c.dv, NULL), tw = make(&c, c.nq, c.nk, NULL);
    clattn_tensor tl = h_tensor(CLATTN_FLOAT32, c.nlead + 1, sdims, NULL); /* (..., Q) */
    clattn_attention_opts opts = {hm.m, {c.p, c.p > 0, c.seed, 0}, c.scale, NULL,
                                  hm.tb.buf ? &hm.tb : NULL, hm.ta.buf ? &hm.ta : NULL};
    for (int weights = 0; weights < 2; weights++) {
        h_poison(&to);
        h_poison(&tw);
        h_poison(&tl);
        opts.lse = index % 4 == 3 ? NULL : &tl; /* a quarter without: the kernels' other branch */
        if (clattn_dot_product_attention(h_ctx, &tq, &tk, &tv, &opts, &to,
                                         weights ? &tw : NULL) != CLATTN_SUCCESS)
            fail_msg("%s: %s", what, clattn_last_error(h_ctx));
        char path[700];
        snprintf(path, sizeof path, "%s [%s]", what, weights ? "weights: unfused" : "no weights");
        float *go = h_read(&to);
        /* The fused kernel's online softmax may have multiplied an infinite value by a weight
         * that was not yet 0 when its key was read, before the row's maximum rose: an infinity
         * then stays where the two-pass weights @ V gives 0 * inf = NaN (README). */
        for (size_t i = 0; i < x.on; i++)
            go[i] = f.skip[i] ? 0.0f : !weights && f.loose[i] && isinf(go[i]) ? NAN : go[i];
        h_assert_scaled(go, f.out, f.otol, x.on, 1.0, path);
        free(go);
        if (weights) {
            float *gw = h_read(&tw);
            h_assert_scaled(gw, f.w, f.wtol, x.wn, 1.0, path);
            free(gw);
        }
        if (opts.lse) {
            float *gl = h_read(&tl);
            strncat(path, " (lse)", sizeof path - strlen(path) - 1);
            h_assert_scaled(gl, f.lse, f.ltol, rows, 1.0, path);
            free(gl);
        }
    }
    clattn_tensor_release(&tq); clattn_tensor_release(&tk); clattn_tensor_release(&tv);
    clattn_tensor_release(&to); clattn_tensor_release(&tw); clattn_tensor_release(&tl);
    h_mask_free(&hm);
    if (c.hkv) {
        free(kc);
        free(vc);
    }
    free(x.q); free(x.k); free(x.v);
    free(f.w); free(f.wtol); free(f.out); free(f.otol); free(f.lse); free(f.ltol); free(f.skip);
    free(f.loose);
}

static int env_int(const char *name, int dflt)
{
    const char *s = getenv(name);
    return s && *s ? atoi(s) : dflt;
}

static void test_differential(void **s)
{
    (void)s;
    int first = env_int("CLATTN_FUZZ_FIRST", 0);
    int n = env_int("CLATTN_FUZZ_CASES", h_small() ? 12 : 48);
    size_t budget = h_small() ? 20000 : 4000000;
    printf("# %d cases from %d\n", n, first);
    for (int i = first; i < first + n; i++)
        run_case(i, budget);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_differential)};
    return cmocka_run_group_tests(tests, h_setup, h_teardown);
}
