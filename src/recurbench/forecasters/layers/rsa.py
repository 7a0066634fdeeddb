"""Self-Attention with Recurrence (RSA paper, Sec. 3, eq. 4), for any baseline attention.

Per head h:  out_h = (1 - sigma(mu)) A_h + sigma(mu) P_h V_h,  with one gate mu per layer.

A baseline attention (SDPA, ProbSparse, LogSparse-masked, XL relative...) computes its per-head
output ``A`` as ``[B, Tq, H, D]``; :class:`RSAMixer` adds the REM term computed by
:func:`recurbench.kernels.rem.rem_apply` in O(T). Heads are assigned REM kinds by a
:class:`REMHeadConfig` (the paper's k1..k6 and dilations, Table 5).

The mixing itself is :func:`recurbench.kernels.rem.rem_mix` (fused for short square self-attention
on a CPU), or, where the attention materialises its weights (short sequences on a CPU, Transformer-XL),
:meth:`RSAMixer.mix_weights`: ``(1 - sigma(mu)) A + sigma(mu) P`` before the product with V.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import torch
from torch import nn

from recurbench.errors import ConfigError
from recurbench.forecasters.layers.attention import AttentionLayer, FullAttention
from recurbench.kernels.rem import rem_apply, rem_mix, rem_mix_weights

# (kind, dilated) of k1..k6, in the paper's order (Sec. 3, "Hyperparameters k_i and d").
HEAD_TYPES = (("regular", False), ("cos", False), ("sin", False), ("regular", True), ("cos", True), ("sin", True))


@dataclass(frozen=True)
class REMHeadConfig:
    """How many heads of each REM type, and the dilation of every dilated head.

    Heads are laid out in the order k1..k6: regular, cyclical-cos, cyclical-sin, dilated regular,
    dilated cos, dilated sin. ``dilations`` lists one factor per dilated head in that order (so for
    Table 5's ``(0,2,2,0,2,2)`` with ``[48,24,48,24]`` the cos heads get 48, 24 and the sin heads
    48, 24)."""

    k: tuple[int, int, int, int, int, int]
    """Head counts k1..k6 (sum = number of heads)."""
    dilations: tuple[int, ...] = ()
    """One dilation factor (>= 1) per dilated head: k4 + k5 + k6 entries."""
    allow_unpaired: bool = False
    """Allow k2 != k3 or k5 != k6 (cyclical heads normally come in cos/sin pairs). Only for building the
    layer directly (``kernels/compile.py``, tests): the suites' files and the estimators describe heads by
    their counts alone, so their error for an unpaired layout asks for equal counts instead."""
    truncate: int | None = None
    """Drop REM entries whose exponent exceeds this lag (the paper's K = 200); None keeps all."""

    def __post_init__(self) -> None:
        k = tuple(self.k)
        if len(k) != 6:
            raise ConfigError(f"REM head counts need 6 entries (k1..k6), got {len(k)}: {k}")
        for i, ki in enumerate(k, start=1):
            if isinstance(ki, bool) or not isinstance(ki, int) or ki < 0:
                raise ConfigError(f"REM head count k{i} must be an integer >= 0, got {ki!r}")
        if sum(k) == 0:
            raise ConfigError("REM head counts k1..k6 are all zero: at least one head needs a REM")
        if not self.allow_unpaired:
            for a, b in ((2, 3), (5, 6)):
                if k[a - 1] != k[b - 1]:
                    raise ConfigError(
                        f"cyclical REM heads come in pairs: k{a}={k[a - 1]} != k{b}={k[b - 1]}; give k{a} "
                        f"(cos) and k{b} (sin) the same count, one sin head per cos head"
                    )
        dil = tuple(self.dilations)
        n_dilated = k[3] + k[4] + k[5]
        if len(dil) != n_dilated:
            raise ConfigError(
                f"need one dilation per dilated head (k4+k5+k6 = {n_dilated}), got {len(dil)}: {list(dil)}"
            )
        for d in dil:
            if isinstance(d, bool) or not isinstance(d, int) or d < 1:
                raise ConfigError(f"dilation must be an integer >= 1, got {d!r}")
        t = self.truncate
        if t is not None and (isinstance(t, bool) or not isinstance(t, int) or t < 0):
            raise ConfigError(f"truncate must be None or an integer >= 0, got {t!r}")
        object.__setattr__(self, "k", k)
        object.__setattr__(self, "dilations", dil)

    @property
    def n_heads(self) -> int:
        return sum(self.k)

    def validate(self, n_heads: int) -> None:
        """Raise :class:`ConfigError` unless the config fills exactly ``n_heads`` heads."""
        if self.n_heads != n_heads:
            raise ConfigError(f"REM head counts k1..k6 = {self.k} sum to {self.n_heads}, but the layer has {n_heads} heads")

    def head_kinds(self) -> tuple[str, ...]:
        return tuple(kind for (kind, _), ki in zip(HEAD_TYPES, self.k, strict=True) for _ in range(ki))

    def head_dilations(self) -> tuple[int, ...]:
        it = iter(self.dilations)
        return tuple(next(it) if dilated else 1 for (_, dilated), ki in zip(HEAD_TYPES, self.k, strict=True) for _ in range(ki))

    def head_groups(self) -> tuple[int, ...]:
        """Index 0..5 of each head's type (k1..k6)."""
        return tuple(g for g, ki in enumerate(self.k) for _ in range(ki))

    @classmethod
    def from_table5(cls, k1_k6: str, dilations: str = "-", **kwargs) -> REMHeadConfig:
        """Parse Table 5's notation, e.g. ``from_table5("(0,2,2,0,2,2)", "[48,24,48,24]")``; ``"-"``: none."""
        counts = parse_ints(k1_k6, "k1..k6")
        dil = () if dilations.strip() in ("-", "", "[]") else parse_ints(dilations, "dilations")
        return cls(k=counts, dilations=dil, **kwargs)

    @classmethod
    def regular(cls, n_heads: int, **kwargs) -> REMHeadConfig:
        """All heads regular and undilated."""
        return cls(k=(n_heads, 0, 0, 0, 0, 0), **kwargs)


def parse_ints(text: str, what: str) -> tuple[int, ...]:
    body = text.strip().strip("()[]")
    parts = [p.strip() for p in body.split(",")] if body else []
    if not parts or not all(re.fullmatch(r"\d+", p) for p in parts):
        raise ConfigError(f"cannot read {what} from {text!r}: expected integers like '(0,2,2,0,2,2)'")
    return tuple(int(p) for p in parts)


def _spread_eta(n: int) -> torch.Tensor:
    """n values spread over [-2, -1] U [1, 2] (Sec. 3), alternating sign: 1, -1, 2, -2, ..."""
    if n == 0:
        return torch.zeros(0)
    n_pos, n_neg = (n + 1) // 2, n // 2
    pos = torch.linspace(1.0, 2.0, n_pos) if n_pos > 1 else torch.tensor([1.5])
    neg = -(torch.linspace(1.0, 2.0, n_neg) if n_neg > 1 else torch.tensor([1.5] * n_neg))
    out = torch.empty(n)
    out[0::2], out[1::2] = pos, neg
    return out


def _spread_nu(n: int) -> torch.Tensor:
    """n values spread over [1, 2] (Sec. 3)."""
    return torch.linspace(1.0, 2.0, n) if n > 1 else torch.full((n,), 1.5)


class RSAMixer(nn.Module):
    """Mixes a baseline attention's per-head output with the REM term (eq. 4).

    Parameters: ``mu`` (the layer's gate), ``eta`` for regular heads (lambda = tanh(eta)), ``nu`` and
    ``theta`` for cyclical heads (gamma = sigmoid(nu)). Initialisation as in Sec. 3: eta spread over
    [-2, -1] U [1, 2], nu over [1, 2] (within each of the six head types, so cos/sin pairs start equal),
    theta = pi / 4, mu = ``gate_init`` (the paper uses [-3, 3], often 1)."""

    def __init__(
        self, n_heads: int, heads: REMHeadConfig, *, masked: bool, gate_init: float = 1.0, impl: str | None = None
    ) -> None:
        super().__init__()
        heads.validate(n_heads)
        self.n_heads = n_heads
        self.heads = heads
        self.masked = masked
        self.impl = impl
        self.kinds = heads.head_kinds()
        self.dilations = heads.head_dilations()
        groups = heads.head_groups()
        reg = [h for h, k in enumerate(self.kinds) if k == "regular"]
        cyc = [h for h, k in enumerate(self.kinds) if k != "regular"]
        self.register_buffer("reg_index", torch.tensor(reg, dtype=torch.long), persistent=False)
        self.register_buffer("cyc_index", torch.tensor(cyc, dtype=torch.long), persistent=False)

        eta = torch.zeros(len(reg))
        nu = torch.zeros(len(cyc))
        for g in range(6):
            members = [h for h in range(n_heads) if groups[h] == g]
            if g in (0, 3):
                eta[[reg.index(h) for h in members]] = _spread_eta(len(members))
            else:
                nu[[cyc.index(h) for h in members]] = _spread_nu(len(members))
        self.mu = nn.Parameter(torch.tensor(float(gate_init)))
        self.eta = nn.Parameter(eta)
        self.nu = nn.Parameter(nu)
        self.theta = nn.Parameter(torch.full((len(cyc),), math.pi / 4))

    def _per_head(self, p: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        return torch.zeros(self.n_heads, dtype=p.dtype, device=p.device).index_copy(0, index, p)

    def _rem_kwargs(self) -> dict:
        return {
            "kind": self.kinds,
            "eta": self._per_head(self.eta, self.reg_index),
            "nu": self._per_head(self.nu, self.cyc_index),
            "theta": self._per_head(self.theta, self.cyc_index),
            "dilation": self.dilations,
            "masked": self.masked,
            "truncate": self.heads.truncate,
        }

    def rem(self, v: torch.Tensor, query_positions: torch.Tensor | range | None = None) -> torch.Tensor:
        """P_h V_h for every head: ``v`` ``[B, Tk, H, D]`` -> ``[B, Tq, H, D]``."""
        return rem_apply(v, query_positions=query_positions, impl=self.impl, **self._rem_kwargs())

    def forward(
        self, attn_out: torch.Tensor, v: torch.Tensor, query_positions: torch.Tensor | range | None = None
    ) -> torch.Tensor:
        """``attn_out`` ``[B, Tq, H, D]`` (the baseline's per-head output), ``v`` ``[B, Tk, H, D]``."""
        return rem_mix(attn_out, v, self.gate(), query_positions=query_positions, impl=self.impl, **self._rem_kwargs())

    def mixes_weights(self, query_positions: torch.Tensor | range | None = None) -> bool:
        """Whether :meth:`mix_weights` applies: the default REM path (no ``impl`` forced) and query
        positions shared by the batch (``None``, a ``range`` or a ``[Tq]`` tensor)."""
        return self.impl is None and (
            query_positions is None or isinstance(query_positions, range) or query_positions.dim() == 1
        )

    def mix_weights(
        self, weights: torch.Tensor, query_positions: torch.Tensor | range | None = None,
        softmax_scale: float | None = None,
    ) -> torch.Tensor:
        """Eq. 4 on the attention weights ``[B, H, Tq, Tk]``: ``(1 - sigma(mu)) A + sigma(mu) P_h``, so
        that multiplying the result by V gives what :meth:`forward` gives on ``A V``. With
        ``softmax_scale`` c, ``weights`` are raw scores S and A = softmax(c S)."""
        return rem_mix_weights(
            weights, self.gate(), query_positions=query_positions, softmax_scale=softmax_scale, **self._rem_kwargs()
        )

    def gate(self) -> torch.Tensor:
        """sigma(mu), the share of the REM term (for logging)."""
        return torch.sigmoid(self.mu)

    @torch.no_grad()
    def rem_parameters(self) -> dict[str, torch.Tensor]:
        """Per-head ``lambda``, ``gamma``, ``theta`` as ``[H]`` tensors (NaN where a head has no such
        parameter), plus ``dilation``, for logging."""
        nan = torch.full((self.n_heads,), float("nan"))
        lam, gam, th = nan.clone(), nan.clone(), nan.clone()
        lam[self.reg_index.cpu()] = torch.tanh(self.eta.detach().cpu().float())
        gam[self.cyc_index.cpu()] = torch.sigmoid(self.nu.detach().cpu().float())
        th[self.cyc_index.cpu()] = self.theta.detach().cpu().float()
        return {"lambda": lam, "gamma": gam, "theta": th, "dilation": torch.tensor(self.dilations)}


class RSAFullAttention(AttentionLayer):
    """Multi-head softmax attention with an optional RSA mixer (:class:`AttentionLayer` over
    :class:`FullAttention`): the layer the tests and ``recurbench bench rsa`` use. ``heads=None`` gives
    the same layer without REMs."""

    def __init__(
        self, d_model: int, n_heads: int, heads: REMHeadConfig | None, *,
        causal: bool = False, gate_init: float = 1.0, impl: str | None = None,
    ) -> None:
        if d_model % n_heads:
            raise ConfigError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        mixer = None if heads is None else RSAMixer(n_heads, heads, masked=causal, gate_init=gate_init, impl=impl)
        super().__init__(FullAttention(causal=causal), d_model, n_heads, mixer=mixer)

    def forward(  # type: ignore[override]
        self, x: torch.Tensor, context: torch.Tensor | None = None, query_positions: torch.Tensor | range | None = None
    ) -> torch.Tensor:
        """Self-attention over ``x`` ``[B, T, d_model]``, or cross-attention to ``context``."""
        context = x if context is None else context
        return super().forward(x, context, context, query_positions=query_positions)
