"""Comparison of tracked runs, aggregated over seeds, beside the papers' published figures.

``compare_runs(runs)`` (and :func:`recurbench.reporting.by_suite.compare` for a suite by name) returns
a :class:`Comparison` of plain DataFrames; :mod:`.render` turns it into a
terminal table, Markdown, CSV or LaTeX. Conventions:

* only FINISHED runs are aggregated (see :mod:`.runs` for which runs count); the others are listed in
  ``Comparison.failed``. A suite whose runs have not finished yet still has a comparison: no
  aggregates, the runs listed (and, where the suite's tables can show an unfinished cell, as the
  memory suite's Table 5 layout does, how far each got); only an experiment without runs is refused;
* ``by`` keys that leave out one of the suite's configuration keys pool the runs that differ in it;
  a note names each such key and the values pooled (``nu 2, 10``), so a cell's std is not read as
  the spread over seeds alone;
* per cell: mean, sample std (ddof 1) and n over seeds; for MiniGrid also the interquartile mean with
  a 95% bootstrap interval when a cell has at least 3 seeds;
* a cell with no run stays NaN (shown as missing); nothing is filled or imputed;
* LTSF win counts "RSA vs its baseline" count the (dataset, horizon, metric) cells where the RSA
  model's mean is **lower than or equal to** the baseline's. Ties count as wins because that is how
  the paper's own counts come out: its 24/32 for XL includes ETTm1-288 MAE, 0.795 vs 0.795 (23 strict).
* runs not at the paper's settings (another profile, a ``--set``; see :mod:`recurbench.suites.paper_settings`)
  are not comparable with the paper's figures: ``Comparison.paper_caveat`` says why, the tables say so
  beside the paper's values, and the paper's win counts are left out (ours alone are shown).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import pandas as pd

from recurbench.config import check_unique
from recurbench.errors import ConfigError, RecurbenchError
from recurbench.records import RunRecord
from recurbench.reference import (
    KERG_TABLE4_CAVEAT,
    LTSF_DATASET_ORDER,
    LTSF_MODEL_ORDER,
    MINIGRID_AGENT_ORDER,
    RSA_PAIRS,
    ltsf_reference,
    minigrid_reference,
)
from recurbench.reporting.runs import SuiteRuns
from recurbench.reporting.stats import MIN_SEEDS_FOR_IQM, iqm_ci, summarise
from recurbench.suites.base import SuiteDefinition
from recurbench.suites.paper_settings import paper_caveat
from recurbench.suites.registry import SUITES
from recurbench.suites.runner import PLAN_TAG
from recurbench.tracking import owner_gone

REFERENCES = ("paper", "none")


@dataclass(frozen=True)
class SuiteLayout:
    """What identifies a configuration of a suite and which logged metrics a comparison shows."""

    config_keys: tuple[str, ...]
    metrics: dict[str, str]
    """Logged metric name -> name in the comparison (LTSF's ``test_mse`` is the paper's ``mse``)."""
    integer_keys: tuple[str, ...] = ()
    integer_metrics: tuple[str, ...] = ()
    """Comparison names of metrics that count something (updates): shown as whole numbers."""
    progress: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Logged metric name -> column of :attr:`Comparison.failed` and its format in a table: how far a
    run that did not finish got (its latest value; NaN where it logged none)."""
    paper: bool = True
    """Whether recurbench holds published figures for the suite (a plugin suite's: none)."""


LAYOUTS: dict[str, SuiteLayout] = {
    "ltsf": SuiteLayout(("dataset", "horizon", "model"), {"test_mse": "mse", "test_mae": "mae"}, ("horizon",)),
    "minigrid": SuiteLayout(
        ("env", "agent"),
        {"train_reward": "train_reward", "test_reward": "test_reward", "generalisation_ratio": "generalisation_ratio"},
    ),
    "langs": SuiteLayout(  # last epoch and each bin's best epoch (recurbench.reporting.langs)
        ("language", "model"),
        {"bin0_acc": "bin0_last", "bin1_acc": "bin1_last", "bin0_acc_best": "bin0_best", "bin1_acc_best": "bin1_best"},
    ),
    "memory": SuiteLayout(  # held-out and training-batch accuracy, the updates run (recurbench.reporting.memory)
        ("task", "T", "model", "nu", "rho"),
        {"accuracy": "accuracy", "train_accuracy": "train_accuracy", "updates": "updates", "solved_at": "solved_at"},
        ("T",),
        ("updates", "solved_at"),
        {"eval_accuracy": ("last_eval_accuracy", ".3f"), "eval_update": ("last_eval_update", ",.0f")},
    ),
}


@dataclass
class Comparison:
    suite: str
    experiment: str
    tracking_uri: str
    profile: str | None
    by: tuple[str, ...]
    reference: str
    cells: pd.DataFrame
    """Long form, one row per group and metric: the ``by`` keys, ``metric``, ``mean``, ``std``, ``n``;
    with ``reference="paper"`` also ``paper``, ``paper_std`` and ``diff`` (ours − paper); MiniGrid
    adds ``iqm``, ``iqm_lo``, ``iqm_hi`` (NaN below 3 seeds)."""
    failed: pd.DataFrame
    """Runs that did not finish: ``run_id``, ``name``, ``status``, config keys, ``seed``, ``error``,
    ``settings`` (how its settings differ from the ones shown for its configuration, "" where they
    agree: :attr:`recurbench.reporting.runs.SuiteRuns.unfinished_settings`), ``finished_as`` (the
    finished run that counts for the same configuration and seed at the same settings, or None:
    :attr:`recurbench.reporting.runs.SuiteRuns.finished_as`), ``taken_over_by``
    (the newest later run of its configuration, seed and params: one that continued it from its
    checkpoint or started it again; None where there is none:
    :attr:`recurbench.reporting.runs.SuiteRuns.taken_over_by`), then the layout's ``progress`` columns."""
    wins: pd.DataFrame | None = None
    """LTSF: per RSA pair, cells where RSA ≤ baseline, ours and the paper's (on our cells and on all)."""
    aggregate: pd.DataFrame | None = None
    """MiniGrid: per agent, IQM over all env pairs' runs with a stratified bootstrap 95% interval."""
    notes: list[str] = field(default_factory=list)
    tables: list[tuple[str, pd.DataFrame]] = field(default_factory=list)
    """A suite's own tables, shown after the main one: a title and a frame of text cells (memory:
    Table 5's layout)."""
    paper_caveat: str | None = None
    """Why the paper's figures are not comparable with these runs (their profile, the settings that
    differ from the paper profile's, each with every value); None when the runs are at the paper's settings,
    or no paper values are shown."""
    paper_caveat_short: str | None = None
    """:attr:`paper_caveat` for the terminal: every setting named, several long values counted
    (:func:`recurbench.suites.paper_settings.paper_caveat`)."""

    @property
    def unresolved(self) -> pd.DataFrame:
        """The runs of :attr:`failed` whose configuration and seed no finished run stands for, and that
        no later run took over (continued from their checkpoint, or started again): the ones a table lists."""
        return self.failed[self.failed["finished_as"].isna() & self.failed["taken_over_by"].isna()]

    @property
    def default_layout(self) -> bool:
        return self.by == layout(self.suite).config_keys


def layout(suite: str) -> SuiteLayout:
    """The suite's layout: a shipped suite's from :data:`LAYOUTS`, a plugin suite's derived from what it
    declares (:func:`plugin_layout`)."""
    if suite in LAYOUTS:
        return LAYOUTS[suite]
    if suite not in SUITES:
        raise ConfigError(f"unknown suite {suite!r} for compare/report; known suites: {', '.join(SUITES)}")
    return plugin_layout(SUITES[suite])


#: Tags the runner gives every run of a suite: none of them names a configuration.
_RUNNER_TAGS = frozenset({"suite", "profile", "seed", PLAN_TAG})


@lru_cache(maxsize=16)
def plugin_layout(definition: type[SuiteDefinition]) -> SuiteLayout:
    """The layout of a suite recurbench ships no table for (a plugin's), from what it declares: its
    configuration keys are the tags every configuration of its ``quick`` profile carries (the tags of
    :meth:`~recurbench.suites.base.SuiteDefinition.shipped_settings`, else of the plans of
    :meth:`~recurbench.suites.base.SuiteDefinition.plan` with the default selection, as ``run`` makes
    them), its metrics its ``headline_metrics``; no paper's figures."""
    suite = definition()
    if not suite.headline_metrics:
        raise ConfigError(f"suite {suite.name!r} names no headline_metrics: compare and report show a plugin suite's "
                          f"headline_metrics (set them on {definition.__name__})")
    try:
        profile = suite.load_profile("quick")
        configurations = ([tags for tags, _ in suite.shipped_settings(profile)]
                          or [plan.tags for plan in suite.plan(profile, {}, data_dir=None)])
    except RecurbenchError as exc:
        raise ConfigError(f"suite {suite.name!r}: compare and report read a plugin suite's configuration keys from the "
                          f"tags of its quick profile's plans, and planning that profile failed: {exc}") from None
    keys = [k for k in (configurations[0] if configurations else {})
            if k not in _RUNNER_TAGS and all(k in tags for tags in configurations)]
    if not keys:
        raise ConfigError(f"suite {suite.name!r}: compare and report group a plugin suite's runs by the tags its plans "
                          "share, and the plans of its quick profile share none: give each RunPlan tags naming its "
                          "configuration (model, dataset)")
    return SuiteLayout(tuple(keys), {m: m for m in suite.headline_metrics}, paper=False)


#: A suite's part of a comparison in its default layout: the paper's cells, win counts, ratios.
Completion = Callable[["Comparison", str, pd.DataFrame], None]


def compare_runs(runs: SuiteRuns, *, reference: str = "paper", by: Sequence[str] | None = None,
                 complete: Completion | None = None) -> Comparison:
    """Aggregate ``runs`` over seeds (the module docstring's conventions); in the default layout,
    ``complete`` adds the suite's own part (:mod:`recurbench.reporting.by_suite` picks it)."""
    spec = layout(runs.suite)
    reference = reference if spec.paper else "none"
    if by:
        check_unique(list(by), "key", "--by")
    failed = failed_frame(runs.unfinished, spec, runs.finished_as, runs.taken_over_by, runs.unfinished_settings)
    if not runs.finished and failed.empty:
        raise RecurbenchError(f"experiment {runs.experiment!r} has no runs" + _of_profile(runs))
    keys = tuple(by) if by else spec.config_keys
    notes = [*runs.notes, *_not_listed_notes(runs)]
    frame = runs_frame(runs.finished, spec, keys)
    dropped = frame[list(keys)].isna().any(axis=1)
    absent = [k for k in keys if frame[k].isna().all()]  # a typo in --by, say: no run carries it
    if runs.finished and absent:
        raise RecurbenchError(f"no finished run of {runs.experiment!r} carries the tag(s) {', '.join(absent)}")
    if dropped.any():
        missing = [k for k in keys if frame.loc[dropped, k].isna().any()]
        notes.append(f"{int(dropped.sum())} finished run(s) without the tag(s) {', '.join(missing)} left out")
        frame = frame[~dropped]
    if runs.finished and frame.empty:
        raise RecurbenchError(f"no finished run of {runs.experiment!r} carries all of the tag(s) {', '.join(keys)}")
    if not runs.finished:
        notes.append(f"no run{_of_profile(runs)} has finished yet, so there is nothing to aggregate over seeds; "
                     "the runs that did not finish are listed")
    default = keys == spec.config_keys
    if not default and (pooled := _pooled_note(frame, keys, spec)):
        notes.append(pooled)
    cells = _aggregate(frame, keys, list(spec.metrics.values()), iqm=runs.suite == "minigrid")
    comparison = Comparison(
        suite=runs.suite,
        experiment=runs.experiment,
        tracking_uri=runs.tracking_uri,
        profile=runs.profile,
        by=keys,
        reference=reference if default else "none",
        cells=cells,
        failed=failed,
        notes=notes,
    )
    if not default and reference == "paper":
        notes.append("the paper's values are shown only in the default layout (without --by)")
    if comparison.reference == "paper":
        # The runs the tables show: the finished ones, and those that stand for a cell no run finished
        # (at the settings shown; a run that logged no params yet says nothing about its settings).
        waiting = set(comparison.unresolved.loc[comparison.unresolved["settings"] == "", "run_id"])
        shown = [*runs.finished, *(r for r in runs.unfinished if r.run_id in waiting and r.params)]
        settings = [(r.tags, r.params) for r in shown]
        comparison.paper_caveat = paper_caveat(SUITES[runs.suite](), settings, runs.profile)
        comparison.paper_caveat_short = paper_caveat(SUITES[runs.suite](), settings, runs.profile, short=True)
    if default and complete is not None:
        complete(comparison, reference, frame)
    cells = comparison.cells
    if comparison.reference == "paper" and not cells.empty and "paper" in cells and cells["paper"].isna().all():
        _without_paper(comparison)
    if comparison.reference == "paper" and not comparison.cells.empty:
        comparison.notes.append("a cell reads: our mean ± std over n runs, the paper's figure, Δ = ours − paper")
    return comparison


def _without_paper(comp: Comparison) -> None:
    """``comp`` without the paper's columns, for configurations the paper gives no figure for (a MiniGrid
    pair of one's own): dashes beside every cell, or a caveat on figures not there, would say nothing."""
    comp.notes.append("the paper gives no figures for these configurations: ours only")
    comp.cells = comp.cells.drop(columns=["paper", "paper_std", "diff"], errors="ignore")
    comp.reference = "none"
    comp.paper_caveat = comp.paper_caveat_short = None


def _of_profile(runs: SuiteRuns) -> str:
    return f" of profile {runs.profile!r}" if runs.profile else ""


def _not_listed_notes(runs: SuiteRuns) -> list[str]:
    """Why runs that did not finish are left out of the list: the seed finished in another run, or a
    later run took the attempt over."""
    notes = []
    if rerun := [f"{r.name} ({r.run_id[:8]}: finished as {runs.finished_as[r.run_id][:8]})"
                 for r in runs.unfinished if r.run_id in runs.finished_as]:
        notes.append(
            f"{len(rerun)} run(s) that did not finish are not listed: the same configuration and seed finished "
            f"in another run at the same settings: {', '.join(rerun[:3])}{', ...' if len(rerun) > 3 else ''}"
        )
    if later := [f"{r.name} ({r.run_id[:8]}: taken over by {runs.taken_over_by[r.run_id][:8]})"
                 for r in runs.unfinished if r.run_id in runs.taken_over_by and r.run_id not in runs.finished_as]:
        notes.append(
            f"{len(later)} run(s) that did not finish are not listed: a later run of the same configuration, seed "
            f"and settings took each over (continued it from its checkpoint, or started it again): "
            f"{', '.join(later[:3])}{', ...' if len(later) > 3 else ''}"
        )
    return notes


def _pooled_note(frame: pd.DataFrame, keys: Sequence[str], spec: SuiteLayout) -> str | None:
    """What grouping by ``keys`` pools: each of the suite's configuration keys left out of ``keys`` that
    takes more than one value within some cell, with those values and the cells (None when the cells
    hold one configuration each, their runs differing only in seed)."""
    if frame.empty:
        return None
    pooled: list[str] = []
    cells: dict[str, None] = {}
    for column in (k for k in spec.config_keys if k not in keys):
        values: dict[str, None] = {}
        for group, sub in frame.groupby(list(keys), sort=False, dropna=False):
            distinct = list(dict.fromkeys(str(v) for v in sub[column]))
            if len(distinct) > 1:
                values.update(dict.fromkeys(distinct))
                cells.setdefault("/".join(str(v) for v in (group if isinstance(group, tuple) else (group,))))
        if values:
            pooled.append(f"{column} {', '.join(sorted(values, key=_natural))}")
    if not pooled:
        return None
    names = list(cells)
    return (f"--by {','.join(keys)} pools runs at different settings into one cell, so its mean, std and n are over "
            f"those settings, not over seeds alone: {'; '.join(pooled)} (in {len(names)} cell(s): "
            f"{', '.join(names[:3])}{', ...' if len(names) > 3 else ''}); add the key(s) to --by to keep them apart")


def _natural(value: str) -> tuple[int, float, str]:
    """Numbers in numeric order, before any text (``-``, a name)."""
    try:
        return (0, float(value), value)
    except ValueError:
        return (1, 0.0, value)


def runs_frame(records: Sequence[RunRecord], spec: SuiteLayout, keys: Sequence[str]) -> pd.DataFrame:
    """One row per run: ``run_id``, ``seed``, the grouping keys (from tags, else params) and the
    comparison's metrics under their comparison names."""
    rows = []
    for r in records:
        row: dict[str, object] = {"run_id": r.run_id, "seed": r.seed}
        for key in {*keys, *spec.config_keys}:
            value = r.tags.get(key, r.params.get(key))
            row[key] = _typed(key, value, spec)
        for logged, name in spec.metrics.items():
            row[name] = r.metrics.get(logged, math.nan)
        if "generalisation_ratio" in spec.metrics and math.isnan(row["generalisation_ratio"]):  # type: ignore[arg-type]
            train, test = r.metrics.get("train_reward"), r.metrics.get("test_reward")
            row["generalisation_ratio"] = test / train if train and test is not None else math.nan
        rows.append(row)
    columns = list(dict.fromkeys(["run_id", "seed", *keys, *spec.config_keys, *spec.metrics.values()]))
    return pd.DataFrame(rows, columns=columns)  # the columns also when no run finished


def _typed(key: str, value: str | None, spec: SuiteLayout) -> object:
    if value is None:
        return None
    if key in spec.integer_keys:
        try:
            return int(value)
        except ValueError:
            return value
    return value


def _aggregate(frame: pd.DataFrame, keys: Sequence[str], metrics: Sequence[str], *, iqm: bool) -> pd.DataFrame:
    rows = []
    for group, sub in frame.groupby(list(keys), sort=False, dropna=False):
        group = group if isinstance(group, tuple) else (group,)
        for metric in metrics:
            values = sub[metric].dropna().tolist()
            s = summarise(values)
            row = {**dict(zip(keys, group, strict=True)), "metric": metric, "mean": s.mean, "std": s.std, "n": s.n}
            if iqm:
                point, lo, hi = iqm_ci([values]) if s.n >= MIN_SEEDS_FOR_IQM else (math.nan,) * 3
                row.update(iqm=point, iqm_lo=lo, iqm_hi=hi)
            rows.append(row)
    columns = [*keys, "metric", "mean", "std", "n", *(("iqm", "iqm_lo", "iqm_hi") if iqm else ())]
    cells = pd.DataFrame(rows, columns=columns)  # the columns also when no run finished
    cells["n"] = cells["n"].astype(int)
    return cells


def _complete_grid(cells: pd.DataFrame, index: pd.DataFrame) -> pd.DataFrame:
    """``cells`` over every row of ``index`` (missing ones NaN, n = 0): a missing cell stays visible."""
    keys = [c for c in index.columns]
    out = index.merge(cells, on=keys, how="left")
    out["n"] = out["n"].fillna(0).astype(int)
    return out


def ltsf_complete(comp: Comparison, reference: str, frame: pd.DataFrame | None = None) -> None:
    ours = comp.cells
    settings = ours[["dataset", "horizon"]].drop_duplicates()
    models = [m for m in LTSF_MODEL_ORDER] + sorted(set(ours["model"]) - set(LTSF_MODEL_ORDER))
    grid = settings.merge(pd.DataFrame({"model": models}), how="cross").merge(
        pd.DataFrame({"metric": ["mse", "mae"]}), how="cross"
    )
    cells = _complete_grid(ours, grid)
    paper = ltsf_reference()
    if reference == "paper":
        ref = paper.rename(columns={"paper_mean": "paper"})[["dataset", "horizon", "model", "metric", "paper", "paper_std"]]
        cells = cells.merge(ref, on=["dataset", "horizon", "model", "metric"], how="left")
        cells["diff"] = cells["mean"] - cells["paper"]
    order = {d: i for i, d in enumerate(LTSF_DATASET_ORDER)}
    cells = cells.assign(
        _d=cells["dataset"].map(lambda d: order.get(d, len(order))),
        _m=cells["model"].map({m: i for i, m in enumerate(models)}),
        _k=cells["metric"].map({"mse": 0, "mae": 1}),
    )
    comp.cells = cells.sort_values(["_d", "dataset", "horizon", "_k", "_m"]).drop(columns=["_d", "_m", "_k"]).reset_index(drop=True)
    # The paper's counts beside ours only where ours were made at its settings: a quick profile's
    # RSA-vs-baseline wins say nothing about the paper's 28/32.
    comparable = reference == "paper" and comp.paper_caveat is None
    if not ours.empty:  # no run finished: no counts (the paper's alone would stand beside nothing)
        comp.wins = ltsf_wins(comp.cells[["dataset", "horizon", "model", "metric", "mean"]], paper if comparable else None)


def _pair(wide: pd.DataFrame, base: str, rsa: str) -> pd.DataFrame:
    if base not in wide or rsa not in wide:
        return pd.DataFrame(columns=[base, rsa], index=wide.index[:0])
    return wide[[base, rsa]].dropna()


def _count(prefix: str, both: pd.DataFrame, base: str, rsa: str) -> dict[str, int]:
    return {
        f"{prefix}_wins": int((both[rsa] <= both[base]).sum()),
        f"{prefix}_ties": int((both[rsa] == both[base]).sum()),
        f"{prefix}_cells": len(both),
    }


def ltsf_wins(ours: pd.DataFrame, paper: pd.DataFrame | None) -> pd.DataFrame:
    """Per RSA pair, the (dataset, horizon, metric) cells where RSA ≤ its baseline: ``ours_*`` over
    the cells where we have both models; with the paper given, ``paper_*`` over those same cells and
    ``paper_all_*`` over the paper's whole table (its 28/32, 31/32, 24/32)."""
    index = ["dataset", "horizon", "metric"]
    wide = ours.dropna(subset=["mean"]).pivot_table(index=index, columns="model", values="mean", aggfunc="first")
    paper_wide = (
        paper.pivot_table(index=index, columns="model", values="paper_mean", aggfunc="first") if paper is not None else None
    )
    rows = []
    for base, rsa in RSA_PAIRS.items():
        both = _pair(wide, base, rsa)
        row: dict[str, object] = {"baseline": base, "rsa": rsa, **_count("ours", both, base, rsa)}
        if paper_wide is not None:
            published = _pair(paper_wide, base, rsa)
            row |= _count("paper", published.loc[published.index.intersection(both.index)], base, rsa)
            row |= _count("paper_all", published, base, rsa)
        rows.append(row)
    return pd.DataFrame(rows)


def minigrid_complete(comp: Comparison, reference: str, frame: pd.DataFrame) -> None:
    ours = minigrid_ratio_of_means(comp.cells, frame)
    if zero := [f"{r.env}/{r.agent}" for r in ours.itertuples() if r.metric == "generalisation_ratio" and r.n
                and math.isnan(r.mean)]:
        comp.notes.append(f"test/train has no value where the mean train reward is 0: {', '.join(zero)}")
    envs = list(dict.fromkeys(ours["env"]))
    agents = [a for a in MINIGRID_AGENT_ORDER if a in set(ours["agent"]) or reference == "paper"]
    agents += sorted(set(ours["agent"]) - set(agents))
    metrics = list(LAYOUTS["minigrid"].metrics.values())
    grid = pd.DataFrame([(e, a, m) for e in envs for a in agents for m in metrics], columns=["env", "agent", "metric"])
    cells = _complete_grid(ours, grid)
    if reference == "paper":
        cells = cells.merge(minigrid_reference(), on=["env", "agent", "metric"], how="left")
        cells["diff"] = cells["mean"] - cells["paper"]
        # Rows that are missing on both sides (LSTM in the paper, not run by us) say nothing.
        groups = cells.groupby(["env", "agent"])
        cells = cells[groups["n"].transform("sum").gt(0) | groups["paper"].transform("count").gt(0)]
        if cells["paper"].notna().any():  # how the paper's figures came about, where some stand in the table
            comp.notes.append(f"paper: {KERG_TABLE4_CAVEAT}")
    comp.cells = cells.reset_index(drop=True)
    comp.aggregate = minigrid_aggregate(frame)


def minigrid_ratio_of_means(cells: pd.DataFrame, frame: pd.DataFrame) -> pd.DataFrame:
    """``cells`` with each (env, agent)'s ``generalisation_ratio`` as mean test reward / mean train
    reward over its seeds (std and IQM NaN; n the seeds with both rewards). A mean of per-seed
    ratios would have to drop a seed whose train reward is 0; this counts every seed, and is NaN only
    when the mean train reward itself is 0."""
    cells = cells.copy()
    for i in cells.index[cells["metric"] == "generalisation_ratio"]:
        sub = frame[(frame["env"] == cells.at[i, "env"]) & (frame["agent"] == cells.at[i, "agent"])]
        sub = sub.dropna(subset=["train_reward", "test_reward"])
        train, test = sub["train_reward"].mean(), sub["test_reward"].mean()
        cells.loc[i, ["mean", "std"]] = [test / train if len(sub) and train > 0 else math.nan, math.nan]
        cells.loc[i, "n"] = len(sub)
        cells.loc[i, [c for c in ("iqm", "iqm_lo", "iqm_hi") if c in cells]] = math.nan
    return cells


def minigrid_aggregate(frame: pd.DataFrame) -> pd.DataFrame:
    """Per agent and reward: IQM over all runs of every env pair with ≥ 3 seeds, and a stratified
    (per env pair) bootstrap 95% interval — rliable's aggregate. Rewards are in [0, 1] already, so no
    per-task normalisation is needed."""
    rows = []
    for agent, sub in frame.groupby("agent", sort=False):
        for metric in ("train_reward", "test_reward"):
            groups = [g[metric].dropna().to_numpy() for _, g in sub.groupby("env", sort=False)]
            groups = [g for g in groups if g.size >= MIN_SEEDS_FOR_IQM]
            point, lo, hi = iqm_ci(groups) if groups else (math.nan,) * 3
            rows.append((agent, metric, len(groups), int(sum(g.size for g in groups)), point, lo, hi))
    return pd.DataFrame(rows, columns=["agent", "metric", "envs", "runs", "iqm", "iqm_lo", "iqm_hi"])


def failed_frame(
    records: Sequence[RunRecord], spec: SuiteLayout, finished_as: Mapping[str, str] | None = None,
    taken_over_by: Mapping[str, str] | None = None, settings: Mapping[str, str] | None = None,
) -> pd.DataFrame:
    finished_as, taken_over_by, settings = finished_as or {}, taken_over_by or {}, settings or {}
    columns = ["run_id", "name", "status", *spec.config_keys, "seed", "error", "settings", "finished_as",
               "taken_over_by", *(column for column, _ in spec.progress.values()), "driver_gone"]
    rows = [
        [
            r.run_id,
            r.name,
            r.status,
            *(r.tags.get(k) for k in spec.config_keys),
            r.seed,
            (r.tags.get("error") or "").splitlines()[0] if r.tags.get("error") else "",
            settings.get(r.run_id, ""),
            finished_as.get(r.run_id),
            taken_over_by.get(r.run_id),
            *(r.metrics.get(logged, math.nan) for logged in spec.progress),
            # RUNNING in the store, but its driver provably gone (killed outright): the next run of
            # its configuration and seed ends it (reading leaves the store as it is).
            r.status == "RUNNING" and owner_gone(r.tags),
        ]
        for r in records
    ]
    return pd.DataFrame(rows, columns=columns)


def cell_values(comp: Comparison, metric: str) -> pd.DataFrame:
    """The cells of one metric, indexed by the group keys (a convenience for figures and tests)."""
    sub = comp.cells[comp.cells["metric"] == metric]
    return sub.set_index(list(comp.by)).drop(columns="metric")

