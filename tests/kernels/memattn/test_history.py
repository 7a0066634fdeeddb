"""The append-only history (MemLSTM over a sequence it keeps whole) against the reference step:
reads and gradients in float64, a second backward pass, and its limits."""

from __future__ import annotations

import weakref

import pytest
import torch

from recurbench.kernels.memattn import AppendOnlyMemory, memory_attention_step_reference

B, A, H, T = 3, 4, 5, 9


def _inputs(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)

    def leaf(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, dtype=torch.float64).requires_grad_()

    return {"queries": leaf(T, B, A), "keys": leaf(T, B, A), "values": leaf(T, B, H), "v": leaf(A),
            "weights": torch.randn(T, B, H, generator=g, dtype=torch.float64)}


def _reference_reads(x: dict[str, torch.Tensor]) -> torch.Tensor:
    """Step t of the reference with rho = 0 and a window longer than the sequence: insert the state of
    step t - 1 (keys[t-1], values[t-1]), attend with queries[t]."""
    S = T + 1
    keys, values = torch.zeros(B, S, A, dtype=torch.float64), torch.zeros(B, S, H, dtype=torch.float64)
    scores, valid = torch.zeros(B, S, dtype=torch.float64), torch.zeros(B, S, dtype=torch.float64)
    reads = []
    for t in range(T):
        prev = max(t - 1, 0)  # at t = 0 nothing is inserted (steps = 0): any key/value will do
        step = memory_attention_step_reference(x["queries"][t], keys, values, scores, valid,
                                               torch.full((B,), float(t), dtype=torch.float64),
                                               x["keys"][prev], x["values"][prev], x["v"], nu=S)
        keys, values, scores, valid = step.keys, step.values, step.scores, step.valid
        reads.append(step.read)
    return torch.stack(reads)


def _history_reads(x: dict[str, torch.Tensor], memory: AppendOnlyMemory | None = None) -> torch.Tensor:
    memory = memory or AppendOnlyMemory(B, T, A, H, dtype=torch.float64)
    reads = []
    for t in range(T):
        if t > 0:
            memory.append(x["keys"][t - 1], x["values"][t - 1])
        reads.append(memory.attend(x["queries"][t], x["v"]))
    return torch.stack(reads)


def _gradients(reads: torch.Tensor, x: dict[str, torch.Tensor], **kwargs: bool) -> list[torch.Tensor]:
    wrt = [x[k] for k in ("queries", "keys", "values", "v")]
    return list(torch.autograd.grad((reads * x["weights"]).sum(), wrt, **kwargs))


def test_reads_and_gradients_equal_the_reference_step():
    x = _inputs()
    expected, got = _reference_reads(x), _history_reads(x)
    assert torch.equal(got[0], torch.zeros(B, H))  # nothing stored yet: the read is 0
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    for name, g, e in zip(("queries", "keys", "values", "v"), _gradients(got, x), _gradients(expected, x), strict=True):
        torch.testing.assert_close(g, e, rtol=1e-10, atol=1e-12, msg=name)
    # the last state is never attended to: no gradient reaches it (keys[T-1] was never appended)
    assert torch.count_nonzero(_gradients(_history_reads(x), x)[1][-1]) == 0


def test_a_second_backward_pass_starts_from_zero():
    x = _inputs(1)
    reads = _history_reads(x)
    first = _gradients(reads, x, retain_graph=True)
    second = _gradients(reads, x)
    for a, b in zip(first, second, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_without_gradients_the_reads_are_the_same():
    x = _inputs(2)
    with torch.no_grad():
        got = _history_reads(x)
    torch.testing.assert_close(got, _reference_reads(x).detach(), rtol=1e-12, atol=1e-12)


def test_a_full_history_refuses_another_state():
    memory = AppendOnlyMemory(B, 2, A, H)
    for _ in range(2):
        memory.append(torch.zeros(B, A), torch.zeros(B, H))
    with pytest.raises(ValueError, match="all 2 slots are used"):
        memory.append(torch.zeros(B, A), torch.zeros(B, H))


def test_the_history_is_freed_with_its_graph():
    # Without a garbage collection: a reference cycle through autograd's graph is never collected, so
    # a training loop leaked every update's history (20 GB after ~1000 updates at T = 500).
    x = _inputs(3)
    memory = AppendOnlyMemory(B, T, A, H, dtype=torch.float64)
    buffers = [weakref.ref(memory._buffers.keys), weakref.ref(memory._buffers.values)]
    reads = _history_reads(x, memory)
    _gradients(reads, x)
    del reads, memory
    assert all(ref() is None for ref in buffers)
