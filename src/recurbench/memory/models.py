"""Sequence models for the memory tasks: input layer -> the PPO agents' memory core -> linear head.

The core is built by :func:`recurbench.agents.cores.make_core`, the same function the agents' policy
uses, and driven the way the policy drives it: one :meth:`~recurbench.agents.cores.MemoryCore.step`
per symbol, with ``episode_starts`` 1.0 at the first step of every sequence (which clears the state,
memory included) and 0.0 after. Every sequence is one episode: the reference code also starts each
batch with an empty state and memory (``kerg_copy_denoise.md`` section 6.6).

Layouts: tokens ``[B, L]`` in, logits ``[B, L, C]`` out (batch first, as the tasks draw them); the
core is stepped time first (``[L, B, F]``, the layout of ``MemoryCore.forward_sequence``).

Faster paths give the same outputs as stepping (``tests/memory/test_memory_models.py``):

* ``lstm``: the :class:`~recurbench.agents.cores.LSTMCore`'s own ``nn.LSTMCell`` parameters run
  through ``nn.LSTM``'s fused sequence kernel (the two share their weight layout), since nothing
  resets within a sequence. About 3x the steps per second of the step loop on a CPU.
* the attentive cores (MemLSTM, RelLSTM, MemRNN, RelRNN) and the RNNs (orth-RNN, expRNN): the core's
  ``sequence_outputs``, the whole sequence as one autograd node with a hand-written backward
  (:mod:`recurbench.kernels.memattn.sequence`; the attentive cores' step loop in C++ on a CPU, the
  RNNs' in Python).
* SAB: its ``sequence_outputs`` too, on a CPU in the C++ loop only; elsewhere (a GPU, or no C++
  compiler) it steps its cell eagerly (its memory grows from step to step, so it is never compiled).
* any other core (a plugin's), with ``compile_core=True`` when gradients are recorded: the
  core's :meth:`cell` compiled by ``torch.compile`` and stepped exactly as ``MemoryCore.step`` does
  (``reset``, then ``cell``), for a compilation of 10-60 s per process and core shape.

Each path can be asked for by name (:data:`PATHS`); the earlier ones (the compiled cell for the
attentive cores, MemLSTM's append-only history) stay for comparison (``bench memory``).

:meth:`MemorySequenceModel.hidden_states` steps eagerly (the gradient recorder needs each ``h_t`` as
the tensor the next step consumed), except for MemLSTM's history, whose ``h_t`` are those tensors too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils import parametrize

from recurbench.agents.cores import (
    CORES,
    AttentiveCore,
    LSTMCore,
    MemoryCore,
    RNNCore,
    SABCore,
    State,
    make_core,
)
from recurbench.agents.recurrent_init import (
    check_gate_init,
    check_nonlinearity,
    check_scheme,
    check_scheme_name,
)
from recurbench.errors import ConfigError

SHARED_CORE_SETTINGS = ("attention_size", "nu", "rho", "memory_window", "nonlinearity", "recurrent_init",
                        "input_init", "topk", "truncate", "memory_stride", "gate_init")
"""The settings of :class:`SequenceModelConfig` every core is handed (each reads those its ``__init__`` names)."""


@dataclass(frozen=True)
class SequenceModelConfig:
    """The network of a memory-task run.

    Parameters
    ----------
    core : str
        A memory core of :data:`recurbench.agents.cores.CORES`: ``lstm``, ``memlstm`` or ``rellstm``.
    hidden_size : int
        Width ``H`` of the LSTM (128 in the reference code).
    attention_size : int
        Width ``A`` of the additive attention ``v' tanh(W s + U h)`` (attentive cores only).
    nu : int
        RelLSTM: size of the short-term buffer (at least 1).
    rho : int
        RelLSTM: size of the relevant set (at least 0). ``kappa = nu + rho`` bounds the attended states.
    memory_window : int or None
        MemLSTM: how many past states it attends over; None: every state of the sequence (the
        paper's MemRNN: time grows as ``L^2``; over the append-only history, memory as ``L``).
    embedding_dim : int or None
        None: the one-hot input of the reference code; an integer: a learned embedding of that width.
    nonlinearity : str
        RNN-family cores (``rnn``, ``exprnn``, ``memrnn``, ``relrnn``): ``tanh``, ``relu`` or ``modrelu``.
    recurrent_init : str
        RNN-family cores: how the recurrent matrix ``V`` starts: ``henaff``, ``cayley``, ``random``
        (orthogonal: ``expm`` of a skew-symmetric matrix), ``identity``, ``xavier`` or ``kaiming``
        (``exprnn`` needs an orthogonal one). The reference code's default is ``henaff``.
    input_init : str
        RNN-family cores: how the input matrix ``U`` starts (``xavier``, the reference code's, or ``kaiming``).
    topk : int
        SAB: how many stored states each step selects.
    truncate : int
        SAB: the recurrent state is detached every ``truncate`` steps (truncated backpropagation).
    memory_stride : int
        SAB: every ``memory_stride``-th state is stored.
    gate_init : str
        LSTM-family cores (``lstm``, ``memlstm``, ``rellstm``, ``sab``): how the gates start, ``pytorch``
        (``nn.LSTMCell``'s), ``xavier`` (the reference code's ``LSTM.py``) or ``chrono:N`` (Tallec &
        Ollivier's start for dependencies up to ``N`` steps; see
        :func:`recurbench.agents.recurrent_init.init_lstm_gates`).
    core_settings : dict
        A plugin core's own settings (the memory suite's ``plugin_settings``), handed to it over the
        shared ones above; empty for the built-ins.
    """

    core: str
    hidden_size: int = 128
    attention_size: int = 64
    nu: int = 10
    rho: int = 10
    memory_window: int | None = None
    embedding_dim: int | None = None
    nonlinearity: str = "tanh"
    recurrent_init: str = "henaff"
    input_init: str = "xavier"
    topk: int = 10
    truncate: int = 10
    memory_stride: int = 2
    gate_init: str = "pytorch"
    core_settings: dict[str, Any] = field(default_factory=dict, hash=False)

    def check(self, where: str = "model") -> None:
        """Raise a :class:`ConfigError` naming the first bad setting (``where`` prefixes its key)."""
        if self.core not in CORES:
            raise ConfigError(f"{where}.core: unknown memory core {self.core!r}; known: {', '.join(CORES)}")
        if self.nu < 1:
            raise ConfigError(f"{where}.nu: the short-term buffer holds at least the last state (nu >= 1), got {self.nu}")
        if self.rho < 0:
            raise ConfigError(f"{where}.rho: the relevant set cannot have a negative size (rho >= 0), got {self.rho}")
        for key in ("hidden_size", "attention_size", "memory_window", "embedding_dim", "topk", "truncate",
                    "memory_stride"):
            value = getattr(self, key)
            if value is not None and value < 1:
                raise ConfigError(f"{where}.{key}: must be at least 1, got {value}")
        check_nonlinearity(f"{where}.nonlinearity", self.nonlinearity)
        check_scheme(f"{where}.recurrent_init", self.recurrent_init, self.hidden_size, self.hidden_size,
                     orthogonal=self.core == "exprnn")
        check_scheme_name(f"{where}.input_init", self.input_init)  # its shape: check_sequence
        check_gate_init(f"{where}.gate_init", self.gate_init)

    def check_sequence(self, seq_len: int, where: str = "model", *, vocab_size: int | None = None) -> None:
        """Refuse settings that cannot work on sequences of ``seq_len`` steps (SAB's k, truncation and
        stride) or, given the task's ``vocab_size``, on its input (an orthogonal ``input_init`` for an
        input matrix that is not square), naming the key."""
        if vocab_size is not None and self.core in RNN_FAMILY:
            input_size = self.embedding_dim or vocab_size
            check_scheme(f"{where}.input_init", self.input_init, self.hidden_size, input_size)
        if self.core != "sab":
            return
        stored = seq_len // self.memory_stride
        if self.memory_stride > seq_len:
            raise ConfigError(f"{where}.memory_stride: SAB stores every {self.memory_stride}-th state, but a sequence "
                              f"has only {seq_len} steps")
        if self.topk > stored:
            raise ConfigError(f"{where}.topk: SAB selects {self.topk} stored states, but a sequence of {seq_len} steps "
                              f"stores at most {stored} (memory_stride {self.memory_stride})")
        if self.truncate > seq_len:
            raise ConfigError(f"{where}.truncate: SAB truncates backpropagation every {self.truncate} steps, more "
                              f"than a sequence's {seq_len}")

    @property
    def kappa(self) -> int:
        """``nu + rho``, the most states a RelLSTM step attends to (Kerg et al. App. C)."""
        return self.nu + self.rho


RNN_FAMILY = ("rnn", "exprnn", "memrnn", "relrnn")
"""The cores built on :class:`~recurbench.agents.cores.RNNCell` (``nonlinearity``, ``*_init`` apply)."""


class OneHot(nn.Module):
    """The reference code's input encoding: symbol k -> the k-th unit vector (no parameters)."""

    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        self.vocab_size = vocab_size

    def forward(self, tokens: Tensor) -> Tensor:
        return F.one_hot(tokens, self.vocab_size).float()


class MemorySequenceModel(nn.Module):
    """Tokens -> input layer -> memory core (one episode per sequence) -> linear readout per step.

    Parameters
    ----------
    vocab_size, n_classes : int
        Input symbols and output classes of the task (:class:`recurbench.memory.tasks.MemoryTask`).
    seq_len : int
        ``L``, the task's sequence length: MemLSTM's window when ``memory_window`` is None.
    config : SequenceModelConfig
        The core and its sizes.
    compile_core : bool
        Run an attentive core's ``cell`` through ``torch.compile`` in :meth:`forward`.
    """

    def __init__(self, vocab_size: int, n_classes: int, seq_len: int, config: SequenceModelConfig,
                 *, compile_core: bool = False) -> None:
        super().__init__()
        config.check()
        config.check_sequence(seq_len, vocab_size=vocab_size)
        self.config, self.seq_len, self.compile_core = config, seq_len, compile_core
        if config.embedding_dim is None:
            self.embed: nn.Module = OneHot(vocab_size)
            input_size = vocab_size
        else:
            self.embed = nn.Embedding(vocab_size, config.embedding_dim)
            input_size = config.embedding_dim
        shared = {key: getattr(config, key) for key in SHARED_CORE_SETTINGS}
        shared["memory_window"] = config.memory_window or seq_len
        self.core: MemoryCore = make_core(config.core, input_size, config.hidden_size,
                                          **{**shared, **config.core_settings})
        self.head = nn.Linear(config.hidden_size, n_classes)
        nn.init.xavier_normal_(self.head.weight)  # the reference code's readout init
        nn.init.zeros_(self.head.bias)
        self._compiled_cell: Callable[..., Any] | None = None
        self._lstm_shell: nn.LSTM | None = None

    # -- the agent's path ------------------------------------------------------------------------

    def _inputs(self, tokens: Tensor) -> tuple[Tensor, Tensor]:
        """Time-first core inputs ``[L, B, F]`` and episode starts ``[L, B]`` (1.0 at t = 0)."""
        x = self.embed(tokens.t())
        starts = torch.zeros(x.shape[0], x.shape[1], device=x.device)
        starts[0] = 1.0
        return x, starts

    def _initial_state(self, batch: int, device: torch.device) -> State:
        return self.core.initial_state(batch, device)

    def step_outputs(self, tokens: Tensor, *, cell: Callable[..., Any] | None = None) -> list[Tensor]:
        """The core's output ``h_t`` [B, H] for every step, stepping as the agents do: ``core.step``
        (or, with ``cell``, ``core.reset`` then ``cell``, which is what ``core.step`` does)."""
        x, starts = self._inputs(tokens)
        state = self._initial_state(tokens.shape[0], tokens.device)
        outputs = []
        with parametrize.cached():  # expRNN: expm(A) once per sequence, not once per step
            for t in range(x.shape[0]):
                if cell is None:
                    out, state = self.core.step(x[t], state, starts[t])
                else:
                    out, state = cell(x[t], self.core.reset(state, starts[t]))
                outputs.append(out)
        return outputs

    def hidden_states(self, tokens: Tensor) -> tuple[Tensor, list[Tensor]]:
        """Logits ``[B, L, C]`` and the hidden states ``h_t`` ([B, H] each, t = 0..L-1) as the graph
        holds them, for gradients with respect to each: the eager step loop, or MemLSTM's append-only
        history (whose ``h_t`` are the tensors the next step consumed as well; its memory grows as
        ``L`` where the step loop's grows as ``L^2``)."""
        outputs = self._history_outputs(tokens)
        if outputs is None:
            outputs = self.step_outputs(tokens)
        return self.head(torch.stack(outputs, dim=1)), outputs

    def _history_outputs(self, tokens: Tensor) -> list[Tensor] | None:
        """MemLSTM's outputs over an append-only history when its window keeps the whole sequence
        (:meth:`~recurbench.agents.cores.AttentiveCore.episode_outputs`), else None."""
        if isinstance(self.core, AttentiveCore) and self.core.keeps_whole_episode(tokens.shape[1]):
            return self.core.episode_outputs(self._inputs(tokens)[0])
        return None

    # -- the fast paths ---------------------------------------------------------------------------

    def _fused_lstm(self, tokens: Tensor) -> Tensor:
        """The LSTM core over a whole sequence in ``nn.LSTM``'s kernel, with the core's own cell
        parameters (``nn.LSTMCell`` and layer 0 of ``nn.LSTM`` share their layout) -> [L, B, H]."""
        assert isinstance(self.core, LSTMCore)
        cell = self.core.lstm
        if self._lstm_shell is None:
            # A template whose weights functional_call supplies: kept out of the module tree (on the
            # meta device it holds no memory, and its parameters are not the model's).
            object.__setattr__(self, "_lstm_shell", nn.LSTM(cell.input_size, cell.hidden_size, device="meta"))
        assert self._lstm_shell is not None
        x, _ = self._inputs(tokens)
        h0, c0 = self._initial_state(tokens.shape[0], tokens.device)  # the state after the reset at t = 0
        weights = {"weight_ih_l0": cell.weight_ih, "weight_hh_l0": cell.weight_hh,
                   "bias_ih_l0": cell.bias_ih, "bias_hh_l0": cell.bias_hh}
        out, _ = torch.func.functional_call(self._lstm_shell, weights, (x, (h0[None], c0[None])))
        return out

    def missing_path(self, path: str) -> str | None:
        """Why the core has no ``path`` of its own, or None: :meth:`forward` refuses ``compiled`` for a
        core whose cell changes its state's shapes (``compilable`` False: torch.compile would compile
        it again at every step until dynamo gives up), and runs the step loop for ``history`` where the
        memory does not keep the whole sequence."""
        if path == "compiled" and not self.core.compilable:
            return ("its state changes shape from step to step, so torch.compile would compile its cell again at "
                    "every step")
        if path == "history" and not (isinstance(self.core, AttentiveCore)
                                      and self.core.keeps_whole_episode(self.seq_len)):
            return ("only an attentive core whose memory keeps the whole sequence (memlstm, memrnn) has an "
                    "append-only history")
        return None

    def forward(self, tokens: Tensor, *, fast: bool = True, path: str | None = None) -> Tensor:
        """Logits ``[B, L, C]`` of ``tokens`` [B, L] along ``path`` (:data:`PATHS`); by default the
        core's fastest (``fast``), ``fast=False`` the plain step loop (``step``)."""
        path = path or ("fast" if fast else "step")
        if path not in PATHS:
            raise ValueError(f"MemorySequenceModel: unknown path {path!r}; choose {', '.join(PATHS)}")
        if path == "compiled" and (why := self.missing_path(path)):
            raise ValueError(f"MemorySequenceModel: the {self.config.core} core has no compiled path: {why}")
        if path == "fast" and type(self.core) is LSTMCore:
            return self.head(self._fused_lstm(tokens).transpose(0, 1))
        if path == "fast" and isinstance(self.core, AttentiveCore | RNNCore | SABCore):
            return self.head(self.core.sequence_outputs(self._inputs(tokens)[0]).transpose(0, 1))
        if path == "history" and (history := self._history_outputs(tokens)) is not None:
            return self.head(torch.stack(history, dim=1))
        cell = None
        # Compiled for training only: under no_grad (evaluation) torch.compile would compile again.
        compiled = path == "compiled" or (path == "fast" and self.compile_core and self.core.compilable)
        if compiled and torch.is_grad_enabled():
            if self._compiled_cell is None:
                self._compiled_cell = torch.compile(self.core.cell, dynamic=False)
            cell = self._compiled_cell
        return self.head(torch.stack(self.step_outputs(tokens, cell=cell), dim=1))


PATHS = ("fast", "step", "compiled", "history")
"""How :meth:`MemorySequenceModel.forward` runs the core: ``fast`` (the default: ``nn.LSTM``'s kernel
for the LSTM, the core's ``sequence_outputs`` for the attentive cores, the RNNs and SAB, else the
step loop, compiled with ``compile_core``), ``step`` (the step loop, as the agents
step), ``compiled`` (the step loop over a ``torch.compile``'d cell) and ``history`` (MemLSTM / MemRNN
over the append-only history; else the step loop)."""


def build_model(task: Any, config: SequenceModelConfig, *, compile_core: bool = False) -> MemorySequenceModel:
    """The model for ``task`` (a :class:`recurbench.memory.tasks.MemoryTask`)."""
    return MemorySequenceModel(task.vocab_size, task.n_classes, task.seq_len, config, compile_core=compile_core)
