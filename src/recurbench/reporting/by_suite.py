"""Each suite's part of ``compare`` and ``report`` (the paper's cells and figures it adds), and the
entry points that read a suite's runs by name and pick that part: :func:`compare`,
:func:`compare_runs` and :func:`write_report`.

The generic pieces sit below this module (:mod:`.compare`, :mod:`.report`, :mod:`.runs`), the suites'
own beside them (:mod:`.langs`, :mod:`.memory`; LTSF's and MiniGrid's in :mod:`.compare` and
:mod:`.report`); only this module knows which is whose.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from recurbench.config import check_unique
from recurbench.errors import ConfigError
from recurbench.reporting import compare as generic
from recurbench.reporting.compare import (
    REFERENCES,
    Comparison,
    Completion,
    layout,
    ltsf_complete,
    minigrid_complete,
)
from recurbench.reporting.langs import langs_complete, langs_figures
from recurbench.reporting.memory import memory_complete, memory_figures
from recurbench.reporting.report import (
    REPORT_FORMATS,
    Figure,
    FigureBuilder,
    Report,
    ltsf_figures,
    minigrid_figures,
    report_folder,
)
from recurbench.reporting.report import write_report as write_suite_report
from recurbench.reporting.runs import SuiteRuns, load_runs


@dataclass(frozen=True)
class SuiteReporting:
    complete: Completion | None
    figures: FigureBuilder


def no_figures(runs: SuiteRuns, comp: Comparison, fig_dir: Path) -> tuple[list[Figure], list[str]]:
    """A plugin suite's figures: none (what its runs log is its own); its report holds its tables."""
    return [], [f"figures: recurbench draws them for the suites it ships; {runs.suite!r} is a plugin's suite, so its "
                "report holds the comparison tables only"]


SUITE_REPORTING: dict[str, SuiteReporting] = {
    "ltsf": SuiteReporting(ltsf_complete, ltsf_figures),
    "minigrid": SuiteReporting(minigrid_complete, minigrid_figures),
    "langs": SuiteReporting(langs_complete, langs_figures),
    "memory": SuiteReporting(memory_complete, memory_figures),
}
"""The shipped suites' parts; a plugin suite gets :data:`PLUGIN_REPORTING` (its layout:
:func:`recurbench.reporting.compare.plugin_layout`)."""

PLUGIN_REPORTING = SuiteReporting(None, no_figures)


def reporting(suite: str) -> SuiteReporting:
    return SUITE_REPORTING.get(suite, PLUGIN_REPORTING)


def compare_runs(runs: SuiteRuns, *, reference: str = "paper", by: Sequence[str] | None = None) -> Comparison:
    """:func:`recurbench.reporting.compare.compare_runs` with the suite's own part."""
    return generic.compare_runs(runs, reference=reference, by=by, complete=reporting(runs.suite).complete)


def compare(
    suite: str,
    *,
    tracking_uri: str | None = None,
    experiment: str | None = None,
    reference: str = "paper",
    by: Sequence[str] | None = None,
    profile: str | None = None,
    settings: str = "shipped",
) -> Comparison:
    """Read the suite's runs from MLflow and compare them (see the module docstring); ``settings``
    picks each configuration's settings (:func:`recurbench.reporting.runs.load_runs`)."""
    spec = layout(suite)
    if by:
        check_unique(list(by), "key", "--by")  # before the store is read
    if reference not in REFERENCES:
        raise ConfigError(f"unknown reference {reference!r}; choose one of: {', '.join(REFERENCES)}")
    # --by keys join the configuration, so that grouping by a param (a variant) also keeps its runs.
    config_keys = tuple(dict.fromkeys([*spec.config_keys, *(by or ())]))
    runs = load_runs(
        suite, config_keys, tracking_uri=tracking_uri, experiment=experiment, profile=profile, settings=settings
    )
    return compare_runs(runs, reference=reference, by=by)


def write_report(
    suite: str,
    out: str | Path,
    *,
    tracking_uri: str | None = None,
    experiment: str | None = None,
    profile: str | None = None,
    fmt: str = "html",
    log_to_mlflow: bool = True,
    settings: str = "shipped",
) -> Report:
    """The suite's runs (:func:`~recurbench.reporting.runs.load_runs`), compared and drawn into a
    report in ``out`` (see :func:`recurbench.reporting.report.write_report`)."""
    if fmt not in REPORT_FORMATS:
        raise ConfigError(f"unknown report format {fmt!r}; choose one of: {', '.join(REPORT_FORMATS)}")
    spec = layout(suite)
    with report_folder(out, fmt):  # a bad --out is refused before the store is read
        runs = load_runs(
            suite, spec.config_keys, tracking_uri=tracking_uri, experiment=experiment, profile=profile, settings=settings
        )
        comparison = compare_runs(runs)
    return write_suite_report(runs, comparison, reporting(suite).figures, out, fmt=fmt,
                              log_to_mlflow=log_to_mlflow)
