/* The fused attention backward (kernels/flash_backward.cl): packing, row sums and launch. */
#include "attention.h"
#include <stdio.h>
#include <string.h>

/* Head sizes up to this take the fused backward (as the fused forward's FLASH_MAX_DIM). */
#define BWD_MAX_DIM 256

int clattn__flash_backward_supports(const clattn_tuning *tune, size_t d, size_t dv)
{
    return strcmp(tune->variant, "cpu") == 0 && d <= BWD_MAX_DIM && dv <= BWD_MAX_DIM;
}

/* Key chunks per K/V batch: CH when set, else enough that the work-items are at least twice
 * the compute units (a chunk beyond one costs a partial dQ and its reduction), never more than
 * the key blocks. */
static int chunks(const clattn_context *ctx, const clattn_tuning *tune, size_t nbkv, int nblk)
{
    size_t want = (size_t)clattn__tune_int(tune, "CH", 0);
    if (!want)
        want = clattn__div_up(2 * (size_t)(ctx->compute_units ? ctx->compute_units : 1), nbkv);
    return want < (size_t)nblk ? (int)want : nblk;
}

clattn_status clattn__enqueue_flash_backward(clattn_context *ctx, const clattn_tuning *tune,
                                             const clattn_flash_bwd_ops *o, int G, int d, int dv,
                                             const clattn_mask_args *m,
                                             const clattn_dropout_params *dropout, float scale)
{
    clattn_status st = CLATTN_SUCCESS;
    cl_kernel kp, kr, kf, kq;
    cl_mem buf;
    clattn_flash_args a = clattn__flash_args(m, G, d, dv, scale, dropout, NULL);
    int KB = clattn__tune_int(tune, "KB", 64), VC = clattn__tune_int(tune, "VC", 64);
    int nb = m->D0 * m->D1;
    int dp = (int)clattn__round_up((size_t)d, (size_t)VC);
    int dvp = (int)clattn__round_up((size_t)dv, (size_t)VC);
    int nblk = (int)clattn__div_up((size_t)a.nk, (size_t)KB);
    int nchunk = chunks(ctx, tune, a.nbkv, nblk);
    cl_int want = (o->dQ.buf ? 1 : 0) | (o->dK.buf ? 2 : 0) | (o->dV.buf ? 4 : 0);
    /* scratch: the packed K and V panels and K rows, K's row flags, per row D, the flags and
     * what its probabilities are recomputed from, the items' dK and dV block sums and totals, the
     * partial dQ */
    size_t npk = a.nbkv * (size_t)nblk * KB * (size_t)(d + dv + dp);
    size_t nkb = a.nbkv * (size_t)nblk * KB, nrows = (size_t)nb * a.nq;
    size_t nacc = (size_t)nchunk * a.nbkv * 2 * (size_t)(dp + dvp) * KB;
    size_t npart = nchunk > 1 && (want & 1) ? nchunk * nrows * d : 0;
    size_t total = npk + nkb + 4 * nrows + 16 + nacc + npart;
    CHECK(ctx, total <= (size_t)INT32_MAX, CLATTN_ERROR_UNSUPPORTED,
          "attention backward: %zu elements of packed K and V, row sums and dK and dV block "
          "sums exceed 32-bit indexing; the unfused backward (out or opts.lse not given, or "
          "CLATTN_TUNE=backward=unfused) packs none", total);
    CHECK_ST(clattn__scratch(ctx, CLATTN_SCRATCH_ATTN, total * 4, &buf));
    int kb_off = (int)npk, d_off = (int)(npk + nkb), bad_off = d_off + (int)nrows;
    int off_off = bad_off + (int)nrows, ext_off = off_off + (int)nrows;
    /* the accumulators on 64 bytes (a buffer's base is on CL_DEVICE_MEM_BASE_ADDR_ALIGN, at
     * least 128 bytes): the kernel reads and writes them as float16 */
    int acc_off = (int)clattn__round_up((size_t)ext_off + nrows, 16);
    int part_off = acc_off + (int)nacc;
    CHECK_ST(clattn__get_kernel(ctx, "flash_backward.cl", tune->defines, "flash_bwd_pack", &kp));
    CHECK_ST(clattn__get_kernel(ctx, "flash_backward.cl", tune->defines, "flash_bwd_rows", &kr));
    CHECK_ST(clattn__get_kernel(ctx, "flash_backward.cl", tune->defines, "flash_bwd_cpu", &kf));
    size_t pg[2] = {(size_t)nblk * KB, a.nbkv}, rg[2] = {(size_t)a.nq, (size_t)nb};
    CHECK_ST(clattn__set_args(ctx, kp, "flash_bwd_pack", ARG(o->K.buf), ARG(o->K.l),
                              ARG(o->V.buf), ARG(o->V.l), ARG(a.D1kv), ARG(a.nk), ARG(d), ARG(dv),
                              ARG(dp), ARG(nblk), ARG(buf), ARG(buf), ARG(kb_off), ARGS_END));
    CHECK_ST(clattn__launch(ctx, kp, 2, pg, NULL, "flash_bwd_pack"));
    CHECK_ST(clattn__set_args(ctx, kr, "flash_bwd_rows", ARG(o->Q.buf), ARG(o->Q.l),
                              ARG(o->dout.buf), ARG(o->dout.l), ARG(o->out.buf), ARG(o->out.l),
                              ARG(o->K.buf), ARG(o->K.l), ARG(o->V.buf), ARG(o->V.l),
                              ARG(o->lse.buf), ARG(o->lse.off), ARG(a.nq), ARG(a.nk), ARG(d),
                              ARG(dv), ARG(buf), ARG(d_off), ARG(bad_off), ARG(off_off),
                              ARG(ext_off), ARG(a.scale), ARGS_END));
    CHECK_ST(clattn__flash_set_tail(ctx, kr, 22, m, &a));
    CHECK_ST(clattn__launch(ctx, kr, 2, rg, NULL, "flash_bwd_rows"));
    /* one chunk writes dQ itself; several write (nchunk, nb, nq, d) partials */
    clattn_flash_operand dq = o->dQ;
    int dq_cs = 0;
    if (npart) {
        dq = clattn__flash_strided(buf, CLATTN_FLOAT32, (size_t)part_off, (size_t)m->D1 * a.nq * d,
                                   (size_t)a.nq * d, (size_t)d);
        dq_cs = (int)(nrows * d);
    }
    /* unused gradients get a valid buffer the kernel never touches */
    cl_mem dqb = want & 1 ? dq.buf : buf, dkb = want & 2 ? o->dK.buf : buf;
    cl_mem dvb = want & 4 ? o->dV.buf : buf;
    CHECK_ST(clattn__set_args(ctx, kf, "flash_bwd_cpu", ARG(o->Q.buf), ARG(o->Q.l), ARG(buf),
                              ARG(buf), ARG(kb_off), ARG(o->dout.buf), ARG(o->dout.l),
                              ARG(o->lse.buf), ARG(o->lse.off), ARG(buf), ARG(d_off),
                              ARG(bad_off), ARG(off_off), ARG(ext_off), ARG(buf), ARG(acc_off),
                              ARG(dqb), ARG(dq.l),
                              ARG(dq_cs), ARG(dkb), ARG(o->dK.l), ARG(dvb), ARG(o->dV.l),
                              ARG(want), ARG(a.nq), ARG(a.nk), ARG(d), ARG(dv), ARG(dp), ARG(dvp),
                              ARG(nblk), ARG(nchunk), ARG(a.scale), ARGS_END));
    CHECK_ST(clattn__flash_set_tail(ctx, kf, 33, m, &a));
    /* one item per group: each (chunk, K/V batch) runs on its own core */
    size_t gws[2] = {(size_t)nchunk, a.nbkv}, lws[2] = {1, 1};
    CHECK_ST(clattn__launch(ctx, kf, 2, gws, lws, "flash_bwd_cpu"));
    if (npart) {
        CHECK_ST(clattn__get_kernel(ctx, "flash_backward.cl", tune->defines, "flash_bwd_reduce",
                                    &kq));
        CHECK_ST(clattn__set_args(ctx, kq, "flash_bwd_reduce", ARG(buf), ARG(part_off),
                                  ARG(nchunk), ARG(nb), ARG(o->dQ.buf), ARG(o->dQ.l), ARG(m->D1),
                                  ARG(a.nq), ARG(d), ARGS_END));
        CHECK_ST(clattn__launch(ctx, kq, 2, rg, NULL, "flash_bwd_reduce"));
    }
fail:
    return st;
}
