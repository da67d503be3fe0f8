/* Ops only enqueue (README, Rules of the API): with the queue held behind a user event, every
 * public op still returns; then the event completes and each result equals, bit for bit, that of
 * the same calls made on an open queue. An op that waited on the host (a blocking read or write,
 * clFinish, a wait on an event) would wait for the held queue: a watchdog completes the event
 * after WAIT_S seconds, and the test fails naming the op that was running.
 *
 * The calls run on a context wrapping the harness's queue with sync off (params.sync = -1), so
 * that CLATTN_SYNC in the environment, which makes ops wait by design, does not apply. */
#include "harness.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { B = 2, Q = 5, K = 7, D = 4, DV = 3, H = 2, AH = 6, VOC = 5, KMAX = 8, WAIT_S = 120 };

/* Every input and output of one run of the ops; outputs listed in outs[] for the comparison. */
typedef struct {
    clattn_tensor q, k, v, scores, s16, W, bl, lin, probs, heads, back, drop, qp, kp, wv, ascores,
        att, attw, att2, lse, merged, mlse, vq, vk, vv, vout, dq, kc, vc, lens, kn, vn, dout, Wq,
        Wk, wv2, aout, aw, Wm[4], mout, mw, saved, dprobs, dsc, ddrop, dA, dB, dy, dx, dW, db, dO,
        dQ, dK, dV, dmo, gm[7], dqp, dkp, dwv, ga[6], wupd, logits, labels, vlen, loss, celse,
        dloss, dlogits, filled;
    clattn_tensor *outs[64];
    const char *names[64];
    int nout;
} fixtures;

/* Host data shared by both runs (seeded once). */
static float *host_f[40];
static int nhost;
static int labels_h[B * Q] = {0, 4, 2, -100, 1, 3, 3, 0, 2, 4}, lens_h[B] = {3, 5};
static int vlen_h[B] = {5, 2}, lens_mask[B] = {7, 3};
static const int cu_q[3] = {0, 2, 6}, cu_k[3] = {0, 5, 8};

static float *data(int i, size_t n, double lo, double hi)
{
    if (i >= nhost) {
        host_f[i] = malloc(n * sizeof(float));
        assert_non_null(host_f[i]);
        h_fill(host_f[i], n, lo, hi);
        nhost = i + 1;
    }
    return host_f[i];
}

static clattn_tensor in_f(int i, int nd, const size_t *dims)
{
    size_t n = 1;
    for (int j = 0; j < nd; j++)
        n *= dims[j];
    return h_tensor(CLATTN_FLOAT32, nd, dims, data(i, n, -1, 1));
}

static void out_t(fixtures *f, clattn_tensor *t, const char *name, clattn_dtype dt, int nd,
                  const size_t *dims)
{
    *t = h_tensor(dt, nd, dims, NULL);
    h_poison(t);
    f->outs[f->nout] = t;
    f->names[f->nout++] = name;
}

#define OUT(t, ...) out_t(f, &f->t, #t, CLATTN_FLOAT32, sizeof((size_t[]){__VA_ARGS__}) / \
                          sizeof(size_t), H_DIMS(__VA_ARGS__))

static void make(fixtures *f)
{
    memset(f, 0, sizeof *f);
    int i = 0;
    f->q = in_f(i++, 3, H_DIMS(B, Q, D));
    f->k = in_f(i++, 3, H_DIMS(B, K, D));
    f->v = in_f(i++, 3, H_DIMS(B, K, DV));
    f->W = in_f(i++, 2, H_DIMS(DV, D));
    f->bl = in_f(i++, 1, H_DIMS(DV));
    f->qp = in_f(i++, 3, H_DIMS(B, Q, AH));
    f->kp = in_f(i++, 3, H_DIMS(B, K, AH));
    f->wv = in_f(i++, 1, H_DIMS(AH));
    f->vq = in_f(i++, 3, H_DIMS(6, 2, D));
    f->vk = in_f(i++, 3, H_DIMS(8, 2, D));
    f->vv = in_f(i++, 3, H_DIMS(8, 2, DV));
    f->dq = in_f(i++, 4, H_DIMS(B, 2, 1, D));
    f->kn = in_f(i++, 4, H_DIMS(B, 1, 1, D));
    f->vn = in_f(i++, 4, H_DIMS(B, 1, 1, DV));
    f->Wq = in_f(i++, 2, H_DIMS(AH, D));
    f->Wk = in_f(i++, 2, H_DIMS(AH, D));
    f->wv2 = in_f(i++, 2, H_DIMS(1, AH));
    for (int w = 0; w < 4; w++)
        f->Wm[w] = in_f(i++, 2, H_DIMS(D, D));
    f->dprobs = in_f(i++, 3, H_DIMS(B, Q, K));
    f->dy = in_f(i++, 3, H_DIMS(B, Q, DV));
    f->dO = in_f(i++, 3, H_DIMS(B, Q, DV));
    f->dmo = in_f(i++, 3, H_DIMS(B, Q, D));
    f->logits = in_f(i++, 3, H_DIMS(B, Q, VOC));
    f->dloss = in_f(i++, 1, H_DIMS(B));
    f->labels = h_tensor(CLATTN_INT32, 2, H_DIMS(B, Q), labels_h);
    f->vlen = h_tensor(CLATTN_INT32, 1, H_DIMS(B), vlen_h);
    /* written in place: the caches, the lengths, the updated weight */
    f->kc = in_f(i++, 4, H_DIMS(B, 1, KMAX, D));
    f->vc = in_f(i++, 4, H_DIMS(B, 1, KMAX, DV));
    f->lens = h_tensor(CLATTN_INT32, 1, H_DIMS(B), lens_h);
    f->wupd = in_f(i++, 2, H_DIMS(DV, D));
    f->outs[f->nout] = &f->kc, f->names[f->nout++] = "k_cache";
    f->outs[f->nout] = &f->vc, f->names[f->nout++] = "v_cache";
    f->outs[f->nout] = &f->lens, f->names[f->nout++] = "lens";
    f->outs[f->nout] = &f->wupd, f->names[f->nout++] = "axpy's y";

    OUT(scores, B, Q, K);
    out_t(f, &f->s16, "s16", CLATTN_FLOAT16, 3, H_DIMS(B, Q, K));
    OUT(lin, B, Q, DV);
    OUT(probs, B, Q, K);
    OUT(heads, B * H, Q, D / H);
    OUT(back, B, Q, D);
    OUT(drop, B, Q, K);
    OUT(ascores, B, Q, K);
    OUT(att, B, Q, DV);
    OUT(attw, B, Q, K);
    OUT(att2, B, Q, DV);
    OUT(lse, B, Q);
    OUT(merged, B, Q, DV);
    OUT(mlse, B, Q);
    OUT(vout, 6, 2, DV);
    OUT(dout, B, 2, 1, DV);
    OUT(aout, B, Q, DV);
    OUT(aw, B, Q, K);
    OUT(mout, B, Q, D);
    OUT(mw, B, H, Q, K);
    OUT(dsc, B, Q, K);
    OUT(ddrop, B, Q, K);
    OUT(dA, B, Q, D);
    OUT(dB, B, K, D);
    OUT(dx, B, Q, D);
    OUT(dW, DV, D);
    OUT(db, DV);
    OUT(dQ, B, Q, D);
    OUT(dK, B, K, D);
    OUT(dV, B, K, DV);
    OUT(gm[0], B, Q, D);
    OUT(gm[1], B, K, D);
    OUT(gm[2], B, K, D);
    OUT(gm[3], D, D);
    OUT(gm[4], D, D);
    OUT(gm[5], D, D);
    OUT(gm[6], D, D);
    OUT(dqp, B, Q, AH);
    OUT(dkp, B, K, AH);
    OUT(dwv, AH);
    OUT(ga[0], B, Q, D);
    OUT(ga[1], B, K, D);
    OUT(ga[2], B, K, DV);
    OUT(ga[3], AH, D);
    OUT(ga[4], AH, D);
    OUT(ga[5], 1, AH);
    OUT(loss, B);
    OUT(celse, B, Q);
    OUT(dlogits, B, Q, VOC);
    OUT(filled, 3);
    clattn_mha_weights mw = {H, &f->Wm[0], &f->Wm[1], &f->Wm[2], &f->Wm[3],
                             NULL, NULL, NULL, NULL, 0};
    size_t ns = clattn_mha_saved_numel(&f->q, &f->k, &mw);
    assert_true(ns > 0);
    out_t(f, &f->saved, "saved", CLATTN_FLOAT32, 1, H_DIMS(ns));
}

static void release(fixtures *f)
{
    clattn_tensor *ins[] = {&f->q, &f->k, &f->v, &f->W, &f->bl, &f->qp, &f->kp, &f->wv, &f->vq,
                            &f->vk, &f->vv, &f->dq, &f->kn, &f->vn, &f->Wq, &f->Wk, &f->wv2,
                            &f->Wm[0], &f->Wm[1], &f->Wm[2], &f->Wm[3], &f->dprobs, &f->dy,
                            &f->dO, &f->dmo, &f->logits, &f->dloss, &f->labels, &f->vlen};
    for (size_t i = 0; i < sizeof ins / sizeof ins[0]; i++)
        clattn_tensor_release(ins[i]);
    for (int i = 0; i < f->nout; i++)
        clattn_tensor_release(f->outs[i]);
}

/* The op running now, for the watchdog's message (under run_mu: the watchdog reads it). */
static pthread_mutex_t run_mu = PTHREAD_MUTEX_INITIALIZER;
static const char *running = "";

static void set_running(const char *name)
{
    pthread_mutex_lock(&run_mu);
    running = name;
    pthread_mutex_unlock(&run_mu);
}

/* A failing op ends the run with its message in err (no fail_msg while the queue is held: the
 * test must complete the gate before it fails). */
#define CALL(name, ...)                                                                      \
    do {                                                                                     \
        set_running(name);                                                                   \
        if ((__VA_ARGS__) != CLATTN_SUCCESS) {                                               \
            snprintf(err, size, "%s: %s", name, clattn_last_error(c));                       \
            return 0;                                                                        \
        }                                                                                    \
    } while (0)

/* Every public op once (and tensor_fill), chained where one feeds another; 0 with err filled
 * when one fails. */
static int run_ops(clattn_context *c, fixtures *f, char *err, size_t size)
{
    clattn_attention_opts o = {0};
    o.mask.valid_lens_host = lens_mask;
    o.mask.lens_ndim = 1;
    o.mask.lens_dims[0] = B;
    clattn_dropout_params dp = {0.3f, 1, 7, 11};
    CALL("matmul", clattn_matmul(c, &f->q, 0, &f->k, 1, 0.5f, 0.0f, &f->scores));
    CALL("convert", clattn_convert(c, &f->scores, &f->s16));
    CALL("linear", clattn_linear(c, &f->q, &f->W, &f->bl, &f->lin));
    CALL("masked_softmax", clattn_masked_softmax(c, &f->scores, &o.mask, &f->probs));
    CALL("transpose_qkv", clattn_transpose_qkv(c, &f->q, H, &f->heads));
    CALL("transpose_output", clattn_transpose_output(c, &f->heads, H, &f->back));
    CALL("dropout", clattn_dropout(c, &f->probs, &dp, &f->drop));
    CALL("additive_scores", clattn_additive_scores(c, &f->qp, &f->kp, &f->wv, &f->ascores));
    CALL("dot_product_attention (weights)",
         clattn_dot_product_attention(c, &f->q, &f->k, &f->v, &o, &f->att, &f->attw));
    o.lse = &f->lse;
    CALL("dot_product_attention (lse)",
         clattn_dot_product_attention(c, &f->q, &f->k, &f->v, &o, &f->att2, NULL));
    clattn_tensor parts[2] = {f->att2, f->att2}, lses[2] = {f->lse, f->lse};
    CALL("attention_merge", clattn_attention_merge(c, 2, parts, lses, &f->merged, &f->mlse));
    clattn_varlen vs = {2, cu_q, cu_k};
    clattn_attention_opts causal = {0};
    causal.mask.causal = 1;
    causal.mask.align = CLATTN_ALIGN_BOTTOM_RIGHT;
    CALL("varlen_attention",
         clattn_varlen_attention(c, &f->vq, &f->vk, &f->vv, &vs, &causal, &f->vout));
    clattn_kv_cache kv = {&f->kc, &f->vc, &f->lens, &f->kn, &f->vn, 1};
    CALL("decode_attention", clattn_decode_attention(c, &f->dq, &kv, &causal, &f->dout));
    clattn_additive_weights aw = {&f->Wq, &f->Wk, &f->wv2};
    clattn_attention_opts ao = o;
    ao.lse = NULL;
    CALL("additive_attention",
         clattn_additive_attention(c, &f->q, &f->k, &f->v, &aw, &ao, &f->aout, &f->aw));
    clattn_mha_weights mw = {H, &f->Wm[0], &f->Wm[1], &f->Wm[2], &f->Wm[3],
                             NULL, NULL, NULL, NULL, 0};
    clattn_attention_opts mo = ao;
    mo.saved = &f->saved;
    CALL("multihead_attention",
         clattn_multihead_attention(c, &f->q, &f->k, &f->k, &mw, &mo, &f->mout, &f->mw));
    CALL("masked_softmax_backward",
         clattn_masked_softmax_backward(c, &f->probs, &f->dprobs, &o.mask, &f->dsc));
    CALL("dropout_backward", clattn_dropout_backward(c, &f->dprobs, &dp, &f->ddrop));
    CALL("matmul_backward", clattn_matmul_backward(c, &f->q, 0, &f->k, 1, 0.5f, &f->dprobs,
                                                   &f->dA, &f->dB));
    CALL("linear_backward",
         clattn_linear_backward(c, &f->q, &f->W, &f->dy, &f->dx, &f->dW, &f->db));
    clattn_attention_grads g = {&f->dQ, &f->dK, &f->dV, NULL};
    CALL("dot_product_attention_backward",
         clattn_dot_product_attention_backward(c, &f->q, &f->k, &f->v, &o, &f->att2, &f->dO, &g));
    clattn_mha_grads gm = {&f->gm[0], &f->gm[1], &f->gm[2], &f->gm[3], &f->gm[4], &f->gm[5],
                           &f->gm[6], NULL, NULL, NULL, NULL, NULL};
    CALL("multihead_attention_backward",
         clattn_multihead_attention_backward(c, &f->q, &f->k, &f->k, &mw, &mo, &f->dmo, &gm));
    CALL("additive_scores_backward",
         clattn_additive_scores_backward(c, &f->qp, &f->kp, &f->wv, &f->dprobs, &f->dqp, &f->dkp,
                                         &f->dwv));
    clattn_additive_grads ga = {&f->ga[0], &f->ga[1], &f->ga[2], &f->ga[3], &f->ga[4], &f->ga[5]};
    CALL("additive_attention_backward",
         clattn_additive_attention_backward(c, &f->q, &f->k, &f->v, &aw, &ao, &f->dO, &ga));
    CALL("axpy", clattn_axpy(c, -0.1f, &f->dW, &f->wupd));
    CALL("masked_softmax_ce_loss", clattn_masked_softmax_ce_loss(c, &f->logits, &f->labels,
                                                                 &f->vlen, &f->loss, &f->celse));
    CALL("masked_softmax_ce_loss_backward",
         clattn_masked_softmax_ce_loss_backward(c, &f->logits, &f->labels, &f->vlen, &f->celse,
                                                &f->dloss, &f->dlogits));
    CALL("tensor_fill", clattn_tensor_fill(c, &f->filled, 2.5f));
    set_running("");
    return 1;
}

/* ---- the watchdog: completes the gate after WAIT_S seconds unless the ops returned ---- */

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int returned, timed_out;
    cl_event gate;
    const char *stuck_in;
} watch;

static void *watchdog(void *arg)
{
    watch *w = arg;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += WAIT_S;
    pthread_mutex_lock(&w->mu);
    while (!w->returned && !w->timed_out)
        if (pthread_cond_timedwait(&w->cv, &w->mu, &until) != 0 && !w->returned) {
            w->timed_out = 1;
            pthread_mutex_lock(&run_mu);
            w->stuck_in = running;
            pthread_mutex_unlock(&run_mu);
            clSetUserEventStatus(w->gate, CL_COMPLETE); /* lets the waiting op go on */
        }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static void test_ops_only_enqueue(void **s)
{
    (void)s;
    h_reseed(1);
    fixtures open, held;
    clattn_context *c = NULL;
    clattn_params p = {0};
    p.sync = -1; /* off, whatever CLATTN_SYNC says */
    if (clattn_context_wrap(&c, clattn_context_cl(h_ctx), clattn_context_device(h_ctx),
                            clattn_context_queue(h_ctx), &p) != CLATTN_SUCCESS)
        fail_msg("context_wrap: %s", clattn_last_error(NULL));

    /* on an open queue: the reference results (and every program built) */
    char err[1024] = "";
    make(&open);
    if (!run_ops(c, &open, err, sizeof err))
        fail_msg("%s", err);

    make(&held); /* poisoned outputs: their blocking writes go before the gate */
    cl_int cl_err;
    watch w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, NULL, ""};
    w.gate = clCreateUserEvent(clattn_context_cl(h_ctx), &cl_err);
    assert_int_equal(cl_err, CL_SUCCESS);
    assert_int_equal(clEnqueueBarrierWithWaitList(clattn_context_queue(h_ctx), 1, &w.gate, NULL),
                     CL_SUCCESS);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, watchdog, &w), 0);
    int ran = run_ops(c, &held, err, sizeof err);
    pthread_mutex_lock(&w.mu);
    w.returned = 1;
    pthread_cond_signal(&w.cv);
    pthread_mutex_unlock(&w.mu);
    pthread_join(th, NULL);
    if (!w.timed_out)
        assert_int_equal(clSetUserEventStatus(w.gate, CL_COMPLETE), CL_SUCCESS);
    clReleaseEvent(w.gate);
    if (w.timed_out)
        fail_msg("%s waited on the host for the held queue (%d s)", w.stuck_in, WAIT_S);
    if (!ran)
        fail_msg("behind the held queue: %s", err);

    for (int i = 0; i < open.nout; i++) {
        size_t bytes = clattn_tensor_numel(open.outs[i]) * clattn_dtype_size(open.outs[i]->dtype);
        void *a = h_read(open.outs[i]), *b = h_read(held.outs[i]);
        if (memcmp(a, b, bytes) != 0)
            fail_msg("%s: the results behind the held queue differ from the open queue's",
                     open.names[i]);
        free(a);
        free(b);
    }
    release(&open);
    release(&held);
    clattn_context_destroy(&c);
    for (int i = 0; i < nhost; i++)
        free(host_f[i]);
    nhost = 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_ops_only_enqueue)};
    return cmocka_run_group_tests(tests, h_setup, h_teardown);
}
