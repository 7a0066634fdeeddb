"""Training throughput of the memory-task sequence models: the step loop against the fast paths.

For each core and delay T: updates per second (forward, backward, clip, Adam) at the reference
sizes (batch 10, width 128, copy task), along each path of :data:`~recurbench.memory.models.PATHS`:
the plain step loop (``MemoryCore.step`` per symbol, as the agents step), the model's fast path
(``nn.LSTM``'s fused kernel for the LSTM; the whole-sequence function with its own backward for the
attentive cores; the compiled cell for the others, when ``compile_core``), the compiled cell, and
MemLSTM's append-only history. Steps per second = updates/s x L.
A path a core does not have of its own (``MemorySequenceModel.missing_path``: the compiled cell of a core
whose state changes shape, the history of a core without one) is not timed: ``forward`` would quietly run another
path, or torch.compile recompile at every step until it gives up and runs it eagerly. Its row says why.
Wall-clock and CPU-time rates are both given: the latter is robust to other processes on the cores.
On a GPU (``device``) the wall-clock rate is the one to read: the CPU time is the host's, launching.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from recurbench.devices import describe_device, resolve_device, synchronize
from recurbench.errors import ConfigError
from recurbench.memory.models import PATHS, SequenceModelConfig, build_model
from recurbench.memory.tasks import make_task
from recurbench.memory.training import sequence_loss


def _timed_updates(model: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor, updates: int,
                   path: str) -> tuple[float, float]:
    """Updates per wall-clock second and per CPU second of this process."""
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-4)

    def update() -> None:
        loss = sequence_loss(model(inputs, path=path), targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    device = inputs.device
    update()  # warm-up (and, for a compiled cell, the compilation)
    synchronize(device)
    start, start_cpu = time.perf_counter(), time.process_time()
    for _ in range(updates):
        update()
    synchronize(device)
    return updates / (time.perf_counter() - start), updates / (time.process_time() - start_cpu)


def _plan(cores: Sequence[str], lengths: Sequence[int], paths: Sequence[str]) -> list[tuple[int, str, str, str | None]]:
    """``(T, core, path, why not)`` for every combination, in the rows' order; a ConfigError naming each
    core and path when none of them can be timed."""
    plan = []
    for T in lengths:
        task = make_task("copy", T)
        for core in cores:
            model = build_model(task, SequenceModelConfig(core))  # built, not run: which paths it has
            plan.extend((T, core, path, model.missing_path(path)) for path in paths)
    if all(why for *_, why in plan):
        raise ConfigError(f"nothing to time: {'; '.join(not_timed([(core, path, why) for _, core, path, why in plan]))}")
    return plan


def not_timed(skipped: Sequence[tuple[str, str, str | None]]) -> list[str]:
    """``(core, path, why not)`` as one line per path and reason, naming its cores: ``lstm, rnn have no
    history path: ...``; timed ones (why None) left out."""
    cores: dict[tuple[str, str], list[str]] = {}
    for core, path, why in skipped:
        if why and core not in (named := cores.setdefault((path, why), [])):
            named.append(core)
    return [f"{', '.join(names)} {'has' if len(names) == 1 else 'have'} no {path} path: {why}"
            for (path, why), names in cores.items()]


def bench_memory(
    cores: Sequence[str] = ("lstm", "memlstm", "rellstm"),
    lengths: Sequence[int] = (100, 500, 1000),
    *,
    updates: int = 3,
    compile_core: bool = True,
    threads: int = 1,
    paths: Sequence[str] = ("step", "fast"),
    device: str = "cpu",
    progress: Callable[[str], None] = lambda _: None,
) -> list[dict[str, Any]]:
    """One row per core x T x path of ``paths`` (:data:`~recurbench.memory.models.PATHS`: ``step`` the
    step loop, ``fast`` the model's fast path, ``compiled`` the compiled cell, ``history`` MemLSTM's
    append-only history): ``updates_per_s``, ``steps_per_s`` (wall) and ``updates_per_cpu_s``,
    ``steps_per_cpu_s``, on ``device`` (``--device``: ``cpu``, the memory suite's default, ``cuda``, ...;
    off the CPU the attentive cores' fast path is their Python loop). A path the core does not have
    (``MemorySequenceModel.missing_path``) is not timed: its row has ``skipped`` (why; None on a timed row) and rates None.
    A ConfigError when no combination can be timed, before anything runs."""
    if unknown := sorted(set(paths) - set(PATHS)):
        raise ValueError(f"bench_memory: unknown path(s) {', '.join(unknown)}; choose from {', '.join(PATHS)}")
    dev = resolve_device(device, what="--device")
    plan = _plan(cores, lengths, paths)
    torch.set_num_threads(threads)
    rows = []
    data: dict[int, tuple[Any, torch.Tensor, torch.Tensor]] = {}
    for T, core, path, skipped in plan:
        row: dict[str, Any] = {"core": core, "T": T, "path": path, "skipped": skipped, "updates_per_s": None,
                               "steps_per_s": None, "updates_per_cpu_s": None, "steps_per_cpu_s": None,
                               "threads": threads, "device": describe_device(dev)}
        rows.append(row)
        if skipped:
            continue
        if T not in data:
            task = make_task("copy", T)
            data[T] = (task, *(torch.as_tensor(a).to(dev) for a in task.sample(10, np.random.default_rng(0))))
        task, inputs, targets = data[T]
        progress(f"{core} T={T} {path}")
        torch._dynamo.reset()  # a fresh compilation per model, as in a run (see training.py)
        torch.manual_seed(0)
        model = build_model(task, SequenceModelConfig(core), compile_core=compile_core).to(dev)
        wall, cpu = _timed_updates(model, inputs, targets, updates, path)
        row.update(updates_per_s=wall, steps_per_s=wall * task.seq_len, updates_per_cpu_s=cpu,
                   steps_per_cpu_s=cpu * task.seq_len)
    return rows
