"""The REMs as dense matrices, read off each head's kernel table.

Every entry of P_h is f_h(k) = Re(c_h z_h**k) at an integer exponent k = |p - s| / d_h (or 0), so the
matrix is a gather from the table f_h(0..K) (:func:`recurbench.kernels.rem.heads.kernel_values`,
f(0) = 0) with an integer index that depends only on the shapes, positions, dilations and masking.
Unlike :mod:`naive` (App. D.1 step by step, the reference this is tested against), no power or cosine
is evaluated per matrix entry, and the backward pass is one scatter-add into the table. Its cost is
O(H Tq Tk), so it serves short sequences: the small per-lane REMs of the fused mix (:mod:`.lanes`) and
:func:`recurbench.kernels.rem.rem_matrices`; the O(T) operator is :func:`recurbench.kernels.rem.rem_apply`.
"""

from __future__ import annotations

import torch

from recurbench.kernels.rem.heads import HeadLayout, kernel_values, signed_lags


def rem_table_matrices(
    layout: HeadLayout,
    base: torch.Tensor,
    angle: torch.Tensor,
    *,
    n_keys: int,
    masked: bool,
    query_positions: torch.Tensor | None = None,
    truncate: int | None = None,
) -> torch.Tensor:
    """Same contract and result as :func:`recurbench.kernels.rem.naive.rem_dense_matrices`:
    ``[H, Tq, Tk]`` (positions ``None`` or ``[Tq]``) or ``[B, H, Tq, Tk]`` (``[B, Tq]`` or ``[B, Tq, H]``)."""
    device = base.device
    H = layout.n_heads
    lag = signed_lags(query_positions, n_keys, device)
    dil = torch.tensor(layout.dilations, device=device).view(H, 1, 1)
    dist = lag.abs()
    exponent = dist // dil  # broadcasts to [H, Tq, Tk] or [B, H, Tq, Tk]
    on = (dist % dil) == 0
    if masked:
        on = on & (lag > 0)
    # Index 0 of the table is f(0) = 0: off-grid, masked and diagonal entries all read it. Entries
    # beyond ``truncate`` read zeros too (kernel_values zeroes them).
    index = torch.where(on, exponent, torch.zeros((), dtype=exponent.dtype, device=device))
    n_table = int(index.max()) + 1 if index.numel() else 1
    table = kernel_values(base, angle, layout.coef(base.dtype, device), n_table, truncate)  # [H, n_table]
    if index.dim() == 3:
        return table.gather(1, index.reshape(H, -1)).view(index.shape)
    B = index.shape[0]
    flat = index.permute(1, 0, 2, 3).reshape(H, -1)  # [H, B Tq Tk]
    return table.gather(1, flat).view(H, B, *index.shape[2:]).transpose(0, 1)
