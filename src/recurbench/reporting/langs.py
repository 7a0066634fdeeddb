"""The ``langs`` suite in ``compare`` and ``report`` (RSA paper Table 2, Fig. 3 and Fig. 11).

Comparison: per language and model, four accuracies over seeds -- ``bin0_last``/``bin1_last`` (after
the last epoch) and ``bin0_best``/``bin1_best`` (each bin's best epoch) -- each beside the paper's
Table 2 cell for that bin. The paper does not say whether its cells are last-epoch or best-epoch
figures (the reference code keeps the maximum over epochs), so both columns carry them.

Figures, from what :mod:`recurbench.suites.langs` logs:

* accuracy against string length, a panel per language and a line per model (mean over seeds, from
  the ``accuracy_by_length.json`` artifacts), the edge between the training lengths and bin 1 marked;
* the gates sigma(mu) per layer, a box per layer over every RSA run of a language (paper Fig. 3);
* the learned REMs of one RSA run per language, the model with the best mean bin-1 accuracy (its
  lowest seed), rebuilt from ``rem_parameters.json`` (paper Fig. 11).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure as MplFigure

from recurbench.data.langs import LANGUAGES
from recurbench.langs.models import LANG_MODELS
from recurbench.plots import panel_grid
from recurbench.reporting import figures
from recurbench.reporting.compare import Comparison, _complete_grid
from recurbench.reporting.report import Figure, _layer_gates, _rem_heads, _representatives, _save
from recurbench.reporting.runs import SuiteRuns
from recurbench.suites.langs import paper_reference

METRICS = ("bin0_last", "bin1_last", "bin0_best", "bin1_best")
"""The comparison's names of ``bin0_acc``, ``bin1_acc``, ``bin0_acc_best``, ``bin1_acc_best``."""
_PAPER_BIN = {"bin0_last": "bin0", "bin0_best": "bin0", "bin1_last": "bin1", "bin1_best": "bin1"}


def _orders() -> tuple[list[str], list[str]]:
    return list(LANGUAGES), list(LANG_MODELS)


def _ordered(values: Any, order: list[str]) -> list[str]:
    present = list(dict.fromkeys(values))
    return [v for v in order if v in present] + sorted(set(present) - set(order))


def langs_reference() -> pd.DataFrame:
    """Long form: ``language``, ``model`` (recurbench names), ``metric`` (each of :data:`METRICS`),
    ``paper`` (the Table 2 cell of that metric's bin)."""
    rows = [(language, model, metric, cell[_PAPER_BIN[metric]])
            for (language, model), cell in paper_reference().items() for metric in METRICS]
    return pd.DataFrame(rows, columns=["language", "model", "metric", "paper"])


def langs_complete(comp: Comparison, reference: str, frame: pd.DataFrame | None = None) -> None:
    """Every language x model we ran, in the suite's order, with the paper's cells beside ours."""
    languages, models = _orders()
    ours = comp.cells
    grid = pd.DataFrame(
        [(lang, model, metric) for lang in _ordered(ours["language"], languages)
         for model in _ordered(ours["model"], models) for metric in METRICS],
        columns=["language", "model", "metric"],
    )
    cells = _complete_grid(ours, grid)
    if reference == "paper":
        cells = cells.merge(langs_reference(), on=["language", "model", "metric"], how="left")
        cells["diff"] = cells["mean"] - cells["paper"]
    comp.cells = cells.reset_index(drop=True)
    comp.notes.append(
        "bin0_last/bin1_last: accuracy after the last epoch; bin0_best/bin1_best: each bin's best epoch. "
        "The paper's Table 2 cell of the bin stands beside both (it does not say which it reports)."
    )


# ------------------------------------------------------------------------------------------ figures


def langs_figures(runs: SuiteRuns, comp: Comparison, fig_dir: Path) -> tuple[list[Figure], list[str]]:
    built: list[Figure] = []
    omitted: list[str] = []
    languages, models = _orders()

    table, edges = _length_table(runs)
    if (fig := accuracy_by_length(table, edges, languages, models)) is not None:
        built.append(_save(fig, fig_dir, "langs_accuracy_by_length", "Accuracy against string length",
                           "Fraction of strings recognised correctly after the last epoch, per bucket of lengths, mean "
                           "over seeds, a line per model; dotted: the longest training length (bin 1 lies to its right)."))
    else:
        omitted.append("accuracy by length: no finished run logged accuracy_by_length.json")

    gates = pd.DataFrame(
        [(r.tags.get("language"), layer, v) for r in runs.finished for layer, v in _layer_gates(r.metrics).items()],
        columns=["model", "layer", "value"],  # a panel per language: gate_boxplots calls it the model
    )
    if (fig := figures.gate_boxplots(gates, order=languages)) is not None:  # panels in the suite's order of languages
        fig.suptitle("REM gates σ(μ) per layer after training, a panel per language (all RSA models and seeds)")
        built.append(_save(fig, fig_dir, "langs_rem_gates", "REM gate values per layer and language",
                           "σ(μ) per RSA layer after the last epoch over every RSA run of the language (box) "
                           "and the runs themselves (dots); cf. RSA paper Fig. 3."))
    else:
        omitted.append("gate box plots: no RSA run logged a gate")

    best = comp.cells[(comp.cells["metric"] == "bin1_last") & comp.cells["model"].str.startswith("rsa_")]
    reps = _representatives(runs.finished, ("language", "model"))
    for language in _ordered(best["language"], languages):
        ranked = best[best["language"] == language].sort_values("mean", ascending=False, na_position="last")
        for model in ranked["model"]:
            if (run := reps.get((language, model))) is not None and (heads := _rem_heads(runs, run)):
                title = f"Learned REMs, {language}, {model} seed {run.seed}"
                built.append(_save(figures.rem_heatmaps(heads, title), fig_dir, f"langs_rem_{language}",
                                   f"Learned REMs: {language} ({model})",
                                   f"Each head's REM rebuilt from its fitted λ or (γ, θ) and dilation, for the RSA model "
                                   f"with the best mean bin-1 accuracy on {language}; cf. RSA paper Fig. 11."))
                break
        else:
            omitted.append(f"REM heatmaps for {language}: no RSA run logged REM parameters")
    return built, omitted


def _length_table(runs: SuiteRuns) -> tuple[pd.DataFrame, dict[str, float]]:
    """Correct and total strings per length of every finished run (language, model, seed, bin, length,
    correct, total) and each language's bin edge (the longest training length)."""
    rows: list[tuple[Any, ...]] = []
    edges: dict[str, float] = {}
    for r in runs.finished:
        if "accuracy_by_length.json" not in runs.artifact_paths(r.run_id):
            continue
        data = json.loads(runs.download_artifact(r.run_id, "accuracy_by_length.json").read_text())
        language = r.tags.get("language", "")
        if "bin_edge" in data:
            edges[language] = float(data["bin_edge"])
        for split in ("bin0", "bin1"):
            part = data.get(split) or {}
            rows += [(language, r.tags.get("model"), r.seed, split, int(n), int(c), int(t))
                     for n, c, t in zip(part.get("length", []), part.get("correct", []), part.get("total", []), strict=True)]
    return pd.DataFrame(rows, columns=["language", "model", "seed", "bin", "length", "correct", "total"]), edges


LENGTH_BUCKETS = 20
"""Lengths are pooled into about this many equal buckets per language: a single length holds a few
dozen test strings at most, too few for a readable accuracy."""
_MARKERS = "os^vDP*X"


def accuracy_by_length(table: pd.DataFrame, edges: dict[str, float], languages: list[str],
                       models: list[str]) -> MplFigure | None:
    """A panel per language: accuracy against string length per model, the bin edge dotted. Each
    point pools a bucket of lengths within a run (correct / total), then averages over seeds."""
    if table.empty:
        return None
    shown = _ordered(table["language"], languages)
    fig, axes = panel_grid(len(shown), width=4.6, height=3.2, max_cols=3)
    styles = {m: {"color": f"C{i}", "marker": _MARKERS[i % len(_MARKERS)]} for i, m in enumerate(models)}
    handles: dict[str, Any] = {}
    for ax, language in zip(axes, shown, strict=True):
        here = table[table["language"] == language]
        edge = edges.get(language)
        width = max(1, math.ceil(int(here["length"].max()) / LENGTH_BUCKETS))
        # Buckets never straddle the bin edge: they are counted from it.
        offset = int(edge) % width if edge is not None else 0
        here = here.assign(bucket=(here["length"] - offset - 1) // width)
        for model in _ordered(here["model"], models):
            pooled = here[here["model"] == model].groupby(["bucket", "seed"])[["correct", "total", "length"]].agg(
                {"correct": "sum", "total": "sum", "length": "mean"})
            pooled["accuracy"] = pooled["correct"] / pooled["total"]
            mean = pooled.groupby("bucket")[["length", "accuracy"]].mean()
            style = styles.get(model, {"color": "C9", "marker": "."})
            (line,) = ax.plot(mean["length"], mean["accuracy"], linewidth=1.2, markersize=3.5, label=model,
                              linestyle="--" if model == "lstm" else "-", **style)
            handles.setdefault(model, line)
        if edge is not None:
            ax.axvline(edge + 0.5, color="0.3", linestyle=":", linewidth=1.2)
            ax.annotate("bin 1 →", (edge + 0.5, 0.5), xytext=(3, 0), textcoords="offset points", fontsize=8,
                        color="0.3", rotation=90, va="center")
        ax.set_title(language)
        ax.set_xlabel(f"string length (buckets of {width})" if width > 1 else "string length")
        ax.set_ylabel("accuracy")
        ax.set_ylim(-0.03, 1.03)
        ax.grid(alpha=0.3)
    fig.legend(list(handles.values()), list(handles), loc="outside lower center", ncols=min(len(handles), 7), fontsize=8)
    fig.suptitle("Accuracy against string length after the last epoch (mean over seeds); dotted: longest training length")
    return fig

__all__ = ["METRICS", "accuracy_by_length", "langs_complete", "langs_figures", "langs_reference"]
