"""Memory cores: recurrent modules with an arbitrary tuple state and an explicit episode-start reset.

Every core is stepped through one method, :meth:`MemoryCore.step`, which first clears the state of
the environments whose episode starts at this step and then advances the recurrence. Acting
(rollouts), training (sequence replay) and evaluation (``predict``) all go through it, so memory is
cleared at episode boundaries identically in all three (the published RelLSTM code instead clears
its memory at every acting step and every 16-step training chunk; we do not).

Cores (Kerg et al. 2020, Sec. 4 and App. B; see ``shared/papers/README.md``):

* :class:`LSTMCore` -- the baseline, state ``(h, c)``.
* :class:`AttentiveLSTMCore` -- an LSTM that, at every step, attends from the previous attended state
  s_{t-1} over stored hidden states with additive attention e_i = v' tanh(W s_{t-1} + U h_i) and feeds
  s_t = (h_{t-1} + sum_i alpha_i h_i) / 2 to the LSTM in place of h_{t-1}. The memory is a short-term
  buffer of the last ``nu`` states plus a relevant set of at most ``rho`` older ones (relevancy
  screening); the per-step update is :func:`recurbench.kernels.memattn.memory_attention_step`.

  - **MemLSTM** = ``nu = M`` (the window), ``rho = 0``: attention over every state since the
    episode started (a sliding window beyond M).
  - **RelLSTM** = ``nu = 5``, ``rho = 5`` (the paper's values).

* :class:`EpisodeMemLSTMCore` -- the agents' MemLSTM: the same recurrence as ``nu = M, rho = 0``, with
  a memory that grows with the episode (slots allocated as the longest running episode needs them,
  up to M) so that a window sized for the longest test episode does not make every step pay for it.

* :class:`RNNCore` -- the vanilla RNN ``h_t = phi(U x_t + b + V h_{t-1})`` (:class:`RNNCell`): **orth-RNN**
  (``rnn``, an orthogonal start) and **expRNN** (``exprnn``, ``V`` kept orthogonal by the matrix
  exponential of a skew-symmetric matrix).
* :class:`AttentiveRNNCore` -- the same attention as :class:`AttentiveLSTMCore` (one implementation,
  :class:`AttentiveCore`) over an RNN cell fed ``s_t``: **MemRNN** and **RelRNN**, the paper's main model.
* :class:`SABCore` -- Sparse Attentive Backtracking (Ke et al. 2018): an LSTM with truncated
  backpropagation and sparse top-k attention over every k-th state (not an agent core).

State of the attentive cores: ``(h, c, s, steps, keys, values, scores, valid)`` with keys
``[B, S, A]`` (U h_i, cached so a step costs O(S A)), values ``[B, S, H]``; ``S = nu + rho`` slots,
for :class:`EpisodeMemLSTMCore` at most M and changing from step to step.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils import parametrize
from torch.nn.utils.parametrizations import orthogonal as orthogonal_

from recurbench.agents.recurrent_init import (
    ModReLU,
    check_nonlinearity,
    check_scheme,
    init_lstm_gates,
    initialise,
    make_nonlinearity,
    skew_start,
)
from recurbench.errors import ConfigError
from recurbench.kernels.memattn import AppendOnlyMemory, memory_attention_step
from recurbench.kernels.memattn.sequence import (
    attentive_sequence,
    recurrent_sequence,
    sparse_attentive_sequence,
)
from recurbench.plugins import KIND_BASES, PluginRegistry, call_with_settings, first_doc_line

State = tuple[Tensor, ...]


class MemoryCore(nn.Module, ABC):
    """A recurrent core: ``step(x, state, episode_starts) -> (output, state)``.

    The contract of every memory core, built-in or plugin (entry-point group ``recurbench.cores``;
    :func:`recurbench.testing.check_core` checks it):

    * **Receives** ``__init__(input_size, hidden_size, **settings)``: the width of the features it reads
      and of the output it returns. ``settings`` are the suite's core settings (``attention_size``,
      ``nu``, ``rho``, ``memory_window``, from the suite file or ``--set``); a plugin is handed only
      those its ``__init__`` names. The suites log them (minigrid: ``core_settings.*``; memory:
      ``network.*``) with the core's name (tag ``agent`` / ``model``). Its other keyword parameters
      (``def __init__(self, input_size, hidden_size, *, layers: int = 1)``) are its own settings, set by
      the profile's ``plugin_settings`` (``--set plugin_settings.NAME.layers=2``; one of the suite's core
      settings given there applies to this core only), checked against the signature when the profile
      loads and logged, defaults included, as ``plugin_settings.*`` params.
    * **State**: a tuple of tensors, each with the batch as its first dimension. :meth:`initial_state`
      is the state at an episode start and is all zeros: the rollout buffer pads stored states with
      zeros, so zeros must read as "empty". A state's other dimensions may change from step to step.
    * **Returns** from :meth:`step` ``(output [B, hidden_size], state)``; :meth:`forward_sequence`
      ``x [T, B, input_size]`` -> ``(outputs [T, B, hidden_size], state)``.
    * **Episode starts**: ``episode_starts`` [B] is 1.0 where an episode starts at this step; those rows
      must behave exactly as from :meth:`initial_state` (:meth:`reset`, which :meth:`step` calls).
      Acting, training (:meth:`forward_sequence`) and prediction all go through :meth:`step`, so a
      reset is identical in all three. Rows never mix.
    * A subclass implements :meth:`initial_state` and :meth:`cell`; :meth:`reset`, :meth:`step` and
      :meth:`forward_sequence` are shared (override :meth:`reset` only if zeros are not its empty
      state). A core whose recurrent matrices are kept orthogonal lists them in
      ``orthogonal_parameters()``.
    """

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size

    @abstractmethod
    def initial_state(self, batch: int, device: torch.device | str = "cpu") -> State:
        """The state at the start of an episode (all zeros: ``reset`` multiplies by the keep mask)."""

    @abstractmethod
    def cell(self, x: Tensor, state: State) -> tuple[Tensor, State]:
        """One step of the recurrence, without any reset."""

    def reset(self, state: State, episode_starts: Tensor) -> State:
        """Clear the state of rows whose episode starts now (``episode_starts`` is 1.0 there)."""
        if not bool(episode_starts.any()):
            return state
        keep = 1.0 - episode_starts.to(state[0].dtype)
        return tuple(t * keep.view(-1, *([1] * (t.dim() - 1))) for t in state)

    def step(self, x: Tensor, state: State, episode_starts: Tensor) -> tuple[Tensor, State]:
        """Reset on episode start, then advance: the one path for acting, training and evaluation."""
        return self.cell(x, self.reset(state, episode_starts))

    def orthogonal_parameters(self) -> list[nn.Parameter]:
        """Parameters that train at their own learning rate (expRNN's orthogonal ones); none by default."""
        return []

    compilable: bool = True
    """Whether :meth:`cell` keeps its state's shapes from step to step, so that ``torch.compile``
    compiles it once (SAB's memory grows: compiling it would recompile at every stored state)."""

    def prepare_replay(self, state: State) -> State:
        """Recompute the parts of a stored state derived from parameters (before a training replay)."""
        return state

    def forward_sequence(self, x: Tensor, state: State, episode_starts: Tensor) -> tuple[Tensor, State]:
        """Replay ``x`` [T, B, F] from a stored ``state`` with ``episode_starts`` [T, B] -> [T, B, H]."""
        state = self.prepare_replay(state)
        outputs = []
        for t in range(x.shape[0]):
            out, state = self.step(x[t], state, episode_starts[t])
            outputs.append(out)
        return torch.stack(outputs), state


KIND_BASES["memory core"] = MemoryCore  # a plugin class of another group that derives from it is refused


class LSTMCore(MemoryCore):
    """The LSTM baseline (state ``(h, c)``); ``gate_init``: how its gates start, ``pytorch``
    (``nn.LSTMCell``'s) or ``xavier`` (the reference code's, :func:`~recurbench.agents.recurrent_init.init_lstm_gates`)."""

    def __init__(self, input_size: int, hidden_size: int, *, gate_init: str = "pytorch") -> None:
        super().__init__(input_size, hidden_size)
        self.lstm = nn.LSTMCell(input_size, hidden_size)
        init_lstm_gates(self.lstm, gate_init)

    def initial_state(self, batch: int, device: torch.device | str = "cpu") -> State:
        zeros = torch.zeros(batch, self.hidden_size, device=device)
        return zeros, zeros.clone()

    def cell(self, x: Tensor, state: State) -> tuple[Tensor, State]:
        h, c = self.lstm(x, (state[0], state[1]))
        return h, (h, c)


class RNNCell(nn.Module):
    """``h = phi(U x + b + V s)``: the vanilla RNN step of Kerg et al.'s code (the fact sheet, section 7).

    ``U`` (``input``, with bias ``b``) starts by ``input_init`` (the reference: Xavier-normal), ``V``
    (``recurrent``, no bias) by ``recurrent_init`` (the reference: ``henaff``, orthogonal);
    ``orthogonal=True`` keeps ``V`` orthogonal through training as expRNN does: ``V = expm(A)``,
    ``A = B - B'`` skew-symmetric, through PyTorch's ``parametrizations.orthogonal`` (the matrix
    exponential, no trivialisation base), its parameter ``B`` started at the scheme's ``A``.
    """

    def __init__(self, input_size: int, hidden_size: int, *, nonlinearity: str = "modrelu",
                 recurrent_init: str = "henaff", input_init: str = "xavier", orthogonal: bool = False) -> None:
        super().__init__()
        check_nonlinearity("nonlinearity", nonlinearity)
        check_scheme("recurrent_init", recurrent_init, hidden_size, hidden_size, orthogonal=orthogonal)
        check_scheme("input_init", input_init, hidden_size, input_size)
        self.nonlinearity = nonlinearity
        self.input = nn.Linear(input_size, hidden_size)
        self.recurrent = nn.Linear(hidden_size, hidden_size, bias=False)
        self.phi = make_nonlinearity(nonlinearity, hidden_size)
        initialise(self.input.weight, input_init)
        if orthogonal:
            start = skew_start(recurrent_init, hidden_size).to(self.recurrent.weight.dtype)
            orthogonal_(self.recurrent, "weight", orthogonal_map="matrix_exp", use_trivialization=False)
            with torch.no_grad():  # forward: A = tril(B) - tril(B)'; a skew A is its own lower half's image
                self.recurrent.parametrizations.weight.original.copy_(start.tril(-1))
        else:
            initialise(self.recurrent.weight, recurrent_init)

    @property
    def orthogonal(self) -> bool:
        return parametrize.is_parametrized(self.recurrent, "weight")

    def orthogonal_parameters(self) -> list[nn.Parameter]:
        return [self.recurrent.parametrizations.weight.original] if self.orthogonal else []

    def forward(self, x: Tensor, s: Tensor) -> Tensor:
        return self.phi(self.input(x) + self.recurrent(s))

    def sequence_parts(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
        """For the whole-sequence functions: ``U x_t + b`` for every step, ``V``, and modReLU's bias (None
        for another non-linearity)."""
        bias = self.phi.bias if isinstance(self.phi, ModReLU) else None
        return self.input(x), self.recurrent.weight, bias


class RNNCore(MemoryCore):
    """A vanilla RNN, ``h_t = phi(U x_t + b + V h_{t-1})``, state ``(h,)``.

    With an orthogonal ``recurrent_init`` and nothing after, this is the paper's **orth-RNN**
    (``rnn``); with ``orthogonal=True`` ``V`` stays orthogonal through training: **expRNN**
    (``exprnn``, Lezcano-Casado & Martinez-Rubio 2019), whose :meth:`orthogonal_parameters` train at
    their own learning rate. Settings as :class:`RNNCell`.

    Stepping calls ``V`` once a step; for expRNN each access recomputes ``expm(A)``, so a sequence
    runs under ``torch.nn.utils.parametrize.cached()`` (:meth:`forward_sequence`, the memory tasks).
    """

    def __init__(self, input_size: int, hidden_size: int, *, nonlinearity: str = "modrelu",
                 recurrent_init: str = "henaff", input_init: str = "xavier", orthogonal: bool = False) -> None:
        super().__init__(input_size, hidden_size)
        self.rnn = RNNCell(input_size, hidden_size, nonlinearity=nonlinearity, recurrent_init=recurrent_init,
                           input_init=input_init, orthogonal=orthogonal)

    def initial_state(self, batch: int, device: torch.device | str = "cpu") -> State:
        return (torch.zeros(batch, self.hidden_size, device=device),)

    def cell(self, x: Tensor, state: State) -> tuple[Tensor, State]:
        h = self.rnn(x, state[0])
        return h, (h,)

    def orthogonal_parameters(self) -> list[nn.Parameter]:
        return self.rnn.orthogonal_parameters()

    def forward_sequence(self, x: Tensor, state: State, episode_starts: Tensor) -> tuple[Tensor, State]:
        with parametrize.cached():
            return super().forward_sequence(x, state, episode_starts)

    def sequence_outputs(self, x: Tensor) -> Tensor:
        """One episode from an empty state, ``x`` [T, B, F] -> ``h_t`` [T, B, H], as one autograd node
        with a hand-written backward (:func:`~recurbench.kernels.memattn.sequence.recurrent_sequence`);
        ``expm(A)`` once for the whole sequence."""
        return recurrent_sequence(*self.rnn.sequence_parts(x), cell=self.rnn.nonlinearity)


class AttentiveCore(MemoryCore):
    """A recurrent cell fed the attended state: additive attention over a short-term buffer (``nu``)
    and a relevant set (``rho``), one implementation for every cell family.

    A step reads ``query = W s_{t-1}`` against the stored states, gets ``read = sum_i alpha_i h_i``
    (:func:`~recurbench.kernels.memattn.memory_attention_step`), forms ``s_t = (h_{t-1} + read) / 2``
    and advances the cell from ``s_t`` in place of ``h_{t-1}`` (:meth:`_recur`). Subclasses give the
    cell: :class:`AttentiveLSTMCore` (MemLSTM, RelLSTM) and :class:`AttentiveRNNCore` (MemRNN, RelRNN).
    The state always has the layout ``(h, c, s, steps, keys, values, scores, valid)``; an RNN's cell
    state ``c`` has width 0.
    """

    def _init_attention(self, nu: int, rho: int, attention_size: int) -> None:
        """Create the attention's parameters (after the cell's: the order in which a seed initialises them)."""
        if nu < 1 or rho < 0:
            raise ValueError(f"need nu >= 1 and rho >= 0, got nu={nu}, rho={rho}")
        self.nu, self.rho, self.attention_size = nu, rho, attention_size
        self.query = nn.Linear(self.hidden_size, attention_size)  # W (with bias)
        self.key = nn.Linear(self.hidden_size, attention_size, bias=False)  # U: U 0 = 0 for empty slots
        self.v = nn.Parameter(torch.empty(attention_size).uniform_(-attention_size**-0.5, attention_size**-0.5))

    cell_state_size: int = 0
    """Width of the cell state ``c`` (an LSTM's ``H``; 0 for an RNN)."""

    @abstractmethod
    def _recur(self, x: Tensor, s: Tensor, c: Tensor) -> tuple[Tensor, Tensor]:
        """The cell: ``(h_t, c_t)`` from the input, the attended state ``s_t`` and ``c_{t-1}``."""

    @property
    def slots(self) -> int:
        return self.nu + self.rho

    def initial_state(self, batch: int, device: torch.device | str = "cpu") -> State:
        return self._empty_state(batch, self.slots, device)

    def _empty_state(self, batch: int, slots: int, device: torch.device | str) -> State:
        H, A, S = self.hidden_size, self.attention_size, slots

        def z(*shape: int) -> Tensor:
            return torch.zeros(*shape, device=device)

        return (z(batch, H), z(batch, self.cell_state_size), z(batch, H), z(batch), z(batch, S, A), z(batch, S, H),
                z(batch, S), z(batch, S))

    def cell(self, x: Tensor, state: State) -> tuple[Tensor, State]:
        return self._attend_and_step(x, state, self.nu)

    def _attend_and_step(self, x: Tensor, state: State, nu: int) -> tuple[Tensor, State]:
        h, c, s, steps, keys, values, scores, valid = state
        mem = memory_attention_step(self.query(s), keys, values, scores, valid, steps, self.key(h), h, self.v, nu=nu)
        h, c, s = self._advance(x, h, c, mem.read)
        return h, (h, c, s, steps + 1, mem.keys, mem.values, mem.scores, mem.valid)

    def _advance(self, x: Tensor, h: Tensor, c: Tensor, read: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The cell fed the attended state: ``(h_t, c_t, s_t)`` from ``h_{t-1}``, ``c_{t-1}`` and the read."""
        s = 0.5 * (h + read)  # s_t = (h_{t-1} + sum_i alpha_i h_i) / 2
        h, c = self._recur(x, s, c)
        return h, c, s

    def keeps_whole_episode(self, steps: int) -> bool:
        """Whether an episode of ``steps`` steps never leaves the memory (no relevant set, a window
        of at least ``steps``): MemLSTM / MemRNN over a sequence it sees whole, as in the memory tasks."""
        return self.rho == 0 and self.nu >= steps

    def episode_outputs(self, x: Tensor) -> list[Tensor]:
        """One episode from an empty state: ``x`` [T, B, F] -> the outputs ``h_t`` [B, H] of its T steps
        (each the tensor the next step consumed), for a memory that keeps every state of it
        (:meth:`keeps_whole_episode`).

        The same recurrence as :meth:`step` with ``episode_starts`` 1 at t = 0 and 0 after, over an
        :class:`~recurbench.kernels.memattn.history.AppendOnlyMemory` instead of the slot state: step t
        appends ``(U h_{t-1}, h_{t-1})`` and attends over ``h_0 .. h_{t-1}`` in ``O(t)``, with none of
        the reference step's per-step copies of the whole memory. The step's other outputs (scores,
        valid) are not produced: relevancy scores only matter to a relevant set, which this memory lacks.
        """
        T, B, _ = x.shape
        if not self.keeps_whole_episode(T):
            raise ValueError(f"episode_outputs: a {T}-step episode leaves this memory (nu={self.nu}, rho={self.rho}); "
                             "step it with step() instead")
        h = x.new_zeros(B, self.hidden_size)
        c, s = x.new_zeros(B, self.cell_state_size), torch.zeros_like(h)
        memory = AppendOnlyMemory(B, T, self.attention_size, self.hidden_size, dtype=x.dtype, device=x.device)
        outputs = []
        for t in range(T):
            if t > 0:  # h_{t-1} enters the memory (at t = 0 nothing is pending: the read is 0)
                memory.append(self.key(h), h)
            h, c, s = self._advance(x[t], h, c, memory.attend(self.query(s), self.v))
            outputs.append(h)
        return outputs

    def sequence_outputs(self, x: Tensor, loop: str = "auto") -> Tensor:
        """One episode from an empty state, ``x`` [T, B, F] -> ``h_t`` [T, B, H], as a single autograd
        node with a hand-written backward (:func:`~recurbench.kernels.memattn.sequence.attentive_sequence`,
        whose ``loop`` picks the C++ or the Python step loop): the same outputs and gradients as
        stepping, at a fraction of the cost per step."""
        xw, w_rec, bias, cell = self._sequence_cell(x)
        return attentive_sequence(xw, w_rec, self.query.weight, self.query.bias, self.key.weight, self.v, bias,
                                  cell=cell, nu=self.nu, rho=self.rho, loop=loop)

    @abstractmethod
    def _sequence_cell(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor | None, str]:
        """For :meth:`sequence_outputs`: the input projections with biases [T, B, G], the matrix applied
        to ``s_t`` [G, H], modReLU's bias (or None) and the cell's name."""

    def prepare_replay(self, state: State) -> State:
        # Cached keys were computed with the acting-time U: recompute them with the current U so the
        # replay is differentiable in U for the stored slots too (identical before any update).
        h, c, s, steps, _, values, scores, valid = state
        return h, c, s, steps, self.key(values), values, scores, valid


class AttentiveLSTMCore(AttentiveCore):
    """LSTM + additive attention over a short-term buffer (``nu``) and a relevant set (``rho``):
    MemLSTM and RelLSTM. The LSTM's gates read ``[s_t, x_t]`` in place of ``[h_{t-1}, x_t]`` and start
    by ``gate_init`` (as :class:`LSTMCore`'s)."""

    def __init__(self, input_size: int, hidden_size: int, *, nu: int, rho: int, attention_size: int = 64,
                 gate_init: str = "pytorch") -> None:
        super().__init__(input_size, hidden_size)
        self.lstm = nn.LSTMCell(input_size, hidden_size)
        init_lstm_gates(self.lstm, gate_init)
        self.cell_state_size = hidden_size
        self._init_attention(nu, rho, attention_size)

    def _recur(self, x: Tensor, s: Tensor, c: Tensor) -> tuple[Tensor, Tensor]:
        return self.lstm(x, (s, c))

    def _sequence_cell(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor | None, str]:
        lstm = self.lstm
        return F.linear(x, lstm.weight_ih, lstm.bias_ih + lstm.bias_hh), lstm.weight_hh, None, "lstm"


class AttentiveRNNCore(AttentiveCore):
    """An RNN + the same attention: MemRNN and RelRNN (Kerg et al.), ``h_t = phi(U x_t + b + V s_t)``
    (the fact sheet, section 3; the RNN and its settings as :class:`RNNCore`)."""

    def __init__(self, input_size: int, hidden_size: int, *, nu: int, rho: int, attention_size: int = 64,
                 nonlinearity: str = "tanh", recurrent_init: str = "henaff", input_init: str = "xavier") -> None:
        super().__init__(input_size, hidden_size)
        self.rnn = RNNCell(input_size, hidden_size, nonlinearity=nonlinearity, recurrent_init=recurrent_init,
                           input_init=input_init)
        self._init_attention(nu, rho, attention_size)

    def _recur(self, x: Tensor, s: Tensor, c: Tensor) -> tuple[Tensor, Tensor]:
        return self.rnn(x, s), c

    def _sequence_cell(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor | None, str]:
        return *self.rnn.sequence_parts(x), self.rnn.nonlinearity


class EpisodeMemLSTMCore(AttentiveLSTMCore):
    """MemLSTM whose memory holds every state since the episode started, up to ``max_window`` states.

    The recurrence is exactly :class:`AttentiveLSTMCore` with ``nu = max_window`` and ``rho = 0`` (a
    sliding window of the last ``max_window`` states once an episode runs longer); what differs is
    the memory's size. A step gets the smallest power of two of slots (at least :attr:`MIN_SLOTS`,
    at most ``max_window``) that holds the longest running episode of the batch: the state's slot
    count ``S`` changes from step to step, and a step costs O(S (A + H)) instead of
    O(max_window (A + H)). Slots beyond an episode's length are empty (``valid`` 0), so dropping or
    adding them changes no output: an episode of ``n`` steps fills slots ``0 .. n - 2`` before its
    step ``n`` inserts ``h_{n-1}`` at slot ``n - 1``, which stays below ``S`` until the window wraps.

    Sized for the longest test episode (2560 steps on DoorKey-16x16), a state holds at most
    ``max_window x (A + H + 2)`` floats per environment (2560 x 98 x 4 B = 1 MB at A = 32, H = 64),
    reached only while an episode is that long.

    Parameters
    ----------
    input_size, hidden_size : int
        Widths of the LSTM's input and state ``H``.
    max_window : int
        ``M``, the most past states attended over: the longest episode the agent meets, to see it whole.
    attention_size : int
        Width ``A`` of the additive attention.
    """

    MIN_SLOTS = 16

    def __init__(self, input_size: int, hidden_size: int, *, max_window: int, attention_size: int = 64,
                 gate_init: str = "pytorch") -> None:
        super().__init__(input_size, hidden_size, nu=max_window, rho=0, attention_size=attention_size,
                         gate_init=gate_init)

    @property
    def max_window(self) -> int:
        return self.nu

    def slots_for(self, steps: Tensor) -> int:
        """The slot count a step from states with ``steps`` needs: room for ``h_{n-1}`` at slot
        ``n - 1`` of the longest episode ``n`` (a power of two, so the count rarely changes)."""
        longest = max(int(steps.max()) if steps.numel() else 0, self.MIN_SLOTS)
        return min(self.nu, 1 << (longest - 1).bit_length())

    def initial_state(self, batch: int, device: torch.device | str = "cpu") -> State:
        return self._empty_state(batch, min(self.nu, self.MIN_SLOTS), device)

    def cell(self, x: Tensor, state: State) -> tuple[Tensor, State]:
        slots = self.slots_for(state[3])
        # Below the cap no episode has wrapped (every steps <= slots), so the ring position
        # (steps - 1) mod slots is steps - 1, as it is modulo max_window.
        return self._attend_and_step(x, resize_slots(state, slots), slots)


class SABCore(MemoryCore):
    """Sparse Attentive Backtracking (Ke et al. 2018): an LSTM with truncated backpropagation, a memory
    of every ``memory_stride``-th state and sparse top-k attention over it (the fact sheet, section 7).

    A step, from ``(h_{t-1}, c_{t-1})``:

    1. truncation: when ``steps`` is a positive multiple of ``truncate``, ``h_{t-1}`` and ``c_{t-1}``
       are detached, so no gradient flows back along the recurrence past this step;
    2. ``(h, c_t) = LSTM(x_t, (h_{t-1}, c_{t-1}))``;
    3. scores of the ``n`` stored states ``m_i``: ``e_i = v' tanh(W h + U m_i)`` (Ke et al.'s MLP on
       ``[h; m_i]`` with one tanh layer, written as additive attention);
    4. sparse weights: with ``n > topk``, the ``topk`` highest-scoring states are selected and
       ``w = softmax(e)`` over them, 0 elsewhere: the selected states are the only ones with a nonzero
       weight *and* a gradient (the "backtracking"). With ``n <= topk`` every state is selected. No
       state stored: no read. (Ke et al.'s release subtracts the ``(k+1)``-th largest score, clamps at
       0 and renormalises; over a stretch of blanks the stored states are alike, their top scores tie,
       and that gives 0 / 0: the copy task at T = 500 turned every loss into NaN within 20 updates.);
    5. ``h_t = h + sum_i w_i m_i`` is the output and the recurrent state; it is stored when ``steps + 1``
       is a multiple of ``memory_stride``.

    The memory is never detached, so the gradient reaches past the truncation only through the states
    it attends to. State ``(h, c, steps, keys, values)`` with keys ``U m_i`` [B, n, A] and values ``m_i``
    [B, n, H]; ``n`` grows by one every ``memory_stride`` steps. All rows of a batch step in lockstep
    (``n`` is shared), which a sequence task's batch does and the agents' environments do not: SAB is
    not an agent core (:data:`CORES`).
    """

    compilable = False

    def __init__(self, input_size: int, hidden_size: int, *, topk: int = 10, truncate: int = 10,
                 memory_stride: int = 2, attention_size: int = 64, gate_init: str = "pytorch") -> None:
        super().__init__(input_size, hidden_size)
        for key, value in (("topk", topk), ("truncate", truncate), ("memory_stride", memory_stride)):
            if value < 1:
                raise ConfigError(f"{key}: must be at least 1, got {value}")
        self.topk, self.truncate, self.memory_stride, self.attention_size = topk, truncate, memory_stride, attention_size
        self.lstm = nn.LSTMCell(input_size, hidden_size)
        init_lstm_gates(self.lstm, gate_init)
        self.query = nn.Linear(hidden_size, attention_size)
        self.key = nn.Linear(hidden_size, attention_size, bias=False)
        self.v = nn.Parameter(torch.empty(attention_size).uniform_(-attention_size**-0.5, attention_size**-0.5))

    def initial_state(self, batch: int, device: torch.device | str = "cpu") -> State:
        H, A = self.hidden_size, self.attention_size
        return (torch.zeros(batch, H, device=device), torch.zeros(batch, H, device=device),
                torch.zeros(batch, device=device), torch.zeros(batch, 0, A, device=device),
                torch.zeros(batch, 0, H, device=device))

    def reset(self, state: State, episode_starts: Tensor) -> State:
        state = super().reset(state, episode_starts)
        if bool(episode_starts.all()):  # every row starts over: the memory is emptied, not only zeroed
            h, c, steps, keys, values = state
            state = (h, c, steps, keys[:, :0], values[:, :0])
        return state

    def sequence_outputs(self, x: Tensor, loop: str = "auto") -> Tensor:
        """One episode from an empty state, ``x`` [T, B, F] -> ``h_t`` [T, B, H]: on a CPU as one autograd
        node with a hand-written backward in C++
        (:func:`~recurbench.kernels.memattn.sequence.sparse_attentive_sequence`), else (or with
        ``loop="python"``) by stepping :meth:`cell`, the reference."""
        lstm = self.lstm
        xw = F.linear(x, lstm.weight_ih, lstm.bias_ih + lstm.bias_hh)
        out = sparse_attentive_sequence(xw, lstm.weight_hh, self.query.weight, self.query.bias, self.key.weight,
                                        self.v, topk=self.topk, truncate=self.truncate, stride=self.memory_stride,
                                        loop=loop)
        if out is not None:
            return out
        state = tuple(t.to(x.dtype) for t in self.initial_state(x.shape[1], x.device))
        return self.forward_sequence(x, state, x.new_zeros(x.shape[:2]))[0]

    def sparse_weights(self, e: Tensor) -> Tensor:
        """Step 4: the top-k weights of scores ``e`` [B, n]."""
        if e.shape[1] <= self.topk:
            return torch.softmax(e, dim=1)
        selected = torch.topk(e.detach(), self.topk, dim=1).indices
        others = torch.full_like(e, float("-inf")).scatter_(1, selected, 0.0)
        return torch.softmax(e + others, dim=1)

    def cell(self, x: Tensor, state: State) -> tuple[Tensor, State]:
        h, c, steps, keys, values = state
        if steps.numel() and float(steps[0]) > 0 and float(steps[0]) % self.truncate == 0:
            h, c = h.detach(), c.detach()
        h, c = self.lstm(x, (h, c))
        if values.shape[1] > 0:
            e = torch.tanh(self.query(h)[:, None, :] + keys) @ self.v  # [B, n]
            h = h + torch.bmm(self.sparse_weights(e)[:, None, :], values)[:, 0]
        steps = steps + 1
        if steps.numel() and float(steps[0]) % self.memory_stride == 0:
            keys = torch.cat([keys, self.key(h)[:, None]], dim=1)
            values = torch.cat([values, h[:, None]], dim=1)
        return h, (h, c, steps, keys, values)


def resize_slots(state: State, slots: int) -> State:
    """An attentive core's ``state`` with ``slots`` memory slots: empty slots appended, or the last
    ones dropped (the caller knows they are empty). Contiguous, as the Triton step updates in place."""
    head, memory = state[:4], state[4:]
    have = memory[0].shape[1]
    if have == slots:
        return state
    if have > slots:
        memory = tuple(t[:, :slots].contiguous() for t in memory)
    else:
        memory = tuple(torch.cat([t, t.new_zeros(t.shape[0], slots - have, *t.shape[2:])], dim=1) for t in memory)
    return (*head, *memory)


def _lstm(input_size: int, hidden_size: int, *, gate_init: str = "pytorch", **_: object) -> MemoryCore:
    return LSTMCore(input_size, hidden_size, gate_init=gate_init)


def _memlstm(input_size: int, hidden_size: int, *, attention_size: int = 64, memory_window: int = 256,
             gate_init: str = "pytorch", **_: object) -> MemoryCore:
    return AttentiveLSTMCore(input_size, hidden_size, nu=memory_window, rho=0, attention_size=attention_size,
                             gate_init=gate_init)


def _episode_memlstm(input_size: int, hidden_size: int, *, attention_size: int = 64, memory_window: int = 256,
                     gate_init: str = "pytorch", **_: object) -> MemoryCore:
    return EpisodeMemLSTMCore(input_size, hidden_size, max_window=memory_window, attention_size=attention_size,
                              gate_init=gate_init)


def _rellstm(input_size: int, hidden_size: int, *, attention_size: int = 64, nu: int = 5, rho: int = 5,
             gate_init: str = "pytorch", **_: object) -> MemoryCore:
    return AttentiveLSTMCore(input_size, hidden_size, nu=nu, rho=rho, attention_size=attention_size,
                             gate_init=gate_init)


def _rnn(input_size: int, hidden_size: int, *, nonlinearity: str = "modrelu", recurrent_init: str = "henaff",
         input_init: str = "xavier", **_: object) -> MemoryCore:
    return RNNCore(input_size, hidden_size, nonlinearity=nonlinearity, recurrent_init=recurrent_init,
                   input_init=input_init)


def _exprnn(input_size: int, hidden_size: int, *, nonlinearity: str = "modrelu", recurrent_init: str = "henaff",
            input_init: str = "xavier", **_: object) -> MemoryCore:
    return RNNCore(input_size, hidden_size, nonlinearity=nonlinearity, recurrent_init=recurrent_init,
                   input_init=input_init, orthogonal=True)


def _rnn_settings(settings: dict[str, object]) -> dict[str, object]:
    return {k: settings[k] for k in ("nonlinearity", "recurrent_init", "input_init") if k in settings}


def _memrnn(input_size: int, hidden_size: int, *, attention_size: int = 64, memory_window: int = 256,
            **settings: object) -> MemoryCore:
    return AttentiveRNNCore(input_size, hidden_size, nu=memory_window, rho=0, attention_size=attention_size,
                            **_rnn_settings(settings))  # type: ignore[arg-type]


def _relrnn(input_size: int, hidden_size: int, *, attention_size: int = 64, nu: int = 10, rho: int = 10,
            **settings: object) -> MemoryCore:
    return AttentiveRNNCore(input_size, hidden_size, nu=nu, rho=rho, attention_size=attention_size,
                            **_rnn_settings(settings))  # type: ignore[arg-type]


def _sab(input_size: int, hidden_size: int, *, attention_size: int = 64, topk: int = 10, truncate: int = 10,
         memory_stride: int = 2, gate_init: str = "pytorch", **_: object) -> MemoryCore:
    return SABCore(input_size, hidden_size, topk=topk, truncate=truncate, memory_stride=memory_stride,
                   attention_size=attention_size, gate_init=gate_init)


@dataclass(frozen=True)
class CoreSpec:
    """A memory core as suites and the command line name it."""

    description: str
    build: Callable[..., MemoryCore]
    """``build(input_size, hidden_size, *, attention_size, nu, rho, memory_window)``: fixed state
    shapes (what ``torch.compile`` and the memory tasks' fixed-length sequences want)."""
    build_agent: Callable[..., MemoryCore] | None = None
    """The agents' variant, where it differs (MemLSTM: a memory that grows with the episode)."""
    not_for_agents: str | None = None
    """Why the core cannot be an agent's (None: it can)."""


def _plugin_core(obj: object, name: str) -> CoreSpec:
    """A plugin's entry: a ready :class:`CoreSpec`, or a :class:`MemoryCore` subclass built as
    ``cls(input_size, hidden_size, **the settings its __init__ names)``."""
    if isinstance(obj, CoreSpec):
        return obj
    if isinstance(obj, type) and issubclass(obj, MemoryCore):
        return CoreSpec(first_doc_line(obj) or name, functools.partial(call_with_settings, obj))
    raise TypeError(f"{obj!r} is neither a MemoryCore subclass nor a CoreSpec")


CORES: PluginRegistry[CoreSpec] = PluginRegistry("memory core", {
    "lstm": CoreSpec("LSTM baseline", _lstm),
    "memlstm": CoreSpec("MemLSTM: LSTM + additive attention over all past hidden states of the episode",
                        _memlstm, _episode_memlstm),
    "rellstm": CoreSpec("RelLSTM: LSTM + relevancy-screened sparse attention (short-term buffer nu, relevant "
                        "set rho)", _rellstm),
    "rnn": CoreSpec("orth-RNN: vanilla RNN (tanh / relu / modReLU) with an orthogonal start, unconstrained after",
                    _rnn),
    "exprnn": CoreSpec("expRNN: vanilla RNN whose recurrent matrix stays orthogonal (the exponential map of a "
                       "skew-symmetric matrix)", _exprnn),
    "memrnn": CoreSpec("MemRNN: RNN + additive attention over all past hidden states of the episode", _memrnn),
    "relrnn": CoreSpec("RelRNN: RNN + relevancy-screened sparse attention (short-term buffer nu, relevant set rho)",
                       _relrnn),
    "sab": CoreSpec("SAB: LSTM + truncated backpropagation + sparse top-k attention over every k-th state",
                    _sab, not_for_agents="its memory grows by one state every memory_stride steps for the whole "
                    "batch at once, which needs every row to step in lockstep; an agent's environments start "
                    "episodes at different steps"),
}, _plugin_core, constructor=lambda spec: spec.build, supplied=2)
"""Every memory core by name, built-ins and plugins (group ``recurbench.cores``) and ``module:Class``
names (the agents and the memory tasks build theirs from here)."""


def make_core(name: str, input_size: int, hidden_size: int, *, agent: bool = False, **settings: object) -> MemoryCore:
    """Build core ``name`` (a key of :data:`CORES`: built-in, plugin or ``module.path:ClassName``) with
    ``settings`` (``attention_size``, ``nu``, ``rho``, ``memory_window``; each core reads its own). ``agent``: the variant an agent runs
    (:attr:`CoreSpec.build_agent`): episodes run from a few steps to thousands, and MemLSTM's window is
    sized for the longest (``memory_window``), so its memory grows with the episode instead."""
    if name not in CORES:
        raise ConfigError(f"unknown memory core {name!r}; known: {', '.join(CORES)}")
    spec = CORES[name]
    if agent and spec.not_for_agents:
        raise ConfigError(f"memory core {name!r} cannot drive an agent: {spec.not_for_agents}")
    return ((spec.build_agent if agent else None) or spec.build)(input_size, hidden_size, **settings)
