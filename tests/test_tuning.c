/* CLATTN_TUNE overrides (issue 9, items 3 and 8): a value outside a parameter's range, a
 * combination a kernel cannot run and an op given twice are refused at context creation with a
 * message naming them; every override that is accepted computes correct results. The last test
 * is a seeded fuzzer of override strings: each accepted string runs a small battery of the ops it
 * names against the double references, outputs poisoned and bracketed by guard bytes.
 * CLATTN_FUZZ_ITERS=N runs N accepted strings instead of the short fixed run. */
#include "harness.h"
#include "internal.h"
#include "ref.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The tolerances of test_matmul.c, test_softmax.c and test_attention.c (reasons there). */
#define MATMUL_TOL 1e-4
#define SM_RTOL 1e-5
#define SM_ATOL 1e-9
#define OUT_TOL 1e-4
#define GRAD_TOL 1e-5 /* as tests/test_backward.c: of the sum of each gradient's terms' sizes */

/* ---- refused and accepted at context creation ---- */

static clattn_status create(const char *tuning)
{
    clattn_context *c = NULL;
    clattn_params p = {0};
    p.tuning = tuning;
    clattn_status st = clattn_context_create(&c, &p);
    assert_true((st == CLATTN_SUCCESS) == (c != NULL));
    clattn_context_destroy(&c);
    return st;
}

/* On a device that bounds a work-item's loops (llvmpipe) every CPU shape is refused for that. */
static int cpu_shape_refused(const char *tuning)
{
    return h_ctx->loop_limit && strstr(tuning, "=cpu");
}

static void expect_refused(const char *tuning, const char *needle)
{
    clattn_status st = create(tuning);
    const char *msg = clattn_last_error(NULL);
    if (st != CLATTN_ERROR_INVALID_ARGUMENT)
        fail_msg("CLATTN_TUNE=%s: status %d (%s), expected a refusal", tuning, st,
                 clattn_status_string(st));
    if (!strstr(msg, needle) && !(cpu_shape_refused(tuning) && strstr(msg, "65535 iterations")))
        fail_msg("CLATTN_TUNE=%s: message \"%s\" does not name \"%s\"", tuning, msg, needle);
}

/* Each value the adversarial review found accepted and then computing wrong numbers, writing past
 * the output or killing the process, and the other rules of the parser. */
static void test_refused(void **s)
{
    (void)s;
    static const char *const cases[][2] = {
        /* softmax=cpu: the row kernel has 8- and 16-wide paths only */
        {"softmax=cpu:VW=4", "VW=4"}, {"softmax=cpu:VW=3", "VW=3"}, {"softmax=cpu:VW=1", "VW=1"},
        {"softmax=cpu:VW=32", "VW=32"},
        /* softmax=gpu: the tree reductions need a power of two */
        {"softmax=gpu:WG=96", "WG=96"}, {"softmax=gpu:WG=100", "WG=100"},
        {"softmax=gpu:WG=3", "WG=3"}, {"softmax=gpu:WG=0", "WG=0"},
        {"softmax=gpu:WG=2048", "WG=2048"},
        /* attention=cpu: private arrays past a CPU thread's stack, or shapes the kernel lacks */
        {"attention=cpu:QG=2048", "QG=2048"}, {"attention=cpu:QG=3000", "QG=3000"},
        {"attention=cpu:QG=4096", "QG=4096"}, {"attention=cpu:QR=16:QG=1024", "QG=1024"},
        {"attention=cpu:KB=8", "KB=8"}, {"attention=cpu:KB=24", "KB=24"},
        {"attention=cpu:QR=17", "QR=17"}, {"attention=cpu:QR=0", "QR=0"},
        {"attention=cpu:QR=16:QG=64", "QG=64"}, {"attention=cpu:WG=64", "WG=64"},
        {"attention=cpu:WG=257", "WG=257"}, {"attention=cpu:VC=8", "VC=8"},
        {"attention=cpu:VC=48", "VC=48"}, {"attention=cpu:VC=512", "VC=512"}, {"attention=gpu:BQ=1025", "BQ=1025"},
        {"attention=gpu:BK=0", "BK=0"}, {"attention=gpu:BK=257", "BK=257"},
        {"attention=gpu:BQ=257", "BQ=257"}, {"attention=gpu:BQ=64:BK=2", "BQ=64"},
        {"attention=gpu:BQ=17:BK=1", "BQ=17"},
        /* decode=gpu: one or two items per group aborted PoCL 3.1's compiler */
        {"decode=gpu:WG=1:RQ=1", "WG=1"}, {"decode=gpu:WG=2:RQ=1", "WG=2"},
        /* matmul=cpu */
        {"matmul=cpu:TN=20", "TN=20"}, {"matmul=cpu:TN=512:VN=16", "TN=512"}, {"matmul=cpu:VN=4", "VN=4"},
        {"matmul=cpu:TM=9:TN=64:VN=8", "TM x TN / VN"}, {"matmul=cpu:TM=65", "TM=65"},
        {"matmul=cpu:KC=0", "KC=0"}, {"matmul=cpu:RB=-1", "RB=-1"},
        {"matmul=cpu:PK=1048577", "PK=1048577"},
        /* matmul=gpu */
        {"matmul=gpu:TSM=12:WPTM=5", "TSM=12"},
        {"matmul=gpu:TSM=16:TSN=16:TSK=1:WPTM=1:WPTN=1", "TSK"},
        {"matmul=gpu:TSM=257", "TSM=257"}, {"matmul=gpu:WPTN=17", "WPTN=17"},
        /* the parser: each op once, each parameter once, no empty parts, plain decimal values */
        {"softmax=cpu,softmax=bogus", "op softmax given twice"},
        {"softmax=cpu,matmul=cpu,softmax=cpu", "op softmax given twice"},
        {"softmax=cpu:VW=8:VW=16", "VW given twice"}, {"softmax=cpu,", "empty entry"},
        {",softmax=cpu", "empty entry"}, {"softmax=cpu,,matmul=cpu", "empty entry"},
        {",", "empty entry"}, {"softmax=cpu:", "bad parameter"},
        {"softmax=cpu::VW=8", "bad parameter"}, {"softmax=cpu:VW", "bad parameter 'VW'"},
        {"softmax=cpu:VW=", "VW="}, {"softmax=cpu:VW=+8", "VW=+8"}, {"softmax=cpu:VW= 8", "VW"},
        {"softmax=cpu:VW=8 ", "VW"}, {"softmax=cpu:VW=0x10", "VW=0x10"},
        {"softmax=cpu:VW=99999999999999999999", "VW=9999"}, {"softmax=cpu:VW=abc", "VW=abc"},
        {"softmax=cpu:XX=1", "no parameter XX"}, {"softmax=", "no variant ''"},
        {"softmax", "not op=variant"}, {"=cpu", "not op=variant"},
        {"attention=unfused:QR=3", "no parameter QR"}, {"nosuchop=cpu", "nosuchop"},
        {"Softmax=cpu", "Softmax"}, {"softmax=CPU", "CPU"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_refused(cases[i][0], cases[i][1]);
    /* attention=gpu on a CPU: a work-group of BQ items holding 2 KiB each on one thread's stack */
    if ((h_ctx->type & CL_DEVICE_TYPE_CPU) && h_ctx->local_mem >= 64 * 513 * 4 + 4)
        expect_refused("attention=gpu:BQ=1024:BK=64", "BQ=1024"); /* where BK=64 tiles fit */
}

/* The ends of every range (each is also run by the fuzzer below), where the device's maximum
 * work-group size allows them. */
static void test_accepted(void **s)
{
    (void)s;
    static const struct {
        const char *tuning;
        size_t group; /* work-items per group the override needs */
        size_t local; /* bytes of local memory it needs */
    } cases[] = {
#define A(t) {t, 256, 0}
#define BK16 (16 * 513 * 4 + 4) /* attention=gpu's default BK=16 tiles at head size 256 */
        A(""), A("softmax=cpu"), A("softmax=gpu"), A("matmul=cpu"), A("matmul=gpu"),
        A("attention=cpu"), {"attention=gpu", 256, BK16}, A("attention=unfused"),
        A("softmax=cpu:VW=8"),
        A("softmax=cpu:VW=16"), A("softmax=gpu:WG=1"), {"softmax=gpu:WG=1024", 1024, 0},
        A("matmul=cpu:TM=1:TN=8:VN=8:KC=1:RB=1:PK=1"),
        A("matmul=cpu:TM=64:TN=8:VN=8:KC=1048576:RB=1048576:PK=1048576"),
        A("matmul=cpu:TM=2:TN=256:VN=8"), A("matmul=cpu:TM=4:TN=256:VN=16"),
        A("matmul=gpu:TSM=1:TSN=1:TSK=1:WPTM=1:WPTN=1"),
        A("matmul=gpu:TSM=256:TSN=256:TSK=64:WPTM=16:WPTN=16"),
        A("attention=cpu:QR=1:KB=16:WG=1:QG=1"), A("attention=cpu:QR=16:KB=16:WG=1:QG=16"),
        A("attention=cpu:QR=1:KB=256:WG=1:QG=64"), A("attention=cpu:QR=16:QG=1:WG=16"),
        A("attention=cpu:VC=16"), A("attention=cpu:QR=3:VC=64"), A("attention=cpu:VC=256"),
        A("attention=gpu:BQ=1:BK=1"), A("attention=gpu:BQ=16:BK=1"),
        {"attention=gpu:BQ=100", 256, BK16}, A("attention=gpu:BK=8"), A("attention=gpu:BQ=5:BK=1"),
        {"attention=gpu:BQ=240:BK=256", 240, 256 * 513 * 4 + 4},
        {"attention=gpu:BQ=296:BK=100", 296, 100 * 513 * 4 + 4},
        {"matmul=gpu,softmax=gpu,attention=gpu", 256, BK16},
        A("matmul=gpu:LOOPS=60000"), A("attention=gpu:BK=8:LOOPS=20000"),
        A("softmax=gpu:WG=32:LOOPS=1000"),
#undef BK16
#undef A
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (cases[i].group > h_ctx->max_wg || cases[i].local > h_ctx->local_mem)
            continue;
        if (cpu_shape_refused(cases[i].tuning))
            expect_refused(cases[i].tuning, "");
        else if (create(cases[i].tuning) != CLATTN_SUCCESS)
            fail_msg("CLATTN_TUNE=%s refused: %s", cases[i].tuning, clattn_last_error(NULL));
    }
}

/* ---- the half tuning: float16 conversions by cl_khr_fp16 where the device has it ---- */

/* The device's extension list, read here rather than through the library. */
static int device_has_fp16(void)
{
    size_t size = 0;
    int found = 0;
    assert_int_equal(clGetDeviceInfo(h_ctx->device, CL_DEVICE_EXTENSIONS, 0, NULL, &size),
                     CL_SUCCESS);
    char *ext = calloc(size + 1, 1);
    assert_non_null(ext);
    assert_int_equal(clGetDeviceInfo(h_ctx->device, CL_DEVICE_EXTENSIONS, size, ext, NULL),
                     CL_SUCCESS);
    for (const char *p = strstr(ext, "cl_khr_fp16"); p && !found; p = strstr(p + 1, "cl_khr_fp16"))
        found = (p == ext || p[-1] == ' ') && (p[11] == '\0' || p[11] == ' ');
    free(ext);
    return found;
}

/* half=VARIANT on the real device: accepted (and built with the define) or refused by name. */
static void check_half_override(const char *variant, int fp16)
{
    char tuning[32], got[64], opts[1024];
    clattn_context *c = NULL;
    clattn_params p = {0};
    snprintf(tuning, sizeof tuning, "half=%s", variant);
    p.tuning = tuning;
    if (strcmp(variant, "fp16") == 0 && !fp16) {
        expect_refused(tuning, "no cl_khr_fp16");
        return;
    }
    if (clattn_context_create(&c, &p) != CLATTN_SUCCESS)
        fail_msg("CLATTN_TUNE=%s refused: %s", tuning, clattn_last_error(NULL));
    assert_int_equal(clattn_context_tuning(c, "half", got, sizeof got), CLATTN_SUCCESS);
    assert_string_equal(got, variant);
    clattn__build_options(c, "", opts, sizeof opts);
    const char *define = strcmp(variant, "fp16") == 0    ? "-D CLATTN_FP16=1 "
                         : strcmp(variant, "clang") == 0 ? "-D CLATTN_FP16=2 "
                                                         : NULL; /* dtype.cl's default, 0 */
    if (define ? !strstr(opts, define) : strstr(opts, "CLATTN_FP16") != NULL)
        fail_msg("half=%s builds with \"%s\", expected %s", variant, opts,
                 define ? define : "no CLATTN_FP16");
    clattn_context_destroy(&c);
}

static void test_half(void **s)
{
    (void)s;
    int fp16 = device_has_fp16();
    check_half_override("bits", fp16);
    check_half_override("fp16", fp16);
    check_half_override("clang", fp16);
    expect_refused("half=fast", "no variant 'fast'");
    expect_refused("half=bits:VW=8", "no parameter VW");
    expect_refused("half=clang:VW=8", "no parameter VW");
    /* the table's choice, on made-up devices: fp16 only on Intel's CPU runtime with the
     * extension (not on PoCL, whose vendor on Intel CPUs is GenuineIntel, nor untested GPUs);
     * clang on PoCL's CPU device where LLVM's CPU name has F16C, bits elsewhere */
    static const char pocl[] = "Portable Computing Language";
    static const struct {
        cl_device_type type;
        const char *vendor, *platform, *name;
        int has;
        const char *want;
    } devs[] = {
        {CL_DEVICE_TYPE_CPU, "Intel(R) Corporation", "Intel(R) OpenCL", "Intel(R) Xeon(R)", 1,
         "fp16"},
        {CL_DEVICE_TYPE_CPU, "Intel(R) Corporation", "Intel(R) OpenCL", "Intel(R) Xeon(R)", 0,
         "bits"},
        {CL_DEVICE_TYPE_CPU, "GenuineIntel", pocl, "pthread-skylake-avx512-Intel(R) Xeon(R)", 1,
         "clang"},
        {CL_DEVICE_TYPE_CPU, "AuthenticAMD", pocl, "pthread-skylake-avx512-AMD EPYC", 0, "clang"},
        {CL_DEVICE_TYPE_CPU, "AuthenticAMD", pocl, "pthread-haswell", 0, "clang"},
        {CL_DEVICE_TYPE_CPU, "AuthenticAMD", pocl, "pthread-znver4", 0, "clang"},
        {CL_DEVICE_TYPE_CPU, "GenuineIntel", pocl, "pthread-x86-64-v3", 0, "clang"},
        {CL_DEVICE_TYPE_CPU, "GenuineIntel", pocl, "cpu-sapphirerapids-Intel(R) Xeon(R)", 0,
         "clang"},
        {CL_DEVICE_TYPE_CPU, "GenuineIntel", pocl, "pthread-core-avx2", 0, "clang"},
        {CL_DEVICE_TYPE_CPU, "GenuineIntel", pocl, "pthread-lakemont", 0, "bits"},
        {CL_DEVICE_TYPE_CPU, "GenuineIntel", pocl, "pthread-x86-64", 0, "bits"},
        {CL_DEVICE_TYPE_CPU, "GenuineIntel", pocl, "pthread-x86-64-Intel(R) Core(TM) i7-4770", 0,
         "bits"},
        {CL_DEVICE_TYPE_CPU, "GenuineIntel", pocl, "pthread-sandybridge", 0, "bits"},
        {CL_DEVICE_TYPE_CPU, "ARM", pocl, "pthread-cortex-a72", 0, "bits"},
        {CL_DEVICE_TYPE_CPU, "GenuineIntel", "Other", "pthread-haswell", 0, "bits"},
        {CL_DEVICE_TYPE_GPU, "Intel(R) Corporation", "Intel(R) OpenCL Graphics", "Intel(R) Arc", 1,
         "bits"},
        {CL_DEVICE_TYPE_GPU, "Advanced Micro Devices, Inc.", "AMD Accelerated Parallel Processing",
         "gfx1100", 1, "bits"},
    };
    static clattn_context dev;
    static char unset[1];
    clattn_tuning t;
    for (size_t i = 0; i < sizeof devs / sizeof devs[0]; i++) {
        memset(&dev, 0, sizeof dev);
        dev.type = devs[i].type;
        snprintf(dev.vendor, sizeof dev.vendor, "%s", devs[i].vendor);
        snprintf(dev.platform_name, sizeof dev.platform_name, "%s", devs[i].platform);
        snprintf(dev.name, sizeof dev.name, "%s", devs[i].name);
        dev.tuning = dev.kernel_dir = dev.cache_dir = unset;
        dev.has_fp16 = devs[i].has;
        assert_int_equal(clattn__tune(&dev, "half", &t), CLATTN_SUCCESS);
        if (strcmp(t.variant, devs[i].want) != 0)
            fail_msg("half on %s (%s, %s): %s, expected %s", devs[i].name, devs[i].vendor,
                     devs[i].platform, t.variant, devs[i].want);
    }
}

/* ---- device limits, on made-up devices (clattn__tune with the fields it reads) ---- */

static clattn_context fake;

static void fake_device(cl_device_type type, size_t max_wg, size_t local_mem, const char *tuning)
{
    memset(&fake, 0, sizeof fake);
    fake.type = type;
    fake.max_wg = max_wg;
    fake.local_mem = local_mem;
    static char text[4096], unset[1]; /* settings are heap strings, "" when unset */
    snprintf(text, sizeof text, "%s", tuning);
    fake.tuning = text;
    fake.kernel_dir = fake.cache_dir = unset;
}

static void expect_fake(clattn_status want, const char *needle)
{
    clattn_status st = clattn__check_tuning(&fake);
    if (st != want || (needle && !strstr(fake.err, needle)))
        fail_msg("CLATTN_TUNE=%s on a device of max_wg %zu, local memory %zu: status %d, "
                 "expected %d naming \"%s\"; message: %s", fake.tuning, fake.max_wg,
                 fake.local_mem, st, want, needle ? needle : "", fake.err);
}

static int tuned_bucket(const char *op, const char *bucket, const char *name)
{
    clattn_tuning t;
    if (clattn__tune_bucket(&fake, op, bucket, &t) != CLATTN_SUCCESS)
        fail_msg("%s (%s) on a device of max_wg %zu: %s", op, bucket ? bucket : "no bucket",
                 fake.max_wg, fake.err);
    return clattn__tune_int(&t, name, -1);
}

static int tuned(const char *op, const char *name)
{
    return tuned_bucket(op, NULL, name);
}

static void test_device_limits(void **s)
{
    (void)s;
    const cl_device_type GPU = CL_DEVICE_TYPE_GPU, CPU = CL_DEVICE_TYPE_CPU;
    /* a small GPU: 64 work-items, 32 KiB of local memory */
    fake_device(GPU, 64, 32768, "softmax=gpu:WG=128");
    expect_fake(CLATTN_ERROR_INVALID_ARGUMENT, "WG=128");
    fake_device(GPU, 64, 32768, "softmax=gpu:WG=64");
    expect_fake(CLATTN_SUCCESS, NULL);
    fake_device(GPU, 64, 32768, "attention=gpu:BQ=128");
    expect_fake(CLATTN_ERROR_INVALID_ARGUMENT, "BQ=128");
    fake_device(GPU, 64, 32768, "attention=gpu:BK=16"); /* 32836 bytes at head size 256 */
    expect_fake(CLATTN_ERROR_INVALID_ARGUMENT, "BK=16");
    fake_device(GPU, 64, 32768, "attention=gpu:BQ=60:BK=15");
    expect_fake(CLATTN_SUCCESS, NULL);
    fake_device(GPU, 64, 32768, "attention=cpu:WG=65");
    expect_fake(CLATTN_ERROR_INVALID_ARGUMENT, "WG=65");
    /* a tile the launch can halve to fit is accepted; one it cannot (15 x 15 groups) is not */
    fake_device(GPU, 64, 32768, "matmul=gpu:TSM=64:TSN=64:TSK=16:WPTM=4:WPTN=4");
    expect_fake(CLATTN_SUCCESS, NULL);
    fake_device(GPU, 64, 32768, "matmul=gpu:TSM=15:TSN=15:TSK=15:WPTM=1:WPTN=1");
    expect_fake(CLATTN_ERROR_INVALID_ARGUMENT, "TSM=15");
    fake_device(GPU, 1024, 1024, "matmul=gpu:TSM=32:TSN=32:TSK=64:WPTM=32:WPTN=32");
    expect_fake(CLATTN_ERROR_INVALID_ARGUMENT, "WPTM=32");
    fake_device(GPU, 1024, 256, "matmul=gpu:TSM=3:TSN=3:TSK=9:WPTM=1:WPTN=1"); /* 288 bytes */
    expect_fake(CLATTN_ERROR_INVALID_ARGUMENT, "local memory");
    /* the table's own choice is fitted to the device instead */
    fake_device(GPU, 64, 32768, "");
    expect_fake(CLATTN_SUCCESS, NULL);
    assert_int_equal(tuned("softmax", "WG"), 64);
    assert_int_equal(tuned("attention", "BK"), 8);
    assert_int_equal(tuned("attention", "BQ"), 64); /* BK=8 tiles: at most 16 x 8 items */
    fake_device(GPU, 256, 4096, ""); /* BK=1 tiles (2056 bytes): BQ at most 16 */
    assert_int_equal(tuned("attention", "BK"), 1);
    assert_int_equal(tuned("attention", "BQ"), 16);
    fake_device(GPU, 64, 65536, "");
    assert_int_equal(tuned("attention", "BK"), 16);
    assert_int_equal(tuned("attention", "BQ"), 64);
    fake_device(GPU, 16, 32768, "");
    assert_int_equal(tuned("softmax", "WG"), 16);
    assert_int_equal(tuned("attention", "BQ"), 16);
    /* on a GPU the GPU shape's big groups are fine; on a CPU their private arrays share a stack */
    fake_device(GPU, 1024, 1 << 20, "attention=gpu:BQ=1024:BK=256");
    expect_fake(CLATTN_SUCCESS, NULL);
    fake_device(CPU, 4096, 1 << 21, "attention=gpu:BQ=1024:BK=256");
    expect_fake(CLATTN_ERROR_INVALID_ARGUMENT, "BQ=1024");
    /* without a device (tools/clattn-kernels) only the device-independent rules apply */
    fake_device(GPU, 0, 0, "attention=gpu:BQ=1024:BK=256,softmax=gpu:WG=1024");
    expect_fake(CLATTN_SUCCESS, NULL);
    fake_device(GPU, 0, 0, "softmax=gpu:WG=96");
    expect_fake(CLATTN_ERROR_INVALID_ARGUMENT, "WG=96");
    /* every rule of the table passes its own checks, on small and large devices of each type */
    static const char *const names[] = {"", "pthread-skylake-avx512", "znver4", "gfx1100"};
    for (size_t n = 0; n < sizeof names / sizeof names[0]; n++)
        for (int type = 0; type < 2; type++)
            for (int big = 0; big < 2; big++) {
                fake_device(type ? GPU : CPU, big ? 4096 : 256, big ? 1 << 21 : 49152, "");
                snprintf(fake.name, sizeof fake.name, "%s", names[n]);
                assert_true(tuned("matmul", "TM") != 0 && tuned("softmax", "VW") != 0 &&
                            tuned("attention", "QR") != 0);
            }
    /* a loop budget (LOOPS) under what one launch of the tiles needs at worst is refused: one
     * TSK=2 step of 1 x 1 tiles (the 2 x 2 halved) loops more than 10 times, and less than 100 */
    fake_device(GPU, 1024, 32768, "matmul=gpu:TSM=2:TSN=2:TSK=2:WPTM=1:WPTN=1:LOOPS=10");
    expect_fake(CLATTN_ERROR_INVALID_ARGUMENT, "raise LOOPS");
    fake_device(GPU, 1024, 32768, "matmul=gpu:TSM=2:TSN=2:TSK=2:WPTM=1:WPTN=1:LOOPS=100");
    expect_fake(CLATTN_SUCCESS, NULL);
    fake_device(GPU, 1024, 1 << 20, "attention=gpu:BK=16:LOOPS=1000");
    expect_fake(CLATTN_ERROR_INVALID_ARGUMENT, "raise LOOPS");
    fake_device(GPU, 1024, 1 << 20, "attention=gpu:BK=16:LOOPS=1073741824");
    expect_fake(CLATTN_SUCCESS, NULL);
    /* the AVX-512 matmul tile by capability (native float vectors of 16, as PoCL and Intel's
     * CPU runtime report AVX-512), never by the device's name */
    fake_device(CPU, 4096, 1 << 21, "");
    fake.native_float = 16;
    snprintf(fake.name, sizeof fake.name, "AMD EPYC 9R14"); /* Intel's runtime: the CPU brand */
    assert_int_equal(tuned("matmul", "TN"), 64);
    assert_int_equal(tuned("matmul", "VN"), 16);
    /* the fused attention's and its backward's key blocks likewise: 64 keys, 16 with AVX2 */
    assert_int_equal(tuned("attention", "KB"), 64);
    assert_int_equal(tuned("backward", "KB"), 64);
    assert_int_equal(tuned("backward", "VC"), 64);
    /* PoCL on AVX-512 Xeons: 8 row groups per item, and at head size 256 only 32-key blocks of
     * 10 rows, 16 groups per item, 2 items per group (its private state within the stack) */
    snprintf(fake.vendor, sizeof fake.vendor, "GenuineIntel");
    snprintf(fake.name, sizeof fake.name, "pthread-sapphirerapids-Intel(R) Xeon(R) Platinum");
    static const char *const heads[] = {NULL, "d64", "d128", "d256"};
    for (size_t h = 0; h < sizeof heads / sizeof heads[0]; h++) {
        int d256 = h == 3;
        assert_int_equal(tuned_bucket("attention", heads[h], "QG"), d256 ? 16 : 8);
        assert_int_equal(tuned_bucket("attention", heads[h], "QR"), d256 ? 10 : 5);
        assert_int_equal(tuned_bucket("attention", heads[h], "KB"), d256 ? 32 : 64);
        assert_int_equal(tuned_bucket("attention", heads[h], "VC"), d256 ? 32 : 64);
        assert_int_equal(tuned_bucket("attention", heads[h], "WG"), d256 ? 2 : 8);
    }
    snprintf(fake.vendor, sizeof fake.vendor, "AuthenticAMD"); /* not measured there */
    assert_int_equal(tuned_bucket("attention", "d256", "QG"), 2);
    assert_int_equal(tuned_bucket("attention", "d256", "KB"), 64);
    fake.vendor[0] = '\0';
    fake.native_float = 8;
    snprintf(fake.name, sizeof fake.name, "pthread-skylake-avx512");
    assert_int_equal(tuned("matmul", "TN"), 16);
    assert_int_equal(tuned("attention", "KB"), 16);
    assert_int_equal(tuned("backward", "KB"), 16);
    assert_int_equal(tuned("backward", "VC"), 16);
    fake_device(GPU, 1024, 65536, "");
    fake.native_float = 16;
    assert_int_equal(tuned("matmul", "TN"), -1); /* a GPU keeps the GPU shape */
    /* llvmpipe: the GPU shapes, and the CPU shapes refused (its loop limit); no budget over the
     * device's */
    fake_device(CPU, 1024, 32768, "");
    snprintf(fake.name, sizeof fake.name, "llvmpipe (LLVM 15.0.6, 256 bits)");
    fake.loop_limit = 65535 - 512;
    assert_int_equal(tuned("matmul", "TM"), -1);
    assert_true(tuned("matmul", "TSM") > 0 && tuned("softmax", "WG") > 0 &&
                tuned("attention", "BQ") > 0);
    static const char *const cpu_shapes[] = {"matmul=cpu", "softmax=cpu:VW=16", "attention=cpu"};
    for (int i = 0; i < 3; i++) {
        fake_device(CPU, 1024, 32768, cpu_shapes[i]);
        snprintf(fake.name, sizeof fake.name, "llvmpipe (LLVM 15.0.6, 256 bits)");
        fake.loop_limit = 65535 - 512;
        expect_fake(CLATTN_ERROR_INVALID_ARGUMENT, "65535 iterations");
    }
    static const char *const budgets[] = {"matmul=gpu:LOOPS=65024", "attention=gpu:BK=8:LOOPS=70000"};
    for (int i = 0; i < 2; i++) {
        fake_device(CPU, 1024, 32768, budgets[i]);
        fake.loop_limit = 65535 - 512;
        expect_fake(CLATTN_ERROR_INVALID_ARGUMENT, "over this device's loop budget");
    }
    fake_device(CPU, 1024, 32768, "matmul=gpu:LOOPS=65023,attention=gpu:BK=8:LOOPS=20000");
    fake.loop_limit = 65535 - 512;
    expect_fake(CLATTN_SUCCESS, NULL);
    clattn_variant_info v[64];
    int nv = clattn__variant_list(v, 64);
    assert_true(nv >= 7 && nv <= 64); /* every variant's defaults and every rule parse */
}

/* ---- the fuzzer ---- */

/* Candidate values per parameter: inside, at and just past each end of its range, and breaking
 * its divisibility rules. The ranges themselves live in src/runtime/tuning.c; these are written
 * independently, so a range that grows past what a kernel runs shows up as a wrong result. */
typedef struct {
    const char *op, *variant;
    const char *params[6][2]; /* name, comma-separated candidates */
} fz_variant;

static const fz_variant fz_variants[] = {
    {"matmul", "cpu",
     {{"TM", "1,2,3,5,6,7,12,16,32,64,65"},
      {"TN", "8,16,24,32,48,64,128,256,20,7,272"},
      {"VN", "8,16,8,16,4,12"},
      {"KC", "1,2,3,7,16,64,4096,1048576,1048577"},
      {"RB", "1,2,3,32,4096,1048576,1048577"},
      {"PK", "1,2,5,16,4096,1048576,1048577"}}},
    {"matmul", "gpu",
     {{"TSM", "1,2,4,8,12,16,20,32,64,128,256,257"},
      {"TSN", "1,2,4,8,12,16,20,32,64,128,256,257"},
      {"TSK", "1,2,4,8,16,32,64,65"},
      {"WPTM", "1,2,3,4,5,8,16,17"},
      {"WPTN", "1,2,3,4,5,8,16,17"},
      {"LOOPS", "0,1,100,600,2000,5000,65023,1073741824,1073741825"}}},
    {"softmax", "cpu", {{"VW", "8,16,8,16,1,3,4,32"}}},
    {"softmax", "gpu", {{"WG", "1,2,4,32,64,128,256,1024,2048,3,96,100"}}},
    {"attention", "cpu",
     {{"QR", "1,2,3,5,8,16,17"},
      {"KB", "16,32,48,64,128,256,8,24,272"},
      {"WG", "1,2,3,8,16,22,64,257"},
      {"QG", "1,2,3,4,8,32,64,65"},
      {"VC", "16,32,64,128,256,8,48,512"}}},
    {"attention", "gpu",
     {{"BQ", "1,3,16,32,64,100,256,481,1024,1025"},
      {"BK", "1,2,7,16,32,64,256,257"},
      {"LOOPS", "0,1,1000,9000,20000,40000,65023,1073741824,1073741825"}}},
    {"attention", "unfused", {{NULL, NULL}}},
    {"backward", "cpu",
     {{"QR", "1,2,3,6,8,16,17,0"},
      {"KB", "16,32,48,64,128,8,24,272"},
      {"VC", "16,32,48,64,128,8,20,272"},
      {"CH", "0,1,2,3,5,4096,4097"}}},
    {"backward", "unfused", {{NULL, NULL}}},
    {"decode", "cpu", {{"RQ", "1,2,3,4,5,8,16,0,17"}, {"SK", "16,32,48,256,1024,1048576,8,24"}}},
    {"decode", "gpu",
     {{"RQ", "1,2,3,4,8,16,0,17"},
      {"WG", "3,4,5,8,16,64,128,1024,1,2,1025"},
      {"SK", "16,48,256,1024,8"},
      {"KC", "1,7,16,64,256,0,257"},
      {"LOOPS", "0,7280,8000,20000,1073741824,1073741825"}}},
};
static const char *const fz_junk[] = {"0", "-1", "-16", "2147483648", "99999999999999999999",
                                      "abc", "", "+8", "0x10", "8 ", "1e3"};
#define NJUNK (sizeof fz_junk / sizeof fz_junk[0])
#define NVAR (sizeof fz_variants / sizeof fz_variants[0])

static int chance(double p)
{
    return h_uniform(0, 1) < p;
}

/* Appends a random candidate of the comma-separated list (or, rarely, junk) to buf. */
static void put_value(char *buf, size_t size, const char *list)
{
    char tmp[256];
    snprintf(tmp, sizeof tmp, "%s", list);
    int n = 1;
    for (const char *p = tmp; *p; p++)
        n += *p == ',';
    int pick = h_randint(0, n - 1);
    char *tok = strtok(tmp, ",");
    while (pick-- > 0)
        tok = strtok(NULL, ",");
    size_t used = strlen(buf);
    snprintf(buf + used, size - used, "%s", chance(0.1) ? fz_junk[h_randint(0, NJUNK - 1)] : tok);
}

static void append(char *buf, size_t size, const char *text)
{
    size_t used = strlen(buf);
    snprintf(buf + used, size - used, "%s", text);
}

/* One entry: mostly a real op, variant and parameters, sometimes a misspelling, an unknown or
 * repeated parameter, or a stray separator. */
static void gen_entry(char *buf, size_t size)
{
    const fz_variant *v = &fz_variants[h_randint(0, NVAR - 1)];
    static const char *const bad_ops[] = {"softmx", "MATMUL", "", "attention "};
    static const char *const bad_variants[] = {"bogus", "", "CPU", "gpu2"};
    append(buf, size, chance(0.05) ? bad_ops[h_randint(0, 3)] : v->op);
    append(buf, size, "=");
    append(buf, size, chance(0.05) ? bad_variants[h_randint(0, 3)] : v->variant);
    for (int i = 0; i < 6 && v->params[i][0]; i++) {
        if (!chance(0.45))
            continue;
        append(buf, size, ":");
        append(buf, size, v->params[i][0]);
        append(buf, size, "=");
        put_value(buf, size, v->params[i][1]);
        if (chance(0.03)) { /* the same parameter again */
            append(buf, size, ":");
            append(buf, size, v->params[i][0]);
            append(buf, size, "=");
            put_value(buf, size, v->params[i][1]);
        }
    }
    if (chance(0.03))
        append(buf, size, ":XX=1");
    if (chance(0.02))
        append(buf, size, ":");
}

/* Up to three entries, ops drawn with replacement (so sometimes twice). */
static void gen_tuning(char *buf, size_t size)
{
    int n = chance(0.6) ? 1 : h_randint(2, 3);
    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (i)
            append(buf, size, chance(0.03) ? ",," : ",");
        gen_entry(buf, size);
    }
    if (chance(0.02))
        append(buf, size, ",");
}

static const char *cur_tune; /* for failure messages */

/* An output of n floats at element offset GUARD in a buffer with GUARD floats of pattern on each
 * side: the view is poisoned with NaN, the guards must survive the op. */
#define GUARD 40
#define GUARD_VALUE 4242.5f
typedef struct {
    clattn_tensor buf, view;
    size_t n;
} guarded;

static guarded guarded_make(int ndim, const size_t *dims)
{
    guarded g;
    g.n = 1;
    for (int i = 0; i < ndim; i++)
        g.n *= dims[i];
    float *h = malloc((g.n + 2 * GUARD) * sizeof *h);
    for (size_t i = 0; i < g.n + 2 * GUARD; i++)
        h[i] = i < GUARD || i >= GUARD + g.n ? GUARD_VALUE : NAN;
    g.buf = h_tensor(CLATTN_FLOAT32, 1, H_DIMS(g.n + 2 * GUARD), h);
    g.view = clattn_view(g.buf.buf, CLATTN_FLOAT32, GUARD, ndim, dims);
    free(h);
    return g;
}

/* The view's values (malloc'd), after checking that the guards are untouched; releases g. */
static float *guarded_read(guarded *g, const char *what)
{
    float *all = h_read(&g->buf);
    for (size_t i = 0; i < GUARD; i++)
        if (all[i] != GUARD_VALUE || all[GUARD + g->n + i] != GUARD_VALUE)
            fail_msg("%s: wrote outside the output view (%s guard, float %zu)", what,
                     all[i] != GUARD_VALUE ? "leading" : "trailing", i);
    memmove(all, all + GUARD, g->n * sizeof *all);
    clattn_tensor_release(&g->buf);
    return all;
}

static void battery_matmul(void)
{
    static const int shapes[][4] = {{1, 1, 1, 1},   {2, 37, 41, 29}, {1, 17, 130, 65},
                                    {3, 5, 7, 300}, {1, 64, 48, 16}, {2, 9, 513, 3}};
    const int *sh = shapes[h_randint(0, 5)];
    int nb = sh[0], M = sh[1], N = sh[2], K = sh[3], ta = h_randint(0, 1), tb = h_randint(0, 1);
    int a_shared = chance(0.2), b_shared = chance(0.2);
    size_t an = (size_t)M * K, bn = (size_t)K * N, cn = (size_t)M * N * nb;
    float *A = malloc(an * nb * 4), *B = malloc(bn * nb * 4);
    double *ref = malloc(cn * 8), *mag = malloc(cn * 8);
    h_fill(A, an * nb, -1, 1);
    h_fill(B, bn * nb, -1, 1);
    size_t ad[3] = {(size_t)nb, (size_t)(ta ? K : M), (size_t)(ta ? M : K)};
    size_t bd[3] = {(size_t)nb, (size_t)(tb ? N : K), (size_t)(tb ? K : N)};
    clattn_tensor tA = h_tensor(CLATTN_FLOAT32, a_shared ? 2 : 3, ad + a_shared, A);
    clattn_tensor tB = h_tensor(CLATTN_FLOAT32, b_shared ? 2 : 3, bd + b_shared, B);
    guarded C = guarded_make(3, H_DIMS((size_t)nb, (size_t)M, (size_t)N));
    char what[512];
    snprintf(what, sizeof what, "CLATTN_TUNE=%s, matmul b=%d M=%d N=%d K=%d ta=%d tb=%d shared "
             "%d%d", cur_tune, nb, M, N, K, ta, tb, a_shared, b_shared);
    if (clattn_matmul(h_ctx, &tA, ta, &tB, tb, 1.0f, 0.0f, &C.view) != CLATTN_SUCCESS)
        fail_msg("%s: %s", what, clattn_last_error(h_ctx));
    float *got = guarded_read(&C, what);
    ref_matmul(nb, M, N, K, A, a_shared ? 0 : an, ta, B, b_shared ? 0 : bn, tb, 1.0, 0.0, NULL,
               ref, mag);
    for (size_t i = 0; i < cn; i++)
        mag[i] = fmax(fabs(ref[i]), mag[i] / sqrt((double)K));
    h_assert_scaled(got, ref, mag, cn, MATMUL_TOL, what);
    clattn_tensor_release(&tA);
    clattn_tensor_release(&tB);
    free(A); free(B); free(ref); free(mag); free(got);
}

/* A random mask for scores of the given rank and dims: lengths (host or device, 1-D or 2-D), a
 * broadcast 0/1 tensor, causal, a finite fill. */
static h_mask_spec random_mask(int rank, const size_t *dims)
{
    h_mask_spec m;
    memset(&m, 0, sizeof m);
    m.lens = h_randint(0, 2);
    m.lens_on_device = chance(0.3);
    m.causal = chance(0.3);
    m.fill = chance(0.5) ? 0.0f : -1e9f;
    if (chance(0.3)) {
        m.mask_rank = h_randint(1, rank);
        for (int i = 0; i < m.mask_rank; i++)
            m.mask_dims[i] = chance(0.3) ? 1 : dims[rank - m.mask_rank + i];
    }
    return m;
}

static void battery_softmax(void)
{
    static const size_t Ks[] = {1, 7, 8, 9, 15, 16, 17, 100, 257};
    size_t dims[4];
    int rank = h_randint(1, 4);
    for (int i = 0; i < rank; i++)
        dims[i] = (size_t)h_randint(1, 3);
    if (rank >= 2)
        dims[rank - 2] = (size_t)h_randint(1, 9);
    dims[rank - 1] = Ks[h_randint(0, 8)];
    size_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= dims[i];
    h_mask_spec spec = random_mask(rank, dims);
    h_mask hm;
    h_mask_make(&hm, &spec, rank, dims);
    float *x = malloc(n * 4);
    double *ref = malloc(n * 8);
    h_fill(x, n, -8, 8);
    clattn_tensor tx = h_tensor(CLATTN_FLOAT32, rank, dims, x);
    guarded y = guarded_make(rank, dims);
    char what[512];
    snprintf(what, sizeof what, "CLATTN_TUNE=%s, softmax rank %d K=%zu lens %d mask rank %d "
             "causal %d", cur_tune, rank, dims[rank - 1], spec.lens, spec.mask_rank, spec.causal);
    if (clattn_masked_softmax(h_ctx, &tx, &hm.m, &y.view) != CLATTN_SUCCESS)
        fail_msg("%s: %s", what, clattn_last_error(h_ctx));
    float *got = guarded_read(&y, what);
    ref_masked_softmax(&hm.r, x, ref);
    h_assert_close(got, ref, n, SM_RTOL, SM_ATOL, what);
    clattn_tensor_release(&tx);
    h_mask_free(&hm);
    free(x); free(ref); free(got);
}

/* A float tensor of dims[0, nlead) x rows x cols (dims gets the last two). */
static clattn_tensor lead_tensor(int nlead, size_t *dims, int rows, int cols, const float *host)
{
    dims[nlead] = (size_t)rows;
    dims[nlead + 1] = (size_t)cols;
    return h_tensor(CLATTN_FLOAT32, nlead + 2, dims, host);
}

/* Fused dot-product attention (no weights requested) with head sizes from 1 to 256. Compiling the
 * CPU-shaped kernel takes seconds to minutes as QR x (KB + DVP) / 16 vectors grow, so unless
 * `cheap` is 0 (the long run) heavy shapes draw their head sizes from the small end. */
static void battery_attention(const clattn_tuning *t, int cheap)
{
    static const int sizes[] = {1, 17, 64, 100, 256};
    int QR = clattn__tune_int(t, "QR", 0), KB = clattn__tune_int(t, "KB", 0);
    int top = 4;
    while (cheap && top > 0 && QR * (KB / 16 + (sizes[top] + 15) / 16) > 100)
        top--;
    int d = sizes[h_randint(0, 4)], dv = sizes[h_randint(0, top)];
    int nlead = h_randint(0, 2), nq = h_randint(1, 70), nk = h_randint(1, 150);
    size_t lead[2] = {(size_t)h_randint(1, 3), (size_t)h_randint(1, 2)}, nb = 1;
    for (int i = 0; i < nlead; i++)
        nb *= lead[i];
    size_t dims[4];
    memcpy(dims, lead, sizeof lead);
    size_t qn = nb * nq * d, kn = nb * nk * d, vn = nb * nk * dv, on = nb * nq * dv;
    float *q = malloc(qn * 4), *k = malloc(kn * 4), *v = malloc(vn * 4);
    h_fill(q, qn, -1, 1);
    h_fill(k, kn, -1, 1);
    h_fill(v, vn, -1, 1);
    clattn_tensor tq = lead_tensor(nlead, dims, nq, d, q), tk = lead_tensor(nlead, dims, nk, d, k);
    clattn_tensor tv = lead_tensor(nlead, dims, nk, dv, v);
    dims[nlead] = (size_t)nq;
    dims[nlead + 1] = (size_t)nk;
    h_mask_spec spec = random_mask(nlead + 2, dims);
    h_mask hm;
    h_mask_make(&hm, &spec, nlead + 2, dims);
    dims[nlead + 1] = (size_t)dv;
    guarded o = guarded_make(nlead + 2, dims);
    clattn_attention_opts opts;
    memset(&opts, 0, sizeof opts);
    opts.mask = hm.m;
    char what[512];
    snprintf(what, sizeof what, "CLATTN_TUNE=%s, attention batch %zu Q=%d K=%d d=%d dv=%d lens "
             "%d mask rank %d causal %d", cur_tune, nb, nq, nk, d, dv, spec.lens, spec.mask_rank,
             spec.causal);
    if (clattn_dot_product_attention(h_ctx, &tq, &tk, &tv, &opts, &o.view, NULL) !=
        CLATTN_SUCCESS)
        fail_msg("%s: %s", what, clattn_last_error(h_ctx));
    float *got = guarded_read(&o, what);
    double *qd = ref_to_double(q, qn), *kd = ref_to_double(k, kn), *vd = ref_to_double(v, vn);
    double *w = malloc(nb * nq * nk * 8), *ref = malloc(on * 8), *scale = malloc(on * 8);
    ref_attention(&hm.r, d, dv, qd, kd, vd, 1.0 / sqrt((double)d), NULL, w, ref);
    ref_attention_scale(nb, nq, nk, dv, w, vd, ref, scale); /* |out - ref| <= OUT_TOL * scale */
    h_assert_scaled(got, ref, scale, on, OUT_TOL, what);
    clattn_tensor_release(&tq); clattn_tensor_release(&tk); clattn_tensor_release(&tv);
    h_mask_free(&hm);
    free(q); free(k); free(v); free(qd); free(kd); free(vd); free(w); free(ref); free(scale);
    free(got);
}

/* KV-cache decoding (B 1-2, grouped heads, 1-3 new rows without an append, each sequence's own
 * length, 0 included) against a double reference over each row's keys; the output poisoned and
 * guarded. Head sizes stay small unless `cheap` is 0, as in battery_attention (decode_cpu keeps
 * RQ rows of q and of the output in registers). */
static void battery_decode(const clattn_tuning *t, int cheap)
{
    static const int sizes[] = {1, 17, 64, 100, 256};
    int top = cheap && clattn__tune_int(t, "RQ", 4) > 4 ? 2 : 4;
    int d = sizes[h_randint(0, top)], dv = sizes[h_randint(0, top)];
    int B = h_randint(1, 2), Hkv = h_randint(1, 2), G = h_randint(1, 5), Qn = h_randint(1, 3);
    int Hq = G * Hkv, Kmax = h_randint(1, 300), lens[2];
    size_t qd[4] = {(size_t)B, (size_t)Hq, (size_t)Qn, (size_t)d};
    size_t kd[4] = {(size_t)B, (size_t)Hkv, (size_t)Kmax, (size_t)d};
    size_t vd[4] = {(size_t)B, (size_t)Hkv, (size_t)Kmax, (size_t)dv};
    size_t od[4] = {(size_t)B, (size_t)Hq, (size_t)Qn, (size_t)dv};
    size_t qn = (size_t)B * Hq * Qn * d, kn = (size_t)B * Hkv * Kmax * d;
    size_t vn = (size_t)B * Hkv * Kmax * dv, on = (size_t)B * Hq * Qn * dv;
    float *q = malloc(qn * 4), *k = malloc(kn * 4), *v = malloc(vn * 4);
    double *ref = calloc(on, 8), *scale = calloc(on, 8), *w = malloc((size_t)Kmax * 8);
    h_fill(q, qn, -1, 1);
    h_fill(k, kn, -1, 1);
    h_fill(v, vn, -1, 1);
    for (int b = 0; b < B; b++)
        lens[b] = chance(0.2) ? (chance(0.5) ? 0 : Kmax) : h_randint(0, Kmax);
    clattn_tensor tq = h_tensor(CLATTN_FLOAT32, 4, qd, q), tk = h_tensor(CLATTN_FLOAT32, 4, kd, k);
    clattn_tensor tv = h_tensor(CLATTN_FLOAT32, 4, vd, v);
    clattn_tensor tl = h_tensor(CLATTN_INT32, 1, H_DIMS((size_t)B), lens);
    guarded o = guarded_make(4, od);
    clattn_kv_cache c = {&tk, &tv, &tl, NULL, NULL, 0};
    char what[512];
    snprintf(what, sizeof what, "CLATTN_TUNE=%s, decode B=%d Hq=%d Hkv=%d Qn=%d Kmax=%d d=%d "
             "dv=%d lens %d %d", cur_tune, B, Hq, Hkv, Qn, Kmax, d, dv, lens[0],
             B > 1 ? lens[1] : -1);
    if (clattn_decode_attention(h_ctx, &tq, &c, NULL, &o.view) != CLATTN_SUCCESS)
        fail_msg("%s: %s", what, clattn_last_error(h_ctx));
    float *got = guarded_read(&o, what);
    /* row (b, h, i) attends to the first lens[b] keys of K/V head h / G (none: zeros) */
    for (size_t row = 0; row < (size_t)B * Hq * Qn; row++) {
        size_t b = row / ((size_t)Hq * Qn), h = row / Qn % Hq, bh = b * Hkv + h / G;
        const float *qr = q + row * d, *kb = k + bh * Kmax * d, *vb = v + bh * Kmax * dv;
        double m = -INFINITY, sum = 0;
        for (int j = 0; j < lens[b]; j++) {
            double x = 0;
            for (int e = 0; e < d; e++)
                x += (double)qr[e] * kb[(size_t)j * d + e];
            w[j] = x / sqrt((double)d);
            m = fmax(m, w[j]);
        }
        for (int j = 0; j < lens[b]; j++)
            sum += w[j] = exp(w[j] - m);
        for (int j = 0; j < lens[b]; j++)
            for (int e = 0; e < dv; e++) {
                ref[row * dv + e] += w[j] / sum * vb[(size_t)j * dv + e];
                scale[row * dv + e] += w[j] / sum * fabs(vb[(size_t)j * dv + e]);
            }
        for (int e = 0; e < dv; e++) /* zeros (L = 0) must come out exactly */
            scale[row * dv + e] = fmax(scale[row * dv + e], 1e-30);
    }
    h_assert_scaled(got, ref, scale, on, OUT_TOL, what);
    clattn_tensor_release(&tq); clattn_tensor_release(&tk); clattn_tensor_release(&tv);
    clattn_tensor_release(&tl);
    free(q); free(k); free(v); free(ref); free(scale); free(w); free(got);
}

/* The attention backward with the forward's out and LSE (the fused path under backward=cpu),
 * every gradient, against the double reference. Head sizes stay small unless `cheap` is 0, as
 * in battery_attention. */
static void battery_backward(const clattn_tuning *t, int cheap)
{
    static const int sizes[] = {1, 17, 64, 100};
    int QR = clattn__tune_int(t, "QR", 0), KB = clattn__tune_int(t, "KB", 0);
    int top = cheap && QR * (KB / 16) > 64 ? 1 : 3;
    int d = sizes[h_randint(0, top)], dv = sizes[h_randint(0, top)];
    int nb = h_randint(1, 3), nq = h_randint(1, 40), nk = h_randint(1, 150);
    size_t qd[3] = {(size_t)nb, (size_t)nq, (size_t)d}, kd[3] = {(size_t)nb, (size_t)nk,
                                                              (size_t)d};
    size_t vd[3] = {(size_t)nb, (size_t)nk, (size_t)dv}, od[3] = {(size_t)nb, (size_t)nq,
                                                               (size_t)dv};
    size_t sd[3] = {(size_t)nb, (size_t)nq, (size_t)nk};
    size_t qn = (size_t)nb * nq * d, kn = (size_t)nb * nk * d, vn = (size_t)nb * nk * dv;
    size_t on = (size_t)nb * nq * dv, sn = (size_t)nb * nq * nk;
    float *q = malloc(qn * 4), *k = malloc(kn * 4), *v = malloc(vn * 4), *g = malloc(on * 4);
    h_fill(q, qn, -1, 1);
    h_fill(k, kn, -1, 1);
    h_fill(v, vn, -1, 1);
    h_fill(g, on, -1, 1);
    h_mask_spec spec = random_mask(3, sd);
    h_mask hm;
    h_mask_make(&hm, &spec, 3, sd);
    clattn_tensor tq = h_tensor(CLATTN_FLOAT32, 3, qd, q), tk = h_tensor(CLATTN_FLOAT32, 3, kd, k);
    clattn_tensor tv = h_tensor(CLATTN_FLOAT32, 3, vd, v), tg = h_tensor(CLATTN_FLOAT32, 3, od, g);
    clattn_tensor to = h_tensor(CLATTN_FLOAT32, 3, od, NULL);
    clattn_tensor tl = h_tensor(CLATTN_FLOAT32, 2, sd, NULL);
    guarded gq = guarded_make(3, qd), gk = guarded_make(3, kd), gv = guarded_make(3, vd);
    clattn_attention_opts opts;
    memset(&opts, 0, sizeof opts);
    opts.mask = hm.m;
    opts.lse = &tl;
    clattn_attention_grads gr = {&gq.view, &gk.view, &gv.view, NULL};
    char what[512];
    snprintf(what, sizeof what, "CLATTN_TUNE=%s, attention backward batch %d Q=%d K=%d d=%d "
             "dv=%d lens %d mask rank %d causal %d", cur_tune, nb, nq, nk, d, dv, spec.lens,
             spec.mask_rank, spec.causal);
    if (clattn_dot_product_attention(h_ctx, &tq, &tk, &tv, &opts, &to, NULL) != CLATTN_SUCCESS ||
        clattn_dot_product_attention_backward(h_ctx, &tq, &tk, &tv, &opts, &to, &tg, &gr) !=
            CLATTN_SUCCESS)
        fail_msg("%s: %s", what, clattn_last_error(h_ctx));
    double *qx = ref_to_double(q, qn), *kx = ref_to_double(k, kn), *vx = ref_to_double(v, vn);
    double *gx = ref_to_double(g, on), *rq = malloc(qn * 8), *rk = malloc(kn * 8);
    double *rv = malloc(vn * 8), *rs = malloc(sn * 8), *sq = malloc(qn * 8);
    double *sk = malloc(kn * 8), *sv = malloc(vn * 8), *ss = malloc(sn * 8);
    ref_attention_backward(&hm.r, d, dv, qx, kx, vx, 1.0 / sqrt((double)d), NULL, gx, rq, rk, rv,
                           rs, sq, sk, sv, ss);
    float *got[3] = {guarded_read(&gq, what), guarded_read(&gk, what), guarded_read(&gv, what)};
    const double *ref[3] = {rq, rk, rv}, *sc[3] = {sq, sk, sv};
    size_t n[3] = {qn, kn, vn};
    for (int i = 0; i < 3; i++) {
        h_assert_scaled(got[i], ref[i], sc[i], n[i], GRAD_TOL, what);
        free(got[i]);
    }
    clattn_tensor *ts[] = {&tq, &tk, &tv, &tg, &to, &tl};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        clattn_tensor_release(ts[i]);
    h_mask_free(&hm);
    double *fr[] = {qx, kx, vx, gx, rq, rk, rv, rs, sq, sk, sv, ss};
    for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++)
        free(fr[i]);
    free(q); free(k); free(v); free(g);
}

/* 1 when the override string has an entry for op. */
static int names_op(const char *tuning, const char *op)
{
    size_t n = strlen(op);
    for (const char *s = tuning; s; s = strchr(s, ',') ? strchr(s, ',') + 1 : NULL)
        if (strncmp(s, op, n) == 0 && s[n] == '=')
            return 1;
    return 0;
}

/* Runs the battery of each op the accepted override names, in its own context. */
static void run_battery(clattn_context *c, const char *tuning, int cheap)
{
    clattn_context *saved = h_ctx;
    clattn_tuning t;
    h_ctx = c;
    cur_tune = tuning;
    if (names_op(tuning, "matmul"))
        battery_matmul();
    if (names_op(tuning, "softmax"))
        battery_softmax();
    if (names_op(tuning, "attention")) {
        assert_int_equal(clattn__tune(c, "attention", &t), CLATTN_SUCCESS);
        battery_attention(&t, cheap);
    }
    if (names_op(tuning, "backward")) {
        assert_int_equal(clattn__tune(c, "backward", &t), CLATTN_SUCCESS);
        battery_backward(&t, cheap);
    }
    if (names_op(tuning, "decode")) {
        assert_int_equal(clattn__tune(c, "decode", &t), CLATTN_SUCCESS);
        battery_decode(&t, cheap);
    }
    h_ctx = saved;
}

/* Whether the program of kernel k holds a kernel called name. */
static int program_has(cl_kernel k, const char *name)
{
    cl_program p;
    char names[2048];
    assert_int_equal(clGetKernelInfo(k, CL_KERNEL_PROGRAM, sizeof p, &p, NULL), CL_SUCCESS);
    assert_int_equal(clGetProgramInfo(p, CL_PROGRAM_KERNEL_NAMES, sizeof names, names, NULL),
                     CL_SUCCESS);
    for (char *tok = strtok(names, ";"); tok; tok = strtok(NULL, ";"))
        if (strcmp(tok, name) == 0)
            return 1;
    return 0;
}

/* A cpu or gpu variant's program holds its own shape's main kernels and not the other's, and a
 * program of shared kernels neither (common.cl's CLATTN_SHAPES: the other shape's kernels cost a
 * GPU driver's build most of its time). A variant the device refuses (the CPU shapes on
 * llvmpipe) is passed over. */
static void test_program_shapes(void **s)
{
    (void)s;
    static const struct {
        const char *op, *file, *cpu, *gpu;
    } files[] = {
        {"attention", "flash.cl", "flash_cpu", "flash_gpu"},
        {"decode", "decode.cl", "decode_cpu", "decode_gpu"},
        {"matmul", "matmul.cl", "matmul_packed", "matmul_tiled"},
        {"softmax", "softmax.cl", "masked_softmax_rows", "masked_softmax_wg"},
        {"softmax", "softmax.cl", "masked_softmax_backward_rows", "masked_softmax_backward_wg"},
        {"softmax", "loss.cl", "ce_loss_rows", "ce_loss_wg"},
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        for (int gpu = 0; gpu < 2; gpu++) {
            char tuning[64];
            clattn_context *c = NULL;
            clattn_params p = {0};
            clattn_tuning t;
            cl_kernel k;
            const char *own = gpu ? files[i].gpu : files[i].cpu;
            const char *other = gpu ? files[i].cpu : files[i].gpu;
            snprintf(tuning, sizeof tuning, "%s=%s", files[i].op, gpu ? "gpu" : "cpu");
            p.tuning = tuning;
            if (clattn_context_create(&c, &p) != CLATTN_SUCCESS)
                continue;
            assert_int_equal(clattn__tune(c, files[i].op, &t), CLATTN_SUCCESS);
            assert_int_equal(clattn__get_kernel(c, files[i].file, t.defines, own, &k),
                             CLATTN_SUCCESS);
            if (program_has(k, other))
                fail_msg("%s: the program of %s (%s) holds %s", tuning, own, t.defines, other);
            clattn_context_destroy(&c);
        }
    /* the shared kernels' programs */
    clattn_context *c = h_ctx;
    cl_kernel k;
    assert_int_equal(clattn__get_kernel(c, "decode.cl", SHARED_ONLY, "decode_merge", &k),
                     CLATTN_SUCCESS);
    assert_false(program_has(k, "decode_cpu") || program_has(k, "decode_gpu"));
    assert_int_equal(clattn__get_kernel(c, "matmul.cl", SHARED_ONLY, "column_sums", &k),
                     CLATTN_SUCCESS);
    assert_false(program_has(k, "matmul_packed") || program_has(k, "matmul_tiled"));
}

static void test_fuzz(void **s)
{
    (void)s;
    const char *env = getenv("CLATTN_FUZZ_ITERS");
    int want = env && *env ? atoi(env) : 40, accepted = 0, refused = 0;
    char (*seen)[400] = calloc((size_t)want + 1, sizeof *seen), *tuning = seen[0];
    h_reseed(0x70E);
    /* a generous cap on the draws: about one string in three is accepted */
    for (int draw = 0; accepted < want && draw < 100 * want + 100; draw++) {
        clattn_context *c = NULL;
        clattn_params p = {0};
        int again = 0;
        tuning = seen[accepted];
        gen_tuning(tuning, sizeof seen[0]);
        for (int i = 0; i < accepted; i++)
            again |= strcmp(seen[i], tuning) == 0;
        if (again)
            continue; /* each distinct string once: the draws repeat the plain ones often */
        p.tuning = tuning;
        clattn_status st = clattn_context_create(&c, &p);
        if (st != CLATTN_SUCCESS) {
            /* refused: at creation, as an invalid argument, saying it is about the tuning */
            if (st != CLATTN_ERROR_INVALID_ARGUMENT || c ||
                strncmp(clattn_last_error(NULL), "tuning: ", 8) != 0)
                fail_msg("CLATTN_TUNE=%s: status %d, message %s", tuning, st,
                         clattn_last_error(NULL));
            refused++;
            continue;
        }
        printf("# accepted %d: %s\n", accepted + 1, tuning);
        fflush(stdout);
        run_battery(c, tuning, !(env && *env));
        clattn_context_destroy(&c);
        accepted++;
    }
    printf("# %d override strings accepted and checked, %d refused\n", accepted, refused);
    free(seen);
    assert_int_equal(accepted, want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_accepted),
        cmocka_unit_test(test_device_limits),
        cmocka_unit_test(test_half),
        cmocka_unit_test(test_program_shapes),
        cmocka_unit_test(test_fuzz),
    };
    return cmocka_run_group_tests_name("tuning", tests, h_setup, h_teardown);
}
