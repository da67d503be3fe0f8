/* clattn batched matmul: C = alpha * op(A) op(B) + beta * C (+ bias[j]).
 *
 * Layout: C is row-major (batch, M, N) at element offset c_off. A and B are read through strides, so
 * transposes and shared (stride 0) batches cost nothing: A(b, i, k) = A[a_off + b*a_bs + i*a_si +
 * k*a_sk], B(b, k, j) = B[b_off + b*b_bs + k*b_sk + j*b_sj]. bias is NULL or N floats at bias_off.
 * beta == 0 never reads C, so C's old contents (NaN included) do not matter.
 *
 * Variants:
 * - CPU shape (pack_panels + matmul_packed): A and B are first packed into panels, A into TM-row
 *   panels (panel, k, TM) and B into TN-column panels (panel, k, TN), zero padded; then each
 *   work-item keeps a TM x TN tile of C in VN-wide vector registers and streams both panels.
 *   PoCL vectorizes nothing across work-items once the kernel has a loop, hence explicit vectors.
 * - GPU shape (matmul_tiled): TS x TS work-group tiles of A and B staged in local memory, each
 *   work-item accumulating WPT outputs of one column; consecutive work-items own consecutive j. */

#ifndef TM
#define TM 12
#endif
#ifndef TN
#define TN 32
#endif
#ifndef VN
#define VN 16
#endif
#ifndef TS
#define TS 16
#endif
#ifndef WPT
#define WPT 4
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

/* dst[b][p][k][w] = src(b, row p*P + w, col k), 0 past R rows: src(b, r, k) = src[s_off + b*s_bs +
 * r*s_sr + k*s_sk]. One work-item per (k, panel, batch) writes P contiguous floats. */
__kernel void pack_panels(__global const float *src, int s_off, int s_bs, int s_sr, int s_sk, int R,
                          int K, int P, __global float *dst, int d_off)
{
    int k = get_global_id(0), p = get_global_id(1), b = get_global_id(2);
    if (k >= K)
        return;
    int npanels = get_global_size(1);
    __global const float *s = src + s_off + b * s_bs + k * s_sk;
    __global float *d = dst + d_off + ((size_t)(b * npanels + p) * K + k) * P;
    for (int w = 0; w < P; w++) {
        int r = p * P + w;
        d[w] = r < R ? s[r * s_sr] : 0.0f;
    }
}

inline void store_c(__global float *c, int j0, int N, floatN v, float beta, __global const float *bias)
{
    if (j0 + VN <= N && beta == 0.0f && !bias) {
        vstoreN(v, 0, c + j0);
        return;
    }
    float t[VN];
    vstoreN(v, 0, t);
    for (int w = 0; w < VN && j0 + w < N; w++) {
        float o = t[w];
        if (beta != 0.0f)
            o += beta * c[j0 + w];
        if (bias)
            o += bias[j0 + w];
        c[j0 + w] = o;
    }
}

/* Ap: packed A panels (batch stride a_bs floats, 0 = shared); Bp likewise from element b_off. */
__kernel void matmul_packed(__global const float *Ap, int a_bs, __global const float *Bp, int b_off,
                            int b_bs,
                            __global float *C, int c_off, int M, int N, int K, float alpha,
                            float beta, __global const float *bias, int bias_off)
{
    int pj = get_global_id(0), pi = get_global_id(1), b = get_global_id(2);
    if (pj * TN >= N || pi * TM >= M)
        return;
    __global const float *a = Ap + b * a_bs + (size_t)pi * TM * K;
    __global const float *bp = Bp + b_off + b * b_bs + (size_t)pj * TN * K;
    floatN acc[TM][NV];
#pragma unroll
    for (int i = 0; i < TM; i++)
#pragma unroll
        for (int v = 0; v < NV; v++)
            acc[i][v] = (floatN)(0.0f);
    for (int k = 0; k < K; k++) {
        floatN bv[NV];
#pragma unroll
        for (int v = 0; v < NV; v++)
            bv[v] = vloadN(v, bp + k * TN);
#pragma unroll
        for (int i = 0; i < TM; i++) {
            floatN av = (floatN)(a[k * TM + i]);
#pragma unroll
            for (int v = 0; v < NV; v++)
                acc[i][v] = mad(av, bv[v], acc[i][v]);
        }
    }
    __global const float *bias_p = bias ? bias + bias_off : 0;
    __global float *c = C + c_off + (size_t)b * M * N;
#pragma unroll
    for (int i = 0; i < TM; i++) {
        int row = pi * TM + i;
        if (row < M)
#pragma unroll
            for (int v = 0; v < NV; v++)
                store_c(c + (size_t)row * N, pj * TN + v * VN, N, acc[i][v] * (floatN)(alpha), beta,
                        bias_p);
    }
}

#define RTS (TS / WPT)
__kernel __attribute__((reqd_work_group_size(TS, RTS, 1)))
void matmul_tiled(__global const float *A, int a_off, int a_bs, int a_si, int a_sk,
                  __global const float *B, int b_off, int b_bs, int b_sk, int b_sj,
                  __global float *C, int c_off, int M, int N, int K, float alpha, float beta,
                  __global const float *bias, int bias_off)
{
    __local float As[TS][TS + 1]; /* +1: no bank conflicts on the column reads */
    __local float Bs[TS][TS];
    int tx = get_local_id(0), ty = get_local_id(1), b = get_global_id(2);
    int i0 = get_group_id(1) * TS, j0 = get_group_id(0) * TS;
    int j = j0 + tx;
    __global const float *a = A + a_off + b * a_bs;
    __global const float *bb = B + b_off + b * b_bs;
    float acc[WPT];
    for (int w = 0; w < WPT; w++)
        acc[w] = 0.0f;
    for (int t = 0; t < K; t += TS) {
        for (int w = 0; w < WPT; w++) {
            int r = ty + w * RTS;
            int ai = i0 + r, ak = t + tx, bk = t + r;
            As[r][tx] = (ai < M && ak < K) ? a[ai * a_si + ak * a_sk] : 0.0f;
            Bs[r][tx] = (bk < K && j < N) ? bb[bk * b_sk + j * b_sj] : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int kk = 0; kk < TS; kk++) {
            float bv = Bs[kk][tx];
            for (int w = 0; w < WPT; w++)
                acc[w] = mad(As[ty + w * RTS][kk], bv, acc[w]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (j >= N)
        return;
    __global float *c = C + c_off + (size_t)b * M * N;
    for (int w = 0; w < WPT; w++) {
        int i = i0 + ty + w * RTS;
        if (i < M) {
            float o = alpha * acc[w];
            if (beta != 0.0f)
                o += beta * c[(size_t)i * N + j];
            if (bias)
                o += bias[bias_off + j];
            c[(size_t)i * N + j] = o;
        }
    }
}
