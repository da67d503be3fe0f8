/* Status strings, the last-error text and OpenCL error names. */
#include "internal.h"
#include <stdio.h>
#include <string.h>

#if defined(__GNUC__)
#define CLATTN_THREAD_LOCAL __thread
#else
#define CLATTN_THREAD_LOCAL _Thread_local
#endif

/* Failures without a context (context creation) land here, one buffer per thread. */
static CLATTN_THREAD_LOCAL char thread_err[CLATTN_ERR_SIZE];

const char *clattn_status_string(clattn_status s)
{
    switch (s) {
    case CLATTN_SUCCESS: return "success";
    case CLATTN_ERROR_INVALID_ARGUMENT: return "invalid argument";
    case CLATTN_ERROR_SHAPE_MISMATCH: return "shape mismatch";
    case CLATTN_ERROR_INVALID_TENSOR: return "invalid tensor";
    case CLATTN_ERROR_NO_PLATFORM: return "no OpenCL platform or device";
    case CLATTN_ERROR_DEVICE_NOT_FOUND: return "device not found";
    case CLATTN_ERROR_BUILD_FAILED: return "kernel build failed";
    case CLATTN_ERROR_OUT_OF_MEMORY: return "out of memory";
    case CLATTN_ERROR_OPENCL: return "OpenCL error";
    case CLATTN_ERROR_UNSUPPORTED: return "unsupported on this device";
    case CLATTN_ERROR_IO: return "I/O error";
    }
    return "unknown status";
}

const char *clattn_last_error(const clattn_context *ctx)
{
    return ctx ? ctx->err : thread_err;
}

void clattn__clear_error(clattn_context *ctx)
{
    if (ctx)
        ctx->err[0] = '\0';
}

clattn_status clattn__fail(clattn_context *ctx, clattn_status s, const char *fmt, ...)
{
    char *buf = ctx ? ctx->err : thread_err;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, CLATTN_ERR_SIZE, fmt, ap);
    va_end(ap);
    return s;
}

void clattn__prefix_error(clattn_context *ctx, const char *fmt, ...)
{
    char *buf = ctx ? ctx->err : thread_err, pre[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    size_t n = strlen(pre), m = strlen(buf);
    if (n + m >= CLATTN_ERR_SIZE) /* the message's end gives way */
        m = CLATTN_ERR_SIZE - 1 - n;
    memmove(buf + n, buf, m);
    memcpy(buf, pre, n);
    buf[n + m] = '\0';
}

const char *clattn__cl_error_name(cl_int err)
{
    switch (err) {
#define E(x) case x: return #x;
        E(CL_SUCCESS) E(CL_DEVICE_NOT_FOUND) E(CL_DEVICE_NOT_AVAILABLE) E(CL_COMPILER_NOT_AVAILABLE)
        E(CL_MEM_OBJECT_ALLOCATION_FAILURE) E(CL_OUT_OF_RESOURCES) E(CL_OUT_OF_HOST_MEMORY)
        E(CL_PROFILING_INFO_NOT_AVAILABLE) E(CL_MEM_COPY_OVERLAP) E(CL_IMAGE_FORMAT_MISMATCH)
        E(CL_IMAGE_FORMAT_NOT_SUPPORTED) E(CL_BUILD_PROGRAM_FAILURE) E(CL_MAP_FAILURE)
        E(CL_MISALIGNED_SUB_BUFFER_OFFSET) E(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
        E(CL_COMPILE_PROGRAM_FAILURE) E(CL_LINKER_NOT_AVAILABLE) E(CL_LINK_PROGRAM_FAILURE)
        E(CL_DEVICE_PARTITION_FAILED) E(CL_KERNEL_ARG_INFO_NOT_AVAILABLE) E(CL_INVALID_VALUE)
        E(CL_INVALID_DEVICE_TYPE) E(CL_INVALID_PLATFORM) E(CL_INVALID_DEVICE) E(CL_INVALID_CONTEXT)
        E(CL_INVALID_QUEUE_PROPERTIES) E(CL_INVALID_COMMAND_QUEUE) E(CL_INVALID_HOST_PTR)
        E(CL_INVALID_MEM_OBJECT) E(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR) E(CL_INVALID_IMAGE_SIZE)
        E(CL_INVALID_SAMPLER) E(CL_INVALID_BINARY) E(CL_INVALID_BUILD_OPTIONS) E(CL_INVALID_PROGRAM)
        E(CL_INVALID_PROGRAM_EXECUTABLE) E(CL_INVALID_KERNEL_NAME) E(CL_INVALID_KERNEL_DEFINITION)
        E(CL_INVALID_KERNEL) E(CL_INVALID_ARG_INDEX) E(CL_INVALID_ARG_VALUE) E(CL_INVALID_ARG_SIZE)
        E(CL_INVALID_KERNEL_ARGS) E(CL_INVALID_WORK_DIMENSION) E(CL_INVALID_WORK_GROUP_SIZE)
        E(CL_INVALID_WORK_ITEM_SIZE) E(CL_INVALID_GLOBAL_OFFSET) E(CL_INVALID_EVENT_WAIT_LIST)
        E(CL_INVALID_EVENT) E(CL_INVALID_OPERATION) E(CL_INVALID_GL_OBJECT) E(CL_INVALID_BUFFER_SIZE)
        E(CL_INVALID_MIP_LEVEL) E(CL_INVALID_GLOBAL_WORK_SIZE) E(CL_INVALID_PROPERTY)
        E(CL_INVALID_IMAGE_DESCRIPTOR) E(CL_INVALID_COMPILER_OPTIONS) E(CL_INVALID_LINKER_OPTIONS)
        E(CL_INVALID_DEVICE_PARTITION_COUNT)
#undef E
    case -1001: return "CL_PLATFORM_NOT_FOUND_KHR";
    }
    return "unknown OpenCL error";
}

clattn_status clattn__cl_fail(clattn_context *ctx, cl_int err, const char *what)
{
    clattn_status s = CLATTN_ERROR_OPENCL;
    if (err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_HOST_MEMORY ||
        err == CL_OUT_OF_RESOURCES || err == CL_INVALID_BUFFER_SIZE)
        s = CLATTN_ERROR_OUT_OF_MEMORY;
    return clattn__fail(ctx, s, "%s failed: %s (%d)", what, clattn__cl_error_name(err), (int)err);
}
