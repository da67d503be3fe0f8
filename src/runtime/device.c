/* CLATTN_DEVICE parsing, device enumeration and selection. */
#include "internal.h"
#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int ci_contains(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; hay && *hay; hay++) {
        size_t i = 0;
        while (i < n && hay[i] && tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i]))
            i++;
        if (i == n)
            return 1;
    }
    return 0;
}

static int ci_equal(const char *a, const char *b)
{
    for (; *a && *b; a++, b++)
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b))
            return 0;
    return *a == *b;
}

static int first_of_type(const clattn_device_desc *d, int n, cl_device_type type)
{
    for (int i = 0; i < n; i++)
        if (d[i].type & type)
            return i;
    return -1;
}

/* A decimal index at s; returns the end, or NULL when s has no digit. An index past INT_MAX is
 * -1, which no device has (wrapping it would select another device). */
static const char *parse_index(const char *s, int *v)
{
    long long x = 0;
    if (!isdigit((unsigned char)*s))
        return NULL;
    for (; isdigit((unsigned char)*s); s++)
        if (x <= INT_MAX)
            x = x * 10 + (*s - '0');
    *v = x <= INT_MAX ? (int)x : -1;
    return s;
}

/* "P:D" with decimal indices; returns 1 and fills p, dev when spec has that form. */
static int parse_index_pair(const char *spec, int *p, int *dev)
{
    const char *s = parse_index(spec, p);
    if (!s || *s != ':' || !(s = parse_index(s + 1, dev)))
        return 0;
    return *s == '\0';
}

static int all_digits(const char *s)
{
    if (!s || !*s)
        return 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return 0;
    return 1;
}

/* Names are matched in tiers, the first device in enumeration order winning within a tier: an
 * exact platform or device name, then a substring of the platform name, of the platform vendor,
 * of the device name, of the device vendor. So "intel" picks Intel's own platform before PoCL,
 * whose CPU device's vendor is "GenuineIntel" on an Intel host. */
static int match_name(const char *spec, const clattn_device_desc *d, int n)
{
    for (int i = 0; i < n; i++)
        if (ci_equal(d[i].platform_name, spec) || ci_equal(d[i].device_name, spec))
            return i;
    for (int tier = 0; tier < 4; tier++)
        for (int i = 0; i < n; i++) {
            const char *field[4] = {d[i].platform_name, d[i].platform_vendor, d[i].device_name,
                                    d[i].vendor};
            if (ci_contains(field[tier], spec))
                return i;
        }
    return -1;
}

int clattn__match_device(const char *spec, const clattn_device_desc *d, int n)
{
    int p, dev, i;
    if (!spec || !*spec) {
        if ((i = first_of_type(d, n, CL_DEVICE_TYPE_GPU)) >= 0)
            return i;
        if ((i = first_of_type(d, n, CL_DEVICE_TYPE_ACCELERATOR)) >= 0)
            return i;
        if ((i = first_of_type(d, n, CL_DEVICE_TYPE_CPU)) >= 0)
            return i;
        return n > 0 ? 0 : -1;
    }
    if (ci_equal(spec, "gpu"))
        return first_of_type(d, n, CL_DEVICE_TYPE_GPU);
    if (ci_equal(spec, "cpu"))
        return first_of_type(d, n, CL_DEVICE_TYPE_CPU);
    if (ci_equal(spec, "accelerator"))
        return first_of_type(d, n, CL_DEVICE_TYPE_ACCELERATOR);
    if (parse_index_pair(spec, &p, &dev)) {
        for (i = 0; i < n; i++)
            if (d[i].platform_index == p && d[i].device_index == dev)
                return i;
        return -1;
    }
    if (all_digits(spec)) /* not an index, and no name either: "5" is in "avx512" */
        return -1;
    return match_name(spec, d, n);
}

/* ---- enumeration ---- */

#define MAX_DEVICES 64
typedef struct {
    clattn_device_desc desc[MAX_DEVICES];
    cl_platform_id platform[MAX_DEVICES];
    cl_device_id id[MAX_DEVICES];
    char pname[MAX_DEVICES][128], pvendor[MAX_DEVICES][128], dname[MAX_DEVICES][128], vendor[MAX_DEVICES][128];
    int n;
} device_list;

static void enumerate(device_list *L)
{
    cl_platform_id plats[16];
    cl_uint np = 0;
    L->n = 0;
    if (clGetPlatformIDs(16, plats, &np) != CL_SUCCESS)
        return;
    for (cl_uint p = 0; p < np && p < 16; p++) {
        cl_device_id devs[MAX_DEVICES];
        cl_uint nd = 0;
        if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, MAX_DEVICES, devs, &nd) != CL_SUCCESS)
            continue;
        for (cl_uint k = 0; k < nd && L->n < MAX_DEVICES; k++) {
            int i = L->n++;
            L->platform[i] = plats[p];
            L->id[i] = devs[k];
            L->pname[i][0] = L->dname[i][0] = L->vendor[i][0] = '\0';
            clGetPlatformInfo(plats[p], CL_PLATFORM_NAME, 128, L->pname[i], NULL);
            L->pvendor[i][0] = '\0';
            clGetPlatformInfo(plats[p], CL_PLATFORM_VENDOR, 128, L->pvendor[i], NULL);
            L->pvendor[i][127] = '\0';
            clGetDeviceInfo(devs[k], CL_DEVICE_NAME, 128, L->dname[i], NULL);
            clGetDeviceInfo(devs[k], CL_DEVICE_VENDOR, 128, L->vendor[i], NULL);
            L->pname[i][127] = L->dname[i][127] = L->vendor[i][127] = '\0';
            L->desc[i].type = 0;
            clGetDeviceInfo(devs[k], CL_DEVICE_TYPE, sizeof(cl_device_type), &L->desc[i].type, NULL);
            L->desc[i].platform_index = (int)p;
            L->desc[i].device_index = (int)k;
            L->desc[i].platform_name = L->pname[i];
            L->desc[i].platform_vendor = L->pvendor[i];
            L->desc[i].device_name = L->dname[i];
            L->desc[i].vendor = L->vendor[i];
        }
    }
}

static const char *type_name(cl_device_type t)
{
    if (t & CL_DEVICE_TYPE_GPU)
        return "GPU";
    if (t & CL_DEVICE_TYPE_CPU)
        return "CPU";
    if (t & CL_DEVICE_TYPE_ACCELERATOR)
        return "accelerator";
    return "other";
}

static void format_list(const device_list *L, int selected, char *buf, size_t size)
{
    size_t used = 0;
    if (size)
        buf[0] = '\0';
    for (int i = 0; i < L->n && used < size; i++) {
        int w = snprintf(buf + used, size - used, "%c %d:%d %s [%s] (%s, %s)\n",
                         i == selected ? '*' : ' ', L->desc[i].platform_index,
                         L->desc[i].device_index, L->dname[i], L->pname[i], L->vendor[i],
                         type_name(L->desc[i].type));
        if (w < 0)
            break;
        used += (size_t)w;
    }
}

/* spec, else CLATTN_DEVICE's value; *name: where it came from (arg, or the variable) */
static const char *effective_spec(const char *spec, const char *arg, const char **name)
{
    *name = spec ? arg : "CLATTN_DEVICE";
    return spec ? spec : getenv("CLATTN_DEVICE");
}

/* The failure for a spec (from name) that matches no device; listing: the devices' list, or
 * "" where the caller gets it elsewhere. */
static clattn_status no_match(const char *name, const char *spec, const char *listing)
{
    const char *why = all_digits(spec) ? "is a bare number, which selects no device"
                                       : "matches no device";
    return clattn__fail(NULL, CLATTN_ERROR_DEVICE_NOT_FOUND,
                        "%s '%s' %s; select with P:D (platform:device indices), cpu, gpu, "
                        "accelerator or a name substring%s%s", name, spec ? spec : "", why,
                        *listing ? ". Available devices:\n" : "", listing);
}

/* Used by context.c: resolves spec to a platform and device, or fails with the device list. */
clattn_status clattn__select_device(const char *spec, cl_platform_id *platform, cl_device_id *device)
{
    device_list *l = malloc(sizeof *l);
    char listing[4096];
    clattn_status st = CLATTN_SUCCESS;
    const char *name;
    if (!l)
        return clattn__fail(NULL, CLATTN_ERROR_OUT_OF_MEMORY, "out of host memory");
    spec = effective_spec(spec, "params.device", &name);
    enumerate(l);
    if (l->n == 0) {
        st = clattn__fail(NULL, CLATTN_ERROR_NO_PLATFORM,
                          "no OpenCL device found: no platform is installed or none has a device "
                          "(is an ICD such as pocl-opencl-icd installed? OCL_ICD_VENDORS=%s)",
                          getenv("OCL_ICD_VENDORS") ? getenv("OCL_ICD_VENDORS") : "unset");
        goto done;
    }
    int i = clattn__match_device(spec, l->desc, l->n);
    if (i < 0) {
        format_list(l, -1, listing, sizeof listing);
        st = no_match(name, spec, listing);
        goto done;
    }
    *platform = l->platform[i];
    *device = l->id[i];
done:
    free(l);
    return st;
}

clattn_status clattn_list_devices(const char *spec, char *buf, size_t size)
{
    device_list *l = malloc(sizeof *l);
    clattn_status st = CLATTN_SUCCESS;
    const char *name;
    if (!l)
        return clattn__fail(NULL, CLATTN_ERROR_OUT_OF_MEMORY, "out of host memory");
    spec = effective_spec(spec, "spec", &name);
    enumerate(l);
    int i = clattn__match_device(spec, l->desc, l->n);
    if (buf)
        format_list(l, i, buf, size);
    if (l->n == 0)
        st = clattn__fail(NULL, CLATTN_ERROR_NO_PLATFORM, "no OpenCL device found");
    else if (i < 0)
        st = no_match(name, spec, "");
    free(l);
    return st;
}
