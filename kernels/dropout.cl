/* clattn dropout: y[e] = x[e] * (keep(e) ? scale : 0) over n contiguous floats: a product, as
 * PyTorch's x * mask / (1 - p), so a dropped NaN or infinity gives NaN rather than 0.
 *
 * Layout: x and y are flat arrays of the dtypes XT and YT (dtype.cl's codes) at element offsets
 * x_off, y_off (y may alias x, then XT == YT); a 16-bit y rounds each product once. The
 * stream index of element e is first + e, so a sub-range of a larger tensor draws the same mask
 * as the whole. keep() is Philox4x32-10 (common.cl): identical on every device. One work-item per
 * element and no loop, which PoCL vectorizes across work-items and GPUs coalesce. */
#include "common.cl"
#include "dtype.cl"

#ifndef XT
#define XT 0
#endif
#ifndef YT
#define YT 0
#endif

__kernel void dropout(__global const CLATTN_T(XT) *x, int x_off, __global CLATTN_T(YT) *y, int y_off,
                      int n,
                      ulong first, uint2 seed, uint2 offset, uint threshold, float scale)
{
    int e = get_global_id(0);
    if (e >= n)
        return;
    float v = CLATTN_LOAD(XT, x + x_off + e);
    float keep = clattn_dropout_keep(first + (ulong)e, seed, offset, threshold) ? scale : 0.0f;
    CLATTN_STORE(YT, v * keep, y + y_off + e);
}
