/* CLATTN_DEVICE matching against made-up device lists: no device needed. */
#include "internal.h"
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

static const clattn_device_desc mixed[] = {
    {0, 0, CL_DEVICE_TYPE_CPU, "Portable Computing Language", "The pocl project", "pthread-skylake-avx512", "GenuineIntel"},
    {1, 0, CL_DEVICE_TYPE_GPU, "NVIDIA CUDA", "NVIDIA Corporation", "NVIDIA H200", "NVIDIA Corporation"},
    {1, 1, CL_DEVICE_TYPE_GPU, "NVIDIA CUDA", "NVIDIA Corporation", "NVIDIA H100", "NVIDIA Corporation"},
    {2, 0, CL_DEVICE_TYPE_GPU, "AMD Accelerated Parallel Processing", "Advanced Micro Devices, Inc.", "gfx1100", "Advanced Micro Devices, Inc."},
    {3, 0, CL_DEVICE_TYPE_ACCELERATOR, "Intel(R) FPGA Emulation Platform", "Intel(R) Corporation", "Intel(R) FPGA Emulation Device", "Intel(R) Corporation"},
};
#define N_MIXED ((int)(sizeof mixed / sizeof mixed[0]))
static const clattn_device_desc cpu_only[] = {
    {0, 0, CL_DEVICE_TYPE_CPU, "Portable Computing Language", "The pocl project", "cpu-x86", "GenuineIntel"},
};
static const clattn_device_desc acc_and_cpu[] = {
    {0, 0, CL_DEVICE_TYPE_CPU, "Portable Computing Language", "The pocl project", "cpu-x86", "GenuineIntel"},
    {1, 0, CL_DEVICE_TYPE_ACCELERATOR, "Acc", "Acme", "acc0", "Acme"},
};

/* The PoCL release whose kernel compiler aborts on the GPU shapes (tuning.c), by the platform
 * versions PoCL reports, and its CBS work-group method that avoids it. */
static void test_pocl_gpu_shapes_abort(void **s)
{
    (void)s;
    const char *v50 = "OpenCL 3.0 PoCL 5.0+debian  Linux, None+Asserts, RELOC, SPIR, LLVM 16.0.6, "
                      "SLEEF, DISTRO, POCL_DEBUG";
    assert_true(clattn__pocl_gpu_shapes_abort(v50, NULL));
    assert_true(clattn__pocl_gpu_shapes_abort(v50, "loopvec"));
    assert_false(clattn__pocl_gpu_shapes_abort(v50, "cbs"));
    assert_false(clattn__pocl_gpu_shapes_abort("OpenCL 3.0 PoCL 3.1+debian  Linux, None+Asserts, "
                                               "RELOC, SPIR, LLVM 15.0.6, SLEEF", NULL));
    assert_false(clattn__pocl_gpu_shapes_abort("OpenCL 3.0 PoCL 6.0  Linux, None+Asserts, RELOC, "
                                               "LLVM 16.0.6, SLEEF, POCL_DEBUG", NULL));
    assert_false(clattn__pocl_gpu_shapes_abort("OpenCL 3.0 PoCL 5.0  Linux, Release, LLVM 15.0.7",
                                               NULL));
    assert_false(clattn__pocl_gpu_shapes_abort("OpenCL 3.0 CUDA 13.0.98", NULL));
}

static void test_default_prefers_gpu(void **s)
{
    (void)s;
    assert_int_equal(clattn__match_device(NULL, mixed, N_MIXED), 1);
    assert_int_equal(clattn__match_device("", mixed, N_MIXED), 1);
    assert_int_equal(clattn__match_device(NULL, acc_and_cpu, 2), 1);
    assert_int_equal(clattn__match_device(NULL, cpu_only, 1), 0);
    assert_int_equal(clattn__match_device(NULL, cpu_only, 0), -1);
}

static void test_types(void **s)
{
    (void)s;
    assert_int_equal(clattn__match_device("cpu", mixed, N_MIXED), 0);
    assert_int_equal(clattn__match_device("GPU", mixed, N_MIXED), 1);
    assert_int_equal(clattn__match_device("accelerator", mixed, N_MIXED), 4);
    assert_int_equal(clattn__match_device("gpu", cpu_only, 1), -1);
}

static void test_indices(void **s)
{
    (void)s;
    assert_int_equal(clattn__match_device("0:0", mixed, N_MIXED), 0);
    assert_int_equal(clattn__match_device("1:1", mixed, N_MIXED), 2);
    assert_int_equal(clattn__match_device("2:0", mixed, N_MIXED), 3);
    assert_int_equal(clattn__match_device("2:1", mixed, N_MIXED), -1);
    assert_int_equal(clattn__match_device("9:0", mixed, N_MIXED), -1);
}

/* Indices past INT_MAX match nothing: 4294967296 wrapped to 0 and selected 0:0. */
static void test_index_overflow(void **s)
{
    (void)s;
    assert_int_equal(clattn__match_device("4294967296:0", mixed, N_MIXED), -1);
    assert_int_equal(clattn__match_device("4294967297:0", mixed, N_MIXED), -1);
    assert_int_equal(clattn__match_device("1:4294967297", mixed, N_MIXED), -1);
    assert_int_equal(clattn__match_device("2147483648:0", mixed, N_MIXED), -1);
    assert_int_equal(clattn__match_device("18446744073709551616:0", mixed, N_MIXED), -1);
    assert_int_equal(clattn__match_device("0:99999999999999999999999999", mixed, N_MIXED), -1);
    assert_int_equal(clattn__match_device("000:0000", mixed, N_MIXED), 0); /* zeros are fine */
    assert_int_equal(clattn__match_device("01:01", mixed, N_MIXED), 2);
}

static void test_substrings(void **s)
{
    (void)s;
    assert_int_equal(clattn__match_device("nvidia", mixed, N_MIXED), 1);
    assert_int_equal(clattn__match_device("H100", mixed, N_MIXED), 2);
    assert_int_equal(clattn__match_device("pocl", mixed, N_MIXED), 0); /* platform vendor */
    assert_int_equal(clattn__match_device("portable", mixed, N_MIXED), 0);
    assert_int_equal(clattn__match_device("GFX1100", mixed, N_MIXED), 3);
    assert_int_equal(clattn__match_device("advanced micro", mixed, N_MIXED), 3);
    assert_int_equal(clattn__match_device("fpga", mixed, N_MIXED), 4);
    assert_int_equal(clattn__match_device("nosuchdevice", mixed, N_MIXED), -1);
    /* a bare number is no index and no name ("100" is in "H100", "5" in "avx512") */
    assert_int_equal(clattn__match_device("100", mixed, N_MIXED), -1);
    assert_int_equal(clattn__match_device("0", mixed, N_MIXED), -1);
    assert_int_equal(clattn__match_device("H1", mixed, N_MIXED), 2);
    /* not P:D forms fall back to substrings */
    assert_int_equal(clattn__match_device("1:", mixed, N_MIXED), -1);
    assert_int_equal(clattn__match_device(":0", mixed, N_MIXED), -1);
}

/* Several devices match: an exact name first, then platform name, platform vendor, device name,
 * device vendor, whatever the enumeration order (PoCL's CPU device reports vendor GenuineIntel). */
static const clattn_device_desc intel_host[] = {
    {0, 0, CL_DEVICE_TYPE_CPU, "Portable Computing Language", "The pocl project", "pthread-icelake-server-Intel(R) Xeon(R)", "GenuineIntel"},
    {1, 0, CL_DEVICE_TYPE_CPU, "rusticl", "Mesa/X.org", "llvmpipe (LLVM 15.0.6, 256 bits)", "Mesa/X.org"},
    {2, 0, CL_DEVICE_TYPE_CPU, "Intel(R) OpenCL", "Intel(R) Corporation", "Intel(R) Xeon(R) Platinum 8375C CPU", "Intel(R) Corporation"},
    {3, 0, CL_DEVICE_TYPE_CPU, "Xeon", "Acme", "pocl", "Acme"},
};

static void test_tiers(void **s)
{
    (void)s;
    assert_int_equal(clattn__match_device("intel", intel_host, 4), 2);    /* platform name */
    assert_int_equal(clattn__match_device("Intel(R)", intel_host, 4), 2); /* not PoCL's device */
    assert_int_equal(clattn__match_device("pocl", intel_host, 4), 3);     /* exact device name */
    assert_int_equal(clattn__match_device("portable", intel_host, 4), 0);
    assert_int_equal(clattn__match_device("mesa", intel_host, 4), 1);     /* platform vendor */
    assert_int_equal(clattn__match_device("llvmpipe", intel_host, 4), 1); /* device name */
    assert_int_equal(clattn__match_device("xeon", intel_host, 4), 3);     /* exact platform name */
    assert_int_equal(clattn__match_device("xeon(r)", intel_host, 4), 0);  /* device names, in order */
    assert_int_equal(clattn__match_device("genuine", intel_host, 4), 0);  /* device vendor */
    assert_int_equal(clattn__match_device("acme", intel_host, 4), 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pocl_gpu_shapes_abort),
        cmocka_unit_test(test_default_prefers_gpu), cmocka_unit_test(test_types),
        cmocka_unit_test(test_indices), cmocka_unit_test(test_index_overflow),
        cmocka_unit_test(test_substrings),  cmocka_unit_test(test_tiers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
