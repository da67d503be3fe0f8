/* clattn-kernels: prints every (kernel file, build options) pair the library can build, one per
 * line as "file<TAB>options", for the offline compile checks (tests/portability/compile.sh).
 *
 * usage: clattn-kernels [--type gpu|cpu|other] [--tune OVERRIDES]... [FILE.cl]...
 *
 * The list comes from the tuning table (every variant's defaults and every rule's parameters), so
 * a variant added there is checked without touching this tool. Each --tune string (CLATTN_TUNE
 * syntax, e.g. the tests' variant overrides) adds the option sets it selects, and each FILE.cl adds
 * that file with its own #ifndef defaults (every file in kernels/). Options are built by
 * the library's own clattn__build_options for a device of the given type (default gpu). Exits 1
 * when an op's kernel file is unknown, so a new op cannot silently escape the checks. */
#include "internal.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LINES 256

/* Ops whose kernels are not in "<op>.cl". */
static const struct {
    const char *op, *file;
} op_files[] = {
    {"attention", "flash.cl"},
    {"backward", "flash_backward.cl"},
};

/* Option sets the ops build outside the tuning table: the transposes of 16-bit elements, and the
 * operand dtypes (kernels/dtype.cl), each 16-bit load and store at least once per kernel file
 * and vector width. */
static const struct {
    const char *file, *defines;
} extra_sets[] = {
    {"heads.cl", "-D ELEM=ushort "},
    {"heads.cl", "-D XT=2 -D YT=0 "},
    {"heads.cl", "-D XT=0 -D YT=3 "},
    {"additive.cl", "-D QT=2 -D KT=3 -D WT=2 -D ST=3 "},
    {"additive.cl", "-D QT=3 -D KT=2 -D WT=3 -D ST=2 -D VW=4 "},
    {"flash.cl", "-D QT=2 -D KT=3 -D VT=2 -D OT=3 -D VST=0 "},
    {"flash.cl", "-D QT=3 -D KT=2 -D VT=3 -D OT=2 "},
    {"convert.cl", "-D XT=2 "},
    {"convert.cl", "-D XT=3 "},
    {"convert.cl", "-D YT=2 "},
    {"convert.cl", "-D YT=3 "},
    {"convert.cl", "-D XT=2 -D YT=3 "},
    {"convert.cl", "-D XT=3 -D YT=2 "},
    {"dropout.cl", "-D XT=2 -D YT=3 "},
    {"dropout.cl", "-D XT=3 -D YT=2 "},
    {"decode.cl", "-D QT=2 -D CT=3 -D NT=2 "},
    {"decode.cl", "-D QT=3 -D CT=2 -D NT=3 "},
    {"decode.cl", "-D ALIGN16=1 -D CT=2 "},
    {"decode.cl", "-D ALIGN16=1 -D CT=3 "},
    /* RQ lowered to spread a K/V head's rows evenly (src/ops/decode.c) */
    {"decode.cl", "-D RQ=1 -D ALIGN16=1 -D CT=2 "},
    {"decode.cl", "-D RQ=2 "},
    /* TN narrowed to op(B)'s columns rounded up to VN (src/ops/matmul.c) */
    {"matmul.cl", "-D TM=6 -D TN=16 -D VN=16 "},
    {"matmul.cl", "-D TM=6 -D TN=32 -D VN=16 "},
    {"matmul.cl", "-D TM=6 -D TN=48 -D VN=16 "},
    {"matmul.cl", "-D TM=6 -D TN=8 -D VN=8 "},
    {"matmul.cl", "-D AT=2 -D BT=3 "},
    {"matmul.cl", "-D AT=3 -D BT=2 "},
    {"matmul.cl", "-D VN=16 -D AT=2 -D BT=3 "},
    {"softmax.cl", "-D XT=2 -D YT=3 "},
    {"softmax.cl", "-D XT=3 -D YT=2 "},
    {"softmax.cl", "-D VW=16 -D XT=2 -D YT=3 "},
    {"softmax.cl", "-D VW=16 -D XT=3 -D YT=2 "},
    {"softmax.cl", "-D ALIGNV=1 "}, /* rows on vector boundaries (src/ops/softmax.c) */
    {"softmax.cl", "-D ALIGNV=1 -D XT=2 -D YT=3 "},
    {"softmax.cl", "-D ALIGNV=1 -D XT=3 -D YT=2 "},
    {"softmax.cl", "-D VW=16 -D ALIGNV=1 -D XT=3 -D YT=2 "},
    {"softmax.cl", "-D VW=16 -D ALIGNV=1 -D XT=0 -D YT=2 "},
    {"softmax.cl", "-D VW=16 -D ALIGNV=1 "},
    {"softmax.cl", "-D VW=16 -D ALIGNV=1 -D XT=2 -D YT=3 "},
    /* cl_khr_fp16's conversions (the half tuning): every file with 16-bit operands, at each
     * vector width; compile.sh enables the extension for these where the target has it */
    {"convert.cl", "-D CLATTN_FP16=1 -D XT=2 -D YT=3 "},
    {"convert.cl", "-D CLATTN_FP16=1 -D XT=3 -D YT=2 "},
    {"softmax.cl", "-D CLATTN_FP16=1 -D XT=2 -D YT=2 "},
    {"softmax.cl", "-D CLATTN_FP16=1 -D VW=16 -D ALIGNV=1 -D XT=2 -D YT=2 "},
    {"decode.cl", "-D CLATTN_FP16=1 -D QT=2 -D CT=2 -D NT=2 "},
    {"decode.cl", "-D CLATTN_FP16=1 -D ALIGN16=1 -D CT=2 "},
    {"matmul.cl", "-D CLATTN_FP16=1 -D AT=2 -D BT=2 "},
    {"flash.cl", "-D CLATTN_FP16=1 -D QT=2 -D KT=2 -D VT=2 -D OT=2 "},
    {"heads.cl", "-D CLATTN_FP16=1 -D XT=2 -D YT=2 "},
    {"additive.cl", "-D CLATTN_FP16=1 -D QT=2 -D KT=2 -D WT=2 -D ST=2 "},
    {"dropout.cl", "-D CLATTN_FP16=1 -D XT=2 -D YT=2 "},
    /* clang's __fp16 conversions (half=clang, PoCL's default on x86): dtype.cl's other branch,
     * and the files that pick their own float16 moves by it */
    {"convert.cl", "-D CLATTN_FP16=2 -D XT=2 -D YT=3 "},
    {"softmax.cl", "-D CLATTN_FP16=2 -D XT=2 -D YT=2 "},
    {"softmax.cl", "-D CLATTN_FP16=2 -D VW=16 -D ALIGNV=1 -D XT=2 -D YT=2 "},
    {"softmax.cl", "-D CLATTN_FP16=2 -D VW=8 -D ALIGNV=1 -D XT=3 -D YT=2 "},
    {"decode.cl", "-D CLATTN_FP16=2 -D QT=2 -D CT=2 -D NT=2 "},
    {"decode.cl", "-D CLATTN_FP16=2 -D ALIGN16=1 -D CT=2 "},
    {"matmul.cl", "-D CLATTN_FP16=2 -D AT=2 -D BT=2 "},
    {"flash.cl", "-D CLATTN_FP16=2 -D QT=2 -D KT=2 -D VT=2 -D OT=2 "},
    /* the programs of the shared kernels alone (SHARED_ONLY: decode's merge and advance,
     * linear's column sums) */
    {"decode.cl", SHARED_ONLY},
    {"matmul.cl", SHARED_ONLY},
    /* the loss kernels build with the softmax variant's defines (src/ops/loss.c) */
    {"loss.cl", "-D VW=8 "},
    {"loss.cl", "-D WG=64 "},
};

/* The half tuning is a define of every build (clattn__build_options), not a kernel file of its
 * own: its option sets are the CLATTN_FP16 entries of extra_sets. */
static int no_kernel_file(const char *op)
{
    return op && strcmp(op, "half") == 0;
}

static const char *kernel_file(const char *op, char *buf, size_t size)
{
    if (!op)
        return NULL;
    for (size_t i = 0; i < sizeof op_files / sizeof op_files[0]; i++)
        if (strcmp(op_files[i].op, op) == 0)
            return op_files[i].file;
    snprintf(buf, size, "%s.cl", op);
    return clattn__embedded_source(buf) ? buf : NULL;
}

static char lines[MAX_LINES][1200];
static int nlines;

/* Prints file (op's kernel file when NULL) and the options of defines, once; returns 0 when op has
 * no known kernel file. */
static int emit(const clattn_context *ctx, const char *op, const char *file, const char *defines)
{
    char name[96], options[1024], line[sizeof lines[0]];
    if (!file && no_kernel_file(op))
        return 1;
    if (!file)
        file = kernel_file(op, name, sizeof name);
    if (!file && !op) /* neither given: nothing to build */
        return 0;
    if (!file) {
        fprintf(stderr, "clattn-kernels: op '%s' has no kernel file %s.cl; add it to op_files in "
                        "tools/clattn-kernels.c\n", op, op);
        return 0;
    }
    clattn__build_options(ctx, defines, options, sizeof options);
    snprintf(line, sizeof line, "%s\t%s", file, options);
    for (int i = 0; i < nlines; i++)
        if (strcmp(lines[i], line) == 0)
            return 1;
    if (nlines < MAX_LINES)
        snprintf(lines[nlines++], sizeof lines[0], "%s", line);
    printf("%s\n", line);
    return 1;
}

/* Each op named in a CLATTN_TUNE-style string, resolved by the library's own clattn__tune_bucket
 * (an op@bucket entry as the tune file's: the op's kernel file, checked at that bucket). */
static int emit_override(clattn_context *ctx, char *tune)
{
    int ok = 1;
    ctx->tuning = tune; /* clattn__tune reads the override from the context */
    for (const char *s = tune; *s;) {
        const char *comma = strchr(s, ','), *eq = strchr(s, '=');
        size_t n = comma ? (size_t)(comma - s) : strlen(s);
        char op[32];
        clattn_tuning t;
        if (!eq || eq > s + n || (size_t)(eq - s) >= sizeof op) {
            fprintf(stderr, "clattn-kernels: bad override entry '%.*s'\n", (int)n, s);
            return 0;
        }
        memcpy(op, s, (size_t)(eq - s));
        op[eq - s] = '\0';
        char *bucket = strchr(op, '@');
        if (bucket)
            *bucket++ = '\0';
        if (bucket && !clattn__bucket_known(op, bucket)) {
            fprintf(stderr, "clattn-kernels: op %s has no bucket '%s' (attention, decode and "
                            "backward take d64, d128, d256; matmul takes small)\n", op, bucket);
            return 0;
        }
        if (no_kernel_file(op)) {
            s = comma ? comma + 1 : s + n;
            continue;
        }
        if (clattn__tune_bucket(ctx, op, bucket, &t) != CLATTN_SUCCESS) {
            fprintf(stderr, "clattn-kernels: %s\n", ctx->err);
            return 0;
        }
        ok &= emit(ctx, op, NULL, t.defines);
        s = comma ? comma + 1 : s + n;
    }
    return ok;
}

int main(int argc, char **argv)
{
    static clattn_context ctx; /* only type, tuning and err are read */
    static clattn_variant_info v[MAX_LINES];
    static char no_tuning[1];
    int ok = 1;
    ctx.type = CL_DEVICE_TYPE_GPU;
    ctx.tuning = no_tuning;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--type") == 0 && i + 1 < argc) {
            const char *t = argv[++i];
            ctx.type = strcmp(t, "cpu") == 0     ? CL_DEVICE_TYPE_CPU
                       : strcmp(t, "gpu") == 0   ? CL_DEVICE_TYPE_GPU
                       : strcmp(t, "other") == 0 ? CL_DEVICE_TYPE_ACCELERATOR
                                                 : 0;
            if (!ctx.type) { /* a typo must not list another type's options */
                fprintf(stderr, "clattn-kernels: --type %s: expected gpu, cpu or other\n", t);
                return 2;
            }
        } else if (strcmp(argv[i], "--tune") == 0 && i + 1 < argc) {
            i++; /* applied after the table's own sets */
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "usage: %s [--type gpu|cpu|other] [--tune OVERRIDES]... [FILE.cl]...\n",
                    argv[0]);
            return 2;
        }
    }
    int n = clattn__variant_list(v, MAX_LINES);
    if (n > MAX_LINES) {
        fprintf(stderr, "clattn-kernels: %d variants, raise MAX_LINES\n", n);
        return 1;
    }
    for (int i = 0; i < n; i++)
        ok &= emit(&ctx, v[i].op, NULL, v[i].defines);
    for (size_t i = 0; i < sizeof extra_sets / sizeof extra_sets[0]; i++)
        ok &= emit(&ctx, NULL, extra_sets[i].file, extra_sets[i].defines);
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--tune") == 0)
            ok &= emit_override(&ctx, argv[++i]);
        else if (strcmp(argv[i], "--type") == 0)
            i++;
        else
            ok &= emit(&ctx, NULL, argv[i], "");
    return ok ? 0 : 1;
}
