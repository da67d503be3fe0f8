/* clattn_varlen_attention against the double reference of dot-product attention on each
 * sequence alone: its (1, Hq, Q_b, d) queries over its (1, Hkv, K_b, .) keys and values. */
#include "harness.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* as test_attention.c's: 1e-4 of sum_k w_k |v_k| */
#define OUT_TOL 1e-4
#define MAX_B 5

typedef struct {
    int B, Hq, Hkv, d, dv;
    int lq[MAX_B], lk[MAX_B]; /* lk all 0 (and not no_keys): the same as lq (self-attention) */
    int no_keys;              /* lk all 0 meant: no sequence has keys */
    int causal, align, window, left, right;
    float fill;
    int alibi;    /* 0 none, 1 slopes (Hq), 2 (B, Hq) */
    float p;      /* dropout */
    unsigned long long seed;
    int no_lse;
    clattn_dtype qt, kt, vt, ot; /* the tensors' dtypes (0: float32) */
} vl_case;

static int key_len(const vl_case *c, int b)
{
    for (int i = 0; i < c->B; i++)
        if (c->lk[i] || c->no_keys)
            return c->lk[b];
    return c->lq[b];
}

/* Rows (total, H, cols) of sequence b from row r0: head h's n rows as (n, cols) doubles, heads
 * in turn; kv > 1 repeats each head kv times (query head h reads K/V head h / kv). */
static double *unpack(const float *x, int r0, int n, int H, int cols, int kv)
{
    double *o = malloc((size_t)H * kv * n * cols * sizeof *o + 8);
    for (int h = 0; h < H * kv; h++)
        for (int i = 0; i < n; i++)
            for (int e = 0; e < cols; e++)
                o[((size_t)h * n + i) * cols + e] = x[((size_t)(r0 + i) * H + h / kv) * cols + e];
    return o;
}

typedef struct {
    double *out, *scale, *lse, *mag; /* packed as the op's out (total_q, Hq, dv) and lse */
} vl_ref;

static void reference(const vl_case *c, const int *cq, const int *ck, const float *q,
                      const float *k, const float *v, const double *slopes, vl_ref *r)
{
    int G = c->Hq / c->Hkv;
    for (int b = 0; b < c->B; b++) {
        int nq = cq[b + 1] - cq[b], nk = ck[b + 1] - ck[b];
        size_t rows = (size_t)c->Hq * nq;
        double *ro = malloc(rows * c->dv * 8 + 8), *sc = malloc(rows * c->dv * 8 + 8);
        double *rl = malloc(rows * 8 + 8), *mg = malloc(rows * 8 + 8);
        if (nk == 0) { /* zeros, LSE -inf */
            for (size_t i = 0; i < rows * c->dv; i++)
                ro[i] = 0, sc[i] = 1;
            for (size_t i = 0; i < rows; i++)
                rl[i] = -INFINITY, mg[i] = 0;
        } else if (nq > 0) {
            double *qd = unpack(q, cq[b], nq, c->Hq, c->d, 1);
            double *kd = unpack(k, ck[b], nk, c->Hkv, c->d, G);
            double *vd = unpack(v, ck[b], nk, c->Hkv, c->dv, G);
            double *w = malloc(rows * nk * 8), *wd = malloc(rows * nk * 8);
            ref_mask m = {1, c->Hq, nq, nk, NULL, 0, NULL, {0, 0, 0, 0}, c->causal,
                          c->fill != 0 ? c->fill : CLATTN_DEFAULT_FILL, c->align, c->window,
                          c->left, c->right, NULL, {0, 0, 0, 0}, NULL, {0, 1}};
            if (c->alibi)
                m.slopes = slopes + (c->alibi == 2 ? (size_t)b * c->Hq : 0);
            ref_dropout_params dp = {c->p, c->seed, (unsigned long long)b};
            double scale = 1.0 / sqrt((double)c->d);
            ref_attention(&m, c->d, c->dv, qd, kd, vd, scale, &dp, w, ro);
            memcpy(wd, w, rows * nk * 8);
            if (c->p > 0)
                ref_dropout(wd, rows * nk, 0, c->seed, (unsigned long long)b, c->p);
            ref_attention_lse(&m, c->d, qd, kd, scale, rl, mg);
            ref_attention_scale((size_t)c->Hq, nq, nk, c->dv, wd, vd, ro, sc);
            free(qd); free(kd); free(vd); free(w); free(wd);
        }
        /* (Hq, nq, .) -> the packed rows (nq, Hq, .) */
        for (int h = 0; h < c->Hq; h++)
            for (int i = 0; i < nq; i++) {
                size_t src = (size_t)h * nq + i, dst = (size_t)(cq[b] + i) * c->Hq + h;
                memcpy(r->out + dst * c->dv, ro + src * c->dv, c->dv * 8);
                memcpy(r->scale + dst * c->dv, sc + src * c->dv, c->dv * 8);
                r->lse[dst] = rl[src];
                r->mag[dst] = mg[src];
            }
        free(ro); free(sc); free(rl); free(mg);
    }
}

static void run(const vl_case *c)
{
    int cq[MAX_B + 1] = {0}, ck[MAX_B + 1] = {0};
    for (int b = 0; b < c->B; b++) {
        cq[b + 1] = cq[b] + c->lq[b];
        ck[b + 1] = ck[b] + key_len(c, b);
    }
    size_t tq = (size_t)cq[c->B], tk = (size_t)ck[c->B];
    if (h_small() && (tq * c->Hq * c->d + tk * c->Hkv * (c->d + c->dv)) * 20 > 400000)
        return; /* the biggest cases are skipped under Oclgrind (CLATTN_TEST_SMALL) */
    size_t nq = tq * c->Hq, nk = tk * c->Hkv;
    float *q = malloc(nq * c->d * 4 + 4), *k = malloc(nk * c->d * 4 + 4);
    float *v = malloc(nk * c->dv * 4 + 4);
    h_fill(q, nq * c->d, -1, 1);
    h_fill(k, nk * c->d, -1, 1);
    h_fill(v, nk * c->dv, -1, 1);
    h_round(q, nq * c->d, c->qt); /* the reference takes the stored values */
    h_round(k, nk * c->d, c->kt);
    h_round(v, nk * c->dv, c->vt);
    size_t ns = c->alibi == 2 ? (size_t)c->B * c->Hq : (size_t)c->Hq;
    float *sf = malloc(ns * 4);
    double *sd = malloc(ns * 8);
    h_fill(sf, ns, 0, 1);
    for (size_t i = 0; i < ns; i++)
        sd[i] = sf[i];
    /* tensors need a row: a batch of empty sequences still has none */
    size_t tq1 = tq ? tq : 1, tk1 = tk ? tk : 1;
    clattn_tensor TQ = h_tensor_as(c->qt, 3, H_DIMS(tq1, c->Hq, c->d), tq ? q : NULL);
    clattn_tensor TK = h_tensor_as(c->kt, 3, H_DIMS(tk1, c->Hkv, c->d), tk ? k : NULL);
    clattn_tensor TV = h_tensor_as(c->vt, 3, H_DIMS(tk1, c->Hkv, c->dv), tk ? v : NULL);
    clattn_tensor TO = h_tensor_as(c->ot, 3, H_DIMS(tq1, c->Hq, c->dv), NULL);
    clattn_tensor TL = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(tq1, c->Hq), NULL);
    clattn_tensor TS = c->alibi == 2 ? h_tensor(CLATTN_FLOAT32, 2, H_DIMS(c->B, c->Hq), sf)
                                     : h_tensor(CLATTN_FLOAT32, 1, H_DIMS(c->Hq), sf);
    h_poison(&TO);
    h_poison(&TL);
    clattn_attention_opts opts;
    memset(&opts, 0, sizeof opts);
    opts.mask.causal = c->causal;
    opts.mask.align = c->align;
    opts.mask.window = c->window;
    opts.mask.window_left = c->left;
    opts.mask.window_right = c->right;
    opts.mask.fill = c->fill;
    opts.dropout.p = c->p;
    opts.dropout.training = c->p > 0;
    opts.dropout.seed = c->seed;
    opts.lse = c->no_lse ? NULL : &TL;
    opts.alibi_slopes = c->alibi ? &TS : NULL;
    clattn_varlen seqs = {c->B, cq, ck};
    if (tq == 0 || tk == 0) { /* the tensors then have a row the lengths do not cover */
        h_assert_error(clattn_varlen_attention(h_ctx, &TQ, &TK, &TV, &seqs, &opts, &TO),
                       CLATTN_ERROR_SHAPE_MISMATCH, "cu_seqlens");
        goto done;
    }
    if (clattn_varlen_attention(h_ctx, &TQ, &TK, &TV, &seqs, &opts, &TO) != CLATTN_SUCCESS)
        fail_msg("varlen_attention: %s", clattn_last_error(h_ctx));
    vl_ref r = {malloc(nq * c->dv * 8), malloc(nq * c->dv * 8), malloc(nq * 8), malloc(nq * 8)};
    reference(c, cq, ck, q, k, v, sd, &r);
    char what[300];
    snprintf(what, sizeof what, "varlen B=%d Hq=%d Hkv=%d d=%d dv=%d lens q %d %d %d.. k %d %d "
             "%d.. causal %d align %d window %d (%d, %d) fill %g alibi %d p %g, Q/K/V/out "
             "%s/%s/%s/%s", c->B, c->Hq, c->Hkv, c->d, c->dv, c->lq[0], c->lq[1], c->lq[2],
             key_len(c, 0), key_len(c, 1), key_len(c, 2), c->causal, c->align, c->window,
             c->left, c->right, c->fill, c->alibi, c->p, h_dtype_name(c->qt),
             h_dtype_name(c->kt), h_dtype_name(c->vt), h_dtype_name(c->ot));
    /* a 16-bit out: rounded once (test_attention.c's assert_out derives the tolerance) */
    double tol = OUT_TOL + (c->ot ? h_unit_roundoff(c->ot) : 0) * (1 + OUT_TOL);
    for (size_t i = 0; i < nq * c->dv; i++)
        r.scale[i] += h_subnormal_step(c->ot) / tol;
    float *go = h_read_float(&TO);
    h_assert_scaled(go, r.out, r.scale, nq * c->dv, tol, what);
    if (!c->no_lse) {
        float *gl = h_read(&TL);
        strncat(what, " (lse)", sizeof what - strlen(what) - 1);
        h_assert_lse(gl, r.lse, r.mag, nq, what);
        free(gl);
    }
    free(go); free(r.out); free(r.scale); free(r.lse); free(r.mag);
done:
    clattn_tensor_release(&TQ); clattn_tensor_release(&TK); clattn_tensor_release(&TV);
    clattn_tensor_release(&TO); clattn_tensor_release(&TL); clattn_tensor_release(&TS);
    free(q); free(k); free(v); free(sf); free(sd);
}

#define CASES(...)                                                 \
    do {                                                           \
        const vl_case cs_[] = {__VA_ARGS__};                       \
        for (size_t i_ = 0; i_ < sizeof cs_ / sizeof cs_[0]; i_++) \
            run(&cs_[i_]);                                         \
    } while (0)

/* Self-attention of packed sequences: one row, primes, a key block +- 1, one long sequence
 * beside short ones; plain, multi-query and grouped heads; d != dv. */
static void test_self(void **s)
{
    (void)s;
    CASES({3, 4, 2, 16, 16, {1, 17, 64}},
          {4, 3, 3, 24, 40, {5, 300, 2, 63}},
          {2, 8, 1, 8, 8, {65, 31}},
          {1, 2, 2, 13, 7, {1}},
          {3, 4, 4, 32, 32, {128, 64, 192}}, /* whole key blocks: V read in place */
          {2, 6, 2, 64, 64, {97, 200}, .causal = 1});
}

/* Cross attention (Q_b != K_b): empty query sequences, empty key sequences (zeros, LSE -inf),
 * bottom-right causal counted per sequence, rows that see no key. */
static void test_cross(void **s)
{
    (void)s;
    CASES({3, 4, 2, 16, 8, {0, 5, 3}, {4, 0, 9}},
          {3, 2, 1, 8, 8, {1, 40, 7}, {65, 40, 3}, .causal = 1, .align = 1},
          {3, 2, 1, 8, 8, {1, 40, 7}, {65, 40, 3}, .causal = 1, .align = 1, .fill = -INFINITY},
          {2, 4, 4, 16, 16, {30, 2}, {10, 70}, .causal = 1},
          {5, 2, 2, 8, 8, {0, 0, 3, 0, 1}, {2, 0, 5, 7, 0}});
}

/* Windows, fills, ALiBi per head and per sequence, dropout, no LSE, a long sequence. */
static void test_options(void **s)
{
    (void)s;
    CASES({3, 4, 2, 16, 16, {40, 9, 130}, .causal = 1, .align = 1, .window = 1, .left = 20},
          {2, 4, 2, 16, 16, {40, 130}, {50, 100}, .window = 1, .left = 7, .right = 3,
           .align = 1, .fill = -1.0f},
          {3, 4, 2, 16, 16, {40, 9, 30}, .causal = 1, .alibi = 1},
          {3, 4, 1, 16, 16, {4, 19, 30}, {8, 19, 50}, .alibi = 2},
          {2, 4, 2, 16, 24, {16, 33}, .p = 0.3f, .seed = 77},
          {2, 4, 2, 16, 24, {16, 33}, .causal = 1, .no_lse = 1},
          {2, 2, 1, 8, 8, {3, 2}, {4097, 5}, .causal = 1, .align = 1});
}

/* Head sizes past the fused kernels' (300): the unfused chain per sequence, the same results. */
static void test_unfused(void **s)
{
    (void)s;
    CASES({3, 2, 1, 300, 20, {3, 9, 1}, {7, 9, 0}, .causal = 1, .align = 1},
          {2, 2, 2, 20, 260, {5, 4}, .alibi = 2, .p = 0.5f, .seed = 3});
}

#define F16 CLATTN_FLOAT16
#define BF16 CLATTN_BFLOAT16
/* 16-bit Q, K, V and out, each dtype in each place, fused and (head size 260) unfused: empty
 * sequences on either side (zeros of the out's dtype), grouped heads, causal, ALiBi, dropout. */
static void test_16bit(void **s)
{
    (void)s;
    CASES({3, 4, 2, 16, 8, {0, 5, 3}, {4, 0, 9}, .qt = F16, .kt = F16, .vt = F16, .ot = F16},
          {3, 4, 2, 24, 40, {5, 65, 2}, .causal = 1, .qt = BF16, .kt = BF16, .vt = BF16},
          {3, 4, 1, 16, 16, {4, 19, 30}, {8, 19, 50}, .alibi = 2, .kt = F16, .vt = BF16,
           .ot = BF16},
          {2, 4, 2, 16, 24, {16, 33}, .p = 0.3f, .seed = 77, .qt = F16, .vt = F16, .ot = BF16},
          {2, 2, 1, 260, 8, {3, 1}, {4, 0}, .causal = 1, .align = 1, .qt = BF16, .kt = F16,
           .vt = BF16, .ot = F16});
}

/* int32 operands are refused by name; nothing is written. */
static void test_16bit_bad_input(void **s)
{
    (void)s;
    float z[4 * 2 * 8] = {0}, o[4 * 2 * 8];
    int cu[2] = {0, 4};
    h_fill(o, 64, 5, 6);
    clattn_tensor tq = h_tensor_as(F16, 3, H_DIMS(4, 2, 8), z);
    clattn_tensor ti = h_tensor(CLATTN_INT32, 3, H_DIMS(4, 2, 8), NULL);
    clattn_tensor to = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(4, 2, 8), o);
    clattn_varlen seqs = {1, cu, cu};
    h_assert_error(clattn_varlen_attention(h_ctx, &ti, &tq, &tq, &seqs, NULL, &to),
                   CLATTN_ERROR_INVALID_TENSOR, "Q: dtype int32");
    h_assert_error(clattn_varlen_attention(h_ctx, &tq, &tq, &ti, &seqs, NULL, &to),
                   CLATTN_ERROR_INVALID_TENSOR, "V: dtype int32");
    h_assert_bytes(&to, o, "out of a refused varlen attention");
    clattn_tensor_release(&tq); clattn_tensor_release(&ti); clattn_tensor_release(&to);
}

/* A refusal that only one sequence meets names it: here sequence 1's scores for the unfused
 * chain (head size 257) pass 32-bit indexing. Nothing is written. */
static void test_sequence_error(void **s)
{
    (void)s;
    int cq[3] = {0, 1, 65537}, ck[3] = {0, 1, 32770};
    float o[65537];
    h_fill(o, 65537, 5, 6);
    clattn_tensor tq = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(65537, 1, 257), NULL);
    clattn_tensor tk = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(32770, 1, 257), NULL);
    clattn_tensor tv = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(32770, 1, 1), NULL);
    clattn_tensor to = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(65537, 1, 1), o);
    clattn_varlen seqs = {2, cq, ck};
    h_assert_error(clattn_varlen_attention(h_ctx, &tq, &tk, &tv, &seqs, NULL, &to),
                   CLATTN_ERROR_UNSUPPORTED,
                   "varlen_attention: sequence 1 (65536 queries, 32769 keys): attention: the "
                   "unfused path");
    h_assert_bytes(&to, o, "out of a refused varlen attention");
    clattn_tensor_release(&tq); clattn_tensor_release(&tk); clattn_tensor_release(&tv);
    clattn_tensor_release(&to);
}

/* The unfused chain's scratch for one sequence (its Q and out converted to float32, K, V) past
 * 32-bit indexing while each tensor fits: refused, naming the sequence, nothing written. Q and
 * out float16 of 2.4 GiB each, never touched (suite huge). */
static void test_huge_scratch(void **s)
{
    (void)s;
    if (!h_huge())
        skip();
    int cq[2] = {0, 5000000}, ck[2] = {0, 1};
    size_t qd[3] = {5000000, 1, 257};
    clattn_tensor tq, to;
    assert_int_equal(clattn_tensor_create(h_ctx, F16, 3, qd, NULL, &tq), CLATTN_SUCCESS);
    assert_int_equal(clattn_tensor_create(h_ctx, F16, 3, qd, NULL, &to), CLATTN_SUCCESS);
    clattn_tensor tk = h_tensor(CLATTN_FLOAT32, 3, H_DIMS(1, 1, 257), NULL);
    clattn_varlen seqs = {1, cq, ck};
    h_assert_error(clattn_varlen_attention(h_ctx, &tq, &tk, &tk, &seqs, NULL, &to),
                   CLATTN_ERROR_UNSUPPORTED,
                   "varlen_attention: sequence 0 (5000000 queries, 1 keys): the unfused path's "
                   "2570000514 float32 elements of scratch (head sizes 257, 257) exceed 32-bit "
                   "indexing");
    clattn_tensor_release(&tq); clattn_tensor_release(&tk); clattn_tensor_release(&to);
}

/* Every sequence empty on one side: the tensors keep a row the lengths do not cover, refused. */
static void test_all_empty(void **s)
{
    (void)s;
    CASES({2, 2, 2, 8, 8, {0, 0}, {3, 4}}, {2, 2, 2, 8, 8, {3, 1}, {0, 0}, .no_keys = 1});
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_self),
        cmocka_unit_test(test_cross),
        cmocka_unit_test(test_options),
        cmocka_unit_test(test_unfused),
        cmocka_unit_test(test_all_empty),
        cmocka_unit_test(test_16bit),
        cmocka_unit_test(test_16bit_bad_input),
        cmocka_unit_test(test_sequence_error),
        cmocka_unit_test(test_huge_scratch),
    };
    return cmocka_run_group_tests(tests, h_setup, h_teardown);
}
