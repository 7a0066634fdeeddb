"""The REM operator P_h V_h (RSA paper, Sec. 2-3, App. D) behind one public function, :func:`rem_apply`.

Layout: ``v`` is ``[B, Tk, H, D]``; the result is ``[B, Tq, H, D]``. Head h has its own REM:

========== =========================== ==================================
kind       f_h(k), k = lag / d_h        parameters (per head, shape [H])
========== =========================== ==================================
regular    lambda**k                    lambda = tanh(eta)
cos        gamma**k cos(k theta)        gamma = sigmoid(nu), theta
sin        gamma**k sin(k theta)        gamma = sigmoid(nu), theta
========== =========================== ==================================

with dilation d_h (``1`` = undilated): P_h[p, s] = f_h(|p - s| / d_h) when d_h divides p - s, else 0.
``masked=True`` keeps only s < p (lower-triangular REM, zero diagonal, eq. 3); ``masked=False`` is the
bidirectional P + P' (Sec. 3). Entries of ``eta``/``nu``/``theta`` at heads of another kind are ignored
(and get zero gradient), so one ``[H]`` tensor per parameter serves any mix of kinds.

Non-square attention (App. D.2): ``query_positions`` gives the key-space position p of every query row,
as ``[Tq]``, ``[B, Tq]`` or ``[B, Tq, H]`` (e.g. Informer's ProbSparse top-u rows per batch and head);
default ``arange(Tk)``. Transformer-XL with memory M: ``arange(M, M + L)``; cross-attention: the decoder
steps' positions in the encoder's frame (they may lie beyond ``Tk - 1``, or before 0). Internally the
values are zero-padded over the positions' span, computed at every position, then gathered (exact;
O(span) work).

``truncate=K`` zeroes entries whose exponent (lag / d) exceeds K, reproducing App. D.1's K = 200;
``None`` is exact at all lags.

Implementations (``impl``): ``"naive"`` (dense matrices, the reference), ``"chunked"`` (O(T) PyTorch,
default on CPU), ``"triton"`` (CUDA kernels; default on CUDA when triton is installed). All three are
differentiable in ``v``, ``eta``, ``nu`` and ``theta``. Half-precision inputs are computed in float32
by the chunked path and cast back.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from recurbench.kernels.rem.chunked import DEFAULT_CHUNK, rem_chunked_square
from recurbench.kernels.rem.heads import KINDS, HeadLayout, head_params, make_layout, normalize_positions
from recurbench.kernels.rem.naive import rem_naive

__all__ = ["KINDS", "IMPLS", "rem_apply"]

IMPLS = ("naive", "chunked", "triton")


def rem_apply(
    v: torch.Tensor,
    *,
    kind: str | Sequence[str],
    eta: torch.Tensor | float | None = None,
    nu: torch.Tensor | float | None = None,
    theta: torch.Tensor | float | None = None,
    dilation: int | Sequence[int] = 1,
    masked: bool,
    query_positions: torch.Tensor | None = None,
    truncate: int | None = None,
    impl: str | None = None,
    chunk_size: int | None = None,
) -> torch.Tensor:
    """P_h V_h for every head: ``v`` ``[B, Tk, H, D]`` -> ``[B, Tq, H, D]`` (see the module docstring).

    ``kind``/``dilation`` are one value for all heads or one per head; ``eta``/``nu``/``theta`` are
    scalars or ``[H]`` tensors. ``impl`` overrides the device default; ``chunk_size`` tunes the
    chunked/Triton block length."""
    if v.dim() != 4:
        raise ValueError(f"v must be [B, T, H, D], got shape {tuple(v.shape)}")
    B, Tk, H, _ = v.shape
    layout = make_layout(kind, dilation, H)
    if truncate is not None and (isinstance(truncate, bool) or not isinstance(truncate, int) or truncate < 0):
        raise ValueError(f"truncate must be None or an integer >= 0, got {truncate!r}")
    impl = _resolve_impl(impl, v)
    compute_dtype = v.dtype if v.dtype in (torch.float32, torch.float64) else torch.float32
    base, angle = head_params(layout, eta, nu, theta, compute_dtype, v.device)
    pos = normalize_positions(query_positions, B, Tk, H, v.device)
    x = v.to(compute_dtype)

    if impl == "naive":
        out = rem_naive(x, layout, base, angle, masked=masked, query_positions=pos, truncate=truncate)
        return out.to(v.dtype)

    # Square computation over the span of all positions, then gather the query rows.
    lo, hi = 0, Tk
    if pos is not None and pos.numel() > 0:
        lo, hi = min(0, int(pos.min())), max(Tk, int(pos.max()) + 1)
    if lo < 0 or hi > Tk:
        x = torch.nn.functional.pad(x, (0, 0, 0, 0, -lo, hi - Tk))
    full = _square(x, layout, base, angle, masked, truncate, impl, chunk_size)  # [B, hi - lo, H, D]
    out = full if pos is None else _gather_rows(full, pos - lo)
    return out.to(v.dtype)


def _resolve_impl(impl: str | None, v: torch.Tensor) -> str:
    if impl is None:
        if v.is_cuda:
            try:
                import triton  # noqa: F401
            except ImportError:
                return "chunked"
            return "triton"
        return "chunked"
    if impl not in IMPLS:
        raise ValueError(f"unknown impl {impl!r}; expected one of {IMPLS}")
    return impl


def _square(x, layout: HeadLayout, base, angle, masked, truncate, impl, chunk_size):
    if impl == "triton":
        from recurbench.kernels.rem.triton import rem_triton_square

        return rem_triton_square(x, layout, base, angle, masked=masked, truncate=truncate, chunk_size=chunk_size)
    return rem_chunked_square(
        x, layout, base, angle, masked=masked, truncate=truncate, chunk_size=chunk_size or DEFAULT_CHUNK
    )


def _gather_rows(full: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """Rows ``[Tq]``, ``[B, Tq]`` or ``[B, Tq, H]`` of ``full`` ``[B, T, H, D]`` -> ``[B, Tq, H, D]``."""
    B, _, H, D = full.shape
    if rows.dim() == 1:
        return full.index_select(1, rows)
    if rows.dim() == 2:
        rows = rows[:, :, None]
    index = rows[..., None].expand(B, rows.shape[1], H, D)
    return full.gather(1, index)
