/* The fused attention path (kernels/flash.cl): variant choice, packing and launch. */
#include "attention.h"
#include <stdio.h>
#include <string.h>

/* Head sizes up to this run fused; larger ones take the unfused path (registers would spill). */
#define FLASH_MAX_DIM 256

/* Programs are specialised on padded head sizes, bucketed so that a context builds a few programs
 * whatever head sizes it sees: the CPU shape keeps DVP output columns in registers (16-wide
 * vectors, so a bucket over the next multiple of 16 costs at most a third more P V work), the GPU
 * shape loops over DP and DVP with zero padding. */
static const int cpu_dv_buckets[] = {16, 32, 48, 64, 96, 128, 192, FLASH_MAX_DIM};
static const int gpu_buckets[] = {16, 32, 64, 128, FLASH_MAX_DIM};

static int bucket(int n, const int *sizes, size_t count)
{
    size_t i = 0;
    while (i + 1 < count && sizes[i] < n)
        i++;
    return sizes[i];
}
#define BUCKET(n, sizes) bucket((n), (sizes), sizeof(sizes) / sizeof((sizes)[0]))

int clattn__flash_supports(const clattn_tuning *tune, size_t d, size_t dv)
{
    return strcmp(tune->variant, "unfused") != 0 && d <= FLASH_MAX_DIM && dv <= FLASH_MAX_DIM;
}

clattn_flash_args clattn__flash_args(const clattn_mask_args *m, int G, int d, int dv, float scale,
                                     const clattn_dropout_params *p, const clattn_flash_lse *lse)
{
    clattn_flash_args a;
    memset(&a, 0, sizeof a);
    a.nq = m->Q;
    a.nk = m->K;
    a.d = d;
    a.dv = dv;
    a.G = G;
    a.D1kv = m->D1 / G;
    a.nbkv = (size_t)m->D0 * (size_t)a.D1kv;
    a.scale = scale;
    a.lse = lse ? lse->buf : NULL;
    a.lse_off = lse ? lse->off : 0;
    a.lse_s.s[0] = lse && lse->rows_apart ? 1 : m->Q;
    a.lse_s.s[1] = lse && lse->rows_apart ? lse->rows_apart : 1;
    a.drop = clattn__dropout_active(p);
    if (a.drop) {
        a.seed.s[0] = (cl_uint)p->seed;
        a.seed.s[1] = (cl_uint)(p->seed >> 32);
        a.offset.s[0] = (cl_uint)p->offset;
        a.offset.s[1] = (cl_uint)(p->offset >> 32);
        a.threshold = clattn__dropout_threshold(p->p);
        a.dscale = p->p < 1.0f ? 1.0f / (1.0f - p->p) : 0.0f;
    }
    return a;
}

clattn_status clattn__flash_set_tail(clattn_context *ctx, cl_kernel k, cl_uint first,
                                     const clattn_mask_args *m, const clattn_flash_args *a)
{
    clattn_status st = CLATTN_SUCCESS;
    const void *ptr[] = {&m->D1,   &a->G,       &m->lens,    &m->lens_off, &m->lens_mode,
                         &m->mask, &m->mask_off, &m->ms,     &m->win,      &m->fill,
                         &m->bias, &m->bias_off, &m->bs, &m->slopes, &m->slopes_off, &m->ss,
                         &a->drop, &a->seed,    &a->offset, &a->threshold, &a->dscale};
    const size_t size[] = {sizeof m->D1,   sizeof a->G,        sizeof m->lens,
                           sizeof m->lens_off, sizeof m->lens_mode, sizeof m->mask,
                           sizeof m->mask_off, sizeof m->ms,      sizeof m->win,
                           sizeof m->fill,     sizeof m->bias,    sizeof m->bias_off,
                           sizeof m->bs,       sizeof m->slopes,  sizeof m->slopes_off,
                           sizeof m->ss,       sizeof a->drop,    sizeof a->seed,
                           sizeof a->offset,   sizeof a->threshold, sizeof a->dscale};
    for (cl_uint i = 0; i < sizeof size / sizeof size[0]; i++)
        CHECK_CL(ctx, clSetKernelArg(k, first + i, size[i], ptr[i]), "clSetKernelArg(flash)");
fail:
    return st;
}

clattn_flash_operand clattn__flash_strided(cl_mem buf, clattn_dtype dt, size_t off, size_t s0,
                                           size_t s1, size_t rs)
{
    clattn_flash_operand o = {buf, {{0}}, dt};
    o.l.s[0] = (cl_int)off;
    o.l.s[1] = (cl_int)s0;
    o.l.s[2] = (cl_int)s1;
    o.l.s[3] = (cl_int)rs;
    return o;
}

const clattn_flash_lse *clattn__flash_lse(const clattn_tensor *lse, clattn_flash_lse *out)
{
    if (!lse)
        return NULL;
    out->buf = lse->buf;
    out->off = (int)lse->offset;
    out->rows_apart = 0;
    return out;
}

clattn_flash_operand clattn__flash_operand(const clattn_tensor *t, int D1)
{
    size_t rows = t->dims[t->ndim - 2], cols = t->dims[t->ndim - 1];
    return clattn__flash_strided(t->buf, t->dtype, t->offset, (size_t)D1 * rows * cols,
                                 rows * cols, cols);
}

/* The program defines of the operands' dtypes (none for float32 ones, so float32 programs keep
 * their options), then the tuning's and DVP (and DP, dp > 0). packed_v: the value sums read
 * flash_pack_v's float32 rows. */
static void flash_defines(char *buf, size_t size, const clattn_tuning *tune,
                          const clattn_flash_operand *const ops[4], int packed_v, int dp,
                          int dvp)
{
    static const char *names[4] = {"QT", "KT", "VT", "OT"};
    char dts[64] = "";
    for (int i = 0; i < 4; i++)
        clattn__dtype_define(dts, sizeof dts, names[i], ops[i]->dt);
    if (packed_v && ops[2]->dt != CLATTN_FLOAT32)
        strcat(dts, "-D VST=0 "); /* fits: 4 defines of 8 characters and this one */
    if (dp > 0)
        snprintf(buf, size, "%s%s-D DP=%d -D DVP=%d", dts, tune->defines, dp, dvp);
    else
        snprintf(buf, size, "%s%s-D DVP=%d", dts, tune->defines, dvp);
}

/* Loop iterations of one flash_vflags work-item per key (fixed: outside the key loop), counted as
 * clattn__loop_budget asks: every iteration of every loop plus one per loop entered. */
#define VFLAGS_FIXED 4
static long vflags_loops_per_key(int dv)
{
    return 1 + (dv % 16 ? 17 : 0);
}

/* The zero-weight sums of the value rows of V (batches (D0, D1kv)) in blocks of bks keys, each
 * (nbkv, nblk, dvp) in buf: suffix sums at vt_off, prefix sums at vh_off (< 0: not wanted).
 * flash_vflags writes each block's flags where the first wanted sums go, all blocks at once;
 * flash_vscan turns them into the sums there, in one launch, or under a loop budget in ranges
 * of blocks (the prefix sums from the first up, then the suffix sums from the last down). */
static clattn_status enqueue_vsums(clattn_context *ctx, const char *defines,
                                   const clattn_flash_operand *V, const clattn_flash_args *a,
                                   int dv, int bks, int nblk, int dvp, cl_mem buf, long vt_off,
                                   long vh_off, long budget)
{
    clattn_status st = CLATTN_SUCCESS;
    cl_kernel kf, ks;
    int nk = a->nk, bf = (int)(vt_off >= 0 ? vt_off : vh_off), vt = (int)vt_off;
    int vh = (int)vh_off;
    size_t one, blocks;
    CHECK_ST(clattn__loop_units(ctx, budget, VFLAGS_FIXED, vflags_loops_per_key(dv) * bks, 1,
                                &one, "attention: flash_vflags' block of %d keys", bks));
    /* a launch of both sums: 2 loops entered, 2 iterations per block (1 each for one sum) */
    CHECK_ST(clattn__loop_units(ctx, budget, 2, 2, (size_t)nblk, &blocks,
                                "attention: flash_vscan's block"));
    CHECK_ST(clattn__get_kernel(ctx, "flash.cl", defines, "flash_vflags", &kf));
    CHECK_ST(clattn__get_kernel(ctx, "flash.cl", defines, "flash_vscan", &ks));
    CHECK_ST(clattn__set_args(ctx, kf, "flash_vflags", ARG(V->buf), ARG(V->l), ARG(a->D1kv),
                              ARG(nk), ARG(dv), ARG(bks), ARG(nblk), ARG(buf), ARG(bf), ARGS_END));
    size_t fg[3] = {(size_t)dvp / 16, (size_t)nblk, a->nbkv};
    CHECK_ST(clattn__launch(ctx, kf, 3, fg, NULL, "flash_vflags"));
    size_t sg[2] = {(size_t)dvp / 16, a->nbkv}, lws[2] = {1, 1};
    int span = blocks < (size_t)nblk ? (int)blocks : nblk, last = (nblk - 1) / span * span;
    /* both sums in each launch when one takes every block; else the prefix sums' ranges, then
     * the suffix sums' */
    int both = span == nblk;
    for (int pass = vh >= 0 ? 0 : 1; pass < (vt >= 0 ? 2 : 1); pass++) {
        for (long i = 0; i <= last; i += span) { /* long: i + span can pass INT_MAX */
            int lo = pass ? last - (int)i : (int)i, hi = nblk - lo > span ? lo + span : nblk;
            int t_off = pass || both ? vt : -1, h_off = pass ? -1 : vh;
            CHECK_ST(clattn__set_args(ctx, ks, "flash_vscan", ARG(buf), ARG(bf), ARG(t_off),
                                      ARG(h_off), ARG(nblk), ARG(lo), ARG(hi), ARGS_END));
            CHECK_ST(clattn__launch(ctx, ks, 2, sg, lws, "flash_vscan"));
        }
        if (both)
            break;
    }
fail:
    return st;
}

static clattn_status enqueue_cpu(clattn_context *ctx, const clattn_tuning *tune,
                                 const clattn_flash_operand *Q, const clattn_flash_operand *K,
                                 const clattn_flash_operand *V, const clattn_mask_args *m,
                                 const clattn_flash_args *a, const clattn_flash_operand *out)
{
    clattn_status st = CLATTN_SUCCESS;
    cl_kernel kk, kv, kf, kq;
    cl_mem buf;
    char defines[600];
    int QR = clattn__tune_int(tune, "QR", 5), KB = clattn__tune_int(tune, "KB", 64);
    int WG = clattn__tune_int(tune, "WG", 8), QG = clattn__tune_int(tune, "QG", 2);
    int nb = m->D0 * m->D1, dvp = BUCKET(a->dv, cpu_dv_buckets);
    size_t nbkv = a->nbkv; /* K and V are packed once per K/V head */
    int nblk = (int)clattn__div_up((size_t)a->nk, (size_t)KB);
    CHECK(ctx, KB % 16 == 0, CLATTN_ERROR_INVALID_ARGUMENT,
          "tuning: attention=cpu needs KB a multiple of 16 (KB=%d)", KB);
    CHECK(ctx, QR >= 1 && QR <= 16 && WG >= 1 && QG >= 1, CLATTN_ERROR_INVALID_ARGUMENT,
          "tuning: attention=cpu needs 1 <= QR <= 16, WG >= 1 and QG >= 1 (QR=%d, WG=%d, QG=%d)",
          QR, WG, QG);
    const clattn_flash_operand *ops[4] = {Q, K, V, out};
    flash_defines(defines, sizeof defines, tune, ops, 1, 0, dvp);
    CHECK_ST(clattn__get_kernel(ctx, "flash.cl", defines, "flash_cpu", &kf));
    /* WG items (QG x QR rows each) of one batch per work-group: PoCL runs them one after another
     * on one core, so the batch's K and V panels stay in its L2. An explicit local size also keeps
     * PoCL from choosing thousands of work-items per group, whose private arrays overflow its
     * thread stack. The compiled kernel may take fewer (Intel's CPU runtime: 1 with head size
     * 256's tiles of 16 row groups): then fewer, as WG only groups the items. */
    size_t kernel_wg = 0;
    CHECK_ST(clattn__kernel_group_size(ctx, kf, "flash_cpu", &kernel_wg));
    if (kernel_wg >= 1 && (size_t)WG > kernel_wg)
        WG = (int)kernel_wg;
    size_t nitem = clattn__div_up((size_t)a->nq, (size_t)QR * (size_t)QG);
    size_t lws[2] = {nitem < (size_t)WG ? nitem : (size_t)WG, 1};
    size_t gws[2] = {clattn__round_up(nitem, lws[0]), (size_t)nb};
    /* flash_cpu numbers its items' rows in int: a padding item's first, a live item's last */
    CHECK(ctx, (gws[0] - 1) * QG * QR <= (size_t)INT32_MAX &&
                   nitem * QG * QR <= (size_t)INT32_MAX + 1, CLATTN_ERROR_UNSUPPORTED,
          "attention: Q's %d rows, padded to work-groups of %zu items of %d x %d rows, pass "
          "32-bit row indexing", a->nq, lws[0], QG, QR);
    /* Packed K panels and zero-padded V rows: extra memory O(nb * K * (d + dv)), not O(Q * K).
     * V rows that need no padding and lie one after another are read in place. */
    int v_packed = a->dv != dvp || a->nk % KB != 0 || V->l.s[3] != a->dv ||
                   V->dt != CLATTN_FLOAT32;
    size_t nkt = nbkv * nblk * KB * a->d, nvp = v_packed ? nbkv * nblk * KB * dvp : 0;
    /* the zero-weight sums of value rows that rows skip after (vt) and before (vh) their keys */
    size_t nvt = clattn__mask_limits_rows(m) ? nbkv * nblk * dvp : 0;
    size_t nvh = clattn__mask_has_left(m) ? nbkv * nblk * dvp : 0;
    /* a float32 copy of a 16-bit Q, (nb, nq, d) */
    size_t nqp = Q->dt != CLATTN_FLOAT32 ? (size_t)nb * a->nq * a->d : 0;
    size_t total = nkt + nvp + nvt + nvh + nqp;
    CHECK(ctx, total <= (size_t)INT32_MAX, CLATTN_ERROR_UNSUPPORTED,
          "attention: packed Q, K and V of %zu elements (keys padded to blocks of KB=%d, value "
          "rows to %d columns) exceed 32-bit indexing; the unfused path (weights requested, or "
          "CLATTN_TUNE=attention=unfused) packs none", total, KB, dvp);
    CHECK_ST(clattn__scratch(ctx, CLATTN_SCRATCH_ATTN, total * 4, &buf));
    clattn_flash_operand qrows = *Q;
    if (nqp) {
        int qp_off = (int)(nkt + nvp + nvt + nvh);
        size_t per_batch = (size_t)a->nq * a->d, qg[2] = {(size_t)a->nq, (size_t)nb};
        CHECK_ST(clattn__get_kernel(ctx, "flash.cl", defines, "flash_pack_q", &kq));
        CHECK_ST(clattn__set_args(ctx, kq, "flash_pack_q", ARG(Q->buf), ARG(Q->l), ARG(m->D1),
                                  ARG(a->nq), ARG(a->d), ARG(buf), ARG(qp_off), ARGS_END));
        CHECK_ST(clattn__launch(ctx, kq, 2, qg, NULL, "flash_pack_q"));
        qrows = clattn__flash_strided(buf, CLATTN_FLOAT32, (size_t)qp_off,
                                      (size_t)m->D1 * per_batch, per_batch, (size_t)a->d);
    }
    CHECK_ST(clattn__get_kernel(ctx, "flash.cl", defines, "flash_pack_k", &kk));
    CHECK_ST(clattn__get_kernel(ctx, "flash.cl", defines, "flash_pack_v", &kv));
    size_t pg[2] = {(size_t)nblk * KB, nbkv}, pk[2] = {(size_t)nblk * KB / 16, nbkv};
    CHECK_ST(clattn__set_args(ctx, kk, "flash_pack_k", ARG(K->buf), ARG(K->l), ARG(a->D1kv),
                              ARG(a->nk), ARG(a->d), ARG(nblk), ARG(buf), ARGS_END));
    CHECK_ST(clattn__launch(ctx, kk, 2, pk, NULL, "flash_pack_k"));
    clattn_flash_operand vrows = *V;
    if (v_packed) {
        int vp_off = (int)nkt;
        CHECK_ST(clattn__set_args(ctx, kv, "flash_pack_v", ARG(V->buf), ARG(V->l), ARG(a->D1kv),
                                  ARG(a->nk), ARG(a->dv), ARG(nblk), ARG(buf), ARG(vp_off),
                                  ARGS_END));
        CHECK_ST(clattn__launch(ctx, kv, 2, pg, NULL, "flash_pack_v"));
        size_t per_batch = (size_t)nblk * KB * dvp;
        vrows = clattn__flash_strided(buf, CLATTN_FLOAT32, nkt, (size_t)a->D1kv * per_batch,
                                      per_batch, dvp);
    }
    /* the V rows are dvp wide here (zero-padded, or in place only when dv == dvp) */
    int vt_off = (int)(nkt + nvp), vh_off = (int)(nkt + nvp + nvt);
    if (nvt + nvh)
        CHECK_ST(enqueue_vsums(ctx, defines, &vrows, a, dvp, KB, nblk, dvp, buf,
                               nvt ? vt_off : -1, nvh ? vh_off : -1, 0));
    cl_mem vt = nvt ? buf : NULL, vh = nvh ? buf : NULL;
    CHECK_ST(clattn__set_args(ctx, kf, "flash_cpu", ARG(qrows.buf), ARG(qrows.l), ARG(buf),
                              ARG(vrows.buf), ARG(vrows.l), ARG(vt), ARG(vt_off), ARG(vh),
                              ARG(vh_off), ARG(out->buf), ARG(out->l), ARG(a->lse), ARG(a->lse_off),
                              ARG(a->lse_s), ARG(a->nq), ARG(a->nk), ARG(a->d), ARG(a->dv),
                              ARG(nblk), ARG(a->scale), ARGS_END));
    CHECK_ST(clattn__flash_set_tail(ctx, kf, 20, m, a));
    CHECK_ST(clattn__launch(ctx, kf, 2, gws, lws, "flash_cpu"));
fail:
    return st;
}

/* Loop iterations of one flash_gpu work-item (kernels/flash.cl), counted as clattn__loop_budget
 * asks: every iteration of every loop, plus one per loop entered. fixed: outside the key loop
 * (q, the outputs, a resumed or kept state, twice, and the overflow check); per_tile: one tile
 * of BK keys, twice: a launch whose sums overflowed takes its keys again. */
static void gpu_loops(int BQ, int BK, int dp, int dvp, int drop, long *fixed, long *per_tile)
{
    long rounds = drop ? 11 : 0; /* clattn_philox's 10 rounds per key */
    *fixed = (dp + 1) + 2 * 2 * (dvp + 1) + (dvp / 4 + 1) + (dvp + 1) + 3;
    *per_tile = 2 * (1 + ((long)BK * dp + BQ - 1) / BQ + 1 + ((long)BK * dvp + BQ - 1) / BQ + 1 +
                     (long)BK * (1 + dp + 1) + 1 + (dvp + 1) +
                     (long)BK * (1 + rounds + dvp + 1) + 1);
}

size_t clattn__flash_gpu_local(size_t BK, size_t dp, size_t dvp)
{
    return BK * (dp + dvp) * 4 + 12; /* K and V tiles of BK keys (float4 rows), and 3 ints */
}

long clattn__flash_gpu_min_loops(const clattn_tuning *t)
{
    long fixed, per_tile, BK = clattn__tune_int(t, "BK", 16);
    /* the worst case: head size FLASH_MAX_DIM, dropout, BQ lowered to one item (enqueue_gpu) */
    gpu_loops(1, (int)BK, FLASH_MAX_DIM, FLASH_MAX_DIM, 1, &fixed, &per_tile);
    long vflags = VFLAGS_FIXED + vflags_loops_per_key(1) * BK;
    return fixed + per_tile > vflags ? fixed + per_tile : vflags;
}

/* Keys per flash_gpu launch: all of them, or under a loop budget as many whole tiles as fit. */
static clattn_status gpu_span(clattn_context *ctx, long budget, int BQ, int BK, int dp, int dvp,
                              const clattn_flash_args *a, int *span)
{
    clattn_status st = CLATTN_SUCCESS;
    long fixed, per_tile;
    size_t tiles, ntiles = clattn__div_up((size_t)a->nk, (size_t)BK);
    gpu_loops(BQ, BK, dp, dvp, a->drop, &fixed, &per_tile);
    CHECK_ST(clattn__loop_units(ctx, budget, fixed, per_tile, ntiles, &tiles,
                                "attention=gpu: a tile of BK=%d keys (BQ=%d, head sizes %d, %d)",
                                BK, BQ, a->d, a->dv));
    *span = tiles < ntiles ? (int)tiles * BK : a->nk;
fail:
    return st;
}

static clattn_status enqueue_gpu(clattn_context *ctx, const clattn_tuning *tune,
                                 const clattn_flash_operand *Q, const clattn_flash_operand *K,
                                 const clattn_flash_operand *V, const clattn_mask_args *m,
                                 const clattn_flash_args *a, const clattn_flash_operand *out)
{
    clattn_status st = CLATTN_SUCCESS;
    cl_kernel kf;
    cl_mem buf = NULL, vt = NULL, vh = NULL, part = NULL;
    char defines[600];
    clattn_tuning t = *tune;
    int BQ = clattn__tune_int(&t, "BQ", 64), BK = clattn__tune_int(&t, "BK", 16), span = 0;
    int nb = m->D0 * m->D1, nblk = (int)clattn__div_up((size_t)a->nk, (size_t)BK), vt_off = 0;
    int vh_off;
    int dp = BUCKET(a->d, gpu_buckets), dvp = BUCKET(a->dv, gpu_buckets);
    long budget = clattn__loop_budget(ctx, &t);
    size_t local = clattn__flash_gpu_local((size_t)BK, (size_t)dp, (size_t)dvp);
    /* flash_gpu counts keys in int up to the last tile's end, a tile past it at most */
    CHECK(ctx, (size_t)nblk * (size_t)BK <= (size_t)INT32_MAX - (size_t)BK,
          CLATTN_ERROR_UNSUPPORTED, "attention=gpu: K = %d keys in tiles of BK=%d pass 32-bit key "
          "indexing; at most %d keys", a->nk, BK, (INT32_MAX / BK - 1) * BK);
    CHECK(ctx, local <= ctx->local_mem && (size_t)BQ <= ctx->max_wg, CLATTN_ERROR_UNSUPPORTED,
          "attention=gpu: BQ=%d, BK=%d with d=%d, dv=%d needs %zu bytes of local memory (device "
          "has %zu) and %d work-items (max %zu)", BQ, BK, a->d, a->dv, local, ctx->local_mem, BQ,
          ctx->max_wg);
    /* the compiled kernel may allow fewer items per group than the device (llvmpipe: 32): fewer
     * query rows per group then, as matmul halves its tiles (BQ <= 16 x BK still holds) */
    const clattn_flash_operand *ops[4] = {Q, K, V, out};
    for (size_t kernel_wg = 0;;) {
        flash_defines(defines, sizeof defines, &t, ops, 0, dp, dvp);
        CHECK_ST(clattn__get_kernel(ctx, "flash.cl", defines, "flash_gpu", &kf));
        CHECK_ST(clattn__kernel_group_size(ctx, kf, "flash_gpu", &kernel_wg));
        if ((size_t)BQ <= kernel_wg || BQ == 1)
            break;
        clattn__tune_set(&t, "BQ", BQ = kernel_wg > 1 ? (int)kernel_wg : 1);
    }
    /* flash_gpu numbers its rows in int, those of the last group's padding too */
    CHECK(ctx, clattn__round_up((size_t)a->nq, (size_t)BQ) <= (size_t)INT32_MAX + 1,
          CLATTN_ERROR_UNSUPPORTED, "attention=gpu: Q's %d rows in groups of BQ=%d pass 32-bit "
          "row indexing", a->nq, BQ);
    CHECK_ST(gpu_span(ctx, budget, BQ, BK, dp, dvp, a, &span));
    /* scratch: the value sums (nbkv, nblk, dvp) when rows skip trailing keys, the same when they
     * skip leading ones, then when the keys take several launches the rows' running state
     * (nb, nq, 4) and their outputs' compensations (nb, nq, dv), and their unnormalised outputs
     * (nb, nq, dv) for a 16-bit out */
    size_t nvt = clattn__mask_limits_rows(m) ? a->nbkv * nblk * dvp : 0;
    size_t nvh = clattn__mask_has_left(m) ? a->nbkv * nblk * dvp : 0;
    size_t npart = span < a->nk ? (size_t)nb * a->nq *
                                      (4 + (size_t)a->dv +
                                       (out->dt != CLATTN_FLOAT32 ? (size_t)a->dv : 0))
                                : 0;
    /* (the kernels take the value sums' and the row states' offsets in int, index past them in
     * size_t: the row states, as large as the output, need not fit 32 bits) */
    CHECK(ctx, nvt + nvh <= (size_t)INT32_MAX, CLATTN_ERROR_UNSUPPORTED,
          "attention: %zu elements of value sums exceed 32-bit indexing", nvt + nvh);
    if (nvt + nvh + npart)
        CHECK_ST(clattn__scratch(ctx, CLATTN_SCRATCH_ATTN, (nvt + nvh + npart) * 4, &buf));
    vt = nvt ? buf : NULL;
    vh = nvh ? buf : NULL;
    part = npart ? buf : NULL;
    vh_off = (int)nvt;
    int part_off = (int)(nvt + nvh);
    if (nvt + nvh)
        CHECK_ST(enqueue_vsums(ctx, defines, V, a, a->dv, BK, nblk, dvp, buf, nvt ? 0 : -1,
                               nvh ? (long)nvt : -1, budget));
    size_t lws[2] = {(size_t)BQ, 1};
    size_t gws[2] = {clattn__round_up((size_t)a->nq, (size_t)BQ), (size_t)nb};
    for (long lo = 0; lo < a->nk; lo += span) { /* long: see enqueue_vsums */
        int k_lo = (int)lo, k_hi = a->nk - k_lo > span ? k_lo + span : a->nk;
        CHECK_ST(clattn__set_args(ctx, kf, "flash_gpu", ARG(Q->buf), ARG(Q->l), ARG(K->buf),
                                  ARG(K->l), ARG(V->buf), ARG(V->l), ARG(vt), ARG(vt_off),
                                  ARG(vh), ARG(vh_off), ARG(nblk), ARG(out->buf), ARG(out->l),
                                  ARG(a->lse), ARG(a->lse_off), ARG(a->lse_s), ARG(a->nq),
                                  ARG(a->nk), ARG(a->d), ARG(a->dv), ARG(a->scale), ARG(k_lo),
                                  ARG(k_hi), ARG(part), ARG(part_off), ARGS_END));
        CHECK_ST(clattn__flash_set_tail(ctx, kf, 25, m, a));
        CHECK_ST(clattn__launch(ctx, kf, 2, gws, lws, "flash_gpu"));
    }
fail:
    return st;
}

clattn_status clattn__enqueue_flash(clattn_context *ctx, const clattn_tuning *tune,
                                    const clattn_flash_operand *Q, const clattn_flash_operand *K,
                                    const clattn_flash_operand *V, const clattn_flash_operand *out,
                                    int G, int d, int dv, const clattn_mask_args *m,
                                    const clattn_dropout_params *dropout, float scale,
                                    const clattn_flash_lse *lse)
{
    clattn_flash_args a = clattn__flash_args(m, G, d, dv, scale, dropout, lse);
    if (strcmp(tune->variant, "gpu") == 0)
        return enqueue_gpu(ctx, tune, Q, K, V, m, &a, out);
    return enqueue_cpu(ctx, tune, Q, K, V, m, &a, out);
}
