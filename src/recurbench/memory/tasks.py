"""The copy and denoise tasks of Kerg et al. (2020), App. D, as the published code builds them.

Source: ``shared/reference/kerg_copy_denoise.md`` (sections 1 and 2), which reads the authors'
``copytask.py`` and ``denoisetask.py``. With ``c`` data symbols (``copy_length``, 10 in the paper)
and delay ``T``, every sequence has ``L = T + 2c`` steps, 0-based positions:

* **copy** -- input: the ``c`` data symbols at ``0..c-1``, blanks at ``c..T+c-2`` (``T - 1`` of
  them), the marker at ``T+c-1``, blanks at ``T+c..L-1``.
* **denoise** -- input: blanks at ``0..T+c-2`` except ``c`` distinct positions, drawn uniformly
  without replacement and sorted, that hold the data symbols in order; the marker at ``T+c-1``;
  blanks at ``T+c..L-1``.
* **target** (both): blank at ``0..T+c-1``, then the ``c`` data symbols in order at ``T+c..L-1``
  (the *scored* steps).

Symbols: blank 0, data ``1..labels`` (uniform, with replacement). Copy: marker ``labels + 1``,
input width ``labels + 2``, ``labels + 1`` output classes. Denoise keeps the reference code's
encoding, in which symbol ``labels + 1`` is never used (its ``--labels 9`` draws data from 1..8):
marker ``labels + 2``, input width ``labels + 3``, ``labels + 2`` output classes.

Layout: a :class:`TaskBatch` holds ``inputs`` and ``targets`` as ``int64`` arrays ``[B, L]``, one row
per sequence. Batches are drawn from a :class:`numpy.random.Generator`, so a seed fixes them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import numpy as np

from recurbench.errors import ConfigError


class TaskBatch(NamedTuple):
    inputs: np.ndarray
    """[B, L] int64 input symbols."""
    targets: np.ndarray
    """[B, L] int64 target classes (blank 0 before the scored steps)."""


@dataclass(frozen=True)
class MemoryTask(ABC):
    """One task at delay ``T``: the layout of its sequences and how to draw a batch of them.

    Parameters
    ----------
    T : int
        The delay: steps between the end of the data and the marker, plus one (at least 1).
    copy_length : int
        ``c``, the number of data symbols to reproduce (10 in the paper).
    labels : int
        The number of distinct data symbols (8 in the paper; chance accuracy is ``1 / labels``).
    """

    T: int
    copy_length: int = 10
    labels: int = 8

    name: ClassVar[str]

    @property
    def seq_len(self) -> int:
        """``L = T + 2c``."""
        return self.T + 2 * self.copy_length

    @property
    def scored_from(self) -> int:
        """The first scored step, ``T + c``: the steps ``t >= T + c`` carry the data in the target."""
        return self.T + self.copy_length

    @property
    def marker(self) -> int:
        return self.labels + 1

    @property
    def vocab_size(self) -> int:
        """Width of the one-hot input."""
        return self.marker + 1

    @property
    def n_classes(self) -> int:
        """Output classes: blank and the data symbols (plus the unused symbol for denoise)."""
        return self.marker

    def check(self, where: str = "") -> None:
        """Raise a :class:`ConfigError` naming the first setting that leaves no valid layout."""
        prefix = f"{where}: " if where else ""
        layout = "its layout is c data symbols, T - 1 blanks, a marker and c blanks: L = T + 2c steps"
        for key, value, least, why in (("T", self.T, 1, layout), ("copy_length", self.copy_length, 1, layout),
                                       ("labels", self.labels, 2, "with one symbol there is nothing to remember")):
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ConfigError(
                    f"{prefix}{key}: the {self.name} task needs an integer of at least {least} ({why}), got {value!r}")

    def sample(self, batch: int, rng: np.random.Generator) -> TaskBatch:
        """``batch`` sequences drawn from ``rng``."""
        self.check()
        c, L = self.copy_length, self.seq_len
        data = rng.integers(1, self.labels + 1, size=(batch, c), dtype=np.int64)
        inputs = np.zeros((batch, L), dtype=np.int64)
        inputs[np.arange(batch)[:, None], self._data_positions(batch, rng)] = data
        inputs[:, self.T + c - 1] = self.marker
        targets = np.zeros((batch, L), dtype=np.int64)
        targets[:, self.scored_from:] = data
        return TaskBatch(inputs, targets)

    @abstractmethod
    def _data_positions(self, batch: int, rng: np.random.Generator) -> np.ndarray:
        """[B, c] increasing input positions of the data symbols."""


@dataclass(frozen=True)
class CopyTask(MemoryTask):
    """Copy: the data come first, then ``T - 1`` blanks and the marker (Kerg et al. App. D)."""

    name: ClassVar[str] = "copy"

    def _data_positions(self, batch: int, rng: np.random.Generator) -> np.ndarray:
        return np.broadcast_to(np.arange(self.copy_length), (batch, self.copy_length))


@dataclass(frozen=True)
class DenoiseTask(MemoryTask):
    """Denoise: the data sit at random sorted positions among the first ``T + c - 1`` steps."""

    name: ClassVar[str] = "denoise"

    @property
    def marker(self) -> int:
        return self.labels + 2  # the reference code's encoding: symbol labels + 1 is never used

    def _data_positions(self, batch: int, rng: np.random.Generator) -> np.ndarray:
        # c distinct positions out of T + c - 1, uniformly, per row: the first c of a random permutation.
        slots = self.T + self.copy_length - 1
        return np.sort(np.argsort(rng.random((batch, slots)), axis=1)[:, : self.copy_length], axis=1)


MEMORY_TASKS: dict[str, type[MemoryTask]] = {"copy": CopyTask, "denoise": DenoiseTask}


def make_task(name: str, T: int, *, copy_length: int = 10, labels: int = 8, where: str = "") -> MemoryTask:
    """The task ``name`` at delay ``T``, checked (a :class:`ConfigError` names the culprit)."""
    if name not in MEMORY_TASKS:
        prefix = f"{where}: " if where else ""
        raise ConfigError(f"{prefix}unknown memory task {name!r}; known: {', '.join(MEMORY_TASKS)}")
    task = MEMORY_TASKS[name](T, copy_length, labels)
    task.check(where)
    return task
