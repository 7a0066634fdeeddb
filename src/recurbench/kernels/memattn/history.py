"""Memory attention over an append-only history: MemLSTM over a sequence its window never wraps.

When a memory keeps every state of an episode (MemLSTM, ``rho = 0``, with a window of at least the
episode's length), the step of :mod:`.naive` reduces to: insert ``h_{t-1}`` at slot ``t - 1``, then
attend over slots ``0 .. t-1``. Nothing is evicted and no slot is rewritten. The reference still
builds new ``[B, S, A]`` keys and ``[B, S, H]`` values at every step (out-of-place, so that autograd
can save them): ``O(L S)`` copies and saved memory per sequence (2.6 GB at L = 520). Here the history
lives in two preallocated buffers written in place, and a step costs ``O(t (A + H))`` in both passes.

Autograd cannot save slices of a buffer that later steps write into, so two Functions carry the
gradient themselves:

* :class:`_Attend` (step t): forward reads the first ``n`` slots; backward recomputes
  ``tanh(q + K)`` from the buffers and *adds* the step's gradients for those keys and values to two
  gradient buffers. It returns the gradients of ``q`` and ``v`` directly.
* :class:`_Append` (slot i): forward copies ``U h_i`` and ``h_i`` into slot i; backward hands the
  accumulated gradients of slot i to the tensors that were appended, and clears the slot.

Ordering: an append returns a zero-size "token" tensor, and every later append and attend takes the
newest token as an input. The append at slot i therefore has every later step downstream of it, and
autograd runs its backward only after all of theirs, once slot i's gradient is complete.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


class _Buffers:
    """The history's tensors and their gradient buffers. The Functions' contexts hold this, never the
    :class:`AppendOnlyMemory`: the memory holds the newest token, whose graph holds the contexts, so a
    context holding the memory would make a reference cycle that autograd's graph keeps out of Python's
    garbage collector, and every update's history would leak."""

    def __init__(self, keys: Tensor, values: Tensor) -> None:
        self.keys, self.values = keys, values
        self.grad_keys: Tensor | None = None  # allocated by the first backward that reaches a step
        self.grad_values: Tensor | None = None

    def gradients(self) -> tuple[Tensor, Tensor]:
        if self.grad_keys is None or self.grad_values is None:
            self.grad_keys, self.grad_values = torch.zeros_like(self.keys), torch.zeros_like(self.values)
        return self.grad_keys, self.grad_values


class AppendOnlyMemory:
    """A batch of memories that only grow: ``append(key, value)`` then ``attend(query, v)``.

    ``attend`` after ``n`` appends equals :func:`.naive.memory_attention_step_reference` with
    ``rho = 0``, ``nu >= n + 1`` and ``steps = n`` (``tests/kernels/memattn/test_history.py``):
    ``e_i = v' tanh(query + key_i)`` over the stored slots, ``alpha = softmax(e)``, the read
    ``sum_i alpha_i value_i``; with nothing stored the read is 0.

    Parameters
    ----------
    batch, capacity : int
        Memories ``B`` and the most states each holds ``L``.
    key_size, value_size : int
        ``A`` and ``H``.
    dtype, device
        Of the buffers (the appended tensors').
    """

    def __init__(self, batch: int, capacity: int, key_size: int, value_size: int, *,
                 dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> None:
        self._buffers = _Buffers(torch.zeros(batch, capacity, key_size, dtype=dtype, device=device),
                                 torch.zeros(batch, capacity, value_size, dtype=dtype, device=device))
        self.size = 0
        self._token = torch.zeros(0, dtype=dtype, device=device)

    @property
    def capacity(self) -> int:
        return self._buffers.keys.shape[1]

    def append(self, key: Tensor, value: Tensor) -> None:
        """Store ``key`` [B, A] and ``value`` [B, H] in the next slot."""
        if self.size == self.capacity:
            raise ValueError(f"AppendOnlyMemory: all {self.capacity} slots are used; the history cannot grow")
        self._token = _Append.apply(self._token, key, value, self._buffers, self.size)
        self.size += 1

    def attend(self, query: Tensor, v: Tensor) -> Tensor:
        """The read [B, H] of ``query`` [B, A] over the stored slots, scored by ``v`` [A]."""
        return _Attend.apply(self._token, query, v, self._buffers, self.size)


class _Append(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, token: Tensor, key: Tensor, value: Tensor, memory: _Buffers, slot: int) -> Tensor:
        memory.keys[:, slot].copy_(key.detach())
        memory.values[:, slot].copy_(value.detach())
        ctx.memory, ctx.slot = memory, slot
        return token.new_zeros(0)

    @staticmethod
    def backward(ctx: Any, grad_token: Tensor) -> tuple[Tensor | None, ...]:
        memory, slot = ctx.memory, ctx.slot
        grad_keys, grad_values = memory.gradients()
        # Every later step's backward has run (they all take this append's token downstream), so
        # the slot's gradient is complete. Cleared so that another backward pass starts from zero.
        grad_key, grad_value = grad_keys[:, slot].clone(), grad_values[:, slot].clone()
        grad_keys[:, slot].zero_()
        grad_values[:, slot].zero_()
        return torch.zeros_like(grad_token), grad_key, grad_value, None, None


class _Attend(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, token: Tensor, query: Tensor, v: Tensor, memory: _Buffers, size: int) -> Tensor:
        ctx.memory, ctx.size = memory, size
        if size == 0:
            ctx.save_for_backward(query, v, None)
            return query.new_zeros(query.shape[0], memory.values.shape[2])
        keys, values = memory.keys[:, :size], memory.values[:, :size]  # [B, n, A], [B, n, H]
        e = torch.add(keys, query[:, None, :]).tanh_() @ v  # [B, n]
        alpha = torch.softmax(e, dim=1)
        ctx.save_for_backward(query, v, alpha)
        return torch.bmm(alpha[:, None, :], values)[:, 0]

    @staticmethod
    def backward(ctx: Any, grad_read: Tensor) -> tuple[Tensor | None, ...]:
        query, v, alpha = ctx.saved_tensors
        memory, size = ctx.memory, ctx.size
        token_grad = torch.zeros(0, dtype=grad_read.dtype, device=grad_read.device)
        if size == 0:
            return token_grad, torch.zeros_like(query), torch.zeros_like(v), None, None
        keys, values = memory.keys[:, :size], memory.values[:, :size]
        grad_keys, grad_values = memory.gradients()
        # In-place and fused (baddbmm) updates: at L = 520 the step is memory-bound on [B, n, A|H].
        tanh = torch.add(keys, query[:, None, :]).tanh_()  # [B, n, A], recomputed rather than saved
        grad_alpha = torch.bmm(values, grad_read[:, :, None])[:, :, 0]  # [B, n]
        grad_values[:, :size].baddbmm_(alpha[:, :, None], grad_read[:, None, :])  # += alpha_i grad_read
        grad_e = alpha * (grad_alpha - (alpha * grad_alpha).sum(dim=1, keepdim=True))  # softmax backward
        grad_v = torch.bmm(grad_e[:, None, :], tanh)[:, 0].sum(dim=0)
        # d/d(query + key_i) = grad_e_i v (1 - tanh^2), written over tanh
        grad_pre = tanh.mul_(tanh).neg_().add_(1).mul_(v).mul_(grad_e[:, :, None])
        grad_keys[:, :size] += grad_pre
        return token_grad, grad_pre.sum(dim=1), grad_v, None, None


__all__ = ["AppendOnlyMemory"]
