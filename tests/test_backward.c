/* Backward passes of the building blocks: masked softmax, dropout, matmul and linear, each against
 * double-precision central finite differences of the double forward reference on small shapes
 * and against the analytic double reference on every shape; bad input. */
#include "harness.h"
#include "ref.h"
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Analytic references: each gradient element is a sum of float32 products and one or two
 * roundings per term; 1e-5 of its error scale (the sum of the magnitudes it adds) is ~100x the
 * rounding of sums of a few hundred terms, while one wrong term moves it by far more. */
#define GRAD_TOL 1e-5
/* Finite differences: central, step FD_H in double on the double forward: truncation ~h^2 and
 * cancellation ~1e-16 / h, both far below the device's float32 error. The device's gradient is
 * held to FD_TOL of its error scale: the float32 forward output it starts from (softmax) and its
 * own sums. */
#define FD_H 1e-5
#define FD_TOL 1e-4

/* Central differences of f at x (n doubles) into g: g_i = (f(x + h e_i) - f(x - h e_i)) / 2h. */
typedef double (*fd_fn)(const double *x, void *arg);
static void finite_diff(double *x, size_t n, fd_fn f, void *arg, double *g)
{
    for (size_t i = 0; i < n; i++) {
        double x0 = x[i];
        x[i] = x0 + FD_H;
        double hi = f(x, arg);
        x[i] = x0 - FD_H;
        double lo = f(x, arg);
        x[i] = x0;
        g[i] = (hi - lo) / (2 * FD_H);
    }
}

/* ---- masked softmax ---- */

typedef struct {
    int rank;
    size_t dims[4];
    h_mask_spec mask;
    double scale;  /* scores uniform in [-scale, scale] */
    int inplace;   /* dscores = dout */
    int nan_dout;  /* > 0: dout's element nan_dout - 1 of every row is NaN */
} smb_case;

typedef struct {
    const ref_mask *m;
    const double *dy;
    double *y;
    size_t n;
} smb_fd;

/* sum_k dy_k softmax(x)_k over every row: its gradient is the softmax backward's output */
static double smb_loss(const double *x, void *arg)
{
    smb_fd *a = arg;
    double s = 0;
    ref_masked_softmax_d(a->m, x, a->y);
    for (size_t i = 0; i < a->n; i++)
        s += a->dy[i] * a->y[i];
    return s;
}

static void run_smb(const smb_case *c)
{
    h_mask hm;
    size_t n = 1, K = c->dims[c->rank - 1];
    for (int i = 0; i < c->rank; i++)
        n *= c->dims[i];
    float *x = malloc(n * 4), *dy = malloc(n * 4);
    double *ref = malloc(n * 8), *sc = malloc(n * 8);
    h_fill(x, n, -c->scale, c->scale);
    h_fill(dy, n, -1, 1);
    for (size_t i = c->nan_dout - 1; c->nan_dout && i < n; i += K)
        dy[i] = NAN;
    h_mask_make(&hm, &c->mask, c->rank, c->dims);
    clattn_tensor tx = h_tensor(CLATTN_FLOAT32, c->rank, c->dims, x);
    clattn_tensor ty = h_tensor(CLATTN_FLOAT32, c->rank, c->dims, NULL);
    clattn_tensor tdy = h_tensor(CLATTN_FLOAT32, c->rank, c->dims, dy);
    clattn_tensor tdx = c->inplace ? tdy : h_tensor(CLATTN_FLOAT32, c->rank, c->dims, NULL);
    if (!c->inplace)
        h_poison(&tdx);
    if (clattn_masked_softmax(h_ctx, &tx, &hm.m, &ty) != CLATTN_SUCCESS)
        fail_msg("masked_softmax: %s", clattn_last_error(h_ctx));
    if (clattn_masked_softmax_backward(h_ctx, &ty, &tdy, &hm.m, &tdx) != CLATTN_SUCCESS)
        fail_msg("masked_softmax_backward: %s", clattn_last_error(h_ctx));
    float *y = h_read(&ty), *got = h_read(&tdx);
    double *yd = ref_to_double(y, n), *dyd = ref_to_double(dy, n);
    ref_masked_softmax_backward(&hm.r, yd, dyd, ref, sc);
    char what[200];
    snprintf(what, sizeof what, "softmax backward rank %d (%d,%d,%d,%d) lens %d mask %d causal %d "
             "window %d%s", c->rank, hm.r.D0, hm.r.D1, hm.r.Q, hm.r.K, c->mask.lens,
             c->mask.mask_rank, c->mask.causal, c->mask.window, c->inplace ? " in place" : "");
    h_assert_scaled(got, ref, sc, n, GRAD_TOL, what);
    for (size_t i = 0; i < n; i++) /* blocked keys: exactly 0, whatever the row holds */
        if (ref[i] == 0.0 && got[i] != 0.0f)
            fail_msg("%s: element %zu of a blocked key is %.9g, not 0", what, i, got[i]);
    if (n <= 400 && !c->nan_dout) { /* the true gradient of the forward */
        double *xd = ref_to_double(x, n), *g = malloc(n * 8), *ybuf = malloc(n * 8), mag = 0;
        smb_fd a = {&hm.r, dyd, ybuf, n};
        finite_diff(xd, n, smb_loss, &a, g);
        /* the differences' own noise: a few double roundings of the whole sum over 2h */
        for (size_t i = 0; i < n; i++)
            mag += fabs(dyd[i] * yd[i]);
        for (size_t i = 0; i < n; i++)
            sc[i] += 1e-15 * mag / FD_H / FD_TOL;
        snprintf(what + strlen(what), sizeof what - strlen(what), " (finite differences)");
        h_assert_scaled(got, g, sc, n, FD_TOL, what);
        free(xd);
        free(g);
        free(ybuf);
    }
    free(y);
    free(got);
    free(yd);
    free(dyd);
    if (!c->inplace)
        clattn_tensor_release(&tdx);
    clattn_tensor_release(&tdy);
    clattn_tensor_release(&ty);
    clattn_tensor_release(&tx);
    h_mask_free(&hm);
    free(x);
    free(dy);
    free(ref);
    free(sc);
}

#define SMB_CASES(...)                                                \
    do {                                                              \
        const smb_case cs_[] = {__VA_ARGS__};                         \
        for (size_t i_ = 0; i_ < sizeof cs_ / sizeof cs_[0]; i_++)    \
            run_smb(&cs_[i_]);                                        \
    } while (0)

static void test_softmax_backward(void **s)
{
    (void)s;
    static const int l4[] = {0, 1, 4, 3}, l5[] = {5, 0, 2}, l2d[] = {0, 7, 3, 1, 7, 6};
    SMB_CASES({3, {1, 1, 1}, {0}, 3}, {1, {13}, {0}, 3}, {2, {5, 7}, {0}, 3},
              {3, {2, 3, 9}, {0}, 3}, {4, {2, 3, 4, 17}, {0}, 3},
              /* lengths 0 (uniform forward rows, zero gradients) to K, host and device */
              {3, {4, 2, 4}, {.lens = H_LENS_1D, .fixed_lens = l4}, 3},
              {3, {3, 2, 5}, {.lens = H_LENS_1D, .lens_on_device = 1, .fixed_lens = l5}, 3},
              {3, {2, 3, 7}, {.lens = H_LENS_2D, .fixed_lens = l2d}, 3},
              /* broadcast 0/1 masks, causal top-left and bottom-right, windows */
              {4, {2, 3, 4, 5}, {.mask_rank = 2, .mask_dims = {4, 5}}, 3},
              {4, {2, 3, 4, 5}, {.mask_rank = 4, .mask_dims = {2, 1, 4, 5}}, 3},
              {3, {2, 5, 5}, {.causal = 1}, 3},
              {3, {2, 3, 6}, {.causal = 1, .align = 1}, 3},
              {3, {2, 7, 9}, {.window = 1, .window_left = 2, .window_right = 1}, 3},
              {3, {2, 4, 9}, {.lens = H_LENS_1D, .causal = 1, .fill = -1e9f}, 3},
              /* large logits, in place, a NaN in dout (NaN rows but exact zeros where blocked) */
              {3, {2, 3, 11}, {.lens = H_LENS_2D}, 1000},
              {3, {3, 4, 16}, {.lens = H_LENS_1D}, 3, 1},
              {3, {2, 4, 15}, {.lens = H_LENS_1D, .fixed_lens = (const int[]){3, 9}}, 3, 0, 12});
    if (!h_small())
        SMB_CASES({3, {2, 5, 1000}, {.lens = H_LENS_2D}, 3},
                  {4, {2, 3, 4, 127}, {.mask_rank = 3, .mask_dims = {3, 1, 127}}, 3});
}

/* ---- dropout ---- */

static void test_dropout_backward(void **s)
{
    (void)s;
    const size_t n = h_small() ? 1003 : 20011;
    float *dy = malloc(n * 4), *fw = NULL;
    double *ref = malloc(n * 8);
    h_fill(dy, n, -2, 2);
    clattn_dropout_params p = {0.3f, 1, 77, 5};
    clattn_tensor tdy = h_tensor(CLATTN_FLOAT32, 1, H_DIMS(n), dy);
    clattn_tensor tdx = h_tensor(CLATTN_FLOAT32, 1, H_DIMS(n), NULL);
    clattn_tensor tfw = h_tensor(CLATTN_FLOAT32, 1, H_DIMS(n), NULL);
    h_poison(&tdx);
    if (clattn_dropout_backward(h_ctx, &tdy, &p, &tdx) != CLATTN_SUCCESS)
        fail_msg("dropout_backward: %s", clattn_last_error(h_ctx));
    float *got = h_read(&tdx);
    for (size_t i = 0; i < n; i++)
        ref[i] = dy[i];
    ref_dropout(ref, n, 0, p.seed, p.offset, p.p);
    /* dy * fl(1 / (1 - p)) rounded: the factor's rounding and the product's, u = 2^-24 each */
    h_assert_close(got, ref, n, 0x1p-23 * 1.01, 0, "dropout backward");
    /* the forward's mask: the forward of dy gives the same bits */
    if (clattn_dropout(h_ctx, &tdy, &p, &tfw) != CLATTN_SUCCESS)
        fail_msg("dropout: %s", clattn_last_error(h_ctx));
    fw = h_read(&tfw);
    assert_memory_equal(fw, got, n * 4);
    free(fw);
    free(got);
    clattn_tensor_release(&tfw);
    clattn_tensor_release(&tdx);
    clattn_tensor_release(&tdy);
    free(dy);
    free(ref);
}

/* ---- matmul ---- */

typedef struct {
    int M, N, K, ta, tb;
    int nb;            /* batches of C (0: 2-D C) */
    int a_shared, b_shared; /* 2-D A or B shared by the batches */
    float alpha;
} mmb_case;

typedef struct {
    const mmb_case *c;
    const double *other, *dC;
    int wrt_b;
} mmb_fd;

/* op(X) (r x c) element (i, j) of batch b of a (batch-strided, maybe transposed) operand */
static double op_at(const double *X, size_t bs, int b, int t, int r, int cc, int i, int j)
{
    return t ? X[b * bs + (size_t)j * r + i] : X[b * bs + (size_t)i * cc + j];
}

/* sum over C of dC * alpha op(A) op(B), as a function of A (or B when wrt_b) */
static double mmb_loss(const double *x, void *arg)
{
    mmb_fd *a = arg;
    const mmb_case *c = a->c;
    const double *A = a->wrt_b ? a->other : x, *B = a->wrt_b ? x : a->other;
    int nb = c->nb ? c->nb : 1;
    size_t abs_ = c->a_shared ? 0 : (size_t)c->M * c->K;
    size_t bbs = c->b_shared ? 0 : (size_t)c->K * c->N;
    double s = 0;
    for (int b = 0; b < nb; b++)
        for (int i = 0; i < c->M; i++)
            for (int j = 0; j < c->N; j++) {
                double v = 0;
                for (int k = 0; k < c->K; k++)
                    v += op_at(A, abs_, b, c->ta, c->M, c->K, i, k) *
                         op_at(B, bbs, b, c->tb, c->K, c->N, k, j);
                s += a->dC[((size_t)b * c->M + i) * c->N + j] * c->alpha * v;
            }
    return s;
}

static clattn_tensor operand(int nb, int shared, int rows, int cols, const float *host)
{
    return nb && !shared ? h_tensor(CLATTN_FLOAT32, 3, H_DIMS(nb, rows, cols), host)
                         : h_tensor(CLATTN_FLOAT32, 2, H_DIMS(rows, cols), host);
}

/* The gradient of one operand against finite differences of mmb_loss (which are exact but for
 * rounding: the loss is linear in each operand), with the error scale sum |dC| |other|. */
static void check_operand(const mmb_case *c, const float *got, const double *x, size_t n,
                          const double *other, const double *dC, int wrt_b, const char *what)
{
    double *xd = malloc(n * 8), *g = malloc(n * 8), *sc = malloc(n * 8), *oa = NULL, *da = NULL;
    memcpy(xd, x, n * 8);
    mmb_fd a = {c, other, dC, wrt_b};
    finite_diff(xd, n, mmb_loss, &a, g);
    /* the scale: the same derivative over |dC| and |other| */
    size_t no = wrt_b ? (size_t)(c->a_shared || !c->nb ? 1 : c->nb) * c->M * c->K
                      : (size_t)(c->b_shared || !c->nb ? 1 : c->nb) * c->K * c->N;
    size_t nc = (size_t)(c->nb ? c->nb : 1) * c->M * c->N;
    oa = malloc(no * 8);
    da = malloc(nc * 8);
    for (size_t i = 0; i < no; i++)
        oa[i] = fabs(other[i]);
    for (size_t i = 0; i < nc; i++)
        da[i] = fabs(dC[i]);
    mmb_fd b = {c, oa, da, wrt_b};
    for (size_t i = 0; i < n; i++)
        xd[i] = 0;
    finite_diff(xd, n, mmb_loss, &b, sc);
    for (size_t i = 0; i < n; i++)
        sc[i] = fabs(sc[i]) + 1e-30;
    h_assert_scaled(got, g, sc, n, GRAD_TOL, what);
    free(xd);
    free(g);
    free(sc);
    free(oa);
    free(da);
}

static void run_mmb(const mmb_case *c)
{
    int nb = c->nb ? c->nb : 1;
    size_t na = (size_t)(c->a_shared || !c->nb ? 1 : nb) * c->M * c->K;
    size_t nbb = (size_t)(c->b_shared || !c->nb ? 1 : nb) * c->K * c->N;
    size_t nc = (size_t)nb * c->M * c->N;
    float *A = malloc(na * 4), *B = malloc(nbb * 4), *dC = malloc(nc * 4);
    h_fill(A, na, -1, 1);
    h_fill(B, nbb, -1, 1);
    h_fill(dC, nc, -1, 1);
    int ar = c->ta ? c->K : c->M, ac = c->ta ? c->M : c->K;
    int br = c->tb ? c->N : c->K, bc = c->tb ? c->K : c->N;
    clattn_tensor tA = operand(c->nb, c->a_shared, ar, ac, A);
    clattn_tensor tB = operand(c->nb, c->b_shared, br, bc, B);
    clattn_tensor tdC = operand(c->nb, 0, c->M, c->N, dC);
    clattn_tensor tdA = operand(c->nb, c->a_shared, ar, ac, NULL);
    clattn_tensor tdB = operand(c->nb, c->b_shared, br, bc, NULL);
    h_poison(&tdA);
    h_poison(&tdB);
    if (clattn_matmul_backward(h_ctx, &tA, c->ta, &tB, c->tb, c->alpha, &tdC, &tdA, &tdB) !=
        CLATTN_SUCCESS)
        fail_msg("matmul_backward: %s", clattn_last_error(h_ctx));
    float *gA = h_read(&tdA), *gB = h_read(&tdB);
    double *Ad = ref_to_double(A, na), *Bd = ref_to_double(B, nbb), *dCd = ref_to_double(dC, nc);
    char what[160];
    snprintf(what, sizeof what, "matmul backward M %d N %d K %d ta %d tb %d batches %d shared %d%d "
             "alpha %g: dA", c->M, c->N, c->K, c->ta, c->tb, c->nb, c->a_shared, c->b_shared,
             (double)c->alpha);
    check_operand(c, gA, Ad, na, Bd, dCd, 0, what);
    what[strlen(what) - 1] = 'B';
    check_operand(c, gB, Bd, nbb, Ad, dCd, 1, what);
    free(gA);
    free(gB);
    free(Ad);
    free(Bd);
    free(dCd);
    clattn_tensor *ts[] = {&tA, &tB, &tdC, &tdA, &tdB};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        clattn_tensor_release(ts[i]);
    free(A);
    free(B);
    free(dC);
}

static void test_matmul_backward(void **s)
{
    (void)s;
    static const mmb_case cs[] = {
        {1, 1, 1, 0, 0, 0, 0, 0, 1}, {5, 7, 3, 0, 0, 0, 0, 0, 1}, {5, 7, 3, 1, 0, 0, 0, 0, 2},
        {5, 7, 3, 0, 1, 0, 0, 0, -0.5f}, {6, 4, 9, 1, 1, 0, 0, 0, 1},
        {4, 3, 5, 0, 0, 3, 0, 0, 1}, {4, 3, 5, 1, 1, 2, 0, 0, 1.5f},
        /* a shared operand's gradient sums the batches */
        {4, 3, 5, 0, 0, 3, 1, 0, 1}, {4, 3, 5, 1, 0, 3, 0, 1, 1}, {3, 6, 2, 0, 1, 4, 0, 1, 1},
        {17, 15, 33, 0, 1, 2, 1, 0, 1}};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
        run_mmb(&cs[i]);
}

/* ---- linear ---- */

typedef struct {
    int rank;
    size_t lead[3]; /* x (lead..., in) */
    int in, out;
} lb_case;

static void run_lb(const lb_case *c)
{
    size_t rows = 1, xd[4], yd[4];
    for (int i = 0; i < c->rank - 1; i++) {
        rows *= c->lead[i];
        xd[i] = yd[i] = c->lead[i];
    }
    xd[c->rank - 1] = (size_t)c->in;
    yd[c->rank - 1] = (size_t)c->out;
    size_t nx = rows * c->in, nw = (size_t)c->out * c->in, ny = rows * c->out;
    float *x = malloc(nx * 4), *W = malloc(nw * 4), *dy = malloc(ny * 4);
    h_fill(x, nx, -1, 1);
    h_fill(W, nw, -1, 1);
    h_fill(dy, ny, -1, 1);
    clattn_tensor tx = h_tensor(CLATTN_FLOAT32, c->rank, xd, x);
    clattn_tensor tW = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(c->out, c->in), W);
    clattn_tensor tdy = h_tensor(CLATTN_FLOAT32, c->rank, yd, dy);
    clattn_tensor tdx = h_tensor(CLATTN_FLOAT32, c->rank, xd, NULL);
    clattn_tensor tdW = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(c->out, c->in), NULL);
    clattn_tensor tdb = h_tensor(CLATTN_FLOAT32, 1, H_DIMS(c->out), NULL);
    h_poison(&tdx);
    h_poison(&tdW);
    h_poison(&tdb);
    if (clattn_linear_backward(h_ctx, &tx, &tW, &tdy, &tdx, &tdW, &tdb) != CLATTN_SUCCESS)
        fail_msg("linear_backward: %s", clattn_last_error(h_ctx));
    float *gx = h_read(&tdx), *gW = h_read(&tdW), *gb = h_read(&tdb);
    /* y = x W^T + b is matmul(x, W^T) plus b: its x and W gradients are those of that product
     * (checked against finite differences by the matmul test), here computed in double; db sums
     * dy over the rows */
    double *Xd = ref_to_double(x, nx), *Wd = ref_to_double(W, nw), *dYd = ref_to_double(dy, ny);
    double *rx = malloc(nx * 8), *rw = malloc(nw * 8), *rb = malloc((size_t)c->out * 8);
    double *sx = malloc(nx * 8), *sw = malloc(nw * 8), *sb = malloc((size_t)c->out * 8);
    ref_gemm((int)rows, c->in, c->out, dYd, 0, Wd, 0, rx);
    ref_gemm(c->out, c->in, (int)rows, dYd, 1, Xd, 0, rw);
    for (size_t i = 0; i < nx; i++)
        Xd[i] = fabs(Xd[i]);
    for (size_t i = 0; i < nw; i++)
        Wd[i] = fabs(Wd[i]);
    for (size_t i = 0; i < ny; i++)
        dYd[i] = fabs(dYd[i]);
    ref_gemm((int)rows, c->in, c->out, dYd, 0, Wd, 0, sx);
    ref_gemm(c->out, c->in, (int)rows, dYd, 1, Xd, 0, sw);
    for (int j = 0; j < c->out; j++) {
        rb[j] = sb[j] = 0;
        for (size_t r = 0; r < rows; r++) {
            rb[j] += dy[r * c->out + j];
            sb[j] += fabs(dy[r * c->out + j]);
        }
    }
    char what[120];
    snprintf(what, sizeof what, "linear backward rows %zu in %d out %d", rows, c->in, c->out);
    h_assert_scaled(gx, rx, sx, nx, GRAD_TOL, what);
    h_assert_scaled(gW, rw, sw, nw, GRAD_TOL, what);
    h_assert_scaled(gb, rb, sb, (size_t)c->out, GRAD_TOL, what);
    free(gx); free(gW); free(gb);
    free(Xd); free(Wd); free(dYd);
    free(rx); free(rw); free(rb); free(sx); free(sw); free(sb);
    clattn_tensor *ts[] = {&tx, &tW, &tdy, &tdx, &tdW, &tdb};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        clattn_tensor_release(ts[i]);
    free(x);
    free(W);
    free(dy);
}

static void test_linear_backward(void **s)
{
    (void)s;
    static const lb_case cs[] = {{2, {1}, 1, 1},     {2, {7}, 5, 3},       {3, {2, 3}, 4, 17},
                                 {3, {3, 5}, 16, 15}, {4, {2, 3, 4}, 9, 33}, {2, {300}, 20, 31}};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
        run_lb(&cs[i]);
    if (!h_small()) {
        const lb_case big = {3, {4, 1000}, 64, 48};
        run_lb(&big);
    }
}

/* ---- dot-product attention ---- */

typedef struct {
    int rank;         /* 3: (B, Q, d); 4: (B, H, Q, d) with K and V of Hkv heads */
    int B, H, Hkv, nq, nk, d, dv;
    h_mask_spec mask; /* over the scores (B, [H,] nq, nk); bias and ALiBi too */
    double qscale;    /* Q uniform in [-qscale, qscale] (0: 1) */
    float p;          /* dropout */
    int only;         /* 0: every gradient; else a bitmask of them: 1 dQ, 2 dK, 4 dV, 8 dbias */
} atb_case;

/* The inputs of one case as doubles: Q (nb, nq, d), K and V per K/V head, the bias (in the
 * mask), and the forward's double reference over K and V expanded to every query head. */
typedef struct {
    const atb_case *c;
    h_mask *hm;
    double *q, *k, *v, *dout, scale;
    ref_dropout_params drop;
} atb_in;

static void expand_kv(const atb_in *a, double *kx, double *vx)
{
    const atb_case *c = a->c;
    int nbq = c->B * (c->rank == 4 ? c->H : 1), G = c->rank == 4 ? c->H / c->Hkv : 1;
    for (int b = 0; b < nbq; b++) {
        int kvb = b / G; /* (B, H) flat -> (B, Hkv) flat: H = G Hkv */
        memcpy(kx + (size_t)b * c->nk * c->d, a->k + (size_t)kvb * c->nk * c->d,
               (size_t)c->nk * c->d * 8);
        memcpy(vx + (size_t)b * c->nk * c->dv, a->v + (size_t)kvb * c->nk * c->dv,
               (size_t)c->nk * c->dv * 8);
    }
}

/* sum of dout * out over everything: its gradients are the backward's */
static double atb_loss(const double *unused, void *arg)
{
    (void)unused;
    atb_in *a = arg;
    const atb_case *c = a->c;
    int nbq = c->B * (c->rank == 4 ? c->H : 1);
    size_t nw = (size_t)nbq * c->nq * c->nk, no = (size_t)nbq * c->nq * c->dv;
    double *kx = malloc((size_t)nbq * c->nk * c->d * 8);
    double *vx = malloc((size_t)nbq * c->nk * c->dv * 8);
    double *w = malloc(nw * 8), *o = malloc(no * 8), s = 0;
    expand_kv(a, kx, vx);
    ref_attention(&a->hm->r, c->d, c->dv, a->q, kx, vx, a->scale, &a->drop, w, o);
    for (size_t i = 0; i < no; i++)
        s += a->dout[i] * o[i];
    free(kx);
    free(vx);
    free(w);
    free(o);
    return s;
}

/* Central differences of atb_loss over the n values at x (one of a's inputs, changed in place). */
static void atb_fd(atb_in *a, double *x, size_t n, double *g)
{
    finite_diff(x, n, atb_loss, a, g);
}

static void check_atb(const clattn_tensor *t, const double *ref, double *sc, size_t n,
                      double fd_noise,
                      const double *fd, const char *what, const char *grad)
{
    char w[300];
    float *got = h_read(t);
    snprintf(w, sizeof w, "%s: %s", what, grad);
    h_assert_scaled(got, ref, sc, n, GRAD_TOL, w);
    if (fd) {
        for (size_t i = 0; i < n; i++)
            sc[i] += fd_noise / FD_TOL;
        snprintf(w, sizeof w, "%s: %s (finite differences)", what, grad);
        h_assert_scaled(got, fd, sc, n, FD_TOL, w);
    }
    free(got);
}

/* fused: the forward's out and LSE go to the backward, which then takes the fused path where the
 * backward variant is fused and no dbias is asked for (else the chain, as without them). */
static void run_atb(const atb_case *c, int fused)
{
    int r4 = c->rank == 4, H = r4 ? c->H : 1, Hkv = r4 ? c->Hkv : 1, G = H / Hkv;
    size_t nbq = (size_t)c->B * H, nbk = (size_t)c->B * Hkv;
    size_t nq_ = nbq * c->nq * c->d, nk_ = nbk * c->nk * c->d, nv_ = nbk * c->nk * c->dv;
    size_t no = nbq * c->nq * c->dv, ns = nbq * c->nq * c->nk;
    size_t qd[4], kd[4], vd[4], od[4], sd[4];
    int i0 = 0;
    qd[i0] = kd[i0] = vd[i0] = od[i0] = sd[i0] = (size_t)c->B;
    i0++;
    if (r4) {
        qd[i0] = od[i0] = sd[i0] = (size_t)H;
        kd[i0] = vd[i0] = (size_t)Hkv;
        i0++;
    }
    qd[i0] = od[i0] = sd[i0] = (size_t)c->nq;
    kd[i0] = vd[i0] = (size_t)c->nk;
    qd[i0 + 1] = kd[i0 + 1] = (size_t)c->d;
    vd[i0 + 1] = od[i0 + 1] = (size_t)c->dv;
    sd[i0 + 1] = (size_t)c->nk;
    float *q = malloc(nq_ * 4), *k = malloc(nk_ * 4), *v = malloc(nv_ * 4), *dO = malloc(no * 4);
    double qs = c->qscale > 0 ? c->qscale : 1;
    h_fill(q, nq_, -qs, qs);
    h_fill(k, nk_, -1, 1);
    h_fill(v, nv_, -1, 1);
    h_fill(dO, no, -1, 1);
    h_mask hm;
    h_mask_make(&hm, &c->mask, c->rank, sd);
    clattn_tensor tq = h_tensor(CLATTN_FLOAT32, c->rank, qd, q);
    clattn_tensor tk = h_tensor(CLATTN_FLOAT32, c->rank, kd, k);
    clattn_tensor tv = h_tensor(CLATTN_FLOAT32, c->rank, vd, v);
    clattn_tensor tdo = h_tensor(CLATTN_FLOAT32, c->rank, od, dO);
    clattn_tensor to = h_tensor(CLATTN_FLOAT32, c->rank, od, NULL);
    clattn_tensor tl = h_tensor(CLATTN_FLOAT32, c->rank - 1, sd, NULL);
    clattn_attention_opts opts;
    memset(&opts, 0, sizeof opts);
    opts.mask = hm.m;
    opts.dropout = (clattn_dropout_params){c->p, 1, 1234, 7};
    opts.bias = hm.tb.buf ? &hm.tb : NULL;
    opts.alibi_slopes = hm.ta.buf ? &hm.ta : NULL;
    int want = c->only ? c->only : 7 | (opts.bias ? 8 : 0);
    clattn_tensor tdq = h_tensor(CLATTN_FLOAT32, c->rank, qd, NULL);
    clattn_tensor tdk = h_tensor(CLATTN_FLOAT32, c->rank, kd, NULL);
    clattn_tensor tdv = h_tensor(CLATTN_FLOAT32, c->rank, vd, NULL);
    clattn_tensor tdb = opts.bias ? h_tensor(CLATTN_FLOAT32, hm.tb.ndim, hm.tb.dims, NULL)
                                  : (clattn_tensor){0};
    clattn_attention_grads g = {want & 1 ? &tdq : NULL, want & 2 ? &tdk : NULL,
                                want & 4 ? &tdv : NULL, want & 8 ? &tdb : NULL};
    h_poison(&tdq);
    h_poison(&tdk);
    h_poison(&tdv);
    if (opts.bias)
        h_poison(&tdb);
    if (fused) {
        opts.lse = &tl;
        if (clattn_dot_product_attention(h_ctx, &tq, &tk, &tv, &opts, &to, NULL) != CLATTN_SUCCESS)
            fail_msg("dot_product_attention: %s", clattn_last_error(h_ctx));
    }
    if (clattn_dot_product_attention_backward(h_ctx, &tq, &tk, &tv, &opts, fused ? &to : NULL,
                                              &tdo, &g) != CLATTN_SUCCESS)
        fail_msg("dot_product_attention_backward: %s", clattn_last_error(h_ctx));
    /* the reference, K and V expanded to the query heads, their gradients summed back */
    atb_in a = {c, &hm, ref_to_double(q, nq_), ref_to_double(k, nk_), ref_to_double(v, nv_),
                ref_to_double(dO, no), 1.0 / sqrt((double)c->d), {c->p, 1234, 7}};
    double *kx = malloc(nbq * c->nk * c->d * 8), *vx = malloc(nbq * c->nk * c->dv * 8);
    double *rq = malloc(nq_ * 8), *rkx = malloc(nbq * c->nk * c->d * 8);
    double *rvx = malloc(nbq * c->nk * c->dv * 8), *rds = malloc(ns * 8);
    double *sq = malloc(nq_ * 8), *skx = malloc(nbq * c->nk * c->d * 8);
    double *svx = malloc(nbq * c->nk * c->dv * 8), *sds = malloc(ns * 8);
    expand_kv(&a, kx, vx);
    ref_attention_backward(&hm.r, c->d, c->dv, a.q, kx, vx, a.scale, &a.drop, a.dout, rq, rkx, rvx,
                           rds, sq, skx, svx, sds);
    double *rk = calloc(nk_, 8), *rv = calloc(nv_, 8), *sk = calloc(nk_, 8), *sv = calloc(nv_, 8);
    for (size_t b = 0; b < nbq; b++) {
        size_t kb = b / (size_t)G;
        for (size_t i = 0; i < (size_t)c->nk * c->d; i++) {
            rk[kb * c->nk * c->d + i] += rkx[b * c->nk * c->d + i];
            sk[kb * c->nk * c->d + i] += skx[b * c->nk * c->d + i];
        }
        for (size_t i = 0; i < (size_t)c->nk * c->dv; i++) {
            rv[kb * c->nk * c->dv + i] += rvx[b * c->nk * c->dv + i];
            sv[kb * c->nk * c->dv + i] += svx[b * c->nk * c->dv + i];
        }
    }
    size_t nbias = opts.bias ? clattn_tensor_numel(&hm.tb) : 0;
    double *rb = calloc(nbias + 1, 8), *sb = calloc(nbias + 1, 8);
    for (size_t e = 0; e < ns && nbias; e++) { /* each score element adds to its bias element */
        size_t kk = e % c->nk, qq = e / c->nk % c->nq, b = e / c->nk / c->nq;
        size_t d0 = b / (size_t)hm.r.D1, d1 = b % (size_t)hm.r.D1;
        size_t bi = hm.r.bs[0] * d0 + hm.r.bs[1] * d1 + hm.r.bs[2] * qq + hm.r.bs[3] * kk;
        rb[bi] += rds[e];
        sb[bi] += sds[e];
    }
    for (size_t i = 0; i < nbias; i++)
        sb[i] += 1e-30;
    int fd = nq_ + nk_ + nv_ <= 600 && nbias <= 300;
    double noise = 0, *gq = NULL, *gk = NULL, *gv = NULL, *gb = NULL;
    if (fd) { /* the FD's own noise: double roundings of the sum (|out| <= max |v| = 1) over 2h */
        for (size_t i = 0; i < no; i++)
            noise += fabs(a.dout[i]);
        noise = 1e-15 * (noise + 1) / FD_H;
        gq = malloc(nq_ * 8);
        gk = malloc(nk_ * 8);
        gv = malloc(nv_ * 8);
        gb = malloc((nbias + 1) * 8);
        atb_fd(&a, a.q, nq_, gq);
        atb_fd(&a, a.k, nk_, gk);
        atb_fd(&a, a.v, nv_, gv);
        if (nbias)
            atb_fd(&a, hm.bias, nbias, gb);
    }
    char what[240];
    snprintf(what, sizeof what, "attention backward rank %d B %d H %d/%d Q %d K %d d %d dv %d "
             "lens %d "
             "mask %d causal %d align %d window %d bias %d alibi %d p %g%s", c->rank, c->B, H,
             Hkv, c->nq, c->nk, c->d, c->dv, c->mask.lens, c->mask.mask_rank, c->mask.causal,
             c->mask.align, c->mask.window, c->mask.bias_rank, c->mask.alibi_rank, (double)c->p,
             fused ? " (out and LSE given)" : "");
    if (want & 1)
        check_atb(&tdq, rq, sq, nq_, noise, gq, what, "dQ");
    if (want & 2)
        check_atb(&tdk, rk, sk, nk_, noise, gk, what, "dK");
    if (want & 4)
        check_atb(&tdv, rv, sv, nv_, noise, gv, what, "dV");
    if (want & 8)
        check_atb(&tdb, rb, sb, nbias, noise, nbias ? gb : NULL, what, "dbias");
    /* gradients not asked for stay untouched (poisoned) */
    const clattn_tensor *skipped[3] = {&tdq, &tdk, &tdv};
    for (int i = 0; i < 3; i++)
        if (!(want & (1 << i))) {
            float *x = h_read(skipped[i]);
            if (!isnan(x[0]))
                fail_msg("%s: a gradient not asked for was written", what);
            free(x);
        }
    double *frees[] = {a.q, a.k, a.v, a.dout, kx, vx, rq, rkx, rvx, rds, sq, skx, svx, sds,
                       rk, rv, sk, sv, rb, sb, gq, gk, gv, gb};
    for (size_t i = 0; i < sizeof frees / sizeof frees[0]; i++)
        free(frees[i]);
    clattn_tensor *ts[] = {&tq, &tk, &tv, &tdo, &to, &tl, &tdq, &tdk, &tdv};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        clattn_tensor_release(ts[i]);
    if (opts.bias)
        clattn_tensor_release(&tdb);
    h_mask_free(&hm);
    free(q);
    free(k);
    free(v);
    free(dO);
}

#define ATB_CASES(...)                                                \
    do {                                                              \
        const atb_case cs_[] = {__VA_ARGS__};                         \
        for (size_t i_ = 0; i_ < sizeof cs_ / sizeof cs_[0]; i_++) {  \
            run_atb(&cs_[i_], 0);                                     \
            run_atb(&cs_[i_], 1);                                     \
        }                                                             \
    } while (0)

static void test_attention_backward(void **s)
{
    (void)s;
    static const int l4[] = {0, 5, 2, 3}, l2[] = {7, 0}, l130[] = {0, 130, 65};
    ATB_CASES({3, 1, 0, 0, 1, 1, 1, 1}, {3, 2, 0, 0, 5, 7, 3, 4}, {3, 3, 0, 0, 4, 3, 5, 2},
              /* grouped-query heads: dK and dV sum over each K/V head's query heads */
              {4, 2, 4, 2, 3, 5, 4, 3}, {4, 1, 3, 1, 4, 6, 2, 5}, {4, 2, 2, 2, 3, 4, 3, 3},
              /* lengths 0 (uniform rows: gradients in dV only) to K, 2-D, on the device */
              {3, 4, 0, 0, 3, 5, 4, 3, {.lens = H_LENS_1D, .fixed_lens = l4}},
              {3, 2, 0, 0, 4, 7, 3, 2, {.lens = H_LENS_2D}},
              {4, 2, 2, 1, 3, 7, 2, 3, {.lens = H_LENS_1D, .lens_on_device = 1, .fixed_lens = l2}},
              /* 0/1 masks, causal both ways, windows, a -inf fill */
              {4, 2, 2, 2, 4, 5, 3, 3, {.mask_rank = 4, .mask_dims = {2, 1, 4, 5}}},
              {4, 2, 2, 2, 4, 37, 3, 3, {.mask_rank = 4, .mask_dims = {2, 1, 4, 1}}},
              {3, 2, 0, 0, 5, 5, 3, 4, {.causal = 1}},
              {3, 2, 0, 0, 3, 6, 3, 2, {.causal = 1, .align = 1}},
              {3, 2, 0, 0, 6, 8, 2, 3, {.window = 1, .window_left = 2, .window_right = 1}},
              {3, 2, 0, 0, 5, 5, 3, 4, {.causal = 1, .fill = -INFINITY}},
              /* float biases broadcast over heads and rows (dbias sums them), ALiBi */
              {4, 2, 2, 1, 3, 5, 3, 2, {.bias_rank = 2, .bias_dims = {3, 5}}},
              {4, 2, 3, 3, 3, 4, 2, 3, {.bias_rank = 4, .bias_dims = {1, 3, 1, 4}, .causal = 1}},
              /* one bias per row (a shift the softmax ignores: dbias sums dS over the keys) */
              {4, 2, 2, 2, 3, 9, 3, 2, {.bias_rank = 4, .bias_dims = {2, 1, 3, 1}}},
              {4, 2, 2, 2, 3, 4, 3, 2, {.alibi_rank = 1, .alibi_dims = {2}, .lens = H_LENS_1D}},
              /* dropout through the forward's Philox stream */
              {3, 2, 0, 0, 4, 6, 3, 3, {0}, 0, 0.3f},
              {4, 2, 2, 1, 3, 5, 2, 3, {.causal = 1}, 0, 0.5f},
              /* large logits, some gradients only, the forward's out and LSE passed along */
              {3, 2, 0, 0, 4, 9, 8, 3, {.lens = H_LENS_1D}, 30},
              {3, 2, 0, 0, 4, 5, 3, 3, {0}, 0, 0, 4},
              {3, 2, 0, 0, 4, 5, 3, 3, {0}, 0, 0, 3}, {4, 2, 2, 2, 4, 5, 3, 3, {0}, 0, 0, 6},
              /* biases without dbias: the fused path takes them too */
              {4, 2, 2, 1, 3, 5, 3, 2, {.bias_rank = 2, .bias_dims = {3, 5}}, 0, 0, 7},
              {4, 2, 3, 3, 3, 4, 2, 3, {.bias_rank = 4, .bias_dims = {1, 3, 1, 4}, .causal = 1},
               0, 0, 7});
    if (!h_small()) /* larger: the analytic reference only; several key blocks, some skipped */
        ATB_CASES({4, 2, 4, 2, 33, 47, 16, 24, {.lens = H_LENS_2D, .causal = 1, .align = 1}},
                  {4, 1, 8, 2, 65, 129, 64, 32, {.bias_rank = 2, .bias_dims = {65, 129}}, 0, 0.2f},
                  {4, 1, 2, 1, 131, 131, 17, 33, {.causal = 1}},
                  {4, 1, 3, 3, 67, 200, 24, 16, {.causal = 1, .align = 1, .fill = -INFINITY}},
                  {3, 2, 0, 0, 97, 150, 16, 16, {.window = 1, .window_left = 20,
                                                 .window_right = 5, .alibi_rank = 1,
                                                 .alibi_dims = {2}}},
                  {3, 3, 0, 0, 40, 130, 8, 8, {.lens = H_LENS_1D, .fixed_lens = l130}, 0, 0.3f},
                  {4, 1, 2, 2, 70, 129, 16, 8, {.bias_rank = 4, .bias_dims = {1, 2, 70, 129},
                                                .causal = 1}, 0, 0, 7});
}

/* ---- the fused backward against the chain on NaN, infinities and blocked rows ---- */

typedef struct {
    int H, nq, nk, d;   /* rank 4 (1, H, nq, d), K and V hkv heads (grouped-query: G = H / hkv) */
    h_mask_spec mask;
    char which;         /* the operand given a non-finite value: 'q', 'k', 'v', 'o' (dout), 0 */
    int at;             /* its row */
    float value;
    double qscale;      /* Q uniform in [-qscale, qscale] (0: 1) */
    int hkv;            /* K/V heads (0: 1); the non-finite K or V value is in head 0 only */
} nf_case;

/* 1 when a and b agree: NaN where the other is NaN, the same infinity, else within tol of each
 * other relative to the tensor's largest finite magnitude (float32 sums in other orders). */
static int nf_agree(float a, float b, double big)
{
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b);
    if (isinf(a) || isinf(b))
        return a == b;
    return fabs((double)a - b) <= 2e-5 * (big + 1e-30);
}

static void run_nf(const nf_case *c)
{
    size_t qd[4] = {1, (size_t)c->H, (size_t)c->nq, (size_t)c->d};
    size_t hkv = c->hkv > 0 ? (size_t)c->hkv : 1;
    size_t kd[4] = {1, hkv, (size_t)c->nk, (size_t)c->d}, sd[4] = {1, (size_t)c->H, (size_t)c->nq,
                                                                  (size_t)c->nk};
    size_t nq_ = (size_t)c->H * c->nq * c->d, nk_ = hkv * c->nk * c->d;
    float *q = malloc(nq_ * 4), *k = malloc(nk_ * 4), *v = malloc(nk_ * 4), *g = malloc(nq_ * 4);
    double qs = c->qscale > 0 ? c->qscale : 1;
    h_fill(q, nq_, -qs, qs);
    h_fill(k, nk_, -1, 1);
    h_fill(v, nk_, -1, 1);
    h_fill(g, nq_, -1, 1);
    float *t = c->which == 'q' ? q : c->which == 'k' ? k : c->which == 'v' ? v : g;
    if (c->which)
        t[(size_t)c->at * c->d + (size_t)c->at % c->d] = c->value;
    h_mask hm;
    h_mask_make(&hm, &c->mask, 4, sd);
    clattn_tensor tq = h_tensor(CLATTN_FLOAT32, 4, qd, q), tk = h_tensor(CLATTN_FLOAT32, 4, kd, k);
    clattn_tensor tv = h_tensor(CLATTN_FLOAT32, 4, kd, v), tg = h_tensor(CLATTN_FLOAT32, 4, qd, g);
    clattn_tensor to = h_tensor(CLATTN_FLOAT32, 4, qd, NULL);
    clattn_tensor tl = h_tensor(CLATTN_FLOAT32, 3, sd, NULL);
    clattn_tensor d[2][3];
    clattn_attention_opts opts;
    memset(&opts, 0, sizeof opts);
    opts.mask = hm.m;
    opts.bias = hm.tb.buf ? &hm.tb : NULL;
    opts.alibi_slopes = hm.ta.buf ? &hm.ta : NULL;
    opts.lse = &tl;
    if (clattn_dot_product_attention(h_ctx, &tq, &tk, &tv, &opts, &to, NULL) != CLATTN_SUCCESS)
        fail_msg("dot_product_attention: %s", clattn_last_error(h_ctx));
    for (int f = 0; f < 2; f++) { /* f 0: the chain (no out, no LSE), 1: fused */
        d[f][0] = h_tensor(CLATTN_FLOAT32, 4, qd, NULL);
        d[f][1] = h_tensor(CLATTN_FLOAT32, 4, kd, NULL);
        d[f][2] = h_tensor(CLATTN_FLOAT32, 4, kd, NULL);
        for (int i = 0; i < 3; i++)
            h_poison(&d[f][i]);
        clattn_attention_grads gr = {&d[f][0], &d[f][1], &d[f][2], NULL};
        clattn_attention_opts o = opts;
        o.lse = f ? &tl : NULL;
        if (clattn_dot_product_attention_backward(h_ctx, &tq, &tk, &tv, &o, f ? &to : NULL, &tg,
                                                  &gr) != CLATTN_SUCCESS)
            fail_msg("dot_product_attention_backward: %s", clattn_last_error(h_ctx));
    }
    static const char *const names[3] = {"dQ", "dK", "dV"};
    for (int i = 0; i < 3; i++) {
        float *a = h_read(&d[0][i]), *b = h_read(&d[1][i]);
        size_t n = clattn_tensor_numel(&d[0][i]);
        double big = 0;
        for (size_t e = 0; e < n; e++)
            if (isfinite(a[e]))
                big = fmax(big, fabs(a[e]));
        for (size_t e = 0; e < n; e++)
            if (!nf_agree(a[e], b[e], big))
                fail_msg("fused backward vs chain, H %d/%zu Q %d K %d d %d, %c row %d = %g, "
                         "lens %d causal %d fill %g: %s[%zu] is %g fused, %g by the chain", c->H, hkv,
                         c->nq, c->nk, c->d, c->which ? c->which : '-', c->at, (double)c->value,
                         c->mask.lens, c->mask.causal, (double)c->mask.fill, names[i], e,
                         (double)b[e], (double)a[e]);
        free(a);
        free(b);
    }
    clattn_tensor *ts[] = {&tq, &tk, &tv, &tg, &to, &tl, &d[0][0], &d[0][1], &d[0][2], &d[1][0],
                           &d[1][1], &d[1][2]};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        clattn_tensor_release(ts[i]);
    h_mask_free(&hm);
    free(q);
    free(k);
    free(v);
    free(g);
}

/* Causal masks and short lengths make the fused backward skip tiles; a NaN or an infinity in a
 * row it would skip must still spread as the chain's products spread it (0 x inf), and blocked
 * rows get the chain's uniform weights (finite fill) or NaN (-inf). */
static void test_backward_nonfinite(void **s)
{
    (void)s;
    static const int l3[] = {0, 1, 0}, lz[] = {0};
    const float inf = INFINITY, nan = NAN;
    const nf_case cs[] = {
        {2, 70, 70, 8, {.causal = 1}, 'q', 3, inf},
        {2, 70, 70, 8, {.causal = 1}, 'q', 65, nan},
        {2, 70, 70, 8, {.causal = 1}, 'k', 66, -inf},
        {2, 70, 70, 8, {.causal = 1}, 'k', 2, nan},
        {2, 70, 70, 8, {.causal = 1}, 'v', 68, nan},
        {2, 70, 70, 8, {.causal = 1}, 'v', 1, inf},
        {2, 70, 70, 8, {.causal = 1}, 'o', 0, inf},
        {2, 70, 70, 8, {.causal = 1}, 'o', 69, nan},
        /* an infinity in dout where the row sees many keys: dP of both signs, D NaN in the chain
         * (dout . out would be +-inf); with blocked keys, 0 x inf there */
        {2, 70, 70, 8, {0}, 'o', 5, inf},
        {2, 70, 70, 8, {.causal = 1, .fill = -INFINITY}, 'o', 45, -inf},
        {3, 70, 70, 8, {.causal = 1, .fill = -INFINITY}, 'k', 69, inf},
        /* two K/V heads, the value in the first: each head's blocks keep their own flags */
        {4, 70, 70, 8, {.causal = 1}, 'k', 66, -inf, 0, 2},
        {4, 70, 70, 8, {.causal = 1}, 'v', 68, nan, 0, 2},
        {1, 3, 150, 8, {.lens = H_LENS_2D, .fixed_lens = l3}, 0, 0, 0},
        {1, 3, 150, 8, {.lens = H_LENS_2D, .fixed_lens = l3, .fill = -INFINITY}, 0, 0, 0},
        {1, 1, 100, 8, {.lens = H_LENS_1D, .fixed_lens = lz}, 'v', 99, nan},
        {2, 40, 90, 8, {.window = 1, .window_left = 3, .window_right = 0}, 'q', 39, inf},
        {2, 40, 90, 8, {.window = 1, .window_left = 3, .window_right = 0}, 'k', 89, nan},
        /* large logits and -inf in a float bias */
        {2, 70, 70, 8, {.causal = 1}, 0, 0, 0, 300},
        {2, 33, 80, 8, {.bias_rank = 2, .bias_dims = {33, 80}, .bias_ninf = 3}, 0, 0, 0},
        /* rows a bias pushes down whole (padded queries): an LSE of -1e9 is -1e9 exactly, too
         * coarse to recompute 1 / K from; at -1e6 it is off by up to 0.03 */
        {2, 33, 80, 8, {.bias_rank = 2, .bias_dims = {33, 80}, .bias_row_fill = -1e9f}, 0, 0, 0},
        {2, 7, 70, 8, {.bias_rank = 3, .bias_dims = {2, 7, 70}, .bias_row_fill = -1e6f,
                       .causal = 1, .align = 1}, 0, 0, 0, 0, 1},
        {4, 9, 20, 8, {.bias_rank = 2, .bias_dims = {9, 20}, .bias_row_fill = -FLT_MAX,
                       .alibi_rank = 1, .alibi_dims = {4}}, 0, 0, 0, 0, 2},
        /* rows a bias shifts up by 1e4 (which the softmax ignores): the LSE's rounding, up to
         * 5e-4, would be the weights' error */
        {2, 30, 40, 8, {.bias_rank = 2, .bias_dims = {30, 40}, .bias_row_fill = 1e4f}, 0, 0, 0},
    };
    /* under Oclgrind (CLATTN_TEST_SMALL) one case of each kind: Q, K, V, dout (one key and
     * many), blocked rows, large logits, coarse LSEs */
    static const int small[] = {0, 2, 4, 6, 8, 14, 18, 22};
    size_t n = h_small() ? sizeof small / sizeof small[0] : sizeof cs / sizeof cs[0];
    for (size_t i = 0; i < n; i++)
        run_nf(&cs[h_small() ? (size_t)small[i] : i]);
}

/* ---- multi-head attention ---- */

typedef struct {
    int B, nq, nk, qs, ks, vs, H, Hkv, dh, os;
    int bias;         /* the four projection biases */
    h_mask_spec mask; /* over the scores (B, H, nq, nk) */
    float p;
} mhb_case;

/* Every parameter as doubles, in one array so finite differences can walk them all. */
enum { P_Q, P_K, P_V, P_WQ, P_WK, P_WV, P_WO, P_BQ, P_BK, P_BV, P_BO, P_N };
typedef struct {
    const mhb_case *c;
    h_mask *hm;
    size_t n[P_N], at[P_N];
    double *x; /* all parameters, parameter i at x + at[i] */
    double *dout;
} mhb_in;

/* y (rows, out) = x (rows, in) W^T + b (b may be NULL) */
static void lin_d(size_t rows, int in, int out, const double *x, const double *W, const double *b,
                  double *y)
{
    ref_gemm((int)rows, out, in, x, 0, W, 1, y);
    for (size_t r = 0; b && r < rows; r++)
        for (int j = 0; j < out; j++)
            y[r * out + j] += b[j];
}

/* (B, T, H*dh) -> (B, H, T, dh), the heads of K/V repeated to H query heads (G = H / Hkv) */
static double *to_heads(const double *x, int B, int T, int Hx, int H, int dh)
{
    double *y = malloc((size_t)B * H * T * dh * 8);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++)
                for (int e = 0; e < dh; e++)
                    y[(((size_t)b * H + h) * T + t) * dh + e] =
                        x[((size_t)b * T + t) * Hx * dh + (size_t)(h / (H / Hx)) * dh + e];
    return y;
}

/* The forward in double: out (B, nq, os); the heads and concat on request. */
static void mhb_forward(const mhb_in *a, double *out, double **qh, double **kh, double **vh,
                        double **cat)
{
    const mhb_case *c = a->c;
    int B = c->B, hid = c->H * c->dh, kvhid = c->Hkv * c->dh;
    const double *x = a->x;
    double *qp = malloc((size_t)B * c->nq * hid * 8), *kp = malloc((size_t)B * c->nk * kvhid * 8);
    double *vp = malloc((size_t)B * c->nk * kvhid * 8);
    lin_d((size_t)B * c->nq, c->qs, hid, x + a->at[P_Q], x + a->at[P_WQ],
          c->bias ? x + a->at[P_BQ] : NULL, qp);
    lin_d((size_t)B * c->nk, c->ks, kvhid, x + a->at[P_K], x + a->at[P_WK],
          c->bias ? x + a->at[P_BK] : NULL, kp);
    lin_d((size_t)B * c->nk, c->vs, kvhid, x + a->at[P_V], x + a->at[P_WV],
          c->bias ? x + a->at[P_BV] : NULL, vp);
    double *Qh = to_heads(qp, B, c->nq, c->H, c->H, c->dh);
    double *Kh = to_heads(kp, B, c->nk, c->Hkv, c->H, c->dh);
    double *Vh = to_heads(vp, B, c->nk, c->Hkv, c->H, c->dh);
    double *w = malloc((size_t)B * c->H * c->nq * c->nk * 8);
    double *oh = malloc((size_t)B * c->nq * hid * 8);
    double *ct = malloc((size_t)B * c->nq * hid * 8);
    ref_dropout_params dp = {c->p, 99, 3};
    ref_attention(&a->hm->r, c->dh, c->dh, Qh, Kh, Vh, 1 / sqrt((double)c->dh), &dp, w, oh);
    for (int b = 0; b < B; b++) /* concat: (B, H, nq, dh) -> (B, nq, hid) */
        for (int h = 0; h < c->H; h++)
            for (int t = 0; t < c->nq; t++)
                memcpy(ct + ((size_t)b * c->nq + t) * hid + (size_t)h * c->dh,
                       oh + (((size_t)b * c->H + h) * c->nq + t) * c->dh, (size_t)c->dh * 8);
    lin_d((size_t)B * c->nq, hid, c->os, ct, x + a->at[P_WO], c->bias ? x + a->at[P_BO] : NULL,
          out);
    if (qh) {
        *qh = Qh;
        *kh = Kh;
        *vh = Vh;
        *cat = ct;
    } else {
        free(Qh);
        free(Kh);
        free(Vh);
        free(ct);
    }
    free(qp);
    free(kp);
    free(vp);
    free(w);
    free(oh);
}

static double mhb_loss(const double *unused, void *arg)
{
    (void)unused;
    mhb_in *a = arg;
    size_t no = (size_t)a->c->B * a->c->nq * a->c->os;
    double *out = malloc(no * 8), s = 0;
    mhb_forward(a, out, NULL, NULL, NULL, NULL);
    for (size_t i = 0; i < no; i++)
        s += a->dout[i] * out[i];
    free(out);
    return s;
}

/* saved: the forward runs first and saves its projections, output and LSE in opts.saved, which
 * the backward reads instead of computing the forward again. */
static void run_mhb(const mhb_case *c, int saved)
{
    int B = c->B, hid = c->H * c->dh, kvhid = c->Hkv * c->dh;
    size_t sd[4] = {(size_t)B, (size_t)c->H, (size_t)c->nq, (size_t)c->nk};
    h_mask hm;
    h_mask_make(&hm, &c->mask, 4, sd);
    mhb_in a = {c, &hm, {0}, {0}, NULL, NULL};
    size_t shapes[P_N][3] = {{B, c->nq, c->qs}, {B, c->nk, c->ks}, {B, c->nk, c->vs},
                             {hid, c->qs, 0}, {kvhid, c->ks, 0}, {kvhid, c->vs, 0},
                             {c->os, hid, 0}, {hid, 0, 0}, {kvhid, 0, 0}, {kvhid, 0, 0},
                             {c->os, 0, 0}};
    size_t total = 0;
    for (int i = 0; i < P_N; i++) {
        a.n[i] = shapes[i][0] * (shapes[i][1] ? shapes[i][1] : 1) *
                 (shapes[i][2] ? shapes[i][2] : 1);
        if (i >= P_BQ && !c->bias)
            a.n[i] = 0;
        a.at[i] = total;
        total += a.n[i];
    }
    float *xf = malloc(total * 4);
    h_fill(xf, total, -1, 1);
    a.x = ref_to_double(xf, total);
    size_t no = (size_t)B * c->nq * c->os;
    float *dof = malloc(no * 4);
    h_fill(dof, no, -1, 1);
    a.dout = ref_to_double(dof, no);
    /* device tensors of every parameter and gradient */
    clattn_tensor t[P_N], dt[P_N];
    for (int i = 0; i < P_N; i++) {
        int r = shapes[i][2] ? 3 : shapes[i][1] ? 2 : 1;
        if (!a.n[i]) {
            t[i] = dt[i] = (clattn_tensor){0};
            continue;
        }
        t[i] = h_tensor(CLATTN_FLOAT32, r, shapes[i], xf + a.at[i]);
        dt[i] = h_tensor(CLATTN_FLOAT32, r, shapes[i], NULL);
        h_poison(&dt[i]);
    }
    clattn_tensor tdo = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(B, c->nq, c->os), dof);
    clattn_mha_weights w = {c->H, &t[P_WQ], &t[P_WK], &t[P_WV], &t[P_WO],
                            c->bias ? &t[P_BQ] : NULL, c->bias ? &t[P_BK] : NULL,
                            c->bias ? &t[P_BV] : NULL, c->bias ? &t[P_BO] : NULL, c->Hkv};
    clattn_mha_grads g = {&dt[P_Q], &dt[P_K], &dt[P_V], &dt[P_WQ], &dt[P_WK], &dt[P_WV],
                          &dt[P_WO], c->bias ? &dt[P_BQ] : NULL, c->bias ? &dt[P_BK] : NULL,
                          c->bias ? &dt[P_BV] : NULL, c->bias ? &dt[P_BO] : NULL, NULL};
    clattn_attention_opts opts;
    memset(&opts, 0, sizeof opts);
    opts.mask = hm.m;
    opts.dropout = (clattn_dropout_params){c->p, 1, 99, 3};
    clattn_tensor tsv = {0}, tout = {0};
    if (saved) {
        size_t n = clattn_mha_saved_numel(&t[P_Q], &t[P_K], &w);
        tsv = h_tensor(CLATTN_FLOAT32, 1, H_DIMS(n), NULL);
        tout = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(B, c->nq, c->os), NULL);
        h_poison(&tsv);
        opts.saved = &tsv;
        if (clattn_multihead_attention(h_ctx, &t[P_Q], &t[P_K], &t[P_V], &w, &opts, &tout, NULL) !=
            CLATTN_SUCCESS)
            fail_msg("multihead_attention (saving): %s", clattn_last_error(h_ctx));
    }
    if (clattn_multihead_attention_backward(h_ctx, &t[P_Q], &t[P_K], &t[P_V], &w, &opts, &tdo,
                                            &g) != CLATTN_SUCCESS)
        fail_msg("multihead_attention_backward: %s", clattn_last_error(h_ctx));
    /* finite differences of every parameter, with their noise (|out| <= hid (1 + ...)) */
    double *fd = malloc(total * 8), noise = 0;
    finite_diff(a.x, total, mhb_loss, &a, fd);
    for (size_t i = 0; i < no; i++)
        noise += fabs(a.dout[i]);
    noise = 1e-15 * noise * (hid + 1) * (c->qs + c->ks + c->vs + 1) / FD_H;
    /* each gradient's error scale: its own magnitude plus 1% of the largest gradient of any
     * parameter (float32 sums of terms of that size; a gradient whose terms cancel, as the key
     * bias's, which moves every score of a row alike, is 0 up to their rounding), plus the
     * differences' noise. One wrong term moves a gradient by about its terms' size. */
    double gmax = 0;
    for (size_t j = 0; j < total; j++)
        gmax = fmax(gmax, fabs(fd[j]));
    static const char *const names[P_N] = {"dqueries", "dkeys", "dvalues", "dW_q", "dW_k", "dW_v",
                                           "dW_o", "db_q", "db_k", "db_v", "db_o"};
    char what[200];
    for (int i = 0; i < P_N; i++) {
        if (!a.n[i])
            continue;
        double *sc = malloc(a.n[i] * 8);
        for (size_t j = 0; j < a.n[i]; j++)
            sc[j] = fabs(fd[a.at[i] + j]) + 1e-2 * gmax + noise / FD_TOL + 1e-30;
        float *got = h_read(&dt[i]);
        snprintf(what, sizeof what, "multi-head backward B %d Q %d K %d sizes %d/%d/%d H %d/%d dh "
                 "%d out %d bias %d lens %d causal %d p %g%s: %s (finite differences)", B, c->nq,
                 c->nk, c->qs, c->ks, c->vs, c->H, c->Hkv, c->dh, c->os, c->bias, c->mask.lens,
                 c->mask.causal, (double)c->p, saved ? " (forward saved)" : "", names[i]);
        h_assert_scaled(got, fd + a.at[i], sc, a.n[i], FD_TOL, what);
        free(got);
        free(sc);
    }
    for (int i = 0; i < P_N; i++)
        if (a.n[i]) {
            clattn_tensor_release(&t[i]);
            clattn_tensor_release(&dt[i]);
        }
    clattn_tensor_release(&tdo);
    if (saved) {
        clattn_tensor_release(&tsv);
        clattn_tensor_release(&tout);
    }
    h_mask_free(&hm);
    free(fd);
    free(xf);
    free(dof);
    free(a.x);
    free(a.dout);
}

static void test_mha_backward(void **s)
{
    (void)s;
    static const int l3[] = {0, 4, 2};
    static const mhb_case cs[] = {
        {1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
        {2, 3, 4, 5, 4, 3, 2, 2, 2, 3, 0},
        {2, 3, 4, 5, 4, 3, 2, 2, 2, 3, 1, {.causal = 1}},
        /* grouped-query: 4 query heads over 2 K/V heads, 3 over 1 */
        {2, 4, 3, 3, 5, 2, 4, 2, 2, 3, 1, {.lens = H_LENS_1D}},
        {1, 3, 5, 4, 3, 3, 3, 1, 2, 2, 1, {.lens = H_LENS_2D}},
        {3, 2, 4, 3, 3, 4, 2, 2, 3, 2, 1, {.lens = H_LENS_1D, .fixed_lens = l3}},
        {2, 3, 4, 4, 4, 4, 2, 1, 2, 3, 1, {.mask_rank = 2, .mask_dims = {3, 4}}, 0.4f},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
        for (int saved = 0; saved < 2; saved++)
            run_mhb(&cs[i], saved);
}

/* ---- additive attention ---- */

typedef struct {
    int B, nq, nk, qs, ks, vs, h;
    h_mask_spec mask; /* over the scores (B, nq, nk) */
    float p;
    int wv2d; /* w_v given as (1, h) */
} adb_case;

enum { A_Q, A_K, A_V, A_WQ, A_WK, A_WV, A_N };
typedef struct {
    const adb_case *c;
    h_mask *hm;
    size_t n[A_N], at[A_N];
    double *x, *dout;
} adb_in;

/* d2l's AdditiveAttention in double: out (B, nq, vs) */
static void adb_forward(const adb_in *a, double *out)
{
    const adb_case *c = a->c;
    const double *x = a->x, *wv = x + a->at[A_WV];
    size_t ns = (size_t)c->B * c->nq * c->nk;
    double *qp = malloc((size_t)c->B * c->nq * c->h * 8);
    double *kp = malloc((size_t)c->B * c->nk * c->h * 8);
    double *sc = malloc(ns * 8), *w = malloc(ns * 8);
    lin_d((size_t)c->B * c->nq, c->qs, c->h, x + a->at[A_Q], x + a->at[A_WQ], NULL, qp);
    lin_d((size_t)c->B * c->nk, c->ks, c->h, x + a->at[A_K], x + a->at[A_WK], NULL, kp);
    for (int b = 0; b < c->B; b++)
        for (int i = 0; i < c->nq; i++)
            for (int j = 0; j < c->nk; j++) {
                double t = 0;
                for (int e = 0; e < c->h; e++)
                    t += wv[e] * tanh(qp[((size_t)b * c->nq + i) * c->h + e] +
                                      kp[((size_t)b * c->nk + j) * c->h + e]);
                sc[((size_t)b * c->nq + i) * c->nk + j] = t;
            }
    ref_masked_softmax_d(&a->hm->r, sc, w);
    if (c->p > 0)
        ref_dropout(w, ns, 0, 77, 5, c->p);
    for (int b = 0; b < c->B; b++)
        ref_gemm(c->nq, c->vs, c->nk, w + (size_t)b * c->nq * c->nk, 0,
                 x + a->at[A_V] + (size_t)b * c->nk * c->vs, 0, out + (size_t)b * c->nq * c->vs);
    free(qp);
    free(kp);
    free(sc);
    free(w);
}

static double adb_loss(const double *unused, void *arg)
{
    (void)unused;
    adb_in *a = arg;
    size_t no = (size_t)a->c->B * a->c->nq * a->c->vs;
    double *out = malloc(no * 8), s = 0;
    adb_forward(a, out);
    for (size_t i = 0; i < no; i++)
        s += a->dout[i] * out[i];
    free(out);
    return s;
}

static void run_adb(const adb_case *c)
{
    size_t sd[3] = {(size_t)c->B, (size_t)c->nq, (size_t)c->nk};
    h_mask hm;
    h_mask_make(&hm, &c->mask, 3, sd);
    adb_in a = {c, &hm, {0}, {0}, NULL, NULL};
    size_t shapes[A_N][3] = {{c->B, c->nq, c->qs}, {c->B, c->nk, c->ks}, {c->B, c->nk, c->vs},
                             {c->h, c->qs, 0}, {c->h, c->ks, 0},
                             {c->wv2d ? 1 : c->h, c->wv2d ? c->h : 0, 0}};
    size_t total = 0;
    for (int i = 0; i < A_N; i++) {
        a.n[i] = shapes[i][0] * (shapes[i][1] ? shapes[i][1] : 1) *
                 (shapes[i][2] ? shapes[i][2] : 1);
        a.at[i] = total;
        total += a.n[i];
    }
    float *xf = malloc(total * 4);
    h_fill(xf, total, -1, 1);
    a.x = ref_to_double(xf, total);
    size_t no = (size_t)c->B * c->nq * c->vs;
    float *dof = malloc(no * 4);
    h_fill(dof, no, -1, 1);
    a.dout = ref_to_double(dof, no);
    clattn_tensor t[A_N], dt[A_N];
    for (int i = 0; i < A_N; i++) {
        int r = shapes[i][2] ? 3 : shapes[i][1] ? 2 : 1;
        t[i] = h_tensor(CLATTN_FLOAT32, r, shapes[i], xf + a.at[i]);
        dt[i] = h_tensor(CLATTN_FLOAT32, r, shapes[i], NULL);
        h_poison(&dt[i]);
    }
    clattn_tensor tdo = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(c->B, c->nq, c->vs), dof);
    clattn_additive_weights w = {&t[A_WQ], &t[A_WK], &t[A_WV]};
    clattn_additive_grads g = {&dt[A_Q], &dt[A_K], &dt[A_V], &dt[A_WQ], &dt[A_WK], &dt[A_WV]};
    clattn_attention_opts opts;
    memset(&opts, 0, sizeof opts);
    opts.mask = hm.m;
    opts.dropout = (clattn_dropout_params){c->p, 1, 77, 5};
    if (clattn_additive_attention_backward(h_ctx, &t[A_Q], &t[A_K], &t[A_V], &w, &opts, &tdo, &g) !=
        CLATTN_SUCCESS)
        fail_msg("additive_attention_backward: %s", clattn_last_error(h_ctx));
    double *fd = malloc(total * 8), noise = 0, gmax = 0;
    finite_diff(a.x, total, adb_loss, &a, fd);
    for (size_t i = 0; i < no; i++)
        noise += fabs(a.dout[i]);
    noise = 1e-15 * noise * (c->h + 1) / FD_H;
    for (size_t j = 0; j < total; j++)
        gmax = fmax(gmax, fabs(fd[j]));
    static const char *const names[A_N] = {"dqueries", "dkeys", "dvalues", "dW_q", "dW_k", "dw_v"};
    char what[200];
    for (int i = 0; i < A_N; i++) { /* error scales as the multi-head test's */
        double *sc = malloc(a.n[i] * 8);
        for (size_t j = 0; j < a.n[i]; j++)
            sc[j] = fabs(fd[a.at[i] + j]) + 1e-2 * gmax + noise / FD_TOL + 1e-30;
        float *got = h_read(&dt[i]);
        snprintf(what, sizeof what, "additive backward B %d Q %d K %d sizes %d/%d/%d h %d lens %d "
                 "causal %d p %g: %s (finite differences)", c->B, c->nq, c->nk, c->qs, c->ks,
                 c->vs, c->h, c->mask.lens, c->mask.causal, (double)c->p, names[i]);
        h_assert_scaled(got, fd + a.at[i], sc, a.n[i], FD_TOL, what);
        free(got);
        free(sc);
    }
    for (int i = 0; i < A_N; i++) {
        clattn_tensor_release(&t[i]);
        clattn_tensor_release(&dt[i]);
    }
    clattn_tensor_release(&tdo);
    h_mask_free(&hm);
    free(fd);
    free(xf);
    free(dof);
    free(a.x);
    free(a.dout);
}

static void test_additive_backward(void **s)
{
    (void)s;
    static const int l3[] = {0, 5, 2};
    static const adb_case cs[] = {
        {1, 1, 1, 1, 1, 1, 1},
        {2, 3, 5, 4, 3, 2, 9},           /* h 9: a full chunk of 8 hidden units and a tail */
        {3, 2, 5, 3, 2, 4, 8, {.lens = H_LENS_1D, .fixed_lens = l3}, 0, 1},
        {2, 4, 3, 2, 3, 3, 5, {.lens = H_LENS_2D}},
        {2, 4, 4, 3, 3, 2, 6, {.causal = 1}},
        {2, 3, 6, 2, 2, 3, 4, {.mask_rank = 2, .mask_dims = {3, 6}}, 0.3f},
        {1, 5, 4, 3, 2, 2, 17, {.lens = H_LENS_1D}, 0.5f, 1},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
        run_adb(&cs[i]);
}

/* ---- additive scores ---- */

typedef struct {
    int B, Q, K, h;
    double *qp, *kp, *wv, *ds; /* all four inputs, in one array for the differences */
} asb_in;

/* sum_bij ds_bij scores_bij, scores_bij = sum_h w_h tanh(qp_bih + kp_bjh); the analytic
 * gradients too when dq is not NULL (with each gradient's sum of term sizes in sq, sk, sw) */
static double asb_loss_grads(const asb_in *a, double *dq, double *dk, double *dw, double *sq,
                             double *sk, double *sw)
{
    double s = 0;
    size_t nq = (size_t)a->B * a->Q * a->h, nk = (size_t)a->B * a->K * a->h;
    if (dq) {
        memset(dq, 0, nq * 8), memset(dk, 0, nk * 8), memset(dw, 0, (size_t)a->h * 8);
        memset(sq, 0, nq * 8), memset(sk, 0, nk * 8), memset(sw, 0, (size_t)a->h * 8);
    }
    for (int b = 0; b < a->B; b++)
        for (int i = 0; i < a->Q; i++)
            for (int j = 0; j < a->K; j++) {
                double g = a->ds[((size_t)b * a->Q + i) * a->K + j];
                for (int c = 0; c < a->h; c++) {
                    size_t qi = ((size_t)b * a->Q + i) * a->h + c;
                    size_t ki = ((size_t)b * a->K + j) * a->h + c;
                    double t = tanh(a->qp[qi] + a->kp[ki]), d = a->wv[c] * g * (1 - t * t);
                    s += g * a->wv[c] * t;
                    if (!dq)
                        continue;
                    dq[qi] += d, dk[ki] += d, dw[c] += g * t;
                    sq[qi] += fabs(d), sk[ki] += fabs(d), sw[c] += fabs(g * t);
                }
            }
    return s;
}

static double asb_loss(const double *unused, void *arg)
{
    (void)unused;
    return asb_loss_grads(arg, NULL, NULL, NULL, NULL, NULL, NULL);
}

static void run_asb(int B, int Q, int K, int h)
{
    size_t nq = (size_t)B * Q * h, nk = (size_t)B * K * h, ns = (size_t)B * Q * K;
    size_t n = nq + nk + (size_t)h + ns;
    float *x = malloc(n * 4);
    h_fill(x, n, -1, 1);
    double *xd = ref_to_double(x, n);
    asb_in a = {B, Q, K, h, xd, xd + nq, xd + nq + nk, xd + nq + nk + h};
    clattn_tensor tq = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(B, Q, h), x);
    clattn_tensor tk = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(B, K, h), x + nq);
    clattn_tensor tw = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(1, h), x + nq + nk);
    clattn_tensor ts = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(B, Q, K), x + nq + nk + h);
    clattn_tensor dq = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(B, Q, h), NULL);
    clattn_tensor dk = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(B, K, h), NULL);
    clattn_tensor dw = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(1, h), NULL);
    h_poison(&dq), h_poison(&dk), h_poison(&dw);
    if (clattn_additive_scores_backward(h_ctx, &tq, &tk, &tw, &ts, &dq, &dk, &dw) !=
        CLATTN_SUCCESS)
        fail_msg("additive_scores_backward: %s", clattn_last_error(h_ctx));
    double *r = malloc(2 * n * 8), *sc = r + n, *fd = NULL;
    asb_loss_grads(&a, r, r + nq, r + nq + nk, sc, sc + nq, sc + nq + nk);
    if (n <= 400) {
        fd = malloc(n * 8);
        finite_diff(xd, nq + nk + (size_t)h, asb_loss, &a, fd);
    }
    const clattn_tensor *got[3] = {&dq, &dk, &dw};
    size_t at[3] = {0, nq, nq + nk}, cnt[3] = {nq, nk, (size_t)h};
    static const char *const names[3] = {"dqp", "dkp", "dw_v"};
    char what[160];
    for (int i = 0; i < 3; i++) {
        float *g = h_read(got[i]);
        snprintf(what, sizeof what, "additive scores backward B %d Q %d K %d h %d: %s", B, Q, K, h,
                 names[i]);
        for (size_t e = 0; e < cnt[i]; e++)
            sc[at[i] + e] += 1e-30;
        h_assert_scaled(g, r + at[i], sc + at[i], cnt[i], GRAD_TOL, what);
        if (fd) {
            for (size_t e = 0; e < cnt[i]; e++)
                sc[at[i] + e] += 1e-10 / FD_TOL; /* the differences' own noise */
            strcat(what, " (finite differences)");
            h_assert_scaled(g, fd + at[i], sc + at[i], cnt[i], FD_TOL, what);
        }
        free(g);
    }
    clattn_tensor *all[] = {&tq, &tk, &tw, &ts, &dq, &dk, &dw};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        clattn_tensor_release(all[i]);
    free(x), free(xd), free(r), free(fd);
}

/* The standalone scores backward: hidden sizes around the kernels' 8-unit chunks. */
static void test_additive_scores_backward(void **s)
{
    (void)s;
    run_asb(1, 1, 1, 1);
    run_asb(2, 3, 5, 7);
    run_asb(1, 4, 2, 9);
    run_asb(3, 17, 29, 16);
}

/* The bias gradient's sums over its broadcast dims split over launches under a small loop budget
 * (llvmpipe's limit, here forced): the same result as one launch. */
static void test_bias_grad_split(void **s)
{
    (void)s;
    if (h_forced_variant()) /* its own tunings only (harness.h) */
        skip();
    clattn_params p;
    memset(&p, 0, sizeof p);
    p.tuning = "softmax=gpu:WG=4:LOOPS=40";
    clattn_context *ctx = NULL, *saved = h_ctx;
    if (clattn_context_wrap(&ctx, clattn_context_cl(h_ctx), clattn_context_device(h_ctx),
                            clattn_context_queue(h_ctx), &p) != CLATTN_SUCCESS)
        fail_msg("%s", clattn_last_error(NULL));
    h_ctx = ctx; /* run_atb's tensors and ops on it (the same cl_context) */
    ATB_CASES({4, 2, 4, 2, 20, 5, 3, 2, {.bias_rank = 1, .bias_dims = {5}, .lens = H_LENS_1D}},
              {3, 3, 0, 0, 19, 6, 2, 3, {.bias_rank = 2, .bias_dims = {1, 6}}});
    h_ctx = saved;
    clattn_context_destroy(&ctx);
}

/* The fused backward's other tiles and key chunks (several chunks: partial dQ rows added in
 * chunk order by a second kernel), forced on a context of its own. */
static void test_backward_tiles(void **s)
{
    (void)s;
    if (h_forced_variant()) /* its own tunings only (harness.h) */
        skip();
    static const char *const tunes[] = {"backward=cpu:QR=4:KB=32:VC=16:CH=2",
                                        "backward=cpu:QR=16:KB=16:VC=48:CH=7",
                                        "backward=cpu:QR=1:KB=80:VC=32:CH=1"};
    for (size_t t = 0; t < sizeof tunes / sizeof tunes[0]; t++) {
        clattn_params p;
        memset(&p, 0, sizeof p);
        p.tuning = tunes[t];
        clattn_context *ctx = NULL, *saved = h_ctx;
        if (clattn_context_wrap(&ctx, clattn_context_cl(h_ctx), clattn_context_device(h_ctx),
                                clattn_context_queue(h_ctx), &p) != CLATTN_SUCCESS) {
            if (strstr(clattn_last_error(NULL), "llvmpipe")) { /* CPU shapes refused there */
                print_message("skipped on llvmpipe: %s\n", tunes[t]);
                continue;
            }
            fail_msg("%s", clattn_last_error(NULL));
        }
        h_ctx = ctx;
        /* the third: 50 keys, so that CH=2 and CH=7 take several chunks (the partial dQ rows
         * and their reduction) under Oclgrind too */
        ATB_CASES({3, 2, 0, 0, 5, 7, 3, 4}, {4, 2, 4, 2, 3, 5, 4, 3, {.lens = H_LENS_1D}, 0, 0.3f},
                  {3, 2, 0, 0, 6, 50, 3, 4, {.causal = 1, .align = 1}});
        if (!h_small()) /* several chunks of several blocks */
            ATB_CASES({4, 1, 2, 1, 37, 101, 17, 33, {.causal = 1, .align = 1}},
                      {4, 1, 3, 3, 29, 97, 20, 50, {.lens = H_LENS_2D, .mask_rank = 4,
                                                    .mask_dims = {1, 1, 29, 97}}, 0, 0.2f});
        h_ctx = saved;
        clattn_context_destroy(&ctx);
    }
}

/* opts.saved changes nothing the forward returns: out and opts.lse bit for bit those of a forward
 * without it; the unfused forward (weights asked for) saves what the fused one does, within
 * float32 rounding, and a backward reads either. */
static void test_mha_saved(void **s)
{
    (void)s;
    enum { B = 2, T = 9, E = 12, H = 3, HKV = 1, DH = 4 };
    size_t nx = (size_t)B * T * E;
    float *x = malloc(nx * 4), *wts = malloc(4 * E * E * 4);
    h_fill(x, nx, -1, 1);
    h_fill(wts, 4 * E * E, -0.5, 0.5);
    clattn_tensor X = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(B, T, E), x);
    clattn_tensor Wq = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(E, E), wts);
    clattn_tensor Wk = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(HKV * DH, E), wts + E * E);
    clattn_tensor Wv = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(HKV * DH, E), wts + 2 * E * E);
    clattn_tensor Wo = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(E, E), wts + 3 * E * E);
    clattn_mha_weights w = {H, &Wq, &Wk, &Wv, &Wo, NULL, NULL, NULL, NULL, HKV};
    size_t ns = clattn_mha_saved_numel(&X, &X, &w);
    clattn_tensor out[3], lse[3], sv[2], wt = h_tensor(CLATTN_FLOAT32, 4, H_DIMS(B, H, T, T), NULL);
    clattn_attention_opts opts;
    memset(&opts, 0, sizeof opts);
    opts.mask.causal = 1;
    for (int i = 0; i < 3; i++) { /* 0: plain, 1: saved, 2: saved with the weights (unfused) */
        out[i] = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(B, T, E), NULL);
        lse[i] = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(B, H, T), NULL);
        if (i)
            sv[i - 1] = h_tensor(CLATTN_FLOAT32, 1, H_DIMS(ns), NULL);
        opts.lse = &lse[i];
        opts.saved = i ? &sv[i - 1] : NULL;
        if (clattn_multihead_attention(h_ctx, &X, &X, &X, &w, &opts, &out[i], i == 2 ? &wt : NULL) !=
            CLATTN_SUCCESS)
            fail_msg("multihead_attention %d: %s", i, clattn_last_error(h_ctx));
    }
    float *o0 = h_read(&out[0]), *l0 = h_read(&lse[0]);
    h_assert_bytes(&out[1], o0, "out of a saving forward");
    h_assert_bytes(&lse[1], l0, "opts.lse of a saving forward");
    float *a = h_read(&sv[0]), *b = h_read(&sv[1]);
    double big = 0;
    for (size_t i = 0; i < ns; i++)
        big = fmax(big, fabs(a[i]));
    for (size_t i = 0; i < ns; i++)
        if (!(fabs((double)a[i] - b[i]) <= 1e-5 * big))
            fail_msg("opts.saved[%zu]: %g by the fused forward, %g by the unfused one", i,
                     (double)a[i], (double)b[i]);
    clattn_tensor dout = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(B, T, E), x);
    clattn_tensor g[2];
    for (int i = 0; i < 2; i++) {
        g[i] = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(E, E), NULL);
        clattn_mha_grads mg = {0};
        mg.dW_q = &g[i];
        opts.lse = NULL;
        opts.saved = &sv[i];
        if (clattn_multihead_attention_backward(h_ctx, &X, &X, &X, &w, &opts, &dout, &mg) !=
            CLATTN_SUCCESS)
            fail_msg("multihead_attention_backward %d: %s", i, clattn_last_error(h_ctx));
    }
    float *g0 = h_read(&g[0]), *g1 = h_read(&g[1]);
    big = 0;
    for (int i = 0; i < E * E; i++)
        big = fmax(big, fabs(g0[i]));
    for (int i = 0; i < E * E; i++)
        if (!(fabs((double)g0[i] - g1[i]) <= 1e-4 * big))
            fail_msg("dW_q[%d]: %g from the fused forward's saved tensor, %g from the unfused one's",
                     i, (double)g0[i], (double)g1[i]);
    clattn_tensor *ts[] = {&X, &Wq, &Wk, &Wv, &Wo, &out[0], &out[1], &out[2], &lse[0], &lse[1],
                           &lse[2], &sv[0], &sv[1], &wt, &dout, &g[0], &g[1]};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        clattn_tensor_release(ts[i]);
    free(x); free(wts); free(o0); free(l0); free(a); free(b); free(g0); free(g1);
}

/* ---- the SGD update ---- */

static void test_axpy(void **s)
{
    (void)s;
    const size_t n = 1031;
    float *x = malloc(n * 4), *y = malloc(n * 4), o[6];
    double *ref = malloc(n * 8), *sc = malloc(n * 8);
    h_fill(x, n, -3, 3);
    h_fill(y, n, -1, 1);
    x[5] = NAN;
    for (size_t i = 0; i < n; i++) {
        ref[i] = (double)y[i] - 0.25 * x[i];
        sc[i] = fabs(y[i]) + fabs(0.25 * x[i]) + 1e-30;
    }
    clattn_tensor tx = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(1, n), x);
    clattn_tensor ty = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(1, n), y);
    if (clattn_axpy(h_ctx, -0.25f, &tx, &ty) != CLATTN_SUCCESS)
        fail_msg("axpy: %s", clattn_last_error(h_ctx));
    float *got = h_read(&ty);
    h_assert_scaled(got, ref, sc, n, 0x1p-23, "axpy"); /* one fma: one rounding */
    free(got);
    h_fill(o, 6, 5, 6);
    clattn_tensor t6 = h_tensor(CLATTN_FLOAT32, 1, H_DIMS(6), o);
    clattn_tensor t3 = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(2, 3), o);
    clattn_tensor ti = h_tensor(CLATTN_INT32, 1, H_DIMS(6), NULL);
    h_assert_error(clattn_axpy(h_ctx, 1, &t3, &t6), CLATTN_ERROR_SHAPE_MISMATCH,
                   "y: shape (6), expected x's shape (2, 3)");
    h_assert_error(clattn_axpy(h_ctx, NAN, &t6, &t6), CLATTN_ERROR_INVALID_ARGUMENT,
                   "alpha: not finite");
    h_assert_error(clattn_axpy(h_ctx, 1, &t6, &t6), CLATTN_ERROR_INVALID_ARGUMENT, "y");
    h_assert_error(clattn_axpy(h_ctx, 1, &ti, &t6), CLATTN_ERROR_INVALID_TENSOR, "x");
    h_assert_bytes(&t6, o, "y of a refused axpy");
    clattn_tensor *ts[] = {&tx, &ty, &t6, &t3, &ti};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        clattn_tensor_release(ts[i]);
    free(x);
    free(y);
    free(ref);
    free(sc);
}

/* ---- bad input: a status naming the argument, outputs untouched ---- */

static void test_bad_input(void **s)
{
    (void)s;
    float z[60] = {0}, o[60];
    h_fill(o, 60, 5, 6);
    clattn_tensor y = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(3, 4), z);
    clattn_tensor dy = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(3, 4), z);
    clattn_tensor dy5 = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(3, 5), z);
    clattn_tensor dx = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(3, 4), o);
    clattn_tensor dxi = h_tensor(CLATTN_INT32, 2, H_DIMS(3, 4), NULL);
    clattn_tensor y16 = h_tensor(CLATTN_FLOAT16, 2, H_DIMS(3, 4), NULL);
    h_assert_error(clattn_masked_softmax_backward(h_ctx, &y, &dy5, NULL, &dx),
                   CLATTN_ERROR_SHAPE_MISMATCH, "dout: shape (3, 5), expected out's shape (3, 4)");
    h_assert_error(clattn_masked_softmax_backward(h_ctx, &y, &dy, NULL, &dxi),
                   CLATTN_ERROR_INVALID_TENSOR, "dscores");
    h_assert_error(clattn_masked_softmax_backward(h_ctx, &y16, &dy, NULL, &dx),
                   CLATTN_ERROR_INVALID_TENSOR, "out");
    h_assert_error(clattn_masked_softmax_backward(h_ctx, &y, &dy, NULL, &y),
                   CLATTN_ERROR_INVALID_ARGUMENT, "dscores");
    clattn_mask bad = {0};
    bad.valid_lens_host = (const int[]){5};
    bad.lens_ndim = 1;
    bad.lens_dims[0] = 1;
    h_assert_error(clattn_masked_softmax_backward(h_ctx, &y, &dy, &bad, &dx),
                   CLATTN_ERROR_INVALID_ARGUMENT, "mask.valid_lens");
    h_assert_bytes(&dx, o, "dscores of a refused softmax backward");
    clattn_dropout_params p = {0.5f, 1, 1, 0}, pb = {1.5f, 1, 1, 0};
    h_assert_error(clattn_dropout_backward(h_ctx, &dy, &pb, &dx), CLATTN_ERROR_INVALID_ARGUMENT,
                   "p.p = 1.5");
    h_assert_error(clattn_dropout_backward(h_ctx, &dy5, &p, &dx), CLATTN_ERROR_SHAPE_MISMATCH,
                   "dx: shape (3, 4), expected dy's shape (3, 5)");
    h_assert_bytes(&dx, o, "dx of a refused dropout backward");
    /* matmul: A (3, 4) B (4, 5) -> dC (3, 5) */
    clattn_tensor A = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(3, 4), z);
    clattn_tensor B = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(4, 5), z);
    clattn_tensor dB = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(4, 5), o);
    h_assert_error(clattn_matmul_backward(h_ctx, &A, 0, &B, 0, 1, &dy, &dx, &dB),
                   CLATTN_ERROR_SHAPE_MISMATCH, "dC: shape (3, 4), expected (..., 3, 5)");
    h_assert_error(clattn_matmul_backward(h_ctx, &A, 0, &B, 0, 1, &dy5, &dy5, &dB),
                   CLATTN_ERROR_SHAPE_MISMATCH,
                   "dA: shape (3, 5), expected the shape of A, (3, 4)");
    h_assert_error(clattn_matmul_backward(h_ctx, &A, 0, &B, 0, 1, &dy5, &dx, &A),
                   CLATTN_ERROR_SHAPE_MISMATCH, "dB");
    h_assert_error(clattn_matmul_backward(h_ctx, &A, 0, &B, 0, 1, &dy5, &dx, &dx),
                   CLATTN_ERROR_SHAPE_MISMATCH, "dB");
    h_assert_error(clattn_matmul_backward(h_ctx, &A, 0, &B, 0, 1, &dy5, &A, &dB),
                   CLATTN_ERROR_INVALID_ARGUMENT, "dA");
    h_assert_bytes(&dx, o, "dA of a refused matmul backward");
    h_assert_bytes(&dB, o, "dB of a refused matmul backward");
    /* linear: x (3, 4), W (5, 4), dy (3, 5) */
    clattn_tensor W = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(5, 4), z);
    clattn_tensor db = h_tensor(CLATTN_FLOAT32, 1, H_DIMS(4), o);
    h_assert_error(clattn_linear_backward(h_ctx, &A, &W, &dy, &dx, NULL, NULL),
                   CLATTN_ERROR_SHAPE_MISMATCH, "dy: shape (3, 4), expected x's leading dims and "
                   "5 features");
    h_assert_error(clattn_linear_backward(h_ctx, &A, &W, &dy5, &dx, NULL, &db),
                   CLATTN_ERROR_SHAPE_MISMATCH, "db: 4 elements, expected out_features = 5");
    h_assert_error(clattn_linear_backward(h_ctx, &A, &W, &dy5, &dx, &dB, NULL),
                   CLATTN_ERROR_SHAPE_MISMATCH,
                   "dW: shape (4, 5), expected the shape of W, (5, 4)");
    h_assert_error(clattn_linear_backward(h_ctx, &A, &W, &dy5, &dy5, NULL, NULL),
                   CLATTN_ERROR_SHAPE_MISMATCH, "dx");
    h_assert_bytes(&dx, o, "dx of a refused linear backward");
    h_assert_bytes(&db, o, "db of a refused linear backward");
    /* multi-head: x (3, 4) as (B 1, T 3, 4) queries, keys and values; W (4, 4), 2 heads */
    clattn_tensor X = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(1, 3, 4), z);
    clattn_tensor W4 = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(4, 4), z);
    clattn_tensor dX = h_tensor_exact(CLATTN_FLOAT32, 3, H_DIMS(1, 3, 4), o);
    clattn_tensor dX5 = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(1, 3, 5), o);
    clattn_tensor dW4 = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(4, 4), o);
    clattn_mha_weights mw = {2, &W4, &W4, &W4, &W4, NULL, NULL, NULL, NULL, 0};
    clattn_mha_grads mg = {&dX, NULL, NULL, &dW4, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    h_assert_error(clattn_multihead_attention_backward(h_ctx, &X, &X, &X, &mw, NULL, &X, NULL),
                   CLATTN_ERROR_INVALID_ARGUMENT, "grads: NULL");
    h_assert_error(clattn_multihead_attention_backward(h_ctx, &X, &X, &X, &mw, NULL, &dX5, &mg),
                   CLATTN_ERROR_SHAPE_MISMATCH, "dout: shape (1, 3, 5), expected (1, 3, 4)");
    mg.dkeys = &dX5;
    h_assert_error(clattn_multihead_attention_backward(h_ctx, &X, &X, &X, &mw, NULL, &X, &mg),
                   CLATTN_ERROR_SHAPE_MISMATCH,
                   "grads.dkeys: shape (1, 3, 5), expected the shape of keys");
    mg.dkeys = NULL;
    mg.db_q = &db;
    h_assert_error(clattn_multihead_attention_backward(h_ctx, &X, &X, &X, &mw, NULL, &X, &mg),
                   CLATTN_ERROR_INVALID_ARGUMENT, "grads.db_q: given, but there is no w.b_q");
    mg.db_q = NULL;
    mg.dW_v = &W4;
    h_assert_error(clattn_multihead_attention_backward(h_ctx, &X, &X, &X, &mw, NULL, &X, &mg),
                   CLATTN_ERROR_INVALID_ARGUMENT, "grads.dW_v");
    mg.dW_v = NULL;
    /* opts.saved: its size (1*3*4 * 4 floats of projections and output, 1*2*3 of LSE) */
    assert_int_equal(clattn_mha_saved_numel(&X, &X, &mw), 4 * 12 + 6);
    assert_int_equal(clattn_mha_saved_numel(NULL, &X, &mw), 0);
    clattn_tensor sv = h_tensor(CLATTN_FLOAT32, 1, H_DIMS(54), NULL);
    clattn_tensor sv53 = h_tensor(CLATTN_FLOAT32, 1, H_DIMS(53), NULL);
    clattn_tensor Y = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(1, 3, 4), o);
    clattn_attention_opts so;
    memset(&so, 0, sizeof so);
    so.saved = &sv53;
    h_assert_error(clattn_multihead_attention_backward(h_ctx, &X, &X, &X, &mw, &so, &X, &mg),
                   CLATTN_ERROR_SHAPE_MISMATCH,
                   "opts.saved: 53 elements, expected 54 (clattn_mha_saved_numel)");
    h_assert_error(clattn_multihead_attention(h_ctx, &X, &X, &X, &mw, &so, &Y, NULL),
                   CLATTN_ERROR_SHAPE_MISMATCH, "opts.saved: 53 elements, expected 54");
    h_assert_bytes(&Y, o, "out of a refused multi-head forward");
    clattn_tensor svx = clattn_view(dX.buf, CLATTN_FLOAT32, 0, 1, H_DIMS(54));
    so.saved = &svx; /* over dqueries' buffer (12 floats): too small, and overlapping */
    h_assert_error(clattn_multihead_attention_backward(h_ctx, &X, &X, &X, &mw, &so, &X, &mg),
                   CLATTN_ERROR_INVALID_TENSOR, "opts.saved");
    clattn_tensor svo = clattn_view(Y.buf, CLATTN_FLOAT32, 0, 1, H_DIMS(12));
    so.saved = &sv;
    so.lse = &svo; /* the LSE of 6 rows would be (1, 2, 3): wrong shape */
    h_assert_error(clattn_multihead_attention(h_ctx, &X, &X, &X, &mw, &so, &Y, NULL),
                   CLATTN_ERROR_SHAPE_MISMATCH, "opts.lse");
    so.lse = NULL;
    /* the forward writes opts.saved while it reads the mask's tensors, the bias and the slopes */
    clattn_tensor sbias = clattn_view(sv.buf, CLATTN_FLOAT32, 50, 1, H_DIMS(3));
    so.bias = &sbias;
    h_assert_error(clattn_multihead_attention(h_ctx, &X, &X, &X, &mw, &so, &Y, NULL),
                   CLATTN_ERROR_INVALID_ARGUMENT, "opts.saved: overlaps opts.bias");
    so.bias = NULL;
    clattn_tensor sslopes = clattn_view(sv.buf, CLATTN_FLOAT32, 52, 1, H_DIMS(2)); /* (H) */
    so.alibi_slopes = &sslopes;
    h_assert_error(clattn_multihead_attention(h_ctx, &X, &X, &X, &mw, &so, &Y, NULL),
                   CLATTN_ERROR_INVALID_ARGUMENT, "opts.saved: overlaps opts.alibi_slopes");
    so.alibi_slopes = NULL;
    h_assert_bytes(&Y, o, "out of a refused multi-head forward");
    clattn_mha_grads mgs = mg;
    clattn_tensor dqs = clattn_view(sv.buf, CLATTN_FLOAT32, 6, 3, H_DIMS(1, 3, 4));
    mgs.dqueries = &dqs; /* a gradient over the saved tensor */
    h_assert_error(clattn_multihead_attention_backward(h_ctx, &X, &X, &X, &mw, &so, &X, &mgs),
                   CLATTN_ERROR_INVALID_ARGUMENT, "opts.saved");
    h_assert_bytes(&Y, o, "out of a refused multi-head forward");
    h_assert_bytes(&dX, o, "dqueries of a refused multi-head backward");
    h_assert_bytes(&dW4, o, "dW_q of a refused multi-head backward");
    /* dot-product: Q = K = V = X (1, 3, 4) */
    clattn_attention_grads ag = {&dX5, NULL, NULL, NULL};
    h_assert_error(clattn_dot_product_attention_backward(h_ctx, &X, &X, &X, NULL, NULL, &X, &ag),
                   CLATTN_ERROR_SHAPE_MISMATCH,
                   "grads.dQ: shape (1, 3, 5), expected the shape of Q");
    ag.dQ = NULL;
    ag.dbias = &dX;
    h_assert_error(clattn_dot_product_attention_backward(h_ctx, &X, &X, &X, NULL, NULL, &X, &ag),
                   CLATTN_ERROR_INVALID_ARGUMENT,
                   "grads.dbias: given, but there is no opts.bias");
    ag.dbias = NULL;
    ag.dK = &dX;
    h_assert_error(clattn_dot_product_attention_backward(h_ctx, &X, &X, &X, NULL, NULL, &dX5, &ag),
                   CLATTN_ERROR_SHAPE_MISMATCH, "dout");
    h_assert_bytes(&dX, o, "dK of a refused attention backward");
    ag.dK = NULL;
    ag.dQ = &dX;
    so.saved = &sv; /* multi-head attention's only */
    h_assert_error(clattn_dot_product_attention_backward(h_ctx, &X, &X, &X, &so, NULL, &X, &ag),
                   CLATTN_ERROR_INVALID_ARGUMENT, "opts.saved: only multi-head attention");
    h_assert_error(clattn_dot_product_attention(h_ctx, &X, &X, &X, &so, &Y, NULL),
                   CLATTN_ERROR_INVALID_ARGUMENT, "opts.saved: only multi-head attention");
    h_assert_bytes(&dX, o, "dQ of a refused attention backward");
    h_assert_bytes(&Y, o, "out of a refused attention");
    clattn_tensor *ts[] = {&y, &dy, &dy5, &dx, &dxi, &y16, &A, &B, &dB, &W, &db,
                           &X, &W4, &dX, &dX5, &dW4, &sv, &sv53, &Y};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        clattn_tensor_release(ts[i]);
}

/* The double reference of the backward of one head with d = 1 (scale 1) over nq rows and nk keys:
 * dQ (nq), dK (nk), dV (nk, dv), and each gradient's error scale (sum over its terms of
 * P (|dP| + |D|) |q or k|; dV's terms are positive: itself). */
static void ref_backward_d1(int nq, int nk, int dv, const float *q, const float *k,
                            const float *v, const float *g, double *dq, double *sq, double *dk,
                            double *sk, double *dvr)
{
    double *p = malloc((size_t)nk * sizeof *p), *dp = malloc((size_t)nk * sizeof *dp);
    assert_non_null(p);
    assert_non_null(dp);
    memset(dk, 0, (size_t)nk * sizeof *dk);
    memset(sk, 0, (size_t)nk * sizeof *sk);
    memset(dvr, 0, (size_t)nk * dv * sizeof *dvr);
    for (int i = 0; i < nq; i++) {
        double m = -INFINITY, l = 0.0, D = 0.0;
        for (int j = 0; j < nk; j++)
            m = fmax(m, p[j] = (double)q[i] * k[j]);
        for (int j = 0; j < nk; j++)
            l += p[j] = exp(p[j] - m);
        for (int j = 0; j < nk; j++) {
            double t = 0.0;
            for (int e = 0; e < dv; e++)
                t += (double)g[(size_t)i * dv + e] * v[(size_t)j * dv + e];
            p[j] /= l;
            dp[j] = t;
            D += p[j] * t;
        }
        dq[i] = sq[i] = 0.0;
        for (int j = 0; j < nk; j++) {
            double ds = p[j] * (dp[j] - D), w = p[j] * (fabs(dp[j]) + fabs(D));
            dq[i] += ds * k[j];
            sq[i] += w * fabs(k[j]);
            dk[j] += ds * q[i];
            sk[j] += w * fabs(q[i]);
            for (int e = 0; e < dv; e++)
                dvr[(size_t)j * dv + e] += p[j] * g[(size_t)i * dv + e];
        }
    }
    free(p);
    free(dp);
}

/* dK and dV sum over every query row: over 2^22 + 3 rows a sum kept tile by tile (QR rows) was
 * 3.6e-4 to 1.2e-3 off in dV (the unfused chain's GEMMs 1.2e-6). Each fused shape and the unfused chain
 * against the double reference, relative to the error scales of ref_backward_d1. Positive q and
 * key j's values in [0.5 + 0.4 j, 0.6 + 0.4 j] give every row the same order of dP over the keys,
 * so that dS keeps its sign down the rows for the first and last key: their dK sums drift like
 * dV's (about a fifth of their error scale; with q of both signs dK is a random walk, 1e-3 of
 * it, where no drift shows). Tolerance
 * (u = 2^-24): a weight recomputed from the forward's LSE (a few ulp of |lse| <= 2.7, absolute,
 * so relative to the weight) and its exponential within 16 u; dS's dP - D (dv = 16 terms, D from
 * the float32 output) within 32 u of |dP| + |D|; the fused kernel's sums between flushes of at
 * most FLUSH x QR = 256 rows' terms within 256 u, the compensated totals 2 u (the unfused chain's
 * GEMMs block their sums too). 306 u = 1.8e-5: 2e-5. Only with CLATTN_TEST_HUGE=1. */
#define LONG_Q_TOL 2e-5
static void test_long_query_sums(void **s)
{
    (void)s;
    if (!h_huge())
        skip();
    static const char *const tunings[] = {"", "backward=cpu:QR=1:KB=16",
                                          "backward=cpu:QR=16:KB=64", "backward=unfused"};
    const int nq = (1 << 22) + 3, nk = 3, dv = 16;
    float *q = malloc((size_t)nq * sizeof *q), k[3], v[3 * 16];
    float *g = malloc((size_t)nq * dv * sizeof *g);
    double *dq = malloc((size_t)nq * sizeof *dq), *sq = malloc((size_t)nq * sizeof *sq);
    double dk[3], sk[3], dvr[3 * 16];
    assert_non_null(q);
    assert_non_null(g);
    assert_non_null(dq);
    assert_non_null(sq);
    h_fill(q, (size_t)nq, 0.5, 1.5);
    h_fill(k, (size_t)nk, -1, 1);
    for (int j = 0; j < nk; j++)
        h_fill(v + j * dv, (size_t)dv, 0.5 + 0.4 * j, 0.6 + 0.4 * j);
    h_fill(g, (size_t)nq * dv, 0.5, 1.5);
    ref_backward_d1(nq, nk, dv, q, k, v, g, dq, sq, dk, sk, dvr);
    clattn_tensor tq = h_tensor(CLATTN_FLOAT32, 2, H_DIMS((size_t)nq, 1), q);
    clattn_tensor tk = h_tensor(CLATTN_FLOAT32, 2, H_DIMS((size_t)nk, 1), k);
    clattn_tensor tv = h_tensor(CLATTN_FLOAT32, 2, H_DIMS((size_t)nk, (size_t)dv), v);
    clattn_tensor tg = h_tensor(CLATTN_FLOAT32, 2, H_DIMS((size_t)nq, (size_t)dv), g);
    clattn_tensor to = h_tensor(CLATTN_FLOAT32, 2, H_DIMS((size_t)nq, (size_t)dv), NULL);
    clattn_tensor tl = h_tensor(CLATTN_FLOAT32, 1, H_DIMS((size_t)nq), NULL);
    clattn_tensor gq = h_tensor(CLATTN_FLOAT32, 2, H_DIMS((size_t)nq, 1), NULL);
    clattn_tensor gk = h_tensor(CLATTN_FLOAT32, 2, H_DIMS((size_t)nk, 1), NULL);
    clattn_tensor gv = h_tensor(CLATTN_FLOAT32, 2, H_DIMS((size_t)nk, (size_t)dv), NULL);
    clattn_attention_opts opts;
    memset(&opts, 0, sizeof opts);
    opts.lse = &tl;
    if (clattn_dot_product_attention(h_ctx, &tq, &tk, &tv, &opts, &to, NULL) != CLATTN_SUCCESS)
        fail_msg("forward: %s", clattn_last_error(h_ctx));
    for (size_t i = 0; i < sizeof tunings / sizeof tunings[0]; i++) {
        clattn_context *ctx = h_ctx_tuned(tunings[i]);
        h_poison(&gq);
        h_poison(&gk);
        h_poison(&gv);
        clattn_attention_grads grads = {&gq, &gk, &gv, NULL};
        if (clattn_dot_product_attention_backward(ctx, &tq, &tk, &tv, &opts, &to, &tg, &grads) !=
            CLATTN_SUCCESS)
            fail_msg("%s: %s", tunings[i], clattn_last_error(ctx));
        float *rq = h_read_float(&gq), *rk = h_read_float(&gk), *rv = h_read_float(&gv);
        char what[96];
        snprintf(what, sizeof what, "CLATTN_TUNE=%s: %d rows: dQ", tunings[i], nq);
        h_assert_scaled(rq, dq, sq, (size_t)nq, LONG_Q_TOL, what);
        snprintf(what, sizeof what, "CLATTN_TUNE=%s: %d rows: dK", tunings[i], nq);
        h_assert_scaled(rk, dk, sk, (size_t)nk, LONG_Q_TOL, what);
        snprintf(what, sizeof what, "CLATTN_TUNE=%s: %d rows: dV", tunings[i], nq);
        h_assert_close(rv, dvr, (size_t)nk * dv, LONG_Q_TOL, 0.0, what);
        free(rq);
        free(rk);
        free(rv);
        clattn_context_destroy(&ctx);
    }
    clattn_tensor *ts[] = {&tq, &tk, &tv, &tg, &to, &tl, &gq, &gk, &gv};
    for (size_t j = 0; j < sizeof ts / sizeof ts[0]; j++)
        clattn_tensor_release(ts[j]);
    free(q);
    free(g);
    free(dq);
    free(sq);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_softmax_backward), cmocka_unit_test(test_dropout_backward),
        cmocka_unit_test(test_matmul_backward), cmocka_unit_test(test_linear_backward),
        cmocka_unit_test(test_attention_backward), cmocka_unit_test(test_bias_grad_split),
        cmocka_unit_test(test_backward_nonfinite), cmocka_unit_test(test_backward_tiles),
        cmocka_unit_test(test_mha_backward), cmocka_unit_test(test_mha_saved),
        cmocka_unit_test(test_additive_backward), cmocka_unit_test(test_additive_scores_backward),
        cmocka_unit_test(test_axpy),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_long_query_sums),
    };
    return cmocka_run_group_tests(tests, h_setup, h_teardown);
}
