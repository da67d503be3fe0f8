/* softmax-bound: the masked softmax's CPU row kernel (kernels/softmax.cl, masked_softmax_rows with
 * prefix lengths and a 16-bit x and y) written by hand in C with AVX-512 intrinsics, on pinned
 * threads that spin between calls, against memcpy of the same bytes on one thread (what PoCL's
 * clEnqueueCopyBuffer does), timed in alternation. It measures what the kernel's three passes can
 * reach on this CPU without PoCL: the bound behind issue 12's "16-bit softmax >= 0.9x a device
 * copy". Not a part of the library.
 *
 * The same algorithm and arithmetic as the kernel's ALIGNV VW=16 path: four running maxima, the
 * exponentials by common.cl's CLATTN_EXP2_NEG (degree-6 polynomial, exponent built in the bits)
 * kept in a private float buffer, one reciprocal, blocked outputs as one constant, the next row's
 * live scores prefetched. Rows (64, R / 64, K) of scores uniform in [-8, 8] with one random length
 * in [0, K] per row, as clattn-bench's softmax section; every output checked against a double
 * reference first.
 *
 * Usage: softmax-bound [float16|bfloat16] [ROWS K] [THREADS] [REPS]  (float16 4096 1024 2 61).
 * Exit status 77 (skipped) on a CPU without AVX-512 F and BW. */
#define _GNU_SOURCE /* pthread_setaffinity_np: each thread on its own CPU, as POCL_AFFINITY=1 */
#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define AVX512 __attribute__((target("avx512f,avx512bw,f16c,fma")))
#define FILL (-1e6f) /* CLATTN_DEFAULT_FILL */
#define MAXK 4096    /* the kernel's EB */

typedef struct {
    const uint16_t *x;
    uint16_t *y;
    const int *lens;
    int rows, K, bf16, t, nt;
} job;

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

AVX512 static __m512 load16(const uint16_t *p, int bf16)
{
    __m256i h = _mm256_load_si256((const __m256i *)p);
    if (bf16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

/* Weights in [0, 1]: round to nearest even without a NaN test (dtype.cl's _nonneg form). */
AVX512 static void store16(uint16_t *p, __m512 v, int bf16)
{
    if (bf16) {
        __m512i u = _mm512_castps_si512(v);
        __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
        u = _mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff)));
        _mm256_store_si256((__m256i *)p, _mm512_cvtepi32_epi16(_mm512_srli_epi32(u, 16)));
    } else {
        _mm256_store_si256((__m256i *)p, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    }
}

/* common.cl's CLATTN_EXP2_NEG of x * log2(e), x <= 0 */
AVX512 static __m512 exp_neg(__m512 x)
{
    const __m512 magic = _mm512_set1_ps(12582912.0f + 127.0f);
    x = _mm512_mul_ps(x, _mm512_set1_ps(1.44269504f));
    x = _mm512_max_ps(x, _mm512_set1_ps(-127.0f));
    __m512 t = _mm512_add_ps(x, magic);
    __m512 r = _mm512_sub_ps(x, _mm512_sub_ps(t, magic));
    __m512 two_n = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_castps_si512(t), 23));
    __m512 p = _mm512_fmadd_ps(r, _mm512_set1_ps(1.534581243e-4f), _mm512_set1_ps(1.339993090e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(9.618489072e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.550328642e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(2.402264625e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(6.931471825e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_mul_ps(p, two_n);
}

/* bf: a constant in each caller, so that each dtype gets its own loops */
AVX512 static inline __attribute__((always_inline)) void row(const job *j, int r, int bf)
{
    float eb[MAXK] __attribute__((aligned(64)));
    const int K = j->K, limit = j->lens[r], lv = limit & ~15;
    const int next = r + 1 < j->rows ? j->lens[r + 1] : 0;
    const uint16_t *x = j->x + (size_t)r * K;
    uint16_t *y = j->y + (size_t)r * K;
    for (int c = 0; c < next; c += 32)
        _mm_prefetch((const char *)(x + K + c), _MM_HINT_T0);
    __mmask16 tail = (__mmask16)((1u << (limit - lv)) - 1);
    __m512 m0 = _mm512_set1_ps(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
    int k;
    for (k = 0; k + 64 <= lv; k += 64) {
        m0 = _mm512_max_ps(m0, load16(x + k, bf));
        m1 = _mm512_max_ps(m1, load16(x + k + 16, bf));
        m2 = _mm512_max_ps(m2, load16(x + k + 32, bf));
        m3 = _mm512_max_ps(m3, load16(x + k + 48, bf));
    }
    for (; k < lv; k += 16)
        m0 = _mm512_max_ps(m0, load16(x + k, bf));
    if (tail)
        m1 = _mm512_max_ps(m1, _mm512_mask_blend_ps(tail, m1, load16(x + lv, bf)));
    float m = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3)));
    m = limit < K && FILL > m ? FILL : m;
    m = m == -INFINITY ? 0.0f : m;
    __m512 mv = _mm512_set1_ps(m), sv = _mm512_setzero_ps();
    for (k = 0; k < lv; k += 16) {
        __m512 e = exp_neg(_mm512_sub_ps(load16(x + k, bf), mv));
        sv = _mm512_add_ps(sv, e);
        _mm512_store_ps(eb + k, e);
    }
    if (tail) {
        __m512 e = _mm512_maskz_mov_ps(tail, exp_neg(_mm512_sub_ps(load16(x + lv, bf), mv)));
        sv = _mm512_add_ps(sv, e);
        _mm512_store_ps(eb + lv, e);
    }
    float e_fill = limit < K ? _mm512_cvtss_f32(exp_neg(_mm512_set1_ps(FILL - m))) : 0.0f;
    float s = _mm512_reduce_add_ps(sv) + (float)(K - limit) * e_fill, inv = 1.0f / s;
    __m512 iv = _mm512_set1_ps(inv);
    for (k = 0; k < lv; k += 16)
        store16(y + k, _mm512_mul_ps(_mm512_load_ps(eb + k), iv), bf);
    if (tail) {
        __m512 w = _mm512_mask_blend_ps(tail, _mm512_set1_ps(e_fill * inv),
                                        _mm512_mul_ps(_mm512_load_ps(eb + lv), iv));
        store16(y + lv, w, bf);
        k = lv + 16;
    }
    if (k < K) {
        store16(y + k, _mm512_set1_ps(e_fill * inv), bf);
        __m256i f = _mm256_load_si256((const __m256i *)(y + k));
        for (k += 16; k < K; k += 16)
            _mm256_store_si256((__m256i *)(y + k), f);
    }
}

AVX512 static uint16_t f16_of(float f) { return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }

/* Thread t takes runs of 16 rows t, t + nt, ... (PoCL hands its threads runs of groups). The
 * threads live through every call and spin between calls, so that no wake-up is timed. */
static int gen, finished, quit;

AVX512 static void run_rows(const job *j)
{
    for (int r0 = 16 * j->t; r0 < j->rows; r0 += 16 * j->nt)
        for (int r = r0; r < r0 + 16 && r < j->rows; r++) {
            if (j->bf16)
                row(j, r, 1);
            else
                row(j, r, 0);
        }
}

static void pin(int t)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(t, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static void *worker(void *arg)
{
    pin(((const job *)arg)->t);
    for (int seen = 0;; seen++) {
        while (__atomic_load_n(&gen, __ATOMIC_ACQUIRE) == seen)
            _mm_pause();
        if (__atomic_load_n(&quit, __ATOMIC_ACQUIRE))
            return NULL;
        run_rows(arg);
        __atomic_add_fetch(&finished, 1, __ATOMIC_RELEASE);
    }
}

static void softmax(job *jobs, int nt)
{
    __atomic_store_n(&finished, 0, __ATOMIC_RELAXED);
    __atomic_add_fetch(&gen, 1, __ATOMIC_RELEASE);
    run_rows(&jobs[0]);
    while (__atomic_load_n(&finished, __ATOMIC_ACQUIRE) < nt - 1)
        _mm_pause();
}

static double to_f32(uint16_t h, int bf16)
{
    if (bf16) {
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    int e = (h >> 10) & 31, mnt = h & 1023;
    double v = e ? ldexp(1024 + mnt, e - 25) : ldexp(mnt, -24);
    return e == 31 ? (mnt ? NAN : INFINITY) * (h >> 15 ? -1 : 1) : (h >> 15 ? -v : v);
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    int bf16 = argc > 1 && strcmp(argv[1], "bfloat16") == 0;
    int rows = argc > 3 ? atoi(argv[2]) : 4096, K = argc > 3 ? atoi(argv[3]) : 1024;
    int nt = argc > 4 ? atoi(argv[4]) : 2, reps = argc > 5 ? atoi(argv[5]) : 61;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw")) {
        printf("softmax-bound: needs AVX-512 F and BW\n");
        return 77;
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (rows < 1 || K < 16 || K % 16 || K > MAXK || nt < 1 || nt > 64 || nt > cpus || reps < 1 ||
        reps > 1001) {
        fprintf(stderr, "usage: softmax-bound [float16|bfloat16] [ROWS K] [THREADS] [REPS]; K a "
                        "multiple of 16 up to %d, 1-64 threads and no more than the %ld CPUs "
                        "(they spin), 1-1001 reps\n", MAXK, cpus);
        return 2;
    }
    size_t n = (size_t)rows * K;
    void *x_, *y_, *c_;
    if (posix_memalign(&x_, 64, n * 2) || posix_memalign(&y_, 64, n * 2) ||
        posix_memalign(&c_, 64, n * 2))
        return 1;
    uint16_t *x = x_, *y = y_, *c = c_;
    int *lens = malloc(rows * sizeof *lens);
    double *t_s = malloc(reps * sizeof *t_s), *t_c = malloc(reps * sizeof *t_c);
    job jobs[64];
    if (!lens || !t_s || !t_c)
        return 1;
    srand(1);
    for (size_t i = 0; i < n; i++) { /* round to the 16-bit type: the reference reads the same */
        float f = (float)(16.0 * rand() / RAND_MAX - 8.0);
        uint32_t u;
        memcpy(&u, &f, 4);
        x[i] = bf16 ? (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16) : f16_of(f);
    }
    for (int r = 0; r < rows; r++)
        lens[r] = rand() % (K + 1);
    memset(y, 0xff, n * 2); /* NaN: every output must be written */
    memset(c, 0, n * 2);
    pthread_t th[64];
    for (int t = 0; t < nt; t++) {
        jobs[t] = (job){x, y, lens, rows, K, bf16, t, nt};
        if (t > 0)
            pthread_create(&th[t], NULL, worker, &jobs[t]);
    }
    pin(0);
    softmax(jobs, nt);
    double worst = 0, tol = 1e-5 + (bf16 ? 0x1p-8 : 0x1p-11);
    for (int r = 0; r < rows; r++) {
        double m = -INFINITY, s = 0;
        for (int k = 0; k < K; k++)
            m = fmax(m, k < lens[r] ? to_f32(x[(size_t)r * K + k], bf16) : FILL);
        for (int k = 0; k < K; k++)
            s += exp((k < lens[r] ? to_f32(x[(size_t)r * K + k], bf16) : FILL) - m);
        for (int k = 0; k < K; k++) {
            double want = exp((k < lens[r] ? to_f32(x[(size_t)r * K + k], bf16) : FILL) - m) / s;
            double got = to_f32(y[(size_t)r * K + k], bf16);
            double e = isfinite(got) ? fabs(got - want) / fmax(want, 1.0 / K) : INFINITY;
            worst = e > worst ? e : worst;
        }
    }
    if (worst > tol) {
        printf("softmax-bound: wrong results: worst error %.3g > %.3g\n", worst, tol);
        return 1;
    }
    for (int i = -2; i < reps; i++) {
        double t0 = now_ms();
        softmax(jobs, nt);
        double t1 = now_ms();
        memcpy(c, x, n * 2);
        double t2 = now_ms();
        if (i >= 0) {
            t_s[i] = t1 - t0;
            t_c[i] = t2 - t1;
        }
    }
    __atomic_store_n(&quit, 1, __ATOMIC_RELEASE);
    __atomic_add_fetch(&gen, 1, __ATOMIC_RELEASE);
    for (int t = 1; t < nt; t++)
        pthread_join(th[t], NULL);
    qsort(t_s, reps, sizeof *t_s, cmp);
    qsort(t_c, reps, sizeof *t_c, cmp);
    printf("%dx%d %s, %d threads: C rows %.3f ms (min %.3f), memcpy %.3f ms (min %.3f): %.2fx "
           "(medians of %d; worst error %.2g)\n", rows, K, bf16 ? "bfloat16" : "float16", nt,
           t_s[reps / 2], t_s[0], t_c[reps / 2], t_c[0], t_c[reps / 2] / t_s[reps / 2], reps,
           worst);
    return 0;
}
