/* clattn parameter updates: y += alpha x elementwise (float32, x and y contiguous at element
 * offsets; n elements). One work-item per element: each is one load, fma and store, bound by
 * memory on every device. An SGD step is alpha = -learning rate, x the gradient, y the weight. */
__kernel void axpy(float alpha, __global const float *x, int x_off, __global float *y, int y_off,
                   int n)
{
    int i = get_global_id(0);
    if (i < n)
        y[y_off + i] = fma(alpha, x[x_off + i], y[y_off + i]);
}
