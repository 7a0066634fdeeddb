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

import functools

import torch

from recurbench.kernels.rem.heads import HeadLayout, kernel_values, signed_lags


def rem_table_matrices(
    layout: HeadLayout,
    base: torch.Tensor,
    angle: torch.Tensor,
    *,
    n_keys: int,
    masked: bool,
    query_positions: torch.Tensor | range | None = None,
    truncate: int | None = None,
) -> torch.Tensor:
    """Same contract and result as :func:`recurbench.kernels.rem.naive.rem_dense_matrices`:
    ``[H, Tq, Tk]`` (positions ``None``, a ``range`` or ``[Tq]``) or ``[B, H, Tq, Tk]`` (``[B, Tq]`` or
    ``[B, Tq, H]``). For ``None`` or a ``range`` the index is built once per shape and kept
    (:func:`static_table_index`): it depends on nothing that changes between steps."""
    H = layout.n_heads
    if query_positions is None or isinstance(query_positions, range):
        index, n_table = static_table_index(layout.dilations, _range_key(query_positions), n_keys, masked, base.device)
    else:
        index, n_table = table_index(layout.dilations, query_positions, n_keys, masked, base.device)
    table = kernel_values(base, angle, layout.coef(base.dtype, base.device), n_table, truncate)  # [H, n_table]
    if index.dim() == 3:
        return table.gather(1, index.reshape(H, -1)).view(index.shape)
    B = index.shape[0]
    flat = index.permute(1, 0, 2, 3).reshape(H, -1)  # [H, B Tq Tk]
    return table.gather(1, flat).view(H, B, *index.shape[2:]).transpose(0, 1)


def table_index(
    dilations: tuple[int, ...], query_positions: torch.Tensor | None, n_keys: int, masked: bool, device: torch.device,
    n_table: int | None = None,
) -> tuple[torch.Tensor, int]:
    """For every entry of P_h, the exponent to read from head h's kernel table (0, i.e. f(0) = 0, where
    the entry is off the dilation grid, masked or on the diagonal), broadcast to ``[H, Tq, Tk]`` or
    ``[B, H, Tq, Tk]``; and the table length needed (read off the index unless ``n_table`` is given)."""
    H = len(dilations)
    lag = signed_lags(query_positions, n_keys, device)
    dil = torch.tensor(dilations, device=device).view(H, 1, 1)
    dist = lag.abs()
    exponent = dist // dil  # broadcasts to [H, Tq, Tk] or [B, H, Tq, Tk]
    on = (dist % dil) == 0
    if masked:
        on = on & (lag > 0)
    # Entries beyond ``truncate`` read zeros too (kernel_values zeroes them).
    index = torch.where(on, exponent, torch.zeros((), dtype=exponent.dtype, device=device))
    if n_table is None:
        n_table = int(index.max()) + 1 if index.numel() else 1
    return index, n_table


STATIC_INDEX_MAX_ENTRIES = 1 << 21
""":func:`static_table_index` keeps indexes up to this many entries (16 MiB of int64)."""


def _range_key(positions: range | None) -> tuple[int, int, int] | None:
    return None if positions is None else (positions.start, positions.stop, positions.step)


def static_table_index(
    dilations: tuple[int, ...], positions: tuple[int, int, int] | None, n_keys: int, masked: bool, device: torch.device
) -> tuple[torch.Tensor, int]:
    """:func:`table_index` for static query positions (``None``: square; else a range's start, stop,
    step), computed once per argument set: the integer divisions over every entry cost about as much
    as the mixing itself at T = 96."""
    rows = n_keys if positions is None else len(range(*positions))
    if torch.compiler.is_compiling() or len(dilations) * rows * n_keys > STATIC_INDEX_MAX_ENTRIES:
        return _static_index(dilations, positions, n_keys, masked, device)
    return _cached_static_index(dilations, positions, n_keys, masked, device)


def _static_index(dilations, positions, n_keys, masked, device):
    pos_range = range(n_keys) if positions is None else range(*positions)
    pos = None if positions is None else torch.arange(*positions, device=device)
    # The table length from the shapes alone (no tensor read back): the largest |p - s| over the
    # smallest dilation bounds every exponent.
    max_lag = max(abs(p - s) for p in (pos_range[0], pos_range[-1]) for s in (0, n_keys - 1)) if pos_range and n_keys else 0
    return table_index(dilations, pos, n_keys, masked, device, n_table=max_lag // min(dilations) + 1)


_cached_static_index = functools.lru_cache(maxsize=64)(_static_index)
