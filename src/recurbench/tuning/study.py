"""Resumable, multi-worker Optuna studies tracked in MLflow.

* Storage: default ``sqlite:///results/optuna.db`` (embedded). Any Optuna storage URL works:
  ``journal:PATH`` (or a path ending in ``.log``) for several processes on one machine without a
  database, ``postgresql://...`` / ``mysql://...`` for workers on several machines.
* Workers: ``workers`` processes share one study. Each stops asking for trials once the study holds
  ``n_trials`` finished (COMPLETE or PRUNED) or running trials, so a study started again with the same
  name continues where it stopped: completed trials are neither lost nor repeated.
* A dead worker's trials: with a database storage a heartbeat marks a silent trial FAILED and
  ``RetryFailedTrialCallback`` re-enqueues its parameters (up to ``max_retry`` times). The journal
  storage has no heartbeat: when a study is (re)started, trials left RUNNING are failed and retried
  the same way — start a journal study's workers from one launcher.
* MLflow: a parent run per study (its id kept in the study's user attributes, so a resumed study
  logs under the same parent, and invocations that start one new study at the same moment agree on
  one: :data:`PARENT_SETTLE_S`), a nested run per trial (params, intermediate values, final value,
  state), and at the end the best parameters and Optuna's figures as artifacts of the parent.
* Objective values are minimised or maximised as the objective declares; a NaN or infinite value
  prunes the trial instead of crashing the study.
"""

from __future__ import annotations

import hashlib
import math
import multiprocessing
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import RDBStorage, RetryFailedTrialCallback
from optuna.trial import TrialState

from recurbench.errors import ConfigError
from recurbench.tracking import (
    RESULTS_DIR,
    RunHandle,
    Tracker,
    experiment_name,
    make_tracker,
    sqlite_file,
    sqlite_store_lock,
    standard_tags,
)

DEFAULT_STORAGE = "sqlite:///results/optuna.db"
PARENT_RUN_ATTR = "mlflow_parent_run_id"
PARENT_SETTLE_S = 2.0
"""Seconds a new study's first invocation waits after naming its run the study's parent, before it
reads the name back: two invocations that start one new study at the same moment both name their own
run, the later write stands, and both then nest their trials under it."""
RETRY_ATTR = "retried_from"


class Objective:
    """What a study optimises. Subclasses implement :meth:`__call__` for one trial; they report
    intermediate values with :meth:`report` (which prunes when the pruner says so)."""

    direction: str = "minimize"
    suite: str = ""

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
    workers: int = 1
    timeout: float | None = None
    seed: int = 0
    pruner: str = "median"
    max_retry: int = 2
    heartbeat_interval: int = 20
    """Database storages: seconds between a running trial's heartbeats."""
    grace_period: int = 60
    """Database storages: a running trial silent for this long is failed (and retried)."""
    tracking_uri: str | None = None
    tags: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.n_trials < 1:
            raise ConfigError(f"--trials must be at least 1, got {self.n_trials}")
        if self.workers < 1:
            raise ConfigError(f"--workers must be at least 1, got {self.workers}")
        if self.pruner not in PRUNERS:
            raise ConfigError(f"unknown pruner {self.pruner!r}; choose one of: {', '.join(PRUNERS)}")


PRUNERS: dict[str, Callable[[], optuna.pruners.BasePruner]] = {
    "median": lambda: optuna.pruners.MedianPruner(n_startup_trials=4, n_warmup_steps=1),
    "hyperband": lambda: optuna.pruners.HyperbandPruner(),
    "none": lambda: optuna.pruners.NopPruner(),
}


def is_journal(url: str | None) -> bool:
    """Journal-file storages have no heartbeat; database storages do."""
    return url is not None and (url.startswith("journal:") or url.endswith(".log"))


def _retry_kwargs(max_retry: int) -> dict[str, Any]:
    # Optuna >= 4.9 renamed the callback and its argument; older releases only know the first name.
    try:
        from optuna.storages import RetryHeartbeatStaleTrialCallback

        return {"heartbeat_stale_trial_callback": RetryHeartbeatStaleTrialCallback(max_retry=max_retry)}
    except ImportError:
        return {"failed_trial_callback": RetryFailedTrialCallback(max_retry=max_retry)}


def make_storage(
    url: str | None, max_retry: int = 2, heartbeat_interval: int = 20, grace_period: int = 60
) -> optuna.storages.BaseStorage:
    url = url or DEFAULT_STORAGE
    if url == DEFAULT_STORAGE:
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    if is_journal(url):
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        path = Path(url.removeprefix("journal:"))
        path.parent.mkdir(parents=True, exist_ok=True)
        return JournalStorage(JournalFileBackend(str(path)))
    if (database := sqlite_file(url)) is not None:  # its folder, as for a journal (sqlite would not open the file)
        database.parent.mkdir(parents=True, exist_ok=True)
    engine_kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}
    try:
        with sqlite_store_lock(url):  # creating the tables races between processes otherwise
            return RDBStorage(
                url,
                engine_kwargs=engine_kwargs,
                heartbeat_interval=heartbeat_interval,
                grace_period=grace_period,
                **_retry_kwargs(max_retry),
            )
    except Exception as exc:  # a bad URL, a driver that is not installed, a server that is down
        raise ConfigError(f"cannot open Optuna storage {url!r}: {exc}") from None


def _retry_count(trial: optuna.trial.FrozenTrial, study: optuna.Study) -> int:
    count, source = 0, trial.system_attrs.get("failed_trial") or trial.user_attrs.get(RETRY_ATTR)
    by_number = {t.number: t for t in study.get_trials(deepcopy=False)}
    while source is not None and source in by_number:
        count += 1
        parent = by_number[source]
        source = parent.system_attrs.get("failed_trial") or parent.user_attrs.get(RETRY_ATTR)
    return count


def recover_stale_trials(study: optuna.Study, max_retry: int) -> list[int]:
    """Fail the trials a dead worker left RUNNING and enqueue their parameters again (up to
    ``max_retry`` times per original trial). Only for storages without a heartbeat, and only when no
    other worker of this study is alive (the launcher's job)."""
    failed = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        study._storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
        failed.append(trial.number)
        if _retry_count(trial, study) < max_retry:
            study.enqueue_trial(trial.params, user_attrs={RETRY_ATTR: trial.number}, skip_if_exists=False)
    return failed


def load_study(spec: StudySpec, direction: str, worker: int = 0) -> optuna.Study:
    # Each worker seeds its sampler differently: with one seed, W workers would propose the same
    # start-up trials W times.
    return optuna.create_study(
        study_name=spec.study_name,
        storage=make_storage(spec.storage, spec.max_retry, spec.heartbeat_interval, spec.grace_period),
        sampler=optuna.samplers.TPESampler(seed=spec.seed + 1000 * worker, multivariate=True, group=True),
        pruner=PRUNERS[spec.pruner](),
        direction=direction,
        load_if_exists=True,
    )


def _stop_at(n_trials: int) -> Callable[[optuna.Study, optuna.trial.FrozenTrial], None]:
    def callback(study: optuna.Study, _trial: optuna.trial.FrozenTrial) -> None:
        # Trials still running in other workers count too, so that W workers overshoot by < W.
        done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING))
        if len(done) >= n_trials:
            study.stop()

    return callback


def _trial_fn(objective: Objective, tracker: Tracker, parent_id: str, tags: dict[str, str]) -> Callable[[optuna.Trial], float]:
    experiment = experiment_name(objective.suite)

    def run_trial(trial: optuna.Trial) -> float:
        pruned: optuna.TrialPruned | None = None
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
        if pruned is not None:
            raise pruned
        return value

    return run_trial


def _worker(spec: StudySpec, objective: Objective, parent_id: str, worker: int, tracker: Tracker | None = None) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = load_study(spec, objective.direction, worker)
    tracker = tracker or make_tracker(spec.tracking_uri)
    tags = {**spec.tags, "worker": str(worker)}
    remaining = spec.n_trials - len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)))
    if remaining <= 0:
        return
    study.optimize(
        _trial_fn(objective, tracker, parent_id, tags),
        n_trials=spec.n_trials * (spec.max_retry + 1),  # an upper bound; _stop_at ends the study
        timeout=spec.timeout,
        callbacks=[_stop_at(spec.n_trials)],
        catch=(),
        gc_after_trial=True,
    )


@dataclass
class StudyResult:
    study_name: str
    storage: str
    parent_run_id: str
    counts: dict[str, int]
    best_value: float | None
    best_params: dict[str, Any]
    best_trial: int | None
    recovered: list[int]


def _settle() -> None:
    time.sleep(PARENT_SETTLE_S)


def run_study(spec: StudySpec, objective: Objective, tracker: Tracker | None = None) -> StudyResult:
    """Create or resume ``spec.study_name`` and run it to ``n_trials`` finished trials."""
    tracker = tracker or make_tracker(spec.tracking_uri)
    tracker.open()  # a bad tracking URI fails before the Optuna storage is created
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = load_study(spec, objective.direction)
    storage_url = spec.storage or DEFAULT_STORAGE
    recovered: list[int] = []
    if is_journal(spec.storage):
        recovered = recover_stale_trials(study, spec.max_retry)
    experiment = experiment_name(objective.suite)
    parent_id = study.user_attrs.get(PARENT_RUN_ATTR)
    with tracker.run(
        spec.study_name, experiment=experiment,
        tags=standard_tags(**spec.tags, role="study", study=spec.study_name),
    ) as parent:
        if parent_id is None:
            study.set_user_attr(PARENT_RUN_ATTR, parent.run_id)
            _settle()
            parent_id = study.user_attrs.get(PARENT_RUN_ATTR, parent.run_id)
        parent.log_params({"study": spec.study_name, "storage": storage_url, "n_trials": spec.n_trials,
                           "workers": spec.workers, "pruner": spec.pruner, "seed": spec.seed, **objective.describe()})
        if spec.workers == 1:
            _worker(spec, objective, parent_id, 0, tracker)
        else:
            ctx = multiprocessing.get_context("spawn")
            procs = [ctx.Process(target=_worker, args=(spec, objective, parent_id, w)) for w in range(spec.workers)]
            for p in procs:
                p.start()
            for p in procs:
                p.join()
            bad = [p.exitcode for p in procs if p.exitcode != 0]
            if bad:
                raise RuntimeError(f"{len(bad)} of {spec.workers} study workers exited with codes {bad}")
        study = load_study(spec, objective.direction)
        trials = study.get_trials(deepcopy=False)
        counts = {state.name.lower(): sum(t.state == state for t in trials) for state in TrialState}
        parent.log_metrics({f"trials_{k}": v for k, v in counts.items()})
        completed = [t for t in trials if t.state == TrialState.COMPLETE]
        best = study.best_trial if completed else None
        if best is not None:
            parent.log_params({f"best.{k}": v for k, v in best.params.items()})
            parent.log_metrics({"best_value": best.value, "best_trial": best.number})
            parent.log_dict({"number": best.number, "value": best.value, "params": best.params}, "best_trial.json")
            _log_figures(study, parent)
        return StudyResult(
            spec.study_name, storage_url, parent.run_id, counts,
            best.value if best else None, dict(best.params) if best else {}, best.number if best else None,
            recovered,
        )


def _log_figures(study: optuna.Study, run: RunHandle) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.visualization import matplotlib as ovm

    figures = {
        "optimization_history.png": ovm.plot_optimization_history,
        "param_importances.png": ovm.plot_param_importances,
        "parallel_coordinate.png": ovm.plot_parallel_coordinate,
    }
    for name, plot in figures.items():
        try:
            ax = plot(study)
        except (ValueError, RuntimeError, ZeroDivisionError) as exc:  # e.g. importances need >1 trial
            run.set_tags({f"figure_skipped.{name}": str(exc)[:200]})
            continue
        fig = ax.figure if hasattr(ax, "figure") else ax.flat[0].figure
        run.log_figure(fig, f"optuna/{name}")
        plt.close(fig)


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
