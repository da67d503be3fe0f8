/* Tune files (src/runtime/tunefile.c): entries in use op by op under the override, shape
 * buckets, the default location, and every stale or corrupt file ignored with a note while the
 * context is still created. */
#include "harness.h"
#include "ref.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256], keys[2048];
/* Entries this device takes that differ from the table's choice (the tests' small variants). */
static char mm_entry[128], att_entry[128], mm_table[512], att_table[512], sm_table[512];
static char att_table256[512]; /* the table may tile head size 256 apart */

static void key_lines(void)
{
    char pname[256] = "", pver[256] = "", dname[256] = "", vendor[256] = "", driver[128] = "";
    cl_device_id dev = clattn_context_device(h_ctx);
    cl_platform_id plat = NULL;
    clGetDeviceInfo(dev, CL_DEVICE_PLATFORM, sizeof plat, &plat, NULL);
    clGetPlatformInfo(plat, CL_PLATFORM_NAME, sizeof pname, pname, NULL);
    clGetPlatformInfo(plat, CL_PLATFORM_VERSION, sizeof pver, pver, NULL);
    clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof dname, dname, NULL);
    clGetDeviceInfo(dev, CL_DEVICE_VENDOR, sizeof vendor, vendor, NULL);
    clGetDeviceInfo(dev, CL_DRIVER_VERSION, sizeof driver, driver, NULL);
    snprintf(keys, sizeof keys, "platform %s / %s\ndevice %s / %s\ndriver %s\nclattn %s\n", pname,
             pver, dname, vendor, driver, clattn_version());
}

static int setup(void **state)
{
    int r = h_setup(state);
    if (r)
        return r;
    snprintf(dir, sizeof dir, "/tmp/clattn-tunefile-%ld", (long)getpid());
    mkdir(dir, 0777);
    key_lines();
    assert_int_equal(clattn_context_tuning(h_ctx, "matmul", mm_table, sizeof mm_table), 0);
    assert_int_equal(clattn_context_tuning(h_ctx, "attention@d128", att_table, sizeof att_table),
                     0);
    assert_int_equal(clattn_context_tuning(h_ctx, "attention@d256", att_table256,
                                           sizeof att_table256), 0);
    assert_int_equal(clattn_context_tuning(h_ctx, "softmax", sm_table, sizeof sm_table), 0);
    int cpu = strncmp(mm_table, "cpu:", 4) == 0;
    snprintf(mm_entry, sizeof mm_entry, "%s", cpu ? "cpu:TM=5:TN=16:VN=8:KC=7:RB=3:PK=5"
                                                  : "gpu:TSM=16:TSN=8:TSK=4:WPTM=2:WPTN=2");
    snprintf(att_entry, sizeof att_entry, "%s", strncmp(att_table, "cpu:", 4) == 0
                                                    ? "cpu:QR=1:KB=16:WG=3:QG=3:VC=32"
                                                    : "gpu:BQ=16:BK=8");
    return 0;
}

static int teardown(void **state)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        print_message("# could not remove %s\n", dir);
    return h_teardown(state);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* A context reading the tune file at path (NULL: the default location) with override tuning. */
static clattn_context *open_ctx(const char *path, const char *tuning, const char *cache_dir)
{
    clattn_params p;
    clattn_context *c = NULL;
    memset(&p, 0, sizeof p);
    p.tune_file = path;
    p.tuning = tuning;
    p.cache_dir = cache_dir;
    if (clattn_context_create(&c, &p) != CLATTN_SUCCESS)
        fail_msg("context: %s", clattn_last_error(NULL));
    return c;
}

static void assert_choice(clattn_context *c, const char *op, const char *prefix)
{
    char got[512];
    assert_int_equal(clattn_context_tuning(c, op, got, sizeof got), CLATTN_SUCCESS);
    if (strncmp(got, prefix, strlen(prefix)) != 0)
        fail_msg("%s: runs '%s', expected '%s...'", op, got, prefix);
}

static void assert_note(clattn_context *c, const char *needle)
{
    const char *note = clattn_context_tune_note(c);
    if (!strstr(note, needle))
        fail_msg("tune note '%s' lacks '%s'", note, needle);
    for (const char *p = note; *p; p++) /* it quotes the file: no control bytes from it */
        if ((unsigned char)*p < 0x20 || (unsigned char)*p == 0x7f)
            fail_msg("tune note '%s' holds byte 0x%02x", note, (unsigned char)*p);
}

static void test_entries_in_use(void **state)
{
    (void)state;
    char path[300], text[4096];
    snprintf(path, sizeof path, "%s/good.txt", dir);
    snprintf(text, sizeof text, "clattn-tune 1\n# a comment\n%s\nmatmul@small=%s\r\n"
             "attention@d128=%s\n", keys, mm_entry, att_entry);
    write_text(path, text);
    clattn_context *c = open_ctx(path, NULL, NULL);
    assert_note(c, "2 entries in use");
    assert_choice(c, "matmul@small", mm_entry);
    assert_choice(c, "matmul", mm_table); /* larger GEMMs: no entry, the table */
    clattn_context_destroy(&c);
    snprintf(text, sizeof text, "clattn-tune 1\n%smatmul=%s\nattention@d128=%s\n", keys,
             mm_entry, att_entry);
    write_text(path, text);
    c = open_ctx(path, NULL, NULL);
    assert_note(c, "2 entries in use");
    assert_choice(c, "matmul@small", mm_entry); /* an unkeyed entry serves every bucket */
    assert_string_equal(clattn_context_tune_path(c), path);
    assert_choice(c, "matmul", mm_entry);
    assert_choice(c, "attention@d128", att_entry);
    assert_choice(c, "attention@d64", att_table); /* no entry for d64: the table */
    assert_choice(c, "attention", att_table);
    assert_choice(c, "softmax", sm_table); /* untouched ops keep the table's */
    clattn_context_destroy(&c);
    /* The override wins op by op: matmul from it, attention@d128 still from the file. */
    char override[600];
    snprintf(override, sizeof override, "matmul=%s", mm_table);
    c = open_ctx(path, override, NULL);
    assert_choice(c, "matmul", mm_table);
    assert_choice(c, "attention@d128", att_entry);
    clattn_context_destroy(&c);
}

/* Each line makes the whole file ignored: the context runs the table's choices. */
static void test_bad_files_ignored(void **state)
{
    (void)state;
    static const struct {
        const char *head, *entry, *needle;
    } cases[] = {
        {"clattn-tune 2\n", "", "corrupt"},
        {"clattn-tune 1\n", "matmul=nosuch", "no variant"},
        {"clattn-tune 1\n", "nosuchop=cpu", "nosuchop"},
        {"clattn-tune 1\n", "matmul@d64=cpu", "no bucket"},
        {"clattn-tune 1\n", "softmax@small=cpu", "no bucket"},
        {"clattn-tune 1\n", "attention@d32=cpu", "no bucket"},
        {"clattn-tune 1\n", "softmax=cpu:VW=12", "VW"},
        {"clattn-tune 1\n", "just words", "not op"},
        {"clattn-tune 1\n", "softmax=cpu,matmul=cpu", "one entry per line"},
        {"clattn-tune 1\n", "\x01\x7f\x1b[2J", "line '???[2J' is not op"},
        {"clattn-tune 1\n", "softmax=gpu\nsoftmax=gpu", "a second entry"}, /* any device */
        /* a CR inside a line is part of it (only a CRLF's is dropped) */
        {"clattn-tune 1\n", "softmax=cpu:VW=8\rgarbage", "VW"},
    };
    char path[300], text[4096];
    snprintf(path, sizeof path, "%s/bad.txt", dir);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(text, sizeof text, "%s%smatmul=%s\n%s\n", cases[i].head, keys, mm_entry,
                 cases[i].entry);
        write_text(path, text);
        clattn_context *c = open_ctx(path, NULL, NULL);
        assert_note(c, "ignored");
        assert_note(c, cases[i].needle);
        assert_choice(c, "matmul", mm_table);
        assert_string_equal(clattn_last_error(c), "");
        clattn_context_destroy(&c);
    }
    /* a NUL byte: the whole file ignored (the lines after it went unread, the ones before used) */
    snprintf(text, sizeof text, "clattn-tune 1\n%ssoftmax=cpu:VW=8\n", keys);
    size_t len = strlen(text) + 1; /* with its NUL */
    len += (size_t)snprintf(text + len, sizeof text - len, "\nmatmul=%s\n", mm_entry);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, len, f), len);
    fclose(f);
    clattn_context *c = open_ctx(path, NULL, NULL);
    assert_note(c, "ignored");
    assert_note(c, "NUL");
    clattn_context_destroy(&c);
}

static void test_stale_files_ignored(void **state)
{
    (void)state;
    static const char *const fields[] = {"platform ", "device ", "driver ", "clattn "};
    char path[300], text[4096], edited[2048];
    snprintf(path, sizeof path, "%s/stale.txt", dir);
    for (int f = 0; f < 5; f++) {
        /* keys with one line changed (f < 4) or dropped (f == 4: the clattn line) */
        size_t used = 0;
        for (const char *line = keys; *line;) {
            const char *nl = strchr(line, '\n');
            int n = (int)(nl - line);
            if (f < 4 && strncmp(line, fields[f], strlen(fields[f])) == 0)
                used += (size_t)snprintf(edited + used, sizeof edited - used, "%.*sX\n", n, line);
            else if (!(f == 4 && strncmp(line, "clattn ", 7) == 0))
                used += (size_t)snprintf(edited + used, sizeof edited - used, "%.*s\n", n, line);
            line = nl + 1;
        }
        snprintf(text, sizeof text, "clattn-tune 1\n%smatmul=%s\n", edited, mm_entry);
        write_text(path, text);
        clattn_context *c = open_ctx(path, NULL, NULL);
        assert_note(c, f < 4 ? "stale" : "missing");
        assert_choice(c, "matmul", mm_table);
        clattn_context_destroy(&c);
    }
}

static void test_locations(void **state)
{
    (void)state;
    char path[300], text[4096], sub[300];
    clattn_context *c = open_ctx("off", NULL, NULL);
    assert_string_equal(clattn_context_tune_path(c), "");
    assert_note(c, "off");
    clattn_context_destroy(&c);
    snprintf(path, sizeof path, "%s/missing.txt", dir);
    c = open_ctx(path, NULL, NULL);
    assert_note(c, "no tune file at");
    clattn_context_destroy(&c);
    /* A FIFO there is not read (it would block the context). */
    snprintf(path, sizeof path, "%s/fifo.txt", dir);
    assert_int_equal(mkfifo(path, 0600), 0);
    c = open_ctx(path, NULL, NULL);
    assert_note(c, "not a regular file");
    clattn_context_destroy(&c);
    /* Unset: the cache directory's file, then XDG_CACHE_HOME's. */
    unsetenv("CLATTN_TUNE_FILE");
    snprintf(sub, sizeof sub, "%s/cache", dir);
    c = open_ctx(NULL, NULL, sub);
    snprintf(path, sizeof path, "%s", clattn_context_tune_path(c));
    clattn_context_destroy(&c);
    if (strncmp(path, sub, strlen(sub)) != 0 || !strstr(path, "/clattn-tune-"))
        fail_msg("default path %s is not under %s", path, sub);
    mkdir(sub, 0777);
    snprintf(text, sizeof text, "clattn-tune 1\n%smatmul=%s\n", keys, mm_entry);
    write_text(path, text);
    c = open_ctx(NULL, NULL, sub);
    assert_choice(c, "matmul", mm_entry);
    clattn_context_destroy(&c);
    /* No cache directory (CI's Intel step sets CLATTN_CACHE_DIR): XDG_CACHE_HOME's. */
    char *env_cache = getenv("CLATTN_CACHE_DIR") ? strdup(getenv("CLATTN_CACHE_DIR")) : NULL;
    unsetenv("CLATTN_CACHE_DIR");
    setenv("XDG_CACHE_HOME", dir, 1);
    c = open_ctx(NULL, NULL, NULL);
    snprintf(sub, sizeof sub, "%s/clattn/clattn-tune-", dir);
    snprintf(path, sizeof path, "%s", clattn_context_tune_path(c));
    clattn_context_destroy(&c);
    if (env_cache)
        setenv("CLATTN_CACHE_DIR", env_cache, 1);
    free(env_cache);
    setenv("CLATTN_TUNE_FILE", "off", 1);
    if (strncmp(path, sub, strlen(sub)) != 0)
        fail_msg("XDG path %s, expected %s...", path, sub);
}

/* One attention call (2 heads, 40 x 40, head size 64) on c against the double reference. */
static void check_attention_d64(clattn_context *c, const char *what)
{
    enum { H = 2, N = 40, D = 64 };
    size_t n = (size_t)H * N * D, dims[3] = {H, N, D};
    float *q = malloc(n * 4), *k = malloc(n * 4), *v = malloc(n * 4), *got = malloc(n * 4);
    double *w = malloc((size_t)H * N * N * 8), *ref = malloc(n * 8), *scale = malloc(n * 8);
    h_fill(q, n, -1, 1);
    h_fill(k, n, -1, 1);
    h_fill(v, n, -1, 1);
    clattn_tensor t[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(clattn_tensor_create(c, CLATTN_FLOAT32, 3, dims,
                                              i == 0 ? q : i == 1 ? k : i == 2 ? v : NULL, &t[i]),
                         0);
    assert_int_equal(clattn_tensor_fill(c, &t[3], NAN), 0);
    if (clattn_dot_product_attention(c, &t[0], &t[1], &t[2], NULL, &t[3], NULL) != 0 ||
        clattn_tensor_read_blocking(c, &t[3], got) != 0)
        fail_msg("%s: %s", what, clattn_last_error(c));
    double *qd = ref_to_double(q, n), *kd = ref_to_double(k, n), *vd = ref_to_double(v, n);
    ref_mask m = {H, 1, N, N, NULL, 0, NULL, {0, 0, 0, 0}, 0, CLATTN_DEFAULT_FILL, 0, 0, 0, 0,
                  NULL, {0, 0, 0, 0}, NULL, {0, 0}};
    ref_attention(&m, D, D, qd, kd, vd, 1.0 / sqrt((double)D), NULL, w, ref);
    ref_attention_scale(H, N, N, D, w, vd, ref, scale);
    h_assert_scaled(got, ref, scale, n, 1e-4, what); /* test_attention.c's OUT_TOL */
    for (int i = 0; i < 4; i++)
        clattn_tensor_release(&t[i]);
    free(q); free(k); free(v); free(got); free(w); free(ref); free(scale);
    free(qd); free(kd); free(vd);
}

/* A bucketed entry is checked at its bucket's head size only: an attention=gpu tile this device
 * refuses for every head size (local or private memory at head size 256) is taken as
 * attention@d64, for head sizes up to 64 only, and computes right there. */
static void test_bucket_limits(void **state)
{
    (void)state;
    static const char *const tiles[] = {"gpu:BQ=1024:BK=64", "gpu:BQ=64:BK=16", "gpu:BQ=64:BK=64",
                                        "gpu:BQ=128:BK=128"};
    char tuning[128], path[300], text[4096];
    clattn_params p;
    clattn_context *c = NULL;
    memset(&p, 0, sizeof p);
    p.tune_file = "off";
    for (size_t i = 0; i < sizeof tiles / sizeof tiles[0]; i++) {
        snprintf(tuning, sizeof tuning, "attention=%s", tiles[i]);
        p.tuning = tuning;
        if (clattn_context_create(&c, &p) == CLATTN_SUCCESS) {
            clattn_context_destroy(&c);
            continue; /* the device takes it at every head size */
        }
        snprintf(tuning, sizeof tuning, "attention@d64=%s", tiles[i]);
        if (clattn_context_create(&c, &p) != CLATTN_SUCCESS) {
            print_message("# %s: refused at head size 64 too: %s\n", tiles[i],
                          clattn_last_error(NULL));
            continue;
        }
        assert_choice(c, "attention@d64", tiles[i]);
        assert_choice(c, "attention@d256", att_table256);
        check_attention_d64(c, tuning);
        clattn_context_destroy(&c);
        /* the same entry from a tune file */
        snprintf(path, sizeof path, "%s/bucket.txt", dir);
        snprintf(text, sizeof text, "clattn-tune 1\n%sattention@d64=%s\n", keys, tiles[i]);
        write_text(path, text);
        c = open_ctx(path, NULL, NULL);
        assert_note(c, "1 entry in use");
        check_attention_d64(c, "attention@d64 from a tune file");
        clattn_context_destroy(&c);
        return;
    }
    print_message("# no attention=gpu tile in the list is refused here at head size 256\n");
}

static void test_tuning_query_bad_input(void **state)
{
    (void)state;
    char buf[512];
    h_assert_error(clattn_context_tuning(h_ctx, "nosuch", buf, sizeof buf),
                   CLATTN_ERROR_INVALID_ARGUMENT, "nosuch");
    h_assert_error(clattn_context_tuning(h_ctx, "matmul@d64", buf, sizeof buf),
                   CLATTN_ERROR_INVALID_ARGUMENT, "no bucket");
    h_assert_error(clattn_context_tuning(h_ctx, "attention@d99", buf, sizeof buf),
                   CLATTN_ERROR_INVALID_ARGUMENT, "no bucket");
    h_assert_error(clattn_context_tuning(h_ctx, "matmul", buf, 4), CLATTN_ERROR_INVALID_ARGUMENT,
                   "size");
    /* the size the message asks for is the whole entry's, whatever the buffer held */
    assert_int_equal(clattn_context_tuning(h_ctx, "matmul", buf, sizeof buf), CLATTN_SUCCESS);
    char want[64];
    snprintf(want, sizeof want, "(%zu needed)", strlen(buf) + 1);
    for (size_t n = 1; n <= strlen(buf); n++)
        h_assert_error(clattn_context_tuning(h_ctx, "matmul", buf + 256, n),
                       CLATTN_ERROR_INVALID_ARGUMENT, want);
    assert_int_equal(clattn_context_tuning(h_ctx, "matmul", buf + 256, strlen(buf) + 1),
                     CLATTN_SUCCESS);
    h_assert_error(clattn_context_tuning(h_ctx, NULL, buf, sizeof buf),
                   CLATTN_ERROR_INVALID_ARGUMENT, "op");
    assert_int_equal(clattn_context_tuning(NULL, "matmul", buf, sizeof buf),
                     CLATTN_ERROR_INVALID_ARGUMENT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_entries_in_use),   cmocka_unit_test(test_bad_files_ignored),
        cmocka_unit_test(test_stale_files_ignored), cmocka_unit_test(test_locations),
        cmocka_unit_test(test_tuning_query_bad_input), cmocka_unit_test(test_bucket_limits),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
