"""Figures of a report, each built from plain DataFrames (no MLflow here) as a matplotlib ``Figure``.

Figures are made with ``matplotlib.figure.Figure`` directly, not pyplot: no global state, no GUI
backend, nothing left open between calls.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from recurbench.reporting.reference import LTSF_MODEL_ORDER, MINIGRID_AGENT_ORDER, RSA_PAIRS
from recurbench.reporting.rem import RemHead, rem_matrix

MAX_PANELS = 16
_AGENT_COLOURS = {agent: f"C{i}" for i, agent in enumerate(MINIGRID_AGENT_ORDER)}


def _model_style(model: str) -> dict[str, Any]:
    """A colour per model family; the baseline dashed, its RSA variant solid."""
    families = list(RSA_PAIRS)
    for i, base in enumerate(families):
        if model in (base, RSA_PAIRS[base]):
            return {"color": f"C{i}", "linestyle": "-" if model.startswith("rsa_") else "--"}
    return {"color": f"C{len(families) + hash(model) % 5}", "linestyle": ":"}


def _grid(n: int, *, width: float = 4.0, height: float = 3.0, max_cols: int = 4) -> tuple[Figure, list[Any]]:
    cols = min(n, max_cols)
    rows = math.ceil(n / cols)
    fig = Figure(figsize=(width * cols, height * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel().tolist()
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n]


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
    fig, axes = _grid(len(settings))
    for ax, (dataset, horizon) in zip(axes, settings, strict=True):
        here = val[(val["dataset"] == dataset) & (val["horizon"] == horizon)]
        last = int(here["step"].max())
        for model in [m for m in LTSF_MODEL_ORDER if m in set(here["model"])] + sorted(set(here["model"]) - set(LTSF_MODEL_ORDER)):
            mean = here[here["model"] == model].groupby("step")["value"].mean()
            style = _model_style(model)
            ax.plot(mean.index, mean.to_numpy(), marker=".", label=model, **style)  # steps are epochs 1..n
            t = test[(test["dataset"] == dataset) & (test["horizon"] == horizon) & (test["model"] == model)]["mean"]
            if len(t) and not math.isnan(float(t.iloc[0])):
                ax.plot([last + 1], [float(t.iloc[0])], marker="*", markersize=11, color=style["color"], linestyle="none")
        ax.set_title(f"{dataset}, horizon {horizon}")
        ax.set_xlabel("epoch (★ = test MSE)")
        ax.set_ylabel("validation MSE")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("Validation MSE per epoch, ★ test MSE\n(mean over seeds)", fontsize=10)
    return fig


def gate_boxplots(gates: pd.DataFrame) -> Figure | None:
    """RSA paper Fig. 3: the learned gate σ(μ) per layer, a box over runs (seeds × settings), a
    panel per RSA model. ``gates``: model, layer, value."""
    if gates.empty:
        return None
    models = [m for m in LTSF_MODEL_ORDER if m in set(gates["model"])] + sorted(set(gates["model"]) - set(LTSF_MODEL_ORDER))
    fig, axes = _grid(len(models), width=max(4.0, 0.9 * gates["layer"].nunique() + 1.5), height=3.5)
    for ax, model in zip(axes, models, strict=True):
        sub = gates[gates["model"] == model]
        layers = list(dict.fromkeys(sub["layer"]))
        data = [sub[sub["layer"] == layer]["value"].to_numpy() for layer in layers]
        ax.boxplot(data, tick_labels=layers)
        for x, values in enumerate(data, start=1):  # the runs themselves: few seeds make a box misleading
            ax.plot(np.full(values.size, x) + np.linspace(-0.08, 0.08, values.size), values, "o", color="C0", alpha=0.5, markersize=3)
        ax.set_ylim(0, 1)
        ax.set_title(model)
        ax.set_ylabel("gate σ(μ)")
        ax.tick_params(axis="x", rotation=45)
        ax.grid(alpha=0.3, axis="y")
    fig.suptitle("REM gate values per layer (share of attention given to the REMs)")
    return fig


def rem_heatmaps(heads: Sequence[RemHead], title: str, *, length: int = 48) -> Figure | None:
    """RSA paper Fig. 11 style: each head's learned REM as a heatmap, rows = layers."""
    if not heads:
        return None
    layers = list(dict.fromkeys(h.layer for h in heads))[:6]
    per_layer = {layer: sorted((h for h in heads if h.layer == layer), key=lambda h: h.head) for layer in layers}
    cols = max(len(v) for v in per_layer.values())
    fig = Figure(figsize=(2.3 * cols + 1, 2.5 * len(layers) + 0.6), layout="constrained")
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
            ax.set_title(f"h{head.head}: {head.label}", fontsize=7)
            if c == 0:
                ax.set_ylabel(layer if head.masked else f"{layer} (two-sided)", fontsize=8)
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
    fig, axes = _grid(len(usable), width=4.5)
    for ax, (model, example, truth, pred) in zip(axes, usable, strict=True):
        history = _series(example, "history", "input", "context")
        start = 0
        if history is not None:
            ax.plot(np.arange(history.size), history, color="0.5", label="history")
            start = history.size
        ax.plot(np.arange(start, start + truth.size), truth, color="k", label="truth")
        ax.plot(np.arange(start, start + pred.size), pred, color=_model_style(model)["color"], label="prediction")
        if history is not None:
            ax.axvline(start - 0.5, color="0.7", linestyle=":")
        ax.set_title(model)
        ax.set_xlabel("time step")
        if columns := example.get("columns"):
            ax.set_ylabel(f"{columns[-1]} (scaled)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
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
    fig, axes = _grid(len(envs))
    for ax, env in zip(axes, envs, strict=True):
        here = curves[curves["env"] == env]
        right = float(here["step"].max())
        for agent in [a for a in MINIGRID_AGENT_ORDER if a in set(here["agent"])] + sorted(set(here["agent"]) - set(MINIGRID_AGENT_ORDER)):
            colour = _AGENT_COLOURS.get(agent, "C5")
            sub = here[here["agent"] == agent]
            grid = np.unique(sub["step"].to_numpy())
            per_seed = np.stack([np.interp(grid, g["step"], g["value"]) for _, g in sub.groupby("seed")])
            ax.plot(grid, per_seed.mean(axis=0), color=colour, label=agent)
            if per_seed.shape[0] > 1:
                ax.fill_between(grid, per_seed.min(axis=0), per_seed.max(axis=0), color=colour, alpha=0.2)
            fin = finals[(finals["env"] == env) & (finals["agent"] == agent)]
            if len(fin):
                ax.plot([right * 1.04], [fin["train"].iloc[0]], "o", color=colour)
                ax.plot([right * 1.08], [fin["test"].iloc[0]], "*", markersize=11, color=colour)
        ax.set_title(env)
        ax.set_xlabel("environment steps (● train, ★ test reward)")
        ax.set_ylabel("mean episodic reward")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
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
            ax.bar(x, sub["mean"].to_numpy(dtype=float), width, yerr=sub["std"].fillna(0).to_numpy(dtype=float),
                   color=_AGENT_COLOURS.get(agent, "C5"), label=agent, capsize=2)
            if "paper" in sub:
                ax.plot(x, sub["paper"].to_numpy(dtype=float), "kx", markersize=8, label="paper" if a == 0 else None)
        ax.set_xticks(np.arange(len(envs)), envs, rotation=30)
        ax.set_title(metric.replace("_", " ") + (" (train env)" if metric == "train_reward" else " (larger test env)"))
        ax.set_ylim(0, 1.05)
        ax.grid(alpha=0.3, axis="y")
    axes[0].set_ylabel("mean reward")
    axes[1].legend(fontsize=8)
    fig.suptitle("Train small, test large: ours (bars, ± std over seeds), Kerg et al. Table 4 (×)")
    return fig
