"""Per-step memory attention for MemLSTM / RelLSTM: one public function, two implementations.

:func:`memory_attention_step` inserts the previous hidden state into a batch of memories (short-term
buffer + relevant set), attends over them and returns the read. The PyTorch reference in
:mod:`.naive` states the recurrence and runs on CPU and whenever gradients are needed; the fused
Triton kernel in :mod:`.triton` runs for CUDA tensors without gradients (acting, evaluation) and
updates the memory in place. Triton is imported only when that path is taken.

:class:`AppendOnlyMemory` (:mod:`.history`) is the special case of a memory that keeps a whole episode
(MemLSTM over a sequence its window covers): the same read in ``O(t)`` per step, with its own backward.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from recurbench.kernels.memattn.history import AppendOnlyMemory
from recurbench.kernels.memattn.naive import MemoryStep, memory_attention_step_reference

Backend = Literal["auto", "torch", "triton"]

__all__ = ["AppendOnlyMemory", "MemoryStep", "memory_attention_step", "memory_attention_step_reference", "triton_available"]


def triton_available() -> bool:
    try:
        import triton  # noqa: F401, PLC0415 - triton is optional (the gpu extra)
    except ImportError:
        return False
    return True


def memory_attention_step(
    query: Tensor,
    keys: Tensor,
    values: Tensor,
    scores: Tensor,
    valid: Tensor,
    steps: Tensor,
    new_key: Tensor,
    new_value: Tensor,
    v: Tensor,
    *,
    nu: int,
    backend: Backend = "auto",
) -> MemoryStep:
    """One memory step for ``B`` environments (layout and semantics in :mod:`.naive`).

    ``backend="auto"`` takes the Triton kernel for CUDA tensors when no gradient is being recorded,
    else the PyTorch reference. The Triton path updates ``keys``, ``values``, ``scores`` and
    ``valid`` in place and returns them; the reference returns new tensors. Either way, use the
    returned memory and not the arguments afterwards.
    """
    S = keys.shape[1]
    if not 0 < nu <= S:
        raise ValueError(f"memory_attention_step: nu must be in [1, {S}] (the slot count), got {nu}")
    if backend == "auto":
        needs_grad = torch.is_grad_enabled() and any(
            t.requires_grad for t in (query, keys, values, new_key, new_value, v)
        )
        backend = "triton" if keys.is_cuda and not needs_grad and triton_available() else "torch"
    if backend == "torch":
        return memory_attention_step_reference(query, keys, values, scores, valid, steps, new_key, new_value, v, nu=nu)
    if backend == "triton":
        from recurbench.kernels.memattn.triton import memory_attention_step_triton  # noqa: PLC0415 - triton is optional (the gpu extra)

        return memory_attention_step_triton(query, keys, values, scores, valid, steps, new_key, new_value, v, nu=nu)
    raise ValueError(f"memory_attention_step: unknown backend {backend!r}; choose auto, torch or triton")
