"""Reading a suite's tracked runs back from MLflow.

The suites log with the conventions of :mod:`recurbench.tracking`: one experiment per suite
(``recurbench-<suite>``), a parent run per invocation (tag ``role=parent``) and a nested run per
configuration and seed (tag ``mlflow.parentRunId``) carrying the tags ``profile``, ``seed`` and the
suite's configuration keys (``dataset``/``horizon``/``model`` or ``env``/``agent``).

Two choices decide which runs a comparison sees, and both are made here, once:

* **profile** — runs of different profiles (``quick`` vs ``paper``) are never pooled. By default the
  profile of the most recent parent run is used; ``profile="all"`` keeps every profile.
* **one setting per configuration** — a configuration (the suite's keys: dataset/horizon/model or
  env/agent) may have been run with different settings (a ``--config`` variant, a ``--set`` probe,
  an older version's defaults). Seeds of different settings are never pooled. With
  ``settings="shipped"`` (the default) a configuration is shown at the settings its profile ships
  now (:meth:`~recurbench.suites.base.SuiteDefinition.shipped_settings`) where some FINISHED run
  has them, else at its newest FINISHED run's settings (a note names those configurations);
  ``settings="newest"`` always takes the newest run's. Runs whose logged params differ from the
  chosen settings (seed and thread count aside) are left out, with a note naming the differing
  params. A param an older version did not log is read at the suite's default for it (the behaviour
  that version had), for grouping (``--by``) as well; one without a known default counts as
  different.
* **one run per configuration and seed** — when the same configuration and seed were run more than
  once with those settings, only the most recently started FINISHED run counts, so a re-run replaces
  rather than doubles a seed.

Runs that did not finish (FAILED, KILLED, still RUNNING) never enter an aggregate; they are returned
separately so that a table can list them, each ended one with the finished run that now stands for
its configuration and seed at the same settings, if any (``SuiteRuns.finished_as``: a seed that was
run again to the end), and the newest later run of its configuration and seed at the same params, if
any (``SuiteRuns.taken_over_by``: a run that continued it from its checkpoint, or started it again).
A run left RUNNING by a driver killed outright stays RUNNING until the next
``run`` of its configuration and seed ends it FAILED (:func:`recurbench.suites.runner.end_stale_runs`);
reading never changes the store.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from recurbench.errors import ConfigError, RecurbenchError
from recurbench.records import (
    EXECUTION_PARAMS,
    RunRecord,
    has_settings,
    lacks_a_param_of_its_sections,
    settings_diff,
    shipped_settings_diff,
    with_param_defaults,
)
from recurbench.suites.registry import SUITES, load_profile
from recurbench.tracking import (
    check_store,
    experiment_name,
    mlflow_client,
    resolve_tracking_uri,
    run_record,
    search_all_runs,
    sqlite_file,
)

if TYPE_CHECKING:
    from recurbench.suites.base import SuiteDefinition


@dataclass
class SuiteRuns:
    """The runs of one suite experiment that a comparison or report uses."""

    suite: str
    experiment: str
    tracking_uri: str
    profile: str | None
    """The profile kept (``None`` when runs carry no profile tag or all profiles were kept)."""
    finished: list[RunRecord]
    unfinished: list[RunRecord]
    """Nested runs that are FAILED, KILLED or still RUNNING, newest first."""
    finished_as: dict[str, str] = field(default_factory=dict)
    """Ended unfinished run (FAILED, KILLED) id -> the finished run that counts for its
    configuration and seed, at the same settings (the seed was run again to the end, by a later run or
    an earlier one)."""
    taken_over_by: dict[str, str] = field(default_factory=dict)
    """Ended unfinished run id -> the newest run started after it with its configuration, seed and
    params, whatever that run's status: one that continued it from its checkpoint (tag ``resumed_from``,
    :mod:`recurbench.suites.checkpoints`) or started it again. The attempt is history, so a table does
    not list it."""
    superseded: int = 0
    """Finished runs dropped because a later run of the same configuration and seed exists."""
    other_settings: int = 0
    """Finished runs dropped because their params differ from the settings shown for their configuration."""
    unfinished_settings: dict[str, str] = field(default_factory=dict)
    """Unfinished run id -> how its settings differ from the ones shown for its configuration (those of
    the finished run that stands for it; where none finished and the rule is ``shipped``, the settings its
    profile ships now), worded as the left-out note words them. Absent where they agree, where the run
    logged no params yet, or where there is nothing to compare with."""
    latest_parent_id: str | None = None
    notes: list[str] = field(default_factory=list)

    @cached_property
    def client(self) -> Any:
        return mlflow_client(self.tracking_uri)

    def metric_history(self, run_id: str, key: str) -> pd.DataFrame:
        """``step``, ``value`` of one metric over a run, sorted by step (empty if never logged)."""
        history = self.client.get_metric_history(run_id, key)
        frame = pd.DataFrame([(m.step, m.timestamp, m.value) for m in history], columns=["step", "timestamp", "value"])
        # A metric logged twice at one step keeps its last value.
        frame = frame.sort_values(["step", "timestamp"]).drop_duplicates("step", keep="last")
        return frame[["step", "value"]].reset_index(drop=True)

    def artifact_paths(self, run_id: str) -> list[str]:
        """Every artifact file of a run (recursively), as paths relative to the run's artifact root."""
        out: list[str] = []
        stack: list[str | None] = [None]
        while stack:
            for info in self.client.list_artifacts(run_id, stack.pop()):
                (stack.append(info.path) if info.is_dir else out.append(info.path))
        return sorted(out)

    def download_artifact(self, run_id: str, path: str, dst: str | os.PathLike[str] | None = None) -> Path:
        dst = dst or tempfile.mkdtemp(prefix="recurbench-artifact-")
        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # no bars in reports/tests
        return Path(self.client.download_artifacts(run_id, path, str(dst)))


def open_client(tracking_uri: str | None) -> tuple[Any, str]:
    """An MLflow client for ``tracking_uri`` (or the default store), refusing to create a new sqlite
    database as a side effect of reading."""
    uri = resolve_tracking_uri(tracking_uri)
    if (path := sqlite_file(uri)) is not None:
        if not path.is_file():
            raise RecurbenchError(
                f"no MLflow store at {path} (tracking URI {uri}); run a suite first "
                "(`recurbench run SUITE`) or point --tracking-uri / MLFLOW_TRACKING_URI at your store"
            )
    check_store(uri, write=False)
    return mlflow_client(uri), uri


SETTINGS = ("shipped", "newest")
"""How a comparison picks each configuration's settings (see the module docstring)."""


def suite_shipped_settings(suite: str, profile: str) -> list[tuple[dict[str, str], dict[str, str | None]]]:
    """:meth:`~recurbench.suites.base.SuiteDefinition.shipped_settings` of ``suite``'s profile
    ``profile`` as its file ships it ([] for a suite or profile the package does not ship)."""
    if suite not in SUITES:
        return []
    try:
        definition, cfg = load_profile(suite, profile)
    except ConfigError:
        return []
    return definition.shipped_settings(cfg)


class _ShippedSettings:
    """Which runs have the settings their profile ships now (profiles read once, when first met)."""

    def __init__(self, suite: str, defaults: Mapping[str, str]) -> None:
        self.suite = suite
        self.defaults = defaults
        self._by_profile: dict[str, tuple[tuple[str, ...], dict[tuple[str | None, ...], dict[str, str | None]]]] = {}

    def _for(self, run: RunRecord) -> dict[str, str | None] | None:
        profile = run.tags.get("profile")
        if profile is None:
            return None
        if profile not in self._by_profile:
            shipped = suite_shipped_settings(self.suite, profile)
            keys = tuple(shipped[0][0]) if shipped else ()  # every configuration is named by the same tags
            self._by_profile[profile] = (keys, {tuple(tags[k] for k in keys): params for tags, params in shipped})
        keys, table = self._by_profile[profile]
        return table.get(tuple(run.tags.get(k) for k in keys)) if keys else None

    def known(self, run: RunRecord) -> bool:
        """Whether the package ships settings for the run's profile and configuration."""
        return self._for(run) is not None

    def has(self, run: RunRecord) -> bool:
        shipped = self._for(run)
        return shipped is not None and has_settings(run, shipped, self.defaults)

    def differs(self, run: RunRecord) -> str:
        """How ``run``'s settings differ from the ones its profile ships now for its configuration
        ("" where they agree, or where the package ships none)."""
        shipped = self._for(run)
        return "" if shipped is None else shipped_settings_diff(run, shipped, self.defaults)


def load_runs(
    suite: str,
    config_keys: Sequence[str],
    *,
    tracking_uri: str | None = None,
    experiment: str | None = None,
    profile: str | None = None,
    settings: str = "shipped",
) -> SuiteRuns:
    """The finished and unfinished nested runs of ``suite`` (see the module docstring for which).

    ``config_keys`` are the tags (or, failing a tag, logged params) that identify a configuration
    (seed excluded); they decide which runs supersede one another. A param among them (say
    ``training.rsa_lr_factor``) keeps runs that differ in it apart instead of leaving one side out.
    ``settings`` (``shipped`` or ``newest``) picks each configuration's settings.
    """
    if settings not in SETTINGS:
        raise ConfigError(f"--settings: unknown rule {settings!r}; choose one of: {', '.join(SETTINGS)}")
    notes: list[str] = []
    name, uri, parents, nested = _read_experiment(suite, experiment, tracking_uri, notes)
    # The suite's defaults are read (and the suites imported) where some logged keys differ, or below
    # for the shipped settings; settings="newest" on a store of one version imports no suite.
    choice = _SettingsChoice(suite, config_keys)
    if lacks_a_param_of_its_sections(nested):
        nested = [with_param_defaults(r, choice.defaults_for(r)) for r in nested]
    profile = _chosen_profile(name, profile, parents, nested, notes)
    if profile is not None:
        nested = [r for r in nested if r.tags.get("profile") == profile]
        parents = [p for p in parents if p.tags.get("profile") == profile]
    done = [r for r in nested if r.status == "FINISHED"]  # newest first: the first one of a key wins
    choice.choose(done, shipped=settings == "shipped", notes=notes)
    finished, seen, superseded, other_settings = choice.keep(done, notes)
    _note_other_data(finished, notes)
    unfinished = [r for r in nested if r.status != "FINISHED"]
    differing = choice.unfinished_settings(unfinished, shipped=settings == "shipped")
    return SuiteRuns(
        suite=suite,
        experiment=name,
        tracking_uri=uri,
        profile=profile,
        finished=finished[::-1],  # oldest first reads naturally in tables and legends
        unfinished=unfinished,
        finished_as=choice.finished_as(unfinished, seen, differing),
        unfinished_settings=differing,
        taken_over_by=taken_over_by(nested, choice.config_of),
        superseded=superseded,
        other_settings=other_settings,
        latest_parent_id=parents[0].run_id if parents else None,
        notes=notes,
    )


def taken_over_by(records: Sequence[RunRecord], config_of: Callable[[RunRecord], tuple[Any, ...]]
                  ) -> dict[str, str]:
    """Ended (FAILED, KILLED) run id -> the newest run started after it with the same configuration
    (``config_of``), seed and params (execution params aside: :data:`recurbench.records.EXECUTION_PARAMS`):
    the run that continued it from its checkpoint (which carries the same params) or started it again. A
    run without a seed is never taken over."""
    def key(r: RunRecord) -> tuple[Any, ...]:
        settings = sorted((k, v) for k, v in r.params.items() if k not in EXECUTION_PARAMS)
        return (*config_of(r), r.seed, tuple(settings))

    newest: dict[tuple[Any, ...], RunRecord] = {}
    for r in records:
        if r.seed is not None and ((k := key(r)) not in newest or r.start_time > newest[k].start_time):
            newest[k] = r
    out: dict[str, str] = {}
    for r in records:
        if r.status in ("FAILED", "KILLED") and r.seed is not None:
            last = newest[key(r)]
            if last.start_time > r.start_time:
                out[r.run_id] = last.run_id
    return out


def _read_experiment(suite: str, experiment: str | None, tracking_uri: str | None, notes: list[str]
                     ) -> tuple[str, str, list[RunRecord], list[RunRecord]]:
    """The experiment's name, the store's URI, its parent runs and its nested runs, newest first: the
    suite's runs only (:data:`SUITE_ROLES`; a note in ``notes`` names the others)."""
    client, uri = open_client(tracking_uri)
    name = experiment or experiment_name(suite)
    found = client.get_experiment_by_name(name)
    if found is None:
        known = sorted(e.name for e in client.search_experiments())
        raise RecurbenchError(
            f"no experiment {name!r} in the MLflow store {uri}; experiments there: {', '.join(known) or 'none'}"
        )
    every = [run_record(r) for r in search_all_runs(client, found.experiment_id)]  # newest first
    runs = [r for r in every if r.tags.get("role") in SUITE_ROLES]
    others = [r for r in every if r.tags.get("role") not in SUITE_ROLES]
    nested = [r for r in runs if r.tags.get("role") != "parent"]
    if not nested:
        if others:
            raise RecurbenchError(f"experiment {name!r} in {uri} holds no runs of `recurbench run {suite}`, only "
                                  f"{_other_runs(others)}, which compare and report leave out" + _tune_hint(others, suite))
        raise RecurbenchError(f"experiment {name!r} in {uri} has no runs to compare")
    if others:
        notes.append(f"not shown: {_other_runs(others)}, which are not runs of `recurbench run {suite}`")
    return name, uri, [r for r in runs if r.tags.get("role") == "parent"], nested


SUITE_ROLES = (None, "parent")
"""The ``role`` tags of a suite's runs: an invocation of ``run`` (``parent``) and its nested runs (none)."""
TUNE_ROLES = ("study", "trial")
"""The ``role`` tags of ``recurbench tune``'s runs, logged into the suite's experiment: a parent run per
study and a nested run per trial. A trial trains at the settings the sampler proposed and is scored on
the validation split, so neither is a suite run, and ``compare``/``report`` leave them out."""


def _other_runs(others: Sequence[RunRecord]) -> str:
    """The runs of ``others`` in words: ``recurbench tune``'s studies and trials, and runs of other roles."""
    tuned = [r for r in others if r.tags.get("role") in TUNE_ROLES]
    studies = list(dict.fromkeys(r.tags.get("study", r.name) for r in tuned))
    parts = [f"the runs of `recurbench tune` (stud{'y' if len(studies) == 1 else 'ies'} "
             f"{', '.join(studies[:3])}{', ...' if len(studies) > 3 else ''}; "
             f"{sum(r.tags.get('role') == 'trial' for r in tuned)} trial(s))"] if tuned else []
    if rest := [r for r in others if r.tags.get("role") not in TUNE_ROLES]:
        parts.append(f"{len(rest)} run(s) of role {', '.join(sorted({str(r.tags.get('role')) for r in rest}))}")
    return " and ".join(parts)


def _tune_hint(others: Sequence[RunRecord], suite: str) -> str:
    """Where a study's results are, when ``others`` hold one."""
    if not any(r.tags.get("role") in TUNE_ROLES for r in others):
        return ""
    return (": a study's best parameters and its trials are in `tune`'s closing table, its Optuna storage and its "
            f"MLflow parent run; `tune --best-out FILE` writes them as a profile that `recurbench run {suite} "
            "--config FILE --profile tuned` trains")


def _chosen_profile(experiment: str, profile: str | None, parents: Sequence[RunRecord],
                    nested: Sequence[RunRecord], notes: list[str]) -> str | None:
    """The profile to keep: the one asked for, else the latest invocation's (``None``: every profile)."""
    profiles = sorted({r.tags["profile"] for r in nested if "profile" in r.tags})
    if profile is None and profiles:
        latest = next((p.tags["profile"] for p in parents if "profile" in p.tags), None)
        profile = latest if latest in profiles else next(r.tags["profile"] for r in nested if "profile" in r.tags)
        if len(profiles) > 1:
            others = ", ".join(p for p in profiles if p != profile)
            notes.append(f"profile {profile!r} (most recent); runs of other profiles not shown: {others}")
        return profile
    if profile == "all":
        return None
    if profile is not None and profile not in profiles:
        raise RecurbenchError(
            f"experiment {experiment!r} has no runs of profile {profile!r}; profiles there: "
            f"{', '.join(profiles) or 'none'}"
        )
    return profile


class _SettingsChoice:
    """The settings shown for each configuration, and which finished runs have them."""

    def __init__(self, suite: str, config_keys: Sequence[str]) -> None:
        self.suite = suite
        self.config_keys = tuple(config_keys)
        self._defaults: dict[str, str] | None = None
        self.chosen: dict[tuple[Any, ...], tuple[RunRecord, str]] = {}

    @cached_property
    def _definition(self) -> SuiteDefinition | None:
        """The suite's definition (None for a suite not registered), imported the first time it is needed."""
        return SUITES[self.suite]() if self.suite in SUITES else None

    @cached_property
    def _shipped(self) -> _ShippedSettings:
        return _ShippedSettings(self.suite, self.defaults())

    def defaults(self) -> dict[str, str]:
        """The suite's param defaults (:meth:`~recurbench.suites.base.SuiteDefinition.param_defaults`),
        read the first time they are needed."""
        if self._defaults is None:
            self._defaults = self._definition.param_defaults() if self._definition is not None else {}
        return self._defaults

    def defaults_for(self, run: RunRecord) -> dict[str, str]:
        """The suite's param defaults for ``run``'s configuration: only the params a run of it logs."""
        return self._definition.param_defaults(run.tags) if self._definition is not None else {}

    def config_of(self, r: RunRecord) -> tuple[Any, ...]:
        return tuple(r.tags.get(k, r.params.get(k)) for k in self.config_keys)

    def choose(self, done: Sequence[RunRecord], *, shipped: bool, notes: list[str]) -> None:
        """Each configuration's newest run, or with ``shipped`` its newest run at the settings its
        profile ships now where one has them."""
        for r in done:
            self.chosen.setdefault(self.config_of(r), (r, "newest"))
        if not shipped or not self.chosen:
            return
        table = self._shipped
        for r in done:
            config = self.config_of(r)
            if self.chosen[config][1] == "newest" and table.has(r):
                self.chosen[config] = (r, "shipped")
        # Each with how its run differs: a --set probe standing in a cell must say what it changed.
        unshipped = ["/".join(map(str, c)) + (f" ({why})" if (why := table.differs(r)) else "")
                     for c, (r, how) in self.chosen.items() if how == "newest" and table.known(r)]
        if unshipped:
            notes.append(
                f"{len(unshipped)} configuration(s) have no finished run at the settings their profile ships now, "
                f"so they are shown at their newest run's settings: {', '.join(unshipped[:3])}"
                + (", ..." if len(unshipped) > 3 else "")
            )

    def differs(self, r: RunRecord) -> str:
        """How ``r``'s settings differ from those shown for its configuration ("" where they agree); the
        suite's defaults are read the first time two runs' logged params differ in their keys."""
        reference, how = self.chosen[self.config_of(r)]
        defaults = self._defaults
        if defaults is None and r.params.keys() != reference.params.keys():
            defaults = self.defaults()
        return settings_diff(r, reference, defaults, label=how)

    def keep(self, done: Sequence[RunRecord], notes: list[str]
             ) -> tuple[list[RunRecord], dict[tuple[Any, ...], str], int, int]:
        """The finished runs that count (newest first; one per configuration and seed, at the settings
        shown), the run id that counts per (configuration..., seed), and how many were superseded or
        left out for their settings."""
        finished: list[RunRecord] = []
        seen: dict[tuple[Any, ...], str] = {}
        differences: dict[tuple[Any, ...], str] = {}  # (configuration, how it differs) -> its words
        superseded = other_settings = 0
        for r in done:
            config = self.config_of(r)
            if diff := self.differs(r):
                other_settings += 1
                differences.setdefault((config, diff), "/".join(str(v) for v in config) + ": " + diff)
                continue
            key = (*config, r.seed if r.seed is not None else r.run_id)
            if key in seen:
                superseded += 1
                continue
            seen[key] = r.run_id
            finished.append(r)
        if other_settings:
            shown = "; ".join(list(differences.values())[:3]) + ("; ..." if len(differences) > 3 else "")
            notes.append(
                f"{other_settings} finished run(s) left out: their settings differ from the ones shown for their "
                f"configuration ({shown}); --by with the param shows them apart"
            )
        if superseded:
            notes.append(f"{superseded} older finished run(s) superseded by a later run of the same configuration and seed")
        return finished, seen, superseded, other_settings

    def finished_as(self, unfinished: Sequence[RunRecord], seen: Mapping[tuple[Any, ...], str],
                    differing: Mapping[str, str]) -> dict[str, str]:
        """Ended unfinished run id -> the finished run that counts for its configuration and seed at the
        same settings (``differing``: :meth:`unfinished_settings`); a live (RUNNING) run is always listed:
        it is at work now."""
        out: dict[str, str] = {}
        for r in unfinished:
            config = self.config_of(r)
            if r.status == "RUNNING" or config not in self.chosen or r.seed is None or (*config, r.seed) not in seen:
                continue
            if r.params and r.run_id not in differing:
                out[r.run_id] = seen[(*config, r.seed)]
        return out

    def unfinished_settings(self, unfinished: Sequence[RunRecord], *, shipped: bool) -> dict[str, str]:
        """Unfinished run id -> how its settings differ from the ones shown for its configuration
        (:attr:`SuiteRuns.unfinished_settings`); only the runs whose settings differ."""
        out: dict[str, str] = {}
        for r in unfinished:
            if not r.params:
                continue
            if self.config_of(r) in self.chosen:
                diff = self.differs(r)
            else:
                diff = self._shipped.differs(r) if shipped else ""
            if diff:
                out[r.run_id] = diff
        return out


def _note_other_data(finished: Sequence[RunRecord], notes: list[str]) -> None:
    if other_data := [r.name for r in finished if r.tags.get("data_registry") == "differs"]:
        notes.append(
            f"{len(other_data)} run(s) read a data file other than the one the registry pins (tag data_registry="
            f"differs): {', '.join(other_data[:3])}{', ...' if len(other_data) > 3 else ''}; --by data_sha256 "
            "shows them apart"
        )
