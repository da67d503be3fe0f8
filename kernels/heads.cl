/* clattn head transposition (d2l's transpose_qkv / transpose_output).
 *
 * Layout: the "sequence" side is row-major (B, T, H, dh) == (B, T, H*dh); the "heads" side is
 * row-major (B, H, T, dh) == (B*H, T, dh), batch-major and head-minor. One work-item per element
 * with e (the dh index) fastest, so both sides are read and written in contiguous runs of dh.
 * ELEM: the element type, float, or ushort for the 16-bit dtypes (moved as bits, offsets in
 * their own elements). */
#ifndef ELEM
#define ELEM float
#endif

__kernel void transpose_heads(__global const ELEM *src, int s_off, __global ELEM *dst, int d_off,
                              int T, int H, int dh, int to_heads)
{
    int e = get_global_id(0), h = get_global_id(1), bt = get_global_id(2);
    if (e >= dh)
        return;
    int b = bt / T, t = bt % T;
    int seq = ((b * T + t) * H + h) * dh + e;
    int head = ((b * H + h) * T + t) * dh + e;
    if (to_heads)
        dst[d_off + head] = src[s_off + seq];
    else
        dst[d_off + seq] = src[s_off + head];
}
