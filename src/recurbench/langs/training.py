"""Training and scoring of the regular-language recognisers (RSA paper, App. E.2; fact sheet Sec. 4).

* Loss: MSE between the sigmoid units and the targets, averaged over the two units, then over the
  non-pad positions of the batch.
* Accuracy: a unit is 1 when its output is >= 0.5; a string is correct only when every unit at
  every position equals its target. A bin's accuracy is the fraction of its strings that are correct
  (the reference averages batch accuracies instead; the two differ only by the weight of a last,
  smaller batch).
* Schedule (Sec. 4.2): Adam at 0.005, halved every 5 epochs, 25 epochs, no early stopping. Every bin
  is scored after every epoch; the result keeps the last epoch's figures and, separately, each bin's
  best epoch (the reference code reports the maximum over epochs, taken per bin; the paper does not say
  which it reports).

Batches group strings of similar length (sorted by length with random ties, cut into batches, the
batches in a random order each epoch; seeded), so that a batch pads little: on a CPU this makes an
epoch several times faster than random batches of mixed lengths.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from recurbench.data.langs import Language
from recurbench.errors import ModelOutputError
from recurbench.forecasters.training import rsa_state
from recurbench.runtime import raise_if_terminated


@dataclass(frozen=True)
class LangTrainConfig:
    epochs: int = 25
    batch_size: int = 32
    """Not stated by the paper; the reference code's default."""
    learning_rate: float = 0.005
    lr_decay: float = 0.5
    lr_step_epochs: int = 5
    """Epoch e trains at ``learning_rate * lr_decay ** ((e - 1) // lr_step_epochs)``."""
    eval_batch_size: int = 64
    """Scoring only (results do not depend on it)."""

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size", "lr_step_epochs", "eval_batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"LangTrainConfig.{name}: must be an integer >= 1, got {value!r}")
        if not (isinstance(self.learning_rate, (int, float)) and self.learning_rate > 0 and math.isfinite(self.learning_rate)):
            raise ValueError(f"LangTrainConfig.learning_rate: must be a positive number, got {self.learning_rate!r}")
        if not (isinstance(self.lr_decay, (int, float)) and 0 < self.lr_decay <= 1):
            raise ValueError(f"LangTrainConfig.lr_decay: must be in (0, 1], got {self.lr_decay!r}")

    def learning_rate_at(self, epoch: int) -> float:
        return self.learning_rate * self.lr_decay ** ((epoch - 1) // self.lr_step_epochs)


@dataclass(frozen=True)
class EncodedSplit:
    """One split as padded arrays: ``ids`` ``[N, T]`` (0 = pad), ``targets`` ``[N, T, 2]``, ``lengths`` ``[N]``."""

    ids: np.ndarray
    targets: np.ndarray
    lengths: np.ndarray

    @classmethod
    def of(cls, language: Language, strings: Sequence[str]) -> EncodedSplit:
        lengths = np.asarray([len(s) for s in strings], dtype=np.int64)
        width = int(lengths.max()) if len(strings) else 0
        ids = np.zeros((len(strings), width), dtype=np.int64)
        targets = np.zeros((len(strings), width, 2), dtype=np.float32)
        for i, s in enumerate(strings):
            ids[i, : len(s)] = language.encode(s)
            targets[i, : len(s)] = language.targets(s)
        return cls(ids, targets, lengths)

    def __len__(self) -> int:
        return len(self.lengths)

    def batches(self, batch_size: int, rng: np.random.Generator | None = None) -> list[np.ndarray]:
        """Indices of batches of similar lengths; with ``rng``, ties broken and batches ordered at random."""
        ties = rng.random(len(self)) if rng is not None else np.arange(len(self))
        order = np.lexsort((ties, self.lengths))
        chunks = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
        if rng is not None:
            chunks = [chunks[i] for i in rng.permutation(len(chunks))]
        return chunks

    def tensors(self, index: np.ndarray, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(ids [B, T], targets [B, T, 2], mask [B, T])`` of a batch, cut to its longest string."""
        width = int(self.lengths[index].max())
        ids = torch.from_numpy(self.ids[index, :width]).to(device)
        targets = torch.from_numpy(self.targets[index, :width]).to(device)
        return ids, targets, ids != 0


def recognise(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """``model``'s ``[B, T, 2]`` outputs for ``ids`` (``[B, T]``); a :class:`ModelOutputError` for any
    other shape (the loss would broadcast it, and the scores threshold it, without a word)."""
    probs = model(ids)
    if probs.shape != (*ids.shape, 2):
        raise ModelOutputError(f"{type(model).__name__} returned outputs of shape {tuple(probs.shape)} for ids of "
                               f"shape {tuple(ids.shape)}; a language model returns [batch, length, 2], here "
                               f"{(*ids.shape, 2)}")
    return probs


def masked_mse(probs: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Squared error averaged over the two units, then over the non-pad positions (fact sheet Sec. 4)."""
    per_position = ((probs - targets) ** 2).mean(dim=-1)
    return (per_position * mask).sum() / mask.sum().clamp(min=1)


def strings_correct(probs: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[B]`` booleans: every unit at every non-pad position on the right side of 0.5."""
    wrong = ((probs >= 0.5) != (targets >= 0.5)).any(dim=-1) & mask
    return ~wrong.any(dim=-1)


@torch.no_grad()
def score(model: nn.Module, split: EncodedSplit, batch_size: int) -> np.ndarray:
    """Whether each string of ``split`` is recognised correctly (``[N]`` booleans)."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    correct = np.zeros(len(split), dtype=bool)
    for index in split.batches(batch_size):
        ids, targets, mask = split.tensors(index, device)
        correct[index] = strings_correct(recognise(model, ids), targets, mask).cpu().numpy()
    model.train(was_training)
    return correct


def by_length(split: EncodedSplit, correct: np.ndarray) -> dict[str, list[int]]:
    """Correct and total strings per length: ``{"length": [...], "correct": [...], "total": [...]}``."""
    lengths = np.unique(split.lengths)
    return {
        "length": lengths.tolist(),
        "correct": [int(correct[split.lengths == n].sum()) for n in lengths],
        "total": [int((split.lengths == n).sum()) for n in lengths],
    }


@dataclass
class LangEpoch:
    epoch: int
    train_loss: float
    accuracy: dict[str, float]
    """Per test bin (``bin0``, ``bin1``): the fraction of strings recognised correctly after the epoch."""
    learning_rate: float
    seconds: float
    """Training time of the epoch (scoring excluded)."""
    gates: dict[str, float] = field(default_factory=dict)
    """RSA models: sigma(mu) per layer after the epoch."""


@dataclass
class LangTrainResult:
    epochs: list[LangEpoch] = field(default_factory=list)
    by_length: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    """Per bin, after the last epoch: :func:`by_length`."""
    seconds: float = 0.0
    """Wall time of the whole training, scoring included."""

    def final(self, split: str) -> float:
        return self.epochs[-1].accuracy[split]

    def best(self, split: str) -> tuple[float, int]:
        """The bin's highest accuracy over epochs and the first epoch that reached it."""
        best = max(self.epochs, key=lambda e: (e.accuracy[split], -e.epoch))
        return best.accuracy[split], best.epoch

    @property
    def seconds_per_epoch(self) -> float:
        return sum(e.seconds for e in self.epochs) / max(1, len(self.epochs))


def train_recognizer(
    model: nn.Module, train: EncodedSplit, bins: dict[str, EncodedSplit], cfg: LangTrainConfig, *, seed: int,
    on_epoch: Callable[[LangEpoch], None] | None = None, on_batch: Callable[[int, int], None] | None = None,
) -> LangTrainResult:
    """Train ``model`` in place on ``train`` and score every bin after every epoch (module docstring)."""
    began = time.perf_counter()
    device = next(model.parameters()).device
    rng = np.random.default_rng(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.learning_rate)
    result = LangTrainResult()
    correct: dict[str, np.ndarray] = {}
    for epoch in range(1, cfg.epochs + 1):
        lr = cfg.learning_rate_at(epoch)
        for group in optimizer.param_groups:
            group["lr"] = lr
        model.train()
        start = time.perf_counter()
        total = torch.zeros((), dtype=torch.float64, device=device)
        batches = train.batches(cfg.batch_size, rng)
        for done, index in enumerate(batches, start=1):
            raise_if_terminated()  # a stop swallowed on its way (see recurbench.runtime)
            ids, targets, mask = train.tensors(index, device)
            optimizer.zero_grad(set_to_none=True)
            loss = masked_mse(recognise(model, ids), targets, mask)
            loss.backward()
            optimizer.step()
            total += loss.detach()
            if on_batch is not None:
                on_batch(done, len(batches))
        train_loss = float(total) / max(1, len(batches))
        seconds = time.perf_counter() - start
        correct = {name: score(model, split, cfg.eval_batch_size) for name, split in bins.items()}
        gates, _ = rsa_state(model)
        record = LangEpoch(epoch, train_loss, {k: float(v.mean()) if v.size else math.nan for k, v in correct.items()},
                           lr, seconds, gates)
        result.epochs.append(record)
        if on_epoch is not None:
            on_epoch(record)
    result.by_length = {name: by_length(bins[name], c) for name, c in correct.items()}
    result.seconds = time.perf_counter() - began
    model.eval()
    return result
