"""Informer (Zhou et al., AAAI 2021) and RSA-Informer.

Encoder: ProbSparse self-attention layers (optionally with distilling: Conv1d + BatchNorm + ELU +
max-pool stride 2 between layers). Decoder ("generative"): fed the last ``label_len`` input steps
followed by ``pred_len`` zeros, masked ProbSparse self-attention, full cross-attention to the
encoder, one linear projection; the last ``pred_len`` outputs are the forecast.

RSA-Informer (RSA paper, Sec. 4.1 and App. D.2): every attention gets an ``RSAMixer`` -- encoder
self-attention unmasked (P + P'), decoder self-attention masked, cross-attention non-square: decoder
step i sits at key-space position ``seq_len - label_len + i`` of the encoder's sequence -- and the
absolute positional encoding is dropped (``rsa.keep_positional`` restores it).

Informer's ``mix`` reshape of the decoder self-attention output (a transpose that interleaves heads
and time steps; on by default in the reference code) is ``cfg.mix``. It comes after the RSA mixing,
which sees per-head outputs in time order either way.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from recurbench.forecasters.config import ForecasterConfig, make_mixer
from recurbench.forecasters.layers.attention import AttentionLayer, FullAttention, ProbSparseAttention
from recurbench.forecasters.layers.blocks import FeedForward, SelfAttentionBlock
from recurbench.forecasters.layers.embedding import DataEmbedding


class DistilLayer(nn.Module):
    """Self-attention distilling: halves the sequence (Informer eq. 5)."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(d_model, d_model, kernel_size=3, padding=1, padding_mode="circular")
        self.norm = nn.BatchNorm1d(d_model)
        self.pool = nn.MaxPool1d(kernel_size=3, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.pool(F.elu(self.norm(self.conv(x.transpose(1, 2)))))
        return y.transpose(1, 2)


class DecoderLayer(nn.Module):
    def __init__(
        self, self_attention: AttentionLayer, cross_attention: AttentionLayer, d_model: int, d_ff: int, dropout: float
    ) -> None:
        super().__init__()
        self.self_attention = self_attention
        self.cross_attention = cross_attention
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, cross_positions: range) -> torch.Tensor:
        x = self.norm1(x + self.dropout(self.self_attention(x, x, x)))
        x = self.norm2(x + self.dropout(self.cross_attention(x, memory, memory, query_positions=cross_positions)))
        return self.norm3(x + self.ff(x))


class Informer(nn.Module):
    """``forward(x [B, seq_len, C], x_mark [B, seq_len, F], y_mark [B, label_len + pred_len, F])``
    -> forecast ``[B, pred_len, C]``."""

    def __init__(self, cfg: ForecasterConfig) -> None:
        super().__init__()
        cfg.check()
        self.cfg = cfg
        d, H, rsa = cfg.d_model, cfg.n_heads, cfg.rsa
        positional = rsa is None or rsa.keep_positional
        self.enc_embedding = DataEmbedding(cfg.n_features, cfg.n_marks, d, cfg.dropout, positional=positional)
        self.dec_embedding = DataEmbedding(cfg.n_features, cfg.n_marks, d, cfg.dropout, positional=positional)

        def self_attention(causal: bool) -> nn.Module:
            if cfg.attention == "prob":
                return ProbSparseAttention(
                    factor=cfg.factor, causal=causal, mixes_active_rows=rsa is not None and rsa.prob_rows == "active"
                )
            return FullAttention(causal=causal, dropout=cfg.dropout)

        self.encoder = nn.ModuleList(
            SelfAttentionBlock(
                AttentionLayer(self_attention(False), d, H, mixer=make_mixer(rsa, H, masked=False)),
                d, cfg.d_ff, cfg.dropout,
            )
            for _ in range(cfg.e_layers)
        )
        self.distil = nn.ModuleList(DistilLayer(d) for _ in range(cfg.e_layers - 1)) if cfg.distil else None
        self.enc_norm = nn.LayerNorm(d)
        self.decoder = nn.ModuleList(
            DecoderLayer(
                AttentionLayer(self_attention(True), d, H, mixer=make_mixer(rsa, H, masked=True), mix=cfg.mix),
                AttentionLayer(FullAttention(dropout=cfg.dropout), d, H, mixer=make_mixer(rsa, H, masked=False)),
                d, cfg.d_ff, cfg.dropout,
            )
            for _ in range(cfg.d_layers)
        )
        self.dec_norm = nn.LayerNorm(d)
        self.projection = nn.Linear(d, cfg.n_features)

    def attention_layers(self) -> dict[str, AttentionLayer]:
        """Every attention by a readable name (for logging gates and REM parameters)."""
        out = {f"encoder.{i}.self": layer.attention for i, layer in enumerate(self.encoder)}
        for i, layer in enumerate(self.decoder):
            out[f"decoder.{i}.self"] = layer.self_attention
            out[f"decoder.{i}.cross"] = layer.cross_attention
        return out

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor, y_mark: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        enc = self.enc_embedding(x, x_mark)
        for i, layer in enumerate(self.encoder):
            enc = layer(enc)
            if self.distil is not None and i < len(self.distil):
                enc = self.distil[i](enc)
        enc = self.enc_norm(enc)

        # Generative decoder input: the last label_len observed steps, then zeros for the horizon.
        start = x[:, x.shape[1] - cfg.label_len :, :]
        dec_in = torch.cat([start, x.new_zeros(x.shape[0], cfg.pred_len, x.shape[2])], dim=1)
        dec = self.dec_embedding(dec_in, y_mark)
        # Decoder step i is time seq_len - label_len + i on the encoder's (key) axis (App. D.2).
        # A range (static positions): the REM operator needs no host synchronisation to find their span.
        offset = x.shape[1] - cfg.label_len
        cross_positions = range(offset, offset + dec.shape[1])
        for layer in self.decoder:
            dec = layer(dec, enc, cross_positions)
        out = self.projection(self.dec_norm(dec))
        return out[:, -cfg.pred_len :, :]
