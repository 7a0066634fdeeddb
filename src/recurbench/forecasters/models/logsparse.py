"""LogSparse Transformer (Li et al., NeurIPS 2019) and RSA-LogSparse.

Decoder-only: the model reads the ``seq_len`` observed steps followed by ``pred_len`` zero
placeholders (with their calendar features), runs ``e_layers + d_layers`` causal blocks, and the
last ``pred_len`` outputs are the forecast (one shot, like Informer's generative decoder, instead of
the original's step-by-step sampling). Each block's attention is convolutional (queries and keys
from a causal Conv1d of kernel ``conv_kernel``; 1 = plain attention) under the log-sparse pattern:
step i sees itself and steps i - 2^m, plus, with ``local_window`` > 0, its most recent steps.

RSA-LogSparse: every attention gets a masked ``RSAMixer``; the absolute positional encoding is
dropped unless ``rsa.keep_positional``. ``label_len`` is not used.
"""

from __future__ import annotations

import torch
from torch import nn

from recurbench.forecasters.config import ForecasterConfig, make_mixer
from recurbench.forecasters.layers.attention import AttentionLayer, MaskedAttention, log_sparse_pattern
from recurbench.forecasters.layers.blocks import SelfAttentionBlock
from recurbench.forecasters.layers.embedding import DataEmbedding, append_horizon


class LogSparseTransformer(nn.Module):
    """``forward(x [B, seq_len, C], x_mark [B, seq_len, F], y_mark [B, label_len + pred_len, F])``
    -> forecast ``[B, pred_len, C]``."""

    def __init__(self, cfg: ForecasterConfig) -> None:
        super().__init__()
        cfg.check()
        self.cfg = cfg
        d, H, rsa = cfg.d_model, cfg.n_heads, cfg.rsa
        self.embedding = DataEmbedding(
            cfg.n_features, cfg.n_marks, d, cfg.dropout, positional=rsa is None or rsa.keep_positional
        )
        pattern = log_sparse_pattern(cfg.local_window)
        self.blocks = nn.ModuleList(
            SelfAttentionBlock(
                AttentionLayer(
                    MaskedAttention(pattern, dropout=cfg.dropout), d, H,
                    mixer=make_mixer(rsa, H, masked=True), qk_kernel_size=cfg.conv_kernel,
                ),
                d, cfg.d_ff, cfg.dropout,
            )
            for _ in range(cfg.e_layers + cfg.d_layers)
        )
        self.norm = nn.LayerNorm(d)
        self.projection = nn.Linear(d, cfg.n_features)

    def attention_layers(self) -> dict[str, AttentionLayer]:
        return {f"block.{i}.self": block.attention for i, block in enumerate(self.blocks)}

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor, y_mark: torch.Tensor) -> torch.Tensor:
        P = self.cfg.pred_len
        z, z_mark = append_horizon(x, x_mark, y_mark, P)
        h = self.embedding(z, z_mark)
        for block in self.blocks:
            h = block(h)
        return self.projection(self.norm(h))[:, -P:, :]
