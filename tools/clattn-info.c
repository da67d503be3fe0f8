/* clattn-info: lists every OpenCL platform and device with its P:D index and marks the one that
 * CLATTN_DEVICE (or the default rule) selects. Exits 1 when the selection fails. */
#include <clattn.h>
#include <stdio.h>
#include <stdlib.h>

static void print_device(cl_device_id d, int p, int i, int selected)
{
    char name[256] = "", vendor[256] = "", cver[128] = "", driver[128] = "";
    cl_uint cus = 0;
    cl_ulong mem = 0, local = 0, alloc = 0;
    cl_device_type type = 0;
    size_t wg = 0;
    clGetDeviceInfo(d, CL_DEVICE_NAME, sizeof name, name, NULL);
    clGetDeviceInfo(d, CL_DEVICE_VENDOR, sizeof vendor, vendor, NULL);
    clGetDeviceInfo(d, CL_DEVICE_OPENCL_C_VERSION, sizeof cver, cver, NULL);
    clGetDeviceInfo(d, CL_DRIVER_VERSION, sizeof driver, driver, NULL);
    clGetDeviceInfo(d, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cus, &cus, NULL);
    clGetDeviceInfo(d, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof mem, &mem, NULL);
    clGetDeviceInfo(d, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof alloc, &alloc, NULL);
    clGetDeviceInfo(d, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local, &local, NULL);
    clGetDeviceInfo(d, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof wg, &wg, NULL);
    clGetDeviceInfo(d, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    printf("%c %d:%d  %s\n", selected ? '*' : ' ', p, i, name);
    printf("        vendor %s, type %s, %s, driver %s\n", vendor,
           (type & CL_DEVICE_TYPE_GPU) ? "GPU" : (type & CL_DEVICE_TYPE_CPU) ? "CPU" : "accelerator",
           cver, driver);
    printf("        %u compute units, %.1f GiB global memory (max alloc %.1f GiB), %.0f KiB local "
           "memory, max work-group %zu\n",
           cus, mem / 1073741824.0, alloc / 1073741824.0, local / 1024.0, wg);
}

int main(void)
{
    clattn_context *ctx = NULL;
    clattn_status st = clattn_context_create(&ctx, NULL);
    cl_device_id chosen = st == CLATTN_SUCCESS ? clattn_context_device(ctx) : NULL;
    cl_platform_id plats[16];
    cl_uint np = 0;
    const char *spec = getenv("CLATTN_DEVICE");
    printf("clattn %s; CLATTN_DEVICE=%s\n", clattn_version(), spec ? spec : "(unset: first GPU, "
                                                                            "else accelerator, else CPU)");
    if (clGetPlatformIDs(16, plats, &np) != CL_SUCCESS)
        np = 0;
    for (cl_uint p = 0; p < np && p < 16; p++) {
        char pname[256] = "", pver[256] = "";
        cl_device_id devs[64];
        cl_uint nd = 0;
        clGetPlatformInfo(plats[p], CL_PLATFORM_NAME, sizeof pname, pname, NULL);
        clGetPlatformInfo(plats[p], CL_PLATFORM_VERSION, sizeof pver, pver, NULL);
        printf("platform %u: %s (%s)\n", p, pname, pver);
        if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 64, devs, &nd) != CL_SUCCESS)
            nd = 0;
        for (cl_uint i = 0; i < nd && i < 64; i++)
            print_device(devs[i], (int)p, (int)i, devs[i] == chosen);
    }
    if (st != CLATTN_SUCCESS) {
        fprintf(stderr, "clattn-info: %s: %s\n", clattn_status_string(st), clattn_last_error(NULL));
        return 1;
    }
    printf("selected: %s\n", clattn_context_description(ctx));
    printf("tuning: %s\n", clattn_context_tune_note(ctx));
    clattn_context_destroy(&ctx);
    return 0;
}
