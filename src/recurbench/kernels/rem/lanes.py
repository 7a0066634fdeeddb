"""RSA's eq. 4 for square self-attention on short sequences, fused: ``s * A + sum_h P_h V_h``.

For T up to a few hundred steps the O(T) machinery of :mod:`.chunked` (chunks, carried states) costs
more in small operations than it saves, and the dense reference multiplies T x T matrices that are
mostly zero for dilated heads. This path uses two facts instead:

* a dilated REM only links positions in the same residue class mod d, with exponent lag / d, so head h
  is an undilated REM over ceil(T / d) steps applied to each of its d lanes. In a head-major buffer
  ``[H, T, B D]`` the lanes of one step are adjacent, so ``V_h`` viewed as ``[T / d, d B D]`` is
  multiplied by one small ``[T / d, T / d]`` matrix: d times fewer operations than the dense T x T;
* the matrix P_h (gated, ``g P_h``) is shared by the whole batch, so one wide ``bmm`` per group of
  consecutive heads with the same dilation does the work, and the baseline attention's share
  ``s A = (1 - g) A`` is added in the same output pass.

The backward pass is written out (one product each for dV and dP, one pass each for dA and ds), which
is what makes this cheap on a CPU; the small matrices' gradients flow back to eta/nu/theta through
autograd (:func:`recurbench.kernels.rem.dense.rem_table_matrices`). Tested against the dense
reference (values and gradients, ``gradcheck`` in fp64).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

Group = tuple[int, int, int]
"""(first head, end head, dilation): a run of consecutive heads with one dilation."""


def head_groups(dilations: Sequence[int]) -> tuple[Group, ...]:
    """Maximal runs of consecutive heads sharing a dilation."""
    groups: list[Group] = []
    start = 0
    for h in range(1, len(dilations) + 1):
        if h == len(dilations) or dilations[h] != dilations[start]:
            groups.append((start, h, dilations[start]))
            start = h
    return tuple(groups)


def lane_steps(seq_len: int, dilation: int) -> int:
    """Steps per lane: ceil(T / d)."""
    return -(-seq_len // dilation)


def _to_lanes(x: torch.Tensor, h0: int, h1: int, d: int) -> torch.Tensor:
    """Heads h0:h1 of ``x`` ``[B, T, H, D]`` as ``[Hg, n, d B D]`` (n = ceil(T / d), zero-padded)."""
    B, T, _, D = x.shape
    n = lane_steps(T, d)
    buf = torch.empty(h1 - h0, n * d, B, D, dtype=x.dtype, device=x.device)
    buf[:, :T].copy_(x[:, :, h0:h1].permute(2, 1, 0, 3))
    if n * d > T:
        buf[:, T:].zero_()
    return buf.view(h1 - h0, n, d * B * D)


def _from_lanes(y: torch.Tensor, T: int, B: int, D: int) -> torch.Tensor:
    """``[Hg, n, d B D]`` -> the ``[B, T, Hg, D]`` view of its first T steps."""
    Hg = y.shape[0]
    return y.view(Hg, -1, B, D)[:, :T].permute(2, 1, 0, 3)


class _LaneMix(torch.autograd.Function):
    @staticmethod
    def forward(ctx, attn, v, scale, groups, *mats):  # type: ignore[override]
        B, T, H, D = v.shape
        out = torch.empty(B, T, H, D, dtype=v.dtype, device=v.device)
        s = float(scale)  # a CPU path: reading the scalar costs nothing, and saves a pass over out
        lanes = []
        for (h0, h1, d), P in zip(groups, mats, strict=True):
            x = _to_lanes(v, h0, h1, d)
            # The groups tile the heads, so every entry of out is written exactly once: P V + s A.
            torch.add(_from_lanes(torch.bmm(P, x), T, B, D), attn[:, :, h0:h1], alpha=s, out=out[:, :, h0:h1])
            lanes.append(x)
        ctx.groups = groups
        ctx.save_for_backward(attn, scale, *mats, *lanes)
        return out

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        groups = ctx.groups
        attn, scale, *rest = ctx.saved_tensors
        mats, lanes = rest[: len(groups)], rest[len(groups):]
        B, T, H, D = grad.shape
        need_attn, need_v, need_scale = ctx.needs_input_grad[:3]
        d_attn = grad * scale if need_attn else None
        d_scale = torch.tensordot(grad, attn, dims=4).reshape(scale.shape) if need_scale else None
        d_v = torch.empty(B, T, H, D, dtype=grad.dtype, device=grad.device) if need_v else None
        d_mats = []
        for i, ((h0, h1, d), P, x) in enumerate(zip(groups, mats, lanes, strict=True)):
            g = _to_lanes(grad, h0, h1, d)
            if need_v:
                d_v[:, :, h0:h1] = _from_lanes(torch.bmm(P.mT, g), T, B, D)
            d_mats.append(torch.bmm(g, x.mT) if ctx.needs_input_grad[4 + i] else None)
        return (d_attn, d_v, d_scale, None, *d_mats)


def rem_lanes_mix(
    attn: torch.Tensor, v: torch.Tensor, scale: torch.Tensor, groups: tuple[Group, ...], mats: Sequence[torch.Tensor]
) -> torch.Tensor:
    """``scale * attn + P V`` for square self-attention: ``attn``, ``v`` ``[B, T, H, D]``, ``scale`` a
    0-dim tensor, ``groups`` from :func:`head_groups`, ``mats[i]`` ``[Hg, n, n]`` the (gated) undilated
    REMs of group i over n = ceil(T / d) lane steps. Returns a contiguous ``[B, T, H, D]``."""
    return _LaneMix.apply(attn, v, scale, tuple(groups), *mats)
