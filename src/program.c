/* Kernel sources (embedded or from CLATTN_KERNEL_DIR), build options, program and kernel caches,
 * argument setting and launches. */
#include "internal.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_INCLUDE_DEPTH 4

void clattn__build_options(const clattn_context *ctx, const char *defines, char *buf, size_t size)
{
    /* -cl-mad-enable is allowed: tolerances are stated for fused or unfused multiply-add alike. */
    snprintf(buf, size, "-cl-std=CL1.2 -cl-mad-enable -D CLATTN_DEVICE_%s=1 %s",
             (ctx->type & CL_DEVICE_TYPE_GPU) ? "GPU" : (ctx->type & CL_DEVICE_TYPE_CPU) ? "CPU"
                                                                                      : "OTHER",
             defines ? defines : "");
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *s = NULL;
    long n;
    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (s = malloc((size_t)n + 1)) && fread(s, 1, (size_t)n, f) == (size_t)n)
        s[n] = '\0';
    else {
        free(s);
        s = NULL;
    }
    fclose(f);
    return s;
}

/* The raw text of one kernel file (malloc'd), from the kernel dir or the embedded copy. */
static clattn_status load_raw(clattn_context *ctx, const char *file, char **out)
{
    clattn_status st = CLATTN_SUCCESS;
    if (ctx->kernel_dir[0]) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", ctx->kernel_dir, file);
        char *body = read_file(path);
        CHECK(ctx, body, CLATTN_ERROR_IO, "kernel file %s: cannot read (CLATTN_KERNEL_DIR=%s)",
              path, ctx->kernel_dir);
        size_t n = strlen(body) + strlen(file) + 32;
        *out = malloc(n);
        if (*out)
            snprintf(*out, n, "#line 1 \"%s\"\n%s", file, body);
        free(body);
    } else {
        const char *src = clattn__embedded_source(file);
        CHECK(ctx, src, CLATTN_ERROR_IO, "kernel file %s: not embedded in this build", file);
        *out = strdup(src);
    }
    CHECK(ctx, *out, CLATTN_ERROR_OUT_OF_MEMORY, "out of host memory");
fail:
    return st;
}

typedef struct {
    char *s;
    size_t len, cap;
} strbuf;

static int sb_add(strbuf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = (b->len + n + 1) * 2;
        char *p = realloc(b->s, cap);
        if (!p)
            return 0;
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
    return 1;
}

/* Appends file's text to b with its `#include "x.cl"` lines replaced by x.cl's text, so that each
 * .cl file stays valid on its own (offline compilers resolve the include with -I kernels/). */
static clattn_status expand(clattn_context *ctx, const char *file, strbuf *b, int depth)
{
    clattn_status st = CLATTN_SUCCESS;
    char *raw = NULL;
    CHECK(ctx, depth < MAX_INCLUDE_DEPTH, CLATTN_ERROR_IO, "kernel file %s: includes nest too deep",
          file);
    CHECK_ST(load_raw(ctx, file, &raw));
    int line = 0; /* lines after the #line 1 prefix */
    for (char *p = raw; *p;) {
        char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p + 1) : strlen(p);
        char inc[128];
        if (sscanf(p, "#include \"%127[^\"]\"", inc) == 1) {
            char mark[192];
            CHECK_ST(expand(ctx, inc, b, depth + 1));
            snprintf(mark, sizeof mark, "\n#line %d \"%s\"\n", line + 1, file);
            CHECK(ctx, sb_add(b, mark, strlen(mark)), CLATTN_ERROR_OUT_OF_MEMORY, "out of memory");
        } else {
            CHECK(ctx, sb_add(b, p, n), CLATTN_ERROR_OUT_OF_MEMORY, "out of host memory");
        }
        line++;
        p += n;
    }
fail:
    free(raw);
    return st;
}

static clattn_status compile_source(clattn_context *ctx, const char *file, const char *src,
                                    const char *options, cl_program *out)
{
    clattn_status st = CLATTN_SUCCESS;
    cl_program p = NULL;
    cl_int err;
    char *log = NULL;
    p = clCreateProgramWithSource(ctx->cl, 1, &src, NULL, &err);
    CHECK_CL(ctx, err, "clCreateProgramWithSource");
    err = clBuildProgram(p, 1, &ctx->device, options, NULL, NULL);
    if (err != CL_SUCCESS) {
        size_t n = 0;
        clGetProgramBuildInfo(p, ctx->device, CL_PROGRAM_BUILD_LOG, 0, NULL, &n);
        log = calloc(1, n + 1);
        if (log)
            clGetProgramBuildInfo(p, ctx->device, CL_PROGRAM_BUILD_LOG, n, log, NULL);
        CHECK(ctx, 0, CLATTN_ERROR_BUILD_FAILED,
              "building kernel file %s failed (%s) with options \"%s\"; build log:\n%s", file,
              clattn__cl_error_name(err), options, log ? log : "(no log)");
    }
    *out = p;
    p = NULL;
fail:
    if (p)
        clReleaseProgram(p);
    free(log);
    return st;
}

/* Builds file with options into e->program, from the disk cache when it holds that program. */
static clattn_status build_program(clattn_context *ctx, const char *file, const char *options,
                                   clattn_program_entry *e)
{
    clattn_status st = CLATTN_SUCCESS;
    strbuf b = {0};
    CHECK_ST(expand(ctx, file, &b, 0));
    if (ctx->cache_dir[0]) {
        e->cache_key = clattn__cache_key(ctx, b.s, options);
        e->program = clattn__cache_load(ctx, e->cache_key, &e->cache_size);
    }
    if (!e->program)
        CHECK_ST(compile_source(ctx, file, b.s, options, &e->program));
fail:
    free(b.s);
    return st;
}

static clattn_status get_program(clattn_context *ctx, const char *file, const char *defines,
                                 cl_program *out)
{
    clattn_status st = CLATTN_SUCCESS;
    char options[512], key[640];
    clattn__build_options(ctx, defines, options, sizeof options);
    snprintf(key, sizeof key, "%s|%s", file, options);
    for (int i = 0; i < ctx->nprograms; i++)
        if (strcmp(ctx->programs[i].key, key) == 0) {
            *out = ctx->programs[i].program;
            return CLATTN_SUCCESS;
        }
    CHECK(ctx, ctx->nprograms < CLATTN_MAX_PROGRAMS, CLATTN_ERROR_UNSUPPORTED,
          "too many distinct kernel programs in one context (%d)", CLATTN_MAX_PROGRAMS);
    clattn_program_entry *e = &ctx->programs[ctx->nprograms];
    memset(e, 0, sizeof *e);
    CHECK_ST(build_program(ctx, file, options, e));
    snprintf(e->key, sizeof e->key, "%s", key);
    *out = e->program;
    ctx->nprograms++;
fail:
    return st;
}

clattn_status clattn__get_kernel(clattn_context *ctx, const char *file, const char *defines,
                                 const char *name, cl_kernel *out)
{
    clattn_status st = CLATTN_SUCCESS;
    cl_program p;
    cl_int err;
    CHECK_ST(get_program(ctx, file, defines, &p));
    for (int i = 0; i < ctx->nkernels; i++)
        if (ctx->kernels[i].program == p && strcmp(ctx->kernels[i].name, name) == 0) {
            *out = ctx->kernels[i].kernel;
            return CLATTN_SUCCESS;
        }
    CHECK(ctx, ctx->nkernels < CLATTN_MAX_KERNELS, CLATTN_ERROR_UNSUPPORTED,
          "too many distinct kernels in one context (%d)", CLATTN_MAX_KERNELS);
    cl_kernel k = clCreateKernel(p, name, &err);
    CHECK_CL(ctx, err, name);
    clattn_kernel_entry *e = &ctx->kernels[ctx->nkernels++];
    e->program = p;
    snprintf(e->name, sizeof e->name, "%s", name);
    e->kernel = k;
    e->launched = 0;
    *out = k;
fail:
    return st;
}

/* Saves the programs whose newly launched kernels have finished, when the context is destroyed.
 * PoCL compiles a kernel at its first launch and a binary saved before that still pays the
 * compile, so the save waits for the launch's event (checking it never blocks); and asking PoCL
 * for a binary compiles every kernel of the program, seconds of host time that an op must not
 * spend, so the save happens at destruction. */
static void save_finished(clattn_context *ctx)
{
    for (int i = 0; i < ctx->nprograms; i++) {
        clattn_program_entry *e = &ctx->programs[i];
        cl_int done = CL_QUEUED;
        if (!e->pending ||
            clGetEventInfo(e->pending, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof done, &done,
                           NULL) != CL_SUCCESS || done > CL_COMPLETE)
            continue; /* still queued or running (errors are negative: drop those) */
        if (done == CL_COMPLETE)
            clattn__cache_save(ctx, e->program, e->cache_key, &e->cache_size);
        clReleaseEvent(e->pending);
        e->pending = NULL;
    }
}

static clattn_kernel_entry *kernel_entry(clattn_context *ctx, cl_kernel k)
{
    for (int i = 0; i < ctx->nkernels; i++)
        if (ctx->kernels[i].kernel == k)
            return &ctx->kernels[i];
    return NULL;
}

/* Where to put the event of this launch: &ev for a kernel's first launch with the disk cache on. */
static cl_event *first_launch_event(clattn_context *ctx, cl_kernel k, cl_event *ev)
{
    clattn_kernel_entry *e = ctx->cache_dir[0] ? kernel_entry(ctx, k) : NULL;
    return e && !e->launched ? ev : NULL;
}

/* Makes ev its program's pending save (the queue is in order: a later event implies the earlier
 * ones). */
static void note_first_launch(clattn_context *ctx, cl_kernel k, cl_event ev)
{
    clattn_kernel_entry *ke = kernel_entry(ctx, k);
    ke->launched = 1;
    for (int i = 0; i < ctx->nprograms; i++)
        if (ctx->programs[i].program == ke->program) {
            if (ctx->programs[i].pending)
                clReleaseEvent(ctx->programs[i].pending);
            ctx->programs[i].pending = ev;
            return;
        }
    clReleaseEvent(ev);
}

void clattn__release_programs(clattn_context *ctx)
{
    save_finished(ctx);
    for (int i = 0; i < ctx->nprograms; i++)
        if (ctx->programs[i].pending)
            clReleaseEvent(ctx->programs[i].pending);
    for (int i = 0; i < ctx->nkernels; i++)
        clReleaseKernel(ctx->kernels[i].kernel);
    for (int i = 0; i < ctx->nprograms; i++)
        clReleaseProgram(ctx->programs[i].program);
    ctx->nkernels = ctx->nprograms = 0;
}

clattn_status clattn__set_args(clattn_context *ctx, cl_kernel k, const char *what, ...)
{
    clattn_status st = CLATTN_SUCCESS;
    va_list ap;
    va_start(ap, what);
    for (cl_uint i = 0;; i++) {
        size_t size = va_arg(ap, size_t);
        if (size == 0)
            break;
        const void *ptr = va_arg(ap, const void *);
        cl_int err = clSetKernelArg(k, i, size, ptr);
        if (err != CL_SUCCESS) {
            char where[128];
            snprintf(where, sizeof where, "clSetKernelArg(%s, %u)", what, i);
            st = clattn__cl_fail(ctx, err, where);
            break;
        }
    }
    va_end(ap);
    return st;
}

clattn_status clattn__launch(clattn_context *ctx, cl_kernel k, cl_uint dims, const size_t *gws,
                             const size_t *lws, const char *what)
{
    clattn_status st = CLATTN_SUCCESS;
    char where[128];
    cl_event ev = NULL, *first = first_launch_event(ctx, k, &ev);
    snprintf(where, sizeof where, "clEnqueueNDRangeKernel(%s)", what);
    CHECK_CL(ctx, clEnqueueNDRangeKernel(ctx->queue, k, dims, NULL, gws, lws, 0, NULL, first),
             where);
    if (ev)
        note_first_launch(ctx, k, ev);
    if (ctx->sync) {
        snprintf(where, sizeof where, "clFinish after %s (CLATTN_SYNC)", what);
        CHECK_CL(ctx, clFinish(ctx->queue), where);
    }
fail:
    return st;
}
