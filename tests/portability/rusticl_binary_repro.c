/* Shows, without clattn, that Mesa's rusticl (Mesa 22.3) aborts the whole process when
 * clCreateProgramWithBinary is handed bytes that are not one of its binaries (a Rust panic,
 * "unknown version", in core/program.rs), where the OpenCL specification asks for
 * CL_INVALID_BINARY. A program cache on disk meets such bytes after a driver update, so clattn
 * keeps its disk cache off on rusticl (Mesa caches compiled kernels itself); README, "OpenCL
 * implementations". A conforming device prints the error it returned and exits 0.
 * Run: OCL_ICD_VENDORS=<dir with rusticl.icd> RUSTICL_ENABLE=llvmpipe
 *      ./build/tests/rusticl_binary_repro */
#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>
#include <stdio.h>

int main(void)
{
    cl_platform_id platform;
    cl_device_id device;
    cl_int err = CL_SUCCESS, status = CL_SUCCESS;
    if (clGetPlatformIDs(1, &platform, NULL) != CL_SUCCESS ||
        clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &device, NULL) != CL_SUCCESS) {
        fprintf(stderr, "no OpenCL device\n");
        return 77;
    }
    cl_context ctx = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
    unsigned char junk[256];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (unsigned char)(i * 37 + 11);
    const unsigned char *bin = junk;
    size_t size = sizeof junk;
    printf("clCreateProgramWithBinary on 256 bytes that are no binary...\n");
    fflush(stdout);
    cl_program p = clCreateProgramWithBinary(ctx, 1, &device, &size, &bin, &status, &err);
    if (err == CL_SUCCESS)
        err = clBuildProgram(p, 1, &device, NULL, NULL, NULL);
    printf("returned %d (binary status %d): %s\n", err, status,
           err != CL_SUCCESS ? "refused, as it should be" : "accepted?");
    if (p)
        clReleaseProgram(p);
    clReleaseContext(ctx);
    return err != CL_SUCCESS ? 0 : 1;
}
