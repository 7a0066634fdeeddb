"""``recurbench report``: figures and comparison tables of a suite's tracked runs, as one
self-contained HTML file (figures embedded as base64 PNG) or as Markdown beside PNG files.

The figures are also logged as artifacts (under ``report/``) of the suite's most recent parent run,
so that the MLflow UI shows them with the runs they summarise.

What the figures need from the runs, and where the suites put it:

* LTSF: per-epoch ``train_loss``/``val_loss`` (step = epoch), ``test_mse``; gate values as metrics
  whose name contains ``gate``: ``final_gate.<layer>`` (the weights tested) where a run logged it,
  else ``gate.<layer>`` (its last epoch; the suite logs both); REM parameters per head (see :mod:`.rem` for the
  accepted shapes); forecast examples as artifacts whose path contains ``forecast``: a PNG (shown
  as is) or JSON/CSV/NPZ with ``truth`` and ``prediction`` (and optionally ``history``).
* MiniGrid: ``rollout_reward`` (step = environment steps), ``train_reward``, ``test_reward``.

Missing inputs leave a figure out (the report says which), they never fail the report.
"""

from __future__ import annotations

import base64
import html
import json
import re
import shutil
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from recurbench.errors import ConfigError, RecurbenchError
from recurbench.records import RunRecord
from recurbench.reference import KERG_TABLE4_CAVEAT, RSA_PAIRS
from recurbench.reporting import figures
from recurbench.reporting.compare import Comparison
from recurbench.reporting.rem import RemHead, parse_rem_params, rem_heads_from_metrics
from recurbench.reporting.render import MISSING, markdown_table, text_tables
from recurbench.reporting.runs import SuiteRuns

REPORT_FORMATS = ("html", "markdown")
REPORT_FILES = {"html": "report.html", "markdown": "report.md"}
FIGURES_FOLDER = "figures"
MAX_FORECAST_SETTINGS = 4
_GATE = re.compile(r"(^|[._/])gates?([._/]|$)")
_FINAL = "final_"


@dataclass
class Figure:
    name: str
    title: str
    caption: str
    path: Path


@dataclass
class Report:
    path: Path
    """The report file (``report.html`` or ``report.md``)."""
    figures: list[Figure]
    comparison: Comparison
    logged_to_run: str | None
    """The parent run the figures were logged to (None if not logged)."""
    omitted: list[str] = field(default_factory=list)
    """Figures left out, with the reason."""
    stale: list[str] = field(default_factory=list)
    """The files in the report's ``figures/`` it did not draw (an earlier report's, into the same
    ``--out``): left as they are, and named (``recurbench report`` prints them)."""


#: A suite's figures: ``build(runs, comparison, fig_dir)`` -> the figures and what was left out, why.
FigureBuilder = Callable[[SuiteRuns, Comparison, Path], tuple[list["Figure"], list[str]]]


def write_report(
    runs: SuiteRuns, comparison: Comparison, build: FigureBuilder, out: str | Path, *, fmt: str = "html",
    log_to_mlflow: bool = True,
) -> Report:
    """Draw the suite's figures (``build``) into ``out/figures``, write the report (HTML or Markdown)
    and log both to the suite's latest parent run (:func:`recurbench.reporting.by_suite.write_report`
    does this for a suite by name)."""
    if fmt not in REPORT_FORMATS:
        raise ConfigError(f"unknown report format {fmt!r}; choose one of: {', '.join(REPORT_FORMATS)}")
    with report_folder(out, fmt) as folder:
        built, omitted = build(runs, comparison, folder / FIGURES_FOLDER)
        path = (_write_html if fmt == "html" else _write_markdown)(folder, runs, comparison, built, omitted)
    drawn = {fig.path.name for fig in built}
    stale = sorted(p.name for p in (folder / FIGURES_FOLDER).iterdir() if p.name not in drawn)
    logged = None
    if log_to_mlflow and runs.latest_parent_id:
        for fig in built:
            runs.client.log_artifact(runs.latest_parent_id, str(fig.path), "report")
        runs.client.log_artifact(runs.latest_parent_id, str(path), "report")
        logged = runs.latest_parent_id
    elif log_to_mlflow:
        comparison.notes.append("no parent run found: figures not logged to MLflow")
    return Report(path, built, comparison, logged, omitted, stale)


def _not_a_folder(out: Path, fmt: str) -> str | None:
    """Why a report cannot be written into ``out`` (its folder, ``figures/`` and report file), as far
    as can be told without writing; None where nothing stands in the way."""
    for path, folder in ((out / FIGURES_FOLDER, True), (out / REPORT_FILES[fmt], False)):
        if path.is_dir() != folder and path.exists():
            return f"{path} is {'a file' if folder else 'a folder'}, where the report writes its {path.name}"
    above = out
    while not above.exists():  # the folders to create: each one's parent must be a folder
        above = above.parent
    if not above.is_dir():
        return f"{above} is a file, not a folder" if above == out else f"{above} is a file, not a folder to create it in"
    return None


@contextmanager
def report_folder(out: str | Path, fmt: str) -> Iterator[Path]:
    """``out`` with its ``figures/`` folder, created for a report before anything is read or drawn: a
    path that cannot take one is refused by name (``--out``), and the folders this call created are
    removed again, with what was written into them, when the report fails."""
    out = Path(out)
    if (reason := _not_a_folder(out, fmt)) is not None:
        raise RecurbenchError(f"--out {out}: {reason}")
    created = [p for p in (out / FIGURES_FOLDER, *(out / FIGURES_FOLDER).parents) if not p.exists()]
    try:
        (out / FIGURES_FOLDER).mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a folder the system will not create one in (read-only, /proc)
        _remove(created)
        raise RecurbenchError(f"--out {out}: cannot create a folder there: {exc.strerror or exc}") from None
    try:
        yield out
    except BaseException:
        _remove(created)
        raise


def _remove(created: list[Path]) -> None:
    """The outermost of the folders a report created, and everything in it."""
    if created:
        shutil.rmtree(created[-1], ignore_errors=True)


def _save(fig: Any, fig_dir: Path, name: str, title: str, caption: str) -> Figure:
    path = fig_dir / f"{name}.png"
    fig.savefig(path, dpi=110)
    return Figure(name, title, caption, path)


def _representatives(records: list[RunRecord], keys: tuple[str, ...]) -> dict[tuple[str, ...], RunRecord]:
    """The lowest-seed finished run of each configuration."""
    out: dict[tuple[str, ...], RunRecord] = {}
    for r in sorted(records, key=lambda r: (r.seed is None, r.seed or 0)):
        out.setdefault(tuple(r.tags.get(k, "") for k in keys), r)
    return out


# ------------------------------------------------------------------------------------------ LTSF


def ltsf_figures(runs: SuiteRuns, comp: Comparison, fig_dir: Path) -> tuple[list[Figure], list[str]]:
    built: list[Figure] = []
    omitted: list[str] = []

    rows = []
    for r in runs.finished:
        for metric in ("train_loss", "val_loss"):
            if metric in r.metrics:
                h = runs.metric_history(r.run_id, metric)
                rows += [(r.tags.get("dataset"), _int(r.tags.get("horizon")), r.tags.get("model"), r.seed, metric, s, v)
                         for s, v in zip(h["step"], h["value"], strict=True)]
    curves = pd.DataFrame(rows, columns=["dataset", "horizon", "model", "seed", "metric", "step", "value"])
    test = comp.cells[comp.cells["metric"] == "mse"][["dataset", "horizon", "model", "mean"]]
    if (fig := figures.loss_curves(curves, test)) is not None:
        built.append(_save(fig, fig_dir, "ltsf_loss_curves", "Validation loss curves",
                           "Validation MSE per epoch, mean over seeds; baselines dashed, RSA variants solid in the same colour; ★ = test MSE."))
    else:
        omitted.append("loss curves: no finished run logged val_loss")

    gates = pd.DataFrame(
        [(r.tags.get("model"), layer, v) for r in runs.finished for layer, v in _layer_gates(r.metrics).items()],
        columns=["model", "layer", "value"],
    )
    if (fig := figures.gate_boxplots(gates)) is not None:
        built.append(_save(fig, fig_dir, "ltsf_rem_gates", "REM gate values per layer",
                           "σ(μ) per attention layer over all runs of each RSA model (box) and the runs themselves (dots); cf. RSA paper Fig. 3."))
    else:
        omitted.append("gate box plots: no finished run logged a gate metric")

    reps = _representatives(runs.finished, ("dataset", "horizon", "model"))
    for model in RSA_PAIRS.values():
        candidates = [r for (_, _, m), r in reps.items() if m == model][:5]
        for r in candidates:
            heads = _rem_heads(runs, r)
            if heads:
                title = f"Learned REMs, {model}, {r.tags.get('dataset')}-{r.tags.get('horizon')} seed {r.seed}"
                fig = figures.rem_heatmaps(heads, title)
                built.append(_save(fig, fig_dir, f"ltsf_rem_{model}", f"Learned REMs: {model}",
                                   "Each head's REM rebuilt from its logged λ or (γ, θ) and dilation; cf. RSA paper Fig. 11."))
                break
        else:
            if candidates:
                omitted.append(f"REM heatmaps for {model}: no REM parameters logged")

    if not _ltsf_forecasts(runs, reps, fig_dir, built):
        omitted.append("forecast examples: no finished run logged a forecast artifact")
    return built, omitted


def _ltsf_forecasts(
    runs: SuiteRuns, reps: Mapping[tuple[str, ...], RunRecord], fig_dir: Path, built: list[Figure]
) -> bool:
    """The forecast examples of the first :data:`MAX_FORECAST_SETTINGS` dataset x horizon settings,
    one figure per setting (a logged PNG as it is), appended to ``built``; whether any run had one."""
    settings = list(dict.fromkeys((d, h) for (d, h, _) in reps))[:MAX_FORECAST_SETTINGS]
    found_any = False
    for dataset, horizon in settings:
        examples: list[tuple[str, dict[str, Any]]] = []
        for (d, h, model), r in reps.items():
            if (d, h) != (dataset, horizon):
                continue
            for artifact in (p for p in runs.artifact_paths(r.run_id) if "forecast" in p.lower()):
                local = runs.download_artifact(r.run_id, artifact)
                if local.suffix.lower() == ".png":
                    found_any = True
                    target = fig_dir / f"ltsf_forecast_{dataset}_{horizon}_{model}.png"
                    shutil.copyfile(local, target)
                    built.append(Figure(target.stem, f"Forecast example: {model}, {dataset}-{horizon}", f"Logged by the run ({artifact}).", target))
                    break
                if (data := _read_forecast(local)) is not None:
                    examples.append((model, data))
                    break
        if examples and (fig := figures.forecast_figure(examples, f"Forecast on a test window, {dataset} horizon {horizon}")) is not None:
            found_any = True
            built.append(_save(fig, fig_dir, f"ltsf_forecast_{dataset}_{horizon}", f"Forecast examples: {dataset}, horizon {horizon}",
                               "Prediction vs truth on one test window (target column, scaled data), lowest seed of each model."))
    return found_any


def _layer_gates(metrics: Mapping[str, float]) -> dict[str, float]:
    """A run's gate value per layer. The ltsf suite logs each layer's gate twice: ``gate.<layer>`` after
    every epoch (so the latest is the last epoch's) and ``final_gate.<layer>`` once, from the weights it
    tested (early stopping restores the best epoch's). One layer, two names: the final value counts,
    the per-epoch one only for a run that logged no final values."""
    final: dict[str, float] = {}
    last: dict[str, float] = {}
    for key, value in metrics.items():
        if _GATE.search(key):
            name = key.removeprefix(_FINAL)
            (final if name != key else last)[_GATE.sub(r"\1", name).strip("._/") or name] = value
    return final or last


def _int(value: str | None) -> Any:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return value


def _rem_heads(runs: SuiteRuns, r: RunRecord) -> list[RemHead]:
    heads = rem_heads_from_metrics(r.metrics)
    if heads:
        return heads
    for artifact in runs.artifact_paths(r.run_id):
        name = artifact.lower()
        if "rem" in Path(name).name and name.endswith(".json"):
            logged = json.loads(runs.download_artifact(r.run_id, artifact).read_text())
            if isinstance(logged, dict) and isinstance(logged.get("rem_parameters"), dict):
                logged = logged["rem_parameters"]  # the suites' {"gates": ..., "rem_parameters": {layer: ...}}
            heads = parse_rem_params(logged)
            if heads:
                return heads
    return []


def _read_forecast(path: Path) -> dict[str, Any] | None:
    suffix = path.suffix.lower()
    try:
        if suffix == ".json":
            data = json.loads(path.read_text())
            return data if isinstance(data, dict) else None
        if suffix == ".npz":
            with np.load(path) as npz:
                return {k: npz[k] for k in npz.files}
        if suffix == ".csv":
            frame = pd.read_csv(path)
            return {c: frame[c].dropna().to_numpy() for c in frame.columns}
    except (ValueError, OSError):
        return None
    return None


# -------------------------------------------------------------------------------------- MiniGrid


def minigrid_figures(runs: SuiteRuns, comp: Comparison, fig_dir: Path) -> tuple[list[Figure], list[str]]:
    built: list[Figure] = []
    omitted: list[str] = []
    rows = []
    for r in runs.finished:
        if "rollout_reward" in r.metrics:
            h = runs.metric_history(r.run_id, "rollout_reward")
            rows += [(r.tags.get("env"), r.tags.get("agent"), r.seed, s, v) for s, v in zip(h["step"], h["value"], strict=True)]
    curves = pd.DataFrame(rows, columns=["env", "agent", "seed", "step", "value"])
    cells = comp.cells
    finals = (
        cells[cells["metric"].isin(["train_reward", "test_reward"])]
        .pivot_table(index=["env", "agent"], columns="metric", values="mean", aggfunc="first")
        .rename(columns={"train_reward": "train", "test_reward": "test"})
        .reset_index()
    )
    for column in ("train", "test"):
        if column not in finals:
            finals[column] = np.nan
    if (fig := figures.learning_curves(curves, finals)) is not None:
        built.append(_save(fig, fig_dir, "minigrid_learning_curves", "Learning curves",
                           "Rollout reward vs environment steps on the training env, mean over seeds (band: min–max); ● final train reward, ★ test reward on the larger env."))
    else:
        omitted.append("learning curves: no finished run logged rollout_reward")
    if (fig := figures.generalisation_bars(cells)) is not None:
        caption = "Final train and test reward per env pair and core (± std over seeds)"
        if "paper" in cells and cells["paper"].notna().any():  # Table 4 has no figure for a pair of one's own
            caption += f", with Kerg et al.'s Table 4 (×). {KERG_TABLE4_CAVEAT}"
            caption += f". Ours are {comp.paper_caveat}" if comp.paper_caveat else ""
        built.append(_save(fig, fig_dir, "minigrid_generalisation", "Train small, test large", caption + "."))
    return built, omitted


# ------------------------------------------------------------------------------------------ files


def _summary_lines(runs: SuiteRuns, comp: Comparison) -> list[str]:
    return [
        f"experiment: {runs.experiment}",
        f"tracking URI: {runs.tracking_uri}",
        f"profile: {runs.profile or 'all'}",
        *([comp.paper_caveat] if comp.paper_caveat else []),
        f"finished runs: {len(runs.finished)}; did not finish: {len(runs.unfinished)}"
        + (f" ({len(runs.finished_as)} of them run again to the end)" if runs.finished_as else "")
        + (f" ({len(set(runs.taken_over_by) - set(runs.finished_as))} more taken over by a later run)"
           if set(runs.taken_over_by) - set(runs.finished_as) else ""),
        f"generated: {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
    ]


def _write_html(out: Path, runs: SuiteRuns, comp: Comparison, built: list[Figure], omitted: list[str]) -> Path:
    def cell(v: Any) -> str:
        text = MISSING if v is None or (isinstance(v, float) and np.isnan(v)) else str(v)
        return html.escape(text).replace("\n", "<br>")

    def table(frame: pd.DataFrame) -> str:
        head = "".join(f"<th>{cell(c)}</th>" for c in frame.columns)
        body = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in row) + "</tr>" for row in frame.itertuples(index=False))
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>recurbench report: {html.escape(runs.suite)}</title>",
        "<style>body{font-family:sans-serif;max-width:1400px;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse;margin:1em 0;font-size:0.85em}td,th{border:1px solid #ccc;padding:4px 8px;vertical-align:top}"
        "th{background:#f3f3f3}img{max-width:100%}figcaption{color:#555;font-size:0.9em}.note{color:#666}</style></head><body>",
        f"<h1>recurbench report: {html.escape(runs.suite)}</h1>",
        "<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in _summary_lines(runs, comp)) + "</ul>",
        "<h2>Comparison</h2>",
    ]
    for t in text_tables(comp, sep="\n"):
        parts += [f"<h3>{html.escape(t.title)}</h3>", table(t.frame)]
    parts += [f"<p class='note'>{html.escape(n)}</p>" for n in comp.notes]
    parts.append("<h2>Figures</h2>")
    for fig in built:
        data = base64.b64encode(fig.path.read_bytes()).decode("ascii")
        parts.append(
            f"<figure><h3>{html.escape(fig.title)}</h3><img alt='{html.escape(fig.name)}' src='data:image/png;base64,{data}'>"
            f"<figcaption>{html.escape(fig.caption)}</figcaption></figure>"
        )
    if omitted:
        parts.append("<h3>Figures left out</h3><ul>" + "".join(f"<li>{html.escape(o)}</li>" for o in omitted) + "</ul>")
    parts.append("</body></html>")
    path = out / REPORT_FILES["html"]
    path.write_text("\n".join(parts), encoding="utf-8")
    return path


def _write_markdown(out: Path, runs: SuiteRuns, comp: Comparison, built: list[Figure], omitted: list[str]) -> Path:
    parts = [f"# recurbench report: {runs.suite}", "", *(f"- {line}" for line in _summary_lines(runs, comp)), "", "## Comparison", ""]
    for t in text_tables(comp, sep="\n"):
        parts += [f"### {t.title}", "", markdown_table(t.frame), ""]
    parts += [f"*{n}*\n" for n in comp.notes]
    parts += ["## Figures", ""]
    for fig in built:
        parts += [f"### {fig.title}", "", f"![{fig.name}]({fig.path.relative_to(out).as_posix()})", "", fig.caption, ""]
    if omitted:
        parts += ["### Figures left out", "", *(f"- {o}" for o in omitted), ""]
    path = out / REPORT_FILES["markdown"]
    path.write_text("\n".join(parts), encoding="utf-8")
    return path

