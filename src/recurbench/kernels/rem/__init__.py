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
steps' positions in the encoder's frame (they may lie beyond ``Tk - 1``, or before 0). A Python
``range`` is accepted too and is the form to use when the positions are static: the span is then
known without reading the tensor back from the device (no host synchronisation, so the call can be
captured in a CUDA graph or compiled without a graph break). Internally the
values are zero-padded over the positions' span, computed at every position, then gathered (exact;
O(span) work).

``truncate=K`` zeroes entries whose exponent (lag / d) exceeds K, reproducing App. D.1's K = 200;
``None`` is exact at all lags.

The RSA mixing itself, eq. 4, is :func:`rem_mix`: ``(1 - g) A + g P V``. For square self-attention
on a CPU with short sequences it runs fused (:mod:`.lanes`: dilated heads as small undilated REMs over
their lanes, one wide product per group of heads, a hand-written backward); otherwise it is
:func:`rem_apply` followed by a ``lerp``. Where the baseline attention materialises its weights A
(short sequences on a CPU, Transformer-XL), :func:`rem_mix_weights` mixes the REMs into them instead,
``(1 - g) A + g P``, and the attention's own product with V does the rest (:mod:`.weights`).
:func:`rem_matrices` returns the P_h themselves, densely.

Implementations (``impl``): ``"naive"`` (dense matrices, the reference), ``"chunked"`` (O(T) PyTorch,
default on CPU), ``"triton"`` (CUDA kernels; default on CUDA when triton is installed). All three are
differentiable in ``v``, ``eta``, ``nu`` and ``theta``. Half-precision inputs are computed in float32
by the chunked path and cast back.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from recurbench.kernels.rem.chunked import DEFAULT_CHUNK, rem_chunked_square
from recurbench.kernels.rem.dense import rem_table_matrices
from recurbench.kernels.rem.heads import KINDS, HeadLayout, head_params, make_layout, normalize_positions
from recurbench.kernels.rem.lanes import head_groups, lane_steps, rem_lanes_mix
from recurbench.kernels.rem.naive import rem_dense_matrices, rem_naive
from recurbench.kernels.rem.weights import rem_weight_mix

__all__ = ["KINDS", "IMPLS", "LANES_MAX_STEPS", "rem_apply", "rem_matrices", "rem_mix", "rem_mix_weights"]

IMPLS = ("naive", "chunked", "triton")

LANES_MAX_STEPS = 256
""":func:`rem_mix` takes the fused lanes path when no head has more than this many lane steps
(ceil(T / d)); its cost grows as T^2 / d per head, the chunked path's as T."""


def rem_apply(
    v: torch.Tensor,
    *,
    kind: str | Sequence[str],
    eta: torch.Tensor | float | None = None,
    nu: torch.Tensor | float | None = None,
    theta: torch.Tensor | float | None = None,
    dilation: int | Sequence[int] = 1,
    masked: bool,
    query_positions: torch.Tensor | range | None = None,
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
    _check_truncate(truncate)
    impl = resolve_impl(impl, v)
    compute_dtype = v.dtype if v.dtype in (torch.float32, torch.float64) else torch.float32
    base, angle = head_params(layout, eta, nu, theta, compute_dtype, v.device)
    span = range_span(query_positions, Tk)
    pos = normalize_positions(_as_tensor(query_positions, v.device), B, Tk, H, v.device)
    x = v.to(compute_dtype)

    if impl == "naive":
        out = rem_naive(x, layout, base, angle, masked=masked, query_positions=pos, truncate=truncate)
        return out.to(v.dtype)

    # Square computation over the span of all positions, then gather the query rows.
    lo, hi = 0, Tk
    if span is not None:
        lo, hi = span
    elif pos is not None and pos.numel() > 0:
        lo, hi = min(0, int(pos.min())), max(Tk, int(pos.max()) + 1)
    if lo < 0 or hi > Tk:
        x = torch.nn.functional.pad(x, (0, 0, 0, 0, -lo, hi - Tk))
    full = _square(x, layout, base, angle, masked, truncate, impl, chunk_size)  # [B, hi - lo, H, D]
    out = full if pos is None else _gather_rows(full, pos - lo)
    return out.to(v.dtype)


def rem_mix(
    attn: torch.Tensor,
    v: torch.Tensor,
    gate: torch.Tensor,
    *,
    kind: str | Sequence[str],
    eta: torch.Tensor | float | None = None,
    nu: torch.Tensor | float | None = None,
    theta: torch.Tensor | float | None = None,
    dilation: int | Sequence[int] = 1,
    masked: bool,
    query_positions: torch.Tensor | range | None = None,
    truncate: int | None = None,
    impl: str | None = None,
) -> torch.Tensor:
    """RSA eq. 4 for every head: ``(1 - gate) * attn + gate * P_h V_h``.

    ``attn`` ``[B, Tq, H, D]`` is the baseline attention's per-head output, ``v`` ``[B, Tk, H, D]``,
    ``gate`` a 0-dim tensor (sigma(mu)); the other arguments as in :func:`rem_apply`. With ``impl``
    left to the default, square self-attention (no ``query_positions``) on a CPU with at most
    :data:`LANES_MAX_STEPS` lane steps per head runs the fused path of :mod:`.lanes` (except under
    ``torch.compile``); everything else (and any explicit ``impl``) is :func:`rem_apply` and a ``lerp``."""
    if v.dim() != 4 or attn.dim() != 4:
        raise ValueError(f"attn and v must be [B, T, H, D], got {tuple(attn.shape)} and {tuple(v.shape)}")
    B, Tk, H, _ = v.shape
    if query_positions is None and attn.shape[1] != Tk:
        raise ValueError(f"query_positions is required when Tq ({attn.shape[1]}) != Tk ({Tk})")
    layout = make_layout(kind, dilation, H)
    # The fused CPU path writes into strided slices of its output, which torch.compile cannot trace; a
    # compiled caller gets rem_apply and a lerp, the same values in one graph.
    if impl is None and not torch.compiler.is_compiling() and _lanes_apply(attn, v, layout, query_positions):
        _check_truncate(truncate)
        base, angle = head_params(layout, eta, nu, theta, v.dtype, v.device)
        g = gate.to(v.dtype)
        groups = head_groups(layout.dilations)
        mats = [
            g * rem_table_matrices(
                HeadLayout(layout.kinds[h0:h1], (1,) * (h1 - h0)), base[h0:h1], angle[h0:h1],
                n_keys=lane_steps(Tk, d), masked=masked, truncate=truncate,
            )
            for h0, h1, d in groups
        ]
        return rem_lanes_mix(attn, v, 1 - g, groups, mats)
    pv = rem_apply(v, kind=layout.kinds, eta=eta, nu=nu, theta=theta, dilation=layout.dilations, masked=masked,
                   query_positions=query_positions, truncate=truncate, impl=impl)
    return torch.lerp(attn, pv.to(attn.dtype), gate.to(attn.dtype))


def rem_mix_weights(
    weights: torch.Tensor,
    gate: torch.Tensor,
    *,
    kind: str | Sequence[str],
    eta: torch.Tensor | float | None = None,
    nu: torch.Tensor | float | None = None,
    theta: torch.Tensor | float | None = None,
    dilation: int | Sequence[int] = 1,
    masked: bool,
    query_positions: torch.Tensor | range | None = None,
    truncate: int | None = None,
    softmax_scale: float | None = None,
) -> torch.Tensor:
    """RSA eq. 4 on attention weights: ``(1 - gate) * weights + gate * P_h`` for every head, so that
    ``result @ V`` equals :func:`rem_mix` of ``weights @ V``. With ``softmax_scale`` c, ``weights`` are
    raw scores S and the weights mixed are ``softmax(c S)`` (one op, one backward pass).

    ``weights`` ``[B, H, Tq, Tk]`` (e.g. softmax probabilities), ``gate`` a 0-dim tensor; the other
    arguments as in :func:`rem_apply`, except that the query positions must be shared by the batch
    (``None``, a ``range`` or a ``[Tq]`` tensor): per-row positions (ProbSparse) go through :func:`rem_mix`.
    P is built densely from the kernel tables (O(H Tq Tk), like the weights themselves)."""
    if weights.dim() != 4:
        raise ValueError(f"weights must be [B, H, Tq, Tk], got shape {tuple(weights.shape)}")
    _, H, Tq, Tk = weights.shape
    layout = make_layout(kind, dilation, H)
    _check_truncate(truncate)
    pos = query_positions
    if not isinstance(pos, range):
        pos = normalize_positions(pos, 1, Tk, H, weights.device)
    if pos is None and Tq != Tk:
        raise ValueError(f"query_positions is required when Tq ({Tq}) != Tk ({Tk})")
    shape = (len(pos),) if isinstance(pos, range) else None if pos is None else tuple(pos.shape)
    if shape is not None and shape != (Tq,):
        raise ValueError(
            f"rem_mix_weights needs query positions shared by the batch, as [Tq={Tq}], got {shape} "
            "(per-row positions: use rem_mix)"
        )
    dtype = weights.dtype if weights.dtype in (torch.float32, torch.float64) else torch.float32
    base, angle = head_params(layout, eta, nu, theta, dtype, weights.device)
    rem = rem_table_matrices(layout, base, angle, n_keys=Tk, masked=masked, query_positions=pos, truncate=truncate)
    return rem_weight_mix(weights, rem, gate, softmax_scale=softmax_scale)


def _as_tensor(query_positions: torch.Tensor | range | None, device: torch.device) -> torch.Tensor | None:
    if isinstance(query_positions, range):
        r = query_positions
        return torch.arange(r.start, r.stop, r.step, device=device)
    return query_positions


def range_span(query_positions: torch.Tensor | range | None, n_keys: int) -> tuple[int, int] | None:
    """(lo, hi) of the padded square computation for static positions; None for tensors."""
    if not isinstance(query_positions, range):
        return None
    if len(query_positions) == 0:
        return 0, n_keys
    return min(0, min(query_positions)), max(n_keys, max(query_positions) + 1)


def _lanes_apply(attn: torch.Tensor, v: torch.Tensor, layout: HeadLayout, query_positions) -> bool:
    return (
        query_positions is None and attn.shape == v.shape and v.device.type == "cpu"
        and v.dtype in (torch.float32, torch.float64) and attn.dtype == v.dtype
        and max(lane_steps(v.shape[1], d) for d in layout.dilations) <= LANES_MAX_STEPS
    )


def rem_matrices(
    n_keys: int,
    *,
    kind: str | Sequence[str],
    eta: torch.Tensor | float | None = None,
    nu: torch.Tensor | float | None = None,
    theta: torch.Tensor | float | None = None,
    dilation: int | Sequence[int] = 1,
    masked: bool,
    query_positions: torch.Tensor | range | None = None,
    truncate: int | None = None,
    n_heads: int | None = None,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
    impl: str = "table",
) -> torch.Tensor:
    """The REMs P_h as dense matrices: ``[H, Tq, Tk]``, or ``[B, H, Tq, Tk]`` for per-batch positions.

    Same parameters as :func:`rem_apply` (``n_heads`` is needed only when ``kind`` is one string);
    differentiable in ``eta``, ``nu`` and ``theta``. ``impl="table"`` gathers every entry from the
    per-head kernel table (fast); ``"naive"`` is App. D.1's construction (the reference)."""
    if isinstance(kind, str):
        if n_heads is None:
            raise ValueError("n_heads is required when kind is a single string")
        H = n_heads
    else:
        H = len(kind)
    layout = make_layout(kind, dilation, H)
    _check_truncate(truncate)
    device = torch.device(device) if device is not None else torch.device("cpu")
    base, angle = head_params(layout, eta, nu, theta, dtype, device)
    query_positions = _as_tensor(query_positions, device)
    batch = query_positions.shape[0] if query_positions is not None and query_positions.dim() > 1 else 1
    pos = normalize_positions(query_positions, batch, n_keys, H, device)
    build = {"table": rem_table_matrices, "naive": rem_dense_matrices}.get(impl)
    if build is None:
        raise ValueError(f"unknown impl {impl!r} for rem_matrices; expected 'table' or 'naive'")
    return build(layout, base, angle, n_keys=n_keys, masked=masked, query_positions=pos, truncate=truncate)


def _check_truncate(truncate: int | None) -> None:
    if truncate is not None and (isinstance(truncate, bool) or not isinstance(truncate, int) or truncate < 0):
        raise ValueError(f"truncate must be None or an integer >= 0, got {truncate!r}")


def resolve_impl(impl: str | None, v: torch.Tensor) -> str:
    if impl is None:
        if v.is_cuda:
            try:
                import triton  # noqa: F401, PLC0415 - triton is optional (the gpu extra)
            except ImportError:
                return "chunked"
            return "triton"
        return "chunked"
    if impl not in IMPLS:
        raise ValueError(f"unknown impl {impl!r}; expected one of {IMPLS}")
    return impl


def _square(x, layout: HeadLayout, base, angle, masked, truncate, impl, chunk_size):
    if impl == "triton":
        from recurbench.kernels.rem.triton import rem_triton_square  # noqa: PLC0415 - triton is optional (the gpu extra)

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
