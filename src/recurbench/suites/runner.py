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
version did not log read at its default), is not run again; that run's results enter the summary. In a
resumable suite (:attr:`SuiteDefinition.resumable`), a configuration x seed whose earlier run ended
FAILED or KILLED (or stale, below) continues from the newest intact checkpoint of those runs
(:mod:`recurbench.suites.checkpoints`) instead of from the start.

Several drivers may share a store (two terminals, two users of one server). Each run is tagged with
its owner (:func:`recurbench.tracking.owner_tags`); a run found RUNNING is ended FAILED as stale only
when its owner is provably gone (:func:`recurbench.tracking.owner_gone`: same host, process dead) or
when the user names it (``end_runs``, ``recurbench run --end-run``). A driver claims each
configuration and seed when it is about to run it (:func:`claim`): with ``skip_finished``, one that
another driver has FINISHED meanwhile is reused, and one another live driver is RUNNING is left to it
(status RUNNING, with that driver's host, pid and since when), so two drivers share the work and end
with one FINISHED run each. On an embedded store the check and the opening of the run are one step,
under the store's lock; on a server the run is opened first, then the plan's next claim is taken for
it, which the store grants to one driver only (an MLflow experiment name: unique in its database).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

from recurbench.devices import describe_device
from recurbench.engine import EngineSpec, Session, check_device, open_session, task_device
from recurbench.errors import ConfigError, RecurbenchError
from recurbench.records import RunRecord, has_settings, logged_settings
from recurbench.seeding import seed_everything
from recurbench.suites.base import (
    ProgressFn,
    RunOutcome,
    RunPlan,
    SuiteDefinition,
    SuiteResult,
    in_profile_file,
    with_overrides,
)
from recurbench.suites.checkpoints import RESUMABLE_STATUSES, Checkpoint, find_checkpoint
from recurbench.suites.registry import SUITES, load_profile
from recurbench.tracking import (
    HOST_TAG,
    RunHandle,
    StoreUnreachable,
    Tracker,
    describe_owner,
    experiment_name,
    owner_gone,
    standard_tags,
    store_lock,
)
from recurbench.units import duration


def plan_runs(definition: SuiteDefinition, cfg: Any, profile: str, config_path: str | os.PathLike[str] | None,
              overrides: Sequence[str], selection: Mapping[str, Any] | None, data_dir: str | None,
              check: Callable[[RunPlan], None] | None = None) -> list[RunPlan]:
    """``definition.plan`` of profile ``profile`` (``cfg``, loaded from ``config_path`` or the shipped file
    with ``overrides``), each plan then given to ``check`` (a caller's own checks, raising ConfigError);
    an error about a key of the profile named in its file, as a schema error is (or as the ``--set`` that
    gave it). ``run`` and ``tune`` plan through it."""
    try:
        plans = definition.plan(cfg, dict(selection or {}), data_dir=data_dir)
        for plan in plans if check is not None else ():
            check(plan)
        return plans
    except ConfigError as exc:
        source = config_path if config_path is not None else definition.suite_path()
        message = in_profile_file(str(exc), cfg, source, profile, overrides)
        if overrides and message.startswith(f"{source}: "):  # a file's key, judged with what --set changed
            message += f" {with_overrides(overrides)}"
        raise ConfigError(message) from None


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
    end_runs: Sequence[str] = (),
) -> SuiteResult:
    """Plan every run (all validation happens here, before training), then execute them through
    ``engine`` (default: serial, in this process), on ``device`` (``--device``; None: the suite's
    :attr:`SuiteDefinition.default_device`; under Ray with GPUs per run, the GPU Ray assigned). With
    ``skip_finished``, plans that already have a FINISHED run at the same settings are not run again;
    when none is left, no parent run is opened (``parent_run_id`` None). ``dry_run`` stops after
    planning (and reading the store for ``skip_finished``): the runs left to do come back
    ``PLANNED`` (``RUNNING`` where another live driver runs them), and nothing is trained or written;
    with ``skip_finished``, a planned run that would continue from a checkpoint has it in
    ``resumed_from`` / ``resumed_at``.
    ``end_runs``: RUNNING runs the user names as stale (their driver is gone where this machine cannot
    tell: another host, an older recurbench), ended FAILED before anything runs."""
    engine = engine or EngineSpec()
    definition, cfg = load_profile(name, profile, config_path, overrides)
    for key, value in (selection or {}).items():
        if isinstance(value, (list, tuple)) and not value:  # `--languages ""`: not "every language"
            option = "--pair" if key == "pairs" else f"--{key}"
            raise ConfigError(f"{option}: no name given (an empty list); leave the option out for the profile's own")
    check_device(engine, device)
    # Serial: checked here, where the runs train. A Ray task resolves the device on its own machine.
    device_tag = (describe_device(definition.target_device(device)) if engine.kind == "serial"
                  else f"ray ({engine.gpus_per_run:g} GPU per run)")
    plans = plan_runs(definition, cfg, profile, config_path, overrides, selection, data_dir)
    if not plans:
        raise ConfigError(f"suite {name!r} profile {profile!r}: the selection leaves no run to do")
    experiment = experiment_name(name)
    if end_runs:
        if dry_run:
            raise ConfigError("--end-run ends runs in the store: it does not go with --dry-run, which writes nothing")
        end_named_runs(tracker, end_runs)
    reused = stored_outcomes(definition, tracker, experiment, profile, plans) if skip_finished else {}
    outcomes: list[RunOutcome | None] = [reused.get(i) for i in range(len(plans))]
    if dry_run:
        elsewhere = running_elsewhere(tracker, experiment, name, profile, plans) if skip_finished else {}
        planned = [o or elsewhere.get(i) or RunOutcome(p, "PLANNED")
                   for i, (o, p) in enumerate(zip(outcomes, plans, strict=True))]
        if skip_finished and definition.resumable:
            for o in planned:
                if o.status == "PLANNED":  # where it would start: the checkpoint a run would be handed
                    found, _ = plan_checkpoint(definition, tracker, experiment, profile, o.plan,
                                               plan_key(name, profile, o.plan))
                    if found is not None:
                        o.resumed_from, o.resumed_at = found.run_id, found.step
        return SuiteResult(name, profile, None, planned)
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
                     data_dir=data_dir, device=device, progress_factory=progress_factory,
                     skip_finished=skip_finished, stale=stale)
            done = [o for o in outcomes if o is not None]
            ran = [o for o in (outcomes[i] for i in todo) if o is not None and not o.reused and o.status != "RUNNING"]
            failed = [o for o in ran if o.status != "FINISHED"]
            parent.log_metrics({"runs_finished": len(ran) - len(failed), "runs_failed": len(failed),
                                "runs_skipped": sum(o.reused for o in done),
                                "runs_elsewhere": sum(o.status == "RUNNING" for o in done),
                                "stale_runs_ended": len(stale)})
            result = SuiteResult(name, profile, parent.run_id, done, stale)
            if failed and len(failed) == len(ran):
                # Mark the parent FAILED too: nothing in this invocation produced a result.
                raise SuiteFailed(result)
    return result


def _execute(
    session: Session, definition: SuiteDefinition, name: str, profile: str, plans: Sequence[RunPlan],
    todo: Sequence[int], outcomes: list[RunOutcome | None], parent_id: str, *, data_dir: str | None,
    device: str | None, progress_factory: Callable[[RunPlan], ProgressFn] | None, skip_finished: bool,
    stale: list[str],
) -> None:
    """Run ``plans[todo]`` through ``session``, filling ``outcomes``: each is claimed (:func:`claim`)
    just before the engine takes it, and handed over with its run. On Ctrl-C or SIGTERM, the runs the
    session leaves open end KILLED (their Ray tasks were cancelled: nothing else can close them)."""
    in_task = session.kind != "serial"
    experiment = experiment_name(name)
    claims = [Claim() for _ in todo]
    jobs = [(definition, name, profile, plans[i], session.tracker, parent_id, data_dir, device, in_task, claims[k])
            for k, i in enumerate(todo)]
    lock = store_lock(uri) if (uri := getattr(session.tracker, "tracking_uri", None)) else nullcontext()
    bars: dict[int, ProgressFn] = {}

    def progress_of(k: int) -> ProgressFn:
        if progress_factory is None:
            return lambda *_: None
        if k not in bars:
            bars[k] = progress_factory(plans[todo[k]])
        return bars[k]

    def on_start(k: int) -> None:
        # The engine hands job k over (runs it here, or pickles it into a Ray task) after this returns.
        found = claim(session.tracker, lock, definition, name, profile, plans[todo[k]], parent_id,
                      check=skip_finished, stale=stale)
        claims[k].run_id, claims[k].outcome = found.run_id, found.outcome
        claims[k].resume = skip_finished
        if found.outcome is not None:
            elsewhere = found.outcome.status == "RUNNING"
            progress_of(k)(1, 1, f"running elsewhere as run {found.outcome.run_id} ({found.outcome.owner}): left to it"
                           if elsewhere else f"finished meanwhile as run {found.outcome.run_id}: not run again")
        elif in_task:
            progress_of(k)(0, 1, "running as a Ray task")

    def on_done(k: int, outcome: RunOutcome) -> None:
        outcomes[todo[k]] = outcome
        if in_task and claims[k].outcome is None:
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
        jobs = [(*job, lambda *a, k=k: progress_of(k)(*a)) for k, job in enumerate(jobs)]
    try:
        session.map(execute_plan, jobs, on_done, on_crash, on_start)
    except (KeyboardInterrupt, SystemExit) as exc:
        # Under Ray: the cancelled tasks' runs; either way, a run claimed but not started yet.
        reason = (f"KeyboardInterrupt: the driver was stopped ({type(exc).__name__}) and cancelled its Ray tasks"
                  if in_task else f"KeyboardInterrupt: the driver was stopped ({type(exc).__name__})")
        try:
            session.tracker.end_stale(experiment, {"suite": name, "profile": profile}, reason, status="KILLED",
                                      parent_id=parent_id)
        except StoreUnreachable:
            pass
        raise


PLAN_TAG = "plan_key"
STARTED_TAG = "started_by"
"""Set on a claimed run when a process starts executing it (host and pid): a Ray task's next attempt
finds it and knows its predecessor died."""


@dataclass
class Claim:
    """A configuration and seed the driver claimed before handing it to the engine: the run it opened
    for it (``run_id``), or what stands for it instead (``outcome``: FINISHED meanwhile, RUNNING by
    another driver)."""

    run_id: str | None = None
    outcome: RunOutcome | None = None
    resume: bool = False
    """Whether its run may continue from a checkpoint of an earlier, failed run (``--skip-finished``)."""


def run_tags(name: str, profile: str, plan: RunPlan, **extra: Any) -> dict[str, str]:
    """The tags of a nested run of ``plan`` (the device is added by whoever executes it)."""
    return standard_tags(suite=name, profile=profile, seed=plan.seed, **{PLAN_TAG: plan_key(name, profile, plan)},
                         **plan.tags, **extra)


def claim(
    tracker: Tracker, lock: AbstractContextManager[Any], definition: SuiteDefinition, name: str, profile: str,
    plan: RunPlan, parent_id: str, *, check: bool, stale: list[str],
) -> Claim:
    """Open the run of ``plan`` under ``parent_id``, unless (with ``check``, i.e. ``--skip-finished``)
    the store has it FINISHED with its headline metrics (reused) or RUNNING by another driver whose
    owner is not provably gone (left to it). A RUNNING run of it whose owner is provably gone is ended
    FAILED first (its id added to ``stale``). The check and the opening hold ``lock`` (the store's: one
    step for every driver on an embedded store). Without a lock (a server), the run is opened and then
    the plan's next claim taken for it (:func:`_take_claim`): of drivers that opened runs of one plan at
    once, the one whose claim the store took keeps it and the others withdraw."""
    experiment = experiment_name(name)
    tags = run_tags(name, profile, plan)
    if not check:
        return Claim(tracker.open_run(plan.name, experiment=experiment, tags=tags, parent=parent_id).run_id)
    with lock:
        found = _claimed(tracker, definition, name, profile, plan, parent_id, stale)
        if found is not None:
            return Claim(outcome=found)
        run = tracker.open_run(plan.name, experiment=experiment, tags=tags, parent=parent_id)
    if not isinstance(lock, nullcontext):
        return Claim(run.run_id)
    found = _take_claim(tracker, definition, name, profile, plan, parent_id, run.run_id, stale)
    if found is None:
        return Claim(run.run_id)
    tracker.withdraw(run.run_id, f"withdrawn: run {found.run_id} ({found.owner or 'finished'}) claimed this "
                                 "configuration and seed first")
    return Claim(outcome=found)


CLAIM_RUN, CLAIM_PARENT = "run_id", "parent_id"
"""A claim's holder (:meth:`recurbench.tracking.Tracker.take_claim`): the run opened for it and that
run's parent, the driver's (a Ray task's retry replaces the run under the same parent)."""


def _take_claim(
    tracker: Tracker, definition: SuiteDefinition, name: str, profile: str, plan: RunPlan, parent_id: str,
    run_id: str, stale: list[str],
) -> RunOutcome | None:
    """Take the next claim of ``plan`` for run ``run_id`` (None), or say what holds it instead. Claims
    are numbered (generations) and each is taken once, atomically, by the store: the newest one's holder
    is looked at, and while it is alive (a live RUNNING run under its parent) or done (FINISHED) it
    stands; once its runs ended otherwise (FAILED, KILLED, ended as stale), the next generation is
    taken. Every driver derives that number from the same newest claim, and a holder only ever goes
    from alive to ended, so of drivers that race for one plan exactly one takes it."""
    key = plan_key(name, profile, plan)
    mine = {CLAIM_RUN: run_id, CLAIM_PARENT: parent_id}
    latest = tracker.last_claim(key)
    while True:
        if latest is not None:
            found = _held(tracker, definition, name, profile, plan, latest[1], stale)
            if found is not None:
                return found
        generation = 0 if latest is None else latest[0] + 1
        holder = tracker.take_claim(key, generation, mine)
        if holder == mine:
            return None
        latest = generation, holder  # another driver took it first: look at its holder


def _held(
    tracker: Tracker, definition: SuiteDefinition, name: str, profile: str, plan: RunPlan,
    holder: Mapping[str, str], stale: list[str],
) -> RunOutcome | None:
    """What a claim's holder has of ``plan``: a run FINISHED (reused) or a live RUNNING one (left to
    it); None once its runs ended otherwise (those whose owner is provably gone are ended here)."""
    parent = holder.get(CLAIM_PARENT)
    return _standing(tracker, definition, name, profile, plan, stale, lambda r: r.parent_id == parent)


def _claimed(
    tracker: Tracker, definition: SuiteDefinition, name: str, profile: str, plan: RunPlan, parent_id: str,
    stale: list[str],
) -> RunOutcome | None:
    """What stands for ``plan`` in the store, if anything (see :func:`claim`): another driver's run."""
    return _standing(tracker, definition, name, profile, plan, stale, lambda r: r.parent_id != parent_id)


def _standing(
    tracker: Tracker, definition: SuiteDefinition, name: str, profile: str, plan: RunPlan, stale: list[str],
    counts: Callable[[RunRecord], bool],
) -> RunOutcome | None:
    """The first of the runs of ``plan`` that ``counts`` keeps that stands for it: one FINISHED with
    the headline metrics (reused), else the earliest live RUNNING one (left to its driver). A RUNNING
    one whose owner is provably gone is ended FAILED (its id added to ``stale``)."""
    experiment = experiment_name(name)
    tags = {"suite": name, "profile": profile, PLAN_TAG: plan_key(name, profile, plan)}
    # RUNNING first: a run that ends between the two reads is then seen FINISHED by the second (read
    # the other way round, it would be in neither).
    running = [r for r in tracker.stored_runs(experiment, tags, "RUNNING") if counts(r)]
    for run in tracker.stored_runs(experiment, tags, "FINISHED"):
        if counts(run) and all(k in run.metrics for k in definition.headline_metrics):
            return RunOutcome(plan, "FINISHED", metrics={k: run.metrics[k] for k in definition.headline_metrics},
                              run_id=run.run_id, seconds=run.metrics.get("wall_time_s", 0.0), reused=True)
    gone = [r for r in running if owner_gone(r.tags)]
    if gone:
        stale.extend(_end_stale(tracker, gone))
    live = sorted((r for r in running if r not in gone), key=lambda r: (r.start_time, r.run_id))
    if live:
        return RunOutcome(plan, "RUNNING", run_id=live[0].run_id, owner=describe_owner(live[0].tags))
    return None


def running_elsewhere(tracker: Tracker, experiment: str, name: str, profile: str,
                      plans: Sequence[RunPlan]) -> dict[int, RunOutcome]:
    """The plans (by index) that a live driver (one not provably gone) is running now: what a dry run
    shows as such."""
    keys = {plan_key(name, profile, plan): i for i, plan in enumerate(plans)}
    found: dict[int, RunOutcome] = {}
    for run in tracker.stored_runs(experiment, {"suite": name, "profile": profile}, "RUNNING"):  # newest first
        i = keys.get(run.tags.get(PLAN_TAG, ""))
        if i is not None and not owner_gone(run.tags):
            found[i] = RunOutcome(plans[i], "RUNNING", run_id=run.run_id, owner=describe_owner(run.tags))
    return found


def execute_plan(
    definition: SuiteDefinition, name: str, profile: str, plan: RunPlan, tracker: Tracker, parent_id: str,
    data_dir: str | None, device: str | None, in_task: bool = False, claimed: Claim | None = None,
    progress: ProgressFn | None = None,
) -> RunOutcome:
    """Run one plan as a nested run of ``parent_id`` (the run ``claimed`` opened, if any), in the
    driver's process (serial) or in a Ray task (``in_task``: a run an earlier, dead attempt of this
    task left RUNNING is ended FAILED, once a fresh one is open, and in a resumable suite the fresh run
    continues from that run's newest intact checkpoint). A claim that found the plan
    finished or running elsewhere comes back as it is. An exception in the training code ends the run
    FAILED and comes back in the outcome; a stop, or a tracking server gone, propagates."""
    if claimed is not None and claimed.outcome is not None:
        return claimed.outcome
    experiment = experiment_name(name)
    key = plan_key(name, profile, plan)
    run_id = claimed.run_id if claimed is not None else None
    claim_owner: dict[str, str] = {}
    dead: list[RunRecord] = []
    if in_task:
        ours = [r for r in tracker.stored_runs(experiment, {"suite": name, "profile": profile, PLAN_TAG: key},
                                                "RUNNING") if r.parent_id == parent_id]
        dead = [r for r in ours if r.run_id != run_id or STARTED_TAG in r.tags]
        if run_id in [r.run_id for r in dead]:
            # A fresh run, owned like the claim by the driver (alive: this task runs for it).
            owner = next(r.tags for r in dead if r.run_id == run_id)
            run_id, claim_owner = None, {k: v for k, v in owner.items() if k.startswith("owner_")}
    target = definition.target_device(task_device(device))
    here = {HOST_TAG: socket.gethostname(), "device": describe_device(target),
            STARTED_TAG: f"{socket.gethostname()} pid {os.getpid()}", **claim_owner}
    start = time.perf_counter()
    outcome = RunOutcome(plan, "FAILED")
    checkpoint: Checkpoint | None = None
    try:
        with tracker.run(plan.name, experiment=experiment, tags=run_tags(name, profile, plan, **here),
                         parent=parent_id, run_id=run_id) as run:
            outcome.run_id = run.run_id
            # The dead attempt's run ends once this one is open: the driver's claim (held by its
            # runs under parent_id, see _take_claim) never looks ended in between.
            tracker.end_runs([r.run_id for r in dead], "its worker died (killed, or out of memory); Ray ran the task again")
            if run_id is not None:
                run.set_tags(here)
            run.log_params({**plan.params, "seed": plan.seed})
            seed_everything(plan.seed)
            resume: dict[str, Checkpoint | None] = {}
            if definition.resumable:
                if claimed is not None and claimed.resume:  # the list of notes grows with a refusal
                    checkpoint, outcome.notes = plan_checkpoint(definition, tracker, experiment, profile, plan, key, run)
                elif dead:  # a retry goes on from its dead attempts' checkpoints, --skip-finished or not
                    checkpoint, outcome.notes = find_checkpoint(tracker, dead, plan.name, run,
                                                                before=plan_cap(definition, plan))
                resume = {"resume": checkpoint}
            outcome.metrics = definition.execute(plan, run, progress or (lambda *_: None), data_dir=data_dir,
                                                 device=target, **resume)
            outcome.seconds = time.perf_counter() - start
            run.log_metrics({"wall_time_s": outcome.seconds})
        outcome.status = "FINISHED"
    except (KeyboardInterrupt, SystemExit, StoreUnreachable):
        raise
    except Exception as exc:  # the run is already marked FAILED by the tracker
        outcome.error = f"{type(exc).__name__}: {exc}"
        outcome.seconds = time.perf_counter() - start
    if checkpoint is not None and checkpoint.accepted:
        outcome.resumed_from, outcome.resumed_at = checkpoint.run_id, checkpoint.step
    return outcome


STALE_REASON = ("left RUNNING by a driver that is gone (its process on this host no longer exists: killed "
                "outright, or its machine stopped)")


def end_stale_runs(tracker: Tracker, experiment: str, name: str, profile: str, plans: Sequence[RunPlan]) -> list[str]:
    """End FAILED the RUNNING runs of ``plans`` whose owner is provably gone
    (:func:`recurbench.tracking.owner_gone`); their ids. A run of a live driver, or of one this
    machine cannot check, is left alone. The suite's parent runs whose owner is gone are ended too (not
    among the ids), those with no such run under them included (a driver killed between its runs)."""
    keys = {plan_key(name, profile, plan) for plan in plans}
    running = tracker.stored_runs(experiment, {"suite": name, "profile": profile}, "RUNNING")
    ended = _end_stale(tracker, [r for r in running if r.tags.get(PLAN_TAG) in keys and owner_gone(r.tags)])
    parents = tracker.stored_runs(experiment, {"suite": name}, "RUNNING", parents=True)
    tracker.end_runs([r.run_id for r in parents if owner_gone(r.tags)], STALE_REASON)
    return ended


def _end_stale(tracker: Tracker, stale: Sequence[RunRecord]) -> list[str]:
    ended = tracker.end_runs([r.run_id for r in stale], STALE_REASON + "; this configuration and seed runs again")
    # Their parents too: a nested run's owner is its parent's (the driver that claimed it), gone as well.
    tracker.end_runs(sorted({r.parent_id for r in stale if r.parent_id}), STALE_REASON)
    return ended


def end_named_runs(tracker: Tracker, run_ids: Sequence[str]) -> list[str]:
    """End FAILED the RUNNING runs the user names (``--end-run``): each must be RUNNING in the store,
    else nothing is ended and a :class:`ConfigError` names it."""
    wrong = [(r, status) for r in run_ids if (status := tracker.run_status(r)) != "RUNNING"]
    if wrong:
        raise ConfigError("--end-run: " + "; ".join(f"run {r} is {'not in this store' if s is None else s}"
                                                     for r, s in wrong) + " (only a RUNNING run can be ended)")
    return tracker.end_runs(list(run_ids), "ended by the user (recurbench run --end-run): its driver is gone")


def plan_key(suite: str, profile: str, plan: RunPlan) -> str:
    """A digest naming what a run of ``plan`` computes: suite, profile, configuration tags, seed and
    every setting (as logged), so that the runs of one plan can be found in the store. A param the
    suite added since (:attr:`SuiteDefinition.added_params`) is left out at the value the runs before
    it had: their key is the key of the plan that does what they did."""
    added = SUITES[suite].added_params if suite in SUITES else {}
    params = {k: v for k, v in logged_settings(plan.params).items() if added.get(k) != v}
    what = {"suite": suite, "profile": profile, "tags": plan.tags, "seed": plan.seed, "params": params}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:20]


def typical_seconds(name: str, profile: str, tracker: Tracker, plans: Sequence[RunPlan]) -> dict[int, float]:
    """For each plan (by index) that has one: the median wall time (``wall_time_s``) of the FINISHED
    runs in the store of the same suite, profile, configuration and settings (:func:`plan_settings`:
    any seed, on whatever machine ran them). A dry run shows it as a rough guide to how long the runs
    left will take; a run at other settings (``--set training.updates=...``) is no guide to it."""
    stored = tracker.stored_runs(experiment_name(name), {"suite": name, "profile": profile}, "FINISHED")
    definition = SUITES[name]()
    defaults = definition.param_defaults()
    keys = sorted({k for plan in plans for k in plan.tags})
    by_config: dict[tuple[str | None, ...], list[RunRecord]] = {}
    for run in stored:
        if "wall_time_s" in run.metrics:
            by_config.setdefault(tuple(run.tags.get(k) for k in keys), []).append(run)
    typical = {}
    for index, plan in enumerate(plans):
        settings = plan_settings(definition, plan)
        times = [run.metrics["wall_time_s"] for run in by_config.get(tuple(plan.tags.get(k) for k in keys), [])
                 if has_settings(run, settings, defaults)]
        if times:
            typical[index] = statistics.median(times)
    return typical


def describe_dry_run(result: SuiteResult, tracker: Tracker) -> tuple[list[list[str]], list[str]]:
    """What a dry run (``run_suite(..., dry_run=True)``) found: a row per run (name, seed, status, with
    the typical time of a run still to do, :func:`typical_seconds`), and the summary lines."""
    outcomes = result.outcomes
    typical = typical_seconds(result.suite, result.profile, tracker, [o.plan for o in outcomes])
    rows = []
    for i, o in enumerate(outcomes):
        status = {"FINISHED": f"finished: run {o.run_id}",
                  "RUNNING": f"running elsewhere: run {o.run_id} ({o.owner})"}.get(o.status, "to run")
        resumes = o.status == "PLANNED" and o.resumed_from is not None
        if resumes:
            status += f", from run {o.resumed_from}'s checkpoint at step {o.resumed_at:,}"
        if i in typical and o.status == "PLANNED":
            status += f" (typically {duration(typical[i], rough=True)}{' from the start' if resumes else ''})"
        rows.append([o.plan.name, str(o.plan.seed), status])
    todo = [i for i, o in enumerate(outcomes) if o.status == "PLANNED"]
    lines = [f"{len(todo)} run(s) to run, {len(result.reused)} already finished"
             + (f", {len(result.elsewhere)} running in another driver (left to it by --skip-finished)"
                if result.elsewhere else "") + "; nothing was trained or written"]
    if known := [typical[i] for i in todo if i in typical]:
        lines.append(
            f"typical time of the {len(known)} run(s) to run that have one: {duration(sum(known), rough=True)} in all (the "
            "median wall time of this store's finished runs of the same configuration and settings, on the machines "
            "that ran them)"
            + (f"; {len(todo) - len(known)} have no finished run of their configuration and settings to go by"
               if len(known) < len(todo) else "")
        )
    return rows, lines


def plan_cap(definition: SuiteDefinition, plan: RunPlan) -> int | None:
    """The plan's :attr:`SuiteDefinition.cap_param` as a step count (None: the suite has none)."""
    if definition.cap_param is None:
        return None
    value = logged_settings(plan.params).get(definition.cap_param)
    return int(value) if value is not None and value.isdigit() else None


def resumable_runs(definition: SuiteDefinition, tracker: Tracker, experiment: str, profile: str, plan: RunPlan,
                   key: str) -> list[RunRecord]:
    """The runs whose checkpoints ``plan`` (of key ``key``, :func:`plan_key`) may continue from: its
    own that ended FAILED or KILLED and, where the suite has a :attr:`SuiteDefinition.cap_param`, the
    runs of its configuration and seed at its settings but another cap, ended in any of those ways or
    FINISHED (:func:`recurbench.suites.checkpoints.find_checkpoint` takes only their checkpoints before
    the plan's cap)."""
    own = [r for status in RESUMABLE_STATUSES
           for r in tracker.stored_runs(experiment, {"suite": definition.name, "profile": profile, PLAN_TAG: key}, status)]
    if definition.cap_param is None:
        return own
    settings = {**plan_settings(definition, plan), definition.cap_param: None}
    defaults = definition.param_defaults()
    tags = {"suite": definition.name, "profile": profile, **plan.tags, "seed": str(plan.seed)}
    capped = [r for status in ("FINISHED", *RESUMABLE_STATUSES) for r in tracker.stored_runs(experiment, tags, status)
              if r.tags.get(PLAN_TAG) != key and has_settings(r, settings, defaults)]
    return own + capped


def plan_checkpoint(definition: SuiteDefinition, tracker: Tracker, experiment: str, profile: str, plan: RunPlan,
                    key: str, run: RunHandle | None = None) -> tuple[Checkpoint | None, list[str]]:
    """The checkpoint ``plan`` (of key ``key``) is handed with ``--skip-finished``, and the lines on
    those passed over: :func:`~recurbench.suites.checkpoints.find_checkpoint` over
    :func:`resumable_runs`, before the plan's cap (:func:`plan_cap`); notes tagged on ``run`` if given."""
    return find_checkpoint(tracker, resumable_runs(definition, tracker, experiment, profile, plan, key), plan.name,
                           run, before=plan_cap(definition, plan))


def plan_settings(definition: SuiteDefinition, plan: RunPlan) -> dict[str, str | None]:
    """The settings a stored run must have logged to have done what ``plan`` does
    (:func:`recurbench.records.has_settings`): its params as logged, each of
    :attr:`SuiteDefinition.execute_params` at any value."""
    return {**logged_settings(plan.params), **dict.fromkeys(definition.execute_params)}


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
        settings = plan_settings(definition, plan)
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
