/* Shared test helpers: one context per test program, seeded inputs, poisoning, comparisons. */
#ifndef CLATTN_TEST_HARNESS_H
#define CLATTN_TEST_HARNESS_H
#include <clattn.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

extern clattn_context *h_ctx;

/* cmocka group setup/teardown: create h_ctx (CLATTN_DEVICE, CLATTN_TUNE apply) and print the
 * device, tuning and seed. With CI=true a missing device fails; otherwise it skips. */
int h_setup(void **state);
int h_teardown(void **state);

/* The seed (CLATTN_TEST_SEED, default 12345) and a splitmix64 stream over it. */
unsigned long long h_seed(void);
void h_reseed(unsigned long long salt);
double h_uniform(double lo, double hi);
int h_randint(int lo, int hi); /* inclusive */
void h_fill(float *x, size_t n, double lo, double hi);

/* Device tensors (released with clattn_tensor_release). host may be NULL. h_tensor's buffer runs
 * H_GUARD elements past the tensor, NaNs with a payload of the buffer's own, and h_read checks
 * that they still are: an op that writes past its output's end fails the test on devices that do
 * not trap (PoCL), and one that reads past an input's end reads NaN. On Oclgrind, which checks
 * bounds itself, h_tensor is h_tensor_exact: a buffer that holds the tensor only (also for tests
 * of views past a buffer's end). Without host data the elements are left unwritten. */
#define H_GUARD 256
clattn_tensor h_tensor(clattn_dtype dt, int ndim, const size_t *dims, const void *host);
clattn_tensor h_tensor_exact(clattn_dtype dt, int ndim, const size_t *dims, const void *host);
/* A tensor of ctx (the huge tests' own contexts) with every element `value`, filled on the
 * device: no host copy of gigabytes. */
clattn_tensor h_filled(clattn_context *ctx, clattn_dtype dt, int ndim, const size_t *dims,
                       float value);
/* A float tensor of nlead leading dims lead[] then (rows, cols). */
clattn_tensor h_batched(int nlead, const size_t *lead, size_t rows, size_t cols, const float *host);
/* 16-bit storage. h_round rounds host floats in place to what dtype dt stores (nearest even;
 * float32: unchanged), so that a reference computed from them sees the device's inputs.
 * h_tensor_as uploads floats as dtype dt (rounding them as h_round); h_read_float reads any float
 * tensor back as floats. h_unit_roundoff is dt's u: a stored value is x (1 + e), |e| <= u, for
 * x in the normal range (2^-24, 2^-11 float16, 2^-8 bfloat16). h_subnormal_step: dt's absolute
 * rounding below its normal range, half its smallest subnormal (0 for float32 and bfloat16,
 * whose subnormals sit far below any value the tests compare: 2^-25 for float16). */
void h_round(float *x, size_t n, clattn_dtype dt);
clattn_tensor h_tensor_as(clattn_dtype dt, int ndim, const size_t *dims, const float *host);
float *h_read_float(const clattn_tensor *t);
void h_write_float(const clattn_tensor *t, const float *x); /* floats stored as t's dtype */
double h_unit_roundoff(clattn_dtype dt);
double h_subnormal_step(clattn_dtype dt);
extern const clattn_dtype h_float_dtypes[3]; /* float32, float16, bfloat16 */
const char *h_dtype_name(clattn_dtype dt);
/* Fills a float tensor with NaN so an unwritten element fails the comparison. */
void h_poison(const clattn_tensor *t);
/* 1 when CLATTN_TEST_SMALL is set (the Oclgrind setup): tests skip only their biggest cases. */
int h_small(void);
/* CLATTN_TEST_HUGE=1: the tests of the largest accepted sizes run (tensors of GiBs; meson's
 * *-huge tests), else they skip. */
int h_huge(void);
/* 1 in a suite's forced variants (CLATTN_TUNE set, tests/meson.build): tests whose contexts all
 * take their own tunings compute the same there as in the plain run, so they skip. */
int h_forced_variant(void);
/* A context over h_ctx's device and queue with this CLATTN_TUNE-syntax tuning (the test fails
 * when it cannot be made); clattn_context_destroy it. */
clattn_context *h_ctx_tuned(const char *tuning);
/* Reads a tensor back (finishes the queue) into a malloc'd array. */
void *h_read(const clattn_tensor *t);

/* Fails the test when |got - ref| > atol + rtol * |ref| anywhere; prints the first offending index
 * and the worst error. Where the reference is NaN or infinite, got must be the same (NaN, or the
 * same infinity); a NaN where the reference is finite fails. */
void h_assert_close(const float *got, const double *ref, size_t n, double rtol, double atol,
                    const char *what);
/* Same with a per-element scale: |got - ref| <= tol * scale[i]. */
void h_assert_scaled(const float *got, const double *ref, const double *scale, size_t n, double tol,
                     const char *what);
/* A row's log-sum-exp m + log(l) carries its maximum score's float32 rounding (about sqrt(d) ulp
 * of mag, the row's |scale| sum_e |q_e k_e|), the sum l's few ulp (absolute, after the log) and
 * its own rounding (half an ulp of |lse|: 1/32 at a fill of -1e6). Allowed: 2 ulp(|lse|) +
 * H_LSE_TOL (1 + mag), 10x the first two; a key counted or dropped wrongly moves it by log(1 + w)
 * for the key's weight w, far more. */
#define H_LSE_TOL 1e-5
void h_assert_lse(const float *got, const double *ref, const double *mag, size_t n,
                  const char *what);
/* Asserts that a buffer's bytes equal `expect` (untouched outputs). */
void h_assert_bytes(const clattn_tensor *t, const void *expect, const char *what);
/* Asserts that the last error mentions `needle`. */
void h_assert_error(clattn_status got, clattn_status want, const char *needle);

/* Masks built from a spec for a score shape, as a clattn_mask and as the reference's ref_mask. */
#include "ref.h"
/* The long-row cases (test_long_key_sums, test_long_cache_sums): two query rows of head size 1
 * (q[0] random in [-1, 1], q[1] = 0: every weight equal), nk keys in [-1, 1] and values (nk, dv)
 * in [0.5, 1.5] (*k, *v: malloc'd), and ref_attention_d1's outputs, LSEs and magnitudes. */
void h_long_rows(int nk, int dv, float q[2], float **k, float **v, double *ref, double *lse,
                 double *mag);
enum { H_LENS_NONE = 0, H_LENS_1D = 1, H_LENS_2D = 2 };
typedef struct {
    int lens;              /* H_LENS_* */
    int lens_on_device;    /* device tensor instead of the host array */
    const int *fixed_lens; /* NULL: random lengths in [0, K] */
    int mask_rank;         /* 0: no mask tensor; else random 0/1 of mask_dims */
    size_t mask_dims[4];
    int mask_prefix;       /* > 0: the mask tensor blocks keys k < mask_prefix (left padding) and
                              opens the rest, instead of random entries; its last dim must be K */
    int causal;
    float fill;            /* 0: default */
    int align;             /* clattn_mask's align, window, window_left and window_right */
    int window, window_left, window_right;
    int bias_rank;         /* 0: no bias; else random floats of bias_dims (opts.bias) */
    size_t bias_dims[4];
    double bias_mag;       /* uniform in [-bias_mag, bias_mag]; 0 means 2 */
    int bias_ninf;         /* > 0: every bias_ninf-th entry is -inf (SDPA's float masks) */
    float bias_row_fill;   /* nonzero: every third row of the bias (its last dim) holds this in
                              every entry, as an SDPA float mask's padded query rows */
    int alibi_rank;        /* 0: no ALiBi; else slopes of alibi_dims (opts.alibi_slopes) */
    size_t alibi_dims[2];
    double alibi_mag;      /* slopes uniform in [0, alibi_mag]; 0 means Press et al.'s 2^(-8 h / H)
                              over the last dim's H */
} h_mask_spec;
typedef struct {
    clattn_mask m;
    ref_mask r;
    clattn_tensor tl, tm, tb; /* tb: the bias (buf NULL when none), for opts.bias */
    clattn_tensor ta;         /* the ALiBi slopes (buf NULL when none), for opts.alibi_slopes */
    int *lens, *mask;
    double *bias, *slopes;
} h_mask;
/* Scores of rank 1-4 with dims sdims (last two Q, K). */
void h_mask_make(h_mask *hm, const h_mask_spec *spec, int rank, const size_t *sdims);
void h_mask_free(h_mask *hm);

#define H_DIMS(...) ((const size_t[]){__VA_ARGS__})
#endif
