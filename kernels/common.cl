/* clattn common helpers: mask evaluation shared by the softmax and attention kernels.
 *
 * Score layout: row-major (D0, D1, Q, K); a row r = (d0 * D1 + d1) * Q + q holds K keys.
 * Mask description (all optional, combined: a key is blocked when any part blocks it):
 *   lens, lens_off, lens_mode: 0 none; 1 one length per d0 (repeated over d1 and q); 2 one per (d0, q).
 *   causal:          key k is blocked when k > q.
 *   mask, mask_off, ms: int 0/1, element (d0, d1, q, k) at mask[mask_off + ms.x*d0 + ms.y*d1 + ms.z*q + ms.w*k]
 *                    (strides 0 where the mask broadcasts); NULL = no mask tensor; 0 = blocked.
 * Blocked scores take the value `fill` before the softmax, exactly as masked_fill does. */
#ifndef CLATTN_COMMON_CL
#define CLATTN_COMMON_CL

/* Keys k >= the returned limit are blocked by lengths or causality. */
inline int clattn_row_limit(int d0, int q, int K, __global const int *lens, int lens_off,
                            int lens_mode, int Q, int causal)
{
    int limit = K;
    if (lens_mode == 1)
        limit = lens[lens_off + d0];
    else if (lens_mode == 2)
        limit = lens[lens_off + d0 * Q + q];
    limit = clamp(limit, 0, K); /* device lengths cannot be checked on the host without a sync */
    if (causal)
        limit = min(limit, q + 1);
    return limit;
}

/* Start of this row's mask entries, or NULL when there is no mask tensor. */
inline __global const int *clattn_mask_row(__global const int *mask, int mask_off, int4 ms, int d0,
                                           int d1, int q)
{
    return mask ? mask + mask_off + ms.x * d0 + ms.y * d1 + ms.z * q : 0;
}

inline float clattn_masked(float x, int k, int limit, __global const int *mrow, int msk, float fill)
{
    int ok = k < limit && (!mrow || mrow[msk * k] != 0);
    return ok ? x : fill;
}

#endif
