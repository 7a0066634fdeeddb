"""Training on the memory tasks, and the gradient-propagation measurements of Kerg et al. App. C.

Follows ``shared/reference/kerg_copy_denoise.md`` (sections 1, 2 and 5):

* every update draws a fresh batch; the loss is the cross-entropy of every step (blank steps
  included), batch mean, summed over the ``L`` steps and divided by ``L`` (:func:`sequence_loss`);
* gradients are clipped to a total norm (1.0), then Adam or RMSprop (alpha 0.99) steps; a core's
  orthogonal parameters (expRNN's, ``MemoryCore.orthogonal_parameters``) may have their own learning
  rate, as in Lezcano-Casado & Martinez-Rubio's code (``kerg_copy_denoise.md`` section 7);
* accuracy is the argmax at the ``c`` scored steps (``t >= T + c``): the training-batch value,
  averaged over the ``log_every`` updates of a log window (what the reference code logs), and a
  held-out value at the end, on ``eval_batches`` fresh batches the training never saw;
* stopping when solved (``eval_every``): a held-out evaluation every ``eval_every`` updates, and the
  run stops once two consecutive ones reach ``solve_threshold`` (:class:`SolveCheck`); ``updates`` is
  then a cap. The paper's 200,000 updates (Table 5) become a cap, not a cost;
* gradient propagation: for one fixed batch, ``||dL2/dh_t||`` (Frobenius over batch and hidden units)
  for every ``t = 0..L-1``, where ``L2`` is the cross-entropy of the scored steps only, summed and
  divided by ``L`` (:func:`scored_loss`, the reference code's measured loss), at initialisation and
  after the last update (:func:`gradient_norms`). Memory attention gives the early steps direct paths
  to the loss; an LSTM's gradient at the data steps decays through ``T`` recurrent steps.

The rebuttal's trade-off (kappa = nu + rho, App. C Fig. 3): :func:`kappa_variants` builds the RelLSTM
settings of a sweep with nu (or rho) fixed, :func:`sweep_kappa` trains each and reports the final
accuracy and the gradient norm at the first steps against kappa.

Seeds: ``seed`` fixes the initialisation (``torch.manual_seed``) and four independent data streams
(numpy ``SeedSequence`` children): training batches, the gradient batch, the final held-out batches
and the evaluations during training. The evaluations draw from a stream of their own, so a run that
never solves ends exactly as it would without them.

Checkpoints (``checkpoint_every``): every so many updates the run hands ``on_checkpoint`` a
:class:`TrainingState`, everything the loop carries from one update to the next (parameters,
optimiser state, torch's generator and the four data streams, the solve check, the open log window,
the curve so far, the gradient norms at initialisation, the time spent). ``resume=`` continues from
one: the updates after it are those of the run that was never interrupted, bit for bit on a CPU
(``tests/memory/test_training_checkpoints.py``), and the callbacks see the whole run's history (the part
before the checkpoint replayed from it). A state that does not fit the run (other settings, another
network) raises :class:`CheckpointMismatch` before any callback is called.
"""

from __future__ import annotations

import io
import math
import pickle
import time
from collections.abc import Callable, Sequence
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from recurbench.errors import ConfigError, RecurbenchError
from recurbench.memory.models import MemorySequenceModel, SequenceModelConfig, build_model
from recurbench.memory.tasks import MemoryTask
from recurbench.records import flatten
from recurbench.runtime import raise_if_terminated

#: optimiser name -> ``(params or param groups, config) -> optimiser`` (a group's own ``lr`` wins).
OPTIMIZERS: dict[str, Callable[..., torch.optim.Optimizer]] = {
    "adam": lambda params, cfg: torch.optim.Adam(params, lr=cfg.learning_rate),
    "rmsprop": lambda params, cfg: torch.optim.RMSprop(params, lr=cfg.learning_rate, alpha=cfg.rmsprop_alpha),
}


@dataclass(frozen=True)
class MemoryTrainConfig:
    """How a memory-task run trains (defaults: the reference code and the paper's Table 6 LSTM row).

    Parameters
    ----------
    updates : int
        Optimiser steps, each on a fresh batch (200,000 in the reference code).
    batch_size : int
        Sequences per update (10).
    optimizer : str
        ``adam`` or ``rmsprop`` (alpha ``rmsprop_alpha``, weight decay 0).
    learning_rate : float
        2e-4 (Table 6: LSTM and RelRNN with Adam).
    orth_learning_rate : float or None
        The learning rate of the core's orthogonal parameters (``MemoryCore.orthogonal_parameters``:
        expRNN's skew-symmetric generator), a second parameter group; None: ``learning_rate``.
        expRNN's code uses a tenth of the rate (2e-5 beside 2e-4).
    rmsprop_alpha : float
        RMSprop's smoothing constant (0.99).
    clip_norm : float
        Total gradient norm clip over all parameters (1.0).
    log_every : int
        Updates per logged point: the mean training loss and accuracy over the window (100).
    eval_batches : int
        Held-out batches scored after training, and at each evaluation during training (the
        reference code has none).
    eval_every : int or None
        Updates between held-out evaluations during training; the run stops once two consecutive
        ones reach ``solve_threshold`` (``updates`` is then a cap). None: no evaluation during
        training, every run goes to ``updates``.
    solve_threshold : float
        The held-out accuracy at which an evaluation counts as solved (0.99).
    compile_core : bool
        Compile an attentive core's step with ``torch.compile`` (faster for long runs; see
        :mod:`recurbench.memory.models`).
    checkpoint_every : int
        Updates between checkpoints handed to ``on_checkpoint`` (:class:`TrainingState`); 0: none.
        A run resumed from one ends exactly as it would have, so this changes only how much a kill
        costs, never a result. 500: the paper profile's ``eval_every`` (a multiple of its
        ``log_every``), so a checkpoint follows each evaluation with the log window closed. A
        checkpoint at the paper's width is about 1 MB and 20-25 ms to write into the run's artifacts:
        0.7 % of the fastest configuration's 500 updates (the LSTM at T = 100, about 150 updates a
        CPU-second), while a kill loses at most 2.5 min of RelLSTM at T = 500 (about 3.7 updates a
        CPU-second; 2000 would risk 9 min, and over 20 min of SAB or MemLSTM). Where one update takes
        seconds (T = 2000), a smaller value pays.
    """

    updates: int = 200_000
    batch_size: int = 10
    optimizer: str = "adam"
    learning_rate: float = 2e-4
    rmsprop_alpha: float = 0.99
    clip_norm: float = 1.0
    log_every: int = 100
    eval_batches: int = 10
    compile_core: bool = False
    orth_learning_rate: float | None = None
    eval_every: int | None = None
    solve_threshold: float = 0.99
    checkpoint_every: int = 500

    def check(self, where: str = "training") -> None:
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(f"{where}.optimizer: unknown optimizer {self.optimizer!r}; known: {', '.join(OPTIMIZERS)}")
        for key in ("updates", "batch_size", "log_every", "eval_batches"):
            if getattr(self, key) < 1:
                raise ConfigError(f"{where}.{key}: must be at least 1, got {getattr(self, key)}")
        if self.checkpoint_every < 0:
            raise ConfigError(f"{where}.checkpoint_every: must be at least 0 (0: no checkpoints), got {self.checkpoint_every}")
        if self.eval_every is not None and self.eval_every < 1:
            raise ConfigError(f"{where}.eval_every: must be at least 1 (or None: no evaluation), got {self.eval_every}")
        for key in ("learning_rate", "clip_norm", "orth_learning_rate"):
            value = getattr(self, key)
            if value is not None and not (value > 0 and math.isfinite(value)):
                raise ConfigError(f"{where}.{key}: must be a positive number, got {value}")
        if not 0 < self.solve_threshold <= 1:
            raise ConfigError(f"{where}.solve_threshold: an accuracy in (0, 1], got {self.solve_threshold}")


# -------------------------------------------------------------------------------- losses, scores


def sequence_loss(logits: Tensor, targets: Tensor) -> Tensor:
    """The training loss: per-step batch-mean cross-entropy, summed over the ``L`` steps, over ``L``
    (= the mean over every step and sequence). ``logits`` [B, L, C], ``targets`` [B, L]."""
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def scored_loss(logits: Tensor, targets: Tensor, scored_from: int) -> Tensor:
    """``L2``: the batch-mean cross-entropy of the scored steps ``t >= scored_from``, summed over
    them and divided by ``L`` (the loss whose gradients the reference code records)."""
    L = logits.shape[1]
    per_step = F.cross_entropy(logits[:, scored_from:].transpose(1, 2), targets[:, scored_from:], reduction="none")
    return per_step.mean(dim=0).sum() / L


def scored_accuracy(logits: Tensor, targets: Tensor, scored_from: int) -> float:
    """Fraction of correct argmax predictions at the scored steps (chance: 1 / labels)."""
    hits = logits[:, scored_from:].argmax(-1) == targets[:, scored_from:]
    return float(hits.float().mean())


def gradient_norms(loss: Tensor, hidden: Sequence[Tensor]) -> np.ndarray:
    """``||d loss / d h_t||`` (Frobenius over all of ``h_t``'s entries) for each tensor of ``hidden``.

    ``hidden`` must be the tensors the computation consumed (so the gradient includes every path
    from ``h_t`` to the loss: the readout, the recurrence and the memory); a state with no path to
    the loss has norm 0. Parameter gradients are left untouched. The norm is taken in float64: in
    float32 the squares of entries below about 1e-23 underflow, and a vanishing gradient's curve fell
    to 0 at about 1e-22 where its entries were still there."""
    grads = torch.autograd.grad(loss, list(hidden), allow_unused=True)
    return np.array([0.0 if g is None else float(torch.linalg.vector_norm(g, dtype=torch.float64)) for g in grads])


def record_gradients(model: MemorySequenceModel, task: MemoryTask, inputs: Tensor, targets: Tensor) -> np.ndarray:
    """``||dL2/dh_t||`` for t = 0..L-1 on one batch (the model's current parameters)."""
    logits, hidden = model.hidden_states(inputs)
    return gradient_norms(scored_loss(logits, targets, task.scored_from), hidden)


# ------------------------------------------------------------------------------------- training


@dataclass(frozen=True)
class LogPoint:
    update: int
    """Updates done at the end of the window."""
    loss: float
    """Mean training loss (:func:`sequence_loss`) over the window."""
    accuracy: float
    """Mean training-batch accuracy at the scored steps over the window."""
    seconds: float
    """Wall time since training started."""


@dataclass
class GradientRecord:
    """``||dL2/dh_t||`` for t = 0..L-1 on one fixed batch, at initialisation and after training."""

    init: list[float]
    final: list[float]
    first_steps: int
    """The steps that carry the data (c): where the gradient has the furthest to go."""

    def first(self, which: str) -> float:
        """Mean norm over the first ``first_steps`` steps of ``init`` or ``final``."""
        values = getattr(self, which)[: self.first_steps]
        return float(np.mean(values)) if values else math.nan

    def ratio(self, which: str, T: int) -> float:
        """The norm at the first step over the norm at step T (1-based ``t = 1`` and ``t = T``: a data
        step and a blank of the delay, T - 1 steps apart): how much of the gradient that reaches step T
        is left T - 1 steps further back. 0 where the first step's norm underflowed; NaN where step
        T's did."""
        values = getattr(self, which)
        if not 1 <= T <= len(values):
            raise ValueError(f"ratio: T must be in [1, {len(values)}] (the recorded steps), got {T}")
        return values[0] / values[T - 1] if values[T - 1] > 0 else math.nan

    def as_dict(self) -> dict[str, object]:
        return {"t": list(range(len(self.init))), "init": self.init, "final": self.final,
                "first_steps": self.first_steps, "loss": "scored steps (L2)",
                "norm": "Frobenius over batch x hidden of dL2/dh_t"}


@dataclass
class MemoryTrainResult:
    accuracy: float
    """Held-out accuracy at the scored steps after training."""
    train_accuracy: float
    """Training-batch accuracy, mean over the last log window."""
    final_loss: float
    """Training loss, mean over the last log window."""
    gradients: GradientRecord
    curve: list[LogPoint] = field(default_factory=list)
    seconds: float = 0.0
    """Wall time of the updates (gradient recording and evaluations aside)."""
    n_params: int = 0
    updates: int = 0
    """Updates run: the cap, or the update at which the run was solved."""
    solved_at: int | None = None
    """The update of the second of two consecutive evaluations at the threshold; None: not solved."""
    evaluations: list[tuple[int, float]] = field(default_factory=list)
    """``(update, held-out accuracy)`` of each evaluation during training."""

    @property
    def updates_per_second(self) -> float:
        return self.curve[-1].update / self.seconds if self.curve and self.seconds > 0 else math.nan


@dataclass
class SolveCheck:
    """Whether a run is solved: two consecutive held-out evaluations at ``threshold`` or above."""

    threshold: float
    history: list[tuple[int, float]] = field(default_factory=list)
    solved_at: int | None = None

    def record(self, update: int, accuracy: float) -> bool:
        """Add the evaluation at ``update``; True once this one and the one before reach the threshold."""
        before = self.history[-1][1] if self.history else -math.inf
        self.history.append((update, accuracy))
        if self.solved_at is None and min(before, accuracy) >= self.threshold:
            self.solved_at = update
        return self.solved_at is not None


@dataclass
class _LogWindow:
    """The training loss and accuracy of the updates since the last logged point."""

    losses: list[float] = field(default_factory=list)
    accuracies: list[float] = field(default_factory=list)

    def add(self, loss: float, accuracy: float) -> None:
        self.losses.append(loss)
        self.accuracies.append(accuracy)

    def close(self, update: int, seconds: float) -> LogPoint:
        point = LogPoint(update, float(np.mean(self.losses)), float(np.mean(self.accuracies)), seconds)
        self.losses, self.accuracies = [], []
        return point


def _streams(seed: int) -> tuple[np.random.Generator, ...]:
    """Independent generators for the training batches, the gradient batch, the final held-out
    batches and the evaluations during training (children 0-2 are those of the three streams before
    the fourth was added: the same data as then)."""
    return tuple(np.random.default_rng(child) for child in np.random.SeedSequence(seed).spawn(4))


def _tensors(task: MemoryTask, batch: int, rng: np.random.Generator, device: torch.device) -> tuple[Tensor, Tensor]:
    inputs, targets = task.sample(batch, rng)
    return torch.as_tensor(inputs, device=device), torch.as_tensor(targets, device=device)


def evaluate(model: MemorySequenceModel, task: MemoryTask, batches: int, batch_size: int,
             rng: np.random.Generator, device: torch.device) -> float:
    """Accuracy at the scored steps over ``batches`` fresh batches."""
    hits = []
    with torch.no_grad():
        for _ in range(batches):
            inputs, targets = _tensors(task, batch_size, rng, device)
            hits.append(scored_accuracy(model(inputs), targets, task.scored_from))
    return float(np.mean(hits))


def make_optimizer(model: MemorySequenceModel, config: MemoryTrainConfig) -> torch.optim.Optimizer:
    """``config.optimizer`` over the model's trainable parameters: one group, or two when the core has
    orthogonal parameters (the second at ``orth_learning_rate``, where given)."""
    orthogonal = [p for p in model.core.orthogonal_parameters() if p.requires_grad]
    if not orthogonal:
        return OPTIMIZERS[config.optimizer]([p for p in model.parameters() if p.requires_grad], config)
    special = {id(p) for p in orthogonal}
    others = [p for p in model.parameters() if p.requires_grad and id(p) not in special]
    orth_lr = config.learning_rate if config.orth_learning_rate is None else config.orth_learning_rate
    return OPTIMIZERS[config.optimizer]([{"params": others}, {"params": orthogonal, "lr": orth_lr}], config)


class CheckpointMismatch(RecurbenchError):
    """A checkpoint that cannot continue this run: unreadable, of another format, or written by a run
    at other settings (the message says which, ``there`` against ``here``)."""


def resume_settings(task: MemoryTask, model_config: SequenceModelConfig, config: MemoryTrainConfig,
                    seed: int) -> dict[str, Any]:
    """What a checkpoint must have been trained with to continue this run: the task, the network, the
    seed and every training setting but the cap (``updates``) and ``checkpoint_every``, which change
    where a run stops or how often it saves, not the updates it makes."""
    training = {k: v for k, v in asdict(config).items() if k not in ("updates", "checkpoint_every")}
    return {"task": {"name": task.name, "T": task.T, "copy_length": task.copy_length, "labels": task.labels},
            "network": asdict(model_config), "training": training, "seed": seed}


def _setting_defaults() -> dict[str, Any]:
    """The network and training settings of :func:`resume_settings` at their dataclass defaults, as
    dotted keys (those without a default, the core's name, left out)."""
    def own(cls: type) -> dict[str, Any]:
        return {f.name: f.default for f in fields(cls) if f.default is not MISSING}

    return flatten({"network": own(SequenceModelConfig), "training": own(MemoryTrainConfig)})


@dataclass
class TrainingState:
    """Everything :func:`train_memory_task` carries from one update to the next, after ``update``
    updates: what a checkpoint holds. ``to_bytes`` / ``from_bytes`` write and read it
    (``torch.save``; read back with ``weights_only``, so a checkpoint cannot run code)."""

    settings: dict[str, Any]
    """:func:`resume_settings` of the run that wrote it."""
    update: int
    model: dict[str, Tensor]
    optimizer: dict[str, Any]
    torch_rng: Tensor
    cuda_rng: Tensor | None
    """The generator of the CUDA device it trained on, if any."""
    streams: list[dict[str, Any]]
    """The ``bit_generator.state`` of each of :func:`_streams`'s four generators."""
    evaluations: list[tuple[int, float]]
    solved_at: int | None
    window: tuple[list[float], list[float]]
    """The losses and accuracies of the log window still open."""
    curve: list[LogPoint]
    init_gradients: list[float]
    seconds: float
    """Time in the updates so far (evaluations aside): ``MemoryTrainResult.seconds`` goes on from it."""
    elapsed: float
    """Wall time since training started (what ``LogPoint.seconds`` counts), evaluations included."""

    FORMAT: ClassVar[int] = 1

    def to_bytes(self) -> bytes:
        record = {f.name: getattr(self, f.name) for f in fields(self)}
        record.update(format=self.FORMAT, curve=[[p.update, p.loss, p.accuracy, p.seconds] for p in self.curve],
                      evaluations=[list(e) for e in self.evaluations], window=[list(w) for w in self.window])
        buffer = io.BytesIO()
        torch.save(record, buffer)
        return buffer.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> TrainingState:
        """The state written by :meth:`to_bytes`; a :class:`CheckpointMismatch` for anything else."""
        try:
            record = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, TypeError) as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise CheckpointMismatch(f"not a readable checkpoint ({reason[:200]})") from None
        if not isinstance(record, dict) or record.get("format") != cls.FORMAT:
            found = record.get("format") if isinstance(record, dict) else type(record).__name__
            raise CheckpointMismatch(f"checkpoint format {found!r}, this version reads format {cls.FORMAT}")
        record.pop("format")
        try:
            record["curve"] = [LogPoint(int(u), loss, acc, sec) for u, loss, acc, sec in record["curve"]]
            record["evaluations"] = [(int(u), float(a)) for u, a in record["evaluations"]]
            record["window"] = (list(record["window"][0]), list(record["window"][1]))
            return cls(**record)
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointMismatch(f"an incomplete checkpoint ({type(exc).__name__}: {exc})") from None

    def check_fits(self, settings: dict[str, Any]) -> None:
        """Raise a :class:`CheckpointMismatch` naming the settings where this state's run differs from
        ``settings`` (:func:`resume_settings` of the run to continue). A network or training setting
        that the checkpoint's version did not have is read at its default, the behaviour that version
        had (a setting is added so): a checkpoint from before ``gate_init`` started at ``pytorch``."""
        there, here = flatten(self.settings), flatten(settings)
        defaults = _setting_defaults()
        there |= {k: defaults[k] for k in here.keys() - there.keys() if k in defaults}
        differ = [f"{k} {there.get(k, 'not set')} there, {here.get(k, 'not set')} here"
                  for k in sorted(there.keys() | here.keys()) if there.get(k) != here.get(k)]
        if differ:
            raise CheckpointMismatch("written at other settings: " + "; ".join(differ[:3])
                                     + (f"; and {len(differ) - 3} more" if len(differ) > 3 else ""))


def _restore(state: TrainingState, model: MemorySequenceModel, optimizer: torch.optim.Optimizer,
             streams: Sequence[np.random.Generator], device: torch.device) -> None:
    """Load ``state`` into the freshly built model, optimiser and generators (a
    :class:`CheckpointMismatch` where its tensors do not fit them)."""
    try:
        model.load_state_dict(state.model)
        optimizer.load_state_dict(state.optimizer)
    except (RuntimeError, ValueError, KeyError) as exc:
        raise CheckpointMismatch(f"its tensors do not fit this network ({str(exc).strip().splitlines()[0][:200]})") from None
    if len(state.streams) != len(streams):
        raise CheckpointMismatch(f"{len(state.streams)} data streams, this version draws {len(streams)}")
    for rng, saved in zip(streams, state.streams, strict=True):
        rng.bit_generator.state = saved
    torch.set_rng_state(state.torch_rng)
    if device.type == "cuda" and state.cuda_rng is not None:
        torch.cuda.set_rng_state(state.cuda_rng, device)


def _replay(state: TrainingState, on_log: Callable[[LogPoint], None] | None,
            on_eval: Callable[[int, float], None] | None) -> None:
    """Hand the callbacks the history before ``state`` in the order the loop made it (at one update:
    the evaluation, then the log point), so that what they record is the uninterrupted run's."""
    events: list[tuple[int, int, Any]] = [(u, 0, (u, a)) for u, a in state.evaluations]
    events += [(p.update, 1, p) for p in state.curve]
    for _, kind, event in sorted(events, key=lambda e: (e[0], e[1])):
        if kind == 0 and on_eval is not None:
            on_eval(*event)
        elif kind == 1 and on_log is not None:
            on_log(event)


def train_memory_task(
    task: MemoryTask,
    model_config: SequenceModelConfig,
    config: MemoryTrainConfig,
    *,
    seed: int = 0,
    device: torch.device | str = "cpu",
    on_log: Callable[[LogPoint], None] | None = None,
    on_eval: Callable[[int, float], None] | None = None,
    progress: Callable[[float, float, str], None] = lambda *_: None,
    on_checkpoint: Callable[[TrainingState], None] | None = None,
    resume: TrainingState | None = None,
    on_resume: Callable[[int], None] | None = None,
) -> MemoryTrainResult:
    """Train a :class:`MemorySequenceModel` with ``model_config`` on ``task`` (settings checked
    first: a :class:`ConfigError` before anything trains) for ``config.updates`` updates, or until
    solved (``config.eval_every``). ``on_log`` gets each logged point, ``on_eval`` each evaluation
    during training (update, held-out accuracy), ``on_checkpoint`` the state every
    ``config.checkpoint_every`` updates while updates remain (its tensors are the live ones: write
    them out before returning).

    ``resume``: continue from that state (a :class:`CheckpointMismatch`, before any callback, where it
    does not fit); ``on_resume`` then gets its update, and ``on_log`` / ``on_eval`` the history before
    it, replayed."""
    task.check("task")
    model_config.check()
    config.check()
    settings = resume_settings(task, model_config, config, seed)
    if resume is not None:
        resume.check_fits(settings)
        if resume.update >= config.updates:
            # Its state is this run's only before the cap: at the cap this run logs and stops.
            raise CheckpointMismatch(f"written at update {resume.update:,}, not before this run's cap "
                                     f"({config.updates:,} updates)")
    device = torch.device(device)
    if config.compile_core:
        # dynamo keys its cache on the code of MemoryCore.cell, shared by every core: after eight runs
        # in one process (the serial engine) it would stop compiling and fall back to eager.
        torch._dynamo.reset()
    torch.manual_seed(seed)
    streams = _streams(seed)
    train_rng, grad_rng, eval_rng, check_rng = streams
    model = build_model(task, model_config, compile_core=config.compile_core).to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = make_optimizer(model, config)
    grad_batch = _tensors(task, config.batch_size, grad_rng, device)

    window = _LogWindow()
    check = SolveCheck(config.solve_threshold)
    if resume is None:
        progress(0, config.updates, "gradient norms at initialisation")
        init = record_gradients(model, task, *grad_batch).tolist()
        curve: list[LogPoint] = []
        update, done_seconds, elapsed = 0, 0.0, 0.0
    else:
        _restore(resume, model, optimizer, streams, device)
        init, curve, update = list(resume.init_gradients), list(resume.curve), resume.update
        window.losses, window.accuracies = list(resume.window[0]), list(resume.window[1])
        check.history, check.solved_at = list(resume.evaluations), resume.solved_at
        done_seconds, elapsed = resume.seconds, resume.elapsed
        if on_resume is not None:
            on_resume(update)
        _replay(resume, on_log, on_eval)

    start = time.perf_counter() - elapsed
    evaluating = elapsed - done_seconds  # seconds spent in the evaluations, left out of the updates' time
    while update < config.updates and check.solved_at is None:
        update += 1
        raise_if_terminated()  # a stop swallowed on its way (see recurbench.runtime)
        inputs, targets = _tensors(task, config.batch_size, train_rng, device)
        logits = model(inputs)
        loss = sequence_loss(logits, targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, config.clip_norm)
        optimizer.step()
        window.add(float(loss.detach()), scored_accuracy(logits.detach(), targets, task.scored_from))
        if config.eval_every is not None and update % config.eval_every == 0:
            began = time.perf_counter()
            accuracy = evaluate(model, task, config.eval_batches, config.batch_size, check_rng, device)
            evaluating += time.perf_counter() - began
            check.record(update, accuracy)
            if on_eval is not None:
                on_eval(update, accuracy)
        if update % config.log_every == 0 or update == config.updates or check.solved_at is not None:
            point = window.close(update, time.perf_counter() - start)
            curve.append(point)
            if on_log is not None:
                on_log(point)
            progress(update, config.updates, f"loss {point.loss:.4f}, accuracy {point.accuracy:.3f}")
        if (on_checkpoint is not None and config.checkpoint_every and update % config.checkpoint_every == 0
                and update < config.updates and check.solved_at is None):
            now = time.perf_counter() - start
            on_checkpoint(TrainingState(
                settings, update, model.state_dict(), optimizer.state_dict(), torch.get_rng_state(),
                torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
                [rng.bit_generator.state for rng in streams], list(check.history), check.solved_at,
                (list(window.losses), list(window.accuracies)), list(curve), list(init), now - evaluating, now))
    seconds = time.perf_counter() - start - evaluating

    done = "solved" if check.solved_at is not None else "the update cap"
    progress(config.updates, config.updates, f"{done}: gradient norms after training, held-out accuracy")
    final = record_gradients(model, task, *grad_batch)
    accuracy = evaluate(model, task, config.eval_batches, config.batch_size, eval_rng, device)
    return MemoryTrainResult(
        accuracy=accuracy, train_accuracy=curve[-1].accuracy, final_loss=curve[-1].loss,
        gradients=GradientRecord(init, final.tolist(), task.copy_length), curve=curve, seconds=seconds,
        n_params=sum(p.numel() for p in params), updates=update, solved_at=check.solved_at,
        evaluations=check.history,
    )


# -------------------------------------------------------------------------------- kappa = nu + rho


def kappa_variants(config: SequenceModelConfig, kappas: Sequence[int], *, fixed: str = "nu",
                   where: str = "kappa") -> list[SequenceModelConfig]:
    """RelLSTM settings with ``nu + rho = kappa`` for each kappa, holding ``fixed`` (``nu`` or
    ``rho``) at ``config``'s value: App. C varies rho with nu fixed (Fig. 3 left) and nu with rho
    fixed (right)."""
    if fixed not in ("nu", "rho"):
        raise ConfigError(f"{where}.fixed: must be 'nu' or 'rho', got {fixed!r}")
    out = []
    for i, kappa in enumerate(kappas):
        if fixed == "nu":
            variant = replace(config, core="rellstm", rho=kappa - config.nu)
        else:
            variant = replace(config, core="rellstm", nu=kappa - config.rho)
        try:
            variant.check()
        except ConfigError as exc:
            raise ConfigError(f"{where}.kappas.{i}: kappa {kappa} with {fixed} = {getattr(config, fixed)} "
                              f"leaves {exc}") from None
        out.append(variant)
    return out


@dataclass(frozen=True)
class KappaPoint:
    kappa: int
    nu: int
    rho: int
    accuracy: float
    grad_first_init: float
    grad_first_final: float


def sweep_kappa(task: MemoryTask, config: SequenceModelConfig, training: MemoryTrainConfig, kappas: Sequence[int],
                *, fixed: str = "nu", seed: int = 0, device: torch.device | str = "cpu") -> list[KappaPoint]:
    """Train a RelLSTM at each kappa (see :func:`kappa_variants`): final held-out accuracy and mean
    ``||dL2/dh_t||`` over the data steps, at initialisation and after training, against kappa."""
    points = []
    for variant in kappa_variants(config, kappas, fixed=fixed):
        result = train_memory_task(task, variant, training, seed=seed, device=device)
        points.append(KappaPoint(variant.kappa, variant.nu, variant.rho, result.accuracy,
                                 result.gradients.first("init"), result.gradients.first("final")))
    return points
