/* clattn attention merge: the output and log-sum-exp of attention over the union of disjoint key
 * ranges from those of each range, one range at a time into a running merge
 * (clattn_attention_merge).
 *
 * Layout: a, b and o are (nrows, dv) float32, row-major, from element offsets a_off, b_off, o_off;
 * la, lb and lo are (nrows) log-sum-exps at la_off, lb_off, lo_off; sin and sout are (nrows, 4):
 * two running states (m, s) per row, the step's at column sin_col, sout_col (0 or 2), so that no
 * offset grows with nrows (a state offset past 2^31 elements would overflow an int). One
 * work-item per row, its two weights computed once.
 * - The running merge is a (the output so far) with its state (m, s) in sin: m the largest LSE so
 *   far, exactly one of the inputs, and s = sum_i exp(l_i - m), so that no rounded m + log(s) is
 *   ever fed back. sin NULL: a is one range, with m = la, s = 1 (0 when la is -inf: empty).
 * - b NULL: o and lo from a alone (one range): a and la as they are unless la is -inf (o 0 x a,
 *   lo -inf), NaN or +inf (o and lo NaN: its weight exp(la - la) is NaN). Else o and, from the
 *   items of column 0, sout and lo (each NULL when not wanted) are the merge of the running one
 *   with range b. o may be a itself (each element is read before it is written), sout never
 *   sin.
 * Numerics: the max-subtraction keeps every exponent <= 0. A range whose LSE is -inf adds
 * nothing, not 0 * NaN: either it has no keys (decode's and varlen's output 0) or every key was
 * blocked with fill -inf (output NaN). When every range so far is empty the LSE is -inf and the
 * output 0 x each range's: NaN where a range's keys were all blocked, as one op over them all
 * gives, else 0, as for a sequence without keys; a NaN LSE makes the row NaN (the comparisons
 * below pass it on to m or to a weight). */

#include "common.cl"

__kernel void attention_merge(__global const float *a, int a_off, __global const float *la,
                              int la_off, __global const float *sin, int sin_col,
                              __global const float *b, int b_off, __global const float *lb,
                              int lb_off, __global float *o, int o_off, __global float *sout,
                              int sout_col, __global float *lo, int lo_off, int nrows, int dv)
{
    int r = get_global_id(0);
    if (r >= nrows)
        return;
    __global const float *ar = a + a_off + (size_t)r * dv;
    __global float *orow = o + o_off + (size_t)r * dv;
    float m, s;
    if (sin) {
        m = sin[4 * (size_t)r + sin_col];
        s = sin[4 * (size_t)r + sin_col + 1];
    } else {
        m = la[la_off + r];
        s = m == -INFINITY ? 0.0f : 1.0f;
    }
    if (!b) { /* one range, by the same rules: weight exp(m - m), NaN for a NaN or +inf m */
        int empty = m == -INFINITY, bad = isnan(m) || m == INFINITY;
        for (int c = 0; c < dv; c++)
            orow[c] = empty ? (clattn_nonfinite(ar[c]) ? NAN : 0.0f) : bad ? NAN : ar[c];
        if (lo)
            lo[lo_off + r] = bad ? NAN : m;
        return;
    }
    __global const float *br = b + b_off + (size_t)r * dv;
    /* a NaN y becomes mn even after empty ranges (m = -inf), where y > m would drop it */
    float y = lb[lb_off + r], mn = y > m || isnan(y) ? y : m, ca = 0.0f, wb = 0.0f, sum = 0.0f;
    if (mn != -INFINITY) {
        ca = s == 0.0f ? 0.0f : s * exp(m - mn);
        wb = y == -INFINITY ? 0.0f : exp(y - mn);
        sum = ca + wb;
    }
    /* weights 0 of empty ranges drop their (NaN) outputs: select, not 0 * NaN; both empty: 0 x
     * both outputs (see the top), by their exponent bits (common.cl) */
    float inv = 1.0f / sum, fa = ca * inv, fb = wb * inv;
    int use_a = s != 0.0f, use_b = y != -INFINITY;
    if (mn == -INFINITY) {
        for (int c = 0; c < dv; c++)
            orow[c] = clattn_nonfinite(ar[c]) || clattn_nonfinite(br[c]) ? NAN : 0.0f;
    } else if (use_a && use_b) {
        int c = 0;
        for (; c + 16 <= dv; c += 16)
            vstore16(fa * vload16(0, ar + c) + fb * vload16(0, br + c), 0, orow + c);
        for (; c < dv; c++)
            orow[c] = fa * ar[c] + fb * br[c];
    } else {
        for (int c = 0; c < dv; c++)
            orow[c] = use_a ? fa * ar[c] : fb * br[c];
    }
    if (sout) {
        sout[4 * (size_t)r + sout_col] = mn;
        sout[4 * (size_t)r + sout_col + 1] = sum;
    }
    if (lo)
        lo[lo_off + r] = mn + log(sum); /* -inf + log(0) = -inf when both are empty */
}
