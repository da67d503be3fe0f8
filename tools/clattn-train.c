/* clattn-train: trains a small model end to end on the OpenCL device with clattn's forward and
 * backward ops and plain SGD (clattn_axpy), printing the loss as it falls.
 *
 * The task: reverse a sequence of T tokens out of V. Each position's input is the one-hot token
 * and the one-hot position (V + T features); one multi-head self-attention block (d2l's
 * MultiHeadAttention with biases, H heads of dh) whose output projection gives the V logits of
 * the token at the mirrored position; d2l's MaskedSoftmaxCELoss on them. Attention alone solves
 * it: a query at position t has to find the key at position T - 1 - t and copy its token, so the
 * loss falls from log V toward 0 only if the gradients of every weight are right.
 *
 * usage: clattn-train [--steps N] [--lr X] [--seed N] [--check LOSS]
 *   --check: exit 1 unless the mean loss of the last 10 steps is below LOSS (the test's use). */
#include <clattn.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define V 8      /* tokens */
#define T 8      /* positions */
#define F (V + T)
#define B 32     /* sequences per step */
#define H 2      /* heads */
#define DH 8     /* head size */
#define HID (H * DH)
#define NPARAM 8 /* W_q, W_k, W_v, W_o, b_q, b_k, b_v, b_o */

typedef struct {
    clattn_context *ctx;
    uint64_t rng;
    clattn_tensor p[NPARAM], g[NPARAM]; /* parameters and their gradients */
    clattn_tensor x, labels, logits, loss, lse, dloss;
    clattn_tensor saved; /* what the forward saves for the backward (opts.saved) */
} trainer;

static void die_on(const trainer *t, clattn_status st, const char *what)
{
    if (st == CLATTN_SUCCESS)
        return;
    fprintf(stderr, "clattn-train: %s: %s: %s\n", what, clattn_status_string(st),
            clattn_last_error(t->ctx));
    exit(2);
}

static double uniform01(trainer *t)
{
    uint64_t z = (t->rng += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

/* PyTorch's nn.Linear initialisation: uniform in +-1/sqrt(fan_in), weights and biases alike. */
static void make_params(trainer *t)
{
    static const size_t rows[NPARAM] = {HID, HID, HID, V, HID, HID, HID, V};
    static const size_t cols[NPARAM] = {F, F, F, HID, 0, 0, 0, 0};
    static const size_t fan[NPARAM] = {F, F, F, HID, F, F, F, HID};
    for (int i = 0; i < NPARAM; i++) {
        size_t n = rows[i] * (cols[i] ? cols[i] : 1), dims[2] = {rows[i], cols[i]};
        float *h = malloc(n * sizeof *h);
        if (!h)
            exit(2);
        double bound = 1.0 / sqrt((double)fan[i]);
        for (size_t j = 0; j < n; j++)
            h[j] = (float)((2 * uniform01(t) - 1) * bound);
        int nd = cols[i] ? 2 : 1;
        die_on(t, clattn_tensor_create(t->ctx, CLATTN_FLOAT32, nd, dims, h, &t->p[i]), "param");
        die_on(t, clattn_tensor_create(t->ctx, CLATTN_FLOAT32, nd, dims, NULL, &t->g[i]), "grad");
        free(h);
    }
}

/* A fresh batch: random tokens, inputs (token and position one-hot), labels (the reversal). */
static void make_batch(trainer *t)
{
    static float x[B * T * F];
    static int labels[B * T];
    int tok[T];
    memset(x, 0, sizeof x);
    for (int b = 0; b < B; b++) {
        for (int s = 0; s < T; s++)
            tok[s] = (int)(uniform01(t) * V) % V;
        for (int s = 0; s < T; s++) {
            x[((size_t)b * T + s) * F + tok[s]] = 1.0f;
            x[((size_t)b * T + s) * F + V + s] = 1.0f;
            labels[b * T + s] = tok[T - 1 - s];
        }
    }
    die_on(t, clattn_tensor_write_blocking(t->ctx, &t->x, x), "write inputs");
    die_on(t, clattn_tensor_write_blocking(t->ctx, &t->labels, labels), "write labels");
}

/* One SGD step; returns the batch's mean loss before the update. */
static double step(trainer *t, float lr)
{
    clattn_mha_weights w = {H, &t->p[0], &t->p[1], &t->p[2], &t->p[3],
                            &t->p[4], &t->p[5], &t->p[6], &t->p[7], 0};
    clattn_mha_grads g = {NULL, NULL, NULL, &t->g[0], &t->g[1], &t->g[2], &t->g[3],
                          &t->g[4], &t->g[5], &t->g[6], &t->g[7], NULL};
    float loss[B];
    clattn_attention_opts opts;
    memset(&opts, 0, sizeof opts);
    opts.saved = &t->saved;
    make_batch(t);
    if (!t->saved.buf) {
        size_t n = clattn_mha_saved_numel(&t->x, &t->x, &w);
        die_on(t, clattn_tensor_create(t->ctx, CLATTN_FLOAT32, 1, &n, NULL, &t->saved), "saved");
    }
    die_on(t, clattn_multihead_attention(t->ctx, &t->x, &t->x, &t->x, &w, &opts, &t->logits,
                                         NULL), "forward");
    die_on(t, clattn_masked_softmax_ce_loss(t->ctx, &t->logits, &t->labels, NULL, &t->loss,
                                            &t->lse), "loss");
    /* the gradient of the batch's mean loss; dlogits overwrite the logits */
    die_on(t, clattn_masked_softmax_ce_loss_backward(t->ctx, &t->logits, &t->labels, NULL,
                                                     &t->lse, &t->dloss, &t->logits),
           "loss backward");
    die_on(t, clattn_multihead_attention_backward(t->ctx, &t->x, &t->x, &t->x, &w, &opts,
                                                  &t->logits, &g), "backward");
    for (int i = 0; i < NPARAM; i++)
        die_on(t, clattn_axpy(t->ctx, -lr, &t->g[i], &t->p[i]), "SGD update");
    die_on(t, clattn_tensor_read_blocking(t->ctx, &t->loss, loss), "read loss");
    double s = 0;
    for (int b = 0; b < B; b++)
        s += loss[b];
    return s / B;
}

static void bad_value(const char *opt, const char *v, const char *want)
{
    fprintf(stderr, "clattn-train: %s: '%s': expected %s\n", opt, v, want);
    exit(2);
}

/* Decimal digits only: strtoull and atoi would take "-5" or "abc" without a word. */
static unsigned long long parse_uint(const char *opt, const char *v, unsigned long long lo,
                                     unsigned long long hi, const char *want)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (!isdigit((unsigned char)*v) || *end || errno || x < lo || x > hi)
        bad_value(opt, v, want);
    return x;
}

/* A number above 0 and finite even as a float: a rate of 0 or inf, or a --check bound no loss
 * can stay under, is a typo, not a request. */
static double parse_positive(const char *opt, const char *v)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end || errno || !((float)x > 0) || !isfinite((float)x))
        bad_value(opt, v, "a finite number above 0");
    return x;
}

int main(int argc, char **argv)
{
    trainer t;
    int steps = 400;
    float lr = 2.0f;
    double check = -1;
    memset(&t, 0, sizeof t);
    t.rng = 1;
    for (int i = 1; i < argc; i++) {
        const char *opt = argv[i];
        if (strcmp(opt, "--steps") == 0 && i + 1 < argc)
            steps = (int)parse_uint(opt, argv[++i], 1, 1000000, "an integer 1-1000000");
        else if (strcmp(opt, "--lr") == 0 && i + 1 < argc)
            lr = (float)parse_positive(opt, argv[++i]);
        else if (strcmp(opt, "--seed") == 0 && i + 1 < argc)
            t.rng = parse_uint(opt, argv[++i], 0, ULLONG_MAX, "a decimal integer");
        else if (strcmp(opt, "--check") == 0 && i + 1 < argc)
            check = parse_positive(opt, argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--steps N] [--lr X] [--seed N] [--check LOSS]\n", argv[0]);
            return 2;
        }
    }
    if (clattn_context_create(&t.ctx, NULL) != CLATTN_SUCCESS) {
        fprintf(stderr, "clattn-train: %s\n", clattn_last_error(NULL));
        return 2;
    }
    printf("clattn-train on %s: reverse %d tokens of %d, multi-head attention (%d heads of %d), "
           "MaskedSoftmaxCELoss, SGD lr %g, batches of %d\n",
           clattn_context_description(t.ctx), T, V, H, DH, (double)lr, B);
    make_params(&t);
    size_t xd[3] = {B, T, F}, ld[2] = {B, T}, od[3] = {B, T, V}, bd[1] = {B};
    die_on(&t, clattn_tensor_create(t.ctx, CLATTN_FLOAT32, 3, xd, NULL, &t.x), "x");
    die_on(&t, clattn_tensor_create(t.ctx, CLATTN_INT32, 2, ld, NULL, &t.labels), "labels");
    die_on(&t, clattn_tensor_create(t.ctx, CLATTN_FLOAT32, 3, od, NULL, &t.logits), "logits");
    die_on(&t, clattn_tensor_create(t.ctx, CLATTN_FLOAT32, 1, bd, NULL, &t.loss), "loss");
    die_on(&t, clattn_tensor_create(t.ctx, CLATTN_FLOAT32, 2, ld, NULL, &t.lse), "lse");
    die_on(&t, clattn_tensor_create(t.ctx, CLATTN_FLOAT32, 1, bd, NULL, &t.dloss), "dloss");
    die_on(&t, clattn_tensor_fill(t.ctx, &t.dloss, 1.0f / B), "dloss");
    double last[10] = {0}, first = 0;
    for (int s = 0; s < steps; s++) {
        double l = step(&t, lr);
        if (s == 0)
            first = l;
        last[s % 10] = l;
        if (s % 25 == 0 || s == steps - 1)
            printf("step %4d  loss %.4f\n", s, l);
    }
    double mean = 0;
    int n = steps < 10 ? steps : 10;
    for (int i = 0; i < n; i++)
        mean += last[i];
    mean /= n > 0 ? n : 1;
    printf("loss %.4f -> %.4f (mean of the last %d steps; log %d = %.4f)\n", first, mean, n, V,
           log((double)V));
    int ok = check < 0 || mean < check;
    if (check >= 0)
        printf("%s: the loss fell below %g\n", ok ? "PASS" : "FAIL", check);
    clattn_tensor *ts[] = {&t.x, &t.labels, &t.logits, &t.loss, &t.lse, &t.dloss, &t.saved};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        clattn_tensor_release(ts[i]);
    for (int i = 0; i < NPARAM; i++) {
        clattn_tensor_release(&t.p[i]);
        clattn_tensor_release(&t.g[i]);
    }
    clattn_context_destroy(&t.ctx);
    return ok ? 0 : 1;
}
