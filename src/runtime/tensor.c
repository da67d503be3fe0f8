/* Tensor views: validation and host <-> device helpers. */
#include "internal.h"
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

clattn_tensor clattn_view(cl_mem buf, clattn_dtype dtype, size_t offset, int ndim,
                          const size_t *dims)
{
    clattn_tensor t;
    memset(&t, 0, sizeof t);
    t.buf = buf;
    t.dtype = dtype;
    t.offset = offset;
    t.ndim = ndim;
    for (int i = 0; i < ndim && i < CLATTN_MAX_DIMS && dims; i++)
        t.dims[i] = dims[i];
    return t;
}

size_t clattn_tensor_numel(const clattn_tensor *t)
{
    size_t n = 1;
    if (!t || t->ndim < 1 || t->ndim > CLATTN_MAX_DIMS)
        return 0;
    for (int i = 0; i < t->ndim; i++) {
        if (t->dims[i] && n > SIZE_MAX / t->dims[i])
            return 0; /* not a wrapped count that a caller might size an array by */
        n *= t->dims[i];
    }
    return n;
}

const char *clattn__shape_str(const clattn_tensor *t, char *buf, size_t size)
{
    size_t used = 0;
    used += (size_t)snprintf(buf, size, "(");
    for (int i = 0; t && i < t->ndim && i < CLATTN_MAX_DIMS && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, i ? ", %zu" : "%zu", t->dims[i]);
    if (used < size)
        snprintf(buf + used, size - used, ")");
    return buf;
}

size_t clattn__batch_count(const clattn_tensor *t, int inner_dims)
{
    size_t n = 1;
    for (int i = 0; i < t->ndim - inner_dims; i++)
        n *= t->dims[i];
    return n;
}

int clattn__same_view(const clattn_tensor *a, const clattn_tensor *b)
{
    return a->buf == b->buf && a->offset == b->offset && a->dtype == b->dtype;
}

/* The bytes a view covers, in the storage that holds them: a sub-buffer's bytes are its root
 * buffer's from the origin on; a buffer over application memory (CL_MEM_USE_HOST_PTR) is that
 * memory, so two such buffers over the same array alias too (space NULL, host addresses). */
typedef struct {
    const void *space;
    uintptr_t begin, end;
} byte_span;

static byte_span span_of(const clattn_tensor *t)
{
    cl_mem m = t->buf, parent = NULL;
    size_t origin = 0;
    cl_mem_flags flags = 0;
    void *host = NULL;
    size_t es = clattn_dtype_size(t->dtype);
    byte_span s = {NULL, (uintptr_t)(t->offset * es), 0};
    /* OpenCL 1.2 has no sub-buffers of sub-buffers, but later versions might: follow the chain. */
    for (int depth = 0; depth < 16; depth++) {
        if (clGetMemObjectInfo(m, CL_MEM_ASSOCIATED_MEMOBJECT, sizeof parent, &parent, NULL) !=
                CL_SUCCESS || !parent ||
            clGetMemObjectInfo(m, CL_MEM_OFFSET, sizeof origin, &origin, NULL) != CL_SUCCESS)
            break;
        s.begin += origin;
        m = parent;
    }
    s.space = m;
    if (clGetMemObjectInfo(m, CL_MEM_FLAGS, sizeof flags, &flags, NULL) == CL_SUCCESS &&
        (flags & CL_MEM_USE_HOST_PTR) &&
        clGetMemObjectInfo(m, CL_MEM_HOST_PTR, sizeof host, &host, NULL) == CL_SUCCESS && host) {
        s.space = NULL;
        s.begin += (uintptr_t)host;
    }
    s.end = s.begin + (uintptr_t)(clattn_tensor_numel(t) * es);
    return s;
}

int clattn__overlaps(const clattn_tensor *a, const clattn_tensor *b)
{
    size_t ea = clattn_dtype_size(a->dtype), eb = clattn_dtype_size(b->dtype);
    if (a->buf == b->buf) /* the common case needs no queries; bytes, as dtypes may differ */
        return a->offset * ea < (b->offset + clattn_tensor_numel(b)) * eb &&
               b->offset * eb < (a->offset + clattn_tensor_numel(a)) * ea;
    byte_span x = span_of(a), y = span_of(b);
    return x.space == y.space && x.begin < y.end && y.begin < x.end;
}

clattn_status clattn__check_no_overlap(clattn_context *ctx, const clattn_arg *outs, int nouts,
                                       const clattn_arg *ins, int nins)
{
    clattn_status st = CLATTN_SUCCESS;
    for (int i = 0; i < nouts; i++) {
        if (!outs[i].t)
            continue;
        for (int j = 0; j < nins; j++)
            CHECK(ctx, !ins[j].t || !clattn__overlaps(outs[i].t, ins[j].t),
                  CLATTN_ERROR_INVALID_ARGUMENT, "%s: overlaps %s", outs[i].name, ins[j].name);
        for (int j = i + 1; j < nouts; j++)
            CHECK(ctx, !outs[j].t || !clattn__overlaps(outs[i].t, outs[j].t),
                  CLATTN_ERROR_INVALID_ARGUMENT, "%s: overlaps %s", outs[i].name, outs[j].name);
    }
fail:
    return st;
}

/* Kernels index with 32-bit ints (fast on GPUs); views must stay below this many elements. */
#define MAX_ELEMENTS ((size_t)INT_MAX)

size_t clattn_dtype_size(clattn_dtype d)
{
    return d == CLATTN_FLOAT32 || d == CLATTN_INT32 ? 4
           : d == CLATTN_FLOAT16 || d == CLATTN_BFLOAT16 ? 2
                                                          : 0;
}

const char *clattn__dtype_name(clattn_dtype d)
{
    static const char *const names[] = {"float32", "int32", "float16", "bfloat16"};
    return clattn_dtype_size(d) ? names[d] : "unknown";
}

clattn_status clattn__check_tensor(clattn_context *ctx, const clattn_tensor *t, const char *name,
                                   clattn_dtype dtype, int min_rank, int max_rank)
{
    clattn_status st = CLATTN_SUCCESS;
    size_t bytes = 0, n = 1;
    cl_mem_object_type type = 0;
    cl_context owner = NULL;
    char shape[96];
    CHECK(ctx, t, CLATTN_ERROR_INVALID_ARGUMENT, "%s: NULL tensor", name);
    CHECK(ctx, t->buf, CLATTN_ERROR_INVALID_ARGUMENT, "%s: tensor has no buffer (buf is NULL)", name);
    CHECK(ctx, t->ndim >= min_rank && t->ndim <= max_rank, CLATTN_ERROR_SHAPE_MISMATCH,
          "%s: rank %d, expected %d to %d dims", name, t->ndim, min_rank, max_rank);
    CHECK(ctx, clattn_dtype_size(t->dtype), CLATTN_ERROR_INVALID_TENSOR,
          "%s: dtype %d is unknown (CLATTN_FLOAT32 = 0, CLATTN_INT32 = 1, CLATTN_FLOAT16 = 2, "
          "CLATTN_BFLOAT16 = 3)", name, (int)t->dtype);
    CHECK(ctx, t->dtype == dtype, CLATTN_ERROR_INVALID_TENSOR, "%s: dtype %s, expected %s", name,
          clattn__dtype_name(t->dtype), clattn__dtype_name(dtype));
    for (int i = 0; i < t->ndim; i++) {
        CHECK(ctx, t->dims[i] > 0, CLATTN_ERROR_SHAPE_MISMATCH, "%s: shape %s has a zero-size dim",
              name, clattn__shape_str(t, shape, sizeof shape));
        CHECK(ctx, t->dims[i] <= MAX_ELEMENTS / n, CLATTN_ERROR_INVALID_TENSOR,
              "%s: shape %s has more than %zu elements", name,
              clattn__shape_str(t, shape, sizeof shape), MAX_ELEMENTS);
        n *= t->dims[i];
    }
    CHECK(ctx, t->offset <= MAX_ELEMENTS - n, CLATTN_ERROR_INVALID_TENSOR,
          "%s: offset %zu + %zu elements exceeds %zu", name, t->offset, n, MAX_ELEMENTS);
    /* Another context's buffer would fail later, in an enqueue that cannot name it. */
    CHECK_CL(ctx, clGetMemObjectInfo(t->buf, CL_MEM_CONTEXT, sizeof owner, &owner, NULL), name);
    CHECK(ctx, owner == ctx->cl, CLATTN_ERROR_INVALID_TENSOR,
          "%s: buffer belongs to another OpenCL context than this clattn context's", name);
    /* an image passes every other check, and kernels would take it for a pointer */
    CHECK_CL(ctx, clGetMemObjectInfo(t->buf, CL_MEM_TYPE, sizeof type, &type, NULL), name);
    CHECK(ctx, type == CL_MEM_OBJECT_BUFFER, CLATTN_ERROR_INVALID_TENSOR,
          "%s: cl_mem is an image or pipe (type 0x%x), not a buffer", name, (unsigned)type);
    CHECK_CL(ctx, clGetMemObjectInfo(t->buf, CL_MEM_SIZE, sizeof bytes, &bytes, NULL), name);
    size_t es = clattn_dtype_size(t->dtype);
    /* divided, not (offset + n) * es: that can pass SIZE_MAX where size_t has 32 bits */
    CHECK(ctx, t->offset + n <= bytes / es, CLATTN_ERROR_INVALID_TENSOR,
          "%s: view of %zu elements at offset %zu needs %llu bytes, buffer has %zu", name, n,
          t->offset, (unsigned long long)(t->offset + n) * es, bytes);
fail:
    return st;
}

clattn_status clattn__check_float_tensor(clattn_context *ctx, const clattn_tensor *t,
                                         const char *name, int min_rank, int max_rank)
{
    clattn_status st = CLATTN_SUCCESS;
    CHECK(ctx, !t || t->dtype != CLATTN_INT32, CLATTN_ERROR_INVALID_TENSOR,
          "%s: dtype int32, expected float32, float16 or bfloat16", name);
    CHECK_ST(clattn__check_tensor(ctx, t, name, t ? t->dtype : CLATTN_FLOAT32, min_rank,
                                  max_rank));
fail:
    return st;
}

clattn_status clattn_tensor_create(clattn_context *ctx, clattn_dtype dtype, int ndim,
                                   const size_t *dims, const void *host, clattn_tensor *out)
{
    clattn_status st = CLATTN_SUCCESS;
    cl_int err;
    CHECK(NULL, ctx, CLATTN_ERROR_INVALID_ARGUMENT, "ctx: NULL context");
    CHECK(ctx, out, CLATTN_ERROR_INVALID_ARGUMENT, "out: NULL pointer");
    CHECK(ctx, dims, CLATTN_ERROR_INVALID_ARGUMENT, "dims: NULL pointer");
    CHECK(ctx, ndim >= 1 && ndim <= CLATTN_MAX_DIMS, CLATTN_ERROR_SHAPE_MISMATCH,
          "dims: rank %d, expected 1 to %d", ndim, CLATTN_MAX_DIMS);
    size_t es = clattn_dtype_size(dtype);
    CHECK(ctx, es, CLATTN_ERROR_INVALID_ARGUMENT, "dtype: unknown (%d)", (int)dtype);
    size_t n = 1;
    for (int i = 0; i < ndim; i++) {
        CHECK(ctx, dims[i] > 0 && dims[i] <= MAX_ELEMENTS / n, CLATTN_ERROR_INVALID_TENSOR,
              "dims[%d] = %zu: zero or too large", i, dims[i]);
        n *= dims[i];
    }
    CHECK(ctx, n <= ctx->max_alloc / es, CLATTN_ERROR_OUT_OF_MEMORY,
          "dims: %llu bytes exceed the device's max allocation (%zu)",
          (unsigned long long)n * es, ctx->max_alloc);
    cl_mem m = clCreateBuffer(ctx->cl, CL_MEM_READ_WRITE | (host ? CL_MEM_COPY_HOST_PTR : 0),
                              n * es, (void *)host, &err);
    CHECK_CL(ctx, err, "clCreateBuffer");
    *out = clattn_view(m, dtype, 0, ndim, dims);
fail:
    return st;
}

void clattn_tensor_release(clattn_tensor *t)
{
    if (!t)
        return;
    if (t->buf)
        clReleaseMemObject(t->buf);
    memset(t, 0, sizeof *t);
}

static clattn_status transfer(clattn_context *ctx, const clattn_tensor *t, void *host, int write)
{
    clattn_status st = CLATTN_SUCCESS;
    CHECK(NULL, ctx, CLATTN_ERROR_INVALID_ARGUMENT, "ctx: NULL context");
    CHECK(ctx, t, CLATTN_ERROR_INVALID_ARGUMENT, "tensor: NULL");
    CHECK_ST(clattn__check_tensor(ctx, t, "tensor", t->dtype, 1, CLATTN_MAX_DIMS));
    CHECK(ctx, host, CLATTN_ERROR_INVALID_ARGUMENT, "host: NULL pointer");
    size_t es = clattn_dtype_size(t->dtype);
    size_t bytes = clattn_tensor_numel(t) * es, off = t->offset * es;
    if (write)
        CHECK_CL(ctx, clEnqueueWriteBuffer(ctx->queue, t->buf, CL_TRUE, off, bytes, host, 0, NULL,
                                           NULL), "clEnqueueWriteBuffer");
    else
        CHECK_CL(ctx, clEnqueueReadBuffer(ctx->queue, t->buf, CL_TRUE, off, bytes, host, 0, NULL,
                                          NULL), "clEnqueueReadBuffer");
fail:
    return st;
}

clattn_status clattn_tensor_write_blocking(clattn_context *ctx, const clattn_tensor *t,
                                           const void *host)
{
    return transfer(ctx, t, (void *)host, 1);
}

clattn_status clattn_tensor_read_blocking(clattn_context *ctx, const clattn_tensor *t, void *host)
{
    return transfer(ctx, t, host, 0);
}

clattn_status clattn_tensor_fill(clattn_context *ctx, const clattn_tensor *t, float value)
{
    clattn_status st = CLATTN_SUCCESS;
    CHECK(NULL, ctx, CLATTN_ERROR_INVALID_ARGUMENT, "ctx: NULL context");
    CHECK_ST(clattn__check_float_tensor(ctx, t, "tensor", 1, CLATTN_MAX_DIMS));
    CHECK_ST(clattn__fill(ctx, t, value, "tensor"));
fail:
    return st;
}

/* 1 when buf's memory starts on 64 bytes: the device's own allocations (and sub-buffers, whose
 * origins are multiples of it) by the base alignment, an application's memory
 * (CL_MEM_USE_HOST_PTR) by its address. */
int clattn__aligned64(const clattn_context *ctx, cl_mem buf)
{
    cl_mem_flags flags = 0;
    void *host = NULL;
    if (clGetMemObjectInfo(buf, CL_MEM_FLAGS, sizeof flags, &flags, NULL) != CL_SUCCESS)
        return 0;
    if (flags & CL_MEM_USE_HOST_PTR)
        return clGetMemObjectInfo(buf, CL_MEM_HOST_PTR, sizeof host, &host, NULL) == CL_SUCCESS &&
               (uintptr_t)host % 64 == 0;
    return ctx->base_align >= 64;
}

int clattn__vec_aligned(const clattn_context *ctx, const clattn_tensor *t, size_t n)
{
    return t->offset % n == 0 && clattn__aligned64(ctx, t->buf);
}

clattn_status clattn__check_grad(clattn_context *ctx, const clattn_tensor *d, const char *name,
                                 const clattn_tensor *x, const char *xname)
{
    clattn_status st = CLATTN_SUCCESS;
    char s1[96], s2[96];
    if (!d)
        return CLATTN_SUCCESS;
    CHECK(ctx, x, CLATTN_ERROR_INVALID_ARGUMENT, "%s: given, but there is no %s", name, xname);
    CHECK_ST(clattn__check_tensor(ctx, d, name, CLATTN_FLOAT32, 1, 4));
    CHECK(ctx, d->ndim == x->ndim && memcmp(d->dims, x->dims, sizeof(size_t) * x->ndim) == 0,
          CLATTN_ERROR_SHAPE_MISMATCH, "%s: shape %s, expected the shape of %s, %s", name,
          clattn__shape_str(d, s1, sizeof s1), xname, clattn__shape_str(x, s2, sizeof s2));
fail:
    return st;
}
