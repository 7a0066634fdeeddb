"""Attention blocks shared by the forecasters. One tensor layout throughout: ``[B, T, H, D]``.

Every attention here first computes the per-head outputs ``A_h`` as ``[B, Tq, H, D]``; an RSA
variant then mixes them with the REM term, ``(1 - sigma(mu)) A_h + sigma(mu) P_h V_h`` (RSA paper,
eq. 4), before the output projection. That is why :class:`AttentionLayer` takes an optional
``mixer`` (the kernels issue's ``RSAMixer``) instead of subclassing per model. Attentions that can do
better than mixing outputs (``applies_mixer``) get the mixer themselves: softmax attention with
materialised weights mixes the REMs into the weights, ProbSparse into its active rows.

Kernels (no parameters; ``q, k, v`` are ``[B, T, H, D]``):

* :class:`FullAttention` -- softmax attention (:func:`softmax_attention`: two matrix products on a CPU
  for short key sequences and wide heads, ``scaled_dot_product_attention`` otherwise).
* :class:`ProbSparseAttention` -- Informer's: the ``u = c * ceil(ln L)`` queries with the largest
  sparsity measure ``M(q, K) = max_j s_j - mean_j s_j`` (estimated on ``c * ceil(ln L_K)`` sampled
  keys) attend; the lazy ones get ``mean(V)`` (encoder) or ``cumsum(V)`` (masked decoder), exactly as
  Informer's reference code.
* :class:`MaskedAttention` -- softmax attention under a fixed boolean pattern (LogSparse).
"""

from __future__ import annotations

import math
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn


class AttentionKernel(Protocol):
    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor: ...


class Mixer(Protocol):
    """What the attentions need from the RSA layer (``recurbench.forecasters.layers.rsa.RSAMixer``):
    mixing the REM term into per-head outputs, or into attention weights before the product with V."""

    def __call__(
        self, attn_out: torch.Tensor, v: torch.Tensor, query_positions: torch.Tensor | range | None = None
    ) -> torch.Tensor: ...

    def mixes_weights(self, query_positions: torch.Tensor | range | None = None) -> bool: ...

    def mix_weights(
        self, weights: torch.Tensor, query_positions: torch.Tensor | range | None = None,
        softmax_scale: float | None = None,
    ) -> torch.Tensor: ...


MATH_MAX_KEYS = 128
"""On a CPU, softmax attention over at most this many keys, with heads of at least
:data:`MATH_MIN_HEAD_DIM`, runs as two matrix products with the weights materialised
(:func:`softmax_attention`); longer key sequences, and other devices, go through
``scaled_dot_product_attention``. Measured on this project's 2-core CPU (B = 32, 8 heads of 64, forward
and backward): the products take about half SDPA's time at T = 48-96, the two are even near T = 168,
and SDPA is twice as fast at T = 256."""

MATH_MIN_HEAD_DIM = 32
"""Below this head width the materialised weights' ``[B, H, Tq, Tk]`` passes (mask, softmax, their
backward) cost more than the products save: there plain softmax attention always goes through SDPA,
and an RSA layer materialises its weights (to mix the REMs into them) only up to
:data:`SMALL_HEAD_RSA_MAX_KEYS` keys. Measured with torch 2.13 on one thread of this CPU (B = 32,
forward and backward, causal): with 5 heads of 4 (the langs suite's size) SDPA takes 0.53, 0.44 and
0.32 of the products' time at T = 24, 48 and 96; with 8 heads of 8, 0.65, 0.67 and 0.37."""

SMALL_HEAD_RSA_MAX_KEYS = 48
"""RSA layers with heads narrower than :data:`MATH_MIN_HEAD_DIM`: the most keys for which mixing the
REMs into materialised weights beats SDPA plus the O(T) REM mix. Measured as above with 5 heads of
4 (settings II and IV of the langs suite): the weights mix takes 0.84-0.93 of SDPA + REM's time at
T = 24, 1.20-1.43 at T = 48 and 2.2 at T = 96; with 8 heads of 8, 0.81, 1.08 and 1.57."""


def materialises_weights(q: torch.Tensor, n_keys: int, *, mixes_weights: bool) -> bool:
    """Whether :func:`softmax_attention` computes ``q``'s attention over ``n_keys`` keys as two matrix
    products with the weights materialised (a CPU, few keys; see :data:`MATH_MAX_KEYS`), else SDPA.
    ``mixes_weights``: an RSA mixer would mix its REMs into those weights."""
    if q.device.type != "cpu":
        return False
    if q.shape[-1] >= MATH_MIN_HEAD_DIM:
        return n_keys <= MATH_MAX_KEYS
    return mixes_weights and n_keys <= min(SMALL_HEAD_RSA_MAX_KEYS, MATH_MAX_KEYS)


def softmax_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
    allowed: torch.Tensor | None = None, causal: bool = False, dropout: float = 0.0,
    mixer: Mixer | None = None, query_positions: torch.Tensor | range | None = None,
) -> torch.Tensor:
    """Softmax attention ``[B, Tq, H, D]`` from ``q`` ``[B, Tq, H, D]`` and ``k``, ``v`` ``[B, Tk, H, D]``,
    scaled by 1/sqrt(D); ``allowed`` ``[Tq, Tk]`` restricts the keys, ``causal`` masks keys after the
    query (square only), ``dropout`` drops attention weights. With a ``mixer`` (RSA), the REM term is
    mixed into the weights where they are materialised (:func:`materialises_weights`; the mixer's
    :meth:`~Mixer.mixes_weights`), else into the output: the same values either way."""
    Tq, Tk = q.shape[1], k.shape[1]
    causal = causal and Tq == Tk
    mixes = mixer is not None and mixer.mixes_weights(query_positions)
    materialised = materialises_weights(q, Tk, mixes_weights=mixes)
    into_weights = materialised and mixes
    if materialised:
        qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))  # [B, H, T, D]
        scale = 1.0 / math.sqrt(q.shape[-1])
        scores = qh @ kh.transpose(-2, -1)
        if causal:
            scores = scores.masked_fill(torch.ones(Tq, Tk, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
        if allowed is not None:
            scores = scores.masked_fill(~allowed, float("-inf"))
        if into_weights and dropout == 0:  # softmax and mixing in one op (one backward pass for both)
            weights = mixer.mix_weights(scores, query_positions=query_positions, softmax_scale=scale)
        else:
            weights = F.dropout(torch.softmax(scores * scale, dim=-1), dropout, training=dropout > 0)
            if into_weights:
                weights = mixer.mix_weights(weights, query_positions=query_positions)
        out = (weights @ vh).transpose(1, 2)
    else:
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=allowed, dropout_p=dropout,
            is_causal=causal,
        ).transpose(1, 2)
    return out if mixer is None or into_weights else mixer(out, v, query_positions=query_positions)


class FullAttention(nn.Module):
    """Softmax attention (:func:`softmax_attention`); ``causal`` masks keys after the query (square
    self-attention only: a non-square call, i.e. cross-attention, is never masked)."""

    applies_mixer = True

    def __init__(self, *, causal: bool = False, dropout: float = 0.0) -> None:
        super().__init__()
        self.causal = causal
        self.dropout = dropout

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
        mixer: Mixer | None = None, query_positions: torch.Tensor | range | None = None,
    ) -> torch.Tensor:
        return softmax_attention(
            q, k, v, causal=self.causal, dropout=self.dropout if self.training else 0.0,
            mixer=mixer, query_positions=query_positions,
        )


class MaskedAttention(nn.Module):
    """Softmax attention restricted to ``allowed[i, j]`` (a ``[Tq, Tk]`` boolean pattern built per length)."""

    applies_mixer = True

    def __init__(self, pattern: PatternFn, *, dropout: float = 0.0) -> None:
        super().__init__()
        self.pattern = pattern
        self.dropout = dropout

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
        mixer: Mixer | None = None, query_positions: torch.Tensor | range | None = None,
    ) -> torch.Tensor:
        return softmax_attention(
            q, k, v, allowed=self.pattern(q.shape[1], k.shape[1], q.device),
            dropout=self.dropout if self.training else 0.0, mixer=mixer, query_positions=query_positions,
        )


class PatternFn(Protocol):
    def __call__(self, n_queries: int, n_keys: int, device: torch.device) -> torch.Tensor: ...


def sampled_scores(q: torch.Tensor, k: torch.Tensor, sample: torch.Tensor) -> torch.Tensor:
    """``s[b, h, i, j] = q[b, h, i] . k[b, h, sample[i, j]]`` for ``q`` ``[B, H, Lq, D]``, ``k``
    ``[B, H, Lk, D]``, ``sample`` ``[Lq, S]`` key indices.

    Informer's reference gathers the sampled keys (``[B, H, Lq, S, D]``, S = c ln Lk: 160 MB at
    its ETTh1 size), which made that gather a third of a ProbSparse layer's training step. When the
    score matrix ``[B, H, Lq, Lk]`` is the smaller of the two (Lk <= S D, i.e. up to a few thousand
    steps), all scores come from one matrix product and the sampled ones are picked from it; the
    values are the same dot products."""
    Lq, S = sample.shape
    B, H, _, D = q.shape
    if k.shape[2] <= S * D:
        return torch.gather(q @ k.transpose(-2, -1), -1, sample.expand(B, H, Lq, S))
    return torch.einsum("bhqd,bhqsd->bhqs", q, k[:, :, sample, :])


class ProbSparseAttention(nn.Module):
    """Informer's ProbSparse self-attention (Zhou et al. 2021, Sec. 3.1).

    ``mixes_active_rows``: an RSA mixer passed to :meth:`forward` mixes the REM term into the active
    queries' rows only, at their positions; the lazy rows keep mean(V) / cumsum(V)
    (:attr:`recurbench.forecasters.config.RSASpec.prob_rows` ``"active"``)."""

    def __init__(self, *, factor: int = 5, causal: bool = False, mixes_active_rows: bool = False) -> None:
        super().__init__()
        self.factor = factor
        self.causal = causal
        self.mixes_active_rows = mixes_active_rows

    @property
    def applies_mixer(self) -> bool:
        """Whether :class:`AttentionLayer` hands its mixer to :meth:`forward` (active rows only)."""
        return self.mixes_active_rows

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
        mixer: Mixer | None = None, query_positions: torch.Tensor | range | None = None,
    ) -> torch.Tensor:
        B, Lq, H, D = q.shape
        Lk = k.shape[1]
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, H, L, D]
        n_sample = min(self.factor * math.ceil(math.log(Lk)), Lk) if Lk > 1 else 1
        n_top = min(self.factor * math.ceil(math.log(Lq)), Lq) if Lq > 1 else 1

        # Sparsity measure on a random sample of keys per query: M = max - mean (Informer eq. 4). It only
        # picks the active queries (topk indices carry no gradient), so it is computed without autograd.
        sample = torch.randint(Lk, (Lq, n_sample), device=q.device)
        with torch.no_grad():
            s_sample = sampled_scores(q, k, sample)
            sparsity = s_sample.max(-1).values - s_sample.sum(-1) / Lk
            top = sparsity.topk(n_top, dim=-1, sorted=False).indices  # [B, H, u]

        q_top = torch.gather(q, 2, top[..., None].expand(-1, -1, -1, D))
        scores = q_top @ k.transpose(-2, -1) / math.sqrt(D)  # [B, H, u, Lk]
        if self.causal:
            future = torch.arange(Lk, device=q.device)[None, None, None, :] > top[..., None]
            scores = scores.masked_fill(future, float("-inf"))
        attended = torch.softmax(scores, dim=-1) @ v  # [B, H, u, D]
        if mixer is not None:  # RSA on the active rows: REM rows at the queries' positions [B, u, H]
            attended = mixer(attended.transpose(1, 2), v.transpose(1, 2), query_positions=top.transpose(1, 2)).transpose(1, 2)

        # Lazy queries: mean of V (encoder), or Informer's cumulative sum of V (masked decoder).
        context = v.cumsum(dim=-2) if self.causal else v.mean(dim=-2, keepdim=True).expand(B, H, Lq, D)
        context = context.scatter(2, top[..., None].expand(-1, -1, -1, D), attended)
        return context.transpose(1, 2)  # [B, Lq, H, D]


class AttentionLayer(nn.Module):
    """Projections around an attention kernel: per-head outputs, optional RSA mixing, output projection.

    ``qk_kernel_size > 1`` gives LogSparse's convolutional self-attention: queries and keys come from a
    causal Conv1d over the inputs (Li et al. 2019, Sec. 3.2), so they see local shape, not single points.
    ``mix`` flattens the per-head output head-major, as Informer's reference decoder does (after the RSA
    mixing, which sees every head in time order either way).
    """

    def __init__(
        self, attention: nn.Module, d_model: int, n_heads: int, *,
        mixer: nn.Module | None = None, qk_kernel_size: int = 1, mix: bool = False,
    ) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.attention = attention
        self.mixer = mixer
        self.n_heads = n_heads
        self.qk_kernel_size = qk_kernel_size
        self.mix = mix
        if qk_kernel_size > 1:
            self.q_proj = nn.Conv1d(d_model, d_model, qk_kernel_size)
            self.k_proj = nn.Conv1d(d_model, d_model, qk_kernel_size)
        else:
            self.q_proj = nn.Linear(d_model, d_model)
            self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, query_positions: torch.Tensor | range | None = None
    ) -> torch.Tensor:
        """The per-head outputs ``[B, Lq, H, D]`` from projected ``q``, ``k``, ``v``, RSA mixing included."""
        if self.mixer is not None and getattr(self.attention, "applies_mixer", False):
            return self.attention(q, k, v, mixer=self.mixer, query_positions=query_positions)  # mixes itself
        if self.mixer is not None:
            return self.mixer(self.attention(q, k, v), v, query_positions=query_positions)
        return self.attention(q, k, v)

    def _qk(self, proj: nn.Module, x: torch.Tensor) -> torch.Tensor:
        if self.qk_kernel_size == 1:
            return proj(x)
        # Causal: left-pad by k-1 so step t only sees steps <= t.
        padded = F.pad(x.transpose(1, 2), (self.qk_kernel_size - 1, 0))
        return proj(padded).transpose(1, 2)

    def forward(
        self, queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
        query_positions: torch.Tensor | range | None = None,
    ) -> torch.Tensor:
        B, Lq, _ = queries.shape
        Lk = keys.shape[1]
        H = self.n_heads
        q = self._qk(self.q_proj, queries).view(B, Lq, H, -1)
        k = self._qk(self.k_proj, keys).view(B, Lk, H, -1)
        v = self.v_proj(values).view(B, Lk, H, -1)
        out = self.attend(q, k, v, query_positions)
        if self.mix:
            out = out.transpose(1, 2)  # [B, H, Lq, D], then read as Lq rows of H * D values
        return self.out_proj(out.reshape(B, Lq, -1))


class LogSparsePattern:
    """LogSparse's pattern (Li et al. 2019, Sec. 3.3): query i sees itself and keys i - 2^m (m >= 0);
    with ``local_window`` w > 0 it also sees every key within i - w < j <= i (the local variant).
    Square and causal; queries and keys index the same sequence. A class (not a closure) so that
    fitted models pickle."""

    def __init__(self, local_window: int = 0) -> None:
        self.local_window = local_window

    def __call__(self, n_queries: int, n_keys: int, device: torch.device) -> torch.Tensor:
        i = torch.arange(n_queries, device=device)[:, None]
        j = torch.arange(n_keys, device=device)[None, :]
        lag = i - j
        positive = lag.clamp(min=1)
        power_of_two = (positive & (positive - 1)) == 0
        allowed = (lag == 0) | ((lag > 0) & power_of_two)
        if self.local_window > 0:
            allowed = allowed | ((lag >= 0) & (lag < self.local_window))
        return allowed


def log_sparse_pattern(local_window: int = 0) -> PatternFn:
    return LogSparsePattern(local_window)
