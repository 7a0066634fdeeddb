"""Informer's training scheme, shared by the LTSF suite and the sktime estimators.

Adam (lr 1e-4) at the full rate for two epochs, then halved after every epoch: Informer's
``lradj='type1'`` as Informer2020's training loop applies it (``adjust_learning_rate(optimizer, epoch + 1)``
after each 0-based epoch sets ``lr * 0.5 ** epoch``, which is the full rate again after the first one);
at most 6 epochs, early stopping on the validation loss with patience 3 and the best weights restored, batch
32, MSE loss on scaled data. Evaluation is over every window of a split (no dropped last batch):
MSE and MAE are means over all windows, steps and series.

Batches are ``(x, y, x_mark, y_mark)`` as :class:`recurbench.data.protocol.WindowDataset` yields them,
with ``y`` = label_len + pred_len steps; the loss is on its last ``pred_len`` steps. Training and
evaluation run where the model is (move it with ``model.to(device)``): each batch is moved to its device.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, Subset

from recurbench.devices import synchronize
from recurbench.errors import ModelOutputError
from recurbench.forecasters.layers.rsa import RSAMixer
from recurbench.runtime import raise_if_terminated


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 6
    """At most this many epochs."""
    batch_size: int = 32
    learning_rate: float = 1e-4
    lr_decay: float = 0.5
    """Multiplies the learning rate after every epoch from epoch ``lr_hold_epochs`` on."""
    lr_hold_epochs: int = 2
    """Epochs at the full learning rate before the decay starts: epoch e trains at
    ``learning_rate * lr_decay ** max(0, e - lr_hold_epochs)``. 2 is Informer2020's schedule (its first
    halving comes after epoch 2); 1 halves after every epoch, recurbench's schedule before this setting
    existed."""
    patience: int = 3
    """Stop after this many epochs without a better validation loss (the best weights are restored)."""
    max_train_batches: int | None = None
    """Cap on training batches per epoch (a random subset of windows each epoch); None = all."""
    max_val_batches: int | None = None
    """Cap on validation batches (the first ones, deterministic); None = all. Test is never capped."""
    eval_batch_size: int = 256
    """Batch size for validation and test (only speed; results do not depend on it)."""
    test_stride: int = 1
    """Score every n-th test window (1 = every window, Informer's protocol). Only the ltsf suite's
    ``small`` profile, which runs the whole Table 1 grid at smoke scale, thins its test sets."""
    rsa_lr_factor: float = 1.0
    """The RSA parameters (every layer's gate mu and its heads' eta, nu, theta) train at
    ``learning_rate * rsa_lr_factor``, halved with it. At 1 (Informer's scheme for every weight) Adam moves
    each of them by at most ~lr per step: about 0.05 over a 6-epoch ETTh1 run, so the gates and REMs stay
    near their initialisation. The RSA paper tunes its RSA hyperparameters by grid search (App. D.4); the
    ltsf suite and RSAInformerForecaster use 1000 for RSA-Informer (see ``ltsf.yaml``)."""
    rsa_gate_lr_factor: float | None = None
    """The gates' mu alone at ``learning_rate * rsa_gate_lr_factor``, so the REM parameters' rate and the
    gates' can be told apart; None = ``rsa_lr_factor`` for the gates too."""
    val_checks_per_epoch: int = 1
    """Validation checks per epoch, evenly spaced in batches, the last at the epoch's end. Each check can
    become the best (its weights are the ones kept) and ``patience`` counts checks without improvement.
    1 is Informer's protocol; more shows where within an epoch a model peaks (a model that overfits
    within its first epoch, as RSA-Informer does on ETTh1, is only seen at its end with 1)."""

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size", "lr_hold_epochs", "patience", "max_train_batches", "max_val_batches",
                     "eval_batch_size", "val_checks_per_epoch", "test_stride"):
            value = getattr(self, name)
            if value is None and name.startswith("max_"):
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"TrainConfig.{name}: must be an integer >= 1, got {value!r}")
        lr = self.learning_rate
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not (lr > 0 and math.isfinite(lr)):
            raise ValueError(f"TrainConfig.learning_rate: must be a positive number, got {lr!r}")
        decay = self.lr_decay
        if isinstance(decay, bool) or not isinstance(decay, (int, float)) or not 0 < decay <= 1:
            raise ValueError(f"TrainConfig.lr_decay: must be in (0, 1], got {decay!r}")
        for name in ("rsa_lr_factor", "rsa_gate_lr_factor"):
            value = getattr(self, name)
            if name == "rsa_gate_lr_factor" and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (value > 0 and math.isfinite(value)):
                raise ValueError(f"TrainConfig.{name}: must be a positive number, got {value!r}")


@dataclass(frozen=True)
class ValCheck:
    """One validation check: after ``batches`` training batches of ``epoch`` (of ``epoch_batches``)."""

    epoch: int
    batches: int
    epoch_batches: int
    val_loss: float

    @property
    def progress(self) -> float:
        """Training done at this check, in epochs (``epoch`` itself at the epoch's end)."""
        return self.epoch - 1 + self.batches / self.epoch_batches

    @property
    def step(self) -> int:
        """Training batches done at this check, over all epochs (the step its metrics are logged at)."""
        return (self.epoch - 1) * self.epoch_batches + self.batches


@dataclass
class EpochRecord:
    epoch: int
    train_loss: float
    val_loss: float | None
    """The validation loss at the epoch's last check (its end, unless early stopping came within it)."""
    learning_rate: float
    seconds: float
    """Training time of the epoch, validation checks excluded."""
    batches: int
    checks: list[ValCheck] = field(default_factory=list)


@dataclass
class TrainResult:
    epochs: list[EpochRecord] = field(default_factory=list)
    best_epoch: int | None = None
    """The epoch of the check whose weights were kept."""
    best_val_loss: float | None = None
    best_progress: float | None = None
    """Training done at the kept weights, in epochs: ``best_epoch`` with one check per epoch, a fraction
    of it with more (:attr:`TrainConfig.val_checks_per_epoch`)."""
    stopped_early: bool = False

    @property
    def seconds_per_epoch(self) -> float:
        return sum(e.seconds for e in self.epochs) / max(1, len(self.epochs))


def model_device(model: nn.Module) -> torch.device:
    """Where ``model``'s parameters live (the CPU for a model without any)."""
    first = next(model.parameters(), None)
    return first.device if first is not None else torch.device("cpu")


def forecast_batch(model: nn.Module, batch: tuple[torch.Tensor, ...], pred_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(prediction, target), both ``[B, pred_len, C]``, on the model's device (the batch is moved there)."""
    device = model_device(model)
    x, y, x_mark, y_mark = (t.to(device, non_blocking=True) for t in batch)
    pred, true = model(x, x_mark, y_mark), y[:, -pred_len:, :]
    if pred.shape != true.shape:  # MSELoss would broadcast a [B, pred_len, 1] over the channels, and score it
        raise ModelOutputError(f"{type(model).__name__} returned a forecast of shape {tuple(pred.shape)}; a "
                               f"forecaster returns [batch, pred_len, channels], here {tuple(true.shape)}")
    return pred, true


@torch.no_grad()
def evaluate(model: nn.Module, dataset: Dataset, pred_len: int, *, batch_size: int = 256,
             max_batches: int | None = None, stride: int = 1) -> dict[str, float]:
    """MSE and MAE over all windows of ``dataset`` (or its first ``max_batches`` batches); with
    ``stride`` n, over windows 0, n, 2n, ... only (:attr:`TrainConfig.test_stride`)."""
    if stride > 1:
        dataset = Subset(dataset, range(0, len(dataset), stride))  # type: ignore[arg-type]
    was_training = model.training
    model.eval()
    sq = ab = 0.0
    count = 0
    for n, batch in enumerate(DataLoader(dataset, batch_size=batch_size, shuffle=False)):
        if max_batches is not None and n >= max_batches:
            break
        raise_if_terminated()
        pred, true = forecast_batch(model, batch, pred_len)
        err = (pred - true).double()
        sq += float((err**2).sum())
        ab += float(err.abs().sum())
        count += err.numel()
    model.train(was_training)
    if count == 0:
        raise ValueError("evaluate: the dataset has no windows")
    return {"mse": sq / count, "mae": ab / count}


@torch.no_grad()
def forecast_example(model: nn.Module, dataset: Dataset, pred_len: int, index: int) -> dict[str, Any]:
    """Window ``index`` of ``dataset`` forecast in eval mode, for plots: ``history`` (the encoder
    input, ``[seq_len, C]``), ``truth`` and ``prediction`` (``[pred_len, C]``) as nested lists, in the
    data's (scaled) units."""
    was_training = model.training
    model.eval()
    batch = tuple(t[None] for t in dataset[index])
    pred, true = forecast_batch(model, batch, pred_len)
    model.train(was_training)
    return {"window": index, "history": batch[0][0].tolist(), "truth": true[0].tolist(), "prediction": pred[0].tolist()}


def param_groups(
    model: nn.Module, rsa_lr_factor: float = 1.0, gate_lr_factor: float | None = None
) -> list[dict[str, Any]]:
    """Optimizer groups: the RSA mixers' REM parameters with ``lr_factor`` ``rsa_lr_factor``, their
    gates' mu with ``gate_lr_factor`` (None: ``rsa_lr_factor`` too), every other trainable parameter
    with 1. Empty groups are left out."""
    mixers = [m for m in model.modules() if isinstance(m, RSAMixer)]
    gates = {id(m.mu) for m in mixers}
    rsa = {id(p) for m in mixers for p in m.parameters()}
    trainable = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in trainable if id(p) not in rsa], "lr_factor": 1.0},
        {"params": [p for p in trainable if id(p) in rsa and id(p) not in gates], "lr_factor": rsa_lr_factor},
        {"params": [p for p in trainable if id(p) in gates],
         "lr_factor": rsa_lr_factor if gate_lr_factor is None else gate_lr_factor},
    ]
    return [g for g in groups if g["params"]]


EpochCallback = Callable[[EpochRecord], None]
BatchCallback = Callable[[int, int], None]
CheckCallback = Callable[[ValCheck], None]


def check_points(n_batches: int, checks: int) -> list[int]:
    """After how many of an epoch's ``n_batches`` batches to validate: ``checks`` points spread evenly,
    the last at ``n_batches`` (fewer when the epoch has fewer batches than checks)."""
    return sorted({max(1, round(n_batches * j / checks)) for j in range(1, checks + 1)})


def train(
    model: nn.Module, train_set: Dataset, val_set: Dataset | None, pred_len: int, cfg: TrainConfig, *,
    on_epoch: EpochCallback | None = None, on_batch: BatchCallback | None = None,
    on_check: CheckCallback | None = None, generator: torch.Generator | None = None,
) -> TrainResult:
    """Train in place with Informer's scheme; returns the per-epoch record.

    ``on_batch(done, total)`` reports progress within an epoch; ``on_check`` receives each validation
    check and ``on_epoch`` each epoch's record as soon as they are known. Without a validation set (or
    one with no windows) there is no early stopping and the last weights are kept.
    """
    optimizer = torch.optim.Adam(
        param_groups(model, cfg.rsa_lr_factor, cfg.rsa_gate_lr_factor), lr=cfg.learning_rate
    )
    loss_fn = nn.MSELoss()
    has_val = val_set is not None and len(val_set) > 0
    result = TrainResult()
    best_state: dict[str, torch.Tensor] | None = None
    stale = 0
    n_batches = math.ceil(len(train_set) / cfg.batch_size)
    if cfg.max_train_batches is not None:
        n_batches = min(n_batches, cfg.max_train_batches)
    points = set(check_points(n_batches, cfg.val_checks_per_epoch)) if has_val else set()

    def validate(epoch: int, done: int) -> ValCheck:
        nonlocal best_state, stale
        loss = evaluate(model, val_set, pred_len, batch_size=cfg.eval_batch_size, max_batches=cfg.max_val_batches)
        check = ValCheck(epoch, done, n_batches, loss["mse"])
        if on_check is not None:
            on_check(check)
        if result.best_val_loss is None or check.val_loss < result.best_val_loss:
            result.best_val_loss, result.best_epoch, result.best_progress = check.val_loss, epoch, check.progress
            best_state = copy.deepcopy(model.state_dict())
            stale = 0
        else:
            stale += 1
            result.stopped_early = stale >= cfg.patience
        return check

    for epoch in range(1, cfg.epochs + 1):
        lr = cfg.learning_rate * cfg.lr_decay ** max(0, epoch - cfg.lr_hold_epochs)
        for group in optimizer.param_groups:
            group["lr"] = lr * group["lr_factor"]
        model.train()
        start = time.perf_counter()
        validating = 0.0
        total = torch.zeros((), dtype=torch.float64, device=model_device(model))  # read once, at the epoch's end
        checks: list[ValCheck] = []
        loader = DataLoader(train_set, batch_size=cfg.batch_size, shuffle=True, generator=generator)
        done = 0
        for batch in loader:
            if done >= n_batches or result.stopped_early:
                break
            raise_if_terminated()  # a stop swallowed on its way (see recurbench.runtime)
            optimizer.zero_grad(set_to_none=True)
            pred, true = forecast_batch(model, batch, pred_len)
            loss = loss_fn(pred, true)
            loss.backward()
            optimizer.step()
            total += loss.detach()
            done += 1
            if on_batch is not None:
                on_batch(done, n_batches)
            if done in points and done < n_batches:  # a check within the epoch; the last one comes below
                synchronize(total.device)  # the training batches' time is not the check's
                began = time.perf_counter()
                checks.append(validate(epoch, done))
                validating += time.perf_counter() - began
        train_loss = float(total) / max(1, done)  # waits for the device, so that the time below is complete
        seconds = time.perf_counter() - start - validating
        if not result.stopped_early and has_val:
            checks.append(validate(epoch, done))
        record = EpochRecord(epoch, train_loss, checks[-1].val_loss if checks else None, lr, seconds, done,
                             checks)
        result.epochs.append(record)
        if on_epoch is not None:
            on_epoch(record)
        if result.stopped_early:
            break
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    return result


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def rsa_state(model: nn.Module) -> tuple[dict[str, float], dict[str, dict[str, Any]]]:
    """Gate values sigma(mu) per attention layer and the fitted REM parameters per head, for logging:
    per layer ``eta``/``lambda``/``nu``/``gamma``/``theta`` (one entry per head), each head's ``kind``
    and whether the layer's REMs are ``masked`` (causal, App. D.1) or two-sided.

    Empty for baselines. Uses the models' ``attention_layers()`` and the RSA layer's ``gate()`` and
    ``rem_parameters()``.
    """
    gates: dict[str, float] = {}
    params: dict[str, dict[str, Any]] = {}
    layers = model.attention_layers() if hasattr(model, "attention_layers") else {}
    for name, layer in layers.items():
        mixer = getattr(layer, "mixer", None)
        if mixer is None:
            continue
        gates[name] = float(torch.as_tensor(mixer.gate()).detach().float().mean())
        params[name] = {
            key: torch.as_tensor(value).detach().float().flatten().tolist()
            for key, value in dict(mixer.rem_parameters()).items()
        }
        # The REM type of each head (regular / cos / sin): the numbers alone cannot tell cos from sin.
        params[name]["kind"] = list(mixer.kinds)
        params[name]["masked"] = bool(mixer.masked)
    return gates, params
