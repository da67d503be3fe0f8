/* clattn dtype conversion between float32, float16 (IEEE binary16) and bfloat16.
 *
 * Layout: x and y are contiguous runs of n elements from element offsets x_off and y_off, of the
 * dtypes XT and YT (dtype.cl's codes; the host copies when they are equal). Work-item i converts
 * elements [8 i, 8 i + 8), or what is left of them one by one. The conversions are dtype.cl's,
 * bit for bit the host's: round to nearest even, overflow to infinity, subnormals both ways, NaN
 * kept NaN with its payload's top bits and the quiet bit set. */
#include "dtype.cl"

#ifndef XT
#define XT 0
#endif
#ifndef YT
#define YT 0
#endif

__kernel void convert(__global const CLATTN_T(XT) *x, int x_off, __global CLATTN_T(YT) *y,
                      int y_off, int n)
{
    int i = get_global_id(0) * 8;
    if (i >= n)
        return;
    __global const CLATTN_T(XT) *xp = x + x_off + i;
    __global CLATTN_T(YT) *yp = y + y_off + i;
    if (n - i >= 8) { /* not i + 8 <= n: n may lie within 7 of INT_MAX */
        CLATTN_STORE8(YT, CLATTN_LOAD8(XT, xp), yp);
        return;
    }
    for (int e = 0; e < n - i; e++)
        CLATTN_STORE(YT, CLATTN_LOAD(XT, xp + e), yp + e);
}
