/* clattn_masked_softmax_ce_loss and its backward against the double reference (d2l's
 * MaskedSoftmaxCELoss and its gradient) and central finite differences of it; lengths 0, T and
 * out of range (clamped), ignored labels, -inf, +inf and NaN logits, saved and recomputed
 * log-sum-exps, in place; CLATTN_SYNC's checks of device values; bad input. */
#include "harness.h"
#include "ref.h"
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Each loss and gradient element is a short chain of float32 operations on values of magnitude
 * its error scale (below): 1e-5 of it is ~100 ulp, while a key left out of a log-sum-exp or a
 * wrong weight moves it by far more. */
#define TOL 1e-5
/* The log-sum-exp: the maximum plus log(sum), a few ulp of |lse| and of the sum's log. */
#define LSE_RTOL 5e-7
#define LSE_ATOL 5e-7
#define FD_H 1e-5
#define FD_TOL 1e-4

typedef struct {
    int B, T, V;
    const int *lens;  /* NULL: no valid_len; values outside [0, T] are clamped */
    double scale;     /* logits uniform in [-scale, scale] */
    int ignore_every; /* > 0: every ignore_every-th label is -100 */
    int special;      /* 1: position 1 all -inf; 2: a NaN logit at the last position (weight 0
                         where a length ends before it); 3: +inf in position 1 (ignored with
                         ignore_every 2: its loss 0, its gradient row NaN, as in PyTorch); 4:
                         every logit 1e6 more (near ties far from 0); 5: labels outside
                         [0, V) without CLATTN_SYNC (-1 at position 1, V at the last, INT_MIN
                         and INT_MAX in the middle): NaN losses and gradient rows, never a read
                         outside the row */
    int save_lse;     /* the forward's lse goes to the backward (else NULL: recomputed) */
    int inplace;      /* dlogits = logits */
} ce_case;

typedef struct {
    int B, T, V;
    const int *labels, *lens;
    const double *dloss;
    double *loss;
} ce_fd;

static double ce_total(const double *x, void *arg)
{
    ce_fd *a = arg;
    double s = 0;
    ref_ce_loss(a->B, a->T, a->V, x, a->labels, a->lens, a->loss, NULL);
    for (int b = 0; b < a->B; b++)
        s += a->dloss[b] * a->loss[b];
    return s;
}

static void run(const ce_case *c)
{
    int B = c->B, T = c->T, V = c->V;
    size_t n = (size_t)B * T * V, rows = (size_t)B * T;
    float *x = malloc(n * 4), *dl = malloc((size_t)B * 4);
    int *lab = malloc(rows * sizeof(int));
    double *rloss = malloc((size_t)B * 8), *rlse = malloc(rows * 8), *rdx = malloc(n * 8);
    double *sc = malloc(n * 8), *lsc = malloc((size_t)B * 8);
    h_fill(x, n, -c->scale, c->scale);
    h_fill(dl, (size_t)B, -1, 1);
    for (size_t r = 0; r < rows; r++)
        lab[r] = c->ignore_every && r % (size_t)c->ignore_every == 1 ? -100 : h_randint(0, V - 1);
    if (c->special == 5) {
        lab[1] = -1;
        lab[rows - 1] = V;
        lab[rows / 2] = rows / 2 == 1 ? -1 : INT_MIN;
        lab[rows / 2 + 1] = INT_MAX;
    }
    if (c->special == 1)
        for (int v = 0; v < V; v++)
            x[(size_t)V + v] = -INFINITY;
    if (c->special == 2)
        x[n - 1 - (size_t)(V / 2)] = NAN;
    if (c->special == 3)
        x[(size_t)V + V / 2] = INFINITY;
    if (c->special == 4)
        for (size_t i = 0; i < n; i++)
            x[i] += 1e6f;
    double *xd = ref_to_double(x, n), *dld = ref_to_double(dl, (size_t)B);
    ref_ce_loss(B, T, V, xd, lab, c->lens, rloss, rlse);
    ref_ce_loss_backward(B, T, V, xd, lab, c->lens, dld, rdx);
    /* error scales, from the kernel's (m - x) + ls with lse = m + ls (m: the row's maximum):
     * sum_t w (1 + |m - x_label| + |ls|) / T per loss; per gradient element
     * |c| (p_v (1 + |x_v - m| + |ls| + e) + [v == label]): p = exp((x - m) - ls) carries that
     * sum's rounding as a relative error, and e = |lse| where the forward's rounded lse is used
     * instead (given, below 256 in size). Each no looser than |lse| + |x| in their place (the
     * scales of computing through lse), which is the smaller near 0. */
    for (int b = 0; b < B; b++) {
        int len = c->lens ? (c->lens[b] < 0 ? 0 : c->lens[b] > T ? T : c->lens[b]) : T;
        lsc[b] = 1e-30;
        for (int t = 0; t < T; t++) {
            size_t r = (size_t)b * T + t;
            double m = -INFINITY;
            for (int v = 0; v < V; v++)
                m = fmax(m, xd[r * V + v]);
            m = isfinite(m) ? m : 0;
            double ls = isfinite(rlse[r]) ? rlse[r] - m : 0;
            double e = c->save_lse && fabs(rlse[r]) < 256 ? fabs(rlse[r]) : 0;
            if (t < len && lab[r] >= 0 && lab[r] < V) /* an ignored label's ce is exactly 0 */
                lsc[b] += fmin(1 + fabs(m - xd[r * V + lab[r]]) + fabs(ls),
                               fabs(rlse[r]) + fabs(xd[r * V + lab[r]])) / T;
            for (int v = 0; v < V; v++) {
                size_t i = r * V + v;
                double p = exp(xd[i] - rlse[r]);
                sc[i] = fabs(dld[b]) / T * (p * fmin(1 + fabs(xd[i] - m) + fabs(ls) + e,
                                                     1 + fabs(xd[i]) + fabs(rlse[r])) +
                                            (v == lab[r])) + 1e-30;
            }
        }
    }
    clattn_tensor tx = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(B, T, V), x);
    clattn_tensor tlab = h_tensor(CLATTN_INT32, 2, H_DIMS(B, T), lab);
    clattn_tensor tlen = c->lens ? h_tensor(CLATTN_INT32, 1, H_DIMS(B), c->lens) : (clattn_tensor){0};
    clattn_tensor tloss = h_tensor(CLATTN_FLOAT32, 1, H_DIMS(B), NULL);
    clattn_tensor tlse = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(B, T), NULL);
    clattn_tensor tdl = h_tensor(CLATTN_FLOAT32, 1, H_DIMS(B), dl);
    clattn_tensor tdx = c->inplace ? tx : h_tensor(CLATTN_FLOAT32, 3, H_DIMS(B, T, V), NULL);
    h_poison(&tloss);
    h_poison(&tlse);
    if (!c->inplace)
        h_poison(&tdx);
    const clattn_tensor *len = c->lens ? &tlen : NULL;
    if (clattn_masked_softmax_ce_loss(h_ctx, &tx, &tlab, len, &tloss, &tlse) != CLATTN_SUCCESS)
        fail_msg("ce_loss: %s", clattn_last_error(h_ctx));
    if (clattn_masked_softmax_ce_loss_backward(h_ctx, &tx, &tlab, len, c->save_lse ? &tlse : NULL,
                                               &tdl, &tdx) != CLATTN_SUCCESS)
        fail_msg("ce_loss_backward: %s", clattn_last_error(h_ctx));
    float *gloss = h_read(&tloss), *glse = h_read(&tlse), *gdx = h_read(&tdx);
    char what[160];
    snprintf(what, sizeof what, "ce loss B %d T %d V %d lens %s scale %g ignore %d special %d%s%s",
             B, T, V, c->lens ? "given" : "none", c->scale, c->ignore_every, c->special,
             c->save_lse ? " saved lse" : "", c->inplace ? " in place" : "");
    h_assert_scaled(gloss, rloss, lsc, (size_t)B, TOL, what);
    h_assert_close(glse, rlse, rows, LSE_RTOL, LSE_ATOL, what);
    h_assert_scaled(gdx, rdx, sc, n, TOL, what);
    if (n <= 300 && !c->special) { /* the true gradient of the loss */
        double *g = malloc(n * 8), *lb = malloc((size_t)B * 8), mag = 0;
        ce_fd a = {B, T, V, lab, c->lens, dld, lb};
        for (size_t i = 0; i < n; i++)
            g[i] = xd[i];
        double *xx = g;
        g = malloc(n * 8);
        for (int b = 0; b < B; b++)
            mag += fabs(dld[b]) * lsc[b];
        /* central differences, with their own noise: double roundings of the total over 2h */
        for (size_t i = 0; i < n; i++) {
            double x0 = xx[i];
            xx[i] = x0 + FD_H;
            double hi = ce_total(xx, &a);
            xx[i] = x0 - FD_H;
            double lo = ce_total(xx, &a);
            xx[i] = x0;
            g[i] = (hi - lo) / (2 * FD_H);
            sc[i] += 1e-15 * (mag + 1) / FD_H / FD_TOL;
        }
        snprintf(what + strlen(what), sizeof what - strlen(what), " (finite differences)");
        h_assert_scaled(gdx, g, sc, n, FD_TOL, what);
        free(g);
        free(xx);
        free(lb);
    }
    free(gloss);
    free(glse);
    free(gdx);
    clattn_tensor *ts[] = {&tx, &tlab, &tloss, &tlse, &tdl};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        clattn_tensor_release(ts[i]);
    if (c->lens)
        clattn_tensor_release(&tlen);
    if (!c->inplace)
        clattn_tensor_release(&tdx);
    free(x);
    free(dl);
    free(lab);
    free(rloss);
    free(rlse);
    free(rdx);
    free(sc);
    free(lsc);
    free(xd);
    free(dld);
}

#define CASES(...)                                                    \
    do {                                                              \
        const ce_case cs_[] = {__VA_ARGS__};                          \
        for (size_t i_ = 0; i_ < sizeof cs_ / sizeof cs_[0]; i_++)    \
            run(&cs_[i_]);                                            \
    } while (0)

static void test_shapes(void **s)
{
    (void)s;
    CASES({1, 1, 1, NULL, 3}, {1, 1, 7, NULL, 3}, {2, 3, 5, NULL, 3, 0, 0, 1},
          {3, 4, 17, NULL, 3}, {2, 5, 16, NULL, 3, 0, 0, 1}, {2, 3, 15, NULL, 3, 0, 0, 0, 1},
          {1, 2, 1, NULL, 3, 0, 0, 1, 1});
    if (!h_small())
        CASES({4, 3, 1000, NULL, 3, 0, 0, 1}, {2, 2, 10000, NULL, 5}, {3, 37, 129, NULL, 3});
}

static void test_lengths_and_labels(void **s)
{
    (void)s;
    static const int l0[] = {0, 4, 2}, lc[] = {-3, 9, 1}, l5[] = {5, 0, 3, 5};
    CASES({3, 4, 9, l0, 3}, {3, 4, 9, lc, 3, 0, 0, 1}, {4, 5, 6, l5, 3, 3},
          {4, 5, 6, l5, 3, 2, 0, 1, 1}, {3, 4, 33, l0, 3, 1, 0, 0}, {3, 4, 9, NULL, 3, 0, 5},
          {4, 5, 6, l5, 3, 0, 5, 1, 1});
}

/* Large logits (the maximum is subtracted), and -inf, +inf and NaN logits: NaN losses and
 * gradient rows where PyTorch gives them, the other sequences untouched. */
static void test_extremes(void **s)
{
    (void)s;
    static const int l2[] = {1, 2};
    CASES({2, 3, 11, NULL, 1000, 0, 0, 1}, {2, 3, 11, NULL, 3, 0, 1}, {2, 3, 11, NULL, 3, 0, 1, 1},
          {2, 3, 11, l2, 3, 0, 2}, {2, 3, 11, l2, 3, 0, 2, 1}, {2, 3, 11, NULL, 3, 0, 3},
          {2, 3, 11, l2, 3, 2, 1, 1, 1}, {2, 3, 11, NULL, 3, 2, 3},
          /* logits near 1e6: lse = m + ls rounds at 0.06, ce and the gradient must not */
          {2, 3, 11, NULL, 3, 0, 4}, {2, 3, 11, l2, 3, 0, 4, 1}, {2, 3, 40, NULL, 3, 3, 4, 1, 1});
}

/* CLATTN_SYNC reads the device values back: a label outside [0, V) (not -100) and a length
 * outside [0, T] are refused, nothing is written. */
static void test_sync_rejects(void **s)
{
    (void)s;
    clattn_params p;
    memset(&p, 0, sizeof p);
    p.sync = 1;
    clattn_context *ctx = NULL;
    if (clattn_context_wrap(&ctx, clattn_context_cl(h_ctx), clattn_context_device(h_ctx),
                            clattn_context_queue(h_ctx), &p) != CLATTN_SUCCESS)
        fail_msg("%s", clattn_last_error(NULL));
    float x[2 * 3 * 4] = {0}, o[2], got[2];
    int lab[6] = {0, 3, -100, 1, 4, 2}, lab_ok[6] = {0, 3, -100, 1, 2, 2}, lens[2] = {3, 4};
    h_fill(o, 2, 5, 6);
    clattn_tensor tx = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(2, 3, 4), x);
    clattn_tensor tlab = h_tensor(CLATTN_INT32, 2, H_DIMS(2, 3), lab);
    clattn_tensor tok = h_tensor(CLATTN_INT32, 2, H_DIMS(2, 3), lab_ok);
    clattn_tensor tlen = h_tensor(CLATTN_INT32, 1, H_DIMS(2), lens);
    clattn_tensor tloss = h_tensor(CLATTN_FLOAT32, 1, H_DIMS(2), o);
    clattn_status st = clattn_masked_softmax_ce_loss(ctx, &tx, &tlab, NULL, &tloss, NULL);
    if (st != CLATTN_ERROR_INVALID_ARGUMENT || !strstr(clattn_last_error(ctx), "labels[4] = 4"))
        fail_msg("status %d: %s", st, clattn_last_error(ctx));
    st = clattn_masked_softmax_ce_loss(ctx, &tx, &tok, &tlen, &tloss, NULL);
    if (st != CLATTN_ERROR_INVALID_ARGUMENT || !strstr(clattn_last_error(ctx), "valid_len[1] = 4"))
        fail_msg("status %d: %s", st, clattn_last_error(ctx));
    assert_int_equal(clattn_tensor_read_blocking(ctx, &tloss, got), CLATTN_SUCCESS);
    assert_memory_equal(got, o, sizeof o);
    clattn_tensor *ts[] = {&tx, &tlab, &tok, &tlen, &tloss};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        clattn_tensor_release(ts[i]);
    clattn_context_destroy(&ctx);
}

static void test_bad_input(void **s)
{
    (void)s;
    float z[2 * 3 * 4] = {0}, o[24];
    int lab[6] = {0};
    h_fill(o, 24, 5, 6);
    clattn_tensor x = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(2, 3, 4), z);
    clattn_tensor x2 = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(6, 4), z);
    clattn_tensor lb = h_tensor(CLATTN_INT32, 2, H_DIMS(2, 3), lab);
    clattn_tensor lb32 = h_tensor(CLATTN_INT32, 2, H_DIMS(3, 2), lab);
    clattn_tensor lbf = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(2, 3), z);
    clattn_tensor len3 = h_tensor(CLATTN_INT32, 1, H_DIMS(3), lab);
    clattn_tensor loss = h_tensor(CLATTN_FLOAT32, 1, H_DIMS(2), o);
    clattn_tensor loss3 = h_tensor(CLATTN_FLOAT32, 1, H_DIMS(3), o);
    clattn_tensor lse = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(2, 4), o);
    clattn_tensor dx = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(2, 3, 4), o);
    clattn_tensor dx5 = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(2, 3, 5), o);
    h_assert_error(clattn_masked_softmax_ce_loss(h_ctx, &x2, &lb, NULL, &loss, NULL),
                   CLATTN_ERROR_SHAPE_MISMATCH, "logits: rank 2");
    h_assert_error(clattn_masked_softmax_ce_loss(h_ctx, &x, &lb32, NULL, &loss, NULL),
                   CLATTN_ERROR_SHAPE_MISMATCH, "labels: shape (3, 2), expected (B, T) of logits "
                   "(2, 3, 4)");
    h_assert_error(clattn_masked_softmax_ce_loss(h_ctx, &x, &lbf, NULL, &loss, NULL),
                   CLATTN_ERROR_INVALID_TENSOR, "labels");
    h_assert_error(clattn_masked_softmax_ce_loss(h_ctx, &x, &lb, &len3, &loss, NULL),
                   CLATTN_ERROR_SHAPE_MISMATCH, "valid_len: 3 elements, expected B = 2");
    h_assert_error(clattn_masked_softmax_ce_loss(h_ctx, &x, &lb, NULL, &loss3, NULL),
                   CLATTN_ERROR_SHAPE_MISMATCH, "loss: shape (3), expected (B) of the logits");
    h_assert_error(clattn_masked_softmax_ce_loss(h_ctx, &x, &lb, NULL, &loss, &lse),
                   CLATTN_ERROR_SHAPE_MISMATCH, "lse: shape (2, 4), expected (B, T)");
    h_assert_error(clattn_masked_softmax_ce_loss(h_ctx, &x, &lb, NULL, &x, NULL),
                   CLATTN_ERROR_SHAPE_MISMATCH, "loss: rank 3");
    h_assert_bytes(&loss, o, "loss of a refused loss");
    h_assert_error(clattn_masked_softmax_ce_loss_backward(h_ctx, &x, &lb, NULL, NULL, &loss,
                                                          &dx5),
                   CLATTN_ERROR_SHAPE_MISMATCH, "dlogits: shape (2, 3, 5), expected the logits' "
                   "shape");
    h_assert_error(clattn_masked_softmax_ce_loss_backward(h_ctx, &x, &lb, NULL, NULL, &loss3,
                                                          &dx),
                   CLATTN_ERROR_SHAPE_MISMATCH, "dloss: shape (3)");
    h_assert_error(clattn_masked_softmax_ce_loss_backward(h_ctx, &x, &lb, NULL, &lse, &loss, &dx),
                   CLATTN_ERROR_SHAPE_MISMATCH, "lse: shape (2, 4)");
    h_assert_bytes(&dx, o, "dlogits of a refused backward");
    clattn_tensor *ts[] = {&x, &x2, &lb, &lb32, &lbf, &len3, &loss, &loss3, &lse, &dx, &dx5};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        clattn_tensor_release(ts[i]);
}

/* One sequence of 2^24 + 3 positions (V 2, logits in [-2, 2], random labels): the mean adds
 * every position's loss, and a plain float32 sum of terms near 0.5 stops growing near 2^23 (each
 * term half an ulp of the total there); it is compensated. Tolerance, relative to the loss: each
 * position's ce = lse - x_label rounds within 8 u of |lse| <= 3 (exp, log, the subtraction's
 * cancellation), 24 u absolute against a mean term of about 0.5: 48 u; the compensated sum 2 u
 * and the division 1 u: 51 u = 3.0e-6, so 4e-6. Skipped on Oclgrind (CLATTN_TEST_SMALL) and
 * where a loop budget refuses the sequence (llvmpipe). */
static void test_long_sequence(void **s)
{
    (void)s;
    if (h_small())
        skip();
    const int T = (1 << 24) + 3, V = 2;
    float *x = malloc((size_t)T * V * sizeof *x);
    int *lab = malloc((size_t)T * sizeof *lab);
    assert_non_null(x);
    assert_non_null(lab);
    h_fill(x, (size_t)T * V, -2, 2);
    double ref = 0;
    for (int t = 0; t < T; t++) {
        lab[t] = h_randint(0, 1);
        double a = x[2 * t], b = x[2 * t + 1], m = fmax(a, b);
        ref += m + log(exp(a - m) + exp(b - m)) - x[2 * t + lab[t]];
    }
    ref /= T;
    clattn_tensor tx = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(1, (size_t)T, (size_t)V), x);
    clattn_tensor tl = h_tensor(CLATTN_INT32, 2, H_DIMS(1, (size_t)T), lab);
    clattn_tensor tloss = h_tensor(CLATTN_FLOAT32, 1, H_DIMS(1), NULL);
    h_poison(&tloss);
    clattn_status st = clattn_masked_softmax_ce_loss(h_ctx, &tx, &tl, NULL, &tloss, NULL);
    if (st == CLATTN_ERROR_UNSUPPORTED && strstr(clattn_last_error(h_ctx), "loop budget")) {
        print_message("refused under this device's loop budget: %s\n", clattn_last_error(h_ctx));
    } else {
        if (st != CLATTN_SUCCESS)
            fail_msg("ce_loss: %s", clattn_last_error(h_ctx));
        float *got = h_read_float(&tloss);
        h_assert_close(got, &ref, 1, 4e-6, 0.0, "the loss of one sequence of 2^24 + 3 positions");
        free(got);
    }
    clattn_tensor *ts[] = {&tx, &tl, &tloss};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        clattn_tensor_release(ts[i]);
    free(x);
    free(lab);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shapes),        cmocka_unit_test(test_lengths_and_labels),
        cmocka_unit_test(test_extremes),      cmocka_unit_test(test_sync_rejects),
        cmocka_unit_test(test_bad_input),     cmocka_unit_test(test_long_sequence),
    };
    return cmocka_run_group_tests(tests, h_setup, h_teardown);
}
