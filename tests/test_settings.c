/* Settings (issue 9, item 8): a setting is used whole or refused, never cut; CLATTN_SYNC is read
 * as written; params win over the environment. The bad values are also in the badinput matrix;
 * this file checks what the accepted ones do. */
#include "harness.h"
#include "internal.h"
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static clattn_context *create(const clattn_params *p)
{
    clattn_context *c = NULL;
    if (clattn_context_create(&c, p) != CLATTN_SUCCESS)
        fail_msg("context: %s", clattn_last_error(NULL));
    return c;
}

static clattn_status try_create(const clattn_params *p)
{
    clattn_context *c = NULL;
    clattn_status st = clattn_context_create(&c, p);
    clattn_context_destroy(&c);
    return st;
}

/* "matmul=gpu,softmax=gpu:WG=0...0128" of exactly len characters. */
static char *padded_tuning(size_t len)
{
    const char *head = "matmul=gpu,softmax=gpu:WG=";
    char *s = malloc(len + 1);
    assert_non_null(s);
    memset(s, '0', len);
    memcpy(s, head, strlen(head));
    memcpy(s + len - 3, "128", 4);
    return s;
}

static void assert_softmax_wg(clattn_context *c, int want)
{
    clattn_tuning t;
    if (clattn__tune(c, "softmax", &t) != CLATTN_SUCCESS)
        fail_msg("%s", clattn_last_error(c));
    assert_string_equal(t.variant, "gpu");
    assert_int_equal(clattn__tune_int(&t, "WG", 0), want);
}

/* 512 characters ending in WG=128 were cut to 511, WG=12. */
static void test_long_tuning_kept(void **s)
{
    (void)s;
    clattn_params p = {0};
    char *t512 = padded_tuning(512), *t5000 = padded_tuning(5000);
    p.tuning = t512;
    clattn_context *c = create(&p);
    assert_string_equal(c->tuning, t512);
    assert_softmax_wg(c, 128);
    clattn_context_destroy(&c);
    setenv("CLATTN_TUNE", t5000, 1);
    c = create(NULL);
    unsetenv("CLATTN_TUNE");
    assert_string_equal(c->tuning, t5000);
    assert_softmax_wg(c, 128);
    clattn_context_destroy(&c);
    free(t512);
    free(t5000);
}

/* A directory of max characters as params.cache_dir (kernel: params.kernel_dir) is taken;
 * max + 1 is refused, naming the field. */
static void check_limit(int kernel, const char *name, size_t max)
{
    static char dir[CLATTN_PATH_MAX + 1];
    clattn_params p = {0};
    char want[64];
    memset(dir, 'd', max + 1);
    memcpy(dir, "/tmp/", 5);
    dir[max] = '\0';
    if (kernel)
        p.kernel_dir = dir;
    else
        p.cache_dir = dir;
    assert_int_equal(try_create(&p), CLATTN_SUCCESS);
    dir[max] = 'd';
    dir[max + 1] = '\0';
    assert_int_equal(try_create(&p), CLATTN_ERROR_INVALID_ARGUMENT);
    snprintf(want, sizeof want, "%s: a directory of %zu characters", name, max + 1);
    assert_non_null(strstr(clattn_last_error(NULL), want));
}

/* A directory exactly as long as its longest file path allows is taken; one more character is
 * refused, naming the setting. */
static void test_directory_limits(void **s)
{
    (void)s;
    size_t cache_max = CLATTN_PATH_MAX - CLATTN_CACHE_FILE_ROOM;
    /* the longest cache path, an entry's temporary name, just fits with its NUL (written at
     * that length: test_long_cache_dir_used) */
    assert_int_equal(cache_max + strlen("/clattn-0123456789abcdef.bin.-9223372036854775808-"
                                        "ffffffffffffffff-ffffffffffffffff-99.tmp"),
                     CLATTN_PATH_MAX - 1);
    check_limit(0, "params.cache_dir", cache_max);
    check_limit(1, "params.kernel_dir", CLATTN_PATH_MAX - CLATTN_KERNEL_FILE_ROOM);
}

/* ---- long cache directories ---- */

static char base[] = "/tmp/clattn-settings-XXXXXX";
static char deep[CLATTN_PATH_MAX];

/* base/ccc.../ccc... : nested components of at most 99 characters, len characters in all. */
static void make_deep_dir(size_t len)
{
    strcpy(base, "/tmp/clattn-settings-XXXXXX");
    assert_non_null(mkdtemp(base));
    size_t n = strlen(base);
    memcpy(deep, base, n + 1);
    while (n < len) {
        size_t part = len - n - 1 < 99 ? len - n - 1 : 99;
        deep[n++] = '/';
        memset(deep + n, 'c', part);
        n += part;
        deep[n] = '\0';
        assert_int_equal(mkdir(deep, 0777), 0);
    }
}

/* Removes the files in dir and returns how many were cache files (*tmp: temporary ones). */
static int empty_dir(const char *dir, int *tmp)
{
    static char path[CLATTN_PATH_MAX + 300];
    int n = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    if (!d)
        return 0;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') {
            size_t len = strlen(e->d_name);
            n += strncmp(e->d_name, "clattn-", 7) == 0 && len > 4 &&
                 strcmp(e->d_name + len - 4, ".bin") == 0;
            *tmp += len > 4 && strcmp(e->d_name + len - 4, ".tmp") == 0;
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            remove(path);
        }
    closedir(d);
    return n;
}

/* Removes deep and every directory above it up to base. */
static void remove_deep_dir(void)
{
    for (size_t n = strlen(deep); n > strlen(base); n--)
        if (deep[n] == '/' || deep[n] == '\0') {
            deep[n] = '\0';
            rmdir(deep);
        }
    rmdir(base);
}

/* The cache lands in the directory given, not in a sibling named after its first 511
 * characters; at the longest directory taken too (the temporary name is the longest path: at a
 * room sized for mkstemp's, the entry was never written, silently), leaving no temporary file. */
static void cache_dir_used(size_t len)
{
    float x[2 * 5];
    clattn_tensor t;
    clattn_params p = {0};
    h_fill(x, 10, -1, 1);
    make_deep_dir(len);
    p.cache_dir = deep;
    clattn_context *c = create(&p);
    assert_int_equal(clattn_tensor_create(c, CLATTN_FLOAT32, 2, H_DIMS(2, 5), x, &t), CLATTN_SUCCESS);
    assert_int_equal(clattn_masked_softmax(c, &t, NULL, &t), CLATTN_SUCCESS);
    assert_int_equal(clattn_tensor_read_blocking(c, &t, x), CLATTN_SUCCESS);
    clattn_tensor_release(&t);
    int cache_on = c->cache_dir[0] && !c->no_binary_cache; /* off on rusticl (README) */
    clattn_context_destroy(&c); /* writes the cache */
    char cut[512];
    snprintf(cut, sizeof cut, "%s", deep);
    int tmp = 0, files = empty_dir(deep, &tmp), cut_files = empty_dir(cut, &tmp);
    rmdir(cut);
    remove_deep_dir();
    assert_true(cache_on ? files >= 1 : files == 0);
    assert_int_equal(cut_files, 0);
    assert_int_equal(tmp, 0);
}

static void test_long_cache_dir_used(void **s)
{
    (void)s;
    cache_dir_used(605);
    cache_dir_used(CLATTN_PATH_MAX - CLATTN_CACHE_FILE_ROOM);
}

/* ---- CLATTN_SYNC and params.sync ---- */

static int sync_with(const char *env, int param)
{
    clattn_params p = {0};
    p.sync = param;
    setenv("CLATTN_SYNC", env, 1);
    clattn_context *c = create(&p);
    unsetenv("CLATTN_SYNC");
    int on = c->sync;
    clattn_context_destroy(&c);
    return on;
}

static void test_sync_values(void **s)
{
    (void)s;
    const char *on[] = {"1", "true", "TRUE", "yes", "Yes", "on", "ON"};
    const char *off[] = {"", "0", "00", "000", "false", "False", "no", "NO", "off", "Off"};
    const char *bad[] = {"2", "01", "maybe", " 1", "1 ", "-1", "onn", "enable"};
    for (size_t i = 0; i < sizeof on / sizeof on[0]; i++)
        if (!sync_with(on[i], 0))
            fail_msg("CLATTN_SYNC=%s: sync off", on[i]);
    for (size_t i = 0; i < sizeof off / sizeof off[0]; i++)
        if (sync_with(off[i], 0))
            fail_msg("CLATTN_SYNC=%s: sync on", off[i]);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char want[64];
        setenv("CLATTN_SYNC", bad[i], 1);
        clattn_status st = try_create(NULL);
        unsetenv("CLATTN_SYNC");
        snprintf(want, sizeof want, "CLATTN_SYNC=%s:", bad[i]);
        if (st != CLATTN_ERROR_INVALID_ARGUMENT || !strstr(clattn_last_error(NULL), want))
            fail_msg("CLATTN_SYNC=%s: status %d, message %s", bad[i], st, clattn_last_error(NULL));
    }
}

/* params.sync: 1 on, -1 off, both over CLATTN_SYNC (which is then not read); 0 = CLATTN_SYNC. */
static void test_sync_params_win(void **s)
{
    (void)s;
    assert_false(sync_with("1", -1));
    assert_true(sync_with("false", 1));
    assert_true(sync_with("bogus", 1));
    assert_false(sync_with("bogus", -1));
    assert_true(sync_with("1", 0));
    assert_false(sync_with("0", 0));
    clattn_params p = {0};
    p.sync = -1;
    clattn_context *c = create(&p);
    assert_false(c->sync);
    clattn_context_destroy(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_long_tuning_kept),   cmocka_unit_test(test_directory_limits),
        cmocka_unit_test(test_long_cache_dir_used), cmocka_unit_test(test_sync_values),
        cmocka_unit_test(test_sync_params_win),
    };
    return cmocka_run_group_tests(tests, h_setup, h_teardown);
}
