"""Transformer-XL for forecasting (Dai et al., ACL 2019) and RSA-XL.

How a window is segmented (our definition; the RSA paper does not give one): the model reads the
``seq_len`` observed steps followed by ``pred_len`` zero placeholders, N = seq_len + pred_len steps
in all. They are cut into segments of ``segment_len`` steps (default ``pred_len``) from the end
backwards, so the last segment is exactly the horizon block when ``segment_len == pred_len``, and the
first segment holds the remainder (shorter if N is not a multiple). Segments are processed in time
order; each layer attends (causally) over its cached input of the previous segment -- the memory,
``mem_len = segment_len``, gradient-stopped as in XL -- followed by the current segment. Segments
before the last only produce memory, so they run without autograd (their outputs are detached
anyway); the loss sees the last ``pred_len`` outputs.

Attention scores use XL's relative positions: ``(q + u) k' + (q + v) (W_r R_{i-j})'`` with sinusoidal
R and the two learned biases u, v per head. RSA-XL removes that relative encoding (the paper: "we
remove their learnable relative positional encoding") and mixes in masked non-square REMs whose
query rows sit at key-space positions ``M + i`` after the M memory steps (App. D.2);
``rsa.keep_positional`` keeps the relative term. No absolute positional encoding in either.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from recurbench.forecasters.config import ForecasterConfig, make_mixer
from recurbench.forecasters.layers.blocks import SelfAttentionBlock
from recurbench.forecasters.layers.embedding import DataEmbedding, append_horizon, sinusoid_table


class RelativeAttentionLayer(nn.Module):
    """Causal multi-head attention over [memory; segment] with XL's relative positional scores."""

    def __init__(self, d_model: int, n_heads: int, dropout: float, *, relative: bool, mixer: nn.Module | None) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.relative = relative
        self.mixer = mixer
        self.q_proj = nn.Linear(d_model, d_model)
        self.kv_proj = nn.Linear(d_model, 2 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)
        if relative:
            self.r_proj = nn.Linear(d_model, d_model, bias=False)
            self.u_bias = nn.Parameter(torch.zeros(n_heads, self.d_head))
            self.v_bias = nn.Parameter(torch.zeros(n_heads, self.d_head))

    def forward(self, h: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        B, L, d = h.shape
        M = memory.shape[1]
        H, D = self.n_heads, self.d_head
        context = torch.cat([memory, h], dim=1)  # [B, M + L, d]
        q = self.q_proj(h).view(B, L, H, D)
        k, v = self.kv_proj(context).view(B, M + L, 2, H, D).unbind(2)

        scale = 1.0 / math.sqrt(D)  # on the queries, [B, L, H, D], not on the scores, [B, H, L, M + L]
        N = M + L
        if self.relative:
            scores = torch.einsum("bihd,bjhd->bhij", (q + self.u_bias) * scale, k)
            # Relative scores: query i (key-space position M + i) and key j are M + i - j apart. With one
            # row per distance N-1 .. -1 (n <-> N-1-n; -1 only ever meets masked keys), query i's row of
            # bd, read from column L-1-i on, holds its keys' distances in key order; over the flattened
            # rows that is one strided view, no gather (Transformer-XL's "relative shift").
            distances = torch.arange(N - 1, -2, -1, device=h.device)
            r = self.r_proj(sinusoid_table(distances, d).to(h.dtype)).view(N + 1, H, D)
            bd = torch.einsum("bihd,nhd->bhin", (q + self.v_bias) * scale, r).reshape(B, H, L * (N + 1))
            scores = scores + bd[..., L - 1 : L - 1 + L * N].view(B, H, L, N)
        else:
            scores = torch.einsum("bihd,bjhd->bhij", q * scale, k)
        future = torch.arange(N, device=h.device)[None, :] > (M + torch.arange(L, device=h.device))[:, None]
        scores = scores.masked_fill(future, float("-inf"))
        weights = self.dropout(torch.softmax(scores, dim=-1))
        positions = range(M, M + L)  # the segment's queries in the key frame [memory; segment]
        into_weights = self.mixer is not None and self.mixer.mixes_weights(positions)
        if into_weights:  # RSA eq. 4 on the weights: (1 - g) A + g P, then one product with V
            weights = self.mixer.mix_weights(weights, query_positions=positions)
        out = torch.einsum("bhij,bjhd->bihd", weights, v)  # [B, L, H, D]
        if self.mixer is not None and not into_weights:
            out = self.mixer(out, v, query_positions=positions)
        return self.out_proj(out.reshape(B, L, d))


class XLBlock(SelfAttentionBlock):
    """The shared post-norm block, its attention reading the previous segment's memory too."""

    def forward(self, h: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        h = self.norm1(h + self.dropout(self.attention(h, memory)))
        return self.norm2(h + self.ff(h))


def segment_bounds(total: int, segment_len: int) -> list[tuple[int, int]]:
    """``[start, end)`` of each segment, cut from the end backwards; the first may be shorter."""
    bounds = []
    end = total
    while end > 0:
        bounds.append((max(0, end - segment_len), end))
        end -= segment_len
    return bounds[::-1]


class TransformerXL(nn.Module):
    """``forward(x [B, seq_len, C], x_mark [B, seq_len, F], y_mark [B, label_len + pred_len, F])``
    -> forecast ``[B, pred_len, C]``."""

    def __init__(self, cfg: ForecasterConfig) -> None:
        super().__init__()
        cfg.check()
        self.cfg = cfg
        d, H, rsa = cfg.d_model, cfg.n_heads, cfg.rsa
        self.segment_len = cfg.segment_len or cfg.pred_len
        self.embedding = DataEmbedding(cfg.n_features, cfg.n_marks, d, cfg.dropout, positional=False)
        relative = rsa is None or rsa.keep_positional
        self.blocks = nn.ModuleList(
            XLBlock(
                RelativeAttentionLayer(d, H, cfg.dropout, relative=relative, mixer=make_mixer(rsa, H, masked=True)),
                d, cfg.d_ff, cfg.dropout,
            )
            for _ in range(cfg.e_layers + cfg.d_layers)
        )
        self.norm = nn.LayerNorm(d)
        self.projection = nn.Linear(d, cfg.n_features)

    def attention_layers(self) -> dict[str, RelativeAttentionLayer]:
        return {f"block.{i}.self": block.attention for i, block in enumerate(self.blocks)}

    def _segment(self, h: torch.Tensor, memories: list[torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor]]:
        new_memories = []
        for block, memory in zip(self.blocks, memories, strict=True):
            new_memories.append(h.detach())  # this layer's input is the next segment's memory
            h = block(h, memory)
        return h, new_memories

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor, y_mark: torch.Tensor) -> torch.Tensor:
        P = self.cfg.pred_len
        z, z_mark = append_horizon(x, x_mark, y_mark, P)
        emb = self.embedding(z, z_mark)
        B, N, d = emb.shape
        memories = [emb.new_zeros(B, 0, d) for _ in self.blocks]
        bounds = segment_bounds(N, self.segment_len)
        outputs = []
        for start, end in bounds:
            # Only the segments holding the horizon reach the loss; the others only fill the memory.
            needs_grad = end > N - P
            with torch.set_grad_enabled(needs_grad and torch.is_grad_enabled()):
                h, memories = self._segment(emb[:, start:end], memories)
            if needs_grad:
                outputs.append(h)
        h = torch.cat(outputs, dim=1)
        return self.projection(self.norm(h))[:, -P:, :]
