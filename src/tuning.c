/* Per-device kernel variants and parameters: a const table plus the CLATTN_TUNE override.
 *
 * Override syntax (CLATTN_TUNE or clattn_params.tuning), comma-separated entries:
 *     op=variant[:NAME=value]...      e.g.  "matmul=gpu:TS=8,softmax=gpu:WG=64"
 * An entry replaces the table's choice for that op; parameters not named keep the variant's
 * defaults. Unknown ops, variants or parameter names are errors, never ignored. */
#include "internal.h"
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct {
    const char *op, *variant;
    const char *params; /* defaults, "NAME=value:NAME=value" */
} variant_def;

/* Every variant the library can build. Parameter names are the kernels' #define names. */
static const variant_def variants[] = {
    /* CPU shape: packed panels; each work-item owns a TN-wide column strip over RB row panels,
     * k-blocked by KC, with a TM x TN register tile of VN-wide vectors; PK k per packing item.
     * The defaults fit AVX2's 16 vector registers (12 accumulators); AVX-512 devices get a rule. */
    {"matmul", "cpu", "TM=6:TN=16:VN=8:KC=4096:RB=32:PK=16"},
    /* GPU shape: TSM x TSN work-group tiles staged through local memory TSK deep, a WPTM x WPTN
     * register sub-tile per work-item (256 work-items, 16.5 KiB of local memory). */
    {"matmul", "gpu", "TSM=128:TSN=128:TSK=16:WPTM=8:WPTN=8"},
    /* CPU shape: one work-item per row, float8 vectors, three passes over the row (fits in L1). */
    {"softmax", "cpu", "VW=8"},
    /* GPU shape: one work-group per row, tree reductions in local memory. */
    {"softmax", "gpu", "WG=128"},
    /* CPU shape: fused, QR query rows x KB keys in vector registers, K and V packed per block,
     * QG row groups per work-item sharing each block in L1, WG items of one batch per work-group. */
    {"attention", "cpu", "QR=5:KB=64:WG=8:QG=2"},
    /* GPU shape: fused, a work-group of BQ rows shares BK-key tiles of K and V in local memory. */
    {"attention", "gpu", "BQ=64:BK=16"},
    /* GEMM, masked softmax, GEMM: the path taken whenever the weights are returned. */
    {"attention", "unfused", ""},
};

typedef struct {
    cl_device_type type; /* 0 = any */
    const char *vendor;  /* case-insensitive substring, NULL = any */
    const char *name;    /* case-insensitive substring, NULL = any */
    const char *op, *variant, *params;
} rule;

/* PoCL names a CPU device after LLVM's name for the CPU ("pthread-skylake-avx512-..."): these have
 * 32 512-bit registers, room for a 6 x 64 tile (24 accumulators), 4-9% faster than 12 x 32 there. */
#define AVX512_MATMUL "TM=6:TN=64:VN=16"

/* First matching rule wins; the last rules are the catch-alls per op. */
static const rule rules[] = {
    {CL_DEVICE_TYPE_CPU, NULL, "avx512", "matmul", "cpu", AVX512_MATMUL},
    {CL_DEVICE_TYPE_CPU, NULL, "cascadelake", "matmul", "cpu", AVX512_MATMUL},
    {CL_DEVICE_TYPE_CPU, NULL, "cooperlake", "matmul", "cpu", AVX512_MATMUL},
    {CL_DEVICE_TYPE_CPU, NULL, "icelake", "matmul", "cpu", AVX512_MATMUL},
    {CL_DEVICE_TYPE_CPU, NULL, "tigerlake", "matmul", "cpu", AVX512_MATMUL},
    {CL_DEVICE_TYPE_CPU, NULL, "rapids", "matmul", "cpu", AVX512_MATMUL}, /* sapphire, emerald, granite */
    {CL_DEVICE_TYPE_CPU, NULL, "znver4", "matmul", "cpu", AVX512_MATMUL},
    {CL_DEVICE_TYPE_CPU, NULL, "znver5", "matmul", "cpu", AVX512_MATMUL},
    {CL_DEVICE_TYPE_CPU, NULL, NULL, "matmul", "cpu", ""},
    {CL_DEVICE_TYPE_CPU, NULL, NULL, "softmax", "cpu", ""},
    {0, NULL, NULL, "matmul", "gpu", ""},
    {0, NULL, NULL, "softmax", "gpu", ""},
    {CL_DEVICE_TYPE_CPU, NULL, NULL, "attention", "cpu", ""},
    {0, NULL, NULL, "attention", "gpu", ""},
};

static int ci_contains(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; *hay; hay++)
        if (strncasecmp(hay, needle, n) == 0)
            return 1;
    return n == 0;
}

static const variant_def *find_variant(const char *op, const char *variant, size_t vlen)
{
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++)
        if (strcmp(variants[i].op, op) == 0 && strlen(variants[i].variant) == vlen &&
            strncmp(variants[i].variant, variant, vlen) == 0)
            return &variants[i];
    return NULL;
}

static void list_variants(const char *op, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof variants / sizeof variants[0] && used < size; i++)
        if (strcmp(variants[i].op, op) == 0)
            used += (size_t)snprintf(buf + used, size - used, "%s%s(%s)", used ? ", " : "",
                                     variants[i].variant, variants[i].params);
}

/* Applies "NAME=value:NAME=value" (up to len chars) to t; known names only unless adding. */
static clattn_status apply_params(clattn_context *ctx, clattn_tuning *t, const char *s, size_t len,
                                  int adding, const char *op)
{
    clattn_status st = CLATTN_SUCCESS;
    const char *end = s + len;
    while (s < end) {
        const char *colon = memchr(s, ':', (size_t)(end - s));
        const char *stop = colon ? colon : end;
        const char *eq = memchr(s, '=', (size_t)(stop - s));
        char name[24];
        CHECK(ctx, eq && eq > s && (size_t)(eq - s) < sizeof name, CLATTN_ERROR_INVALID_ARGUMENT,
              "tuning: bad parameter '%.*s' for %s (expected NAME=value)", (int)(stop - s), s, op);
        memcpy(name, s, (size_t)(eq - s));
        name[eq - s] = '\0';
        char *num_end;
        long v = strtol(eq + 1, &num_end, 10);
        CHECK(ctx, num_end == stop && eq + 1 < stop && v > 0 && v <= 4096,
              CLATTN_ERROR_INVALID_ARGUMENT, "tuning: %s.%s needs a positive integer <= 4096", op,
              name);
        int i = 0;
        while (i < t->nparams && strcmp(t->names[i], name) != 0)
            i++;
        CHECK(ctx, i < t->nparams || adding, CLATTN_ERROR_INVALID_ARGUMENT,
              "tuning: %s variant %s has no parameter %s", op, t->variant, name);
        CHECK(ctx, i < CLATTN_MAX_TUNE_PARAMS, CLATTN_ERROR_INVALID_ARGUMENT,
              "tuning: too many parameters");
        if (i == t->nparams)
            snprintf(t->names[t->nparams++], sizeof t->names[0], "%s", name);
        t->values[i] = (int)v;
        s = colon ? colon + 1 : end;
    }
fail:
    return st;
}

static clattn_status start_variant(clattn_context *ctx, clattn_tuning *t, const char *op,
                                   const char *variant, size_t vlen)
{
    char known[256];
    const variant_def *d = find_variant(op, variant, vlen);
    if (!d) {
        list_variants(op, known, sizeof known);
        return clattn__fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                            "tuning: op %s has no variant '%.*s' (known: %s)", op, (int)vlen,
                            variant, known[0] ? known : "none: unknown op");
    }
    memset(t, 0, sizeof *t);
    snprintf(t->variant, sizeof t->variant, "%s", d->variant);
    return apply_params(ctx, t, d->params, strlen(d->params), 1, op);
}

/* Finds the override entry for op in the comma-separated list; returns its text and length. */
static const char *find_override(const char *list, const char *op, size_t *len)
{
    size_t oplen = strlen(op);
    for (const char *s = list; s && *s;) {
        const char *comma = strchr(s, ',');
        size_t n = comma ? (size_t)(comma - s) : strlen(s);
        if (n > oplen && strncmp(s, op, oplen) == 0 && s[oplen] == '=') {
            *len = n - oplen - 1;
            return s + oplen + 1;
        }
        s = comma ? comma + 1 : s + n;
    }
    return NULL;
}

clattn_status clattn__tune(clattn_context *ctx, const char *op, clattn_tuning *t)
{
    clattn_status st = CLATTN_SUCCESS;
    size_t len = 0;
    const char *o = find_override(ctx->tuning, op, &len);
    if (o) {
        const char *colon = memchr(o, ':', len);
        size_t vlen = colon ? (size_t)(colon - o) : len;
        CHECK_ST(start_variant(ctx, t, op, o, vlen));
        if (colon)
            CHECK_ST(apply_params(ctx, t, colon + 1, len - vlen - 1, 0, op));
    } else {
        size_t i = 0, n = sizeof rules / sizeof rules[0];
        for (; i < n; i++) {
            const rule *r = &rules[i];
            if (strcmp(r->op, op) == 0 && (!r->type || (r->type & ctx->type)) &&
                (!r->vendor || ci_contains(ctx->vendor, r->vendor)) &&
                (!r->name || ci_contains(ctx->name, r->name)))
                break;
        }
        CHECK(ctx, i < n, CLATTN_ERROR_INVALID_ARGUMENT, "tuning: no rule for op %s", op);
        CHECK_ST(start_variant(ctx, t, op, rules[i].variant, strlen(rules[i].variant)));
        CHECK_ST(apply_params(ctx, t, rules[i].params, strlen(rules[i].params), 0, op));
    }
    size_t used = 0;
    t->defines[0] = '\0';
    for (int i = 0; i < t->nparams && used < sizeof t->defines; i++)
        used += (size_t)snprintf(t->defines + used, sizeof t->defines - used, "-D %s=%d ",
                                 t->names[i], t->values[i]);
fail:
    return st;
}

/* Checks that every entry of the override names a known op, variant and parameters. */
clattn_status clattn__check_tuning(clattn_context *ctx)
{
    clattn_status st = CLATTN_SUCCESS;
    clattn_tuning t;
    for (const char *s = ctx->tuning; *s;) {
        const char *comma = strchr(s, ',');
        size_t n = comma ? (size_t)(comma - s) : strlen(s);
        char op[32];
        const char *eq = memchr(s, '=', n);
        CHECK(ctx, eq && (size_t)(eq - s) < sizeof op, CLATTN_ERROR_INVALID_ARGUMENT,
              "tuning: entry '%.*s' is not op=variant[:NAME=value]", (int)n, s);
        memcpy(op, s, (size_t)(eq - s));
        op[eq - s] = '\0';
        CHECK_ST(clattn__tune(ctx, op, &t));
        s = comma ? comma + 1 : s + n;
    }
fail:
    return st;
}

int clattn__tune_int(const clattn_tuning *t, const char *name, int fallback)
{
    for (int i = 0; i < t->nparams; i++)
        if (strcmp(t->names[i], name) == 0)
            return t->values[i];
    return fallback;
}

/* ---- every variant the library can build, for the offline compile checks ---- */

static int add_listing(clattn_variant_info *out, int max, int n, const char *op,
                       const char *variant, const char *params)
{
    clattn_tuning t;
    char defines[sizeof t.defines];
    size_t used = 0;
    if (start_variant(NULL, &t, op, variant, strlen(variant)) != CLATTN_SUCCESS ||
        apply_params(NULL, &t, params, strlen(params), 0, op) != CLATTN_SUCCESS)
        return n; /* unreachable: the table's own defaults always parse */
    defines[0] = '\0';
    for (int i = 0; i < t.nparams && used < sizeof defines; i++)
        used += (size_t)snprintf(defines + used, sizeof defines - used, "-D %s=%d ", t.names[i],
                                 t.values[i]);
    for (int i = 0; i < n && i < max; i++)
        if (strcmp(out[i].op, op) == 0 && strcmp(out[i].defines, defines) == 0)
            return n;
    if (n < max) {
        out[n].op = op;
        out[n].variant = variant;
        snprintf(out[n].defines, sizeof out[n].defines, "%s", defines);
    }
    return n + 1;
}

int clattn__variant_list(clattn_variant_info *out, int max)
{
    int n = 0;
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++)
        n = add_listing(out, max, n, variants[i].op, variants[i].variant, "");
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
        n = add_listing(out, max, n, rules[i].op, rules[i].variant, rules[i].params);
    return n;
}
