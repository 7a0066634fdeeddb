"""Training throughput of the memory-task sequence models: the step loop against the fast paths.

For each core and delay T: updates per second (forward, backward, clip, Adam) at the reference
sizes (batch 10, width 128, copy task), along each path of :data:`~recurbench.memory.models.PATHS`:
the plain step loop (``MemoryCore.step`` per symbol, as the agents step), the model's fast path
(``nn.LSTM``'s fused kernel for the LSTM; the whole-sequence function with its own backward for the
attentive cores; the compiled cell for the others, when ``compile_core``), the compiled cell, and
MemLSTM's append-only history. Steps per second = updates/s x L.
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
    off the CPU the attentive cores' fast path is their Python loop)."""
    if unknown := sorted(set(paths) - set(PATHS)):
        raise ValueError(f"bench_memory: unknown path(s) {', '.join(unknown)}; choose from {', '.join(PATHS)}")
    dev = resolve_device(device, what="--device")
    torch.set_num_threads(threads)
    rows = []
    for T in lengths:
        task = make_task("copy", T)
        inputs, targets = (torch.as_tensor(a).to(dev) for a in task.sample(10, np.random.default_rng(0)))
        for core in cores:
            for path in paths:
                progress(f"{core} T={T} {path}")
                torch._dynamo.reset()  # a fresh compilation per model, as in a run (see training.py)
                torch.manual_seed(0)
                model = build_model(task, SequenceModelConfig(core), compile_core=compile_core).to(dev)
                wall, cpu = _timed_updates(model, inputs, targets, updates, path)
                rows.append({"core": core, "T": T, "path": path, "updates_per_s": wall, "steps_per_s": wall * task.seq_len,
                             "updates_per_cpu_s": cpu, "steps_per_cpu_s": cpu * task.seq_len, "threads": threads,
                             "device": describe_device(dev)})
    return rows
