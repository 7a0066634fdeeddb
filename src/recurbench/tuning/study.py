"""Resumable Optuna studies tracked in MLflow, run in this process or on Ray workers.

* Storage: default ``sqlite:///results/optuna.db`` (embedded). Any Optuna storage URL works:
  ``journal:PATH`` (or a path with no scheme ending in ``.log``) without a database, ``postgresql://...`` /
  ``mysql://...`` for workers on several machines. A storage that cannot serve (a corrupt file, a
  read-only folder) is refused in one line before anything runs.
* Purpose: a study records what it tunes (:attr:`StudySpec.purpose`) when created, and one that records
  another is refused (:func:`check_purpose`): an explicit name never resumes trials of other settings.
  An MLflow tracking store given as the storage is refused before Optuna writes into it.
* Workers: with ``--engine ray --workers N``, N Ray tasks take trials from the shared storage. Each
  stops at the target with Optuna's :class:`~optuna.study.MaxTrialsCallback`, counting the trials
  finished (COMPLETE or PRUNED) or running, so N workers do not overshoot. When they have all ended
  and a worker died, the driver starts workers again until ``n_trials`` trials have finished.
* Drivers: several ``tune`` invocations may share one database storage (two terminals, or machines on
  one PostgreSQL): their workers take trials from the same study, and the trial cap counts every
  driver's running trials. A journal storage has no heartbeat: one driver at a time there.
* Recovery: a trial found RUNNING when a study starts was left by a killed invocation, or belongs to a
  live driver. Database storages run Optuna's heartbeat (``heartbeat_interval``): the driver waits, at
  most ``grace_period`` and two beats, until each such trial has either ended or gone stale (its
  heartbeat older than ``grace_period``) and been failed by :func:`optuna.storages.fail_stale_trials`,
  whose :class:`~optuna.storages.RetryFailedTrialCallback` enqueues its parameters again (up to
  ``max_retry`` times). A trial still beating after that wait is a live driver's, and is left alone.
  Optuna's heartbeat thread records its first beat asynchronously, and a trial killed before it has
  none, which Optuna never counts as stale: so each trial records one itself before anything else runs
  (:func:`_trial_fn`), and a trial killed inside the objective, however soon, is always recovered. The
  journal storage has no heartbeat: the driver fails such a trial through :meth:`optuna.Study.tell` and
  calls the same retry callback. A trial stopped by Ctrl-C or SIGTERM ends FAIL (its run KILLED) and
  has its parameters enqueued again by that callback too (:func:`_retry`), so a stopped study, started
  again, continues as a killed one does (a Ray task is cancelled by force and runs no handler: the
  stopped driver fails the trials its tasks left RUNNING and ends their runs KILLED,
  :func:`end_stopped_trials`); Optuna's warning with a traceback is not printed for a stop.
  The MLflow runs a killed invocation left RUNNING are ended FAILED when their owner process is
  provably gone (:func:`end_dead_runs`, the rule of :mod:`recurbench.tracking`).
* The sampler is seeded with ``seed``, the worker's number and the number of trials the study already
  holds, so that a resumed study does not replay its start-up proposals.
* MLflow: a parent run per study (its id kept in the study's user attributes, so a resumed study
  logs under the same parent while that run is RUNNING or FINISHED; one that ended FAILED or KILLED, or
  that the tracking store does not hold, is replaced by the new invocation's), a nested run per trial
  (params, intermediate values, final value, state), and at the end the best parameters and Optuna's
  figures as artifacts of the parent.
* Objective values are minimised or maximised as the objective declares; a NaN or infinite value
  prunes the trial instead of crashing the study.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import math
import sys
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import RDBStorage, RetryFailedTrialCallback
from optuna.storages.journal import JournalFileBackend, JournalStorage
from optuna.study import MaxTrialsCallback
from optuna.trial import FrozenTrial, TrialState

from recurbench.engine import EngineSpec, open_session, task_device
from recurbench.errors import ConfigError
from recurbench.suites.runner import STALE_REASON
from recurbench.tracking import (
    RunHandle,
    StoreUnreachable,
    Tracker,
    _writable_folder,
    check_sqlite_file,
    experiment_name,
    make_tracker,
    owner_gone,
    refuse_plain_sqlite_path,
    sqlite_file,
    standard_tags,
)


@contextmanager
def _experimental_api() -> Iterator[None]:
    """Heartbeats, the retry callback, grouped TPE, ``fail_stale_trials`` and the matplotlib figures
    are all "experimental" in Optuna, which warns at each use: we rely on them knowingly (the module
    docstring), and one warning per use would bury the one line per trial that `tune` prints. Only
    Optuna's ExperimentalWarning is silenced, only around these calls (not for the process)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        yield

DEFAULT_STORAGE = "sqlite:///results/optuna.db"
PARENT_RUN_ATTR = "mlflow_parent_run_id"
DRIVER_ATTR = "recurbench_driver"
"""The trial's user attribute (and its runs' tag ``driver``) naming the invocation whose worker runs it."""
PURPOSE_ATTR = "recurbench_study_for"
"""The study's user attribute that records what it tunes (:attr:`StudySpec.purpose`)."""
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


class Objective:
    """What a study optimises. Subclasses implement :meth:`__call__` for one trial; they report
    intermediate values with :meth:`report` (which prunes when the pruner says so)."""

    direction: str = "minimize"
    suite: str = ""
    target_name: str = "objective value"
    """What a trial's value is, for the study's figures' value axis (Optuna's says "Objective Value")."""

    def __call__(self, trial: optuna.Trial, run: RunHandle) -> float:  # pragma: no cover - interface
        raise NotImplementedError

    @staticmethod
    def report(trial: optuna.Trial, run: RunHandle, value: float, step: int, name: str = "intermediate") -> None:
        run.log_metrics({name: value}, step=step)
        if not math.isfinite(value):
            raise optuna.TrialPruned(f"{name} is {value} at step {step}")
        trial.report(value, step)
        if trial.should_prune():
            raise optuna.TrialPruned(f"pruned at step {step} ({name} = {value:.5g})")

    def describe(self) -> dict[str, Any]:
        """Params of the study as a whole (logged on the parent run)."""
        return {}


@dataclass(frozen=True)
class StudySpec:
    study_name: str
    n_trials: int
    storage: str | None = None
    timeout: float | None = None
    seed: int = 0
    pruner: str = "median"
    max_retry: int = 2
    heartbeat_interval: int = 5
    """Database storages: seconds between a running trial's heartbeats."""
    grace_period: int = 20
    """Database storages: a running trial silent for this long is stale (failed, and retried); also how
    long, with two beats more, a starting study waits at most to tell a killed invocation's trial from
    a live driver's."""
    tags: dict[str, str] = field(default_factory=dict)
    purpose: dict[str, Any] = field(default_factory=dict)
    """What the study tunes (``tune``: suite, model, target, profile, and the ``settings`` digest with the
    ``config`` and ``set`` it is of): recorded when the study is created, and a study that records
    another is refused (:func:`check_purpose`). Empty: not checked."""

    @property
    def storage_url(self) -> str:
        return self.storage or DEFAULT_STORAGE

    def open_storage(self) -> optuna.storages.BaseStorage:
        """The study's storage (:func:`make_storage` with this spec's retry and heartbeat settings)."""
        return make_storage(self.storage, self.max_retry, self.heartbeat_interval, self.grace_period)

    def __post_init__(self) -> None:
        if self.n_trials < 1:
            raise ConfigError(f"--trials must be at least 1, got {self.n_trials}")
        if self.pruner not in PRUNERS:
            raise ConfigError(f"unknown pruner {self.pruner!r}; choose one of: {', '.join(PRUNERS)}")


PRUNERS: dict[str, Callable[[], optuna.pruners.BasePruner]] = {
    "median": lambda: optuna.pruners.MedianPruner(n_startup_trials=4, n_warmup_steps=1),
    "hyperband": lambda: optuna.pruners.HyperbandPruner(),
    "none": lambda: optuna.pruners.NopPruner(),
}


def is_journal(url: str | None) -> bool:
    """Journal-file storages have no heartbeat; database storages do."""
    return url is not None and (url.startswith("journal:") or ("://" not in url and url.endswith(".log")))


def _retry_callback(max_retry: int) -> tuple[str, Callable[[optuna.Study, FrozenTrial], None]]:
    """Optuna's callback that enqueues a stale trial's parameters again, with the storage argument
    that takes it. Optuna 4.9 renamed both (``RetryFailedTrialCallback`` warns that it goes in 6.0);
    older releases only know the first names."""
    try:
        from optuna.storages import RetryHeartbeatStaleTrialCallback  # noqa: PLC0415 - Optuna >= 4.9 only
    except ImportError:
        return "failed_trial_callback", RetryFailedTrialCallback(max_retry=max_retry)
    return "heartbeat_stale_trial_callback", RetryHeartbeatStaleTrialCallback(max_retry=max_retry)


def _retry(study: optuna.Study, number: int, max_retry: int) -> None:
    """Enqueue the parameters of trial ``number`` (failed, or about to be) again, with Optuna's retry
    callback: what the heartbeat does for a stale trial, here for a journal storage's or a stopped one."""
    with _experimental_api():
        retry = _retry_callback(max_retry)[1]
    retry(study, study.get_trials(deepcopy=False)[number])


def _retry_kwargs(max_retry: int) -> dict[str, Any]:
    name, callback = _retry_callback(max_retry)
    return {name: callback}


def make_storage(
    url: str | None, max_retry: int = 2, heartbeat_interval: int = 5, grace_period: int = 20
) -> optuna.storages.BaseStorage:
    """The Optuna storage at ``url`` (default :data:`DEFAULT_STORAGE`), checked first: a file that is
    not a database, or a folder this process cannot write, is a one-line :class:`ConfigError`."""
    url = url or DEFAULT_STORAGE
    what = f"Optuna storage {url}"
    refuse_plain_sqlite_path(url, "--storage")
    if is_journal(url):
        path = Path(url.removeprefix("journal:"))
        _writable_folder(path.parent, what)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            return JournalStorage(JournalFileBackend(str(path)))
        except OSError as exc:
            raise ConfigError(f"{what}: cannot open {path} ({exc.strerror or exc})") from None
    if (database := sqlite_file(url)) is not None:
        check_sqlite_file(database, what, expect="optuna")  # an MLflow store: Optuna would add its tables
        database.parent.mkdir(parents=True, exist_ok=True)  # sqlite would not create its folder
    engine_kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}
    try:
        with _experimental_api():
            return RDBStorage(url, engine_kwargs=engine_kwargs, heartbeat_interval=heartbeat_interval,
                              grace_period=grace_period, **_retry_kwargs(max_retry))
    except Exception as exc:  # a bad URL, a driver that is not installed, a server that is down
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ConfigError(f"cannot open Optuna storage {url!r}: {first}") from None


def _describe_settings(purpose: dict[str, Any]) -> str:
    """The ``--config`` and ``--set`` items a purpose's settings digest is of, as the command line gave them."""
    parts = ([f"--config {purpose['config']}"] if purpose.get("config") else []) + [
        f"--set {item}" for item in purpose.get("set", ())]
    return " ".join(parts) or "the profile as shipped"


def check_purpose(study: optuna.Study, spec: StudySpec, created: bool) -> None:
    """Record ``spec.purpose`` on a study created now; refuse an existing study that records another
    purpose, in one line naming the study and each difference (its trials were trained for that one, and
    ``--best-out`` would write them for this one). A study that records none (created by an older
    recurbench, or as a library call without one) cannot be checked: it is resumed, said so on stderr,
    and records this purpose from now on."""
    if not spec.purpose:
        return
    there = study.user_attrs.get(PURPOSE_ATTR)
    if there is None:
        if not created:
            print(f"study {spec.study_name} records no settings (created by an older recurbench): resumed "
                  "unchecked, and recorded as this invocation's from now on", file=sys.stderr, flush=True)
        study.set_user_attr(PURPOSE_ATTR, spec.purpose)
        return
    here = spec.purpose
    compared = [k for k in dict.fromkeys([*there, *here]) if k not in ("config", "set")]
    differ = []
    for key in compared:
        if there.get(key) != here.get(key):
            if key == "settings":
                was, now = _describe_settings(there), _describe_settings(here)
                if was == now:  # the same --config path and --set items: the file's content changed
                    was, now = f"{was} ({there.get(key)})", f"{now} ({here.get(key)})"
                differ.append(f"settings {was} there, {now} here")
            else:
                differ.append(f"{key} {there.get(key, '(none)')} there, {here.get(key, '(none)')} here")
    if differ:
        raise ConfigError(f"study {spec.study_name} in {spec.storage_url} is a study of other settings ("
                          f"{'; '.join(differ)}); give another --study-name, or none for the default name")


def load_study(spec: StudySpec, direction: str, worker: int = 0,
               storage: optuna.storages.BaseStorage | None = None) -> optuna.Study:
    """Create or load the study (through ``storage``, default: :meth:`StudySpec.open_storage`), refused
    when it was created for another purpose (:func:`check_purpose`). The sampler's seed mixes ``spec.seed``, the worker and how many trials the study holds already: a seeded
    sampler started again would replay its start-up trials."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # not "A new study created in RDB ...": tune prints its table
    storage = storage or spec.open_storage()
    try:
        created = storage.get_study_id_from_name(spec.study_name) is None
    except KeyError:
        created = True
    study = optuna.create_study(study_name=spec.study_name, storage=storage, direction=direction, load_if_exists=True)
    check_purpose(study, spec, created)
    held = len(study.get_trials(deepcopy=False))
    with _experimental_api():
        sampler = optuna.samplers.TPESampler(seed=spec.seed + 1000 * worker + 7919 * held, multivariate=True, group=True)
    return optuna.load_study(study_name=spec.study_name, storage=storage, sampler=sampler, pruner=PRUNERS[spec.pruner]())


def recover_stale_trials(study: optuna.Study, spec: StudySpec, poll_s: float = 1.0) -> list[int]:
    """Fail the trials a killed invocation left RUNNING and enqueue their parameters again, leaving those
    of live drivers (database storages); the numbers of those failed. See the module docstring."""
    running = [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))]
    if not running:
        return []
    if is_journal(spec.storage):
        for number in running:
            study.tell(number, state=TrialState.FAIL)
            _retry(study, number, spec.max_retry)
        return running
    # A database storage: a dead trial's last beat is at most now, so it is stale within grace_period.
    wait = spec.grace_period + 2 * spec.heartbeat_interval
    print(f"study {spec.study_name}: trial(s) {running} found running; up to {wait} s to tell a killed "
          "invocation's (failed, and retried) from a live driver's (left to it)", flush=True)
    deadline = time.monotonic() + wait
    while True:
        with _experimental_api():
            optuna.storages.fail_stale_trials(study)
        trials = study.get_trials(deepcopy=False)
        still = [n for n in running if trials[n].state == TrialState.RUNNING]
        if not still or time.monotonic() > deadline:
            return [n for n in running if trials[n].state == TrialState.FAIL]  # `still`: live drivers' trials
        time.sleep(poll_s)


def end_dead_runs(tracker: Tracker, experiment: str, study_name: str) -> list[str]:
    """End FAILED the runs of study ``study_name`` (its trials' and its parent runs) left RUNNING by a
    process that is provably gone (:func:`recurbench.tracking.owner_gone`: killed outright, say); their
    ids. Runs of live drivers and workers, or of owners this machine cannot check, are left alone."""
    running = [r for r in tracker.stored_runs(experiment, {"study": study_name}, "RUNNING") if owner_gone(r.tags)]
    trials = [r.run_id for r in running if r.tags.get("role") == "trial"]
    parents = [r.run_id for r in running if r.tags.get("role") == "study"]
    return (tracker.end_runs(trials, STALE_REASON + "; its Optuna trial is failed and its parameters tried again")
            + tracker.end_runs(parents, STALE_REASON))


def _live_parent(tracker: Tracker, experiment: str, study_name: str, run_id: str | None) -> bool:
    """Whether ``run_id`` (the study's stored parent run) is one to nest trials under: RUNNING (a live
    driver's: dead ones were ended) or FINISHED (a resumed study), in this tracking store."""
    return run_id is not None and any(
        r.run_id == run_id for status in ("RUNNING", "FINISHED")
        for r in tracker.stored_runs(experiment, {"role": "study", "study": study_name}, status))


class _QuietStops(logging.Filter):
    """Drops Optuna's warnings on the trials in :attr:`numbers` ("Trial N failed with parameters ...",
    with a traceback, and "... failed with value None"): those stopped by Ctrl-C or SIGTERM, which the
    command reports in one line itself."""

    def __init__(self) -> None:
        super().__init__()
        self.numbers: set[int] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(message.startswith(f"Trial {n} failed with ") for n in self.numbers)


@contextmanager
def _quiet_stops() -> Iterator[set[int]]:
    """Around ``study.optimize``: the set into which a trial stopped by Ctrl-C or SIGTERM puts its number,
    so that Optuna's warnings on it are not printed."""
    quiet, logger = _QuietStops(), logging.getLogger("optuna.study._optimize")  # Optuna's _log_failed_trial
    logger.addFilter(quiet)
    try:
        yield quiet.numbers
    finally:
        logger.removeFilter(quiet)


def _trial_fn(objective: Objective, tracker: Tracker, parent_id: str, tags: dict[str, str],
              heartbeat: RDBStorage | None = None, max_retry: int = 2,
              stopped: set[int] | None = None) -> Callable[[optuna.Trial], float]:
    """The function ``study.optimize`` calls per trial: a nested MLflow run around ``objective``.
    ``heartbeat``: the study's database storage, whose heartbeat the trial records at once (see the
    module docstring: a trial with no beat at all would never be recovered). A trial stopped by Ctrl-C
    or SIGTERM (KeyboardInterrupt) has its parameters enqueued again (:func:`_retry`, up to
    ``max_retry`` times) and its number added to ``stopped`` before the stop propagates."""
    experiment = experiment_name(objective.suite)

    def run_trial(trial: optuna.Trial) -> float:
        if heartbeat is not None:
            heartbeat.record_heartbeat(trial._trial_id)  # the storage API names trials by id, not number
        if "driver" in tags:
            trial.set_user_attr(DRIVER_ATTR, tags["driver"])
        pruned: optuna.TrialPruned | None = None
        try:
            with tracker.run(
                f"trial-{trial.number}", experiment=experiment, parent=parent_id,
                tags=standard_tags(**tags, role="trial", trial=trial.number, study=trial.study.study_name),
            ) as run:
                try:
                    value = objective(trial, run)
                    if not math.isfinite(value):
                        raise optuna.TrialPruned(f"objective value is {value}")
                    run.log_params(trial.params)
                    run.log_metrics({"objective": value})
                    run.set_tags({"state": "COMPLETE"})
                except optuna.TrialPruned as exc:
                    run.log_params(trial.params)
                    run.set_tags({"state": "PRUNED", "pruned_reason": str(exc)})
                    pruned = exc
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: Optuna fails the trial; its parameters run again
            if stopped is not None:
                stopped.add(trial.number)
            _retry(trial.study, trial.number, max_retry)
            raise
        if pruned is not None:
            raise pruned
        return value

    return run_trial


def _say_trial(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
    """One line per trial (the worker's output; a Ray task's reaches the driver's terminal)."""
    value = f" {trial.value:.5g}" if trial.value is not None else ""
    print(f"trial {trial.number}: {trial.state.name.lower()}{value} {trial.params}", flush=True)


def study_worker(spec: StudySpec, objective: Objective, parent_id: str, worker: int, tracker: Tracker) -> int:
    """Take trials from the study until it holds ``n_trials`` finished or running ones (or the
    timeout passes); the number of trials this worker ran. A Ray task given GPUs trains on its GPU."""
    if (device := task_device(None)) is not None and hasattr(objective, "device"):
        objective = dataclasses.replace(objective, device=device)  # type: ignore[type-var]
    storage = spec.open_storage()
    study = load_study(spec, objective.direction, worker, storage)
    if len(study.get_trials(deepcopy=False, states=FINISHED)) >= spec.n_trials:
        return 0
    before = len(study.get_trials(deepcopy=False))
    with _quiet_stops() as stopped:
        study.optimize(
            _trial_fn(objective, tracker, parent_id, {**spec.tags, "worker": str(worker)},
                      heartbeat=storage if isinstance(storage, RDBStorage) and storage.heartbeat_interval else None,
                      max_retry=spec.max_retry, stopped=stopped),
            timeout=spec.timeout,
            callbacks=[MaxTrialsCallback(spec.n_trials, states=(*FINISHED, TrialState.RUNNING)), _say_trial],
            catch=(),
            gc_after_trial=True,
        )
    return len(study.get_trials(deepcopy=False)) - before


@dataclass
class StudyResult:
    study_name: str
    storage: str
    parent_run_id: str | None
    """The study's MLflow parent run; None when nothing was run and the tracking store holds none."""
    counts: dict[str, int]
    best_value: float | None
    best_params: dict[str, Any]
    best_trial: int | None
    recovered: list[int]
    """Trials a killed invocation left running: failed, and their parameters tried again."""
    running_elsewhere: list[int] = field(default_factory=list)
    """Trials running in another driver when this one ended."""
    notes: list[str] = field(default_factory=list)
    """What the study's table does not say: nothing was run (the study was complete already), or the
    workers stopped at the timeout short of ``n_trials``."""


def run_study(
    spec: StudySpec, objective: Objective, tracker: Tracker | None = None, engine: EngineSpec | None = None,
) -> StudyResult:
    """Create or resume ``spec.study_name`` and run it to ``n_trials`` finished trials, with one worker
    in this process (``serial``) or ``engine.workers`` Ray tasks. A study that holds them already is not
    run: no parent run is opened (the result names the stored one, if any) and a note says so; a note
    also says when the workers stopped at ``spec.timeout`` short of ``n_trials``."""
    engine = engine or EngineSpec()
    tracker = tracker or make_tracker()
    tracker.open()  # a bad tracking URI fails before the Optuna storage is created
    study = load_study(spec, objective.direction)
    experiment = experiment_name(objective.suite)
    workers = 1 if engine.kind == "serial" else engine.workers or engine.in_flight() or 1
    crashes: list[str] = []
    driver = uuid.uuid4().hex[:12]  # this invocation's trials: those it fails if it is stopped
    worker_spec = dataclasses.replace(spec, tags={**spec.tags, "driver": driver})
    with open_session(engine, tracker) as session:
        recovered = recover_stale_trials(study, spec)
        end_dead_runs(session.tracker, experiment, spec.study_name)
        parent_id = study.user_attrs.get(PARENT_RUN_ATTR)
        if not _live_parent(session.tracker, experiment, spec.study_name, parent_id):
            parent_id = None
        if (held := len(study.get_trials(deepcopy=False, states=FINISHED))) >= spec.n_trials:
            # Nothing to run: no new parent run, and nothing logged again (best_trial.json, the figures).
            result = _study_result(spec, study, parent_id, recovered)
            result.notes.append(f"nothing was run: study {spec.study_name} holds {held} finished trial{'' if held == 1 else 's'} already "
                                f"(--trials {spec.n_trials}); pass a larger --trials to run more")
            return result
        with session.tracker.run(
            spec.study_name, experiment=experiment,
            tags=standard_tags(**spec.tags, role="study", study=spec.study_name, engine=engine.kind),
        ) as parent:
            if parent_id is None:
                study.set_user_attr(PARENT_RUN_ATTR, parent.run_id)
                parent_id = parent.run_id
            parent.log_params({"study": spec.study_name, "storage": spec.storage_url, "n_trials": spec.n_trials,
                               "workers": workers, "engine": engine.kind, "pruner": spec.pruner, "seed": spec.seed,
                               **objective.describe()})
            for _round in range(spec.max_retry + 1):  # a round ends short only when a worker died
                missing = spec.n_trials - len(study.get_trials(deepcopy=False, states=FINISHED))
                if missing <= 0 or (_round and spec.timeout is not None):
                    break
                jobs = [(worker_spec, objective, parent_id, w, session.tracker) for w in range(min(workers, missing))]
                died = len(crashes)
                try:
                    session.map(study_worker, jobs, lambda _i, _n: None,
                                lambda i, why: crashes.append(f"worker {i}: {why}"))
                except (KeyboardInterrupt, SystemExit) as exc:
                    end_stopped_trials(study, spec, session.tracker, experiment, parent_id, driver,
                                       f"KeyboardInterrupt: the driver was stopped ({type(exc).__name__})"
                                       + (" and cancelled its Ray tasks" if engine.kind == "ray" else ""))
                    raise
                if len(crashes) == died:  # the rest are running in another driver
                    break
                recovered += recover_stale_trials(study, spec)
                end_dead_runs(session.tracker, experiment, spec.study_name)
            study = load_study(spec, objective.direction)
            result = _study_result(spec, study, parent.run_id, recovered)
            parent.log_metrics({f"trials_{k}": v for k, v in result.counts.items()})
            if crashes:
                parent.set_tags({"worker_crashes": "; ".join(crashes)[:5000]})
            if result.best_trial is not None:
                parent.log_params({f"best.{k}": v for k, v in result.best_params.items()})
                parent.log_metrics({"best_value": result.best_value, "best_trial": result.best_trial})
                parent.log_dict({"number": result.best_trial, "value": result.best_value, "params": result.best_params},
                                "best_trial.json")
                _log_figures(study, parent, objective.target_name)
            finished = result.counts["complete"] + result.counts["pruned"]
            if spec.timeout is not None and finished + len(result.running_elsewhere) < spec.n_trials:
                result.notes.append(f"stopped at --timeout {spec.timeout:g} s after {finished} of {spec.n_trials} "
                                    "trials; run again to continue")
            return result


def end_stopped_trials(study: optuna.Study, spec: StudySpec, tracker: Tracker, experiment: str, parent_id: str,
                       driver: str, reason: str) -> list[int]:
    """After driver ``driver`` was stopped (Ctrl-C, SIGTERM): end KILLED the trial runs its workers left
    RUNNING under ``parent_id``, fail the Optuna trials they left RUNNING and enqueue their parameters
    again (:func:`_retry`); the numbers of the trials failed. A Ray task is cancelled by force, so its
    own handler (:func:`_trial_fn`'s) never runs; in this process it did, and nothing is left here. Other
    drivers' trials (their runs may nest under the same parent) are left alone."""
    try:
        tracker.end_stale(experiment, {"study": spec.study_name, "role": "trial", "driver": driver}, reason,
                          status="KILLED", parent_id=parent_id)
    except StoreUnreachable:
        pass
    failed = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if trial.user_attrs.get(DRIVER_ATTR) == driver:
            try:
                study.tell(trial.number, state=TrialState.FAIL)
            except optuna.exceptions.UpdateFinishedTrialError:  # its worker ended it after all
                continue
            _retry(study, trial.number, spec.max_retry)
            failed.append(trial.number)
    return failed


def _study_result(spec: StudySpec, study: optuna.Study, parent_run_id: str | None, recovered: list[int]) -> StudyResult:
    """What the study holds now: its trials' counts, its best trial, the trials running elsewhere."""
    trials = study.get_trials(deepcopy=False)
    counts = {state.name.lower(): sum(t.state == state for t in trials) for state in TrialState}
    best = study.best_trial if any(t.state == TrialState.COMPLETE for t in trials) else None
    return StudyResult(
        spec.study_name, spec.storage_url, parent_run_id, counts,
        best.value if best else None, dict(best.params) if best else {}, best.number if best else None,
        recovered, [t.number for t in trials if t.state == TrialState.RUNNING],
    )


NEEDS_SEVERAL_TRIALS = ("param_importances.png",)
"""The figures that mean nothing below 2 completed trials (importances compare trials' values)."""


def _log_figures(study: optuna.Study, run: RunHandle, target_name: str = Objective.target_name) -> None:
    import matplotlib  # noqa: PLC0415 - matplotlib's Agg backend is chosen before pyplot loads, only when figures are drawn

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415 - matplotlib's Agg backend is chosen before pyplot loads, only when figures are drawn
    from optuna.visualization import matplotlib as ovm  # noqa: PLC0415 - matplotlib's Agg backend is chosen before pyplot loads, only when figures are drawn

    importances = _FittedOnce(_importances())  # both figures rank by one fANOVA fit, not one each
    figures = {
        "optimization_history.png": functools.partial(_history, ovm.plot_optimization_history, target_name=target_name),
        "param_importances.png": functools.partial(ovm.plot_param_importances, evaluator=importances,
                                                   target_name=target_name),
        "parallel_coordinate.png": functools.partial(
            _parallel_coordinate, functools.partial(ovm.plot_parallel_coordinate, target_name=target_name),
            evaluator=importances),
    }
    completed = len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
    for name, plot in figures.items():
        if name in NEEDS_SEVERAL_TRIALS and completed < 2:  # Optuna draws one, which says nothing
            run.set_tags({f"figure_skipped.{name}": f"{completed} completed trial; it needs at least 2"})
            continue
        try:
            with _experimental_api():
                # Optuna's own remarks on a small study ("too small to compute importances", "some regimes
                # for parameter ... have less than 2 trials", matplotlib's "identical low and high ylims" for a
                # parameter tried at one value): the figure says as much. Not filtered by module: on Python
                # 3.12+ Optuna attributes its warnings to the caller (this module), skipping its own frames.
                warnings.simplefilter("ignore", UserWarning)
                ax = plot(study)
        except (ValueError, RuntimeError, ZeroDivisionError) as exc:  # e.g. importances need >1 trial
            run.set_tags({f"figure_skipped.{name}": str(exc)[:200]})
            continue
        fig = ax.figure if hasattr(ax, "figure") else ax.flat[0].figure
        run.log_figure(fig, f"optuna/{name}")
        plt.close(fig)


def _history(plot: Callable[..., Any], study: optuna.Study, **options: Any) -> Any:
    """Optuna's optimisation history with its trials on a count axis (:func:`recurbench.plots.count_ticks`:
    whole numbers; a study of 2 or 3 trials had ticks at 0.25, 0.5, ...)."""
    from recurbench.plots import count_ticks  # noqa: PLC0415 - matplotlib loads only when figures are drawn

    ax = plot(study, **options)
    count_ticks(ax.xaxis)
    return ax


def _importances() -> optuna.importance.BaseImportanceEvaluator:
    """How the figures rank parameters: fANOVA (how much of the objective's variance each explains),
    seeded, so that a study's figures are the same each time they are drawn. Optuna 5's default,
    PED-ANOVA, judges the best 10 % of trials alone, which in a study of a few dozen is a few trials:
    of two parameters that decided a test objective it ranked one below five that did not."""
    return optuna.importance.FanovaImportanceEvaluator(seed=0)


class _FittedOnce(optuna.importance.BaseImportanceEvaluator):
    """An importance evaluator that asks ``inner`` once per set of parameters and returns that answer
    again: the importance figure and the parallel-coordinate figure each ranked the study's parameters,
    fitting fANOVA twice (about a second of CPU each for a study of 60 trials)."""

    def __init__(self, inner: optuna.importance.BaseImportanceEvaluator) -> None:
        self.inner = inner
        self._answers: dict[tuple[str, ...] | None, dict[str, float]] = {}

    def evaluate(self, study: optuna.Study, params: list[str] | None = None, *,
                 target: Callable[[FrozenTrial], float] | None = None) -> dict[str, float]:
        if target is not None:  # another value than the objective's: not this cache's question
            return self.inner.evaluate(study, params=params, target=target)
        key = None if params is None else tuple(params)
        if key not in self._answers:
            self._answers[key] = self.inner.evaluate(study, params=params)
        return dict(self._answers[key])


PARALLEL_PARAMS = 5
"""The most parameters the parallel-coordinate figure draws: with more (an RSA study tunes about 11), its
axes' labels run into each other. It then draws the most important ones, in order, and says so."""


def _parallel_coordinate(plot: Callable[..., Any], study: optuna.Study,
                         evaluator: optuna.importance.BaseImportanceEvaluator | None = None) -> Any:
    """Optuna's parallel-coordinate figure over at most :data:`PARALLEL_PARAMS` parameters, as wide as
    its axes need: the most important, by ``evaluator`` (default :func:`_importances`), then, where
    fewer are ranked, those fANOVA leaves unranked because not every trial has them (an RSA study's dilations, drawn only
    where a trial has dilated heads), by name; the title says which."""
    params = sorted({name for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) for name in t.params})
    if len(params) <= PARALLEL_PARAMS:
        return _sized(plot(study, params=params), len(params))
    try:
        ranked = list(optuna.importance.get_param_importances(study, evaluator=evaluator or _importances()))[:PARALLEL_PARAMS]
    except (ValueError, RuntimeError):  # fewer than 2 completed trials, or one value throughout
        ranked = []
    shown = ranked + [name for name in params if name not in ranked][: PARALLEL_PARAMS - len(ranked)]
    if not ranked:
        chosen = f"the first {len(shown)} of {len(params)} parameters by name"
    elif len(ranked) == len(shown):
        chosen = f"the {len(shown)} most important of {len(params)} parameters"
    else:
        chosen = (f"the {len(ranked)} most important of {len(params)} parameters\nand {len(shown) - len(ranked)} "
                  "not every trial has (not ranked)")
    ax = _sized(plot(study, params=shown), len(shown))
    ax.set_title(f"Parallel coordinates: {chosen}")
    return ax


def _sized(ax: Any, n_params: int) -> Any:
    """``ax``'s figure as wide as ``n_params`` axes need, their labels clear of each other and inside
    the figure (Optuna slants the axes' names below the plot, past its lower edge)."""
    ax.figure.set_size_inches(max(6.4, 1.4 * (n_params + 2)), 4.8)
    ax.figure.tight_layout()
    return ax


def default_study_name(*parts: str) -> str:
    return "-".join(p for p in parts if p)


def settings_digest(config: str | None, overrides: Sequence[str]) -> str:
    """A short name part that tells studies of other settings apart (the ``--config`` file's content,
    the ``--set`` items), so that the default study name never resumes trials trained under other
    settings; empty for the shipped profile as it is."""
    if config is None and not overrides:
        return ""
    digest = hashlib.sha256(Path(config).read_bytes() if config is not None else b"")
    digest.update("\n".join(overrides).encode())
    return "set" + digest.hexdigest()[:8]
