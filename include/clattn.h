/*
 * clattn: portable OpenCL attention (d2l's attention chapters and the scaled-dot-product tutorial).
 *
 * Conventions
 * - Every op enqueues work on the context's in-order command queue and returns without waiting,
 *   unless its name ends in _blocking. Results are ready once clattn_finish() (or a blocking read
 *   on the same queue) returns.
 * - Every op validates all of its arguments first; on failure it returns a status, enqueues nothing
 *   and leaves every output untouched. clattn_last_error() names the argument and the shapes.
 * - Tensors are borrowed views of cl_mem buffers (float32, float16 or bfloat16 data; int32 lengths
 *   and masks), row-major,
 *   1 to 4 dimensions, with an element offset. Their buffers must belong to the context's
 *   cl_context.
 * - No output may share bytes with an input (mask tensors and device lengths included) or with
 *   another output, wherever the bytes come from: the same buffer, sub-buffers of one buffer, or
 *   CL_MEM_USE_HOST_PTR buffers over the same memory. Ops that run in place say so, and take only
 *   the same view (the same buf and offset), never the same bytes through another cl_mem.
 *
 * Thread safety: a context may be used by one thread at a time. Different contexts may be used from
 * different threads concurrently, including contexts wrapping the same cl_context. Functions that
 * take no context (clattn_status_string, clattn_version, clattn_last_error(NULL)) are thread-safe;
 * the NULL-context error text is per thread.
 */
#ifndef CLATTN_H
#define CLATTN_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define CLATTN_API
#else
#define CLATTN_API __attribute__((visibility("default")))
#endif

typedef enum {
    CLATTN_SUCCESS = 0,
    CLATTN_ERROR_INVALID_ARGUMENT, /* NULL pointer, bad value (p outside [0,1], bad flag) */
    CLATTN_ERROR_SHAPE_MISMATCH,   /* ranks or dims that do not fit together */
    CLATTN_ERROR_INVALID_TENSOR,   /* view outside its buffer, wrong or unknown dtype, too large,
                                      buffer of another cl_context */
    CLATTN_ERROR_NO_PLATFORM,      /* no OpenCL platform or device at all */
    CLATTN_ERROR_DEVICE_NOT_FOUND, /* the device spec matched nothing */
    CLATTN_ERROR_BUILD_FAILED,     /* a kernel failed to build; the message holds the log */
    CLATTN_ERROR_OUT_OF_MEMORY,    /* host or device allocation failed */
    CLATTN_ERROR_OPENCL,           /* any other OpenCL error; the message names it */
    CLATTN_ERROR_UNSUPPORTED,      /* the device cannot run this (limits, missing features) */
    CLATTN_ERROR_IO                /* kernel directory or cache file problems */
} clattn_status;

/* Element types. The 16-bit ones are storage formats (IEEE binary16, and bfloat16: float32's top
 * 16 bits); tensors of them are created, written, read, filled and converted (clattn_convert).
 * Each op below says which of its tensors may be 16-bit (all but clattn_attention_merge's); all
 * arithmetic is float32 and a 16-bit output is each float32 result rounded once. Valid lengths,
 * masks, biases, ALiBi slopes and log-sum-exps stay int32 / float32. */
typedef enum { CLATTN_FLOAT32 = 0, CLATTN_INT32 = 1, CLATTN_FLOAT16 = 2, CLATTN_BFLOAT16 = 3 } clattn_dtype;

#define CLATTN_MAX_DIMS 4

/* A borrowed view: elements [offset, offset + prod(dims)) of buf, row-major. */
typedef struct {
    cl_mem buf;
    size_t offset;                /* in elements of dtype */
    int ndim;                     /* 1..CLATTN_MAX_DIMS */
    size_t dims[CLATTN_MAX_DIMS]; /* dims[0] is the outermost */
    clattn_dtype dtype;
} clattn_tensor;

typedef struct clattn_context clattn_context;

/* Per-context settings; each wins over its environment variable. Strings are copied whole (any
 * length); a directory whose file paths would pass PATH_MAX is an error at context creation
 * naming the field or the variable, never shortened. */
typedef struct {
    const char *device;      /* device spec, as CLATTN_DEVICE; NULL = use the env */
    const char *tuning;      /* kernel variant overrides, as CLATTN_TUNE; NULL = use the env */
    const char *kernel_dir;  /* load .cl files from here instead of the embedded copies, as
                                CLATTN_KERNEL_DIR; NULL = use the env */
    const char *cache_dir;   /* program binary cache, as CLATTN_CACHE_DIR; NULL = use the env */
    /* Finish and check after every enqueue (debugging). 1 = on and -1 = off, winning over
     * CLATTN_SYNC; 0 = as CLATTN_SYNC, which reads 1/true/yes/on or 0/false/no/off/empty in any
     * case (another value is an error). Any other field value is an error. */
    int sync;
    /* The tune file clattn-tune writes (kernel parameters measured on this device; README,
     * Tuning a device), as CLATTN_TUNE_FILE; NULL = use the env. Unset or empty: the file
     * clattn-tune-<key>.txt for this device in cache_dir, else in $XDG_CACHE_HOME/clattn, else
     * in $HOME/.cache/clattn; "off": none. A file that is missing, stale (another device, driver
     * or clattn version) or corrupt is ignored, never an error (clattn_context_tune_note says
     * why); its entries yield to tuning and CLATTN_TUNE, op by op. */
    const char *tune_file;
} clattn_params;

/* Default fill for masked scores: d2l's -1e6 (the tutorial uses -1e9). */
#define CLATTN_DEFAULT_FILL (-1.0e6f)

/* Where the causal and sliding-window diagonals of a (Q, K) score matrix sit. */
typedef enum {
    CLATTN_ALIGN_TOP_LEFT = 0,    /* row i's diagonal is key i (d2l, SDPA is_causal) */
    CLATTN_ALIGN_BOTTOM_RIGHT = 1 /* key i + K - Q (FlashAttention >= 2.1, causal_lower_right) */
} clattn_align;

/*
 * What a softmax or attention op masks. Every part is optional and they combine (a key is blocked
 * when any part blocks it). A zero-initialised struct masks nothing.
 * - Lengths, int32, 1-D (B) = one length per leading batch index, repeated over the query rows
 *   (and over the heads of 4-D scores); or 2-D (B, Q) = one length per query row. Keys k >= len are
 *   blocked; 0 <= len <= K. B is the scores' first dim (1 for 2-D scores). Give them either
 *   - in host memory (valid_lens_host, lens_ndim, lens_dims): every value is checked, and they are
 *     uploaded without blocking (lens_ndim without valid_lens_host is an error); or
 *   - as a device tensor (valid_lens): only its shape can be checked without a host sync, so values
 *     outside [0, K] are clamped on the device, except with CLATTN_SYNC=1 (params.sync), where they
 *     are read back and rejected.
 * - mask: int32 0/1 tensor broadcastable (numpy rules, right-aligned) to the scores (..., Q, K);
 *   0 = blocked, as the tutorial's masked_fill(mask == 0, fill).
 * - causal (0 or 1): query row i sees keys j <= diag(i), its diagonal: i (align =
 *   CLATTN_ALIGN_TOP_LEFT, the default) or i + K - Q (CLATTN_ALIGN_BOTTOM_RIGHT; rows i < Q - K
 *   then see no key).
 * - window = 1: a sliding window, FlashAttention-2's semantics: row i sees keys j with
 *   diag(i) - window_left <= j <= diag(i) + window_right, -1 meaning unbounded on that side
 *   (other negative values are errors); with causal, window_right is 0 whatever it says.
 *   window = 0 (the default) ignores window_left and window_right.
 * - fill: the value blocked scores get before the softmax; 0 means CLATTN_DEFAULT_FILL. Finite or
 *   -INFINITY (PyTorch's masked_fill(-inf)); NaN and +INFINITY are errors. With a finite fill a row
 *   with every key blocked gets uniform weights 1/K, as the reference does.
 */
typedef struct {
    const clattn_tensor *valid_lens;
    const int *valid_lens_host;
    int lens_ndim;
    size_t lens_dims[2];
    const clattn_tensor *mask;
    int causal;
    float fill;
    int align; /* clattn_align: of causal and the window */
    int window;
    int window_left, window_right;
} clattn_mask;

/* Dropout on attention weights. p in [0, 1]; training 0 or 1, 0 making it an exact no-op. The
 * mask is a pure function of (seed, offset, element index), identical on every device. */
typedef struct {
    float p;
    int training;
    unsigned long long seed;
    unsigned long long offset;
} clattn_dropout_params;

/* ---- library ---- */
CLATTN_API const char *clattn_version(void);
CLATTN_API const char *clattn_status_string(clattn_status s);
/* Detail of the last failure on ctx; with ctx NULL, of the last failure of this thread that had
 * no context (context creation). Never NULL. */
CLATTN_API const char *clattn_last_error(const clattn_context *ctx);

/* ---- contexts ---- */
/* params may be NULL (defaults). Picks params->device, else CLATTN_DEVICE, else the first GPU, else
 * the first accelerator, else the first CPU. */
CLATTN_API clattn_status clattn_context_create(clattn_context **ctx, const clattn_params *params);
/* Borrow the application's objects (retained, released on destroy). queue must be in-order and
 * belong to context and device. params may be NULL; its device field is ignored. */
CLATTN_API clattn_status clattn_context_wrap(clattn_context **ctx, cl_context context,
                                             cl_device_id device, cl_command_queue queue,
                                             const clattn_params *params);
/* NULL-safe; sets *ctx to NULL. Waits for the work queued on a queue it created (clFinish);
 * does not wait for queued work of a wrapped queue. */
CLATTN_API void clattn_context_destroy(clattn_context **ctx);
CLATTN_API cl_context clattn_context_cl(const clattn_context *ctx);
CLATTN_API cl_device_id clattn_context_device(const clattn_context *ctx);
CLATTN_API cl_command_queue clattn_context_queue(const clattn_context *ctx);
/* One line: "device name (vendor, type, platform, OpenCL C x.y, driver ...)". */
CLATTN_API const char *clattn_context_description(const clattn_context *ctx);
/* Device memory the context holds for intermediates (its scratch arena), in bytes. The arena
 * grows to the largest op run so far and is reused; it is freed with the context. */
CLATTN_API size_t clattn_context_scratch_bytes(const clattn_context *ctx);
/* The tune file this context looked for ("" when off) and one line on what came of it: its
 * entries in use, or why none are (no file there, stale, corrupt). */
CLATTN_API const char *clattn_context_tune_path(const clattn_context *ctx);
CLATTN_API const char *clattn_context_tune_note(const clattn_context *ctx);
/* The kernel variant and parameters this context runs op with, in CLATTN_TUNE's entry syntax
 * ("cpu:QR=5:KB=64:..."), from the override, the tune file or the table; op is one of matmul,
 * softmax, attention, decode, backward or half (the float16 conversions: bits, fp16 or clang),
 * optionally with a bucket ("attention@d128", "matmul@small"; README, Tuning a device).
 * CLATTN_ERROR_INVALID_ARGUMENT for an unknown op or bucket, or a buffer too small. */
CLATTN_API clattn_status clattn_context_tuning(clattn_context *ctx, const char *op, char *buf,
                                               size_t size);
/* Blocks until everything enqueued on the context's queue has finished. */
CLATTN_API clattn_status clattn_finish(clattn_context *ctx);

/* ---- devices ---- */
/* Writes a listing of every platform and device (one line each, "P:D ...", the selected one marked
 * with '*') into buf. spec as CLATTN_DEVICE (NULL = the env). Returns the selection status. */
CLATTN_API clattn_status clattn_list_devices(const char *spec, char *buf, size_t size);

/* ---- tensors ---- */
/* A view; ndim 1..4. Does not check anything (the ops do). */
CLATTN_API clattn_tensor clattn_view(cl_mem buf, clattn_dtype dtype, size_t offset, int ndim,
                                     const size_t *dims);
/* The number of elements: the product of t's dims, 0 for NULL, a rank outside 1..4 or a product
 * past SIZE_MAX. */
CLATTN_API size_t clattn_tensor_numel(const clattn_tensor *t);
/* Bytes per element: 4, or 2 for the 16-bit dtypes; 0 for an unknown one. */
CLATTN_API size_t clattn_dtype_size(clattn_dtype dtype);
/* Host conversions, as the device's (clattn_convert): round to nearest even; overflow gives
 * infinity; subnormals both ways; NaN stays NaN (its payload's top bits kept, quieted, except
 * from bfloat16 to float32, which keeps every bit: bfloat16 is float32's top half). */
CLATTN_API unsigned short clattn_float_to_half(float x);
CLATTN_API float clattn_half_to_float(unsigned short h);
CLATTN_API unsigned short clattn_float_to_bfloat16(float x);
CLATTN_API float clattn_bfloat16_to_float(unsigned short b);
/* Allocates a buffer of exactly the tensor's size (owned by the caller: clattn_tensor_release).
 * host may be NULL (uninitialised). Blocks only while host data is copied. An unknown dtype is
 * CLATTN_ERROR_INVALID_ARGUMENT (an argument, not yet a tensor), a rank outside 1..4
 * CLATTN_ERROR_SHAPE_MISMATCH, a zero dim or more than INT_MAX elements
 * CLATTN_ERROR_INVALID_TENSOR, more than the device allocates at once CLATTN_ERROR_OUT_OF_MEMORY. */
CLATTN_API clattn_status clattn_tensor_create(clattn_context *ctx, clattn_dtype dtype, int ndim,
                                              const size_t *dims, const void *host,
                                              clattn_tensor *out);
/* Releases t->buf and zeroes *t. NULL-safe. */
CLATTN_API void clattn_tensor_release(clattn_tensor *t);
CLATTN_API clattn_status clattn_tensor_write_blocking(clattn_context *ctx, const clattn_tensor *t,
                                                      const void *host);
CLATTN_API clattn_status clattn_tensor_read_blocking(clattn_context *ctx, const clattn_tensor *t,
                                                     void *host);
/* Fills a float32, float16 or bfloat16 tensor with one value (rounded to the dtype; enqueued).
 * write_blocking and read_blocking move the dtype's own bytes (2 per element for 16-bit). */
CLATTN_API clattn_status clattn_tensor_fill(clattn_context *ctx, const clattn_tensor *t, float value);

/* ---- ops ---- */
/* C = alpha * op(A) op(B) + beta * C, op(X) = X (trans 0) or X^T (trans 1) over the last two dims.
 * Leading (batch) dims of A, B and C must be equal, except that a 2-D A or B is shared by every
 * batch. beta = 0 ignores C's old contents (NaN included). A, B and C: float32, float16 or
 * bfloat16 in any combination (float32 accumulation; a 16-bit C is each result rounded once). */
CLATTN_API clattn_status clattn_matmul(clattn_context *ctx, const clattn_tensor *A, int trans_a,
                                       const clattn_tensor *B, int trans_b, float alpha, float beta,
                                       const clattn_tensor *C);
/* y = x converted to y's dtype, any two of float32, float16 and bfloat16 (the same dtype copies),
 * element for element: the same number of elements, the same shape. Rounds as the host
 * conversions above, the same bits on every device (no cl_khr_fp16 needed). */
CLATTN_API clattn_status clattn_convert(clattn_context *ctx, const clattn_tensor *x,
                                        const clattn_tensor *y);
/* y = x W^T + b, W (out_features, in_features) as PyTorch, x (..., in), y (..., out), bias (out)
 * or NULL. x, W, bias and y: float32, float16 or bfloat16 in any combination (as matmul). */
CLATTN_API clattn_status clattn_linear(clattn_context *ctx, const clattn_tensor *x,
                                       const clattn_tensor *W, const clattn_tensor *bias,
                                       const clattn_tensor *y);
/* out = softmax over the last axis of scores with mask applied. out may be scores itself (the same
 * buf, offset and dtype: in place). scores and out: float32, float16 or bfloat16, in any
 * combination (float32 arithmetic; a 16-bit out is each weight rounded once). */
CLATTN_API clattn_status clattn_masked_softmax(clattn_context *ctx, const clattn_tensor *scores,
                                               const clattn_mask *mask, const clattn_tensor *out);

/* ---- attention building blocks ---- */
/* (B, T, H*dh) -> (B*H, T, dh), batch-major and head-minor, as d2l's transpose_qkv. out is given
 * as (B*H, T, dh) or (B, H, T, dh). */
CLATTN_API clattn_status clattn_transpose_qkv(clattn_context *ctx, const clattn_tensor *x,
                                              int num_heads, const clattn_tensor *out);
/* The inverse: (B*H, T, dh) or (B, H, T, dh) -> (B, T, H*dh). Both take float32, float16 or
 * bfloat16, x and out of one dtype. */
CLATTN_API clattn_status clattn_transpose_output(clattn_context *ctx, const clattn_tensor *x,
                                                 int num_heads, const clattn_tensor *out);
/* y = x * keep / (1 - p) with keep drawn from Philox4x32-10 keyed by (seed, offset, element index),
 * the index counted row-major from the view's first element (a view of part of a tensor draws
 * the mask of a tensor of its own shape, not that part of the whole's); p = 0 or training = 0
 * copies (an exact no-op in place); p = 1 multiplies every element by 0: zeros, NaN where x is
 * NaN or infinite (PyTorch's x * mask does the same). y may be x itself
 * (the same buf, offset and dtype: in place). x and y: float32, float16 or bfloat16 in any
 * combination (a 16-bit y is the float32 product rounded once; no-ops convert). */
CLATTN_API clattn_status clattn_dropout(clattn_context *ctx, const clattn_tensor *x,
                                        const clattn_dropout_params *p, const clattn_tensor *y);
/* scores[b, i, j] = sum_h w_v[h] tanh(qp[b, i, h] + kp[b, j, h]) for projected queries qp (B, Q, h)
 * and keys kp (B, K, h); w_v is (1, h) or (h). Never builds the (B, Q, K, h) features. qp, kp,
 * w_v and scores: float32, float16 or bfloat16 in any combination. */
CLATTN_API clattn_status clattn_additive_scores(clattn_context *ctx, const clattn_tensor *qp,
                                                const clattn_tensor *kp, const clattn_tensor *w_v,
                                                const clattn_tensor *scores);

/* ---- attention modules ---- */
/* What every attention module takes besides its tensors. A zero-initialised struct means: no mask,
 * no dropout, default scale. */
typedef struct {
    clattn_mask mask;              /* scores are (..., Q, K); for multi-head (B, H, Q, K) */
    clattn_dropout_params dropout; /* on the attention weights (the weights returned are before it) */
    float scale; /* dot-product, varlen and decoding: 0 = 1/sqrt(d); must be 0 elsewhere */
    /* Output or NULL: the scores' shape without the last dim ((..., Q); multi-head (B, H, Q)),
     * the natural log-sum-exp log(sum_k exp(s_k)) of each row's scaled scores after the mask
     * (blocked keys count with the fill value, before dropout): FlashAttention-2's softmax_lse.
     * A row whose every key is blocked gets fill + log(K) with a finite fill, -INFINITY with
     * -INFINITY. It takes the fused path as well as the weights do not. */
    const clattn_tensor *lse;
    /* Input or NULL: a float32 bias broadcastable (numpy rules) to the scores (..., Q, K), added to
     * the scaled scores before the mask (SDPA's float attn_mask, relative-position biases): the
     * weights are softmax(mask(scale Q K^T + bias)). Keeps the fused path. Not for decoding. */
    const clattn_tensor *bias;
    /* Input or NULL: ALiBi slopes, float32, broadcastable (numpy rules) to the scores' leading
     * dims ((H) or (B, H) for scores (B, H, Q, K), (B) or (1) for (B, Q, K)). Key k of row i of
     * a head with slope m gets -m * |i + K - Q - k| added after the bias, before the mask
     * (FlashAttention-2's alibi_slopes: the distance from the bottom-right diagonal, whatever
     * mask.align says; Press et al. use m = 2^(-8 h / H), h = 1..H). Computed in the kernels: no
     * (Q, K) tensor exists, and the fused path is kept. Decoding takes it too (Q = the new rows,
     * K = each sequence's keys). */
    const clattn_tensor *alibi_slopes;
    /* Multi-head attention only (NULL elsewhere, else an error): a float32 tensor of exactly
     * clattn_mha_saved_numel elements. clattn_multihead_attention writes there what its backward
     * needs (the three projections, the heads' concatenated output and the rows' LSE), and
     * clattn_multihead_attention_backward, given the same tensor with the same inputs, weights
     * and opts, reads them instead of computing the forward again. */
    const clattn_tensor *saved;
} clattn_attention_opts;

/* out = dropout(masked_softmax(Q K^T * scale)) V for Q (.., Q, d), K (.., K, d), V (.., K, dv),
 * out (.., Q, dv), the same 0-2 leading batch dims on all. weights (.., Q, K) or NULL; when NULL
 * the fused kernel may run, which never materialises the scores. opts may be NULL.
 * Grouped-query (and multi-query) attention: 4-D Q (B, Hq, Q, d) with K (B, Hkv, K, d) and V
 * (B, Hkv, K, dv) where Hkv divides Hq; query head h reads K/V head h / (Hq / Hkv) (PyTorch's
 * enable_gqa), with no copy of K or V. out, weights and the mask are (B, Hq, ...).
 * Q, K, V, out and weights: float32, float16 or bfloat16 in any combination (float32 scores and
 * probabilities; P V takes them unrounded, 16-bit weights are them rounded once). */
CLATTN_API clattn_status clattn_dot_product_attention(clattn_context *ctx, const clattn_tensor *Q,
                                                      const clattn_tensor *K,
                                                      const clattn_tensor *V,
                                                      const clattn_attention_opts *opts,
                                                      const clattn_tensor *out,
                                                      const clattn_tensor *weights);

/* Attention over the union of disjoint key ranges from attention over each range: n >= 1 partial
 * outputs outs[i] (..., Q, dv) and their log-sum-exps lses[i] (..., Q) (opts.lse) give out
 * (..., Q, dv) and, unless NULL, lse (..., Q), as one op over all the keys would (split-key
 * decoding, keys split over devices). Exact but for float32 rounding: out = sum_i w_i outs[i]
 * with w_i = exp(lses[i] - lse), lse = log(sum_i exp(lses[i])). A partial whose LSE is -INFINITY
 * (a range without keys, whose decode or varlen output is 0, or with every key blocked with fill
 * -INFINITY, whose output is NaN) weighs nothing; when every LSE is -INFINITY, lse is -INFINITY
 * and out the sum of 0 x each partial: NaN where a partial is NaN (as one op gives for a row with
 * every key so blocked), 0 where all are finite (as for a sequence without keys); a NaN LSE makes
 * the row NaN. With a finite fill a fully blocked range's LSE is fill + log(n) rounded to float32 (a
 * 1/16 step at |fill| = 1e6), which bounds how exactly such ranges are weighed against each
 * other. With dropout the partials' masks index their own keys, so the merge equals one op over
 * all the keys in distribution only. */
CLATTN_API clattn_status clattn_attention_merge(clattn_context *ctx, int n,
                                                const clattn_tensor *outs,
                                                const clattn_tensor *lses,
                                                const clattn_tensor *out,
                                                const clattn_tensor *lse);

/* Packed variable-length batches (FlashAttention-2's varlen layout): B sequences' rows one after
 * another, no padding. cu_seqlens_q and cu_seqlens_k are host arrays of B + 1 cumulative lengths
 * (cu[0] = 0, nondecreasing, cu[B] = the total): sequence b's queries are rows cu_seqlens_q[b] ..
 * cu_seqlens_q[b + 1] - 1, its keys likewise. They are read during the call only: the lengths
 * decide the launches, as FlashAttention's max_seqlen arguments do. */
typedef struct {
    int batch;
    const int *cu_seqlens_q, *cu_seqlens_k;
} clattn_varlen;

/* Attention of each sequence's queries over its own keys: Q (total_q, Hq, d), K (total_k, Hkv,
 * d), V (total_k, Hkv, dv), out (total_q, Hq, dv), Hkv dividing Hq (query head h reads K/V head
 * h / (Hq / Hkv)). Sequence b computes exactly clattn_dot_product_attention of its (1, Hq, Q_b, d)
 * queries over its (1, Hkv, K_b, .) keys and values, nothing for any other: opts.mask's causal,
 * align, window and fill per sequence (bottom-right counts from that sequence's K_b - Q_b),
 * opts.scale, opts.alibi_slopes ((Hq) or (B, Hq)), opts.lse (total_q, Hq), the layout of out, so
 * that clattn_attention_merge takes both) and dropout (sequence b's stream is that op's with
 * offset opts.dropout.offset + b). No valid lengths, mask tensor or bias (the lengths are the
 * sequences'). A sequence with queries but no keys gets zeros (LSE -inf), as decoding does.
 * Q, K, V and out: float32, float16 or bfloat16 in any combination. */
CLATTN_API clattn_status clattn_varlen_attention(clattn_context *ctx, const clattn_tensor *Q,
                                                 const clattn_tensor *K, const clattn_tensor *V,
                                                 const clattn_varlen *seqs,
                                                 const clattn_attention_opts *opts,
                                                 const clattn_tensor *out);

/* A KV cache for decoding: k_cache (B, Hkv, Kmax, d) and v_cache (B, Hkv, Kmax, dv) of one dtype
 * (float32, float16 or bfloat16: clattn_decode_attention), lens
 * (B) int32 on the device: sequence b's first lens[b] cache rows are its keys (values outside
 * [0, Kmax - Qn with k_new, else Kmax] are clamped on the device, or with CLATTN_SYNC read back
 * and rejected). k_new (B, Hkv, Qn, d) and v_new (B, Hkv, Qn, dv), both or neither: written into
 * the caches at rows lens[b] .. lens[b] + Qn - 1 (in place) before attending, so that sequence b
 * then has lens[b] + Qn keys; advance = 1 (with k_new) adds Qn to lens in place afterwards. */
typedef struct {
    const clattn_tensor *k_cache, *v_cache, *lens;
    const clattn_tensor *k_new, *v_new;
    int advance;
} clattn_kv_cache;

/* Attention of Qn (1..64) new query rows per sequence over its cached keys: Q (B, Hq, Qn, d),
 * Hkv dividing Hq (query head h reads K/V head h / (Hq / Hkv)), out (B, Hq, Qn, dv). Row i of
 * sequence b sees its L_b keys (L_b = lens[b], + Qn with k_new); opts.mask.causal and the window
 * count from the bottom-right diagonal, key L_b - Qn + i, and need opts.mask.align =
 * CLATTN_ALIGN_BOTTOM_RIGHT; fill as for any mask. The same as clattn_dot_product_attention on
 * each sequence's first L_b keys; a sequence with no keys gets zeros (LSE -inf). opts.scale and
 * opts.lse (B, Hq, Qn) and opts.alibi_slopes ((Hq) or (B, Hq)) as there. Takes no valid lengths
 * or mask tensor (the cache's lens are the lengths) and no dropout. Head sizes d and dv up to 256
 * and Kmax up to 2^31 - 1105 (CLATTN_ERROR_UNSUPPORTED past them). The keys are split over work-groups (flash-decoding) and
 * merged, so that one sequence fills the device; nothing waits on the host. Dtypes: k_cache and
 * v_cache one of float32, float16 or bfloat16 (16-bit caches halve the bytes decoding streams),
 * k_new and v_new one (converted to the cache's as they are written), Q and out any; float32
 * arithmetic, opts.lse float32. */
CLATTN_API clattn_status clattn_decode_attention(clattn_context *ctx, const clattn_tensor *Q,
                                                 const clattn_kv_cache *cache,
                                                 const clattn_attention_opts *opts,
                                                 const clattn_tensor *out);

/* d2l's AdditiveAttention weights, PyTorch layout: W_q (h, q_size), W_k (h, k_size), w_v (1, h). */
typedef struct {
    const clattn_tensor *W_q, *W_k, *w_v;
} clattn_additive_weights;

/* queries (B, Q, q_size), keys (B, K, k_size), values (B, K, v) -> out (B, Q, v); weights (B, Q, K)
 * or NULL. opts as for clattn_dot_product_attention, over scores (B, Q, K): valid_lens (B) or
 * (B, Q), a mask tensor, causal and the window (with mask.align), a float bias, ALiBi slopes ((B)
 * or (1)), dropout and opts.lse (B, Q); not opts.saved. queries, keys, values, W_q,
 * W_k, w_v, out and weights: float32, float16 or bfloat16 in any combination (float32
 * projections, scores and probabilities). */
CLATTN_API clattn_status clattn_additive_attention(clattn_context *ctx,
                                                   const clattn_tensor *queries,
                                                   const clattn_tensor *keys,
                                                   const clattn_tensor *values,
                                                   const clattn_additive_weights *w,
                                                   const clattn_attention_opts *opts,
                                                   const clattn_tensor *out,
                                                   const clattn_tensor *weights);

/* d2l's MultiHeadAttention, PyTorch layout: W_q (hidden, q_size), W_k (kv_hidden, k_size), W_v
 * (kv_hidden, v_size), W_o (out_size, hidden); biases (hidden), (kv_hidden), (kv_hidden),
 * (out_size) or NULL (d2l: bias=False). num_heads divides hidden; head size dh = hidden /
 * num_heads. num_kv_heads: grouped-query (or multi-query, 1) attention, 0 = num_heads: it divides
 * num_heads, kv_hidden = num_kv_heads x dh, and query head h attends with K/V head
 * h / (num_heads / num_kv_heads), as PyTorch's enable_gqa. */
typedef struct {
    int num_heads;
    const clattn_tensor *W_q, *W_k, *W_v, *W_o;
    const clattn_tensor *b_q, *b_k, *b_v, *b_o;
    int num_kv_heads;
} clattn_mha_weights;

/* The elements of multi-head attention's opts.saved for these queries (B, Q, .), keys (B, K, .)
 * and weights: 2 B Q hidden + 2 B K kv_hidden + B num_heads Q; 0 when an argument is NULL. */
CLATTN_API size_t clattn_mha_saved_numel(const clattn_tensor *queries, const clattn_tensor *keys,
                                         const clattn_mha_weights *w);

/* queries (B, Q, q_size), keys (B, K, k_size), values (B, K, v_size) -> out (B, Q, out_size);
 * weights (B, H, Q, K) per head or NULL. valid_lens (B) or (B, Q) repeat over the heads; a mask
 * tensor broadcasts to (B, H, Q, K). One chain of enqueued kernels, intermediates in the context's
 * scratch arena, no host sync. queries, keys, values, every W and bias, and out: float32, float16
 * or bfloat16, weights too (the projections, heads and probabilities are float32). */
CLATTN_API clattn_status clattn_multihead_attention(clattn_context *ctx,
                                                    const clattn_tensor *queries,
                                                    const clattn_tensor *keys,
                                                    const clattn_tensor *values,
                                                    const clattn_mha_weights *w,
                                                    const clattn_attention_opts *opts,
                                                    const clattn_tensor *out,
                                                    const clattn_tensor *weights);

/* ---- training: backward passes and d2l's masked softmax cross-entropy loss ----
 * A backward op takes the forward's inputs (and what the forward saved, where it says so) and
 * the gradient of the loss with respect to the forward's output (the d-prefixed argument of the
 * output's name), and writes the gradients with respect to the inputs it is given tensors for
 * (NULL: not computed). Gradients overwrite their tensors; none accumulates into what they held
 * (where one input feeds several ops, add their gradients). Each gradient has its input's shape.
 * float32, except where an op says otherwise. The same inputs give the same bits on every run:
 * no floating-point atomics, sums in a fixed order.
 * The head transposes need no backward op: clattn_transpose_output with the same num_heads is
 * clattn_transpose_qkv's backward (it moves each gradient back to its element's place), and
 * clattn_transpose_qkv is clattn_transpose_output's. */

/* The gradient of clattn_masked_softmax with respect to its scores, from its output out and dout:
 * dscores = out * (dout - sum_k dout_k out_k) per row, over every key, and exactly 0 where the
 * mask blocks the key (masked_fill passes no gradient to a score it replaced), so a row whose
 * every key is blocked (valid length 0) gets zeros. mask: the forward's (its fill does not enter).
 * dscores may be dout itself (the same buf and offset: in place). */
CLATTN_API clattn_status clattn_masked_softmax_backward(clattn_context *ctx,
                                                        const clattn_tensor *out,
                                                        const clattn_tensor *dout,
                                                        const clattn_mask *mask,
                                                        const clattn_tensor *dscores);
/* The gradient of clattn_dropout: dx = dy * keep / (1 - p) with the forward's keep (the same p,
 * training, seed and offset draw the same Philox mask), i.e. the forward applied to dy. dy and
 * dx: float32, float16 or bfloat16 as the forward's x and y; dx may be dy (in place). */
CLATTN_API clattn_status clattn_dropout_backward(clattn_context *ctx, const clattn_tensor *dy,
                                                 const clattn_dropout_params *p,
                                                 const clattn_tensor *dx);
/* The gradients of clattn_matmul's C = alpha op(A) op(B) (+ beta C0, which needs none): dA =
 * alpha dC op(B)^T and dB = alpha op(A)^T dC, each transposed back to its operand's layout when
 * the forward read it transposed. A 2-D operand shared by a batched product gets the sum of every
 * batch's gradient (in batch order). dA or dB may be NULL. */
CLATTN_API clattn_status clattn_matmul_backward(clattn_context *ctx, const clattn_tensor *A,
                                                int trans_a, const clattn_tensor *B, int trans_b,
                                                float alpha, const clattn_tensor *dC,
                                                const clattn_tensor *dA, const clattn_tensor *dB);
/* The gradients of clattn_linear's y = x W^T + b: dx = dy W (x's shape), dW = dy^T x summed over
 * every leading index (out_features, in_features), db = dy summed likewise (out_features). Any of
 * dx, dW and db may be NULL. */
CLATTN_API clattn_status clattn_linear_backward(clattn_context *ctx, const clattn_tensor *x,
                                                const clattn_tensor *W, const clattn_tensor *dy,
                                                const clattn_tensor *dx, const clattn_tensor *dW,
                                                const clattn_tensor *db);

/* The gradients of an attention module's inputs (each NULL: not computed). */
typedef struct {
    const clattn_tensor *dQ, *dK, *dV; /* Q's, K's and V's shapes */
    const clattn_tensor *dbias;        /* opts.bias's shape: the scores' gradient summed over the
                                          dims the bias broadcasts along */
} clattn_attention_grads;

/* The gradients of clattn_dot_product_attention with respect to Q, K, V and opts.bias, from the
 * forward's Q, K, V and opts (its mask, bias, ALiBi slopes, scale and dropout: the same p, seed
 * and offset draw the forward's mask) and dout, the gradient of out (.., Q, dv). out: the
 * forward's output, or NULL; opts.lse: the forward's log-sum-exps (read, not written), or NULL.
 * With both (as the forward wrote them) and no dbias, the fused backward runs where the backward
 * variant is fused (CPU devices; README): the probabilities recomputed per tile from the LSE,
 * never a score-sized buffer. Otherwise the unfused chain computes the probabilities again from
 * Q and K, in two score-sized scratch buffers. Grouped-query attention: dK and dV (B, Hkv, .) sum
 * over the query heads sharing each K/V head. Masked keys get no gradient (as masked_fill's); a
 * row whose every key is blocked with a finite fill gets uniform weights and hence gradients in
 * dV only. */
CLATTN_API clattn_status clattn_dot_product_attention_backward(clattn_context *ctx,
                                                               const clattn_tensor *Q,
                                                               const clattn_tensor *K,
                                                               const clattn_tensor *V,
                                                               const clattn_attention_opts *opts,
                                                               const clattn_tensor *out,
                                                               const clattn_tensor *dout,
                                                               const clattn_attention_grads *grads);

/* The gradients of multi-head attention's inputs, weights and biases (each NULL: not computed;
 * each of its input's shape). dbias: opts.bias's. For self-attention (the same tensor as
 * queries, keys and values) the input's gradient is dqueries + dkeys + dvalues: add them. */
typedef struct {
    const clattn_tensor *dqueries, *dkeys, *dvalues;
    const clattn_tensor *dW_q, *dW_k, *dW_v, *dW_o;
    const clattn_tensor *db_q, *db_k, *db_v, *db_o;
    const clattn_tensor *dbias;
} clattn_mha_grads;

/* The gradients of clattn_multihead_attention from its inputs, weights (num_kv_heads too) and
 * opts (the mask, bias and dropout: the same p, seed and offset redraw the forward's mask), and
 * dout (B, Q, out_size). With opts.saved the forward's projections, attention output and LSE are
 * read from it; without, they are computed again (three projections and a fused attention, in
 * the context's scratch). Then W_o, the attention (clattn_dot_product_attention_backward with
 * that out and LSE) and the projections go backward. float32. */
CLATTN_API clattn_status clattn_multihead_attention_backward(clattn_context *ctx,
                                                             const clattn_tensor *queries,
                                                             const clattn_tensor *keys,
                                                             const clattn_tensor *values,
                                                             const clattn_mha_weights *w,
                                                             const clattn_attention_opts *opts,
                                                             const clattn_tensor *dout,
                                                             const clattn_mha_grads *grads);

/* The gradients of clattn_additive_scores (scores_ij = sum_h w_h tanh(qp_ih + kp_jh)) from
 * dscores (B, Q, K): dqp_ih = w_h sum_j dscores_ij (1 - tanh^2), dkp_jh likewise over i, dw_v_h =
 * sum_ij dscores_ij tanh, each summed in a fixed order and never holding the (B, Q, K, h)
 * features. dqp, dkp, dw_v: NULL or their input's shape. float32. */
CLATTN_API clattn_status clattn_additive_scores_backward(clattn_context *ctx,
                                                        const clattn_tensor *qp,
                                                        const clattn_tensor *kp,
                                                        const clattn_tensor *w_v,
                                                        const clattn_tensor *dscores,
                                                        const clattn_tensor *dqp,
                                                        const clattn_tensor *dkp,
                                                        const clattn_tensor *dw_v);

/* The gradients of additive attention's inputs and weights (each NULL: not computed; each of its
 * input's shape: dw_v as w_v, (1, h) or (h)). */
typedef struct {
    const clattn_tensor *dqueries, *dkeys, *dvalues, *dW_q, *dW_k, *dw_v;
} clattn_additive_grads;

/* The gradients of clattn_additive_attention from its inputs, weights and opts (mask and
 * dropout: the same p, seed and offset redraw the forward's mask) and dout (B, Q, v). The
 * projections, scores and probabilities are computed again; the scores' gradient goes back
 * through tanh in two kernels that recompute the features per (row, hidden unit), so the
 * (B, Q, K, h) feature tensor never exists. float32. */
CLATTN_API clattn_status clattn_additive_attention_backward(clattn_context *ctx,
                                                            const clattn_tensor *queries,
                                                            const clattn_tensor *keys,
                                                            const clattn_tensor *values,
                                                            const clattn_additive_weights *w,
                                                            const clattn_attention_opts *opts,
                                                            const clattn_tensor *dout,
                                                            const clattn_additive_grads *grads);

/* y += alpha x, elementwise (float32, the same shape; x must not overlap y): the update of an SGD
 * step, alpha = -learning rate, x a gradient and y its weight. alpha must be finite
 * (CLATTN_ERROR_INVALID_ARGUMENT otherwise). */
CLATTN_API clattn_status clattn_axpy(clattn_context *ctx, float alpha, const clattn_tensor *x,
                                     const clattn_tensor *y);

/* d2l's MaskedSoftmaxCELoss: logits (B, T, V), int32 labels (B, T), valid_len (B) int32 on the
 * device or NULL (every position counts) -> loss (B):
 *   loss[b] = 1/T sum_t w[b, t] ce[b, t],  ce = logsumexp(logits[b, t, :]) - logits[b, t, label],
 * w = 1 for t < valid_len[b], else 0 (d2l's sequence_mask), the mean over all T positions as
 * d2l's .mean(dim=1). As PyTorch's CrossEntropyLoss, a label of -100 (its ignore_index) makes ce
 * 0; every position is computed and weighted, so a NaN logit at a position with weight 0 still
 * makes its loss NaN, as 0 * NaN does in d2l's code. Device values cannot be checked without a
 * host sync: valid_len outside [0, T] is clamped, and a label outside [0, V) (other than -100)
 * makes ce NaN; with CLATTN_SYNC (params.sync) both are read back and rejected instead.
 * lse: NULL, or (B, T) float32: each position's log-sum-exp, saved for the backward (which then
 * needs no pass to find it again). Never materialises (B, T, V) probabilities. */
CLATTN_API clattn_status clattn_masked_softmax_ce_loss(clattn_context *ctx,
                                                       const clattn_tensor *logits,
                                                       const clattn_tensor *labels,
                                                       const clattn_tensor *valid_len,
                                                       const clattn_tensor *loss,
                                                       const clattn_tensor *lse);
/* Its gradient with respect to the logits, from the same logits, labels and valid_len, the
 * forward's lse (or NULL: computed again) and dloss (B):
 *   dlogits[b, t, v] = dloss[b] w[b, t] / T (softmax(logits[b, t])_v - [v == label]),
 * 0 times that at ignored labels (-100). dlogits may be logits itself (the same buf and offset:
 * in place, each row read before it is written). */
CLATTN_API clattn_status clattn_masked_softmax_ce_loss_backward(clattn_context *ctx,
                                                                const clattn_tensor *logits,
                                                                const clattn_tensor *labels,
                                                                const clattn_tensor *valid_len,
                                                                const clattn_tensor *lse,
                                                                const clattn_tensor *dloss,
                                                                const clattn_tensor *dlogits);

#ifdef __cplusplus
}
#endif
#endif
