"""Input embeddings shared by the forecasters (layout ``[B, T, C] -> [B, T, d_model]``).

Informer's ``DataEmbedding``: a value embedding (Conv1d, kernel 3, circular padding), plus a
sinusoidal absolute positional encoding, plus a linear map of the calendar features. The RSA
variants drop the positional term because the REMs carry relative position (RSA paper, App. D.4:
"we let the REMs substitute the original positional encoding"); ``positional`` keeps it for the
ablation.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def sinusoid_table(positions: torch.Tensor, d_model: int) -> torch.Tensor:
    """Vaswani et al.'s sinusoids for (possibly fractional or negative) ``positions`` [N] -> [N, d_model]."""
    half = torch.arange(0, d_model, 2, dtype=torch.float32, device=positions.device)
    freqs = torch.exp(-math.log(10000.0) * half / d_model)
    angles = positions.float()[:, None] * freqs[None, :]
    table = torch.zeros(positions.shape[0], d_model, device=positions.device)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles[:, : d_model // 2])
    return table


class TokenEmbedding(nn.Module):
    """Values -> d_model with a kernel-3 circular Conv1d, as Informer (mixes each step with its neighbours)."""

    def __init__(self, c_in: int, d_model: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(c_in, d_model, kernel_size=3, padding=1, padding_mode="circular", bias=False)
        nn.init.kaiming_normal_(self.conv.weight, mode="fan_in", nonlinearity="leaky_relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, T, C] -> [B, T, d_model]
        return self.conv(x.transpose(1, 2)).transpose(1, 2)


class DataEmbedding(nn.Module):
    """Token + (optional) absolute positional + calendar-feature embedding, then dropout."""

    def __init__(self, c_in: int, n_marks: int, d_model: int, dropout: float, *, positional: bool = True) -> None:
        super().__init__()
        self.token = TokenEmbedding(c_in, d_model)
        self.marks = nn.Linear(n_marks, d_model, bias=False) if n_marks > 0 else None
        self.positional = positional
        self.d_model = d_model
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor) -> torch.Tensor:
        out = self.token(x)
        if self.marks is not None:
            out = out + self.marks(x_mark)
        if self.positional:
            positions = torch.arange(x.shape[1], device=x.device)
            out = out + sinusoid_table(positions, self.d_model)[None]
        return self.dropout(out)


def append_horizon(
    x: torch.Tensor, x_mark: torch.Tensor, y_mark: torch.Tensor, pred_len: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The input followed by ``pred_len`` zero placeholders, with the horizon's calendar features
    (the last ``pred_len`` rows of ``y_mark``): what the decoder-only models read."""
    z = torch.cat([x, x.new_zeros(x.shape[0], pred_len, x.shape[2])], dim=1)
    z_mark = torch.cat([x_mark, y_mark[:, y_mark.shape[1] - pred_len :, :]], dim=1)
    return z, z_mark
