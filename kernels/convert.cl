/* clattn dtype conversion between float32, float16 (IEEE binary16) and bfloat16.
 *
 * Layout: x and y are contiguous runs of n elements from element offsets x_off and y_off, of
 * dtypes xt and yt (0 float32, 2 float16, 3 bfloat16, as clattn_dtype), both buffers seen as
 * bytes. One work-item per element. The conversions are bit manipulations, the same as the host's
 * (src/convert.c): round to nearest even, overflow to infinity, subnormals both ways, NaN kept NaN
 * with its payload's top bits and the quiet bit set. No cl_khr_fp16 (vstore_half's NaN payloads
 * and rounding mode support differ between devices). */

static inline ushort f32_to_f16(uint x)
{
    uint sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN */
        return (ushort)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) /* 65520 and up round to infinity */
        return (ushort)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* below 2^-14: a multiple of 2^-24 (a subnormal) or zero */
        uint e = a >> 23;
        if (e < 102u) /* below 2^-25: zero */
            return (ushort)sign;
        uint m = (a & 0x7fffffu) | 0x800000u, shift = 126u - e; /* 14 .. 24 */
        uint q = m >> shift, rem = m & ((1u << shift) - 1u), mid = 1u << (shift - 1u);
        q += (rem > mid || (rem == mid && (q & 1u))) ? 1u : 0u;
        return (ushort)(sign | q);
    }
    uint r = a - 0x38000000u; /* the exponent rebiased from 127 to 15 */
    uint q = r >> 13, rem = r & 0x1fffu;
    q += (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) ? 1u : 0u;
    return (ushort)(sign | q);
}

static inline uint f16_to_f32(ushort h)
{
    uint sign = ((uint)h & 0x8000u) << 16, e = ((uint)h >> 10) & 0x1fu, m = (uint)h & 0x3ffu;
    if (e == 31u)
        return m ? sign | 0x7fc00000u | (m << 13) : sign | 0x7f800000u;
    if (e == 0u) {
        if (m == 0u)
            return sign;
        uint shift = clz(m) - 21u; /* normalise the subnormal: bit 10 set */
        return sign | ((113u - shift) << 23) | (((m << shift) & 0x3ffu) << 13);
    }
    return sign | ((e + 112u) << 23) | (m << 13);
}

static inline ushort f32_to_bf16(uint x)
{
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (ushort)((x >> 16) | 0x40u);
    return (ushort)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

__kernel void convert(__global const uchar *x, int x_off, int xt, __global uchar *y, int y_off,
                      int yt, int n)
{
    int i = get_global_id(0);
    if (i >= n)
        return;
    uint v; /* the float32 bits */
    if (xt == 0)
        v = ((__global const uint *)x)[x_off + i];
    else if (xt == 2)
        v = f16_to_f32(((__global const ushort *)x)[x_off + i]);
    else
        v = (uint)((__global const ushort *)x)[x_off + i] << 16;
    if (yt == 0)
        ((__global uint *)y)[y_off + i] = v;
    else if (yt == 2)
        ((__global ushort *)y)[y_off + i] = f32_to_f16(v);
    else
        ((__global ushort *)y)[y_off + i] = f32_to_bf16(v);
}
