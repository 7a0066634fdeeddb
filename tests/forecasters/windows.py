"""Synthetic window datasets for the forecaster tests."""

from __future__ import annotations

import math

import torch
from torch.utils.data import TensorDataset

from recurbench.forecasters.config import ForecasterConfig


def sine_windows(cfg: ForecasterConfig, n: int, offset: int = 0, period: float = 12.0) -> TensorDataset:
    """``n`` windows (stride 1) of sin(2 pi t / period) + small noise, as (x, y, x_mark, y_mark)."""
    g = torch.Generator().manual_seed(offset)
    length = n + cfg.seq_len + cfg.pred_len
    t = torch.arange(offset, offset + length, dtype=torch.float32)
    series = (torch.sin(2 * math.pi * t / period) * math.sqrt(2) + 0.05 * torch.randn(length, generator=g))[:, None]
    idx = torch.arange(n)[:, None]
    x = series[idx + torch.arange(cfg.seq_len)]
    y = series[idx + cfg.seq_len - cfg.label_len + torch.arange(cfg.label_len + cfg.pred_len)]
    marks = torch.zeros(n, cfg.seq_len, cfg.n_marks), torch.zeros(n, cfg.label_len + cfg.pred_len, cfg.n_marks)
    return TensorDataset(x, y, *marks)
