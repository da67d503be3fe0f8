/* clattn dropout: y[e] = keep(e) ? x[e] * scale : 0 over n contiguous floats.
 *
 * Layout: x and y are flat float32 arrays at element offsets x_off, y_off (y may alias x); the
 * stream index of element e is first + e, so a sub-range of a larger tensor draws the same mask
 * as the whole. keep() is Philox4x32-10 (common.cl): identical on every device. One work-item per
 * element and no loop, which PoCL vectorizes across work-items and GPUs coalesce. */
#include "common.cl"

__kernel void dropout(__global const float *x, int x_off, __global float *y, int y_off, int n,
                      ulong first, uint2 seed, uint2 offset, uint threshold, float scale)
{
    int e = get_global_id(0);
    if (e >= n)
        return;
    float v = x[x_off + e];
    y[y_off + e] = clattn_dropout_keep(first + (ulong)e, seed, offset, threshold) ? v * scale : 0.0f;
}
