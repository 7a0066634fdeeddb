"""Per-head REM description shared by every implementation of the operator.

Each head h has a kind (``"regular"``, ``"cos"``, ``"sin"``), a dilation d_h >= 1 and, internally, a
complex "eigenvalue" z_h = base_h * exp(i * angle_h) with a coefficient c_h, so that its REM entry at
exponent k >= 1 is f_h(k) = Re(c_h * z_h**k) (RSA paper, eqs. 2-3):

* regular: base = lambda = tanh(eta) (may be negative), angle = 0, c = 1      -> lambda**k
* cos:     base = gamma = sigmoid(nu), angle = theta,            c = 1      -> gamma**k cos(k theta)
* sin:     base = gamma = sigmoid(nu), angle = theta,            c = -i     -> gamma**k sin(k theta)

Powers are always taken with non-negative integer exponents of a base with |base| <= 1, so nothing
here can overflow; a negative lambda keeps its parity because ``torch.pow`` of a negative base with an
integral exponent is exact, and ``pow(0, 0) = 1`` with a zero gradient, so lambda = 0 is safe too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

KINDS = ("regular", "cos", "sin")


@dataclass(frozen=True)
class HeadLayout:
    """The static part of a REM configuration: one kind and one dilation per head."""

    kinds: tuple[str, ...]
    dilations: tuple[int, ...]

    @property
    def n_heads(self) -> int:
        return len(self.kinds)

    def coef(self, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """``[H, 2]`` real and imaginary part of c_h (1 for regular/cos, -i for sin)."""
        rows = [(0.0, -1.0) if kind == "sin" else (1.0, 0.0) for kind in self.kinds]
        return torch.tensor(rows, dtype=dtype, device=device)


def make_layout(kind: str | Sequence[str], dilation: int | Sequence[int], n_heads: int) -> HeadLayout:
    """Broadcast a single kind/dilation to all heads and check everything; errors name the bad value."""
    kinds = (kind,) * n_heads if isinstance(kind, str) else tuple(kind)
    if len(kinds) != n_heads:
        raise ValueError(f"kind has {len(kinds)} entries but v has {n_heads} heads")
    for k in kinds:
        if k not in KINDS:
            raise ValueError(f"unknown REM kind {k!r}; expected one of {KINDS}")
    dilations = (dilation,) * n_heads if isinstance(dilation, int) else tuple(dilation)
    if len(dilations) != n_heads:
        raise ValueError(f"dilation has {len(dilations)} entries but v has {n_heads} heads")
    for d in dilations:
        if isinstance(d, bool) or not isinstance(d, int) or d < 1:
            raise ValueError(f"dilation must be an integer >= 1, got {d!r}")
    return HeadLayout(kinds, dilations)


def head_params(
    layout: HeadLayout,
    eta: torch.Tensor | None,
    nu: torch.Tensor | None,
    theta: torch.Tensor | None,
    dtype: torch.dtype,
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(base, angle)``, each ``[H]``, differentiable in eta/nu/theta (entries of other kinds ignored)."""
    H = layout.n_heads
    is_reg = torch.tensor([k == "regular" for k in layout.kinds], device=device)
    zeros = torch.zeros(H, dtype=dtype, device=device)

    def per_head(name: str, x: torch.Tensor | float | None, needed: bool) -> torch.Tensor:
        if x is None:
            if needed:
                raise ValueError(f"{name} is required by the head kinds {layout.kinds}")
            return zeros
        x = torch.as_tensor(x, device=device).to(dtype)
        if x.dim() == 0:
            x = x.expand(H)
        if x.shape != (H,):
            raise ValueError(f"{name} must be a scalar or have shape [{H}], got {tuple(x.shape)}")
        return x

    # From the layout, not from is_reg: reading a device tensor back would synchronise with the GPU on
    # every call and break torch.compile's graph (a data-dependent branch).
    any_reg = "regular" in layout.kinds
    any_cyc = any(k != "regular" for k in layout.kinds)
    eta_h = per_head("eta", eta, any_reg)
    nu_h = per_head("nu", nu, any_cyc)
    theta_h = per_head("theta", theta, any_cyc)
    base = torch.where(is_reg, torch.tanh(eta_h), torch.sigmoid(nu_h))
    angle = torch.where(is_reg, zeros, theta_h)
    return base, angle


def powers(base: torch.Tensor, angle: torch.Tensor, exponents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """z**k for every head and exponent: ``(re, im)``, each ``[H, len(exponents)]``.

    ``exponents`` holds non-negative integers (as floats of the params' dtype)."""
    k = exponents.to(base.dtype)[None, :]
    mag = torch.pow(base[:, None], k)
    phase = angle[:, None] * k
    return mag * torch.cos(phase), mag * torch.sin(phase)


def kernel_values(
    base: torch.Tensor, angle: torch.Tensor, coef: torch.Tensor, n: int, truncate: int | None
) -> torch.Tensor:
    """f_h(k) = Re(c_h z_h**k) for k = 0..n-1 as ``[H, n]``; f(0) = 0 and f(k) = 0 beyond ``truncate``."""
    k = torch.arange(n, device=base.device)
    re, im = powers(base, angle, k)
    f = coef[:, :1] * re - coef[:, 1:] * im
    keep = k > 0
    if truncate is not None:
        keep = keep & (k <= truncate)
    return f * keep.to(f.dtype)


def signed_lags(query_positions: torch.Tensor | None, n_keys: int, device: torch.device) -> torch.Tensor:
    """p - s for every query position p and key s, with a head axis: ``[1, Tq, Tk]`` (positions ``None``
    or ``[Tq]``), ``[B, 1, Tq, Tk]`` (``[B, Tq]``) or ``[B, H, Tq, Tk]`` (per-head rows ``[B, Tq, H]``)."""
    keys = torch.arange(n_keys, device=device)
    pos = keys if query_positions is None else query_positions
    if pos.dim() == 1:
        return (pos[:, None] - keys[None, :])[None]
    if pos.dim() == 2:
        return (pos[:, :, None] - keys[None, None, :])[:, None]
    return (pos[:, :, :, None] - keys[None, None, None, :]).permute(0, 2, 1, 3)


def normalize_positions(
    query_positions: torch.Tensor | None, batch: int, n_keys: int, n_heads: int, device: torch.device
) -> torch.Tensor | None:
    """Check ``query_positions`` and return it as a LongTensor ``[Tq]``, ``[B, Tq]`` or ``[B, Tq, H]``
    (``None`` stays ``None``: the square case, queries at 0..Tk-1)."""
    if query_positions is None:
        return None
    pos = torch.as_tensor(query_positions, device=device)
    if pos.dtype.is_floating_point or pos.dtype == torch.bool:
        raise ValueError(f"query_positions must be an integer tensor, got {pos.dtype}")
    pos = pos.long()
    if pos.dim() == 1:
        return pos
    if pos.dim() == 2 and pos.shape[0] == batch:
        return pos
    if pos.dim() == 3 and pos.shape[0] == batch and pos.shape[2] == n_heads:
        return pos
    raise ValueError(
        f"query_positions must be [Tq], [B={batch}, Tq] or [B={batch}, Tq, H={n_heads}], got {tuple(pos.shape)}"
    )
