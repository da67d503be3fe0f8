/* clattn batched matmul: C = alpha * op(A) op(B) + beta * C (+ bias[j]).
 *
 * Layout: C is row-major (batch, M, N) at element offset c_off. A and B are read through strides, so
 * transposes and shared (stride 0) batches cost nothing: A(b, i, k) = A[a_off + b*a_bs + i*a_si +
 * k*a_sk], B(b, k, j) = B[b_off + b*b_bs + k*b_sk + j*b_sj]. bias is NULL or N floats at bias_off.
 * beta == 0 never reads C's old contents, so they do not matter (NaN included).
 * A and B are of the dtypes AT and BT (dtype.cl's codes: float32, float16, bfloat16), read by the
 * packing kernels and matmul_tiled; matmul_rows reads a float32 A in place (the host packs a
 * 16-bit one). C and bias are float32 (the host stages a 16-bit C through a float32 buffer).
 *
 * Variants:
 * - CPU shape (pack_* + matmul_rows or matmul_packed): op(B) is packed into TN-column panels laid
 *   out (batch, panel, k, TN), zero padded, so that a panel streams contiguously however badly B's
 *   row length aliases in the caches (powers of two). Each work-item owns a TN-wide column strip of
 *   C over up to RB consecutive TM-row panels: it sweeps its row panels over one KC-deep slice of
 *   its B panel after the other (the slice stays in L2 for all of them), each time holding a
 *   TM x TN tile of C in TM * TN / VN vector registers and broadcasting one element of A per row
 *   and k. Measured on PoCL/AVX-512: slicing k to keep B in L1 (KC 256) was ~5% slower than one
 *   slice up to K = 4096, the partial sums' trips through C costing more than L2 reads of B. A
 *   whose rows run along k is read in place, TM row streams at once (matmul_rows: as fast as packed
 *   panels and no packing pass); a transposed A is first packed into TM-row panels (batch, panel,
 *   k, TM) (matmul_packed). PoCL vectorizes nothing across work-items once the kernel has a loop,
 *   hence the explicit VN-wide vectors and fma (mad compiles to a separate multiply and add there).
 * - GPU shape (matmul_tiled): local-memory tiles and register blocking, see below. */

#include "common.cl" /* CLATTN_SHAPES */
#include "dtype.cl"

#ifndef AT
#define AT 0
#endif
#ifndef BT
#define BT 0
#endif

#ifndef TM
#define TM 6 /* rows of the register tile (one broadcast of A each per k) */
#endif
#ifndef TN
#define TN 16 /* columns of the register tile, a multiple of VN */
#endif
#ifndef VN
#define VN 8 /* vector width of the tile: 8 for AVX2, 16 for AVX-512 */
#endif
#ifndef KC
#define KC 4096 /* k-slice depth: a KC x TN slice of B is reused from L2 by RB row panels */
#endif
#ifndef RB
#define RB 32 /* row panels per work-item, at most: the reuse count of each B slice */
#endif
#ifndef PK
#define PK 16 /* k values packed per work-item */
#endif

#if VN == 16
#define floatN float16
#define vloadN vload16
#define vstoreN vstore16
#elif VN == 8
#define floatN float8
#define vloadN vload8
#define vstoreN vstore8
#else
#error "VN must be 8 or 16"
#endif
#if TN % VN != 0
#error "TN must be a multiple of VN"
#endif
#define NV (TN / VN)

/* The k loop of the CPU tile is unrolled by hand (4 steps: less loop overhead per FMA): a
 * `#pragma unroll 4` there makes compilers that split the wide vectors into scalars (GPUs, or the
 * generic first pass of PoCL's build) warn that they could not. */
#ifdef CLATTN_DEVICE_GPU
#define KSTEPS 1 /* the CPU kernels are only compiled there */
#else
#define KSTEPS 4
#endif

/* Copies P contiguous floats with the widest vectors P allows (P is a compile-time constant). */
#define COPY_P(P, s, d)                                                                            \
    do {                                                                                           \
        int w_ = 0;                                                                                \
        for (; w_ + 16 <= (P); w_ += 16)                                                           \
            vstore16(vload16(0, (s) + w_), 0, (d) + w_);                                           \
        for (; w_ + 4 <= (P); w_ += 4)                                                             \
            vstore4(vload4(0, (s) + w_), 0, (d) + w_);                                             \
        for (; w_ < (P); w_++)                                                                     \
            (d)[w_] = (s)[w_];                                                                     \
    } while (0)

/* The same from a global source of dtype code T, converted to float32. */
#define COPY_PT(T, P, s, d)                                                                        \
    do {                                                                                           \
        int w_ = 0;                                                                                \
        for (; w_ + 16 <= (P); w_ += 16)                                                           \
            vstore16(CLATTN_LOAD16(T, (s) + w_), 0, (d) + w_);                                     \
        for (; w_ + 4 <= (P); w_ += 4)                                                             \
            vstore4(CLATTN_LOAD4(T, (s) + w_), 0, (d) + w_);                                       \
        for (; w_ < (P); w_++)                                                                     \
            (d)[w_] = CLATTN_LOAD(T, (s) + w_);                                                    \
    } while (0)

/* Packing into panels: dst[b][p][k][w] = src(b, row p*P + w, col k), 0 past R rows, with
 * src(b, r, k) = src[s_off + b*s_bs + r*s_sr + k*s_sk]. It is memory-bound, so every work-item
 * moves whole vectors.
 * PACK_ROWS, for s_sr == 1 (a row of the source holds k's P-runs of every panel): work-item
 * (k / PK, b) sweeps PK source rows from end to end, so reads are long contiguous streams and each
 * write is a whole P-run. */
#define PACK_ROWS(NAME, P, T)                                                                      \
    __kernel void NAME(__global const CLATTN_T(T) *src, int s_off, int s_bs, int s_sr, int s_sk, int R, \
                       int K, __global float *dst, int d_off, int d_bs)                            \
    {                                                                                              \
        int k = get_global_id(0) * PK, b = get_global_id(2);                                       \
        if (k >= K)                                                                                \
            return;                                                                                \
        int k1 = min(k + PK, K), full = R / P, np = (R + P - 1) / P;                               \
        __global const CLATTN_T(T) *s = src + s_off + b * s_bs;                                    \
        __global float *d = dst + d_off + b * d_bs;                                                \
        for (; k < k1; k++) {                                                                      \
            for (int p = 0; p < full; p++)                                                         \
                COPY_PT(T, P, s + k * s_sk + p * P, d + ((size_t)p * K + k) * P);                  \
            for (int p = full; p < np; p++)                                                        \
                for (int w = 0; w < P; w++)                                                        \
                    d[((size_t)p * K + k) * P + w] =                                               \
                        p * P + w < R ? CLATTN_LOAD(T, s + k * s_sk + p * P + w) : 0.0f;           \
        }                                                                                          \
    }

/* PACK_PANELS, for s_sk == 1 (a transposed B) or any strides: work-item (k / PK, p, b) fills PK
 * k-rows of panel p, transposing 16 k at a time through registers when the source runs along k. */
#define PACK_PANELS(NAME, P, T)                                                                    \
    __kernel void NAME(__global const CLATTN_T(T) *src, int s_off, int s_bs, int s_sr, int s_sk, int R, \
                       int K, __global float *dst, int d_off, int d_bs)                            \
    {                                                                                              \
        int k = get_global_id(0) * PK, p = get_global_id(1), b = get_global_id(2);                 \
        if (k >= K)                                                                                \
            return;                                                                                \
        int k1 = min(k + PK, K), rows = min(P, R - p * P);                                         \
        __global const CLATTN_T(T) *s = src + s_off + b * s_bs + p * P * s_sr;                     \
        __global float *d = dst + d_off + b * d_bs + (size_t)p * P * K;                            \
        if (s_sk == 1 && rows == P) {                                                              \
            for (; k1 - k >= 16; k += 16) {                                                        \
                float t[16][P];                                                                    \
                _Pragma("unroll") for (int w = 0; w < P; w++) {                                    \
                    float r_[16];                                                                  \
                    vstore16(CLATTN_LOAD16(T, s + w * s_sr + k), 0, r_);                           \
                    _Pragma("unroll") for (int x = 0; x < 16; x++)                                 \
                        t[x][w] = r_[x];                                                           \
                }                                                                                  \
                _Pragma("unroll") for (int x = 0; x < 16; x++)                                     \
                    COPY_P(P, t[x], d + (k + x) * P);                                              \
            }                                                                                      \
        }                                                                                          \
        for (; k < k1; k++)                                                                        \
            for (int w = 0; w < P; w++)                                                            \
                d[k * P + w] = w < rows ? CLATTN_LOAD(T, s + w * s_sr + k * s_sk) : 0.0f;          \
    }

PACK_ROWS(pack_a_rows, TM, AT)
PACK_PANELS(pack_a_panels, TM, AT)
PACK_ROWS(pack_b_rows, TN, BT)
PACK_PANELS(pack_b_panels, TN, BT)

/* One result from this k-slice's partial sum `acc` and what C holds (`old`, read only where it
 * matters). With beta == 0 the slices before the last store raw partial sums and the last applies
 * alpha once, so C is alpha * (A B) rounded as one product, as PyTorch's scale * (Q K^T) is (tied
 * scores stay tied at any magnitude); with beta != 0 the first slice needs C's old value, so each
 * slice adds its own alpha * partial sum to it. */
#define COMBINE_C(T, acc, old, b, first, last, alpha, beta)                                   \
    (beta == 0.0f ? ((first) ? (acc) : (old) + (acc)) * (T)((last) ? (alpha) : 1.0f) +         \
                        ((last) ? (b) : (T)(0.0f))                                               \
                  : (acc) * (T)(alpha) + ((first) ? (T)(beta) * (old) + (b) : (old)))

/* Writes VN results of one tile row from column j0 (see COMBINE_C). */
static inline void store_c(__global float *c, int j0, int N, floatN acc, int first, int last,
                           float alpha, float beta, __global const float *bias)
{
    int read_old = !first || beta != 0.0f; /* beta == 0 never reads C's old contents */
    if (N - j0 >= VN) {
        floatN old = read_old ? vloadN(0, c + j0) : (floatN)(0.0f);
        floatN b = bias ? vloadN(0, bias + j0) : (floatN)(0.0f);
        vstoreN(COMBINE_C(floatN, acc, old, b, first, last, alpha, beta), 0, c + j0);
        return;
    }
    float t[VN];
    vstoreN(acc, 0, t);
    for (int w = 0; w < VN && j0 + w < N; w++) {
        float old = read_old ? c[j0 + w] : 0.0f, b = bias ? bias[j0 + w] : 0.0f;
        c[j0 + w] = COMBINE_C(float, t[w], old, b, first, last, alpha, beta);
    }
}

/* One work-item's column strip pj over row block rb. op(A)(i, k) = A[(i / TM) * a_ps + (i % TM) *
 * a_si + k * a_sk]; the callers pass compile-time a_sk (and a_si for panels), so the inlined loop
 * is specialized (always_inline: a plain C99 `inline` that a compiler declines to inline, as the
 * NVPTX back end does with a function this size, is an undefined external at link time).
 * clamp: A is not padded, so the rows of the last panel past M re-read row M - 1 (computed, never
 * stored). bpanel: this strip's packed B panel. */
/* acc += op(A)(rows of ar, k) x (the TN floats at bk), one VN-wide FMA per tile vector. */
#define TILE_STEP(k, bk)                                                                           \
    do {                                                                                           \
        floatN bv[NV];                                                                             \
        _Pragma("unroll") for (int v = 0; v < NV; v++) bv[v] = vloadN(v, (bk));                    \
        _Pragma("unroll") for (int i = 0; i < TM; i++) {                                           \
            floatN av = (floatN)(ar[i][(k) * a_sk]);                                               \
            _Pragma("unroll") for (int v = 0; v < NV; v++) acc[i][v] = fma(av, bv[v], acc[i][v]);  \
        }                                                                                          \
    } while (0)

static inline __attribute__((always_inline)) void gemm_strip(__global const float *A, const int a_si, const int a_sk, const int a_ps,
                       const int clamp, __global const float *bpanel, __global float *c, int pj,
                       int rb, int M, int N, int K, float alpha, float beta,
                       __global const float *bias)
{
    /* The row panels are shared out evenly (at most RB each): PoCL hands each thread a contiguous
     * run of work-groups, so equal work-items are what keeps both threads busy to the end.
     * The products in long: rb * np passes 2^31 from about 1.6M rows (TM=6, RB=32). */
    int np = (M + TM - 1) / TM, nrb = (np + RB - 1) / RB;
    int p0 = (int)((long)rb * np / nrb), p1 = (int)((long)(rb + 1) * np / nrb);
    for (int k0 = 0; k0 < K; k0 += KC) {
        int kn = min(KC, K - k0);
        for (int pi = p0; pi < p1; pi++) {
            int last = min(TM, M - pi * TM) - 1;
            __global const float *a = A + (size_t)pi * a_ps + (size_t)k0 * a_sk;
            __global const float *ar[TM];
#pragma unroll
            for (int i = 0; i < TM; i++)
                ar[i] = a + (clamp ? min(i, last) : i) * a_si;
            floatN acc[TM][NV]; /* fully unrolled below, so LLVM keeps it in registers */
#pragma unroll
            for (int i = 0; i < TM; i++)
#pragma unroll
                for (int v = 0; v < NV; v++)
                    acc[i][v] = (floatN)(0.0f);
            __global const float *bk = bpanel + k0 * TN;
            int k = 0;
            for (; kn - k >= KSTEPS; k += KSTEPS, bk += KSTEPS * TN)
#pragma unroll
                for (int s = 0; s < KSTEPS; s++)
                    TILE_STEP(k + s, bk + s * TN);
            for (; k < kn; k++, bk += TN)
                TILE_STEP(k, bk);
#pragma unroll
            for (int i = 0; i < TM; i++) {
                int row = pi * TM + i;
                if (row < M)
#pragma unroll
                    for (int v = 0; v < NV; v++)
                        store_c(c + (size_t)row * N, pj * TN + v * VN, N, acc[i][v], k0 == 0,
                                k0 + kn >= K, alpha, beta, bias);
            }
        }
    }
}

/* A read in place: A(b, i, k) = A[a_off + b*a_bs + i*lda + k]. Bp: packed B panels from element
 * b_off, batch stride b_bs floats (0 = shared). Work-item (pj, rb, b). */
#if CLATTN_CPU_SHAPE
__kernel void matmul_rows(__global const float *A, int a_off, int a_bs, int lda,
                          __global const float *Bp, int b_off, int b_bs, __global float *C,
                          int c_off, int M, int N, int K, float alpha, float beta,
                          __global const float *bias, int bias_off)
{
    int pj = get_global_id(0), rb = get_global_id(1), b = get_global_id(2);
    if (pj * TN >= N || rb * RB * TM >= M)
        return;
    gemm_strip(A + a_off + b * a_bs, lda, 1, TM * lda, 1,
               Bp + b_off + b * b_bs + (size_t)pj * TN * K, C + c_off + (size_t)b * M * N, pj,
               rb, M, N, K, alpha, beta, bias ? bias + bias_off : 0);
}

/* Ap: packed A panels, batch stride a_bs floats (0 = shared); Bp as for matmul_rows. */
__kernel void matmul_packed(__global const float *Ap, int a_bs, __global const float *Bp, int b_off,
                            int b_bs, __global float *C, int c_off, int M, int N, int K, float alpha,
                            float beta, __global const float *bias, int bias_off)
{
    int pj = get_global_id(0), rb = get_global_id(1), b = get_global_id(2);
    if (pj * TN >= N || rb * RB * TM >= M)
        return;
    gemm_strip(Ap + b * a_bs, 1, TM, TM * K, 0, Bp + b_off + b * b_bs + (size_t)pj * TN * K,
               C + c_off + (size_t)b * M * N, pj, rb, M, N, K, alpha, beta,
               bias ? bias + bias_off : 0);
}
#endif

/* GPU shape (matmul_tiled): a work-group of (TSN / WPTN) x (TSM / WPTM) work-items computes a
 * TSM x TSN tile of C; each work-item accumulates a WPTM x WPTN sub-tile in registers, rows
 * ty + w * (TSM / WPTM) and columns tx + w * (TSN / WPTN), so neighbouring work-items touch
 * neighbouring local and global addresses. Per TSK-deep step the group stages op(A) and op(B) in
 * local memory as As[k][i] and Bs[k][j], one float of padding per row against bank conflicts; the
 * loads walk along whichever stride of the operand is 1, so transposed operands load coalesced too,
 * as float4 when the host found that direction 16-byte aligned (a_vec, b_vec). Local memory:
 * TSK * (TSM + TSN + 2) floats (16.5 KiB with the defaults, NVIDIA allows 48). */
#ifndef TSM
#define TSM 128
#endif
#ifndef TSN
#define TSN 128
#endif
#ifndef TSK
#define TSK 16
#endif
#ifndef WPTM
#define WPTM 8
#endif
#ifndef WPTN
#define WPTN 8
#endif
/* matmul_tiled's slice flags: a launch over one k-slice of several (matmul.c) with beta = 0
 * starts from the partial sums the slice before left in C (RESUME), and leaves its own there
 * (RAW) unless it is the last, so that alpha multiplies the whole sum once, as in one launch. */
#define SLICE_RESUME 1
#define SLICE_RAW 2
#define RTSM (TSM / WPTM)
#define RTSN (TSN / WPTN)
#define NTHREADS (RTSM * RTSN)
#if TSM % WPTM != 0 || TSN % WPTN != 0 || (TSM * TSK) % NTHREADS != 0 || (TSN * TSK) % NTHREADS != 0
#error "TSM, TSN must be multiples of WPTM, WPTN; each tile of A and B a multiple of the group size"
#endif

/* Stages rows [r0, r0 + TR) x k [k0, k0 + TSK) of an operand X(r, k) = X[r * s_r + k * s_k] into
 * L[k][r], zero outside R x K. vec: s_r or s_k is 1 and that direction is 16-byte aligned. */
/* Four consecutive elements of dtype code T as float4: a float32 operand through an aligned float4
 * pointer (the host checked the alignment), a 16-bit one with dtype.cl's loads. */
#define STAGE_LOAD4_0(p) (*(__global const float4 *)(p))
#define STAGE_LOAD4_2(p) CLATTN_LOAD4(2, p)
#define STAGE_LOAD4_3(p) CLATTN_LOAD4(3, p)
#define STAGE_LOAD4(T, p) CLATTN_CAT(STAGE_LOAD4_, T)(p)

#define STAGE(L, TR, T, X, s_r, s_k, r0, R, k0, K, vec)                                            \
    do {                                                                                          \
        if ((s_r) == 1) { /* contiguous along r: work-items walk r */                             \
            if ((vec) && (R) - (r0) >= (TR)) {                                                    \
                for (int e = t; e < (TR) * TSK / 4; e += NTHREADS) {                              \
                    int r = (e % ((TR) / 4)) * 4, k = e / ((TR) / 4);                             \
                    float4 v = (k0) + k < (K) ? STAGE_LOAD4(T, (X) + (r0) + r + ((k0) + k) * (s_k)) \
                                              : (float4)(0.0f);                                   \
                    L[k][r] = v.x;                                                                \
                    L[k][r + 1] = v.y;                                                            \
                    L[k][r + 2] = v.z;                                                            \
                    L[k][r + 3] = v.w;                                                            \
                }                                                                                 \
            } else {                                                                              \
                for (int e = t; e < (TR) * TSK; e += NTHREADS) {                                  \
                    int r = e % (TR), k = e / (TR);                                               \
                    L[k][r] = (r0) + r < (R) && (k0) + k < (K)                                    \
                                  ? CLATTN_LOAD(T, (X) + (r0) + r + ((k0) + k) * (s_k))           \
                                  : 0.0f;                                                         \
                }                                                                                 \
            }                                                                                     \
        } else { /* contiguous along k (or neither): work-items walk k */                         \
            if ((vec) && (K) - (k0) >= TSK) {                                                     \
                for (int e = t; e < (TR) * TSK / 4; e += NTHREADS) {                              \
                    int k = (e % (TSK / 4)) * 4, r = e / (TSK / 4);                               \
                    float4 v = (r0) + r < (R) ? STAGE_LOAD4(T, (X) + ((r0) + r) * (s_r) + (k0) + k) \
                                              : (float4)(0.0f);                                   \
                    L[k][r] = v.x;                                                                \
                    L[k + 1][r] = v.y;                                                            \
                    L[k + 2][r] = v.z;                                                            \
                    L[k + 3][r] = v.w;                                                            \
                }                                                                                 \
            } else {                                                                              \
                for (int e = t; e < (TR) * TSK; e += NTHREADS) {                                  \
                    int k = e % TSK, r = e / TSK;                                                 \
                    L[k][r] = (r0) + r < (R) && (k0) + k < (K)                                    \
                                  ? CLATTN_LOAD(T, (X) + ((r0) + r) * (s_r) + ((k0) + k) * (s_k)) \
                                  : 0.0f;                                                         \
                }                                                                                 \
            }                                                                                     \
        }                                                                                         \
    } while (0)

#if CLATTN_GPU_SHAPE
__kernel __attribute__((reqd_work_group_size(RTSN, RTSM, 1)))
void matmul_tiled(__global const CLATTN_T(AT) *A, int a_off, int a_bs, int a_si, int a_sk, int a_vec,
                  __global const CLATTN_T(BT) *B, int b_off, int b_bs, int b_sk, int b_sj, int b_vec,
                  __global float *C, int c_off, int M, int N, int K, float alpha, float beta,
                  __global const float *bias, int bias_off, int slice)
{
    __local float As[TSK][TSM + 1];
    __local float Bs[TSK][TSN + 1];
    int tx = get_local_id(0), ty = get_local_id(1), t = ty * RTSN + tx, b = get_global_id(2);
    int i0 = get_group_id(1) * TSM, j0 = get_group_id(0) * TSN;
    __global const CLATTN_T(AT) *a = A + a_off + b * a_bs;
    __global const CLATTN_T(BT) *bb = B + b_off + b * b_bs;
    __global float *c = C + c_off + (size_t)b * M * N;
    float acc[WPTM][WPTN];
    for (int wm = 0; wm < WPTM; wm++)
        for (int wn = 0; wn < WPTN; wn++)
            acc[wm][wn] = 0.0f;
    if (slice & SLICE_RESUME)
        for (int wm = 0; wm < WPTM; wm++)
            for (int wn = 0; wn < WPTN; wn++) {
                int i = i0 + ty + wm * RTSM, j = j0 + tx + wn * RTSN;
                if (i < M && j < N)
                    acc[wm][wn] = c[(size_t)i * N + j];
            }
    for (int k0 = 0; k0 < K; k0 += TSK) {
        STAGE(As, TSM, AT, a, a_si, a_sk, i0, M, k0, K, a_vec);
        STAGE(Bs, TSN, BT, bb, b_sj, b_sk, j0, N, k0, K, b_vec);
        barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
        for (int k = 0; k < TSK; k++) {
            float ar[WPTM], br[WPTN];
#pragma unroll
            for (int wm = 0; wm < WPTM; wm++)
                ar[wm] = As[k][ty + wm * RTSM];
#pragma unroll
            for (int wn = 0; wn < WPTN; wn++)
                br[wn] = Bs[k][tx + wn * RTSN];
#pragma unroll
            for (int wm = 0; wm < WPTM; wm++)
#pragma unroll
                for (int wn = 0; wn < WPTN; wn++)
                    acc[wm][wn] = mad(ar[wm], br[wn], acc[wm][wn]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
#pragma unroll
    for (int wm = 0; wm < WPTM; wm++) {
        int i = i0 + ty + wm * RTSM;
#pragma unroll
        for (int wn = 0; wn < WPTN; wn++) {
            int j = j0 + tx + wn * RTSN;
            if (i < M && j < N && (slice & SLICE_RAW)) {
                c[(size_t)i * N + j] = acc[wm][wn];
            } else if (i < M && j < N) {
                float o = alpha * acc[wm][wn];
                if (beta != 0.0f)
                    o += beta * c[(size_t)i * N + j];
                if (bias)
                    o += bias[bias_off + j];
                c[(size_t)i * N + j] = o;
            }
        }
    }
}
#endif

/* ---- linear's bias gradient ----
 * y[c] = sum of x[r * cols + c] over rows r in [r_lo, r_hi) (float32, row-major (rows, cols) at
 * x_off; y at y_off), added to y's old value when acc (the host splits long sums over launches
 * under a loop budget), the rows in order: the same bits on every run. One work-item per 16
 * columns (a float16 of them on CPUs; adjacent items read adjacent 64-byte runs on GPUs). */
__kernel void column_sums(__global const float *x, int x_off, int cols, int r_lo, int r_hi,
                          __global float *y, int y_off, int acc)
{
    int c0 = get_global_id(0) * 16;
    if (c0 >= cols)
        return;
    __global const float *p = x + x_off + c0;
    __global float *o = y + y_off + c0;
    if (cols - c0 >= 16) { /* not c0 + 16 <= cols: cols may lie within 15 of INT_MAX */
        float16 s = acc ? vload16(0, o) : (float16)(0.0f);
        for (int r = r_lo; r < r_hi; r++)
            s += vload16(0, p + (size_t)r * cols);
        vstore16(s, 0, o);
    } else {
        for (int c = 0; c0 + c < cols; c++) {
            float s = acc ? o[c] : 0.0f;
            for (int r = r_lo; r < r_hi; r++)
                s += p[(size_t)r * cols + c];
            o[c] = s;
        }
    }
}
