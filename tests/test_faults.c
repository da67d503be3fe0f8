/* Faults: no OpenCL platform, a device spec that matches nothing, a kernel that fails to build, a
 * program that cannot load (the op's outputs untouched), a context with many programs, an
 * allocation beyond the device, and CLATTN_SYNC. Each returns a status and a message, never
 * crashes, and the context stays usable afterwards (checked by running a matmul on it). */
#include "harness.h"
#include "internal.h"
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { M = 9, N = 11, K = 7 };
static float a[M * K], b[K * N], expect[M * N];
static char self[4096];

/* A matmul on c, bitwise equal to the one computed at setup: the context still works. */
static void assert_usable(clattn_context *c)
{
    clattn_tensor ta, tb, tc;
    float got[M * N];
    assert_int_equal(clattn_tensor_create(c, CLATTN_FLOAT32, 2, H_DIMS(M, K), a, &ta), 0);
    assert_int_equal(clattn_tensor_create(c, CLATTN_FLOAT32, 2, H_DIMS(K, N), b, &tb), 0);
    assert_int_equal(clattn_tensor_create(c, CLATTN_FLOAT32, 2, H_DIMS(M, N), NULL, &tc), 0);
    if (clattn_matmul(c, &ta, 0, &tb, 0, 1.0f, 0.0f, &tc) != CLATTN_SUCCESS ||
        clattn_tensor_read_blocking(c, &tc, got) != CLATTN_SUCCESS)
        fail_msg("context no longer usable: %s", clattn_last_error(c));
    assert_memory_equal(got, expect, sizeof got);
    clattn_tensor_release(&ta);
    clattn_tensor_release(&tb);
    clattn_tensor_release(&tc);
}

/* ---- no platform: a child process whose ICD loader sees an empty vendors directory ---- */

static int child_no_platform(void)
{
    clattn_context *c = (clattn_context *)1;
    char list[256];
    if (clattn_context_create(&c, NULL) != CLATTN_ERROR_NO_PLATFORM || c != NULL)
        return 10;
    if (!strstr(clattn_last_error(NULL), "no OpenCL device") ||
        !strstr(clattn_last_error(NULL), "OCL_ICD_VENDORS"))
        return 11;
    if (clattn_list_devices(NULL, list, sizeof list) != CLATTN_ERROR_NO_PLATFORM)
        return 12;
    clattn_context_destroy(&c);
    return 0;
}

static void test_no_platform(void **s)
{
    (void)s;
    char dir[] = "/tmp/clattn-novendors-XXXXXX";
    assert_non_null(mkdtemp(dir));
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setenv("OCL_ICD_VENDORS", dir, 1);
        setenv("OPENCL_VENDOR_PATH", dir, 1); /* the Khronos loader's name for it */
        execl(self, self, "--no-platform", (char *)NULL);
        _exit(99);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    rmdir(dir);
    if (!WIFEXITED(status))
        fail_msg("the no-platform child crashed (signal %d)", WTERMSIG(status));
    if (WEXITSTATUS(status) != 0)
        fail_msg("the no-platform child failed check %d", WEXITSTATUS(status));
}

/* ---- device specs that match nothing ---- */

static void test_device_matching_nothing(void **s)
{
    (void)s;
    const char *specs[] = {"nosuchdevice", "9:9", "0:99", "accelerator-that-is-not"};
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        clattn_context *c = NULL;
        clattn_params p = {0};
        p.device = specs[i];
        assert_int_equal(clattn_context_create(&c, &p), CLATTN_ERROR_DEVICE_NOT_FOUND);
        assert_null(c);
        assert_non_null(strstr(clattn_last_error(NULL), specs[i]));
        assert_non_null(strstr(clattn_last_error(NULL), "0:0")); /* the list of devices */
    }
    assert_usable(h_ctx);
}

/* ---- a kernel file that fails to build ---- */

static void write_file(const char *dir, const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void copy_kernel(const char *dir, const char *name)
{
    char src[512];
    snprintf(src, sizeof src, "%s/%s", CLATTN_TEST_KERNEL_DIR, name);
    FILE *f = fopen(src, "rb");
    assert_non_null(f);
    static char text[1 << 20];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    write_file(dir, name, text);
}

static clattn_context *ctx_with_kernel_dir(const char *dir)
{
    clattn_context *c = NULL;
    clattn_params p = {0};
    p.kernel_dir = dir;
    assert_int_equal(clattn_context_create(&c, &p), CLATTN_SUCCESS);
    return c;
}

static void test_broken_kernel_keeps_context_usable(void **s)
{
    (void)s;
    char dir[] = "/tmp/clattn-broken-XXXXXX", path[512];
    assert_non_null(mkdtemp(dir));
    copy_kernel(dir, "common.cl");
    copy_kernel(dir, "dtype.cl");
    copy_kernel(dir, "matmul.cl");
    write_file(dir, "softmax.cl",
               "#include \"common.cl\"\n"
               "__kernel void masked_softmax_rows(__global float *x) { x[0] = no_such_name; }\n");
    clattn_context *c = ctx_with_kernel_dir(dir);
    clattn_tensor t, y;
    assert_int_equal(clattn_tensor_create(c, CLATTN_FLOAT32, 2, H_DIMS(3, 4), a, &t), 0);
    assert_int_equal(clattn_tensor_create(c, CLATTN_FLOAT32, 2, H_DIMS(3, 4), b, &y), 0);
    for (int round = 0; round < 2; round++) { /* a failed build is not cached as a success */
        assert_int_equal(clattn_masked_softmax(c, &t, NULL, &y), CLATTN_ERROR_BUILD_FAILED);
        const char *msg = clattn_last_error(c);
        assert_non_null(strstr(msg, "softmax.cl"));
        assert_non_null(strstr(msg, "no_such_name")); /* the build log */
        assert_non_null(strstr(msg, "-cl-std=CL1.2")); /* the options */
    }
    float got[12];
    assert_int_equal(clattn_tensor_read_blocking(c, &y, got), CLATTN_SUCCESS);
    assert_memory_equal(got, b, sizeof got); /* the output is untouched */
    assert_usable(c);                        /* matmul.cl still builds and runs */
    clattn_tensor_release(&t);
    clattn_tensor_release(&y);
    clattn_context_destroy(&c);
    const char *names[] = {"common.cl", "dtype.cl", "matmul.cl", "softmax.cl"};
    for (size_t i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        remove(path);
    }
    rmdir(dir);
}

/* ---- a program that cannot load: nothing enqueued, outputs untouched ---- */

/* Copies every .cl file of the kernel dir but `skip` into a new temporary dir (mkdtemp of dir). */
static void kernel_dir_without(char *dir, const char *skip)
{
    DIR *d = opendir(CLATTN_TEST_KERNEL_DIR);
    struct dirent *e;
    assert_non_null(mkdtemp(dir));
    assert_non_null(d);
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n > 3 && strcmp(e->d_name + n - 3, ".cl") == 0 && strcmp(e->d_name, skip) != 0)
            copy_kernel(dir, e->d_name);
    }
    closedir(d);
}

static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[512];
    assert_non_null(d);
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            remove(path);
        }
    closedir(d);
    rmdir(dir);
}

/* A FIFO in place of a kernel file is an I/O error naming it, not an op that never returns; and
 * an include written with blanks around its '#' is expanded like any other (left to the
 * compiler, it resolved against the working directory, and stayed out of the cache's key). */
static void test_kernel_dir_fifo_and_blank_include(void **s)
{
    (void)s;
    char dir[] = "/tmp/clattn-fifo-XXXXXX", path[512];
    kernel_dir_without(dir, "matmul.cl");
    snprintf(path, sizeof path, "%s/matmul.cl", dir);
    assert_int_equal(mkfifo(path, 0600), 0);
    clattn_context *c = ctx_with_kernel_dir(dir);
    clattn_tensor ta, tb, tc;
    assert_int_equal(clattn_tensor_create(c, CLATTN_FLOAT32, 2, H_DIMS(M, K), a, &ta), 0);
    assert_int_equal(clattn_tensor_create(c, CLATTN_FLOAT32, 2, H_DIMS(K, N), b, &tb), 0);
    assert_int_equal(clattn_tensor_create(c, CLATTN_FLOAT32, 2, H_DIMS(M, N), NULL, &tc), 0);
    assert_int_equal(clattn_matmul(c, &ta, 0, &tb, 0, 1.0f, 0.0f, &tc), CLATTN_ERROR_IO);
    assert_non_null(strstr(clattn_last_error(c), "matmul.cl"));
    clattn_tensor_release(&ta);
    clattn_tensor_release(&tb);
    clattn_tensor_release(&tc);
    clattn_context_destroy(&c);
    remove(path);
    copy_kernel(dir, "matmul.cl");
    FILE *f = fopen(path, "rb");
    static char text[1 << 20], edited[(1 << 20) + 16];
    assert_non_null(f);
    text[fread(text, 1, sizeof text - 1, f)] = '\0';
    fclose(f);
    char *inc = strstr(text, "#include \"common.cl\"");
    assert_non_null(inc);
    snprintf(edited, sizeof edited, "%.*s  #  include \"common.cl\"%s", (int)(inc - text), text,
             inc + strlen("#include \"common.cl\""));
    write_file(dir, "matmul.cl", edited);
    c = ctx_with_kernel_dir(dir);
    assert_usable(c);
    clattn_context_destroy(&c);
    remove_dir(dir);
}

enum { FB = 2, FQ = 3, FK = 4, FD = 5, FH = 6 };

/* A tensor of c holding a copy of host (n floats). */
static clattn_tensor make(clattn_context *c, int ndim, const size_t *dims, const float *host)
{
    clattn_tensor t;
    assert_int_equal(clattn_tensor_create(c, CLATTN_FLOAT32, ndim, dims, host, &t), 0);
    return t;
}

/* Fails unless t still holds host's n floats, bit for bit. */
static void assert_untouched(clattn_context *c, const clattn_tensor *t, const float *host,
                             size_t n, const char *what)
{
    float got[FB * FQ * FK * FD];
    assert_true(n <= sizeof got / sizeof got[0]);
    assert_int_equal(clattn_tensor_read_blocking(c, t, got), CLATTN_SUCCESS);
    if (memcmp(got, host, n * sizeof *got) != 0)
        fail_msg("%s was written by an op that failed", what);
}

static void assert_io_error(clattn_context *c, clattn_status st)
{
    if (st != CLATTN_ERROR_IO || !strstr(clattn_last_error(c), "softmax.cl"))
        fail_msg("status %d, expected CLATTN_ERROR_IO naming softmax.cl; message: %s", st,
                 clattn_last_error(c));
}

/* softmax.cl is missing: every op that needs it fails with CLATTN_ERROR_IO before it enqueues its
 * GEMMs or scores, so out and weights keep their bytes. */
static void test_missing_program_leaves_outputs(void **s)
{
    (void)s;
    char dir[] = "/tmp/clattn-nosoftmax-XXXXXX";
    float x[FB * FK * FH], o[FB * FQ * FD], w[FB * FQ * FK], p[FH * FH];
    h_fill(x, FB * FK * FH, -1, 1);
    h_fill(o, FB * FQ * FD, 7, 8);
    h_fill(w, FB * FQ * FK, 7, 8);
    h_fill(p, FH * FH, -1, 1);
    kernel_dir_without(dir, "softmax.cl");
    clattn_context *c = ctx_with_kernel_dir(dir);
    clattn_tensor q = make(c, 3, H_DIMS(FB, FQ, FD), x), k = make(c, 3, H_DIMS(FB, FK, FD), x);
    clattn_tensor v = make(c, 3, H_DIMS(FB, FK, FD), x), out = make(c, 3, H_DIMS(FB, FQ, FD), o);
    clattn_tensor wt = make(c, 3, H_DIMS(FB, FQ, FK), w), wq = make(c, 2, H_DIMS(FH, FD), p);
    clattn_tensor wk = make(c, 2, H_DIMS(FH, FD), p), wv = make(c, 2, H_DIMS(1, FH), p);
    clattn_additive_weights aw = {&wq, &wk, &wv};
    for (int round = 0; round < 2; round++) { /* the GEMM programs are cached on the second */
        assert_io_error(c, clattn_dot_product_attention(c, &q, &k, &v, NULL, &out, &wt));
        assert_untouched(c, &wt, w, FB * FQ * FK, "dot-product weights");
        assert_untouched(c, &out, o, FB * FQ * FD, "dot-product out");
        assert_io_error(c, clattn_additive_attention(c, &q, &k, &v, &aw, NULL, &out, &wt));
        assert_io_error(c, clattn_additive_attention(c, &q, &k, &v, &aw, NULL, &out, NULL));
        assert_untouched(c, &wt, w, FB * FQ * FK, "additive weights");
        assert_untouched(c, &out, o, FB * FQ * FD, "additive out");
    }
    assert_usable(c); /* matmul.cl still loads and runs */
    clattn_tensor all[] = {q, k, v, out, wt, wq, wk, wv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        clattn_tensor_release(&all[i]);
    clattn_context_destroy(&c);
    remove_dir(dir);
}

/* ---- no limit on the programs of a context ---- */

/* Launches k (one work-item writing V or -V to x[0]) and returns what it wrote. */
static float run_tiny(clattn_context *c, cl_kernel k)
{
    clattn_tensor t;
    float v = 0.5f;
    size_t one = 1;
    assert_int_equal(clattn_tensor_create(c, CLATTN_FLOAT32, 1, H_DIMS(1), &v, &t), 0);
    assert_int_equal(clattn__set_args(c, k, "tiny", ARG(t.buf), ARGS_END), 0);
    assert_int_equal(clattn__launch(c, k, 1, &one, NULL, "tiny"), 0);
    assert_int_equal(clattn_tensor_read_blocking(c, &t, &v), 0);
    clattn_tensor_release(&t);
    return v;
}

/* A masked softmax on c, bitwise equal to the same on h_ctx. */
static void assert_softmax_runs(clattn_context *c)
{
    float x[3 * 7], got[3 * 7], want[3 * 7];
    int lens[3] = {0, 4, 7};
    clattn_mask m = {0};
    m.valid_lens_host = lens;
    m.lens_ndim = 1;
    m.lens_dims[0] = 3;
    h_fill(x, 21, -3, 3);
    clattn_context *ctxs[2] = {c, h_ctx};
    float *outs[2] = {got, want};
    for (int i = 0; i < 2; i++) {
        clattn_tensor tx = make(ctxs[i], 3, H_DIMS(3, 1, 7), x);
        clattn_tensor ty = make(ctxs[i], 3, H_DIMS(3, 1, 7), NULL);
        if (clattn_masked_softmax(ctxs[i], &tx, &m, &ty) != CLATTN_SUCCESS ||
            clattn_tensor_read_blocking(ctxs[i], &ty, outs[i]) != CLATTN_SUCCESS)
            fail_msg("masked softmax: %s", clattn_last_error(ctxs[i]));
        clattn_tensor_release(&tx);
        clattn_tensor_release(&ty);
    }
    assert_memory_equal(got, want, sizeof got);
}

/* 70 distinct programs of two kernels each in one context (past the 64 programs and 128 kernels
 * that used to be hard limits), and two programs whose options differ only past 600 characters:
 * all distinct kernels, and the context still runs a matmul and a masked softmax. */
static void test_many_programs(void **s)
{
    (void)s;
    char dir[] = "/tmp/clattn-many-XXXXXX", defines[1024];
    enum { N = 70 };
    cl_kernel k[N], k2[N], kl[2];
    kernel_dir_without(dir, "");
    write_file(dir, "tiny.cl", "#ifndef V\n#define V 0\n#endif\n"
                               "__kernel void tiny(__global float *x) { x[0] = V; }\n"
                               "__kernel void tiny2(__global float *x) { x[0] = -V; }\n");
    clattn_context *c = ctx_with_kernel_dir(dir);
    for (int i = 0; i < N; i++) {
        snprintf(defines, sizeof defines, "-D V=%d", i);
        if (clattn__get_kernel(c, "tiny.cl", defines, "tiny", &k[i]) != CLATTN_SUCCESS ||
            clattn__get_kernel(c, "tiny.cl", defines, "tiny2", &k2[i]) != CLATTN_SUCCESS)
            fail_msg("program %d: %s", i, clattn_last_error(c));
        for (int j = 0; j < i; j++)
            assert_true(k[i] != k[j] && k2[i] != k2[j] && k[i] != k2[j]);
    }
    for (int i = 0; i < 2; i++) {
        size_t used = 0;
        while (used < 640) /* a long prefix of unused defines */
            used += (size_t)snprintf(defines + used, sizeof defines - used, "-D PAD%zu=1 ", used);
        snprintf(defines + used, sizeof defines - used, "-D V=%d", 1000 + i);
        if (clattn__get_kernel(c, "tiny.cl", defines, "tiny", &kl[i]) != CLATTN_SUCCESS)
            fail_msg("long options: %s", clattn_last_error(c));
    }
    assert_ptr_not_equal(kl[0], kl[1]);
    assert_true(c->nprograms > 64 && c->nkernels > 128);
    assert_true(run_tiny(c, k2[N - 1]) == (float)(1 - N));
    assert_true(run_tiny(c, kl[1]) == 1001.0f);
    assert_usable(c);
    assert_softmax_runs(c);
    clattn_context_destroy(&c);
    remove_dir(dir);
}

/* ---- allocations beyond the device ---- */

static void test_allocation_beyond_device(void **s)
{
    (void)s;
    clattn_tensor t = {0};
    size_t max = h_ctx->max_alloc / 4; /* elements in the device's largest buffer */
    if (max < (size_t)INT32_MAX) {     /* one more than the device can hold */
        size_t over = max + 1;
        assert_int_equal(clattn_tensor_create(h_ctx, CLATTN_FLOAT32, 1, &over, NULL, &t),
                         CLATTN_ERROR_OUT_OF_MEMORY);
        assert_non_null(strstr(clattn_last_error(h_ctx), "max allocation"));
        assert_null(t.buf);
    }
    size_t over_int = (size_t)INT32_MAX + 1; /* past the kernels' 32-bit indexing */
    assert_int_equal(clattn_tensor_create(h_ctx, CLATTN_FLOAT32, 1, &over_int, NULL, &t),
                     CLATTN_ERROR_INVALID_TENSOR);
    assert_non_null(strstr(clattn_last_error(h_ctx), "dims[0]"));
    size_t huge[4] = {65536, 65536, 65536, 65536}; /* 2^64 elements: the product overflows */
    assert_int_equal(clattn_tensor_create(h_ctx, CLATTN_FLOAT32, 4, huge, NULL, &t),
                     CLATTN_ERROR_INVALID_TENSOR);
    assert_null(t.buf);
    assert_usable(h_ctx);
}

/* ---- CLATTN_SYNC ---- */

/* A masked softmax with device lengths {2, 9} on 5 keys: clamped without sync, read back and
 * rejected with it (the output untouched). */
static clattn_status softmax_bad_device_lens(clattn_context *c, float *y)
{
    int lens[2] = {2, 9};
    float x[2 * 3 * 5];
    clattn_tensor tx, ty, tl;
    clattn_mask m = {0};
    h_fill(x, 30, -1, 1);
    m.valid_lens = &tl;
    assert_int_equal(clattn_tensor_create(c, CLATTN_FLOAT32, 3, H_DIMS(2, 3, 5), x, &tx), 0);
    assert_int_equal(clattn_tensor_create(c, CLATTN_FLOAT32, 3, H_DIMS(2, 3, 5), x, &ty), 0);
    assert_int_equal(clattn_tensor_create(c, CLATTN_INT32, 1, H_DIMS(2), lens, &tl), 0);
    clattn_status st = clattn_masked_softmax(c, &tx, &m, &ty);
    assert_int_equal(clattn_tensor_read_blocking(c, &ty, y), CLATTN_SUCCESS);
    if (st != CLATTN_SUCCESS)
        assert_memory_equal(y, x, sizeof x);
    clattn_tensor_release(&tx);
    clattn_tensor_release(&ty);
    clattn_tensor_release(&tl);
    return st;
}

static void test_sync_mode(void **s)
{
    (void)s;
    clattn_context *c = NULL;
    clattn_params p = {0};
    float y[30];
    p.sync = 1;
    assert_int_equal(clattn_context_create(&c, &p), CLATTN_SUCCESS);
    assert_true(c->sync);
    assert_usable(c); /* every launch finished and checked: the same results */
    assert_int_equal(softmax_bad_device_lens(c, y), CLATTN_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(clattn_last_error(c), "valid_lens[1] = 9"));
    assert_usable(c);
    clattn_context_destroy(&c);
    p.sync = -1; /* off, whatever CLATTN_SYNC the test runs under: lengths are clamped unchecked */
    assert_int_equal(clattn_context_create(&c, &p), CLATTN_SUCCESS);
    assert_int_equal(softmax_bad_device_lens(c, y), CLATTN_SUCCESS);
    clattn_context_destroy(&c);
    setenv("CLATTN_SYNC", "1", 1); /* the environment variable turns it on too */
    assert_int_equal(clattn_context_create(&c, NULL), CLATTN_SUCCESS);
    unsetenv("CLATTN_SYNC");
    assert_true(c->sync);
    clattn_context_destroy(&c);
}

/* ---- a wrapped context leaves the application's objects as it found them ---- */

static cl_uint queue_refs(cl_command_queue q)
{
    cl_uint n = 0;
    clGetCommandQueueInfo(q, CL_QUEUE_REFERENCE_COUNT, sizeof n, &n, NULL);
    return n;
}

static void test_wrap_returns_objects(void **s)
{
    (void)s;
    cl_int err;
    cl_device_id dev = clattn_context_device(h_ctx);
    cl_context cl = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    assert_int_equal(err, CL_SUCCESS);
    cl_command_queue q = clCreateCommandQueue(cl, dev, 0, &err);
    assert_int_equal(err, CL_SUCCESS);
    clattn_context *c = NULL;
    assert_int_equal(clattn_context_wrap(&c, cl, dev, q, NULL), CLATTN_SUCCESS);
    assert_usable(c);
    clattn_context_destroy(&c);
    assert_null(c);
    assert_int_equal(clFinish(q), CL_SUCCESS);
    /* PoCL lets go of finished commands' references a little later: wait up to 5 s */
    for (int i = 0; i < 500 && queue_refs(q) != 1; i++)
        nanosleep(&(struct timespec){0, 10000000}, NULL);
    assert_int_equal(queue_refs(q), 1); /* only the application's own reference is left */
    cl_uint cr = 0;
    clGetContextInfo(cl, CL_CONTEXT_REFERENCE_COUNT, sizeof cr, &cr, NULL);
    assert_true(cr >= 1);
    assert_int_equal(clReleaseCommandQueue(q), CL_SUCCESS);
    assert_int_equal(clReleaseContext(cl), CL_SUCCESS);
    assert_usable(h_ctx);
}

static int setup(void **st)
{
    if (h_setup(st))
        return -1;
    h_fill(a, M * K, -1, 1);
    h_fill(b, K * N, -1, 1);
    clattn_tensor ta = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(M, K), a);
    clattn_tensor tb = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(K, N), b);
    clattn_tensor tc = h_tensor(CLATTN_FLOAT32, 2, H_DIMS(M, N), NULL);
    assert_int_equal(clattn_matmul(h_ctx, &ta, 0, &tb, 0, 1.0f, 0.0f, &tc), CLATTN_SUCCESS);
    assert_int_equal(clattn_tensor_read_blocking(h_ctx, &tc, expect), CLATTN_SUCCESS);
    clattn_tensor_release(&ta);
    clattn_tensor_release(&tb);
    clattn_tensor_release(&tc);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--no-platform") == 0)
        return child_no_platform();
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return 1;
    self[n] = '\0';
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_platform),
        cmocka_unit_test(test_device_matching_nothing),
        cmocka_unit_test(test_broken_kernel_keeps_context_usable),
        cmocka_unit_test(test_missing_program_leaves_outputs),
        cmocka_unit_test(test_kernel_dir_fifo_and_blank_include),
        cmocka_unit_test(test_many_programs),
        cmocka_unit_test(test_allocation_beyond_device),
        cmocka_unit_test(test_sync_mode),
        cmocka_unit_test(test_wrap_returns_objects),
    };
    return cmocka_run_group_tests(tests, setup, h_teardown);
}
