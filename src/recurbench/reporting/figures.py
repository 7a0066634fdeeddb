"""Figures of a report, each built from plain DataFrames (no MLflow here) as a matplotlib ``Figure``.

Figures are made with ``matplotlib.figure.Figure`` directly, not pyplot: no global state, no GUI
backend, nothing left open between calls.
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from recurbench.plots import count_label, panel_grid
from recurbench.reference import LTSF_MODEL_ORDER, MINIGRID_AGENT_ORDER, RSA_PAIRS
from recurbench.reporting.rem import RemHead, rem_matrix

MAX_PANELS = 16
GATE_PANELS_PER_ROW = 3
_AGENT_COLOURS = {agent: f"C{i}" for i, agent in enumerate(MINIGRID_AGENT_ORDER)}


TEST_SLOT = 0.22
"""Width, in epochs, of one model's slot in the loss curves' test column."""


def _model_style(model: str) -> dict[str, Any]:
    """A colour per model family; the baseline dashed, its RSA variant solid. A model outside the
    families (a plugin's) gets a colour from its name's CRC, the same in every report (``hash`` of a
    string changes with each process)."""
    families = list(RSA_PAIRS)
    for i, base in enumerate(families):
        if model in (base, RSA_PAIRS[base]):
            return {"color": f"C{i}", "linestyle": "-" if model.startswith("rsa_") else "--"}
    return {"color": f"C{len(families) + zlib.crc32(model.encode()) % 5}", "linestyle": ":"}


def _legend_outside(fig: Figure, axes: Sequence[Any], *extra: Line2D) -> None:
    """One legend for every panel, right of the grid: inside a panel it covers data (the stars and
    dots drawn after the last step sit at the right edge, where matplotlib's "best" spot often is)."""
    handles: dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    for handle in extra:
        handles.setdefault(str(handle.get_label()), handle)
    fig.legend(list(handles.values()), list(handles), loc="outside right center", fontsize=8)


def _marker(marker: str, label: str, **style: Any) -> Line2D:
    """A legend entry for a marker drawn in every model's colour (grey here)."""
    return Line2D([], [], marker=marker, color="0.35", linestyle="none", label=label, **style)


def layer_order(name: str) -> tuple[Any, ...]:
    """Sort key for attention layer names in the network's order: the encoder (or a single stack's
    blocks) before the decoder, by index, self- before cross-attention (the logs name them
    alphabetically: ``decoder.0.cross`` first)."""
    parts = re.split(r"[._/]", name)
    stack = 1 if "decoder" in parts else 0
    numbers = tuple(int(p) for p in parts if p.isdigit())
    return stack, numbers, "cross" in parts, name


def loss_curves(curves: pd.DataFrame, test: pd.DataFrame) -> Figure | None:
    """LTSF: validation loss per epoch (mean over seeds) per dataset × horizon, a line per model,
    with the test MSE (mean over seeds) as a star after the last epoch.

    ``curves``: dataset, horizon, model, seed, metric (``train_loss``/``val_loss``), step, value.
    ``test``: dataset, horizon, model, mean.
    """
    val = curves[curves["metric"] == "val_loss"]
    if val.empty:
        return None
    settings = val[["dataset", "horizon"]].drop_duplicates().head(MAX_PANELS).itertuples(index=False)
    settings = list(settings)
    fig, axes = panel_grid(len(settings), width=5.0, height=3.6)
    for ax, (dataset, horizon) in zip(axes, settings, strict=True):
        here = val[(val["dataset"] == dataset) & (val["horizon"] == horizon)]
        first, last = int(here["step"].min()), int(here["step"].max())
        models = [m for m in LTSF_MODEL_ORDER if m in set(here["model"])] + sorted(set(here["model"]) - set(LTSF_MODEL_ORDER))
        test_x = last + 0.5 + TEST_SLOT * (len(models) + 1) / 2  # the test column's middle, right of the divider
        for i, model in enumerate(models):
            mean = here[here["model"] == model].groupby("step")["value"].mean()
            style = _model_style(model)
            ax.plot(mean.index, mean.to_numpy(), marker=".", label=model, **style)  # steps are epochs 1..n
            t = test[(test["dataset"] == dataset) & (test["horizon"] == horizon) & (test["model"] == model)]["mean"]
            if len(t) and not math.isnan(float(t.iloc[0])):
                # A slot of its own per model in the test column, so that close test MSEs never overlap;
                # a baseline's star hollow, its RSA variant's filled (the lines' dashed and solid).
                x = test_x + TEST_SLOT * (i - (len(models) - 1) / 2)
                face = style["color"] if style["linestyle"] == "-" else "white"
                ax.plot([x], [float(t.iloc[0])], marker="*", markersize=10, color=style["color"], markerfacecolor=face,
                        markeredgewidth=1.2, linestyle="none")
        # Whole epochs on the axis, and the test MSE's column labelled as such, not as one more epoch.
        epochs = [int(t) for t in MaxNLocator(nbins=6, integer=True).tick_values(first, last) if first <= t <= last]
        ax.set_xticks([*epochs, test_x], [*map(str, epochs), "test"])
        ax.axvline(last + 0.5, color="0.75", linewidth=0.8)
        ax.set_xlim(first - 0.3, test_x + TEST_SLOT * len(models) / 2 + 0.2)
        ax.set_title(f"{dataset}, horizon {horizon}")
        ax.set_xlabel("epoch")
        ax.set_ylabel("validation MSE (★ test MSE)")
        ax.grid(alpha=0.3)
    _legend_outside(fig, axes, _marker("*", "test MSE (hollow: baseline)", markersize=10))
    fig.suptitle("Validation MSE per epoch, ★ test MSE\n(mean over seeds)", fontsize=10)
    return fig


def gate_boxplots(gates: pd.DataFrame, order: Sequence[str] = LTSF_MODEL_ORDER) -> Figure | None:
    """RSA paper Fig. 3: the learned gate σ(μ) per layer, a box over runs (seeds × settings), a
    panel per RSA model. ``gates``: model, layer, value. Panels come in ``order``, then any others
    alphabetically."""
    if gates.empty:
        return None
    models = [m for m in order if m in set(gates["model"])] + sorted(set(gates["model"]) - set(order))
    # Each panel as wide as its own model's layers need (Informer's encoder/decoder names and the
    # single-stack models' blocks share no box), at most GATE_PANELS_PER_ROW to a row.
    most_layers = int(gates.groupby("model")["layer"].nunique().max())
    fig, axes = panel_grid(len(models), width=max(3.6, 0.7 * most_layers + 1.4), height=3.6, max_cols=GATE_PANELS_PER_ROW)
    for ax, model in zip(axes, models, strict=True):
        sub = gates[gates["model"] == model]
        layers = sorted(dict.fromkeys(sub["layer"]), key=layer_order)
        data = [sub[sub["layer"] == layer]["value"].to_numpy() for layer in layers]
        ax.boxplot(data, tick_labels=layers)
        for x, values in enumerate(data, start=1):  # the runs themselves: few seeds make a box misleading
            ax.plot(np.full(values.size, x) + np.linspace(-0.08, 0.08, values.size), values, "o", color="C0", alpha=0.5, markersize=3)
        ax.set_ylim(0, 1)
        ax.set_title(model)
        ax.set_ylabel("gate σ(μ)")
        ax.tick_params(axis="x", rotation=45)
        ax.grid(alpha=0.3, axis="y")
    fig.suptitle("REM gate values per layer\n(share of attention given to the REMs)")  # one panel: 3.6 in wide
    return fig


def rem_heatmaps(heads: Sequence[RemHead], title: str, *, length: int = 48) -> Figure | None:
    """RSA paper Fig. 11 style: each head's learned REM as a heatmap, rows = layers."""
    if not heads:
        return None
    layers = sorted(dict.fromkeys(h.layer for h in heads), key=layer_order)[:6]
    per_layer = {layer: sorted((h for h in heads if h.layer == layer), key=lambda h: h.head) for layer in layers}
    cols = max(len(v) for v in per_layer.values())
    fig = Figure(figsize=(2.1 * cols + 1, 2.7 * len(layers) + 0.6), layout="constrained")
    axes = fig.subplots(len(layers), cols, squeeze=False)
    image = None
    for r, layer in enumerate(layers):
        for c in range(cols):
            ax = axes[r][c]
            ax.set_xticks([])
            ax.set_yticks([])
            if c >= len(per_layer[layer]):
                ax.set_visible(False)
                continue
            head = per_layer[layer][c]
            image = ax.imshow(rem_matrix(head, length), cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
            # Two lines at a readable size: the head and its kind, then its parameters (one line at 7 pt
            # was too small to read at the report's width).
            kind, _, params = head.label.partition(" ")
            ax.set_title(f"h{head.head}: {kind}\n{params}", fontsize=10)
            if c == 0:
                ax.set_ylabel(layer if head.masked else f"{layer}\n(two-sided)", fontsize=10)
    if image is not None:
        fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.6)
    fig.suptitle(f"{title} (T = {length}; rows = query, columns = key)")
    return fig


def _series(example: Mapping[str, Any], *names: str) -> np.ndarray | None:
    for name in names:
        if name in example and example[name] is not None:
            a = np.asarray(example[name], dtype=float)
            return a[:, -1] if a.ndim == 2 else a.ravel()  # multivariate: the last column is the target
    return None


def forecast_figure(examples: Sequence[tuple[str, Mapping[str, Any]]], title: str) -> Figure | None:
    """Prediction vs truth on a test window, a panel per model. Each example is a mapping with
    ``truth`` and ``prediction`` (and optionally ``history``), each [T] or [T, C] (last column shown),
    and optionally ``columns`` (the last one labels the axis)."""
    usable = [(m, e, _series(e, "truth", "true", "target", "y_true"), _series(e, "prediction", "pred", "y_pred")) for m, e in examples]
    usable = [u for u in usable if u[2] is not None and u[3] is not None]
    if not usable:
        return None
    # Two to a row: a baseline beside its RSA variant (the models come in LTSF_MODEL_ORDER), on one
    # value range, so that the panels compare at a glance.
    fig, axes = panel_grid(len(usable), width=4.5, max_cols=2)
    shown = [a for _, e, truth, pred in usable for a in (truth, pred, _series(e, "history", "input", "context")) if a is not None]
    low, high = min(float(np.nanmin(a)) for a in shown), max(float(np.nanmax(a)) for a in shown)
    margin = 0.05 * (high - low or 1.0)
    for ax, (model, example, truth, pred) in zip(axes, usable, strict=True):
        history = _series(example, "history", "input", "context")
        start = 0
        if history is not None:
            ax.plot(np.arange(history.size), history, color="0.5", label="history")
            start = history.size
        ax.plot(np.arange(start, start + truth.size), truth, color="k", label="truth")
        ax.plot(np.arange(start, start + pred.size), pred, color=_model_style(model)["color"], label="prediction (model's colour)")
        ax.set_ylim(low - margin, high + margin)
        if history is not None:
            ax.axvline(start - 0.5, color="0.7", linestyle=":")
        ax.set_title(model)
        ax.set_xlabel("time step")
        if columns := example.get("columns"):
            ax.set_ylabel(f"{columns[-1]} (scaled)")
        ax.grid(alpha=0.3)
    _legend_outside(fig, axes)
    fig.suptitle(title)
    return fig


def learning_curves(curves: pd.DataFrame, finals: pd.DataFrame) -> Figure | None:
    """MiniGrid: rollout reward vs environment steps on the training env, mean over seeds (band:
    min–max), a panel per env pair; at the end, ● = final train reward, ★ = test reward (larger env).

    ``curves``: env, agent, seed, step, value. ``finals``: env, agent, train, test (means).
    """
    if curves.empty:
        return None
    envs = list(dict.fromkeys(curves["env"]))[:MAX_PANELS]
    fig, axes = panel_grid(len(envs), width=4.6, height=3.2)
    for ax, env in zip(axes, envs, strict=True):
        here = curves[curves["env"] == env]
        right = float(here["step"].max())
        gap = 0.06 * right  # the final rewards to the right of the curves, a column per core
        agents = [a for a in MINIGRID_AGENT_ORDER if a in set(here["agent"])] + sorted(set(here["agent"]) - set(MINIGRID_AGENT_ORDER))
        for i, agent in enumerate(agents):
            colour = _AGENT_COLOURS.get(agent, "C5")
            sub = here[here["agent"] == agent]
            grid = np.unique(sub["step"].to_numpy())
            per_seed = np.stack([np.interp(grid, g["step"], g["value"]) for _, g in sub.groupby("seed")])
            # A line style per core too: cores that learn alike (or not at all) draw the same line.
            ax.plot(grid, per_seed.mean(axis=0), color=colour, linestyle=("-", "--", "-.")[i % 3], label=agent)
            if per_seed.shape[0] > 1:
                ax.fill_between(grid, per_seed.min(axis=0), per_seed.max(axis=0), color=colour, alpha=0.2)
            fin = finals[(finals["env"] == env) & (finals["agent"] == agent)]
            if len(fin):  # side by side, so that equal rewards (0 for every core, say) stay apart
                ax.plot([right + gap * (1 + i)], [fin["train"].iloc[0]], "o", color=colour)
                ax.plot([right + gap * (2 + len(agents) + i)], [fin["test"].iloc[0]], "*", markersize=11, color=colour)
        steps = [t for t in MaxNLocator(nbins=4).tick_values(0, right) if 0 <= t <= right]
        ax.set_xticks([*steps, right + gap * (1 + len(agents) / 2 - 0.5), right + gap * (2 + 1.5 * len(agents) - 0.5)],
                      [*(count_label(t) for t in steps), "train", "test"])
        ax.axvline(right + gap * 0.5, color="0.75", linewidth=0.8)
        ax.set_title(env)
        ax.set_xlabel("environment steps")
        ax.set_ylabel("mean episodic reward")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    _legend_outside(fig, axes, _marker("o", "final train reward"), _marker("*", "test reward (larger env)", markersize=11))
    fig.suptitle("Learning curves on the training environment (mean over seeds, band = min–max)")
    return fig


def generalisation_bars(cells: pd.DataFrame) -> Figure | None:
    """MiniGrid: train and test reward per env pair and agent (ours: bars with std; paper: black
    markers). ``cells``: the comparison's long-form cells (env, agent, metric, mean, std, paper?)."""
    rewards = cells[cells["metric"].isin(["train_reward", "test_reward"])]
    if rewards.empty:
        return None
    envs = list(dict.fromkeys(rewards["env"]))
    agents = [a for a in MINIGRID_AGENT_ORDER if a in set(rewards["agent"])] + sorted(set(rewards["agent"]) - set(MINIGRID_AGENT_ORDER))
    fig = Figure(figsize=(max(9.0, 0.9 * len(envs) * len(agents)), 4.2), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    width = 0.8 / len(agents)
    for ax, metric in zip(axes, ["train_reward", "test_reward"], strict=True):
        for a, agent in enumerate(agents):
            sub = rewards[(rewards["metric"] == metric) & (rewards["agent"] == agent)].set_index("env").reindex(envs)
            x = np.arange(len(envs)) + (a - (len(agents) - 1) / 2) * width
            means = sub["mean"].to_numpy(dtype=float)
            bars = ax.bar(x, means, width, yerr=sub["std"].fillna(0).to_numpy(dtype=float),
                          color=_AGENT_COLOURS.get(agent, "C5"), label=agent, capsize=2)
            # The value on each bar: a reward of 0 draws no bar, and would read as a core not run.
            ax.bar_label(bars, labels=["" if math.isnan(m) else f"{m:.2f}" for m in means], fontsize=6, padding=1)
            if "paper" in sub:
                ax.plot(x, sub["paper"].to_numpy(dtype=float), "kx", markersize=8)
        ax.set_xticks(np.arange(len(envs)), envs, rotation=30)
        ax.set_title(metric.replace("_", " ") + (" (train env)" if metric == "train_reward" else " (larger test env)"))
        ax.set_ylim(0, 1.1)
        ax.grid(alpha=0.3, axis="y")
    axes[0].set_ylabel("mean reward")
    paper = [Line2D([], [], marker="x", color="k", linestyle="none", markersize=8, label="paper (Table 4)")]
    _legend_outside(fig, axes, *(paper if "paper" in rewards and rewards["paper"].notna().any() else []))
    fig.suptitle("Train small, test large: ours (bars, ± std over seeds), Kerg et al. Table 4 (×)")
    return fig
