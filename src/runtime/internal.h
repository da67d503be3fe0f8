/* Private to the library: the context, argument checks, program and launch helpers. */
#ifndef CLATTN_INTERNAL_H
#define CLATTN_INTERNAL_H

#include "clattn.h"
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

#define CLATTN_ERR_SIZE 16384

/* Scratch slots: each op layer owns one, so a module's intermediates (projections, heads) never
 * collide with the scores of the attention it calls or the packing buffers of its matmuls. */
enum {
    CLATTN_SCRATCH_MODULE = 0,
    CLATTN_SCRATCH_ATTN,
    CLATTN_SCRATCH_OP,
    CLATTN_SCRATCH_CAST, /* float32 copies of an op's 16-bit operands, alive within one op call */
    CLATTN_SCRATCH_COUNT
};

/* The program and kernel caches are arrays that grow without bound (a context builds a few dozen
 * programs); lookups scan them comparing a 64-bit hash before the key string. */
typedef struct {
    char *key;          /* "file|options" (heap, never truncated) */
    uint64_t hash;      /* FNV-1a of key */
    cl_program program;
    int from_disk;      /* loaded from the disk cache: rebuilt from source if it lacks a kernel */
    uint64_t cache_key; /* disk cache (cache.c), when enabled */
    size_t cache_size;  /* binary size the cache file holds, 0 = none */
    cl_event pending;   /* the first launch of a kernel not yet in the cache file */
} clattn_program_entry;

typedef struct {
    cl_program program; /* a kernel of a program rebuilt from source keeps its old program */
    char *name;         /* heap */
    cl_kernel kernel;
    int launched;
} clattn_kernel_entry;

struct clattn_context {
    cl_platform_id platform;
    cl_context cl;
    cl_device_id device;
    cl_command_queue queue;
    int owns_queue; /* created by clattn_context_create (destroy then finishes it) */
    cl_device_type type;
    char name[256], vendor[256], platform_name[256], platform_version[256], driver[128];
    char description[1280];
    size_t max_wg, max_alloc, local_mem;
    cl_uint native_float; /* CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT: 16 on AVX-512 CPUs */
    cl_uint base_align;   /* CL_DEVICE_MEM_BASE_ADDR_ALIGN, in bytes */
    cl_uint compute_units;
    int has_fp16;  /* the device has cl_khr_fp16 */
    int fp16_conv; /* how kernels convert float16 (the half tuning, context.c): CLATTN_FP16's
                    * value, 0 integer bits, 1 cl_khr_fp16, 2 clang's __fp16 */
    /* Loop iterations one work-item may run per launch, 0 = no limit: a device that leaves its
     * loops after a fixed count (Mesa's llvmpipe, see context.c) gets the kernels' work split over
     * several launches, each under the budget (clattn__loop_budget). */
    long loop_limit;
    int sync;
    /* Settings (params, else the environment): heap strings, "" when unset, so x[0] means "set";
     * never cut (a directory too long for its file paths fails context creation). */
    char *tuning;
    char *kernel_dir;
    char *cache_dir;
    int no_binary_cache; /* rusticl: cache_dir holds no program binaries (context.c), only the
                            tune file */
    /* The tune file (tunefile.c): its path ("" when off), its validated entries in CLATTN_TUNE's
     * syntax with op@bucket keys ("" when none), and the note on what came of it. */
    char *tune_path;
    char *tuned;
    char tune_note[4096 + 1024]; /* a path (PATH_MAX on Linux) and the reason */
    clattn_program_entry *programs;
    int nprograms, programs_cap;
    clattn_kernel_entry *kernels;
    int nkernels, kernels_cap;
    int dry_run; /* CHECK_DRY_RUN's first pass: build, set and size everything, enqueue nothing */
    cl_mem scratch[CLATTN_SCRATCH_COUNT];
    size_t scratch_bytes[CLATTN_SCRATCH_COUNT];
    int cache_hits, cache_writes; /* programs loaded from and written to the disk cache */
    char err[CLATTN_ERR_SIZE];
};

/* Room the file names under the directory settings take, slash and NUL included: cache files
 * "clattn-<16 hex>.bin" and mkstemp's ".XXXXXX" (cache.c), kernel files "<name>.cl" (program.c,
 * names under 30 characters). A directory whose longest path would pass CLATTN_PATH_MAX is
 * refused when the context is created, so path buffers of CLATTN_PATH_MAX bytes never cut. */
#ifdef PATH_MAX
#define CLATTN_PATH_MAX PATH_MAX
#else
#define CLATTN_PATH_MAX 4096
#endif
/* the longest file name in a cache directory: an entry's temporary name (cache.c create_temp) */
#define CLATTN_CACHE_FILE_ROOM                                                                   \
    sizeof("/clattn-0123456789abcdef.bin.-9223372036854775808-ffffffffffffffff-ffffffffffffffff-" \
           "99.tmp")
#define CLATTN_KERNEL_FILE_ROOM 32

/* ---- errors (status.c) ---- */
clattn_status clattn__fail(clattn_context *ctx, clattn_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Puts the formatted text before the last error (the context of a failure deeper down). */
void clattn__prefix_error(clattn_context *ctx, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
clattn_status clattn__cl_fail(clattn_context *ctx, cl_int err, const char *what);
const char *clattn__cl_error_name(cl_int err);
void clattn__clear_error(clattn_context *ctx);

/* One argument-check macro: on a false condition, record the message and jump to the single
 * cleanup label `fail` with `st` set. */
#define CHECK(ctx, cond, status, ...)                       \
    do {                                                    \
        if (!(cond)) {                                      \
            st = clattn__fail((ctx), (status), __VA_ARGS__); \
            goto fail;                                      \
        }                                                   \
    } while (0)

/* Checks an OpenCL return code the same way. */
#define CHECK_CL(ctx, expr, what)                  \
    do {                                           \
        cl_int e_ = (expr);                        \
        if (e_ != CL_SUCCESS) {                    \
            st = clattn__cl_fail((ctx), e_, what); \
            goto fail;                             \
        }                                          \
    } while (0)

/* The first statement of every public op that enqueues: runs the whole op once as a dry run (its
 * checks, every program built or loaded, every kernel argument set, scratch sized, nothing
 * enqueued), then goes on for real, so an op that fails leaves its outputs untouched. `self` is
 * the op's own call with its own arguments. */
#define CHECK_DRY_RUN(ctx, self)                   \
    do {                                           \
        if ((ctx) && !(ctx)->dry_run) {            \
            (ctx)->dry_run = 1;                    \
            st = (self);                           \
            (ctx)->dry_run = 0;                    \
            if (st != CLATTN_SUCCESS)              \
                goto fail;                         \
        }                                          \
    } while (0)

/* Propagates a clattn_status. */
#define CHECK_ST(expr)             \
    do {                           \
        st = (expr);               \
        if (st != CLATTN_SUCCESS)  \
            goto fail;             \
    } while (0)

/* ---- tensors (tensor.c) ---- */
/* Validates a view: non-NULL, a buffer of ctx's OpenCL context, rank in [min_rank, max_rank], a
 * known dtype equal to dtype, non-zero dims, fits in its buffer and in int32 indexing. name is the
 * argument's full name for messages ("opts.mask.valid_lens"). */
clattn_status clattn__check_tensor(clattn_context *ctx, const clattn_tensor *t, const char *name,
                                   clattn_dtype dtype, int min_rank, int max_rank);
/* As clattn__check_tensor, for any of the float dtypes (float32, float16, bfloat16). */
clattn_status clattn__check_float_tensor(clattn_context *ctx, const clattn_tensor *t,
                                         const char *name, int min_rank, int max_rank);
/* "(2, 3, 4)" */
const char *clattn__shape_str(const clattn_tensor *t, char *buf, size_t size);
size_t clattn__batch_count(const clattn_tensor *t, int inner_dims);
/* 1 when both views are the same cl_mem at the same offset (what in-place ops accept). */
int clattn__same_view(const clattn_tensor *a, const clattn_tensor *b);
/* 1 when two checked views share bytes: sub-buffers are resolved to their root buffer and origin,
 * and buffers over the application's memory (CL_MEM_USE_HOST_PTR) compare host addresses. */
int clattn__overlaps(const clattn_tensor *a, const clattn_tensor *b);
/* "float32", "int32", "float16", "bfloat16" or "unknown". */
const char *clattn__dtype_name(clattn_dtype d);
/* A tensor argument and its name for messages; t NULL = absent. */
typedef struct {
    const clattn_tensor *t;
    const char *name;
} clattn_arg;
/* A backward's gradient d of input x (both named in messages): NULL (not asked for), or float32
 * of x's shape; given while x is NULL (a bias the forward did not have) is an error. */
clattn_status clattn__check_grad(clattn_context *ctx, const clattn_tensor *d, const char *name,
                                 const clattn_tensor *x, const char *xname);
/* 1 when buf's memory starts on 64 bytes (kernels may then read rows through vector pointers). */
int clattn__aligned64(const clattn_context *ctx, cl_mem buf);
/* Whether t starts on a multiple of n elements in a 64-byte-aligned buffer (rows of a multiple of
 * n elements then start on vectors of n: the kernels' aligned moves). */
int clattn__vec_aligned(const clattn_context *ctx, const clattn_tensor *t, size_t n);
/* Fails naming both when an output overlaps an input or another output. All checked views. */
clattn_status clattn__check_no_overlap(clattn_context *ctx, const clattn_arg *outs, int nouts,
                                       const clattn_arg *ins, int nins);

/* ---- programs and launches (program.c) ---- */
/* Returns the kernel `name` of `file` built with the tuning defines `defines` ("-D A=1 ..."). */
clattn_status clattn__get_kernel(clattn_context *ctx, const char *file, const char *defines,
                                 const char *name, cl_kernel *out);
/* The most work-items per group the device compiled kernel k for (CL_KERNEL_WORK_GROUP_SIZE),
 * which can be below the device's maximum (llvmpipe: 32 for kernels with barriers). */
clattn_status clattn__kernel_group_size(clattn_context *ctx, cl_kernel k, const char *what,
                                        size_t *limit);
/* Enqueues an NDRange; lws may be NULL. Honours sync mode. A dry run checks the work-group
 * against the kernel's limit and enqueues nothing. */
clattn_status clattn__launch(clattn_context *ctx, cl_kernel k, cl_uint dims, const size_t *gws,
                             const size_t *lws, const char *what);
/* Sets kernel args from a list: pairs of (size, pointer), ended by size 0. */
clattn_status clattn__set_args(clattn_context *ctx, cl_kernel k, const char *what, ...);
/* The same from argument index `first` on. */
clattn_status clattn__set_args_at(clattn_context *ctx, cl_kernel k, const char *what,
                                  cl_uint first, ...);
/* Enqueues a buffer copy of `bytes` (nothing in a dry run). Honours sync mode. */
clattn_status clattn__copy(clattn_context *ctx, cl_mem src, size_t src_bytes_off, cl_mem dst,
                           size_t dst_bytes_off, size_t bytes, const char *what);
/* Enqueues a fill of the float view t (float32, or 16-bit: value rounded to its dtype) with
 * value; nothing in a dry run. Honours sync mode. */
clattn_status clattn__fill(clattn_context *ctx, const clattn_tensor *t, float value,
                           const char *what);
/* Appends " -D name=code" to the defines in buf (size bytes) when dtype is a 16-bit one (the
 * kernels' operand type codes, kernels/dtype.cl); float32, their default, adds nothing, so the
 * float32 programs keep their options. Returns buf. */
/* y = x converted to y's dtype (same shape, any two float dtypes; copies when they match),
 * unchecked. */
clattn_status clattn__enqueue_convert(clattn_context *ctx, const clattn_tensor *x,
                                      const clattn_tensor *y);
/* Float32 stand-ins for an op's 16-bit operands: out[i] is ts[i] itself when it is float32 (or
 * NULL: left unset), else a float32 view in the CAST scratch, holding ts[i]'s values when load[i].
 * clattn__cast_out rounds a stand-in's results into the operand (nothing when it is the operand). */
clattn_status clattn__cast_in(clattn_context *ctx, const clattn_tensor *const *ts, const int *load,
                              int n, clattn_tensor *out);
clattn_status clattn__cast_out(clattn_context *ctx, const clattn_tensor *t32,
                               const clattn_tensor *t);
/* Appends "-D name=value " to the build options in buf (as much as fits); the dtype form appends
 * nothing for float32, the kernels' default. Both return buf. */
char *clattn__define(char *buf, size_t size, const char *name, int value);
char *clattn__dtype_define(char *buf, size_t size, const char *name, clattn_dtype dtype);
/* The defines of a program of kernels both shapes use (decoding's merge, append and advance,
 * linear's column sums): neither shape's main kernels (common.cl's CLATTN_SHAPES; a variant's
 * tuning defines name its own). */
#define SHARED_ONLY "-D CLATTN_SHAPES=0 "
#define ARG(x) sizeof(x), (const void *)&(x)
#define ARGS_END ((size_t)0)
/* Builds the complete option string of a program (common options + tuning defines) into buf;
 * returns its length, as snprintf does (>= size: it did not fit). */
int clattn__build_options(const clattn_context *ctx, const char *defines, char *buf, size_t size);
/* Embedded sources (generated kernels.c); NULL when unknown. */
const char *clattn__embedded_source(const char *file);
void clattn__release_programs(clattn_context *ctx);

/* ---- program binary cache on disk (cache.c), used when ctx->cache_dir is set ---- */
#define CLATTN_FNV_OFFSET 0xcbf29ce484222325ull
/* FNV-1a 64 of n bytes, continuing from h (CLATTN_FNV_OFFSET to start). */
uint64_t clattn__fnv1a(uint64_t h, const void *data, size_t n);
/* path opened for reading when it is a regular file, else NULL: never blocks (O_NONBLOCK), so a
 * FIFO in a cache or kernel directory cannot hang the caller. */
FILE *clattn__open_regular(const char *path);
/* FNV-1a 64 of the expanded source, the options, the platform, device and driver, and clattn. */
uint64_t clattn__cache_key(const clattn_context *ctx, const char *src, const char *options);
/* The program built from the file of key, or NULL when there is none or it is corrupt or stale.
 * *size is the binary's size. */
cl_program clattn__cache_load(clattn_context *ctx, uint64_t key, size_t *size);
/* Writes p's binary under key unless it still has *size bytes (then updated); never fails. */
void clattn__cache_save(clattn_context *ctx, cl_program p, uint64_t key, size_t *size);

/* ---- scratch (context.c) ---- */
/* A buffer of at least `bytes` in the given slot, grown on demand (never shrunk). */
clattn_status clattn__scratch(clattn_context *ctx, int slot, size_t bytes, cl_mem *out);

/* ---- device selection (device.c) ---- */
typedef struct {
    int platform_index, device_index;
    cl_device_type type;
    const char *platform_name, *platform_vendor, *device_name, *vendor;
} clattn_device_desc;
/* Index into descs of the device that spec selects, or -1. spec NULL/empty = default rule. Pure
 * function, testable without devices. */
int clattn__match_device(const char *spec, const clattn_device_desc *descs, int n);
/* Whether a PoCL CPU device of this platform version aborts building the GPU-shaped kernels
 * under the work-group method wg_method (POCL_WORK_GROUP_METHOD, or NULL): tuning.c. */
int clattn__pocl_gpu_shapes_abort(const char *platform_version, const char *wg_method);
/* Resolves spec (NULL = CLATTN_DEVICE) to a device, or fails listing every device. */
clattn_status clattn__select_device(const char *spec, cl_platform_id *platform,
                                    cl_device_id *device);

/* ---- tuning (tuning.c) ---- */
#define CLATTN_MAX_TUNE_PARAMS 12
typedef struct {
    char variant[32];
    int nparams;
    char names[CLATTN_MAX_TUNE_PARAMS][24];
    int values[CLATTN_MAX_TUNE_PARAMS];
    char defines[512]; /* "-D NAME=value ..." for the kernel build */
    int max_head;      /* the largest head size the fused kernels' limits were checked at; 0 =
                          every head size (256): a bucketed entry (op@d64) needs only its own */
} clattn_tuning;
/* Sets parameter `name` of t (one it has) and rewrites its defines. */
void clattn__tune_set(clattn_tuning *t, const char *name, int value);
/* Variant and parameters of `op` for this device: the override (CLATTN_TUNE, params.tuning),
 * else the tune file's entry for op@bucket, else for op, else the table's choice. bucket: NULL,
 * or the shape's bucket (clattn__head_bucket). */
clattn_status clattn__tune(clattn_context *ctx, const char *op, clattn_tuning *out);
clattn_status clattn__tune_bucket(clattn_context *ctx, const char *op, const char *bucket,
                                  clattn_tuning *out);
/* The bucket of the fused kernels' head sizes d and dv (the larger): "d64", "d128", "d256". */
const char *clattn__head_bucket(size_t d, size_t dv);
/* The bucket of a GEMM of m x n x k products per batch: "small" up to 2^24 (256^3), else NULL. */
const char *clattn__gemm_bucket(double m, double n, double k);
/* 1 when op takes bucket in a tune file (op@bucket=...). */
int clattn__bucket_known(const char *op, const char *bucket);
/* Reads the tune file at context creation (tunefile.c); never fails the context. */
void clattn__load_tune_file(clattn_context *ctx);
int clattn__tune_int(const clattn_tuning *t, const char *name, int fallback);
/* Loop iterations one work-item may run per launch of a GPU-shaped kernel of t, 0 = no limit:
 * t's LOOPS when set (an override, to exercise the split launches anywhere), else the device's
 * loop_limit. Ops count their kernels' iterations as llvmpipe does, every iteration of every loop
 * plus one per loop entered (loops the compiler may unroll included), and split their work so
 * that each launch stays under it. */
long clattn__loop_budget(const clattn_context *ctx, const clattn_tuning *t);
/* How many of `count` units of work (TSK steps, key tiles, key blocks; 1 for work that is not
 * split) one launch takes when each work-item runs `fixed` loop iterations plus `per_unit` per
 * unit: all of them without a budget (0), else as many as fit, at least one, or
 * CLATTN_ERROR_UNSUPPORTED naming the work one unit is (printf format `what` and its arguments,
 * formatted only then). */
clattn_status clattn__loop_units(clattn_context *ctx, long budget, long fixed, long per_unit,
                                 size_t count, size_t *units, const char *what, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 7, 8)))
#endif
    ;
/* The smallest budget under which every call of matmul=gpu, attention=gpu with t's parameters
 * still runs (matmul.c, flash.c), and softmax=gpu a row of one key (softmax.c; longer rows may
 * be refused): tuning.c refuses LOOPS below it. */
long clattn__matmul_gpu_min_loops(const clattn_tuning *t);
/* The smallest side matmul=gpu's launch may halve a tile side ts to (kept a multiple of wpt). */
int clattn__smallest_tile(int ts, int wpt);
long clattn__flash_gpu_min_loops(const clattn_tuning *t);
/* Bytes of local memory flash_gpu takes with BK-key tiles at padded head sizes dp, dvp. */
size_t clattn__flash_gpu_local(size_t BK, size_t dp, size_t dvp);
long clattn__softmax_gpu_min_loops(const clattn_tuning *t);
/* decode=gpu: one tile of WG keys at the largest head sizes (decode.c). */
long clattn__decode_gpu_min_loops(const clattn_tuning *t);
/* Validates the whole override string (unknown ops, variants, parameters are errors). */
clattn_status clattn__check_tuning(clattn_context *ctx);
/* Every (op, defines) the table can build: each variant's defaults and each rule's parameters.
 * Writes up to max entries and returns the count (tools/clattn-kernels, portability tests). */
typedef struct {
    const char *op, *variant;
    char defines[512];
} clattn_variant_info;
int clattn__variant_list(clattn_variant_info *out, int max);

/* ---- shared op entry points (arguments already checked) ---- */
/* matmul.c: C = alpha op(A) op(B) + beta C + bias (bias NULL or (N)). */
clattn_status clattn__enqueue_matmul(clattn_context *ctx, const clattn_tensor *A, int trans_a,
                                     const clattn_tensor *B, int trans_b, float alpha, float beta,
                                     const clattn_tensor *bias, const clattn_tensor *C);

/* matmul.c: dx = dy W, dW = dy^T x and db = dy's column sums over every row of x (..., in) and
 * dy (..., out), W (out, in); any of dx, dW, db NULL (float32, checked). */
clattn_status clattn__enqueue_linear_backward(clattn_context *ctx, const clattn_tensor *x,
                                              const clattn_tensor *W, const clattn_tensor *dy,
                                              const clattn_tensor *dx, const clattn_tensor *dW,
                                              const clattn_tensor *db);
/* matmul.c: db (cols, contiguous) = the column sums of x2 (rows, cols), rows in order. */
clattn_status clattn__enqueue_column_sums(clattn_context *ctx, const clattn_tensor *x2,
                                         const clattn_tensor *db);
/* softmax.c: kernels of one row per work-item or per work-group, in the softmax variant's shape
 * (softmax.cl, loss.cl). The kernel `name`_rows (CPU shape) or `name`_wg (GPU shape, its
 * work-group size fitted to what the device compiled, in *WG) of file, built with t's defines and
 * the dtypes xt and yt as XT and YT. */
clattn_status clattn__rows_kernel(clattn_context *ctx, clattn_tuning *t, const char *file,
                                 const char *name, clattn_dtype xt, clattn_dtype yt, cl_kernel *k,
                                 int *WG);
/* Launches it over nrows rows of K elements: one row per work-item (lws as given, 0 = the
 * device's choice) or per group of WG items (its passes over a row checked against the loop
 * budget). */
clattn_status clattn__launch_rows(clattn_context *ctx, const clattn_tuning *t, cl_kernel k,
                                 int nrows, int K, int WG, size_t lws, const char *what);

/* misc */
static inline size_t clattn__round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }
static inline size_t clattn__div_up(size_t x, size_t m) { return (x + m - 1) / m; }

#endif
