/* Per-device kernel variants and parameters: a const table plus the CLATTN_TUNE override.
 *
 * Override syntax (CLATTN_TUNE or clattn_params.tuning), comma-separated entries:
 *     op=variant[:NAME=value]...      e.g.  "matmul=gpu:TSM=64,softmax=gpu:WG=64"
 * An entry replaces the table's choice for that op; parameters not named keep the variant's
 * defaults. Unknown ops, variants or parameter names, an op or a parameter given twice, empty
 * entries and values outside a parameter's range are errors, never ignored or clamped: an
 * override that is accepted computes correct results on every call. */
#include "internal.h"
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Constraints on a parameter's value besides [min, max]. */
enum { ANY = 0, POW2 = 1, MUL16 = 2 };

typedef struct {
    const char *name;
    int min, max, flags;
} param_range;

/* A variant's cross-parameter and device rules: 1 when t meets them, else 0 with the reason in
 * why. Device limits that are 0 (no device: tools/clattn-kernels) are not checked. */
typedef int (*variant_check)(const clattn_context *ctx, const clattn_tuning *t, char *why,
                             size_t n);
/* Shrinks the table's own choice to this device's limits; overrides are checked, never shrunk. */
typedef void (*variant_fit)(const clattn_context *ctx, clattn_tuning *t);

typedef struct {
    const char *op, *variant;
    const char *params;         /* defaults, "NAME=value:NAME=value" */
    const param_range *ranges;  /* every parameter the variant has, ended by a NULL name */
    variant_check check;        /* NULL: none */
    variant_fit fit;            /* NULL: none */
} variant_def;

static int param(const clattn_tuning *t, const char *name)
{
    return clattn__tune_int(t, name, 0);
}

/* Largest head sizes the fused kernels take (FLASH_MAX_DIM in flash.c): their parameters are
 * checked for these, so that every head size runs. */
#define MAX_HEAD 256

/* PoCL (and other CPU runtimes) run a work-group's items as a loop in one thread, whose stack
 * holds the private arrays of every item of the group at once; the thread stack is the process's
 * stack limit (ulimit -s, 8 MiB by default). Measured with PoCL 3.1 at head size 256: flash_cpu
 * with QR=16 runs with QG=384 in one item (about 6.8 MiB by private_cpu below, before its
 * outputs' totals) and dies with SIGSEGV at QG=512 (9 MiB); QR=16:QG=1 runs with 128 items per
 * group (5.7 MiB) and dies with 4096. Parameters whose private arrays could pass this budget per
 * work-group are refused (for the CPU shape everywhere, for the GPU shape on CPU devices): 8x
 * under the default stack, and still 2x under a 2 MiB one. */
#define CPU_PRIVATE_BUDGET (1u << 20)

/* The head size t's limits are checked at: its bucket's largest, else MAX_HEAD. */
static size_t head_of(const clattn_tuning *t)
{
    return t->max_head > 0 ? (size_t)t->max_head : MAX_HEAD;
}

/* Private bytes of one flash_cpu work-item at head size H (DVP = H): per row group QG x QR rows
 * of state (the last blocks' outputs and the totals, DVP floats each, a float16 of sums and one
 * of their compensations, max, correction, row and limit), per group in flight QR
 * rows of scores and probabilities (KB floats each) and of outputs, plus the K and V vectors of
 * one step. */
static size_t private_cpu(size_t QR, size_t KB, size_t QG, size_t H)
{
    size_t row_state = H * 8 + 128 + 16, row_work = 8 * KB + H * 4 + 64 + 12;
    return QG * QR * row_state + 8 * QG + QR * row_work + 4 * KB + H * 4 + 64;
}

/* flash_gpu keeps its row of q (DP), of the output and its compensation (DVP each) and the BK
 * scores of a tile in private memory, live across the group's barriers. */
static size_t private_gpu(size_t BK, size_t H)
{
    return (3 * H + BK) * 4 + 64;
}

static int is_cpu(const clattn_context *ctx)
{
    return (ctx->type & CL_DEVICE_TYPE_CPU) != 0;
}

static void set(clattn_tuning *t, const char *name, int value)
{
    for (int i = 0; i < t->nparams; i++)
        if (strcmp(t->names[i], name) == 0)
            t->values[i] = value;
}

static int matmul_cpu_check(const clattn_context *ctx, const clattn_tuning *t, char *why, size_t n)
{
    int TM = param(t, "TM"), TN = param(t, "TN"), VN = param(t, "VN");
    (void)ctx;
    if (TN % VN != 0)
        snprintf(why, n, "TN=%d must be a multiple of VN=%d", TN, VN);
    else if (TM * (TN / VN) > 64) /* accumulators past 64 vectors only spill (and compile slowly) */
        snprintf(why, n, "the register tile TM x TN / VN = %d x %d / %d = %d vectors is over 64",
                 TM, TN, VN, TM * (TN / VN));
    else
        return 1;
    return 0;
}

/* 1 when the loop budget for t (LOOPS, else the device's) is no more than the device allows and
 * at least what every call needs at worst (need), else 0 with the reason in why. */
static int loops_check(const clattn_context *ctx, const clattn_tuning *t, long need, char *why,
                       size_t n)
{
    long loops = param(t, "LOOPS"), budget = clattn__loop_budget(ctx, t);
    if (loops && ctx->loop_limit && loops > ctx->loop_limit)
        snprintf(why, n, "LOOPS=%ld is over this device's loop budget %ld (Mesa's llvmpipe leaves "
                 "a work-item's loops after 65535 iterations)", loops, ctx->loop_limit);
    else if (budget && budget < need)
        snprintf(why, n, "a loop budget of %ld iterations is under the %ld one launch of these "
                 "tiles needs at worst%s", budget, need, loops ? ": raise LOOPS" : "");
    else
        return 1;
    return 0;
}

static int matmul_gpu_check(const clattn_context *ctx, const clattn_tuning *t, char *why, size_t n)
{
    int TSM = param(t, "TSM"), TSN = param(t, "TSN"), TSK = param(t, "TSK");
    int WPTM = param(t, "WPTM"), WPTN = param(t, "WPTN");
    if (TSM % WPTM != 0 || TSN % WPTN != 0) {
        snprintf(why, n, "TSM=%d must be a multiple of WPTM=%d and TSN=%d of WPTN=%d", TSM, WPTM,
                 TSN, WPTN);
        return 0;
    }
    int threads = (TSM / WPTM) * (TSN / WPTN);
    if (TSM * TSK % threads != 0 || TSN * TSK % threads != 0) {
        snprintf(why, n, "the TSM x TSK and TSN x TSK tiles (%dx%d, %dx%d) must split evenly "
                 "over the (TSM/WPTM) x (TSN/WPTN) = %d work-items of a group", TSM, TSK, TSN, TSK,
                 threads);
        return 0;
    }
    /* The launch halves a tile that does not fit the device; what it cannot reach is refused. */
    int sm = clattn__smallest_tile(TSM, WPTM), sn = clattn__smallest_tile(TSN, WPTN);
    size_t group = (size_t)(sm / WPTM) * (size_t)(sn / WPTN);
    size_t local = (size_t)TSK * (size_t)(sm + sn + 2) * 4;
    if ((ctx->max_wg && group > ctx->max_wg) || (ctx->local_mem && local > ctx->local_mem)) {
        snprintf(why, n, "even halved to TSM=%d TSN=%d the tile needs %zu work-items and %zu "
                 "bytes of local memory per group (device: %zu and %zu)", sm, sn, group, local,
                 ctx->max_wg, ctx->local_mem);
        return 0;
    }
    return loops_check(ctx, t, clattn__matmul_gpu_min_loops(t), why, n);
}

/* 1 when parameter `name`, a group of `items` work-items, exceeds the device (reason in why). */
static int over_max_wg(const clattn_context *ctx, const char *name, int items, char *why,
                       size_t n)
{
    if (!ctx->max_wg || (size_t)items <= ctx->max_wg)
        return 0;
    snprintf(why, n, "%s=%d is over this device's maximum work-group size %zu", name, items,
             ctx->max_wg);
    return 1;
}

static int softmax_gpu_check(const clattn_context *ctx, const clattn_tuning *t, char *why, size_t n)
{
    return !over_max_wg(ctx, "WG", param(t, "WG"), why, n) &&
           loops_check(ctx, t, clattn__softmax_gpu_min_loops(t), why, n);
}

static void softmax_gpu_fit(const clattn_context *ctx, clattn_tuning *t)
{
    int WG = param(t, "WG");
    while (ctx->max_wg && (size_t)WG > ctx->max_wg && WG > 1)
        WG /= 2;
    set(t, "WG", WG);
}

static int attention_cpu_check(const clattn_context *ctx, const clattn_tuning *t, char *why,
                               size_t n)
{
    int QR = param(t, "QR"), KB = param(t, "KB"), WG = param(t, "WG"), QG = param(t, "QG");
    size_t bytes = (size_t)WG * private_cpu((size_t)QR, (size_t)KB, (size_t)QG, head_of(t));
    if (bytes > CPU_PRIVATE_BUDGET) { /* the CPU shape: on a GPU this much would all spill */
        snprintf(why, n, "WG=%d items of QG=%d x QR=%d rows (KB=%d) need about %zu KiB of private "
                 "memory per work-group at head size %d, over the %u KiB a CPU thread's stack "
                 "is trusted with: lower WG, QG, QR or KB", WG, QG, QR, KB, bytes >> 10,
                 (int)head_of(t), CPU_PRIVATE_BUDGET >> 10);
        return 0;
    }
    return !over_max_wg(ctx, "WG", WG, why, n);
}

static int attention_gpu_check(const clattn_context *ctx, const clattn_tuning *t, char *why,
                               size_t n)
{
    int BQ = param(t, "BQ"), BK = param(t, "BK");
    size_t H = head_of(t);
    size_t local = clattn__flash_gpu_local((size_t)BK, H, H);
    size_t bytes = (size_t)BQ * private_gpu((size_t)BK, H);
    /* PoCL 3.1 computes wrong outputs when a group has more items than the K tile has floats
     * (BK x DP; DP, the padded head size, is at least 16), Oclgrind does not; neither an
     * atomic-free group vote nor equal trip counts in the tile loads changed that. Refused. */
    if (BQ > 16 * BK)
        snprintf(why, n, "BQ=%d is over 16 x BK=%d (flash_gpu on PoCL miscomputes groups with "
                 "more items than K-tile floats)", BQ, BK);
    else if (over_max_wg(ctx, "BQ", BQ, why, n))
        return 0;
    else if (ctx->local_mem && local > ctx->local_mem)
        snprintf(why, n, "BK=%d key tiles need %zu bytes of local memory at head size %d, over "
                 "this device's %zu", BK, local, (int)H, ctx->local_mem);
    else if (is_cpu(ctx) && bytes > CPU_PRIVATE_BUDGET)
        snprintf(why, n, "BQ=%d items (BK=%d) need about %zu KiB of private memory per "
                 "work-group at head size %d, over the %u KiB a CPU device's thread stack is "
                 "trusted with", BQ, BK, bytes >> 10, (int)H, CPU_PRIVATE_BUDGET >> 10);
    else
        return loops_check(ctx, t, clattn__flash_gpu_min_loops(t), why, n);
    return 0;
}

static void attention_gpu_fit(const clattn_context *ctx, clattn_tuning *t)
{
    int BQ = param(t, "BQ"), BK = param(t, "BK");
    while (ctx->max_wg && (size_t)BQ > ctx->max_wg && BQ > 1)
        BQ /= 2;
    while (ctx->local_mem && BK > 1 &&
           clattn__flash_gpu_local((size_t)BK, MAX_HEAD, MAX_HEAD) > ctx->local_mem)
        BK /= 2;
    while (BQ > 16 * BK)
        BQ /= 2;
    set(t, "BQ", BQ);
    set(t, "BK", BK);
}

/* Local memory of decode_gpu at head size H: RQ rows of q and of scores, four floats per row,
 * and the staged keys (WG rows of min(KC, H) + 1 floats). */
static size_t local_decode_gpu(size_t RQ, size_t WG, size_t KC, size_t H)
{
    return (RQ * (H + WG + 4) + WG * ((KC < H ? KC : H) + 1)) * 4;
}

/* decode_gpu: the first RQ items of a group take one row each (RQ <= WG); private memory as
 * attention's (q and outputs in local memory or few per item here). */
static int decode_gpu_check(const clattn_context *ctx, const clattn_tuning *t, char *why, size_t n)
{
    int RQ = param(t, "RQ"), WG = param(t, "WG"), KC = param(t, "KC");
    size_t local = local_decode_gpu((size_t)RQ, (size_t)WG, (size_t)KC, head_of(t));
    if (RQ > WG)
        snprintf(why, n, "RQ=%d rows are over WG=%d items (one item per row takes its maximum "
                 "and sum)", RQ, WG);
    else if (over_max_wg(ctx, "WG", WG, why, n))
        return 0;
    else if (ctx->local_mem && local > ctx->local_mem)
        snprintf(why, n, "WG=%d, RQ=%d, KC=%d need %zu bytes of local memory at head size %d, "
                 "over this device's %zu", WG, RQ, KC, local, (int)head_of(t), ctx->local_mem);
    else
        return loops_check(ctx, t, clattn__decode_gpu_min_loops(t), why, n);
    return 0;
}

static void decode_gpu_fit(const clattn_context *ctx, clattn_tuning *t)
{
    int WG = param(t, "WG"), RQ = param(t, "RQ"), KC = param(t, "KC");
    while (ctx->max_wg && (size_t)WG > ctx->max_wg && WG > 1)
        WG /= 2;
    RQ = RQ < WG ? RQ : WG;
    while (ctx->local_mem && KC > 1 &&
           local_decode_gpu((size_t)RQ, (size_t)WG, (size_t)KC, MAX_HEAD) > ctx->local_mem)
        KC /= 2;
    set(t, "WG", WG);
    set(t, "RQ", RQ);
    set(t, "KC", KC);
}

/* Parameter ranges; names are the kernels' #define names. Bounds are what the kernels support
 * (vector widths, 16-key blocks, QR <= 16 row corrections in one float16) or lie past any useful
 * tile; the budgets and cross-parameter rules are the check functions above. Compile time grows
 * with the unrolled tiles: PoCL 3.1 builds flash_cpu for head size 256 in about 10 s at the
 * defaults and 2-4 minutes at QR=16. matmul=cpu TN: pack_b_panels transposes 16 x TN floats
 * fully unrolled, 30 s at TN=256 and 14 minutes at TN=512. */
static const param_range matmul_cpu_ranges[] = {
    {"TM", 1, 64, ANY},  {"TN", 8, 256, ANY},  {"VN", 8, 16, POW2},
    {"KC", 1, 1 << 20, ANY}, {"RB", 1, 1 << 20, ANY}, {"PK", 1, 1 << 20, ANY}, {NULL, 0, 0, 0}};
/* LOOPS (GPU shapes): the loop budget per work-item and launch (clattn__loop_budget), 0 = the
 * device's; a host-side parameter, never passed to the kernel build. */
#define LOOPS_RANGE {"LOOPS", 0, 1 << 30, ANY}
static const param_range matmul_gpu_ranges[] = {
    {"TSM", 1, 256, ANY}, {"TSN", 1, 256, ANY}, {"TSK", 1, 64, ANY},
    {"WPTM", 1, 16, ANY}, {"WPTN", 1, 16, ANY}, LOOPS_RANGE, {NULL, 0, 0, 0}};
/* The row kernel has float8 and float16 paths only. */
static const param_range softmax_cpu_ranges[] = {{"VW", 8, 16, POW2}, {NULL, 0, 0, 0}};
/* The tree reductions halve the group. */
static const param_range softmax_gpu_ranges[] = {{"WG", 1, 1024, POW2}, LOOPS_RANGE,
                                                 {NULL, 0, 0, 0}};
/* Keys are handled 16 at a time and the row corrections live in one float16 (QR <= 16). */
static const param_range attention_cpu_ranges[] = {
    {"QR", 1, 16, ANY}, {"KB", 16, 256, MUL16}, {"WG", 1, 256, ANY}, {"QG", 1, 64, ANY},
    {"VC", 16, 256, POW2}, {NULL, 0, 0, 0}};
static const param_range attention_gpu_ranges[] = {
    {"BQ", 1, 1024, ANY}, {"BK", 1, 256, ANY}, LOOPS_RANGE, {NULL, 0, 0, 0}};
/* RQ query rows per item (private q and output rows), SK keys per split (host-side too). */
static const param_range decode_cpu_ranges[] = {
    {"RQ", 1, 16, ANY}, {"SK", 16, 1 << 20, MUL16}, {NULL, 0, 0, 0}};
/* decode=gpu's WG from 3: with one item per group, and with two at value head sizes past 16, PoCL
 * 3.1's compiler aborts the process building decode_gpu (an assertion in its parallel-region
 * pass: exit != NULL; 3 and up build at every head size), and such groups are never a GPU's
 * choice. */
static const param_range decode_gpu_ranges[] = {
    {"RQ", 1, 16, ANY}, {"WG", 3, 1024, ANY}, {"SK", 16, 1 << 20, MUL16}, {"KC", 1, 256, ANY},
    LOOPS_RANGE, {NULL, 0, 0, 0}};
/* CH: key chunks per K/V head (0: the host's choice), each with its own partial dQ. */
static const param_range backward_cpu_ranges[] = {
    {"QR", 1, 16, ANY}, {"KB", 16, 256, MUL16}, {"VC", 16, 256, MUL16}, {"CH", 0, 4096, ANY},
    {NULL, 0, 0, 0}};
static const param_range no_ranges[] = {{NULL, 0, 0, 0}};

static int half_fp16_check(const clattn_context *ctx, const clattn_tuning *t, char *why, size_t n)
{
    (void)t;
    if (!ctx->has_fp16)
        snprintf(why, n, "the device has no cl_khr_fp16");
    return ctx->has_fp16;
}

/* Every variant the library can build. */
static const variant_def variants[] = {
    /* CPU shape: packed panels; each work-item owns a TN-wide column strip over RB row panels,
     * k-blocked by KC, with a TM x TN register tile of VN-wide vectors; PK k per packing item.
     * The defaults fit AVX2's 16 vector registers (12 accumulators); AVX-512 devices get a rule. */
    {"matmul", "cpu", "TM=6:TN=16:VN=8:KC=4096:RB=32:PK=16", matmul_cpu_ranges, matmul_cpu_check,
     NULL},
    /* GPU shape: TSM x TSN work-group tiles staged through local memory TSK deep, a WPTM x WPTN
     * register sub-tile per work-item (256 work-items, 16.5 KiB of local memory). The launch
     * halves a tile that does not fit the device (matmul.c). */
    {"matmul", "gpu", "TSM=128:TSN=128:TSK=16:WPTM=8:WPTN=8", matmul_gpu_ranges, matmul_gpu_check,
     NULL},
    /* CPU shape: one work-item per row, VW-wide vectors (float8 by default; AVX-512 devices get
     * a rule), three passes over the row (fits in L1). */
    {"softmax", "cpu", "VW=8", softmax_cpu_ranges, NULL, NULL},
    /* GPU shape: one work-group per row, tree reductions in local memory. */
    {"softmax", "gpu", "WG=128", softmax_gpu_ranges, softmax_gpu_check, softmax_gpu_fit},
    /* CPU shape: fused, QR query rows x KB keys in vector registers, K and V packed per block,
     * QG row groups per work-item sharing each block in L1, WG items of one batch per work-group,
     * P V taken VC output columns at a time. The defaults suit AVX-512's 32 registers: 5 x 64
     * outputs (20 accumulators) per pass, all of a head of 64 at once; wider heads take passes
     * rather than spill. */
    {"attention", "cpu", "QR=5:KB=64:WG=8:QG=2:VC=64", attention_cpu_ranges, attention_cpu_check,
     NULL},
    /* GPU shape: fused, a work-group of BQ rows shares BK-key tiles of K and V in local memory. */
    {"attention", "gpu", "BQ=64:BK=16", attention_gpu_ranges, attention_gpu_check,
     attention_gpu_fit},
    /* GEMM, masked softmax, GEMM: the path taken whenever the weights are returned. */
    {"attention", "unfused", "", no_ranges, NULL, NULL},
    /* KV-cache decoding, CPU shape: a work-item per (split of SK keys, RQ query rows, K/V head),
     * 16 keys at a time; RQ=4 takes a grouped-query head's 4 query heads at once (decode.c
     * spreads fewer rows evenly); SK=1024 was 1.05-1.1x SK=128-512 on an AVX2 EPYC (B 1 and 8,
     * Hkv 8, d 128). */
    {"decode", "cpu", "RQ=4:SK=1024", decode_cpu_ranges, NULL, NULL},
    /* GPU shape: a work-group of WG items per split walks its keys WG at a time, staging them
     * KC columns at a time. WG=128: on the H200, B1 K4096 (Hq32 Hkv8 d128) took 0.077 ms, 0.096
     * ms at WG=256 (KC=32) and 0.120 ms at WG=32 (SK=128, KC=32) (BENCHMARKS.md). */
    {"decode", "gpu", "RQ=4:WG=128:SK=256:KC=64", decode_gpu_ranges, decode_gpu_check,
     decode_gpu_fit},
    /* Attention backward, fused (FlashAttention-2), CPU shape: a work-item per (key chunk, K/V
     * head) walks QR query rows at a time over each block of KB keys, its dK and dV rows and the
     * QR rows of dQ taken VC columns at a time with the rows' vectors in registers. Taken when
     * the forward's out and LSE are given (clattn.h). */
    {"backward", "cpu", "QR=6:KB=64:VC=64:CH=0", backward_cpu_ranges, NULL, NULL},
    /* The unfused chain of GEMMs and softmax kernels (the matmul and softmax variants' shapes):
     * the GPU path until a GPU-shaped fused backward exists. */
    {"backward", "unfused", "", no_ranges, NULL, NULL},
    /* How every kernel converts float16 (kernels/dtype.cl), not an op of its own: integer bit
     * manipulation on any OpenCL 1.2 device, or cl_khr_fp16's half type (conversions only, the
     * arithmetic stays float32), built with -D CLATTN_FP16=1. */
    {"half", "bits", "", no_ranges, NULL, NULL},
    {"half", "fp16", "", no_ranges, half_fp16_check, NULL},
    /* clang's __fp16 storage type, converted by the target's instructions (x86: F16C), with no
     * cl_khr_fp16: built with -D CLATTN_FP16=2; a compiler without the type fails that build
     * with dtype.cl's #error in its log. */
    {"half", "clang", "", no_ranges, NULL, NULL},
};

typedef struct {
    cl_device_type type; /* 0 = any */
    const char *vendor;  /* case-insensitive substring, NULL = any */
    const char *name;    /* case-insensitive substring of the device name (an implementation) */
    cl_uint min_vec;     /* CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT at least this, 0 = any */
    const char *op, *variant, *params;
    int (*when)(const clattn_context *); /* NULL, or a further condition on the device */
    const char *bucket; /* NULL = any, else the shape bucket it is for ("d256") */
} rule;

/* CPUs with AVX-512 (native float vectors of 16, as PoCL and Intel's CPU runtime report them
 * there; PoCL's device name carries LLVM's CPU name, Intel's the CPU brand, so the capability is
 * what both share): 32 512-bit registers, room for a 6 x 64 tile (24 accumulators), 4-9% faster
 * than 12 x 32 on PoCL, 10-25% faster than the AVX2 tile on Intel's runtime at n = 2048. */
#define AVX512_MATMUL "TM=6:TN=64:VN=16"
/* CPUs with narrower vectors (AVX2: a float16 is two of its 16 registers): QR=6 rows of 16-key
 * blocks, the P V product 16 output columns at a time (VC=16: 6 x 16 accumulators, the AVX2 GEMM
 * micro-tile), measured on an AVX2 EPYC at H16 d64 N 1024 (BENCHMARKS.md) 1.5x the same tile with
 * every output column in registers (VC=256, which spills there) and 1.3x QR=5, KB=64, VC=16. */
#define AVX2_ATTENTION "QR=6:KB=16:VC=16"
/* The fused backward's tiles there, for the same reason: QR=6 rows of 16-key blocks, 16 output
 * columns per rank update, three alternating rounds on an AVX2 EPYC at H16 N1024 d64
 * (BENCHMARKS.md) 98-127 ms against 166-286 ms with the AVX-512 tiles (QR=6:KB=64:VC=64), and
 * ahead of QR=4 or 5 and KB=32. */
#define AVX2_BACKWARD "QR=6:KB=16:VC=16"
/* PoCL on AVX-512 Intel Xeons (its CPU device's vendor is "GenuineIntel"): 8 row groups per
 * work-item, so that each block of K and V read into L1 serves 40 query rows rather than 10. Where
 * a head's K and V outgrow L2 the default's reads from L3 bound the kernel there: full causal at
 * N 8192 (d 64) 1.23-1.36x faster, grouped-query prefill at N 2048 (d 128) 1.12-1.25x, head size
 * 256 at N 1024-4096 1.08-1.62x, N 64-2048 at d 64 within the noise (two alternating rounds,
 * BENCHMARKS.md). Not measured on the AMD EPYC kind, which keeps QG=2. */
#define XEON_ATTENTION "QG=8"
/* Head size 256 there: a 64-key block's K panel and V rows (64 KiB each) outgrow L1, so 32-key
 * blocks of 10 rows (20 accumulators, P V 32 columns at a time) and 16 row groups per work-item,
 * two items per group (their private state within the stack's limit). At H16 d256 (BENCHMARKS.md,
 * Intel Xeon, 2026-12-05): N 2048 198-200 ms against 247-252 ms plain, 113 against 129 ms causal,
 * N 1024 and 4096 1.08-1.11x; at head sizes 64 and 128 the same tiles were no faster. */
#define XEON_ATTENTION_D256 "QR=10:KB=32:VC=32:QG=16:WG=2"

/* Mesa's llvmpipe (rusticl) compiles work-groups SIMD across work-items, as a GPU does, and ends
 * a work-item's loops after 65535 iterations in all (see loop_limited): the GPU shapes. */
#define LLVMPIPE "llvmpipe"

static int ci_contains(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; *hay; hay++)
        if (strncasecmp(hay, needle, n) == 0)
            return 1;
    return n == 0;
}

static int has_fp16(const clattn_context *ctx) { return ctx->has_fp16; }

/* PoCL's CPU device on an x86 CPU with F16C: its device name is "pthread-" (PoCL 3; "cpu-" in
 * later releases) and LLVM's name for the CPU (PoCL 3.1 appends the brand), and its compiler is
 * clang, which lowers __fp16 conversions to F16C there. LLVM's names of the x86 CPUs that have
 * F16C: Ivy Bridge and later (every "...lake" but Lakemont, Quark's), the Xeon Phis, AMD's
 * Piledriver and later, Jaguar and Zen, the x86-64-v3 and v4 levels. */
static int pocl_f16c(const clattn_context *ctx)
{
    static const char *const cpus[] = {
        "ivybridge", "core-avx-i", "haswell", "core-avx2", "broadwell", "skylake", "skx",
        "cascadelake", "cooperlake", "cannonlake", "icelake", "tigerlake", "rocketlake",
        "alderlake", "raptorlake", "meteorlake", "arrowlake", "lunarlake", "pantherlake",
        "sapphirerapids", "emeraldrapids", "graniterapids", "sierraforest", "clearwaterforest",
        "gracemont", "grandridge", "knl", "knm", "znver", "bdver2", "bdver3", "bdver4", "btver2",
        "x86-64-v3", "x86-64-v4"};
    const char *cpu = strncmp(ctx->name, "pthread-", 8) == 0 ? ctx->name + 8
                      : strncmp(ctx->name, "cpu-", 4) == 0   ? ctx->name + 4
                                                             : NULL;
    if (!cpu || !ci_contains(ctx->platform_name, "Portable Computing Language"))
        return 0;
    for (size_t i = 0; i < sizeof cpus / sizeof cpus[0]; i++)
        if (strncasecmp(cpu, cpus[i], strlen(cpus[i])) == 0)
            return 1;
    return 0;
}

/* First matching rule wins; the last rules are the catch-alls per op. */
static const rule rules[] = {
    {0, NULL, LLVMPIPE, 0, "matmul", "gpu", "", NULL, NULL},
    {0, NULL, LLVMPIPE, 0, "softmax", "gpu", "", NULL, NULL},
    {0, NULL, LLVMPIPE, 0, "attention", "gpu", "", NULL, NULL},
    {0, NULL, LLVMPIPE, 0, "decode", "gpu", "", NULL, NULL},
    {0, NULL, LLVMPIPE, 0, "backward", "unfused", "", NULL, NULL},
    {CL_DEVICE_TYPE_CPU, NULL, NULL, 16, "matmul", "cpu", AVX512_MATMUL, NULL, NULL},
    {CL_DEVICE_TYPE_CPU, NULL, NULL, 0, "matmul", "cpu", "", NULL, NULL},
    /* float16 vectors where they are one register: the same kernel 1.2-1.3x faster than with
     * float8 ones for 16-bit scores, 1.1x for float32 (AVX-512 EPYC, 4096 x 1024; BENCHMARKS.md) */
    {CL_DEVICE_TYPE_CPU, NULL, NULL, 16, "softmax", "cpu", "VW=16", NULL, NULL},
    {CL_DEVICE_TYPE_CPU, NULL, NULL, 0, "softmax", "cpu", "", NULL, NULL},
    {0, NULL, NULL, 0, "matmul", "gpu", "", NULL, NULL},
    {0, NULL, NULL, 0, "softmax", "gpu", "", NULL, NULL},
    {CL_DEVICE_TYPE_CPU, "GenuineIntel", NULL, 16, "attention", "cpu", XEON_ATTENTION_D256, NULL,
     "d256"},
    {CL_DEVICE_TYPE_CPU, "GenuineIntel", NULL, 16, "attention", "cpu", XEON_ATTENTION, NULL, NULL},
    {CL_DEVICE_TYPE_CPU, NULL, NULL, 16, "attention", "cpu", "", NULL, NULL},
    {CL_DEVICE_TYPE_CPU, NULL, NULL, 0, "attention", "cpu", AVX2_ATTENTION, NULL, NULL},
    {0, NULL, NULL, 0, "attention", "gpu", "", NULL, NULL},
    {CL_DEVICE_TYPE_CPU, NULL, NULL, 0, "decode", "cpu", "", NULL, NULL},
    {0, NULL, NULL, 0, "decode", "gpu", "", NULL, NULL},
    {CL_DEVICE_TYPE_CPU, NULL, NULL, 16, "backward", "cpu", "", NULL, NULL},
    {CL_DEVICE_TYPE_CPU, NULL, NULL, 0, "backward", "cpu", AVX2_BACKWARD, NULL, NULL},
    {0, NULL, NULL, 0, "backward", "unfused", "", NULL, NULL},
    /* cl_khr_fp16's conversions by default only where they were checked bit for bit (Intel's CPU
     * runtime; PoCL's vendor there is "GenuineIntel"): other drivers list the extension with
     * partial builtins (Mesa's libclc, PoCL 4's CPU device), so they opt in with half=fp16 */
    {CL_DEVICE_TYPE_CPU, "Intel(R) Corporation", NULL, 0, "half", "fp16", "", has_fp16, NULL},
    /* PoCL on x86 with F16C: one instruction per 8 or 16 conversions, where the integer path
     * takes about 20 (BENCHMARKS.md) */
    {CL_DEVICE_TYPE_CPU, NULL, NULL, 0, "half", "clang", "", pocl_f16c, NULL},
    {0, NULL, NULL, 0, "half", "bits", "", NULL, NULL},
};

static const variant_def *find_variant(const char *op, const char *variant, size_t vlen)
{
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++)
        if (strcmp(variants[i].op, op) == 0 && strlen(variants[i].variant) == vlen &&
            strncmp(variants[i].variant, variant, vlen) == 0)
            return &variants[i];
    return NULL;
}

static void list_variants(const char *op, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof variants / sizeof variants[0] && used < size; i++)
        if (strcmp(variants[i].op, op) == 0)
            used += (size_t)snprintf(buf + used, size - used, "%s%s(%s)", used ? ", " : "",
                                     variants[i].variant, variants[i].params);
}

static const param_range *find_range(const variant_def *d, const char *name, size_t len)
{
    for (const param_range *r = d->ranges; r->name; r++)
        if (strlen(r->name) == len && strncmp(r->name, name, len) == 0)
            return r;
    return NULL;
}

static void list_ranges(const variant_def *d, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (const param_range *r = d->ranges; r->name && used < size; r++)
        used += (size_t)snprintf(buf + used, size - used, "%s%s", used ? ", " : "", r->name);
}

/* The integer that s[0, len) spells, '-'? digits, saturated far past every range; 0 when the
 * text is anything else (signs, spaces, hex, exponents). */
static int parse_int(const char *s, size_t len, long *v)
{
    size_t i = len > 1 && s[0] == '-';
    long x = 0;
    if (i == len)
        return 0;
    for (; i < len; i++) {
        if (!isdigit((unsigned char)s[i]))
            return 0;
        x = x < 1000000000L ? x * 10 + (s[i] - '0') : x;
    }
    *v = s[0] == '-' ? -x : x;
    return 1;
}

static int in_range(const param_range *r, long v)
{
    return v >= r->min && v <= r->max && (!(r->flags & POW2) || (v & (v - 1)) == 0) &&
           (!(r->flags & MUL16) || v % 16 == 0);
}

/* Applies "NAME=value[:NAME=value]..." (len chars at s, at least one entry) to t: every name one
 * of d's parameters, every value in its range. seen (NULL for the table's own strings) collects
 * the names given, so that one given twice is an error. */
static clattn_status apply_params(clattn_context *ctx, clattn_tuning *t, const variant_def *d,
                                  const char *s, size_t len, unsigned *seen)
{
    clattn_status st = CLATTN_SUCCESS;
    const char *end = s + len;
    char known[128];
    for (;;) {
        const char *stop = memchr(s, ':', (size_t)(end - s));
        stop = stop ? stop : end;
        const char *eq = memchr(s, '=', (size_t)(stop - s));
        const param_range *r = eq ? find_range(d, s, (size_t)(eq - s)) : NULL;
        long v = 0;
        if (!r)
            list_ranges(d, known, sizeof known);
        CHECK(ctx, eq, CLATTN_ERROR_INVALID_ARGUMENT,
              "tuning: %s=%s: bad parameter '%.*s' (expected NAME=value)", d->op, d->variant,
              (int)(stop - s), s);
        CHECK(ctx, r, CLATTN_ERROR_INVALID_ARGUMENT,
              "tuning: %s variant %s has no parameter %.*s (it has: %s)", d->op, d->variant,
              (int)(eq - s), s, known[0] ? known : "none");
        int i = (int)(r - d->ranges);
        CHECK(ctx, !seen || !(*seen & 1u << i), CLATTN_ERROR_INVALID_ARGUMENT,
              "tuning: %s=%s: parameter %s given twice", d->op, d->variant, r->name);
        CHECK(ctx, parse_int(eq + 1, (size_t)(stop - eq - 1), &v) && in_range(r, v),
              CLATTN_ERROR_INVALID_ARGUMENT, "tuning: %s=%s:%.*s: %s must be %s from %d to %d",
              d->op, d->variant, (int)(stop - s), s, r->name,
              r->flags & POW2 ? "a power of two" : r->flags & MUL16 ? "a multiple of 16"
                                                                     : "an integer",
              r->min, r->max);
        if (seen)
            *seen |= 1u << i;
        t->values[i] = (int)v;
        if (stop == end)
            break;
        s = stop + 1;
    }
fail:
    return st;
}

/* Starts t as variant (vlen chars) of op with its defaults; *out is its definition. */
static clattn_status start_variant(clattn_context *ctx, clattn_tuning *t, const char *op,
                                   const char *variant, size_t vlen, const variant_def **out)
{
    char known[256];
    const variant_def *d = find_variant(op, variant, vlen);
    if (!d) {
        list_variants(op, known, sizeof known);
        return clattn__fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                            "tuning: op %s has no variant '%.*s' (known: %s)", op, (int)vlen,
                            variant, known[0] ? known : "none: unknown op");
    }
    memset(t, 0, sizeof *t);
    snprintf(t->variant, sizeof t->variant, "%s", d->variant);
    for (const param_range *r = d->ranges; r->name; r++)
        snprintf(t->names[t->nparams++], sizeof t->names[0], "%s", r->name);
    *out = d;
    return *d->params ? apply_params(ctx, t, d, d->params, strlen(d->params), NULL)
                      : CLATTN_SUCCESS;
}

static void write_defines(clattn_tuning *t)
{
    int cpu = strcmp(t->variant, "cpu") == 0, gpu = strcmp(t->variant, "gpu") == 0;
    t->defines[0] = '\0';
    /* the variant's own shape of kernels in its programs (common.cl's CLATTN_SHAPES) */
    if (cpu || gpu)
        clattn__define(t->defines, sizeof t->defines, "CLATTN_SHAPES", cpu ? 1 : 2);
    for (int i = 0; i < t->nparams; i++)
        /* host-side: kernels never see them (LOOPS: the loop budget; SK: decode's split, CH:
         * the backward's key chunks, kernel arguments), so they build no programs of their own */
        if (strcmp(t->names[i], "LOOPS") != 0 && strcmp(t->names[i], "SK") != 0 &&
            strcmp(t->names[i], "CH") != 0)
            clattn__define(t->defines, sizeof t->defines, t->names[i], t->values[i]);
}

void clattn__tune_set(clattn_tuning *t, const char *name, int value)
{
    set(t, name, value);
    write_defines(t);
}

/* Finds the first override entry for op in the comma-separated list; returns its text after
 * "op=" and its length. */
static const char *find_override(const char *list, const char *op, size_t *len)
{
    size_t oplen = strlen(op);
    for (const char *s = list; s && *s;) {
        const char *comma = strchr(s, ',');
        size_t n = comma ? (size_t)(comma - s) : strlen(s);
        if (n > oplen && strncmp(s, op, oplen) == 0 && s[oplen] == '=') {
            *len = n - oplen - 1;
            return s + oplen + 1;
        }
        s = comma ? comma + 1 : s + n;
    }
    return NULL;
}

/* The table's choice of variant and parameters for op on this device, fitted to its limits. */
static clattn_status table_choice(clattn_context *ctx, const char *op, const char *bucket,
                                  clattn_tuning *t, const variant_def **d)
{
    clattn_status st = CLATTN_SUCCESS;
    size_t i = 0, n = sizeof rules / sizeof rules[0];
    for (; i < n; i++) {
        const rule *r = &rules[i];
        if (strcmp(r->op, op) == 0 && (!r->type || (r->type & ctx->type)) &&
            (!r->bucket || (bucket && strcmp(r->bucket, bucket) == 0)) &&
            (!r->vendor || ci_contains(ctx->vendor, r->vendor)) &&
            (!r->name || ci_contains(ctx->name, r->name)) && ctx->native_float >= r->min_vec &&
            (!r->when || r->when(ctx)))
            break;
    }
    CHECK(ctx, i < n, CLATTN_ERROR_INVALID_ARGUMENT, "tuning: no rule for op %s", op);
    CHECK_ST(start_variant(ctx, t, op, rules[i].variant, strlen(rules[i].variant), d));
    if (*rules[i].params)
        CHECK_ST(apply_params(ctx, t, *d, rules[i].params, strlen(rules[i].params), NULL));
    if ((*d)->fit)
        (*d)->fit(ctx, t);
fail:
    return st;
}

/* A device whose work-items leave their loops after a fixed count (context.c: Mesa's llvmpipe,
 * tests/portability/llvmpipe_loop_limit_repro.c). The GPU-shaped kernels split their work over
 * launches under the budget; the CPU-shaped ones loop over whole rows, panels and key ranges in
 * each work-item with no such split, so they compute wrong results there from modest sizes on:
 * refused. */
static int loop_limited(const clattn_context *ctx)
{
    return ctx->loop_limit != 0;
}

/* PoCL 5.0 built with LLVM 16 (Ubuntu 24.04's) aborted the process building the GPU-shaped
 * kernels for its CPU device on the H200 machine's host (2026-12-04): an assertion in its
 * parallel-region formation (Kernel.cc: region_entry_barrier != NULL), pocl issue #1435, a
 * regression of that LLVM; PoCL 3.1 (LLVM 15) and 6.0 (LLVM 16) build them. Its CBS work-group
 * method avoids it. */
int clattn__pocl_gpu_shapes_abort(const char *platform_version, const char *wg_method)
{
    return strstr(platform_version, "PoCL 5.0") && strstr(platform_version, "LLVM 16.") &&
           !(wg_method && strcmp(wg_method, "cbs") == 0);
}

const char *clattn__head_bucket(size_t d, size_t dv)
{
    size_t h = d > dv ? d : dv;
    return h <= 64 ? "d64" : h <= 128 ? "d128" : "d256";
}

const char *clattn__gemm_bucket(double m, double n, double k)
{
    return m * n * k <= 16777216.0 ? "small" : NULL;
}

/* The buckets an entry may be keyed by: the fused kernels' head sizes, and small GEMMs. */
int clattn__bucket_known(const char *op, const char *bucket)
{
    static const char *const ops[] = {"attention", "decode", "backward"};
    int known_op = 0;
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        known_op |= strcmp(op, ops[i]) == 0;
    if (strcmp(op, "matmul") == 0)
        return strcmp(bucket, "small") == 0;
    return known_op && (strcmp(bucket, "d64") == 0 || strcmp(bucket, "d128") == 0 ||
                        strcmp(bucket, "d256") == 0);
}

/* The entry of list (CLATTN_TUNE's syntax) for op at bucket (op@bucket=...), else for op, else
 * NULL. */
static const char *find_keyed(const char *list, const char *op, const char *bucket, size_t *len)
{
    char key[64];
    const char *o = NULL;
    if (!list || !list[0])
        return NULL;
    if (bucket && (size_t)snprintf(key, sizeof key, "%s@%s", op, bucket) < sizeof key)
        o = find_override(list, key, len);
    return o ? o : find_override(list, op, len);
}

clattn_status clattn__tune(clattn_context *ctx, const char *op, clattn_tuning *t)
{
    return clattn__tune_bucket(ctx, op, NULL, t);
}

clattn_status clattn__tune_bucket(clattn_context *ctx, const char *op, const char *bucket,
                                  clattn_tuning *t)
{
    clattn_status st = CLATTN_SUCCESS;
    const variant_def *d = NULL;
    char why[400];
    size_t len = 0;
    unsigned seen = 0;
    const char *o = find_keyed(ctx->tuning, op, bucket, &len);
    if (!o)
        o = find_keyed(ctx->tuned, op, bucket, &len);
    if (o) {
        const char *colon = memchr(o, ':', len);
        size_t vlen = colon ? (size_t)(colon - o) : len;
        CHECK_ST(start_variant(ctx, t, op, o, vlen, &d));
        if (colon)
            CHECK_ST(apply_params(ctx, t, d, colon + 1, len - vlen - 1, &seen));
    } else {
        CHECK_ST(table_choice(ctx, op, bucket, t, &d));
    }
    CHECK(ctx, !loop_limited(ctx) || strcmp(d->variant, "cpu") != 0,
          o ? CLATTN_ERROR_INVALID_ARGUMENT : CLATTN_ERROR_UNSUPPORTED,
          "tuning: %s=cpu on %s: Mesa's llvmpipe ends a work-item's loops after 65535 iterations "
          "in all, and this CPU-shaped kernel runs more from modest sizes on (wrong results); "
          "use %s=%s, the table's choice there", op, ctx->name, op,
          strcmp(op, "backward") == 0 ? "unfused" : "gpu");
    CHECK(ctx, !is_cpu(ctx) || strcmp(d->variant, "gpu") != 0 ||
                   !clattn__pocl_gpu_shapes_abort(ctx->platform_version,
                                                  getenv("POCL_WORK_GROUP_METHOD")),
          o ? CLATTN_ERROR_INVALID_ARGUMENT : CLATTN_ERROR_UNSUPPORTED,
          "tuning: %s=gpu on %s: PoCL 5.0 with LLVM 16 aborts the process building GPU-shaped "
          "kernels for a CPU (pocl issue #1435); set POCL_WORK_GROUP_METHOD=cbs, or use the "
          "table's choice", op, ctx->name);
    t->max_head = !bucket ? 0 : strcmp(bucket, "d64") == 0 ? 64 : strcmp(bucket, "d128") == 0 ? 128
                                                                                             : 0;
    /* An override the device cannot run is the caller's mistake; the table's own choice, still
     * too big after fitting, is the device's limit. */
    CHECK(ctx, !d->check || d->check(ctx, t, why, sizeof why),
          o ? CLATTN_ERROR_INVALID_ARGUMENT : CLATTN_ERROR_UNSUPPORTED, "tuning: %s=%s: %s", op,
          t->variant, why);
    write_defines(t);
fail:
    return st;
}

clattn_status clattn_context_tuning(clattn_context *ctx, const char *op, char *buf, size_t size)
{
    clattn_status st = CLATTN_SUCCESS;
    char name[32];
    clattn_tuning t;
    CHECK(NULL, ctx, CLATTN_ERROR_INVALID_ARGUMENT, "ctx: NULL context");
    CHECK(ctx, op && buf && size > 0, CLATTN_ERROR_INVALID_ARGUMENT, "op, buf: NULL or size 0");
    CHECK(ctx, strlen(op) < sizeof name, CLATTN_ERROR_INVALID_ARGUMENT, "op: '%.40s' unknown", op);
    strcpy(name, op);
    char *at = strchr(name, '@');
    if (at)
        *at++ = '\0';
    CHECK(ctx, !at || clattn__bucket_known(name, at), CLATTN_ERROR_INVALID_ARGUMENT,
          "op: %s has no bucket '%s' (attention, decode and backward take d64, d128, d256; "
          "matmul takes small)",
          name, at ? at : "");
    CHECK_ST(clattn__tune_bucket(ctx, name, at, &t));
    /* every parameter counted, written or not, so that the message gives the whole size */
    size_t used = (size_t)snprintf(buf, size, "%s", t.variant);
    for (int i = 0; i < t.nparams; i++)
        used += (size_t)snprintf(used < size ? buf + used : NULL, used < size ? size - used : 0,
                                 ":%s=%d", t.names[i], t.values[i]);
    CHECK(ctx, used < size, CLATTN_ERROR_INVALID_ARGUMENT,
          "size: %zu bytes are too few for op %s's entry (%zu needed)", size, op, used + 1);
fail:
    return st;
}

/* Checks every entry of the override: a known op given once, a known variant, known parameters
 * in range, no empty entries. */
clattn_status clattn__check_tuning(clattn_context *ctx)
{
    clattn_status st = CLATTN_SUCCESS;
    clattn_tuning t;
    for (const char *s = ctx->tuning; *ctx->tuning;) {
        const char *comma = strchr(s, ',');
        size_t n = comma ? (size_t)(comma - s) : strlen(s), len = 0;
        char op[32];
        const char *eq = memchr(s, '=', n);
        CHECK(ctx, n > 0, CLATTN_ERROR_INVALID_ARGUMENT,
              "tuning: empty entry in '%s' (entries are separated by single commas)", ctx->tuning);
        CHECK(ctx, eq && eq > s && (size_t)(eq - s) < sizeof op, CLATTN_ERROR_INVALID_ARGUMENT,
              "tuning: entry '%.*s' is not op=variant[:NAME=value]", (int)n, s);
        memcpy(op, s, (size_t)(eq - s));
        op[eq - s] = '\0';
        CHECK(ctx, find_override(ctx->tuning, op, &len) == eq + 1, CLATTN_ERROR_INVALID_ARGUMENT,
              "tuning: op %s given twice", op);
        char *at = strchr(op, '@'); /* op@bucket: an entry for one head-size bucket */
        if (at)
            *at++ = '\0';
        CHECK(ctx, !at || clattn__bucket_known(op, at), CLATTN_ERROR_INVALID_ARGUMENT,
              "tuning: op %s has no bucket '%s' (attention, decode and backward take d64, d128, "
              "d256; matmul takes small)", op, at);
        CHECK_ST(clattn__tune_bucket(ctx, op, at, &t));
        if (!comma)
            break;
        s = comma + 1;
    }
fail:
    return st;
}

long clattn__loop_budget(const clattn_context *ctx, const clattn_tuning *t)
{
    long loops = clattn__tune_int(t, "LOOPS", 0);
    return loops > 0 ? loops : ctx->loop_limit;
}

clattn_status clattn__loop_units(clattn_context *ctx, long budget, long fixed, long per_unit,
                                 size_t count, size_t *units, const char *what, ...)
{
    long fit = budget ? (budget - fixed) / per_unit : 0;
    *units = budget && (size_t)fit < count ? (size_t)fit : count;
    if (!budget || fit >= 1)
        return CLATTN_SUCCESS;
    char unit[160];
    va_list ap;
    va_start(ap, what);
    vsnprintf(unit, sizeof unit, what, ap);
    va_end(ap);
    return clattn__fail(ctx, CLATTN_ERROR_UNSUPPORTED,
                        "%s needs %ld loop iterations per work-item, over the loop budget %ld of "
                        "this device (README, OpenCL implementations)", unit, fixed + per_unit,
                        budget);
}

int clattn__tune_int(const clattn_tuning *t, const char *name, int fallback)
{
    for (int i = 0; i < t->nparams; i++)
        if (strcmp(t->names[i], name) == 0)
            return t->values[i];
    return fallback;
}

/* ---- every variant the library can build, for the offline compile checks ---- */

static int add_listing(clattn_variant_info *out, int max, int n, const char *op,
                       const char *variant, const char *params)
{
    clattn_tuning t;
    const variant_def *d;
    if (start_variant(NULL, &t, op, variant, strlen(variant), &d) != CLATTN_SUCCESS ||
        (*params && apply_params(NULL, &t, d, params, strlen(params), NULL) != CLATTN_SUCCESS))
        return n; /* unreachable: the table's own strings always parse (tests/test_tuning.c) */
    write_defines(&t);
    for (int i = 0; i < n && i < max; i++)
        if (strcmp(out[i].op, op) == 0 && strcmp(out[i].defines, t.defines) == 0)
            return n;
    if (n < max) {
        out[n].op = op;
        out[n].variant = variant;
        snprintf(out[n].defines, sizeof out[n].defines, "%s", t.defines);
    }
    return n + 1;
}

int clattn__variant_list(clattn_variant_info *out, int max)
{
    int n = 0;
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++)
        n = add_listing(out, max, n, variants[i].op, variants[i].variant, "");
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
        n = add_listing(out, max, n, rules[i].op, rules[i].variant, rules[i].params);
    return n;
}
