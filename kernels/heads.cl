/* clattn head transposition (d2l's transpose_qkv / transpose_output).
 *
 * Layout: the "sequence" side is row-major (B, T, H, dh) == (B, T, H*dh); the "heads" side is
 * row-major (B, H, T, dh) == (B*H, T, dh), batch-major and head-minor. One work-item per element
 * with e (the dh index) fastest, so both sides are read and written in contiguous runs of dh.
 * ELEM: the element type of a move between one dtype, float, or ushort for the 16-bit dtypes
 * (moved as bits). XT and YT (dtype.cl's codes), when XT is defined: src's and dst's dtypes,
 * each element converted (varlen attention's float32 staging of 16-bit operands). Offsets are in
 * each side's own elements. */
#include "dtype.cl"

#ifdef XT
#ifndef YT
#define YT 0
#endif
#define SRC_T CLATTN_T(XT)
#define DST_T CLATTN_T(YT)
#define MOVE(d, s) CLATTN_STORE(YT, CLATTN_LOAD(XT, s), d)
#else
#ifndef ELEM
#define ELEM float
#endif
#define SRC_T ELEM
#define DST_T ELEM
#define MOVE(d, s) (*(d) = *(s))
#endif

__kernel void transpose_heads(__global const SRC_T *src, int s_off, __global DST_T *dst,
                              int d_off, int T, int H, int dh, int to_heads)
{
    int e = get_global_id(0), h = get_global_id(1), bt = get_global_id(2);
    if (e >= dh)
        return;
    int b = bt / T, t = bt % T;
    int seq = ((b * T + t) * H + h) * dh + e;
    int head = ((b * H + h) * T + t) * dh + e;
    if (to_heads)
        MOVE(dst + d_off + head, src + s_off + seq);
    else
        MOVE(dst + d_off + seq, src + s_off + head);
}
