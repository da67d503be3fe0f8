/* clattn_attention_merge: attention over disjoint key ranges combined through their LSEs. */
#include "internal.h"
#include <stdio.h>
#include <string.h>

/* 1 when t has out's leading dims, and out's last one too unless rows_only */
static int same_rows(const clattn_tensor *t, const clattn_tensor *out, int rows_only)
{
    int rank = out->ndim - (rows_only ? 1 : 0);
    return t->ndim == rank && memcmp(t->dims, out->dims, sizeof(size_t) * (size_t)rank) == 0;
}

/* Partial i: outs[i] shaped as out, lses[i] as out without its last dim, neither overlapping the
 * outputs. */
static clattn_status check_part(clattn_context *ctx, const clattn_tensor *o,
                                const clattn_tensor *l, const clattn_arg *outputs, int i)
{
    clattn_status st = CLATTN_SUCCESS;
    const clattn_tensor *out = outputs[0].t;
    char on[32], ln[32], s1[96], s2[96];
    snprintf(on, sizeof on, "outs[%d]", i);
    snprintf(ln, sizeof ln, "lses[%d]", i);
    CHECK_ST(clattn__check_tensor(ctx, o, on, CLATTN_FLOAT32, 2, 4));
    CHECK_ST(clattn__check_tensor(ctx, l, ln, CLATTN_FLOAT32, 1, 3));
    CHECK(ctx, same_rows(o, out, 0), CLATTN_ERROR_SHAPE_MISMATCH, "%s: shape %s, expected out's %s",
          on, clattn__shape_str(o, s1, sizeof s1), clattn__shape_str(out, s2, sizeof s2));
    CHECK(ctx, same_rows(l, out, 1), CLATTN_ERROR_SHAPE_MISMATCH,
          "%s: shape %s, expected out's %s without its last dim", ln,
          clattn__shape_str(l, s1, sizeof s1), clattn__shape_str(out, s2, sizeof s2));
    const clattn_arg ins[2] = {{o, on}, {l, ln}};
    CHECK_ST(clattn__check_no_overlap(ctx, outputs, 2, ins, 2));
fail:
    return st;
}

static clattn_status check_merge(clattn_context *ctx, int n, const clattn_tensor *outs,
                                 const clattn_tensor *lses, const clattn_tensor *out,
                                 const clattn_tensor *lse)
{
    clattn_status st = CLATTN_SUCCESS;
    char s1[96], s2[96];
    CHECK(ctx, n >= 1, CLATTN_ERROR_INVALID_ARGUMENT, "n: %d partial results, expected >= 1", n);
    CHECK(ctx, outs && lses, CLATTN_ERROR_INVALID_ARGUMENT, "%s: NULL array",
          outs ? "lses" : "outs");
    CHECK_ST(clattn__check_tensor(ctx, out, "out", CLATTN_FLOAT32, 2, 4));
    if (lse) {
        CHECK_ST(clattn__check_tensor(ctx, lse, "lse", CLATTN_FLOAT32, 1, 3));
        CHECK(ctx, same_rows(lse, out, 1), CLATTN_ERROR_SHAPE_MISMATCH,
              "lse: shape %s, expected out's %s without its last dim",
              clattn__shape_str(lse, s1, sizeof s1), clattn__shape_str(out, s2, sizeof s2));
    }
    const clattn_arg outputs[2] = {{out, "out"}, {lse, "lse"}};
    CHECK_ST(clattn__check_no_overlap(ctx, outputs, 2, NULL, 0));
    for (int i = 0; i < n; i++)
        CHECK_ST(check_part(ctx, &outs[i], &lses[i], outputs, i));
fail:
    return st;
}

/* One step of the running merge (kernels/merge.cl): a with its state sin (NULL: a is one range
 * with LSE la) and range b (NULL: a alone) into out, the state sout and the LSE lo (each NULL when
 * not wanted). States are two per row in tmp (rows, 4), a step's at column sin_col / sout_col. */
typedef struct {
    const clattn_tensor *a, *la, *b, *lb;
    cl_mem sin, sout, lo;
    int sin_col, sout_col;
    size_t lo_off;
} merge_step;

static clattn_status enqueue_step(clattn_context *ctx, cl_kernel k, const merge_step *p,
                                  const clattn_tensor *out)
{
    clattn_status st = CLATTN_SUCCESS;
    int dv = (int)out->dims[out->ndim - 1];
    int a_off = (int)p->a->offset, la_off = p->la ? (int)p->la->offset : 0;
    int b_off = p->b ? (int)p->b->offset : 0, lb_off = p->b ? (int)p->lb->offset : 0;
    int o_off = (int)out->offset;
    int lo_off = (int)p->lo_off;
    cl_mem la = p->la ? p->la->buf : NULL, b = p->b ? p->b->buf : NULL;
    cl_mem lb = p->b ? p->lb->buf : NULL;
    int rows = (int)(clattn_tensor_numel(out) / (size_t)dv);
    CHECK_ST(clattn__set_args(ctx, k, "attention_merge", ARG(p->a->buf), ARG(a_off), ARG(la),
                              ARG(la_off), ARG(p->sin), ARG(p->sin_col), ARG(b), ARG(b_off), ARG(lb),
                              ARG(lb_off), ARG(out->buf), ARG(o_off), ARG(p->sout),
                              ARG(p->sout_col), ARG(p->lo), ARG(lo_off), ARG(rows), ARG(dv),
                              ARGS_END));
    size_t gws = (size_t)rows;
    CHECK_ST(clattn__launch(ctx, k, 1, &gws, NULL, "attention_merge"));
fail:
    return st;
}

clattn_status clattn_attention_merge(clattn_context *ctx, int n, const clattn_tensor *outs,
                                     const clattn_tensor *lses, const clattn_tensor *out,
                                     const clattn_tensor *lse)
{
    clattn_status st = CLATTN_SUCCESS;
    cl_kernel k;
    cl_mem tmp = NULL;
    CHECK_DRY_RUN(ctx, clattn_attention_merge(ctx, n, outs, lses, out, lse));
    CHECK(NULL, ctx, CLATTN_ERROR_INVALID_ARGUMENT, "ctx: NULL context");
    CHECK_ST(check_merge(ctx, n, outs, lses, out, lse));
    CHECK_ST(clattn__get_kernel(ctx, "merge.cl", "", "attention_merge", &k));
    size_t rows = clattn_tensor_numel(out) / out->dims[out->ndim - 1];
    /* The running merge lives in out and its state (m, s) in two scratch halves taken in turn,
     * so that no step reads what it writes. */
    if (n > 2)
        CHECK_ST(clattn__scratch(ctx, CLATTN_SCRATCH_OP, 4 * rows * 4, &tmp));
    merge_step p = {&outs[0], &lses[0], NULL, NULL, NULL, NULL, NULL, 0, 0, 0};
    for (int i = 1; i < n || i == 1; i++) {
        int last = i >= n - 1;
        p.b = i < n ? &outs[i] : NULL;
        p.lb = i < n ? &lses[i] : NULL;
        p.sout = last ? NULL : tmp;
        p.sout_col = (i % 2) * 2;
        p.lo = last && lse ? lse->buf : NULL;
        p.lo_off = last && lse ? lse->offset : 0;
        CHECK_ST(enqueue_step(ctx, k, &p, out));
        p.a = out; /* the next step merges into the running output */
        p.sin = tmp;
        p.sin_col = p.sout_col;
    }
fail:
    return st;
}
