"""Typed configuration of a forecaster: window shape, architecture and (for RSA variants) REM heads.

One frozen dataclass serves the three architectures; each model reads the fields that concern it
and the docstring of each field says which. ``RSASpec`` is the RSA part (RSA paper, Sec. 3 and
Table 5): the head counts ``k = (k1..k6)`` = (regular, cyclical-cos, cyclical-sin, dilated regular,
dilated cos, dilated sin) and one dilation per dilated head, regular heads first, then cos, then sin.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from recurbench.errors import ConfigError
from recurbench.forecasters.layers.rsa import REMHeadConfig, RSAMixer

PROB_ROWS = ("all", "active")
"""Values of :attr:`RSASpec.prob_rows`."""


@dataclass(frozen=True)
class RSASpec:
    """REM heads of every RSA attention in a model (the same head layout in every layer, as the paper)."""

    k: tuple[int, int, int, int, int, int]
    """Head counts (k1..k6); they must sum to the model's n_heads."""
    dilations: tuple[int, ...] = ()
    """One factor per dilated head (k4 + k5 + k6 of them): dilated regular first, then cos, then sin."""
    gate_init: float = 1.0
    """Initial gate-control mu; sigma(mu) is the REM share (paper: mu = 1 works best, App. D.4)."""
    keep_positional: bool = False
    """Keep the absolute / learned relative positional encoding next to the REMs (ablation flag;
    the paper removes it)."""
    prob_rows: str = "all"
    """Informer's ProbSparse self-attentions: which query rows get the REM term. ``"all"``: every row,
    eq. 4 with ProbSparse's output as the baseline A (lazy rows included). ``"active"``: only the top-u
    active queries, their REM rows gathered at the selected positions (App. D.2); lazy queries keep
    Informer's mean(V) / cumsum(V) unmixed. That is what mixing the REM into the attention matrix that
    Informer2020's ``ProbAttention._update_context`` builds for the active queries gives. Other
    attentions (full, cross, LogSparse, XL) mix every row either way."""

    def head_config(self) -> REMHeadConfig:
        """The RSA layer's ``REMHeadConfig`` (its own validation runs here)."""
        return REMHeadConfig(k=tuple(self.k), dilations=tuple(self.dilations))

    def first_problem(self, n_heads: int) -> tuple[str, str] | None:
        """The first thing wrong with this layout for a model of ``n_heads`` heads, as ``(field, message)``
        (``field`` one of ``k``, ``dilations``, ``gate_init``, ``prob_rows``), or None when it can work.
        :meth:`check` raises it; a caller that knows the field under another name (an estimator's
        ``rem_heads``, a key path in a suite file) reports it under that name."""
        if self.prob_rows not in PROB_ROWS:
            return "prob_rows", f"must be one of {', '.join(PROB_ROWS)}, got {self.prob_rows!r}"
        if isinstance(self.gate_init, bool) or not isinstance(self.gate_init, (int, float)) or not math.isfinite(self.gate_init):
            return "gate_init", f"must be a finite number, got {self.gate_init!r}"
        if len(self.k) != 6 or any(not isinstance(x, int) or x < 0 for x in self.k):
            return "k", f"need six non-negative head counts (k1..k6), got {list(self.k)}"
        if sum(self.k) != n_heads:
            return "k", f"the head counts {list(self.k)} sum to {sum(self.k)}, but the model has {n_heads} heads"
        n_dilated = sum(self.k[3:])
        if len(self.dilations) != n_dilated:
            return "dilations", (
                f"{n_dilated} dilated heads (k4+k5+k6) need {n_dilated} dilation factors, got "
                f"{len(self.dilations)}: {list(self.dilations)}"
            )
        if any(not isinstance(d, int) or d < 1 for d in self.dilations):
            return "dilations", f"factors must be positive integers, got {list(self.dilations)}"
        try:
            self.head_config()  # the layer's own rules (cyclical heads in cos/sin pairs)
        except (ConfigError, ValueError, TypeError) as exc:
            return "k", str(exc)
        return None

    def check(self, n_heads: int, where: str = "rsa", names: Mapping[str, str] | None = None) -> None:
        """Raise a :class:`ConfigError` for a head layout that cannot work, before any model is built,
        naming the field ``<where>.<field>``, or ``names[field]`` where given."""
        if (problem := self.first_problem(n_heads)) is not None:
            field_name, message = problem
            key = (names or {}).get(field_name, f"{where}.{field_name}")
            raise ConfigError(f"{key}: {message}")


_MINIMUMS = {
    "n_features": 1, "seq_len": 1, "pred_len": 1, "d_model": 1, "n_heads": 1, "d_ff": 1, "e_layers": 1,
    "d_layers": 1, "factor": 1, "conv_kernel": 1, "local_window": 0, "segment_len": 1,
}
"""The smallest value of each integer field of :class:`ForecasterConfig` (None allowed where the field is
optional)."""


@dataclass(frozen=True, kw_only=True)
class ForecasterConfig:
    """Everything needed to build one forecaster network."""

    n_features: int
    """Series in and out (the multivariate 'M' setting)."""
    n_marks: int
    """Calendar features per step (0 = none)."""
    seq_len: int
    label_len: int
    """Informer: decoder start tokens taken from the end of the input. Unused by LogSparse and XL."""
    pred_len: int
    d_model: int = 512
    n_heads: int = 8
    e_layers: int = 2
    """Informer: encoder layers. LogSparse and XL: their single stack has e_layers + d_layers layers."""
    d_layers: int = 1
    d_ff: int = 2048
    dropout: float = 0.05
    factor: int = 5
    """Informer: ProbSparse sampling factor c."""
    attention: str = "prob"
    """Informer: 'prob' (ProbSparse) or 'full' self-attention."""
    distil: bool = False
    """Informer: self-attention distilling between encoder layers (the RSA paper turns it off for both
    Informer and RSA-Informer, App. D.4, because it distorts relative positions)."""
    mix: bool = False
    """Informer: the reference code's ``mix`` in the decoder self-attention: the per-head output
    ``[B, L, H, D]`` is transposed to ``[B, H, L, D]`` before it is flattened to ``[B, L, H D]``, so each
    output row holds one head's outputs at H consecutive steps (Informer2020's default, ``--mix``)."""
    conv_kernel: int = 3
    """LogSparse: kernel of the causal convolution producing queries and keys (1 = plain attention)."""
    local_window: int = 0
    """LogSparse: also attend to this many most recent steps (0 = pure log-sparse pattern)."""
    segment_len: int | None = None
    """XL: segment length (None = pred_len). See :mod:`recurbench.forecasters.models.transformer_xl`."""
    rsa: RSASpec | None = field(default=None)

    def with_(self, **changes: Any) -> ForecasterConfig:
        return replace(self, **changes)

    def check(self, rsa_names: Mapping[str, str] | None = None) -> None:
        """Raise a :class:`ConfigError` naming the first field that cannot work; an RSA field is named
        ``rsa.<field>``, or ``rsa_names[field]`` where given (see :meth:`RSASpec.check`)."""
        for key, minimum in _MINIMUMS.items():
            value = getattr(self, key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
                raise ConfigError(f"{key} must be an integer >= {minimum}, got {value!r}")
        if not 0 <= self.dropout < 1:
            raise ConfigError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.d_model % self.n_heads:
            raise ConfigError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        if not 0 <= self.label_len <= self.seq_len:
            raise ConfigError(f"label_len ({self.label_len}) must be in [0, seq_len={self.seq_len}]")
        if self.attention not in ("prob", "full"):
            raise ConfigError(f"attention must be 'prob' or 'full', got {self.attention!r}")
        if self.rsa is not None:
            self.rsa.check(self.n_heads, names=rsa_names)
            if self.distil:
                raise ConfigError(
                    "rsa with distil: distilling halves the encoder length between layers and so breaks "
                    "the REMs' relative positions (the RSA paper turns it off); set distil to false"
                )


def make_mixer(spec: RSASpec | None, n_heads: int, *, masked: bool) -> RSAMixer | None:
    """An ``RSAMixer`` for one attention, or None for the baseline."""
    if spec is None:
        return None
    return RSAMixer(n_heads, spec.head_config(), masked=masked, gate_init=spec.gate_init)
