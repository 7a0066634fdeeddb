"""The suite runner: one parent MLflow run per invocation, one nested run per configuration and seed.

A suite (:mod:`recurbench.suites.base`, registered in :mod:`recurbench.suites.registry`) validates
its profiles, plans its runs and executes one of them. The runner owns what is common: seeding,
tracking, progress bars, failure handling and the final summary. A configuration that raises is ended FAILED (with the error as a tag); the
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
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from recurbench.devices import describe_device
from recurbench.engine import EngineSpec, Session, check_device, open_session, task_device
from recurbench.errors import ConfigError, RecurbenchError
from recurbench.records import RunRecord, has_settings, logged_settings
from recurbench.seeding import seed_everything
from recurbench.suites.base import ProgressFn, RunOutcome, RunPlan, SuiteDefinition, SuiteResult
from recurbench.suites.registry import load_profile
from recurbench.tracking import Tracker, experiment_name, standard_tags


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
    check_device(engine, device)
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
            "params": logged_settings(plan.params)}
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


def describe_dry_run(result: SuiteResult, tracker: Tracker) -> tuple[list[list[str]], list[str]]:
    """What a dry run (``run_suite(..., dry_run=True)``) found: a row per run (name, seed, status, with
    the typical time of a run still to do, :func:`typical_seconds`), and the summary lines."""
    outcomes = result.outcomes
    typical = typical_seconds(result.suite, result.profile, tracker, [o.plan for o in outcomes])
    rows = []
    for i, o in enumerate(outcomes):
        status = f"finished: run {o.run_id}" if o.status == "FINISHED" else "to run"
        if i in typical and o.status == "PLANNED":
            status += f" (typically {duration(typical[i])})"
        rows.append([o.plan.name, str(o.plan.seed), status])
    todo = [i for i, o in enumerate(outcomes) if o.status == "PLANNED"]
    lines = [f"{len(todo)} run(s) to run, {len(result.reused)} already finished; nothing was trained or written"]
    if known := [typical[i] for i in todo if i in typical]:
        lines.append(
            f"typical time of the {len(known)} run(s) to run that have one: {duration(sum(known))} in all (the "
            "median wall time of this store's finished runs of the same configuration, on the machines that ran them)"
            + (f"; {len(todo) - len(known)} have no finished run of their configuration to go by"
               if len(known) < len(todo) else "")
        )
    return rows, lines


def duration(seconds: float) -> str:
    """``42 s``, ``12 min``, ``3.4 h``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def stored_outcomes(
    definition: SuiteDefinition, tracker: Tracker, experiment: str, profile: str, plans: Sequence[RunPlan],
    status: str = "FINISHED",
) -> dict[int, RunOutcome]:
    """The plans (by index) that already have a run in ``status`` in the store: same suite, profile,
    configuration tags and seed, the same settings (:func:`recurbench.records.has_settings`,
    with :attr:`SuiteDefinition.execute_params` matching any value) and, when FINISHED, every headline
    metric. The newest such run stands for the plan: a FINISHED one is reused (``reused``, with its
    headline metrics)."""
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
        settings: dict[str, str | None] = logged_settings(plan.params)
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
