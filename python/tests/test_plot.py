"""show_heatmaps draws d2l's grid: one panel per (row, column), the weights as images."""
import numpy as np
import pytest

import clattn

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")


def test_show_heatmaps(ctx):
    w = clattn.masked_softmax(np.random.default_rng(0).random((2, 5, 4, 6), np.float32),
                              [3, 2])
    fig = clattn.show_heatmaps(w, xlabel="Keys", ylabel="Queries",
                               titles=[f"Head {i}" for i in range(5)])
    panels = [ax for ax in fig.axes if ax.images]
    assert len(panels) == 10  # 2 x 5, plus the colour bar's axes
    host = w.numpy()
    for n, ax in enumerate(panels):
        assert np.array_equal(ax.images[0].get_array(), host[n // 5, n % 5])
    assert panels[0].get_title() == "Head 0" and panels[5].get_xlabel() == "Keys"
    one = clattn.show_heatmaps(host[0, 0])  # a single matrix: one panel
    assert len([ax for ax in one.axes if ax.images]) == 1
    with pytest.raises(ValueError, match="matrices"):
        clattn.show_heatmaps(np.zeros(3))
