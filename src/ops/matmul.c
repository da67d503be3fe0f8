/* clattn_matmul and clattn_linear: checks, variant choice (packed CPU shape or local-memory tiled
 * GPU shape) and launches. */
#include "internal.h"
#include <stdio.h>
#include <string.h>

/* Shape of one operand as the kernels see it: rows x cols of op(X), strides into the buffer. */
typedef struct {
    int rows, cols, s_row, s_col, batch_stride;
} operand;

static operand describe(const clattn_tensor *t, int trans)
{
    int r = (int)t->dims[t->ndim - 2], c = (int)t->dims[t->ndim - 1];
    operand o;
    o.rows = trans ? c : r;
    o.cols = trans ? r : c;
    o.s_row = trans ? 1 : c;
    o.s_col = trans ? c : 1;
    o.batch_stride = t->ndim == 2 ? 0 : r * c;
    return o;
}

static clattn_status check_batch(clattn_context *ctx, const clattn_tensor *x, const char *name,
                                 const clattn_tensor *C, const char *cname)
{
    clattn_status st = CLATTN_SUCCESS;
    char s1[96], s2[96];
    if (x->ndim == 2)
        return CLATTN_SUCCESS; /* shared by every batch */
    CHECK(ctx, x->ndim == C->ndim && memcmp(x->dims, C->dims, sizeof(size_t) * (x->ndim - 2)) == 0,
          CLATTN_ERROR_SHAPE_MISMATCH, "%s: batch dims of %s do not match %s %s", name,
          clattn__shape_str(x, s1, sizeof s1), cname, clattn__shape_str(C, s2, sizeof s2));
fail:
    return st;
}

/* C names the product's tensor in messages: "C", or "dC" for the backward's gradient. */
static clattn_status check_matmul(clattn_context *ctx, const clattn_tensor *A, int ta,
                                  const clattn_tensor *B, int tb, const clattn_tensor *C,
                                  const char *cname)
{
    clattn_status st = CLATTN_SUCCESS;
    char s1[96], s2[96], s3[96];
    CHECK_ST(clattn__check_float_tensor(ctx, A, "A", 2, 4));
    CHECK_ST(clattn__check_float_tensor(ctx, B, "B", 2, 4));
    CHECK_ST(clattn__check_float_tensor(ctx, C, cname, 2, 4));
    CHECK(ctx, ta == 0 || ta == 1, CLATTN_ERROR_INVALID_ARGUMENT,
          "trans_a = %d: must be 0 (as it is) or 1 (transposed)", ta);
    CHECK(ctx, tb == 0 || tb == 1, CLATTN_ERROR_INVALID_ARGUMENT,
          "trans_b = %d: must be 0 (as it is) or 1 (transposed)", tb);
    operand a = describe(A, ta), b = describe(B, tb);
    int M = (int)C->dims[C->ndim - 2], N = (int)C->dims[C->ndim - 1];
    CHECK(ctx, a.cols == b.rows, CLATTN_ERROR_SHAPE_MISMATCH,
          "B: inner dims differ: op(A) of %s is %dx%d, op(B) of %s is %dx%d",
          clattn__shape_str(A, s1, sizeof s1), a.rows, a.cols, clattn__shape_str(B, s2, sizeof s2),
          b.rows, b.cols);
    CHECK(ctx, a.rows == M && b.cols == N, CLATTN_ERROR_SHAPE_MISMATCH,
          "%s: shape %s, expected (..., %d, %d) from A %s and B %s", cname,
          clattn__shape_str(C, s3, sizeof s3), a.rows, b.cols,
          clattn__shape_str(A, s1, sizeof s1), clattn__shape_str(B, s2, sizeof s2));
    CHECK_ST(check_batch(ctx, A, "A", C, cname));
    CHECK_ST(check_batch(ctx, B, "B", C, cname));
fail:
    return st;
}

clattn_status clattn_matmul(clattn_context *ctx, const clattn_tensor *A, int trans_a,
                            const clattn_tensor *B, int trans_b, float alpha, float beta,
                            const clattn_tensor *C)
{
    clattn_status st = CLATTN_SUCCESS;
    CHECK_DRY_RUN(ctx, clattn_matmul(ctx, A, trans_a, B, trans_b, alpha, beta, C));
    CHECK(NULL, ctx, CLATTN_ERROR_INVALID_ARGUMENT, "ctx: NULL context");
    CHECK_ST(check_matmul(ctx, A, trans_a, B, trans_b, C, "C"));
    const clattn_arg outs[1] = {{C, "C"}}, ins[2] = {{A, "A"}, {B, "B"}};
    CHECK_ST(clattn__check_no_overlap(ctx, outs, 1, ins, 2));
    CHECK_ST(clattn__enqueue_matmul(ctx, A, trans_a, B, trans_b, alpha, beta, NULL, C));
fail:
    return st;
}

clattn_status clattn_linear(clattn_context *ctx, const clattn_tensor *x, const clattn_tensor *W,
                            const clattn_tensor *bias, const clattn_tensor *y)
{
    clattn_status st = CLATTN_SUCCESS;
    char s1[96], s2[96], s3[96];
    CHECK_DRY_RUN(ctx, clattn_linear(ctx, x, W, bias, y));
    CHECK(NULL, ctx, CLATTN_ERROR_INVALID_ARGUMENT, "ctx: NULL context");
    CHECK_ST(clattn__check_float_tensor(ctx, x, "x", 1, 4));
    CHECK_ST(clattn__check_float_tensor(ctx, W, "W", 2, 2));
    CHECK_ST(clattn__check_float_tensor(ctx, y, "y", 1, 4));
    size_t in = x->dims[x->ndim - 1], out = W->dims[0], rows = clattn_tensor_numel(x) / in;
    CHECK(ctx, W->dims[1] == in, CLATTN_ERROR_SHAPE_MISMATCH,
          "W: shape %s, expected (out_features, %zu) for x %s", clattn__shape_str(W, s1, sizeof s1),
          in, clattn__shape_str(x, s2, sizeof s2));
    CHECK(ctx, y->ndim == x->ndim && y->dims[y->ndim - 1] == out &&
                   memcmp(y->dims, x->dims, sizeof(size_t) * (x->ndim - 1)) == 0,
          CLATTN_ERROR_SHAPE_MISMATCH, "y: shape %s, expected x's leading dims and %zu features",
          clattn__shape_str(y, s3, sizeof s3), out);
    if (bias) {
        CHECK_ST(clattn__check_float_tensor(ctx, bias, "bias", 1, 1));
        CHECK(ctx, bias->dims[0] == out, CLATTN_ERROR_SHAPE_MISMATCH,
              "bias: %zu elements, expected out_features = %zu", bias->dims[0], out);
    }
    size_t d2x[2] = {rows, in}, d2y[2] = {rows, out};
    clattn_tensor x2 = clattn_view(x->buf, x->dtype, x->offset, 2, d2x);
    clattn_tensor y2 = clattn_view(y->buf, y->dtype, y->offset, 2, d2y);
    const clattn_arg outs[1] = {{y, "y"}}, ins[3] = {{x, "x"}, {W, "W"}, {bias, "bias"}};
    CHECK_ST(clattn__check_no_overlap(ctx, outs, 1, ins, 3));
    CHECK_ST(clattn__enqueue_matmul(ctx, &x2, 0, W, 1, 1.0f, 0.0f, bias, &y2));
fail:
    return st;
}

/* 1 when the tiled kernel may load X with float4: the direction it walks (stride 1) is 16-byte
 * aligned at every tile start, the buffer's base address included (a CL_MEM_USE_HOST_PTR buffer
 * over a host array 4 bytes off crashed PoCL with matmul=gpu). The kernel prefers the rows'
 * direction when both strides are 1. */
static int vec_ok(const clattn_context *ctx, const clattn_tensor *X, int s_r, int s_k, int tile_r,
                  int tile_k, int bs)
{
    int other = s_r == 1 ? s_k : s_r, tile = s_r == 1 ? tile_r : tile_k;
    return (s_r == 1 || s_k == 1) && clattn__vec_aligned(ctx, X, 4) && other % 4 == 0 &&
           bs % 4 == 0 && tile % 4 == 0;
}

/* matmul_tiled's slice flags (kernels/matmul.cl) */
#define SLICE_RESUME 1
#define SLICE_RAW 2

/* Loop iterations of one matmul_tiled work-item (kernels/matmul.cl), counted as
 * clattn__loop_budget asks: every iteration of every loop plus one per loop entered, the unroll
 * pragmas' included. fixed: outside the k loop; per_step: one TSK-deep step. */
static void tiled_loops(int TSM, int TSN, int TSK, int WPTM, int WPTN, long *fixed, long *per_step)
{
    long items = (long)(TSM / WPTM) * (TSN / WPTN);
    long nest = (WPTM + 1) + (long)WPTM * (WPTN + 1); /* a WPTM x WPTN loop nest */
    long stage = ((long)TSM * TSK + items - 1) / items + 1 + ((long)TSN * TSK + items - 1) / items + 1;
    *fixed = 3 * nest + 1; /* zero, resume (RESUME slices) and store the accumulators */
    *per_step = 1 + stage + (long)TSK * (1 + (WPTM + 1) + (WPTN + 1) + nest) + 1;
}

int clattn__smallest_tile(int ts, int wpt)
{
    while (ts % (2 * wpt) == 0)
        ts /= 2;
    return ts;
}

long clattn__matmul_gpu_min_loops(const clattn_tuning *t)
{
    int TSM = clattn__tune_int(t, "TSM", 128), TSN = clattn__tune_int(t, "TSN", 128);
    int WPTM = clattn__tune_int(t, "WPTM", 8), WPTN = clattn__tune_int(t, "WPTN", 8);
    long fixed, per_step;
    /* the worst case: both sides halved as far as the launch may (fewest items per group) */
    tiled_loops(clattn__smallest_tile(TSM, WPTM), clattn__smallest_tile(TSN, WPTN),
                clattn__tune_int(t, "TSK", 16), WPTM, WPTN, &fixed, &per_step);
    return fixed + per_step;
}

/* The k-slice of one matmul_tiled launch: all of K, or under a loop budget as many TSK steps as
 * fit. */
static clattn_status k_slice(clattn_context *ctx, const clattn_tuning *t, int TSM, int TSN,
                             int TSK, int WPTM, int WPTN, int K, int *kc)
{
    clattn_status st = CLATTN_SUCCESS;
    long fixed, per_step;
    size_t steps, nsteps = clattn__div_up((size_t)K, (size_t)TSK);
    tiled_loops(TSM, TSN, TSK, WPTM, WPTN, &fixed, &per_step);
    CHECK_ST(clattn__loop_units(ctx, clattn__loop_budget(ctx, t), fixed, per_step, nsteps, &steps,
                                "matmul=gpu: a TSK=%d step of a TSM=%d TSN=%d tile", TSK, TSM,
                                TSN));
    *kc = steps < nsteps ? (int)steps * TSK : K;
fail:
    return st;
}

/* The tuning defines of t with A's and B's dtypes (AT, BT). */
static const char *typed(const clattn_tuning *t, const clattn_tensor *A, const clattn_tensor *B,
                         char *buf, size_t size)
{
    snprintf(buf, size, "%s", t->defines);
    clattn__dtype_define(buf, size, "AT", A->dtype);
    return clattn__dtype_define(buf, size, "BT", B->dtype);
}

static clattn_status enqueue_tiled(clattn_context *ctx, const clattn_tuning *tune_in,
                                   const clattn_tensor *A, operand a, const clattn_tensor *B,
                                   operand b, float alpha, float beta, const clattn_tensor *bias,
                                   const clattn_tensor *C, int batch)
{
    clattn_status st = CLATTN_SUCCESS;
    clattn_tuning tune = *tune_in;
    cl_kernel k = NULL;
    char defs[sizeof tune.defines + 32];
    size_t item_max[3] = {0, 0, 0}, kernel_wg = 0;
    int TSM = clattn__tune_int(&tune, "TSM", 128), TSN = clattn__tune_int(&tune, "TSN", 128);
    int TSK = clattn__tune_int(&tune, "TSK", 16), WPTM = clattn__tune_int(&tune, "WPTM", 8);
    int WPTN = clattn__tune_int(&tune, "WPTN", 8);
    int M = a.rows, N = b.cols, K = a.cols;
    int a_off = (int)A->offset, b_off = (int)B->offset, c_off = (int)C->offset;
    int bias_off = bias ? (int)bias->offset : 0;
    cl_mem bias_buf = bias ? bias->buf : NULL;
    /* tuning.c checked the divisibility rules of the tile (TSM by WPTM, TSN by WPTN, both tiles
     * by the group) when it parsed them; halving a side that stays a multiple of its WPT keeps
     * them. A tile over twice the matrix only multiplies zeros (and idles the GPU's other cores):
     * halve it while it is, down to 32 (each size is one more program build). */
    while (TSM % (2 * WPTM) == 0 && TSM / 2 >= M && TSM / 2 >= 32)
        clattn__tune_set(&tune, "TSM", TSM /= 2);
    while (TSN % (2 * WPTN) == 0 && TSN / 2 >= N && TSN / 2 >= 32)
        clattn__tune_set(&tune, "TSN", TSN /= 2);
    clGetDeviceInfo(ctx->device, CL_DEVICE_MAX_WORK_ITEM_SIZES, sizeof item_max, item_max, NULL);
    /* Clamp to the device: halve the larger tile dimension (and with it the group) until the group
     * and its local memory fit the device and the compiled kernel. tuning.c refused tiles whose
     * smallest halving does not fit the device; only the compiled kernel's limit can stop this. */
    for (;;) {
        size_t lx = (size_t)(TSN / WPTN), ly = (size_t)(TSM / WPTM);
        size_t lmem = (size_t)TSK * (TSM + TSN + 2) * sizeof(float);
        int fits = lx * ly <= ctx->max_wg && lmem <= ctx->local_mem &&
                   (!item_max[0] || (lx <= item_max[0] && ly <= item_max[1]));
        if (fits) {
            CHECK_ST(clattn__get_kernel(ctx, "matmul.cl", typed(&tune, A, B, defs, sizeof defs),
                                        "matmul_tiled", &k));
            CHECK_ST(clattn__kernel_group_size(ctx, k, "matmul_tiled", &kernel_wg));
            if (lx * ly <= kernel_wg)
                break;
        }
        int can_m = TSM % (2 * WPTM) == 0, can_n = TSN % (2 * WPTN) == 0;
        CHECK(ctx, can_m || can_n, CLATTN_ERROR_UNSUPPORTED,
              "tuning: matmul=gpu: no tile fits this device (max work-group %zu, kernel %zu, "
              "local memory %zu bytes; last tried TSM=%d TSN=%d TSK=%d WPTM=%d WPTN=%d)",
              ctx->max_wg, kernel_wg, ctx->local_mem, TSM, TSN, TSK, WPTM, WPTN);
        if (can_m && (!can_n || TSM / WPTM >= TSN / WPTN))
            clattn__tune_set(&tune, "TSM", TSM /= 2);
        else
            clattn__tune_set(&tune, "TSN", TSN /= 2);
    }
    /* the float4 directions stay aligned in every k-slice: slices start at multiples of TSK */
    int a_vec = vec_ok(ctx, A, a.s_row, a.s_col, TSM, TSK, a.batch_stride);
    int b_vec = vec_ok(ctx, B, b.s_col, b.s_row, TSN, TSK, b.batch_stride);
    int kc = K;
    CHECK_ST(k_slice(ctx, &tune, TSM, TSN, TSK, WPTM, WPTN, K, &kc));
    size_t lws[3] = {(size_t)(TSN / WPTN), (size_t)(TSM / WPTM), 1};
    size_t gws[3] = {clattn__div_up((size_t)N, TSN) * lws[0],
                     clattn__div_up((size_t)M, TSM) * lws[1], (size_t)batch};
    /* C = alpha op(A) op(B) + beta C (+ bias) over k-slices. With beta = 0 the slices pass their
     * raw sums on through C and the last one applies alpha and the bias: bit for bit one launch.
     * Otherwise the first applies beta and the bias and the others add alpha times theirs. */
    for (long k_at = 0; k_at < K; k_at += kc) { /* long: k0 + kc can pass INT32_MAX */
        int k0 = (int)k_at;
        int kn = K - k0 < kc ? K - k0 : kc, first = k0 == 0, last = k0 + kn == K;
        int ao = a_off + k0 * a.s_col, bo = b_off + k0 * b.s_row, raw = beta == 0.0f;
        int slice = raw ? (first ? 0 : SLICE_RESUME) | (last ? 0 : SLICE_RAW) : 0;
        float bt = raw || first ? beta : 1.0f;
        cl_mem bb = (raw ? last : first) ? bias_buf : NULL;
        CHECK_ST(clattn__set_args(ctx, k, "matmul_tiled", ARG(A->buf), ARG(ao),
                                  ARG(a.batch_stride), ARG(a.s_row), ARG(a.s_col), ARG(a_vec),
                                  ARG(B->buf), ARG(bo), ARG(b.batch_stride), ARG(b.s_row),
                                  ARG(b.s_col), ARG(b_vec), ARG(C->buf), ARG(c_off), ARG(M),
                                  ARG(N), ARG(kn), ARG(alpha), ARG(bt), ARG(bb), ARG(bias_off),
                                  ARG(slice), ARGS_END));
        CHECK_ST(clattn__launch(ctx, k, 3, gws, lws, "matmul_tiled"));
    }
fail:
    return st;
}

/* The CPU-shaped kernels loop inside each work-item and share nothing across a group, so groups of
 * one: PoCL compiles a kernel once per distinct local size (0.1-1 s each), and one-item groups are
 * also what its threads balance best. */
static const size_t one_item[3] = {1, 1, 1};

/* Packs op(X) (rows x K, every batch) into panels of P rows at element dst_off of buf: with
 * pack_*_rows (one work-item per PK k's, sweeping every panel) when op(X)'s rows are contiguous,
 * else with pack_b_panels (one work-item per PK k's of one panel). */
static clattn_status pack(clattn_context *ctx, const char *defines, const char *name,
                          const clattn_tensor *X, operand o, int P, int PK, int nb, cl_mem buf,
                          int dst_off, int dst_bs)
{
    clattn_status st = CLATTN_SUCCESS;
    cl_kernel k;
    int off = (int)X->offset, by_rows = o.s_row == 1;
    CHECK_ST(clattn__get_kernel(ctx, "matmul.cl", defines, name, &k));
    CHECK_ST(clattn__set_args(ctx, k, name, ARG(X->buf), ARG(off), ARG(o.batch_stride),
                              ARG(o.s_row), ARG(o.s_col), ARG(o.rows), ARG(o.cols), ARG(buf),
                              ARG(dst_off), ARG(dst_bs), ARGS_END));
    size_t gws[3] = {clattn__div_up((size_t)o.cols, PK),
                     by_rows ? 1 : clattn__div_up((size_t)o.rows, P), (size_t)nb};
    CHECK_ST(clattn__launch(ctx, k, 3, gws, one_item, name));
fail:
    return st;
}

static clattn_status enqueue_packed(clattn_context *ctx, const clattn_tuning *tune,
                                    const clattn_tensor *A, operand a, const clattn_tensor *B,
                                    operand b, float alpha, float beta, const clattn_tensor *bias,
                                    const clattn_tensor *C, int batch)
{
    clattn_status st = CLATTN_SUCCESS;
    cl_kernel km;
    cl_mem buf;
    char defs[sizeof tune->defines + 32];
    typed(tune, A, B, defs, sizeof defs);
    int TM = clattn__tune_int(tune, "TM", 6), TN = clattn__tune_int(tune, "TN", 16);
    int RB = clattn__tune_int(tune, "RB", 32);
    int PK = clattn__tune_int(tune, "PK", 16);
    int M = a.rows, N = b.cols, K = a.cols, c_off = (int)C->offset;
    int bias_off = bias ? (int)bias->offset : 0;
    cl_mem bias_buf = bias ? bias->buf : NULL;
    /* A float32 op(A) running along k is read in place; a transposed or 16-bit A is packed into
     * float32 panels first. */
    int a_direct = a.s_col == 1 && A->dtype == CLATTN_FLOAT32;
    /* A shared (stride 0) operand is packed once and read by every batch. */
    int nba = a.batch_stride ? batch : 1, nbb = b.batch_stride ? batch : 1;
    size_t pa = a_direct ? 0 : clattn__div_up((size_t)M, TM) * TM * K;
    size_t pb = clattn__div_up((size_t)N, TN) * TN * K;
    size_t total = pa * nba + pb * nbb;
    CHECK(ctx, total <= (size_t)INT32_MAX, CLATTN_ERROR_UNSUPPORTED,
          "matmul: packed operands of %zu elements exceed 32-bit indexing", total);
    CHECK_ST(clattn__scratch(ctx, CLATTN_SCRATCH_OP, total * 4, &buf));
    int a_bs = a.batch_stride ? (int)pa : 0, b_bs = b.batch_stride ? (int)pb : 0;
    int b_off = (int)(pa * nba);
    if (!a_direct)
        CHECK_ST(pack(ctx, defs, a.s_row == 1 ? "pack_a_rows" : "pack_a_panels", A, a, TM, PK,
                      nba, buf, 0, (int)pa));
    operand bt = b; /* B's panels run along its columns: pack op(B)^T */
    bt.rows = b.cols;
    bt.cols = b.rows;
    bt.s_row = b.s_col;
    bt.s_col = b.s_row;
    CHECK_ST(pack(ctx, defs, bt.s_row == 1 ? "pack_b_rows" : "pack_b_panels", B, bt, TN, PK, nbb,
                  buf, b_off, (int)pb));
    if (a_direct) {
        int a_off = (int)A->offset;
        CHECK_ST(clattn__get_kernel(ctx, "matmul.cl", defs, "matmul_rows", &km));
        CHECK_ST(clattn__set_args(ctx, km, "matmul_rows", ARG(A->buf), ARG(a_off),
                                  ARG(a.batch_stride), ARG(a.s_row), ARG(buf), ARG(b_off),
                                  ARG(b_bs), ARG(C->buf), ARG(c_off), ARG(M), ARG(N), ARG(K),
                                  ARG(alpha), ARG(beta), ARG(bias_buf), ARG(bias_off), ARGS_END));
    } else {
        CHECK_ST(clattn__get_kernel(ctx, "matmul.cl", defs, "matmul_packed", &km));
        CHECK_ST(clattn__set_args(ctx, km, "matmul_packed", ARG(buf), ARG(a_bs), ARG(buf),
                                  ARG(b_off), ARG(b_bs), ARG(C->buf), ARG(c_off), ARG(M), ARG(N),
                                  ARG(K), ARG(alpha), ARG(beta), ARG(bias_buf), ARG(bias_off),
                                  ARGS_END));
    }
    size_t gws[3] = {clattn__div_up((size_t)N, TN),
                     clattn__div_up(clattn__div_up((size_t)M, TM), RB), (size_t)batch};
    CHECK_ST(clattn__launch(ctx, km, 3, gws, one_item, a_direct ? "matmul_rows" : "matmul_packed"));
fail:
    return st;
}

/* rows x depth x batches from which a narrow op(B) takes narrower panels (see below) */
#define NARROW_MIN ((size_t)1 << 20)

clattn_status clattn__enqueue_matmul(clattn_context *ctx, const clattn_tensor *A, int trans_a,
                                     const clattn_tensor *B, int trans_b, float alpha, float beta,
                                     const clattn_tensor *bias, const clattn_tensor *C)
{
    clattn_status st = CLATTN_SUCCESS;
    clattn_tuning tune;
    operand a = describe(A, trans_a), b = describe(B, trans_b);
    int batch = (int)clattn__batch_count(C, 2);
    /* a 16-bit C (read when beta is not 0) and bias through float32: k-slices pass raw sums */
    const clattn_tensor *ts[2] = {C, bias};
    const int load[2] = {beta != 0.0f, 1};
    clattn_tensor t32[2];
    CHECK_ST(clattn__tune_bucket(ctx, "matmul", clattn__gemm_bucket(a.rows, b.cols, a.cols),
                                 &tune));
    CHECK_ST(clattn__cast_in(ctx, ts, load, 2, t32));
    if (strcmp(tune.variant, "gpu") == 0)
        CHECK_ST(enqueue_tiled(ctx, &tune, A, a, B, b, alpha, beta, bias ? &t32[1] : NULL,
                               &t32[0], batch));
    else {
        /* op(B) narrower than a panel takes panels as narrow as the vectors allow: padding N
         * columns to TN costs TN / N times the multiply-adds and the packed scratch (64x for
         * N = 1 at AVX-512's TN=64). Only for products of NARROW_MIN rows x depth or more: a
         * narrower panel is another program to build (about 1 s on PoCL), which smaller ones
         * (d2l's examples) would not win back. */
        int TN = clattn__tune_int(&tune, "TN", 16), VN = clattn__tune_int(&tune, "VN", 8);
        if (b.cols < TN && (size_t)a.rows * a.cols * batch >= NARROW_MIN)
            clattn__tune_set(&tune, "TN", (int)clattn__round_up((size_t)b.cols, (size_t)VN));
        CHECK_ST(enqueue_packed(ctx, &tune, A, a, B, b, alpha, beta, bias ? &t32[1] : NULL,
                                &t32[0], batch));
    }
    CHECK_ST(clattn__cast_out(ctx, &t32[0], C)); /* a 16-bit C: each result rounded once */
fail:
    return st;
}

/* ---- backward ---- */

/* Batch b of a batched tensor (its last two dims), or t itself when it is 2-D (shared). */
static clattn_tensor batch_view(const clattn_tensor *t, size_t b)
{
    if (t->ndim == 2)
        return *t;
    size_t m = t->dims[t->ndim - 2], n = t->dims[t->ndim - 1];
    return clattn_view(t->buf, t->dtype, t->offset + b * m * n, 2, &t->dims[t->ndim - 2]);
}

/* dX = alpha op_tp(P) op_tr(R), the gradient of a matmul operand X. When X is 2-D (shared by
 * every batch) while the product had nb > 1 batches, its gradient sums theirs: one product per
 * batch, each added to the sum so far, in batch order (the same bits on every run). */
static clattn_status operand_grad(clattn_context *ctx, const clattn_tensor *P, int tp,
                                  const clattn_tensor *R, int tr, float alpha, size_t nb,
                                  const clattn_tensor *dX)
{
    clattn_status st = CLATTN_SUCCESS;
    if (dX->ndim > 2 || nb == 1)
        return clattn__enqueue_matmul(ctx, P, tp, R, tr, alpha, 0.0f, NULL, dX);
    for (size_t b = 0; b < nb; b++) {
        clattn_tensor pb = batch_view(P, b), rb = batch_view(R, b);
        CHECK_ST(clattn__enqueue_matmul(ctx, &pb, tp, &rb, tr, alpha, b ? 1.0f : 0.0f, NULL, dX));
    }
fail:
    return st;
}

clattn_status clattn_matmul_backward(clattn_context *ctx, const clattn_tensor *A, int trans_a,
                                     const clattn_tensor *B, int trans_b, float alpha,
                                     const clattn_tensor *dC, const clattn_tensor *dA,
                                     const clattn_tensor *dB)
{
    clattn_status st = CLATTN_SUCCESS;
    CHECK_DRY_RUN(ctx, clattn_matmul_backward(ctx, A, trans_a, B, trans_b, alpha, dC, dA, dB));
    CHECK(NULL, ctx, CLATTN_ERROR_INVALID_ARGUMENT, "ctx: NULL context");
    CHECK_ST(clattn__check_tensor(ctx, A, "A", CLATTN_FLOAT32, 2, 4));
    CHECK_ST(clattn__check_tensor(ctx, B, "B", CLATTN_FLOAT32, 2, 4));
    CHECK_ST(clattn__check_tensor(ctx, dC, "dC", CLATTN_FLOAT32, 2, 4));
    CHECK_ST(check_matmul(ctx, A, trans_a, B, trans_b, dC, "dC"));
    CHECK_ST(clattn__check_grad(ctx, dA, "dA", A, "A"));
    CHECK_ST(clattn__check_grad(ctx, dB, "dB", B, "B"));
    const clattn_arg outs[2] = {{dA, "dA"}, {dB, "dB"}};
    const clattn_arg ins[3] = {{A, "A"}, {B, "B"}, {dC, "dC"}};
    CHECK_ST(clattn__check_no_overlap(ctx, outs, 2, ins, 3));
    size_t nb = clattn__batch_count(dC, 2);
    /* C = alpha op(A) op(B): d op(A) = alpha dC op(B)^T and d op(B) = alpha op(A)^T dC, each
     * transposed back when the operand was read transposed */
    if (dA && !trans_a)
        CHECK_ST(operand_grad(ctx, dC, 0, B, !trans_b, alpha, nb, dA));
    else if (dA)
        CHECK_ST(operand_grad(ctx, B, trans_b, dC, 1, alpha, nb, dA));
    if (dB && !trans_b)
        CHECK_ST(operand_grad(ctx, A, !trans_a, dC, 0, alpha, nb, dB));
    else if (dB)
        CHECK_ST(operand_grad(ctx, dC, 1, A, trans_a, alpha, nb, dB));
fail:
    return st;
}

/* db (cols) = the column sums of x2 (rows, cols), in row order, split over launches under the
 * matmul variant's loop budget (llvmpipe ends long loops). */
clattn_status clattn__enqueue_column_sums(clattn_context *ctx, const clattn_tensor *x2,
                                         const clattn_tensor *db)
{
    clattn_status st = CLATTN_SUCCESS;
    clattn_tuning t;
    cl_kernel k;
    int rows = (int)x2->dims[0], cols = (int)x2->dims[1];
    int x_off = (int)x2->offset, y_off = (int)db->offset;
    size_t chunk, gws = clattn__div_up((size_t)cols, 16);
    CHECK_ST(clattn__tune(ctx, "matmul", &t));
    /* loop iterations per item as clattn__loop_budget counts them: a partial 16 columns' 15
     * scalar sums over the rows */
    CHECK_ST(clattn__loop_units(ctx, clattn__loop_budget(ctx, &t), 32, 15, (size_t)rows, &chunk,
                                "linear_backward: the bias gradient's sum over rows"));
    CHECK_ST(clattn__get_kernel(ctx, "matmul.cl", SHARED_ONLY, "column_sums", &k));
    for (long r_at = 0; r_at < rows; r_at += (long)chunk) { /* long: see matmul's k-slices */
        int r0 = (int)r_at;
        int r1 = (size_t)(rows - r0) < chunk ? rows : r0 + (int)chunk, acc = r0 > 0;
        CHECK_ST(clattn__set_args(ctx, k, "column_sums", ARG(x2->buf), ARG(x_off), ARG(cols),
                                  ARG(r0), ARG(r1), ARG(db->buf), ARG(y_off), ARG(acc),
                                  ARGS_END));
        CHECK_ST(clattn__launch(ctx, k, 1, &gws, NULL, "column_sums"));
    }
fail:
    return st;
}

clattn_status clattn_linear_backward(clattn_context *ctx, const clattn_tensor *x,
                                     const clattn_tensor *W, const clattn_tensor *dy,
                                     const clattn_tensor *dx, const clattn_tensor *dW,
                                     const clattn_tensor *db)
{
    clattn_status st = CLATTN_SUCCESS;
    char s1[96], s2[96];
    CHECK_DRY_RUN(ctx, clattn_linear_backward(ctx, x, W, dy, dx, dW, db));
    CHECK(NULL, ctx, CLATTN_ERROR_INVALID_ARGUMENT, "ctx: NULL context");
    CHECK_ST(clattn__check_tensor(ctx, x, "x", CLATTN_FLOAT32, 1, 4));
    CHECK_ST(clattn__check_tensor(ctx, W, "W", CLATTN_FLOAT32, 2, 2));
    CHECK_ST(clattn__check_tensor(ctx, dy, "dy", CLATTN_FLOAT32, 1, 4));
    size_t in = x->dims[x->ndim - 1], out = W->dims[0];
    CHECK(ctx, W->dims[1] == in, CLATTN_ERROR_SHAPE_MISMATCH,
          "W: shape %s, expected (out_features, %zu) for x %s", clattn__shape_str(W, s1, sizeof s1),
          in, clattn__shape_str(x, s2, sizeof s2));
    CHECK(ctx, dy->ndim == x->ndim && dy->dims[dy->ndim - 1] == out &&
                   memcmp(dy->dims, x->dims, sizeof(size_t) * (x->ndim - 1)) == 0,
          CLATTN_ERROR_SHAPE_MISMATCH, "dy: shape %s, expected x's leading dims and %zu features",
          clattn__shape_str(dy, s1, sizeof s1), out);
    CHECK_ST(clattn__check_grad(ctx, dx, "dx", x, "x"));
    CHECK_ST(clattn__check_grad(ctx, dW, "dW", W, "W"));
    if (db) {
        CHECK_ST(clattn__check_tensor(ctx, db, "db", CLATTN_FLOAT32, 1, 1));
        CHECK(ctx, db->dims[0] == out, CLATTN_ERROR_SHAPE_MISMATCH,
              "db: %zu elements, expected out_features = %zu", db->dims[0], out);
    }
    const clattn_arg outs[3] = {{dx, "dx"}, {dW, "dW"}, {db, "db"}};
    const clattn_arg ins[3] = {{x, "x"}, {W, "W"}, {dy, "dy"}};
    CHECK_ST(clattn__check_no_overlap(ctx, outs, 3, ins, 3));
    CHECK_ST(clattn__enqueue_linear_backward(ctx, x, W, dy, dx, dW, db));
fail:
    return st;
}

clattn_status clattn__enqueue_linear_backward(clattn_context *ctx, const clattn_tensor *x,
                                              const clattn_tensor *W, const clattn_tensor *dy,
                                              const clattn_tensor *dx, const clattn_tensor *dW,
                                              const clattn_tensor *db)
{
    clattn_status st = CLATTN_SUCCESS;
    size_t in = x->dims[x->ndim - 1], out = W->dims[0], rows = clattn_tensor_numel(x) / in;
    size_t d2x[2] = {rows, in}, d2y[2] = {rows, out};
    clattn_tensor x2 = clattn_view(x->buf, x->dtype, x->offset, 2, d2x);
    clattn_tensor dy2 = clattn_view(dy->buf, dy->dtype, dy->offset, 2, d2y);
    if (dx) { /* dx = dy W */
        clattn_tensor dx2 = clattn_view(dx->buf, dx->dtype, dx->offset, 2, d2x);
        CHECK_ST(clattn__enqueue_matmul(ctx, &dy2, 0, W, 0, 1.0f, 0.0f, NULL, &dx2));
    }
    if (dW) /* dW = dy^T x over every row */
        CHECK_ST(clattn__enqueue_matmul(ctx, &dy2, 1, &x2, 0, 1.0f, 0.0f, NULL, dW));
    if (db)
        CHECK_ST(clattn__enqueue_column_sums(ctx, &dy2, db));
fail:
    return st;
}
