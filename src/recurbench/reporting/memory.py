"""The ``memory`` suite in ``compare`` and ``report`` (Kerg et al. 2020, App. C-D: Table 5, Fig. 3, Fig. 4).

Comparison: per task, T, core and memory setting (``nu``/``rho``), the held-out ``accuracy`` and the
training-batch ``train_accuracy`` (what the reference code logs) over seeds, each beside Table 5's
LSTM or RelLSTM cell for copy at that T (the paper gives no denoise table, no MemLSTM column -- its
MemRNN is an RNN -- and not the nu / rho of its RelLSTM).

Figures, from what :mod:`recurbench.suites.memory` logs:

* ``||dL2/dh_t||`` against t on a log scale, at initialisation and after training: a panel per task
  and T, a curve per core (geometric mean over seeds; the grid's runs, not the kappa sweep's);
  cf. App. C Fig. 3;
* the kappa trade-off: final accuracy and the mean gradient norm over the data steps against
  kappa = nu + rho, a column per task and T with a sweep, a line per sweep (the runs' ``sweep`` tag);
* training loss against updates, a panel per task and T, a line per core (cf. App. D Fig. 4), with
  the loss of a model that outputs blanks and guesses the data (``c ln(labels) / L``).
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure as MplFigure

from recurbench.memory.figures import gradient_figure, place_legends, styled_lines
from recurbench.plots import count_ticks, panel_grid
from recurbench.records import RunRecord
from recurbench.reference import KERG_TABLE5_COLUMNS, kerg_table5_reference
from recurbench.reporting import figures
from recurbench.reporting.compare import Comparison, _complete_grid
from recurbench.reporting.render import MISSING, format_cell
from recurbench.reporting.report import Figure, _save
from recurbench.reporting.runs import SuiteRuns
from recurbench.suites.memory import CORE_SETTINGS, budget_text

METRICS = ("accuracy", "train_accuracy")
"""The main table's metrics; ``updates`` and ``solved_at`` make each Table 5 cell's budget."""
CORE_ORDER = (*KERG_TABLE5_COLUMNS, "memlstm")
SHOWN_NAMES = {**KERG_TABLE5_COLUMNS, "memlstm": "MemLSTM"}
"""Each built-in core as the paper writes it: Table 5's columns, and MemLSTM (Table 4 and App. B)."""
TASK_ORDER = ("copy", "denoise")
#: A colour and a line style per core, so that the eight stay apart in one panel: the LSTM family
#: solid, the RNN family dashed, SAB dotted.
CORE_STYLES: dict[str, dict[str, str]] = {
    "lstm": {"color": "C0", "linestyle": "-"},
    "rnn": {"color": "C1", "linestyle": "--"},
    "exprnn": {"color": "C2", "linestyle": "--"},
    "memrnn": {"color": "C4", "linestyle": "--"},
    "sab": {"color": "C5", "linestyle": ":"},
    "relrnn": {"color": "C3", "linestyle": "--"},
    "rellstm": {"color": "C3", "linestyle": "-"},
    "memlstm": {"color": "C4", "linestyle": "-"},
}
BASELINE_STYLE: dict[str, object] = {"color": "0.4", "linestyle": "-.", "linewidth": 1}
"""The loss figure's blanks-and-guessing line: grey dash-dot, a style no core's line has (it was
dotted, as SAB's is)."""


def table5_reference() -> pd.DataFrame:
    """Long form: ``task`` (copy), ``T``, ``model``, ``metric`` (each of :data:`METRICS`), ``paper``."""
    paper = kerg_table5_reference()
    return pd.DataFrame([("copy", r.T, r.model, metric, r.paper) for r in paper.itertuples() for metric in METRICS],
                        columns=["task", "T", "model", "metric", "paper"])


def _order(values: Any, order: Sequence[str]) -> dict[str, int]:
    present = list(dict.fromkeys(values))
    ranked = [v for v in order if v in present] + sorted(set(present) - set(order))
    return {v: i for i, v in enumerate(ranked)}


def _number(text: Any) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return -1.0  # "-" (the LSTM's nu / rho) first


def memory_complete(comp: Comparison, reference: str, frame: pd.DataFrame | None = None) -> None:
    """Rows in task, T, core, nu, rho order with both metrics, Table 5's cell beside ours; then a
    table per task in Table 5's layout (:func:`table5_layout`)."""
    cells = comp.cells[comp.cells["metric"].isin(METRICS)]
    keys = ["task", "T", "model", "nu", "rho"]
    grid = cells[keys].drop_duplicates().merge(pd.DataFrame({"metric": list(METRICS)}), how="cross")
    cells = _complete_grid(cells, grid)
    if reference == "paper":
        cells = cells.merge(table5_reference(), on=["task", "T", "model", "metric"], how="left")
        cells["diff"] = cells["mean"] - cells["paper"]
    tasks, models = _order(cells["task"], TASK_ORDER), _order(cells["model"], CORE_ORDER)
    cells = cells.assign(_t=cells["task"].map(tasks), _m=cells["model"].map(models), _nu=cells["nu"].map(_number),
                         _rho=cells["rho"].map(_number), _k=cells["metric"].map({m: i for i, m in enumerate(METRICS)}))
    comp.cells = (cells.sort_values(["_t", "T", "_m", "_nu", "_rho", "_k"])
                  .drop(columns=["_t", "_m", "_nu", "_rho", "_k"]).reset_index(drop=True))
    comp.notes.append(
        "accuracy: held-out batches after the last update; train_accuracy: training batches, mean over the "
        "last log window (what the reference code logs). Table 5 gives copy accuracy per model (the nu / rho "
        "of RelRNN in Table 6, of RelLSTM nowhere) and says neither whether it is final or best nor how many "
        "seeds; its budget is 200,000 updates (the reference code's)."
    )
    if frame is not None:
        # A run at other settings (a --set probe) stands in for no cell; the list of runs that did not
        # finish shows it with how its settings differ.
        at_settings = comp.unresolved[comp.unresolved["settings"] == ""]
        for task in _order([*frame["task"], *at_settings["task"].dropna()], TASK_ORDER):
            unfinished, ours = at_settings[at_settings["task"] == task], frame[frame["task"] == task]
            # The paper's cells only where it has a row for one of our T (a quick profile's T = 10: none).
            lengths = set(pd.to_numeric(pd.concat([ours["T"], unfinished["T"]]), errors="coerce").dropna().astype(int))
            with_paper = reference == "paper" and task == "copy" and bool(lengths & set(kerg_table5_reference()["T"]))
            table, chosen, waiting = table5_layout(ours, with_paper=with_paper, unfinished=unfinished)
            what = "beside Kerg et al.'s Table 5" if with_paper else "in Table 5's layout"
            comp.tables.append((f"{task}: held-out accuracy per model and T, with the updates behind it, {what}", table))
            if waiting:
                comp.notes.append(f"{task}, Table 5's layout: a cell that no run finished shows the last held-out "
                                  "evaluation of its run that did not finish and the update it was made at "
                                  "(running: at work now; stopped: ended; driver gone: left running by a driver "
                                  "that no longer exists; the last two are continued by --skip-finished)")
            if chosen:
                comp.notes.append(f"{task}, Table 5's layout: where a model ran at several nu / rho at one T (a kappa "
                                  f"sweep), its cell is the setting it ran at the most T: {', '.join(chosen)}")


def _cell_text(runs: pd.DataFrame) -> str:
    """Held-out accuracy over the seeds (``mean ± std (n=k)``) and the updates behind it."""
    values = runs["accuracy"].dropna()
    s = pd.Series({"mean": values.mean() if len(values) else math.nan,
                   "std": values.std() if len(values) > 1 else math.nan, "n": len(values)}, dtype=object)
    budget = budget_text([{"updates": r.updates, "solved": float(not math.isnan(r.solved_at)), "solved_at": r.solved_at}
                          for r in runs.itertuples()])
    return format_cell(s, reference=False, sep="") + ("" if budget == "-" else f"\n{budget}")


def _unfinished_text(runs: pd.DataFrame) -> str:
    """A cell that no run finished: how far its runs that did not finish got (their last held-out
    evaluation and its update) and whether they are at work now (``running``), ended (``stopped``) or
    left RUNNING by a driver that is gone (``driver gone``)."""
    if len(runs) == 1:
        r = runs.iloc[0]
        state = ("driver gone" if r["driver_gone"] else "running") if r["status"] == "RUNNING" else "stopped"
        if math.isnan(r["last_eval_accuracy"]):
            return f"no evaluation yet\n({state})"
        at = ", last evaluation" if math.isnan(r["last_eval_update"]) else f" at {int(r['last_eval_update']):,}"
        return f"{r['last_eval_accuracy']:.3f}{at}\n({state})"
    accuracy = runs["last_eval_accuracy"].dropna()
    seen = f", last evaluations {accuracy.min():.3f}-{accuracy.max():.3f}" if len(accuracy) else ""
    return f"{len(runs)} runs not finished{seen}"


def table5_layout(frame: pd.DataFrame, *, with_paper: bool, unfinished: pd.DataFrame | None = None
                  ) -> tuple[pd.DataFrame, list[str], bool]:
    """One task's runs (:func:`recurbench.reporting.compare.runs_frame`, with ``updates`` and
    ``solved_at``) as Table 5 is laid out: a row per T, a column per model (Table 5's seven first,
    named as there, every one of them ``with_paper``; then the others). A cell: our held-out accuracy
    over seeds, ``solved at N`` or the updates run, and the paper's cell. Where a model ran at several
    nu / rho at one T, the cell is the setting it ran at the most T (then the most runs); the second
    value names those choices (``relrnn: nu=10, rho=10``). A cell that no run finished shows the runs of
    ``unfinished`` (:attr:`recurbench.reporting.compare.Comparison.unresolved`, at the settings shown) there:
    how far they got; the third value says whether some cell does."""
    if unfinished is None or unfinished.empty:
        unfinished = pd.DataFrame(columns=["T", "model", "status", "last_eval_accuracy", "last_eval_update", "driver_gone"])
    unfinished = unfinished.assign(T=pd.to_numeric(unfinished["T"], errors="coerce")).dropna(subset=["T"])
    unfinished = unfinished.astype({"T": int})
    frame = frame.assign(_setting=list(zip(frame["nu"].astype(str), frame["rho"].astype(str), strict=True)))
    paper = {(r.T, r.model): r.paper_text for r in kerg_table5_reference().itertuples()}
    present = set(frame["model"]) | set(unfinished["model"])
    models = [m for m in CORE_ORDER if m in present or (with_paper and m in KERG_TABLE5_COLUMNS)]
    models += sorted(present - set(models))
    chosen: list[str] = []
    columns: dict[str, list[str]] = {}
    shows_unfinished = False
    lengths = sorted(set(frame["T"]) | set(unfinished["T"]))
    for model in models:
        runs = frame[frame["model"] == model]
        reach = runs.groupby("_setting")["T"].nunique().to_dict()
        size = runs.groupby("_setting").size().to_dict()
        name = SHOWN_NAMES.get(model, model)
        column = []
        for T in lengths:
            here = runs[runs["T"] == T]
            settings = sorted(set(here["_setting"]), key=lambda st: (-reach[st], -size[st], st))
            if len(settings) > 1:
                chosen.append(f"{model} at T = {T}: nu={settings[0][0]}, rho={settings[0][1]}")
            waiting = unfinished[(unfinished["model"] == model) & (unfinished["T"] == T)]
            shows_unfinished |= not settings and len(waiting) > 0
            ours = (_cell_text(here[here["_setting"] == settings[0]]) if settings
                    else _unfinished_text(waiting) if len(waiting) else MISSING)
            column.append(ours + (f"\npaper {paper.get((T, model), MISSING)}" if with_paper else ""))
        columns[name if name.lower() == model else f"{name} ({model})"] = column
    return pd.DataFrame({"T": lengths, **columns}), chosen, shows_unfinished


# ------------------------------------------------------------------------------------------ figures


def _gradient_records(runs: SuiteRuns) -> list[tuple[RunRecord, dict[str, Any]]]:
    out = []
    for r in runs.finished:
        if "gradient_norms.json" in runs.artifact_paths(r.run_id):
            out.append((r, json.loads(runs.download_artifact(r.run_id, "gradient_norms.json").read_text())))
    return out


def _geometric_mean(rows: Sequence[Sequence[float]]) -> np.ndarray:
    """Per t, the geometric mean over seeds of the positive norms (NaN where none is: a norm that
    underflowed to 0 in every seed, as an LSTM's does a hundred steps back)."""
    a = np.asarray(rows, dtype=float)
    logs = np.log(np.where(a > 0, a, np.nan))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN column: "mean of empty slice"
        return np.exp(np.nanmean(logs, axis=0))


def _label(tags: Mapping[str, str]) -> str:
    """The core first (it picks the line's style), then Table 5's name where it differs (orth-RNN) and
    a relevancy-screened core's nu and rho."""
    core = tags.get("model", "?")
    extra = [name] if (name := SHOWN_NAMES.get(core, core)).lower() != core else []
    if "nu" in CORE_SETTINGS.get(core, ()):
        extra.append(f"ν={tags.get('nu')}, ρ={tags.get('rho')}")
    return f"{core} ({', '.join(extra)})" if extra else core


def gradient_panels(records: Sequence[tuple[RunRecord, Mapping[str, Any]]], which: str
                    ) -> list[tuple[str, dict[str, np.ndarray], int | None]]:
    """Per task and T (the grid's runs): ``{core label: geometric mean over seeds of the norms}``."""
    groups: dict[tuple[str, int], dict[str, list[list[float]]]] = {}
    scored: dict[tuple[str, int], int | None] = {}
    for r, data in records:
        if r.tags.get("study") == "kappa" or which not in data:
            continue
        key = (r.tags.get("task", "?"), int(r.tags.get("T", 0)))
        groups.setdefault(key, {}).setdefault(_label(r.tags), []).append(list(data[which]))
        scored[key] = data.get("scored_from")
    tasks = _order([k[0] for k in groups], TASK_ORDER)
    panels = []
    for key in sorted(groups, key=lambda k: (tasks[k[0]], k[1]))[: figures.MAX_PANELS]:
        by_core = groups[key]
        cores = _order([label.split(" ")[0] for label in by_core], CORE_ORDER)
        curves = {label: _geometric_mean(rows) for label, rows in sorted(by_core.items(), key=lambda kv: cores[kv[0].split(" ")[0]])
                  if len({len(r) for r in rows}) == 1}
        panels.append((f"{key[0]}, T = {key[1]}", curves, scored[key]))
    return panels


def kappa_frame(runs: SuiteRuns) -> pd.DataFrame:
    """One row per finished RelLSTM run and kappa sweep it belongs to (its ``sweep`` tag, e.g.
    ``nu=15``): task, T, sweep, nu, rho, kappa, seed, accuracy, grad_first_init, grad_first_final."""
    rows = []
    for r in runs.finished:
        if r.tags.get("model") != "rellstm":
            continue
        try:
            nu, rho = int(r.tags["nu"]), int(r.tags["rho"])
        except (KeyError, ValueError):
            continue
        for sweep in (s for s in r.tags.get("sweep", "-").split(",") if s not in ("", "-")):
            rows.append((r.tags.get("task"), int(r.tags.get("T", 0)), sweep, nu, rho, nu + rho, r.seed,
                         *(r.metrics.get(k, math.nan) for k in ("accuracy", "grad_first_init", "grad_first_final"))))
    return pd.DataFrame(rows, columns=["task", "T", "sweep", "nu", "rho", "kappa", "seed", "accuracy",
                                       "grad_first_init", "grad_first_final"])


def kappa_figure(frame: pd.DataFrame) -> MplFigure | None:
    """Per task and T with a sweep: held-out accuracy (top; mean over seeds, the seeds as dots) and the
    mean ``||dL2/dh_t||`` over the data steps (bottom, log; after training solid, at initialisation
    dashed) against kappa = nu + rho, a line per sweep (``nu=15``: nu held at 15, rho varied)."""
    if frame.empty:
        return None
    panels = list(frame.groupby(["task", "T"], sort=True))
    fig = MplFigure(figsize=(5.0 * len(panels), 6.4), layout="constrained")
    axes = fig.subplots(2, len(panels), squeeze=False, sharex="col")
    for col, ((task, T), sub) in enumerate(panels):
        top, bottom = axes[0][col], axes[1][col]
        for i, (sweep, runs) in enumerate(sub.groupby("sweep", sort=True)):
            label = sweep.replace("nu=", "ν = ").replace("rho=", "ρ = ")
            means = runs.groupby("kappa")[["accuracy", "grad_first_init", "grad_first_final"]].mean()
            colour = f"C{i}"
            top.plot(runs["kappa"], runs["accuracy"], "o", color=colour, alpha=0.3, markersize=4)
            top.plot(means.index, means["accuracy"], "o-", color=colour, label=label)
            bottom.plot(means.index, means["grad_first_final"], "s-", color=colour, label=f"{label}, trained")
            bottom.plot(means.index, means["grad_first_init"], "s--", color=colour, alpha=0.5, label=f"{label}, init")
        top.set_title(f"{task}, T = {T}")
        top.set_ylim(-0.03, 1.03)
        top.set_ylabel("held-out accuracy")
        bottom.set_yscale("log")
        bottom.set_ylabel("mean ||dL2/dh_t||, data steps")
        bottom.set_xlabel("κ = ν + ρ")
        for ax in (top, bottom):
            ax.grid(alpha=0.3, which="both")
            ax.legend(fontsize=7)
    fig.suptitle("The κ trade-off (Kerg et al. App. C):\naccuracy and gradient at the data steps against κ")
    return fig


def loss_figure(curves: pd.DataFrame, baselines: Mapping[tuple[str, int], float]) -> MplFigure | None:
    """Training loss against updates, a panel per task and T, a line per core (mean over seeds);
    grey dash-dot (:data:`BASELINE_STYLE`, a style no core uses): the loss of outputting blanks and
    guessing the data. ``curves``: task, T, label, seed, step, value."""
    if curves.empty:
        return None
    keys = sorted(set(zip(curves["task"], curves["T"], strict=True)),
                  key=lambda k: (_order(curves["task"], TASK_ORDER)[k[0]], k[1]))[: figures.MAX_PANELS]
    fig, axes = panel_grid(len(keys), width=4.6, height=3.2, max_cols=3)
    for ax, (task, T) in zip(axes, keys, strict=True):
        here = curves[(curves["task"] == task) & (curves["T"] == T)]
        cores = _order(here["label"].str.split(" ").str[0], CORE_ORDER)
        lines = {}
        for label in sorted(set(here["label"]), key=lambda lab: cores[lab.split(" ")[0]]):
            mean = here[here["label"] == label].groupby("step")["value"].mean()
            lines[label] = (mean.index, mean.to_numpy())
        styled_lines(ax, lines, CORE_STYLES)
        if (task, T) in baselines:
            ax.axhline(baselines[(task, T)], **BASELINE_STYLE, label="blanks + guessing")
        ax.set_title(f"{task}, T = {T}")
        ax.set_xlabel("updates")
        count_ticks(ax.xaxis)
        ax.set_ylabel("cross-entropy (all steps)")
        ax.grid(alpha=0.3)
    place_legends(fig, axes)
    fig.suptitle("Training loss against updates (mean over seeds);\ncf. Kerg et al. App. D Fig. 4")
    return fig


def memory_figures(runs: SuiteRuns, comp: Comparison, fig_dir: Path) -> tuple[list[Figure], list[str]]:
    built: list[Figure] = []
    omitted: list[str] = []
    records = _gradient_records(runs)
    for which, when in (("init", "at initialisation"), ("final", "after training")):
        panels = gradient_panels(records, which)
        if panels:
            fig = gradient_figure(panels, f"||dL2/dh_t|| {when}\n(one fixed batch, geometric mean over seeds)", CORE_STYLES)
            built.append(_save(fig, fig_dir, f"memory_gradients_{which}", f"Gradient propagation {when}",
                               f"Norm of the gradient of the scored steps' loss with respect to each hidden state "
                               f"h_t, {when}, a curve per core; the shaded steps are scored. Cf. Kerg et al. App. C Fig. 3."))
        else:
            omitted.append(f"gradient norms {when}: no finished run logged gradient_norms.json")
    if (fig := kappa_figure(kappa_frame(runs))) is not None:
        built.append(_save(fig, fig_dir, "memory_kappa_tradeoff", "The κ = ν + ρ trade-off",
                           "RelLSTM at one task and T for several κ, ν or ρ held fixed (a line per sweep): held-out "
                           "accuracy (top) and the mean gradient norm over the data steps after training and at "
                           "initialisation (bottom, log). Cf. Kerg et al. App. C Fig. 3 and the rebuttal."))
    else:
        omitted.append("κ trade-off: no finished run of a κ sweep (tag sweep)")
    rows: list[tuple[Any, ...]] = []
    baselines: dict[tuple[str, int], float] = {}
    for r in runs.finished:
        if r.tags.get("study") == "kappa" or "loss" not in r.metrics:
            continue
        task, T = r.tags.get("task", "?"), int(r.tags.get("T", 0))
        h = runs.metric_history(r.run_id, "loss")
        rows += [(task, T, _label(r.tags), r.seed, s, v) for s, v in zip(h["step"], h["value"], strict=True)]
        c, labels = _int_param(r, "task_settings.copy_length", 10), _int_param(r, "task_settings.labels", 8)
        baselines[(task, T)] = c * math.log(labels) / (T + 2 * c)
    if (fig := loss_figure(pd.DataFrame(rows, columns=["task", "T", "label", "seed", "step", "value"]), baselines)) is not None:
        built.append(_save(fig, fig_dir, "memory_loss_curves", "Training loss",
                           "Cross-entropy over all steps against updates, mean over seeds; grey dash-dot: c ln(labels) / L, "
                           "the loss of a model that outputs blanks and guesses the data."))
    else:
        omitted.append("loss curves: no finished run logged loss")
    return built, omitted


def _int_param(r: RunRecord, key: str, default: int) -> int:
    try:
        return int(r.params[key])
    except (KeyError, ValueError):
        return default


__all__ = ["METRICS", "kappa_figure", "loss_figure", "memory_complete", "memory_figures",
           "table5_reference"]
