"""A recurbench plugin: one GRU in each kind of model recurbench runs.

* :class:`GRUCore` -- a memory core (the ``minigrid`` agents and the ``memory`` tasks), state ``(h,)``.
* :class:`GRUForecaster` -- a forecaster (the ``ltsf`` suite): a GRU over the input window, a linear
  head to the whole horizon.
* :class:`GRURecognizer` -- a language model (the ``langs`` suite): a GRU over the string, read out at
  every position.

Each is registered under the name ``gru`` in this package's ``pyproject.toml`` and checked by
recurbench's conformance kit in ``tests/test_conformance.py``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from recurbench.agents.cores import MemoryCore, State
from recurbench.forecasters.config import ForecasterConfig
from recurbench.langs.models import LangModelConfig, Recognizer

__all__ = ["GRUCore", "GRUForecaster", "GRURecognizer"]


class GRUCore(MemoryCore):
    """GRU (Cho et al. 2014): a gated recurrent unit, state ``(h,)``.

    Parameters
    ----------
    input_size, hidden_size : int
        Widths of the features it reads and of its state (its output).

    The suites hand a core their core settings (``attention_size``, ``nu``, ...); this one names
    none in its ``__init__``, so it is handed none. The state at an episode start is zeros, and the
    shared :meth:`MemoryCore.reset` clears a row whose episode starts.
    """

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__(input_size, hidden_size)
        self.gru = nn.GRUCell(input_size, hidden_size)

    def initial_state(self, batch: int, device: torch.device | str = "cpu") -> State:
        return (torch.zeros(batch, self.hidden_size, device=device),)

    def cell(self, x: Tensor, state: State) -> tuple[Tensor, State]:
        h = self.gru(x, state[0])
        return h, (h,)


class GRUForecaster(nn.Module):
    """GRU forecaster: a GRU over the window (series and calendar), a linear head to the horizon.

    Parameters
    ----------
    cfg : ForecasterConfig
        Reads ``n_features``, ``n_marks``, ``pred_len``, ``d_model`` (the GRU's width), ``e_layers``
        (stacked GRU layers) and ``dropout`` (between layers); the ltsf suite's ``model`` settings,
        so ``--set model.d_model=32`` changes it.

    The forecast is the last observed value plus the head's output (a residual on the naive
    forecast), ``[B, pred_len, n_features]``.
    """

    def __init__(self, cfg: ForecasterConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.gru = nn.GRU(cfg.n_features + cfg.n_marks, cfg.d_model, num_layers=cfg.e_layers, batch_first=True,
                          dropout=cfg.dropout if cfg.e_layers > 1 else 0.0)
        self.head = nn.Linear(cfg.d_model, cfg.pred_len * cfg.n_features)

    def forward(self, x: Tensor, x_mark: Tensor, y_mark: Tensor) -> Tensor:
        h, _ = self.gru(torch.cat([x, x_mark], dim=-1))  # [B, seq_len, d_model]
        step = self.head(h[:, -1]).view(x.shape[0], self.cfg.pred_len, self.cfg.n_features)
        return x[:, -1:, :] + step


class GRURecognizer(Recognizer):
    """GRU language model: one GRU layer of width ``d_model`` over the embedded string.

    Parameters
    ----------
    cfg : LangModelConfig
        Reads ``d_model`` (the langs suite's ``model.d_model``).
    """

    def __init__(self, cfg: LangModelConfig) -> None:
        super().__init__(cfg)
        self.gru = nn.GRU(cfg.d_model, cfg.d_model, batch_first=True)

    def encode(self, h: Tensor) -> Tensor:
        return self.gru(h)[0]
