/* Shows, without clattn, that Mesa's llvmpipe (rusticl, Mesa 22.3) ends a work-item's loops after
 * 65535 iterations in all, silently: gallivm keeps one "loop limiter" per function, shared by every
 * loop in it and never reset (LP_MAX_TGSI_LOOP_ITERATIONS), so a kernel whose work-item runs more
 * back edges than that skips the rest and returns wrong results, no error. The kernel below
 * counts n iterations of one loop, then of a nested loop; a conforming device prints the counts
 * it was asked for and exits 0. On llvmpipe the counts stop near 65535 and it exits 1.
 * Run: OCL_ICD_VENDORS=<dir with rusticl.icd> RUSTICL_ENABLE=llvmpipe
 *      ./build/tests/llvmpipe_loop_limit_repro
 * clattn's answer (README, "OpenCL implementations"): the tuning table gives llvmpipe the
 * GPU-shaped kernels, whose work-items loop far less, and refuses the CPU-shaped ones there. */
#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>
#include <stdio.h>

static const char *src =
    "__kernel void count(int n, __global int *o)\n"
    "{\n"
    "    int c = 0;\n"
    "    for (int i = 0; i < n; i++)\n"
    "        c += o[2] + 1; /* o[2] is 0; read so that the loop is not folded */\n"
    "    o[0] = c;\n"
    "    c = 0;\n"
    "    for (int i = 0; i < n / 100; i++)\n"
    "        for (int j = 0; j < 100; j++)\n"
    "            c += o[2] + 1;\n"
    "    o[1] = c;\n"
    "}\n";

int main(void)
{
    cl_platform_id platform;
    cl_device_id device;
    cl_int err;
    if (clGetPlatformIDs(1, &platform, NULL) != CL_SUCCESS ||
        clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &device, NULL) != CL_SUCCESS) {
        fprintf(stderr, "no OpenCL device\n");
        return 77;
    }
    char name[256] = "";
    clGetDeviceInfo(device, CL_DEVICE_NAME, sizeof name, name, NULL);
    cl_context ctx = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
    cl_command_queue queue = clCreateCommandQueue(ctx, device, 0, &err);
    cl_program prog = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    if (clBuildProgram(prog, 1, &device, "", NULL, NULL) != CL_SUCCESS) {
        fprintf(stderr, "build failed\n");
        return 2;
    }
    cl_kernel k = clCreateKernel(prog, "count", &err);
    int bad = 0;
    const cl_int ns[] = {1000, 65000, 70000, 1000000};
    for (int t = 0; t < 4; t++) {
        cl_int n = ns[t], host[3] = {-1, -1, 0};
        cl_mem o = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof host, host,
                                  &err);
        size_t one = 1;
        clSetKernelArg(k, 0, sizeof n, &n);
        clSetKernelArg(k, 1, sizeof o, &o);
        clEnqueueNDRangeKernel(queue, k, 1, NULL, &one, &one, 0, NULL, NULL);
        clEnqueueReadBuffer(queue, o, CL_TRUE, 0, sizeof host, host, 0, NULL, NULL);
        printf("%s: n = %d: one loop counted %d, nested loops %d\n", name, n, host[0], host[1]);
        bad |= host[0] != n || host[1] != n / 100 * 100;
        clReleaseMemObject(o);
    }
    clReleaseKernel(k);
    clReleaseProgram(prog);
    clReleaseCommandQueue(queue);
    clReleaseContext(ctx);
    return bad;
}
