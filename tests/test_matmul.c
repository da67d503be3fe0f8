/* clattn_matmul and clattn_linear against the double-precision reference. */
#include "harness.h"
#include "ref.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* dtype shorthands of the 16-bit combination tables */
#define F32 CLATTN_FLOAT32
#define F16 CLATTN_FLOAT16
#define BF16 CLATTN_BFLOAT16

/* Float32 accumulation over K terms errs by about sqrt(K) * 6e-8 times the magnitude sum; the
 * allowed error is 1e-4 of max(|C|, sum|a b| / sqrt(K)), the size of a typical random dot product,
 * so a wrong element (off by one term or more) fails while rounding passes. */
#define MATMUL_TOL 1e-4

typedef struct {
    int batch, M, N, K;
    int a_shared, b_shared;
} mm_case;

/* The operands' dtypes of the cases that follow (test_16bit sets them; float32 otherwise). */
static clattn_dtype g_at, g_bt, g_ct;

/* A 16-bit output is each float32 result y rounded once: |got - ref| <= |y - ref| + u |y| with
 * |y| <= mag (1 + tol), so tol grows by u (1 + tol), and by float16's subnormal step in absolute
 * terms (added to the scale divided by the tolerance). */
static double out_tol(clattn_dtype ct)
{
    return ct == CLATTN_FLOAT32 ? MATMUL_TOL : MATMUL_TOL + h_unit_roundoff(ct) * (1 + MATMUL_TOL);
}

static void widen_scale(double *mag, size_t n, clattn_dtype ct)
{
    for (size_t i = 0; i < n; i++)
        mag[i] += h_subnormal_step(ct) / out_tol(ct);
}

static void run_case(const mm_case *c, int ta, int tb, float alpha, float beta)
{
    int nb = c->batch, na = c->a_shared ? 1 : nb, nbb = c->b_shared ? 1 : nb;
    size_t an = (size_t)c->M * c->K, bn = (size_t)c->K * c->N, cn = (size_t)c->M * c->N;
    float *A = malloc(an * na * 4), *B = malloc(bn * nbb * 4), *C0 = malloc(cn * nb * 4);
    double *ref = malloc(cn * nb * 8), *mag = malloc(cn * nb * 8);
    h_fill(A, an * na, -1, 1);
    h_fill(B, bn * nbb, -1, 1);
    h_fill(C0, cn * nb, -1, 1);
    h_round(A, an * na, g_at); /* the reference sees the stored operands */
    h_round(B, bn * nbb, g_bt);
    h_round(C0, cn * nb, g_ct);
    size_t ad[4], bd[4], cdims[4] = {(size_t)nb, (size_t)c->M, (size_t)c->N};
    int ar = c->a_shared ? 2 : 3, br = c->b_shared ? 2 : 3;
    size_t ar0 = ta ? c->K : c->M, ac0 = ta ? c->M : c->K, br0 = tb ? c->N : c->K, bc0 = tb ? c->K : c->N;
    if (ar == 2) { ad[0] = ar0; ad[1] = ac0; } else { ad[0] = nb; ad[1] = ar0; ad[2] = ac0; }
    if (br == 2) { bd[0] = br0; bd[1] = bc0; } else { bd[0] = nb; bd[1] = br0; bd[2] = bc0; }
    clattn_tensor tA = h_tensor_as(g_at, ar, ad, A), tB = h_tensor_as(g_bt, br, bd, B);
    clattn_tensor tC = h_tensor_as(g_ct, 3, cdims, C0);
    if (beta == 0.0f)
        h_poison(&tC);
    clattn_status rc = clattn_matmul(h_ctx, &tA, ta, &tB, tb, alpha, beta, &tC);
    if (rc != CLATTN_SUCCESS)
        fail_msg("matmul: %s", clattn_last_error(h_ctx));
    float *got = h_read_float(&tC);
    ref_matmul(nb, c->M, c->N, c->K, A, c->a_shared ? 0 : an, ta, B, c->b_shared ? 0 : bn, tb, alpha,
               beta, C0, ref, mag);
    for (size_t i = 0; i < cn * nb; i++)
        mag[i] = fmax(fabs(ref[i]), mag[i] / sqrt((double)c->K));
    widen_scale(mag, cn * nb, g_ct);
    char what[200];
    snprintf(what, sizeof what, "matmul %s x %s -> %s b=%d M=%d N=%d K=%d ta=%d tb=%d alpha=%g "
             "beta=%g", h_dtype_name(g_at), h_dtype_name(g_bt), h_dtype_name(g_ct), nb, c->M,
             c->N, c->K, ta, tb, alpha, beta);
    h_assert_scaled(got, ref, mag, cn * nb, out_tol(g_ct), what);
    free(got);
    clattn_tensor_release(&tA);
    clattn_tensor_release(&tB);
    clattn_tensor_release(&tC);
    free(A); free(B); free(C0); free(ref); free(mag);
}

static void run_all_transposes(const mm_case *cases, size_t n)
{
    for (size_t i = 0; i < n; i++)
        for (int t = 0; t < 4; t++)
            run_case(&cases[i], t & 1, t >> 1, 1.0f, 0.0f);
}

#define RUN(...)                                                           \
    do {                                                                   \
        const mm_case cs_[] = {__VA_ARGS__};                               \
        run_all_transposes(cs_, sizeof cs_ / sizeof cs_[0]);               \
    } while (0)

static void test_one_by_one(void **s) { (void)s; RUN({1, 1, 1, 1, 0, 0}, {3, 1, 1, 1, 0, 0}); }
static void test_primes(void **s)
{
    (void)s;
    RUN({2, 7, 13, 31, 0, 0});
    if (!h_small()) /* the 97s take minutes under Oclgrind */
        RUN({3, 97, 5, 59, 0, 0}, {1, 13, 97, 7, 0, 0});
}
/* Around the CPU register tiles (TM x TN: 6 x 16 on AVX2, 6 x 64 on AVX-512) and the GPU tiles
 * (16; 128 under -gpu). */
static void test_tile_edges(void **s)
{
    (void)s;
    RUN({1, 11, 31, 15, 0, 0}, {1, 12, 32, 16, 0, 0}, {1, 13, 33, 17, 0, 0}, {2, 24, 64, 1, 0, 0},
        {1, 25, 65, 33, 0, 0}, {1, 5, 63, 7, 0, 0}, {1, 7, 1, 65, 0, 0});
    if (!h_small()) /* minutes under Oclgrind */
        RUN({1, 127, 129, 9, 0, 0}, {1, 129, 128, 5, 0, 0}, {1, 128, 127, 3, 0, 0});
}
/* Matrix-vector shapes: one row of A, one column of B. */
static void test_vector_shapes(void **s)
{
    (void)s;
    RUN({1, 1, 37, 53, 0, 0}, {1, 29, 1, 41, 0, 0}, {3, 1, 19, 23, 0, 1}, {3, 17, 1, 29, 1, 0});
}
/* Products big enough (rows x depth x batches >= 2^20) that an op(B) narrower than the CPU
 * panel (TN) takes narrower panels, N rounded up to the vector width: every narrowed width of
 * AVX-512's TN=64 (16, 32, 48) and AVX2's TN=16 (8), batched and shared B. */
static void test_narrow_panels(void **s)
{
    (void)s;
    if (h_small()) /* 2^20 multiply-adds take Oclgrind two minutes; it checks the same kernel
                    * at the variants' TN values (NV = 1 to 4 vectors) */
        skip();
    RUN({1, 1024, 1, 1024, 0, 0}, {1, 1031, 17, 1024, 0, 0}, {2, 512, 47, 1024, 0, 1}, {4, 256, 5, 1024, 0, 0},
        {3, 400, 9, 1000, 1, 0});
}
/* So many rows that the CPU kernel's share of row panels per work-item, rb * panels / items,
 * passes 2^31 in 32-bit arithmetic (from about 1.6M rows at TM=6, RB=32; 420k under -cpu-alt):
 * it wrote past C and left rows unset. */
static void test_tall(void **s)
{
    (void)s;
    if (h_small()) /* 1.6M rows under Oclgrind */
        skip();
    RUN({1, 1600003, 1, 1, 0, 0}, {1, 1600001, 2, 3, 0, 1});
}
static void test_large_batch(void **s) { (void)s; RUN({67, 5, 9, 11, 0, 0}); }
static void test_shared_operands(void **s)
{
    (void)s;
    RUN({5, 17, 19, 23, 1, 0}, {5, 17, 19, 23, 0, 1}, {4, 3, 40, 8, 1, 1});
}
static void test_larger(void **s)
{
    (void)s;
    if (h_small()) /* two thirds of this program's time under Oclgrind */
        skip();
    RUN({1, 130, 150, 257, 0, 0});
}

static void test_alpha_beta(void **s)
{
    (void)s;
    mm_case c = {2, 19, 35, 21, 0, 0};
    run_case(&c, 0, 1, 0.125f, 0.0f);
    run_case(&c, 1, 0, -2.0f, 0.5f);
    run_case(&c, 0, 0, 1.0f, 1.0f);
}

/* Long inner dimensions: on a device that bounds a work-item's loops (llvmpipe) matmul=gpu splits
 * K over launches, passing raw sums through C when beta = 0 and adding onto it otherwise. */
static void test_long_k(void **s)
{
    (void)s;
    if (h_small()) /* minutes under Oclgrind; the -gpu-small tiles split K there already */
        skip();
    RUN({1, 64, 80, 20000, 0, 0}, {1, 9, 11, 20000, 0, 0}, {2, 3, 70, 4099, 0, 1});
    mm_case c = {2, 5, 7, 5003, 0, 0};
    run_case(&c, 1, 0, -0.75f, 0.5f);
    run_case(&c, 0, 1, 3.0f, 1.0f);
}

static void linear_case(int lead0, int lead1, int in, int out, int with_bias)
{
    size_t rows = (size_t)lead0 * lead1;
    float *x = malloc(rows * in * 4), *W = malloc((size_t)out * in * 4), *b = malloc(out * 4);
    double *ref = malloc(rows * out * 8), *mag = malloc(rows * out * 8);
    h_fill(x, rows * in, -1, 1);
    h_fill(W, (size_t)out * in, -1, 1);
    h_fill(b, out, -1, 1);
    h_round(x, rows * in, g_at); /* x as A, W and its bias as B */
    h_round(W, (size_t)out * in, g_bt);
    h_round(b, out, g_bt);
    clattn_tensor tx = h_tensor_as(g_at, 3, H_DIMS(lead0, lead1, in), x);
    clattn_tensor tW = h_tensor_as(g_bt, 2, H_DIMS(out, in), W);
    clattn_tensor tb = h_tensor_as(g_bt, 1, H_DIMS(out), b);
    clattn_tensor ty = h_tensor(g_ct, 3, H_DIMS(lead0, lead1, out), NULL);
    h_poison(&ty);
    if (clattn_linear(h_ctx, &tx, &tW, with_bias ? &tb : NULL, &ty) != CLATTN_SUCCESS)
        fail_msg("linear: %s", clattn_last_error(h_ctx));
    float *got = h_read_float(&ty);
    ref_matmul(1, (int)rows, out, in, x, 0, 0, W, 0, 1, 1.0, 0.0, NULL, ref, mag);
    for (size_t i = 0; i < rows * out; i++) {
        double bias = with_bias ? b[i % out] : 0.0;
        ref[i] += bias;
        mag[i] = fmax(fabs(ref[i]), mag[i] / sqrt((double)in) + fabs(bias));
    }
    widen_scale(mag, rows * out, g_ct);
    h_assert_scaled(got, ref, mag, rows * out, out_tol(g_ct), with_bias ? "linear+bias" : "linear");
    free(got);
    clattn_tensor_release(&tx);
    clattn_tensor_release(&tW);
    clattn_tensor_release(&tb);
    clattn_tensor_release(&ty);
    free(x); free(W); free(b); free(ref); free(mag);
}

static void test_linear(void **s)
{
    (void)s;
    linear_case(2, 3, 20, 8, 0);
    linear_case(2, 3, 20, 8, 1);
    linear_case(1, 1, 1, 1, 1);
    if (!h_small()) {
        linear_case(3, 37, 59, 100, 1);
        linear_case(1, 3, 6001, 5, 1); /* a bias with K split over launches (test_long_k) */
    }
}

/* A view with an element offset inside a larger buffer, and an output next to live data. */
/* A, B and C as views one after another in one buffer from element pad, the rest of it kept. */
static void offsets_case(int M, int N, int K, int pad)
{
    size_t total = pad + (size_t)M * K + (size_t)K * N + (size_t)M * N + pad;
    float *all = malloc(total * 4);
    double *ref = malloc((size_t)M * N * 8), *mag = malloc((size_t)M * N * 8);
    h_fill(all, total, -1, 1);
    clattn_tensor buf = h_tensor(CLATTN_FLOAT32, 1, H_DIMS(total), all);
    size_t ao = pad, bo = ao + (size_t)M * K, co = bo + (size_t)K * N;
    clattn_tensor A = clattn_view(buf.buf, CLATTN_FLOAT32, ao, 2, H_DIMS(M, K));
    clattn_tensor B = clattn_view(buf.buf, CLATTN_FLOAT32, bo, 2, H_DIMS(K, N));
    clattn_tensor C = clattn_view(buf.buf, CLATTN_FLOAT32, co, 2, H_DIMS(M, N));
    if (clattn_matmul(h_ctx, &A, 0, &B, 0, 1.0f, 0.0f, &C) != CLATTN_SUCCESS)
        fail_msg("matmul: %s", clattn_last_error(h_ctx));
    float *got = h_read(&buf);
    ref_matmul(1, M, N, K, all + ao, 0, 0, all + bo, 0, 0, 1, 0, NULL, ref, mag);
    for (int i = 0; i < M * N; i++)
        mag[i] = fmax(fabs(ref[i]), mag[i] / sqrt((double)K));
    h_assert_scaled(got + co, ref, mag, (size_t)M * N, MATMUL_TOL, "offset views");
    for (size_t i = 0; i < co; i++)
        assert_true(got[i] == all[i]);
    for (size_t i = co + (size_t)M * N; i < total; i++)
        assert_true(got[i] == all[i]);
    free(got);
    clattn_tensor_release(&buf);
    free(all); free(ref); free(mag);
}

/* Unaligned views, and views at aligned offsets that the tiled kernel reads as float4. */
static void test_offsets(void **s)
{
    (void)s;
    offsets_case(9, 10, 11, 5);
    offsets_case(33, 36, 40, 4);
    offsets_case(32, 48, 64, 8);
}

/* A and B in CL_MEM_USE_HOST_PTR buffers over host arrays only 4-byte aligned (zero-copy on CPU
 * runtimes and integrated GPUs): the tiled kernel's float4 loads must not assume the buffer's
 * base is 16-byte aligned (the -gpu variants crashed PoCL here). Row strides and offsets are
 * multiples of 4, so only the base address is off. */
static void test_host_ptr_unaligned(void **s)
{
    (void)s;
    enum { M = 32, N = 36, K = 40 };
    static float ha[M * K + 16] __attribute__((aligned(64))), hb[K * N + 16]
        __attribute__((aligned(64)));
    float *a = ha + 1, *b = hb + 1;
    h_fill(a, M * K, -1, 1);
    h_fill(b, K * N, -1, 1);
    cl_int err;
    cl_context cl = clattn_context_cl(h_ctx);
    cl_mem ma = clCreateBuffer(cl, CL_MEM_READ_ONLY | CL_MEM_USE_HOST_PTR, M * K * 4, a, &err);
    assert_int_equal(err, CL_SUCCESS);
    cl_mem mb = clCreateBuffer(cl, CL_MEM_READ_ONLY | CL_MEM_USE_HOST_PTR, K * N * 4, b, &err);
    assert_int_equal(err, CL_SUCCESS);
    /* the same values written once more, from copies: Oclgrind takes memory it was only given
     * as host_ptr for uninitialized */
    float *ca = malloc(M * K * 4), *cb = malloc(K * N * 4);
    memcpy(ca, a, M * K * 4);
    memcpy(cb, b, K * N * 4);
    cl_command_queue q = clattn_context_queue(h_ctx);
    assert_int_equal(clEnqueueWriteBuffer(q, ma, CL_TRUE, 0, M * K * 4, ca, 0, NULL, NULL),
                     CL_SUCCESS);
    assert_int_equal(clEnqueueWriteBuffer(q, mb, CL_TRUE, 0, K * N * 4, cb, 0, NULL, NULL),
                     CL_SUCCESS);
    free(ca);
    free(cb);
    clattn_tensor tA = clattn_view(ma, CLATTN_FLOAT32, 0, 2, H_DIMS(M, K));
    clattn_tensor tB = clattn_view(mb, CLATTN_FLOAT32, 0, 2, H_DIMS(K, N));
    clattn_tensor tC = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(M, N), NULL);
    h_poison(&tC);
    if (clattn_matmul(h_ctx, &tA, 0, &tB, 0, 1.0f, 0.0f, &tC) != CLATTN_SUCCESS)
        fail_msg("matmul: %s", clattn_last_error(h_ctx));
    float *got = h_read_float(&tC);
    double ref[M * N], mag[M * N];
    ref_matmul(1, M, N, K, a, 0, 0, b, 0, 0, 1, 0, NULL, ref, mag);
    for (int i = 0; i < M * N; i++)
        mag[i] = fmax(fabs(ref[i]), mag[i] / sqrt((double)K));
    h_assert_scaled(got, ref, mag, (size_t)M * N, MATMUL_TOL, "views of unaligned host memory");
    free(got);
    clattn_tensor_release(&tA);
    clattn_tensor_release(&tB);
    clattn_tensor_release(&tC);
}

/* C = alpha * (A B) is one rounded product, as PyTorch's scale * (Q K^T): A and B hold small
 * integers, so every order of summation gives the exact A B, and C must be exactly
 * (float)(alpha * AB) even where K spans several k-slices (the -cpu-alt and -cpu-odd tunings). With
 * alpha near 1e30 a second rounding would break exact ties between scores that equal sums reach
 * through different partial sums, which decide a one-hot softmax. */
static void test_alpha_one_rounding(void **s)
{
    (void)s;
    enum { M = 7, N = 21, K = 300 };
    float A[M * K], B[K * N];
    for (int i = 0; i < M * K; i++)
        A[i] = (float)h_randint(-3, 3);
    for (int i = 0; i < K * N; i++)
        B[i] = (float)h_randint(-3, 3);
    const float alphas[] = {3.1e30f, -7.7e-3f, 1.0f / 3.0f};
    clattn_tensor tA = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(M, K), A);
    clattn_tensor tB = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(K, N), B);
    clattn_tensor tC = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(M, N), NULL);
    for (int a = 0; a < 3; a++) {
        h_poison(&tC);
        assert_int_equal(clattn_matmul(h_ctx, &tA, 0, &tB, 0, alphas[a], 0.0f, &tC), CLATTN_SUCCESS);
        float *got = h_read(&tC);
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double ab = 0;
                for (int k = 0; k < K; k++)
                    ab += (double)A[i * K + k] * B[k * N + j];
                float want = (float)((float)ab * (double)alphas[a]);
                if (got[i * N + j] != want) /* the sign of a zero aside */
                    fail_msg("alpha %g: C[%d][%d] = %.9g, alpha * (A B) rounded once is %.9g",
                             alphas[a], i, j, got[i * N + j], want);
            }
        free(got);
    }
    clattn_tensor_release(&tA); clattn_tensor_release(&tB); clattn_tensor_release(&tC);
}

/* float16 and bfloat16 A, B and C in combination, through both kernels' paths (A read in
 * place or packed, B's two packings, transposes, shared operands, k-slices, beta reading a 16-bit
 * C), and linear with 16-bit weights and bias under float32 or 16-bit activations. The reference
 * takes the operands as stored. */
static void test_16bit(void **s)
{
    (void)s;
    /* Six (A, B, C) combinations: each dtype in each place, both all-16-bit pairs. The kernels
     * load each operand by its own dtype, so these reach every load and store; each (A, B) pair
     * is a program build (seconds for matmul=gpu's tiles on PoCL), hence not all 26. */
    static const clattn_dtype combos[6][3] = {{F16, F16, F32}, {BF16, BF16, BF16},
                                              {F16, F32, F16}, {F32, BF16, F32},
                                              {BF16, F16, F16}, {F32, F16, BF16}};
    for (int i = 0; i < 6; i++) {
        if (h_small() && i > 2) /* Oclgrind: three combinations (every dtype in every place) */
            continue;
        g_at = combos[i][0];
        g_bt = combos[i][1];
        g_ct = combos[i][2];
        RUN({2, 7, 13, 31, 0, 0});
        mm_case c = {2, 19, 35, 21, 0, 0};
        run_case(&c, 1, 0, -2.0f, 0.5f);
        linear_case(2, 3, 20, 8, 1);
        if (!h_small()) { /* under Oclgrind the above take minutes already */
            RUN({1, 13, 33, 17, 0, 0}, {4, 3, 40, 8, 1, 1}, {3, 5, 9, 11, 0, 1});
            run_case(&c, 0, 1, 0.125f, 1.0f);
            mm_case k = {1, 9, 11, 3001, 0, 0};
            run_case(&k, 0, 0, 1.0f, 0.0f);
            run_case(&k, 1, 1, 0.5f, 1.0f);
        }
    }
    g_at = g_bt = g_ct = CLATTN_FLOAT32;
}

/* An int32 operand is refused by name; nothing is written. */
static void test_16bit_bad_input(void **s)
{
    (void)s;
    float a[6] = {1, 2, 3, 4, 5, 6}, c0[4] = {9, 9, 9, 9};
    clattn_tensor h = h_tensor_as(CLATTN_FLOAT16, 2, H_DIMS(2, 3), a);
    clattn_tensor i = h_tensor(CLATTN_INT32, 2, H_DIMS(3, 2), NULL);
    clattn_tensor c = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(2, 2), c0);
    h_assert_error(clattn_matmul(h_ctx, &h, 0, &i, 0, 1.0f, 0.0f, &c), CLATTN_ERROR_INVALID_TENSOR,
                   "B: dtype int32, expected float32, float16 or bfloat16");
    h_assert_bytes(&c, c0, "C of a refused matmul");
    clattn_tensor_release(&h);
    clattn_tensor_release(&i);
    clattn_tensor_release(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_by_one),   cmocka_unit_test(test_primes),
        cmocka_unit_test(test_tile_edges),   cmocka_unit_test(test_vector_shapes),
        cmocka_unit_test(test_tall),         cmocka_unit_test(test_narrow_panels),
        cmocka_unit_test(test_large_batch),
        cmocka_unit_test(test_shared_operands), cmocka_unit_test(test_larger),
        cmocka_unit_test(test_alpha_beta),   cmocka_unit_test(test_linear),
        cmocka_unit_test(test_offsets),      cmocka_unit_test(test_host_ptr_unaligned),
        cmocka_unit_test(test_alpha_one_rounding),
        cmocka_unit_test(test_long_k),       cmocka_unit_test(test_16bit),
        cmocka_unit_test(test_16bit_bad_input),
    };
    return cmocka_run_group_tests(tests, h_setup, h_teardown);
}
