/* Masks resolved against a score shape, ready to pass to the softmax and attention kernels. */
#ifndef CLATTN_MASK_H
#define CLATTN_MASK_H
#include "internal.h"

typedef struct {
    int D0, D1, Q, K;  /* scores viewed as (D0, D1, Q, K) */
    cl_mem lens;       /* NULL when lens_mode == 0 */
    int lens_off, lens_mode;
    cl_mem mask;       /* NULL when there is no mask tensor */
    int mask_off;
    cl_int4 ms;        /* mask strides over (D0, D1, Q, K), 0 where it broadcasts */
    /* (shift, left, right, 0): row q sees keys [q + shift - left, q + shift + right], -1 meaning
     * unbounded on that side; shift 0 (top-left) or K - Q (bottom-right); right = 0 when
     * causal. A side that would block no key is -1 (mask.c); the kernels sum the row bounds in
     * 64 bits (common.cl), as q + shift + right can pass INT_MAX when Q + K does. */
    cl_int4 win;
    float fill;
    cl_mem bias;       /* float, added to the scores before the mask; NULL when none */
    int bias_off;
    cl_int4 bs;        /* bias strides, as ms */
    cl_mem slopes;     /* float ALiBi slopes per (D0, D1); NULL when none */
    int slopes_off;
    cl_int2 ss;        /* slope strides over (D0, D1), 0 where they broadcast */
    cl_mem owned_lens; /* uploaded host lengths; release with clattn__mask_release */
} clattn_mask_args;

/* Checks mask against a score tensor of shape (.., Q, K) (rank 1-4) and its tensors against the
 * op's outputs (none may overlap them), and fills *out. Host lengths are uploaded into a new small
 * buffer (no host sync). name is the mask's full name in messages ("mask", "opts.mask"). */
clattn_status clattn__resolve_mask(clattn_context *ctx, const clattn_mask *mask,
                                   const clattn_tensor *scores, const char *name,
                                   const clattn_arg *outs, int nouts, clattn_mask_args *out);
/* Same, for a score shape given directly (attention ops have no score tensor). */
clattn_status clattn__resolve_mask_dims(clattn_context *ctx, const clattn_mask *mask, int score_rank,
                                        const size_t *score_dims, const char *name,
                                        const clattn_arg *outs, int nouts, clattn_mask_args *out);
/* A float bias tensor broadcastable (numpy rules) to scores of the given shape into o. */
clattn_status clattn__resolve_bias(clattn_context *ctx, const clattn_tensor *bias, int score_rank,
                                   const size_t *score_dims, const char *name,
                                   clattn_mask_args *o);
/* ALiBi slopes broadcastable (numpy rules) to the leading dims of scores of the given shape
 * (all but the last two) into o. */
clattn_status clattn__resolve_slopes(clattn_context *ctx, const clattn_tensor *slopes,
                                     int score_rank, const size_t *score_dims, const char *name,
                                     clattn_mask_args *o);
/* 1 when lengths, causality or the window's right side end some rows before key K (the fused
 * kernels then skip trailing key blocks and need the suffix value sums of flash_vscan). */
int clattn__mask_limits_rows(const clattn_mask_args *m);
/* 1 when the window's left side blocks leading keys of some rows. */
int clattn__mask_has_left(const clattn_mask_args *m);
/* CLATTN_SYNC's check of device lengths: reads t back (blocking) and fails naming the first
 * value outside [0, K]. */
clattn_status clattn__check_device_lens(clattn_context *ctx, const clattn_tensor *t,
                                        const char *name, int K);
/* Drops the uploaded lengths (the device frees them once queued kernels are done). */
void clattn__mask_release(clattn_mask_args *m);

/* softmax.c: launches the chosen softmax variant (arguments already checked); lse: NULL or each
 * row's log-sum-exp, a contiguous tensor of the rows. */
clattn_status clattn__enqueue_softmax(clattn_context *ctx, const clattn_tuning *tune,
                                      const clattn_tensor *x, const clattn_mask_args *m,
                                      const clattn_tensor *y, const clattn_tensor *lse);
/* softmax.c: the gradient of the softmax with respect to its scores (float32 y, dy, dx). */
clattn_status clattn__enqueue_softmax_backward(clattn_context *ctx, const clattn_tuning *tune,
                                               const clattn_tensor *y, const clattn_tensor *dy,
                                               const clattn_mask_args *m,
                                               const clattn_tensor *dx);
/* softmax.c: db = dx (the scores' gradient, contiguous (D0, D1, Q, K)) summed over the dims m's
 * bias broadcasts along; db contiguous, of the bias's shape. tune: softmax's (its loop budget). */
clattn_status clattn__enqueue_bias_grad(clattn_context *ctx, const clattn_tuning *tune,
                                        const clattn_tensor *dx, const clattn_mask_args *m,
                                        const clattn_tensor *db);
#endif
