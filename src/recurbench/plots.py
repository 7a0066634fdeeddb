"""Figure layout shared by every figure recurbench draws (the reports, and the figures a run logs)."""

from __future__ import annotations

import math
from typing import Any

from matplotlib.figure import Figure


def panel_grid(n: int, *, width: float = 4.0, height: float = 3.0, max_cols: int = 4) -> tuple[Figure, list[Any]]:
    """A figure of ``n`` panels, ``max_cols`` to a row (``width`` x ``height`` inches each), and its
    ``n`` axes; the grid's unused cells are hidden."""
    cols = min(n, max_cols)
    rows = math.ceil(n / cols)
    fig = Figure(figsize=(width * cols, height * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel().tolist()
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n]
