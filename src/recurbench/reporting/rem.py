"""Recurrence encoding matrices (REMs) rebuilt from logged per-head parameters, for heatmaps.

RSA paper (Huang et al., ICLR 2023), Sec. 2-3 and App. D.1: with ``k = i - j`` the distance from
key ``j`` to query ``i``, a head's REM has entries ``f_k`` for ``k >= 1`` (zero on and above the
diagonal when masked; ``f_|k|`` on both sides when unmasked) where

* regular:           ``f_k = λ^k``
* cyclical (cos):    ``f_k = γ^k cos(kθ)``
* cyclical (sin):    ``f_k = γ^k sin(kθ)``
* dilated by ``d``:  non-zero only where ``k mod d == 0``, with ``k`` replaced by ``k / d`` — the
  first T rows and columns of ``P ⊗ I_d`` (Sec. 3). App. D.1's shortcut ``(L_d)_ij = 0`` would make
  ``λ^0 - 1 = 0`` there too, the same matrix.

Accepted shapes of the logged parameters (the suites may use any of them):

1. a JSON artifact whose name contains ``rem`` (e.g. ``rem_params.json``): a mapping of layer name to
   a list of head records ``{"head": 0, "kind": "regular" | "cyclical_cos" | "cyclical_sin",
   "lambda": .., "gamma": .., "theta": .., "dilation": 1}``, or a list of such records each with a
   ``layer`` key; nesting deeper (``{"encoder": {"0": [...]}}``) joins the keys into the layer name;
2. the same per layer as parallel lists ``{"kind": [...], "lambda": [...], "gamma": [...],
   "theta": [...], "dilation": [...]}`` (one entry per head, ``null`` or NaN where a parameter does
   not apply; ``kinds``/``dilations`` are accepted too, and raw ``eta``/``nu`` in place of λ/γ), with
   an optional ``"masked": false`` for a layer whose REMs are two-sided (default: masked, causal);
3. metrics named ``rem.<layer>.head<h>.<lambda|gamma|theta|dilation>``.

Without a ``kind``, a head with λ is regular and a head with (γ, θ) cyclical-cos: log the kind
(``regular``/``cos``/``sin``) whenever heads of several kinds share a layer.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from recurbench.kernels.rem.dense import rem_table_matrices
from recurbench.kernels.rem.heads import make_layout

KINDS = ("regular", "cyclical_cos", "cyclical_sin")
_ALIASES = {"lambda": "lambda", "lam": "lambda", "λ": "lambda", "gamma": "gamma", "γ": "gamma", "theta": "theta", "θ": "theta"}
_RAW = ("eta", "nu")
_METRIC = re.compile(r"^rem[._/](?P<layer>.+?)[._/]h(?:ead)?[._/]?(?P<head>\d+)[._/](?P<param>lambda|gamma|theta|dilation)$")


@dataclass(frozen=True)
class RemHead:
    layer: str
    head: int
    kind: str
    lam: float | None = None
    gamma: float | None = None
    theta: float | None = None
    dilation: int = 1
    masked: bool = True
    """Causal (zero on and above the diagonal) or two-sided, as the layer applied it."""

    @property
    def label(self) -> str:
        if self.kind == "regular":
            text = f"reg λ={self.lam:.2f}"
        else:
            text = f"{'cos' if self.kind == 'cyclical_cos' else 'sin'} γ={self.gamma:.2f} θ={self.theta:.2f}"
        return text + (f" d={self.dilation}" if self.dilation > 1 else "")


def rem_matrix(head: RemHead, length: int, *, masked: bool | None = None) -> np.ndarray:
    """The ``length × length`` REM of one head (rows: queries, columns: keys), built by the operator's
    own table construction (:func:`recurbench.kernels.rem.dense.rem_table_matrices`) from λ or (γ, θ)
    as logged, so a heatmap shows exactly the matrix the model applied (in float64). ``masked``
    defaults to the head's own (its layer's, when logged)."""
    regular = head.kind == "regular"
    kind = "regular" if regular else ("cos" if head.kind == "cyclical_cos" else "sin")
    base = torch.tensor([head.lam if regular else head.gamma], dtype=torch.float64)
    angle = torch.tensor([0.0 if regular else head.theta], dtype=torch.float64)
    layout = make_layout(kind, head.dilation, 1)
    masked = head.masked if masked is None else masked
    return rem_table_matrices(layout, base, angle, n_keys=length, masked=masked)[0].numpy()


def _kind(value: Any, params: Mapping[str, Any]) -> str:
    text = str(value or "").lower()
    if "sin" in text:
        return "cyclical_sin"
    if "cos" in text or "cyc" in text:
        return "cyclical_cos"
    if text or params.get("lambda") is not None:
        return "regular"
    return "cyclical_cos"


def _given(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def _head(layer: str, index: int, record: Mapping[str, Any]) -> RemHead | None:
    params = {_ALIASES[k]: v for k, v in record.items() if k in _ALIASES and _given(v)}
    # Raw parameters (Sec. 3): lambda = tanh(eta), gamma = sigmoid(nu).
    if "lambda" not in params and _given(record.get("eta")):
        params["lambda"] = math.tanh(float(record["eta"]))
    if "gamma" not in params and _given(record.get("nu")):
        params["gamma"] = 1.0 / (1.0 + math.exp(-float(record["nu"])))
    kind = _kind(record.get("kind", record.get("type")), params)
    if kind == "regular" and params.get("lambda") is None:
        return None
    if kind != "regular" and (params.get("gamma") is None or params.get("theta") is None):
        return None
    dilation = record.get("dilation", record.get("d")) or 1
    return RemHead(
        layer=str(record.get("layer", layer)),
        head=int(record.get("head", index)),
        kind=kind,
        lam=float(params["lambda"]) if kind == "regular" else None,
        gamma=float(params["gamma"]) if kind != "regular" else None,
        theta=float(params["theta"]) if kind != "regular" else None,
        dilation=max(1, int(dilation)),
        masked=_flag(record.get("masked", True)),
    )


def _flag(value: Any) -> bool:
    """A logged boolean (JSON ``true``/``false``, or its text)."""
    return value.strip().lower() not in ("false", "0", "no") if isinstance(value, str) else bool(value)


def parse_rem_params(obj: Any, layer: str = "") -> list[RemHead]:
    """Every head found in a logged JSON object (shapes 1 and 2 of the module docstring)."""
    heads: list[RemHead] = []
    if isinstance(obj, Mapping):
        keys = set(obj)
        if keys & {*_ALIASES, *_RAW} and any(isinstance(v, list) for v in obj.values()):  # parallel lists
            n = max(len(v) for v in obj.values() if isinstance(v, list))
            for h in range(n):
                record = {k: (v[h] if isinstance(v, list) and h < len(v) else None if isinstance(v, list) else v) for k, v in obj.items()}
                record["kind"] = record.pop("kinds", record.get("kind"))
                record["dilation"] = record.pop("dilations", record.get("dilation"))
                if (head := _head(layer, h, record)) is not None:
                    heads.append(head)
        elif keys & {*_ALIASES, *_RAW}:
            if (head := _head(layer, 0, obj)) is not None:
                heads.append(head)
        else:
            for key, value in obj.items():
                heads += parse_rem_params(value, f"{layer}.{key}" if layer else str(key))
    elif isinstance(obj, list):
        for index, item in enumerate(obj):
            if isinstance(item, Mapping) and set(item) & {*_ALIASES, *_RAW}:
                if (head := _head(layer, index, item)) is not None:
                    heads.append(head)
            else:
                heads += parse_rem_params(item, layer)
    return heads


def rem_heads_from_metrics(metrics: Mapping[str, float]) -> list[RemHead]:
    """Heads logged as metrics ``rem.<layer>.head<h>.<param>`` (shape 3)."""
    records: dict[tuple[str, int], dict[str, Any]] = {}
    for name, value in metrics.items():
        if (m := _METRIC.match(name)) and not math.isnan(value):
            records.setdefault((m["layer"], int(m["head"])), {})[m["param"]] = value
    heads = [_head(layer, h, {"head": h, **rec}) for (layer, h), rec in sorted(records.items())]
    return [h for h in heads if h is not None]
