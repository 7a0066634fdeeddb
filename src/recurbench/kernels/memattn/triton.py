"""Fused Triton kernel for one memory-attention step (insert/evict, scores, masked softmax, read).

One program per environment. The slot tile ``[BLOCK_S]`` covers every slot; the key and value rows
are walked in chunks of ``BLOCK_A`` / ``BLOCK_H`` columns, chosen with the warp count by
:func:`_step_launch` so that a ``[BLOCK_S, BLOCK_A]`` tile is at most 32 elements per thread (with
4 warps and 16 columns, 1024 slots and more spilled registers on sm_90: ``recurbench bench kernels``).
The insert and the relevant-set update are applied to the tiles in registers before attention (so
the result never depends on whether a thread saw a row before or after it was rewritten), then
written back in place after a barrier.
Semantics are exactly :func:`recurbench.kernels.memattn.naive.memory_attention_step_reference`;
this path has no backward and is used for acting and evaluation (no gradients).

This module imports triton; nothing imports it at package import time.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from recurbench.kernels.launch import KernelLaunch
from recurbench.kernels.memattn.naive import MemoryStep


@triton.jit
def _memattn_step_kernel(
    q_ptr, k_ptr, v_ptr, sc_ptr, valid_ptr, steps_ptr, nk_ptr, nv_ptr, w_ptr, read_ptr, alpha_ptr,
    S, A, H, NU,
    BLOCK_S: tl.constexpr, BLOCK_A: tl.constexpr, BLOCK_H: tl.constexpr, HAS_RELEVANT: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    slots = tl.arange(0, BLOCK_S)
    in_s = slots < S
    steps = tl.load(steps_ptr + b)
    insert = steps > 0.5
    pos = (tl.maximum(steps - 1.0, 0.0).to(tl.int32)) % NU
    sc = tl.load(sc_ptr + b * S + slots, mask=in_s, other=0.0)
    valid = tl.load(valid_ptr + b * S + slots, mask=in_s, other=0.0)
    is_pos = slots == pos
    evict = insert & (tl.sum(tl.where(is_pos, valid, 0.0), axis=0) > 0.5)
    cand_score = tl.sum(tl.where(is_pos, sc, 0.0), axis=0)
    if HAS_RELEVANT:
        in_r = (slots >= NU) & in_s
        member = tl.where(in_r, tl.where(valid > 0.5, sc, float("-inf")), float("inf"))
        lowest = tl.min(member, axis=0)
        # first index of the minimum (ties -> lowest slot), as torch.argmin
        j = tl.min(tl.where(member == lowest, slots, BLOCK_S), axis=0)
        enters = evict & (cand_score > lowest)
    else:
        j = 0
        enters = evict & (cand_score < float("-inf"))  # never: no relevant set
    # (scalar flags are broadcast to vectors before `&`: the interpreter cannot `&` a vector and a scalar)
    zero_s = tl.zeros([BLOCK_S], dtype=tl.int32)
    is_rel = (slots == j) & ((zero_s + enters.to(tl.int32)) != 0)
    is_new = is_pos & ((zero_s + insert.to(tl.int32)) != 0)
    sc = tl.where(is_new, 0.0, tl.where(is_rel, cand_score, sc))
    valid = tl.where(is_new | is_rel, 1.0, valid)
    occupied = (valid > 0.5) & in_s

    # scores e_i = v' tanh(q + k_i), accumulated over column chunks; rows rewritten after a barrier
    e = tl.zeros([BLOCK_S], dtype=tl.float32)
    for a0 in range(0, A, BLOCK_A):
        cols = a0 + tl.arange(0, BLOCK_A)
        in_a = cols < A
        kt = tl.load(k_ptr + b * S * A + slots[:, None] * A + cols[None, :],
                     mask=in_s[:, None] & in_a[None, :], other=0.0).to(tl.float32)
        cand = tl.load(k_ptr + b * S * A + pos * A + cols, mask=in_a, other=0.0).to(tl.float32)
        new = tl.load(nk_ptr + b * A + cols, mask=in_a, other=0.0).to(tl.float32)
        kt = tl.where(is_new[:, None], new[None, :], tl.where(is_rel[:, None], cand[None, :], kt))
        q = tl.load(q_ptr + b * A + cols, mask=in_a, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=in_a, other=0.0).to(tl.float32)
        x = q[None, :] + kt
        th = 2.0 * tl.sigmoid(2.0 * x) - 1.0  # tanh
        e += tl.sum(th * w[None, :], axis=1)
        tl.debug_barrier()
        tl.store(k_ptr + b * S * A + j * A + cols, cand, mask=in_a & ((cols * 0 + enters.to(tl.int32)) != 0))
        tl.store(k_ptr + b * S * A + pos * A + cols, new, mask=in_a & ((cols * 0 + insert.to(tl.int32)) != 0))

    e = tl.where(occupied, e, float("-inf"))
    m = tl.max(e, axis=0)
    m = tl.where(m == float("-inf"), 0.0, m)
    p = tl.where(occupied, tl.exp(e - m), 0.0)
    denom = tl.sum(p, axis=0)
    alpha = p / tl.where(denom > 0.0, denom, 1.0)
    tl.store(alpha_ptr + b * S + slots, alpha, mask=in_s)

    for h0 in range(0, H, BLOCK_H):
        cols = h0 + tl.arange(0, BLOCK_H)
        in_h = cols < H
        vt = tl.load(v_ptr + b * S * H + slots[:, None] * H + cols[None, :],
                     mask=in_s[:, None] & in_h[None, :], other=0.0).to(tl.float32)
        cand = tl.load(v_ptr + b * S * H + pos * H + cols, mask=in_h, other=0.0).to(tl.float32)
        new = tl.load(nv_ptr + b * H + cols, mask=in_h, other=0.0).to(tl.float32)
        vt = tl.where(is_new[:, None], new[None, :], tl.where(is_rel[:, None], cand[None, :], vt))
        r = tl.sum(alpha[:, None] * vt, axis=0)
        tl.store(read_ptr + b * H + cols, r, mask=in_h)
        tl.debug_barrier()
        tl.store(v_ptr + b * S * H + j * H + cols, cand, mask=in_h & ((cols * 0 + enters.to(tl.int32)) != 0))
        tl.store(v_ptr + b * S * H + pos * H + cols, new, mask=in_h & ((cols * 0 + insert.to(tl.int32)) != 0))

    sc = sc + tl.where(slots < NU, alpha, 0.0)
    tl.store(sc_ptr + b * S + slots, sc, mask=in_s)
    tl.store(valid_ptr + b * S + slots, valid, mask=in_s)


def memory_attention_step_triton(
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
) -> MemoryStep:
    """The fused step; ``keys``, ``values``, ``scores`` and ``valid`` are updated in place."""
    B, S, A = keys.shape
    H = values.shape[2]
    for name, t in (("keys", keys), ("values", values), ("scores", scores), ("valid", valid)):
        if not t.is_contiguous():
            raise ValueError(f"memory_attention_step (triton): {name} must be contiguous (it is updated in place)")
    query, new_key, new_value, v, steps = (
        x.contiguous() for x in (query, new_key, new_value, v, steps.to(torch.float32))
    )
    read = torch.empty(B, H, device=keys.device, dtype=values.dtype)
    alpha = torch.empty(B, S, device=keys.device, dtype=torch.float32)
    launch = _step_launch(query, keys, values, scores, valid, steps, new_key, new_value, v, read, alpha, nu=nu)
    launch.kernel[launch.grid](*launch.args, **launch.meta)
    return MemoryStep(read, alpha.to(values.dtype), keys, values, scores, valid)


def _step_launch(
    query: Tensor, keys: Tensor, values: Tensor, scores: Tensor, valid: Tensor, steps: Tensor, new_key: Tensor,
    new_value: Tensor, v: Tensor, read: Tensor, alpha: Tensor, *, nu: int,
) -> KernelLaunch:
    """The step's launch: one program per environment, one warp per 32 slots (4 to 16 warps), and
    column blocks of at most 32 tile elements per thread."""
    B, S, A = keys.shape
    H = values.shape[2]
    block_s = triton.next_power_of_2(S)
    num_warps = min(16, max(4, block_s // 32))
    tile = 32 * 32 * num_warps
    block_a = min(triton.next_power_of_2(A), max(1, tile // block_s))
    block_h = min(triton.next_power_of_2(H), max(1, tile // block_s))
    return KernelLaunch(
        _memattn_step_kernel, (B,),
        (query, keys, values, scores, valid, steps, new_key, new_value, v, read, alpha, S, A, H, nu),
        dict(BLOCK_S=block_s, BLOCK_A=block_a, BLOCK_H=block_h, HAS_RELEVANT=S > nu, num_warps=num_warps),
    )


def step_launches(batch: int, slots: int, attention_size: int, hidden_size: int, nu: int, *,
                  device: torch.device | str = "meta") -> list[KernelLaunch]:
    """The launches :func:`memory_attention_step_triton` makes for a memory of this size (fp32 tensors
    on ``device``; ``meta`` for compiling ahead of time, :mod:`recurbench.kernels.compile`)."""
    def empty(*shape: int) -> Tensor:
        return torch.empty(*shape, device=device)

    B, S, A, H = batch, slots, attention_size, hidden_size
    return [_step_launch(empty(B, A), empty(B, S, A), empty(B, S, H), empty(B, S), empty(B, S), empty(B),
                         empty(B, A), empty(B, H), empty(A), empty(B, H), empty(B, S), nu=nu)]
