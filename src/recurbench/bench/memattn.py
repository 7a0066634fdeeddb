"""One memory-attention step timed: the fused Triton kernel against the PyTorch reference.

:func:`bench_memattn` runs the same ``steps`` consecutive steps through both implementations from the
same empty memories (the buffer fills, wraps, and hands states to the relevant set), reports how far
apart they end (largest difference of any read and of the final memory) and the time per step of
each: the median over ``repeats`` timed runs of ``steps`` steps, divided by ``steps``. The Triton
path needs CUDA; elsewhere only the reference is timed. ``recurbench bench memattn``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from recurbench.devices import describe_device, resolve_device, synchronize
from recurbench.kernels.memattn import memory_attention_step, triton_available

MEMORIES = ((5, 5), (100, 0), (1000, 0), (2000, 0))
"""(nu, rho) of the memories timed by default: RelLSTM's (Kerg et al. 2020) and MemLSTM windows."""

_MEMORY = ("keys", "values", "scores", "valid")


def _empty_memory(B: int, S: int, A: int, H: int, device: torch.device) -> dict[str, Tensor]:
    return dict(
        keys=torch.zeros(B, S, A, device=device), values=torch.zeros(B, S, H, device=device),
        scores=torch.zeros(B, S, device=device), valid=torch.zeros(B, S, device=device),
        steps=torch.zeros(B, device=device),
    )


def _run_steps(backend: str, start: dict[str, Tensor], inputs: list[tuple[Tensor, ...]], v: Tensor, nu: int):
    """Every step's read and the final memory, starting from a copy of ``start``."""
    mem = {k: t.clone() for k, t in start.items()}
    reads = []
    for q, new_key, new_value in inputs:
        out = memory_attention_step(q, mem["keys"], mem["values"], mem["scores"], mem["valid"], mem["steps"],
                                    new_key, new_value, v, nu=nu, backend=backend)
        mem.update(keys=out.keys, values=out.values, scores=out.scores, valid=out.valid, steps=mem["steps"] + 1)
        reads.append(out.read)
    return reads, mem


def _time_per_step(backend: str, start, inputs, v, nu: int, repeats: int, device: torch.device) -> float:
    _run_steps(backend, start, inputs, v, nu)  # warm-up (and the Triton compile)
    times = []
    for _ in range(repeats):
        mem = {k: t.clone() for k, t in start.items()}
        synchronize(device)
        t0 = time.perf_counter()
        _run_steps(backend, mem, inputs, v, nu)
        synchronize(device)
        times.append((time.perf_counter() - t0) / len(inputs))
    return statistics.median(times)


@torch.no_grad()
def bench_memattn(
    *,
    memories: Sequence[tuple[int, int]] = MEMORIES,
    batch: int = 16,
    attention_size: int = 32,
    hidden_size: int = 64,
    steps: int = 50,
    repeats: int = 5,
    device: str = "auto",
) -> dict[str, Any]:
    """Time per step of both implementations for each (nu, rho) memory; see the module docstring.
    Defaults: the minigrid suite's 16 environments, attention width 32 and hidden size 64."""
    dev = resolve_device(device)
    fused = dev.type == "cuda" and triton_available()
    gen = torch.Generator().manual_seed(0)
    B, A, H = batch, attention_size, hidden_size
    rows = []
    for nu, rho in memories:
        S = nu + rho
        start = _empty_memory(B, S, A, H, dev)
        v = torch.randn(A, generator=gen).to(dev)
        inputs = [tuple(torch.randn(B, n, generator=gen).to(dev) for n in (A, A, H)) for _ in range(steps)]
        row: dict[str, Any] = {"nu": nu, "rho": rho, "slots": S,
                               "time_reference_ms": 1e3 * _time_per_step("torch", start, inputs, v, nu, repeats, dev)}
        row.update(time_triton_ms=None, speedup=None, max_abs_err_read=None, max_abs_err_memory=None)
        if fused:
            row["time_triton_ms"] = 1e3 * _time_per_step("triton", start, inputs, v, nu, repeats, dev)
            row["speedup"] = row["time_reference_ms"] / row["time_triton_ms"]
            ref_reads, ref_mem = _run_steps("torch", start, inputs, v, nu)
            got_reads, got_mem = _run_steps("triton", start, inputs, v, nu)
            row["max_abs_err_read"] = max((a - b).abs().max().item() for a, b in zip(ref_reads, got_reads, strict=True))
            row["max_abs_err_memory"] = max((ref_mem[k] - got_mem[k]).abs().max().item() for k in _MEMORY)
        rows.append(row)
    return {"device": describe_device(dev), "triton": fused, "batch": B, "attention_size": A, "hidden_size": H,
            "steps": steps, "rows": rows}
