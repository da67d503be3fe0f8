/* Shows, without clattn, the two Oclgrind 21.10 false positives that the Oclgrind test setup works
 * around. Run `oclgrind --uninitialized ./build/tests/oclgrind_shadow_repro`: each case is a kernel
 * that writes every element of a buffer and then reads it back, so a correct checker prints
 * nothing; 21.10 reports "Uninitialized value" for both cases.
 * 1. A buffer filled with clEnqueueFillBuffer: the shadow is resized to the 4-byte pattern.
 * 2. A buffer that reuses the id of a smaller, released one: the shadow keeps the old size. */
#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>
#include <stdio.h>

static const char *src =
    "__kernel void write_all(__global float *b) { b[get_global_id(0)] = 1.0f; }\n"
    "__kernel void read_all(__global const float *b, __global float *o)\n"
    "{ size_t i = get_global_id(0); o[i] = b[i] > 0.5f ? 1.0f : 0.0f; }\n";

enum { N = 64 };

static cl_context ctx;
static cl_command_queue queue;
static cl_kernel kw, kr;

static void write_then_read(cl_mem buf, cl_mem out)
{
    size_t n = N;
    clSetKernelArg(kw, 0, sizeof buf, &buf);
    clEnqueueNDRangeKernel(queue, kw, 1, NULL, &n, NULL, 0, NULL, NULL);
    clSetKernelArg(kr, 0, sizeof buf, &buf);
    clSetKernelArg(kr, 1, sizeof out, &out);
    clEnqueueNDRangeKernel(queue, kr, 1, NULL, &n, NULL, 0, NULL, NULL);
    clFinish(queue);
}

int main(void)
{
    cl_platform_id platform;
    cl_device_id device;
    cl_int err;
    float one = 1.0f;
    if (clGetPlatformIDs(1, &platform, NULL) != CL_SUCCESS ||
        clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &device, NULL) != CL_SUCCESS) {
        fprintf(stderr, "no OpenCL device\n");
        return 77;
    }
    ctx = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
    queue = clCreateCommandQueue(ctx, device, 0, &err);
    cl_program prog = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    clBuildProgram(prog, 1, &device, "", NULL, NULL);
    kw = clCreateKernel(prog, "write_all", &err);
    kr = clCreateKernel(prog, "read_all", &err);
    cl_mem out = clCreateBuffer(ctx, CL_MEM_READ_WRITE, N * 4, NULL, &err);

    printf("case 1: clEnqueueFillBuffer, then write and read every element\n");
    cl_mem filled = clCreateBuffer(ctx, CL_MEM_READ_WRITE, N * 4, NULL, &err);
    clEnqueueFillBuffer(queue, filled, &one, sizeof one, 0, N * 4, 0, NULL, NULL);
    write_then_read(filled, out);
    clReleaseMemObject(filled);

    printf("case 2: a buffer reusing the id of a smaller released one\n");
    cl_mem small = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, 4, &one, &err);
    clReleaseMemObject(small);
    cl_mem reused = clCreateBuffer(ctx, CL_MEM_READ_WRITE, N * 4, NULL, &err);
    write_then_read(reused, out);

    clReleaseMemObject(reused);
    clReleaseMemObject(out);
    clReleaseKernel(kw);
    clReleaseKernel(kr);
    clReleaseProgram(prog);
    clReleaseCommandQueue(queue);
    clReleaseContext(ctx);
    return 0;
}
