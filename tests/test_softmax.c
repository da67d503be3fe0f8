/* clattn_masked_softmax against the double-precision reference, every mask kind. */
#include "harness.h"
#include "mask.h"
#include "ref.h"
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Float32 exp is within 3 ulp (OpenCL spec) and the row sum adds about sqrt(K) ulp of relative
 * error: 1e-5 relative is 30x that margin at K = 1000, while one wrongly masked key moves an
 * element by far more. The tiny absolute part covers results that underflow toward 0. */
#define SM_RTOL 1e-5
#define SM_ATOL 1e-9

enum { LENS_NONE = H_LENS_NONE, LENS_1D = H_LENS_1D, LENS_2D = H_LENS_2D };
typedef struct {
    int rank;
    size_t dims[4];
    int lens;            /* LENS_* */
    int lens_on_device;  /* 1: a device tensor instead of the host array */
    int mask_rank;       /* 0 = no mask tensor */
    size_t mask_dims[4];
    int causal;
    float fill;          /* 0 = default */
    double scale;        /* logits uniform in [-scale, scale] */
    int inplace;
    const int *fixed_lens; /* NULL = random lengths in [0, K] */
    int align, window, wl, wr; /* clattn_mask's align, window, window_left, window_right */
    clattn_dtype xt, yt;   /* the scores' and the output's dtypes (0: float32) */
    int ninf;              /* > 0: every ninf-th score is -inf (1: every score) */
    int nan_at, pinf_at;   /* > 0: every nan_at-th score NaN, every pinf_at-th +inf (from 1) */
    int views;             /* 1: scores and output are views at x_off, y_off into larger buffers */
    size_t x_off, y_off;
} sm_case;

/* A view at element offset off into a new buffer of off + n + VIEW_TAIL elements: host's n values
 * in the view (NULL: NaN), NaN around it. One write of the whole buffer: Oclgrind 21.10's shadow
 * memory takes a host write at an offset for the buffer's start, so its tail would read as
 * uninitialized. */
#define VIEW_TAIL 16 /* the widest vector */
static clattn_tensor view_at(clattn_dtype dt, int rank, const size_t *dims, size_t off,
                             const float *host, clattn_tensor *base)
{
    size_t n = 1, all;
    for (int i = 0; i < rank; i++)
        n *= dims[i];
    all = off + n + VIEW_TAIL;
    float *v = malloc(all * sizeof *v);
    assert_non_null(v);
    for (size_t i = 0; i < all; i++)
        v[i] = host && i >= off && i < off + n ? host[i - off] : NAN;
    *base = h_tensor(dt, 1, &all, NULL);
    h_write_float(base, v);
    free(v);
    return clattn_view(base->buf, dt, off, rank, dims);
}

/* A 16-bit output's roundings, each within u of its weight, move a row's sum by at most u. */
static void check_rows_sum_to_one(const float *y, size_t rows, size_t K, double u)
{
    for (size_t r = 0; r < rows; r++) {
        double s = 0;
        for (size_t k = 0; k < K; k++)
            s += y[r * K + k];
        if (isnan(y[r * K])) /* a row of -inf scores: NaN, checked against the reference */
            continue;
        if (!(fabs(s - 1.0) <= 1e-5 * sqrt((double)K) + 1e-6 + u))
            fail_msg("row %zu sums to %.9g", r, s);
    }
}

static void run(const sm_case *c)
{
    /* designated: a positional list once put causal in mask_prefix, so no softmax test ran
     * causal */
    h_mask_spec spec = {.lens = c->lens, .lens_on_device = c->lens_on_device,
                        .fixed_lens = c->fixed_lens, .mask_rank = c->mask_rank,
                        .mask_dims = {c->mask_dims[0], c->mask_dims[1], c->mask_dims[2],
                                      c->mask_dims[3]},
                        .causal = c->causal, .fill = c->fill, .align = c->align,
                        .window = c->window, .window_left = c->wl, .window_right = c->wr};
    h_mask hm;
    size_t n = 1, K = c->dims[c->rank - 1];
    for (int i = 0; i < c->rank; i++)
        n *= c->dims[i];
    float *x = malloc(n * 4);
    double *ref = malloc(n * 8);
    h_fill(x, n, -c->scale, c->scale);
    for (size_t i = 0; c->ninf && i < n; i += (size_t)c->ninf)
        x[i] = -INFINITY;
    for (size_t i = 1; c->nan_at && i < n; i += (size_t)c->nan_at)
        x[i] = NAN;
    for (size_t i = 1; c->pinf_at && i < n; i += (size_t)c->pinf_at)
        x[i] = INFINITY;
    h_round(x, n, c->xt); /* the reference sees the stored scores */
    h_mask_make(&hm, &spec, c->rank, c->dims);
    clattn_tensor bx = {0}, by = {0}, tx, ty;
    if (c->views) {
        tx = view_at(c->xt, c->rank, c->dims, c->x_off, x, &bx);
        ty = view_at(c->yt, c->rank, c->dims, c->y_off, NULL, &by);
    } else {
        tx = h_tensor_as(c->xt, c->rank, c->dims, x);
        ty = c->inplace ? tx : h_tensor(c->yt, c->rank, c->dims, NULL);
        if (!c->inplace)
            h_poison(&ty);
    }
    if (clattn_masked_softmax(h_ctx, &tx, &hm.m, &ty) != CLATTN_SUCCESS)
        fail_msg("masked_softmax: %s", clattn_last_error(h_ctx));
    float *got = h_read_float(&ty);
    ref_masked_softmax(&hm.r, x, ref);
    char what[240];
    snprintf(what, sizeof what, "softmax %s -> %s rank %d (%d,%d,%d,%d) lens %d%s mask rank %d "
             "causal %d align %d window %d (%d, %d)", h_dtype_name(c->xt), h_dtype_name(ty.dtype),
             c->rank, hm.r.D0, hm.r.D1, hm.r.Q, hm.r.K, c->lens,
             c->lens_on_device ? " (device)" : "", c->mask_rank, c->causal, c->align, c->window,
             c->wl, c->wr);
    /* A 16-bit output is the float32 result y rounded once: |got - ref| <= |y - ref| + u |y|,
     * u the output's unit roundoff, |y| <= |ref| (1 + SM_RTOL) + SM_ATOL, so the bounds grow
     * by u (and float16's subnormal step below 2^-14). */
    double u = ty.dtype == CLATTN_FLOAT32 ? 0.0 : h_unit_roundoff(ty.dtype);
    h_assert_close(got, ref, n, SM_RTOL + u * (1 + SM_RTOL), SM_ATOL * (1 + u) +
                   h_subnormal_step(ty.dtype), what);
    check_rows_sum_to_one(got, n / K, K, u);
    free(got);
    if (c->views) { /* nothing written around the output's view */
        float *all = h_read_float(&by);
        for (size_t i = 0; i < c->y_off + n + VIEW_TAIL; i++)
            if ((i < c->y_off || i >= c->y_off + n) && !isnan(all[i]))
                fail_msg("%s: element %zu outside the output view written", what, i);
        free(all);
        clattn_tensor_release(&bx);
        clattn_tensor_release(&by);
    } else {
        if (!c->inplace)
            clattn_tensor_release(&ty);
        clattn_tensor_release(&tx);
    }
    h_mask_free(&hm);
    free(x);
    free(ref);
}

#define CASES(...)                                                    \
    do {                                                              \
        const sm_case cs_[] = {__VA_ARGS__};                          \
        for (size_t i_ = 0; i_ < sizeof cs_ / sizeof cs_[0]; i_++)    \
            run(&cs_[i_]);                                            \
    } while (0)

static void test_no_mask_shapes(void **s)
{
    (void)s;
    CASES({.rank = 3, .dims = {1, 1, 1}, .scale = 3}, {.rank = 1, .dims = {13}, .scale = 3},
          {.rank = 2, .dims = {5, 7}, .scale = 3}, {.rank = 3, .dims = {2, 3, 8}, .scale = 3},
          {.rank = 3, .dims = {2, 3, 9}, .scale = 3}, {.rank = 3, .dims = {3, 5, 15}, .scale = 3},
          {.rank = 3, .dims = {3, 5, 16}, .scale = 3}, {.rank = 3, .dims = {3, 5, 17}, .scale = 3},
          {.rank = 4, .dims = {2, 3, 4, 127}, .scale = 3});
    if (!h_small()) /* the largest row; too slow under Oclgrind */
        CASES({.rank = 3, .dims = {2, 3, 1000}, .scale = 3});
}

static void test_lens_1d(void **s)
{
    (void)s;
    static const int l0[] = {0, 1, 4, 3};
    CASES({.rank = 3, .dims = {4, 3, 4}, .lens = LENS_1D, .fixed_lens = l0, .scale = 2},
          {.rank = 3, .dims = {6, 5, 97}, .lens = LENS_1D, .scale = 2},
          {.rank = 4, .dims = {3, 2, 5, 33}, .lens = LENS_1D, .scale = 2});
}

static void test_lens_2d(void **s)
{
    (void)s;
    static const int l[] = {1, 3, 2, 4};
    CASES({.rank = 3, .dims = {2, 2, 4}, .lens = LENS_2D, .fixed_lens = l, .scale = 2},
          {.rank = 3, .dims = {3, 7, 31}, .lens = LENS_2D, .scale = 2},
          {.rank = 4, .dims = {2, 3, 5, 17}, .lens = LENS_2D, .scale = 2});
}

/* valid_len 0 gives uniform weights 1/K (d2l), valid_len K masks nothing. */
static void test_lens_zero_and_full(void **s)
{
    (void)s;
    static const int l[] = {0, 9, 0};
    CASES({.rank = 3, .dims = {3, 2, 9}, .lens = LENS_1D, .fixed_lens = l, .scale = 2},
          {.rank = 3, .dims = {3, 2, 9}, .lens = LENS_1D, .fixed_lens = l, .scale = 2, .fill = -1e9f});
}

static void test_device_lens(void **s)
{
    (void)s;
    CASES({.rank = 3, .dims = {4, 3, 21}, .lens = LENS_1D, .lens_on_device = 1, .scale = 2},
          {.rank = 3, .dims = {4, 3, 21}, .lens = LENS_2D, .lens_on_device = 1, .scale = 2});
}

static void test_causal(void **s)
{
    (void)s;
    CASES({.rank = 3, .dims = {2, 9, 9}, .causal = 1, .scale = 2},
          {.rank = 3, .dims = {2, 5, 11}, .causal = 1, .scale = 2},
          {.rank = 3, .dims = {2, 11, 5}, .causal = 1, .scale = 2},
          {.rank = 3, .dims = {3, 8, 40}, .causal = 1, .lens = LENS_1D, .scale = 2},
          {.rank = 4, .dims = {2, 2, 6, 6}, .causal = 1, .lens = LENS_2D, .scale = 2});
}

/* Bottom-right causal (Q < K, Q > K: rows that see no key are uniform) and sliding windows,
 * bounded on one side or both, with causal, lengths and a mask tensor: the row kernel's general
 * path (a window's left side) and its prefix path (right side only), and the group kernel. */
static void test_windows(void **s)
{
    (void)s;
    CASES({.rank = 3, .dims = {2, 5, 37}, .causal = 1, .align = 1, .scale = 2},
          {.rank = 3, .dims = {2, 40, 13}, .causal = 1, .align = 1, .scale = 2},
          {.rank = 3, .dims = {2, 9, 40}, .window = 1, .wl = 3, .wr = -1, .scale = 2},
          {.rank = 3, .dims = {2, 9, 40}, .window = 1, .wl = -1, .wr = 2, .scale = 2},
          {.rank = 3, .dims = {2, 9, 40}, .window = 1, .wl = 0, .wr = 0, .align = 1, .scale = 2},
          {.rank = 3, .dims = {2, 30, 70}, .window = 1, .wl = 16, .wr = 5, .causal = 1, .align = 1,
           .scale = 2},
          {.rank = 3, .dims = {3, 8, 40}, .window = 1, .wl = 7, .wr = 7, .lens = LENS_1D,
           .scale = 2},
          {.rank = 4, .dims = {2, 2, 6, 33}, .window = 1, .wl = 4, .wr = -1, .lens = LENS_2D,
           .mask_rank = 2, .mask_dims = {6, 33}, .scale = 2},
          {.rank = 3, .dims = {2, 9, 40}, .window = 1, .wl = 100, .wr = 100, .scale = 2},
          /* sides as wide as an int, and each one key short of blocking nothing (see
           * test_attention's test_windows) */
          {.rank = 3, .dims = {2, 9, 40}, .window = 1, .wl = INT_MAX, .wr = INT_MAX, .align = 1,
           .scale = 2},
          {.rank = 3, .dims = {2, 40, 9}, .window = 1, .wl = INT_MAX, .wr = INT_MAX, .scale = 2},
          {.rank = 3, .dims = {2, 9, 40}, .window = 1, .wl = 7, .wr = 38, .scale = 2},
          {.rank = 3, .dims = {2, 9, 40}, .window = 1, .wl = 38, .wr = 7, .align = 1, .scale = 2},
          {.rank = 3, .dims = {2, 40, 9}, .window = 1, .wl = 7, .wr = 38, .align = 1, .scale = 2},
          {.rank = 2, .dims = {17, 17}, .window = 1, .wl = 2, .wr = 1, .fill = -1e9f, .scale = 2});
}

static void test_mask_broadcasts(void **s)
{
    (void)s;
    CASES({.rank = 3, .dims = {2, 5, 19}, .mask_rank = 3, .mask_dims = {2, 5, 19}, .scale = 2},
          {.rank = 3, .dims = {2, 5, 19}, .mask_rank = 3, .mask_dims = {2, 1, 19}, .scale = 2},
          {.rank = 3, .dims = {2, 5, 19}, .mask_rank = 2, .mask_dims = {5, 19}, .scale = 2},
          {.rank = 3, .dims = {2, 5, 19}, .mask_rank = 1, .mask_dims = {19}, .scale = 2},
          {.rank = 3, .dims = {2, 5, 19}, .mask_rank = 3, .mask_dims = {2, 5, 1}, .scale = 2},
          {.rank = 4, .dims = {2, 3, 4, 24}, .mask_rank = 4, .mask_dims = {2, 1, 1, 24}, .scale = 2},
          {.rank = 4, .dims = {2, 3, 4, 24}, .mask_rank = 4, .mask_dims = {1, 3, 4, 1}, .scale = 2},
          {.rank = 4, .dims = {2, 3, 4, 9}, .mask_rank = 2, .mask_dims = {4, 9}, .causal = 1,
           .lens = LENS_1D, .scale = 2});
}

/* Every key blocked: uniform weights, as masked_fill + softmax gives. */
static void test_fully_blocked_row(void **s)
{
    (void)s;
    int zeros[12] = {0};
    clattn_tensor tm = h_tensor(CLATTN_INT32, 2, H_DIMS(1, 12), zeros);
    float x[3 * 12];
    h_fill(x, 36, -5, 5);
    clattn_tensor tx = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(3, 12), x);
    clattn_tensor ty = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(3, 12), NULL);
    h_poison(&ty);
    clattn_mask m = {0};
    m.mask = &tm;
    assert_int_equal(clattn_masked_softmax(h_ctx, &tx, &m, &ty), CLATTN_SUCCESS);
    float *y = h_read(&ty);
    for (int i = 0; i < 36; i++)
        assert_true(fabs(y[i] - 1.0 / 12) < 1e-7);
    free(y);
    clattn_tensor_release(&tm);
    clattn_tensor_release(&tx);
    clattn_tensor_release(&ty);
}

static void test_large_logits(void **s)
{
    (void)s;
    CASES({.rank = 3, .dims = {2, 4, 50}, .scale = 1e3}, {.rank = 3, .dims = {2, 4, 50}, .scale = 1e4},
          {.rank = 3, .dims = {2, 4, 50}, .scale = 1e4, .lens = LENS_2D},
          {.rank = 3, .dims = {2, 4, 50}, .scale = 1e4, .causal = 1, .fill = -1e9f});
}

/* NaN and +inf scores (their rows NaN where the key is open, untouched where it is blocked),
 * and a fill above every live score (the blocked keys set the maximum). */
static void test_nan_inf_and_high_fill(void **s)
{
    (void)s;
    CASES({.rank = 3, .dims = {2, 5, 37}, .scale = 2, .nan_at = 23, .lens = LENS_1D},
          {.rank = 3, .dims = {2, 5, 37}, .scale = 2, .pinf_at = 29, .lens = LENS_2D},
          {.rank = 3, .dims = {2, 4, 48}, .scale = 2, .pinf_at = 31, .nan_at = 67, .causal = 1},
          {.rank = 3, .dims = {3, 4, 17}, .scale = 1, .fill = 5.0f, .lens = LENS_1D},
          {.rank = 3, .dims = {2, 3, 33}, .scale = 1, .fill = 5.0f, .mask_rank = 2,
           .mask_dims = {3, 33}});
}

static void test_inplace(void **s)
{
    (void)s;
    CASES({.rank = 3, .dims = {3, 4, 37}, .scale = 2, .lens = LENS_1D, .inplace = 1},
          {.rank = 3, .dims = {3, 4, 48}, .scale = 2, .lens = LENS_1D, .inplace = 1},
          {.rank = 3, .dims = {2, 3, 32}, .scale = 2, .mask_rank = 1, .mask_dims = {32},
           .inplace = 1}); /* rows on vector boundaries: the aligned moves */
}

/* softmax=gpu does not split a row over launches: under a loop budget (LOOPS here; llvmpipe's
 * own, README) a row whose passes exceed it is refused, nothing written, and a row within it
 * computes as without. Every budget the tuning accepts runs a row of one key. */
static void test_loop_budget(void **s)
{
    (void)s;
    clattn_params p = {.tuning = "softmax=gpu:WG=32:LOOPS=1000"};
    clattn_context *ctx = NULL;
    assert_int_equal(clattn_context_wrap(&ctx, clattn_context_cl(h_ctx),
                                         clattn_context_device(h_ctx),
                                         clattn_context_queue(h_ctx), &p), CLATTN_SUCCESS);
    /* n = ceil(K / 32): 3 passes of n + 1, 2 per block of 256 of them and 2 (the sum's), 2
     * reductions of 6, plus 4: 998 at K = 10400 (n = 325), 1001 at 10401 */
    static const size_t widths[] = {1, 300, 10400, 10401};
    for (int i = 0; i < 4; i++) {
        size_t K = widths[i];
        float *x = malloc(2 * K * 4), *y0 = malloc(2 * K * 4);
        double *ref = malloc(2 * K * 8);
        h_fill(x, 2 * K, -3, 3);
        for (size_t e = 0; e < 2 * K; e++)
            y0[e] = 0.5f;
        clattn_tensor tx = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(2, K), x);
        clattn_tensor ty = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(2, K), y0);
        clattn_status st = clattn_masked_softmax(ctx, &tx, NULL, &ty);
        if (i < 3) {
            if (st != CLATTN_SUCCESS)
                fail_msg("K=%zu: %s", K, clattn_last_error(ctx));
            ref_mask r = {1, 1, 2, (int)K};
            ref_masked_softmax(&r, x, ref);
            float *got = h_read(&ty);
            h_assert_close(got, ref, 2 * K, SM_RTOL, SM_ATOL, "softmax under a loop budget");
            free(got);
        } else {
            assert_int_equal(st, CLATTN_ERROR_UNSUPPORTED);
            if (!strstr(clattn_last_error(ctx), "loop budget 1000"))
                fail_msg("message: %s", clattn_last_error(ctx));
            h_assert_bytes(&ty, y0, "out of a refused softmax");
        }
        clattn_tensor_release(&tx); clattn_tensor_release(&ty);
        free(x); free(y0); free(ref);
    }
    clattn_context_destroy(&ctx);
}

/* float16 and bfloat16 scores and outputs in every combination, both row kernels' paths (the
 * prefix path: lengths, causal; the general one: mask tensors, windows), rows that fit the
 * private buffer of exponentials and rows that do not, -inf scores and rows of
 * nothing else (NaN, as in float32), large logits, in place when the dtypes match. The
 * reference takes the scores as stored. */
static void test_16bit(void **s)
{
    (void)s;
    static const int l0[] = {0, 1, 9, 3};
    for (int xi = 0; xi < 3; xi++)
        for (int yi = 0; yi < 3; yi++) {
            clattn_dtype xt = h_float_dtypes[xi], yt = h_float_dtypes[yi];
            if (xi == 0 && yi == 0)
                continue;
            CASES({.rank = 3, .dims = {1, 1, 1}, .scale = 3, .xt = xt, .yt = yt},
                  {.rank = 3, .dims = {2, 3, 9}, .scale = 3, .xt = xt, .yt = yt},
                  {.rank = 4, .dims = {2, 3, 4, 127}, .scale = 3, .xt = xt, .yt = yt},
                  {.rank = 3, .dims = {4, 3, 9}, .lens = LENS_1D, .fixed_lens = l0, .scale = 2,
                   .xt = xt, .yt = yt},
                  {.rank = 3, .dims = {3, 7, 31}, .lens = LENS_2D, .scale = 2, .xt = xt, .yt = yt},
                  {.rank = 3, .dims = {2, 5, 33}, .causal = 1, .align = 1, .scale = 2, .xt = xt,
                   .yt = yt},
                  {.rank = 3, .dims = {2, 9, 40}, .window = 1, .wl = 3, .wr = 2, .scale = 2,
                   .xt = xt, .yt = yt},
                  {.rank = 4, .dims = {2, 3, 4, 24}, .mask_rank = 4, .mask_dims = {2, 1, 1, 24},
                   .scale = 2, .xt = xt, .yt = yt},
                  {.rank = 3, .dims = {2, 4, 50}, .scale = 1e4, .lens = LENS_2D, .xt = xt,
                   .yt = yt},
                  {.rank = 3, .dims = {2, 3, 17}, .scale = 3, .ninf = 5, .xt = xt, .yt = yt},
                  {.rank = 3, .dims = {2, 3, 17}, .scale = 3, .ninf = 3, .causal = 1, .xt = xt,
                   .yt = yt},
                  {.rank = 2, .dims = {3, 12}, .scale = 3, .ninf = 1, .xt = xt, .yt = yt},
                  {.rank = 3, .dims = {3, 4, 37}, .scale = 2, .lens = LENS_1D,
                   .inplace = xt == yt, .xt = xt, .yt = yt},
                  {.rank = 3, .dims = {2, 4, 48}, .scale = 2, .lens = LENS_1D,
                   .inplace = xt == yt, .xt = xt, .yt = yt}, /* in place on vector boundaries */
                  /* rows past the row kernel's private buffer (EB = 4096): recomputed */
                  {.rank = 3, .dims = {1, 1, 4097}, .scale = 3, .lens = LENS_1D, .xt = xt,
                   .yt = yt});
            if (!h_small()) /* more of them; and many rows: once, every group of them overflowed
                               PoCL's stack */
                CASES({.rank = 3, .dims = {1, 3, 4097}, .scale = 3, .lens = LENS_1D, .xt = xt,
                       .yt = yt},
                      {.rank = 3, .dims = {1, 2, 4097}, .mask_rank = 1, .mask_dims = {4097},
                       .scale = 3, .xt = xt, .yt = yt},
                      {.rank = 2, .dims = {2, 4096}, .mask_rank = 1, .mask_dims = {4096},
                       .scale = 3, .xt = xt, .yt = yt},
                      {.rank = 3, .dims = {2, 3, 1000}, .scale = 3, .xt = xt, .yt = yt},
                      {.rank = 3, .dims = {64, 64, 1024}, .scale = 3, .lens = LENS_2D, .xt = xt,
                       .yt = yt});
        }
}

/* Scores and output as views at offsets that keep the rows on vector boundaries (the row
 * kernel's aligned moves) and at offsets that do not, for row lengths that are multiples of both
 * vector widths, every dtype pair, the prefix and the general path. */
static void test_views(void **s)
{
    (void)s;
    static const size_t offs[][2] = {{0, 0}, {16, 32}, {3, 16}, {16, 5}, {1, 1}};
    for (int xi = 0; xi < 3; xi++)
        for (int yi = 0; yi < 3; yi++)
            for (size_t o = 0; o < sizeof offs / sizeof offs[0]; o++) {
                clattn_dtype xt = h_float_dtypes[xi], yt = h_float_dtypes[yi];
                size_t xo = offs[o][0], yo = offs[o][1];
                CASES({.rank = 3, .dims = {2, 3, 32}, .lens = LENS_2D, .scale = 3, .xt = xt,
                       .yt = yt, .views = 1, .x_off = xo, .y_off = yo},
                      {.rank = 3, .dims = {2, 3, 48}, .mask_rank = 1, .mask_dims = {48},
                       .scale = 3, .xt = xt, .yt = yt, .views = 1, .x_off = xo, .y_off = yo},
                      {.rank = 2, .dims = {3, 64}, .scale = 3, .ninf = 7, .causal = 1, .xt = xt,
                       .yt = yt, .views = 1, .x_off = xo, .y_off = yo});
            }
}

/* In place needs one dtype: the same buffer and offset read as another dtype is an overlap. */
static void test_16bit_bad_input(void **s)
{
    (void)s;
    float x[24];
    h_fill(x, 24, -2, 2);
    clattn_tensor t = h_tensor_as(CLATTN_FLOAT16, 2, H_DIMS(2, 12), x);
    clattn_tensor as_bf16 = clattn_view(t.buf, CLATTN_BFLOAT16, 0, 2, H_DIMS(2, 12));
    unsigned short before[24];
    assert_int_equal(clattn_tensor_read_blocking(h_ctx, &t, before), CLATTN_SUCCESS);
    h_assert_error(clattn_masked_softmax(h_ctx, &t, NULL, &as_bf16),
                   CLATTN_ERROR_INVALID_ARGUMENT, "out: overlaps scores");
    h_assert_bytes(&t, before, "scores of a refused softmax");
    clattn_tensor ti = h_tensor(CLATTN_INT32, 2, H_DIMS(2, 12), NULL);
    h_assert_error(clattn_masked_softmax(h_ctx, &ti, NULL, &t), CLATTN_ERROR_INVALID_TENSOR,
                   "scores");
    h_assert_error(clattn_masked_softmax(h_ctx, &t, NULL, &ti), CLATTN_ERROR_INVALID_TENSOR,
                   "out");
    h_assert_bytes(&t, before, "out of a refused softmax");
    clattn_tensor_release(&ti);
    clattn_tensor_release(&t);
}

/* common.cl's row bounds, as every masked kernel takes them, for windows whose sums pass INT_MAX
 * (Q + K above it: the fused kernels take such shapes, and decoding's keys reach 2^31 - 1105):
 * rows at both ends of Q, both alignments, sides one short of blocking nothing, against the
 * same bounds in 64-bit host arithmetic. A small kernel built from common.cl itself. */
static void test_row_bounds_int_limits(void **s)
{
    (void)s;
    static const char *src =
        "#include \"common.cl\"\n"
        "__kernel void bounds(int q0, int Q, int K, int4 win, __global int *o)\n"
        "{\n"
        "    int i = get_global_id(0), q = q0 + i;\n"
        "    o[2 * i] = clattn_row_lo(q, K, win);\n"
        "    o[2 * i + 1] = clattn_row_limit(0, q, K, 0, 0, 0, Q, win);\n"
        "}\n";
    static const struct {
        int Q, K, align, left, right;
    } cases[] = {
        {4, INT_MAX - 1, 0, 0, INT_MAX - 3},     /* top-left, right K - 2 */
        {4, INT_MAX - 1, 1, 0, 2},               /* bottom-right, right Q - 2 */
        {4, INT_MAX - 1, 1, 5, -1},
        {INT_MAX - 1, 4, 1, 3, INT_MAX - 3},     /* Q large, right Q - 2 */
        {INT_MAX - 1, 4, 0, INT_MAX - 3, 1},     /* left Q - 2 */
        {3, INT_MAX - 2, 1, INT_MAX - 6, 0},     /* causal-like, left one short */
        {4, 1000, 1, 0, 2},
    };
    cl_context cl = clattn_context_cl(h_ctx);
    cl_device_id dev = clattn_context_device(h_ctx);
    cl_command_queue queue = clattn_context_queue(h_ctx);
    cl_int err;
    cl_program prog = clCreateProgramWithSource(cl, 1, &src, NULL, &err);
    assert_int_equal(err, CL_SUCCESS);
    char opts[4200];
    snprintf(opts, sizeof opts, "-cl-std=CL1.2 -I %s", CLATTN_TEST_KERNEL_DIR);
    if (clBuildProgram(prog, 1, &dev, opts, NULL, NULL) != CL_SUCCESS) {
        char log[4096] = "";
        clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, sizeof log, log, NULL);
        fail_msg("build: %s", log);
    }
    cl_kernel k = clCreateKernel(prog, "bounds", &err);
    assert_int_equal(err, CL_SUCCESS);
    cl_mem ob = clCreateBuffer(cl, CL_MEM_READ_WRITE, 8 * sizeof(cl_int), NULL, &err);
    assert_int_equal(err, CL_SUCCESS);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        clattn_mask m;
        memset(&m, 0, sizeof m);
        m.window = 1;
        m.align = cases[i].align ? CLATTN_ALIGN_BOTTOM_RIGHT : CLATTN_ALIGN_TOP_LEFT;
        m.window_left = cases[i].left;
        m.window_right = cases[i].right;
        size_t dims[2] = {(size_t)cases[i].Q, (size_t)cases[i].K};
        clattn_mask_args a;
        if (clattn__resolve_mask_dims(h_ctx, &m, 2, dims, "scores", NULL, 0, &a) != CLATTN_SUCCESS)
            fail_msg("case %zu: %s", i, clattn_last_error(h_ctx));
        long long Q = cases[i].Q, K = cases[i].K, shift = cases[i].align ? K - Q : 0;
        for (int end = 0; end < 2; end++) { /* the first rows, then the last */
            cl_int q0 = end ? (cl_int)(Q - 4 < 0 ? 0 : Q - 4) : 0, nq = Q < 4 ? (cl_int)Q : 4;
            cl_int qi = (cl_int)Q, ki = (cl_int)K;
            size_t g = (size_t)nq;
            clSetKernelArg(k, 0, sizeof q0, &q0);
            clSetKernelArg(k, 1, sizeof qi, &qi);
            clSetKernelArg(k, 2, sizeof ki, &ki);
            clSetKernelArg(k, 3, sizeof a.win, &a.win);
            clSetKernelArg(k, 4, sizeof ob, &ob);
            assert_int_equal(clEnqueueNDRangeKernel(queue, k, 1, NULL, &g, NULL, 0, NULL, NULL),
                             CL_SUCCESS);
            cl_int o[8];
            assert_int_equal(clEnqueueReadBuffer(queue, ob, CL_TRUE, 0, sizeof o, o, 0, NULL, NULL),
                             CL_SUCCESS);
            for (int r = 0; r < nq; r++) {
                long long q = q0 + r, lo = 0, hi = K;
                if (cases[i].left >= 0)
                    lo = q + shift - cases[i].left;
                if (cases[i].right >= 0)
                    hi = q + shift + cases[i].right + 1;
                lo = lo < 0 ? 0 : lo > K ? K : lo;
                hi = hi < 0 ? 0 : hi > K ? K : hi;
                if (o[2 * r] != lo || o[2 * r + 1] != hi)
                    fail_msg("case %zu (Q %lld, K %lld, left %d, right %d) row %lld: keys [%d, %d),"
                             " expected [%lld, %lld)", i, Q, K, cases[i].left, cases[i].right, q,
                             o[2 * r], o[2 * r + 1], lo, hi);
            }
        }
    }
    clReleaseMemObject(ob);
    clReleaseKernel(k);
    clReleaseProgram(prog);
}

/* One row of 2^24 + 3 keys, forward and backward: a float32 lane sum of that many like terms
 * drifts by about 1e-4 (and stops growing at 2^24 of them), so the kernels sum in blocks
 * (softmax.cl); before they did, this row's weights were off by 7.5e-5 relative. Weights
 * against the reference at SM_RTOL; gradients, from the op's own weights, against
 * test_backward.c's scale. 64 MiB per operand: not in CLATTN_TEST_SMALL runs. */
static void test_long_row(void **s)
{
    (void)s;
    if (h_small())
        skip();
    const size_t K = (1u << 24) + 3, dims[2] = {1, K};
    float *x = malloc(K * 4), *dy = malloc(K * 4);
    double *ref = malloc(K * 8), *sc = malloc(K * 8);
    h_fill(x, K, -2, 0);
    h_fill(dy, K, 0.5, 1.5); /* one sign: y . dy grows along the row as the sum does */
    double m = -INFINITY, sum = 0;
    for (size_t k = 0; k < K; k++)
        m = fmax(m, x[k]);
    for (size_t k = 0; k < K; k++)
        sum += exp(x[k] - m);
    for (size_t k = 0; k < K; k++)
        ref[k] = exp(x[k] - m) / sum;
    h_mask hm;
    h_mask_spec none;
    memset(&none, 0, sizeof none);
    h_mask_make(&hm, &none, 2, dims);
    clattn_tensor tx = h_tensor(CLATTN_FLOAT32, 2, dims, x);
    clattn_tensor ty = h_tensor(CLATTN_FLOAT32, 2, dims, NULL);
    clattn_tensor tdy = h_tensor(CLATTN_FLOAT32, 2, dims, dy);
    clattn_tensor tdx = h_tensor(CLATTN_FLOAT32, 2, dims, NULL);
    h_poison(&ty);
    h_poison(&tdx);
    clattn_status st = clattn_masked_softmax(h_ctx, &tx, &hm.m, &ty);
    /* softmax=gpu under llvmpipe's loop budget: refused, as documented */
    int refused = st == CLATTN_ERROR_UNSUPPORTED && strstr(clattn_last_error(h_ctx), "loop budget");
    if (!refused) {
        if (st != CLATTN_SUCCESS)
            fail_msg("masked_softmax: %s", clattn_last_error(h_ctx));
        if (clattn_masked_softmax_backward(h_ctx, &ty, &tdy, &hm.m, &tdx) != CLATTN_SUCCESS)
            fail_msg("masked_softmax_backward: %s", clattn_last_error(h_ctx));
        float *y = h_read(&ty), *dx = h_read(&tdx);
        /* no absolute part: SM_ATOL would be 2% of these weights (about 6e-8 each) */
        h_assert_close(y, ref, K, SM_RTOL, 0.0, "softmax, one row of 2^24 + 3 keys");
        double *yd = ref_to_double(y, K), *dyd = ref_to_double(dy, K);
        ref_masked_softmax_backward(&hm.r, yd, dyd, ref, sc);
        /* y (dy - s) rounds twice, 2 ulp of the scale; 4 ulp (2.4e-7) leaves the sum s 2 more: a
         * lane sum of 2^20 terms was off by 5.6e-7 of the scale here, the blocked one by 3.5e-8 */
        h_assert_scaled(dx, ref, sc, K, 2.4e-7, "softmax backward, one row of 2^24 + 3 keys");
        free(y); free(dx); free(yd); free(dyd);
    }
    clattn_tensor *ts[] = {&tx, &ty, &tdy, &tdx};
    for (size_t i = 0; i < 4; i++)
        clattn_tensor_release(ts[i]);
    h_mask_free(&hm);
    free(x); free(dy); free(ref); free(sc);
    if (refused)
        skip();
}

/* A row of 2^31 - 16 float16 keys (the longest whose vector loops' steps pass INT_MAX), in place:
 * every score -inf but two 0s, near each end, so the weights are 0.5 there and 0 elsewhere (then
 * as bfloat16, every score 0); the GPU variant's strided items refuse the row untouched. 4 GiB:
 * only with CLATTN_TEST_HUGE=1 (meson's softmax-huge, suite fuzz: CI's long checks). */
static void test_huge_row(void **s)
{
    (void)s;
    if (!h_huge())
        skip();
    const size_t K = 2147483632u, at[2] = {3, K - 5};
    size_t dims[2] = {1, K}, one_dim[1] = {1}, edge_dims[1] = {64};
    unsigned short zero = clattn_float_to_half(0.0f), got[64];
    clattn_tensor x;
    assert_int_equal(clattn_tensor_create(h_ctx, CLATTN_FLOAT16, 2, dims, NULL, &x), CLATTN_SUCCESS);
    assert_int_equal(clattn_tensor_fill(h_ctx, &x, -INFINITY), CLATTN_SUCCESS);
    for (int i = 0; i < 2; i++) {
        clattn_tensor v = clattn_view(x.buf, CLATTN_FLOAT16, at[i], 1, one_dim);
        assert_int_equal(clattn_tensor_write_blocking(h_ctx, &v, &zero), CLATTN_SUCCESS);
    }
    clattn_context *gctx = h_ctx_tuned("softmax=gpu:WG=128");
    clattn_status st = clattn_masked_softmax(gctx, &x, NULL, &x);
    if (st != CLATTN_ERROR_UNSUPPORTED || !strstr(clattn_last_error(gctx), "at most 2147483519"))
        fail_msg("softmax=gpu: status %d: %s", st, clattn_last_error(gctx));
    clattn_context_destroy(&gctx);
    if (clattn_masked_softmax(h_ctx, &x, NULL, &x) != CLATTN_SUCCESS)
        fail_msg("masked_softmax: %s", clattn_last_error(h_ctx));
    for (int end = 0; end < 2; end++) { /* the first and the last 64 weights */
        size_t off = end ? K - 64 : 0;
        clattn_tensor v = clattn_view(x.buf, CLATTN_FLOAT16, off, 1, edge_dims);
        assert_int_equal(clattn_tensor_read_blocking(h_ctx, &v, got), CLATTN_SUCCESS);
        for (size_t i = 0; i < 64; i++) {
            float w = clattn_half_to_float(got[i]), want = off + i == at[end] ? 0.5f : 0.0f;
            if (w != want)
                fail_msg("weight %zu: %g, expected %g", off + i, w, want);
        }
    }
    /* the same buffer as bfloat16, every score 0: every weight 1 / K (0x3000 rounded), which a
     * lane sum of 2^27 ones (stuck at 2^24) made 2^-28 */
    clattn_tensor xb = clattn_view(x.buf, CLATTN_BFLOAT16, 0, 2, dims);
    assert_int_equal(clattn_tensor_fill(h_ctx, &xb, 0.0f), CLATTN_SUCCESS);
    if (clattn_masked_softmax(h_ctx, &xb, NULL, &xb) != CLATTN_SUCCESS)
        fail_msg("masked_softmax (bfloat16): %s", clattn_last_error(h_ctx));
    unsigned short want_b = clattn_float_to_bfloat16((float)(1.0 / (double)K));
    for (int end = 0; end < 2; end++) {
        clattn_tensor v = clattn_view(x.buf, CLATTN_BFLOAT16, end ? K - 64 : 0, 1, edge_dims);
        assert_int_equal(clattn_tensor_read_blocking(h_ctx, &v, got), CLATTN_SUCCESS);
        for (size_t i = 0; i < 64; i++)
            if (got[i] != want_b)
                fail_msg("bfloat16 weight %zu: 0x%04x, expected 0x%04x", (end ? K - 64 : 0) + i,
                         got[i], want_b);
    }
    clattn_tensor_release(&x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_mask_shapes), cmocka_unit_test(test_lens_1d),
        cmocka_unit_test(test_lens_2d),        cmocka_unit_test(test_lens_zero_and_full),
        cmocka_unit_test(test_device_lens),    cmocka_unit_test(test_causal),
        cmocka_unit_test(test_windows),        cmocka_unit_test(test_nan_inf_and_high_fill),
        cmocka_unit_test(test_mask_broadcasts), cmocka_unit_test(test_fully_blocked_row),
        cmocka_unit_test(test_large_logits),   cmocka_unit_test(test_inplace),
        cmocka_unit_test(test_loop_budget),    cmocka_unit_test(test_16bit),
        cmocka_unit_test(test_views),
        cmocka_unit_test(test_16bit_bad_input),
        cmocka_unit_test(test_row_bounds_int_limits),
        cmocka_unit_test(test_long_row),
        cmocka_unit_test(test_huge_row),
    };
    return cmocka_run_group_tests(tests, h_setup, h_teardown);
}
