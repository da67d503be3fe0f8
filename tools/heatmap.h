/* SVG heatmaps in the manner of d2l's show_heatmaps: a grid of panels, one matrix each (rows =
 * queries, columns = keys), shared axis labels, a title, and one colour bar with tick labels.
 * Written by hand, no dependency. */
#ifndef CLATTN_HEATMAP_H
#define CLATTN_HEATMAP_H

typedef enum { HEATMAP_REDS = 0, HEATMAP_VIRIDIS } heatmap_cmap;

typedef struct {
    const float *data;               /* grid_rows * grid_cols matrices of rows x cols, row-major */
    int grid_rows, grid_cols;        /* panels; 1 x 1 for a single matrix */
    int rows, cols;                  /* of each matrix */
    const char *title;               /* or NULL */
    const char *xlabel, *ylabel;     /* d2l: "Keys", "Queries" */
    const char *const *panel_titles; /* grid_rows * grid_cols strings, or NULL */
    heatmap_cmap cmap;
    float vmin, vmax;                /* vmin == vmax: the data's own range */
    int annotate;                    /* write each value into its cell when the cell is big enough */
} heatmap;

/* Returns 0, or -1 with errno set (the file could not be written) or EINVAL (bad sizes). */
int heatmap_write_svg(const heatmap *h, const char *path);

/* Parses "reds" or "viridis"; returns -1 for anything else. */
int heatmap_cmap_parse(const char *name);

#endif
