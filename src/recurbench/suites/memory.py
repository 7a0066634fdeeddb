"""The ``memory`` suite: Kerg et al. (2020), App. C-D -- copy and denoise with the agents' memory cores
(Table 5's seven models: ``lstm``, ``rnn`` = orth-RNN, ``exprnn``, ``memrnn``, ``sab``, ``relrnn``,
``rellstm``; and ``memlstm``).

``plan`` expands a profile into one run per task x delay T x core x seed, plus its kappa sweeps (App.
C, the rebuttal's kappa = nu + rho trade-off): RelLSTM runs at one task and T with ``nu + rho = kappa``
for each kappa, nu (or rho) held at the sweep's value. A sweep run at the settings of a run of the
grid is not planned twice. ``models_by_length`` narrows the models at some T (Table 5 runs three at
T = 500). Each core trains at the profile's ``model`` and ``training`` with its ``per_model`` keys over
them, and its ``per_model.<core>.tasks.<task>`` keys over those (Tables 6-7 give each model its own
optimiser, rate and nonlinearity, per task). Everything is checked
before anything trains: names (``--tasks``, ``--models``), delays (``--lengths``), the task layout,
nu / rho / kappa, each core's settings and those that must fit the sequences (SAB's ``topk``,
``memory_stride``, ``truncate``), an error naming the key (``per_model.<core>.model.<key>`` where
that block set it). A sweep is planned when its task and ``rellstm`` are selected and, with
``--lengths`` given, its T is among them.

Runs are tagged ``task``, ``T``, ``model``, ``nu``, ``rho`` (a relevancy-screened core's; MemLSTM's
and MemRNN's: the window and 0; ``-`` for the others), ``study`` (``table5`` for the grid, ``kappa``
for sweep-only runs) and ``sweep`` (the sweeps the run is a point of, e.g. ``nu=15``; ``-`` for none).
A run's params hold the network settings its core reads (:data:`CORE_SETTINGS`). ``execute`` trains a
:class:`~recurbench.memory.models.MemorySequenceModel` (:func:`~recurbench.memory.training.train_memory_task`)
and logs, per run:

* per log window (step = updates): ``loss`` (training loss) and ``train_accuracy`` (training-batch
  accuracy at the scored steps), the reference code's logged values;
* per evaluation during training (``training.eval_every``; step = updates): ``eval_accuracy``
  (held-out; two in a row at ``training.solve_threshold`` stop the run) and ``eval_update`` (its update,
  so that a run read back mid-way, its latest values only, says how far it got: ``compare`` shows it);
* at the end: ``accuracy`` (held-out), ``final_loss``, ``grad_first_init`` / ``grad_first_final``
  (mean ``||dL2/dh_t||`` over the c data steps, at initialisation and after training),
  ``grad_ratio_init`` / ``grad_ratio_final`` (the norm at t = 1 over the norm at t = T, 1-based: the
  issue's measure of decay over the delay; 0 where the first step's norm underflowed),
  ``updates_per_second``, ``train_seconds`` (the time in the updates, evaluations aside, over every
  attempt of a resumed run: ``wall_time_s`` is this attempt's), ``n_params``, ``updates`` (run),
  ``solved`` (1 or 0) and ``solved_at`` (the update of the second solved evaluation; NaN when not solved);
* artifacts ``gradient_norms.json`` (``||dL2/dh_t||`` for every t, both times) with its figure
  ``gradient_norms.png`` (log scale against t), and ``loss_curve.json``;
* every ``training.checkpoint_every`` updates (500 by default) a checkpoint
  (:class:`~recurbench.memory.training.TrainingState`, about 1 MB at the paper's width) in the run's
  artifacts (:mod:`recurbench.suites.checkpoints`), and the param ``checkpoint_every`` (an execution
  param, like the thread count: it changes no result, so it is not among the plan's settings and runs
  at other values pool). ``run --skip-finished`` continues a run that ended FAILED or KILLED from
  its newest checkpoint (``resumable``): the run is tagged ``resumed_from`` / ``resumed_at``, its
  history before the checkpoint is logged again at its steps, and it ends as the uninterrupted run
  would have. A checkpoint that cannot continue the run (unreadable, other settings) is refused with
  one line naming the run and the reason, and the run starts from 0.

``summary_rows`` sets the copy accuracies, with the updates behind them (:func:`budget_text`), beside
Table 5's cell for each model (``reference/kerg_table5_copy.csv``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from types import MappingProxyType
from typing import Annotated, Any

import torch
from pydantic import BaseModel, Field, NonNegativeInt, PositiveInt, PrivateAttr, create_model, model_validator

from recurbench.agents.cores import CORES
from recurbench.config import KeyPathError, StrictModel, Unique, check_unique, known_name
from recurbench.errors import ConfigError
from recurbench.memory.figures import gradient_figure
from recurbench.memory.models import RNN_FAMILY, SHARED_CORE_SETTINGS, SequenceModelConfig
from recurbench.memory.tasks import MEMORY_TASKS, MemoryTask, make_task
from recurbench.memory.training import (
    OPTIMIZERS,
    CheckpointMismatch,
    LogPoint,
    MemoryTrainConfig,
    MemoryTrainResult,
    TrainingState,
    kappa_variants,
    train_memory_task,
)
from recurbench.plugins import planned_settings, plugin_settings_field
from recurbench.records import logged_settings
from recurbench.reference import kerg_table5_reference
from recurbench.runtime import physical_memory
from recurbench.suites.base import (
    ProgressFn,
    RunOutcome,
    RunPlan,
    SuiteDefinition,
    seconds_per_run,
    selected_names,
    selected_seeds,
)
from recurbench.suites.checkpoints import Checkpoint, CheckpointWriter
from recurbench.suites.paper_settings import footnote_row, outcomes_caveat
from recurbench.tracking import RunHandle

_Task = known_name(MEMORY_TASKS, "memory task")
_Core = known_name(CORES, "memory core")

# ------------------------------------------------------------------------------------------ profile


class TaskSettings(StrictModel):
    """The layout shared by both tasks (:class:`recurbench.memory.tasks.MemoryTask`)."""

    copy_length: PositiveInt = 10
    labels: PositiveInt = 8


class ModelSettings(StrictModel):
    """:class:`recurbench.memory.models.SequenceModelConfig`, less the core (``models``). The names of
    ``nonlinearity`` and the ``*_init`` schemes are checked by the config (a :class:`ConfigError` at
    plan time, naming the key)."""

    hidden_size: PositiveInt = 128
    attention_size: PositiveInt = 64
    nu: PositiveInt = 10
    rho: NonNegativeInt = 10
    memory_window: PositiveInt | None = None
    embedding_dim: PositiveInt | None = None
    nonlinearity: str = "tanh"
    recurrent_init: str = "henaff"
    input_init: str = "xavier"
    topk: PositiveInt = 10
    truncate: PositiveInt = 10
    memory_stride: PositiveInt = 2
    gate_init: str = "pytorch"


class TrainingSettings(StrictModel):
    """:class:`recurbench.memory.training.MemoryTrainConfig`."""

    updates: PositiveInt
    batch_size: PositiveInt = 10
    optimizer: known_name(OPTIMIZERS, "optimizer") = "adam"  # type: ignore[valid-type]
    learning_rate: float = Field(2e-4, gt=0, allow_inf_nan=False)
    rmsprop_alpha: float = Field(0.99, gt=0, lt=1)
    clip_norm: float = Field(1.0, gt=0, allow_inf_nan=False)
    log_every: PositiveInt = 100
    eval_batches: PositiveInt = 10
    compile_core: bool = False
    orth_learning_rate: float | None = Field(None, gt=0, allow_inf_nan=False)
    eval_every: PositiveInt | None = None
    solve_threshold: float = Field(0.99, gt=0, le=1)
    checkpoint_every: NonNegativeInt = 500
    """Updates between checkpoints (0: none); logged as the execution param ``checkpoint_every``, not
    with these (see :func:`_training_params`)."""


def _training_params(training: MemoryTrainConfig) -> dict[str, Any]:
    """The training settings a run logs under ``training.``: all but ``checkpoint_every``, which changes
    how much a kill costs, not the result (a resumed run ends as the uninterrupted one). Kept out of the
    plan's settings, a plan's key and ``--skip-finished``'s match do not change with it."""
    return {k: v for k, v in asdict(training).items() if k != "checkpoint_every"}


def _overrides(settings: type[StrictModel], name: str) -> Any:
    """``settings`` with every key optional: a model's own values over the profile's. Only the keys
    given count (``model_dump(exclude_unset=True)``); each is validated as in ``settings``, so a
    ``null`` passes only where ``settings`` takes one."""
    fields: dict[str, Any] = {}
    for key, info in settings.model_fields.items():
        annotation = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
        fields[key] = (annotation, None)
    return create_model(name, __base__=StrictModel, __module__=__name__, **fields)  # picklable by its name


ModelOverrides = _overrides(ModelSettings, "ModelOverrides")
TrainingOverrides = _overrides(TrainingSettings, "TrainingOverrides")


class TaskOverrides(StrictModel):
    """One core's settings for one task, over its own (Table 7's RelRNN row differs from Table 6's)."""

    model: ModelOverrides = ModelOverrides()  # type: ignore[valid-type]
    training: TrainingOverrides = TrainingOverrides()  # type: ignore[valid-type]


class PerModel(TaskOverrides):
    """One core's own settings over the profile's ``model`` and ``training`` (Tables 6 and 7 give each
    model its own optimiser, rate and nonlinearity), and per task over those (``tasks``)."""

    tasks: dict[_Task, TaskOverrides] = {}


class KappaSweep(StrictModel):
    """RelLSTM at ``nu + rho = kappa`` for each kappa, at one task and delay, holding either ``nu``
    or ``rho`` (give exactly one) at its value: App. C Fig. 3 varies rho at nu = 15 (left) and nu at
    rho = 15 (right). The other settings are the profile's ``model``."""

    task: _Task
    T: PositiveInt
    kappas: Annotated[list[PositiveInt], Unique] = Field(min_length=1)
    nu: PositiveInt | None = None
    rho: NonNegativeInt | None = None

    @model_validator(mode="after")
    def _one_fixed(self) -> KappaSweep:
        if (self.nu is None) == (self.rho is None):
            raise ValueError("give exactly one of nu and rho: the one held fixed while kappa varies the other")
        return self

    @property
    def fixed(self) -> str:
        return "nu" if self.nu is not None else "rho"


class MemoryProfile(StrictModel):
    tasks: Annotated[list[_Task], Unique] = Field(min_length=1)
    lengths: Annotated[list[PositiveInt], Unique] = Field(min_length=1)
    """The delays T."""
    models: Annotated[list[_Core], Unique] = Field(min_length=1)
    seeds: PositiveInt
    task: TaskSettings = TaskSettings()
    model: ModelSettings = ModelSettings()
    training: TrainingSettings
    per_model: dict[_Core, PerModel] = {}
    """A core's own ``model`` and ``training`` settings, over the profile's."""
    models_by_length: dict[PositiveInt, Annotated[list[_Core], Unique]] = {}
    """At these delays T, only these of ``models`` (Table 5 runs three models at T = 500)."""
    kappa_sweeps: list[KappaSweep] = []
    """Each sweep's runs join the plan when its task and ``rellstm`` are selected (see the module docstring)."""
    torch_threads: PositiveInt = 1
    """Intra-op threads per run: at batch 10 and width 128 a second thread does not pay."""
    plugin_settings: plugin_settings_field(CORES) = {}  # type: ignore[valid-type]
    """Plugin core -> its own settings (keyword parameters of its ``__init__`` after ``input_size,
    hidden_size``; one of ``model``'s given here applies to it alone), e.g. ``--set
    plugin_settings.gru.layers=2``; logged as ``plugin_settings.*`` params."""
    _command_line: dict[str, Any] = PrivateAttr(default_factory=dict)
    """What ``--set`` set (:meth:`MemorySuite.with_command_line`): a ``model`` or ``training`` key
    given there holds for every core, over ``per_model``'s."""

    @model_validator(mode="after")
    def _models_by_length_within_the_grid(self) -> MemoryProfile:
        for T, cores in self.models_by_length.items():
            if T not in self.lengths:
                raise KeyPathError(("models_by_length", T), f"T = {T} is not one of lengths {self.lengths}")
            for i, core in enumerate(cores):
                if core not in self.models:
                    raise KeyPathError(("models_by_length", T, i), f"{core!r} is not one of models {self.models}")
        return self

    def runs_at(self, core: str, T: int) -> bool:
        """Whether ``core`` runs at delay ``T`` (``models_by_length``)."""
        return core in self.models_by_length.get(T, [core])


# --------------------------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class MemoryJob:
    """Everything one run needs, resolved at plan time (plain data: picklable for Ray)."""

    task: str
    T: int
    copy_length: int
    labels: int
    network: SequenceModelConfig
    training: MemoryTrainConfig
    torch_threads: int = 1


def _lengths(selection: Mapping[str, Any], default: Sequence[int]) -> list[int]:
    """``--lengths`` (integers, or their text from the command line), else the profile's."""
    raw = selection.get("lengths") or default
    out = []
    for i, value in enumerate(raw):
        text = str(value).strip()
        if isinstance(value, bool) or not text.isdigit() or int(text) < 1:
            raise ConfigError(f"--lengths.{i}: a delay T must be a positive integer, got {value!r}")
        out.append(int(text))
    check_unique(out, "delay", "--lengths")
    return out


BYTES_PER_STEP_AND_UNIT = 4 * 16
"""What training keeps per sequence step and hidden unit for the backward pass, counted high: float32,
~16 tensors (an LSTM's four gates with their activations, cell, output, the state read back)."""


def _check_memory(job: MemoryJob, lengths: Sequence[int], key: str) -> None:
    """Refuse, at plan time, a delay whose training batch could not fit in this machine's memory (a
    ``--lengths 100000000`` allocated 8.5 GB before failing), with the estimate."""
    steps = job.T + 2 * job.copy_length
    need = job.training.batch_size * steps * job.network.hidden_size * BYTES_PER_STEP_AND_UNIT
    if (have := physical_memory()) is not None and need > have:
        where = f"{key}.{lengths.index(job.T)}" if job.T in lengths else key
        raise ConfigError(
            f"{where}: a delay T = {job.T} needs about {need / 2**30:.0f} GiB to train (batch "
            f"{job.training.batch_size} x {steps} steps x {job.network.hidden_size} units, kept for the backward "
            f"pass), more than this machine's {have / 2**30:.0f} GiB of memory")


def _overridden(profile: MemoryProfile, core: str, task: str, block: str) -> dict[str, tuple[str, Any]]:
    """The keys of ``block`` (``model`` or ``training``) that ``per_model.<core>`` sets for ``task``:
    key -> (where it is set, value); ``per_model.<core>.tasks.<task>`` over ``per_model.<core>``. A key
    the command line set in ``block`` (``--set model.nonlinearity=tanh``) is the command line's for
    every core: the file's ``per_model`` does not shadow it, only a ``per_model`` key the command line
    set itself."""
    own = profile.per_model.get(core)
    if own is None:
        return {}
    given = profile._command_line.get(block, {})
    cli_own = profile._command_line.get("per_model", {}).get(core, {})

    def kept(settings: BaseModel, where: str, explicit: Mapping[str, Any]) -> dict[str, tuple[str, Any]]:
        return {k: (where, v) for k, v in settings.model_dump(exclude_unset=True).items()
                if k not in given or k in explicit}

    out = kept(getattr(own, block), f"per_model.{core}.{block}", cli_own.get(block, {}))
    if (for_task := own.tasks.get(task)) is not None:
        out |= kept(getattr(for_task, block), f"per_model.{core}.tasks.{task}.{block}",
                    cli_own.get("tasks", {}).get(task, {}).get(block, {}))
    return out


def _network(profile: MemoryProfile, core: str, task: str) -> SequenceModelConfig:
    own = {k: v for k, (_, v) in _overridden(profile, core, task, "model").items()}
    plugin = planned_settings(CORES, core, profile.plugin_settings, shared=SHARED_CORE_SETTINGS)
    return SequenceModelConfig(core, **{**profile.model.model_dump(), **own}, core_settings=plugin)


def _training(profile: MemoryProfile, core: str, task: str) -> MemoryTrainConfig:
    own = {k: v for k, (_, v) in _overridden(profile, core, task, "training").items()}
    return MemoryTrainConfig(**{**profile.training.model_dump(), **own})


#: The settings of :class:`SequenceModelConfig` each core reads beside ``hidden_size`` and
#: ``embedding_dim`` (and, for :data:`RNN_FAMILY`, the nonlinearity and initialisations): a run logs
#: only these (an LSTM's run does not change with nu). A core not listed (a plugin) logs them all.
CORE_SETTINGS: dict[str, tuple[str, ...]] = {
    "lstm": ("gate_init",),
    "memlstm": ("attention_size", "memory_window", "gate_init"),
    "rellstm": ("attention_size", "nu", "rho", "gate_init"),
    "rnn": (),
    "exprnn": (),
    "memrnn": ("attention_size", "memory_window"),
    "relrnn": ("attention_size", "nu", "rho"),
    "sab": ("attention_size", "topk", "truncate", "memory_stride", "gate_init"),
}
_RNN_SETTINGS = ("nonlinearity", "recurrent_init", "input_init")


def _used(core: str) -> set[str]:
    if core not in CORE_SETTINGS:
        return {f.name for f in fields(SequenceModelConfig)} - {"core", "core_settings"}
    return {"hidden_size", "embedding_dim", *CORE_SETTINGS[core], *(_RNN_SETTINGS if core in RNN_FAMILY else ())}


def _check_read(profile: MemoryProfile, models: Sequence[str]) -> None:
    """Refuse a ``model`` setting that would change no run: one the command line gives that none of the
    cores selected reads (``--set model.nonlinearity=relu`` with only the LSTM), or one a ``per_model``
    block sets for a core that does not read it (:data:`CORE_SETTINGS`). The error names the key and
    the cores that read it."""

    def readers(key: str) -> str:
        cores = [c for c in CORES if key in _used(c)]
        return f"{', '.join(cores)} {'does' if len(cores) == 1 else 'do'}"

    for key in profile._command_line.get("model", {}):
        if not any(key in _used(core) for core in models):
            raise ConfigError(f"model.{key}: none of the cores selected ({', '.join(models)}) reads it, so it "
                              f"would change no run; {readers(key)}")
    for core, own in profile.per_model.items():
        blocks = [(f"per_model.{core}.model", own.model),
                  *((f"per_model.{core}.tasks.{task}.model", block.model) for task, block in own.tasks.items())]
        for where, block in blocks:
            for key in block.model_dump(exclude_unset=True):
                if key not in _used(core):
                    raise ConfigError(f"{where}.{key}: the {core!r} core does not read it; {readers(key)}")


def _network_params(network: SequenceModelConfig) -> dict[str, Any]:
    """The settings of ``network`` that its core uses (:data:`CORE_SETTINGS`)."""
    used = _used(network.core)
    return {k: ("none" if v is None else v) for k, v in asdict(network).items() if k in used}


def _memory_tags(network: SequenceModelConfig, seq_len: int) -> tuple[str, str]:
    """``nu`` and ``rho``: a relevancy-screened core's; a core attending over a window, the window
    and 0; ``-`` for a core without either."""
    used = _used(network.core)
    if "nu" in used:
        return str(network.nu), str(network.rho)
    if "memory_window" in used:
        return str(network.memory_window or seq_len), "0"
    return "-", "-"


def _check_network(profile: MemoryProfile, network: SequenceModelConfig, task: MemoryTask) -> None:
    """``network``'s settings, and those that must fit the task's sequences (SAB's ``topk``,
    ``memory_stride``, ``truncate``); an error about a key of ``per_model.<core>.model`` names that key."""
    try:
        network.check("model")
        network.check_sequence(task.seq_len, "model", vocab_size=task.vocab_size)
    except ConfigError as exc:
        raise _named(profile, network, task.name, exc, f"{task.name} at T = {task.T}") from None


def _named(profile: MemoryProfile, network: SequenceModelConfig, task: str, exc: ConfigError,
           context: str) -> ConfigError:
    """``exc`` (about a key ``model.<key>``) naming where that key was set: ``per_model.<core>.model``
    or the profile's ``model`` (the runner names the file, or the ``--set`` that gave it:
    :func:`~recurbench.suites.base.in_profile_file`)."""
    head, _, rest = str(exc).partition(":")
    key = head.removeprefix("model.")
    if key in (own := _overridden(profile, network.core, task, "model")):
        head = f"{own[key][0]}.{key}"
    return ConfigError(f"{head}:{rest} ({context}, model {network.core!r})")


def _configuration(profile: MemoryProfile, task_name: str, T: int, network: SequenceModelConfig,
                   study: str, sweeps: Sequence[str]) -> tuple[dict[str, str], dict[str, Any], MemoryJob]:
    """One configuration's tags, logged params (the seed aside) and job; checks the task layout and
    the network at this T."""
    try:
        task = make_task(task_name, T, copy_length=profile.task.copy_length, labels=profile.task.labels)
    except ConfigError as exc:  # the profile's task.<key> (named in its file, or as the --set that gave it)
        key, sep, rest = str(exc).partition(": ")
        if sep and key in ("copy_length", "labels"):
            raise ConfigError(f"task.{key}: {rest} ({task_name} at T = {T})") from None
        raise ConfigError(f"task {task_name!r} at T={T}: {exc}") from None
    _check_network(profile, network, task)
    training = _training(profile, network.core, task_name)
    nu, rho = _memory_tags(network, task.seq_len)
    tags = {"task": task_name, "T": str(T), "model": network.core, "nu": nu, "rho": rho, "study": study,
            "sweep": ",".join(sweeps) or "-"}
    params = {"task": task_name, "T": T, "model": network.core,
              "task_settings": profile.task.model_dump(), "network": _network_params(network),
              "training": _training_params(training), "torch_threads": profile.torch_threads,
              **({"plugin_settings": network.core_settings} if network.core_settings else {})}
    job = MemoryJob(task_name, T, task.copy_length, task.labels, network, training, profile.torch_threads)
    return tags, params, job


_Key = tuple[str, int, SequenceModelConfig]


def _sweeps(profile: MemoryProfile, tasks: Sequence[str], lengths: Sequence[int], models: Sequence[str],
            lengths_selected: bool) -> dict[_Key, list[str]]:
    """The kappa sweeps' configurations in plan order, each with the sweeps it belongs to (``nu=15``:
    the sweep holding nu at 15)."""
    out: dict[_Key, list[str]] = {}
    if "rellstm" not in models:
        return out
    for i, ks in enumerate(profile.kappa_sweeps):
        if ks.task not in tasks or (lengths_selected and ks.T not in lengths):
            continue
        value = getattr(ks, ks.fixed)
        base = replace(_network(profile, "rellstm", ks.task), **{ks.fixed: value})
        try:  # the settings every point shares first: an error in them is not the sweep's
            base.check("model")
        except ConfigError as exc:
            raise _named(profile, base, ks.task, exc, f"kappa_sweeps.{i}: {ks.task} at T = {ks.T}") from None
        for network in kappa_variants(base, ks.kappas, fixed=ks.fixed, where=f"kappa_sweeps.{i}"):
            out.setdefault((ks.task, ks.T, network), []).append(f"{ks.fixed}={value}")
    return out


def _configurations(profile: MemoryProfile, tasks: Sequence[str], lengths: Sequence[int], models: Sequence[str],
                    *, lengths_selected: bool = False) -> Iterator[tuple[dict[str, str], dict[str, Any], MemoryJob]]:
    """The grid (task x T x core), then the kappa sweeps' runs that the grid does not already hold
    (with ``lengths_selected``, only sweeps at one of ``lengths``). Tag ``sweep`` names the sweeps a
    run belongs to (a grid run can be one of a sweep's points)."""
    sweeps = _sweeps(profile, tasks, lengths, models, lengths_selected)
    grid: set[_Key] = set()
    for task_name in tasks:
        for T in lengths:
            for core in (c for c in models if profile.runs_at(c, T)):
                network = _network(profile, core, task_name)
                grid.add((task_name, T, network))
                yield _configuration(profile, task_name, T, network, "table5", sweeps.get((task_name, T, network), []))
    for (task_name, T, network), member_of in sweeps.items():
        if (task_name, T, network) not in grid:
            yield _configuration(profile, task_name, T, network, "kappa", member_of)


def _train(plan: RunPlan, job: MemoryJob, task: MemoryTask, run: RunHandle, progress: ProgressFn,
           device: torch.device, resume: Checkpoint | None) -> MemoryTrainResult:
    """Train ``job``, logging to ``run`` and saving checkpoints into its artifacts: from ``resume``
    where it fits this run (the run tagged so), else from the start (the checkpoint refused, with the
    reason: one line, also tagged on the run)."""
    writer = CheckpointWriter(run)
    total = job.training.updates

    def on_log(point: LogPoint) -> None:
        run.log_metrics({"loss": point.loss, "train_accuracy": point.accuracy}, step=point.update)

    def on_eval(update: int, accuracy: float) -> None:
        run.log_metrics({"eval_accuracy": accuracy, "eval_update": float(update)}, step=update)

    def on_checkpoint(state: TrainingState) -> None:
        writer.save(state.update, state.to_bytes())

    def on_resume(update: int) -> None:
        assert resume is not None
        resume.accept(run)
        progress(update, total, f"resumed from run {resume.run_id} at update {update:,}")

    def train(state: TrainingState | None) -> MemoryTrainResult:
        return train_memory_task(task, job.network, job.training, seed=plan.seed, device=device, on_log=on_log,
                                 on_eval=on_eval, progress=progress, on_checkpoint=on_checkpoint, resume=state,
                                 on_resume=on_resume)

    if resume is not None:
        try:  # a mismatch is raised before training logs anything
            return train(TrainingState.from_bytes(resume.data))
        except CheckpointMismatch as exc:
            resume.refuse(run, str(exc))
            progress(0, total, f"the checkpoint of run {resume.run_id} was not used ({exc}): starting from update 0")
    return train(None)


class MemorySuite(SuiteDefinition):
    name = "memory"
    profile_model = MemoryProfile
    selection_keys = ("tasks", "lengths", "models")
    default_device = "cpu"  # batch 10, width 128, one step at a time: a GPU mostly waits on launches
    resumable = True  # checkpoints every training.checkpoint_every updates; --skip-finished resumes
    cap_param = "training.updates"  # a raised cap goes on from the lower cap's run (train_memory_task)
    # gate_init came after Table 5's runs were stored; they started the LSTM family at pytorch.
    added_params = MappingProxyType({"network.gate_init": "pytorch"})
    headline_metrics = ("accuracy", "train_accuracy", "final_loss", "grad_first_init", "grad_first_final",
                        "grad_ratio_init", "grad_ratio_final", "updates_per_second", "n_params", "updates",
                        "solved", "solved_at")

    def with_command_line(self, profile: BaseModel, command_line: Mapping[str, Any]) -> BaseModel:
        """A ``model`` or ``training`` key set by ``--set`` holds for every core, over ``per_model``."""
        assert isinstance(profile, MemoryProfile)
        profile._command_line = dict(command_line)
        return profile

    def plan(self, profile: BaseModel, selection: Mapping[str, Any], *, data_dir: str | None) -> list[RunPlan]:
        assert isinstance(profile, MemoryProfile)
        tasks = selected_names(selection, "tasks", profile.tasks, MEMORY_TASKS, "memory task")
        models = selected_names(selection, "models", profile.models, CORES, "memory core")
        lengths = _lengths(selection, profile.lengths)
        seeds = selected_seeds(selection, profile.seeds)
        plans: list[RunPlan] = []
        for tags, params, job in _configurations(profile, tasks, lengths, models,
                                                 lengths_selected=bool(selection.get("lengths"))):
            _check_memory(job, lengths, "--lengths" if selection.get("lengths") else "lengths")
            memory = "" if tags["nu"] == "-" else f"-nu{tags['nu']}-rho{tags['rho']}"
            for seed in seeds:
                plans.append(RunPlan(f"{tags['task']}-T{tags['T']}-{tags['model']}{memory}-s{seed}", seed, tags,
                                     params, payload=job))
        _check_read(profile, models)  # after the values' own checks: an unknown value is named as such first
        if not plans and (narrowed := [T for T in lengths if not any(profile.runs_at(c, T) for c in models)]):
            only = "; ".join(f"at T = {T} only {', '.join(profile.models_by_length[T])}" for T in narrowed)
            which = f"--models {','.join(models)}" if selection.get("models") else f"models {','.join(models)}"
            raise ConfigError(f"{which}: no run at the lengths selected: the profile's models_by_length runs {only}")
        return plans

    def shipped_settings(self, profile: BaseModel) -> list[tuple[dict[str, str], dict[str, str | None]]]:
        """Every task x T x core of the profile, and its kappa sweeps."""

        assert isinstance(profile, MemoryProfile)
        out = []
        for core in CORES:
            try:
                configurations = list(_configurations(profile, list(MEMORY_TASKS), profile.lengths, [core]))
            except ConfigError:
                if core in profile.models:
                    raise
                continue  # a core the profile does not run, whose settings do not fit its lengths (SAB's topk)
            out += [({k: v for k, v in tags.items() if k not in ("study", "sweep")}, logged_settings(params))
                    for tags, params, _ in configurations]
        return out

    def setting_defaults(self) -> dict[str, str]:
        """The task's and training's defaults, as the runs log them."""

        defaults = {"task_settings": TaskSettings().model_dump(),
                    "training": {k: v for k, v in _training_params(MemoryTrainConfig()).items() if k != "updates"}}
        return logged_settings(defaults)

    def logs_param(self, key: str, tags: Mapping[str, str]) -> bool:
        """A ``network.`` param only where the run's core reads it (:data:`CORE_SETTINGS`): an RNN's
        run has no ``network.gate_init``."""
        section, _, name = key.partition(".")
        return section != "network" or "model" not in tags or name in _used(tags["model"])

    # ------------------------------------------------------------------------------------------ run

    def execute(
        self, plan: RunPlan, run: RunHandle, progress: ProgressFn, *, data_dir: str | None, device: torch.device,
        resume: Checkpoint | None = None,
    ) -> dict[str, float]:
        job: MemoryJob = plan.payload
        torch.set_num_threads(job.torch_threads)
        task = make_task(job.task, job.T, copy_length=job.copy_length, labels=job.labels)
        run.log_params({"checkpoint_every": job.training.checkpoint_every})
        result = _train(plan, job, task, run, progress, device, resume)
        grads = result.gradients
        metrics = {
            "accuracy": result.accuracy, "train_accuracy": result.train_accuracy, "final_loss": result.final_loss,
            "grad_first_init": grads.first("init"), "grad_first_final": grads.first("final"),
            "grad_ratio_init": grads.ratio("init", job.T), "grad_ratio_final": grads.ratio("final", job.T),
            "updates_per_second": result.updates_per_second, "n_params": float(result.n_params),
            "updates": float(result.updates), "solved": float(result.solved_at is not None),
            "solved_at": math.nan if result.solved_at is None else float(result.solved_at),
        }
        # train_accuracy was logged per window: its latest value is the last window's already.
        run.log_metrics({k: v for k, v in metrics.items() if k != "train_accuracy"})
        run.log_metrics({"train_seconds": result.seconds})  # logged, not a headline: older runs lack it
        run.log_dict({**grads.as_dict(), "T": job.T, "scored_from": task.scored_from, "seq_len": task.seq_len},
                     "gradient_norms.json")
        run.log_figure(gradient_figure([(f"{job.task}, T = {job.T}, {job.network.core}",
                                         {"at initialisation": grads.init, "after training": grads.final},
                                         task.scored_from)],
                                       "||dL2/dh_t|| on one batch\n(L2: the loss of the scored steps)"),
                       "gradient_norms.png")
        run.log_dict([asdict(p) for p in result.curve], "loss_curve.json")
        progress(job.training.updates, job.training.updates,
                 f"done: accuracy {result.accuracy:.3f} (chance {1 / job.labels:.3f}), {budget_text([metrics])}")
        return metrics

    # -------------------------------------------------------------------------------------- summary

    def summary_rows(self, outcomes: Sequence[RunOutcome]) -> tuple[list[str], list[list[str]]]:
        groups: dict[tuple[str, ...], list[RunOutcome]] = {}
        for o in outcomes:
            t = o.plan.tags
            groups.setdefault((t["task"], t["T"], t["model"], t["nu"], t["rho"]), []).append(o)
        header = ["task", "T", "core", "nu", "rho", "seeds", "accuracy", "budget", "train accuracy",
                  "grad first (init)", "grad first (trained)", "grad t=1 / t=T (init)", "grad t=1 / t=T (trained)",
                  "paper (Table 5)", "s/run"]
        reference = {(int(r.T), r.model): r.paper_text for r in kerg_table5_reference().itertuples()}
        rows = []
        for (task_name, T, core, nu, rho), group in groups.items():
            done = [o for o in group if o.status == "FINISHED"]

            def cell(key: str, fmt: str = ".3f", done: list[RunOutcome] = done) -> str:
                values = [o.metrics[key] for o in done if key in o.metrics]
                if not values:
                    return "-"
                mean = statistics.fmean(values)
                return f"{mean:{fmt}}" + (f" ± {statistics.stdev(values):{fmt}}" if len(values) > 1 else "")

            paper = reference.get((int(T), core), "-") if task_name == "copy" else "-"
            rows.append([task_name, T, core, nu, rho, f"{len(done)}/{len(group)}", cell("accuracy"),
                         budget_text([o.metrics for o in done]), cell("train_accuracy"), cell("grad_first_init", ".2e"),
                         cell("grad_first_final", ".2e"), cell("grad_ratio_init", ".2e"),
                         cell("grad_ratio_final", ".2e"), paper,
                         seconds_per_run(done)])
        if any(row[header.index("paper (Table 5)")] != "-" for row in rows) and (caveat := outcomes_caveat(self, outcomes)):
            rows.append(footnote_row(f"paper (Table 5): {caveat}", header))
        return header, rows


def budget_text(runs: Sequence[Mapping[str, float]]) -> str:
    """The updates behind a cell of runs (their metrics): ``solved at 12,500`` (one run), ``solved
    at 9,000-12,500`` (every run), ``200,000 updates`` (none solved), ``solved 2/3 at 9,000-12,500;
    200,000 updates`` (some); ``-`` where no run logged its updates (a run older than the setting)."""
    solved = sorted(int(m["solved_at"]) for m in runs if m.get("solved") == 1.0 and not math.isnan(m["solved_at"]))
    capped = sorted(int(m["updates"]) for m in runs if m.get("solved") != 1.0 and not math.isnan(m.get("updates", math.nan)))

    def span(values: list[int]) -> str:
        return f"{values[0]:,}" if values[0] == values[-1] else f"{values[0]:,}-{values[-1]:,}"

    parts = []
    if solved:
        parts.append(f"solved at {span(solved)}" if not capped else f"solved {len(solved)}/{len(runs)} at {span(solved)}")
    if capped:
        parts.append(f"{span(capped)} updates")
    return "; ".join(parts) or "-"
