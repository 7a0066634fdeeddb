"""Figures of the memory tasks' gradient propagation (Kerg et al., App. C): drawn by the suite for each
run (logged with it) and by ``recurbench report memory``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from recurbench.plots import panel_grid

INLINE_LEGEND = 4
"""At most this many curves: a legend in each panel; more (Table 5's seven models): one below the panels."""


def styled_lines(ax: Axes, curves: Mapping[str, Any], styles: Mapping[str, Mapping[str, Any]] | None) -> None:
    """A line per ``{label: (x, y)}``, styled by the label's first word in ``styles`` (colour, line
    style), else the colour cycle."""
    for i, (label, (x, y)) in enumerate(curves.items()):
        style = {"color": f"C{i}", **(styles or {}).get(label.split(" ")[0], {})}
        ax.plot(x, y, label=label, linewidth=1.2, **style)


def place_legends(fig: Figure, axes: Sequence[Axes]) -> None:
    """A legend per panel for a few curves; for more, one legend of every label below the panels."""
    entries: dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            entries.setdefault(label, handle)
    if len(entries) <= INLINE_LEGEND:
        for ax in axes:
            ax.legend(fontsize=7)
        return
    # As many columns as the figure's width holds for its longest label (8 pt: about 0.06 in a character,
    # plus the line sample): a single panel's legend was cut at both sides with four columns.
    column_width = 0.7 + 0.06 * max(len(label) for label in entries)
    ncols = max(1, min(len(entries), int(fig.get_figwidth() // column_width)))
    fig.legend(list(entries.values()), list(entries), loc="outside lower center", ncols=ncols, fontsize=8,
               frameon=False)


def gradient_figure(panels: Sequence[tuple[str, Mapping[str, Sequence[float]], int | None]], title: str,
                    styles: Mapping[str, Mapping[str, Any]] | None = None) -> Figure:
    """``||dL/dh_t||`` against t on a log scale: a panel per ``(title, {label: norms}, scored_from)``,
    a curve per label (styled by its first word in ``styles``: ``{"rnn": {"color": "C1", "linestyle":
    "--"}}``); the scored steps (``t >= scored_from``) shaded. A norm of 0 is left out."""
    fig, axes = panel_grid(len(panels), width=4.8, height=3.3, max_cols=3)
    for ax, (name, curves, scored_from) in zip(axes, panels, strict=True):
        lines = {}
        for label, norms in curves.items():
            values = np.asarray(norms, dtype=float)
            lines[label] = (np.arange(values.size), np.where(values > 0, values, np.nan))
        styled_lines(ax, lines, styles)
        if scored_from is not None:
            ax.axvspan(scored_from - 0.5, ax.get_xlim()[1], color="0.9", zorder=0)
        ax.set_yscale("log")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("t (shaded: scored steps)")
        ax.set_ylabel("||dL2/dh_t||")
        ax.grid(alpha=0.3, which="both")
    place_legends(fig, axes)
    fig.suptitle(title, fontsize=10)
    return fig
