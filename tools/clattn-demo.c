/* clattn-demo: runs the examples of d2l's attention chapters (masked softmax, additive,
 * dot-product and multi-head attention) and of the scaled-dot-product tutorial on the selected
 * OpenCL device, prints their tensors the way PyTorch does, checks the properties the chapters point
 * out (PASS/FAIL lines; exit status 1 when any fails) and writes one SVG heatmap per attention-weights
 * tensor into OUTDIR.
 *
 * usage: clattn-demo [--seed N] [--cmap reds|viridis] [OUTDIR]   (OUTDIR defaults to demo-out) */
#include "heatmap.h"

#include <clattn.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define DEFAULT_SEED 42ULL
#define MAX_PANELS 16
#define PATH_SIZE 4096
/* The longest heatmap file name: main checks before any work that OUTDIR leaves room for it
 * (write_heatmap checks every path again). */
#define LONGEST_HEATMAP "tutorial-attention-causal.svg"

typedef struct {
    clattn_context *ctx;
    const char *outdir;
    heatmap_cmap cmap;
    uint64_t rng;
    int passed, failed;
} demo;

/* ---- errors: any failing clattn call ends the demo, naming the call ---- */

static void check_call(const demo *d, clattn_status st, const char *call)
{
    if (st == CLATTN_SUCCESS)
        return;
    fflush(stdout); /* keep the report in order when both streams go to one file */
    fprintf(stderr, "clattn-demo: %s failed: %s: %s\n", call, clattn_status_string(st),
            clattn_last_error(d->ctx));
    exit(1);
}
#define CHECK(d, call) check_call((d), (call), #call)

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n, size);
    if (!p) {
        fprintf(stderr, "clattn-demo: out of host memory\n");
        exit(1);
    }
    return p;
}

/* ---- random numbers: splitmix64, so a seed gives the same inputs on every platform ---- */

static double uniform01(demo *d)
{
    uint64_t z = (d->rng += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return ((z ^ (z >> 31)) >> 11) * 0x1p-53;
}

static void fill_uniform(demo *d, float *x, size_t n, double lo, double hi)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(lo + (hi - lo) * uniform01(d));
}

static void fill_normal(demo *d, float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double u1 = 1.0 - uniform01(d), u2 = uniform01(d); /* u1 in (0, 1]: log stays finite */
        x[i] = (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
    }
}

static void fill_const(float *x, size_t n, float v)
{
    for (size_t i = 0; i < n; i++)
        x[i] = v;
}

/* PyTorch's nn.Linear default init (kaiming_uniform with a = sqrt(5)): U(-1/sqrt(in), 1/sqrt(in)). */
static void init_linear(demo *d, float *W, int out, int in)
{
    double b = 1.0 / sqrt((double)in);
    fill_uniform(d, W, (size_t)out * in, -b, b);
}

/* ---- device tensors ---- */

static size_t numel(int ndim, const size_t *dims)
{
    size_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= dims[i];
    return n;
}

static clattn_tensor to_device(demo *d, int ndim, const size_t *dims, const float *host)
{
    clattn_tensor t;
    CHECK(d, clattn_tensor_create(d->ctx, CLATTN_FLOAT32, ndim, dims, host, &t));
    return t;
}

/* Outputs start as NaN, so an element the op forgot to write fails every check. */
static clattn_tensor empty(demo *d, int ndim, const size_t *dims)
{
    clattn_tensor t = to_device(d, ndim, dims, NULL);
    CHECK(d, clattn_tensor_fill(d->ctx, &t, NAN));
    return t;
}

static clattn_tensor mask_tensor(demo *d, int ndim, const size_t *dims, const int *host)
{
    clattn_tensor t;
    CHECK(d, clattn_tensor_create(d->ctx, CLATTN_INT32, ndim, dims, host, &t));
    return t;
}

static void from_device(demo *d, const clattn_tensor *t, float *host)
{
    CHECK(d, clattn_tensor_read_blocking(d->ctx, t, host));
}

static clattn_mask lens_mask(const int *lens, int ndim, size_t b, size_t q)
{
    clattn_mask m = {0};
    if (!lens)
        return m;
    m.valid_lens_host = lens;
    m.lens_ndim = ndim;
    m.lens_dims[0] = b;
    m.lens_dims[1] = q;
    return m;
}

/* ---- printing as PyTorch's repr does (precision 4, linewidth 80, no summarisation) ---- */

typedef struct {
    int sci, int_mode, width;
} repr_fmt;

static int format_value(const repr_fmt *f, float v, char *buf, size_t size)
{
    if (f->sci)
        return snprintf(buf, size, "%.4e", v);
    if (f->int_mode)
        return snprintf(buf, size, isfinite(v) ? "%.0f." : "%.0f", v);
    return snprintf(buf, size, "%.4f", v);
}

/* torch._tensor_str._Formatter: the mode and width come from the non-zero finite values. */
static repr_fmt repr_format(const float *x, size_t n)
{
    repr_fmt f = {0, 1, 1};
    double lo = INFINITY, hi = 0.0;
    char buf[64];
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i]) || x[i] == 0.0f)
            continue;
        lo = fmin(lo, fabs(x[i]));
        hi = fmax(hi, fabs(x[i]));
        if (x[i] != ceilf(x[i]))
            f.int_mode = 0;
    }
    if (hi == 0.0)
        return f;
    f.sci = hi / lo > 1000.0 || hi > 1.0e8 || (!f.int_mode && lo < 1.0e-4);
    for (size_t i = 0; i < n; i++) {
        if (isfinite(x[i]) && x[i] != 0.0f) {
            int len = format_value(&f, x[i], buf, sizeof buf);
            f.width = len > f.width ? len : f.width;
        }
    }
    return f;
}

static void repr_vector(const float *x, size_t n, int indent, const repr_fmt *f)
{
    int per_line = (80 - indent) / (f->width + 2);
    char buf[64];
    putchar('[');
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && per_line > 0 && i % (size_t)per_line == 0)
            printf(",\n%*s", indent + 1, "");
        else if (i > 0)
            printf(", ");
        format_value(f, x[i], buf, sizeof buf);
        printf("%*s", f->width, buf);
    }
    putchar(']');
}

static void repr_rec(const float *x, int ndim, const size_t *dims, int indent, const repr_fmt *f)
{
    if (ndim == 1) {
        repr_vector(x, dims[0], indent, f);
        return;
    }
    size_t stride = numel(ndim - 1, dims + 1);
    putchar('[');
    for (size_t i = 0; i < dims[0]; i++) {
        if (i > 0) {
            putchar(',');
            for (int k = 0; k < ndim - 1; k++)
                putchar('\n');
            printf("%*s", indent + 1, "");
        }
        repr_rec(x + i * stride, ndim - 1, dims + 1, indent + 1, f);
    }
    putchar(']');
}

static void print_tensor(const char *name, const float *x, int ndim, const size_t *dims)
{
    repr_fmt f = repr_format(x, numel(ndim, dims));
    if (name)
        printf("%s:\n", name);
    printf("tensor(");
    repr_rec(x, ndim, dims, 7, &f);
    printf(")\n");
}

static void print_size(const char *name, int ndim, const size_t *dims)
{
    printf("%s: torch.Size([", name);
    for (int i = 0; i < ndim; i++)
        printf(i ? ", %zu" : "%zu", dims[i]);
    printf("])\n");
}

static void section(const char *title)
{
    printf("\n== %s\n", title);
}

/* ---- checks ---- */

static int verdict(demo *d, int ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s ", ok ? "PASS" : "FAIL");
    vprintf(fmt, ap);
    putchar('\n');
    va_end(ap);
    if (ok)
        d->passed++;
    else
        d->failed++;
    return ok;
}

/* NaN anywhere (an unwritten output) makes the difference infinite. */
static double max_abs_diff(const float *a, const float *b, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        m = e > m ? e : (e == e ? m : INFINITY);
    }
    return m;
}

static double max_abs(const float *a, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs(a[i]));
    return m;
}

static void check_close(demo *d, const char *what, const float *got, const float *want, size_t n)
{
    double diff = max_abs_diff(got, want, n), tol = 1e-4 * (1.0 + max_abs(want, n));
    verdict(d, diff <= tol, "%s match the double-precision CPU reference (max |diff| %.2e, tol %.1e)",
            what, diff, tol);
}

/* ---- double-precision CPU references, the d2l code written out ---- */

typedef struct {
    int nq, nk, d, dv;
    int len;    /* keys j >= len are blocked (valid_lens) */
    int causal; /* query i sees keys j <= i */
    double scale, fill;
} ref_attn;

/* d2l's masked_softmax on one row: blocked scores get the fill value, then a plain softmax. */
static void ref_softmax_row(double *s, int nk, int len, int last, double fill)
{
    double mx = -INFINITY, sum = 0.0;
    for (int j = 0; j < nk; j++) {
        if (j >= len || j > last)
            s[j] = fill;
        mx = fmax(mx, s[j]);
    }
    for (int j = 0; j < nk; j++)
        sum += (s[j] = exp(s[j] - mx));
    for (int j = 0; j < nk; j++)
        s[j] /= sum;
}

/* One (batch, head) slice: w = masked_softmax(q k^T * scale), out = w v. */
static void ref_attention(const ref_attn *a, const float *q, const float *k, const float *v,
                          float *out, float *w)
{
    double s[a->nk];
    for (int i = 0; i < a->nq; i++) {
        for (int j = 0; j < a->nk; j++) {
            double dot = 0.0;
            for (int c = 0; c < a->d; c++)
                dot += (double)q[i * a->d + c] * k[j * a->d + c];
            s[j] = dot * a->scale;
        }
        ref_softmax_row(s, a->nk, a->len, a->causal ? i : a->nk, a->fill);
        for (int c = 0; c < a->dv; c++) {
            double acc = 0.0;
            for (int j = 0; j < a->nk; j++)
                acc += s[j] * v[j * a->dv + c];
            out[i * a->dv + c] = (float)acc;
        }
        for (int j = 0; j < a->nk; j++)
            w[i * a->nk + j] = (float)s[j];
    }
}

/* y = x W^T, PyTorch's layout for W (out, in). */
static void ref_linear(const float *x, const float *W, int rows, int in, int out, float *y)
{
    for (int r = 0; r < rows; r++) {
        for (int o = 0; o < out; o++) {
            double acc = 0.0;
            for (int i = 0; i < in; i++)
                acc += (double)x[(size_t)r * in + i] * W[(size_t)o * in + i];
            y[(size_t)r * out + o] = (float)acc;
        }
    }
}

typedef struct {
    int batch, nq, nk, hidden, heads, causal;
    const int *lens; /* (batch) or NULL */
    const float *Wq, *Wk, *Wv, *Wo;
} ref_mha_args;

/* Copies columns [c0, c0 + w) of a (rows, stride) matrix, or back when `back` is set: d2l's
 * transpose_qkv / transpose_output for one head. */
static void head_copy(float *m, int rows, int stride, int c0, int w, float *h, int back)
{
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < w; c++) {
            float *a = &m[(size_t)r * stride + c0 + c], *b = &h[(size_t)r * w + c];
            if (back)
                *a = *b;
            else
                *b = *a;
        }
}

static void ref_mha_heads(const ref_mha_args *m, float *qp, float *kp, float *vp, float *cat, float *w)
{
    int dh = m->hidden / m->heads;
    float *qh = xcalloc((size_t)m->nq * dh, 4), *kh = xcalloc((size_t)m->nk * dh, 4);
    float *vh = xcalloc((size_t)m->nk * dh, 4), *oh = xcalloc((size_t)m->nq * dh, 4);
    for (int b = 0; b < m->batch; b++) {
        for (int h = 0; h < m->heads; h++) {
            ref_attn a = {m->nq, m->nk, dh, dh, m->lens ? m->lens[b] : m->nk, m->causal,
                          1.0 / sqrt((double)dh), -1.0e6};
            head_copy(qp + (size_t)b * m->nq * m->hidden, m->nq, m->hidden, h * dh, dh, qh, 0);
            head_copy(kp + (size_t)b * m->nk * m->hidden, m->nk, m->hidden, h * dh, dh, kh, 0);
            head_copy(vp + (size_t)b * m->nk * m->hidden, m->nk, m->hidden, h * dh, dh, vh, 0);
            ref_attention(&a, qh, kh, vh, oh, w + ((size_t)b * m->heads + h) * m->nq * m->nk);
            head_copy(cat + (size_t)b * m->nq * m->hidden, m->nq, m->hidden, h * dh, dh, oh, 1);
        }
    }
    free(qh);
    free(kh);
    free(vh);
    free(oh);
}

/* d2l's MultiHeadAttention (no biases); xk and xv have the same length nk. */
static void ref_mha(const ref_mha_args *m, const float *xq, const float *xk, const float *xv,
                    float *out, float *w)
{
    int h = m->hidden, rq = m->batch * m->nq, rk = m->batch * m->nk;
    float *qp = xcalloc((size_t)rq * h, 4), *kp = xcalloc((size_t)rk * h, 4);
    float *vp = xcalloc((size_t)rk * h, 4), *cat = xcalloc((size_t)rq * h, 4);
    ref_linear(xq, m->Wq, rq, h, h, qp);
    ref_linear(xk, m->Wk, rk, h, h, kp);
    ref_linear(xv, m->Wv, rk, h, h, vp);
    ref_mha_heads(m, qp, kp, vp, cat, w);
    ref_linear(cat, m->Wo, rq, h, h, out);
    free(qp);
    free(kp);
    free(vp);
    free(cat);
}

/* ---- heatmaps ---- */

static float max_value(const float *x, size_t n)
{
    float m = 0.0f;
    for (size_t i = 0; i < n; i++)
        m = x[i] > m ? x[i] : m;
    return m;
}

/* titles[i] for panel i: "batch b, head h" in a batch x head grid, "<col_name> c" in one row. */
static void panel_titles(char (*buf)[32], const char **titles, int grid_rows, int grid_cols,
                         const char *col_name)
{
    for (int r = 0; r < grid_rows; r++)
        for (int c = 0; c < grid_cols; c++) {
            int i = r * grid_cols + c;
            if (grid_rows > 1)
                snprintf(buf[i], sizeof buf[i], "batch %d, %s %d", r, col_name, c);
            else
                snprintf(buf[i], sizeof buf[i], "%s %d", col_name, c);
            titles[i] = buf[i];
        }
}

/* Weights share one scale from 0 to their maximum, so blocked keys are blank and every panel of
 * a grid reads against the same colour bar (d2l's bar only describes its last panel). */
static void write_heatmap(demo *d, const char *file, heatmap *h)
{
    char path[PATH_SIZE];
    size_t n = (size_t)h->grid_rows * h->grid_cols * h->rows * h->cols;
    if (snprintf(path, sizeof path, "%s/%s", d->outdir, file) >= (int)sizeof path) {
        fprintf(stderr, "clattn-demo: %s/%s: path too long (at most %d bytes)\n", d->outdir, file,
                PATH_SIZE - 1);
        exit(1);
    }
    h->xlabel = "Keys";
    h->ylabel = "Queries";
    h->cmap = d->cmap;
    h->vmin = 0.0f;
    h->vmax = max_value(h->data, n);
    h->annotate = 1;
    if (heatmap_write_svg(h, path) != 0) {
        fprintf(stderr, "clattn-demo: cannot write %s: %s\n", path, strerror(errno));
        exit(1);
    }
    printf("heatmap: %s\n", path);
}

static void write_grid(demo *d, const char *file, const char *title, const float *w, int grid_rows,
                       int grid_cols, int rows, int cols, const char *col_name)
{
    char buf[MAX_PANELS][32];
    const char *titles[MAX_PANELS];
    heatmap h = {0};
    if (grid_rows * grid_cols > 1)
        panel_titles(buf, titles, grid_rows, grid_cols, col_name);
    h.data = w;
    h.grid_rows = grid_rows;
    h.grid_cols = grid_cols;
    h.rows = rows;
    h.cols = cols;
    h.title = title;
    h.panel_titles = grid_rows * grid_cols > 1 ? titles : NULL;
    write_heatmap(d, file, &h);
}

/* ---- d2l 11.3.1: masked softmax ---- */

static void check_softmax(demo *d, const char *what, const float *x, const float *w, const int *lens,
                          int lens_ndim)
{
    float want[16];
    int zeros = 1;
    for (int r = 0; r < 4; r++) {
        double s[4];
        int len = lens_ndim == 1 ? lens[r / 2] : lens[r];
        for (int j = 0; j < 4; j++)
            s[j] = x[r * 4 + j];
        ref_softmax_row(s, 4, len, 4, -1.0e6);
        for (int j = 0; j < 4; j++) {
            want[r * 4 + j] = (float)s[j];
            zeros &= j < len || w[r * 4 + j] == 0.0f;
        }
    }
    char buf[128];
    snprintf(buf, sizeof buf, "%s: the weights", what);
    check_close(d, buf, w, want, 16);
    verdict(d, zeros, "%s: every key past its valid length has weight exactly 0", what);
}

static void softmax_case(demo *d, const int *lens, int lens_ndim, const char *what, const char *file)
{
    static const size_t dims[3] = {2, 2, 4};
    float x[16], w[16];
    fill_uniform(d, x, 16, 0.0, 1.0);
    clattn_tensor s = to_device(d, 3, dims, x), out = empty(d, 3, dims);
    clattn_mask m = lens_mask(lens, lens_ndim, 2, 2);
    CHECK(d, clattn_masked_softmax(d->ctx, &s, &m, &out));
    from_device(d, &out, w);
    print_tensor(NULL, w, 3, dims);
    check_softmax(d, what, x, w, lens, lens_ndim);
    write_grid(d, file, what, w, 1, 2, 2, 4, "batch");
    clattn_tensor_release(&s);
    clattn_tensor_release(&out);
}

static void example_masked_softmax(demo *d)
{
    static const int lens1[2] = {2, 3}, lens2[4] = {1, 3, 2, 4};
    section("d2l 11.3.1  masked_softmax(torch.rand(2, 2, 4), torch.tensor([2, 3]))");
    softmax_case(d, lens1, 1, "masked_softmax, valid_lens [2, 3]", "masked-softmax-lens-1d.svg");
    section("d2l 11.3.1  masked_softmax(torch.rand(2, 2, 4), torch.tensor([[1, 3], [2, 4]]))");
    softmax_case(d, lens2, 2, "masked_softmax, valid_lens [[1, 3], [2, 4]]",
                 "masked-softmax-lens-2d.svg");
}

/* ---- d2l 11.3.2 and 11.3.3: the toy example with identical keys ---- */

typedef struct {
    float keys[2 * 10 * 2], values[2 * 10 * 4];
    int lens[2];
} toy_inputs;

/* keys = ones((2, 10, 2)); values = arange(40).reshape(1, 10, 4).repeat(2, 1, 1); lens [2, 6]. */
static void toy_init(toy_inputs *t)
{
    fill_const(t->keys, 40, 1.0f);
    for (int i = 0; i < 80; i++)
        t->values[i] = (float)(i % 40);
    t->lens[0] = 2;
    t->lens[1] = 6;
}

/* Identical keys give every valid key the same score, so the weights are 1/len over the valid
 * prefix and the output is the mean of the first len value rows: [[2, 3, 4, 5]], [[10, 11, 12, 13]]. */
static void check_toy(demo *d, const char *what, const toy_inputs *t, const float *out, const float *w)
{
    float want_out[8], want_w[20];
    for (int b = 0; b < 2; b++) {
        for (int c = 0; c < 4; c++)
            want_out[b * 4 + c] = 4.0f * (t->lens[b] - 1) / 2.0f + c;
        for (int j = 0; j < 10; j++)
            want_w[b * 10 + j] = j < t->lens[b] ? 1.0f / t->lens[b] : 0.0f;
    }
    double dw = max_abs_diff(w, want_w, 20), dout = max_abs_diff(out, want_out, 8);
    verdict(d, dw <= 1e-6, "%s: weights are uniform (1/2, 1/6) over the valid prefix, 0 after it "
                           "(max |diff| %.2e)", what, dw);
    verdict(d, dout <= 1e-4, "%s: output = mean of the first 2 / 6 value rows = [[2, 3, 4, 5]], "
                             "[[10, 11, 12, 13]] (max |diff| %.2e)", what, dout);
}

static void toy_report(demo *d, const char *what, const char *file, const toy_inputs *t,
                       const clattn_tensor *out, const clattn_tensor *weights)
{
    static const size_t odims[3] = {2, 1, 4}, wdims[3] = {2, 1, 10};
    float o[8], w[20];
    from_device(d, out, o);
    from_device(d, weights, w);
    print_tensor("output", o, 3, odims);
    print_size("output.shape", 3, odims);
    print_tensor("attention_weights", w, 3, wdims);
    printf("note: the keys are identical, so every valid key gets the same weight and the output is "
           "the mean of the valid value rows\n");
    check_toy(d, what, t, o, w);
    /* d2l shows these as one 2 x 10 matrix: attention_weights.reshape((1, 1, 2, 10)) */
    write_grid(d, file, what, w, 1, 1, 2, 10, NULL);
}

static void example_additive(demo *d)
{
    static const size_t qd[3] = {2, 1, 20}, kd[3] = {2, 10, 2}, vd[3] = {2, 10, 4};
    static const size_t wqd[2] = {8, 20}, wkd[2] = {8, 2}, wvd[2] = {1, 8}, od[3] = {2, 1, 4},
                        wd[3] = {2, 1, 10};
    float q[40], wq[160], wk[16], wv[8];
    toy_inputs t;
    section("d2l 11.3.2  AdditiveAttention(num_hiddens=8, dropout=0.1), eval mode");
    toy_init(&t);
    fill_normal(d, q, 40);
    init_linear(d, wq, 8, 20);
    init_linear(d, wk, 8, 2);
    init_linear(d, wv, 1, 8);
    clattn_tensor Q = to_device(d, 3, qd, q), K = to_device(d, 3, kd, t.keys),
                  V = to_device(d, 3, vd, t.values), Wq = to_device(d, 2, wqd, wq),
                  Wk = to_device(d, 2, wkd, wk), Wv = to_device(d, 2, wvd, wv), out = empty(d, 3, od),
                  weights = empty(d, 3, wd);
    clattn_additive_weights w = {&Wq, &Wk, &Wv};
    clattn_attention_opts o = {0};
    o.mask = lens_mask(t.lens, 1, 2, 0);
    o.dropout.p = 0.1f; /* training = 0: d2l's attention.eval() */
    CHECK(d, clattn_additive_attention(d->ctx, &Q, &K, &V, &w, &o, &out, &weights));
    toy_report(d, "additive attention", "additive-attention.svg", &t, &out, &weights);
    clattn_tensor *all[] = {&Q, &K, &V, &Wq, &Wk, &Wv, &out, &weights};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        clattn_tensor_release(all[i]);
}

static void example_dot_product(demo *d)
{
    static const size_t qd[3] = {2, 1, 2}, kd[3] = {2, 10, 2}, vd[3] = {2, 10, 4}, od[3] = {2, 1, 4},
                        wd[3] = {2, 1, 10};
    float q[4];
    toy_inputs t;
    section("d2l 11.3.3  DotProductAttention(dropout=0.5), eval mode, queries (2, 1, 2)");
    toy_init(&t);
    fill_normal(d, q, 4);
    clattn_tensor Q = to_device(d, 3, qd, q), K = to_device(d, 3, kd, t.keys),
                  V = to_device(d, 3, vd, t.values), out = empty(d, 3, od), weights = empty(d, 3, wd);
    clattn_attention_opts o = {0};
    o.mask = lens_mask(t.lens, 1, 2, 0);
    o.dropout.p = 0.5f;
    CHECK(d, clattn_dot_product_attention(d->ctx, &Q, &K, &V, &o, &out, &weights));
    toy_report(d, "dot-product attention", "dot-product-attention.svg", &t, &out, &weights);
    clattn_tensor *all[] = {&Q, &K, &V, &out, &weights};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        clattn_tensor_release(all[i]);
}

/* ---- the scaled-dot-product tutorial: q, k, v (1, 4, 8), then a causal mask ---- */

typedef struct {
    float q[32], k[32], v[32];
    clattn_tensor Q, K, V, out, weights;
} tutorial;

/* Runs on the device and reads back values (1, 4, 8) and attention (1, 4, 4). */
static void tutorial_run(demo *d, tutorial *t, const clattn_mask *mask, float *values, float *att)
{
    clattn_attention_opts o = {0};
    if (mask)
        o.mask = *mask;
    CHECK(d, clattn_tensor_fill(d->ctx, &t->out, NAN));
    CHECK(d, clattn_tensor_fill(d->ctx, &t->weights, NAN));
    CHECK(d, clattn_dot_product_attention(d->ctx, &t->Q, &t->K, &t->V, &o, &t->out, &t->weights));
    from_device(d, &t->out, values);
    from_device(d, &t->weights, att);
}

static void tutorial_check(demo *d, const tutorial *t, int causal, const float *values,
                           const float *att, const char *what)
{
    float want_v[32], want_a[16];
    ref_attn a = {4, 4, 8, 8, 4, causal, 1.0 / sqrt(8.0), -1.0e9};
    ref_attention(&a, t->q, t->k, t->v, want_v, want_a);
    char buf[128];
    snprintf(buf, sizeof buf, "%s values", what);
    check_close(d, buf, values, want_v, 32);
    snprintf(buf, sizeof buf, "%s attention weights", what);
    check_close(d, buf, att, want_a, 16);
}

static void tutorial_unmasked(demo *d, tutorial *t)
{
    static const size_t vd[3] = {1, 4, 8}, ad[3] = {1, 4, 4};
    float values[32], att[16];
    section("tutorial  values, attention = scaled_dot_product(q, k, v), q, k, v = randn(1, 4, 8)");
    print_tensor("q", t->q, 3, vd);
    print_tensor("k", t->k, 3, vd);
    print_tensor("v", t->v, 3, vd);
    tutorial_run(d, t, NULL, values, att);
    print_tensor("values", values, 3, vd);
    print_tensor("attention", att, 3, ad);
    tutorial_check(d, t, 0, values, att, "tutorial, no mask:");
    write_grid(d, "tutorial-attention.svg", "scaled dot-product attention, no mask", att, 1, 1, 4, 4, NULL);
}

static void tutorial_causal(demo *d, tutorial *t)
{
    static const size_t vd[3] = {1, 4, 8}, ad[3] = {1, 4, 4}, md[2] = {4, 4};
    float values[32], att[16], flag_values[32], flag_att[16];
    int tril[16];
    section("tutorial  mask = torch.tril(torch.ones(4, 4)); masked_fill(mask == 0, -1e9)");
    for (int i = 0; i < 16; i++)
        tril[i] = i % 4 <= i / 4;
    clattn_tensor M = mask_tensor(d, 2, md, tril);
    clattn_mask m = {0};
    m.mask = &M;
    m.fill = -1.0e9f;
    tutorial_run(d, t, &m, values, att);
    print_tensor("values", values, 3, vd);
    print_tensor("attention", att, 3, ad);
    tutorial_check(d, t, 1, values, att, "tutorial, causal mask:");
    verdict(d, att[1] == 0.0f && att[2] == 0.0f && att[3] == 0.0f && att[6] == 0.0f && att[7] == 0.0f &&
                   att[11] == 0.0f,
            "tutorial, causal mask: the weights above the diagonal are exactly 0");
    memset(&m, 0, sizeof m);
    m.causal = 1;
    m.fill = -1.0e9f;
    tutorial_run(d, t, &m, flag_values, flag_att);
    verdict(d, max_abs_diff(flag_att, att, 16) <= 1e-6 && max_abs_diff(flag_values, values, 32) <= 1e-6,
            "tutorial: the tril mask tensor and clattn_mask.causal give the same result");
    write_grid(d, "tutorial-attention-causal.svg", "scaled dot-product attention, causal mask", att, 1,
               1, 4, 4, NULL);
    clattn_tensor_release(&M);
}

static void example_tutorial(demo *d)
{
    static const size_t xd[3] = {1, 4, 8}, ad[3] = {1, 4, 4};
    tutorial t;
    fill_normal(d, t.q, 32);
    fill_normal(d, t.k, 32);
    fill_normal(d, t.v, 32);
    t.Q = to_device(d, 3, xd, t.q);
    t.K = to_device(d, 3, xd, t.k);
    t.V = to_device(d, 3, xd, t.v);
    t.out = empty(d, 3, xd);
    t.weights = empty(d, 3, ad);
    tutorial_unmasked(d, &t);
    tutorial_causal(d, &t);
    clattn_tensor *all[] = {&t.Q, &t.K, &t.V, &t.out, &t.weights};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        clattn_tensor_release(all[i]);
}

/* ---- d2l 11.5: multi-head attention ---- */

typedef struct {
    ref_mha_args a;
    const float *xq, *xkv; /* keys = values, as d2l's attention(X, Y, Y, valid_lens) */
    float *out, *w;        /* what the device wrote, (batch, nq, hidden) and (batch, heads, nq, nk) */
} mha_case;

static void mha_run(demo *d, mha_case *c)
{
    ref_mha_args *a = &c->a;
    size_t h = (size_t)a->hidden, B = (size_t)a->batch, nq = (size_t)a->nq, nk = (size_t)a->nk;
    size_t xqd[3] = {B, nq, h}, xkd[3] = {B, nk, h}, wd[2] = {h, h}, od[3] = {B, nq, h},
           attd[4] = {B, (size_t)a->heads, nq, nk};
    clattn_tensor X = to_device(d, 3, xqd, c->xq), Y = to_device(d, 3, xkd, c->xkv),
                  Wq = to_device(d, 2, wd, a->Wq), Wk = to_device(d, 2, wd, a->Wk),
                  Wv = to_device(d, 2, wd, a->Wv), Wo = to_device(d, 2, wd, a->Wo), out = empty(d, 3, od),
                  weights = empty(d, 4, attd);
    clattn_mha_weights w = {a->heads, &Wq, &Wk, &Wv, &Wo, NULL, NULL, NULL, NULL, 0};
    clattn_attention_opts o = {0};
    o.mask = lens_mask(a->lens, a->lens ? 1 : 0, B, 0);
    o.mask.causal = a->causal;
    o.dropout.p = 0.5f; /* training = 0: eval mode */
    CHECK(d, clattn_multihead_attention(d->ctx, &X, &Y, &Y, &w, &o, &out, &weights));
    from_device(d, &out, c->out);
    from_device(d, &weights, c->w);
    clattn_tensor *all[] = {&X, &Y, &Wq, &Wk, &Wv, &Wo, &out, &weights};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        clattn_tensor_release(all[i]);
}

static void mha_check(demo *d, const mha_case *c, const char *what)
{
    const ref_mha_args *a = &c->a;
    size_t no = (size_t)a->batch * a->nq * a->hidden, nw = (size_t)a->batch * a->heads * a->nq * a->nk;
    float *want = xcalloc(no, 4), *want_w = xcalloc(nw, 4);
    char buf[128];
    ref_mha(a, c->xq, c->xkv, c->xkv, want, want_w);
    snprintf(buf, sizeof buf, "%s the output values", what);
    check_close(d, buf, c->out, want, no);
    snprintf(buf, sizeof buf, "%s the weights", what);
    check_close(d, buf, c->w, want_w, nw);
    free(want);
    free(want_w);
}

/* Some weight that should be 0 is not: a key past its valid length, or above the diagonal. */
static int blocked_nonzero(const mha_case *c)
{
    const ref_mha_args *a = &c->a;
    for (int b = 0; b < a->batch; b++)
        for (int h = 0; h < a->heads; h++)
            for (int i = 0; i < a->nq; i++)
                for (int j = 0; j < a->nk; j++) {
                    int blocked = (a->lens && j >= a->lens[b]) || (a->causal && j > i);
                    float w = c->w[(((size_t)b * a->heads + h) * a->nq + i) * a->nk + j];
                    if (blocked && w != 0.0f)
                        return 1;
                }
    return 0;
}

static void mha_params(demo *d, ref_mha_args *a, float *W)
{
    size_t hh = (size_t)a->hidden * a->hidden;
    for (int i = 0; i < 4; i++)
        init_linear(d, W + i * hh, a->hidden, a->hidden);
    a->Wq = W;
    a->Wk = W + hh;
    a->Wv = W + 2 * hh;
    a->Wo = W + 3 * hh;
}

static void example_mha(demo *d)
{
    static const int lens[2] = {3, 2};
    static const size_t od[3] = {2, 4, 100};
    mha_case c = {{2, 4, 6, 100, 5, 0, lens, NULL, NULL, NULL, NULL}, NULL, NULL, NULL, NULL};
    float *W = xcalloc(4 * 100 * 100, 4), *x = xcalloc(2 * 6 * 100, 4);
    section("d2l 11.5  MultiHeadAttention(100, 5, 0.5), eval mode; X = ones(2, 4, 100), "
            "Y = ones(2, 6, 100), valid_lens [3, 2]");
    mha_params(d, &c.a, W);
    fill_const(x, 2 * 6 * 100, 1.0f);
    c.xq = c.xkv = x;
    c.out = xcalloc(2 * 4 * 100, 4);
    c.w = xcalloc(2 * 5 * 4 * 6, 4);
    mha_run(d, &c);
    print_size("attention(X, Y, Y, valid_lens).shape", 3, od);
    mha_check(d, &c, "multi-head (2, 4, 100):");
    verdict(d, !blocked_nonzero(&c) && fabsf(c.w[0] - 1.0f / 3) < 1e-6f && fabsf(c.w[120] - 0.5f) < 1e-6f,
            "multi-head: identical keys give weights 1/3 (batch 0) and 1/2 (batch 1) on the valid "
            "prefix, 0 after it, in every head");
    write_grid(d, "multihead-attention.svg", "multi-head attention, valid_lens [3, 2]", c.w, 2, 5, 4, 6,
               "head");
    free(W);
    free(x);
    free(c.out);
    free(c.w);
}

static void example_causal(demo *d)
{
    static const size_t od[3] = {1, 8, 16}, w0d[2] = {8, 8};
    mha_case c = {{1, 8, 8, 16, 4, 1, NULL, NULL, NULL, NULL, NULL}, NULL, NULL, NULL, NULL};
    float *W = xcalloc(4 * 16 * 16, 4), *x = xcalloc(8 * 16, 4);
    section("causal self-attention  MultiHeadAttention(16, 4), X = randn(1, 8, 16), causal");
    mha_params(d, &c.a, W);
    fill_normal(d, x, 8 * 16);
    c.xq = c.xkv = x;
    c.out = xcalloc(8 * 16, 4);
    c.w = xcalloc(4 * 8 * 8, 4);
    mha_run(d, &c);
    print_size("attention(X, X, X).shape", 3, od);
    print_tensor("attention_weights[0, 0] (head 0)", c.w, 2, w0d);
    mha_check(d, &c, "causal self-attention (1, 8, 16):");
    verdict(d, !blocked_nonzero(&c) && c.w[0] == 1.0f,
            "causal self-attention: query i sees only keys j <= i (query 0 puts weight 1 on key 0)");
    write_grid(d, "causal-self-attention.svg", "causal self-attention, 4 heads", c.w, 1, 4, 8, 8, "head");
    free(W);
    free(x);
    free(c.out);
    free(c.w);
}

/* ---- main ---- */

static int make_dirs(const char *path)
{
    char buf[PATH_SIZE];
    struct stat st;
    if (strlen(path) >= sizeof buf) {
        errno = ENAMETOOLONG;
        return -1;
    }
    strcpy(buf, path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
        return -1;
    if (stat(buf, &st) != 0)
        return -1;
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: clattn-demo [--seed N] [--cmap reds|viridis] [OUTDIR]\n"
               "Runs d2l's attention examples and the scaled-dot-product tutorial on the device that\n"
               "CLATTN_DEVICE selects, checks them, and writes SVG heatmaps into OUTDIR (demo-out).\n");
}

static int parse_args(int argc, char **argv, demo *d, unsigned long long *seed)
{
    for (int i = 1; i < argc; i++) {
        char *end = NULL;
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            exit(0);
        } else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
            errno = 0; /* decimal digits only: base 0 read 010 as 8, and strtoull wraps -1 */
            *seed = strtoull(argv[++i], &end, 10);
            if (errno || !isdigit((unsigned char)*argv[i]) || *end) {
                fprintf(stderr, "clattn-demo: --seed: '%s': expected a decimal integer\n", argv[i]);
                return -1;
            }
        } else if (strcmp(argv[i], "--cmap") == 0 && i + 1 < argc) {
            int c = heatmap_cmap_parse(argv[++i]);
            if (c < 0)
                return -1;
            d->cmap = (heatmap_cmap)c;
        } else if (argv[i][0] != '-' && !d->outdir) {
            d->outdir = argv[i];
        } else {
            return -1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    demo d = {0};
    unsigned long long seed = DEFAULT_SEED;
    if (parse_args(argc, argv, &d, &seed) != 0) {
        usage(stderr);
        return 2;
    }
    if (!d.outdir)
        d.outdir = "demo-out";
    if (strlen(d.outdir) + sizeof "/" LONGEST_HEATMAP > PATH_SIZE) {
        fprintf(stderr, "clattn-demo: %s/%s: path too long (at most %d bytes)\n", d.outdir,
                LONGEST_HEATMAP, PATH_SIZE - 1);
        return 1;
    }
    if (make_dirs(d.outdir) != 0) {
        fprintf(stderr, "clattn-demo: cannot create %s: %s\n", d.outdir, strerror(errno));
        return 1;
    }
    CHECK(&d, clattn_context_create(&d.ctx, NULL));
    printf("clattn %s demo\ndevice: %s\nseed: %llu (--seed N to change)\nheatmaps: %s/\n",
           clattn_version(), clattn_context_description(d.ctx), seed, d.outdir);
    d.rng = seed;
    example_masked_softmax(&d);
    example_additive(&d);
    example_dot_product(&d);
    example_tutorial(&d);
    example_mha(&d);
    example_causal(&d);
    printf("\n%d checks passed, %d failed%s\n", d.passed, d.failed, d.failed ? "" : ": all PASS");
    clattn_context_destroy(&d.ctx);
    return d.failed ? 1 : 0;
}
