/* clattn_decode_attention: KV-cache decoding, split over key ranges and merged (kernels/decode.cl). */
#include "attention.h"
#include <stdio.h>
#include <string.h>

#define DECODE_MAX_DIM 256 /* head sizes, as the fused attention kernels */
#define DECODE_MAX_QN 64   /* new rows per sequence: computed, never skipped, when blocked */
/* Cache rows per K/V head: the kernels count keys in int, up to Kmax + Qn and a step past a
 * split's end (decode_cpu's 16 keys, decode_gpu's tile of up to WG = 1024). */
#define DECODE_MAX_ROWS (INT32_MAX - DECODE_MAX_QN - 1024 - 16)

static const int dim_buckets[] = {16, 32, 48, 64, 96, 128, 192, DECODE_MAX_DIM};

static int bucket(int n)
{
    size_t i = 0;
    while (i + 1 < sizeof dim_buckets / sizeof dim_buckets[0] && dim_buckets[i] < n)
        i++;
    return dim_buckets[i];
}

/* t is 4-D float32, float16 or bfloat16 (B, H, rows, cols) with the given dims, 0 meaning any
 * (stored in dims). */
static clattn_status check_4d(clattn_context *ctx, const clattn_tensor *t, const char *name,
                              size_t dims[4], const char *what)
{
    clattn_status st = CLATTN_SUCCESS;
    char s1[96], want[96] = "(";
    CHECK_ST(clattn__check_float_tensor(ctx, t, name, 4, 4));
    int ok = 1;
    for (int i = 0; i < 4; i++) {
        ok &= dims[i] == 0 || t->dims[i] == dims[i];
        size_t n = strlen(want);
        if (dims[i])
            snprintf(want + n, sizeof want - n, "%zu%s", dims[i], i < 3 ? ", " : ")");
        else
            snprintf(want + n, sizeof want - n, "*%s", i < 3 ? ", " : ")");
    }
    CHECK(ctx, ok, CLATTN_ERROR_SHAPE_MISMATCH, "%s: shape %s, expected %s (%s)", name,
          clattn__shape_str(t, s1, sizeof s1), want, what);
    memcpy(dims, t->dims, sizeof(size_t) * 4);
fail:
    return st;
}

/* Shapes: Q (B, Hq, Qn, d), caches (B, Hkv, Kmax, d / dv), lens (B), new rows (B, Hkv, Qn, .),
 * out (B, Hq, Qn, dv). */
static clattn_status check_shapes(clattn_context *ctx, const clattn_tensor *Q,
                                  const clattn_kv_cache *c, const clattn_tensor *out)
{
    clattn_status st = CLATTN_SUCCESS;
    char s1[96];
    size_t q[4] = {0}, k[4] = {0}, v[4] = {0}, kn[4], vn[4], o[4];
    CHECK(ctx, c, CLATTN_ERROR_INVALID_ARGUMENT, "cache: NULL");
    CHECK_ST(check_4d(ctx, Q, "Q", q, "B, query heads, new rows, head size"));
    CHECK(ctx, q[2] >= 1 && q[2] <= DECODE_MAX_QN, CLATTN_ERROR_UNSUPPORTED,
          "Q: %zu new rows per sequence, at most %d", q[2], DECODE_MAX_QN);
    k[0] = q[0];
    k[3] = q[3];
    CHECK_ST(check_4d(ctx, c->k_cache, "cache.k_cache", k, "Q's batch and head size"));
    CHECK(ctx, q[1] % k[1] == 0, CLATTN_ERROR_SHAPE_MISMATCH,
          "cache.k_cache: %zu K/V heads do not divide Q's %zu heads", k[1], q[1]);
    v[0] = k[0];
    v[1] = k[1];
    v[2] = k[2];
    CHECK_ST(check_4d(ctx, c->v_cache, "cache.v_cache", v, "k_cache's batch, heads and rows"));
    CHECK(ctx, c->v_cache->dtype == c->k_cache->dtype, CLATTN_ERROR_INVALID_TENSOR,
          "cache.v_cache: dtype %s, expected k_cache's %s (one dtype for the cache)",
          clattn__dtype_name(c->v_cache->dtype), clattn__dtype_name(c->k_cache->dtype));
    CHECK(ctx, k[2] <= DECODE_MAX_ROWS, CLATTN_ERROR_UNSUPPORTED,
          "cache.k_cache: %zu rows per K/V head, at most %d", k[2], DECODE_MAX_ROWS);
    CHECK(ctx, q[3] <= DECODE_MAX_DIM && v[3] <= DECODE_MAX_DIM, CLATTN_ERROR_UNSUPPORTED,
          "Q, cache.v_cache: head sizes %zu, %zu, at most %d", q[3], v[3], DECODE_MAX_DIM);
    CHECK_ST(clattn__check_tensor(ctx, c->lens, "cache.lens", CLATTN_INT32, 1, 1));
    CHECK(ctx, c->lens->dims[0] == q[0], CLATTN_ERROR_SHAPE_MISMATCH,
          "cache.lens: shape %s, expected (%zu) (one length per sequence)",
          clattn__shape_str(c->lens, s1, sizeof s1), q[0]);
    CHECK(ctx, !c->k_new == !c->v_new, CLATTN_ERROR_INVALID_ARGUMENT,
          "cache.k_new, cache.v_new: give both or neither");
    CHECK(ctx, c->advance == 0 || (c->advance == 1 && c->k_new), CLATTN_ERROR_INVALID_ARGUMENT,
          "cache.advance = %d: 0, or 1 with k_new and v_new to append", c->advance);
    if (c->k_new) {
        size_t want_k[4] = {k[0], k[1], q[2], k[3]}, want_v[4] = {k[0], k[1], q[2], v[3]};
        memcpy(kn, want_k, sizeof kn);
        memcpy(vn, want_v, sizeof vn);
        CHECK_ST(check_4d(ctx, c->k_new, "cache.k_new", kn, "k_cache's batch and heads, Q's rows"));
        CHECK_ST(check_4d(ctx, c->v_new, "cache.v_new", vn, "v_cache's batch and heads, Q's rows"));
        CHECK(ctx, c->v_new->dtype == c->k_new->dtype, CLATTN_ERROR_INVALID_TENSOR,
              "cache.v_new: dtype %s, expected k_new's %s", clattn__dtype_name(c->v_new->dtype),
              clattn__dtype_name(c->k_new->dtype));
        CHECK(ctx, q[2] <= k[2], CLATTN_ERROR_SHAPE_MISMATCH,
              "cache.k_new: %zu new rows do not fit a cache of %zu", q[2], k[2]);
    }
    size_t want_o[4] = {q[0], q[1], q[2], v[3]};
    memcpy(o, want_o, sizeof o);
    CHECK_ST(check_4d(ctx, out, "out", o, "Q's batch, heads and rows, v_cache's head size"));
fail:
    return st;
}

/* What decoding takes from opts: scale, lse, causal, a window and the fill (bottom-right), ALiBi
 * slopes; the lse and the slopes overlap none of the outputs (out, and in place the caches with
 * k_new and lens with advance). */
static clattn_status check_opts(clattn_context *ctx, const clattn_attention_opts *opts,
                                const clattn_tensor *Q, const clattn_kv_cache *c,
                                const clattn_tensor *out, clattn_mask_args *m,
                                const clattn_tensor **lse)
{
    clattn_status st = CLATTN_SUCCESS;
    const clattn_dropout_params *drop;
    const clattn_mask *mk = opts ? &opts->mask : NULL;
    CHECK(ctx, !mk || (!mk->valid_lens && !mk->valid_lens_host && !mk->mask),
          CLATTN_ERROR_INVALID_ARGUMENT, "opts.mask: decoding takes no valid lengths or mask "
          "tensor (cache.lens are the lengths)");
    CHECK(ctx, !mk || !(mk->causal || mk->window) || mk->align == CLATTN_ALIGN_BOTTOM_RIGHT,
          CLATTN_ERROR_INVALID_ARGUMENT, "opts.mask.align: decoding counts causal and window "
          "diagonals from each sequence's last key: set CLATTN_ALIGN_BOTTOM_RIGHT");
    CHECK(ctx, !opts || !opts->bias, CLATTN_ERROR_INVALID_ARGUMENT,
          "opts.bias: decoding takes no bias tensor");
    CHECK(ctx, !opts || !clattn__dropout_active(&opts->dropout), CLATTN_ERROR_INVALID_ARGUMENT,
          "opts.dropout: decoding is inference, it takes no dropout (training = 0 or p = 0)");
    /* the mask and lse checks of every attention op, for scores (B, Hq, Qn, Kmax + Qn) */
    size_t sdims[4] = {Q->dims[0], Q->dims[1], Q->dims[2], c->k_cache->dims[2] + Q->dims[2]};
    const clattn_arg ins[6] = {{Q, "Q"},           {c->k_cache, "cache.k_cache"},
                               {c->v_cache, "cache.v_cache"}, {c->lens, "cache.lens"},
                               {c->k_new, "cache.k_new"}, {c->v_new, "cache.v_new"}};
    int app = c->k_new != NULL;
    const clattn_arg outs[4] = {{out, "out"},
                                {app ? c->k_cache : NULL, "cache.k_cache"},
                                {app ? c->v_cache : NULL, "cache.v_cache"},
                                {c->advance ? c->lens : NULL, "cache.lens"}};
    CHECK_ST(clattn__resolve_opts(ctx, opts, 4, sdims, ins, 6, outs, 4, m, &drop, lse));
fail:
    return st;
}

/* Outputs: out, and in place the caches with k_new and lens with advance. */
static clattn_status check_overlaps(clattn_context *ctx, const clattn_tensor *Q,
                                    const clattn_kv_cache *c, const clattn_tensor *out)
{
    int app = c->k_new != NULL;
    const clattn_arg outs[4] = {{out, "out"},
                                {app ? c->k_cache : NULL, "cache.k_cache"},
                                {app ? c->v_cache : NULL, "cache.v_cache"},
                                {c->advance ? c->lens : NULL, "cache.lens"}};
    const clattn_arg ins[6] = {{Q, "Q"},
                               {c->k_new, "cache.k_new"},
                               {c->v_new, "cache.v_new"},
                               {app ? NULL : c->k_cache, "cache.k_cache"},
                               {app ? NULL : c->v_cache, "cache.v_cache"},
                               {c->advance ? NULL : c->lens, "cache.lens"}};
    return clattn__check_no_overlap(ctx, outs, 4, ins, 6);
}

/* The decode_gpu launch's loop iterations per work-item (clattn__loop_budget's count, an upper
 * bound): fixed (q rows, state twice, the overflow check, stores) and per tile of WG keys
 * (KC-column passes of the scores, the rows' maxima and sums, the output columns), twice: a
 * split whose sums overflowed takes its keys again. */
static void gpu_loops(int RQ, int WG, int KC, int dp, int dvp, long *fixed, long *per_tile)
{
    long ncol = (dvp + WG - 1) / WG, kc = KC < dp ? KC : dp, passes = (dp + kc - 1) / kc;
    *fixed = (RQ * dp + WG - 1) / WG + 1 + RQ * (ncol + 2) + 1 + 3 * (RQ * (ncol + 2) + 1) + 3 +
             RQ + 1;
    *per_tile = 2 * ((RQ + 1) + passes * (kc + 1 + kc * (RQ + 2) + 2) + 1 + 3 * (RQ + 1) +
                     2 * (WG + 1) + ncol * (3 * (RQ + 1) + WG * (RQ + 2) + 2) + 2);
}

long clattn__decode_gpu_min_loops(const clattn_tuning *t)
{
    long fixed, per_tile;
    gpu_loops(clattn__tune_int(t, "RQ", 4), clattn__tune_int(t, "WG", 64),
              clattn__tune_int(t, "KC", 64), DECODE_MAX_DIM, DECODE_MAX_DIM, &fixed, &per_tile);
    return fixed + per_tile;
}

typedef struct {
    int B, Hq, Hkv, G, Qn, Kmax, A, d, dv, nsplit, SK, RQ, WG, gpu;
    int align16; /* every cache row starts on 16 elements (the buffers' base is aligned further) */
    clattn_dtype qt, ct, nt; /* Q's, the cache's and the new rows' dtypes */
    size_t part_floats; /* the scratch the splits write */
    float scale;
    cl_int2 win;
    float fill;
    cl_mem slopes; /* ALiBi, or NULL */
    int slopes_off;
    cl_int2 ss;
} decode_plan;

static void kernel_defines(const clattn_tuning *t, const decode_plan *p, char *buf, size_t n)
{
    snprintf(buf, n, "%s", t->defines);
    clattn__define(buf, n, "DP", bucket(p->d));
    clattn__define(buf, n, "DVP", bucket(p->dv));
    clattn__define(buf, n, "ALIGN16", p->align16);
    clattn__dtype_define(buf, n, "QT", p->qt);
    clattn__dtype_define(buf, n, "CT", p->ct);
}

/* The compiled decode_gpu may allow fewer items per group than WG (llvmpipe: 32): halved until
 * it fits, RQ with it (RQ <= WG). */
static clattn_status fit_group(clattn_context *ctx, clattn_tuning *t, decode_plan *p)
{
    clattn_status st = CLATTN_SUCCESS;
    char defines[600];
    cl_kernel k;
    for (size_t kernel_wg = 0;;) {
        kernel_defines(t, p, defines, sizeof defines);
        CHECK_ST(clattn__get_kernel(ctx, "decode.cl", defines, "decode_gpu", &k));
        CHECK_ST(clattn__kernel_group_size(ctx, k, "decode_gpu", &kernel_wg));
        if ((size_t)p->WG <= kernel_wg || p->WG == 1)
            break;
        clattn__tune_set(t, "WG", p->WG = kernel_wg > 1 ? (int)kernel_wg : 1);
        clattn__tune_set(t, "RQ", p->RQ = p->RQ < p->WG ? p->RQ : p->WG);
    }
fail:
    return st;
}

/* The variant's group, its split length SK (under a loop budget, as many tiles as fit) and the
 * split count. */
static clattn_status make_plan(clattn_context *ctx, clattn_tuning *t, const clattn_tensor *Q,
                               const clattn_kv_cache *c, const clattn_mask_args *m, float scale,
                               decode_plan *p)
{
    clattn_status st = CLATTN_SUCCESS;
    memset(p, 0, sizeof *p);
    p->B = (int)Q->dims[0];
    p->Hq = (int)Q->dims[1];
    p->Qn = (int)Q->dims[2];
    p->d = (int)Q->dims[3];
    p->Hkv = (int)c->k_cache->dims[1];
    p->G = p->Hq / p->Hkv;
    p->Kmax = (int)c->k_cache->dims[2];
    p->dv = (int)c->v_cache->dims[3];
    p->A = c->k_new ? p->Qn : 0;
    p->qt = Q->dtype;
    p->ct = c->k_cache->dtype;
    p->nt = c->k_new ? c->k_new->dtype : CLATTN_FLOAT32;
    p->align16 = p->d % 16 == 0 && p->dv % 16 == 0 && clattn__vec_aligned(ctx, c->k_cache, 16) &&
                 clattn__vec_aligned(ctx, c->v_cache, 16);
    p->gpu = strcmp(t->variant, "gpu") == 0;
    p->RQ = clattn__tune_int(t, "RQ", 4);
    /* the rows of a K/V head (G * Qn) spread evenly over as few items as RQ allows: more rows
     * per item would be padding computed and thrown away (multi-head decoding, one row per head:
     * RQ=4 did 4x the dot products; 5 rows at RQ=4 take 3 + 2, not 4 + 1 and 3 of padding) */
    int hrows = p->G * p->Qn, items = (hrows + p->RQ - 1) / p->RQ;
    if ((hrows + items - 1) / items != p->RQ)
        clattn__tune_set(t, "RQ", p->RQ = (hrows + items - 1) / items);
    p->WG = p->gpu ? clattn__tune_int(t, "WG", 64) : 1;
    p->SK = clattn__tune_int(t, "SK", 256);
    p->scale = scale;
    p->win.s[0] = m->win.s[1];
    p->win.s[1] = m->win.s[2];
    p->fill = m->fill;
    p->slopes = m->slopes;
    p->slopes_off = m->slopes_off;
    p->ss = m->ss;
    size_t sk_cap = INT32_MAX; /* the longest split a loop budget lets a work-item take */
    if (p->gpu) {
        long fixed, per_tile;
        CHECK_ST(fit_group(ctx, t, p));
        size_t tiles;
        gpu_loops(p->RQ, p->WG, clattn__tune_int(t, "KC", 64), bucket(p->d), bucket(p->dv),
                  &fixed, &per_tile);
        CHECK_ST(clattn__loop_units(ctx, clattn__loop_budget(ctx, t), fixed, per_tile,
                                    INT32_MAX / (size_t)p->WG, &tiles, "decode=gpu: a tile of "
                                    "WG=%d keys (RQ=%d, head sizes %d, %d)", p->WG, p->RQ, p->d,
                                    p->dv));
        sk_cap = tiles * (size_t)p->WG;
        p->SK = sk_cap < (size_t)p->SK ? (int)sk_cap : p->SK;
    }
    /* splits of at most SK keys (L <= Kmax), and more of them when the sequences and heads are
     * too few for 4 work-items (groups) per compute unit, down to 64 keys each */
    size_t groups = clattn__div_up((size_t)p->G * p->Qn, (size_t)p->RQ) * (size_t)p->B * p->Hkv;
    size_t want = clattn__div_up(4 * (size_t)(ctx->compute_units ? ctx->compute_units : 1), groups);
    size_t nsplit = clattn__div_up((size_t)p->Kmax, (size_t)p->SK);
    size_t most = clattn__div_up((size_t)p->Kmax, 64);
    if (nsplit < want)
        nsplit = want < most ? want : most > nsplit ? most : nsplit;
    /* The partial results grow with rows x splits: where they would pass 32-bit indexing or the
     * device's largest allocation (many rows over a long cache, or a short SK), fewer and longer
     * splits, past SK, as far as a loop budget allows. */
    size_t rows = (size_t)p->B * p->Hq * p->Qn, per_split = rows * (size_t)(p->dv + 2);
    size_t fit = (size_t)INT32_MAX / per_split;
    if (ctx->max_alloc / 4 / per_split < fit)
        fit = ctx->max_alloc / 4 / per_split;
    if (nsplit > fit && fit > 0)
        nsplit = fit;
    size_t sk = clattn__round_up(clattn__div_up((size_t)p->Kmax, nsplit), 16);
    p->SK = (int)(sk < sk_cap ? sk : sk_cap);
    p->nsplit = (int)clattn__div_up((size_t)p->Kmax, (size_t)p->SK);
    p->part_floats = per_split * (size_t)p->nsplit;
    CHECK(ctx, p->part_floats <= (size_t)INT32_MAX, CLATTN_ERROR_UNSUPPORTED,
          "decode: %zu elements of partial results exceed 32-bit indexing", p->part_floats);
fail:
    return st;
}

static clattn_status enqueue_append(clattn_context *ctx, const clattn_kv_cache *c,
                                    const decode_plan *p)
{
    clattn_status st = CLATTN_SUCCESS;
    cl_kernel k;
    int kn_off = (int)c->k_new->offset, vn_off = (int)c->v_new->offset;
    int k_off = (int)c->k_cache->offset, v_off = (int)c->v_cache->offset;
    int l_off = (int)c->lens->offset;
    char defines[64] = SHARED_ONLY;
    clattn__dtype_define(defines, sizeof defines, "CT", p->ct);
    clattn__dtype_define(defines, sizeof defines, "NT", p->nt);
    CHECK_ST(clattn__get_kernel(ctx, "decode.cl", defines, "decode_append", &k));
    CHECK_ST(clattn__set_args(ctx, k, "decode_append", ARG(c->k_new->buf), ARG(kn_off),
                              ARG(c->v_new->buf), ARG(vn_off), ARG(c->k_cache->buf), ARG(k_off),
                              ARG(c->v_cache->buf), ARG(v_off), ARG(c->lens->buf), ARG(l_off),
                              ARG(p->Hkv), ARG(p->Qn), ARG(p->Kmax), ARG(p->d), ARG(p->dv),
                              ARGS_END));
    size_t gws[3] = {(size_t)(p->d > p->dv ? p->d : p->dv), (size_t)p->Qn,
                     (size_t)p->B * p->Hkv};
    CHECK_ST(clattn__launch(ctx, k, 3, gws, NULL, "decode_append"));
fail:
    return st;
}

/* Every split's partial state into part (scratch). */
static clattn_status enqueue_splits(clattn_context *ctx, const clattn_tuning *t,
                                    const clattn_tensor *Q, const clattn_kv_cache *c,
                                    const decode_plan *p, cl_mem part)
{
    clattn_status st = CLATTN_SUCCESS;
    cl_kernel k;
    char defines[600];
    const char *name = p->gpu ? "decode_gpu" : "decode_cpu";
    kernel_defines(t, p, defines, sizeof defines);
    CHECK_ST(clattn__get_kernel(ctx, "decode.cl", defines, name, &k));
    int q_off = (int)Q->offset, k_off = (int)c->k_cache->offset, v_off = (int)c->v_cache->offset;
    int l_off = (int)c->lens->offset;
    CHECK_ST(clattn__set_args(ctx, k, name, ARG(Q->buf), ARG(q_off), ARG(c->k_cache->buf),
                              ARG(k_off), ARG(c->v_cache->buf), ARG(v_off), ARG(c->lens->buf),
                              ARG(l_off), ARG(p->Hkv), ARG(p->G), ARG(p->Qn), ARG(p->Kmax),
                              ARG(p->A), ARG(p->d), ARG(p->dv), ARG(p->nsplit), ARG(p->SK),
                              ARG(p->scale), ARG(p->win), ARG(p->fill), ARG(p->slopes),
                              ARG(p->slopes_off), ARG(p->ss), ARG(part), ARGS_END));
    size_t groups = clattn__div_up((size_t)p->G * p->Qn, (size_t)p->RQ);
    size_t gws[3] = {(size_t)p->nsplit * p->WG, groups, (size_t)p->B * p->Hkv};
    size_t lws[3] = {(size_t)p->WG, 1, 1};
    CHECK_ST(clattn__launch(ctx, k, 3, gws, lws, name));
fail:
    return st;
}

static clattn_status enqueue_merge(clattn_context *ctx, const clattn_kv_cache *c,
                                   const decode_plan *p, cl_mem part, const clattn_tensor *out,
                                   const clattn_tensor *lse)
{
    clattn_status st = CLATTN_SUCCESS;
    cl_kernel k;
    int per_seq = p->Hq * p->Qn, nrows = p->B * per_seq, l_off = (int)c->lens->offset;
    int cpi = p->gpu ? 1 : p->dv; /* columns per work-item: all on CPUs (one exp per split) */
    int o_off = (int)out->offset, lse_off = lse ? (int)lse->offset : 0;
    cl_mem lse_buf = lse ? lse->buf : NULL;
    CHECK_ST(clattn__get_kernel(ctx, "decode.cl", SHARED_ONLY, "decode_merge", &k));
    CHECK_ST(clattn__set_args(ctx, k, "decode_merge", ARG(part), ARG(p->nsplit), ARG(p->dv),
                              ARG(cpi), ARG(per_seq), ARG(c->lens->buf), ARG(l_off), ARG(p->Kmax),
                              ARG(p->A), ARG(out->buf), ARG(o_off), ARG(lse_buf), ARG(lse_off),
                              ARG(nrows), ARGS_END));
    /* one row per group on CPUs, so that a few rows still spread over the threads */
    size_t gws[2] = {clattn__div_up((size_t)p->dv, (size_t)cpi), (size_t)nrows}, lws[2] = {1, 1};
    CHECK_ST(clattn__launch(ctx, k, 2, gws, p->gpu ? NULL : lws, "decode_merge"));
fail:
    return st;
}

static clattn_status enqueue_advance(clattn_context *ctx, const clattn_kv_cache *c,
                                     const decode_plan *p)
{
    clattn_status st = CLATTN_SUCCESS;
    cl_kernel k;
    int l_off = (int)c->lens->offset;
    CHECK_ST(clattn__get_kernel(ctx, "decode.cl", SHARED_ONLY, "decode_advance", &k));
    CHECK_ST(clattn__set_args(ctx, k, "decode_advance", ARG(c->lens->buf), ARG(l_off),
                              ARG(p->Kmax), ARG(p->Qn), ARG(p->B), ARGS_END));
    size_t gws = (size_t)p->B;
    CHECK_ST(clattn__launch(ctx, k, 1, &gws, NULL, "decode_advance"));
fail:
    return st;
}

clattn_status clattn_decode_attention(clattn_context *ctx, const clattn_tensor *Q,
                                      const clattn_kv_cache *cache,
                                      const clattn_attention_opts *opts, const clattn_tensor *out)
{
    clattn_status st = CLATTN_SUCCESS;
    clattn_mask_args m = {0};
    clattn_tuning t;
    const clattn_tensor *lse;
    decode_plan p;
    cl_mem part;
    CHECK_DRY_RUN(ctx, clattn_decode_attention(ctx, Q, cache, opts, out));
    CHECK(NULL, ctx, CLATTN_ERROR_INVALID_ARGUMENT, "ctx: NULL context");
    CHECK_ST(check_shapes(ctx, Q, cache, out));
    CHECK_ST(check_overlaps(ctx, Q, cache, out));
    CHECK_ST(check_opts(ctx, opts, Q, cache, out, &m, &lse)); /* the lse against out too */
    float scale;
    CHECK_ST(clattn__resolve_scale(ctx, opts, Q->dims[3], &scale));
    int A = cache->k_new ? (int)Q->dims[2] : 0;
    if (ctx->sync)
        CHECK_ST(clattn__check_device_lens(ctx, cache->lens, "cache.lens",
                                           (int)cache->k_cache->dims[2] - A));
    CHECK_ST(clattn__tune_bucket(ctx, "decode",
                                 clattn__head_bucket(Q->dims[3], cache->v_cache->dims[3]), &t));
    CHECK_ST(make_plan(ctx, &t, Q, cache, &m, scale, &p));
    CHECK_ST(clattn__scratch(ctx, CLATTN_SCRATCH_ATTN, p.part_floats * 4, &part));
    if (cache->k_new)
        CHECK_ST(enqueue_append(ctx, cache, &p));
    CHECK_ST(enqueue_splits(ctx, &t, Q, cache, &p, part));
    const int no_load = 0;
    clattn_tensor o32; /* a 16-bit out: merged in float32, each output rounded once */
    CHECK_ST(clattn__cast_in(ctx, &out, &no_load, 1, &o32));
    CHECK_ST(enqueue_merge(ctx, cache, &p, part, &o32, lse));
    CHECK_ST(clattn__cast_out(ctx, &o32, out));
    if (cache->advance)
        CHECK_ST(enqueue_advance(ctx, cache, &p));
fail:
    clattn__mask_release(&m);
    return st;
}
