/* Context create/wrap/destroy, accessors and the scratch arena. */
#include "internal.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *clattn_version(void)
{
    return CLATTN_VERSION;
}

/* A heap copy of a setting: the params field when given, else the environment variable, else "".
 * room > 0 marks a directory: its longest file path (room bytes past it) must fit in
 * CLATTN_PATH_MAX, so no path built from it is ever cut. */
static clattn_status take_setting(char **dst, const char *param, const char *param_name,
                                  const char *env, size_t room)
{
    const char *v = param ? param : getenv(env);
    const char *what = param ? param_name : env;
    size_t n = v ? strlen(v) : 0;
    if (room && n > CLATTN_PATH_MAX - room)
        return clattn__fail(NULL, CLATTN_ERROR_INVALID_ARGUMENT,
                            "%s: a directory of %zu characters (\"%.40s...\") is too long: the "
                            "paths of its files would pass PATH_MAX (%d); at most %zu characters",
                            what, n, v, (int)CLATTN_PATH_MAX, (size_t)CLATTN_PATH_MAX - room);
    *dst = strdup(v ? v : "");
    return *dst ? CLATTN_SUCCESS
                : clattn__fail(NULL, CLATTN_ERROR_OUT_OF_MEMORY, "out of host memory");
}

/* 1 for 1/true/yes/on, 0 for empty/0/00.../false/no/off (any case), -1 for anything else. */
static int parse_switch(const char *v)
{
    static const char *const on[] = {"1", "true", "yes", "on"}, *const off[] = {"false", "no", "off"};
    if (v[strspn(v, "0")] == '\0')
        return 0;
    for (size_t i = 0; i < sizeof on / sizeof on[0]; i++)
        if (strcasecmp(v, on[i]) == 0)
            return 1;
    for (size_t i = 0; i < sizeof off / sizeof off[0]; i++)
        if (strcasecmp(v, off[i]) == 0)
            return 0;
    return -1;
}

/* params.sync: 1 on, -1 off, both winning over CLATTN_SYNC; 0 leaves it to CLATTN_SYNC. */
static clattn_status take_sync(int *sync, const clattn_params *params)
{
    clattn_status st = CLATTN_SUCCESS;
    int p = params ? params->sync : 0;
    const char *env = getenv("CLATTN_SYNC");
    CHECK(NULL, p >= -1 && p <= 1, CLATTN_ERROR_INVALID_ARGUMENT,
          "params.sync = %d: expected 1 (on), -1 (off) or 0 (as CLATTN_SYNC)", p);
    *sync = p != 0 ? p > 0 : env ? parse_switch(env) : 0;
    CHECK(NULL, *sync >= 0, CLATTN_ERROR_INVALID_ARGUMENT,
          "CLATTN_SYNC=%s: expected 1, true, yes or on, or 0, false, no, off or empty", env);
fail:
    return st;
}

/* Whether the device's extension list holds ext as a whole word. */
static int has_extension(cl_device_id device, const char *ext)
{
    size_t size = 0, n = strlen(ext);
    int found = 0;
    if (clGetDeviceInfo(device, CL_DEVICE_EXTENSIONS, 0, NULL, &size) != CL_SUCCESS || !size)
        return 0;
    char *list = malloc(size + 1);
    if (!list)
        return 0;
    if (clGetDeviceInfo(device, CL_DEVICE_EXTENSIONS, size, list, NULL) == CL_SUCCESS) {
        list[size] = '\0';
        for (const char *p = strstr(list, ext); p && !found; p = strstr(p + 1, ext))
            found = (p == list || p[-1] == ' ') && (p[n] == '\0' || p[n] == ' ');
    }
    free(list);
    return found;
}

/* The half tuning (tuning.c), once the override and the tune file are known: every kernel
 * build of the context then carries its define. */
static clattn_status resolve_half(clattn_context *c)
{
    clattn_tuning t;
    clattn_status st = clattn__tune(c, "half", &t);
    c->fp16_conv = st != CLATTN_SUCCESS ? 0 : strcmp(t.variant, "fp16") == 0 ? 1
                                          : strcmp(t.variant, "clang") == 0 ? 2 : 0;
    return st;
}

static void query_device(clattn_context *c)
{
    char ver[128] = "", cver[128] = "";
    clGetDeviceInfo(c->device, CL_DEVICE_NAME, sizeof c->name, c->name, NULL);
    clGetDeviceInfo(c->device, CL_DEVICE_VENDOR, sizeof c->vendor, c->vendor, NULL);
    clGetDeviceInfo(c->device, CL_DRIVER_VERSION, sizeof c->driver, c->driver, NULL);
    clGetDeviceInfo(c->device, CL_DEVICE_VERSION, sizeof ver, ver, NULL);
    clGetDeviceInfo(c->device, CL_DEVICE_OPENCL_C_VERSION, sizeof cver, cver, NULL);
    clGetDeviceInfo(c->device, CL_DEVICE_TYPE, sizeof c->type, &c->type, NULL);
    clGetDeviceInfo(c->device, CL_DEVICE_PLATFORM, sizeof c->platform, &c->platform, NULL);
    clGetPlatformInfo(c->platform, CL_PLATFORM_NAME, sizeof c->platform_name, c->platform_name, NULL);
    clGetPlatformInfo(c->platform, CL_PLATFORM_VERSION, sizeof c->platform_version,
                      c->platform_version, NULL);
    cl_ulong alloc = 0, local = 0;
    clGetDeviceInfo(c->device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof c->max_wg, &c->max_wg, NULL);
    clGetDeviceInfo(c->device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof alloc, &alloc, NULL);
    clGetDeviceInfo(c->device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local, &local, NULL);
    clGetDeviceInfo(c->device, CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT, sizeof c->native_float,
                    &c->native_float, NULL);
    clGetDeviceInfo(c->device, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof c->base_align,
                    &c->base_align, NULL);
    c->base_align /= 8; /* bits */
    clGetDeviceInfo(c->device, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof c->compute_units,
                    &c->compute_units, NULL);
    c->has_fp16 = has_extension(c->device, "cl_khr_fp16");
    c->max_alloc = (size_t)alloc;
    c->local_mem = (size_t)local;
    const char *t = (c->type & CL_DEVICE_TYPE_GPU) ? "GPU"
                    : (c->type & CL_DEVICE_TYPE_CPU) ? "CPU"
                    : (c->type & CL_DEVICE_TYPE_ACCELERATOR) ? "accelerator" : "other";
    snprintf(c->description, sizeof c->description, "%s (%s, %s, %s, %s, driver %s)", c->name,
             c->vendor, t, c->platform_name, cver, c->driver);
    /* Mesa's rusticl aborts the process on a binary it does not know
     * (tests/portability/rusticl_binary_repro.c), which a disk cache meets after a driver
     * update; it caches compiled kernels itself, so clattn's disk cache stays off there. */
    c->no_binary_cache = strcmp(c->platform_name, "rusticl") == 0;
    /* llvmpipe's gallivm keeps one loop counter per work-item (per SIMD batch of them), shared by
     * every loop of the kernel and never reset, and leaves every loop once it has run 65535
     * iterations, silently (tests/portability/llvmpipe_loop_limit_repro.c). The budget keeps a
     * margin for the few loops the estimates in the ops leave out. */
    if (strstr(c->name, "llvmpipe"))
        c->loop_limit = 65535 - 512;
}

/* A context holding the settings of params and the environment, or a failure naming one. */
static clattn_status alloc_context(clattn_context **out, const clattn_params *params)
{
    clattn_status st = CLATTN_SUCCESS;
    const clattn_params none = {0};
    clattn_context *c = *out = calloc(1, sizeof *c);
    CHECK(NULL, c, CLATTN_ERROR_OUT_OF_MEMORY, "out of host memory");
    if (!params)
        params = &none;
    CHECK_ST(take_setting(&c->tuning, params->tuning, "params.tuning", "CLATTN_TUNE", 0));
    CHECK_ST(take_setting(&c->kernel_dir, params->kernel_dir, "params.kernel_dir",
                          "CLATTN_KERNEL_DIR", CLATTN_KERNEL_FILE_ROOM));
    CHECK_ST(take_setting(&c->cache_dir, params->cache_dir, "params.cache_dir", "CLATTN_CACHE_DIR",
                          CLATTN_CACHE_FILE_ROOM));
    CHECK_ST(take_setting(&c->tune_path, params->tune_file, "params.tune_file",
                          "CLATTN_TUNE_FILE", 0));
    CHECK_ST(take_sync(&c->sync, params));
fail:
    return st;
}

clattn_status clattn_context_create(clattn_context **out, const clattn_params *params)
{
    clattn_status st = CLATTN_SUCCESS;
    clattn_context *c = NULL;
    cl_int err;
    if (!out)
        return clattn__fail(NULL, CLATTN_ERROR_INVALID_ARGUMENT, "ctx: NULL pointer");
    *out = NULL;
    CHECK_ST(alloc_context(&c, params));
    CHECK_ST(clattn__select_device(params ? params->device : NULL, &c->platform, &c->device));
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)c->platform, 0};
    c->cl = clCreateContext(props, 1, &c->device, NULL, NULL, &err);
    CHECK_CL(NULL, err, "clCreateContext");
    c->queue = clCreateCommandQueue(c->cl, c->device, 0, &err);
    CHECK_CL(NULL, err, "clCreateCommandQueue");
    c->owns_queue = 1;
    query_device(c);
    if (clattn__check_tuning(c) != CLATTN_SUCCESS)
        CHECK(NULL, 0, CLATTN_ERROR_INVALID_ARGUMENT, "%s", c->err);
    clattn__load_tune_file(c);
    if (resolve_half(c) != CLATTN_SUCCESS)
        CHECK(NULL, 0, CLATTN_ERROR_INVALID_ARGUMENT, "%s", c->err);
    *out = c;
    return CLATTN_SUCCESS;
fail:
    clattn_context_destroy(&c);
    return st;
}

clattn_status clattn_context_wrap(clattn_context **out, cl_context context, cl_device_id device,
                                  cl_command_queue queue, const clattn_params *params)
{
    clattn_status st = CLATTN_SUCCESS;
    clattn_context *c = NULL;
    cl_command_queue_properties qp = 0;
    cl_context qctx = NULL;
    cl_device_id qdev = NULL;
    if (!out)
        return clattn__fail(NULL, CLATTN_ERROR_INVALID_ARGUMENT, "ctx: NULL pointer");
    *out = NULL;
    CHECK(NULL, context && device && queue, CLATTN_ERROR_INVALID_ARGUMENT,
          "context, device and queue must all be non-NULL");
    CHECK_CL(NULL, clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof qctx, &qctx, NULL),
             "clGetCommandQueueInfo(queue)");
    clGetCommandQueueInfo(queue, CL_QUEUE_DEVICE, sizeof qdev, &qdev, NULL);
    clGetCommandQueueInfo(queue, CL_QUEUE_PROPERTIES, sizeof qp, &qp, NULL);
    CHECK(NULL, qctx == context && qdev == device, CLATTN_ERROR_INVALID_ARGUMENT,
          "queue: does not belong to the given context and device");
    CHECK(NULL, !(qp & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE), CLATTN_ERROR_INVALID_ARGUMENT,
          "queue: must be in-order (clattn chains kernels through buffers)");
    CHECK_ST(alloc_context(&c, params));
    clRetainContext(context);
    c->cl = context;
    clRetainCommandQueue(queue);
    c->queue = queue;
    c->device = device;
    query_device(c);
    if (clattn__check_tuning(c) != CLATTN_SUCCESS)
        CHECK(NULL, 0, CLATTN_ERROR_INVALID_ARGUMENT, "%s", c->err);
    clattn__load_tune_file(c);
    if (resolve_half(c) != CLATTN_SUCCESS)
        CHECK(NULL, 0, CLATTN_ERROR_INVALID_ARGUMENT, "%s", c->err);
    *out = c;
    return CLATTN_SUCCESS;
fail:
    clattn_context_destroy(&c);
    return st;
}

void clattn_context_destroy(clattn_context **pc)
{
    if (!pc || !*pc)
        return;
    clattn_context *c = *pc;
    /* The work queued on its own queue finishes first: an implementation may still be compiling
     * for a launch (PoCL builds work-group functions when a kernel runs), which a process that
     * exits right after destroy would tear down under it. */
    if (c->queue && c->owns_queue)
        clFinish(c->queue);
    clattn__release_programs(c);
    for (int i = 0; i < CLATTN_SCRATCH_COUNT; i++)
        if (c->scratch[i])
            clReleaseMemObject(c->scratch[i]);
    if (c->queue)
        clReleaseCommandQueue(c->queue);
    if (c->cl)
        clReleaseContext(c->cl);
    free(c->tuning);
    free(c->kernel_dir);
    free(c->cache_dir);
    free(c->tune_path);
    free(c->tuned);
    free(c);
    *pc = NULL;
}

cl_context clattn_context_cl(const clattn_context *c) { return c ? c->cl : NULL; }
cl_device_id clattn_context_device(const clattn_context *c) { return c ? c->device : NULL; }
cl_command_queue clattn_context_queue(const clattn_context *c) { return c ? c->queue : NULL; }
const char *clattn_context_description(const clattn_context *c) { return c ? c->description : ""; }

size_t clattn_context_scratch_bytes(const clattn_context *c)
{
    size_t n = 0;
    for (int i = 0; c && i < CLATTN_SCRATCH_COUNT; i++)
        n += c->scratch_bytes[i];
    return n;
}

clattn_status clattn_finish(clattn_context *ctx)
{
    clattn_status st = CLATTN_SUCCESS;
    CHECK(NULL, ctx, CLATTN_ERROR_INVALID_ARGUMENT, "ctx: NULL context");
    CHECK_CL(ctx, clFinish(ctx->queue), "clFinish");
fail:
    return st;
}

clattn_status clattn__scratch(clattn_context *ctx, int slot, size_t bytes, cl_mem *out)
{
    clattn_status st = CLATTN_SUCCESS;
    cl_int err;
    if (bytes == 0)
        bytes = 4;
    if (ctx->scratch_bytes[slot] < bytes) {
        /* The first allocation is exact; later growth takes 1.5x so a sequence of slightly larger
         * calls does not reallocate each time. Release defers the free until queued kernels using
         * the old buffer are done. */
        size_t want = ctx->scratch[slot] ? bytes + bytes / 2 : bytes;
        if (want > ctx->max_alloc)
            want = bytes;
        CHECK(ctx, bytes <= ctx->max_alloc, CLATTN_ERROR_OUT_OF_MEMORY,
              "scratch: %zu bytes exceed the device's max allocation (%zu)", bytes, ctx->max_alloc);
        cl_mem m = clCreateBuffer(ctx->cl, CL_MEM_READ_WRITE, want, NULL, &err);
        CHECK_CL(ctx, err, "clCreateBuffer(scratch)");
        if (ctx->scratch[slot])
            clReleaseMemObject(ctx->scratch[slot]);
        ctx->scratch[slot] = m;
        ctx->scratch_bytes[slot] = want;
    }
    *out = ctx->scratch[slot];
fail:
    return st;
}
