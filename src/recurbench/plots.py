"""Figure layout shared by every figure recurbench draws (the reports, and the figures a run logs)."""

from __future__ import annotations

import math
from typing import Any

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator


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


def count_label(count: float) -> str:
    """``240k``, ``1.5M``: a count of steps or updates short enough for a tick label."""
    for scale, suffix in ((1e6, "M"), (1e3, "k")):
        if count >= scale:
            return f"{count / scale:g}{suffix}"
    return f"{count:g}"


def count_ticks(axis: Any, nbins: int = 5) -> None:
    """Give an axis of counts (updates, steps, trials) at most ``nbins`` intervals at whole numbers,
    labelled by :func:`count_label`: six-digit labels such as ``150000`` run into each other on a panel
    4-5 inches wide, and a short axis (3 trials) would otherwise be ticked at 0.25 steps."""
    axis.set_major_locator(MaxNLocator(nbins=nbins, steps=[1, 2, 2.5, 5, 10], integer=True))
    axis.set_major_formatter(FuncFormatter(lambda value, _position: count_label(value)))
