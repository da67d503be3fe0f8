/* The program binary cache on disk: a hit gives bitwise the same results, corrupt, stale or
 * foreign files are rebuilt and rewritten, FIFOs are not waited on, missing parent directories are
 * created, modes follow the umask, and a directory that cannot be written is never an error. */
#include "harness.h"
#include "internal.h"
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { M = 13, N = 17, K = 19, SB = 2, SQ = 3, SK = 11 };

typedef struct {
    float mm[M * N], sm[SB * SQ * SK];
} results;

static float a[M * K], b[K * N], scores[SB * SQ * SK];
static char dir[] = "/tmp/clattn-cache-XXXXXX";

static clattn_context *open_ctx(const char *cache_dir, int sync)
{
    clattn_context *c = NULL;
    clattn_params p = {0};
    p.cache_dir = cache_dir;
    p.sync = sync;
    if (clattn_context_create(&c, &p) != CLATTN_SUCCESS)
        fail_msg("context: %s", clattn_last_error(NULL));
    return c;
}

static void check(clattn_context *c, clattn_status st)
{
    if (st != CLATTN_SUCCESS)
        fail_msg("%s", clattn_last_error(c));
}

/* A matmul and a masked softmax on c, read back (the reads wait, so the launches are done). */
static void run_ops(clattn_context *c, results *r)
{
    clattn_tensor ta, tb, tc, ts, ty;
    int lens[SB] = {4, SK};
    clattn_mask m = {0};
    m.valid_lens_host = lens;
    m.lens_ndim = 1;
    m.lens_dims[0] = SB;
    check(c, clattn_tensor_create(c, CLATTN_FLOAT32, 2, H_DIMS(M, K), a, &ta));
    check(c, clattn_tensor_create(c, CLATTN_FLOAT32, 2, H_DIMS(K, N), b, &tb));
    check(c, clattn_tensor_create(c, CLATTN_FLOAT32, 2, H_DIMS(M, N), NULL, &tc));
    check(c, clattn_tensor_create(c, CLATTN_FLOAT32, 3, H_DIMS(SB, SQ, SK), scores, &ts));
    check(c, clattn_tensor_create(c, CLATTN_FLOAT32, 3, H_DIMS(SB, SQ, SK), NULL, &ty));
    check(c, clattn_matmul(c, &ta, 0, &tb, 0, 1.0f, 0.0f, &tc));
    check(c, clattn_masked_softmax(c, &ts, &m, &ty));
    check(c, clattn_tensor_read_blocking(c, &tc, r->mm));
    check(c, clattn_tensor_read_blocking(c, &ty, r->sm));
    clattn_tensor_release(&ta);
    clattn_tensor_release(&tb);
    clattn_tensor_release(&tc);
    clattn_tensor_release(&ts);
    clattn_tensor_release(&ty);
}

/* Calls fn on the path of every cache file in dir; returns their number. */
static int for_each_file(void (*fn)(const char *path, int i))
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    char path[512];
    assert_non_null(d);
    while ((e = readdir(d)))
        if (strncmp(e->d_name, "clattn-", 7) == 0 && strlen(e->d_name) > 11 &&
            strcmp(e->d_name + strlen(e->d_name) - 4, ".bin") == 0) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            if (fn)
                fn(path, n);
            n++;
        }
    closedir(d);
    return n;
}

static results reference;

static int setup(void **st)
{
    if (h_setup(st))
        return -1;
    h_fill(a, M * K, -1, 1);
    h_fill(b, K * N, -1, 1);
    h_fill(scores, SB * SQ * SK, -3, 3);
    assert_non_null(mkdtemp(dir));
    clattn_context *c = open_ctx(NULL, 0); /* no cache: the reference results */
    run_ops(c, &reference);
    clattn_context_destroy(&c);
    return 0;
}

static void remove_file(const char *path, int i)
{
    (void)i;
    remove(path);
}

static int teardown(void **st)
{
    for_each_file(remove_file);
    rmdir(dir);
    return h_teardown(st);
}

/* Runs the ops in a fresh context and returns how many programs came from the cache. */
static int fresh_run(int sync)
{
    results r;
    clattn_context *c = open_ctx(dir, sync);
    run_ops(c, &r);
    int hits = c->cache_hits;
    clattn_context_destroy(&c);
    assert_memory_equal(&r, &reference, sizeof r);
    return hits;
}

static void test_miss_then_hit(void **s)
{
    (void)s;
    assert_int_equal(fresh_run(0), 0);
    int files = for_each_file(NULL);
    assert_true(files >= 2); /* at least the matmul and the softmax programs */
    assert_int_equal(fresh_run(0), files);
    assert_int_equal(fresh_run(1), files); /* CLATTN_SYNC mode reads the same files */
    assert_int_equal(for_each_file(NULL), files);
}

static void corrupt(const char *path, int i)
{
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    if (i % 2 == 0) { /* flip bytes in the middle of the payload */
        assert_int_equal(fseek(f, 0, SEEK_END), 0);
        long n = ftell(f);
        assert_int_equal(fseek(f, n / 2, SEEK_SET), 0);
        fputs("garbage garbage garbage", f);
        fclose(f);
    } else { /* cut short */
        fclose(f);
        assert_int_equal(truncate(path, 40), 0);
    }
}

static void test_corrupt_files_are_rebuilt(void **s)
{
    (void)s;
    fresh_run(0);
    int files = for_each_file(corrupt);
    assert_true(files >= 2);
    assert_int_equal(fresh_run(0), 0);     /* nothing usable: built from source ... */
    assert_int_equal(fresh_run(0), files); /* ... and written again */
}

static uint64_t fnv1a(const unsigned char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* A well-formed file (magic, key, size and checksum all right) whose payload is not a binary this
 * driver accepts, as after a driver update that kept its version string: 256 bytes of junk, or
 * (odd i) as many as the real binary had, so that the rebuilt program is no larger (it was
 * taken for what the file held, and never written back). */
static void make_stale(const char *path, int i)
{
    unsigned char head[32];
    uint64_t size;
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fread(head, 1, sizeof head, f), sizeof head);
    memcpy(&size, head + 16, 8);
    size = i % 2 ? size : 256;
    unsigned char *junk = malloc(size);
    assert_non_null(junk);
    for (size_t j = 0; j < size; j++)
        junk[j] = (unsigned char)(j * 37 + 11);
    uint64_t sum = fnv1a(junk, size);
    memcpy(head + 16, &size, 8);
    memcpy(head + 24, &sum, 8);
    fclose(f);
    f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(head, 1, sizeof head, f), sizeof head);
    assert_int_equal(fwrite(junk, 1, size, f), size);
    fclose(f);
    free(junk);
}

static void test_stale_files_are_rebuilt(void **s)
{
    (void)s;
    fresh_run(0);
    int files = for_each_file(make_stale);
    assert_int_equal(fresh_run(0), 0);
    assert_int_equal(fresh_run(0), files);
}

/* A cache directory under a regular file can be neither created nor written. */
static void test_unwritable_dir_is_not_an_error(void **s)
{
    (void)s;
    char file[64], bad[96];
    results r;
    snprintf(file, sizeof file, "%s/not-a-dir", dir);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);
    snprintf(bad, sizeof bad, "%s/cache", file);
    for (int round = 0; round < 2; round++) {
        clattn_context *c = open_ctx(bad, round);
        run_ops(c, &r);
        assert_int_equal(c->cache_hits, 0);
        check(c, clattn_finish(c));
        clattn_context_destroy(&c);
        assert_memory_equal(&r, &reference, sizeof r);
    }
    remove(file);
}

/* The cache_key of c's program built from file. */
static uint64_t cache_key_of(const clattn_context *c, const char *file)
{
    size_t n = strlen(file);
    for (int i = 0; i < c->nprograms; i++)
        if (strncmp(c->programs[i].key, file, n) == 0 && c->programs[i].key[n] == '|')
            return c->programs[i].cache_key;
    fail_msg("no program of %s", file);
    return 0;
}

static void file_path(uint64_t key, char *path, size_t size)
{
    snprintf(path, size, "%s/clattn-%016llx.bin", dir, (unsigned long long)key);
}

/* The whole file at path (malloc'd, *n bytes). */
static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    *n = (size_t)ftell(f);
    unsigned char *data = malloc(*n);
    assert_non_null(data);
    rewind(f);
    assert_int_equal(fread(data, 1, *n, f), *n);
    fclose(f);
    return data;
}

/* Runs the ops with the cache on and writes the cache keys of the matmul and softmax programs. */
static void keys_of_run(uint64_t *matmul, uint64_t *softmax)
{
    results r;
    clattn_context *c = open_ctx(dir, 0);
    run_ops(c, &r);
    *matmul = cache_key_of(c, "matmul.cl");
    *softmax = cache_key_of(c, "softmax.cl");
    clattn_context_destroy(&c);
}

/* The softmax program's file holds the matmul program's binary under a header rewritten for the
 * softmax key (the checksum covers the payload, which is unchanged): it loads, but has no softmax
 * kernel. The op builds the program from source, gives the right numbers and rewrites the file. */
static void test_foreign_binary_is_rebuilt(void **s)
{
    (void)s;
    uint64_t km, ks;
    char pm[512], ps[512];
    size_t nm, ns;
    keys_of_run(&km, &ks);
    file_path(km, pm, sizeof pm);
    file_path(ks, ps, sizeof ps);
    unsigned char *foreign = slurp(pm, &nm);
    memcpy(foreign + 8, &ks, 8); /* the header: magic[8], key, size, checksum */
    FILE *f = fopen(ps, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(foreign, 1, nm, f), nm);
    fclose(f);
    int files = for_each_file(NULL);
    assert_int_equal(fresh_run(0), files - 1); /* every program but the softmax one */
    unsigned char *rewritten = slurp(ps, &ns);
    assert_true(ns != nm || memcmp(rewritten, foreign, nm) != 0);
    assert_int_equal(fresh_run(0), files); /* and the rewritten file serves the next process */
    free(foreign);
    free(rewritten);
}

static void make_fifo(const char *path, int i)
{
    (void)i;
    assert_int_equal(remove(path), 0);
    assert_int_equal(mkfifo(path, 0600), 0);
}

/* FIFOs under the cache files' names: opened without blocking, skipped, replaced by files. A
 * regression would block in open() forever, so an alarm ends the test program instead. */
static void test_fifo_is_not_read(void **s)
{
    (void)s;
    struct stat sb;
    char path[512];
    uint64_t km, ks;
    keys_of_run(&km, &ks);
    int files = for_each_file(make_fifo);
    alarm(120);
    assert_int_equal(fresh_run(0), 0);
    alarm(0);
    file_path(ks, path, sizeof path);
    assert_int_equal(stat(path, &sb), 0);
    assert_true(S_ISREG(sb.st_mode));
    assert_int_equal(fresh_run(0), files);
}

static void assert_mode(const char *path, mode_t want)
{
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    if ((sb.st_mode & 07777) != want)
        fail_msg("%s: mode %04o, expected %04o", path, (unsigned)(sb.st_mode & 07777),
                 (unsigned)want);
}

static void assert_mode_0664(const char *path, int i)
{
    (void)i;
    assert_mode(path, 0664);
}

/* Files take the mode the umask leaves of 0666, so a group can share the directory. */
static void test_file_mode_follows_umask(void **s)
{
    (void)s;
    for_each_file(remove_file);
    mode_t old = umask(0002);
    fresh_run(0);
    umask(old);
    assert_true(for_each_file(assert_mode_0664) >= 2);
}

/* A cache directory whose parents are missing is created whole (0777 less the umask). */
static void test_missing_parents_are_created(void **s)
{
    (void)s;
    char a[128], b[160], c[192], path[512];
    results r;
    uint64_t km, ks;
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", a);
    snprintf(c, sizeof c, "%s/c", b);
    mode_t old = umask(0022);
    for (int round = 0; round < 2; round++) {
        clattn_context *ctx = open_ctx(c, 0);
        run_ops(ctx, &r);
        assert_int_equal(ctx->cache_hits, round ? 2 : 0); /* the second run reads the files */
        km = cache_key_of(ctx, "matmul.cl");
        ks = cache_key_of(ctx, "softmax.cl");
        clattn_context_destroy(&ctx);
        assert_memory_equal(&r, &reference, sizeof r);
    }
    umask(old);
    assert_mode(a, 0755);
    assert_mode(c, 0755);
    uint64_t keys[2] = {km, ks};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/clattn-%016llx.bin", c, (unsigned long long)keys[i]);
        assert_mode(path, 0644);
        assert_int_equal(remove(path), 0);
    }
    assert_int_equal(rmdir(c), 0);
    assert_int_equal(rmdir(b), 0);
    assert_int_equal(rmdir(a), 0);
}

static void test_env_variable(void **s)
{
    (void)s;
    clattn_context *c = NULL;
    setenv("CLATTN_CACHE_DIR", dir, 1);
    assert_int_equal(clattn_context_create(&c, NULL), CLATTN_SUCCESS);
    unsetenv("CLATTN_CACHE_DIR");
    assert_string_equal(c->cache_dir, dir);
    clattn_context_destroy(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_miss_then_hit),
        cmocka_unit_test(test_corrupt_files_are_rebuilt),
        cmocka_unit_test(test_stale_files_are_rebuilt),
        cmocka_unit_test(test_foreign_binary_is_rebuilt),
        cmocka_unit_test(test_fifo_is_not_read),
        cmocka_unit_test(test_file_mode_follows_umask),
        cmocka_unit_test(test_missing_parents_are_created),
        cmocka_unit_test(test_unwritable_dir_is_not_an_error),
        cmocka_unit_test(test_env_variable),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
