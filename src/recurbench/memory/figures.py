"""Figures of the memory tasks' gradient propagation (Kerg et al., App. C): drawn by the suite for each
run (logged with it) and by ``recurbench report memory``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

from recurbench.plots import panel_grid


def gradient_figure(panels: Sequence[tuple[str, Mapping[str, Sequence[float]], int | None]], title: str,
                    colours: Mapping[str, str] | None = None) -> Figure:
    """``||dL/dh_t||`` against t on a log scale: a panel per ``(title, {label: norms}, scored_from)``,
    a curve per label; the scored steps (``t >= scored_from``) shaded. A norm of 0 is left out."""
    fig, axes = panel_grid(len(panels), width=4.8, height=3.3, max_cols=3)
    for ax, (name, curves, scored_from) in zip(axes, panels, strict=True):
        for i, (label, norms) in enumerate(curves.items()):
            values = np.asarray(norms, dtype=float)
            values = np.where(values > 0, values, np.nan)
            ax.plot(np.arange(values.size), values, label=label, linewidth=1.2,
                    color=(colours or {}).get(label.split(" ")[0], f"C{i}"))
        if scored_from is not None:
            ax.axvspan(scored_from - 0.5, ax.get_xlim()[1], color="0.9", zorder=0)
        ax.set_yscale("log")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("t (shaded: scored steps)")
        ax.set_ylabel("||dL2/dh_t||")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    return fig
