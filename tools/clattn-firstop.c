/* clattn-firstop: how long the first ops of a new process take, for the program cache figures.
 *
 * usage: clattn-firstop [CACHE_DIR]   (a CACHE_DIR starting with '-' is written ./-dir)
 * Creates a context (with the disk cache in CACHE_DIR when given), then runs a matmul, a masked
 * softmax and a dot-product attention once each, finishing after each, destroys the context (when
 * a cold run writes the cache) and prints the wall time of every step in ms.
 * tools/cache-coldwarm.sh runs it cold and warm in fresh processes. */
#include <clattn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int ok(clattn_context *c, clattn_status st, const char *what)
{
    if (st != CLATTN_SUCCESS)
        fprintf(stderr, "clattn-firstop: %s: %s\n", what, clattn_last_error(c));
    return st == CLATTN_SUCCESS;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: clattn-firstop [CACHE_DIR]\n"
               "Times a new process's context and first matmul, masked softmax and dot-product\n"
               "attention, with the program cache in CACHE_DIR (default: no disk cache).\n");
}

/* The cache directory, or NULL; exits on anything else, so that a mistyped option is not taken
 * for a directory and created. */
static const char *parse_args(int argc, char **argv)
{
    if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        usage(stdout);
        exit(0);
    }
    if (argc > 1 && argv[1][0] == '-') {
        fprintf(stderr, "clattn-firstop: unknown option %s\n", argv[1]);
        usage(stderr);
        exit(2);
    }
    if (argc > 2) {
        fprintf(stderr, "clattn-firstop: unexpected argument %s\n", argv[2]);
        usage(stderr);
        exit(2);
    }
    return argc > 1 ? argv[1] : NULL;
}

int main(int argc, char **argv)
{
    enum { B = 2, T = 64, D = 64 };
    static float x[B * T * D];
    clattn_context *c = NULL;
    clattn_params p = {0};
    clattn_tensor q = {0}, k = {0}, v = {0}, s = {0}, o = {0};
    size_t d3[3] = {B, T, D}, st3[3] = {B, T, T};
    int good = 0;
    p.cache_dir = parse_args(argc, argv);
    for (int i = 0; i < B * T * D; i++)
        x[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
    double t0 = now_ms(), t5;
    if (!ok(NULL, clattn_context_create(&c, &p), "context"))
        return 1;
    double t1 = now_ms();
    if (!ok(c, clattn_tensor_create(c, CLATTN_FLOAT32, 3, d3, x, &q), "tensor") ||
        !ok(c, clattn_tensor_create(c, CLATTN_FLOAT32, 3, d3, x, &k), "tensor") ||
        !ok(c, clattn_tensor_create(c, CLATTN_FLOAT32, 3, d3, x, &v), "tensor") ||
        !ok(c, clattn_tensor_create(c, CLATTN_FLOAT32, 3, st3, NULL, &s), "tensor") ||
        !ok(c, clattn_tensor_create(c, CLATTN_FLOAT32, 3, d3, NULL, &o), "tensor"))
        goto done;
    double t2 = now_ms();
    if (!ok(c, clattn_matmul(c, &q, 0, &k, 1, 1.0f, 0.0f, &s), "matmul") ||
        !ok(c, clattn_finish(c), "finish"))
        goto done;
    double t3 = now_ms();
    if (!ok(c, clattn_masked_softmax(c, &s, NULL, &s), "masked_softmax") ||
        !ok(c, clattn_finish(c), "finish"))
        goto done;
    double t4 = now_ms();
    if (!ok(c, clattn_dot_product_attention(c, &q, &k, &v, NULL, &o, NULL), "attention") ||
        !ok(c, clattn_finish(c), "finish"))
        goto done;
    t5 = now_ms();
    printf("context %.1f ms, first matmul %.1f ms, first masked_softmax %.1f ms, first "
           "dot_product_attention %.1f ms, ",
           t1 - t0, t3 - t2, t4 - t3, t5 - t4);
    good = 1;
done:
    clattn_tensor_release(&q);
    clattn_tensor_release(&k);
    clattn_tensor_release(&v);
    clattn_tensor_release(&s);
    clattn_tensor_release(&o);
    t5 = now_ms();
    clattn_context_destroy(&c); /* writes the cache files of a cold run */
    if (good)
        printf("destroy %.1f ms (cache %s)\n", now_ms() - t5, p.cache_dir ? p.cache_dir : "off");
    return good ? 0 : 1;
}
