/* Program binary cache on disk, opt-in (clattn_params.cache_dir or CLATTN_CACHE_DIR).
 *
 * One file per program, <dir>/clattn-<key>.bin, where key is FNV-1a 64 of the fully expanded
 * source, the build options, the platform name and version, the device name and vendor, the driver
 * version and clattn's version. Layout: 8-byte magic (with a format number), the key, the payload
 * size and the payload's FNV-1a, then the driver's program binary. A file that does not check out
 * or that the driver rejects is ignored and the program is built from source and saved again; so is
 * a binary that lacks a kernel an op needs (program.c), such as another program's binary with a
 * rewritten header. Only regular files are read, opened without blocking (a FIFO under a cache
 * file's name would otherwise wait for a writer forever). Files are written to a temporary name
 * and renamed, so readers never see half a file; the directory and its missing parents are
 * created, and files and directories get the modes the umask leaves (0666 and 0777 masked), so
 * users can share one directory. Every failure to write (no permission, full disk) is silent:
 * the cache only saves time. Programs are written when their context is destroyed, once their
 * kernels have run (program.c). Paths are built to fit: nothing is truncated. */
#include "internal.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char magic[8] = {'C', 'L', 'A', 'T', 'T', 'N', 'B', 1};

typedef struct {
    char magic[8];
    uint64_t key, size, sum;
} file_header;

uint64_t clattn__fnv1a(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* Hashes a string with its terminating NUL, so "ab"+"c" and "a"+"bc" differ. */
static uint64_t fnv1a_str(uint64_t h, const char *s)
{
    return clattn__fnv1a(h, s, strlen(s) + 1);
}

uint64_t clattn__cache_key(const clattn_context *ctx, const char *src, const char *options)
{
    uint64_t h = CLATTN_FNV_OFFSET;
    h = fnv1a_str(h, src);
    h = fnv1a_str(h, options);
    h = fnv1a_str(h, ctx->platform_name);
    h = fnv1a_str(h, ctx->platform_version);
    h = fnv1a_str(h, ctx->name);
    h = fnv1a_str(h, ctx->vendor);
    h = fnv1a_str(h, ctx->driver);
    return fnv1a_str(h, clattn_version());
}

/* The file of key (malloc'd, NULL when out of memory). */
static char *cache_path(const clattn_context *ctx, uint64_t key)
{
    size_t n = strlen(ctx->cache_dir) + 32;
    char *path = malloc(n);
    if (path)
        snprintf(path, n, "%s/clattn-%016llx.bin", ctx->cache_dir, (unsigned long long)key);
    return path;
}

/* The regular file at path opened for reading, or NULL: never blocks on a FIFO or a device. */
FILE *clattn__open_regular(const char *path)
{
    struct stat sb;
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    FILE *f = NULL;
    if (fd < 0)
        return NULL;
    if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode))
        f = fdopen(fd, "rb");
    if (!f)
        close(fd);
    return f;
}

/* The payload of the file for key (malloc'd), or NULL when it is missing or does not check out. */
static unsigned char *read_entry(const clattn_context *ctx, uint64_t key, size_t *size)
{
    file_header h;
    unsigned char *data = NULL;
    char *path = cache_path(ctx, key);
    FILE *f = path ? clattn__open_regular(path) : NULL;
    free(path);
    if (!f)
        return NULL;
    struct stat sb;
    /* the header's size against the file's before anything is allocated or read */
    if (fstat(fileno(f), &sb) == 0 && fread(&h, sizeof h, 1, f) == 1 &&
        memcmp(h.magic, magic, sizeof magic) == 0 && h.key == key && h.size > 0 &&
        h.size < ((uint64_t)1 << 31) && (uint64_t)sb.st_size == sizeof h + h.size &&
        (data = malloc((size_t)h.size + 1)) &&
        fread(data, 1, (size_t)h.size + 1, f) == h.size && /* + 1: nothing may follow */
        clattn__fnv1a(CLATTN_FNV_OFFSET, data, (size_t)h.size) == h.sum) {
        *size = (size_t)h.size;
    } else {
        free(data);
        data = NULL;
    }
    fclose(f);
    return data;
}

cl_program clattn__cache_load(clattn_context *ctx, uint64_t key, size_t *size)
{
    cl_int status = CL_SUCCESS, err;
    unsigned char *data = read_entry(ctx, key, size);
    if (!data)
        return NULL;
    const unsigned char *bin = data;
    cl_program p = clCreateProgramWithBinary(ctx->cl, 1, &ctx->device, size, &bin, &status, &err);
    free(data);
    if (err == CL_SUCCESS && status == CL_SUCCESS &&
        clBuildProgram(p, 1, &ctx->device, NULL, NULL, NULL) == CL_SUCCESS) {
        ctx->cache_hits++;
        return p;
    }
    if (p) /* stale: another driver's binary, or one this driver no longer accepts */
        clReleaseProgram(p);
    *size = 0; /* so that the program built from source replaces it, whatever its size */
    return NULL;
}

static int write_all(FILE *f, const void *data, size_t n)
{
    return fwrite(data, 1, n, f) == n;
}

/* mkdir -p: creates dir and its missing parents; failures show when the file cannot be opened. */
static void make_dirs(const char *dir)
{
    char *p = strdup(dir);
    if (!p)
        return;
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = '\0';
            mkdir(p, 0777);
            *s = '/';
        }
    mkdir(p, 0777);
    free(p);
}

/* A new file beside path, named uniquely for this process, context and moment, created with the
 * mode the umask leaves (mkstemp's would be 0600); its name is written to tmp. -1 on failure. */
static int create_temp(const clattn_context *ctx, const char *path, char *tmp, size_t size)
{
    for (int attempt = 0; attempt < 100; attempt++) {
        snprintf(tmp, size, "%s.%ld-%lx-%lx-%d.tmp", path, (long)getpid(),
                 (unsigned long)(uintptr_t)ctx, (unsigned long)time(NULL), attempt);
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0666);
        if (fd >= 0 || errno != EEXIST)
            return fd;
    }
    return -1;
}

/* Writes the entry under a temporary name in the directory, then renames it into place. */
static void write_entry(const clattn_context *ctx, uint64_t key, const unsigned char *data,
                        size_t size)
{
    file_header h;
    char *path = cache_path(ctx, key), *tmp = NULL;
    size_t tsize = path ? strlen(path) + 96 : 0;
    memcpy(h.magic, magic, sizeof magic);
    h.key = key;
    h.size = size;
    h.sum = clattn__fnv1a(CLATTN_FNV_OFFSET, data, size);
    if (!path || !(tmp = malloc(tsize)))
        goto fail;
    make_dirs(ctx->cache_dir);
    int fd = create_temp(ctx, path, tmp, tsize);
    if (fd < 0)
        goto fail;
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        close(fd);
        remove(tmp);
        goto fail;
    }
    int ok = write_all(f, &h, sizeof h) && write_all(f, data, size);
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0)
        remove(tmp);
fail:
    free(path);
    free(tmp);
}

void clattn__cache_save(clattn_context *ctx, cl_program p, uint64_t key, size_t *size)
{
    size_t n = 0;
    unsigned char *data;
    if (clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof n, &n, NULL) != CL_SUCCESS || n == 0 ||
        n == *size) /* n == *size: what the file holds, no kernel was compiled since */
        return;
    if (!(data = malloc(n)))
        return;
    if (clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof data, &data, NULL) == CL_SUCCESS) {
        write_entry(ctx, key, data, n);
        *size = n;
        ctx->cache_writes++;
    }
    free(data);
}
