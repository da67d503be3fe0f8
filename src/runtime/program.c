/* Kernel sources (embedded or from CLATTN_KERNEL_DIR), build options, program and kernel caches,
 * argument setting and launches. */
#include "internal.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_INCLUDE_DEPTH 4

int clattn__build_options(const clattn_context *ctx, const char *defines, char *buf, size_t size)
{
    /* -cl-mad-enable is allowed: tolerances are stated for fused or unfused multiply-add alike.
     * -w: PoCL prints its compiler's warnings on the application's stderr (on CPUs without
     * AVX-512, "N warnings generated" for every float16 helper, clang's -Wpsabi); the kernels are
     * held to warning-free strict builds offline instead (the portability suite), and a failed
     * build still reports its log. */
    char half[32] = "";
    if (ctx->fp16_conv)
        clattn__define(half, sizeof half, "CLATTN_FP16", ctx->fp16_conv);
    return snprintf(buf, size, "-cl-std=CL1.2 -cl-mad-enable -w -D CLATTN_DEVICE_%s=1 %s%s",
             (ctx->type & CL_DEVICE_TYPE_GPU) ? "GPU" : (ctx->type & CL_DEVICE_TYPE_CPU) ? "CPU"
                                                                                      : "OTHER",
             half, defines ? defines : "");
}

char *clattn__define(char *buf, size_t size, const char *name, int value)
{
    size_t used = strlen(buf);
    if (used < size)
        snprintf(buf + used, size - used, "-D %s=%d ", name, value);
    return buf;
}

char *clattn__dtype_define(char *buf, size_t size, const char *name, clattn_dtype dtype)
{
    return dtype != CLATTN_FLOAT32 ? clattn__define(buf, size, name, (int)dtype) : buf;
}

static char *read_file(const char *path)
{
    FILE *f = clattn__open_regular(path); /* a FIFO there blocked the op for good */
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
        char path[CLATTN_PATH_MAX + 1]; /* longer kernel dirs fail context creation */
        snprintf(path, sizeof path, "%s/%s", ctx->kernel_dir, file);
        char *body = read_file(path);
        CHECK(ctx, body, CLATTN_ERROR_IO, "kernel file %s: cannot read (the kernel directory, "
              "params.kernel_dir or CLATTN_KERNEL_DIR: %s)", path, ctx->kernel_dir);
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

/* The file named by line p (up to end) when it is an `#include "x"` (blanks allowed around the
 * '#', as the preprocessor allows them), copied into inc; 0 otherwise. Every such line must be
 * expanded here: one left to the compiler would resolve against the working directory and stay
 * out of the program cache's key. */
static int include_name(const char *p, const char *end, char *inc, size_t size)
{
    p += strspn(p, " \t");
    if (*p != '#')
        return 0;
    p += 1 + strspn(p + 1, " \t");
    if (strncmp(p, "include", 7) != 0)
        return 0;
    p += 7 + strspn(p + 7, " \t");
    const char *close = *p == '"' ? memchr(p + 1, '"', (size_t)(end - p - 1)) : NULL;
    if (!close || (size_t)(close - p - 1) >= size)
        return 0;
    memcpy(inc, p + 1, (size_t)(close - p - 1));
    inc[close - p - 1] = '\0';
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
        if (include_name(p, p + n, inc, sizeof inc)) {
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

/* Builds file with options into *out: from the disk cache when from_cache and it holds that
 * program, else from source. Sets e's disk cache key, cache size and from_disk. */
static clattn_status build_program(clattn_context *ctx, const char *file, const char *options,
                                   int from_cache, clattn_program_entry *e, cl_program *out)
{
    clattn_status st = CLATTN_SUCCESS;
    strbuf b = {0};
    *out = NULL;
    CHECK_ST(expand(ctx, file, &b, 0));
    if (ctx->cache_dir[0] && !ctx->no_binary_cache) {
        e->cache_key = clattn__cache_key(ctx, b.s, options);
        if (from_cache)
            *out = clattn__cache_load(ctx, e->cache_key, &e->cache_size);
    }
    e->from_disk = *out != NULL;
    if (!*out)
        CHECK_ST(compile_source(ctx, file, b.s, options, out));
fail:
    free(b.s);
    return st;
}

/* items with room for one more element (count n, capacity *cap, elements of size bytes), or NULL
 * when out of memory (items is still valid then). */
static void *grow(void *items, int n, int *cap, size_t size)
{
    if (n < *cap)
        return items;
    int want = *cap ? *cap * 2 : 16;
    void *p = realloc(items, (size_t)want * size);
    if (p)
        *cap = want;
    return p;
}

/* "file|options" in buf when it fits, else in a malloc'd string; NULL when out of memory. */
static char *program_key(const clattn_context *ctx, const char *file, const char *defines,
                         char *buf, size_t size)
{
    size_t n = strlen(file) + 1, len = n + (size_t)clattn__build_options(ctx, defines, NULL, 0);
    char *key = len < size ? buf : malloc(len + 1);
    if (key) {
        memcpy(key, file, n - 1);
        key[n - 1] = '|';
        clattn__build_options(ctx, defines, key + n, len + 1 - n);
    }
    return key;
}

static int find_program(const clattn_context *ctx, const char *key, uint64_t hash)
{
    for (int i = 0; i < ctx->nprograms; i++)
        if (ctx->programs[i].hash == hash && strcmp(ctx->programs[i].key, key) == 0)
            return i;
    return -1;
}

/* Builds the program of key ("file|options") and appends it to ctx->programs at *index. */
static clattn_status add_program(clattn_context *ctx, const char *file, const char *key,
                                 uint64_t hash, int *index)
{
    clattn_status st = CLATTN_SUCCESS;
    clattn_program_entry e = {0}, *grown;
    CHECK(ctx, (e.key = strdup(key)), CLATTN_ERROR_OUT_OF_MEMORY, "out of host memory");
    grown = grow(ctx->programs, ctx->nprograms, &ctx->programs_cap, sizeof e);
    CHECK(ctx, grown, CLATTN_ERROR_OUT_OF_MEMORY, "out of host memory");
    ctx->programs = grown;
    e.hash = hash;
    CHECK_ST(build_program(ctx, file, e.key + strlen(file) + 1, 1, &e, &e.program));
    *index = ctx->nprograms;
    ctx->programs[ctx->nprograms++] = e;
    e.key = NULL;
fail:
    free(e.key);
    return st;
}

/* The index of file's program with these defines in ctx->programs, built on first use. */
static clattn_status get_program(clattn_context *ctx, const char *file, const char *defines,
                                 int *index)
{
    clattn_status st = CLATTN_SUCCESS;
    char buf[1024], *key = program_key(ctx, file, defines, buf, sizeof buf);
    CHECK(ctx, key, CLATTN_ERROR_OUT_OF_MEMORY, "out of host memory");
    uint64_t hash = clattn__fnv1a(CLATTN_FNV_OFFSET, key, strlen(key));
    *index = find_program(ctx, key, hash);
    if (*index < 0)
        CHECK_ST(add_program(ctx, file, key, hash, index));
fail:
    if (key != buf)
        free(key);
    return st;
}

/* Replaces a program loaded from the disk cache, which lacks a kernel an op needs (another
 * program's binary under this key), by its build from source; its cache file is rewritten once
 * the new program's kernels have run. Kernels created from the old program stay in ctx->kernels
 * (an op may still hold them) but no lookup finds them again. */
static clattn_status rebuild_from_source(clattn_context *ctx, int index)
{
    clattn_status st = CLATTN_SUCCESS;
    clattn_program_entry *e = &ctx->programs[index], fresh = {0};
    char *file = strndup(e->key, strcspn(e->key, "|"));
    CHECK(ctx, file, CLATTN_ERROR_OUT_OF_MEMORY, "out of host memory");
    CHECK_ST(build_program(ctx, file, e->key + strlen(file) + 1, 0, &fresh, &fresh.program));
    clReleaseProgram(e->program);
    e->program = fresh.program;
    e->from_disk = 0;
    e->cache_size = 0;
    if (e->pending)
        clReleaseEvent(e->pending);
    e->pending = NULL;
    ctx->cache_hits--;
fail:
    free(file);
    return st;
}

clattn_status clattn__get_kernel(clattn_context *ctx, const char *file, const char *defines,
                                 const char *name, cl_kernel *out)
{
    clattn_status st = CLATTN_SUCCESS;
    cl_kernel k = NULL;
    cl_int err;
    int pi;
    CHECK_ST(get_program(ctx, file, defines, &pi));
    cl_program p = ctx->programs[pi].program;
    for (int i = 0; i < ctx->nkernels; i++)
        if (ctx->kernels[i].program == p && strcmp(ctx->kernels[i].name, name) == 0) {
            *out = ctx->kernels[i].kernel;
            return CLATTN_SUCCESS;
        }
    clattn_kernel_entry *grown = grow(ctx->kernels, ctx->nkernels, &ctx->kernels_cap,
                                      sizeof *grown);
    CHECK(ctx, grown, CLATTN_ERROR_OUT_OF_MEMORY, "out of host memory");
    ctx->kernels = grown;
    k = clCreateKernel(p, name, &err);
    if (err != CL_SUCCESS && ctx->programs[pi].from_disk) {
        CHECK_ST(rebuild_from_source(ctx, pi));
        p = ctx->programs[pi].program;
        k = clCreateKernel(p, name, &err);
    }
    CHECK_CL(ctx, err, name);
    clattn_kernel_entry *e = &ctx->kernels[ctx->nkernels];
    CHECK(ctx, (e->name = strdup(name)), CLATTN_ERROR_OUT_OF_MEMORY, "out of host memory");
    e->program = p;
    e->kernel = k;
    e->launched = 0;
    ctx->nkernels++;
    *out = k;
    k = NULL;
fail:
    if (k)
        clReleaseKernel(k);
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
    clattn_kernel_entry *e = ctx->cache_dir[0] && !ctx->no_binary_cache ? kernel_entry(ctx, k)
                                                                       : NULL;
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
    for (int i = 0; i < ctx->nkernels; i++) {
        clReleaseKernel(ctx->kernels[i].kernel);
        free(ctx->kernels[i].name);
    }
    for (int i = 0; i < ctx->nprograms; i++) {
        clReleaseProgram(ctx->programs[i].program);
        free(ctx->programs[i].key);
    }
    free(ctx->kernels);
    free(ctx->programs);
    ctx->kernels = NULL;
    ctx->programs = NULL;
    ctx->nkernels = ctx->nprograms = ctx->kernels_cap = ctx->programs_cap = 0;
}

/* CLATTN_SYNC: waits for the queue after each command and reports its failure there. */
static clattn_status finish_if_sync(clattn_context *ctx, const char *what)
{
    clattn_status st = CLATTN_SUCCESS;
    char where[128];
    if (ctx->sync) {
        snprintf(where, sizeof where, "clFinish after %s (CLATTN_SYNC)", what);
        CHECK_CL(ctx, clFinish(ctx->queue), where);
    }
fail:
    return st;
}

static clattn_status set_args_v(clattn_context *ctx, cl_kernel k, const char *what, cl_uint first,
                                va_list ap)
{
    clattn_status st = CLATTN_SUCCESS;
    for (cl_uint i = first;; i++) {
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
    return st;
}

clattn_status clattn__set_args(clattn_context *ctx, cl_kernel k, const char *what, ...)
{
    va_list ap;
    va_start(ap, what);
    clattn_status st = set_args_v(ctx, k, what, 0, ap);
    va_end(ap);
    return st;
}

clattn_status clattn__set_args_at(clattn_context *ctx, cl_kernel k, const char *what,
                                  cl_uint first, ...)
{
    va_list ap;
    va_start(ap, first);
    clattn_status st = set_args_v(ctx, k, what, first, ap);
    va_end(ap);
    return st;
}

/* A dry run's stand-in for the checks clEnqueueNDRangeKernel makes on the work-group size. */
static clattn_status check_group(clattn_context *ctx, cl_kernel k, cl_uint dims, const size_t *gws,
                                 const size_t *lws, const char *what)
{
    clattn_status st = CLATTN_SUCCESS;
    size_t items = 1, limit = 0;
    for (cl_uint i = 0; lws && i < dims; i++) {
        CHECK(ctx, lws[i] && gws[i] % lws[i] == 0, CLATTN_ERROR_INVALID_ARGUMENT,
              "%s: local size %zu does not divide global size %zu in dimension %u", what, lws[i],
              gws[i], i);
        items *= lws[i];
    }
    CHECK_CL(ctx, clGetKernelWorkGroupInfo(k, ctx->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof limit,
                                           &limit, NULL), "clGetKernelWorkGroupInfo");
    CHECK(ctx, items <= limit, CLATTN_ERROR_UNSUPPORTED,
          "%s: a work-group of %zu items exceeds the kernel's limit of %zu on this device", what,
          items, limit);
fail:
    return st;
}

clattn_status clattn__kernel_group_size(clattn_context *ctx, cl_kernel k, const char *what,
                                        size_t *limit)
{
    clattn_status st = CLATTN_SUCCESS;
    char where[128];
    snprintf(where, sizeof where, "clGetKernelWorkGroupInfo(%s)", what);
    CHECK_CL(ctx, clGetKernelWorkGroupInfo(k, ctx->device, CL_KERNEL_WORK_GROUP_SIZE,
                                           sizeof *limit, limit, NULL), where);
fail:
    return st;
}

clattn_status clattn__launch(clattn_context *ctx, cl_kernel k, cl_uint dims, const size_t *gws,
                             const size_t *lws, const char *what)
{
    clattn_status st = CLATTN_SUCCESS;
    char where[128];
    if (ctx->dry_run)
        return check_group(ctx, k, dims, gws, lws, what);
    cl_event ev = NULL, *first = first_launch_event(ctx, k, &ev);
    snprintf(where, sizeof where, "clEnqueueNDRangeKernel(%s)", what);
    CHECK_CL(ctx, clEnqueueNDRangeKernel(ctx->queue, k, dims, NULL, gws, lws, 0, NULL, first),
             where);
    if (ev)
        note_first_launch(ctx, k, ev);
    CHECK_ST(finish_if_sync(ctx, what));
fail:
    return st;
}

clattn_status clattn__copy(clattn_context *ctx, cl_mem src, size_t src_bytes_off, cl_mem dst,
                           size_t dst_bytes_off, size_t bytes, const char *what)
{
    clattn_status st = CLATTN_SUCCESS;
    char where[128];
    if (ctx->dry_run)
        return CLATTN_SUCCESS;
    snprintf(where, sizeof where, "clEnqueueCopyBuffer(%s)", what);
    CHECK_CL(ctx, clEnqueueCopyBuffer(ctx->queue, src, dst, src_bytes_off, dst_bytes_off, bytes, 0,
                                      NULL, NULL), where);
    CHECK_ST(finish_if_sync(ctx, what));
fail:
    return st;
}

clattn_status clattn__fill(clattn_context *ctx, const clattn_tensor *t, float value,
                           const char *what)
{
    clattn_status st = CLATTN_SUCCESS;
    char where[128];
    size_t es = clattn_dtype_size(t->dtype);
    unsigned short h = t->dtype == CLATTN_FLOAT16 ? clattn_float_to_half(value)
                                                  : clattn_float_to_bfloat16(value);
    const void *pattern = es == 4 ? (const void *)&value : (const void *)&h;
    if (ctx->dry_run)
        return CLATTN_SUCCESS;
    snprintf(where, sizeof where, "clEnqueueFillBuffer(%s)", what);
    CHECK_CL(ctx, clEnqueueFillBuffer(ctx->queue, t->buf, pattern, es, t->offset * es,
                                      clattn_tensor_numel(t) * es, 0, NULL, NULL), where);
    CHECK_ST(finish_if_sync(ctx, what));
fail:
    return st;
}
