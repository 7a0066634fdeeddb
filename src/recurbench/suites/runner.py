"""The suite runner: one parent MLflow run per invocation, one nested run per configuration and seed.

A suite is a YAML file shipped in this folder (``<name>.yaml``) plus a :class:`SuiteDefinition`
that knows how to validate its profiles, plan its runs and execute one of them. The runner owns what
is common: loading and validating the YAML, seeding, tracking, progress bars, failure handling and
the final summary. A configuration that raises is ended FAILED (with the error as a tag); the
others still run, and the invocation reports the failures at the end.

Runs execute through an engine (:mod:`recurbench.engine`): in this process one at a time, or as Ray
tasks, one per configuration x seed. The parent run is the driver's; each run's nested run is opened
by whoever executes it (:func:`execute_plan`).

``skip_finished`` (``recurbench run --skip-finished``) resumes an interrupted or extended invocation:
a configuration x seed that already has a FINISHED run in the store, with the same suite, profile and
settings (every logged param, execution params such as the thread count aside, a param an older
version did not log read at its default), is not run again; that run's results enter the summary.

One driver per store at a time: a run of a configuration and seed that this invocation is about to
run, found RUNNING in the store, was left so by a driver killed outright (SIGKILL, a machine that
stopped). It is ended FAILED with the reason before the configuration runs again.

Suite YAML layout::

    suite: ltsf                    # must equal the file's name
    description: ...
    profiles:
      quick: {...}                 # validated by the suite's profile model
      paper: {...}

YAML anchors and merge keys (``<<: *base``) are the way to share settings between profiles.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from recurbench.config import StrictModel, check_names, deep_merge, parse_overrides, read_yaml, validate
from recurbench.devices import describe_device, resolve_device
from recurbench.engine import EngineSpec, Session, open_session, task_device
from recurbench.errors import ConfigError, RecurbenchError
from recurbench.seeding import seed_everything
from recurbench.tracking import (
    RunHandle,
    RunRecord,
    Tracker,
    experiment_name,
    flatten,
    param_value,
    standard_tags,
)

if TYPE_CHECKING:
    import torch

#: Reports progress of one run: ``progress(completed, total, description)``.
ProgressFn = Callable[[float, float, str], None]


@dataclass(frozen=True)
class RunPlan:
    """One configuration x seed of a suite, fully resolved before anything trains."""

    name: str
    seed: int
    tags: dict[str, str]
    params: dict[str, Any]
    payload: Any = None
    """Whatever the suite needs to execute the run (typed configs, not strings)."""


@dataclass
class RunOutcome:
    plan: RunPlan
    status: str  # FINISHED | FAILED | PLANNED (a dry run)
    metrics: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    run_id: str | None = None
    seconds: float = 0.0
    reused: bool = False
    """A run found FINISHED in the store (``skip_finished``), not run by this invocation."""


@dataclass
class SuiteResult:
    suite: str
    profile: str
    parent_run_id: str | None
    outcomes: list[RunOutcome]

    @property
    def failed(self) -> list[RunOutcome]:
        return [o for o in self.outcomes if o.status == "FAILED"]

    @property
    def reused(self) -> list[RunOutcome]:
        return [o for o in self.outcomes if o.reused]

    stale: list[str] = field(default_factory=list)
    """Runs found RUNNING for the configurations run here (left by a killed driver), ended FAILED."""


class SuiteDefinition(ABC):
    """What a suite provides to the runner."""

    name: str
    profile_model: type[StrictModel]
    default_device: str = "auto"
    """The device its runs train on when ``--device`` is not given (see :mod:`recurbench.devices`)."""
    headline_metrics: tuple[str, ...] = ()
    """The metrics :meth:`execute` returns (and logs): a stored run is reused only if it has them all."""
    execute_params: tuple[str, ...] = ()
    """Params :meth:`execute` logs beside the plan's (the data's window counts, say): any value matches."""

    def target_device(self, device: str | None) -> torch.device:
        """``--device`` (None: :attr:`default_device`) as a device this machine has, else a ConfigError."""
        return resolve_device(device or self.default_device, what="--device")

    @abstractmethod
    def plan(self, profile: BaseModel, selection: Mapping[str, Any], *, data_dir: str | None) -> list[RunPlan]:
        """Expand a profile (narrowed by command-line ``selection``) into runs, validating everything
        that can be checked before training (names, shapes, data availability)."""

    @abstractmethod
    def execute(
        self, plan: RunPlan, run: RunHandle, progress: ProgressFn, *, data_dir: str | None, device: torch.device
    ) -> dict[str, float]:
        """Run one plan on ``device``, logging to ``run``; returns its headline metrics."""

    def param_defaults(self) -> dict[str, str]:
        """The value each logged setting takes when a run does not log it, as dotted param keys.

        A run logged by an older version lacks the settings added since; each was added with the old
        behaviour as its default, so comparisons read the missing param as this value (see
        :func:`recurbench.reporting.runs.settings_diff`). Default: none known."""
        return {}

    def shipped_settings(self, profile: BaseModel) -> list[tuple[dict[str, str], dict[str, str | None]]]:
        """What a run of each configuration logs with ``profile`` as it stands: ``(tags, params)``
        pairs, the tags naming the configuration (``dataset``/``horizon``/``model``), the params as
        the logged text (dotted keys, seed aside), ``None`` where the value is not the profile's to
        decide (say, the data's feature count). Comparisons prefer runs with these settings (see
        :func:`recurbench.reporting.runs.load_runs`). Default: none known."""
        return []

    def summary_rows(self, outcomes: Sequence[RunOutcome]) -> tuple[list[str], list[list[str]]]:
        """Header and rows of the table printed at the end (default: one row per run)."""
        keys = sorted({k for o in outcomes for k in o.metrics})
        rows = [
            [o.plan.name, o.status, *(f"{o.metrics[k]:.4f}" if k in o.metrics else "-" for k in keys)]
            for o in outcomes
        ]
        return ["run", "status", *keys], rows


def selected_names(
    selection: Mapping[str, Any], key: str, default: Sequence[str], known: Mapping[str, Any], what: str
) -> list[str]:
    """The command line's ``--<key>`` choice, else the profile's ``default``; each name checked
    against ``known`` (a typo in the profile itself is already caught when the profile is validated)."""
    names = list(selection.get(key) or default)
    check_names(names, known, what, f"--{key}")
    return names


def selected_seeds(selection: Mapping[str, Any], default: int) -> range:
    """The seeds to run: ``--seeds`` (else the profile's seed count) consecutive seeds starting at
    ``--first-seed`` (default 0), so that more seeds can be added to a finished set later."""
    seeds = int(selection.get("seeds") or default)
    if seeds < 1:
        raise ConfigError(f"seeds: must be at least 1 (from --seeds or the profile), got {seeds}")
    first = int(selection.get("first_seed") or 0)
    if first < 0:
        raise ConfigError(f"first seed: must be at least 0 (from --first-seed), got {first}")
    return range(first, first + seeds)


def _definitions() -> dict[str, Callable[[], SuiteDefinition]]:
    # Imported lazily so that `recurbench list` and `data` do not pay for torch models or SB3.
    def ltsf() -> SuiteDefinition:
        from recurbench.suites.ltsf import LTSFSuite

        return LTSFSuite()

    def minigrid() -> SuiteDefinition:
        from recurbench.suites.minigrid import MinigridSuite

        return MinigridSuite()

    def langs() -> SuiteDefinition:
        from recurbench.suites.langs import LangsSuite

        return LangsSuite()

    def memory() -> SuiteDefinition:
        from recurbench.suites.memory import MemorySuite

        return MemorySuite()

    return {"ltsf": ltsf, "minigrid": minigrid, "langs": langs, "memory": memory}


SUITES: dict[str, Callable[[], SuiteDefinition]] = _definitions()


def suite_file(name: str) -> Path:
    return Path(str(resources.files("recurbench.suites").joinpath(f"{name}.yaml")))


def list_suites() -> dict[str, dict[str, Any]]:
    """Shipped suites with their description and profile names."""
    out = {}
    for name in SUITES:
        path = suite_file(name)
        if path.is_file():
            raw = read_yaml(path)
            out[name] = {"description": raw.get("description", ""), "profiles": list(raw.get("profiles", {}))}
    return out


class SuiteFile(StrictModel):
    suite: str
    description: str = ""
    profiles: dict[str, dict[str, Any]]


def load_profile(
    name: str, profile: str, path: str | os.PathLike[str] | None = None, overrides: Sequence[str] = ()
) -> tuple[SuiteDefinition, BaseModel]:
    """Load suite ``name`` (or the YAML at ``path``) and validate one of its profiles, with the
    command line's ``--set KEY=VALUE`` ``overrides`` applied on top of it (see
    :func:`recurbench.config.parse_overrides`)."""
    if name not in SUITES:
        raise ConfigError(f"unknown suite {name!r}; known suites: {', '.join(SUITES)}")
    definition = SUITES[name]()
    source = Path(path) if path is not None else suite_file(name)
    raw = read_yaml(source)
    header = validate(SuiteFile, raw, str(source))
    if header.suite != name:
        raise ConfigError(f"{source}: suite: the file defines suite {header.suite!r}, expected {name!r}")
    if profile not in header.profiles:
        raise ConfigError(
            f"{source}: profiles: no profile {profile!r}; available: {', '.join(header.profiles)}"
        )
    raw_profile = header.profiles[profile]
    if overrides:
        raw_profile = deep_merge(raw_profile, parse_overrides(overrides))
    try:
        cfg = validate(definition.profile_model, raw_profile, str(source), prefix=f"profiles.{profile}")
    except ConfigError as exc:
        if not overrides:
            raise
        raise ConfigError(f"{exc} (with {' '.join('--set ' + o for o in overrides)})") from None
    return definition, cfg


def run_suite(
    name: str,
    profile: str,
    tracker: Tracker,
    *,
    selection: Mapping[str, Any] | None = None,
    data_dir: str | None = None,
    config_path: str | os.PathLike[str] | None = None,
    overrides: Sequence[str] = (),
    progress_factory: Callable[[RunPlan], ProgressFn] | None = None,
    device: str | None = None,
    skip_finished: bool = False,
    dry_run: bool = False,
    engine: EngineSpec | None = None,
) -> SuiteResult:
    """Plan every run (all validation happens here, before training), then execute them through
    ``engine`` (default: serial, in this process), on ``device`` (``--device``; None: the suite's
    :attr:`SuiteDefinition.default_device`; under Ray with GPUs per run, the GPU Ray assigned). With
    ``skip_finished``, plans that already have a FINISHED run at the same settings are not run again;
    when none is left, no parent run is opened (``parent_run_id`` None). ``dry_run`` stops after
    planning (and reading the store for ``skip_finished``): the runs left to do come back
    ``PLANNED``, and nothing is trained or written."""
    engine = engine or EngineSpec()
    definition, cfg = load_profile(name, profile, config_path, overrides)
    if engine.kind == "ray" and not engine.gpus_per_run and device not in (None, "auto", "cpu"):
        raise ConfigError(f"--device {device} with --engine ray needs --gpus-per-run (Ray hides the GPUs from a "
                          "task that reserves none)")
    # Serial: checked here, where the runs train. A Ray task resolves the device on its own machine.
    device_tag = (describe_device(definition.target_device(device)) if engine.kind == "serial"
                  else f"ray ({engine.gpus_per_run:g} GPU per run)")
    plans = definition.plan(cfg, dict(selection or {}), data_dir=data_dir)
    if not plans:
        raise ConfigError(f"suite {name!r} profile {profile!r}: the selection leaves no run to do")
    experiment = experiment_name(name)
    reused = stored_outcomes(definition, tracker, experiment, profile, plans) if skip_finished else {}
    outcomes: list[RunOutcome | None] = [reused.get(i) for i in range(len(plans))]
    if dry_run:
        return SuiteResult(name, profile, None, [o or RunOutcome(p, "PLANNED") for o, p in zip(outcomes, plans, strict=True)])
    for o in reused.values():
        if progress_factory:
            progress_factory(o.plan)(1, 1, f"already finished as run {o.run_id}: not run again")
    todo = [i for i, o in enumerate(outcomes) if o is None]
    if not todo:
        return SuiteResult(name, profile, None, [o for o in outcomes if o is not None])
    with open_session(engine, tracker) as session:
        stale = end_stale_runs(session.tracker, experiment, name, profile, [plans[i] for i in todo])
        with session.tracker.run(
            f"{name}-{profile}", experiment=experiment,
            tags=standard_tags(suite=name, profile=profile, role="parent", device=device_tag, engine=engine.kind),
        ) as parent:
            parent.log_params({"profile": profile, "n_runs": len(todo), "selection": dict(selection or {}),
                               "overrides": list(overrides), "skip_finished": skip_finished, "engine": engine.kind})
            _execute(session, definition, name, profile, plans, todo, outcomes, parent.run_id,
                     data_dir=data_dir, device=device, progress_factory=progress_factory)
            done = [o for o in outcomes if o is not None]
            ran = [outcomes[i] for i in todo]
            failed = [o for o in ran if o is not None and o.status != "FINISHED"]
            parent.log_metrics({"runs_finished": len(ran) - len(failed), "runs_failed": len(failed),
                                "runs_skipped": len(reused), "stale_runs_ended": len(stale)})
            result = SuiteResult(name, profile, parent.run_id, done, stale)
            if failed and len(failed) == len(ran):
                # Mark the parent FAILED too: nothing in this invocation produced a result.
                raise SuiteFailed(result)
    return result


def _execute(
    session: Session, definition: SuiteDefinition, name: str, profile: str, plans: Sequence[RunPlan],
    todo: Sequence[int], outcomes: list[RunOutcome | None], parent_id: str, *, data_dir: str | None,
    device: str | None, progress_factory: Callable[[RunPlan], ProgressFn] | None,
) -> None:
    """Run ``plans[todo]`` through ``session``, filling ``outcomes``; on Ctrl-C or SIGTERM, the runs the
    session leaves open end KILLED (their Ray tasks were cancelled: nothing else can close them)."""
    in_task = session.kind != "serial"
    jobs = [(definition, name, profile, plans[i], session.tracker, parent_id, data_dir, device, in_task) for i in todo]
    bars: dict[int, ProgressFn] = {}

    def progress_of(k: int) -> ProgressFn:
        if progress_factory is None:
            return lambda *_: None
        if k not in bars:
            bars[k] = progress_factory(plans[todo[k]])
        return bars[k]

    def on_start(k: int) -> None:
        if in_task:
            progress_of(k)(0, 1, "running as a Ray task")

    def on_done(k: int, outcome: RunOutcome) -> None:
        outcomes[todo[k]] = outcome
        if in_task:
            progress_of(k)(1, 1, outcome.status.lower() + (f": {outcome.error}" if outcome.error else ""))

    def on_crash(k: int, reason: str) -> None:
        plan = plans[todo[k]]
        error = f"its worker died and Ray's retries ran out ({reason})"
        ids = session.tracker.end_stale(experiment_name(name), {"suite": name, "profile": profile,
                                                                PLAN_TAG: plan_key(name, profile, plan)},
                                        error, parent_id=parent_id)
        outcomes[todo[k]] = RunOutcome(plan, "FAILED", error=error, run_id=ids[0] if ids else None)
        progress_of(k)(1, 1, "failed: " + error)

    if not in_task:  # a progress bar per run, drawn when the run starts
        jobs = [(*job[:-1], False, lambda *a, k=k: progress_of(k)(*a)) for k, job in enumerate(jobs)]
    try:
        session.map(execute_plan, jobs, on_done, on_crash, on_start)
    except (KeyboardInterrupt, SystemExit) as exc:
        if in_task:
            session.tracker.end_stale(experiment_name(name), {"suite": name, "profile": profile},
                                      f"KeyboardInterrupt: the driver was stopped ({type(exc).__name__}) and "
                                      "cancelled its Ray tasks", status="KILLED", parent_id=parent_id)
        raise


PLAN_TAG = "plan_key"


def execute_plan(
    definition: SuiteDefinition, name: str, profile: str, plan: RunPlan, tracker: Tracker, parent_id: str,
    data_dir: str | None, device: str | None, in_task: bool = False, progress: ProgressFn | None = None,
) -> RunOutcome:
    """Run one plan as a nested run of ``parent_id``: in the driver's process (serial) or in a Ray task
    (``in_task``: any run an earlier, dead attempt of this task left RUNNING is ended FAILED first).
    An exception in the training code ends the run FAILED and comes back in the outcome."""
    experiment = experiment_name(name)
    key = plan_key(name, profile, plan)
    if in_task:
        tracker.end_stale(experiment, {"suite": name, "profile": profile, PLAN_TAG: key},
                          "its worker died (killed, or out of memory); Ray ran the task again", parent_id=parent_id)
    target = definition.target_device(task_device(device))
    tags = standard_tags(suite=name, profile=profile, seed=plan.seed, device=describe_device(target),
                         **{PLAN_TAG: key}, **plan.tags)
    start = time.perf_counter()
    outcome = RunOutcome(plan, "FAILED")
    try:
        with tracker.run(plan.name, experiment=experiment, tags=tags, parent=parent_id) as run:
            outcome.run_id = run.run_id
            run.log_params({**plan.params, "seed": plan.seed})
            seed_everything(plan.seed)
            outcome.metrics = definition.execute(plan, run, progress or (lambda *_: None), data_dir=data_dir,
                                                 device=target)
            outcome.seconds = time.perf_counter() - start
            run.log_metrics({"wall_time_s": outcome.seconds})
        outcome.status = "FINISHED"
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as exc:  # the run is already marked FAILED by the tracker
        outcome.error = f"{type(exc).__name__}: {exc}"
        outcome.seconds = time.perf_counter() - start
    return outcome


def end_stale_runs(tracker: Tracker, experiment: str, name: str, profile: str, plans: Sequence[RunPlan]) -> list[str]:
    """End FAILED the runs of ``plans`` that a driver killed outright left RUNNING (one driver per
    store at a time: nobody is running them); their ids."""
    keys = {plan_key(name, profile, plan) for plan in plans}
    running = tracker.stored_runs(experiment, {"suite": name, "profile": profile}, "RUNNING")
    reason = ("left RUNNING by an invocation that ended without closing it (killed outright, or its machine "
              "stopped); this configuration and seed was run again")
    stale = [r for r in running if r.tags.get(PLAN_TAG) in keys]
    ended = tracker.end_runs([r.run_id for r in stale], reason)
    # Their parents too: the invocation that opened them is gone as well.
    tracker.end_runs(sorted({r.parent_id for r in stale if r.parent_id}), reason.split(";")[0])
    return ended


def plan_key(suite: str, profile: str, plan: RunPlan) -> str:
    """A digest naming what a run of ``plan`` computes: suite, profile, configuration tags, seed and
    every setting (as logged), so that the runs of one plan can be found in the store."""
    what = {"suite": suite, "profile": profile, "tags": plan.tags, "seed": plan.seed,
            "params": {k: param_value(v) for k, v in flatten(plan.params).items()}}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:20]


def typical_seconds(name: str, profile: str, tracker: Tracker, plans: Sequence[RunPlan]) -> dict[int, float]:
    """For each plan (by index) that has one: the median wall time (``wall_time_s``) of the FINISHED
    runs in the store of the same suite, profile and configuration (any seed or settings, on whatever
    machine ran them). A dry run shows it as a rough guide to how long the runs left will take."""
    stored = tracker.stored_runs(experiment_name(name), {"suite": name, "profile": profile}, "FINISHED")
    keys = sorted({k for plan in plans for k in plan.tags})
    times: dict[tuple[str | None, ...], list[float]] = {}
    for run in stored:
        if "wall_time_s" in run.metrics:
            times.setdefault(tuple(run.tags.get(k) for k in keys), []).append(run.metrics["wall_time_s"])
    found = {i: times.get(tuple(plan.tags.get(k) for k in keys)) for i, plan in enumerate(plans)}
    return {i: statistics.median(t) for i, t in found.items() if t}


def stored_outcomes(
    definition: SuiteDefinition, tracker: Tracker, experiment: str, profile: str, plans: Sequence[RunPlan],
    status: str = "FINISHED",
) -> dict[int, RunOutcome]:
    """The plans (by index) that already have a run in ``status`` in the store: same suite, profile,
    configuration tags and seed, the same settings (:func:`recurbench.reporting.runs.has_settings`,
    with :attr:`SuiteDefinition.execute_params` matching any value) and, when FINISHED, every headline
    metric. The newest such run stands for the plan: a FINISHED one is reused (``reused``, with its
    headline metrics)."""
    from recurbench.reporting.runs import has_settings

    stored = tracker.stored_runs(experiment, {"suite": definition.name, "profile": profile}, status)  # newest first
    finished = status == "FINISHED"
    if not stored:
        return {}
    defaults = definition.param_defaults()
    keys = sorted({"seed", *(k for plan in plans for k in plan.tags)})
    by_config: dict[tuple[str | None, ...], list[RunRecord]] = {}
    for run in stored:
        by_config.setdefault(tuple(run.tags.get(k) for k in keys), []).append(run)
    found: dict[int, RunOutcome] = {}
    for index, plan in enumerate(plans):
        settings: dict[str, str | None] = {k: param_value(v) for k, v in flatten(plan.params).items()}
        settings.update(dict.fromkeys(definition.execute_params))
        wanted = {**plan.tags, "seed": str(plan.seed)}
        for run in by_config.get(tuple(wanted.get(k) for k in keys), []):
            if not has_settings(run, settings, defaults):
                continue
            if not finished:
                found[index] = RunOutcome(plan, status, run_id=run.run_id)
                break
            if all(k in run.metrics for k in definition.headline_metrics):
                found[index] = RunOutcome(
                    plan, "FINISHED", metrics={k: run.metrics[k] for k in definition.headline_metrics},
                    run_id=run.run_id, seconds=run.metrics.get("wall_time_s", 0.0), reused=True,
                )
                break
    return found


class SuiteFailed(RecurbenchError):
    def __init__(self, result: SuiteResult) -> None:
        self.result = result
        errors = "\n".join(f"  - {o.plan.name}: {o.error}" for o in result.failed)
        super().__init__(f"every run of suite {result.suite!r} that this invocation ran failed:\n{errors}")
