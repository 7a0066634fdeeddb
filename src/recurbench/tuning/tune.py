"""``recurbench tune`` as a library call: the objective a suite tunes, the study's name and settings,
the paper's trial enqueued first, the study run, the best configuration written as a suite file."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from recurbench.devices import describe_device
from recurbench.engine import EngineSpec, check_cluster_store, check_device
from recurbench.errors import RecurbenchError
from recurbench.suites.registry import SUITES
from recurbench.tracking import Tracker, check_output_file, check_store, resolve_tracking_uri
from recurbench.tuning.objectives import LTSFObjective, MinigridObjective, write_best_profile
from recurbench.tuning.study import (
    DEFAULT_STORAGE,
    StudyResult,
    StudySpec,
    default_study_name,
    load_study,
    make_storage,
    run_study,
    settings_digest,
)

TUNABLE_SUITES = ("ltsf", "minigrid")


@dataclass(frozen=True)
class TuneRequest:
    """What ``recurbench tune`` was asked for (see its ``--help`` for each field)."""

    suite: str
    model: str
    trials: int
    dataset: str | None = None
    horizon: int | None = None
    env: str | None = None
    profile: str = "quick"
    storage: str | None = None
    study_name: str | None = None
    timeout: float | None = None
    pruner: str = "median"
    seed: int = 0
    tune_lr: bool = False
    enqueue_paper: bool = False
    best_out: str | None = None
    config: str | None = None
    overrides: tuple[str, ...] = ()
    data_dir: str | None = None
    device: str | None = None


@dataclass
class TuneOutcome:
    result: StudyResult
    objective: LTSFObjective | MinigridObjective
    notes: list[str] = field(default_factory=list)
    """What happened beside the study: the paper's trial not enqueued, the best configuration written."""


def make_objective(request: TuneRequest, engine: EngineSpec) -> tuple[LTSFObjective | MinigridObjective, dict[str, str]]:
    """The suite's objective for ``request`` (validated: its suite job is resolved here, before any
    worker starts) and the tags naming its target (dataset and horizon, or env)."""
    if request.suite not in TUNABLE_SUITES:
        which = (f"tune has no search space for suite {request.suite!r}" if request.suite in SUITES  # langs, memory
                 else f"unknown suite {request.suite!r}")
        raise RecurbenchError(f"{which}; tune tunes {' and '.join(TUNABLE_SUITES)}")
    check_suite_options(request)
    check_device(engine, request.device)
    # Under Ray, a task given GPUs trains on the one Ray assigned (recurbench.engine.task_device).
    device = "cpu" if engine.kind == "ray" else request.device
    target_device = str(SUITES[request.suite]().target_device(device))
    objective: LTSFObjective | MinigridObjective
    if request.suite == "ltsf":
        if request.dataset is None or request.horizon is None:
            raise RecurbenchError("tune ltsf needs --dataset and --horizon")
        objective = LTSFObjective(request.model, request.dataset, request.horizon, request.profile, request.data_dir,
                                  request.tune_lr, request.seed, request.config, request.overrides,
                                  device=target_device)
        tags = {"dataset": request.dataset, "horizon": str(request.horizon)}
    else:
        if request.env is None:
            raise RecurbenchError("tune minigrid needs --env (a pair from `recurbench list envs` or the profile's "
                                  "pairs, or TRAIN_ID:TEST_ID)")
        objective = MinigridObjective(request.model, request.env, request.profile, request.seed, config=request.config,
                                      overrides=request.overrides, device=target_device)
        tags = {"env": objective.job[0].name}  # as `run` tags it: the ids of a named pair are that pair
    objective.job  # noqa: B018 - resolve (and validate) the suite job before any worker starts
    return objective, tags


SUITE_OPTIONS = {"dataset": "ltsf", "horizon": "ltsf", "tune_lr": "ltsf", "enqueue_paper": "ltsf", "env": "minigrid"}
"""The request's fields (options) that only one suite's objective reads."""


def check_suite_options(request: TuneRequest) -> None:
    """Refuse an option of the other suite's (``--dataset`` for minigrid) instead of ignoring it."""
    for name, suite in SUITE_OPTIONS.items():
        if suite != request.suite and getattr(request, name) not in (None, False):
            raise RecurbenchError(f"--{name.replace('_', '-')} applies to tune {suite}, not {request.suite!r}")


MAX_SEED = 2**31 - 1
"""The largest ``--seed``: the sampler's seed adds the worker and 7919 per trial the study holds to it."""


def check_seed(seed: int) -> None:
    """``--seed`` as numpy and Optuna's sampler take it (from 0 to 2**32 - 1), with room for what
    :func:`~recurbench.tuning.study.load_study` and the minigrid evaluation (10,000) add to it."""
    if seed < 0:
        raise RecurbenchError(f"--seed must be at least 0, got {seed}")
    if seed > MAX_SEED:
        raise RecurbenchError(f"--seed must be at most {MAX_SEED}, got {seed}")


def study_spec(request: TuneRequest, engine: EngineSpec, objective: LTSFObjective | MinigridObjective,
               tags: dict[str, str]) -> StudySpec:
    """The study: named by suite, model, target, profile and a digest of any other settings (so the
    default name never resumes trials trained under other settings), tagged with where it trains. Its
    purpose records the same, so that an explicit ``--study-name`` of a study of other settings is
    refused too (:func:`~recurbench.tuning.study.check_purpose`)."""
    settings = settings_digest(request.config, request.overrides)
    name = request.study_name or default_study_name(request.suite, request.model, *tags.values(), request.profile, settings)
    where = (describe_device(SUITES[request.suite]().target_device(objective.device)) if not engine.gpus_per_run
             else f"ray ({engine.gpus_per_run:g} GPU per run)")
    return StudySpec(
        study_name=name, n_trials=request.trials, storage=request.storage, timeout=request.timeout, seed=request.seed,
        pruner=request.pruner,
        tags={"suite": request.suite, "profile": request.profile, "model": request.model, **tags, "device": where},
        purpose={"suite": request.suite, "model": request.model, **tags, "profile": request.profile,
                 "settings": settings or "shipped", "config": request.config, "set": list(request.overrides)},
    )


def tune(request: TuneRequest, tracker: Tracker, engine: EngineSpec) -> TuneOutcome:
    """Validate everything, create or resume the study and run it to ``request.trials`` finished
    trials (on ``engine``), then write the best configuration if asked."""
    if request.timeout is not None and not request.timeout > 0:
        raise RecurbenchError(f"--timeout must be a positive number of seconds, got {request.timeout:g}")
    check_seed(request.seed)
    check_cluster_store(engine, resolve_tracking_uri(getattr(tracker, "tracking_uri", None)))
    check_cluster_store(engine, request.storage or DEFAULT_STORAGE, "Optuna storage")
    objective, tags = make_objective(request, engine)
    if request.best_out:
        check_output_file(request.best_out, "--best-out")
    spec = study_spec(request, engine, objective, tags)
    # Nothing is created until both stores are known good: a bad tracking URI fails before the Optuna
    # storage is created, and a bad Optuna storage before the tracking store is (an empty mlflow.db).
    if (uri := getattr(tracker, "tracking_uri", None)) is not None:
        check_store(uri)
    make_storage(request.storage)
    tracker.open()
    notes: list[str] = []
    if request.enqueue_paper and isinstance(objective, LTSFObjective):
        notes += enqueue_paper_trial(spec, objective)
    result = run_study(spec, objective, tracker, engine)
    notes += result.notes
    if request.best_out and result.best_trial is not None:
        write_best_profile(objective, load_study(spec, objective.direction).best_trial, request.best_out)
        notes.append(f"best configuration written to {request.best_out}: recurbench run {request.suite} "
                     f"--config {request.best_out} --profile tuned")
    return TuneOutcome(result, objective, notes)


def enqueue_paper_trial(spec: StudySpec, objective: LTSFObjective) -> Sequence[str]:
    """The profile's (the paper's Table 5) head layout as the study's next trial, unless the study holds
    a trial with those parameters already, in any state (Optuna's ``skip_if_exists``): a resumed study,
    or one that other drivers share, evaluates it once. A note when the layout is outside the search space."""
    study = load_study(spec, objective.direction)
    params = objective.paper_params()
    if params is None:
        return ["the profile's head layout uses a dilation outside the candidates; not enqueued"]
    study.enqueue_trial(params, user_attrs={"paper_configuration": True}, skip_if_exists=True)
    return []
