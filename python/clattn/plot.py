"""d2l's show_heatmaps, over clattn Arrays or NumPy arrays (matplotlib is imported when called)."""
import numpy as np

from .array import Array, to_numpy


def show_heatmaps(matrices, xlabel="Keys", ylabel="Queries", titles=None, figsize=(2.5, 2.5),
                  cmap="Reds"):
    """Draws matrices (rows, cols, Q, K) as d2l does: a grid of panels sharing their axes, rows
    are queries and columns keys, one colour bar. 2-D and 3-D inputs are one panel and one row
    of panels. Reads an Array back (waiting for the queue). Returns the matplotlib Figure."""
    import matplotlib.pyplot as plt

    m = matrices.numpy() if isinstance(matrices, Array) else to_numpy(matrices)
    m = np.asarray(m, np.float32)
    if not 2 <= m.ndim <= 4:
        raise ValueError(f"matrices: expected 2 to 4 dims (rows, cols, Q, K), got shape {m.shape}")
    m = m.reshape((1,) * (4 - m.ndim) + m.shape)
    num_rows, num_cols = m.shape[:2]
    if titles is not None and len(titles) < num_cols:
        raise ValueError(f"titles: {len(titles)} titles for {num_cols} columns")
    fig, axes = plt.subplots(num_rows, num_cols, figsize=figsize, sharex=True, sharey=True,
                             squeeze=False)
    vmax = float(np.nanmax(m)) if m.size else 1.0
    for i in range(num_rows):
        for j in range(num_cols):
            ax = axes[i, j]
            pcm = ax.imshow(m[i, j], cmap=cmap, vmin=0.0, vmax=vmax)
            if i == num_rows - 1:
                ax.set_xlabel(xlabel)
            if j == 0:
                ax.set_ylabel(ylabel)
            if titles:
                ax.set_title(titles[j])
    fig.colorbar(pcm, ax=axes, shrink=0.6)
    return fig
