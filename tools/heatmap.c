/* SVG heatmap writer; see heatmap.h. Sizes are in SVG user units (px). */
#include "heatmap.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define FONT "DejaVu Sans, Helvetica, Arial, sans-serif"
#define NSTOPS 9

/* Nine evenly spaced samples of each map; linear interpolation between them stays within a
 * just-noticeable difference of the full 256-entry tables, and SVG gradients interpolate the same
 * way, so the colour bar and the cells agree exactly. */
static const unsigned cmap_stops[2][NSTOPS] = {
    /* matplotlib 'Reds' (ColorBrewer), d2l's show_heatmaps default */
    {0xfff5f0, 0xfee0d2, 0xfcbba1, 0xfc9272, 0xfb6a4a, 0xef3b2c, 0xcb181d, 0xa50f15, 0x67000d},
    /* matplotlib 'viridis' */
    {0x440154, 0x472d7b, 0x3b528b, 0x2c728e, 0x21918c, 0x28ae80, 0x5ec962, 0xaddc30, 0xfde725},
};

typedef struct {
    double cell;          /* side of a square cell */
    double pw, ph;        /* one panel */
    double left, top;     /* corner of the first panel */
    double gap_x, gap_y;  /* between panels */
    double grid_w, grid_h;
    double bar_x, bar_h;  /* colour bar, top-aligned with the first panel */
    double width, height;
    float vmin, vmax;
} layout;

int heatmap_cmap_parse(const char *name)
{
    if (strcmp(name, "reds") == 0)
        return HEATMAP_REDS;
    if (strcmp(name, "viridis") == 0)
        return HEATMAP_VIRIDIS;
    return -1;
}

static unsigned colour_at(heatmap_cmap cmap, double t)
{
    const unsigned *s = cmap_stops[cmap == HEATMAP_VIRIDIS];
    if (!(t >= 0.0))
        t = 0.0; /* NaN never gets here (the caller greys it); this clamps below zero */
    if (t > 1.0)
        t = 1.0;
    double x = t * (NSTOPS - 1);
    int i = x >= NSTOPS - 1 ? NSTOPS - 2 : (int)x;
    double f = x - i;
    unsigned rgb = 0;
    for (int sh = 16; sh >= 0; sh -= 8) {
        double a = (s[i] >> sh) & 0xff, b = (s[i + 1] >> sh) & 0xff;
        rgb |= (unsigned)lround(a + (b - a) * f) << sh;
    }
    return rgb;
}

/* Relative luminance, to pick black or white text on a cell. */
static int is_dark(unsigned rgb)
{
    double r = (rgb >> 16) & 0xff, g = (rgb >> 8) & 0xff, b = rgb & 0xff;
    return 0.2126 * r + 0.7152 * g + 0.0722 * b < 128.0;
}

static void put_escaped(FILE *f, const char *s)
{
    for (; s && *s; s++) {
        if (*s == '&')
            fputs("&amp;", f);
        else if (*s == '<')
            fputs("&lt;", f);
        else if (*s == '>')
            fputs("&gt;", f);
        else
            fputc(*s, f);
    }
}

static void data_range(const heatmap *h, float *lo, float *hi)
{
    size_t n = (size_t)h->grid_rows * h->grid_cols * h->rows * h->cols;
    *lo = INFINITY;
    *hi = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        if (isfinite(h->data[i])) {
            *lo = fminf(*lo, h->data[i]);
            *hi = fmaxf(*hi, h->data[i]);
        }
    }
    if (!(*lo <= *hi))
        *lo = 0.0f, *hi = 1.0f;
}

static layout make_layout(const heatmap *h)
{
    layout L;
    int m = h->rows > h->cols ? h->rows : h->cols;
    double target = h->grid_cols >= 4 ? 170.0 : h->grid_cols >= 2 ? 220.0 : 320.0;
    L.cell = fmin(48.0, fmax(6.0, floor(target / m)));
    L.pw = L.cell * h->cols;
    L.ph = L.cell * h->rows;
    L.gap_x = 18.0;
    L.gap_y = h->panel_titles ? 30.0 : 14.0;
    L.left = 62.0;
    L.top = (h->title ? 38.0 : 12.0) + (h->panel_titles ? 20.0 : 0.0);
    L.grid_w = h->grid_cols * L.pw + (h->grid_cols - 1) * L.gap_x;
    L.grid_h = h->grid_rows * L.ph + (h->grid_rows - 1) * L.gap_y;
    L.bar_x = L.left + L.grid_w + 24.0;
    L.bar_h = fmax(L.grid_h, 120.0);
    L.width = L.bar_x + 14.0 + 60.0;
    L.height = L.top + fmax(L.grid_h + 46.0, L.bar_h + 12.0); /* 46: x tick labels and xlabel */
    L.vmin = h->vmin;
    L.vmax = h->vmax;
    if (!(h->vmin < h->vmax))
        data_range(h, &L.vmin, &L.vmax);
    if (!(L.vmin < L.vmax))
        L.vmax = L.vmin + 1.0f; /* a constant matrix still needs a non-empty scale */
    return L;
}

/* Index tick spacing so that labels of `need` px never overlap: 1, 2, 5, 10, 20, ... */
static int index_step(double cell, double need)
{
    static const int base[3] = {1, 2, 5};
    for (int mag = 1;; mag *= 10)
        for (int i = 0; i < 3; i++)
            if (base[i] * mag * cell >= need)
                return base[i] * mag;
}

static void write_cells(FILE *f, const heatmap *h, const layout *L, const float *m, double x0,
                        double y0)
{
    int text = h->annotate && L->cell >= 28.0;
    double fs = fmin(11.0, L->cell / 3.2);
    fputs("<g shape-rendering=\"crispEdges\">\n", f);
    for (int r = 0; r < h->rows; r++) {
        for (int c = 0; c < h->cols; c++) {
            float v = m[(size_t)r * h->cols + c];
            unsigned rgb = isnan(v) ? 0xbbbbbb : colour_at(h->cmap, (v - L->vmin) / (L->vmax - L->vmin));
            double x = x0 + c * L->cell, y = y0 + r * L->cell;
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#%06x\">"
                       "<title>row %d, column %d: %.6g</title></rect>\n",
                    x, y, L->cell, L->cell, rgb, r, c, v);
            if (text)
                fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"%.1f\" text-anchor=\"middle\" "
                           "fill=\"%s\">%.2f</text>\n",
                        x + L->cell / 2, y + L->cell / 2 + fs * 0.35, fs, is_dark(rgb) ? "#fff" : "#000", v);
        }
    }
    fputs("</g>\n", f);
}

/* Tick marks on every panel, tick labels only on the outer ones (matplotlib's sharex/sharey). */
static void write_ticks(FILE *f, const heatmap *h, const layout *L, double x0, double y0, int label_x,
                        int label_y)
{
    int sx = index_step(L->cell, 22.0), sy = index_step(L->cell, 13.0);
    for (int c = 0; c < h->cols; c += sx) {
        double x = x0 + (c + 0.5) * L->cell;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\"/>\n", x,
                y0 + L->ph, x, y0 + L->ph + 4);
        if (label_x)
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"middle\">%d</text>\n",
                    x, y0 + L->ph + 14, c);
    }
    for (int r = 0; r < h->rows; r += sy) {
        double y = y0 + (r + 0.5) * L->cell;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\"/>\n", x0 - 4,
                y, x0, y);
        if (label_y)
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"end\">%d</text>\n",
                    x0 - 6, y + 3.5, r);
    }
}

static void write_panel(FILE *f, const heatmap *h, const layout *L, int gr, int gc)
{
    double x0 = L->left + gc * (L->pw + L->gap_x), y0 = L->top + gr * (L->ph + L->gap_y);
    int idx = gr * h->grid_cols + gc;
    write_cells(f, h, L, h->data + (size_t)idx * h->rows * h->cols, x0, y0);
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
               "stroke=\"#000\" stroke-width=\"0.8\"/>\n",
            x0, y0, L->pw, L->ph);
    write_ticks(f, h, L, x0, y0, gr == h->grid_rows - 1, gc == 0);
    if (h->panel_titles) {
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">", x0 + L->pw / 2,
                y0 - 7);
        put_escaped(f, h->panel_titles[idx]);
        fputs("</text>\n", f);
    }
    if (gc == 0 && h->ylabel) {
        fprintf(f, "<text transform=\"translate(%.1f %.1f) rotate(-90)\" font-size=\"12\" "
                   "text-anchor=\"middle\">", L->left - 40, y0 + L->ph / 2);
        put_escaped(f, h->ylabel);
        fputs("</text>\n", f);
    }
    if (gr == h->grid_rows - 1 && h->xlabel) {
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\">",
                x0 + L->pw / 2, y0 + L->ph + 32);
        put_escaped(f, h->xlabel);
        fputs("</text>\n", f);
    }
}

static double nice_step(double range, int *decimals)
{
    double raw = range / 5.0, mag = pow(10.0, floor(log10(raw)));
    double r = raw / mag, m = r <= 1.0 ? 1.0 : r <= 2.0 ? 2.0 : r <= 2.5 ? 2.5 : r <= 5.0 ? 5.0 : 10.0;
    double step = m * mag;
    int d = (int)-floor(log10(step) + 1e-9);
    *decimals = (d > 0 ? d : 0) + (m == 2.5);
    return step;
}

static void write_colour_bar(FILE *f, const heatmap *h, const layout *L)
{
    const unsigned *s = cmap_stops[h->cmap == HEATMAP_VIRIDIS];
    int dec;
    double y0 = L->top, range = (double)L->vmax - L->vmin, step = nice_step(range, &dec);
    fputs("<defs><linearGradient id=\"cbar\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">\n", f);
    for (int i = 0; i < NSTOPS; i++)
        fprintf(f, "<stop offset=\"%.4f\" stop-color=\"#%06x\"/>\n", i / (double)(NSTOPS - 1), s[i]);
    fputs("</linearGradient></defs>\n", f);
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"%.1f\" fill=\"url(#cbar)\" "
               "stroke=\"#000\" stroke-width=\"0.8\"/>\n",
            L->bar_x, y0, L->bar_h);
    for (double t = ceil(L->vmin / step - 1e-6) * step; t <= L->vmax + step * 1e-6; t += step) {
        double y = y0 + L->bar_h * (1.0 - (t - L->vmin) / range);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\"/>\n",
                L->bar_x + 14, y, L->bar_x + 18, y);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\">%.*f</text>\n", L->bar_x + 21,
                y + 3.5, dec, fabs(t) < step * 1e-6 ? 0.0 : t);
    }
}

static int write_svg(FILE *f, const heatmap *h)
{
    layout L = make_layout(h);
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
               "viewBox=\"0 0 %.0f %.0f\" font-family=\"" FONT "\">\n"
               "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n",
            L.width, L.height, L.width, L.height);
    if (h->title) {
        fprintf(f, "<text x=\"%.1f\" y=\"22\" font-size=\"14\" text-anchor=\"middle\">", L.width / 2);
        put_escaped(f, h->title);
        fputs("</text>\n", f);
    }
    for (int r = 0; r < h->grid_rows; r++)
        for (int c = 0; c < h->grid_cols; c++)
            write_panel(f, h, &L, r, c);
    write_colour_bar(f, h, &L);
    fputs("</svg>\n", f);
    return ferror(f) ? -1 : 0;
}

int heatmap_write_svg(const heatmap *h, const char *path)
{
    if (!h || !h->data || !path || h->grid_rows < 1 || h->grid_cols < 1 || h->rows < 1 ||
        h->cols < 1) {
        errno = EINVAL;
        return -1;
    }
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    int rc = write_svg(f, h);
    int saved = errno;
    if (fclose(f) != 0)
        return -1;
    errno = saved;
    return rc;
}
