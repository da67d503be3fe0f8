/* Preloaded by oclgrind.sh under `meson test --setup oclgrind`: keeps every buffer alive until the
 * process exits, so Oclgrind never hands a freed buffer id to a new buffer.
 *
 * Why: Oclgrind 21.10's --uninitialized plugin sizes a buffer id's shadow memory when the id is
 * first allocated or written from the host, and a buffer created without host data that reuses
 * the id keeps the old shadow. A larger buffer then reads as uninitialized past the old size even
 * after a kernel wrote it (oclgrind_shadow_repro.c shows it without clattn). Fresh ids get a
 * correct shadow, so keeping buffers costs memory in the small test sizes and hides nothing. */
#define _GNU_SOURCE
#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>
#include <dlfcn.h>
#include <stddef.h>

CL_API_ENTRY cl_int CL_API_CALL clReleaseMemObject(cl_mem mem)
{
    static cl_int(CL_API_CALL * real)(cl_mem);
    cl_uint refs = 0;
    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "clReleaseMemObject");
    if (!real)
        return CL_INVALID_MEM_OBJECT;
    if (mem && clGetMemObjectInfo(mem, CL_MEM_REFERENCE_COUNT, sizeof refs, &refs, NULL) ==
                   CL_SUCCESS && refs == 1)
        return CL_SUCCESS; /* the last reference: keep the id out of Oclgrind's free list */
    return real(mem);
}
