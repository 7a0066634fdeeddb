"""The memory-attention step: the vectorised reference against a list-based statement of the
RelLSTM memory (Kerg et al. 2020), and the fused Triton kernel against the reference."""

from __future__ import annotations

import math
import os

import pytest
import torch

from recurbench.kernels.memattn import memory_attention_step, memory_attention_step_reference


def _random_memory(B: int, S: int, A: int, H: int, generator: torch.Generator):
    return dict(
        keys=torch.zeros(B, S, A), values=torch.zeros(B, S, H), scores=torch.zeros(B, S),
        valid=torch.zeros(B, S), steps=torch.zeros(B),
    )


class ListMemory:
    """One environment's memory as Python lists, written from the paper's description."""

    def __init__(self, nu: int, rho: int) -> None:
        self.nu, self.rho = nu, rho
        self.buffer: list[list] = []  # [key, value, score], oldest first
        self.relevant: list[list | None] = [None] * rho  # fixed slots

    def step(self, q, v, new_key, new_value, insert: bool):
        if insert:
            if len(self.buffer) == self.nu:
                leaving = self.buffer.pop(0)
                empty = [i for i, m in enumerate(self.relevant) if m is None]
                if empty:
                    self.relevant[empty[0]] = leaving
                elif self.rho > 0:
                    low = min(range(self.rho), key=lambda i: (self.relevant[i][2], i))
                    if leaving[2] > self.relevant[low][2]:
                        self.relevant[low] = leaving
            self.buffer.append([new_key, new_value, 0.0])
        members = self.buffer + [m for m in self.relevant if m is not None]
        if not members:
            return torch.zeros_like(new_value)
        e = torch.stack([(torch.tanh(q + m[0]) * v).sum() for m in members])
        alpha = torch.softmax(e, 0)
        for a, m in zip(alpha[: len(self.buffer)], self.buffer, strict=True):
            m[2] += float(a)
        return sum(a * m[1] for a, m in zip(alpha, members, strict=True))


@pytest.mark.parametrize("nu,rho", [(5, 5), (3, 2), (7, 0)])
def test_reference_matches_list_statement_of_the_memory(nu: int, rho: int) -> None:
    g = torch.Generator().manual_seed(0)
    B, A, H, T = 3, 4, 6, 40
    mem = _random_memory(B, nu + rho, A, H, g)
    lists = [ListMemory(nu, rho) for _ in range(B)]
    v = torch.randn(A, generator=g)
    for t in range(T):
        # episode boundaries at different times per env: a reset clears the memory
        for b in range(B):
            if t > 0 and t % (11 + 7 * b) == 0:
                lists[b] = ListMemory(nu, rho)
                for name in mem:
                    mem[name][b] = 0
        q, nk, nv = torch.randn(B, A, generator=g), torch.randn(B, A, generator=g), torch.randn(B, H, generator=g)
        out = memory_attention_step_reference(q, mem["keys"], mem["values"], mem["scores"], mem["valid"],
                                              mem["steps"], nk, nv, v, nu=nu)
        for b in range(B):
            expected = lists[b].step(q[b], v, nk[b], nv[b], insert=bool(mem["steps"][b] > 0))
            torch.testing.assert_close(out.read[b], expected, rtol=1e-5, atol=1e-6)
        mem.update(keys=out.keys, values=out.values, scores=out.scores, valid=out.valid, steps=mem["steps"] + 1)
    # the relevant set really was used (and is not just the buffer's leftovers)
    if rho:
        assert (mem["valid"][:, nu:] > 0).any()


def test_empty_memory_reads_zero_and_gradients_flow_to_every_input() -> None:
    g = torch.Generator().manual_seed(1)
    B, S, A, H = 2, 4, 3, 5
    mem = _random_memory(B, S, A, H, g)
    out = memory_attention_step_reference(torch.randn(B, A), mem["keys"], mem["values"], mem["scores"], mem["valid"],
                                          mem["steps"], torch.randn(B, A), torch.randn(B, H), torch.randn(A), nu=2)
    assert torch.equal(out.read, torch.zeros(B, H)) and torch.equal(out.alpha, torch.zeros(B, S))
    # reference gradients against finite differences (double precision)
    mem = {k: torch.rand(B, *t.shape[1:], dtype=torch.float64, generator=g) for k, t in mem.items()}
    mem["valid"] = (mem["valid"] > 0.3).double()
    mem["steps"] = torch.tensor([3.0, 9.0], dtype=torch.float64)
    inputs = [torch.randn(B, A, dtype=torch.float64, requires_grad=True),
              mem["keys"].requires_grad_(), mem["values"].requires_grad_(),
              torch.randn(B, A, dtype=torch.float64, requires_grad=True),
              torch.randn(B, H, dtype=torch.float64, requires_grad=True),
              torch.randn(A, dtype=torch.float64, requires_grad=True)]

    def f(q, k, val, nk, nv, v):
        return memory_attention_step_reference(q, k, val, mem["scores"], mem["valid"], mem["steps"], nk, nv, v, nu=2).read

    assert torch.autograd.gradcheck(f, inputs)


triton_interpret = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1", reason="needs TRITON_INTERPRET=1 before triton is imported"
)


@pytest.mark.triton_interpret
@triton_interpret
@pytest.mark.parametrize("nu,rho,A,H", [(5, 5, 8, 16), (13, 0, 16, 8), (3, 4, 20, 40)])
def test_triton_kernel_equals_reference_step_by_step(nu: int, rho: int, A: int, H: int) -> None:
    pytest.importorskip("triton")
    g = torch.Generator().manual_seed(2)
    B, S, T = 3, nu + rho, 2 * (nu + rho) + 2
    ref = _random_memory(B, S, A, H, g)
    fused = {k: t.clone() for k, t in ref.items()}
    v = torch.randn(A, generator=g)
    for t in range(T):
        if t == T // 2:  # env 1 starts a new episode: both memories are cleared the same way
            for mem in (ref, fused):
                for name in mem:
                    mem[name][1] = 0
        q, nk, nv = torch.randn(B, A, generator=g), torch.randn(B, A, generator=g), torch.randn(B, H, generator=g)
        a = memory_attention_step(q, ref["keys"], ref["values"], ref["scores"], ref["valid"], ref["steps"],
                                  nk, nv, v, nu=nu, backend="torch")
        b = memory_attention_step(q, fused["keys"], fused["values"], fused["scores"], fused["valid"],
                                  fused["steps"], nk, nv, v, nu=nu, backend="triton")
        assert b.keys is fused["keys"]  # updated in place
        for name in ("read", "alpha", "keys", "values", "scores", "valid"):
            torch.testing.assert_close(getattr(b, name), getattr(a, name), rtol=1e-5, atol=1e-5, msg=name)
        ref.update(keys=a.keys, values=a.values, scores=a.scores, valid=a.valid, steps=ref["steps"] + 1)
        fused["steps"] = fused["steps"] + 1
    assert math.isclose(float(ref["valid"].sum()), float(fused["valid"].sum()))
