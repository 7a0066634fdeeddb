"""Dense reference: build every REM P_h as a matrix, as in RSA paper App. D.1 / D.2, then P_h @ V_h.

App. D.1 builds an exponent matrix L with L_ij = |i - j|, replaces it by L_d = 1{L mod d = 0} L / d for
dilated REMs, and forms D = lambda**L_d (regular) or gamma**L_d * cos/sin(theta * L_d) (cyclical),
P = D - I, with entries of exponent > K masked. Taken literally that formula has three slips, which
this reference corrects to the definitions of Sec. 2-3 (the matrices the paper actually means):

1. the diagonal: P has zeros there (eq. 3); ``D - I`` would leave -1 on the diagonal of the sin REM;
2. dilation: entries with L mod d != 0 are 0 (the first T rows/columns of P kron I_d, Sec. 3), whereas
   lambda**0 would put 1 there;
3. masked REMs keep only the strictly lower triangle (eq. 3); unmasked ones are P + P' (Sec. 3), i.e.
   every off-diagonal entry, f(|i - j|).

Non-square (App. D.2): the query at key-space position p and the key at s get L = |p - s| (masked: only
p > s). Truncation at K zeroes the entries whose *exponent* (L_d) exceeds K, as App. D.1 states.

This is the test oracle and the "paper" baseline of the benchmark; it costs O(Tq * Tk) memory per head.
"""

from __future__ import annotations

import torch

from recurbench.kernels.rem.heads import HeadLayout, signed_lags


def rem_dense_matrices(
    layout: HeadLayout,
    base: torch.Tensor,
    angle: torch.Tensor,
    *,
    n_keys: int,
    masked: bool,
    query_positions: torch.Tensor | None = None,
    truncate: int | None = None,
) -> torch.Tensor:
    """The REMs as dense matrices: ``[H, Tq, Tk]`` (positions ``None`` or ``[Tq]``), ``[B, H, Tq, Tk]``
    (positions ``[B, Tq]``) or ``[B, H, Tq, Tk]`` with per-head rows (positions ``[B, Tq, H]``)."""
    device = base.device
    lag = signed_lags(query_positions, n_keys, device)  # p - s, with a head axis (ProbSparse rows per head)
    L = lag.abs()

    mats = []
    for h, (kind, d) in enumerate(zip(layout.kinds, layout.dilations, strict=True)):
        lag_h = lag[..., h, :, :] if lag.shape[-3] > 1 else lag[..., 0, :, :]
        L_h = L[..., h, :, :] if L.shape[-3] > 1 else L[..., 0, :, :]
        on_grid = (L_h % d) == 0
        L_d = torch.where(on_grid, L_h // d, torch.zeros_like(L_h)).to(base.dtype)  # App. D.1's L_d
        D = torch.pow(base[h], L_d)
        if kind == "cos":
            D = D * torch.cos(angle[h] * L_d)
        elif kind == "sin":
            D = D * torch.sin(angle[h] * L_d)
        keep = on_grid & (L_h > 0)
        if masked:
            keep = keep & (lag_h > 0)
        if truncate is not None:
            keep = keep & (L_d <= truncate)
        mats.append(torch.where(keep, D, torch.zeros((), dtype=D.dtype, device=device)))
    return torch.stack(mats, dim=-3)


def rem_naive(
    v: torch.Tensor,
    layout: HeadLayout,
    base: torch.Tensor,
    angle: torch.Tensor,
    *,
    masked: bool,
    query_positions: torch.Tensor | None = None,
    truncate: int | None = None,
) -> torch.Tensor:
    """P_h @ V_h with dense P: ``v`` is ``[B, Tk, H, D]``, the result ``[B, Tq, H, D]``."""
    P = rem_dense_matrices(
        layout, base, angle, n_keys=v.shape[1], masked=masked, query_positions=query_positions, truncate=truncate
    )
    out = torch.matmul(P, v.transpose(1, 2))  # [B, H, Tq, D]
    return out.transpose(1, 2)
