"""Transformer blocks shared by the forecasters (post-norm, as Informer and the vanilla Transformer)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class FeedForward(nn.Module):
    """Position-wise d_model -> d_ff -> d_model with GELU (Informer's kernel-1 convolutions)."""

    def __init__(self, d_model: int, d_ff: int, dropout: float) -> None:
        super().__init__()
        self.up = nn.Linear(d_model, d_ff)
        self.down = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.down(self.dropout(F.gelu(self.up(x)))))


class SelfAttentionBlock(nn.Module):
    """x -> norm(x + attn(x)) -> norm(x + ff(x)); Informer's encoder layer, LogSparse's decoder layer."""

    def __init__(self, attention: nn.Module, d_model: int, d_ff: int, dropout: float) -> None:
        super().__init__()
        self.attention = attention
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.dropout(self.attention(x, x, x)))
        return self.norm2(x + self.ff(x))
